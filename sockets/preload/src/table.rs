//! What the library knows about descriptors. A bitmap answers "is this descriptor ours?"
//! without a lock (the path of every `read` and `write` on files, pipes and kernel sockets);
//! only descriptors whose bit is set are looked up in the map. The bitmap of the first 65536
//! descriptors is static; above, a chunk of the same size is allocated when a descriptor in
//! its range is first tracked (a program that raised its limit), up to [`MAX_FD`].

use crate::epoll::EpollSet;
use sockets::Conn;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Descriptors at or above this are never tracked (they stay kernel sockets): 2^24, above
/// Linux's default ceiling for `RLIMIT_NOFILE` (`fs.nr_open`, 2^20).
pub const MAX_FD: i32 = 1 << 24;

/// Descriptors per bitmap chunk.
const CHUNK: i32 = 1 << 16;
type Chunk = [AtomicU64; (CHUNK as usize) / 64];

static KNOWN: Chunk = [const { AtomicU64::new(0) }; 1024];
/// Chunks for descriptors from [`CHUNK`] up, allocated on first use and never freed.
static HIGH: [OnceLock<Box<Chunk>>; (MAX_FD / CHUNK) as usize - 1] =
    [const { OnceLock::new() }; (MAX_FD / CHUNK) as usize - 1];

/// The bitmap word of `fd` (in range), allocating its chunk when `alloc`.
#[inline]
fn bits(fd: i32, alloc: bool) -> Option<&'static AtomicU64> {
    let i = (fd % CHUNK) as usize / 64;
    if fd < CHUNK {
        return Some(&KNOWN[i]);
    }
    let slot = &HIGH[(fd / CHUNK) as usize - 1];
    let chunk = if alloc {
        slot.get_or_init(|| Box::new([const { AtomicU64::new(0) }; 1024]))
    } else {
        slot.get()?
    };
    Some(&chunk[i])
}
static TABLE: RwLock<BTreeMap<i32, Entry>> = RwLock::new(BTreeMap::new());

/// A tracked descriptor.
#[derive(Clone)]
pub enum Entry {
    /// A TCP socket (IPv4 or IPv6) that is neither connected nor listening yet.
    Candidate,
    /// A listening TCP socket announced in the registry.
    Listener {
        /// Its port.
        port: u16,
        /// The process that announced it (only it withdraws the announcement).
        owner: u32,
    },
    /// A connection over VMMC; the descriptor is its setup socket, as the program sees it.
    Vmmc(Arc<Conn>),
    /// An epoll instance, for the VMMC connections registered in it.
    Epoll(Arc<EpollSet>),
}

/// Whether `fd` may be tracked: a lock-free look at the bitmap.
#[inline]
pub fn known(fd: i32) -> bool {
    (0..MAX_FD).contains(&fd)
        && bits(fd, false).is_some_and(|w| w.load(Ordering::Acquire) & (1 << (fd % 64)) != 0)
}

fn mark(fd: i32, on: bool) {
    let bit = 1u64 << (fd % 64);
    match bits(fd, on) {
        Some(w) if on => {
            w.fetch_or(bit, Ordering::Release);
        }
        Some(w) => {
            w.fetch_and(!bit, Ordering::Release);
        }
        None => {}
    }
}

/// The entry of `fd`, if tracked.
pub fn get(fd: i32) -> Option<Entry> {
    if !known(fd) {
        return None;
    }
    TABLE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fd)
        .cloned()
}

/// The connection of `fd`, if it is a VMMC connection.
#[inline]
pub fn conn(fd: i32) -> Option<Arc<Conn>> {
    match get(fd)? {
        Entry::Vmmc(c) => Some(c),
        _ => None,
    }
}

/// Tracks `fd` as `e`; returns what it replaces (to be dropped by the caller, outside the
/// lock: dropping a connection does I/O).
pub fn set(fd: i32, e: Entry) -> Option<Entry> {
    if !(0..MAX_FD).contains(&fd) {
        return None;
    }
    let old = TABLE
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(fd, e);
    mark(fd, true);
    old
}

/// Stops tracking `fd`; returns its entry.
pub fn take(fd: i32) -> Option<Entry> {
    if !known(fd) {
        return None;
    }
    let mut t = TABLE.write().unwrap_or_else(|e| e.into_inner());
    mark(fd, false);
    t.remove(&fd)
}

/// The epoll set of `fd`, if it is one with VMMC members (its own or nested).
pub fn epoll_with_members(fd: i32) -> Option<Arc<EpollSet>> {
    match get(fd)? {
        Entry::Epoll(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// Every distinct VMMC connection tracked, and whether another descriptor than `except`
/// refers to `c`.
pub fn conns() -> Vec<Arc<Conn>> {
    let t = TABLE.read().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<Arc<Conn>> = Vec::new();
    for e in t.values() {
        if let Entry::Vmmc(c) = e {
            if !v.iter().any(|o| Arc::ptr_eq(o, c)) {
                v.push(c.clone());
            }
        }
    }
    v
}

/// Every descriptor of a VMMC connection, with its connection.
pub fn vmmc_fds() -> Vec<(i32, Arc<Conn>)> {
    let t = TABLE.read().unwrap_or_else(|e| e.into_inner());
    t.iter()
        .filter_map(|(fd, e)| match e {
            Entry::Vmmc(c) => Some((*fd, c.clone())),
            _ => None,
        })
        .collect()
}

/// Whether some tracked descriptor refers to connection `c`.
pub fn referenced(c: &Arc<Conn>) -> bool {
    let t = TABLE.read().unwrap_or_else(|e| e.into_inner());
    t.values()
        .any(|e| matches!(e, Entry::Vmmc(o) if Arc::ptr_eq(o, c)))
}

/// Every epoll set tracked.
pub fn epoll_sets() -> Vec<(i32, Arc<EpollSet>)> {
    let t = TABLE.read().unwrap_or_else(|e| e.into_inner());
    t.iter()
        .filter_map(|(fd, e)| match e {
            Entry::Epoll(s) => Some((*fd, s.clone())),
            _ => None,
        })
        .collect()
}

/// Drops every entry (at exit): connections write their statistics and tell their peers.
pub fn clear() -> Vec<Entry> {
    let mut t = TABLE.write().unwrap_or_else(|e| e.into_inner());
    for fd in t.keys() {
        mark(*fd, false);
    }
    std::mem::take(&mut *t).into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_above_65535_are_tracked() {
        for fd in [3, CHUNK - 1, CHUNK, 70_000, 1 << 20, MAX_FD - 1] {
            assert!(!known(fd), "{fd}");
            assert!(set(fd, Entry::Candidate).is_none(), "{fd}");
            assert!(known(fd), "{fd}");
            assert!(matches!(get(fd), Some(Entry::Candidate)), "{fd}");
            assert!(!known(fd + 1) || fd + 1 == CHUNK, "{fd}");
            assert!(matches!(take(fd), Some(Entry::Candidate)), "{fd}");
            assert!(!known(fd) && get(fd).is_none(), "{fd}");
        }
        // Beyond the table: stays a kernel descriptor.
        assert!(set(MAX_FD, Entry::Candidate).is_none());
        assert!(!known(MAX_FD) && !known(-1));
    }
}
