//! # vmmc-tcp: the TCP transport (hosts connected by TCP)
//!
//! Every pair of ranks shares one TCP connection. A deliberate update is a frame: a 32-byte
//! header (kind, notify flag, length, the export's key, offset) and the data. No sender
//! touches a receiver's memory: the receiver's progress engine reads each frame and places it
//! straight into the exported region, after checking on arrival that the key names a live
//! export, that the sender may write it and that the range is inside it (as libfabric's tcp
//! provider verifies every RMA iov); a refused frame is discarded and counted ([`Stats`]).
//! The body lands first and the last word last with a release store, so "flag after the data"
//! protocols hold; a notification is a flag in the header, raised after its data is placed.
//! TCP keeps each connection in order, which gives the model's in-order delivery.
//!
//! The progress engine is one thread per process that blocks in epoll (mio) with a waker: an
//! idle job burns no CPU. Remote read and automatic update are the core's emulations
//! (request/reply over deliberate updates, combined stores sent as deliberate updates). A
//! fence is a round trip on the connection.
//!
//! The trusted party is the [`server::Rendezvous`]: it holds the export table and its
//! permissions, hands out keys to permitted importers and tells survivors when a rank leaves.
//! A rank that dies (reset, end of stream without a goodbye, keepalive timeout) is
//! [`Error::PeerLost`] for the survivors, who keep running.
//!
//! Environment: `VMMC_RENDEZVOUS=host:port` names the rendezvous; it is hosted by rank 0 unless
//! `VMMC_RENDEZVOUS_BY=launcher` says the launcher hosts it (`vmmc-run --transport tcp` does).
//! A rank 0 that hosts it leaves the job only once every other rank has (as `MPI_Finalize`
//! waits): the others still need the trusted party.
//! `VMMC_TCP_STATS=PATH` writes this rank's statistics as JSON at exit (`{rank}` in PATH is
//! replaced by the rank). Ranks must share byte order (a notification's value is a native word).
//!
//! A job grows by `vmmc_Spawn` (see `Endpoint::spawn`) when a launcher hosts the rendezvous:
//! the new process gets the next rank (beyond the initial size, never reused) and the next
//! squid of its node; the rendezvous welcomes it with every process so far and tells the
//! others (`Joined`), which connect to it and fill its slot in their peer tables. Those tables
//! hold the initial ranks plus [`MAX_SPAWNED`], filled once, so the progress engine and the
//! senders read them without a lock; a spawned process is lost like any rank, by its
//! connections and the rendezvous's `Gone`.

mod engine;
pub mod proto;
pub mod server;
mod sys;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use proto::{kind, Header, Msg, FLAG_NOTIFY, HEADER, MAGIC};
use std::collections::{HashMap, VecDeque};
use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::redirect::{Piece, RedirSlot, Redirected};
use vmmc::{
    BufId, Caps, Error, ExportSpec, ImportPoll, Importers, JobInfo, Notification, ProcId, Region,
    RemoteBuffer, Result, Transport, WriteOpts, WORD_SIZE,
};

/// Names the party hosting the rendezvous: `launcher` or `rank0` (the default).
pub const RENDEZVOUS_BY: &str = "VMMC_RENDEZVOUS_BY";
/// Where a rank writes its statistics at exit.
pub const STATS_VAR: &str = "VMMC_TCP_STATS";

/// How long a rank waits for the rendezvous and for its peers' connections.
const CONNECT_WAIT: Duration = Duration::from_secs(60);
/// How long leaving waits for peers to acknowledge the last bytes sent to them.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// How long [`TcpTransport::peer_crashed`] waits for the rendezvous's verdict on a peer
/// whose connection broke without a goodbye.
pub const VERDICT_WAIT: Duration = Duration::from_secs(2);
/// Granularity at which blocked senders look for a lost peer.
const SLICE: Duration = Duration::from_millis(100);
/// Chunk of a message into a redirectable buffer (redirection is consulted between chunks).
const REDIR_CHUNK: usize = 4096;
/// Size of a connection's receive buffer in user space.
const RX_BUF: usize = 256 * 1024;
/// From this many bytes still to come, a body is received straight into the region.
const DIRECT: usize = 4096;
/// Largest frame a peer may announce (a longer one is a protocol error, not data).
const MAX_FRAME: u64 = 1 << 40;
/// Notifications the progress engine queues for the core before it stops reading.
const NOTE_CAP: usize = 1 << 16;
const WAKE: Token = Token(usize::MAX);

/// Connection states.
const ALIVE: u32 = 0;
const ENDED: u32 = 1;
const LOST: u32 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the transport did, for tests and for proof that traffic crossed TCP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent on data connections.
    pub frames_sent: u64,
    /// Bytes sent on data connections, headers included.
    pub bytes_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Bytes received, headers included.
    pub bytes_received: u64,
    /// Writes placed into receive buffers.
    pub writes_placed: u64,
    /// Writes refused on arrival: no live export has their key.
    pub refused_unknown: u64,
    /// Writes refused on arrival: outside the buffer or not word-aligned.
    pub refused_bounds: u64,
    /// Writes refused on arrival: the sender may not import the buffer.
    pub refused_permission: u64,
    /// Writes refused on arrival: the buffer is being unexported.
    pub refused_unexported: u64,
    /// Notifications raised.
    pub notifications: u64,
}

impl Stats {
    /// One line of JSON.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"frames_sent\":{},\"bytes_sent\":{},\"frames_received\":{},\"bytes_received\":{},\
             \"writes_placed\":{},\"refused_unknown\":{},\"refused_bounds\":{},\
             \"refused_permission\":{},\"refused_unexported\":{},\"notifications\":{}}}",
            self.frames_sent,
            self.bytes_sent,
            self.frames_received,
            self.bytes_received,
            self.writes_placed,
            self.refused_unknown,
            self.refused_bounds,
            self.refused_permission,
            self.refused_unexported,
            self.notifications
        )
    }

    /// Parses [`Stats::to_json`]'s output (for tests reading a rank's file).
    pub fn from_json(s: &str) -> Option<Stats> {
        let get = |k: &str| -> Option<u64> {
            let at = s.find(&format!("\"{k}\":"))? + k.len() + 3;
            let rest = &s[at..];
            let end = rest.find(|c: char| !c.is_ascii_digit())?;
            rest[..end].parse().ok()
        };
        Some(Stats {
            frames_sent: get("frames_sent")?,
            bytes_sent: get("bytes_sent")?,
            frames_received: get("frames_received")?,
            bytes_received: get("bytes_received")?,
            writes_placed: get("writes_placed")?,
            refused_unknown: get("refused_unknown")?,
            refused_bounds: get("refused_bounds")?,
            refused_permission: get("refused_permission")?,
            refused_unexported: get("refused_unexported")?,
            notifications: get("notifications")?,
        })
    }
}

