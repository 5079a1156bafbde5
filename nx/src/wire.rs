//! The layout of a connection's receive buffer and of a packet descriptor (seed 003 §4.1).
//!
//! Process E exports one receive buffer per peer P, written by P only:
//! - `slots` packet buffers of `slot` bytes, for messages from P to E. A message's descriptor
//!   (the "header", [`HDR`] bytes) ends its packet buffer, and its data ends right before the
//!   descriptor, so that data and descriptor can travel as one transfer whose last word is the
//!   descriptor's sequence word: the receiver that sees that word sees the whole message.
//! - the credit ring: `slots` entries of (packet buffer, count), where P returns packet
//!   buffers of E's messages to P as it consumes them, in any order;
//! - the `want` word: P asks E to notify it of new messages (P has handler receives posted);
//! - the `nudge` word, written with a notification: P ran out of packet buffers towards E
//!   ([`NUDGE_DRAIN`]), or P replied to E's scout ([`NUDGE_LOOK`]).

/// Bytes of a descriptor.
pub(crate) const HDR: usize = 48;

/// A message of the one-copy protocol: the data is in the packet buffer.
pub(crate) const K_MSG: u32 = 1;
/// The scout of a zero-copy message: type, length, and the sender's transfer id.
pub(crate) const K_SCOUT: u32 = 2;
/// The receiver's answer to a scout: the buffer id to write into and how many bytes it takes.
pub(crate) const K_REPLY: u32 = 3;
/// The sender wrote the data of a zero-copy message (and carries its last 0-3 bytes).
pub(crate) const K_DONE: u32 = 4;
/// The sender of scout `id` stopped polling (its blocking send returned from the safe copy):
/// the reply must come with a notification.
pub(crate) const K_WANT: u32 = 5;
/// Receiver-assisted zero-copy, sender to receiver: "read bytes `n` to the end from my
/// receive buffer `len` (the sender's memory, exported for you) into your buffer `buf`; I
/// write the bytes before `n`". Comes before the transfer's done descriptor.
pub(crate) const K_PULL: u32 = 6;
/// Receiver to sender: the reads asked by the pull of transfer `id` are done.
pub(crate) const K_PULLED: u32 = 7;
/// The sender is finishing (leaving NX): it receives nothing more, so that messages for it
/// still unreceived are discarded, as NX discards them at exit, rather than waited for.
pub(crate) const K_BYE: u32 = 8;
/// Flag of messages of the library's own (global operations): never seen by user receives.
pub(crate) const F_INTERNAL: u32 = 0x100;

/// Flag of a reply that comes with a notification (its sender asked with [`K_WANT`]).
pub(crate) const F_NOTIFY: u32 = 0x200;
/// Flag of a reply from a blocking receive, which will read its part of a [`K_PULL`] at once.
pub(crate) const F_PULL: u32 = 0x400;
/// Flag of a done descriptor whose sender could not write the data (its send failed): the
/// receive fails rather than wait for data that will not come.
pub(crate) const F_FAILED: u32 = 0x800;
/// The flag bits of a descriptor's kind.
pub(crate) const FLAGS: u32 = F_INTERNAL | F_NOTIFY | F_PULL | F_FAILED;

/// Nudge value: "I am out of packet buffers towards you: please take my messages out".
pub(crate) const NUDGE_DRAIN: u32 = 1;
/// Nudge value: "look at your packet buffers" (a scout reply, or a message for a handler).
pub(crate) const NUDGE_LOOK: u32 = 2;

/// Where things are in a connection's receive buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Packet buffers per connection.
    pub slots: usize,
    /// Bytes per packet buffer, descriptor included.
    pub slot: usize,
}

impl Layout {
    /// The layout for messages of up to `threshold` bytes.
    pub fn new(threshold: usize, slots: usize) -> Layout {
        Layout {
            slots,
            slot: (threshold + HDR).div_ceil(64) * 64,
        }
    }
    /// Largest payload of a packet buffer.
    pub fn cap(&self) -> usize {
        self.slot - HDR
    }
    /// Offset of packet buffer `s`'s descriptor.
    pub fn hdr_off(&self, s: u32) -> usize {
        s as usize * self.slot + self.slot - HDR
    }
    /// Offset of packet buffer `s`'s sequence word (the descriptor's last word).
    pub fn seq_off(&self, s: u32) -> usize {
        self.hdr_off(s) + HDR - 4
    }
    /// Offset of the `k`-th credit's entry.
    pub fn credit_off(&self, k: u32) -> usize {
        self.slots * self.slot + (k as usize % self.slots) * 8
    }
    /// Offset of the want-notifications word.
    pub fn want_off(&self) -> usize {
        self.slots * self.slot + self.slots * 8
    }
    /// Offset of the nudge word.
    pub fn nudge_off(&self) -> usize {
        self.want_off() + 4
    }
    /// Size of the receive buffer.
    pub fn total(&self) -> usize {
        self.nudge_off() + 4
    }
}

