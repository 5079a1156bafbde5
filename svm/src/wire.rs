//! Where the protocol's messages land, and how they are framed.
//!
//! Every node exports a control buffer (`CTL`) with:
//! - one *inbox ring* per sender: diffs, version updates and flag sets (with their setters'
//!   write notices), a byte stream of
//!   `[kind, len, payload]` records padded to 16 bytes, published by a separate *tail* word
//!   written after the records (deliberate updates from one sender stay in order), and
//!   flow-controlled by *credit* words the receiver writes back into the sender's `CTL`;
//! - one *request slot* and one *forward slot* per requester: a node has at most one request
//!   outstanding (it waits for its page, lock or flag), so fixed slots need no flow control.
//!   A slot is written by one transfer whose first and last words carry the sequence number:
//!   a receiver that reads the last word (acquire) sees the whole slot;
//! - a *reply slot* (page replies), and two *mailboxes* of variable length (the lock or flag
//!   grant, the barrier release): the payload first, then a header slot.
//!
//! Node 0 also exports `BAR`: a mailbox per node for barrier arrivals.

/// Receive buffer ids: 0x23, ASCII "SVM", a number; clear of the ranges the other libraries
/// use (sockets 0x30.., vrpc 0x40.., nx 0x50..=0xEF.., srpc 0x58.. and 0x59..).
pub(crate) const BUF_SPACE: u32 = 0x2356_4D01;
pub(crate) const BUF_CTL: u32 = 0x2356_4D02;
pub(crate) const BUF_VERS: u32 = 0x2356_4D03;
pub(crate) const BUF_BAR: u32 = 0x2356_4D04;

/// Record kinds of the inbox rings.
pub(crate) const R_WRAP: u32 = 1;
pub(crate) const R_DIFF: u32 = 2;
pub(crate) const R_VERSION: u32 = 3;
pub(crate) const R_FLAG_SET: u32 = 4;
/// Write notices that go with the flag set that follows them.
pub(crate) const R_NOTICES: u32 = 5;

/// Slot kinds.
pub(crate) const S_LOCK: u32 = 1;
pub(crate) const S_FLAG: u32 = 2;
pub(crate) const S_PAGE: u32 = 3;

/// Words of a slot before the vector: seq, kind, id, arg, from, aux.
pub(crate) const SLOT_HEAD: usize = 6;

fn up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Offsets inside `CTL` and `BAR`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub ring: usize,
    pub slot: usize,
    pub area: usize,
    tails: usize,
    credits: usize,
    awake: usize,
    req: usize,
    fwd: usize,
    reply: usize,
    grant_hdr: usize,
    rel_hdr: usize,
    grant_data: usize,
    rel_data: usize,
    pub ctl_len: usize,
    bar_data: usize,
    pub bar_len: usize,
}

impl Layout {
    pub fn new(n: usize, page: usize, area: usize) -> Layout {
        // A ring holds at least two records of a whole-page diff (bitmap + words + header).
        let ring = up((64 << 10).max(16 * page), 16);
        let slot = up(4 * (SLOT_HEAD + n + 1), 64);
        let tails = n * ring;
        let credits = tails + 4 * n;
        let awake = up(credits + 4 * n, 64);
        let req = awake + 64;
        let fwd = req + n * slot;
        let reply = fwd + n * slot;
        let grant_hdr = reply + slot;
        let rel_hdr = grant_hdr + slot;
        // Two release headers, taken by the collective call's parity (see `release`).
        let grant_data = up(rel_hdr + 2 * slot, 4096);
        let rel_data = grant_data + area;
        let ctl_len = rel_data + area;
        let bar_data = up(n * slot, 4096);
        Layout {
            ring,
            slot,
            area,
            tails,
            credits,
            awake,
            req,
            fwd,
            reply,
            grant_hdr,
            rel_hdr,
            grant_data,
            rel_data,
            ctl_len,
            bar_data,
            bar_len: bar_data + n * area,
        }
    }
    pub fn ring(&self, from: usize) -> usize {
        from * self.ring
    }
    pub fn tail(&self, from: usize) -> usize {
        self.tails + 4 * from
    }
    pub fn credit(&self, of: usize) -> usize {
        self.credits + 4 * of
    }
    /// The word that is 1 while the node's program is inside the library (and so serves
    /// what arrives without being notified).
    pub fn awake(&self) -> usize {
        self.awake
    }
    pub fn req(&self, from: usize) -> usize {
        self.req + from * self.slot
    }
    pub fn fwd(&self, from: usize) -> usize {
        self.fwd + from * self.slot
    }
    pub fn reply(&self) -> usize {
        self.reply
    }
    pub fn grant(&self) -> (usize, usize) {
        (self.grant_hdr, self.grant_data)
    }
    /// The mailbox of collective call `epoch`'s release. Its header alternates between two
    /// slots: node 0 may post the release of call `epoch` with an error (a node is lost,
    /// header only) while a node still has the release of call `epoch - 1` to read, which
    /// must not be overwritten. A release with data comes only once every node has arrived
    /// for its call, so after each has read the previous one: the data area is shared.
    pub fn release(&self, epoch: u32) -> (usize, usize) {
        (
            self.rel_hdr + (epoch as usize % 2) * self.slot,
            self.rel_data,
        )
    }
    /// Node `from`'s arrival mailbox in `BAR`.
    pub fn arrival(&self, from: usize) -> (usize, usize) {
        (from * self.slot, self.bar_data + from * self.area)
    }
}

