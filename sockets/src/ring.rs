//! One connection's two circular buffers and the protocol that moves bytes through them
//! (seed 003 §4.3, "Data Structures").
//!
//! Each side owns its *incoming* ring, a shared [`Region`] that the peer maps and writes; the
//! peer's ring is this side's *outgoing* mapping. The incoming structure holds what the remote
//! process writes (data, its tail, how much of our data it consumed, its flags); the outgoing
//! structure is written only by us. Counters are 32-bit byte counts that wrap; the capacity is
//! a power of two, so `tail - head` (wrapping) is the number of bytes in flight.
//!
//! Header words of a ring owned by X, all written by the peer Y:
//!
//! | offset | word | meaning |
//! |---|---|---|
//! | 0 | `TAIL` | bytes Y has written into this ring |
//! | 4 | `ACK` | bytes of X's data (in Y's ring) that Y has consumed |
//! | 8 | `FIN` | Y will write no more (shutdown or close) |
//! | 12 | `CLOSED` | Y closed its end: X's writes fail with `EPIPE` |
//! | 16 | `WAITS_DATA` | Y sleeps until X writes data (an arming number, 0: awake) |
//! | 20 | `WAITS_SPACE` | Y sleeps until X consumes data (likewise) |
//! | 24 | `WAKE` | (job path) written with a notification to wake X's sleeper |
//! | 28 | | (reserved) |
//! | 32 | `REFS` | (X's own) processes of X holding this end: a fork shares it |
//! | 36 | `MY_HEAD` | (X's own) bytes X has consumed from this ring |
//! | 40 | `MY_TAIL` | (X's own) bytes X has written into Y's ring |
//! | 44 | `MAPPED` | (host path, the connecting side's ring) the accepting side mapped both rings |
//! | 48 | `ACC_ID` | (job path, client's ring) the listener's ring id |
//! | 52 | `ACC_CAP` | (job path, client's ring) the listener's ring capacity |
//! | 56 | `ACC_SEQ` | (job path, client's ring) the request this accept answers: the flag |
//!
//! X keeps its own counters in its ring's header rather than in process memory, so that
//! after a `fork` parent and child continue from the same positions.
//!
//! Two paths reach the peer's ring, with the same ring code. On the *host* path (processes
//! that are not in one job, the interposer's case) the peer's ring is a file in `/dev/shm`
//! mapped here, written with plain stores, and the setup socket carries wake-ups. On the
//! *job* path ([`crate::JobListener`]) the peer's ring is imported through the endpoint and
//! written with deliberate updates (or an automatic-update binding), on whatever transport
//! the job runs. A deliberate update moves whole words, so the job path sends the word that
//! holds an unaligned tail again with its earlier bytes (kept in a shadow word) and pads the
//! last word; the pad lands in free space, because a writer never goes past the word
//! boundary below the reader's position plus the capacity.
//!
//! The data is written before its `TAIL` (release), so a reader that sees the tail (acquire)
//! sees the data: the "flag after the data" guarantee of DESIGN.md. A side that finds nothing
//! to do waits by the core's one policy ([`vmmc::wait`]): it spins while that pays, yields
//! where processes outnumber cores, then sets its `WAITS_*` word in the peer's ring and sleeps
//! on the setup socket (job path: on a condition variable that the ring's notification
//! handler signals); the peer, after changing what the sleeper waits for, sends one byte there
//! (job path: writes `WAKE` with a notification). On the simulated SHRIMP a job-path waiter
//! never sleeps: each turn advances virtual time through the core's pacer. The
//! setup socket's end of file is how a dead peer is noticed. Sleeping is a `poll` on the
//! setup socket, not a blocking read, so it works whatever the descriptor's `O_NONBLOCK` flag
//! (which the preload library shares with the application) says, and every sleeper of the
//! connection sees a wake-up byte before any of them drains it.
//!
//! Wake-ups cost system calls, so they are rationed: each sleep arms with a fresh number and
//! the peer wakes each arming once; a sleeping writer is woken only when a quarter of the ring
//! is free (or all of it), as the kernel wakes a writer once a good part of its buffer is
//! free; and a write publishes its tail every 32 KiB, so the reader copies out while the
//! writer copies in. The spin before sleeping adapts per direction (see `SPIN`); a spinner
//! that finds it was descheduled makes the core's policy yield, since spinning then only
//! delays the peer.

use crate::job::JobCtl;
use crate::stats::{add, COUNTERS};
use crate::Variant;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use vmmc::{AutoUpdateBinding, Proxy, Region};

/// Bytes before the data area (one cache line).
pub const HEADER: usize = 64;
const TAIL: usize = 0;
const ACK: usize = 4;
const FIN: usize = 8;
pub(crate) const CLOSED: usize = 12;
const WAITS_DATA: usize = 16;
const WAITS_SPACE: usize = 20;
pub(crate) const WAKE: usize = 24;
const REFS: usize = 32;
const MY_HEAD: usize = 36;
const MY_TAIL: usize = 40;
/// Host path: set in the connecting side's ring by the accepting side once it has mapped
/// both rings (their files are then no longer needed).
pub(crate) const MAPPED: usize = 44;
pub(crate) const ACC_ID: usize = 48;
pub(crate) const ACC_SEQ: usize = 56;

/// Default data capacity of a ring: 1 MiB, enough to keep a 64 KB writer streaming.
pub const DEFAULT_CAPACITY: usize = 1 << 20;

