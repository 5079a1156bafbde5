//! The protocols of seed 003 §4.1 over VMMC: connections set up at start, the one-copy
//! protocol through packet buffers with credits, the zero-copy protocol with a scout, and
//! the matching of messages with receives.
//!
//! All state is behind one lock. Waiting never holds it: a blocking call takes the lock,
//! makes progress, checks its condition, drops the lock and waits ([`vmmc::wait::Wait`]: spin,
//! yield or sleep on the process's bell, as the core's one policy decides).
//! The endpoint's notification thread makes progress too, when a peer nudges this process
//! (it ran out of packet buffers, replied to a scout, or has a message for a handler).

use crate::config::{Config, SmallPath, PULL_MIN};
use crate::error::{NxError, Result};
use crate::usermem::UserBuf;
use crate::wire::*;
use crate::Info;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use vmmc::{AuOptions, AutoUpdateBinding, BufId, Endpoint, ExportOptions, MemKind, ProcId, Region};

/// Buffer id of the connection buffer for peer `p`.
const CONN_BASE: BufId = 0x4e58_0000;
/// First buffer id of receive memory exported for zero-copy transfers.
const LARGE_FIRST: BufId = 0x5000_0000;
const LARGE_LAST: BufId = 0xEFFF_FFFF;
/// Bytes copied to the safe buffer between two looks for the scout's reply (a page: the
/// reply of a waiting receiver is seen within a page's copy).
const COPY_CHUNK: usize = 4096;
/// Largest safe buffer kept for the next blocking zero-copy send (a fresh one would cost an
/// allocation and a page fault per page touched).
const SPARE_MAX: usize = 16 << 20;
/// Relax turns between checks that the peers waited for are alive.
const CHECK_EVERY: u32 = 2048;
/// Every wait of the library, in `vmmc::wait`'s statistics.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("nx");
/// Largest data that the one-copy deliberate-update path ([`SmallPath::Du`]) copies beside
/// the descriptor to send both with one transfer, rather than sending it from the user's
/// memory in a transfer of its own.
const MARSHAL_MAX: usize = 256;

/// A message id.
pub type Mid = i64;

/// A handler receive's function: the message's info and the buffer (for owned buffers).
pub(crate) type HandlerFn = Box<dyn FnMut(Info, Option<Vec<u8>>) + Send>;

/// What a receive accepts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sel {
    pub typesel: i64,
    pub nodesel: i64,
    pub ptypesel: i64,
    pub internal: bool,
}

/// NX's type selection: -1 any type; a type (>= 0) that type; another negative value, any
/// type except its one's complement (`!typesel`, that is `-typesel - 1`).
pub(crate) fn type_matches(typesel: i64, mtype: i64) -> bool {
    match typesel {
        -1 => true,
        t if t >= 0 => t == mtype,
        t => mtype != !t,
    }
}

impl Sel {
    fn matches(&self, a: &Arrival) -> bool {
        self.internal == a.internal
            && type_matches(self.typesel, a.mtype)
            && (self.nodesel == -1 || self.nodesel == a.src as i64)
            && (self.ptypesel == -1 || self.ptypesel == a.ptype)
    }
}

/// Where an arrived message's data is.
enum Body {
    /// In the sender's packet buffer on this connection (with the last 0-3 bytes).
    Slot { slot: u32, tail: [u8; 4] },
    /// Copied out of the packet buffer (drained, or sent to this process itself).
    Heap(Vec<u8>),
    /// Still at the sender: a zero-copy message announced by its scout.
    Scout { id: u32, notify: bool },
}

/// A message that arrived and no posted receive took yet.
struct Arrival {
    src: usize,
    internal: bool,
    mtype: i64,
    ptype: i64,
    len: usize,
    body: Body,
}

impl Arrival {
    fn info(&self) -> Info {
        Info {
            mtype: self.mtype,
            count: self.len,
            node: self.src,
            ptype: self.ptype,
        }
    }
}

/// A message waiting for a packet buffer.
struct Out {
    hdr: Hdr,
    body: Vec<u8>,
}

/// The outgoing side of a connection: the peer's receive buffer for us.
enum Link {
    Du(vmmc::Proxy),
    Au(vmmc::Proxy, AutoUpdateBinding),
}

impl Link {
    fn proxy(&self) -> &vmmc::Proxy {
        match self {
            Link::Du(p) | Link::Au(p, _) => p,
        }
    }
    /// A control word or a marshalled message: by automatic update when bound.
    fn put(&self, off: usize, data: &[u8]) -> vmmc::Result<()> {
        match self {
            Link::Du(p) => p.send(off, data),
            Link::Au(_, b) => {
                b.write(off, data)?;
                b.flush()
            }
        }
    }
}

struct Peer {
    proc: ProcId,
    /// Our receive buffer for this peer's messages.
    inbuf: Region,
    link: Link,
    // Sending to the peer.
    tx_free: VecDeque<u32>,
    tx_seq: u32,
    credits_read: u32,
    queue: VecDeque<Out>,
    /// We told the peer we are out of packet buffers and no credit came back since.
    nudged: bool,
    // Receiving from the peer: the packet buffers in the order the peer will use them
    // (the order of our credits, which it takes in turn).
    rx_free: VecDeque<u32>,
    rx_seq: u32,
    credits_sent: u32,
    /// Packet buffers consumed but not yet credited, in the order they were freed (credits
    /// go back when this process waits anyway, off the critical path of a reply).
    credit_pending: Vec<u32>,
    /// What we last told the peer about wanting notifications.
    want_sent: bool,
    /// The peer said it is finishing ([`K_BYE`]): it receives nothing more.
    finishing: bool,
}

enum St {
    /// A receive waiting for a message.
    Posted,
    /// A zero-copy receive: the user's memory is exported as `buf` for `src`.
    AwaitData {
        src: usize,
        buf: BufId,
        id: u32,
        /// Bytes the receive takes.
        n: usize,
    },
    /// A zero-copy send waiting for its reply.
    Sending { id: u32 },
    /// Complete (with the message's info for a receive).
    Done(Option<Info>, Option<NxError>),
}

struct Req {
    sel: Sel,
    buf: UserBuf,
    /// The memory behind `buf`, when the request owns it (Rust's irecv/hrecv).
    owned: Option<Vec<u8>>,
    handler: Option<HandlerFn>,
    state: St,
    info: Option<Info>,
    ignored: bool,
    /// A blocking receive: its caller waits in the library until it completes, so it can
    /// read its part of a receiver-assisted transfer at once ([`F_PULL`]).
    blocking: bool,
    /// Memory of the library's, exported in place of the receive's own when that could not be
    /// exported (it overlaps the memory of another receive in flight): the data is copied
    /// from it when the sender is done.
    bounce: Option<Vec<u8>>,
}

struct LargeSend {
    dest: usize,
    data: UserBuf,
    owned: Option<Vec<u8>>,
    /// The safe copy being made while waiting for the reply (blocking sends).
    safe: Option<Vec<u8>>,
    mid: Option<Mid>,
    /// The receiver reads part of the data from this export of the sender's memory: the
    /// send waits for its [`K_PULLED`].
    pulling: Option<BufId>,
}

impl LargeSend {
    fn source(&self) -> &[u8] {
        match (&self.safe, &self.owned) {
            (Some(s), _) if s.len() == self.data.len() => s,
            (_, Some(o)) => o,
            _ => self.data.bytes(),
        }
    }
}

/// What [`State::take_arrived`] found.
pub(crate) enum Quick {
    /// The message, in the buffer (with the error if it was too long).
    Got(Info, Option<NxError>),
    /// Nothing yet.
    Nothing,
    /// Post a receive instead (a receive is posted already, or the message is zero-copy).
    Posted,
}

/// A completed request as handed back to the caller.
pub(crate) struct Completed {
    pub info: Option<Info>,
    pub buf: Option<Vec<u8>>,
    pub err: Option<NxError>,
}

pub(crate) struct State {
    me: usize,
    n: usize,
    ptype: i64,
    cfg: Config,
    lay: Layout,
    ep: Endpoint,
    peers: Vec<Option<Peer>>,
    unexpected: VecDeque<Arrival>,
    posted: VecDeque<Mid>,
    reqs: HashMap<Mid, Req, BuildHasherDefault<MidHasher>>,
    /// Requests completed so far (waits look for theirs only when it moves).
    pub completions: u64,
    /// Whether peers were told the current want-notifications state.
    want_known: bool,
    next_mid: Mid,
    /// Whether the ids wrapped at [`MID_LIMIT`]: only then may the next one be in use.
    mids_wrapped: bool,
    large: HashMap<u32, LargeSend>,
    next_large: u32,
    awaiting: HashMap<(usize, BufId), Mid>,
    next_buf: BufId,
    ready: Vec<(HandlerFn, Info, Option<Vec<u8>>)>,
    /// Handlers of handler sends (`hsend`) by request, with the sent message's info: queued
    /// to run when the send completes.
    send_handlers: HashMap<Mid, (HandlerFn, Info), BuildHasherDefault<MidHasher>>,
    /// Set while `ready` is not empty (read without the lock).
    has_ready: Arc<AtomicBool>,
    /// Handler receives posted (we want notifications of new messages).
    handlers_posted: usize,
    /// Info of the last message received or probed.
    pub last: Option<Info>,
    scratch: Vec<u8>,
    /// A failure on the notification thread, reported by the next call.
    deferred: Option<NxError>,
    /// Receive memory left exported after its receive (the registration cache).
    exported: Vec<CachedExport>,
    /// Peers' receive memory imported for zero-copy sends, by (peer, buffer id).
    imported: Vec<(usize, BufId, vmmc::Proxy, u64)>,
    tick: u64,
    /// A safe buffer of an earlier zero-copy send, kept for the next one.
    spare: Vec<u8>,
    /// Bytes this process read from senders' memory in receiver-assisted transfers.
    pub pulled: u64,
    /// Bytes receivers read from this process's memory in receiver-assisted transfers.
    pub lent: u64,
    /// The peer whose message the last direct receive took ([`State::take_direct`]).
    direct_last: usize,
    /// The last step of a wait did work (copied part of a safe copy): the wait's next turn
    /// follows at once, not as an idle turn that may sleep.
    worked: bool,
    /// The last step of a wait must look again within this time, though nothing rings the
    /// bell when it passes (a deadline of the step's own): the wait sleeps no longer.
    look_within: Option<std::time::Duration>,
}

