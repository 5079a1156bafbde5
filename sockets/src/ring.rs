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
//! | 16 | `WAITS_DATA` | Y sleeps until X writes data |
//! | 20 | `WAITS_SPACE` | Y sleeps until X consumes data |
//! | 32 | `REFS` | (X's own) processes of X holding this end: a fork shares it |
//! | 36 | `MY_HEAD` | (X's own) bytes X has consumed from this ring |
//! | 40 | `MY_TAIL` | (X's own) bytes X has written into Y's ring |
//!
//! X keeps its own counters in its ring's header rather than in process memory, so that
//! after a `fork` parent and child continue from the same positions.
//!
//! The data is written before its `TAIL` (release), so a reader that sees the tail (acquire)
//! sees the data: the "flag after the data" guarantee of DESIGN.md. A side that finds nothing
//! to do spins briefly, then sets its `WAITS_*` word in the peer's ring and sleeps on the setup
//! socket; the peer, after changing what the sleeper waits for, sends one byte there. The
//! setup socket's end of file is how a dead peer is noticed. Sleeping is a `poll` on the
//! setup socket, not a blocking read, so it works whatever the descriptor's `O_NONBLOCK` flag
//! (which the preload library shares with the application) says, and every sleeper of the
//! connection sees a wake-up byte before any of them drains it.

use crate::stats::{add, COUNTERS};
use crate::Variant;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vmmc::Region;

/// Bytes before the data area (one cache line).
pub const HEADER: usize = 64;
const TAIL: usize = 0;
const ACK: usize = 4;
const FIN: usize = 8;
const CLOSED: usize = 12;
const WAITS_DATA: usize = 16;
const WAITS_SPACE: usize = 20;
const REFS: usize = 32;
const MY_HEAD: usize = 36;
const MY_TAIL: usize = 40;

/// Default data capacity of a ring: 1 MiB, enough to keep a 64 KB writer streaming.
pub const DEFAULT_CAPACITY: usize = 1 << 20;

/// How long a reader or writer spins before it sleeps: a little more than a blocking wake-up
/// costs on this machine (DESIGN.md: 25-30 µs), so ping-pong stays on the fast path.
const SPIN: Duration = Duration::from_micros(60);
/// Longest single sleep: bounds the cost of a wake-up drained by another thread of this
/// process before this one started to sleep (a sleeping program wakes 50 times a second).
pub const MAX_SLEEP: Duration = Duration::from_millis(20);

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
    au_image: Vec<u8>,
}

