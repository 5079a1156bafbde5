//! The machine: the scheduler that keeps the nodes in virtual-time order, and the model of the
//! network interface (outgoing FIFO, deliberate-update engine, snooping packetizer, mesh,
//! incoming DMA with its IPT check).
//!
//! One mutex guards the whole machine. Exactly one node's main thread holds the *turn* at a
//! time; it computes freely until its next library call, which charges its CPU time to its
//! clock and gives the turn to whichever node or event is earlier. Events (packet deliveries)
//! are applied only while nobody holds the turn, in time order, so a node that reads its
//! memory sees exactly the packets delivered up to its clock.

use crate::params::{AuMemory, Params};
use crate::stats::NodeStats;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vmmc::redirect::Redirected;
use vmmc::{AuOptions, BufId, Error, Importers, Notification, Region, Result, WORD_SIZE};

/// Virtual nanoseconds.
pub(crate) type Time = u64;

/// A node's main thread that holds the turn this long without a library call while another
/// thread waits for the turn is taken to be blocked outside the library, and loses the turn.
const LEASE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Main {
    /// Wants the turn at its clock.
    Ready,
    /// Holds the turn.
    Running,
    /// Polls: waits for an event delivered to the node.
    Waiting,
    /// Lost the turn while computing (see [`LEASE`]); rejoins at its next call.
    Detached,
    /// The program returned.
    Finished,
    /// Killed.
    Dead,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holder {
    Main(usize),
    Aux(usize, u64),
}

pub(crate) struct Packet {
    src: usize,
    dest: usize,
    page: u64,
    off: usize,
    data: Vec<u8>,
    interrupt: bool,
    msg: u64,
    last: bool,
}

pub(crate) struct Export {
    pub region: Region,
    first_page: u64,
    pub importers: Importers,
    pub redirectable: bool,
    revoked: bool,
    in_flight: usize,
    pub gen: u64,
    /// Cleared when the buffer is revoked or its node killed: importers' stores check it
    /// without the lock ([`Machine::buffer_store`]).
    pub live: std::sync::Arc<AtomicBool>,
    redir: Redir,
}

#[derive(Default)]
struct Redir {
    posted: Option<(Region, usize, usize, usize)>,
    /// The message being redirected and its sender.
    active: Option<(u64, usize)>,
    done: Option<(usize, usize)>,
    data_end: Option<usize>,
}

struct IptEntry {
    buf: BufId,
    index: usize,
    interrupt: bool,
}

/// A combining packet being built by the snoop logic.
struct OpenPacket {
    dest: usize,
    buf: BufId,
    page: u64,
    off: usize,
    data: Vec<u8>,
    notify: bool,
    last_store: Time,
}

/// An automatic-update store (one word) made by a node's program between library calls.
#[derive(Clone, Copy)]
pub(crate) struct Buffered {
    pub owner: usize,
    pub buf: BufId,
    pub gen: u64,
    pub offset: usize,
    pub word: [u8; WORD_SIZE],
    pub opts: AuOptions,
    /// [`stamp`] when it was made: where it falls in the compute of its interval.
    pub stamp: u64,
}

/// A buffered store handed to the scheduler, with the compute charged before it.
struct Pending {
    gap: Time,
    s: Buffered,
}

/// Stores a node may buffer before it hands them to the scheduler.
pub(crate) const STORE_BATCH: usize = 4096;

/// A cheap wall-clock stamp: only ratios of differences within one interval are used.
#[inline]
pub(crate) fn stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64; it only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        wall_ns()
    }
}

/// A refused packet, kept for the run's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IptError {
    /// The receiving node.
    pub node: usize,
    /// The sending node.
    pub from: usize,
    /// The physical page the packet addressed.
    pub page: u64,
    /// When it arrived.
    pub time: Time,
}

pub(crate) struct Node {
    pub clock: Time,
    pub main: Main,
    pending_charge: Time,
    epoch: u64,
    /// `epoch` when the node's main thread last returned from a wait: a poller whose epoch
    /// moved since then has something new to look at and must not wait for the next packet
    /// (a packet delivered while the node was ready or detached, or while a call in between
    /// gave up the turn, would otherwise be missed).
    seen_epoch: u64,
    pub exports: HashMap<BufId, Export>,
    ipt: HashMap<u64, IptEntry>,
    next_page: u64,
    next_gen: u64,
    pub notes: VecDeque<Notification>,
    fifo: VecDeque<(Time, usize)>,
    port_free: Time,
    engine_free: Time,
    outstanding: VecDeque<Time>,
    in_reserved: Time,
    open: Option<OpenPacket>,
    /// Automatic-update stores the node's program made without a library call (see
    /// [`Machine::buffer_store`]), each with the compute that came before it: the scheduler
    /// applies them in virtual-time order among the other nodes' events.
    pending: VecDeque<Pending>,
    /// Compute after the last pending store, before the call that handed them over.
    pending_tail: Time,
    /// The first error of a pending store (its link broke before it took effect): returned by
    /// the node's next automatic-update call.
    store_error: Option<Error>,
    /// Packets this node sent that are not delivered yet: a node that ended stays visible
    /// as alive until they are (what it sent before it left is in memory, as on shm).
    sent_in_flight: usize,
    pub stats: NodeStats,
}

pub(crate) struct State {
    now: Time,
    running: Option<Holder>,
    running_since: Instant,
    events: BinaryHeap<Reverse<(Time, u64)>>,
    packets: HashMap<u64, Packet>,
    seq: u64,
    aux: Vec<(usize, u64)>,
    next_ticket: u64,
    links: Vec<Time>,
    next_msg: u64,
    pub nodes: Vec<Node>,
    pub ipt_errors: Vec<IptError>,
}

pub(crate) type Guard<'a> = MutexGuard<'a, State>;

/// Who is calling: a node's main thread or another thread of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    Main,
    Aux { granted: Option<u64> },
}

pub(crate) struct Machine {
    pub p: Params,
    pub n: usize,
    width: usize,
    st: Mutex<State>,
    main_cv: Vec<Condvar>,
    aux_cv: Condvar,
    ev_cv: Vec<Condvar>,
    id: usize,
    /// A node has a pending store's error to report.
    store_failed: Vec<AtomicBool>,
    /// Host CPU time of one buffered store's own path (measured at start, see
    /// [`measure_store_overhead`]): not charged, the modelled store cost stands for it.
    store_overhead_ns: f64,
}

thread_local! {
    /// (machine id, node) of the node whose main thread this is.
    static MAIN_OF: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
    /// Thread CPU time at the end of the last library call.
    static CPU_MARK: Cell<u64> = const { Cell::new(0) };
    /// [`wall_ns`] at the end of the last library call.
    static WALL_MARK: Cell<u64> = const { Cell::new(0) };
    /// [`stamp`] at the end of the last library call.
    static STAMP_MARK: Cell<u64> = const { Cell::new(0) };
    /// The automatic-update stores made since the last library call (main threads only).
    static STORES: RefCell<Vec<Buffered>> = const { RefCell::new(Vec::new()) };
}