/// A ring's waits, in `vmmc::wait`'s counts.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("sockets");

/// The calling thread's count of signal handlers that interrupt a blocking call (see
/// [`set_interruptions`]).
static INTERRUPTIONS: OnceLock<fn() -> u64> = OnceLock::new();

/// Makes a blocking call on a connection (a read or write waiting in its rings) fail with
/// `EINTR` once `count` changes during its wait: `count` is the calling thread's count of the
/// signal handlers that should interrupt it (the interposer counts those installed without
/// `SA_RESTART`, as the kernel interrupts a socket's read and write). Without it nothing
/// interrupts a wait. The first call sets it.
pub fn set_interruptions(count: fn() -> u64) {
    let _ = INTERRUPTIONS.set(count);
}

fn interruptions() -> u64 {
    INTERRUPTIONS.get().map_or(0, |count| count())
}

/// A side's sleep, for the core's policy: armed by its `WAITS_*` word in the peer's ring,
/// woken by the peer's wake-up (a byte on the setup socket; on the job path a notification).
struct RingSleep<'a> {
    ring: &'a Conn,
    read: bool,
    write: bool,
}

impl vmmc::wait::Sleep for RingSleep<'_> {
    fn arm(&self) -> u64 {
        // A fresh arming for every sleep: the peer wakes each arming once.
        let gen = self.ring.job().map_or(0, |j| j.waker.gen());
        self.ring.arm(self.read, self.write);
        gen
    }
    fn sleep(&self, gen: u64, d: Duration) {
        add(&COUNTERS.sleeps, 1);
        self.ring.sleep(gen, d.min(MAX_SLEEP));
    }
    fn disarm(&self) {
        self.ring.disarm(self.read, self.write);
    }
}

/// How long a reader or writer spins before it sleeps, at most. Ping-pong is bistable: once
/// one side sleeps, the other waits for its wake-up (25-30 µs on this machine, DESIGN.md,
/// and far more when the machine is busy), and if that outlasts its spin it sleeps too, and
/// both stay asleep for every message. A spin of several wake-ups (60 µs was not enough on
/// the 2-core machine) pulls both back to the fast path. The spin adapts per connection and
/// direction up to this, by the core's rule (`vmmc::wait::Wait::spin_budget`): after a wait
/// that ended in a sleep, it doubles when the whole wait, wake-up included, was within this
/// and a quarter (a longer spin would have caught it) and halves otherwise (spinning did not
/// pay: the peer was idle, or not running, as when processes outnumber cores).
const SPIN: Duration = Duration::from_micros(200);
/// Longest single sleep: bounds the cost of a wake-up drained by another thread of this
/// process before this one started to sleep (a sleeping program wakes 50 times a second).
pub const MAX_SLEEP: Duration = Duration::from_millis(20);
/// A write publishes its tail at least every this many bytes, so the reader starts copying
/// out while the writer still copies in, on lines still in the caches.
const CHUNK: usize = 32 << 10;

/// How a receive behaves (the `MSG_*` flags the preload library passes on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvFlags {
    /// `MSG_PEEK`: copy out without consuming.
    pub peek: bool,
    /// `MSG_DONTWAIT`: never wait, whatever the connection's mode.
    pub dontwait: bool,
    /// `MSG_WAITALL`: wait until the buffer is full (or end of file, or an error).
    pub waitall: bool,
}

struct Tx {
    staging: Vec<u8>,
    /// Host path, automatic update: this side's image of the peer's ring data.
    au_image: Vec<u8>,
    /// Job path, automatic update: the binding of a local image to the peer's ring.
    au: Option<AutoUpdateBinding>,
    /// Job path: the word of the peer's ring that holds the tail, as last sent (its bytes
    /// below the tail are data, sent again with the next bytes).
    shadow: [u8; 4],
}

/// The peer's ring as this side writes it.
pub(crate) struct Peer {
    /// Its data capacity.
    pub(crate) cap: usize,
    pub(crate) ring: PeerRing,
}

pub(crate) enum PeerRing {
    /// Host path: mapped here, written with plain stores.
    Mapped(Region),
    /// Job path: imported, written with deliberate (or automatic) update.
    Imported(Proxy),
}

/// How this side reaches the peer besides the rings.
pub(crate) enum Ctl {
    /// The setup socket: wake-ups, and its end of file tells a dead peer.
    Host(TcpStream),
    /// The endpoint: notifications and the job's liveness.
    Job(JobCtl),
}

/// The state of one connection (shared by clones of a stream).
pub struct Conn {
    incoming: Region,
    /// The peer's ring: set at once on the host path, when the listener's accept arrives on
    /// the job path's connecting side.
    peer: OnceLock<Peer>,
    variant: Variant,
    ctl: Ctl,
    /// Serialises this process's readers (the position is `MY_HEAD`).
    rx: Mutex<()>,
    tx: Mutex<Tx>,
    peer_gone: AtomicBool,
    rd_shut: AtomicBool,
    wr_shut: AtomicBool,
    nonblocking: AtomicBool,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    /// Sleepers of this process per `WAITS_*` word (data, space): the word in the peer's
    /// ring is set while any of them sleeps.
    sleepers: Mutex<[u32; 2]>,
    /// The last arming (the value of a `WAITS_*` word) of the peer's sleepers that this
    /// process woke, per word (data, space): one wake-up per arming.
    woken: [AtomicU32; 2],
    /// The current spin before sleeping, in nanoseconds, per direction (read, write).
    spin_ns: [AtomicU32; 2],
    sent: AtomicU64,
    received: AtomicU64,
    /// Host path, connecting side: the rings' files (and the preload's connect marker),
    /// which the accepting side removes once it has mapped the rings; a close before that
    /// leaves them for the accept, unless the listener refused the connection.
    files: Option<LeftFiles>,
}

