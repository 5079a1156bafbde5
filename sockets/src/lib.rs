//! Stream sockets over VMMC (seed 003 §4.3).
//!
//! A connection is set up over a regular TCP socket, which exchanges what the two VMMC
//! mappings need (one receive buffer per direction) and then stays open to detect a broken
//! connection and to wake a peer that went to sleep. Data moves through a circular buffer in
//! each direction: the receiver owns (exports) its incoming ring, the sender maps it and
//! writes the bytes and the ring's tail into it; the receiver writes how much it consumed into
//! the sender's ring. Every remote access is a write, every read is local, as on SHRIMP.
//!
//! Three send protocols of seed 003 §4.3 are selectable at run time ([`Variant`], from the
//! API or `VMMC_SOCK_VARIANT=du2|du1|au`): two-copy deliberate update, one-copy deliberate
//! update (which falls back to two copies when the user buffer and the ring position differ
//! in word alignment, as SHRIMP's DU engine required), and two-copy automatic update.
//! [`VmmcStream::write_block`] / [`VmmcStream::read_block`] are the non-standard block
//! transfer extension used by DFS-sockets (seed 001 §3).
//!
//! Two unrelated processes (started separately, no common `vmmc-run` job) must be able to
//! connect, so a connection does not go through an endpoint's export/import and its job's
//! trusted party: each side allocates its ring as a shared [`vmmc::Region`] backed by a file
//! in [`SHM_DIR`], and the peer maps it with [`vmmc::Region::map_shared_fd`] (see [`Offer`]
//! and [`ring`]).
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
pub mod ring;
mod stats;
mod stream;

pub use error::Error;
pub use ring::{Conn, RecvFlags};
pub use stats::{stats, Stats};
pub use stream::{
    shm_dir, Offer, Options, RingFile, VmmcListener, VmmcStream, HELLO_LEN, MAGIC, SHM_DIR,
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
