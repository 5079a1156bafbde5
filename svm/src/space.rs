//! A node's view of the shared space: the page table, twins, intervals, and the calls a
//! program makes.

use crate::clock;
use crate::config::{Config, Protocol};
use crate::service::{Peers, Service, State, To, Waiter, Wake};
use crate::stats::{RunStats, Stats};
use crate::wire::*;
use crate::{Error, Result};
use bytemuck::Pod;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use vmmc::pace::{self, Cost};
use vmmc::{AuOptions, AutoUpdateBinding, Endpoint, ExportOptions, MemKind, Proxy};

// A page's state at this node. Reads need at least READ, writes at least WRITE; DIRECT pages
// take plain stores into this node's copy (every written page but AURC's non-home ones, whose
// stores go through the binding to the home).
const INVALID: u8 = 0;
const READ: u8 = 1;
const WRITE: u8 = 2;
const DIRECT: u8 = 3;
const NO_HOME: u16 = u16::MAX;
/// Every wait of the library, in `vmmc::wait`'s statistics.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("svm");

/// Where the pages of an allocation live (their *home* nodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Page i on node i mod N.
    RoundRobin,
    /// The pages split into N contiguous blocks, block k on node k (SPLASH-2 programs'
    /// "each processor's partition at that processor" for arrays split evenly).
    Blocked,
    /// Every page on one node.
    Node(usize),
    /// The home of each page, in order (as many entries as the allocation has pages).
    Explicit(Vec<usize>),
}

/// A shared array of `T`: an offset and a length, the same on every node. Cheap to copy and
/// to keep across synchronisation; read and write it through [`Svm::view`].
pub struct Shared<T> {
    off: usize,
    len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Shared<T> {}
impl<T> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Shared[{} x {}B @ {:#x}]",
            self.len,
            std::mem::size_of::<T>(),
            self.off
        )
    }
}

impl<T: Pod> Shared<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The elements `start..start+len` as an array of their own (a partition).
    pub fn slice(&self, start: usize, len: usize) -> Result<Shared<T>> {
        if start.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(Error::OutOfBounds {
                index: start,
                len,
                size: self.len,
            });
        }
        Ok(Shared {
            off: self.off + start * std::mem::size_of::<T>(),
            len,
            _t: PhantomData,
        })
    }
    /// Byte offset in the space.
    pub fn offset(&self) -> usize {
        self.off
    }
}

/// Reads and writes a shared array. A view borrows the [`Svm`], and every synchronisation
/// call takes the `Svm` mutably: a view cannot be held across an acquire, a release, a
/// barrier or a flag wait, so nothing read before one is mistaken for what holds after it.
///
/// [`get`](View::get) and [`set`](View::set) are the checked accessors of the access
/// detection: inlined, they look at the page's state byte and load or store this node's copy
/// directly; the first read of an invalid page, the first write of an interval and AURC's
/// stores to another node's page take the out-of-line path (a fault).
pub struct View<'a, T> {
    svm: &'a Svm,
    a: Shared<T>,
    /// This node's copy of the space.
    base: *mut u8,
    /// The states of the space's pages.
    pages: &'a [Cell<u8>],
    /// Page size is 1 << shift.
    shift: u32,
    /// No element straddles two pages (the element size divides the page and the offset).
    whole: bool,
}

impl<T: Pod> View<'_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.a.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.a.len == 0
    }
    fn at(&self, i: usize, n: usize) -> Result<usize> {
        if i.checked_add(n).is_none_or(|e| e > self.a.len) {
            return Err(Error::OutOfBounds {
                index: i,
                len: n,
                size: self.a.len,
            });
        }
        Ok(self.a.off + i * std::mem::size_of::<T>())
    }
    /// The byte offset of element `i` in the space and its page's state, if the inlined
    /// path may take it (in bounds, in one page).
    #[inline(always)]
    fn fast(&self, i: usize) -> Option<(usize, u8)> {
        if i >= self.a.len || !self.whole {
            return None;
        }
        let o = self.a.off + i * std::mem::size_of::<T>();
        Some((o, self.pages.get(o >> self.shift)?.get()))
    }
    /// Element `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Result<T> {
        match self.fast(i) {
            Some((o, s)) if s != INVALID => {
                // SAFETY: element `i` is inside the array (checked), so inside this node's copy
                // of the space; any bit pattern is a `T` (Pod). A home's copy may take other
                // nodes' updates meanwhile, as `Region::read` allows (of other words, in a
                // program without data races).
                Ok(unsafe { self.base.add(o).cast::<T>().read_unaligned() })
            }
            _ => self.get_slow(i),
        }
    }
    #[cold]
    #[inline(never)]
    fn get_slow(&self, i: usize) -> Result<T> {
        let mut v = T::zeroed();
        self.svm
            .read_bytes(self.at(i, 1)?, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }
    /// Stores `v` as element `i`.
    #[inline]
    pub fn set(&self, i: usize, v: T) -> Result<()> {
        match self.fast(i) {
            Some((o, DIRECT)) => {
                // SAFETY: as in `get`; the page takes plain stores at this node (its twin or
                // its home copy exists, and the page is on this interval's dirty list).
                unsafe { self.base.add(o).cast::<T>().write_unaligned(v) };
                Ok(())
            }
            _ => self.set_slow(i, v),
        }
    }
    #[cold]
    #[inline(never)]
    fn set_slow(&self, i: usize, v: T) -> Result<()> {
        self.svm.write_bytes(self.at(i, 1)?, bytemuck::bytes_of(&v))
    }
    /// Calls `f(i, element i)` for each `i` of `range`, in order. Each page is checked once
    /// (a read fault where it is invalid) and its elements are then loaded directly: the way
    /// to scan a block without copying it out first.
    pub fn for_each(&self, range: Range<usize>, mut f: impl FnMut(usize, T)) -> Result<()> {
        self.try_for_each(range, |i, v| {
            f(i, v);
            Ok(())
        })
    }
    /// As [`for_each`](View::for_each), stopping at the first error `f` returns.
    pub fn try_for_each<E: From<Error>>(
        &self,
        range: Range<usize>,
        mut f: impl FnMut(usize, T) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        if range.is_empty() {
            return Ok(());
        }
        self.at(range.start, range.end - range.start)?;
        let size = std::mem::size_of::<T>();
        let mut i = range.start;
        while i < range.end {
            // The elements from i to the end of its page (or the range): one check.
            let o = self.a.off + i * size;
            let page_end = ((o >> self.shift) + 1) << self.shift;
            let stop = if self.whole {
                ((page_end - self.a.off) / size).min(range.end)
            } else {
                i + 1
            };
            self.svm.touch(o, (stop - i) * size, false)?;
            // Held in a local, so that the stores `f` makes cannot make the loop reload it.
            let first = self.base.wrapping_add(self.a.off).cast::<T>().cast_const();
            for j in i..stop {
                // SAFETY: element j is inside the array (range checked), its page is valid
                // here (touched; states only move down at synchronisation, which needs the
                // `Svm` mutably); a load as in `get`.
                let v = unsafe { first.add(j).read_unaligned() };
                f(j, v)?;
            }
            i = stop;
        }
        Ok(())
    }
    /// Write cursors starting at `starts` (the buckets' first positions in a counting sort,
    /// the partitions' ends): each stores successive elements with one check per page, then
    /// plain stores.
    /// The array may have up to `u32::MAX` elements; a start beyond it is an error at the
    /// first `put`.
    pub fn cursors(&self, starts: impl IntoIterator<Item = usize>) -> Result<Cursors<'_, T>> {
        let too_long = |index| Error::OutOfBounds {
            index,
            len: 1,
            size: u32::MAX as usize,
        };
        if self.a.len > u32::MAX as usize {
            return Err(too_long(self.a.len));
        }
        let pos = starts
            .into_iter()
            .map(|s| {
                let s = u32::try_from(s).map_err(|_| too_long(s))?;
                Ok([s, s])
            })
            .collect::<Result<_>>()?;
        Ok(Cursors {
            view: self,
            first: self.base.wrapping_add(self.a.off).cast::<T>(),
            pos,
        })
    }
    /// Copies elements `start..start+out.len()` into `out`.
    pub fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        let off = self.at(start, out.len())?;
        self.svm.read_bytes(off, bytemuck::cast_slice_mut(out))
    }
    /// Stores `data` as elements `start..`.
    pub fn write(&self, start: usize, data: &[T]) -> Result<()> {
        let off = self.at(start, data.len())?;
        self.svm.write_bytes(off, bytemuck::cast_slice(data))
    }
    /// All elements.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.a.len];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