/// A descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hdr {
    /// `K_*`, with `F_INTERNAL`.
    pub kind: u32,
    /// Message length (a scout: the whole message's).
    pub len: u64,
    /// Message type.
    pub mtype: i64,
    /// Sender's process type.
    pub ptype: i64,
    /// The last `len % 4` bytes of the data (which travel in the descriptor).
    pub tail: [u8; 4],
    /// Zero-copy transfer id (chosen by the sender).
    pub id: u32,
    /// Receive buffer id for the data (reply, done).
    pub buf: u32,
    /// Bytes the receiver takes (reply, done).
    pub n: u64,
    /// Sequence number of the message on its connection, never 0: the arrival flag.
    pub seq: u32,
}

fn put32(b: &mut [u8; HDR], w: usize, v: u32) {
    b[w * 4..w * 4 + 4].copy_from_slice(&v.to_ne_bytes());
}
fn get32(b: &[u8; HDR], w: usize) -> u32 {
    u32::from_ne_bytes(b[w * 4..w * 4 + 4].try_into().expect("a word"))
}

impl Hdr {
    /// The descriptor as it travels; the sequence word last.
    pub fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        put32(&mut b, 0, self.kind);
        put32(&mut b, 1, self.len as u32);
        put32(&mut b, 2, (self.len >> 32) as u32);
        put32(&mut b, 3, self.mtype as u32);
        put32(&mut b, 4, (self.mtype >> 32) as u32);
        put32(&mut b, 5, self.ptype as u32);
        put32(&mut b, 6, (self.ptype >> 32) as u32);
        b[28..32].copy_from_slice(&self.tail);
        put32(&mut b, 8, self.id);
        put32(&mut b, 9, self.buf);
        put32(&mut b, 10, self.n as u32);
        // The high half of `n` is not needed: a receiver takes at most its buffer, and a
        // reply carries `n` whole only up to 4 GiB; larger messages are refused at send.
        put32(&mut b, 11, self.seq);
        b
    }
    /// Reads a descriptor.
    pub fn decode(b: &[u8; HDR]) -> Hdr {
        let mut tail = [0u8; 4];
        tail.copy_from_slice(&b[28..32]);
        Hdr {
            kind: get32(b, 0),
            len: get32(b, 1) as u64 | (get32(b, 2) as u64) << 32,
            mtype: (get32(b, 3) as u64 | (get32(b, 4) as u64) << 32) as i64,
            ptype: (get32(b, 5) as u64 | (get32(b, 6) as u64) << 32) as i64,
            tail,
            id: get32(b, 8),
            buf: get32(b, 9),
            n: get32(b, 10) as u64,
            seq: get32(b, 11),
        }
    }
}

/// The sequence number after `s` (never 0, which marks an empty packet buffer).
pub(crate) fn next_seq(s: u32) -> u32 {
    match s.wrapping_add(1) {
        0 => 1,
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_end_with_the_sequence_word() {
        let h = Hdr {
            kind: K_SCOUT | F_INTERNAL,
            len: 16 << 20,
            mtype: -5,
            ptype: 7,
            tail: [1, 2, 3, 0],
            id: 9,
            buf: 0x5000_0001,
            n: 12345,
            seq: 77,
        };
        let b = h.encode();
        assert_eq!(Hdr::decode(&b), h);
        assert_eq!(u32::from_ne_bytes(b[HDR - 4..].try_into().unwrap()), 77);
        assert_eq!(next_seq(u32::MAX), 1);
        let l = Layout::new(8192, 16);
        assert!(l.cap() >= 8192);
        assert_eq!(l.seq_off(1), 2 * l.slot - 4);
        assert_eq!(l.credit_off(16), l.credit_off(0));
        assert!(l.total() > l.nudge_off());
    }
}