#[derive(Default)]
struct Counters {
    frames_sent: AtomicU64,
    bytes_sent: AtomicU64,
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
    writes_placed: AtomicU64,
    refused_unknown: AtomicU64,
    refused_bounds: AtomicU64,
    refused_permission: AtomicU64,
    refused_unexported: AtomicU64,
    notifications: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            frames_sent: g(&self.frames_sent),
            bytes_sent: g(&self.bytes_sent),
            frames_received: g(&self.frames_received),
            bytes_received: g(&self.bytes_received),
            writes_placed: g(&self.writes_placed),
            refused_unknown: g(&self.refused_unknown),
            refused_bounds: g(&self.refused_bounds),
            refused_permission: g(&self.refused_permission),
            refused_unexported: g(&self.refused_unexported),
            notifications: g(&self.notifications),
        }
    }
}

/// An exported receive buffer, as the progress engine sees it.
struct Entry {
    buf: BufId,
    key: u64,
    base: *mut u8,
    len: usize,
    importers: Importers,
    has_handler: bool,
    redirectable: bool,
    redir: RedirSlot,
    /// Set by unexport before it waits for `busy` to drain (Dekker, as shm's windows).
    revoked: AtomicU32,
    /// Frames being placed into the buffer.
    busy: AtomicU32,
}

// SAFETY: `base` points into a region the core keeps alive while the buffer is exported;
// it is written only by the progress engine inside a `busy` section that unexport waits for.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

/// A frame being placed into `entry`: counted busy until dropped.
struct Busy(Arc<Entry>);