/// Write positions in one array, each storing successive elements (see
/// [`View::cursors`]).
pub struct Cursors<'v, T> {
    view: &'v View<'v, T>,
    /// This node's copy of the array's first element.
    first: *mut T,
    /// Per cursor, its position and where its plain stores end (the end of the page or of
    /// the array, once the page is known to take them).
    /// (u32: eight bytes a cursor keep thousands of them in the first-level cache beside
    /// the lines they write.)
    pos: Vec<[u32; 2]>,
}

impl<T: Pod> Cursors<'_, T> {
    /// The index cursor `c`'s next [`put`](Cursors::put) stores at.
    pub fn position(&self, c: usize) -> Option<usize> {
        self.pos.get(c).map(|p| p[0] as usize)
    }
    /// Stores `v` at cursor `c`'s position and advances it.
    #[inline]
    pub fn put(&mut self, c: usize, v: T) -> Result<()> {
        if let Some([next, stop]) = self.pos.get_mut(c) {
            if *next < *stop {
                // SAFETY: every element below `stop` is inside the array and lies in a page
                // that takes plain stores at this node until the next synchronisation (which
                // needs the `Svm` mutably, so not while these cursors borrow it): see
                // `View::set`.
                unsafe { self.first.add(*next as usize).write_unaligned(v) };
                *next += 1;
                return Ok(());
            }
        }
        self.put_slow(c, v)
    }
    #[cold]
    #[inline(never)]
    fn put_slow(&mut self, c: usize, v: T) -> Result<()> {
        let cursors = self.pos.len();
        let Some([next, stop]) = self.pos.get_mut(c) else {
            return Err(Error::OutOfBounds {
                index: c,
                len: 1,
                size: cursors,
            });
        };
        let vw = self.view;
        vw.set(*next as usize, v)?;
        if let Some((o, DIRECT)) = vw.fast(*next as usize) {
            let page_end = ((o >> vw.shift) + 1) << vw.shift;
            // Fits: the array has at most u32::MAX elements (`View::cursors`).
            *stop = ((page_end - vw.a.off) / std::mem::size_of::<T>()).min(vw.a.len) as u32;
        }
        *next += 1;
        Ok(())
    }
}

/// One node's handle on a shared space (see the crate documentation).
pub struct Svm {
    svc: Arc<Service>,
    cfg: Config,
    me: usize,
    n: usize,
    page: usize,
    shift: u32,
    pages: usize,
    combining: bool,
    /// Each node's space and version table, read directly where the transport reads remote
    /// memory (page fetches without the home's help).
    remote: Vec<Option<(Proxy, Proxy)>>,
    /// Automatic-update bindings of this node's copy to each home (HLRC-AU, AURC).
    bindings: Vec<Option<AutoUpdateBinding>>,
    state: Vec<Cell<u8>>,
    home: Vec<u16>,
    need: RefCell<Vec<u32>>,
    twins: RefCell<HashMap<usize, Box<[u8]>>>,
    /// A home's version vector of a page, read for a fetch (reused by every fetch).
    scratch: RefCell<Vec<u8>>,
    dirty: RefCell<Vec<u32>>,
    /// Bytes sent into each node's ring; rings with records not yet published.
    wsent: RefCell<Vec<u32>>,
    unpublished: RefCell<Vec<bool>>,
    next_alloc: usize,
    seq: Cell<u32>,
    /// The vector timestamp a request carries (reused: no allocation on a lock's path).
    req_vt: RefCell<Vec<u32>>,
    epoch: u32,
    sent_to_barrier: u32,
    /// Per node: the vector timestamp of the write notices this node has sent it with its
    /// flag sets (as a flag's manager it holds them all, so the next set sends only newer).
    told: Vec<Vec<u32>>,
    stats: RefCell<Stats>,
}

