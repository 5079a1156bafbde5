//! Connections between processes of one VMMC job: the rings are exported and imported
//! through the endpoint, so they work on every transport, and the rendezvous goes through
//! VMMC itself (no kernel socket between nodes: on the simulated SHRIMP every node is a
//! thread of one process in virtual time).
//!
//! # Rendezvous
//!
//! A [`JobListener`] on port `p` exports a *listen buffer* with the well-known id
//! [`LISTEN_BASE`]` + p`: [`BACKLOG`] request slots of 16 bytes per rank of the job. To
//! connect, a process exports its incoming ring (only the listener's process may import
//! it), imports the listen buffer, and writes `[ring id, ring capacity, 0, sequence]` into a
//! free slot of its own rank, with a notification; the sequence word, last, is the flag.
//! `connect` returns then, as a kernel connect returns once the connection is in the
//! listener's backlog: a program may connect to several listeners (or to its own) before
//! anyone accepts. The listener's `accept` takes a request, exports its own incoming ring
//! for that process alone, imports the connecting ring and writes `[ring id, capacity,
//! sequence]` into its header words `ACC_ID..ACC_SEQ` (see [`crate::ring`]), with a
//! notification. The connecting side learns the listener's ring from these words when it
//! first needs it (its first write, a wait, or its close), and imports it; if the listener's
//! side has closed by then (and so unexported its ring), nothing is imported: reads take
//! what it wrote and then the end of file, writes fail with `BrokenPipe`. Slots are free
//! again once their request is answered; a process with [`BACKLOG`] requests pending to one
//! listener waits in its next `connect` until one is accepted.
//!
//! A connection waiting for its accept gives up when the listener's process leaves the job
//! or the listener closes (a resent request fails: the listen buffer is unexported). A
//! `connect` to a port nobody listens on waits for the listener to bind, as long as the
//! process lives.
//!
//! # Waiting
//!
//! Every wait goes through the core's one policy ([`vmmc::wait`]): on a paced thread (the
//! simulator) each turn advances virtual time to the next arrival and checks the peer's
//! liveness; elsewhere a waiter spins while that pays, yields where processes outnumber
//! cores, then sleeps on a condition variable that its ring's (or listen buffer's)
//! notification handler signals, in slices that bound the time to notice a dead peer.

use crate::error::Error;
use crate::ring::{would_block, Conn, Peer, PeerRing, ACC_ID, ACC_SEQ, CLOSED, HEADER};
use crate::stream::{Options, VmmcStream};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;
use vmmc::{BufId, Endpoint, ExportOptions, MemKind, ProcId, Proxy, Region};

/// Receive-buffer id of a listen buffer on port 0; port `p` uses `LISTEN_BASE + p`.
pub const LISTEN_BASE: BufId = 0x3000_0000;
/// Ids of the rings this process exports: above the listen buffers, below VRPC's ids.
const RING_FIRST: BufId = 0x3001_0000;
const RING_SPAN: u32 = 0x0fff_0000;
/// Request slots per rank in a listen buffer: connections of one process to one listener
/// that may wait for `accept` at the same time.
pub const BACKLOG: usize = 8;
const SLOT: usize = 16;

/// How long a listener waits for the grant of a requester's ring, which the requester
/// exported before it asked (generous: a loaded machine must not turn a real request away).
const RING_GRANT: Duration = Duration::from_secs(5);
/// Longest sleep of a non-paced waiter: bounds the time to notice a dead peer.
const SLICE: Duration = Duration::from_millis(20);
/// Paced turns between two resends of a pending request (a resend finds a closed listener).
const PROBE_TURNS: u32 = 256;

/// Wakes a sleeper of this process: a notification handler calls [`Waker::wake`].
#[derive(Default)]
pub(crate) struct Waker {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl Waker {
    pub(crate) fn wake(&self) {
        *self.gen.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_all();
    }