/// Pushes a store to the calling thread's buffer; returns the number buffered.
#[inline]
fn push_store(s: Buffered) -> usize {
    STORES.with(|b| {
        let mut b = b.borrow_mut();
        b.push(s);
        b.len()
    })
}

/// Host CPU time of one buffered store on this thread: the library's own work per store
/// (the local write, the link checks, the stamp, the push), which a SHRIMP store does not
/// pay beyond the modelled `costs.au_store_*_ns`. The least of a few timed loops.
fn measure_store_overhead() -> f64 {
    const N: usize = 4096;
    let words: Vec<std::sync::atomic::AtomicU32> = (0..N)
        .map(|_| std::sync::atomic::AtomicU32::new(0))
        .collect();
    let flag = AtomicBool::new(false);
    let counter = AtomicU64::new(0);
    let mut v: Vec<Buffered> = Vec::with_capacity(N);
    let mut best = f64::MAX;
    for _ in 0..5 {
        v.clear();
        let t0 = thread_cpu_ns();
        for (i, w) in words.iter().enumerate() {
            let i = std::hint::black_box(i);
            w.store(i as u32, Ordering::Release);
            if flag.load(Ordering::Relaxed) || counter.load(Ordering::Relaxed) == u64::MAX {
                break;
            }
            v.push(Buffered {
                owner: i & 15,
                buf: 1,
                gen: 1,
                offset: i * 4,
                word: (i as u32).to_ne_bytes(),
                opts: AuOptions::default(),
                stamp: stamp(),
            });
            std::hint::black_box(&v);
        }
        let t = thread_cpu_ns().saturating_sub(t0);
        best = best.min(t as f64 / N as f64);
    }
    // A loop that was de-scheduled or ran on a cold machine can only have taken longer.
    best
}

/// Nanoseconds of a monotonic clock (read in user space, through the vDSO: about 30 ns).
fn wall_ns() -> u64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The clocks read where a library call starts on a node's main thread, which end the
/// interval of the program's own computation.
#[derive(Clone, Copy, Default)]
struct Marks {
    cpu: u64,
    wall: u64,
    stamp: u64,
}

impl Marks {
    /// Reads the clocks at the start of a call: the wall clock first, so that the interval
    /// it ends leaves out the system call that reads the CPU clock.
    fn now() -> Marks {
        let wall = wall_ns();
        let cpu = thread_cpu_ns();
        Marks {
            cpu,
            wall,
            stamp: stamp(),
        }
    }

    /// The host time of the program's computation since the end of the last call: the
    /// thread's CPU time, or the wall time where that is less. The CPU clock leaves out the
    /// time the thread was not running (preempted, descheduled by the host), but it is
    /// read by a system call (0.3-1 us on the VMs measured here), half of each of the two
    /// reads falling inside the interval; the wall clock is read in user space outside
    /// them both. Measured on a 16-node SVM lock ping-pong, the reads were half of a typical
    /// interval's CPU time (crate docs, "Time").
    fn interval(&self) -> u64 {
        let cpu = self.cpu.saturating_sub(CPU_MARK.with(|c| c.get()));
        let wall = self.wall.saturating_sub(WALL_MARK.with(|c| c.get()));
        cpu.min(wall)
    }
}

/// Ends a call on a node's main thread: the program's computation starts. The CPU clock
/// first, then the wall clock (see [`Marks::interval`]).
fn set_marks() {
    CPU_MARK.with(|c| c.set(thread_cpu_ns()));
    WALL_MARK.with(|c| c.set(wall_ns()));
    STAMP_MARK.with(|c| c.set(stamp()));
}

pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds to move `bytes` at `mb_s` MB/s.
fn xfer(bytes: usize, mb_s: f64) -> Time {
    (bytes as f64 * 1000.0 / mb_s).round() as Time
}