impl Busy {
    /// Enters the buffer, unless unexport has begun.
    fn enter(e: &Arc<Entry>) -> Option<Busy> {
        e.busy.fetch_add(1, Ordering::SeqCst);
        if e.revoked.load(Ordering::SeqCst) != 0 {
            e.busy.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Busy(e.clone()))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The sender's view of an export: broken when the exporter revokes its key.
#[derive(Default)]
struct Link {
    revoked: AtomicU32,
    /// One-sided writes of an embedding transport under way through this link (see
    /// [`RemoteTcp::enter`]); the progress engine waits for them when the key is revoked.
    in_flight: AtomicU32,
}

/// The connection to one peer.
struct Conn {
    rank: usize,
    sock: TcpStream,
    /// Serialises whole frames; holds the last fence sequence number sent.
    send: Mutex<u64>,
    acked: Mutex<u64>,
    acked_cv: Condvar,
    state: AtomicU32,
    saw_bye: AtomicBool,
    /// The rendezvous reported the peer gone (ENDED or LOST): the progress engine reads what
    /// the connection still holds, then marks it.
    reported: AtomicU32,
    /// The rendezvous's report, kept (`reported` is taken by the progress engine).
    verdict: AtomicU32,
}

impl Conn {
    /// A data connection to `rank`, hello exchanged.
    fn open(rank: usize, s: TcpStream) -> Result<Arc<Conn>> {
        tune(&s)?;
        s.set_nonblocking(true)
            .map_err(|e| Error::io("non-blocking", e))?;
        Ok(Arc::new(Conn {
            rank,
            sock: s,
            send: Mutex::new(0),
            acked: Mutex::new(0),
            acked_cv: Condvar::new(),
            state: AtomicU32::new(ALIVE),
            saw_bye: AtomicBool::new(false),
            reported: AtomicU32::new(ALIVE),
            verdict: AtomicU32::new(ALIVE),
        }))
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn check(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            ALIVE => Ok(()),
            ENDED => Err(Error::PeerLost(format!("rank {} left the job", self.rank))),
            _ => Err(Error::PeerLost(format!(
                "rank {} (connection lost)",
                self.rank
            ))),
        }
    }

    fn mark(&self, state: u32) {
        // A peer that said goodbye left cleanly, whatever its socket does next: closed with
        // our last frames unread, it answers them with a reset, which a send or a read here
        // then meets.
        let state = if state == LOST && self.saw_bye.load(Ordering::Acquire) {
            ENDED
        } else {
            state
        };
        let _ = self
            .state
            .compare_exchange(ALIVE, state, Ordering::AcqRel, Ordering::Acquire);
        let _g = lock(&self.acked);
        self.acked_cv.notify_all();
        // A thread asleep in a wait (`vmmc::wait`) looks at its peers again now.
        vmmc::wait::ring_local();
    }

    /// Sends one frame, waiting (in poll, not spinning) while the socket is full.
    fn send_frame(&self, h: &Header, data: &[u8], c: &Counters) -> Result<()> {
        let _g = lock(&self.send);
        self.send_locked(h, data, c)
    }

    fn send_locked(&self, h: &Header, data: &[u8], c: &Counters) -> Result<()> {
        self.check()?;
        let hb = h.encode();
        let total = HEADER + data.len();
        let mut done = 0;
        while done < total {
            let r = if done < HEADER {
                sys::send_vectored(self.fd(), &[IoSlice::new(&hb[done..]), IoSlice::new(data)])
            } else {
                sys::send_vectored(self.fd(), &[IoSlice::new(&data[done - HEADER..])])
            };
            match r {
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.check()?;
                    sys::wait_writable(self.fd(), SLICE);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.mark(LOST);
                    return Err(Error::PeerLost(format!("rank {}: {e}", self.rank)));
                }
            }
        }
        bump(&c.frames_sent, 1);
        bump(&c.bytes_sent, total as u64);
        Ok(())
    }

    /// Waits until the peer has placed every frame sent before this call.
    fn fence(&self, c: &Counters) -> Result<()> {
        let seq = {
            let mut g = lock(&self.send);
            *g += 1;
            let h = Header {
                kind: kind::FENCE,
                offset: *g,
                ..Default::default()
            };
            self.send_locked(&h, &[], c)?;
            *g
        };
        let mut a = lock(&self.acked);
        while *a < seq {
            self.check()?;
            a = self
                .acked_cv
                .wait_timeout(a, SLICE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Notes {
    q: VecDeque<Notification>,
    woken: bool,
}

#[derive(Default)]
struct Exports {
    by_key: HashMap<u64, Arc<Entry>>,
    by_buf: HashMap<BufId, Arc<Entry>>,
}

/// How many processes `vmmc_Spawn` may add to a job: the peer tables are sized for the
/// initial ranks plus these, so the fast paths index them without a lock.
pub const MAX_SPAWNED: usize = 256;

/// A table by rank whose slots are filled once: at the start for the initial ranks, when a
/// spawned process joins for the others (read without a lock by the progress engine and
/// the senders).
pub(crate) struct Slots<T>(Vec<OnceLock<T>>);

impl<T> Slots<T> {
    fn new(capacity: usize) -> Slots<T> {
        Slots((0..capacity).map(|_| OnceLock::new()).collect())
    }
    pub(crate) fn get(&self, r: usize) -> Option<&T> {
        self.0.get(r).and_then(OnceLock::get)
    }
    fn set(&self, r: usize, v: T) -> bool {
        self.0.get(r).is_some_and(|s| s.set(v).is_ok())
    }
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
    /// The filled slots.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().filter_map(OnceLock::get)
    }
}

/// What the application threads and the progress engine share.
struct Shared {
    rank: usize,
    /// Identity of each process by rank (spawned ones from when they join).
    procs: Slots<ProcId>,
    conns: Slots<Arc<Conn>>,
    /// Registers the connections of processes that join later with the progress engine.
    registry: mio::Registry,
    exports: Mutex<Exports>,
    /// (owner rank, key) -> link state, for every key imported or revoked.
    links: Mutex<HashMap<(usize, u64), Arc<Link>>>,
    notes: Mutex<Notes>,
    notes_cv: Condvar,
    space_cv: Condvar,
    /// Fence acknowledgements owed, by rank (the highest sequence number).
    acks: Mutex<HashMap<usize, u64>>,
    acks_cv: Condvar,
    stats: Counters,
    stop: AtomicBool,
    /// Wakes the progress engine.
    waker: Waker,
}

impl Shared {
    fn link(&self, owner: usize, key: u64) -> Arc<Link> {
        lock(&self.links).entry((owner, key)).or_default().clone()
    }

    /// Drops the table's link for `key` of `owner` (its holders keep it, revoked or not): the
    /// next import of the key makes a new one.
    fn forget_link(&self, owner: usize, key: u64) {
        lock(&self.links).remove(&(owner, key));
    }

    fn notify(&self, n: Notification) {
        let mut q = lock(&self.notes);
        while q.q.len() >= NOTE_CAP && !self.stop.load(Ordering::SeqCst) {
            // Back-pressure into TCP: stop reading until the core drains the queue.
            q = self
                .space_cv
                .wait_timeout(q, SLICE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        q.q.push_back(n);
        bump(&self.stats.notifications, 1);
        self.notes_cv.notify_one();
    }

    /// Places a whole message already in hand (redirectable buffers and writes to oneself)
    /// without raising its notification.
    fn deliver(&self, e: &Entry, offset: usize, data: &[u8]) -> Result<()> {
        if e.redirectable {
            e.redir.deliver(offset, data, REDIR_CHUNK, |p| {
                match p {
                    // SAFETY: the range was checked against the buffer on arrival.
                    Piece::Default(o, d) => unsafe {
                        vmmc::transport::copy_ordered(e.base.add(o), d)
                    },
                    // SAFETY: the receiver posted this destination in its own memory, which
                    // stays valid until `end_redir` (the core's contract for post_redir).
                    Piece::Redirect(a, d) => unsafe {
                        vmmc::transport::copy_ordered(a as *mut u8, d)
                    },
                }
                Ok(())
            })?;
        } else {
            // SAFETY: the range was checked against the buffer on arrival.
            unsafe { vmmc::transport::copy_ordered(e.base.add(offset), data) };
        }
        Ok(())
    }

    fn placed(&self, e: &Entry, offset: usize, len: usize, last: &[u8], notify: bool) {
        bump(&self.stats.writes_placed, 1);
        // A program thread of this process may sleep in a wait for this data (`vmmc::wait`):
        // the data is in place, so ring the process's bell.
        vmmc::wait::ring_local();
        if notify && e.has_handler {
            self.notify(Notification {
                buf: e.buf,
                offset: offset + len - WORD_SIZE,
                value: u32::from_ne_bytes(last.try_into().expect("a word")),
            });
        }
    }

    /// The checks on arrival. Returns the buffer to place into, or `None` (refused, counted).
    fn admit(&self, from: usize, h: &Header) -> Option<Busy> {
        let e = lock(&self.exports).by_key.get(&h.key).cloned();
        let Some(e) = e else {
            bump(&self.stats.refused_unknown, 1);
            return None;
        };
        if !self.procs.get(from).is_some_and(|p| e.importers.allows(*p)) {
            bump(&self.stats.refused_permission, 1);
            return None;
        }
        let w = WORD_SIZE as u64;
        if h.len == 0
            || !h.len.is_multiple_of(w)
            || !h.offset.is_multiple_of(w)
            || h.offset
                .checked_add(h.len)
                .is_none_or(|end| end > e.len as u64)
        {
            bump(&self.stats.refused_bounds, 1);
            return None;
        }
        let b = Busy::enter(&e);
        if b.is_none() {
            bump(&self.stats.refused_unexported, 1);
        }
        b
    }
}

#[derive(Default)]
struct Replies {
    stash: HashMap<u64, Msg>,
    broken: Option<String>,
}

/// The tcp transport of one process.
pub struct TcpTransport {
    job: JobInfo,
    sh: Arc<Shared>,
    rv: Mutex<TcpStream>,
    replies: Arc<(Mutex<Replies>, Condvar)>,
    next_req: AtomicU64,
    requests: Mutex<HashMap<u64, (usize, BufId)>>,
    next_key: AtomicU64,
    consumer: Mutex<()>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    own_rendezvous: Option<server::Rendezvous>,
    finished: AtomicBool,
    /// Unexport waits until every peer has seen the revocation (see
    /// [`TcpTransport::set_revoke_waits`]).
    revoke_waits: AtomicBool,
}

fn connect_retry(addr: &str) -> Result<TcpStream> {
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        let r = addr
            .to_socket_addrs()
            .map_err(|e| Error::Bootstrap(format!("bad rendezvous address {addr:?}: {e}")))?
            .next()
            .ok_or_else(|| Error::Bootstrap(format!("no address for {addr:?}")))
            .map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(5)));
        match r? {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                // The rendezvous may not be listening yet (rank 0 starts it): retry.
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(Error::Bootstrap(format!(
                    "cannot reach the rendezvous at {addr}: {e}"
                )))
            }
        }
    }
}

/// Sets TCP_NODELAY and the timers that find a peer host that vanished without a reset
/// (keepalive probes after 5 s of silence, 1 s apart, 5 of them; and a send that nobody
/// acknowledges for as long breaks the connection): such a peer is lost within about 10 s.
pub fn tune(s: &TcpStream) -> Result<()> {
    s.set_nodelay(true)
        .map_err(|e| Error::io("TCP_NODELAY", e))?;
    let r = socket2::SockRef::from(s);
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(1))
        .with_retries(5);
    r.set_tcp_keepalive(&ka)
        .map_err(|e| Error::io("SO_KEEPALIVE", e))?;
    // With keepalive on, this also bounds the probing (tcp(7)): keep the two in step.
    r.set_tcp_user_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| Error::io("TCP_USER_TIMEOUT", e))?;
    Ok(())
}

/// Accepts one connection within the deadline.
fn accept_until(l: &TcpListener, deadline: Instant) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Bootstrap("peers did not connect in time".into()));
        }
        let mut p = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, left.as_millis().min(1000) as i32) };
        match l.accept() {
            Ok((s, _)) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("accept", e)),
        }
    }
}

impl TcpTransport {
    /// Joins the job described by the launcher's environment.
    pub fn connect(env: &BootEnv) -> Result<TcpTransport> {
        Self::connect_with(env, None)
    }

    /// Joins the job, with `hosted` the rendezvous this process already started (an embedding
    /// transport's rank 0, which publishes its address by other means); the transport keeps
    /// it and leaves the job last, as a rank 0 that hosts it always does.
    pub fn connect_with(env: &BootEnv, hosted: Option<server::Rendezvous>) -> Result<TcpTransport> {
        Self::join(env, hosted, vmmc::bootstrap::parent_from_env())
    }

    /// Joins the job as a process spawned by `parent` (an embedding transport's, which
    /// learned its rank and spawner by other means than the environment).
    pub fn connect_spawned(env: &BootEnv, parent: ProcId) -> Result<TcpTransport> {
        Self::join(env, None, Some(parent))
    }