    /// The number of wake-ups so far: read it before arming, then sleep since it.
    pub(crate) fn gen(&self) -> u64 {
        *self.gen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps until a wake-up after `gen`, at most `d`.
    pub(crate) fn sleep_since(&self, gen: u64, d: Duration) {
        let g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout_while(g, d, |g| *g == gen);
    }
}

/// Polls `poll` until it gives a value, on the job's terms (see the module documentation);
/// `check` runs between turns (every turn when paced, every sleep slice otherwise) and ends
/// the wait with its error.
fn wait_for<T>(
    paced: bool,
    waker: Option<&Waker>,
    deadline: Option<u64>,
    mut poll: impl FnMut() -> io::Result<Option<T>>,
    mut check: impl FnMut() -> io::Result<()>,
) -> io::Result<T> {
    let expired = || deadline.is_some_and(|d| vmmc::pace::now_ns() >= d);
    // Nothing notifies a wait without a waker (an import of a buffer not yet exported): naps.
    let nap = vmmc::wait::Nap::new();
    let on: &dyn vmmc::wait::Sleep = match waker {
        Some(w) => w,
        None => &nap,
    };
    let left = deadline.map(|d| Duration::from_nanos(d.saturating_sub(vmmc::pace::now_ns())));
    let mut wait = vmmc::wait::Wait::on(&SETUP_SITE, on).timeout(left);
    loop {
        if let Some(v) = poll()? {
            return Ok(v);
        }
        if paced || wait.resting() {
            check()?;
            if expired() {
                return Err(would_block());
            }
        }
        wait.idle();
    }
}

/// Connection set-up's waits, in `vmmc::wait`'s counts.
static SETUP_SITE: vmmc::wait::Site = vmmc::wait::Site::new("sockets.setup");

impl vmmc::wait::Sleep for Waker {
    fn arm(&self) -> u64 {
        self.gen()
    }
    fn sleep(&self, gen: u64, d: Duration) {
        self.sleep_since(gen, d.min(SLICE));
    }
    fn disarm(&self) {}
}

fn refused(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionRefused, why.into())
}

fn lost(p: ProcId) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        Error::Vmmc(vmmc::Error::PeerLost(p.to_string())),
    )
}

/// The connecting side's first use of a connection whose listener side had already closed.
fn peer_closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the peer closed the connection before this side first used it",
    )
}

/// Imports `owner`'s buffer `id`, waiting for its export while `owner` lives and until
/// `gone` says the buffer will not come (then `WouldBlock`, as at the deadline).
fn import_within(
    ep: &Endpoint,
    owner: ProcId,
    id: BufId,
    paced: bool,
    deadline: Option<u64>,
    gone: impl Fn() -> bool,
) -> io::Result<Proxy> {
    let mut req = ep.import_async(owner, id).map_err(Error::from)?;
    wait_for(
        paced,
        None,
        deadline,
        || match req.status().map_err(|e| io::Error::from(Error::from(e)))? {
            None if gone() => Err(would_block()),
            r => Ok(r),
        },
        || ep.check_peer(owner).map_err(|_| lost(owner)),
    )
}

/// Exports `region` as a fresh ring id that only `importer` may import, with a handler that
/// wakes `waker`.
fn export_ring(
    ep: &Endpoint,
    region: &Region,
    importer: ProcId,
    waker: &Arc<Waker>,
) -> io::Result<BufId> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..4096 {
        let id = RING_FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % RING_SPAN;
        let w = waker.clone();
        let opts = ExportOptions::new()
            .importers([importer])
            .handler(move |_| w.wake());
        match ep.export(id, region, opts) {
            Ok(()) => return Ok(id),
            Err(vmmc::Error::BufIdInUse(_)) => continue,
            Err(e) => return Err(Error::from(e).into()),
        }
    }
    Err(io::Error::other(
        "no free receive-buffer id for a socket ring",
    ))
}

