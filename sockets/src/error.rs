//! The crate's error type.

use std::io;

/// Errors of the sockets library. Stream operations return `std::io::Error` as `std::net`
/// does; this enum is their source and is also returned by configuration calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `VMMC_SOCK_VARIANT` value that names no variant.
    #[error("unknown sockets variant {0:?} (expected du2, du1 or au)")]
    BadVariant(String),
    /// The peer on the setup socket does not speak this protocol.
    #[error("connection setup failed: {0}")]
    Handshake(String),
    /// Allocating or mapping a ring failed.
    #[error("VMMC: {0}")]
    Vmmc(#[from] vmmc::Error),
    /// An I/O error on the setup socket.
    #[error("setup socket: {0}")]
    Io(#[from] io::Error),
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            Error::BadVariant(_) => io::Error::new(io::ErrorKind::InvalidInput, e),
            Error::Handshake(_) => io::Error::new(io::ErrorKind::ConnectionRefused, e),
            Error::Vmmc(_) => io::Error::other(e),
        }
    }
}