fn fnv(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

impl Svm {
    /// Sets up the shared space on every node of `ep`'s job (collective: every node calls it
    /// with the same configuration, else [`Error::Mismatch`]).
    pub fn new(ep: Endpoint, cfg: Config) -> Result<Svm> {
        cfg.validate()?;
        clock::init();
        let (n, me) = (ep.size(), ep.rank());
        if n > NO_HOME as usize {
            return Err(Error::Config(format!("{n} nodes")));
        }
        let page = cfg.page_size;
        let pages = cfg.space / page;
        let space_len = pages * page;
        let lay = Layout::new(n, page, cfg.notice_area);
        let space = ep.alloc(space_len, MemKind::Shared)?;
        let vers = ep.alloc(pages * n * 4, MemKind::Shared)?;
        let ctl = ep.alloc(lay.ctl_len, MemKind::Shared)?;
        let bar = if me == 0 {
            Some(ep.alloc(lay.bar_len, MemKind::Shared)?)
        } else {
            None
        };
        let svc = Arc::new(Service {
            ep: ep.clone(),
            me,
            n,
            page,
            lay,
            space: space.clone(),
            vers: vers.clone(),
            ctl: ctl.clone(),
            bar: bar.clone(),
            peers: OnceLock::new(),
            st: Mutex::new(State::new(n, me, cfg.locks, cfg.flags)),
            failed: Mutex::new(None),
            has_failed: std::sync::atomic::AtomicBool::new(false),
            again: std::sync::atomic::AtomicBool::new(false),
            sent: Mutex::new(Stats::default()),
            remote_read: ep.caps().remote_read,
            async_sends: cfg.async_sends,
            in_flight: Mutex::new(Vec::new()),
            depth: std::sync::atomic::AtomicU32::new(0),
            epoch: std::sync::atomic::AtomicU32::new(0),
            bells: Mutex::new(Vec::new()),
            bells_held: std::sync::atomic::AtomicBool::new(false),
            defer_bells: ep.caps().remote_read && !pace::is_paced(),
            program: std::thread::current().id(),
        });
        ep.export(BUF_SPACE, &space, ExportOptions::new())?;
        ep.export(BUF_VERS, &vers, ExportOptions::new())?;
        let weak = Arc::downgrade(&svc);
        ep.export(
            BUF_CTL,
            &ctl,
            ExportOptions::new().handler(move |_| {
                if let Some(s) = weak.upgrade() {
                    if let Err(e) = s.served_by_handler() {
                        s.fail(e);
                    }
                    // A program asleep in a wait looks again (the core's notification thread
                    // rings too, after every handler; not the program's thread: nothing was
                    // held back here).
                    vmmc::wait::ring_local();
                }
            }),
        )?;
        if let Some(bar) = &bar {
            ep.export(BUF_BAR, bar, ExportOptions::new())?;
        }
        let remote_read = ep.caps().remote_read;
        let mut peers = Peers {
            ctl: Vec::new(),
            space: Vec::new(),
            bar: None,
        };
        let mut remote = Vec::new();
        for r in 0..n {
            if r == me {
                peers.ctl.push(None);
                peers.space.push(None);
                remote.push(None);
                continue;
            }
            let p = ep.proc_of(r)?;
            let sp = ep.import(p, BUF_SPACE)?;
            peers.ctl.push(Some(ep.import(p, BUF_CTL)?));
            remote.push(if remote_read {
                Some((sp.clone(), ep.import(p, BUF_VERS)?))
            } else {
                None
            });
            peers.space.push(Some(sp));
        }
        if me != 0 {
            peers.bar = Some(ep.import(ep.proc_of(0)?, BUF_BAR)?);
        }
        let combining = cfg.combining.unwrap_or(ep.caps().au_packetizer);
        let mut bindings = Vec::new();
        for sp in &peers.space {
            bindings.push(match sp {
                Some(sp) if cfg.protocol.uses_au() => Some(sp.bind_region(
                    space.clone(),
                    0,
                    AuOptions {
                        combining,
                        notify: false,
                    },
                )?),
                _ => None,
            });
        }
        let _ = svc.peers.set(peers);
        let mut svm = Svm {
            svc,
            me,
            n,
            page,
            shift: page.trailing_zeros(),
            pages,
            combining,
            remote,
            bindings,
            state: (0..pages).map(|_| Cell::new(READ)).collect(),
            home: vec![NO_HOME; pages],
            need: RefCell::new(vec![0; pages * n]),
            twins: RefCell::new(HashMap::new()),
            scratch: RefCell::new(Vec::new()),
            dirty: RefCell::new(Vec::new()),
            wsent: RefCell::new(vec![0; n]),
            unpublished: RefCell::new(vec![false; n]),
            next_alloc: 0,
            seq: Cell::new(0),
            req_vt: RefCell::new(Vec::new()),
            epoch: 0,
            sent_to_barrier: 0,
            told: vec![vec![0; n]; n],
            stats: RefCell::new(Stats::default()),
            cfg,
        };
        let c = &svm.cfg;
        let sig = fnv(&[
            1,
            c.protocol as u64,
            c.space as u64,
            c.page_size as u64,
            c.locks as u64,
            c.flags as u64,
            c.notice_area as u64,
            combining as u64,
        ]);
        svm.collective(sig, &[], "set-up (Svm::new with the same Config)")?;
        Ok(svm)
    }

    /// This node's rank.
    pub fn rank(&self) -> usize {
        self.me
    }
    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.n
    }
    /// The protocol in force.
    pub fn protocol(&self) -> Protocol {
        self.cfg.protocol
    }
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// The coherence unit.
    pub fn page_size(&self) -> usize {
        self.page
    }
    /// Whether automatic-update stores are combined.
    pub fn combining(&self) -> bool {
        self.combining
    }
    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.svc.ep
    }
    /// Bytes of space not yet allocated.
    pub fn free_space(&self) -> usize {
        self.pages * self.page - self.next_alloc
    }

    /// Allocates `len` elements of `T` (collective, SPLASH-2's `G_MALLOC`): every node gets
    /// the same array, which starts on a page of its own; `place` says where its pages' homes
    /// are. Fresh memory reads as zeros.
    pub fn alloc<T: Pod>(&mut self, len: usize, place: Placement) -> Result<Shared<T>> {
        // Saturating: a length whose bytes or pages overflow is out of space (below).
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        let npages = bytes.div_ceil(self.page).max(1);
        let whole = npages.checked_mul(self.page);
        let kind = match &place {
            Placement::RoundRobin => 1,
            Placement::Blocked => 2,
            Placement::Node(r) => fnv(&[3, *r as u64]),
            Placement::Explicit(v) => fnv(&v.iter().map(|&x| x as u64 + 4).collect::<Vec<_>>()),
        };
        let sig = fnv(&[2, bytes as u64, std::mem::size_of::<T>() as u64, kind]);
        self.collective(sig, &[], "alloc (the same length, type size and placement)")?;
        let left = self.free_space();
        if bytes == usize::MAX || whole.is_none_or(|b| b > left) {
            return Err(Error::OutOfSpace {
                wanted: bytes,
                left,
                size: self.pages * self.page,
            });
        }
        let first = self.next_alloc / self.page;
        let homes: Vec<usize> = match place {
            Placement::RoundRobin => (0..npages).map(|i| (first + i) % self.n).collect(),
            Placement::Blocked => (0..npages).map(|i| i * self.n / npages).collect(),
            Placement::Node(r) if r < self.n => vec![r; npages],
            Placement::Node(r) => {
                return Err(Error::Config(format!("home node {r} of {}", self.n)));
            }
            Placement::Explicit(v) => {
                if v.len() != npages || v.iter().any(|&r| r >= self.n) {
                    return Err(Error::Config(format!(
                        "explicit placement of {} entries for {npages} pages on {} nodes",
                        v.len(),
                        self.n
                    )));
                }
                v
            }
        };
        for (i, h) in homes.into_iter().enumerate() {
            self.home[first + i] = h as u16;
        }
        self.next_alloc += npages * self.page;
        Ok(Shared {
            off: first * self.page,
            len,
            _t: PhantomData,
        })
    }

    /// The home node of element `i` of `a` ([`Error::OutOfBounds`] past its end).
    pub fn home_of<T: Pod>(&self, a: &Shared<T>, i: usize) -> Result<usize> {
        let at = (i < a.len)
            .then(|| a.off.checked_add(i * std::mem::size_of::<T>()))
            .flatten()
            .and_then(|off| self.home.get(off >> self.shift));
        at.map(|&h| h as usize).ok_or(Error::OutOfBounds {
            index: i,
            len: 1,
            size: a.len,
        })
    }

    /// A view to read and write `a` until the next synchronisation.
    pub fn view<T: Pod>(&self, a: Shared<T>) -> View<'_, T> {
        assert!(
            a.off + a.len * std::mem::size_of::<T>() <= self.svc.space.len(),
            "a Shared of this space"
        );
        View {
            svm: self,
            a,
            base: self.svc.space.as_ptr(),
            pages: &self.state,
            shift: self.shift,
            whole: {
                let size = std::mem::size_of::<T>().max(1);
                self.page.is_multiple_of(size) && a.off.is_multiple_of(size)
            },
        }
    }

    // ----- access detection (checked accessors, page granularity) -----

    #[inline]
    fn touch(&self, off: usize, len: usize, write: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (p0, p1) = (off >> self.shift, (off + len - 1) >> self.shift);
        for p in p0..=p1 {
            let s = self.state[p].get();
            if write && s < WRITE {
                self.write_fault(p)?;
            } else if s == INVALID {
                self.read_fault(p)?;
            }
        }
        Ok(())
    }

    pub(crate) fn read_bytes(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.touch(off, out.len(), false)?;
        self.svc.space.read(off, out)?;
        Ok(())
    }

    pub(crate) fn write_bytes(&self, off: usize, data: &[u8]) -> Result<()> {
        self.touch(off, data.len(), true)?;
        if self.cfg.protocol != Protocol::Aurc {
            self.svc.space.write(off, data)?;
            return Ok(());
        }
        // AURC: stores to a non-home page go through the binding to its home.
        let mut at = 0;
        while at < data.len() {
            let o = off + at;
            let p = o >> self.shift;
            let end = ((p + 1) << self.shift).min(off + data.len());
            let seg = &data[at..end - off];
            let h = self.home[p] as usize;
            if h == self.me {
                self.svc.space.write(o, seg)?;
            } else {
                self.au_store(h, o, seg)?;
            }
            at = end - off;
        }
        Ok(())
    }

    /// Stores through the binding to home `h`, whole words (a partial word is completed
    /// from the local copy).
    fn au_store(&self, h: usize, off: usize, data: &[u8]) -> Result<()> {
        let b = self.bindings[h].as_ref().expect("AURC binds every home");
        let (a0, a1) = (off & !3, (off + data.len() + 3) & !3);
        if a0 == off && a1 == off + data.len() {
            b.write(off, data)?;
        } else {
            self.svc.space.write(off, data)?;
            let mut w = vec![0u8; a1 - a0];
            self.svc.space.read(a0, &mut w)?;
            b.write(a0, &w)?;
        }
        let mut s = self.stats.borrow_mut();
        s.au_stores += ((a1 - a0) / 4) as u64;
        s.au_bytes += (a1 - a0) as u64;
        Ok(())
    }

    #[cold]
    fn read_fault(&self, p: usize) -> Result<()> {
        let _in = self.svc.awake();
        let t0 = clock::stamp();
        pace::charge(Cost::AccessFault);
        self.fetch(p)?;
        self.state[p].set(READ);
        let mut s = self.stats.borrow_mut();
        s.read_faults += 1;
        s.protocol_ns += clock::since(t0);
        Ok(())
    }

    #[cold]
    fn write_fault(&self, p: usize) -> Result<()> {
        // Inside the library only where the fault communicates (a fetch): the first write
        // to a valid page is bookkeeping here.
        let _in = (self.state[p].get() == INVALID).then(|| self.svc.awake());
        // Timed where it communicates or costs modelled time; on shm a fault that is only
        // bookkeeping (about 65 ns) would cost a third more with its two stopwatch reads
        // (twice as much where the stopwatch is the monotonic clock).
        let timed = _in.is_some() || pace::is_paced();
        let t0 = timed.then(clock::stamp);
        pace::charge(Cost::AccessFault);
        let home = self.home[p];
        if home == NO_HOME {
            return Err(Error::Protocol(format!("page {p} was never allocated")));
        }
        if self.state[p].get() == INVALID {
            self.fetch(p)?;
        }
        let mut s = self.stats.borrow_mut();
        if home as usize != self.me && self.cfg.protocol != Protocol::Aurc {
            let mut twin = vec![0u8; self.page].into_boxed_slice();
            self.svc.space.read(p * self.page, &mut twin)?;
            self.twins.borrow_mut().insert(p, twin);
            s.twins += 1;
        }
        self.dirty.borrow_mut().push(p as u32);
        let through_binding = home as usize != self.me && self.cfg.protocol == Protocol::Aurc;
        self.state[p].set(if through_binding { WRITE } else { DIRECT });
        s.write_faults += 1;
        if let Some(t0) = t0 {
            s.protocol_ns += clock::since(t0);
        }
        Ok(())
    }

    /// Brings page `p` from its home, once the home has every update this node's write
    /// notices require.
    fn fetch(&self, p: usize) -> Result<()> {
        let h = self.home[p] as usize;
        if h == NO_HOME as usize {
            return Err(Error::Protocol(format!(
                "fetch of page {p}, never allocated"
            )));
        }
        let need = self.need.borrow()[p * self.n..(p + 1) * self.n].to_vec();
        if h == self.me {
            // A home page behind the write notices: wait until the diffs have been applied.
            return self.wait("diffs for a home page", |s| {
                Ok(s.home_page_current(p, &need)?.then_some(()))
            });
        }
        if let Some((space, vers)) = &self.remote[h] {
            // Remote read: wait for the home's versions, then read the page straight into
            // this node's copy. (Through a buffer, the second copy cost a tenth of the
            // fetch; and a buffer a few bytes past a page boundary made the first copy stall
            // its loads on its own stores, 4K aliasing: 2.3-3.6 us per fetch instead of
            // 1.1-1.6, depending on where the allocator put the buffer.)
            let mut v = self.scratch.borrow_mut();
            v.resize(4 * self.n, 0);
            self.wait("a page's updates at its home", |_| {
                vers.get_data(4 * p * self.n, &mut v)?;
                Ok(v.chunks_exact(4)
                    .zip(&need)
                    .all(|(c, &k)| u32::from_ne_bytes(c.try_into().expect("word")) >= k)
                    .then_some(()))
            })?;
            assert!(
                (p + 1) * self.page <= self.svc.space.len(),
                "page {p} out of the space"
            );
            // SAFETY: page `p` lies inside this node's copy of the space (checked above),
            // which outlives the call. Nothing else reads or writes it meanwhile: it is
            // invalid and homed at another node, so this node's program (this thread, in
            // this call) does not touch it, its notification handler serves only pages
            // homed here, and other nodes write only into the copies of their homes.
            let page = unsafe {
                std::slice::from_raw_parts_mut(
                    self.svc.space.as_ptr().add(p * self.page),
                    self.page,
                )
            };
            space.get_data(p * self.page, page)?;
        } else {
            let seq = self.next_seq();
            let m = SlotMsg {
                seq,
                kind: S_PAGE,
                id: p as u32,
                arg: 0,
                from: self.me as u32,
                aux: 0,
                vector: &need,
            };
            self.svc.post_slot(
                &mut self.stats.borrow_mut(),
                To::Ctl(h),
                self.svc.lay.req(self.me),
                m,
                Wake::Ask,
            )?;
            let svc = &self.svc;
            self.wait("a page from its home", |_| {
                let off = svc.lay.reply() + svc.lay.slot - 4;
                Ok(
                    (svc.ctl.load_u32(off)? == seq && svc.ctl.load_u32(svc.lay.reply())? == seq)
                        .then_some(()),
                )
            })?;
            svc.answered();
        }
        let mut s = self.stats.borrow_mut();
        s.page_fetches += 1;
        s.fetch_bytes += self.page as u64;
        Ok(())
    }

    /// Whether this home page has every update that `need` names.
    fn home_page_current(&self, p: usize, need: &[u32]) -> Result<bool> {
        for (j, &k) in need.iter().enumerate() {
            if self.svc.vers.load_u32(4 * (p * self.n + j))? < k {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn next_seq(&self) -> u32 {
        let s = self.seq.get().wrapping_add(1).max(1);
        self.seq.set(s);
        s
    }

    /// Waits for `poll` to give a value, serving requests meanwhile and watching for dead
    /// nodes.
    fn wait<T>(&self, what: &str, poll: impl FnMut(&Self) -> Result<Option<T>>) -> Result<T> {
        self.wait_from(what, None, poll)
    }

    /// [`Self::wait`] for what one node sends (`from`): only that node's loss ends the wait
    /// (every node's, with `None`).
    fn wait_from<T>(
        &self,
        what: &str,
        from: Option<usize>,
        mut poll: impl FnMut(&Self) -> Result<Option<T>>,
    ) -> Result<T> {
        // The core's one policy: spin while it pays, yield where processes outnumber cores,
        // then sleep on the process's doorbell, which every transfer into this node's buffers
        // (requests, replies, grants) and every notification handler rings.
        let mut wait = vmmc::wait::Wait::new(&WAIT_SITE);
        let mut turns = 0u64;
        let mut lost: Option<(Error, u64)> = None;
        loop {
            if let Some(v) = poll(self)? {
                return Ok(v);
            }
            self.svc.try_serve()?;
            if let Some(v) = poll(self)? {
                return Ok(v);
            }
            // Before a sleep (and on sim), what this thread holds back goes out now: it may
            // be what we wait for. While spinning, a look every 16 turns: the delays are
            // microseconds. While yielding the core (more processes than cores), at every
            // turn, but after the same delays: the node asked may only be waiting for a core,
            // and a notification then wakes its notification thread to compete for one.
            // (Measured, 4 processes on 2 cores: ringing at once sent a notification with
            // most requests, and a lock ping-pong hand-over took 4-11 us, where an NX round
            // trip took 1.3-2.1.)
            let yielding = wait.yielding();
            if wait.resting() || turns.is_multiple_of(16) {
                self.svc.ring_due(wait.resting() && !yielding)?;
            }
            turns += 1;
            if lost.is_none() && (wait.resting() || turns.is_multiple_of(256)) {
                if let Err(e) = self.check_peers(what, from) {
                    // What a node sent before it ended may still be on its way: look a few
                    // more times before giving up.
                    lost = Some((e, turns));
                }
            }
            if let Some((_, at)) = &lost {
                if turns - at > 64 {
                    return Err(lost.take().expect("set").0);
                }
                // The last looks come at once: nobody may ring any more.
                if !vmmc::pace::is_paced() {
                    std::thread::yield_now();
                    continue;
                }
            }
            wait.idle();
        }
    }

    fn check_peers(&self, what: &str, from: Option<usize>) -> Result<()> {
        let ep = &self.svc.ep;
        for r in (0..self.n).filter(|&r| r != self.me && from.is_none_or(|f| f == r)) {
            if let Err(e) = ep.check_peer(ep.proc_of(r)?) {
                return Err(Error::PeerLost(
                    r,
                    format!("{e} (while waiting for {what})"),
                ));
            }
        }
        Ok(())
    }

    // ----- intervals: what a release sends -----

    /// Ends the current interval: the updates of every page written go to their homes
    /// (diffs, diffs through automatic update, or only the version for AURC), and the
    /// pages become this interval's write notices.
    fn close_interval(&mut self) -> Result<()> {
        self.svc.check_failed()?;
        let mut dirty = std::mem::take(&mut *self.dirty.borrow_mut());
        if dirty.is_empty() {
            return Ok(());
        }
        let t0 = clock::stamp();
        dirty.sort_unstable();
        let k = self.svc.lock().vt[self.me] + 1;
        let mut versions: Vec<Vec<u32>> = vec![Vec::new(); self.n];
        let words = self.page / 4;
        let mut page_now = vec![0u8; self.page];
        for &p in &dirty {
            let p = p as usize;
            self.state[p].set(READ);
            let h = self.home[p] as usize;
            if h == self.me {
                self.svc.vers.store_u32(4 * (p * self.n + self.me), k)?;
                continue;
            }
            self.need.borrow_mut()[p * self.n + self.me] = k;
            if self.cfg.protocol == Protocol::Aurc {
                versions[h].push(p as u32);
                continue;
            }
            let twin = self
                .twins
                .borrow_mut()
                .remove(&p)
                .ok_or_else(|| Error::Protocol(format!("no twin of page {p}")))?;
            self.svc.space.read(p * self.page, &mut page_now)?;
            let word = |b: &[u8], i: usize| {
                u32::from_ne_bytes(b[4 * i..4 * i + 4].try_into().expect("word"))
            };
            let changed = |i: usize| word(&page_now, i) != word(&twin, i);
            let mut n_changed = 0usize;
            if self.cfg.protocol == Protocol::HlrcAu {
                // The runs of changed words go to the home page as they are found.
                let b = self.bindings[h].as_ref().expect("HLRC-AU binds every home");
                let mut i = 0;
                while i < words {
                    if !changed(i) {
                        i += 1;
                        continue;
                    }
                    let s = i;
                    while i < words && changed(i) {
                        i += 1;
                    }
                    let (o, e) = (4 * s, 4 * i);
                    b.write(p * self.page + o, &page_now[o..e])?;
                    n_changed += i - s;
                }
                let mut st = self.stats.borrow_mut();
                st.au_stores += n_changed as u64;
                st.au_bytes += 4 * n_changed as u64;
                versions[h].push(p as u32);
            } else {
                // [page, writer, interval, bitmap, changed words]
                let mut rec = Vec::with_capacity(12 + words / 8 + self.page);
                for w in [p as u32, self.me as u32, k] {
                    rec.extend_from_slice(&w.to_ne_bytes());
                }
                let bm = rec.len();
                rec.resize(bm + words.div_ceil(8), 0);
                for i in 0..words {
                    if changed(i) {
                        rec[bm + i / 8] |= 1 << (i % 8);
                        rec.extend_from_slice(&page_now[4 * i..4 * i + 4]);
                        n_changed += 1;
                    }
                }
                self.ring_push(h, R_DIFF, &rec)?;
            }
            let mut st = self.stats.borrow_mut();
            st.diffs_created += 1;
            st.diff_bytes_created += 4 * n_changed as u64;
        }
        for (h, pages) in versions.iter().enumerate() {
            if pages.is_empty() {
                continue;
            }
            if let Some(b) = &self.bindings[h] {
                b.flush()?;
            }
            for chunk in pages.chunks(2048) {
                let mut rec = words_to_bytes(&[self.me as u32, k, chunk.len() as u32]);
                rec.extend_from_slice(&words_to_bytes(chunk));
                self.ring_push(h, R_VERSION, &rec)?;
            }
        }
        for h in 0..self.n {
            if self.unpublished.borrow()[h] {
                self.ring_publish(h)?;
            }
        }
        {
            let mut st = self.svc.lock();
            st.log[self.me].push(dirty.clone());
            st.vt[self.me] = k;
        }
        let mut s = self.stats.borrow_mut();
        s.write_notices_sent += dirty.len() as u64;
        s.protocol_ns += clock::since(t0);
        Ok(())
    }

    /// Appends a record to this node's ring at node `h` (published by [`Svm::ring_publish`]).
    fn ring_push(&self, h: usize, kind: u32, payload: &[u8]) -> Result<()> {
        let ring = self.svc.lay.ring;
        let rec = record_len(payload.len());
        if rec > ring / 2 {
            return Err(Error::Protocol(format!(
                "a record of {} bytes",
                payload.len()
            )));
        }
        let base = self.svc.lay.ring(self.me);
        let mut sent = self.wsent.borrow()[h];
        let pos = sent as usize % ring;
        if pos + rec > ring {
            self.ring_room(h, ring - pos + rec)?;
            let wrap = words_to_bytes(&[R_WRAP, 0]);
            self.svc.send(
                &mut self.stats.borrow_mut(),
                To::Ctl(h),
                base + pos,
                &wrap,
                Wake::No,
            )?;
            sent = sent.wrapping_add((ring - pos) as u32);
        } else {
            self.ring_room(h, rec)?;
        }
        let pos = sent as usize % ring;
        let mut b = Vec::with_capacity(rec);
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_ne_bytes());
        b.extend_from_slice(payload);
        b.resize(rec, 0);
        self.svc.send(
            &mut self.stats.borrow_mut(),
            To::Ctl(h),
            base + pos,
            &b,
            Wake::No,
        )?;
        self.wsent.borrow_mut()[h] = sent.wrapping_add(rec as u32);
        self.unpublished.borrow_mut()[h] = true;
        Ok(())
    }

    /// Waits until `bytes` more fit in the ring at `h` (publishing what is there first, so
    /// that the home can consume it).
    fn ring_room(&self, h: usize, bytes: usize) -> Result<()> {
        let ring = self.svc.lay.ring as u32;
        let sent = self.wsent.borrow()[h];
        let credit_at = self.svc.lay.credit(h);
        let fits = |s: &Self| -> Result<bool> {
            let credit = s.svc.ctl.load_u32(credit_at)?;
            Ok(sent.wrapping_sub(credit) as usize + bytes <= ring as usize)
        };
        if fits(self)? {
            return Ok(());
        }
        if self.unpublished.borrow()[h] {
            self.ring_publish(h)?;
        }
        self.wait("room in a home's ring", |s| Ok(fits(s)?.then_some(())))
    }

    /// Publishes the ring's new records: the tail word, with a notification.
    fn ring_publish(&self, h: usize) -> Result<()> {
        let tail = self.wsent.borrow()[h];
        self.svc.send(
            &mut self.stats.borrow_mut(),
            To::Ctl(h),
            self.svc.lay.tail(self.me),
            &tail.to_ne_bytes(),
            Wake::Request,
        )?;
        self.unpublished.borrow_mut()[h] = false;
        Ok(())
    }

    /// Takes in write notices: pages others wrote become invalid here (except at their
    /// home), and remember which of their intervals a fetch must wait for.
    fn apply_notices(&mut self, words: &[u32]) -> Result<()> {
        let new = self.svc.lock().learn(words)?;
        self.invalidate(new)
    }

    /// Invalidates the pages of newly learnt write notices.
    fn invalidate(&mut self, new: Vec<(usize, u32, Vec<u32>)>) -> Result<()> {
        let mut need = self.need.borrow_mut();
        let mut count = 0u64;
        for (j, k, pages) in new {
            for p in pages {
                let p = p as usize;
                if p >= self.pages {
                    return Err(Error::Protocol(format!("write notice for page {p}")));
                }
                count += 1;
                let e = &mut need[p * self.n + j];
                *e = (*e).max(k);
                if self.home[p] as usize != self.me
                    || !self.home_page_current(p, &need[p * self.n..(p + 1) * self.n])?
                {
                    self.state[p].set(INVALID);
                }
            }
        }
        self.stats.borrow_mut().write_notices_received += count;
        Ok(())
    }

    // ----- synchronisation -----

    fn check_lock(&self, lock: u32) -> Result<()> {
        if lock >= self.cfg.locks {
            return Err(Error::LockOutOfRange(lock, self.cfg.locks));
        }
        Ok(())
    }

    /// Asks for lock or flag `id` (a lock at the probable tail of its queue, a flag at its
    /// manager, node `id mod N`) and waits for the grant (from the lock's last holder or the
    /// flag's setter); returns the grant's write notices.
    /// A lock's request goes to `mgr`, the probable tail of the lock's queue
    /// ([`Service::lock_target`]), a flag's to its manager.
    fn request_grant(
        &self,
        (kind, id, arg): (u32, u32, u32),
        mgr: usize,
        vt: &[u32],
        what: &str,
    ) -> Result<Vec<u32>> {
        let seq = self.next_seq();
        if mgr == self.me {
            let mut st = self.svc.lock();
            let w = Waiter {
                from: self.me,
                seq,
                vt: vt.to_vec(),
            };
            if kind == S_LOCK {
                self.svc.lock_request(&mut st, id, w)?;
            } else {
                self.svc.flag_wait(&mut st, id, arg, w)?;
            }
            self.svc.unlock(st)?;
        } else {
            let m = SlotMsg {
                seq,
                kind,
                id,
                arg,
                from: self.me as u32,
                aux: 0,
                vector: vt,
            };
            self.svc.post_slot(
                &mut self.stats.borrow_mut(),
                To::Ctl(mgr),
                self.svc.lay.req(self.me),
                m,
                Wake::Ask,
            )?;
        }
        let (_, notices) = self.wait(what, |s| {
            s.svc.read_mailbox(&s.svc.ctl, s.svc.lay.grant(), seq)
        })?;
        self.svc.answered();
        Ok(notices)
    }

    /// Acquires `lock` (release consistency's acquire: on return this node sees every write
    /// that happened before the lock's last release).
    pub fn acquire(&mut self, lock: u32) -> Result<()> {
        self.check_lock(lock)?;
        let _in = self.svc.awake();
        // (The interval's end counts its own protocol time.)
        self.close_interval()?;
        self.svc.check_failed()?;
        let l = lock as usize;
        let (vt, to) = {
            let mut st = self.svc.lock();
            // Answer what waits here first (a node that re-acquires a lock locally in a
            // loop must still hand it on when asked).
            self.svc.serve(&mut st)?;
            if st.held[l] {
                return Err(Error::Protocol(format!(
                    "acquire of lock {lock}, which this node holds already"
                )));
            }
            if st.token[l] {
                st.held[l] = true;
                self.svc.unlock(st)?;
                pace::charge(Cost::LocalSync);
                self.stats.borrow_mut().local_acquires += 1;
                return Ok(());
            }
            let mut vt = self.req_vt.take();
            vt.clear();
            vt.extend_from_slice(&st.vt);
            // The request goes to the probable tail of the lock's queue.
            let to = self.svc.lock_target(&mut st, lock)?;
            if to == self.me {
                return Err(Error::Protocol(format!(
                    "lock {lock}: this node is the tail of its queue without its token"
                )));
            }
            self.svc.unlock(st)?;
            (vt, to)
        };
        // The clock only where the acquire is remote: a local one costs less than reading it.
        let t0 = clock::stamp();
        let got = self.request_grant((S_LOCK, lock, 0), to, &vt, "a lock grant");
        self.req_vt.replace(vt);
        let notices = got?;
        let new = {
            let mut st = self.svc.lock();
            st.token[l] = true;
            st.held[l] = true;
            st.learn(&notices)?
        };
        self.invalidate(new)?;
        let mut s = self.stats.borrow_mut();
        s.remote_acquires += 1;
        s.protocol_ns += clock::since(t0);
        Ok(())
    }

    /// Releases `lock`: this node's updates reach their homes and the lock goes to the next
    /// node waiting for it, with the write notices it lacks.
    pub fn release(&mut self, lock: u32) -> Result<()> {
        self.check_lock(lock)?;
        let _in = self.svc.awake();
        let mut st = self.svc.lock();
        if !st.held[lock as usize] {
            return Err(Error::NotHeld(lock));
        }
        // The interval's updates reach their homes before anyone can be granted the lock
        // (the state's lock is not held meanwhile: close_interval takes it).
        if !self.dirty.borrow().is_empty() {
            drop(st);
            self.close_interval()?;
            st = self.svc.lock();
        }
        self.svc.check_failed()?;
        st.held[lock as usize] = false;
        if st.waiter[lock as usize].is_some() {
            let t0 = clock::stamp();
            self.svc.pass_on(&mut st, lock)?;
            self.svc.unlock(st)?;
            self.stats.borrow_mut().protocol_ns += clock::since(t0);
            return Ok(());
        }
        drop(st);
        pace::charge(Cost::LocalSync);
        // A request that came meanwhile is served when the call ends (`Awake`) where
        // senders look whether we are inside; elsewhere now.
        if !self.svc.remote_read {
            self.svc.try_serve()?;
        }
        Ok(())
    }

    fn check_flag(&self, flag: u32, value: u32) -> Result<()> {
        if flag >= self.cfg.flags {
            return Err(Error::FlagOutOfRange(flag, self.cfg.flags));
        }
        if value == 0 {
            return Err(Error::Config(
                "flag values start at 1 (0 is the unset flag)".into(),
            ));
        }
        Ok(())
    }

    /// Sets `flag` to `value` (at least 1) with release semantics (SPLASH-2's `SETPAUSE`).
    /// A flag keeps the largest value it was set to; a node whose [`Svm::flag_wait`] for
    /// it returns sees every write made (here or anywhere, as far as this node knew) before
    /// every set of the flag that reached the flag's manager before the wait was granted,
    /// the set that made the flag reach the value among them.
    ///
    /// The set goes to the flag's manager (node `flag mod N`) with the write notices it
    /// does not hold yet from this node, and the manager grants the waits; so these notices
    /// count towards `SVM_NOTICE_AREA` at its waiters.
    pub fn flag_set(&mut self, flag: u32, value: u32) -> Result<()> {
        self.check_flag(flag, value)?;
        let _in = self.svc.awake();
        self.close_interval()?;
        let mgr = flag as usize % self.n;
        if mgr == self.me {
            let mut st = self.svc.lock();
            self.svc.flag_set(&mut st, flag, value)?;
            return self.svc.unlock(st);
        }
        let notices = {
            let st = self.svc.lock();
            let notices = st.notices_since(&self.told[mgr]);
            self.told[mgr].clone_from(&st.vt);
            notices
        };
        // In records that fit the ring (a set's notices can be longer than one).
        let most = (self.svc.lay.ring / 2 - 32) / 4;
        for chunk in notices.chunks(most) {
            self.ring_push(mgr, R_NOTICES, &words_to_bytes(chunk))?;
        }
        self.ring_push(mgr, R_FLAG_SET, &words_to_bytes(&[flag, value]))?;
        self.ring_publish(mgr)
    }

    /// Waits until `flag` is at least `value`, with acquire semantics (`WAITPAUSE`): on
    /// return this node sees what [`Svm::flag_set`] says. A node may wait on a flag it set.
    pub fn flag_wait(&mut self, flag: u32, value: u32) -> Result<()> {
        self.check_flag(flag, value)?;
        let _in = self.svc.awake();
        let t0 = clock::stamp();
        self.close_interval()?;
        let vt = self.svc.lock().vt.clone();
        let notices =
            self.request_grant((S_FLAG, flag, value), flag as usize % self.n, &vt, "a flag")?;
        self.apply_notices(&notices)?;
        let mut s = self.stats.borrow_mut();
        s.flag_waits += 1;
        s.protocol_ns += clock::since(t0);
        Ok(())
    }

    /// A barrier of every node (release then acquire: afterwards every node sees every write
    /// made anywhere before it).
    pub fn barrier(&mut self) -> Result<()> {
        self.collective(fnv(&[3]), &[], "barrier").map(|_| ())
    }

    /// The statistics of every node, gathered at node 0 (collective; `None` elsewhere).
    pub fn gather_stats(&mut self) -> Result<Option<RunStats>> {
        let mine = self.stats().to_words();
        let all = self.collective(fnv(&[4]), &mine, "gather_stats")?;
        Ok(all.map(|v| RunStats::from_nodes(v.iter().map(|w| Stats::from_words(w)).collect())))
    }

    /// A barrier that also checks that every node made the same call (`sig`) and gathers
    /// `extra` at node 0.
    fn collective(&mut self, sig: u64, extra: &[u64], what: &str) -> Result<Option<Vec<Vec<u64>>>> {
        let _in = self.svc.awake();
        let t0 = clock::stamp();
        self.close_interval()?;
        self.epoch = self.epoch.wrapping_add(1).max(1);
        let epoch = self.epoch;
        let (vt, own) = {
            let st = self.svc.lock();
            let mut known = st.vt.clone();
            known[self.me] = self.sent_to_barrier;
            let own = st.notices_since(&known);
            (st.vt.clone(), own)
        };
        self.sent_to_barrier = vt[self.me];
        // [sig lo, sig hi, vt..., extra count, extra (2 words each)..., own notices...]
        let mut p = vec![sig as u32, (sig >> 32) as u32];
        p.extend_from_slice(&vt);
        p.push(extra.len() as u32);
        for &x in extra {
            p.extend_from_slice(&[x as u32, (x >> 32) as u32]);
        }
        p.extend_from_slice(&own);
        let svc = self.svc.clone();
        svc.post_mailbox(
            &mut self.stats.borrow_mut(),
            To::Bar,
            svc.lay.arrival(self.me),
            epoch,
            0,
            &p,
        )?;
        let gathered = if self.me == 0 {
            match self.gather(epoch) {
                Ok(g) => Some(g),
                Err(e) => {
                    // Tell the others, so that nobody waits for a release that never comes.
                    let lost = match &e {
                        Error::PeerLost(r, _) => 100 + *r as u32,
                        _ => 2,
                    };
                    for a in 1..self.n {
                        let _ = svc.post_mailbox(
                            &mut self.stats.borrow_mut(),
                            To::Ctl(a),
                            svc.lay.release(epoch),
                            epoch,
                            lost,
                            &[],
                        );
                    }
                    return Err(e);
                }
            }
        } else {
            None
        };
        // Node 0 sends the release; a node lost before it arrived, node 0 reports in it. Any
        // other node may leave as soon as it has its own release (after the last barrier,
        // `finish`): its departure is no reason to stop waiting for ours.
        let (status, notices) = self.wait_from("the barrier's release", Some(0), |s| {
            s.svc
                .read_mailbox(&s.svc.ctl, s.svc.lay.release(epoch), epoch)
        })?;
        match status {
            0 => {}
            1 => {
                return Err(Error::Mismatch(format!(
                    "collective call {epoch}: this node called {what}, another node something else"
                )))
            }
            s if s >= 100 => {
                return Err(Error::PeerLost(
                    (s - 100) as usize,
                    format!("node 0 found it gone at collective call {epoch} ({what})"),
                ))
            }
            s => return Err(Error::Protocol(format!("barrier status {s}"))),
        }
        self.apply_notices(&notices)?;
        let mut s = self.stats.borrow_mut();
        s.barriers += 1;
        let dt = clock::since(t0);
        s.barrier_wait_ns += dt;
        s.protocol_ns += dt;
        Ok(gathered.map(|g| g.1))
    }

    /// Node 0: waits for every arrival, merges the write notices, sends every node the
    /// release with what it lacks. Returns (all signatures equal, the gathered extras).
    fn gather(&mut self, epoch: u32) -> Result<(bool, Vec<Vec<u64>>)> {
        let n = self.n;
        let bar = self.svc.bar.clone().expect("node 0 has the barrier buffer");
        let mut arrived: Vec<Option<Vec<u32>>> = vec![None; n];
        self.wait("barrier arrivals", |s| {
            for (a, slot) in arrived.iter_mut().enumerate() {
                if slot.is_none() {
                    if let Some((_, w)) = s.svc.read_mailbox(&bar, s.svc.lay.arrival(a), epoch)? {
                        *slot = Some(w);
                    }
                }
            }
            Ok(arrived.iter().all(Option::is_some).then_some(()))
        })?;
        let mut sigs = Vec::new();
        let mut vts = Vec::new();
        let mut extras = Vec::new();
        let mut learnt = Vec::new();
        let mut st = self.svc.lock();
        for w in arrived.into_iter().flatten() {
            let bad = || Error::Protocol("malformed barrier arrival".into());
            let sig =
                *w.first().ok_or_else(bad)? as u64 | (*w.get(1).ok_or_else(bad)? as u64) << 32;
            let vt = w.get(2..2 + n).ok_or_else(bad)?.to_vec();
            let ne = *w.get(2 + n).ok_or_else(bad)? as usize;
            let ex = w.get(3 + n..3 + n + 2 * ne).ok_or_else(bad)?;
            extras.push(
                ex.chunks_exact(2)
                    .map(|c| c[0] as u64 | (c[1] as u64) << 32)
                    .collect(),
            );
            learnt.extend(st.learn(&w[3 + n + 2 * ne..])?);
            sigs.push(sig);
            vts.push(vt);
        }
        let same = sigs.iter().all(|&s| s == sigs[0]);
        let svc = self.svc.clone();
        for (a, vt) in vts.iter().enumerate() {
            let notices = if same {
                st.notices_since(vt)
            } else {
                Vec::new()
            };
            let status = if same { 0 } else { 1 };
            svc.queue_mailbox(
                &mut st.outbox,
                To::Ctl(a),
                svc.lay.release(epoch),
                epoch,
                status,
                &notices,
            )?;
        }
        svc.unlock(st)?;
        // What node 0 learnt here is not new in its own release: invalidate now.
        self.invalidate(learnt)?;
        Ok((same, extras))
    }

    /// This node's statistics (the program's side and the service's).
    pub fn stats(&self) -> Stats {
        let mut s = *self.stats.borrow();
        s.add(&self.svc.lock().stats);
        s.add(&self.svc.sent.lock().unwrap_or_else(|e| e.into_inner()));
        s
    }

    /// Ends this node's use of the space: a last barrier, so that no node leaves while
    /// another may still need its pages or its locks.
    pub fn finish(mut self) -> Result<()> {
        self.barrier()?;
        // Asynchronous sends still in flight (the barrier's releases among them) must land
        // before this process may leave: its transfers end with it.
        self.svc.drain_async()
    }
}