/// A ring's data capacity as used: a power of two from 4 KiB to 1 GiB.
fn ring_capacity(opts: &Options) -> io::Result<usize> {
    let cap = opts.capacity.max(4096).next_power_of_two();
    if cap > 1 << 30 {
        return Err(Error::Handshake("ring capacity above 1 GiB".into()).into());
    }
    Ok(cap)
}

fn valid_capacity(cap: usize) -> bool {
    cap.is_power_of_two() && (4096..=1 << 30).contains(&cap)
}

/// Which of this process's requests to a listener wait for an accept: (connecting
/// process, listening process, port) -> busy slots and the last sequence number used. Keyed
/// by the connecting process too: on the simulator every node is a thread of this process.
type SlotKey = (ProcId, ProcId, u16);
static SLOTS: Mutex<BTreeMap<SlotKey, (u32, [bool; BACKLOG])>> = Mutex::new(BTreeMap::new());

fn claim_slot(key: SlotKey) -> Option<(usize, u32)> {
    let mut t = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let (seq, busy) = t.entry(key).or_insert((0, [false; BACKLOG]));
    let k = busy.iter().position(|b| !b)?;
    busy[k] = true;
    *seq = seq.wrapping_add(1).max(1);
    Some((k, *seq))
}

fn free_slot(key: SlotKey, k: usize) {
    if let Some((_, busy)) = SLOTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&key)
    {
        busy[k] = false;
    }
}

/// A connect waiting for its accept.
struct Pending {
    listen: Proxy,
    key: SlotKey,
    slot: usize,
    /// The slot's offset in the listen buffer.
    offset: usize,
    request: [u8; SLOT],
    seq: u32,
    /// The wait ended (answered or given up): the slot is free again.
    done: AtomicBool,
}

/// A job-path connection's control: the endpoint, the peer, the wake-ups.
pub(crate) struct JobCtl {
    ep: Endpoint,
    peer: ProcId,
    peer_rank: usize,
    ring_id: BufId,
    pub(crate) waker: Arc<Waker>,
    /// Waits poll through the pacer (the simulator) instead of sleeping.
    pub(crate) paced: bool,
    pending: Option<Pending>,
    /// Serialises the connecting side's wait for its accept.
    resolving: Mutex<()>,
}

impl JobCtl {
    pub(crate) fn peer_alive(&self) -> bool {
        self.ep.peer_alive(self.peer)
    }

    /// The rank of the process at the other end.
    pub(crate) fn peer_rank(&self) -> usize {
        self.peer_rank
    }