/// A slot's words: `[seq, kind, id, arg, from, aux, vector..., pad..., seq]`.
pub(crate) struct SlotMsg<'a> {
    pub seq: u32,
    pub kind: u32,
    pub id: u32,
    pub arg: u32,
    pub from: u32,
    pub aux: u32,
    pub vector: &'a [u32],
}

impl SlotMsg<'_> {
    pub fn encode(&self, slot: usize) -> Vec<u8> {
        let mut b = vec![0; slot];
        self.encode_into(&mut b);
        b
    }

    /// Writes the slot into `b` (a whole slot, zeroed).
    pub fn encode_into(&self, b: &mut [u8]) {
        let head = [self.seq, self.kind, self.id, self.arg, self.from, self.aux];
        for (w, to) in head.iter().chain(self.vector).zip(b.chunks_exact_mut(4)) {
            to.copy_from_slice(&w.to_ne_bytes());
        }
        let last = b.len() - 4;
        b[last..].copy_from_slice(&self.seq.to_ne_bytes());
    }
}

/// A decoded slot.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub seq: u32,
    pub kind: u32,
    pub id: u32,
    pub arg: u32,
    pub from: u32,
    pub vector: Vec<u32>,
}

impl Slot {
    /// A slot from its head's bytes and its vector (read apart: no copy of the whole slot).
    pub fn decode(head: &[u8; 4 * SLOT_HEAD], vector: Vec<u32>) -> Slot {
        let w = |i: usize| u32::from_ne_bytes(head[4 * i..4 * i + 4].try_into().expect("word"));
        Slot {
            seq: w(0),
            kind: w(1),
            id: w(2),
            arg: w(3),
            from: w(4),
            vector,
        }
    }
}

pub(crate) fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(w.len() * 4);
    for x in w {
        b.extend_from_slice(&x.to_ne_bytes());
    }
    b
}

/// A little reader over a payload of words that reports truncation instead of panicking.
pub(crate) struct Words<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Words<'a> {
    pub fn new(b: &'a [u8]) -> Words<'a> {
        Words { b, at: 0 }
    }
    pub fn next(&mut self) -> crate::Result<u32> {
        let end = self.at + 4;
        if end > self.b.len() {
            return Err(crate::Error::Protocol(format!(
                "truncated message: {} bytes",
                self.b.len()
            )));
        }
        let v = u32::from_ne_bytes(self.b[self.at..end].try_into().expect("word"));
        self.at = end;
        Ok(v)
    }
    pub fn bytes(&mut self, len: usize) -> crate::Result<&'a [u8]> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(crate::Error::Protocol(format!(
                "truncated message: {} bytes",
                self.b.len()
            )));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
}

/// Record size in a ring: header plus payload, padded to 16 bytes.
pub(crate) fn record_len(payload: usize) -> usize {
    up(8 + payload, 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_does_not_overlap() {
        for n in [1, 2, 16, 64] {
            let l = Layout::new(n, 4096, 1 << 20);
            assert!(l.tail(n - 1) + 4 <= l.credit(0));
            assert!(l.credit(n - 1) + 4 <= l.awake());
            assert!(l.awake() + 4 <= l.req(0));
            assert!(l.req(n - 1) + l.slot <= l.fwd(0));
            assert!(l.fwd(n - 1) + l.slot <= l.reply());
            assert!(l.release(0).0 + l.slot <= l.release(1).0);
            assert!(l.release(1).0 + l.slot <= l.grant().1);
            assert!(l.release(1).1 + l.area == l.ctl_len);
            assert!(l.slot >= 4 * (SLOT_HEAD + n + 1));
        }
    }

    #[test]
    fn slots_round_trip() {
        let v = [7u32, 8, 9];
        let m = SlotMsg {
            seq: 5,
            kind: S_LOCK,
            id: 3,
            arg: 4,
            from: 1,
            aux: 2,
            vector: &v,
        };
        let b = m.encode(64);
        let vector = b[4 * SLOT_HEAD..4 * (SLOT_HEAD + 3)]
            .chunks_exact(4)
            .map(|w| u32::from_ne_bytes(w.try_into().unwrap()))
            .collect();
        let s = Slot::decode(b[..4 * SLOT_HEAD].try_into().unwrap(), vector);
        assert_eq!((s.seq, s.kind, s.id, s.arg, s.from), (5, S_LOCK, 3, 4, 1));
        assert_eq!(s.vector, v);
        assert_eq!(u32::from_ne_bytes(b[60..].try_into().unwrap()), 5);
        let mut r = Words::new(&b[..6]);
        assert!(r.next().is_ok());
        assert!(r.next().is_err());
    }
}
