//! Process-wide counters: they prove that data went through the VMMC rings.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub(crate) struct Counters {
    pub connections: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub sends_one_copy: AtomicU64,
    pub sends_two_copy: AtomicU64,
    pub sends_au: AtomicU64,
    pub align_fallbacks: AtomicU64,
    pub wakeups_sent: AtomicU64,
    pub sleeps: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    connections: AtomicU64::new(0),
    bytes_sent: AtomicU64::new(0),
    bytes_received: AtomicU64::new(0),
    sends_one_copy: AtomicU64::new(0),
    sends_two_copy: AtomicU64::new(0),
    sends_au: AtomicU64::new(0),
    align_fallbacks: AtomicU64::new(0),
    wakeups_sent: AtomicU64::new(0),
    sleeps: AtomicU64::new(0),
};

/// A snapshot of this process's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections established (either side).
    pub connections: u64,
    /// Bytes written into peers' rings.
    pub bytes_sent: u64,
    /// Bytes read out of this process's rings.
    pub bytes_received: u64,
    /// Ring writes made straight from the user's buffer (one-copy DU).
    pub sends_one_copy: u64,
    /// Ring writes made from a staging copy (two-copy DU, and one-copy's fallback).
    pub sends_two_copy: u64,
    /// Ring writes made through the automatic-update image.
    pub sends_au: u64,
    /// One-copy sends that fell back to two copies because of alignment.
    pub align_fallbacks: u64,
    /// Wake-up tokens sent on setup sockets to a sleeping peer.
    pub wakeups_sent: u64,
    /// Times a reader or writer went to sleep after spinning.
    pub sleeps: u64,
}

/// Reads this process's counters.
pub fn stats() -> Stats {
    let c = &COUNTERS;
    Stats {
        connections: c.connections.load(Relaxed),
        bytes_sent: c.bytes_sent.load(Relaxed),
        bytes_received: c.bytes_received.load(Relaxed),
        sends_one_copy: c.sends_one_copy.load(Relaxed),
        sends_two_copy: c.sends_two_copy.load(Relaxed),
        sends_au: c.sends_au.load(Relaxed),
        align_fallbacks: c.align_fallbacks.load(Relaxed),
        wakeups_sent: c.wakeups_sent.load(Relaxed),
        sleeps: c.sleeps.load(Relaxed),
    }
}

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}