    /// The connecting side: waits for the listener's accept in `incoming`'s header (unless
    /// `!block`) and imports the listener's ring.
    pub(crate) fn resolve<'a>(
        &self,
        incoming: &Region,
        once: &'a OnceLock<Peer>,
        block: bool,
    ) -> io::Result<&'a Peer> {
        let Some(p) = &self.pending else {
            return Err(io::Error::from(io::ErrorKind::NotConnected));
        };
        let _one = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(peer) = once.get() {
            return Ok(peer);
        }
        // The listener's side closed: its ring is unexported (after it set `CLOSED` here),
        // and an import of it would wait for nothing.
        let closed = || incoming.load_u32(CLOSED).is_ok_and(|c| c != 0);
        if closed() {
            return Err(peer_closed());
        }
        if p.done.load(Ordering::Relaxed) {
            return Err(refused("the connection was not accepted"));
        }
        let answered = || incoming.load_u32(ACC_SEQ).is_ok_and(|s| s == p.seq);
        if !block && !answered() {
            return Err(would_block());
        }
        let mut turns = 0u32;
        let r = wait_for(
            self.paced,
            Some(&self.waker),
            None,
            || Ok(answered().then_some(())),
            || {
                if !self.peer_alive() {
                    return Err(lost(self.peer));
                }
                turns += 1;
                if !self.paced || turns.is_multiple_of(PROBE_TURNS) {
                    // Resending the request changes nothing for a listener that has it; a
                    // listener that closed refuses the write.
                    if let Err(e) = p.listen.send(p.offset, &p.request) {
                        // A listener may answer and close between the last look and this
                        // resend (its answer is in place before its close is seen): the
                        // connection is then accepted, not refused.
                        if !answered() {
                            return Err(refused(format!("the listener closed: {e}")));
                        }
                    }
                }
                Ok(())
            },
        )
        .and_then(|()| {
            let id = incoming.load_u32(ACC_ID).map_err(Error::from)?;
            let cap = incoming.load_u32(ACC_ID + 4).map_err(Error::from)? as usize;
            if !valid_capacity(cap) {
                return Err(Error::Handshake(format!("bad listener ring capacity {cap}")).into());
            }
            let proxy = import_within(&self.ep, self.peer, id, self.paced, None, closed)
                .map_err(|e| if closed() { peer_closed() } else { e })?;
            Ok(Peer {
                cap,
                ring: PeerRing::Imported(proxy),
            })
        });
        p.done.store(true, Ordering::Relaxed);
        free_slot(p.key, p.slot);
        let peer = r?;
        Ok(once.get_or_init(|| peer))
    }

    /// Unexports this side's ring (after the last words to the peer).
    pub(crate) fn close(&self) {
        if let Some(p) = &self.pending {
            if !p.done.swap(true, Ordering::Relaxed) {
                free_slot(p.key, p.slot);
            }
        }
        let _ = self.ep.unexport(self.ring_id);
    }
}

/// A VMMC stream socket listening for connections from processes of its job, in the shape
/// of `std::net::TcpListener`: bound to a port of this process, reached by rank and port.
///
/// ```no_run
/// use std::io::{Read, Write};
/// vmmc_run::run(|ep| {
///     let talk = || -> std::io::Result<()> {
///         if ep.rank() == 0 {
///             let l = sockets::JobListener::bind(&ep, 7)?;
///             for _ in 1..ep.size() {
///                 let (mut s, rank) = l.accept()?;
///                 s.write_all(&[rank as u8])?;
///             }
///         } else {
///             let mut s = sockets::VmmcStream::connect_job(&ep, 0, 7)?;
///             let mut b = [0u8; 1];
///             s.read_exact(&mut b)?;
///             assert_eq!(b[0] as usize, ep.rank());
///         }
///         Ok(())
///     };
///     talk().map_err(|e| vmmc::Error::io("sockets", e))
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct JobListener {
    ep: Endpoint,
    port: u16,
    listen: Region,
    opts: Options,
    waker: Arc<Waker>,
    paced: bool,
    /// The last sequence number taken from each slot.
    taken: Mutex<Vec<u32>>,
    /// Where the next scan of the slots starts (fairness between ranks).
    next: AtomicUsize,
    nonblocking: AtomicBool,
    /// Malformed connection requests refused so far.
    rejected: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for JobListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobListener")
            .field("rank", &self.ep.rank())
            .field("port", &self.port)
            .finish()
    }
}

impl JobListener {
    /// Listens on `port` of this process with options from the environment.
    pub fn bind(ep: &Endpoint, port: u16) -> io::Result<JobListener> {
        JobListener::bind_with(ep, port, Options::from_env()?)
    }

