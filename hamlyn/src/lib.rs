//! # hamlyn: sender-based communication over VMMC (seed 002)
//!
//! Hamlyn (HP Labs, 1996) as a library over VMMC that plays the network interface's part,
//! with the seed's two layers. It is handed a [`vmmc::Endpoint`] and runs on every transport.
//!
//! **The architecture** (§2), in [`arch`]:
//! * sender-based memory management (§2.1): the sender names the final place of its data,
//!   `<slot, offset>`, in a ticket; nothing is buffered elsewhere at the receiver;
//! * slots over message areas with base, bound and a 64-bit random protection key (§2.2,
//!   [`key`]), and the self-describing packet header of Table 1 ([`wire::Header`]);
//! * the send terminus (§2.3): a work queue of [`Config::work_queue`] entries (63 as the
//!   prototype), direct I/O for short messages, gather lists over 8 send buffer areas for long
//!   ones, a completion sequence word, segmentation into [`Config::packet_size`] packets;
//! * metadata areas of 128-byte entries (§2.4, Table 2: [`MetaEntry`]);
//! * packet accumulators with delta counting (§2.5): single- and multi-packet messages in any
//!   arrival order ([`Config::permute`] tests it), group receive with initial values that sum
//!   to 2^32 and delegation by splitting ([`group_values`], [`split_value`]);
//! * notification queues (§2.6) with wrap flags, polled by cursor and flag, and an optional
//!   coalesced blocking wake-up ([`Config::wakeup`]);
//! * the modes of §2.7 ([`Mode`]: normal, paranoid, paranoid_one_shot; fast mode per packet);
//! * flow control (§2.8): no packet is lost or overruns a queue in the absence of failures;
//!   a sender without resources blocks or gets [`Error::WouldBlock`] ([`Config::block`]).
//!
//! **The library** (§3), in [`arch`] and [`protocols`]: `h_send_msg`, `h_recv`,
//! `h_recv_block` ([`Hamlyn::h_send_msg`], [`Hamlyn::h_recv`], [`Hamlyn::h_recv_block`]),
//! location-independent [`Ticket`]s, the manager ([`Hamlyn`], one per send terminus),
//! receive classes and `process_arrival`, seeds ([`protocols::Seed`]) and the three protocols:
//! simple datagram ([`protocols::DatagramReceiver`]), stream ([`protocols::StreamReceiver`]:
//! in order, records in place, tickets returned in batches, a buffer that grows as needed;
//! [`protocols::StreamSender`]: coalescing, flush, blocking or `WouldBlock` without tickets)
//! and tagged remote write ([`protocols::TaggedReceiver`], `get_tag` / `get_specific_tag`).
//!
//! Waiting (a full link or work queue, no tickets, `h_recv_block`) goes through one small
//! module, [`wait`], over the core's waiting policy. No wait outlives what it waits for: one
//! for a known peer ends with [`Error::PeerLost`] when that peer dies, one for any sender
//! when no other rank of the job is alive (after what they sent before is delivered).
//!
//! Where the protection checks happen, and what holds on a transport that maps receive memory
//! into the sender (shm), is stated in [`arch`]'s documentation.
//!
//! ```no_run
//! use hamlyn::{Config, Hamlyn, protocols::{TaggedReceiver, tagged_write}};
//! # fn main() -> hamlyn::Result<()> {
//! let ep = vmmc_run_init();
//! # fn vmmc_run_init() -> vmmc::Endpoint { unimplemented!() }
//! let mut h = Hamlyn::new(ep, Config::default())?;
//! if h.rank() == 0 {
//!     let mut rx = TaggedReceiver::new(&mut h, 4096)?;
//!     h.send_boot(1, &rx.ticket(&h)?.to_bytes())?;
//!     rx.get_specific_tag(&mut h, 7, None)?;
//!     assert_eq!(&rx.area(&h)?[..5], b"hello");
//! } else {
//!     let t = hamlyn::Ticket::from_bytes(&h.recv_boot(0)?)?;
//!     tagged_write(&mut h, &t, 0, b"hello", 7)?;
//!     h.flush()?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod arch;
pub mod error;
pub mod key;
pub mod protocols;
pub mod ticket;
pub mod wait;
pub mod wire;

pub use arch::{Config, Gather, Hamlyn, Handle, MetaEntry, Mode, NqEntry, SendOpts, SlotId, Stats};
pub use error::{Error, Result};
pub use ticket::Ticket;

/// Initial packet counter values for a group receive of `n` senders (§2.5): `n` non-zero
/// values whose sum is 2^32 (0 modulo 2^32). `n` from 1 to 2^20.
pub fn group_values(n: usize) -> Result<Vec<u32>> {
    split_value(0, n)
}

/// Delegation (§2.5): splits a sender's value `y` (0 meaning 2^32, a whole group) into `n`
/// values that sum to it modulo 2^32, none of them 0. `n` from 1 to 2^20, and at most `y`.
/// Each value must still be at least the packet count of the message sent with it.
pub fn split_value(y: u32, n: usize) -> Result<Vec<u32>> {
    if n == 0 || n > 1 << 20 {
        return Err(Error::InvalidArgument("split into 1 to 2^20 parts"));
    }
    if n == 1 {
        // 2^32 is 0 modulo 2^32: a group of one is an ordinary message.
        return Ok(vec![y]);
    }
    let whole: u64 = if y == 0 { 1 << 32 } else { y as u64 };
    if (n as u64) > whole {
        return Err(Error::InvalidArgument(
            "a value too small to split that many ways",
        ));
    }
    let part = whole / n as u64;
    let mut v: Vec<u32> = (0..n).map(|_| part as u32).collect();
    let rest = whole - part * (n as u64 - 1);
    v[n - 1] = rest as u32;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_values_sum_to_2_32() {
        for n in 1..10 {
            let v = group_values(n).unwrap();
            let s = v.iter().fold(0u32, |a, &x| a.wrapping_add(x));
            assert_eq!(s, 0, "{v:?}");
            assert!(n == 1 || v.iter().all(|&x| x != 0));
        }
        let v = group_values(3).unwrap();
        let d = split_value(v[1], 2).unwrap();
        assert_eq!(d[0].wrapping_add(d[1]), v[1]);
        let total = v[0]
            .wrapping_add(v[2])
            .wrapping_add(d[0])
            .wrapping_add(d[1]);
        assert_eq!(total, 0);
        assert_eq!(split_value(3, 3).unwrap(), vec![1, 1, 1]);
        assert!(split_value(2, 3).is_err());
        assert!(split_value(7, 0).is_err());
        assert!(group_values((1 << 20) + 1).is_err());
        assert_eq!(group_values(1 << 20).unwrap().len(), 1 << 20);
    }
}