    fn join(
        env: &BootEnv,
        hosted: Option<server::Rendezvous>,
        parent: Option<ProcId>,
    ) -> Result<TcpTransport> {
        let by_launcher = std::env::var(RENDEZVOUS_BY).is_ok_and(|v| v == "launcher");
        let (addr, own) = match (&env.rendezvous, hosted) {
            (_, Some(rv)) => (rv.addr().to_string(), Some(rv)),
            (Some(a), None) if env.rank == 0 && !by_launcher => {
                let rv = server::Rendezvous::start(a, env.size)?;
                (rv.addr().to_string(), Some(rv))
            }
            (Some(a), None) => (a.clone(), None),
            (None, None) if env.size == 1 => {
                let rv = server::Rendezvous::start("127.0.0.1:0", 1)?;
                (rv.addr().to_string(), Some(rv))
            }
            (None, None) => {
                return Err(Error::Bootstrap(
                    "the tcp transport needs VMMC_RENDEZVOUS=host:port (rank 0 listens there)"
                        .into(),
                ))
            }
        };
        let rv = connect_retry(&addr)?;
        tune(&rv)?;
        // Data connections come in on the address this host reaches the rendezvous from.
        let ip = rv
            .local_addr()
            .map_err(|e| Error::io("local_addr", e))?
            .ip();
        let listener = TcpListener::bind((ip, 0)).map_err(|e| Error::io("data listener", e))?;
        let listen = listener
            .local_addr()
            .map_err(|e| Error::io("local_addr", e))?
            .to_string();
        Msg::Hello {
            rank: env.rank as u32,
            size: env.size as u32,
            listen,
        }
        .send(&rv)
        .map_err(|e| Error::io("rendezvous hello", e))?;
        // A spawned process: its welcome also lists the spawned processes that joined before
        // it with higher ranks.
        let (mut procs, hosts, addrs) = match Msg::recv(&rv)? {
            Some(Msg::Welcome {
                procs,
                hosts,
                addrs,
            }) if procs.len() >= env.size
                && addrs.len() == procs.len()
                && (procs.len() == env.size || parent.is_some()) =>
            {
                (procs, hosts, addrs)
            }
            Some(Msg::Err { text, .. }) => return Err(Error::Bootstrap(text)),
            None => {
                return Err(Error::Bootstrap(
                    "the rendezvous closed the connection".into(),
                ))
            }
            Some(other) => return Err(Error::Protocol(format!("expected welcome, got {other:?}"))),
        };
        let (mut conns, deferred) = if parent.is_some() {
            Self::mesh_spawned(env, &listener, &addrs, &rv)?
        } else {
            (Self::mesh(env, &listener, &addrs)?, Vec::new())
        };
        let poll = Poll::new().map_err(|e| Error::io("epoll", e))?;
        for c in conns.iter().flatten() {
            poll.registry()
                .register(&mut SourceFd(&c.fd()), Token(c.rank), Interest::READABLE)
                .map_err(|e| Error::io("epoll_ctl", e))?;
        }
        let waker = Waker::new(poll.registry(), WAKE).map_err(|e| Error::io("eventfd", e))?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(|e| Error::io("epoll dup", e))?;
        let cap = env.size + MAX_SPAWNED;
        let (slots, peers) = (Slots::new(cap), Slots::new(cap));
        for (r, p) in procs.iter().enumerate() {
            // A rank not joined yet gets its identity when it does (`Joined`).
            if *p != server::NOBODY {
                slots.set(r, *p);
            }
        }
        procs.truncate(env.size);
        for (r, c) in conns.drain(..).enumerate() {
            if let Some(c) = c {
                peers.set(r, c);
            }
        }
        let sh = Arc::new(Shared {
            rank: env.rank,
            procs: slots,
            conns: peers,
            registry,
            exports: Mutex::new(Exports::default()),
            links: Mutex::new(HashMap::new()),
            notes: Mutex::new(Notes::default()),
            notes_cv: Condvar::new(),
            space_cv: Condvar::new(),
            acks: Mutex::new(HashMap::new()),
            acks_cv: Condvar::new(),
            stats: Counters::default(),
            stop: AtomicBool::new(false),
            waker,
        });
        let replies: Arc<(Mutex<Replies>, Condvar)> = Arc::default();
        let mut threads = Vec::new();
        let s = sh.clone();
        threads.push(
            std::thread::Builder::new()
                .name("vmmc-tcp-progress".into())
                .spawn(move || engine::progress_engine(s, poll))
                .map_err(|e| Error::io("spawn the progress engine", e))?,
        );
        let s = sh.clone();
        threads.push(
            std::thread::Builder::new()
                .name("vmmc-tcp-acks".into())
                .spawn(move || engine::ack_sender(s))
                .map_err(|e| Error::io("spawn the ack sender", e))?,
        );
        // Processes spawned while this one joined, before the reader reads what follows.
        for (rank, proc, addr) in deferred {
            if let Err(e) = join_peer(&sh, rank, proc, &addr) {
                eprintln!("vmmc-tcp: cannot connect to spawned rank {rank} at {addr}: {e}");
            }
        }
        let (s, rp) = (sh.clone(), replies.clone());
        let reader = rv.try_clone().map_err(|e| Error::io("dup", e))?;
        std::thread::Builder::new()
            .name("vmmc-tcp-rendezvous-reader".into())
            .spawn(move || rendezvous_reader(s, reader, rp))
            .map_err(|e| Error::io("spawn the rendezvous reader", e))?;
        let job = JobInfo {
            rank: env.rank,
            size: env.size,
            procs,
            hosts,
            parent,
        };
        // The waiting policy (`vmmc::wait`) learns how many ranks share this host's cores.
        let me = job.procs[env.rank].node;
        vmmc::wait::set_local_procs(job.procs.iter().filter(|p| p.node == me).count());
        Ok(TcpTransport {
            job,
            sh,
            rv: Mutex::new(rv),
            replies,
            next_req: AtomicU64::new(1),
            requests: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(((env.rank as u64) << 40) | 1),
            consumer: Mutex::new(()),
            threads: Mutex::new(threads),
            own_rendezvous: own,
            finished: AtomicBool::new(false),
            revoke_waits: AtomicBool::new(false),
        })
    }