fn lock_of(m: &Mutex<State>) -> Guard<'_> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Machine {
    pub fn new(n: usize, p: Params) -> Machine {
        static IDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        let width = if p.network.mesh_width > 0 {
            p.network.mesh_width
        } else {
            (1..).find(|w| w * w >= n).unwrap_or(1)
        };
        let nodes = (0..n)
            .map(|_| Node {
                clock: 0,
                // Every node starts ready at time 0; its thread waits for its first turn.
                main: Main::Ready,
                pending_charge: 0,
                epoch: 0,
                seen_epoch: 0,
                exports: HashMap::new(),
                ipt: HashMap::new(),
                next_page: 1,
                next_gen: 1,
                notes: VecDeque::new(),
                fifo: VecDeque::new(),
                port_free: 0,
                engine_free: 0,
                outstanding: VecDeque::new(),
                in_reserved: 0,
                open: None,
                pending: VecDeque::new(),
                pending_tail: 0,
                store_error: None,
                sent_in_flight: 0,
                stats: NodeStats::default(),
            })
            .collect();
        let rows = n.div_ceil(width);
        Machine {
            width,
            st: Mutex::new(State {
                now: 0,
                running: None,
                running_since: Instant::now(),
                events: BinaryHeap::new(),
                packets: HashMap::new(),
                seq: 0,
                aux: Vec::new(),
                next_ticket: 1,
                links: vec![0; width * rows.max(1) * 4],
                next_msg: 1,
                nodes,
                ipt_errors: Vec::new(),
            }),
            main_cv: (0..n).map(|_| Condvar::new()).collect(),
            aux_cv: Condvar::new(),
            ev_cv: (0..n).map(|_| Condvar::new()).collect(),
            store_failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            store_overhead_ns: measure_store_overhead(),
            p,
            n,
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    pub fn lock(&self) -> Guard<'_> {
        lock_of(&self.st)
    }

    fn is_main_thread(&self, node: usize) -> bool {
        MAIN_OF.with(|c| c.get()) == Some((self.id, node))
    }

    // ----- node threads -----

    /// Called on a node's main thread before its program runs: waits for its first turn.
    pub fn start_node(&self, node: usize) {
        MAIN_OF.with(|c| c.set(Some((self.id, node))));
        let mut st = self.lock();
        self.dispatch(&mut st);
        let st = self.wait_grant(st, node);
        drop(st);
        set_marks();
    }

    /// Called when a node's program has returned (or its thread unwound).
    pub fn end_node(&self, node: usize, dead: bool) {
        let marks = Marks::now();
        let mut st = self.lock();
        if self.is_main_thread(node) {
            // The program's stores were handed over by its last call (`run_node`); any left
            // belong to a node that died.
            self.discard_buffered();
            self.charge(&mut st, node, marks);
        }
        self.flush_open(&mut st, node);
        let nd = &mut st.nodes[node];
        if nd.main != Main::Dead {
            nd.main = if dead { Main::Dead } else { Main::Finished };
        }
        nd.stats.end_ns = nd.clock;
        if matches!(st.running, Some(Holder::Main(h)) if h == node) {
            st.running = None;
        }
        self.wake_all(&mut st);
        self.dispatch(&mut st);
        MAIN_OF.with(|c| c.set(None));
    }

    /// Whether `node` counts as alive for its peers: running, or ended with packets still
    /// on their way.
    pub fn alive(&self, st: &State, node: usize) -> bool {
        let nd = &st.nodes[node];
        !matches!(nd.main, Main::Dead | Main::Finished) || nd.sent_in_flight > 0
    }

    pub fn dead(&self, st: &State, node: usize) -> bool {
        st.nodes[node].main == Main::Dead
    }

    /// Charges the computation since the last call (up to `marks`, which the caller reads
    /// before it takes the machine's lock; see [`Marks::interval`]) to the node's clock.
    /// Automatic-update stores the program made in the interval ([`Machine::buffer_store`]) become the node's pending
    /// stores: the interval's compute is spread over the gaps before, between and after them
    /// in proportion to the wall time of each gap, and the scheduler applies them in time
    /// order ([`Machine::dispatch`]). Returns whether stores are pending.
    fn charge(&self, st: &mut State, node: usize, marks: Marks) -> bool {
        let real = marks.interval();
        let now_stamp = marks.stamp;
        STORES.with(|b| {
            let mut b = b.borrow_mut();
            // One floor per interval (one library call), and the library's own path per
            // buffered store: neither is the program's computation.
            let own = self.p.cpu.compute_floor_ns as f64 + b.len() as f64 * self.store_overhead_ns;
            let c = ((real as f64 - own).max(0.0) * self.p.cpu.compute_scale) as Time;
            let nd = &mut st.nodes[node];
            nd.clock += std::mem::take(&mut nd.pending_charge);
            nd.stats.compute_ns += c;
            if b.is_empty() {
                nd.clock += c;
                return false;
            }
            let start = STAMP_MARK.with(|m| m.get());
            let span = now_stamp.saturating_sub(start).max(1) as f64;
            let mut prev = start;
            let mut given = 0;
            for s in b.drain(..) {
                let at = s.stamp.clamp(prev, now_stamp.max(prev));
                let upto = ((at - start) as f64 / span * c as f64) as Time;
                let upto = upto.clamp(given, c);
                nd.pending.push_back(Pending {
                    gap: upto - given,
                    s,
                });
                given = upto;
                prev = at;
            }
            nd.pending_tail += c - given;
            true
        })
    }

    /// Buffers an automatic-update store of `node`'s main thread, made without a library
    /// call as on SHRIMP (a plain memory write snooped by the interface). Returns `None` when
    /// the store must go through a call instead (another thread, a link that broke (`live`
    /// cleared), an error to report), else the number buffered.
    #[inline]
    pub fn buffer_store(&self, node: usize, live: &AtomicBool, s: Buffered) -> Option<usize> {
        if !live.load(Ordering::Acquire)
            || !self.is_main_thread(node)
            || self.store_failed[node].load(Ordering::Relaxed)
        {
            return None;
        }
        Some(push_store(s))
    }

    /// Whether the calling thread has buffered stores.
    pub fn has_buffered(&self) -> bool {
        STORES.with(|b| !b.borrow().is_empty())
    }

    /// Drops the calling thread's buffered stores (its node is gone).
    pub fn discard_buffered(&self) {
        STORES.with(|b| b.borrow_mut().clear());
    }

    /// The error of a pending store of `node`, once.
    pub fn take_store_error(&self, st: &mut State, node: usize) -> Result<()> {
        match st.nodes[node].store_error.take() {
            Some(e) => {
                self.store_failed[node].store(false, Ordering::Relaxed);
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Applies `node`'s first pending store at its time.
    fn apply_pending(&self, st: &mut State, node: usize) {
        let Some(Pending { gap, s }) = st.nodes[node].pending.pop_front() else {
            return;
        };
        st.nodes[node].clock += gap;
        st.now = st.now.max(st.nodes[node].clock);
        if let Err(e) = self.au_store(
            st,
            Caller::Main,
            node,
            s.owner,
            s.buf,
            s.gen,
            s.offset,
            &s.word,
            s.opts,
        ) {
            let nd = &mut st.nodes[node];
            if nd.store_error.is_none() {
                nd.store_error = Some(e);
                self.store_failed[node].store(true, Ordering::Relaxed);
            }
        }
        let nd = &mut st.nodes[node];
        if nd.pending.is_empty() {
            nd.clock += std::mem::take(&mut nd.pending_tail);
        }
    }

    /// Starts a library call on `node`: on its main thread, charges compute and waits until
    /// the node is the earliest; elsewhere, waits for the node's turn (or rides on it).
    pub fn enter(&self, node: usize) -> Result<(Guard<'_>, Caller)> {
        let main = self.is_main_thread(node);
        // The interval ends here, before the machine's lock: the time spent waiting for
        // the lock (a spin, a futex call) is the simulator's, not the program's.
        let marks = if main { Marks::now() } else { Marks::default() };
        let mut st = self.lock();
        if self.dead(&st, node) {
            return Err(Error::PeerLost(format!("node {node} (this node) is dead")));
        }
        if main {
            let pending = self.charge(&mut st, node, marks);
            let main = st.nodes[node].main;
            if pending && main == Main::Running {
                // The stores take effect in time order among the other nodes' events; the
                // node runs again once they all have and it is the earliest.
                st.nodes[node].main = Main::Ready;
                st.running = None;
                self.dispatch(&mut st);
                st = self.wait_grant(st, node);
            } else if main == Main::Detached {
                let now = st.now;
                let nd = &mut st.nodes[node];
                nd.clock = nd.clock.max(now);
                nd.main = Main::Ready;
                self.dispatch(&mut st);
                st = self.wait_grant(st, node);
            } else if main == Main::Running {
                st.running_since = Instant::now();
                if !self.is_earliest(&st, node) {
                    st.nodes[node].main = Main::Ready;
                    st.running = None;
                    self.dispatch(&mut st);
                    st = self.wait_grant(st, node);
                }
            }
            self.expire_open(&mut st, node);
            Ok((st, Caller::Main))
        } else {
            match st.running {
                Some(Holder::Main(h)) | Some(Holder::Aux(h, _)) if h == node => {
                    Ok((st, Caller::Aux { granted: None }))
                }
                _ => {
                    let t = st.next_ticket;
                    st.next_ticket += 1;
                    st.aux.push((node, t));
                    self.dispatch(&mut st);
                    let st = self.wait_aux(st, node, t);
                    Ok((st, Caller::Aux { granted: Some(t) }))
                }
            }
        }
    }

    /// Runs `f` as one library call of `node` ([`Machine::enter`] to [`Machine::leave`]).
    pub fn call<R>(
        &self,
        node: usize,
        f: impl FnOnce(&Machine, &mut State, Caller) -> Result<R>,
    ) -> Result<R> {
        let (mut st, caller) = self.enter(node)?;
        let r = f(self, &mut st, caller);
        self.leave(st, caller);
        r
    }

    /// Ends a library call.
    pub fn leave(&self, mut st: Guard<'_>, caller: Caller) {
        match caller {
            Caller::Main => {
                // `seen_epoch` moves only when a wait returns: a call that gave up the turn
                // may have let packets in that the program has not looked at yet.
                drop(st);
                set_marks();
            }
            Caller::Aux { granted: Some(t) } => {
                if st.running == Some(Holder::Aux(self.node_of_ticket(&st, t), t)) {
                    st.running = None;
                    self.dispatch(&mut st);
                }
            }
            Caller::Aux { granted: None } => {}
        }
    }

    fn node_of_ticket(&self, st: &State, t: u64) -> usize {
        match st.running {
            Some(Holder::Aux(n, x)) if x == t => n,
            _ => usize::MAX,
        }
    }

    fn is_earliest(&self, st: &State, node: usize) -> bool {
        let me = (st.nodes[node].clock, node);
        if let Some(Reverse((t, _))) = st.events.peek() {
            if *t <= me.0 {
                return false;
            }
        }
        for (i, nd) in st.nodes.iter().enumerate() {
            if i != node && nd.main == Main::Ready && (nd.clock, i) < me {
                return false;
            }
        }
        st.aux
            .iter()
            .all(|&(n, _)| (st.nodes[n].clock, n) >= me || n == node)
    }

    fn quiescent(&self, st: &State) -> bool {
        st.running.is_none()
            && st.events.is_empty()
            && st.aux.is_empty()
            && st.nodes.iter().all(|n| n.main != Main::Ready)
    }

    /// Gives the turn to the earliest ready node or aux request, applying every event that
    /// comes before it.
    fn dispatch(&self, st: &mut State) {
        loop {
            if st.running.is_some() {
                return;
            }
            let mut best: Option<(Time, usize, u8, u64)> = None;
            for (i, nd) in st.nodes.iter().enumerate() {
                if nd.main == Main::Ready {
                    let at = nd.clock + nd.pending.front().map_or(0, |p| p.gap);
                    let k = (at, i, 0u8, 0u64);
                    if best.is_none_or(|b| k < b) {
                        best = Some(k);
                    }
                }
            }
            for &(n, t) in &st.aux {
                let k = (st.nodes[n].clock, n, 1u8, t);
                if best.is_none_or(|b| k < b) {
                    best = Some(k);
                }
            }
            let ev = st.events.peek().map(|Reverse((t, s))| (*t, *s));
            match (ev, best) {
                (Some((t, s)), b) if b.is_none_or(|b| t <= b.0) => {
                    st.events.pop();
                    st.now = st.now.max(t);
                    if let Some(p) = st.packets.remove(&s) {
                        self.deliver(st, p, t);
                    }
                }
                (_, Some((_, node, 0, _))) if !st.nodes[node].pending.is_empty() => {
                    self.apply_pending(st, node);
                }
                (_, Some((clock, node, kind, ticket))) => {
                    st.now = st.now.max(clock);
                    st.running_since = Instant::now();
                    if kind == 0 {
                        st.nodes[node].main = Main::Running;
                        st.running = Some(Holder::Main(node));
                        self.main_cv[node].notify_all();
                    } else {
                        st.aux.retain(|&(_, t)| t != ticket);
                        st.running = Some(Holder::Aux(node, ticket));
                        self.aux_cv.notify_all();
                    }
                    return;
                }
                _ => {
                    // Nothing can happen in virtual time: pollers re-check in real time.
                    for (i, nd) in st.nodes.iter().enumerate() {
                        if nd.main == Main::Waiting {
                            self.main_cv[i].notify_all();
                        }
                    }
                    for cv in &self.ev_cv {
                        cv.notify_all();
                    }
                    return;
                }
            }
        }
    }

    /// Takes the turn back from a main thread that has held it too long without a call while
    /// others wait.
    fn check_lease(&self, st: &mut State) {
        if let Some(Holder::Main(h)) = st.running {
            if st.running_since.elapsed() > LEASE {
                st.nodes[h].main = Main::Detached;
                st.running = None;
                self.dispatch(st);
            }
        }
    }

    fn wait_grant<'a>(&'a self, mut st: Guard<'a>, node: usize) -> Guard<'a> {
        let mut spins = 0;
        // Grants come with a notification; the timeout is only the fallback for the lease
        // and for pollers that nothing in virtual time can wake. It grows, so an idle node
        // sleeps.
        let mut backoff = Duration::from_micros(50);
        loop {
            if st.running == Some(Holder::Main(node)) || st.nodes[node].main == Main::Dead {
                return st;
            }
            // A short real-time spin first: hand-overs between two nodes are frequent.
            if spins < 50 {
                spins += 1;
                drop(st);
                std::thread::yield_now();
                st = self.lock();
                continue;
            }
            let (g, to) = self.main_cv[node]
                .wait_timeout(st, backoff)
                .unwrap_or_else(|e| e.into_inner());
            st = g;
            if to.timed_out() {
                backoff = (backoff * 2).min(Duration::from_millis(5));
                self.check_lease(&mut st);
                if st.nodes[node].main == Main::Waiting && self.quiescent(&st) {
                    // Nothing in virtual time can wake this poller: let it look again (what
                    // it waits for may come from outside the simulation, e.g. a handler).
                    let now = st.now;
                    let nd = &mut st.nodes[node];
                    nd.clock = nd.clock.max(now);
                    nd.main = Main::Ready;
                    self.dispatch(&mut st);
                }
            }
        }
    }

    fn wait_aux<'a>(&'a self, mut st: Guard<'a>, node: usize, t: u64) -> Guard<'a> {
        loop {
            if st.running == Some(Holder::Aux(node, t)) {
                return st;
            }
            let (g, to) = self
                .aux_cv
                .wait_timeout(st, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner());
            st = g;
            if to.timed_out() {
                self.check_lease(&mut st);
            }
        }
    }

    /// Waits for an event delivered to `node` (the library's polling call).
    pub fn wait_event<'a>(
        &'a self,
        mut st: Guard<'a>,
        node: usize,
        caller: &mut Caller,
    ) -> Guard<'a> {
        match *caller {
            Caller::Main => {
                self.flush_open(&mut st, node);
                let nd = &mut st.nodes[node];
                if nd.epoch != nd.seen_epoch {
                    // Something arrived since the program last looked: let it look again.
                    nd.seen_epoch = nd.epoch;
                    return st;
                }
                let before = st.nodes[node].clock;
                st.nodes[node].main = Main::Waiting;
                st.running = None;
                self.dispatch(&mut st);
                st = self.wait_grant(st, node);
                let nd = &mut st.nodes[node];
                nd.stats.blocked_ns += nd.clock.saturating_sub(before);
                // The program looks after this: what arrives later wakes its next wait.
                nd.seen_epoch = nd.epoch;
                st
            }
            Caller::Aux { granted } => {
                if let Some(t) = granted {
                    if st.running == Some(Holder::Aux(node, t)) {
                        st.running = None;
                        self.dispatch(&mut st);
                    }
                }
                let epoch = st.nodes[node].epoch;
                let (g, _) = self.ev_cv[node]
                    .wait_timeout_while(st, Duration::from_millis(5), |s| {
                        s.nodes[node].epoch == epoch
                    })
                    .unwrap_or_else(|e| e.into_inner());
                st = g;
                if granted.is_some() {
                    let t = st.next_ticket;
                    st.next_ticket += 1;
                    st.aux.push((node, t));
                    self.dispatch(&mut st);
                    st = self.wait_aux(st, node, t);
                    *caller = Caller::Aux { granted: Some(t) };
                }
                st
            }
        }
    }

    /// Waits for notifications on the node's notification thread (no turn needed).
    pub fn wait_notes<'a>(&'a self, st: Guard<'a>, node: usize, timeout: Duration) -> Guard<'a> {
        let epoch = st.nodes[node].epoch;
        self.ev_cv[node]
            .wait_timeout_while(st, timeout, |s| {
                s.nodes[node].epoch == epoch && s.nodes[node].notes.is_empty()
            })
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Wakes the node's notification thread (`Transport::wake`).
    pub fn kick(&self, node: usize) {
        let mut st = self.lock();
        st.nodes[node].epoch += 1;
        self.ev_cv[node].notify_all();
    }

    fn wake(&self, st: &mut State, node: usize, t: Time) {
        let poll = self.p.costs.poll_ns;
        let nd = &mut st.nodes[node];
        nd.epoch += 1;
        if nd.main == Main::Waiting {
            nd.main = Main::Ready;
            nd.clock = nd.clock.max(t) + poll;
        }
        self.ev_cv[node].notify_all();
    }

    fn wake_all(&self, st: &mut State) {
        let now = st.now;
        for i in 0..self.n {
            self.wake(st, i, now);
        }
    }

    /// Marks a node dead now (its thread then unwinds).
    pub fn kill(&self, node: usize) {
        let mut st = self.lock();
        for x in st.nodes[node].exports.values() {
            x.live.store(false, Ordering::Release);
        }
        let now = st.now;
        let nd = &mut st.nodes[node];
        nd.main = Main::Dead;
        nd.clock = nd.clock.max(now);
        if matches!(st.running, Some(Holder::Main(h)) | Some(Holder::Aux(h, _)) if h == node) {
            st.running = None;
        }
        st.aux.retain(|&(n, _)| n != node);
        self.wake_all(&mut st);
        self.dispatch(&mut st);
    }

    // ----- the network interface -----

    fn coords(&self, node: usize) -> (usize, usize) {
        (node % self.width, node / self.width)
    }

    /// The directed links of the dimension-order route from `a` to `b`.
    fn route(&self, a: usize, b: usize, out: &mut Vec<usize>) {
        out.clear();
        let (mut x, mut y) = self.coords(a);
        let (bx, by) = self.coords(b);
        while x != bx {
            let (dir, nx) = if bx > x { (0, x + 1) } else { (1, x - 1) };
            out.push((y * self.width + x) * 4 + dir);
            x = nx;
        }
        while y != by {
            let (dir, ny) = if by > y { (2, y + 1) } else { (3, y - 1) };
            out.push((y * self.width + x) * 4 + dir);
            y = ny;
        }
    }

    /// Puts a packet into `src`'s outgoing FIFO at `ready` and schedules its delivery.
    /// Returns when the FIFO accepted it (later than `ready` when it was full, or, for
    /// automatic update, above its threshold: then the writer was de-scheduled).
    fn emit(&self, st: &mut State, pkt: Packet, ready: Time, au: bool) -> Time {
        self.emit_from(st, pkt, ready, ready, au)
    }

    /// [`Machine::emit`] for a packet whose data enters the FIFO from `first` (its head) to
    /// `ready` (its tail: the end of a DMA read).
    fn emit_from(&self, st: &mut State, pkt: Packet, first: Time, ready: Time, au: bool) -> Time {
        let p = &self.p;
        let src = pkt.src;
        let dest = pkt.dest;
        let size = pkt.data.len() + p.ni.packet_header;
        let mut t_in = first;
        {
            let nd = &mut st.nodes[src];
            while nd.fifo.front().is_some_and(|&(t, _)| t <= t_in) {
                nd.fifo.pop_front();
            }
            let occupied: usize = nd.fifo.iter().map(|&(_, b)| b).sum();
            let limit = if au {
                p.ni.fifo_threshold
            } else {
                p.ni.fifo_capacity
            };
            if occupied + size > limit {
                // Drain to the resume level (AU: after a threshold interrupt) or to room.
                // (A packet larger than the FIFO streams through an empty one.)
                let target = if au {
                    p.ni.fifo_resume
                } else {
                    p.ni.fifo_capacity.saturating_sub(size)
                };
                let mut left = occupied;
                let mut t = t_in;
                for &(end, b) in &nd.fifo {
                    if left <= target {
                        break;
                    }
                    left -= b;
                    t = end;
                }
                if au {
                    nd.stats.fifo_threshold_events += 1;
                    nd.stats.interrupts += 1;
                    t += p.costs.interrupt_ns;
                }
                nd.stats.blocked_ns += t - t_in;
                t_in = t;
                while nd.fifo.front().is_some_and(|&(e, _)| e <= t_in) {
                    nd.fifo.pop_front();
                }
            }
        }
        let mut path = Vec::with_capacity(16);
        self.route(src, dest, &mut path);
        let hops = path.len() as Time;
        let ser = xfer(size, p.network.link_mb_s);
        let drain = xfer(size, p.ni.fifo_drain_mb_s).max(ser);
        let mut start = t_in.max(st.nodes[src].port_free);
        for &l in &path {
            start = start.max(st.links[l]);
        }
        // Wormhole back-pressure: the network holds little ahead of the receiver's DMA.
        start = start.max(
            st.nodes[dest]
                .in_reserved
                .saturating_sub(p.ni.network_buffer_ns),
        );
        // Cut-through: the packet leaves as its data comes in (a DMA read still running
        // ends at `ready`), and the receiver's DMA starts on the head and ends no earlier
        // than the tail.
        let depart_end = (start + drain).max(ready);
        let head = start + p.ni.nic_out_ns + hops * p.network.hop_ns;
        let tail = depart_end + p.ni.nic_out_ns + hops * p.network.hop_ns;
        for &l in &path {
            st.links[l] = tail;
        }
        let in_start = (head + p.ni.nic_in_ns).max(st.nodes[dest].in_reserved);
        let done = (in_start + p.ni.in_dma_start_ns + xfer(pkt.data.len(), p.bus.dma_mb_s))
            .max(tail + p.ni.nic_in_ns);
        st.nodes[dest].in_reserved = done;
        {
            let nd = &mut st.nodes[src];
            nd.port_free = depart_end;
            nd.fifo.push_back((depart_end, size));
            nd.sent_in_flight += 1;
            let occ: usize = nd.fifo.iter().map(|&(_, b)| b).sum();
            nd.stats.fifo_max_bytes = nd.stats.fifo_max_bytes.max(occ as u64);
            nd.stats.packets_out += 1;
            nd.stats.bytes_out += pkt.data.len() as u64;
            if au {
                nd.stats.au_packets += 1;
            }
        }
        if let Some(buf) = st.nodes[dest].ipt.get(&pkt.page).map(|e| e.buf) {
            if let Some(x) = st.nodes[dest].exports.get_mut(&buf) {
                x.in_flight += 1;
            }
        }
        let seq = st.seq;
        st.seq += 1;
        st.events.push(Reverse((done, seq)));
        st.packets.insert(seq, pkt);
        t_in
    }

    /// The incoming DMA engine writes a packet to memory (at `t`), after the IPT check.
    fn deliver(&self, st: &mut State, pkt: Packet, t: Time) {
        let src = &mut st.nodes[pkt.src];
        src.sent_in_flight -= 1;
        if src.sent_in_flight == 0 && matches!(src.main, Main::Dead | Main::Finished) {
            // Its peers may be waiting to learn that it is gone.
            self.wake_all(st);
        }
        let dest = pkt.dest;
        let page = self.p.bus.page_size;
        let Some((buf, index, ipt_int)) = st.nodes[dest]
            .ipt
            .get(&pkt.page)
            .map(|e| (e.buf, e.index, e.interrupt))
        else {
            // Not enabled: the receive path freezes, an interrupt reports it, nothing is
            // written. System software unfreezes it after the interrupt.
            let nd = &mut st.nodes[dest];
            nd.stats.ipt_violations += 1;
            nd.stats.interrupts += 1;
            nd.in_reserved = nd.in_reserved.max(t) + self.p.costs.interrupt_ns;
            nd.pending_charge += self.p.costs.interrupt_ns;
            st.ipt_errors.push(IptError {
                node: dest,
                from: pkt.src,
                page: pkt.page,
                time: t,
            });
            self.wake(st, dest, t);
            return;
        };
        let every = self.p.switches.interrupt_every_message;
        let interrupt_ns = self.p.costs.interrupt_ns;
        let nd = &mut st.nodes[dest];
        nd.stats.packets_in += 1;
        nd.stats.bytes_in += pkt.data.len() as u64;
        let Some(x) = nd.exports.get_mut(&buf) else {
            return;
        };
        x.in_flight = x.in_flight.saturating_sub(1);
        let offset = index * page + pkt.off;
        let n = pkt.data.len();
        if x.redirectable {
            place_redirected(x, offset, &pkt.data, (pkt.msg, pkt.src), pkt.last);
        } else {
            place(&x.region, offset, &pkt.data);
        }
        let last_word = offset + n - WORD_SIZE;
        let value = u32::from_ne_bytes(pkt.data[n - WORD_SIZE..].try_into().expect("a word"));
        let mut interrupts = 0;
        if pkt.interrupt && ipt_int && pkt.last {
            nd.notes.push_back(Notification {
                buf,
                offset: last_word,
                value,
            });
            nd.stats.notifications += 1;
            interrupts += 1;
        } else if every && pkt.last {
            interrupts += 1;
        }
        nd.stats.interrupts += interrupts;
        nd.pending_charge += interrupts * interrupt_ns;
        self.wake(st, dest, t);
    }

    /// Sends the combining packet now (a non-consecutive store, a boundary, a flush).
    fn close_open(&self, st: &mut State, node: usize, at: Time) -> Time {
        let Some(o) = st.nodes[node].open.take() else {
            return at;
        };
        let msg = st.next_msg;
        st.next_msg += 1;
        let pkt = Packet {
            src: node,
            dest: o.dest,
            page: o.page,
            off: o.off,
            data: o.data,
            interrupt: o.notify,
            msg,
            last: true,
        };
        self.emit(st, pkt, at, true)
    }

    /// Sends the combining packet if its timer has expired by the node's clock.
    fn expire_open(&self, st: &mut State, node: usize) {
        let timer = self.p.ni.combine_timer_ns;
        if let Some(o) = &st.nodes[node].open {
            let deadline = o.last_store + timer;
            if deadline <= st.nodes[node].clock {
                self.close_open(st, node, deadline);
            }
        }
    }

    /// Sends the combining packet at its timer (the node stops storing: it waits or ends).
    fn flush_open(&self, st: &mut State, node: usize) {
        let timer = self.p.ni.combine_timer_ns;
        if let Some(o) = &st.nodes[node].open {
            let at = o.last_store + timer;
            self.close_open(st, node, at);
        }
    }

    /// `buf` of `owner` as a link from `node` sees it: live, or why not.
    pub fn check_link(&self, st: &State, owner: usize, buf: BufId, gen: u64) -> Result<u64> {
        if self.dead(st, owner) {
            return Err(Error::PeerLost(format!("node {owner}")));
        }
        match st.nodes[owner].exports.get(&buf) {
            Some(x) if x.gen == gen && !x.revoked => Ok(x.first_page),
            _ => Err(Error::Unexported),
        }
    }

    /// A deliberate update of `data` to `buf` at `offset` (checked by the core).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        st: &mut State,
        caller: Caller,
        node: usize,
        owner: usize,
        buf: BufId,
        gen: u64,
        offset: usize,
        data: &[u8],
        notify: bool,
        asynchronous: bool,
    ) -> Result<()> {
        let first_page = self.check_link(st, owner, buf, gen)?;
        let p = &self.p;
        let page = p.bus.page_size;
        let main = caller == Caller::Main;
        let mut c = st.nodes[node].clock;
        let start_clock = c;
        let mut cpu = 0;
        if p.switches.syscall_per_send {
            cpu += p.costs.syscall_ns;
            c += p.costs.syscall_ns;
            st.nodes[node].stats.syscalls += 1;
        }
        let msg = st.next_msg;
        st.next_msg += 1;
        st.nodes[node].stats.du_messages += 1;
        // Split at page boundaries. The model cannot know where a host buffer would sit in
        // the modelled address space; it places sources at the page offset of their
        // destination (as automatic update requires anyway), so local and remote page
        // boundaries coincide, and times do not depend on where the host's allocator put
        // the data.
        let mut pos = 0;
        while pos < data.len() {
            let len = (page - (offset + pos) % page).min(data.len() - pos);
            let nd = &mut st.nodes[node];
            while nd.outstanding.front().is_some_and(|&t| t <= c) {
                nd.outstanding.pop_front();
            }
            while nd.outstanding.len() > p.ni.du_queue_depth {
                let t = nd.outstanding.pop_front().expect("non-empty");
                c = c.max(t);
            }
            c += p.costs.du_initiate_ns;
            cpu += p.costs.du_initiate_ns;
            nd.stats.du_initiations += 1;
            let begin = c.max(nd.engine_free);
            let first = begin + p.ni.du_dma_start_ns;
            let ready = first + xfer(len, p.bus.dma_mb_s);
            let dst = offset + pos;
            let pkt = Packet {
                src: node,
                dest: owner,
                page: first_page + (dst / page) as u64,
                off: dst % page,
                data: data[pos..pos + len].to_vec(),
                interrupt: notify,
                msg,
                last: pos + len == data.len(),
            };
            let accepted = self.emit_from(st, pkt, first, ready, false);
            let nd = &mut st.nodes[node];
            // The engine is free when the read is done (later if the FIFO had no room).
            let free = ready.max(accepted);
            nd.engine_free = free;
            nd.outstanding.push_back(free);
            pos += len;
        }
        let nd = &mut st.nodes[node];
        if main && !asynchronous {
            // A blocking send returns when the data has left memory.
            let done = c.max(nd.engine_free);
            nd.stats.blocked_ns += done - start_clock - cpu.min(done - start_clock);
            nd.clock = done;
        } else if main {
            // An asynchronous send returns once its pieces are initiated: after the
            // initiations, and after waiting for room in the request queue.
            nd.stats.blocked_ns += c - start_clock - cpu.min(c - start_clock);
            nd.clock = c;
        } else {
            nd.clock += cpu;
        }
        Ok(())
    }

    /// Automatic update: `data` was stored at the sender; the snoop logic packetizes it.
    #[allow(clippy::too_many_arguments)]
    pub fn au_store(
        &self,
        st: &mut State,
        caller: Caller,
        node: usize,
        owner: usize,
        buf: BufId,
        gen: u64,
        offset: usize,
        data: &[u8],
        opts: AuOptions,
    ) -> Result<()> {
        let first_page = self.check_link(st, owner, buf, gen)?;
        let p = &self.p;
        let page = p.bus.page_size;
        let sub = p.ni.combine_subpage.min(page);
        let (store_ns, delay) = match p.switches.au_memory {
            AuMemory::WriteThrough => (
                p.costs.au_store_writethrough_ns,
                p.costs.au_writethrough_delay_ns,
            ),
            AuMemory::Uncached => (p.costs.au_store_uncached_ns, 0),
        };
        let combining = opts.combining && p.switches.combining;
        let mut c = st.nodes[node].clock;
        let words = data.len() / WORD_SIZE;
        st.nodes[node].stats.au_stores += words as u64;
        for w in 0..words {
            c += store_ns;
            let off = offset + w * WORD_SIZE;
            let word = &data[w * WORD_SIZE..(w + 1) * WORD_SIZE];
            let dpage = first_page + (off / page) as u64;
            let snooped = c + p.ni.snoop_ns + delay;
            if combining {
                let timer = p.ni.combine_timer_ns;
                let appended = match &mut st.nodes[node].open {
                    Some(o)
                        if o.dest == owner
                            && o.buf == buf
                            && o.page == dpage
                            && o.off + o.data.len() == off % page
                            && !(off % page).is_multiple_of(sub)
                            && o.notify == opts.notify
                            && c <= o.last_store + timer =>
                    {
                        o.data.extend_from_slice(word);
                        o.last_store = snooped;
                        true
                    }
                    _ => false,
                };
                if !appended {
                    let expired = st.nodes[node]
                        .open
                        .as_ref()
                        .map(|o| (o.last_store + timer).min(snooped))
                        .unwrap_or(snooped);
                    let accepted = self.close_open(st, node, expired);
                    if accepted > expired {
                        c += accepted - expired;
                    }
                    st.nodes[node].open = Some(OpenPacket {
                        dest: owner,
                        buf,
                        page: dpage,
                        off: off % page,
                        data: word.to_vec(),
                        notify: opts.notify,
                        last_store: snooped,
                    });
                }
            } else {
                let msg = st.next_msg;
                st.next_msg += 1;
                let pkt = Packet {
                    src: node,
                    dest: owner,
                    page: dpage,
                    off: off % page,
                    data: word.to_vec(),
                    interrupt: opts.notify,
                    msg,
                    last: true,
                };
                let accepted = self.emit(st, pkt, snooped, true);
                if accepted > snooped {
                    c += accepted - snooped;
                }
            }
        }
        if caller == Caller::Main {
            st.nodes[node].clock = c;
        }
        Ok(())
    }

    /// Sends the node's combining packet now.
    pub fn au_flush(&self, st: &mut State, node: usize) {
        let c = st.nodes[node].clock;
        let at = st.nodes[node]
            .open
            .as_ref()
            .map_or(c, |o| o.last_store.max(c));
        self.close_open(st, node, at);
    }

    // ----- exports -----

    #[allow(clippy::too_many_arguments)]
    pub fn export(
        &self,
        st: &mut State,
        caller: Caller,
        node: usize,
        buf: BufId,
        region: &Region,
        importers: &Importers,
        redirectable: bool,
        has_handler: bool,
    ) -> Result<()> {
        let page = self.p.bus.page_size;
        let nd = &mut st.nodes[node];
        if nd.exports.contains_key(&buf) {
            return Err(Error::BufIdInUse(buf));
        }
        let pages = region.len().div_ceil(page) as u64;
        let first = nd.next_page;
        nd.next_page += pages;
        for i in 0..pages {
            nd.ipt.insert(
                first + i,
                IptEntry {
                    buf,
                    index: i as usize,
                    interrupt: has_handler,
                },
            );
        }
        let gen = nd.next_gen;
        nd.next_gen += 1;
        nd.exports.insert(
            buf,
            Export {
                region: region.clone(),
                first_page: first,
                importers: importers.clone(),
                redirectable,
                revoked: false,
                in_flight: 0,
                gen,
                live: std::sync::Arc::new(AtomicBool::new(true)),
                redir: Redir::default(),
            },
        );
        if caller == Caller::Main {
            nd.clock += self.p.costs.export_ns;
        }
        // Importers waiting for this buffer look again.
        let now = st.now;
        for i in 0..self.n {
            if i != node {
                self.wake(st, i, now);
            }
        }
        Ok(())
    }

    /// Revokes links to `buf`; returns whether packets are still in flight to it.
    pub fn revoke(&self, st: &mut State, node: usize, buf: BufId) -> Result<bool> {
        let x = st.nodes[node]
            .exports
            .get_mut(&buf)
            .ok_or(Error::NoSuchBuffer(buf))?;
        x.revoked = true;
        x.live.store(false, Ordering::Release);
        Ok(x.in_flight > 0)
    }

    /// Removes `buf` once nothing is in flight: its IPT entries are disabled.
    pub fn remove_export(&self, st: &mut State, node: usize, buf: BufId) {
        let nd = &mut st.nodes[node];
        if let Some(x) = nd.exports.remove(&buf) {
            x.live.store(false, Ordering::Release);
            let pages = x.region.len().div_ceil(self.p.bus.page_size) as u64;
            for i in 0..pages {
                nd.ipt.remove(&(x.first_page + i));
            }
        }
    }

    pub fn in_flight(&self, st: &State, node: usize, buf: BufId) -> usize {
        st.nodes[node].exports.get(&buf).map_or(0, |x| x.in_flight)
    }

    // ----- redirection -----

    #[allow(clippy::too_many_arguments)]
    pub fn post_redir(
        &self,
        st: &mut State,
        node: usize,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        let x = st.nodes[node]
            .exports
            .get_mut(&buf)
            .ok_or(Error::NoSuchBuffer(buf))?;
        if x.redir.posted.is_some() || x.redir.done.is_some() {
            return Err(Error::RedirPosted(buf));
        }
        x.redir.posted = Some((dest.clone(), dest_offset, buf_offset, len));
        Ok(())
    }

    /// `Ok(Err(sender))`: a message from `sender` is being redirected; wait and ask again.
    pub fn end_redir(
        &self,
        st: &mut State,
        node: usize,
        buf: BufId,
    ) -> Result<std::result::Result<Redirected, usize>> {
        let x = st.nodes[node]
            .exports
            .get_mut(&buf)
            .ok_or(Error::NoSuchBuffer(buf))?;
        if let Some((_, sender)) = x.redir.active {
            return Ok(Err(sender));
        }
        x.redir.posted = None;
        Ok(Ok(match x.redir.done.take() {
            Some((buf_offset, len)) => Redirected { buf_offset, len },
            None => Redirected::default(),
        }))
    }

    /// Cancels a redirection whose message will never finish (its sender died).
    pub fn abandon_redir(&self, st: &mut State, node: usize, buf: BufId) {
        if let Some(x) = st.nodes[node].exports.get_mut(&buf) {
            x.redir.active = None;
            x.redir.posted = None;
            x.redir.done = None;
        }
    }

    pub fn data_end(&self, st: &State, node: usize, buf: BufId) -> Result<Option<usize>> {
        Ok(st.nodes[node]
            .exports
            .get(&buf)
            .ok_or(Error::NoSuchBuffer(buf))?
            .redir
            .data_end)
    }

    pub fn clear_data_end(&self, st: &mut State, node: usize, buf: BufId) -> Result<()> {
        st.nodes[node]
            .exports
            .get_mut(&buf)
            .ok_or(Error::NoSuchBuffer(buf))?
            .redir
            .data_end = None;
        Ok(())
    }

    /// A raw packet straight to a physical page of `dest`, bypassing the OPT (tests of the
    /// incoming page table's check).
    pub fn inject(&self, st: &mut State, node: usize, dest: usize, page: u64, data: &[u8]) {
        let msg = st.next_msg;
        st.next_msg += 1;
        let c = st.nodes[node].clock;
        let pkt = Packet {
            src: node,
            dest,
            page,
            off: 0,
            data: data.to_vec(),
            interrupt: false,
            msg,
            last: true,
        };
        self.emit(st, pkt, c, false);
    }

    /// When everything scheduled so far for `node` has been written to its memory.
    pub fn delivered_by(&self, st: &State, node: usize) -> Time {
        st.nodes[node].in_reserved
    }

    pub fn first_page(&self, st: &State, node: usize, buf: BufId) -> Option<u64> {
        st.nodes[node].exports.get(&buf).map(|x| x.first_page)
    }
}

/// Copies a packet's data into a region: the body, then the last word with release ordering.
fn place(r: &Region, offset: usize, data: &[u8]) {
    let n = data.len();
    let last = u32::from_ne_bytes(data[n - WORD_SIZE..].try_into().expect("a word"));
    if n > WORD_SIZE {
        r.write(offset, &data[..n - WORD_SIZE])
            .expect("in bounds: the IPT maps only the buffer's pages");
    }
    r.store_u32(offset + n - WORD_SIZE, last)
        .expect("in bounds: the IPT maps only the buffer's pages");
}

/// Places a packet of message `msg` into a redirectable buffer: a redirection posted before
/// the message's first packet takes all of it, one posted during the message takes the
/// packets from then on.
fn place_redirected(x: &mut Export, offset: usize, data: &[u8], msg: (u64, usize), last: bool) {
    let r = &mut x.redir;
    let (lo, hi) = (offset, offset + data.len());
    if r.active.is_none() && r.done.is_none() {
        if let Some((_, _, b, l)) = &r.posted {
            if lo < b + l && *b < hi {
                r.active = Some(msg);
            }
        }
    }
    let mut redirected = false;
    if r.active == Some(msg) {
        if let Some((dest, dest_off, b, l)) = &r.posted {
            let (w_lo, w_hi) = (*b, b + l);
            let (r_lo, r_hi) = (lo.max(w_lo), hi.min(w_hi));
            if r_lo < r_hi {
                if lo < r_lo {
                    place(&x.region, lo, &data[..r_lo - lo]);
                }
                let _ = dest.write(dest_off + (r_lo - w_lo), &data[r_lo - lo..r_hi - lo]);
                if r_hi < hi {
                    place(&x.region, r_hi, &data[r_hi - lo..]);
                }
                r.done.get_or_insert((r_lo, 0)).1 += r_hi - r_lo;
                redirected = true;
            }
        }
        if last {
            r.active = None;
            r.posted = None;
            if r.done.is_none() {
                r.done = Some((0, 0));
            }
        }
    }
    if !redirected {
        place(&x.region, lo, data);
    }
    if last {
        r.data_end = Some(hi - WORD_SIZE);
    }
}