/// Receive memory kept exported for a sender (seed 003: "if it hasn't done so already, the
/// sender imports that buffer").
struct CachedExport {
    addr: usize,
    len: usize,
    src: usize,
    buf: BufId,
    in_use: bool,
    used: u64,
}

/// Entries of each registration cache.
const CACHE_ENTRIES: usize = 16;

pub(crate) struct Core {
    pub ep: Endpoint,
    /// Largest message of the one-copy protocol.
    pub threshold: usize,
    pub me: usize,
    pub n: usize,
    st: Mutex<State>,
    /// Handlers are ready to run (a copy of the state's flag, read without the lock).
    has_ready: Arc<AtomicBool>,
    /// Handlers are masked (`masktrap`): they wait until unmasked.
    pub masked: AtomicBool,
    /// Notification handlers waiting for the lock (waits leave it to them).
    lockers: AtomicUsize,
    /// The connections are set up (nudges before that are kept in `early`).
    ready: AtomicBool,
    /// Nudge values that arrived before the connections were set up.
    early: std::sync::atomic::AtomicU32,
    /// Handlers run one at a time.
    run_handlers: Mutex<()>,
}

thread_local! {
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread runs an NX handler.
pub(crate) fn in_handler() -> bool {
    IN_HANDLER.with(|c| c.get())
}

/// Request ids are below this: they fit NX's 32-bit INTEGER (Fortran), beside ids a C
/// library may give from here on (`msgmerge`). They are used again after `MID_LIMIT - 1`
/// requests, skipping those still in use.
pub const MID_LIMIT: Mid = 1 << 30;

fn next_mid(st: &mut State) -> Mid {
    let (reqs, handlers) = (&st.reqs, &st.send_handlers);
    advance_mid(&mut st.next_mid, &mut st.mids_wrapped, |m| {
        reqs.contains_key(&m) || handlers.contains_key(&m)
    })
}

/// The id after `*last` (1 after `MID_LIMIT - 1`) that is not `in_use`; `wrapped` says
/// whether the ids went round once, before which every id is new and none is looked up.
fn advance_mid(last: &mut Mid, wrapped: &mut bool, in_use: impl Fn(Mid) -> bool) -> Mid {
    loop {
        *last = if *last + 1 >= MID_LIMIT {
            *wrapped = true;
            1
        } else {
            *last + 1
        };
        // Before the first wrap every id is new: no look-up on the request path.
        if !*wrapped || !in_use(*last) {
            return *last;
        }
    }
}

impl Core {
    /// Sets up a connection with every other process: export a receive buffer for each, then
    /// import each peer's buffer for us.
    pub fn new(ep: Endpoint, cfg: Config) -> Result<Arc<Core>> {
        cfg.check()?;
        let (me, n) = (ep.rank(), ep.size());
        if n > 0xFFFF {
            return Err(NxError::Config(format!("{n} processes: at most 65535")));
        }
        let threshold = cfg.threshold_for(n);
        let lay = Layout::new(threshold, cfg.slots);
        let has_ready = Arc::new(AtomicBool::new(false));
        let core = Arc::new(Core {
            ep: ep.clone(),
            threshold: threshold.min(lay.cap()),
            me,
            n,
            has_ready: has_ready.clone(),
            masked: AtomicBool::new(false),
            lockers: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            early: std::sync::atomic::AtomicU32::new(0),
            run_handlers: Mutex::new(()),
            st: Mutex::new(State {
                me,
                n,
                ptype: 0,
                cfg: cfg.clone(),
                lay,
                ep: ep.clone(),
                peers: Vec::new(),
                unexpected: VecDeque::new(),
                posted: VecDeque::new(),
                reqs: HashMap::default(),
                completions: 0,
                want_known: true,
                next_mid: 0,
                mids_wrapped: false,
                large: HashMap::new(),
                next_large: 0,
                awaiting: HashMap::new(),
                next_buf: LARGE_FIRST,
                ready: Vec::new(),
                send_handlers: HashMap::default(),
                has_ready,
                handlers_posted: 0,
                last: None,
                scratch: Vec::with_capacity(lay.slot),
                deferred: None,
                exported: Vec::new(),
                imported: Vec::new(),
                tick: 0,
                spare: Vec::new(),
                pulled: 0,
                lent: 0,
                direct_last: 0,
                worked: false,
                look_within: None,
            }),
        });
        let mut inbufs = Vec::with_capacity(n);
        for p in 0..n {
            if p == me {
                inbufs.push(None);
                continue;
            }
            let r = ep.alloc(lay.total(), MemKind::Shared)?;
            let w = Arc::downgrade(&core);
            ep.export(
                CONN_BASE + p as BufId,
                &r,
                ExportOptions::new()
                    .importers([ep.proc_of(p)?])
                    .handler(move |x| {
                        if let Some(c) = w.upgrade() {
                            c.on_nudge(x.value);
                        }
                    }),
            )?;
            inbufs.push(Some(r));
        }
        let mut peers = Vec::with_capacity(n);
        for (p, inbuf) in inbufs.into_iter().enumerate() {
            let Some(inbuf) = inbuf else {
                peers.push(None);
                continue;
            };
            let proc = ep.proc_of(p)?;
            let proxy = ep.import(proc, CONN_BASE + me as BufId)?;
            let link = match cfg.small {
                SmallPath::Au => {
                    let b = proxy.bind(AuOptions::default())?;
                    Link::Au(proxy, b)
                }
                _ => Link::Du(proxy),
            };
            peers.push(Some(Peer {
                proc,
                inbuf,
                link,
                tx_free: (0..lay.slots as u32).collect(),
                tx_seq: 0,
                credits_read: 0,
                queue: VecDeque::new(),
                nudged: false,
                rx_free: (0..lay.slots as u32).collect(),
                rx_seq: 0,
                credits_sent: 0,
                credit_pending: Vec::with_capacity(lay.slots),
                want_sent: false,
                finishing: false,
            }));
        }
        core.lock().peers = peers;
        core.ready.store(true, Ordering::Release);
        let early = core.early.swap(0, Ordering::AcqRel);
        if early != 0 {
            core.nudged(early);
        }
        Ok(core)
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A peer nudged us (with a notification): make progress, and empty our packet buffers
    /// if it ran out of them.
    fn on_nudge(&self, value: u32) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.nudged(value)));
        if r.is_err() {
            // Never unwind into the endpoint's handler thread (it would stop for good).
            self.lock().deferred.get_or_insert(NxError::NotAllowed(
                "internal failure in the notification handler",
            ));
        }
    }

    fn nudged(&self, value: u32) {
        if !self.ready.load(Ordering::Acquire) {
            // Before the connections are up: handled once they are (see `new`).
            self.early.fetch_or(value, Ordering::AcqRel);
            if !self.ready.load(Ordering::Acquire) {
                return;
            }
            // `new` finished meanwhile and may have missed our bits: handle them here.
            let v = self.early.swap(0, Ordering::AcqRel);
            if v == 0 {
                return;
            }
            return self.nudged(v);
        }
        // Announce ourselves: a waiting thread polls in a tight loop and would take the lock
        // again and again before this thread, woken, gets it.
        self.lockers.fetch_add(1, Ordering::AcqRel);
        let mut st = self.lock();
        self.lockers.fetch_sub(1, Ordering::AcqRel);
        let r = st.progress(value & NUDGE_DRAIN != 0);
        if let Err(e) = r {
            st.deferred.get_or_insert(e);
        }
        drop(st);
        self.run_ready();
    }

    /// Runs the handlers of completed handler receives, one at a time, outside the lock
    /// (they may call NX). Not from inside a handler: handlers do not nest.
    pub fn run_ready(&self) {
        if in_handler()
            || !self.has_ready.load(Ordering::Acquire)
            || self.masked.load(Ordering::Acquire)
        {
            return;
        }
        loop {
            let Ok(_one) = self.run_handlers.try_lock() else {
                return; // another thread runs them
            };
            if self.masked.load(Ordering::Acquire) {
                return; // masked while waiting: masktrap(0) runs them
            }
            let ready = {
                let mut st = self.lock();
                st.has_ready.store(false, Ordering::Release);
                std::mem::take(&mut st.ready)
            };
            if ready.is_empty() {
                return;
            }
            IN_HANDLER.with(|c| c.set(true));
            for (mut f, info, buf) in ready {
                f(info, buf);
            }
            IN_HANDLER.with(|c| c.set(false));
        }
    }

    /// Waits until no handler runs (on another thread): after `masktrap(1)`, none starts.
    pub fn wait_handlers(&self) {
        if !in_handler() {
            drop(self.run_handlers.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Makes progress until `step` returns a value. `watch` names the peers whose death
    /// makes the wait hopeless (`None`: any of them failed, or all of them are gone).
    pub fn wait<T>(
        &self,
        what: &'static str,
        watch: Option<usize>,
        step: impl FnMut(&mut State) -> Result<Option<T>>,
    ) -> Result<T> {
        self.wait_fast(what, watch, |_| Ok(None), step)
    }

    /// [`Core::wait`] trying `fast` first at each turn, before any progress: a value from it
    /// ends the wait at once.
    pub fn wait_fast<T>(
        &self,
        what: &'static str,
        watch: Option<usize>,
        mut fast: impl FnMut(&mut State) -> Result<Option<T>>,
        mut step: impl FnMut(&mut State) -> Result<Option<T>>,
    ) -> Result<T> {
        let mut wait = vmmc::wait::Wait::new(&WAIT_SITE);
        let mut check_in = CHECK_EVERY;
        loop {
            if self.lockers.load(Ordering::Acquire) > 0 {
                // A notification handler wants the lock: let it have it.
                wait.idle();
                continue;
            }
            let (r, worked) = {
                let mut st = self.lock();
                if let Some(v) = fast(&mut st)? {
                    drop(st);
                    self.run_ready();
                    return Ok(v);
                }
                st.take_deferred()?;
                st.progress(false)?;
                let r = step(&mut st);
                if matches!(r, Ok(None)) {
                    // Idle: the credits of consumed messages go back now.
                    st.flush_credits()?;
                }
                if let Some(t) = st.look_within.take() {
                    wait = wait.timeout(Some(t));
                }
                (r, std::mem::take(&mut st.worked))
            };
            self.run_ready();
            if let Some(v) = r? {
                return Ok(v);
            }
            check_in -= 1;
            if check_in == 0 || wait.resting() {
                check_in = CHECK_EVERY;
                if let Some(node) = self.hopeless(watch) {
                    // What arrived before the peer died is still good: one last look.
                    let mut st = self.lock();
                    st.progress(false)?;
                    if let Some(v) = step(&mut st)? {
                        return Ok(v);
                    }
                    return Err(NxError::PeerLost { node, what });
                }
            }
            if worked {
                // A busy turn, not an idle one: the wait starts again from its spin, so that
                // a long copy made a page a turn is not slowed by the sleeps of a wait that
                // has lasted long (nothing rings the bell when a copy is done).
                wait = vmmc::wait::Wait::new(&WAIT_SITE);
                continue;
            }
            // Senders' deliberate and automatic updates ring this process's bell; so does the
            // handler thread after running handlers.
            wait.idle();
        }
    }

    /// The dead peer that makes a wait hopeless, if any.
    fn hopeless(&self, watch: Option<usize>) -> Option<usize> {
        match watch {
            Some(p) if p != self.me => {
                let proc = self.ep.proc_of(p).ok()?;
                (!self.ep.peer_alive(proc)).then_some(p)
            }
            Some(_) => None,
            None => {
                // A node of the application failed (killed, crashed): the application is
                // broken, as on the Paragon, where it would have been ended; a receive from any
                // node must not wait for ever on the nodes that wait for the failed one. A node
                // that left cleanly only ends the waits that need it.
                for p in (0..self.n).filter(|&p| p != self.me) {
                    let proc = self.ep.proc_of(p).ok()?;
                    if self.ep.peer_failed(proc) {
                        return Some(p);
                    }
                }
                let mut last = None;
                for p in (0..self.n).filter(|&p| p != self.me) {
                    let proc = self.ep.proc_of(p).ok()?;
                    if self.ep.peer_alive(proc) {
                        return None;
                    }
                    last = Some(p);
                }
                last
            }
        }
    }

    /// Leaves cleanly: completes the zero-copy sends still waiting for their receivers and
    /// the messages still queued for packet buffers, while their receivers live and are not
    /// finishing themselves. It tells every peer first that it is finishing ([`K_BYE`]):
    /// NX discards the messages a process did not receive when it leaves, so two processes
    /// that leave with unreceived messages for each other do not wait for each other.
    pub fn finish(&self) -> Result<()> {
        {
            let mut st = self.lock();
            for p in (0..self.n).filter(|&p| p != self.me) {
                let bye = Hdr {
                    kind: K_BYE,
                    ..Hdr::default()
                };
                // Best effort: a peer that is gone needs no word.
                let _ = st.send_or_queue(p, bye, &[]);
            }
        }
        loop {
            let pending = {
                let mut st = self.lock();
                st.progress(false)?;
                st.discard_for_finishing();
                let mut pending = None;
                for ls in st.large.values() {
                    pending = Some(ls.dest);
                }
                for p in 0..st.n {
                    if st.queue_busy(p) {
                        pending = Some(p);
                    }
                }
                pending
            };
            let Some(p) = pending else {
                return Ok(());
            };
            match self.wait("finishing", Some(p), |st| {
                st.discard_for_finishing();
                if st.queue_busy(p) {
                    // The receiver may be computing: it takes the messages out of its
                    // packet buffers when told, so that the queue goes.
                    st.out_of_buffers(p)?;
                }
                let busy = st.large.values().any(|l| l.dest == p) || st.queue_busy(p);
                Ok((!busy).then_some(()))
            }) {
                Ok(()) => {}
                Err(NxError::PeerLost { .. }) => {
                    // Nobody will take them: drop what was for that peer.
                    let mut st = self.lock();
                    st.forget_large_to(p);
                    if let Some(x) = st.peers[p].as_mut() {
                        x.queue.clear();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl State {
    pub fn ptype(&self) -> i64 {
        self.ptype
    }
    pub fn set_ptype(&mut self, p: i64) {
        self.ptype = p;
    }

    pub fn take_deferred(&mut self) -> Result<()> {
        match self.deferred.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn peer(&mut self, p: usize) -> &mut Peer {
        self.peers[p].as_mut().expect("a peer, not this process")
    }

    // ----- progress -----

    /// Takes returned credits, discovers arrived messages, sends queued ones; with `drain`,
    /// copies every message still in a packet buffer out of it and returns the buffer.
    pub fn progress(&mut self, drain: bool) -> Result<()> {
        for p in 0..self.n {
            if p == self.me {
                continue;
            }
            // Credits are read when buffers run out (take_slot, flush_queue) or a nudge may
            // be outstanding; the ring holds them until then.
            let peer = self.peer(p);
            if peer.nudged || !peer.queue.is_empty() {
                self.read_credits(p)?;
            }
            self.poll_rx(p)?;
            self.flush_queue(p)?;
        }
        if drain {
            self.drain()?;
        }
        self.update_want()?;
        Ok(())
    }

    fn read_credits(&mut self, p: usize) -> Result<()> {
        let lay = self.lay;
        let peer = self.peer(p);
        loop {
            let off = lay.credit_off(peer.credits_read);
            let count = peer.inbuf.load_u32(off + 4)?;
            if count != peer.credits_read.wrapping_add(1) {
                return Ok(());
            }
            let slot = peer.inbuf.load_u32(off)?;
            if slot as usize >= lay.slots {
                return Err(
                    vmmc::Error::Protocol(format!("credit for packet buffer {slot}")).into(),
                );
            }
            peer.tx_free.push_back(slot);
            peer.credits_read = count;
            peer.nudged = false;
        }
    }

    fn poll_rx(&mut self, p: usize) -> Result<()> {
        let lay = self.lay;
        loop {
            let peer = self.peer(p);
            let Some(&slot) = peer.rx_free.front() else {
                return Ok(());
            };
            let want = next_seq(peer.rx_seq);
            if peer.inbuf.load_u32(lay.seq_off(slot))? != want {
                return Ok(());
            }
            let mut b = [0u8; HDR];
            peer.inbuf.read(lay.hdr_off(slot), &mut b)?;
            let h = Hdr::decode(&b);
            peer.rx_free.pop_front();
            peer.rx_seq = want;
            let internal = h.kind & F_INTERNAL != 0;
            let (mtype, ptype, len) = (h.mtype, h.ptype, h.len as usize);
            match h.kind & !FLAGS {
                K_MSG => {
                    if len > lay.cap() {
                        return Err(vmmc::Error::Protocol(format!("{len}-byte packet")).into());
                    }
                    let body = Body::Slot { slot, tail: h.tail };
                    self.incoming(Arrival {
                        src: p,
                        internal,
                        mtype,
                        ptype,
                        len,
                        body,
                    })?;
                }
                K_SCOUT => {
                    self.free_slot(p, slot)?;
                    let body = Body::Scout {
                        id: h.id,
                        notify: false,
                    };
                    self.incoming(Arrival {
                        src: p,
                        internal,
                        mtype,
                        ptype,
                        len,
                        body,
                    })?;
                }
                K_REPLY => {
                    self.free_slot(p, slot)?;
                    self.on_reply(p, &h)?;
                }
                K_DONE => {
                    self.free_slot(p, slot)?;
                    self.on_done(p, &h)?;
                }
                K_WANT => {
                    self.free_slot(p, slot)?;
                    self.on_want(p, h.id)?;
                }
                K_PULL => {
                    self.free_slot(p, slot)?;
                    self.on_pull(p, &h)?;
                }
                K_PULLED => {
                    self.free_slot(p, slot)?;
                    self.on_pulled(p, h.id);
                }
                K_BYE => {
                    self.free_slot(p, slot)?;
                    self.peer(p).finishing = true;
                }
                k => return Err(vmmc::Error::Protocol(format!("descriptor kind {k}")).into()),
            }
        }
    }

    /// Gives a packet buffer back to its sender: clear its flag; its credit goes now if half
    /// the buffers wait for theirs, else at the next idle moment ([`State::flush_credits`]).
    fn free_slot(&mut self, p: usize, slot: u32) -> Result<()> {
        let lay = self.lay;
        let peer = self.peer(p);
        peer.inbuf.store_u32(lay.seq_off(slot), 0)?;
        peer.rx_free.push_back(slot);
        peer.credit_pending.push(slot);
        if peer.credit_pending.len() * 2 >= lay.slots {
            self.send_credits(p)?;
        }
        Ok(())
    }

    /// Returns the pending credits of `p`, one entry per packet buffer, in order.
    fn send_credits(&mut self, p: usize) -> Result<()> {
        let lay = self.lay;
        let peer = self.peer(p);
        for i in 0..peer.credit_pending.len() {
            let slot = peer.credit_pending[i];
            let k = peer.credits_sent;
            let mut e = [0u8; 8];
            e[..4].copy_from_slice(&slot.to_ne_bytes());
            e[4..].copy_from_slice(&k.wrapping_add(1).to_ne_bytes());
            peer.credits_sent = k.wrapping_add(1);
            // A sender that left needs no credit.
            ignore_gone(peer.link.put(lay.credit_off(k), &e))?;
        }
        peer.credit_pending.clear();
        Ok(())
    }

    /// Returns every pending credit (called when this process would otherwise wait).
    pub fn flush_credits(&mut self) -> Result<()> {
        for p in 0..self.n {
            if p != self.me && !self.peer(p).credit_pending.is_empty() {
                self.send_credits(p)?;
            }
        }
        Ok(())
    }

    /// Copies every message that sits in a packet buffer out of it (a sender asked for
    /// packet buffers).
    fn drain(&mut self) -> Result<()> {
        let lay = self.lay;
        for i in 0..self.unexpected.len() {
            let a = &self.unexpected[i];
            let Body::Slot { slot, tail } = a.body else {
                continue;
            };
            let (src, len) = (a.src, a.len);
            let peer = self.peer(src);
            let len4 = len & !3;
            let mut v = vec![0u8; len];
            peer.inbuf.read(lay.hdr_off(slot) - len4, &mut v[..len4])?;
            v[len4..].copy_from_slice(&tail[..len - len4]);
            self.unexpected[i].body = Body::Heap(v);
            self.free_slot(src, slot)?;
        }
        self.flush_credits()
    }

    /// Tells peers whether we want a notification with each message (handler receives are
    /// posted), so that handlers run without waiting for this process's next NX call.
    fn update_want(&mut self) -> Result<()> {
        let want = self.handlers_posted > 0;
        if self.want_known && self.peers.iter().flatten().all(|p| p.want_sent == want) {
            return Ok(());
        }
        self.want_known = true;
        let lay = self.lay;
        let mut changed = false;
        for peer in self.peers.iter_mut().flatten() {
            if peer.want_sent != want {
                ignore_gone(peer.link.put(lay.want_off(), &(want as u32).to_ne_bytes()))?;
                ignore_gone(peer.link.proxy().fence())?;
                peer.want_sent = want;
                changed = true;
            }
        }
        if changed {
            // Dekker with the senders, who send then look at the want word: a message sent
            // before they saw it is found by the look below.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            for p in 0..self.n {
                if p != self.me {
                    self.poll_rx(p)?;
                }
            }
        }
        Ok(())
    }

    // ----- sending -----

    /// A free packet buffer towards `p`, if any (no queued message may be overtaken).
    fn take_slot(&mut self, p: usize) -> Result<Option<u32>> {
        if !self.peer(p).queue.is_empty() {
            return Ok(None);
        }
        if self.peer(p).tx_free.is_empty() {
            self.read_credits(p)?;
        }
        Ok(self.peer(p).tx_free.pop_front())
    }

    /// Writes a message into packet buffer `slot` of `p`: the data, then the descriptor.
    fn write_msg(&mut self, p: usize, slot: u32, mut h: Hdr, data: &[u8]) -> Result<()> {
        let lay = self.lay;
        let small = self.cfg.small;
        let mut scratch = std::mem::take(&mut self.scratch);
        let peer = self.peer(p);
        let len4 = data.len() & !3;
        if h.kind & !FLAGS == K_MSG {
            h.tail = [0; 4];
            h.tail[..data.len() - len4].copy_from_slice(&data[len4..]);
        }
        h.seq = next_seq(peer.tx_seq);
        peer.tx_seq = h.seq;
        let hoff = lay.hdr_off(slot);
        let r = match small {
            // Up to a few cache lines, copying the data beside the descriptor costs less
            // than a second transfer.
            SmallPath::Du if len4 > MARSHAL_MAX => {
                if len4 > 0 {
                    peer.link.proxy().send(hoff - len4, &data[..len4])?;
                }
                peer.link.proxy().send(hoff, &h.encode())
            }
            SmallPath::Du | SmallPath::DuMarshal | SmallPath::Au => {
                scratch.clear();
                scratch.extend_from_slice(&data[..len4]);
                scratch.extend_from_slice(&h.encode());
                peer.link.put(hoff - len4, &scratch)
            }
        };
        self.scratch = scratch;
        r?;
        let kind = h.kind & !FLAGS;
        if kind == K_REPLY {
            if h.kind & F_NOTIFY != 0 {
                self.nudge(p, NUDGE_LOOK)?;
            }
        } else if kind == K_MSG || kind == K_SCOUT {
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let peer = self.peer(p);
            if peer.inbuf.load_u32(lay.want_off())? != 0 {
                self.nudge(p, NUDGE_LOOK)?;
            }
        }
        Ok(())
    }

    /// Notifies `p` (the one case where this library interrupts a peer).
    fn nudge(&mut self, p: usize, v: u32) -> Result<()> {
        let lay = self.lay;
        let peer = self.peer(p);
        peer.link
            .proxy()
            .send_notify_wait(lay.nudge_off(), &v.to_ne_bytes())?;
        Ok(())
    }

    /// Sends now if a packet buffer is free; `false` otherwise.
    fn try_send(&mut self, p: usize, h: Hdr, data: &[u8]) -> Result<bool> {
        match self.take_slot(p)? {
            Some(slot) => {
                self.write_msg(p, slot, h, data)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Sends now, or queues a copy and asks the peer for packet buffers.
    fn send_or_queue(&mut self, p: usize, h: Hdr, data: &[u8]) -> Result<()> {
        if !self.try_send(p, h, data)? {
            self.peer(p).queue.push_back(Out {
                hdr: h,
                body: data.to_vec(),
            });
            self.out_of_buffers(p)?;
        }
        Ok(())
    }

    /// No packet buffer towards `p`: ask it (once) to take our messages out of them.
    pub fn out_of_buffers(&mut self, p: usize) -> Result<()> {
        if !self.peer(p).nudged {
            self.peer(p).nudged = true;
            self.nudge(p, NUDGE_DRAIN)?;
        }
        Ok(())
    }

    fn flush_queue(&mut self, p: usize) -> Result<()> {
        loop {
            let peer = self.peer(p);
            if peer.queue.is_empty() {
                return Ok(());
            }
            if peer.tx_free.is_empty() {
                self.read_credits(p)?;
            }
            let peer = self.peer(p);
            let Some(slot) = peer.tx_free.pop_front() else {
                return Ok(());
            };
            let out = peer.queue.pop_front().expect("not empty");
            self.write_msg(p, slot, out.hdr, &out.body)?;
        }
    }

    fn user_hdr(&self, kind: u32, internal: bool, mtype: i64, len: usize) -> Hdr {
        Hdr {
            kind: kind | if internal { F_INTERNAL } else { 0 },
            len: len as u64,
            mtype,
            ptype: self.ptype,
            ..Hdr::default()
        }
    }

    /// One attempt at a blocking send of a message of the one-copy protocol (or a send to
    /// this process): `true` when sent.
    pub fn try_send_small(
        &mut self,
        p: usize,
        internal: bool,
        mtype: i64,
        data: &[u8],
    ) -> Result<bool> {
        if p == self.me {
            self.send_self(internal, mtype, data.to_vec())?;
            return Ok(true);
        }
        let h = self.user_hdr(K_MSG, internal, mtype, data.len());
        self.try_send(p, h, data)
    }

    /// A message to this process: copied, then matched like any arrival.
    fn send_self(&mut self, internal: bool, mtype: i64, data: Vec<u8>) -> Result<()> {
        let a = Arrival {
            src: self.me,
            internal,
            mtype,
            ptype: self.ptype,
            len: data.len(),
            body: Body::Heap(data),
        };
        self.incoming(a)
    }

    /// A non-blocking send of the one-copy protocol: sent or queued (copied) at once.
    pub fn send_small_nb(
        &mut self,
        p: usize,
        internal: bool,
        mtype: i64,
        data: &[u8],
    ) -> Result<()> {
        if p == self.me {
            return self.send_self(internal, mtype, data.to_vec());
        }
        let h = self.user_hdr(K_MSG, internal, mtype, data.len());
        self.send_or_queue(p, h, data)
    }

    /// Starts a zero-copy send: records it and sends (or queues) its scout. Returns its id.
    pub fn start_large(
        &mut self,
        p: usize,
        internal: bool,
        mtype: i64,
        data: UserBuf,
        owned: Option<Vec<u8>>,
        safe_copy: bool,
    ) -> Result<u32> {
        if data.len() > u32::MAX as usize {
            return Err(NxError::InvalidLength(data.len() as i64));
        }
        self.next_large = self.next_large.wrapping_add(1);
        let id = self.next_large;
        let h = Hdr {
            id,
            ..self.user_hdr(K_SCOUT, internal, mtype, data.len())
        };
        let safe = safe_copy.then(|| self.take_spare(data.len()));
        self.large.insert(
            id,
            LargeSend {
                dest: p,
                data,
                owned,
                safe,
                mid: None,
                pulling: None,
            },
        );
        self.send_or_queue(p, h, &[])?;
        Ok(id)
    }

    /// An empty safe buffer for `len` bytes: the spare one if it is large enough.
    fn take_spare(&mut self, len: usize) -> Vec<u8> {
        if self.spare.capacity() >= len {
            let mut v = std::mem::take(&mut self.spare);
            v.clear();
            v
        } else {
            Vec::with_capacity(len)
        }
    }

    /// Keeps a used safe buffer as the spare when it is larger than the spare (and not huge).
    fn keep_spare(&mut self, v: Vec<u8>) {
        if v.capacity() <= SPARE_MAX && v.capacity() > self.spare.capacity() {
            self.spare = v;
        }
    }

    /// Whether zero-copy send `id` is still waiting for its reply.
    pub fn large_pending(&self, id: u32) -> bool {
        self.large.contains_key(&id)
    }

    /// Copies the next chunk of a waiting zero-copy send to its safe buffer; `true` once the
    /// safe copy is complete (the user's memory is no longer needed).
    pub fn copy_safe(&mut self, id: u32) -> bool {
        let Some(ls) = self.large.get_mut(&id) else {
            return true;
        };
        let len = ls.data.len();
        if ls.pulling.is_some() {
            // The receiver reads the user's memory: the send waits for it.
            return false;
        }
        let Some(safe) = ls.safe.as_mut() else {
            return false;
        };
        let from = safe.len();
        let to = (from + COPY_CHUNK).min(len);
        safe.extend_from_slice(&ls.data.bytes()[from..to]);
        self.worked = true;
        to == len
    }

    /// Asks the wait this step runs in to look again within `t` (it sleeps no longer).
    pub fn look_within(&mut self, t: std::time::Duration) {
        self.look_within = Some(t);
    }

    /// A blocking zero-copy send whose call failed for a reason of its own or not (an error
    /// of an earlier call, reported now): while its receiver lives and does not read the
    /// user's memory, it goes on from a complete safe copy, with its reply notified, as
    /// when the call returns from its safe copy; else it is forgotten (its receiver's
    /// receive fails when it replies).
    pub fn large_after_error(&mut self, id: u32, e: &NxError) {
        let Some(ls) = self.large.get(&id) else {
            return;
        };
        let lost = matches!(e, NxError::PeerLost { node, .. } if *node == ls.dest);
        if lost || ls.pulling.is_some() || ls.owned.is_some() {
            self.forget_large(id);
            return;
        }
        self.make_safe(id);
        if self.want_reply_notice(id).is_err() {
            self.forget_large(id);
        }
    }

    /// Makes a waiting zero-copy send independent of the user's memory (msgcancel).
    fn make_safe(&mut self, id: u32) {
        if let Some(ls) = self.large.get_mut(&id) {
            if ls.owned.is_none() {
                let v = ls.data.bytes().to_vec();
                ls.safe = Some(v);
            }
            ls.mid = None;
        }
    }

    /// The scout's reply: write the data straight into the receiver's memory, then say so.
    ///
    /// A write that fails (a transport error, a reply naming memory it cannot take) fails
    /// the send, and the receiver, which waits for the data, is told with a done descriptor
    /// flagged [`F_FAILED`], so that its receive fails too instead of waiting for ever.
    fn on_reply(&mut self, p: usize, h: &Hdr) -> Result<()> {
        let Some(ls) = self.large.remove(&h.id) else {
            // A send forgotten after it failed: no data will come. The receiver waits for
            // it: its receive fails (best effort: it may be gone).
            let failed = Hdr {
                kind: K_DONE | F_FAILED,
                id: h.id,
                buf: h.buf,
                ..Hdr::default()
            };
            let _ = self.send_or_queue(p, failed, &[]);
            return Ok(());
        };
        let mid = ls.mid;
        let Err(e) = self.answer_reply(p, h, ls) else {
            return Ok(());
        };
        // A receiver-assisted send is recorded again by then: revoke what it lent.
        self.forget_large(h.id);
        let failed = Hdr {
            kind: K_DONE | F_FAILED,
            id: h.id,
            buf: h.buf,
            ..Hdr::default()
        };
        // Best effort: a receiver that is gone needs no word.
        let _ = self.send_or_queue(p, failed, &[]);
        match mid {
            // A request (isend) fails; its msgwait reports the error.
            Some(mid) => {
                self.complete(mid, None, Some(e));
                Ok(())
            }
            // A blocking send waits in this call, or has returned: the error shows now.
            None => Err(e),
        }
    }

    /// [`State::on_reply`]'s transfer of the data of `ls` as reply `h` asks.
    fn answer_reply(&mut self, p: usize, h: &Hdr, mut ls: LargeSend) -> Result<()> {
        let n = h.n as usize;
        if n > ls.source().len() {
            return Err(vmmc::Error::Protocol(format!(
                "reply asks {n} of {} bytes",
                ls.source().len()
            ))
            .into());
        }
        if h.buf != 0 {
            let n4 = n & !3;
            // Receiver-assisted: a blocking send still reading from the user's memory, to a
            // blocking receive; the receiver reads from `half` on, page aligned.
            let half = (n4 / 2) & !4095;
            let split = h.kind & F_PULL != 0
                && self.cfg.pull
                && self.cfg.reg_cache
                && n4 >= PULL_MIN
                && ls.owned.is_none()
                && ls.safe.as_ref().is_some_and(|s| s.len() < ls.data.len())
                && !vmmc::pace::is_paced();
            if split {
                let exp = self.export_for(p, ls.data, ls.data.len(), false)?;
                self.lent += (n4 - half) as u64;
                ls.pulling = Some(exp);
                let data = ls.data;
                // The send completes when the receiver has read its part. From here on it
                // stays recorded, so that a failure (then forget_large) revokes the export
                // before the sender's memory goes back to its owner.
                self.large.insert(h.id, ls);
                let pull = Hdr {
                    kind: K_PULL,
                    id: h.id,
                    buf: h.buf,
                    n: half as u64,
                    len: exp as u64,
                    ..Hdr::default()
                };
                self.send_or_queue(p, pull, &[])?;
                return self.write_data(p, h, data.bytes(), half);
            }
            self.write_data(p, h, ls.source(), n4)?;
        }
        if let Some(mid) = ls.mid {
            self.complete_send(mid, ls.owned.take());
        }
        if let Some(v) = ls.safe {
            self.keep_spare(v);
        }
        Ok(())
    }

    /// Writes `src[..upto]` straight into the receiver's memory named by reply `h`, then the
    /// done descriptor with the last bytes (none if the receiver cancelled).
    fn write_data(&mut self, p: usize, h: &Hdr, src: &[u8], upto: usize) -> Result<()> {
        let n = h.n as usize;
        let n4 = n & !3;
        if upto > 0 {
            let proxy = self.import_for(p, h.buf)?;
            match proxy.send(0, &src[..upto]) {
                Ok(()) => {}
                // The receiver cancelled its receive.
                Err(vmmc::Error::Unexported) => {
                    self.imported.retain(|e| (e.0, e.1) != (p, h.buf));
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut tail = [0u8; 4];
        tail[..n - n4].copy_from_slice(&src[n4..n]);
        let d = Hdr {
            kind: K_DONE,
            id: h.id,
            buf: h.buf,
            n: n as u64,
            tail,
            ..Hdr::default()
        };
        self.send_or_queue(p, d, &[])
    }

    /// Receiver-assisted zero-copy: read the sender's part into the receive's memory, then
    /// say so. A failed read fails the receive.
    fn on_pull(&mut self, p: usize, h: &Hdr) -> Result<()> {
        let from = h.n as usize;
        let target = self.awaiting.get(&(p, h.buf)).and_then(|mid| {
            let r = self.reqs.get(mid)?;
            match r.state {
                St::AwaitData { n, .. } => Some((*mid, r.buf, n & !3)),
                _ => None,
            }
        });
        let err = match target {
            Some((mid, buf, n4)) if from <= n4 => {
                let r = self
                    .import_for(p, h.len as BufId)
                    .and_then(|src| Ok(buf.fill_remote(from, &src, from, n4 - from)?));
                if r.is_ok() {
                    self.pulled += (n4 - from) as u64;
                }
                r.err().map(|e| (mid, e))
            }
            Some((mid, ..)) => Some((
                mid,
                vmmc::Error::Protocol(format!("pull from byte {from}")).into(),
            )),
            // A cancelled receive: the sender still waits for the word.
            None => None,
        };
        if let Some((mid, e)) = err {
            if let Some(St::AwaitData { buf, .. }) = self.reqs.get(&mid).map(|r| &r.state) {
                let buf = *buf;
                self.awaiting.remove(&(p, buf));
                self.revoke(buf);
            }
            let info = self.reqs.get(&mid).and_then(|r| r.info);
            self.complete(mid, info, Some(e));
        }
        let done = Hdr {
            kind: K_PULLED,
            id: h.id,
            ..Hdr::default()
        };
        self.send_or_queue(p, done, &[])
    }

    /// Receiver `p` read its part of zero-copy send `id` (or cancelled its receive): the
    /// send is complete.
    fn on_pulled(&mut self, p: usize, id: u32) {
        if !self
            .large
            .get(&id)
            .is_some_and(|l| l.dest == p && l.pulling.is_some())
        {
            return; // a cancelled receive's word for a send that was not split
        }
        let Some(mut ls) = self.large.remove(&id) else {
            return;
        };
        if let Some(exp) = ls.pulling {
            if let Some(e) = self.exported.iter_mut().find(|e| e.buf == exp) {
                e.in_use = false;
            }
        }
        if let Some(mid) = ls.mid {
            self.complete_send(mid, ls.owned.take());
        }
        if let Some(v) = ls.safe {
            self.keep_spare(v);
        }
    }

    /// The sender of scout `id` stopped polling: its reply must notify it. The reply is
    /// still to come (the scout waits, or the reply waits for a packet buffer), or it went
    /// already (then notify now: the sender may not have seen it).
    fn on_want(&mut self, p: usize, id: u32) -> Result<()> {
        for a in self.unexpected.iter_mut() {
            if let (true, Body::Scout { id: i, notify }) = (a.src == p, &mut a.body) {
                if *i == id {
                    *notify = true;
                    return Ok(());
                }
            }
        }
        for out in self.peer(p).queue.iter_mut() {
            if out.hdr.kind & !FLAGS == K_REPLY && out.hdr.id == id {
                out.hdr.kind |= F_NOTIFY;
                return Ok(());
            }
        }
        let replied = self
            .reqs
            .values()
            .any(|r| matches!(r.state, St::AwaitData { src, id: i, .. } if src == p && i == id));
        if replied {
            self.nudge(p, NUDGE_LOOK)?;
        }
        Ok(())
    }

    /// A blocking zero-copy send returns before its reply (its safe copy is made): ask the
    /// receiver to notify the reply, so that the transfer completes without this process
    /// calling NX again.
    pub fn want_reply_notice(&mut self, id: u32) -> Result<()> {
        let Some(p) = self.large.get(&id).map(|l| l.dest) else {
            return Ok(());
        };
        let h = Hdr {
            kind: K_WANT,
            id,
            ..Hdr::default()
        };
        self.send_or_queue(p, h, &[])
    }

    /// The data of a zero-copy receive is in place (or, flagged [`F_FAILED`], its sender
    /// could not write it: the receive fails).
    fn on_done(&mut self, p: usize, h: &Hdr) -> Result<()> {
        let Some(mid) = self.awaiting.remove(&(p, h.buf)) else {
            return Ok(()); // a cancelled receive
        };
        match self.exported.iter_mut().find(|e| e.buf == h.buf) {
            Some(e) => e.in_use = false,
            None => {
                let _ = self.ep.unexport(h.buf);
            }
        }
        let Some(r) = self.reqs.get(&mid) else {
            return Ok(());
        };
        if h.kind & F_FAILED != 0 {
            let info = r.info;
            self.complete(mid, info, Some(NxError::SendFailed { node: p }));
            return Ok(());
        }
        let n = h.n as usize;
        let n4 = n & !3;
        if let Some(b) = &r.bounce {
            r.buf.write(0, &b[..n4.min(b.len())]);
        }
        r.buf.write(n4, &h.tail[..n - n4]);
        let info = r.info;
        let err = info.and_then(|i| too_long(i.count, r.buf.len()));
        self.complete(mid, info, err);
        Ok(())
    }

    // ----- receiving -----

    /// A message arrived: the first posted receive that matches takes it, else it waits.
    fn incoming(&mut self, a: Arrival) -> Result<()> {
        let pos = self
            .posted
            .iter()
            .position(|mid| self.reqs.get(mid).is_some_and(|r| r.sel.matches(&a)));
        match pos {
            Some(i) => {
                let mid = self.posted.remove(i).expect("in range");
                self.deliver(mid, a)
            }
            None => {
                self.unexpected.push_back(a);
                Ok(())
            }
        }
    }

    /// A blocking receive's fastest path: with nothing posted, nothing arrived unclaimed and
    /// nothing else to do, the next message of a peer, if it is a one-copy message `sel`
    /// accepts, is copied straight from its packet buffer into `buf` (the same result as
    /// [`State::progress`] then [`State::take_arrived`], without the bookkeeping between).
    pub fn take_direct(
        &mut self,
        sel: Sel,
        buf: UserBuf,
    ) -> Result<Option<(Info, Option<NxError>)>> {
        if !self.posted.is_empty()
            || !self.unexpected.is_empty()
            || self.deferred.is_some()
            || self.handlers_posted > 0
            || !self.want_known
            || !self.large.is_empty()
            || !self.awaiting.is_empty()
            || self
                .peers
                .iter()
                .flatten()
                .any(|x| x.nudged || !x.queue.is_empty())
        {
            return Ok(None);
        }
        let lay = self.lay;
        // Peers in turn, from the one after the last taken: none waits behind a busy one.
        for k in 1..=self.n {
            let p = (self.direct_last + k) % self.n;
            if p == self.me || (sel.nodesel != -1 && sel.nodesel != p as i64) {
                continue;
            }
            let peer = self.peer(p);
            let Some(&slot) = peer.rx_free.front() else {
                continue;
            };
            let want = next_seq(peer.rx_seq);
            if peer.inbuf.load_u32(lay.seq_off(slot))? != want {
                continue;
            }
            let mut b = [0u8; HDR];
            peer.inbuf.read(lay.hdr_off(slot), &mut b)?;
            let h = Hdr::decode(&b);
            let len = h.len as usize;
            let internal = h.kind & F_INTERNAL != 0;
            if h.kind & !F_INTERNAL != K_MSG
                || len > lay.cap()
                || sel.internal != internal
                || !type_matches(sel.typesel, h.mtype)
                || (sel.ptypesel != -1 && sel.ptypesel != h.ptype)
            {
                // Not for this receive (or not a plain message): the general path.
                return Ok(None);
            }
            peer.rx_free.pop_front();
            peer.rx_seq = want;
            self.slot_out(p, slot, len, h.tail, buf)?;
            self.direct_last = p;
            let info = Info {
                mtype: h.mtype,
                count: len,
                node: p,
                ptype: h.ptype,
            };
            if !internal {
                self.last = Some(info);
            }
            return Ok(Some((info, too_long(len, buf.len()))));
        }
        Ok(None)
    }

    /// A blocking receive's fast path: when no receive is posted, the first arrived message
    /// `sel` accepts goes straight into `buf`, with no request. A zero-copy message (its
    /// scout) needs a posted receive: `Quick::Posted` says to post one.
    pub fn take_arrived(&mut self, sel: Sel, buf: UserBuf) -> Result<Quick> {
        if !self.posted.is_empty() {
            return Ok(Quick::Posted);
        }
        let Some(i) = self.unexpected.iter().position(|a| sel.matches(a)) else {
            return Ok(Quick::Nothing);
        };
        if matches!(self.unexpected[i].body, Body::Scout { .. }) {
            return Ok(Quick::Posted);
        }
        let a = self.unexpected.remove(i).expect("in range");
        let info = a.info();
        let err = too_long(a.len, buf.len());
        match a.body {
            Body::Slot { slot, tail } => self.slot_out(a.src, slot, a.len, tail, buf)?,
            Body::Heap(v) => buf.write(0, &v),
            Body::Scout { .. } => unreachable!("handled above"),
        }
        if !sel.internal {
            self.last = Some(info);
        }
        Ok(Quick::Got(info, err))
    }

    /// Copies the `len`-byte message in packet buffer `slot` of `p` (its last `len % 4`
    /// bytes in `tail`) into `buf`, as much as fits, and frees the packet buffer.
    fn slot_out(
        &mut self,
        p: usize,
        slot: u32,
        len: usize,
        tail: [u8; 4],
        buf: UserBuf,
    ) -> Result<()> {
        let len4 = len & !3;
        let off = self.lay.hdr_off(slot) - len4;
        buf.fill_from(0, &self.peer(p).inbuf, off, len4);
        buf.write(len4, &tail[..len - len4]);
        self.free_slot(p, slot)
    }

    /// Hands message `a` to receive `mid`.
    fn deliver(&mut self, mid: Mid, a: Arrival) -> Result<()> {
        let info = a.info();
        let buf = self.reqs.get(&mid).expect("a posted receive").buf;
        let err = too_long(a.len, buf.len());
        match a.body {
            Body::Slot { slot, tail } => {
                self.slot_out(a.src, slot, a.len, tail, buf)?;
                self.complete(mid, Some(info), err);
            }
            Body::Heap(v) => {
                buf.write(0, &v);
                self.complete(mid, Some(info), err);
            }
            Body::Scout { id, notify } => {
                let n = a.len.min(buf.len());
                let mut blocking = self.cfg.pull && self.reqs.get(&mid).is_some_and(|r| r.blocking);
                let exported = if n & !3 == 0 {
                    // Nothing worth a transfer: the bytes come in the done message.
                    self.export_for(a.src, buf, n, true).map(|b| (b, false))
                } else {
                    self.export_recv(a.src, mid, buf, n)
                };
                let reply_buf = match exported {
                    Ok((b, bounced)) => {
                        // The sender writes into the bounce memory: no reads into `buf`.
                        blocking &= !bounced;
                        b
                    }
                    Err(e) => {
                        // No memory to take the data: the receive fails, and the reply
                        // takes no bytes, so that the sender's transfer ends (as if the
                        // receive were cancelled) instead of waiting for ever.
                        self.complete(mid, Some(info), Some(e));
                        let b = self.export_for(a.src, buf, 0, true)?;
                        let reply = Hdr {
                            kind: K_REPLY | if notify { F_NOTIFY } else { 0 },
                            id,
                            buf: b,
                            ..Hdr::default()
                        };
                        return self.send_or_queue(a.src, reply, &[]);
                    }
                };
                let reply = Hdr {
                    kind: K_REPLY
                        | if notify { F_NOTIFY } else { 0 }
                        | if blocking { F_PULL } else { 0 },
                    id,
                    n: n as u64,
                    buf: reply_buf,
                    ..Hdr::default()
                };
                if let Some(r) = self.reqs.get_mut(&mid) {
                    r.info = Some(info);
                    r.state = St::AwaitData {
                        src: a.src,
                        buf: reply.buf,
                        id,
                        n,
                    };
                }
                self.awaiting.insert((a.src, reply.buf), mid);
                self.send_or_queue(a.src, reply, &[])?;
            }
        }
        Ok(())
    }

    /// Exports the memory of zero-copy receive `mid` for `src` to take `n` bytes: the first
    /// `n` bytes of `buf`, or, where those cannot be exported (they overlap the exported
    /// memory of another receive in flight), memory of the library's that the data is copied
    /// from when it is in place (`true`).
    fn export_recv(
        &mut self,
        src: usize,
        mid: Mid,
        buf: UserBuf,
        n: usize,
    ) -> Result<(BufId, bool)> {
        if let Ok(b) = self.export_for(src, buf, n, false) {
            return Ok((b, false));
        }
        let mut bounce = vec![0u8; n & !3];
        let id = self.export_for(src, buf, 0, true)?;
        let proc = self.peer(src).proc;
        // Not cached: it is unexported when the data is in place or the receive cancelled,
        // before the memory is dropped with its request.
        let region = UserBuf::lent_mut(&mut bounce).region();
        self.ep
            .export(id, &region, ExportOptions::new().importers([proc]))?;
        if let Some(r) = self.reqs.get_mut(&mid) {
            r.bounce = Some(bounce);
        }
        Ok((id, true))
    }

    /// Exports the first `n` bytes of `buf` for `src` (or only reserves an id, `id_only`).
    fn export_for(&mut self, src: usize, buf: UserBuf, n: usize, id_only: bool) -> Result<BufId> {
        let addr = buf.region_addr();
        if self.cfg.reg_cache && !id_only {
            self.tick += 1;
            let tick = self.tick;
            if let Some(e) = self
                .exported
                .iter_mut()
                .find(|e| !e.in_use && e.src == src && e.addr == addr && e.len >= n)
            {
                e.in_use = true;
                e.used = tick;
                return Ok(e.buf);
            }
        }
        let id = self.next_buf;
        self.next_buf = if id >= LARGE_LAST {
            LARGE_FIRST
        } else {
            id + 1
        };
        if id_only {
            return Ok(id);
        }
        let proc = self.peer(src).proc;
        // With the cache, the whole buffer (later receives into it may be longer).
        let len = if self.cfg.reg_cache { buf.len() } else { n };
        let region = buf.prefix(len).region();
        let opts = ExportOptions::new().importers([proc]);
        match self.ep.export(id, &region, opts.clone()) {
            Ok(()) => {}
            Err(vmmc::Error::Overlap(_)) if self.cfg.reg_cache => {
                // Cached exports of memory reused since: drop those that overlap.
                let (lo, hi) = (addr, addr + len);
                let mut keep = Vec::new();
                for e in std::mem::take(&mut self.exported) {
                    if !e.in_use && e.addr < hi && lo < e.addr + e.len {
                        let _ = self.ep.unexport(e.buf);
                    } else {
                        keep.push(e);
                    }
                }
                self.exported = keep;
                match self.ep.export(id, &region, opts.clone()) {
                    Ok(()) => {}
                    // It overlaps memory of a receive in flight: what this receive takes, not
                    // cached (the cache's entries are whole buffers).
                    Err(vmmc::Error::Overlap(_)) if n < len => {
                        self.ep.export(id, &buf.prefix(n).region(), opts)?;
                        return Ok(id);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
        if self.cfg.reg_cache {
            if self.exported.len() >= CACHE_ENTRIES {
                if let Some(i) = self
                    .exported
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| !e.in_use)
                    .min_by_key(|(_, e)| e.used)
                    .map(|(i, _)| i)
                {
                    let e = self.exported.remove(i);
                    let _ = self.ep.unexport(e.buf);
                }
            }
            self.tick += 1;
            self.exported.push(CachedExport {
                addr,
                len,
                src,
                buf: id,
                in_use: true,
                used: self.tick,
            });
        }
        Ok(id)
    }

    /// The proxy of `p`'s receive memory `buf`: imported, or from the cache.
    fn import_for(&mut self, p: usize, buf: BufId) -> Result<vmmc::Proxy> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.imported.iter_mut().find(|e| (e.0, e.1) == (p, buf)) {
            e.3 = tick;
            return Ok(e.2.clone());
        }
        let proc = self.peer(p).proc;
        let proxy = self.ep.import(proc, buf)?;
        if self.cfg.reg_cache {
            if self.imported.len() >= CACHE_ENTRIES {
                if let Some(i) = self
                    .imported
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.3)
                    .map(|(i, _)| i)
                {
                    self.imported.remove(i);
                }
            }
            self.imported.push((p, buf, proxy.clone(), tick));
        }
        Ok(proxy)
    }

    /// Marks `mid` complete; a handler receive's handler is queued to run, an ignored request
    /// is released.
    fn complete(&mut self, mid: Mid, info: Option<Info>, err: Option<NxError>) {
        self.completions += 1;
        if let Some((f, sent)) = self.send_handlers.remove(&mid) {
            self.reqs.remove(&mid);
            match err {
                // Nobody waits for this send: its failure shows at the next call.
                Some(e) => {
                    self.deferred.get_or_insert(e);
                }
                None => self.queue_handler(f, sent),
            }
            return;
        }
        let Some(r) = self.reqs.get_mut(&mid) else {
            return;
        };
        if r.handler.is_some() || r.ignored {
            let mut r = self.reqs.remove(&mid).expect("present");
            if let Some(f) = r.handler.take() {
                self.handlers_posted -= 1;
                self.want_known = false;
                match (err, info) {
                    // A failed handler receive (a message too long for its buffer, a sender
                    // that could not write the data): its handler does not run, and nobody
                    // waits for the receive: the error shows at the process's next call.
                    (Some(e), _) => {
                        self.deferred.get_or_insert(e);
                    }
                    (None, Some(info)) => {
                        self.ready.push((f, info, r.owned.take()));
                        self.has_ready.store(true, Ordering::Release);
                    }
                    (None, None) => {}
                }
            }
            return;
        }
        r.state = St::Done(info, err);
    }

    /// Posts a receive; it takes a message that already arrived if one matches.
    pub fn post_recv(
        &mut self,
        sel: Sel,
        buf: UserBuf,
        owned: Option<Vec<u8>>,
        handler: Option<HandlerFn>,
        blocking: bool,
    ) -> Result<Mid> {
        let mid = next_mid(self);
        if handler.is_some() {
            self.handlers_posted += 1;
            self.want_known = false;
        }
        self.reqs.insert(
            mid,
            Req {
                sel,
                buf,
                owned,
                bounce: None,
                handler,
                state: St::Posted,
                info: None,
                ignored: false,
                blocking,
            },
        );
        match self.unexpected.iter().position(|a| sel.matches(a)) {
            Some(i) => {
                let a = self.unexpected.remove(i).expect("in range");
                self.deliver(mid, a)?;
            }
            None => self.posted.push_back(mid),
        }
        self.update_want()?;
        Ok(mid)
    }

    /// Registers a send request (complete at once, or when zero-copy send `large` is done).
    pub fn new_send_req(&mut self, large: Option<u32>) -> Mid {
        let mid = next_mid(self);
        let state = match large {
            Some(id) => St::Sending { id },
            None => St::Done(None, None),
        };
        self.reqs.insert(
            mid,
            Req {
                sel: Sel {
                    typesel: -1,
                    nodesel: -1,
                    ptypesel: -1,
                    internal: false,
                },
                buf: UserBuf::empty(),
                owned: None,
                handler: None,
                state,
                info: None,
                ignored: false,
                blocking: false,
                bounce: None,
            },
        );
        mid
    }

    /// A zero-copy send is complete: a handler send's handler gets its buffer back.
    fn complete_send(&mut self, mid: Mid, owned: Option<Vec<u8>>) {
        match self.send_handlers.remove(&mid) {
            Some((f, sent)) => {
                self.completions += 1;
                self.reqs.remove(&mid);
                self.ready.push((f, sent, owned));
                self.has_ready.store(true, Ordering::Release);
            }
            None => self.complete(mid, None, None),
        }
    }

    /// Queues `f` to run with `info` (by [`Core::run_ready`], outside the lock).
    pub fn queue_handler(&mut self, f: HandlerFn, info: Info) {
        self.ready.push((f, info, None));
        self.has_ready.store(true, Ordering::Release);
    }

    /// Makes send request `mid` a handler send: released when complete, then `f` runs with
    /// `info` (the sent message's).
    pub fn on_send_done(&mut self, mid: Mid, f: HandlerFn, info: Info) {
        self.send_handlers.insert(mid, (f, info));
    }

    /// Attaches request `mid` to zero-copy send `id`.
    pub fn bind_large(&mut self, id: u32, mid: Mid) {
        if let Some(ls) = self.large.get_mut(&id) {
            ls.mid = Some(mid);
        } else {
            self.complete(mid, None, None);
        }
    }

    /// The request, if complete: releases it.
    pub fn take_done(&mut self, mid: Mid) -> Result<Option<Completed>> {
        let r = self.reqs.get(&mid).ok_or(NxError::InvalidMid(mid))?;
        if !matches!(r.state, St::Done(..)) {
            return Ok(None);
        }
        let r = self.reqs.remove(&mid).expect("present");
        let St::Done(info, err) = r.state else {
            unreachable!()
        };
        if info.is_some() && !r.sel.internal {
            self.last = info;
        }
        Ok(Some(Completed {
            info,
            buf: r.owned,
            err,
        }))
    }

    /// The peer a request waits for, if one (for the hopeless-wait check).
    pub fn waits_for(&self, mid: Mid) -> Option<usize> {
        match &self.reqs.get(&mid)?.state {
            St::AwaitData { src, .. } => Some(*src),
            St::Sending { id } => self.large.get(id).map(|l| l.dest),
            St::Posted => {
                let n = self.reqs.get(&mid)?.sel.nodesel;
                (n >= 0).then_some(n as usize)
            }
            St::Done(..) => None,
        }
    }

    /// msgcancel: the request is released; a receive stops (its memory is no longer
    /// written), a send goes on from a copy.
    pub fn cancel(&mut self, mid: Mid) -> Result<Option<Vec<u8>>> {
        let r = self.reqs.get(&mid).ok_or(NxError::InvalidMid(mid))?;
        match r.state {
            St::Posted => {
                self.posted.retain(|m| *m != mid);
            }
            St::AwaitData { src, buf, id, .. } => {
                let invited = r.blocking && self.cfg.pull;
                self.awaiting.remove(&(src, buf));
                // Breaks the link: the sender's transfer stops, nothing more is written.
                self.revoke(buf);
                if invited {
                    // The sender may wait for this receive's reads: they will not come.
                    let h = Hdr {
                        kind: K_PULLED,
                        id,
                        ..Hdr::default()
                    };
                    let _ = self.send_or_queue(src, h, &[]);
                }
            }
            St::Sending { id } => self.make_safe(id),
            St::Done(..) => {}
        }
        let mut r = self.reqs.remove(&mid).expect("present");
        if r.handler.take().is_some() {
            self.handlers_posted -= 1;
            self.want_known = false;
        }
        self.update_want()?;
        Ok(r.owned)
    }

    /// msgignore: released now if complete, else when it completes.
    pub fn ignore(&mut self, mid: Mid) -> Result<()> {
        let r = self.reqs.get_mut(&mid).ok_or(NxError::InvalidMid(mid))?;
        if matches!(r.state, St::Done(..)) {
            self.reqs.remove(&mid);
        } else {
            r.ignored = true;
        }
        Ok(())
    }

    /// The first arrived message that `sel` accepts (probes).
    pub fn probe(&mut self, sel: Sel) -> Option<Info> {
        let i = self.unexpected.iter().find(|a| sel.matches(a))?.info();
        if !sel.internal {
            self.last = Some(i);
        }
        Some(i)
    }

    /// Forgets a zero-copy send that failed. A receiver reading its memory is cut off
    /// first: revoking the export waits for reads in flight.
    pub fn forget_large(&mut self, id: u32) {
        if let Some(LargeSend {
            pulling: Some(exp), ..
        }) = self.large.remove(&id)
        {
            self.revoke(exp);
        }
    }

    /// Unexports zero-copy memory `buf` (and drops it from the registration cache): peers
    /// can no longer write or read it, and transfers in flight are over when this returns.
    fn revoke(&mut self, buf: BufId) {
        self.exported.retain(|e| e.buf != buf);
        let _ = self.ep.unexport(buf);
    }

    /// Whether messages for `p` wait for its packet buffers (a word that this process is
    /// finishing, [`K_BYE`], alone does not keep it waiting).
    fn queue_busy(&self, p: usize) -> bool {
        self.peers[p]
            .as_ref()
            .is_some_and(|x| x.queue.iter().any(|o| o.hdr.kind != K_BYE))
    }

    /// While this process finishes: drops the messages for peers that are finishing too
    /// (they receive nothing more), zero-copy sends and queued messages alike. The words of
    /// the protocol queued for them stay: their own sends may wait for those.
    /// Forgets every zero-copy send to `p`.
    fn forget_large_to(&mut self, p: usize) {
        let ids: Vec<u32> = self
            .large
            .iter()
            .filter(|(_, l)| l.dest == p)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.forget_large(id);
        }
    }

    fn discard_for_finishing(&mut self) {
        for p in 0..self.n {
            if !self.peers[p].as_ref().is_some_and(|x| x.finishing) {
                continue;
            }
            self.forget_large_to(p);
            self.peer(p)
                .queue
                .retain(|o| !matches!(o.hdr.kind & !FLAGS, K_MSG | K_SCOUT));
        }
    }

    /// Whether a word that a sender waits for ([`K_PULLED`]) waits in the queue towards `p`.
    pub fn pulled_queued(&self, p: usize) -> bool {
        self.peers[p]
            .as_ref()
            .is_some_and(|x| x.queue.iter().any(|o| o.hdr.kind == K_PULLED))
    }
}

/// A write to a peer that left is no error when only that peer needed it.
fn ignore_gone(r: vmmc::Result<()>) -> Result<()> {
    match r {
        Err(vmmc::Error::PeerLost(_) | vmmc::Error::Unexported) => Ok(()),
        r => Ok(r?),
    }
}

fn too_long(len: usize, cap: usize) -> Option<NxError> {
    (len > cap).then_some(NxError::MessageTooLong { len, cap })
}

/// The hasher of message ids: ids are consecutive integers, so a multiplication spreads them
/// well enough, and the polling loops look requests up often.
#[derive(Default)]
pub(crate) struct MidHasher(u64);

impl Hasher for MidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::{advance_mid, MID_LIMIT};

    #[test]
    fn request_ids_wrap_past_those_in_use() {
        let (mut last, mut wrapped) = (MID_LIMIT - 3, false);
        // Before the wrap nothing is looked up, even an id said to be in use.
        assert_eq!(
            advance_mid(&mut last, &mut wrapped, |_| true),
            MID_LIMIT - 2
        );
        assert_eq!(
            advance_mid(&mut last, &mut wrapped, |_| false),
            MID_LIMIT - 1
        );
        assert!(!wrapped);
        // After MID_LIMIT - 1 comes 1 (0 is never an id), skipping the ids still in use.
        let in_use = |m| m == 1 || m == 2 || m == 4;
        assert_eq!(advance_mid(&mut last, &mut wrapped, in_use), 3);
        assert!(wrapped);
        assert_eq!(advance_mid(&mut last, &mut wrapped, in_use), 5);
        // The look-ups go on after the wrap, round and round.
        last = MID_LIMIT - 1;
        assert_eq!(advance_mid(&mut last, &mut wrapped, |m| m < 10), 10);
    }
}