/// Files a connecting process made for its peer, and that process's id (a forked child
/// that closes its copy leaves them).
pub(crate) struct LeftFiles {
    pub(crate) paths: Vec<std::path::PathBuf>,
    pub(crate) pid: u32,
}

/// How far into a buffer at `base` the image of ring position 0 goes (0..64) so that each
/// byte sits at its ring position's offset within a cache line (the ring's data starts on
/// one): copies between the two then meet the C library's fast case on AMD EPYC, where
/// `rep movsb` to a destination off a 64-byte boundary, from a source at another offset,
/// runs at a fifteenth of its speed (see `vmmc::Region::write`).
fn line_offset(base: *const u8) -> usize {
    HEADER.wrapping_sub(base as usize) & 63
}

/// Waits up to `timeout` for `fd` to be readable (or hung up).
#[allow(unsafe_code)]
fn poll_in(fd: RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

fn word(r: &Region, off: usize) -> u32 {
    r.load_u32(off).unwrap_or(0)
}

pub(crate) fn store(r: &Region, off: usize, v: u32) {
    // Offsets are constants inside the header: cannot fail.
    let _ = r.store_u32(off, v);
}

/// A fresh value for a `WAITS_*` word: never 0, and unlikely to repeat across the processes
/// that share a connection after a `fork`.
fn arming() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (std::process::id().wrapping_mul(0x9e37_79b9) ^ n.wrapping_mul(0x85eb_ca6b)).max(1)
}

pub(crate) fn would_block() -> io::Error {
    io::Error::from(io::ErrorKind::WouldBlock)
}

/// A failed write into the peer's ring: the peer closed (unexported) or left.
fn write_failed(e: vmmc::Error) -> io::Error {
    match e {
        vmmc::Error::Unexported | vmmc::Error::NotImported | vmmc::Error::PeerLost(_) => {
            io::Error::new(io::ErrorKind::BrokenPipe, e)
        }
        e => io::Error::other(e),
    }
}

/// The deadline `t` from now on the calling thread's clock (virtual on the simulator).
pub(crate) fn deadline(t: Option<Duration>) -> Option<u64> {
    vmmc::pace::deadline_after(t)
}

impl Peer {
    /// Stores a header word of the peer's ring.
    fn store(&self, off: usize, v: u32) -> Result<(), vmmc::Error> {
        match &self.ring {
            PeerRing::Mapped(r) => r.store_u32(off, v),
            PeerRing::Imported(p) => p.send(off, &v.to_ne_bytes()),
        }
    }
}

impl Conn {
    /// Builds a connection from this side's ring, the mapped peer ring and the setup socket.
    pub fn new(
        incoming: Region,
        outgoing: Region,
        cap: usize,
        variant: Variant,
        setup: TcpStream,
    ) -> Conn {
        store(&incoming, REFS, 1);
        Conn::restore(incoming, outgoing, cap, variant, setup)
    }

    /// A job-path connection: `incoming` is exported, `peer` is the imported peer ring (or
    /// comes later, when a connect's accept arrives).
    pub(crate) fn new_job(
        incoming: Region,
        peer: Option<(Proxy, usize)>,
        variant: Variant,
        ctl: JobCtl,
    ) -> Conn {
        store(&incoming, REFS, 1);
        let c = Conn::build(incoming, variant, Ctl::Job(ctl));
        if let Some((proxy, cap)) = peer {
            let _ = c.peer.set(Peer {
                cap,
                ring: PeerRing::Imported(proxy),
            });
        }
        c
    }

    /// Rebuilds a connection whose rings another image of this process set up (after
    /// `exec`): the positions and the process count in the header are kept.
    pub fn restore(
        incoming: Region,
        outgoing: Region,
        cap: usize,
        variant: Variant,
        setup: TcpStream,
    ) -> Conn {
        let c = Conn::build(incoming, variant, Ctl::Host(setup));
        if variant == Variant::Au {
            // Slack for `au_at`'s alignment.
            c.tx.lock().unwrap_or_else(|e| e.into_inner()).au_image = vec![0; cap + 64];
        }
        let _ = c.peer.set(Peer {
            cap,
            ring: PeerRing::Mapped(outgoing),
        });
        c
    }

    fn build(incoming: Region, variant: Variant, ctl: Ctl) -> Conn {
        add(&COUNTERS.connections, 1);
        Conn {
            incoming,
            peer: OnceLock::new(),
            variant,
            ctl,
            rx: Mutex::new(()),
            tx: Mutex::new(Tx {
                staging: Vec::new(),
                au_image: Vec::new(),
                au: None,
                shadow: [0; 4],
            }),
            peer_gone: AtomicBool::new(false),
            rd_shut: AtomicBool::new(false),
            wr_shut: AtomicBool::new(false),
            nonblocking: AtomicBool::new(false),
            read_timeout: Mutex::new(None),
            write_timeout: Mutex::new(None),
            sleepers: Mutex::new([0; 2]),
            woken: [AtomicU32::new(0), AtomicU32::new(0)],
            spin_ns: [
                AtomicU32::new(SPIN.as_nanos() as u32),
                AtomicU32::new(SPIN.as_nanos() as u32),
            ],
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            files: None,
        }
    }

