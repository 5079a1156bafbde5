//! The packet header (seed 002 §2.2, Table 1) and the layout of a packet in a link's ring.
//!
//! A packet is self-describing: `<slot, offset>` addressing, the metadata index (all 1s in
//! fast mode, §2.7), the 64-bit protection key, the 32-bit delta of the packet counter
//! (§2.5) and flags. We add the payload's length, the length of the metadata that precedes
//! the data in a message's first packet, the fast-mode word and, as the last word, the
//! sequence number that tells the receiving side a ring cell is full.

/// Metadata index of a fast-mode packet (§2.7: "all 1's").
pub const FAST_INDEX: u32 = u32::MAX;

/// Flag: the message's first packet (carries the metadata).
pub const F_FIRST: u32 = 1;
/// Flag: a bootstrap packet for the manager itself (§6.3's well-known channel), not a slot.
pub const F_BOOT: u32 = 2;

/// Bytes of a header in a ring cell, the sequence word included.
pub const HEADER_LEN: usize = 48;

/// The header of one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Destination slot number.
    pub slot: u32,
    /// Metadata entry of the slot's metadata area ([`FAST_INDEX`]: fast mode).
    pub meta_index: u32,
    /// Protection key: the slot's, or in paranoid modes the metadata entry's.
    pub key: u64,
    /// Byte offset of this packet's data in the slot's message area.
    pub offset: u64,
    /// Added to the metadata entry's packet accumulator (0: a whole message, notify now).
    pub delta: u32,
    /// `F_*` flags.
    pub flags: u32,
    /// Bytes of payload (metadata + data) in this packet.
    pub len: u32,
    /// Of which metadata (first packet only, at most 60).
    pub meta_len: u32,
    /// Fast mode: the one word of metadata written into the notification entry.
    pub word: u32,
    /// Ring sequence number (written last: a cell is full when it matches).
    pub seq: u32,
}

impl Header {
    /// The 48 bytes of the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.encode_into(&mut b);
        b
    }

    /// Writes the header into `b` as six double words (a packet is built on the send path
    /// of every message: six stores, not ten and a copy).
    #[inline(always)]
    pub fn encode_into(&self, b: &mut [u8; HEADER_LEN]) {
        // Two little-endian words per double word, the first in the low half.
        let pair = |lo: u32, hi: u32| (u64::from(lo) | u64::from(hi) << 32).to_le_bytes();
        // The sequence word is in native order (it is read as a word where it lands).
        let seq = u32::from_le_bytes(self.seq.to_ne_bytes());
        b[0..8].copy_from_slice(&pair(self.slot, self.meta_index));
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&pair(self.delta, self.flags));
        b[32..40].copy_from_slice(&pair(self.len, self.meta_len));
        b[40..48].copy_from_slice(&pair(self.word, seq));
    }

    /// Parses 48 bytes (any bytes parse: the receiving side validates every field).
    pub fn decode(b: &[u8; HEADER_LEN]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Header {
            slot: u32_at(0),
            meta_index: u32_at(4),
            key: u64_at(8),
            offset: u64_at(16),
            delta: u32_at(24),
            flags: u32_at(28),
            len: u32_at(32),
            meta_len: u32_at(36),
            word: u32_at(40),
            seq: u32::from_ne_bytes(b[44..48].try_into().expect("4 bytes")),
        }
    }
}

/// Rounds up to a whole number of words.
pub fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// The layout of a link's ring: `cells` cells of `cell` bytes. In a cell the header ends the
/// cell (its sequence word is the cell's last word) and the payload, padded to words, ends
/// where the header starts, so that a short packet is one contiguous deliberate update whose
/// last word is the flag (DESIGN.md: the last word of a send becomes visible last).
#[derive(Clone, Copy, Debug)]
pub struct RingLayout {
    /// Cells in the ring.
    pub cells: usize,
    /// Bytes per cell.
    pub cell: usize,
    /// Largest payload of a packet.
    pub packet: usize,
}

impl RingLayout {
    /// A ring of `cells` cells for packets of `packet` payload bytes.
    pub fn new(cells: usize, packet: usize) -> RingLayout {
        let cell = (pad4(packet) + HEADER_LEN).next_multiple_of(64);
        RingLayout {
            cells,
            cell,
            packet,
        }
    }
    /// Bytes of the ring (whole pages).
    pub fn bytes(&self) -> usize {
        (self.cells * self.cell).next_multiple_of(vmmc::page_size())
    }
    /// Offset of cell `i`'s header.
    pub fn header_at(&self, i: usize) -> usize {
        i * self.cell + self.cell - HEADER_LEN
    }
    /// Offset of the sequence word of cell `i`.
    pub fn seq_at(&self, i: usize) -> usize {
        self.header_at(i) + HEADER_LEN - 4
    }
    /// Offset of the payload of `len` bytes in cell `i`.
    pub fn payload_at(&self, i: usize, len: usize) -> usize {
        self.header_at(i) - pad4(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            slot: 3,
            meta_index: FAST_INDEX,
            key: 0xdead_beef_0123_4567,
            offset: 1 << 40,
            delta: u32::MAX - 4,
            flags: F_FIRST,
            len: 4096,
            meta_len: 60,
            word: 77,
            seq: 9,
        };
        assert_eq!(Header::decode(&h.encode()), h);
    }

    #[test]
    fn ring_layout() {
        let r = RingLayout::new(8, 100);
        assert_eq!(r.cell % 64, 0);
        assert_eq!(r.seq_at(0) + 4, r.cell);
        assert_eq!(r.payload_at(1, 5) + 8, r.header_at(1));
        assert!(r.bytes() >= 8 * r.cell);
    }
}