    /// A spawned process's connections: every process alive when it joined (the ones with
    /// an address in its welcome) connects to it when the rendezvous tells it so. One that
    /// leaves before it does is reported gone on the rendezvous connection, read here too:
    /// it is then no longer waited for. Spawned processes that join meanwhile (`Joined`) are
    /// returned, to connect to once the transport runs.
    #[allow(clippy::type_complexity)]
    fn mesh_spawned(
        env: &BootEnv,
        l: &TcpListener,
        addrs: &[String],
        rv: &TcpStream,
    ) -> Result<(Vec<Option<Arc<Conn>>>, Vec<(usize, ProcId, String)>)> {
        let mut socks: Vec<Option<TcpStream>> = (0..addrs.len()).map(|_| None).collect();
        let mut want: std::collections::HashSet<usize> = (0..addrs.len())
            .filter(|&r| r != env.rank && !addrs[r].is_empty())
            .collect();
        let mut deferred = Vec::new();
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener", e))?;
        let deadline = Instant::now() + CONNECT_WAIT;
        while !want.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Bootstrap(format!(
                    "processes {want:?} did not connect in time"
                )));
            }
            let mut p = [
                libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: rv.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(p.as_mut_ptr(), 2, left.as_millis().min(1000) as i32) };
            if p[1].revents != 0 {
                match Msg::recv(rv)? {
                    Some(Msg::Gone { rank, .. }) => {
                        want.remove(&(rank as usize));
                    }
                    Some(Msg::Joined { rank, proc, addr }) => {
                        deferred.push((rank as usize, proc, addr))
                    }
                    Some(Msg::Err { text, .. }) => return Err(Error::Bootstrap(text)),
                    Some(other) => {
                        return Err(Error::Protocol(format!(
                            "unexpected {other:?} while joining"
                        )))
                    }
                    None => {
                        return Err(Error::Bootstrap(
                            "the rendezvous closed the connection".into(),
                        ))
                    }
                }
            }
            let mut s = match l.accept() {
                Ok((s, _)) => s,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::Interrupted =>
                {
                    continue
                }
                Err(e) => return Err(Error::io("accept", e)),
            };
            s.set_nonblocking(false)
                .map_err(|e| Error::io("blocking", e))?;
            s.set_read_timeout(Some(CONNECT_WAIT))
                .map_err(|e| Error::io("timeout", e))?;
            let mut b = [0u8; HEADER];
            if s.read_exact(&mut b).is_err() {
                // A process that connected and left at once: its `Gone` follows.
                continue;
            }
            let h = Header::decode(&b);
            let r = h.offset as usize;
            if h.kind != kind::HELLO
                || h.key != MAGIC
                || r >= addrs.len()
                || r == env.rank
                || addrs[r].is_empty()
                || socks[r].is_some()
            {
                return Err(Error::Protocol(format!(
                    "unexpected data connection (hello {h:?})"
                )));
            }
            s.set_read_timeout(None)
                .map_err(|e| Error::io("timeout", e))?;
            socks[r] = Some(s);
            want.remove(&r);
        }
        let conns = socks
            .into_iter()
            .enumerate()
            .map(|(r, s)| s.map(|s| Conn::open(r, s)).transpose())
            .collect::<Result<_>>()?;
        Ok((conns, deferred))
    }

    /// One connection per pair: each rank connects to the lower ranks and accepts the higher.
    fn mesh(env: &BootEnv, l: &TcpListener, addrs: &[String]) -> Result<Vec<Option<Arc<Conn>>>> {
        let mut socks: Vec<Option<TcpStream>> = (0..addrs.len()).map(|_| None).collect();
        let (connect, accept) = (env.rank, env.size - env.rank - 1);
        for (r, a) in addrs.iter().enumerate().take(connect) {
            let mut s = a
                .parse()
                .map_err(|e| Error::Bootstrap(format!("rank {r}'s address {a:?}: {e}")))
                .and_then(|sa| {
                    TcpStream::connect_timeout(&sa, Duration::from_secs(10)).map_err(|e| {
                        Error::Bootstrap(format!("cannot connect to rank {r} at {a}: {e}"))
                    })
                })?;
            let h = Header {
                kind: kind::HELLO,
                key: MAGIC,
                offset: env.rank as u64,
                ..Default::default()
            };
            s.write_all(&h.encode())
                .map_err(|e| Error::io("hello to a peer", e))?;
            socks[r] = Some(s);
        }
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener", e))?;
        let deadline = Instant::now() + CONNECT_WAIT;
        for _ in 0..accept {
            let mut s = accept_until(l, deadline)?;
            s.set_nonblocking(false)
                .map_err(|e| Error::io("blocking", e))?;
            s.set_read_timeout(Some(CONNECT_WAIT))
                .map_err(|e| Error::io("timeout", e))?;
            let mut b = [0u8; HEADER];
            s.read_exact(&mut b)
                .map_err(|e| Error::io("hello from a peer", e))?;
            let h = Header::decode(&b);
            let r = h.offset as usize;
            if h.kind != kind::HELLO
                || h.key != MAGIC
                || r <= env.rank
                || r >= env.size
                || socks[r].is_some()
            {
                return Err(Error::Protocol(format!(
                    "unexpected data connection (hello {h:?})"
                )));
            }
            s.set_read_timeout(None)
                .map_err(|e| Error::io("timeout", e))?;
            socks[r] = Some(s);
        }
        socks
            .into_iter()
            .enumerate()
            .map(|(r, s)| s.map(|s| Conn::open(r, s)).transpose())
            .collect()
    }

    /// Exports with a key chosen by the caller (an embedding transport encodes where the
    /// buffer lies in its own address space); keys must be unique within this process for
    /// the whole job, as revoked keys stay revoked.
    pub fn export_keyed(&self, spec: ExportSpec<'_>, key: u64) -> Result<()> {
        let e = Arc::new(Entry {
            buf: spec.buf,
            key,
            base: spec.region.as_ptr(),
            len: spec.region.len(),
            importers: spec.importers.clone(),
            has_handler: spec.has_handler,
            redirectable: spec.redirectable,
            redir: RedirSlot::new(),
            revoked: AtomicU32::new(0),
            busy: AtomicU32::new(0),
        });
        {
            let mut ex = lock(&self.sh.exports);
            if ex.by_buf.contains_key(&spec.buf) {
                return Err(Error::BufIdInUse(spec.buf));
            }
            ex.by_buf.insert(spec.buf, e.clone());
            ex.by_key.insert(key, e);
        }
        let req = self.req();
        let m = Msg::Export {
            req,
            buf: spec.buf,
            len: spec.region.len() as u64,
            key,
            has_handler: spec.has_handler,
            importers: spec.importers.clone(),
        };
        let r = match self.call(req, &m) {
            Ok(Msg::Ok { .. }) => Ok(()),
            Ok(Msg::Err { code, text, .. }) => Err(proto::error_from(code, text, spec.buf)),
            Ok(other) => Err(Error::Protocol(format!("unexpected {other:?}"))),
            Err(e) => Err(e),
        };
        if r.is_err() {
            let mut ex = lock(&self.sh.exports);
            ex.by_buf.remove(&spec.buf);
            ex.by_key.remove(&key);
        }
        r
    }

    /// Makes unexport wait until every live peer has processed the revocation, so that an
    /// embedding transport's one-sided writes through the old links are complete when it
    /// returns (each peer's progress engine waits for them, see [`RemoteTcp::enter`]).
    pub fn set_revoke_waits(&self, on: bool) {
        self.revoke_waits.store(on, Ordering::SeqCst);
    }

    /// Before `key` is exported again: every live peer (and this process) forgets that it
    /// was revoked, and has when this returns (a fence on every connection), so that its
    /// imports of the new export work while links to the earlier one stay revoked. For an
    /// embedding transport whose keys come from a bounded space (the mpi transport's carry
    /// the buffer's address and a generation): a key revoked once would otherwise look
    /// revoked for the job's life.
    pub fn unrevoke(&self, key: u64) {
        self.sh.forget_link(self.job.rank, key);
        let h = Header {
            kind: kind::UNREVOKE,
            key,
            ..Default::default()
        };
        // A peer that is lost meanwhile imports nothing more: its error is no failure here.
        for c in self.sh.conns.iter() {
            let _ = c.send_frame(&h, &[], &self.sh.stats);
        }
        for c in self.sh.conns.iter() {
            let _ = c.fence(&self.sh.stats);
        }
    }

    /// [`Transport::import_poll`] returning the link itself, for an embedding transport.
    pub fn import_poll_link(&self, request: u64, wait: bool) -> Result<Option<RemoteTcp>> {
        let (owner, buf) = *lock(&self.requests)
            .get(&request)
            .ok_or(Error::InvalidArgument("unknown import request"))?;
        let Some(m) = self.wait_reply(request, wait)? else {
            return Ok(None);
        };
        lock(&self.requests).remove(&request);
        match m {
            Msg::ImportOk {
                key,
                len,
                has_handler,
                ..
            } => {
                Ok(Some(RemoteTcp {
                    sh: self.sh.clone(),
                    conn: if owner == self.job.rank {
                        None
                    } else {
                        Some(self.sh.conns.get(owner).cloned().ok_or_else(|| {
                            Error::PeerLost(format!("no connection to rank {owner}"))
                        })?)
                    },
                    owner,
                    key,
                    len: len as usize,
                    has_handler,
                    link: self.sh.link(owner, key),
                }))
            }
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, buf)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    /// Whether `rank` died without leaving the job cleanly, as the rendezvous reported it.
    /// A peer whose connection broke without a goodbye on it, and whose report has not come
    /// yet, while this process has not started to leave, is waited for up to
    /// [`VERDICT_WAIT`] (a peer that left cleanly can break the connection first: closed with
    /// frames of ours unread, its socket answers with a reset, which may overtake its
    /// goodbye); without a report by then it counts as crashed.
    pub fn peer_crashed(&self, rank: usize) -> bool {
        let Some(c) = self.sh.conns.get(rank) else {
            return false;
        };
        let deadline = Instant::now() + VERDICT_WAIT;
        let mut g = lock(&c.acked);
        loop {
            match c.verdict.load(Ordering::Acquire) {
                LOST => return true,
                ENDED => return false,
                _ => {}
            }
            if self.finished.load(Ordering::Acquire)
                || c.saw_bye.load(Ordering::Acquire)
                || c.state.load(Ordering::Acquire) != LOST
            {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            g = c
                .acked_cv
                .wait_timeout(g, (deadline - now).min(SLICE))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// This rank's statistics so far.
    pub fn stats(&self) -> Stats {
        self.sh.stats.snapshot()
    }

    /// Sends a rendezvous request and waits for its reply.
    fn call(&self, req: u64, m: &Msg) -> Result<Msg> {
        self.rv_send(m)?;
        self.wait_reply(req, true).map(|r| r.expect("blocking"))
    }

    fn rv_send(&self, m: &Msg) -> Result<()> {
        m.send(&*lock(&self.rv))
            .map_err(|_| Error::PeerLost("the rendezvous is gone".into()))
    }

    fn wait_reply(&self, req: u64, block: bool) -> Result<Option<Msg>> {
        let (m, cv) = &*self.replies;
        let mut g = lock(m);
        loop {
            if let Some(r) = g.stash.remove(&req) {
                return Ok(Some(r));
            }
            if let Some(e) = &g.broken {
                return Err(Error::PeerLost(e.clone()));
            }
            if !block {
                return Ok(None);
            }
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The rank of a process of the job: the initial ranks and every process spawned since
    /// (whose identity the rendezvous told this one when it joined).
    fn rank_of(&self, p: ProcId) -> Option<usize> {
        self.job
            .rank_of(p)
            .or_else(|| (0..self.sh.procs.len()).find(|&r| self.sh.procs.get(r) == Some(&p)))
            .or_else(|| {
                // Told of a spawned process by a peer before the rendezvous's `Joined` was
                // read: catch up with the rendezvous, which sent it first.
                if p.node == server::NOBODY.node || self.finished.load(Ordering::Acquire) {
                    return None;
                }
                let req = self.req();
                matches!(self.call(req, &Msg::Sync { req }), Ok(Msg::Ok { .. })).then_some(())?;
                (0..self.sh.procs.len()).find(|&r| self.sh.procs.get(r) == Some(&p))
            })
    }

    fn req(&self) -> u64 {
        self.next_req.fetch_add(1, Ordering::Relaxed)
    }

    /// `vmmc_Spawn` where this process starts the new one itself (the rendezvous was told
    /// so, [`server::Rendezvous::set_spawn_by_requester`]): the rendezvous reserves a rank,
    /// `start` starts the process with that rank and this process as its parent, and the
    /// new process's identity is returned once it joined. An `Err` from `start` fails the
    /// spawn (the rank stays unused).
    pub fn spawn_started_by(
        &self,
        spec: &vmmc::SpawnSpec<'_>,
        start: &mut dyn FnMut(&server::SpawnOrder) -> std::result::Result<(), String>,
    ) -> Result<ProcId> {
        let req = self.req();
        let m = Msg::Spawn {
            req,
            host: spec.host.to_string(),
            program: spec.program.to_string(),
            args: spec.args.to_vec(),
        };
        let mut reply = self.call(req, &m)?;
        if let Msg::Start { rank, parent, .. } = reply {
            let order = server::SpawnOrder {
                rank: rank as usize,
                host: spec.host.to_string(),
                program: spec.program.to_string(),
                args: spec.args.to_vec(),
                parent,
            };
            if let Err(text) = start(&order) {
                self.rv_send(&Msg::StartFailed { rank, text })?;
            }
            reply = self.wait_reply(req, true)?.expect("blocking");
        }
        match reply {
            Msg::Spawned { proc, .. } => Ok(proc),
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, 0)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    /// Test hook: the key and length of `owner`'s buffer `buf`, obtained through the trusted
    /// party like an import (so only a permitted importer learns it).
    #[doc(hidden)]
    pub fn key_of(&self, owner: usize, buf: BufId) -> Result<(u64, usize)> {
        let req = self.req();
        match self.call(
            req,
            &Msg::Import {
                req,
                owner: owner as u32,
                buf,
            },
        )? {
            Msg::ImportOk { key, len, .. } => Ok((key, len as usize)),
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, buf)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    /// Test hook: sends a raw write frame to `rank`, unchecked by this side (to show that
    /// the receiver checks on arrival).
    #[doc(hidden)]
    pub fn send_raw_write(&self, rank: usize, key: u64, offset: u64, data: &[u8]) -> Result<()> {
        let c = self
            .sh
            .conns
            .get(rank)
            .ok_or(Error::InvalidArgument("no connection to that rank"))?;
        let h = Header {
            kind: kind::WRITE,
            flags: 0,
            len: data.len() as u64,
            key,
            offset,
        };
        c.send_frame(&h, data, &self.sh.stats)
    }

    fn entry(&self, buf: BufId) -> Result<Arc<Entry>> {
        lock(&self.sh.exports)
            .by_buf
            .get(&buf)
            .cloned()
            .ok_or(Error::NoSuchBuffer(buf))
    }

    fn write_stats(&self) {
        let Ok(path) = std::env::var(STATS_VAR) else {
            return;
        };
        if path.is_empty() {
            return;
        }
        let path = path.replace("{rank}", &self.job.rank.to_string());
        if let Err(e) = std::fs::write(&path, self.stats().to_json() + "\n") {
            eprintln!("vmmc-tcp: cannot write the statistics to {path}: {e}");
        }
    }
}

/// Connects to a process spawned into the job and hands the connection to the progress
/// engine.
fn join_peer(sh: &Shared, rank: usize, proc: ProcId, addr: &str) -> Result<()> {
    if rank >= sh.conns.len() {
        return Err(Error::InvalidArgument(
            "more spawned processes than MAX_SPAWNED",
        ));
    }
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| Error::Bootstrap(format!("address {addr:?}: {e}")))?;
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .map_err(|e| Error::io("connect to a spawned process", e))?;
    let h = Header {
        kind: kind::HELLO,
        key: MAGIC,
        offset: sh.rank as u64,
        ..Default::default()
    };
    s.write_all(&h.encode())
        .map_err(|e| Error::io("hello to a spawned process", e))?;
    let c = Conn::open(rank, s)?;
    sh.procs.set(rank, proc);
    if !sh.conns.set(rank, c.clone()) {
        return Err(Error::Protocol(format!("rank {rank} joined twice")));
    }
    sh.registry
        .register(&mut SourceFd(&c.fd()), Token(rank), Interest::READABLE)
        .map_err(|e| Error::io("epoll_ctl", e))
}

fn rendezvous_reader(sh: Arc<Shared>, s: TcpStream, replies: Arc<(Mutex<Replies>, Condvar)>) {
    let (m, cv) = &*replies;
    loop {
        match Msg::recv(&s) {
            Ok(Some(Msg::Gone { rank, crashed })) => {
                if let Some(c) = sh.conns.get(rank as usize) {
                    // Not at once: the rendezvous may overtake the data connection, whose
                    // frames sent before the peer left must be placed first.
                    let how = if crashed { LOST } else { ENDED };
                    c.verdict.store(how, Ordering::SeqCst);
                    c.reported.store(how, Ordering::SeqCst);
                    let _ = sh.waker.wake();
                    // A `peer_crashed` may wait for this verdict.
                    let _g = lock(&c.acked);
                    c.acked_cv.notify_all();
                }
            }
            Ok(Some(Msg::Joined { rank, proc, addr })) => {
                // Before any later reply is read: a spawner learns the new process's identity
                // only after its connection is in place.
                if let Err(e) = join_peer(&sh, rank as usize, proc, &addr) {
                    eprintln!("vmmc-tcp: cannot connect to spawned rank {rank} at {addr}: {e}");
                }
            }
            Ok(Some(msg)) => {
                let req = match &msg {
                    Msg::Spawned { req, .. } | Msg::Start { req, .. } => *req,
                    Msg::Ok { req } | Msg::Err { req, .. } | Msg::ImportOk { req, .. } => *req,
                    _ => continue,
                };
                lock(m).stash.insert(req, msg);
                cv.notify_all();
            }
            _ => {
                lock(m).broken = Some("the rendezvous is gone".into());
                cv.notify_all();
                return;
            }
        }
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn caps(&self) -> Caps {
        Caps {
            remote_read: false,
            native_au: false,
            redirection: true,
            async_send: false,
            max_write: 0,
            au_packetizer: false,
        }
    }

    fn job(&self) -> &JobInfo {
        &self.job
    }

    fn export(&self, spec: ExportSpec<'_>) -> Result<()> {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.export_keyed(spec, key)
    }

    fn unexport(&self, buf: BufId) -> Result<()> {
        let e = self.entry(buf)?;
        // Refuse new frames, then wait for the one being placed (its sender keeps sending it,
        // or dies and the progress engine drops it).
        e.revoked.store(1, Ordering::SeqCst);
        let mut spins = 0u32;
        while e.busy.load(Ordering::SeqCst) != 0 {
            spins = spins.wrapping_add(1);
            if spins > 100 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        {
            let mut ex = lock(&self.sh.exports);
            ex.by_buf.remove(&buf);
            ex.by_key.remove(&e.key);
        }
        // Break the importers' links: they learn it on their connection, in order after every
        // frame of theirs that was refused.
        self.sh
            .link(self.job.rank, e.key)
            .revoked
            .store(1, Ordering::SeqCst);
        let h = Header {
            kind: kind::REVOKE,
            key: e.key,
            ..Default::default()
        };
        for c in self.sh.conns.iter() {
            let _ = c.send_frame(&h, &[], &self.sh.stats);
        }
        if self.revoke_waits.load(Ordering::SeqCst) {
            // A peer that is lost meanwhile writes nothing more: its error is no failure here.
            for c in self.sh.conns.iter() {
                let _ = c.fence(&self.sh.stats);
            }
        }
        let req = self.req();
        match self.call(req, &Msg::Unexport { req, buf })? {
            Msg::Ok { .. } => Ok(()),
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, buf)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64> {
        let rank = self
            .rank_of(owner)
            .ok_or_else(|| Error::PeerLost(format!("{owner} (not a process of this job)")))?;
        if !self.peer_alive(owner) {
            return Err(Error::PeerLost(format!("rank {rank}")));
        }
        let req = self.req();
        lock(&self.requests).insert(req, (rank, buf));
        if let Err(e) = self.rv_send(&Msg::Import {
            req,
            owner: rank as u32,
            buf,
        }) {
            lock(&self.requests).remove(&req);
            return Err(e);
        }
        Ok(req)
    }

    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll> {
        Ok(match self.import_poll_link(request, wait)? {
            None => ImportPoll::Pending,
            Some(r) => ImportPoll::Ready(Box::new(r)),
        })
    }

    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let Ok(_one) = self.consumer.try_lock() else {
            // Another thread consumes and delivers; do not spin the caller.
            let nap = timeout.unwrap_or(Duration::from_millis(1));
            std::thread::sleep(nap.min(Duration::from_millis(1)));
            return Ok(0);
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        let batch = {
            let mut q = lock(&self.sh.notes);
            loop {
                if !q.q.is_empty() {
                    break std::mem::take(&mut q.q);
                }
                if std::mem::take(&mut q.woken) {
                    return Ok(0);
                }
                q = match deadline {
                    None => self.sh.notes_cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Ok(0);
                        }
                        self.sh
                            .notes_cv
                            .wait_timeout(q, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                };
            }
        };
        self.sh.space_cv.notify_all();
        let n = batch.len();
        // Outside the lock: a sink may send (an emulated read's reply), and the progress
        // engine must keep queueing meanwhile.
        for x in batch {
            sink(x);
        }
        Ok(n)
    }

    fn wake(&self) {
        lock(&self.sh.notes).woken = true;
        self.sh.notes_cv.notify_all();
    }

    fn peer_alive(&self, p: ProcId) -> bool {
        match self.rank_of(p) {
            Some(r) if r == self.job.rank => true,
            Some(r) => self
                .sh
                .conns
                .get(r)
                .is_some_and(|c| c.state.load(Ordering::Acquire) == ALIVE),
            None => false,
        }
    }

    fn peer_failed(&self, p: ProcId) -> bool {
        match self.rank_of(p) {
            Some(r) if r == self.job.rank => false,
            Some(r) => self
                .sh
                .conns
                .get(r)
                .is_some_and(|c| c.state.load(Ordering::Acquire) == LOST),
            None => false,
        }
    }

    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        let e = self.entry(buf)?;
        if !e.redirectable {
            return Err(Error::NotRedirectable(buf));
        }
        e.redir.post(
            buf,
            dest.as_ptr() as u64 + dest_offset as u64,
            buf_offset,
            len,
        )
    }

    fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        // A message is redirected whole by the progress engine once it has arrived, so a
        // redirection in progress always finishes.
        self.entry(buf)?.redir.end(|| Ok(()))
    }

    fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        Ok(self.entry(buf)?.redir.data_end())
    }

    fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.entry(buf)?.redir.clear_data_end();
        Ok(())
    }

    fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _a = lock(&self.rv);
        let _b = lock(&self.requests);
        let _c = lock(&self.consumer);
        let _d = lock(&self.sh.exports);
        let _e = lock(&self.sh.links);
        f()
    }

    fn spawn(&self, spec: &vmmc::SpawnSpec<'_>) -> Result<ProcId> {
        let req = self.req();
        let m = Msg::Spawn {
            req,
            host: spec.host.to_string(),
            program: spec.program.to_string(),
            args: spec.args.to_vec(),
        };
        match self.call(req, &m)? {
            Msg::Spawned { proc, .. } => Ok(proc),
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, 0)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.write_stats();
        // Say goodbye on every connection, and wait until the peers' hosts have every byte:
        // closing a socket with unread data resets it, and a reset drops what is unsent.
        let bye = Header {
            kind: kind::BYE,
            ..Default::default()
        };
        let live: Vec<&Arc<Conn>> = self
            .sh
            .conns
            .iter()
            .filter(|c| c.send_frame(&bye, &[], &self.sh.stats).is_ok())
            .collect();
        let deadline = Instant::now() + DRAIN_WAIT;
        for c in &live {
            let _ = c.sock.shutdown(Shutdown::Write);
            while c.check().is_ok()
                && sys::unacked(c.fd()).is_ok_and(|n| n > 0)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = self.rv_send(&Msg::Bye);
        if self.own_rendezvous.is_some() {
            // The trusted party lives in this process: stay until every other rank has left.
            for c in self.sh.conns.iter() {
                let mut a = lock(&c.acked);
                while c.state.load(Ordering::Acquire) == ALIVE {
                    a = c
                        .acked_cv
                        .wait_timeout(a, SLICE)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        self.sh.stop.store(true, Ordering::SeqCst);
        let _ = self.sh.waker.wake();
        self.sh.acks_cv.notify_all();
        self.sh.space_cv.notify_all();
        for t in std::mem::take(&mut *lock(&self.threads)) {
            let _ = t.join();
        }
        let _ = lock(&self.rv).shutdown(Shutdown::Both);
        Ok(())
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The sender's side of a link: frames on the connection to the exporter.
pub struct RemoteTcp {
    sh: Arc<Shared>,
    /// `None` for a buffer this process exported itself.
    conn: Option<Arc<Conn>>,
    owner: usize,
    key: u64,
    len: usize,
    has_handler: bool,
    link: Arc<Link>,
}

/// A one-sided write under way through a link (see [`RemoteTcp::enter`]).
pub struct InFlight<'a>(&'a Link);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RemoteTcp {
    /// The exporter's rank.
    pub fn owner(&self) -> usize {
        self.owner
    }

    /// The export's key, as the exporter chose it.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Whether the exporter has a notification handler on the buffer.
    pub fn has_handler(&self) -> bool {
        self.has_handler
    }

    /// Whether the buffer belongs to this process.
    pub fn is_local(&self) -> bool {
        self.conn.is_none()
    }

    /// Starts a one-sided write of an embedding transport through this link: refused once
    /// the exporter has revoked it, and counted until the guard drops, so that the exporter's
    /// unexport (with [`TcpTransport::set_revoke_waits`]) returns only after it is complete.
    pub fn enter(&self) -> Result<InFlight<'_>> {
        self.link.in_flight.fetch_add(1, Ordering::SeqCst);
        let g = InFlight(&self.link);
        self.live()?;
        if let Some(c) = &self.conn {
            c.check()?;
        }
        Ok(g)
    }

    /// Announces a write that another path already made visible at the exporter: its last
    /// word (offset `last_at`, value `value`) is checked on arrival like a write, the
    /// exporter's bell is rung, and with `notify` its handler is called. Frames stay in order
    /// with this link's writes.
    pub fn placed(&self, last_at: usize, value: u32, notify: bool) -> Result<()> {
        let notify = notify && self.has_handler;
        let Some(c) = &self.conn else {
            return Err(Error::InvalidArgument(
                "a local buffer needs no announcement",
            ));
        };
        let at = u32::try_from(last_at)
            .map_err(|_| Error::InvalidArgument("announced offsets end at 4 GiB"))?;
        let h = Header {
            kind: kind::PLACED,
            flags: if notify { FLAG_NOTIFY } else { 0 },
            len: 0,
            key: self.key,
            offset: (u64::from(value) << 32) | u64::from(at),
        };
        c.send_frame(&h, &[], &self.sh.stats)
    }

    fn live(&self) -> Result<()> {
        if self.link.revoked.load(Ordering::Acquire) != 0 {
            return Err(Error::Unexported);
        }
        Ok(())
    }

    /// A write to a buffer of this process: placed at once, with the same checks.
    fn write_local(&self, offset: usize, data: &[u8], notify: bool) -> Result<()> {
        let h = Header {
            kind: kind::WRITE,
            flags: 0,
            len: data.len() as u64,
            key: self.key,
            offset: offset as u64,
        };
        let Some(b) = self.sh.admit(self.sh.rank, &h) else {
            return Err(Error::Unexported);
        };
        let e = b.0.clone();
        self.sh.deliver(&e, offset, data)?;
        drop(b);
        let last = &data[data.len() - WORD_SIZE..];
        self.sh.placed(&e, offset, data.len(), last, notify);
        Ok(())
    }
}

impl RemoteBuffer for RemoteTcp {
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        self.live()?;
        let notify = opts.notify && self.has_handler;
        let Some(c) = &self.conn else {
            return self.write_local(offset, data, notify);
        };
        let h = Header {
            kind: kind::WRITE,
            flags: if notify { FLAG_NOTIFY } else { 0 },
            len: data.len() as u64,
            key: self.key,
            offset: offset as u64,
        };
        c.send_frame(&h, data, &self.sh.stats)
    }

    fn fence(&self) -> Result<()> {
        match &self.conn {
            Some(c) => c.fence(&self.sh.stats),
            None => Ok(()),
        }
    }
}