    /// Host path, connecting side: keeps the files made for the peer (see `LeftFiles`).
    pub(crate) fn leave_files(mut self, paths: Vec<std::path::PathBuf>) -> Conn {
        self.files = Some(LeftFiles {
            paths,
            pid: std::process::id(),
        });
        self
    }

    /// Host path: whether the listener refused or reset the connection (no accept will
    /// come), seen without blocking on the setup socket.
    fn refused(&self) -> bool {
        let Ctl::Host(setup) = &self.ctl else {
            return false;
        };
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(setup)
            .recv_with_flags(&mut buf, libc::MSG_DONTWAIT | libc::MSG_PEEK)
        {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => {
                e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted
            }
        }
    }

    /// The descriptors of the incoming and outgoing rings' files, and the two rings' data
    /// capacities (what [`Conn::restore`] needs after `exec`). Host path only.
    pub fn ring_fds(&self) -> Option<(RawFd, RawFd, usize, usize)> {
        let peer = self.peer.get()?;
        let PeerRing::Mapped(out) = &peer.ring else {
            return None;
        };
        Some((
            self.incoming.fd()?,
            out.fd()?,
            self.incoming.len() - HEADER,
            peer.cap,
        ))
    }

    /// The peer's ring. On the job path's connecting side it is known once the listener has
    /// accepted: waits for that (unless `block` is false: then `WouldBlock`).
    pub(crate) fn peer(&self, block: bool) -> io::Result<&Peer> {
        if let Some(p) = self.peer.get() {
            return Ok(p);
        }
        match &self.ctl {
            Ctl::Job(j) => j.resolve(&self.incoming, &self.peer, block),
            Ctl::Host(_) => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }

    /// The job-path control, if this connection is on the job path.
    pub(crate) fn job(&self) -> Option<&JobCtl> {
        match &self.ctl {
            Ctl::Job(j) => Some(j),
            Ctl::Host(_) => None,
        }
    }

    /// Whether the connection is in non-blocking mode.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// The setup socket's descriptor (this connection's own; the preload library polls it);
    /// -1 on the job path, which has none.
    pub fn setup_fd(&self) -> RawFd {
        match &self.ctl {
            Ctl::Host(s) => s.as_raw_fd(),
            Ctl::Job(_) => -1,
        }
    }

    /// Counts one more process holding this end (after a `fork`): the connection ends when
    /// the last of them drops it.
    pub fn add_process_ref(&self) {
        let _ = self.incoming.fetch_add_u32(REFS, 1);
    }

    /// Takes back a count of [`Self::add_process_ref`] for a process that was not started
    /// after all (a failed spawn). Never ends the connection: the caller still holds it.
    pub fn remove_process_ref(&self) {
        let _ = self.incoming.fetch_add_u32(REFS, u32::MAX);
    }

    /// Bytes this connection sent and received.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    /// Bytes the peer has written so far (wrapping): changes whenever new data arrives.
    pub fn rx_mark(&self) -> u32 {
        word(&self.incoming, TAIL)
    }

    /// Bytes of ours the peer has consumed (wrapping): changes whenever space frees up.
    pub fn tx_mark(&self) -> u32 {
        word(&self.incoming, ACK)
    }

    /// Asks the peer for a wake-up byte on the setup socket when data arrives (`read`) or
    /// space frees up (`write`: when a quarter of the ring is free, or all of it, as the
    /// kernel wakes a writer only once a good part of its buffer is free). Callers then
    /// re-check their condition before sleeping: either they see the change or the peer sees
    /// the request (Dekker). Each call is a new arming, which the peer answers with one
    /// wake-up: a sleeper arms again before each sleep.
    pub fn arm(&self, read: bool, write: bool) {
        let peer = self.peer.get();
        let mut n = self.sleepers.lock().unwrap_or_else(|e| e.into_inner());
        for (i, on, flag) in [(0, read, WAITS_DATA), (1, write, WAITS_SPACE)] {
            if on {
                n[i] += 1;
                if let Some(p) = peer {
                    let _ = p.store(flag, arming());
                }
            }
        }
        drop(n);
        // Pairs with the fence in the peer between its update and its look at our flag.
        fence(Ordering::SeqCst);
    }

    /// Whether the peer's sleepers on `WAITS_*` word `flag` want a wake-up that this
    /// process has not sent yet.
    fn wants_wake(&self, flag: usize) -> bool {
        let w = word(&self.incoming, flag);
        let i = usize::from(flag == WAITS_SPACE);
        w != 0 && self.woken[i].swap(w, Ordering::Relaxed) != w
    }

    /// Withdraws a request made with [`Conn::arm`].
    pub fn disarm(&self, read: bool, write: bool) {
        let peer = self.peer.get();
        let mut n = self.sleepers.lock().unwrap_or_else(|e| e.into_inner());
        for (i, on, flag) in [(0, read, WAITS_DATA), (1, write, WAITS_SPACE)] {
            if on && n[i] > 0 {
                n[i] -= 1;
                if n[i] == 0 {
                    if let Some(p) = peer {
                        let _ = p.store(flag, 0);
                    }
                }
            }
        }
    }

    /// Consumes the wake-up bytes waiting on the setup socket without blocking; notices the
    /// peer's end (end of file or an error) there.
    pub fn drain(&self) {
        let Ctl::Host(setup) = &self.ctl else {
            return;
        };
        let s = socket2::SockRef::from(setup);
        let mut buf = [MaybeUninit::<u8>::uninit(); 256];
        loop {
            match s.recv_with_flags(&mut buf, libc::MSG_DONTWAIT) {
                Ok(0) => {
                    self.peer_gone.store(true, Ordering::Relaxed);
                    return;
                }
                Ok(n) if n == buf.len() => continue,
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.peer_gone.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }

    /// This process closed its last descriptor of the connection while other threads may
    /// still wait on it: they return (end of file, `EPIPE`) within a sleep's length.
    pub fn abandon(&self) {
        self.rd_shut.store(true, Ordering::Relaxed);
        self.wr_shut.store(true, Ordering::Relaxed);
    }

    /// Whether the peer's process is gone (setup socket closed or failed).
    pub fn peer_lost(&self) -> bool {
        self.peer_gone.load(Ordering::Relaxed)
    }

    /// The setup socket (addresses, and the descriptor to poll in the preload); `None` on
    /// the job path.
    pub fn setup(&self) -> Option<&TcpStream> {
        match &self.ctl {
            Ctl::Host(s) => Some(s),
            Ctl::Job(_) => None,
        }
    }

    /// The send protocol.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Sets non-blocking mode.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// Sets a read (`read == true`) or write timeout.
    pub fn set_timeout(&self, read: bool, t: Option<Duration>) -> io::Result<()> {
        if t == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        let slot = if read {
            &self.read_timeout
        } else {
            &self.write_timeout
        };
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }

    /// The read or write timeout.
    pub fn timeout(&self, read: bool) -> Option<Duration> {
        let slot = if read {
            &self.read_timeout
        } else {
            &self.write_timeout
        };
        *slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes ready to read now.
    pub fn readable_bytes(&self) -> usize {
        word(&self.incoming, TAIL).wrapping_sub(word(&self.incoming, MY_HEAD)) as usize
    }

    /// Whether a read would not block: data, end of file, or a lost peer.
    pub fn is_readable(&self) -> bool {
        self.readable_bytes() > 0
            || word(&self.incoming, FIN) != 0
            || self.rd_shut.load(Ordering::Relaxed)
            || self.peer_gone.load(Ordering::Relaxed)
    }

    /// Whether a write would not block: space, or an error to report.
    pub fn is_writable(&self) -> bool {
        if self.write_error().is_some() {
            return true;
        }
        let Ok(peer) = self.peer(false) else {
            return false;
        };
        self.room(peer, word(&self.incoming, MY_TAIL)) > 0
    }

    /// Whether the peer has shut down writing or closed.
    pub fn peer_finished(&self) -> bool {
        word(&self.incoming, FIN) != 0 || self.peer_gone.load(Ordering::Relaxed)
    }

    /// Bytes that may be written at `tail` now. On the job path whole words are written, so
    /// the limit is the word boundary below the reader's position plus the capacity.
    fn room(&self, peer: &Peer, tail: u32) -> usize {
        let ack = word(&self.incoming, ACK);
        let limit = match peer.ring {
            PeerRing::Mapped(_) => ack,
            PeerRing::Imported(_) => ack & !3,
        };
        (peer.cap as i64 - tail.wrapping_sub(limit) as i32 as i64).clamp(0, peer.cap as i64)
            as usize
    }

    fn write_error(&self) -> Option<io::Error> {
        if self.wr_shut.load(Ordering::Relaxed)
            || word(&self.incoming, CLOSED) != 0
            || self.peer_gone.load(Ordering::Relaxed)
        {
            Some(io::Error::from(io::ErrorKind::BrokenPipe))
        } else {
            None
        }
    }

    /// Wakes the peer's sleepers: one byte on the setup socket, never blocking (a full
    /// socket already holds a wake-up); on the job path a notifying write of `WAKE`.
    fn wake_peer(&self) {
        let sent = match &self.ctl {
            Ctl::Host(setup) => socket2::SockRef::from(setup)
                .send_with_flags(&[1], libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                .is_ok(),
            Ctl::Job(_) => match self.peer.get().map(|p| &p.ring) {
                // A full notification queue already holds wake-ups for the peer.
                Some(PeerRing::Imported(p)) => matches!(
                    p.send_notify(WAKE, &1u32.to_ne_bytes()),
                    Ok(()) | Err(vmmc::Error::WouldBlock)
                ),
                _ => false,
            },
        };
        if sent {
            add(&COUNTERS.wakeups_sent, 1);
        }
    }

    /// Sleeps up to `d` for a wake-up (`gen`: the job path's wake-up count seen before
    /// arming); notices a dead peer.
    fn sleep(&self, gen: u64, d: Duration) {
        match &self.ctl {
            Ctl::Host(setup) => {
                poll_in(setup.as_raw_fd(), d);
                self.drain();
            }
            Ctl::Job(j) => {
                j.waker.sleep_since(gen, d);
                if !j.peer_alive() {
                    self.peer_gone.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// Waits until `ready()` by the core's one policy ([`vmmc::wait`]): spins (the budget
    /// adapts per connection and direction, up to [`SPIN`]), yields where processes outnumber
    /// cores, then sleeps with `flag` set in the peer's ring, so that the peer wakes it.
    /// Returns `WouldBlock` when the deadline passes. On a paced thread (the simulator) each
    /// turn lets virtual time advance instead, and nothing sleeps.
    fn wait(
        &self,
        mut ready: impl FnMut() -> bool,
        flag: usize,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let deadline = deadline(timeout);
        let expired = || deadline.is_some_and(|d| vmmc::pace::now_ns() >= d);
        let (read, write) = (flag == WAITS_DATA, flag == WAITS_SPACE);
        let sleeper = RingSleep {
            ring: self,
            read,
            write,
        };
        let budget = &self.spin_ns[usize::from(write)];
        let mut wait = vmmc::wait::Wait::on(&WAIT_SITE, &sleeper)
            .spin_budget(budget, SPIN)
            .timeout(timeout);
        let signals = interruptions();
        loop {
            if ready() {
                return Ok(());
            }
            if interruptions() != signals {
                return Err(io::Error::from_raw_os_error(libc::EINTR));
            }
            if wait.resting() {
                if let Some(j) = self.job() {
                    if !j.peer_alive() {
                        // The callers' conditions include a lost peer.
                        self.peer_gone.store(true, Ordering::Relaxed);
                        return Ok(());
                    }
                }
                if expired() {
                    return Err(would_block());
                }
            }
            wait.idle();
        }
    }

    /// Reads into `buf` (the receive-side copy).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv(buf, RecvFlags::default())
    }

    /// Reads into `buf` as `flags` say.
    pub fn recv(&self, buf: &mut [u8], flags: RecvFlags) -> io::Result<usize> {
        if !flags.waitall || flags.peek {
            return self.recv_once(buf, flags);
        }
        let mut got = 0;
        while got < buf.len() {
            match self.recv_once(&mut buf[got..], flags) {
                Ok(0) => break,
                Ok(n) => got += n,
                // What arrived before an error or a signal is returned, as the kernel does.
                Err(_) if got > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    fn recv_once(&self, buf: &mut [u8], flags: RecvFlags) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let _readers = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let head = &mut word(&self.incoming, MY_HEAD);
            let tail = word(&self.incoming, TAIL);
            let avail = tail.wrapping_sub(*head) as usize;
            if avail > 0 {
                let n = avail.min(buf.len());
                // This side's ring has its own capacity (the peer's may differ).
                let cap = self.incoming.len() - HEADER;
                let pos = *head as usize & (cap - 1);
                let first = n.min(cap - pos);
                self.incoming
                    .read(HEADER + pos, &mut buf[..first])
                    .map_err(io::Error::other)?;
                if n > first {
                    self.incoming
                        .read(HEADER, &mut buf[first..n])
                        .map_err(io::Error::other)?;
                }
                if flags.peek {
                    return Ok(n);
                }
                *head = head.wrapping_add(n as u32);
                store(&self.incoming, MY_HEAD, *head);
                // Tell the writer, in its own ring, how far we consumed (data came, so the
                // writer's ring is known).
                if let Ok(p) = self.peer(true) {
                    let _ = p.store(ACK, *head);
                }
                fence(Ordering::SeqCst);
                let used = tail.wrapping_sub(*head) as usize;
                if (used == 0 || cap - used >= cap / 4) && self.wants_wake(WAITS_SPACE) {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_received, n as u64);
                self.received.fetch_add(n as u64, Ordering::Relaxed);
                return Ok(n);
            }
            if self.rd_shut.load(Ordering::Relaxed) {
                return Ok(0);
            }
            // The peer's process may have ended (its kernel socket closed) without closing
            // the ring: end of file, as the kernel reports a killed peer's stream.
            if word(&self.incoming, FIN) != 0 || self.peer_gone.load(Ordering::Relaxed) {
                // The peer wrote its last data before its `FIN`, but after our look at
                // the tail (the acquire load of `FIN` orders this second look after it):
                // that data is read before the end of file.
                if word(&self.incoming, TAIL) != *head {
                    continue;
                }
                return Ok(0);
            }
            if flags.dontwait || self.nonblocking.load(Ordering::Relaxed) {
                return Err(would_block());
            }
            if self.job().is_some_and(|j| !j.paced) {
                // A sleeper asks the peer, in its ring, for a wake-up. A peer that closed
                // meanwhile has left its `FIN`, which the next turn reads.
                if let Err(e) = self.peer(true) {
                    if word(&self.incoming, CLOSED) == 0 {
                        return Err(e);
                    }
                    continue;
                }
            }
            let h = *head;
            self.wait(
                || {
                    word(&self.incoming, TAIL) != h
                        || word(&self.incoming, FIN) != 0
                        || self.rd_shut.load(Ordering::Relaxed)
                        || self.peer_gone.load(Ordering::Relaxed)
                },
                WAITS_DATA,
                self.timeout(true),
            )?;
        }
    }

    /// Writes `buf` into the peer's ring as [`Self::send`] does; returns how much.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf, false)
    }

    /// Writes `buf`. In blocking mode it returns once all of `buf` is in the peer's ring
    /// (fewer bytes only when an error or the write timeout comes after some were written);
    /// non-blocking, or with `dontwait` (`MSG_DONTWAIT`) whatever the connection's mode, it
    /// writes what fits, and a full ring gives `WouldBlock`.
    pub fn send(&self, buf: &[u8], dontwait: bool) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let nonblocking = dontwait || self.nonblocking.load(Ordering::Relaxed);
        if let Some(e) = self.write_error() {
            return Err(e);
        }
        let peer = self.peer(!nonblocking)?;
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        loop {
            if let Some(e) = self.write_error() {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
            let tail = word(&self.incoming, MY_TAIL);
            let room = self.room(peer, tail);
            if room > 0 {
                let n = room.min(buf.len() - done).min(CHUNK);
                let data = &buf[done..done + n];
                let end = tail.wrapping_add(n as u32);
                match &peer.ring {
                    PeerRing::Mapped(out) => {
                        self.put_mapped(&mut tx, out, peer.cap, tail, data)?;
                        store(&self.incoming, MY_TAIL, end);
                        // The tail after the data: the reader that sees it sees the bytes.
                        store(out, TAIL, end);
                    }
                    PeerRing::Imported(p) => {
                        self.put_imported(&mut tx, p, peer.cap, tail, data)
                            .map_err(|e| self.lost(e))?;
                        store(&self.incoming, MY_TAIL, end);
                        match &tx.au {
                            // Through the binding, after the data it stored, then out.
                            Some(au) => au.store_u32(TAIL, end).and_then(|_| au.flush()),
                            None => p.send(TAIL, &end.to_ne_bytes()),
                        }
                        .map_err(|e| self.lost(e))?;
                    }
                }
                fence(Ordering::SeqCst);
                if self.wants_wake(WAITS_DATA) {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_sent, n as u64);
                self.sent.fetch_add(n as u64, Ordering::Relaxed);
                done += n;
                if done == buf.len() {
                    return Ok(done);
                }
                continue;
            }
            // A blocking send waits until all of `buf` is in the ring, as a blocking
            // stream socket's write does; only an error or the timeout ends it early, and
            // then it reports the bytes already written.
            if nonblocking {
                return if done > 0 {
                    Ok(done)
                } else {
                    Err(would_block())
                };
            }
            let t = tail;
            if let Err(e) = self.wait(
                || self.room(peer, t) > 0 || self.write_error().is_some(),
                WAITS_SPACE,
                self.timeout(false),
            ) {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
        }
    }

    /// A write into the peer's ring failed: the peer closed or left.
    fn lost(&self, e: vmmc::Error) -> io::Error {
        if matches!(e, vmmc::Error::PeerLost(_)) {
            self.peer_gone.store(true, Ordering::Relaxed);
        }
        write_failed(e)
    }

    /// Host path: moves `data` into the mapped peer ring at `tail` with this connection's
    /// variant.
    fn put_mapped(
        &self,
        tx: &mut Tx,
        out: &Region,
        cap: usize,
        tail: u32,
        data: &[u8],
    ) -> io::Result<()> {
        let pos = tail as usize & (cap - 1);
        let first = data.len().min(cap - pos);
        let pieces = [(pos, &data[..first]), (0, &data[first..])];
        for (at, piece) in pieces {
            if piece.is_empty() {
                continue;
            }
            match self.variant {
                Variant::Du1 if (piece.as_ptr() as usize ^ at).is_multiple_of(4) => {
                    // One copy: the deliberate update reads the user's buffer directly.
                    out.write(HEADER + at, piece).map_err(io::Error::other)?;
                    add(&COUNTERS.sends_one_copy, 1);
                }
                Variant::Du1 | Variant::Du2 => {
                    if self.variant == Variant::Du1 {
                        add(&COUNTERS.align_fallbacks, 1);
                    }
                    // Two copies: stage, then send from the staging buffer, placed at the
                    // source's offset within a cache line (the fast case of `line_offset`); the send
                    // aligns its destination itself (`Region::write`).
                    tx.staging.clear();
                    tx.staging.reserve(piece.len() + 64);
                    let skip =
                        (piece.as_ptr() as usize).wrapping_sub(tx.staging.as_ptr() as usize) & 63;
                    tx.staging.resize(skip, 0);
                    tx.staging.extend_from_slice(piece);
                    out.write(HEADER + at, &tx.staging[skip..])
                        .map_err(io::Error::other)?;
                    add(&COUNTERS.sends_two_copy, 1);
                }
                Variant::Au => {
                    // The store into the automatic-update image is the send; the binding
                    // propagates the stored range to the peer's ring. The image's byte for
                    // ring position `at` sits at the same offset within its cache line.
                    let i = line_offset(tx.au_image.as_ptr()) + at;
                    vmmc::region::copy_bytes(&mut tx.au_image[i..i + piece.len()], piece);
                    out.write(HEADER + at, &tx.au_image[i..i + piece.len()])
                        .map_err(io::Error::other)?;
                    add(&COUNTERS.sends_au, 1);
                }
            }
        }
        Ok(())
    }

    /// Job path: moves `data` into the imported peer ring at `tail` in whole words (see the
    /// module documentation): the word holding an unaligned tail goes again with its earlier
    /// bytes from the shadow, and the last word is padded.
    fn put_imported(
        &self,
        tx: &mut Tx,
        p: &Proxy,
        cap: usize,
        tail: u32,
        data: &[u8],
    ) -> Result<(), vmmc::Error> {
        if self.variant == Variant::Au && tx.au.is_none() {
            // Transports that propagate stores natively write them straight through; the
            // others combine consecutive stores into packets, as SHRIMP's interface did.
            let combining = !p.endpoint().caps().native_au;
            tx.au = Some(p.bind(vmmc::AuOptions {
                combining,
                notify: false,
            })?);
        }
        let pos = tail as usize & (cap - 1);
        let first = data.len().min(cap - pos);
        for (at, piece) in [(pos, &data[..first]), (0, &data[first..])] {
            if piece.is_empty() {
                continue;
            }
            let lead = at % 4;
            let same_alignment = (piece.as_ptr() as usize).wrapping_sub(at).is_multiple_of(4);
            if self.variant == Variant::Du1 && same_alignment && piece.len() >= 64 {
                // One copy: the aligned body straight from the user's buffer; the words
                // around it (the tail's word, the last partial word) through the shadow.
                let head = (4 - lead) % 4;
                if head > 0 {
                    self.put_words(tx, p, at - lead, lead, &piece[..head])?;
                }
                let body = (piece.len() - head) & !3;
                p.send(HEADER + at + head, &piece[head..head + body])?;
                add(&COUNTERS.sends_one_copy, 1);
                let rest = &piece[head + body..];
                if !rest.is_empty() {
                    self.put_words(tx, p, at + head + body, 0, rest)?;
                }
            } else {
                if self.variant == Variant::Du1 {
                    add(&COUNTERS.align_fallbacks, 1);
                }
                self.put_words(tx, p, at - lead, lead, piece)?;
            }
        }
        Ok(())
    }

    /// Sends `lead` bytes of the shadow and then `data` from ring position `at` (a word
    /// boundary), staged and padded to whole words; keeps the last partial word as the
    /// shadow.
    fn put_words(
        &self,
        tx: &mut Tx,
        p: &Proxy,
        at: usize,
        lead: usize,
        data: &[u8],
    ) -> Result<(), vmmc::Error> {
        let Tx {
            staging,
            au,
            shadow,
            ..
        } = tx;
        staging.clear();
        staging.extend_from_slice(&shadow[..lead]);
        staging.extend_from_slice(data);
        let used = staging.len();
        staging.resize(used.next_multiple_of(4), 0);
        if used % 4 != 0 {
            shadow.copy_from_slice(&staging[staging.len() - 4..]);
        }
        match au {
            Some(au) => {
                au.write(HEADER + at, staging)?;
                add(&COUNTERS.sends_au, 1);
            }
            None => {
                p.send(HEADER + at, staging)?;
                add(&COUNTERS.sends_two_copy, 1);
            }
        }
        Ok(())
    }

    /// Shuts down reading, writing or both.
    pub fn shutdown(&self, how: std::net::Shutdown) {
        use std::net::Shutdown;
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.rd_shut.store(true, Ordering::Relaxed);
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.wr_shut.store(true, Ordering::Relaxed);
            if let Ok(p) = self.peer(true) {
                let _ = p.store(FIN, 1);
            }
        }
        match &self.ctl {
            // Wakes our own sleepers too: they sleep on the same socket, so poke the peer,
            // whose sleepers re-check, and rely on the bounded sleep for ours.
            Ctl::Host(_) => self.wake_peer(),
            Ctl::Job(j) => {
                j.waker.wake();
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_DATA) != 0 || word(&self.incoming, WAITS_SPACE) != 0 {
                    self.wake_peer();
                }
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Ok(path) = std::env::var("VMMC_SOCK_STATS") {
            // One line per connection and process, appended (O_APPEND writes of one line do
            // not interleave): what went through the rings.
            let (sent, received) = self.bytes();
            let line = format!(
                "{{\"pid\":{},\"variant\":\"{}\",\"sent\":{sent},\"received\":{received}}}\n",
                std::process::id(),
                self.variant.name()
            );
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = f.write_all(line.as_bytes());
            }
        }
        // The last process holding this end closes the connection; a forked sibling that
        // keeps it open keeps it working.
        if self.incoming.fetch_add_u32(REFS, u32::MAX).unwrap_or(1) != 1 {
            return;
        }
        // A connect whose accept has not come yet waits for it, so that the listener never
        // imports a ring that is gone (it gives up when the listener or its process goes).
        if let Ok(p) = self.peer(true) {
            if let Some(au) = &self.tx.lock().unwrap_or_else(|e| e.into_inner()).au {
                let _ = au.flush();
            }
            let _ = p.store(FIN, 1);
            let _ = p.store(CLOSED, 1);
        }
        if let Some(f) = &self.files {
            // Before the accept the files carry the connection (the data written so far
            // included) to the listener; once it mapped them, or if it never will, they go.
            if f.pid == std::process::id() && (word(&self.incoming, MAPPED) != 0 || self.refused())
            {
                for p in &f.paths {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        match &self.ctl {
            Ctl::Host(setup) => {
                self.wake_peer();
                let _ = setup.shutdown(std::net::Shutdown::Both);
            }
            Ctl::Job(j) => {
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_DATA) != 0 || word(&self.incoming, WAITS_SPACE) != 0 {
                    self.wake_peer();
                }
                // The binding goes before the ring it writes; then this side's ring.
                self.tx.get_mut().unwrap_or_else(|e| e.into_inner()).au = None;
                j.close();
            }
        }
    }
}
