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
//!
//! The data is written before its `TAIL` (release), so a reader that sees the tail (acquire)
//! sees the data: the "flag after the data" guarantee of DESIGN.md. A side that finds nothing
//! to do spins briefly, then sets its `WAITS_*` word in the peer's ring and sleeps on the setup
//! socket; the peer, after changing what the sleeper waits for, sends one byte there. The
//! setup socket's end of file is how a dead peer is noticed.

use crate::stats::{add, COUNTERS};
use crate::Variant;
use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
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

/// Default data capacity of a ring: 1 MiB, enough to keep a 64 KB writer streaming.
pub const DEFAULT_CAPACITY: usize = 1 << 20;

/// How long a reader or writer spins before it sleeps: a little more than a blocking wake-up
/// costs on this machine (DESIGN.md: 25-30 µs), so ping-pong stays on the fast path.
const SPIN: Duration = Duration::from_micros(60);
/// Longest single sleep: bounds the cost of a wake-up lost to another thread of this process
/// that consumed the token.
const MAX_SLEEP: Duration = Duration::from_millis(5);

struct Tx {
    tail: u32,
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
    rx: Mutex<u32>,
    tx: Mutex<Tx>,
    peer_gone: AtomicBool,
    rd_shut: AtomicBool,
    wr_shut: AtomicBool,
    nonblocking: AtomicBool,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
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
        add(&COUNTERS.connections, 1);
        Conn {
            incoming,
            outgoing,
            cap,
            variant,
            setup,
            rx: Mutex::new(0),
            tx: Mutex::new(Tx {
                tail: 0,
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
        }
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
        let head = *self.rx.lock().unwrap_or_else(|e| e.into_inner());
        word(&self.incoming, TAIL).wrapping_sub(head) as usize
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
        let tail = self.tx.lock().unwrap_or_else(|e| e.into_inner()).tail;
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
        store(&self.outgoing, flag, 1);
        // Pairs with the fence in the peer between its update and its look at our flag
        // (Dekker): one of the two sees the other's store.
        fence(Ordering::SeqCst);
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
            let _ = self.setup.set_read_timeout(Some(sleep));
            let mut tokens = [0u8; 64];
            match (&self.setup).read(&mut tokens) {
                Ok(0) => self.peer_gone.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => self.peer_gone.store(true, Ordering::Relaxed),
            }
        };
        store(&self.outgoing, flag, 0);
        result
    }

    /// Reads into `buf` (the receive-side copy).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut head = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        loop {
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
                *head = head.wrapping_add(n as u32);
                // Tell the writer, in its own ring, how far we consumed.
                store(&self.outgoing, ACK, *head);
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_SPACE) != 0 {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_received, n as u64);
                return Ok(n);
            }
            if self.rd_shut.load(Ordering::Relaxed) || word(&self.incoming, FIN) != 0 {
                return Ok(0);
            }
            if self.peer_gone.load(Ordering::Relaxed) {
                return Err(io::Error::from(io::ErrorKind::ConnectionReset));
            }
            if self.nonblocking.load(Ordering::Relaxed) {
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
        if buf.is_empty() {
            return Ok(0);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = self.write_error() {
                return Err(e);
            }
            let space = self.space(tx.tail);
            if space > 0 {
                let n = space.min(buf.len());
                self.put(&mut tx, &buf[..n])?;
                tx.tail = tx.tail.wrapping_add(n as u32);
                // The tail after the data: the reader that sees it sees the bytes.
                store(&self.outgoing, TAIL, tx.tail);
                fence(Ordering::SeqCst);
                if word(&self.incoming, WAITS_DATA) != 0 {
                    self.wake_peer();
                }
                add(&COUNTERS.bytes_sent, n as u64);
                return Ok(n);
            }
            if self.nonblocking.load(Ordering::Relaxed) {
                return Err(would_block());
            }
            let t = tx.tail;
            self.wait(
                || self.space(t) > 0 || self.write_error().is_some(),
                WAITS_SPACE,
                self.timeout(false),
            )?;
        }
    }

    /// Moves `data` into the peer's ring at the current tail with this connection's variant.
    fn put(&self, tx: &mut Tx, data: &[u8]) -> io::Result<()> {
        let pos = tx.tail as usize & (self.cap - 1);
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
        store(&self.outgoing, FIN, 1);
        store(&self.outgoing, CLOSED, 1);
        self.wake_peer();
        let _ = self.setup.shutdown(std::net::Shutdown::Both);
    }
}
