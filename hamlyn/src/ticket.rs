//! Tickets (seed 002 §3.2): a message's destination, slot number, metadata index, protection
//! key, data buffer base and bound, and flags. Tickets are location-independent: they name
//! the destination by its rank in the job, so they can travel in a message and be used to
//! reply from anywhere ([`Ticket::to_bytes`] / [`Ticket::from_bytes`]).

use crate::error::{Error, Result};

/// Bytes of a serialised ticket (it fits in a message's 60 bytes of metadata).
pub const TICKET_LEN: usize = 44;

/// Ticket flag: the metadata index is chosen per message by the sender's library (a ticket
/// for a range of entries; the stream protocol's).
pub const T_ANY_ENTRY: u32 = 1;
/// Ticket flag: fast mode (§2.7): one word of metadata in the notification entry.
pub const T_FAST: u32 = 2;

/// Permission to write a window of a receiver's slot. The receiving side enforces the slot's
/// key and bounds (in paranoid modes the entry's key and bounds, which should be the window);
/// the sending library refuses a message outside the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// Rank of the receiving process in the job.
    pub dest: u32,
    /// Slot number at the receiver.
    pub slot: u32,
    /// Metadata entry (first entry of a range with [`T_ANY_ENTRY`]).
    pub meta_index: u32,
    /// Protection key (the slot's, or the entry's in paranoid modes).
    pub key: u64,
    /// Start of the window, as an offset in the slot.
    pub base: u64,
    /// End of the window (exclusive), as an offset in the slot.
    pub bound: u64,
    /// `T_*` flags; with `T_ANY_ENTRY` the low 16 bits of `flags >> 16` count the entries.
    pub flags: u32,
}

impl Ticket {
    /// The ticket as bytes, to carry in a message.
    pub fn to_bytes(&self) -> [u8; TICKET_LEN] {
        let mut b = [0u8; TICKET_LEN];
        b[0..4].copy_from_slice(&self.dest.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..12].copy_from_slice(&self.meta_index.to_le_bytes());
        b[12..20].copy_from_slice(&self.key.to_le_bytes());
        b[20..28].copy_from_slice(&self.base.to_le_bytes());
        b[28..36].copy_from_slice(&self.bound.to_le_bytes());
        b[36..40].copy_from_slice(&self.flags.to_le_bytes());
        b[40..44].copy_from_slice(&0x484d_4c4eu32.to_le_bytes());
        b
    }

    /// Parses a ticket written by [`Ticket::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Ticket> {
        if b.len() < TICKET_LEN {
            return Err(Error::Protocol(format!("ticket of {} bytes", b.len())));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        if u32_at(40) != 0x484d_4c4e {
            return Err(Error::Protocol("not a ticket".into()));
        }
        Ok(Ticket {
            dest: u32_at(0),
            slot: u32_at(4),
            meta_index: u32_at(8),
            key: u64_at(12),
            base: u64_at(20),
            bound: u64_at(28),
            flags: u32_at(36),
        })
    }

    /// Bytes of the window.
    pub fn len(&self) -> u64 {
        self.bound.saturating_sub(self.base)
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Ticket {
            dest: 3,
            slot: 9,
            meta_index: 4,
            key: 0x1234_5678_9abc_def0,
            base: 64,
            bound: 1 << 33,
            flags: T_FAST,
        };
        assert_eq!(Ticket::from_bytes(&t.to_bytes()).unwrap(), t);
        assert!(Ticket::from_bytes(&[0u8; 44]).is_err());
        assert!(Ticket::from_bytes(&[0u8; 10]).is_err());
    }
}