    /// Listens on `port` with the given options (the variant this side sends with, and its
    /// rings' capacity). `AddrInUse` if the port is taken in this process.
    pub fn bind_with(ep: &Endpoint, port: u16, opts: Options) -> io::Result<JobListener> {
        ring_capacity(&opts)?;
        let slots = ep.size() * BACKLOG;
        let listen = ep
            .alloc(slots * SLOT, MemKind::Shared)
            .map_err(Error::from)?;
        let waker = Arc::new(Waker::default());
        let w = waker.clone();
        match ep.export(
            LISTEN_BASE + BufId::from(port),
            &listen,
            ExportOptions::new().handler(move |_| w.wake()),
        ) {
            Ok(()) => {}
            Err(vmmc::Error::BufIdInUse(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("port {port} is already listened on in this process"),
                ))
            }
            Err(e) => return Err(Error::from(e).into()),
        }
        Ok(JobListener {
            ep: ep.clone(),
            port,
            listen,
            opts,
            waker,
            paced: vmmc::pace::is_paced(),
            taken: Mutex::new(vec![0; slots]),
            next: AtomicUsize::new(0),
            nonblocking: AtomicBool::new(false),
            rejected: Default::default(),
        })
    }

    /// Malformed connection requests refused so far: a ring capacity out of range, a ring
    /// id outside the ring range, or a ring the requester did not export.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    fn reject(&self, rank: usize, why: std::fmt::Arguments<'_>) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "vmmc sockets: port {}: refused a malformed connection request from rank {rank}: {why}",
            self.port
        );
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Accepts one connection: the stream and the rank of the process that connected.
    pub fn accept(&self) -> io::Result<(VmmcStream, usize)> {
        if self.nonblocking.load(Ordering::Relaxed) {
            return self.take().and_then(|c| c.ok_or_else(would_block));
        }
        wait_for(
            self.paced,
            Some(&self.waker),
            None,
            || self.take(),
            || Ok(()),
        )
    }

    /// An iterator over accepted connections.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<VmmcStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }

    /// Sets non-blocking accept.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Takes the next request, if any, and answers it.
    fn take(&self) -> io::Result<Option<(VmmcStream, usize)>> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let n = taken.len();
        let start = self.next.load(Ordering::Relaxed);
        let pending = |taken: &[u32], i: usize| -> io::Result<Option<u32>> {
            let seq = self.listen.load_u32(i * SLOT + 12).map_err(Error::from)?;
            Ok((seq != 0 && seq != taken[i]).then_some(seq))
        };
        for found in (0..n).map(|i| (start + i) % n) {
            let Some(mut seq) = pending(&taken, found)? else {
                continue;
            };
            // A rank's requests are accepted in the order it made them, as a kernel's
            // backlog is (its sequence numbers count up): a process that connects twice and
            // then talks on its first connection must not find its second accepted first,
            // which the scan alone does when the first request lands just behind it.
            let first = found - found % BACKLOG;
            let mut i = found;
            for j in first..first + BACKLOG {
                if let Some(s) = pending(&taken, j)? {
                    if (s.wrapping_sub(seq) as i32) < 0 {
                        (i, seq) = (j, s);
                    }
                }
            }
            taken[i] = seq;
            self.next.store((found + 1) % n, Ordering::Relaxed);
            let off = i * SLOT;
            let id = self.listen.load_u32(off).map_err(Error::from)?;
            let cap = self.listen.load_u32(off + 4).map_err(Error::from)? as usize;
            let rank = i / BACKLOG;
            if !valid_capacity(cap) {
                self.reject(rank, format_args!("ring capacity {cap}"));
                continue;
            }
            if !(RING_FIRST..RING_FIRST + RING_SPAN).contains(&id) {
                self.reject(rank, format_args!("ring id {id:#x}"));
                continue;
            }
            match self.answer(rank, id, cap, seq) {
                Ok(s) => return Ok(Some((s, rank))),
                // The connecting process left meanwhile: as a reset connection in a
                // kernel's backlog, it is dropped.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                // Its ring did not come: a broken requester, which must not hold up the
                // others.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.reject(rank, format_args!("ring {id:#x} is not exported"));
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Sets up this side of a requested connection.
    fn answer(&self, rank: usize, id: BufId, cap: usize, seq: u32) -> io::Result<VmmcStream> {
        let ep = &self.ep;
        let client = ep.proc_of(rank).map_err(Error::from)?;
        let my_cap = ring_capacity(&self.opts)?;
        let region = ep
            .alloc(HEADER + my_cap, MemKind::Shared)
            .map_err(Error::from)?;
        let waker = Arc::new(Waker::default());
        let ring_id = export_ring(ep, &region, client, &waker)?;
        let ctl = JobCtl {
            ep: ep.clone(),
            peer: client,
            peer_rank: rank,
            ring_id,
            waker,
            paced: self.paced,
            pending: None,
            resolving: Mutex::new(()),
        };
        // The requester exported its ring before it wrote the request: the import is granted
        // at once, or the request is broken (bounded, WouldBlock).
        let deadline = vmmc::pace::now_ns() + RING_GRANT.as_nanos() as u64;
        let proxy = match import_within(ep, client, id, self.paced, Some(deadline), || false) {
            Ok(p) => p,
            Err(e) => {
                ctl.close();
                return Err(e);
            }
        };
        let mut answer = [0u8; 12];
        for (i, w) in [ring_id, my_cap as u32, seq].into_iter().enumerate() {
            answer[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
        }
        // The sequence word last: the connecting side's flag.
        if let Err(e) = proxy.send_notify_wait(ACC_ID, &answer) {
            ctl.close();
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                Error::from(e),
            ));
        }
        Ok(VmmcStream::from_conn(Conn::new_job(
            region,
            Some((proxy, cap)),
            self.opts.variant,
            ctl,
        )))
    }
}

