//! Layouts of the structures that live in shared memory: a mapping wrapper, the control block
//! of a receive buffer, the notification ring of a process, and the job's status page. Only
//! atomics live in them, so every access is well defined across processes.

use crate::sys;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use vmmc::redirect::RedirSlot;
use vmmc::{BufId, Error, Notification, Result};

/// A shared mapping of a memfd, unmapped on drop.
pub struct Map {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is shared memory accessed only through atomics or raw copies.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Maps `len` bytes of `fd`.
    pub fn new(fd: OwnedFd, len: usize) -> Result<Map> {
        let len = len.max(1).div_ceil(vmmc::page_size()) * vmmc::page_size();
        let ptr = sys::map_shared(&fd, len).map_err(|e| Error::io("mmap", e))?;
        Ok(Map { ptr, len, fd })
    }
    /// Creates and maps a fresh memfd of `len` bytes.
    pub fn create(name: &std::ffi::CStr, len: usize) -> Result<Map> {
        let len = len.max(1).div_ceil(vmmc::page_size()) * vmmc::page_size();
        let fd = sys::memfd(name, len).map_err(|e| Error::io("memfd_create", e))?;
        Map::new(fd, len)
    }
    /// The descriptor.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
    /// Base address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Mapped length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the mapping is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// A shared-memory object at byte `offset`.
    ///
    /// `T` must consist of atomics only and fit: checked with an assertion (layout bug).
    pub fn at<T>(&self, offset: usize) -> &T {
        assert!(offset + std::mem::size_of::<T>() <= self.len);
        assert_eq!((self.ptr as usize + offset) % std::mem::align_of::<T>(), 0);
        // SAFETY: in bounds, aligned, zero-initialised shared memory; `T` is made of atomics,
        // for which all-zero bytes are valid.
        unsafe { &*(self.ptr.add(offset) as *const T) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `revoked` values of a control block: the core's, shared with its native AU window.
pub use vmmc::transport::revoked;

/// Head of a receive buffer's control block.
#[repr(C, align(64))]
pub struct CtrlHeader {
    /// Non-zero once the buffer is unexported or its owner is gone (the reason).
    pub revoked: AtomicU32,
    /// Non-zero when the owner installed a notification handler.
    pub has_handler: AtomicU32,
    /// Non-zero when the buffer takes transfer redirection.
    pub redirectable: AtomicU32,
    _pad: [AtomicU32; 13],
    /// Transfer redirection (seed 004), placed by the senders.
    pub redir: RedirSlot,
}

/// One importer's count of transfers in progress (one per rank, own cache line).
#[repr(C, align(64))]
pub struct InFlight(pub AtomicU32);

/// A receive buffer's control block: header, then one [`InFlight`] per rank.
pub struct Ctrl {
    map: Map,
    ranks: usize,
}

impl Ctrl {
    /// Bytes needed for a job of `ranks`.
    pub fn size(ranks: usize) -> usize {
        std::mem::size_of::<CtrlHeader>() + 64 * ranks
    }
    /// Creates a fresh control block.
    pub fn create(ranks: usize) -> Result<Ctrl> {
        Ok(Ctrl {
            map: Map::create(c"vmmc-ctrl", Ctrl::size(ranks))?,
            ranks,
        })
    }
    /// Maps a received control block.
    pub fn open(fd: OwnedFd, ranks: usize) -> Result<Ctrl> {
        let have = sys::fd_size(&fd).map_err(|e| Error::io("fstat", e))?;
        if have < Ctrl::size(ranks) {
            return Err(Error::Protocol("control block too small".into()));
        }
        Ok(Ctrl {
            map: Map::new(fd, Ctrl::size(ranks))?,
            ranks,
        })
    }
    /// The descriptor.
    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }
    /// The header.
    pub fn header(&self) -> &CtrlHeader {
        self.map.at(0)
    }
    /// Breaks every link to the buffer, giving `reason` (see [`revoked`]) to later senders;
    /// the first reason stays.
    pub fn revoke(&self, reason: u32) {
        let _ = self.header().revoked.compare_exchange(
            revoked::LIVE,
            reason,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// The in-flight counter of `rank`.
    pub fn in_flight(&self, rank: usize) -> &AtomicU32 {
        assert!(rank < self.ranks);
        &self
            .map
            .at::<InFlight>(std::mem::size_of::<CtrlHeader>() + 64 * rank)
            .0
    }
    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }
}

/// Head of a notification ring.
#[repr(C, align(64))]
pub struct RingHeader {
    /// Number of lanes (one per rank of the job), written once by the owner at creation.
    lanes: AtomicU64,
    _p1: [AtomicU64; 7],
    /// Futex word: 1 while the consumer sleeps.
    sleeping: AtomicU32,
    /// Bumped to interrupt the consumer.
    kick: AtomicU32,
    /// The process's doorbell (see `vmmc::wait`): every transfer into one of the owner's
    /// buffers rings it, so that a thread of the owner can sleep in a data wait.
    bell: vmmc::wait::Bell,
}

/// Head of one sender's lane: producer and consumer positions on their own cache lines.
#[repr(C, align(64))]
struct LaneHeader {
    tail: AtomicU64,
    _p1: [AtomicU64; 7],
    head: AtomicU64,
    _p2: [AtomicU64; 7],
}

#[repr(C)]
struct Cell {
    seq: AtomicU64,
    offset: AtomicU64,
    buf: AtomicU32,
    value: AtomicU32,
    _pad: AtomicU64,
}

/// Capacity of one lane of a notification ring (entries).
pub const RING_CAP: usize = 1024;
/// Most lanes a ring may have (a ring received from a peer is checked against it).
const MAX_LANES: u64 = 1 << 16;

/// A process's notification ring: one lane per sending rank, each a bounded queue with a
/// sequence number per cell (Vyukov's design) so that it works in shared memory with atomics
/// alone; the threads of one sender share its lane, the owner consumes every lane. A sender
/// killed between claiming a cell and publishing it stalls only its own lane, never the
/// other senders' notifications.
pub struct Ring {
    map: Map,
    lanes: usize,
    /// The consumer's next lane to look at (round robin, so no sender starves the others).
    next: std::sync::atomic::AtomicUsize,
}

/// Result of pushing into a ring.
#[derive(Debug, PartialEq, Eq)]
pub enum Push {
    /// Queued.
    Done,
    /// Full: back-pressure.
    Full,
}

impl Ring {
    fn lane_bytes() -> usize {
        std::mem::size_of::<LaneHeader>() + RING_CAP * std::mem::size_of::<Cell>()
    }
    fn bytes(lanes: usize) -> usize {
        std::mem::size_of::<RingHeader>() + lanes * Ring::lane_bytes()
    }
    /// Creates an empty ring with one lane per sender rank.
    pub fn create(lanes: usize) -> Result<Ring> {
        let lanes = lanes.max(1);
        let r = Ring {
            map: Map::create(c"vmmc-ring", Ring::bytes(lanes))?,
            lanes,
            next: Default::default(),
        };
        r.header().lanes.store(lanes as u64, Ordering::Release);
        for l in 0..lanes {
            for i in 0..RING_CAP {
                r.cell(l, i as u64).seq.store(i as u64, Ordering::Relaxed);
            }
        }
        Ok(r)
    }
    /// Maps a received ring.
    pub fn open(fd: OwnedFd) -> Result<Ring> {
        let have = sys::fd_size(&fd).map_err(|e| Error::io("fstat", e))?;
        if have < Ring::bytes(1) {
            return Err(Error::Protocol("notification ring too small".into()));
        }
        let head = Map::new(fd, std::mem::size_of::<RingHeader>())?;
        let lanes = head.at::<RingHeader>(0).lanes.load(Ordering::Acquire);
        if lanes == 0 || lanes > MAX_LANES || have < Ring::bytes(lanes as usize) {
            return Err(Error::Protocol("notification ring of a bad size".into()));
        }
        let fd = head.fd().try_clone().map_err(|e| Error::io("dup", e))?;
        drop(head);
        Ok(Ring {
            map: Map::new(fd, Ring::bytes(lanes as usize))?,
            lanes: lanes as usize,
            next: Default::default(),
        })
    }
    /// The descriptor.
    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }
    /// Number of lanes.
    pub fn lanes(&self) -> usize {
        self.lanes
    }
    fn header(&self) -> &RingHeader {
        self.map.at(0)
    }
    /// The owner's doorbell.
    pub fn bell(&self) -> &vmmc::wait::Bell {
        &self.header().bell
    }
    /// The count of kicks so far (a consumer compares it to see whether it was kicked).
    pub fn kicks(&self) -> u32 {
        self.header().kick.load(Ordering::Acquire)
    }
    fn lane(&self, lane: usize) -> &LaneHeader {
        assert!(lane < self.lanes);
        self.map
            .at(std::mem::size_of::<RingHeader>() + lane * Ring::lane_bytes())
    }
    fn cell(&self, lane: usize, pos: u64) -> &Cell {
        let i = (pos as usize) & (RING_CAP - 1);
        self.map.at(std::mem::size_of::<RingHeader>()
            + lane * Ring::lane_bytes()
            + std::mem::size_of::<LaneHeader>()
            + i * std::mem::size_of::<Cell>())
    }

    /// Producer `lane` (the sender's rank): queues a notification and wakes the consumer if
    /// it sleeps.
    pub fn push(&self, lane: usize, n: Notification) -> Push {
        let h = self.lane(lane);
        let mut pos = h.tail.load(Ordering::Relaxed);
        loop {
            let c = self.cell(lane, pos);
            let seq = c.seq.load(Ordering::Acquire);
            let dif = seq as i64 - pos as i64;
            if dif == 0 {
                match h.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        c.offset.store(n.offset as u64, Ordering::Relaxed);
                        c.buf.store(n.buf, Ordering::Relaxed);
                        c.value.store(n.value, Ordering::Relaxed);
                        c.seq.store(pos + 1, Ordering::Release);
                        break;
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return Push::Full;
            } else {
                pos = h.tail.load(Ordering::Relaxed);
            }
        }
        let h = self.header();
        std::sync::atomic::fence(Ordering::SeqCst);
        if h.sleeping.load(Ordering::Relaxed) != 0 {
            h.sleeping.store(0, Ordering::Relaxed);
            sys::futex_wake(&h.sleeping);
        }
        Push::Done
    }

    /// Claims a cell of `lane` and never publishes it: what a producer killed between its
    /// claim and its publication leaves behind (tests).
    #[doc(hidden)]
    pub fn abandon_claim(&self, lane: usize) {
        self.lane(lane).tail.fetch_add(1, Ordering::SeqCst);
    }

    /// Consumer: takes the next notification, if one is ready, looking at the lanes in turn
    /// (order is kept per sender, which is all the model promises).
    pub fn pop(&self) -> Option<Notification> {
        let start = self.next.load(Ordering::Relaxed);
        for k in 0..self.lanes {
            let lane = (start + k) % self.lanes;
            if let Some(n) = self.pop_lane(lane) {
                self.next.store((lane + 1) % self.lanes, Ordering::Relaxed);
                return Some(n);
            }
        }
        None
    }

    fn pop_lane(&self, lane: usize) -> Option<Notification> {
        let h = self.lane(lane);
        let pos = h.head.load(Ordering::Relaxed);
        let c = self.cell(lane, pos);
        if c.seq.load(Ordering::Acquire) != pos + 1 {
            return None;
        }
        let n = Notification {
            buf: c.buf.load(Ordering::Relaxed) as BufId,
            offset: c.offset.load(Ordering::Relaxed) as usize,
            value: c.value.load(Ordering::Relaxed),
        };
        c.seq.store(pos + RING_CAP as u64, Ordering::Release);
        h.head.store(pos + 1, Ordering::Relaxed);
        Some(n)
    }

    /// Interrupts a sleeping consumer.
    pub fn kick(&self) {
        let h = self.header();
        h.kick.fetch_add(1, Ordering::AcqRel);
        h.sleeping.store(0, Ordering::SeqCst);
        sys::futex_wake(&h.sleeping);
    }
}

/// The consumer's sleep, for `vmmc::wait`: armed, the producers' pushes and the kicks wake it.
impl vmmc::wait::Sleep for Ring {
    fn arm(&self) -> u64 {
        let h = self.header();
        h.sleeping.store(1, Ordering::SeqCst);
        // Pairs with the producer's fence after its push: either it sees us asleep, or the
        // consumer's re-check after arming sees its cell.
        std::sync::atomic::fence(Ordering::SeqCst);
        1
    }
    fn sleep(&self, token: u64, timeout: std::time::Duration) {
        sys::futex_wait(&self.header().sleeping, token as u32, Some(timeout));
    }
    fn disarm(&self) {
        self.header().sleeping.store(0, Ordering::Relaxed);
    }
}

/// States of a rank on the status page.
pub mod state {
    /// Not connected yet.
    pub const STARTING: u32 = 0;
    /// Running.
    pub const ALIVE: u32 = 1;
    /// Left cleanly.
    pub const EXITED: u32 = 2;
    /// Died (connection lost without goodbye).
    pub const DEAD: u32 = 3;
}

#[repr(C, align(64))]
struct RankStatus {
    state: AtomicU32,
    pid: AtomicU32,
}

/// The job's status page: one entry per rank, written by the trusted party.
pub struct Status {
    map: Map,
    ranks: usize,
}

impl Status {
    /// Creates the page.
    pub fn create(ranks: usize) -> Result<Status> {
        Ok(Status {
            map: Map::create(c"vmmc-status", 64 * ranks)?,
            ranks,
        })
    }
    /// Maps a received page.
    pub fn open(fd: OwnedFd, ranks: usize) -> Result<Status> {
        let have = sys::fd_size(&fd).map_err(|e| Error::io("fstat", e))?;
        if have < 64 * ranks {
            return Err(Error::Protocol("status page too small".into()));
        }
        Ok(Status {
            map: Map::new(fd, 64 * ranks)?,
            ranks,
        })
    }
    /// The descriptor.
    pub fn fd(&self) -> &OwnedFd {
        self.map.fd()
    }
    fn at(&self, rank: usize) -> &RankStatus {
        assert!(rank < self.ranks);
        self.map.at(64 * rank)
    }
    /// Sets a rank's state.
    pub fn set(&self, rank: usize, st: u32, pid: u32) {
        let s = self.at(rank);
        s.pid.store(pid, Ordering::Relaxed);
        s.state.store(st, Ordering::SeqCst);
    }
    /// A rank's state.
    pub fn get(&self, rank: usize) -> u32 {
        self.at(rank).state.load(Ordering::SeqCst)
    }
    /// A rank's pid.
    pub fn pid(&self, rank: usize) -> u32 {
        self.at(rank).pid.load(Ordering::Relaxed)
    }
    /// Whether a rank is running (or not yet started).
    pub fn alive(&self, rank: usize) -> bool {
        matches!(self.get(rank), state::STARTING | state::ALIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(buf: BufId, value: u32) -> Notification {
        Notification {
            buf,
            offset: value as usize * 4,
            value,
        }
    }

    #[test]
    fn ring_is_fifo_per_lane_and_bounded() {
        let r = Ring::create(2).unwrap();
        assert!(r.pop().is_none());
        for i in 0..RING_CAP as u32 {
            assert_eq!(r.push(0, note(1, i)), Push::Done);
        }
        assert_eq!(r.push(0, note(1, 0)), Push::Full);
        assert_eq!(
            r.push(1, note(2, 7)),
            Push::Done,
            "a full lane is one sender's"
        );
        let mut lane0 = vec![];
        let mut lane1 = vec![];
        while let Some(n) = r.pop() {
            if n.buf == 1 {
                lane0.push(n.value)
            } else {
                lane1.push(n.value)
            }
        }
        assert_eq!(lane0, (0..RING_CAP as u32).collect::<Vec<_>>());
        assert_eq!(lane1, vec![7]);
        let reopened = Ring::open(r.fd().try_clone().unwrap()).unwrap();
        assert_eq!(reopened.lanes(), 2);
    }

    #[test]
    fn a_dead_producer_does_not_wedge_the_ring() {
        // Sender 0 was killed between claiming a cell and publishing it.
        let r = Ring::create(3).unwrap();
        r.abandon_claim(0);
        let n = note(7, 9);
        assert_eq!(r.push(1, n), Push::Done);
        assert_eq!(r.pop(), Some(n), "another sender's notification is stuck");
        assert_eq!(r.push(2, n), Push::Done);
        assert_eq!(r.pop(), Some(n));
        assert_eq!(r.pop(), None);
    }
}
