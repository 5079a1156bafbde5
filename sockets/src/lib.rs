//! Stream sockets over VMMC (seed 003 §4.3).
//!
//! Data moves through a circular buffer in each direction: the receiver owns (exports) its
//! incoming ring, the sender writes the bytes and the ring's tail into it; the receiver
//! writes how much it consumed into the sender's ring. Every remote access is a write, every
//! read is local, as on SHRIMP (see [`ring`]).
//!
//! Three send protocols of seed 003 §4.3 are selectable at run time ([`Variant`], from the
//! API or `VMMC_SOCK_VARIANT=du2|du1|au`): two-copy deliberate update, one-copy deliberate
//! update (which falls back to two copies when the user buffer and the ring position differ
//! in word alignment, as SHRIMP's DU engine required), and two-copy automatic update.
//! [`VmmcStream::write_block`] / [`VmmcStream::read_block`] are the non-standard block
//! transfer extension used by DFS-sockets (seed 001 §3).
//!
//! # Two ways to connect, one ring code
//!
//! **Inside a job** (processes of one `vmmc-run` job, or the nodes of the simulated SHRIMP):
//! [`JobListener::bind`]`(&ep, port)` and [`VmmcStream::connect_job`]`(&ep, rank, port)`.
//! The rings are exported and imported through the endpoint, so connections run on every
//! transport the job runs on (shm, sim, and the multi-host ones), and the rendezvous goes
//! through VMMC itself: a listener exports a well-known buffer of request slots, a connect
//! writes its ring's id into one, the accept answers in the connecting ring's header (see
//! [`JobListener`]). No kernel socket is involved. `connect` returns before the accept (as a
//! kernel connect returns once in the backlog), so a thread may connect to its own
//! listener, and a program may open all its connections before accepting any. Waits go
//! through the core's one policy ([`vmmc::wait`]): on the simulator each turn advances
//! virtual time (timeouts are in virtual time, too); elsewhere they spin while that pays,
//! yield where processes outnumber cores, then sleep until the peer's notification. A peer that leaves the job is noticed through
//! the endpoint: reads give end of file, writes `BrokenPipe`.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! // vmmc-run -n 4 [--transport sim] -- this-program
//! vmmc_run::run(|ep| {
//!     let talk = || -> std::io::Result<()> {
//!         if ep.rank() == 0 {
//!             let listener = sockets::JobListener::bind(&ep, 80)?;
//!             for _ in 1..ep.size() {
//!                 let (s, rank) = listener.accept()?;
//!                 s.write_block(format!("hello, rank {rank}").as_bytes())?;
//!             }
//!         } else {
//!             let s = sockets::VmmcStream::connect_job(&ep, 0, 80)?;
//!             let mut block = vec![0u8; 64];
//!             let n = s.read_block(&mut block)?;
//!             assert!(block[..n].starts_with(b"hello"));
//!         }
//!         Ok(())
//!     };
//!     talk().map_err(|e| vmmc::Error::io("sockets", e))
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Between unrelated processes** of one host (no common job: the LD_PRELOAD interposer's
//! case): [`VmmcListener`] / [`VmmcStream::connect`] take socket addresses like
//! `TcpListener` / `TcpStream`. A connection is set up over a regular TCP socket, on which
//! the connecting side announces the two rings it made (shared [`vmmc::Region`]s backed by
//! files in [`SHM_DIR`], which the accepting side maps with
//! [`vmmc::Region::map_shared_fd`]: see [`Offer`]; `connect` does not wait for the
//! `accept`, so one thread may do both); the socket then stays open to detect a broken
//! connection and to wake a peer that went to sleep, as in seed 003 §4.3's "Connection
//! Establishment".
//!
//! ```no_run
//! use std::io::{Read, Write};
//! let listener = sockets::VmmcListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let t = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut s, _) = listener.accept()?;
//!     let mut b = [0u8; 5];
//!     s.read_exact(&mut b)?;
//!     s.write_all(&b)
//! });
//! let mut c = sockets::VmmcStream::connect(addr)?;
//! c.write_all(b"hello")?;
//! # t.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod error;
mod job;
pub mod ring;
mod stats;
mod stream;

pub use error::Error;
pub use job::{JobListener, BACKLOG, LISTEN_BASE};
pub use ring::{Conn, RecvFlags};
pub use stats::{stats, Stats};
pub use stream::{
    accept_offer, shm_dir, Offer, Options, RingFile, VmmcListener, VmmcStream, HELLO_LEN, MAGIC,
    SHM_DIR,
};

/// The send protocol of a connection (seed 003 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Variant {
    /// Deliberate update, two copies: the sender copies into a staging buffer (so alignment
    /// never matters), sends from it, and the receiver copies out.
    Du2,
    /// Deliberate update, one copy on the send side when the user buffer and the ring
    /// position agree in word alignment; otherwise two copies as [`Variant::Du2`].
    #[default]
    Du1,
    /// Automatic update, two copies: the sender stores into its local image of the ring (the
    /// automatic-update region), and the stores propagate to the receiver.
    Au,
}

impl Variant {
    /// Parses `du2`, `du1` or `au`.
    pub fn parse(s: &str) -> Result<Variant, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "du2" | "2copy" | "du-2copy" => Ok(Variant::Du2),
            "du1" | "1copy" | "du-1copy" => Ok(Variant::Du1),
            "au" | "au2" | "au-2copy" => Ok(Variant::Au),
            other => Err(Error::BadVariant(other.to_string())),
        }
    }

    /// The variant named by `VMMC_SOCK_VARIANT`, or the default (one-copy DU).
    pub fn from_env() -> Result<Variant, Error> {
        match std::env::var("VMMC_SOCK_VARIANT") {
            Ok(v) => Variant::parse(&v),
            Err(_) => Ok(Variant::default()),
        }
    }

    /// The short name (`du2`, `du1`, `au`).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Du2 => "du2",
            Variant::Du1 => "du1",
            Variant::Au => "au",
        }
    }
}