impl Drop for JobListener {
    fn drop(&mut self) {
        // Requests not accepted find the listen buffer gone when they resend.
        let _ = self.ep.unexport(LISTEN_BASE + BufId::from(self.port));
    }
}

/// Connects to the listener on `port` of the process of rank `rank` (see [`JobListener`]).
pub(crate) fn connect(
    ep: &Endpoint,
    rank: usize,
    port: u16,
    opts: Options,
) -> io::Result<VmmcStream> {
    let paced = vmmc::pace::is_paced();
    let peer = ep.proc_of(rank).map_err(Error::from)?;
    let cap = ring_capacity(&opts)?;
    let listen = import_within(
        ep,
        peer,
        LISTEN_BASE + BufId::from(port),
        paced,
        None,
        || false,
    )?;
    if listen.len() < ep.size() * BACKLOG * SLOT {
        return Err(Error::Handshake("the listen buffer is too small".into()).into());
    }
    let key = (ep.me(), peer, port);
    let (slot, seq) = wait_for(
        paced,
        None,
        None,
        || Ok(claim_slot(key)),
        || ep.check_peer(peer).map_err(|_| lost(peer)),
    )?;
    let region = ep
        .alloc(HEADER + cap, MemKind::Shared)
        .map_err(Error::from)?;
    let waker = Arc::new(Waker::default());
    let ring_id = match export_ring(ep, &region, peer, &waker) {
        Ok(id) => id,
        Err(e) => {
            free_slot(key, slot);
            return Err(e);
        }
    };
    let mut request = [0u8; SLOT];
    for (i, w) in [ring_id, cap as u32, 0, seq].into_iter().enumerate() {
        request[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
    let offset = (ep.rank() * BACKLOG + slot) * SLOT;
    let ctl = JobCtl {
        ep: ep.clone(),
        peer,
        peer_rank: rank,
        ring_id,
        waker,
        paced,
        pending: Some(Pending {
            listen,
            key,
            slot,
            offset,
            request,
            seq,
            done: AtomicBool::new(false),
        }),
        resolving: Mutex::new(()),
    };
    let p = ctl.pending.as_ref().map(|p| (&p.listen, p.request));
    if let Some((listen, request)) = p {
        // The sequence word last: the listener's flag.
        if let Err(e) = listen.send_notify_wait(offset, &request) {
            ctl.close();
            return Err(refused(format!("the listener closed: {e}")));
        }
    }
    Ok(VmmcStream::from_conn(Conn::new_job(
        region,
        None,
        opts.variant,
        ctl,
    )))
}