/// The state of one connection (shared by clones of a stream).
pub struct Conn {
    incoming: Region,
    outgoing: Region,
    cap: usize,
    variant: Variant,
    setup: TcpStream,
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
    sent: AtomicU64,
    received: AtomicU64,
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

fn store(r: &Region, off: usize, v: u32) {
    // Offsets are constants inside the header: cannot fail.
    let _ = r.store_u32(off, v);
}

fn would_block() -> io::Error {
    io::Error::from(io::ErrorKind::WouldBlock)
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

    /// Rebuilds a connection whose rings another image of this process set up (after
    /// `exec`): the positions and the process count in the header are kept.
    pub fn restore(
        incoming: Region,
        outgoing: Region,
        cap: usize,
        variant: Variant,
        setup: TcpStream,
    ) -> Conn {
        add(&COUNTERS.connections, 1);
        Conn {
            incoming,
            outgoing,
            cap,
            variant,
            setup,
            rx: Mutex::new(()),
            tx: Mutex::new(Tx {
                staging: Vec::new(),
                au_image: if variant == Variant::Au {
                    vec![0; cap]
                } else {
                    Vec::new()
                },
            }),
            peer_gone: AtomicBool::new(false),
            rd_shut: AtomicBool::new(false),
            wr_shut: AtomicBool::new(false),
            nonblocking: AtomicBool::new(false),
            read_timeout: Mutex::new(None),
            write_timeout: Mutex::new(None),
            sleepers: Mutex::new([0; 2]),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        }
    }

    /// The descriptors of the incoming and outgoing rings' files, and the two rings' data
    /// capacities (what [`Conn::restore`] needs after `exec`).
    pub fn ring_fds(&self) -> Option<(RawFd, RawFd, usize, usize)> {
        Some((
            self.incoming.fd()?,
            self.outgoing.fd()?,
            self.incoming.len() - HEADER,
            self.cap,
        ))
    }

    /// Whether the connection is in non-blocking mode.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// The setup socket's descriptor (this connection's own; the preload library polls it).
    pub fn setup_fd(&self) -> RawFd {
        self.setup.as_raw_fd()
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
    /// space frees up (`write`). Callers then re-check their condition before sleeping:
    /// either they see the change or the peer sees the request (Dekker).
    pub fn arm(&self, read: bool, write: bool) {
        let mut n = self.sleepers.lock().unwrap_or_else(|e| e.into_inner());
        for (i, on, flag) in [(0, read, WAITS_DATA), (1, write, WAITS_SPACE)] {
            if on {
                n[i] += 1;
                if n[i] == 1 {
                    store(&self.outgoing, flag, 1);
                }
            }
        }
        drop(n);
        // Pairs with the fence in the peer between its update and its look at our flag.
        fence(Ordering::SeqCst);
    }

    /// Withdraws a request made with [`Conn::arm`].
    pub fn disarm(&self, read: bool, write: bool) {
        let mut n = self.sleepers.lock().unwrap_or_else(|e| e.into_inner());
        for (i, on, flag) in [(0, read, WAITS_DATA), (1, write, WAITS_SPACE)] {
            if on && n[i] > 0 {
                n[i] -= 1;
                if n[i] == 0 {
                    store(&self.outgoing, flag, 0);
                }
            }
        }
    }

    /// Consumes the wake-up bytes waiting on the setup socket without blocking; notices the
    /// peer's end (end of file or an error) there.
    pub fn drain(&self) {
        let s = socket2::SockRef::from(&self.setup);
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

    /// The setup socket (addresses, and the descriptor to poll in the preload).
    pub fn setup(&self) -> &TcpStream {
        &self.setup
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
        let tail = word(&self.incoming, MY_TAIL);
        self.space(tail) > 0 || self.write_error().is_some()
    }

    /// Whether the peer has shut down writing or closed.
    pub fn peer_finished(&self) -> bool {
        word(&self.incoming, FIN) != 0 || self.peer_gone.load(Ordering::Relaxed)
    }

    fn space(&self, tail: u32) -> usize {
        self.cap - tail.wrapping_sub(word(&self.incoming, ACK)) as usize
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

    /// Sends one wake-up byte; never blocks (a full socket already holds a wake-up).
    fn wake_peer(&self) {
        let s = socket2::SockRef::from(&self.setup);
        if s.send_with_flags(&[1], libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            .is_ok()
        {
            add(&COUNTERS.wakeups_sent, 1);
        }
    }

    /// Spins, then sleeps on the setup socket until `ready()`; `flag` is the word set in the
    /// peer's ring while sleeping. Returns `WouldBlock` when the deadline passes.
    fn wait(
        &self,
        mut ready: impl FnMut() -> bool,
        flag: usize,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut n = 0u32;
        while start.elapsed() < SPIN {
            for _ in 0..64 {
                if ready() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            n += 1;
            if n.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        let (read, write) = (flag == WAITS_DATA, flag == WAITS_SPACE);
        self.arm(read, write);
        add(&COUNTERS.sleeps, 1);
        let result = loop {
            if ready() {
                break Ok(());
            }
            let mut sleep = MAX_SLEEP;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    break Err(would_block());
                }
                sleep = sleep.min(d - now);
            }
            poll_in(self.setup_fd(), sleep);
            self.drain();
        };
        self.disarm(read, write);
        result
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
                Err(e) if got > 0 && e.kind() != io::ErrorKind::Interrupted => break,
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
                let pos = *head as usize & (self.cap - 1);
                let first = n.min(self.cap - pos);
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
                // Tell the writer, in its own ring, how far we consumed.
                store(&self.outgoing, ACK, *head);
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_SPACE) != 0 {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_received, n as u64);
                self.received.fetch_add(n as u64, Ordering::Relaxed);
                return Ok(n);
            }
            if self.rd_shut.load(Ordering::Relaxed) || word(&self.incoming, FIN) != 0 {
                return Ok(0);
            }
            if self.peer_gone.load(Ordering::Relaxed) {
                // The peer's process ended (its kernel socket closed) without closing the
                // ring: end of file, as the kernel reports a killed peer's stream.
                return Ok(0);
            }
            if flags.dontwait || self.nonblocking.load(Ordering::Relaxed) {
                return Err(would_block());
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

    /// Writes some of `buf` into the peer's ring; returns how much.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf, false)
    }

    /// Writes some of `buf`; with `dontwait` (`MSG_DONTWAIT`) a full ring gives `WouldBlock`
    /// whatever the connection's mode.
    pub fn send(&self, buf: &[u8], dontwait: bool) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = self.write_error() {
                return Err(e);
            }
            let tail = word(&self.incoming, MY_TAIL);
            let space = self.space(tail);
            if space > 0 {
                let n = space.min(buf.len());
                self.put(&mut tx, tail, &buf[..n])?;
                let tail = tail.wrapping_add(n as u32);
                store(&self.incoming, MY_TAIL, tail);
                // The tail after the data: the reader that sees it sees the bytes.
                store(&self.outgoing, TAIL, tail);
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_DATA) != 0 {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_sent, n as u64);
                self.sent.fetch_add(n as u64, Ordering::Relaxed);
                return Ok(n);
            }
            if dontwait || self.nonblocking.load(Ordering::Relaxed) {
                return Err(would_block());
            }
            let t = tail;
            self.wait(
                || self.space(t) > 0 || self.write_error().is_some(),
                WAITS_SPACE,
                self.timeout(false),
            )?;
        }
    }

    /// Moves `data` into the peer's ring at the current tail with this connection's variant.
    fn put(&self, tx: &mut Tx, tail: u32, data: &[u8]) -> io::Result<()> {
        let pos = tail as usize & (self.cap - 1);
        let first = data.len().min(self.cap - pos);
        let pieces = [(pos, &data[..first]), (0, &data[first..])];
        for (at, piece) in pieces {
            if piece.is_empty() {
                continue;
            }
            match self.variant {
                Variant::Du1 if (piece.as_ptr() as usize ^ at).is_multiple_of(4) => {
                    // One copy: the deliberate update reads the user's buffer directly.
                    self.outgoing
                        .write(HEADER + at, piece)
                        .map_err(io::Error::other)?;
                    add(&COUNTERS.sends_one_copy, 1);
                }
                Variant::Du1 | Variant::Du2 => {
                    if self.variant == Variant::Du1 {
                        add(&COUNTERS.align_fallbacks, 1);
                    }
                    // Two copies: stage, then send from the aligned staging buffer.
                    tx.staging.clear();
                    tx.staging.extend_from_slice(piece);
                    self.outgoing
                        .write(HEADER + at, &tx.staging)
                        .map_err(io::Error::other)?;
                    add(&COUNTERS.sends_two_copy, 1);
                }
                Variant::Au => {
                    // The store into the automatic-update image is the send; the binding
                    // propagates the stored range to the peer's ring.
                    tx.au_image[at..at + piece.len()].copy_from_slice(piece);
                    self.outgoing
                        .write(HEADER + at, &tx.au_image[at..at + piece.len()])
                        .map_err(io::Error::other)?;
                    add(&COUNTERS.sends_au, 1);
                }
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
            store(&self.outgoing, FIN, 1);
        }
        // Wakes our own sleepers too: they sleep on the same socket, so poke the peer, whose
        // sleepers re-check, and rely on the bounded sleep for ours.
        self.wake_peer();
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
        store(&self.outgoing, FIN, 1);
        store(&self.outgoing, CLOSED, 1);
        self.wake_peer();
        let _ = self.setup.shutdown(std::net::Shutdown::Both);
    }
}
