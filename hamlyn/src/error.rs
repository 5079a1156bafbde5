//! One error type for the crate.

/// Result of every fallible Hamlyn call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything Hamlyn can refuse or report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The VMMC layer underneath failed.
    #[error("vmmc: {0}")]
    Vmmc(#[source] vmmc::Error),
    /// A peer process died or left the job (seed 002 §6.3: the OS knows; here the transport).
    #[error("peer {0} is gone (exited or killed)")]
    PeerLost(String),
    /// No resource right now (work queue full, no ticket): retry after progress (§2.8).
    #[error("would block: {0}")]
    WouldBlock(&'static str),
    /// The sender closed the stream (§6.4) and every record was received.
    #[error("the stream was closed by its sender")]
    Closed,
    /// A blocking receive's time-out expired (`h_recv_block`).
    #[error("timed out")]
    Timeout,
    /// A malformed argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// No such slot, metadata entry, send buffer tag or receive class.
    #[error("no such {0}")]
    NoSuch(&'static str),
    /// A message does not fit where it is sent (a fast-mode message over one packet, data
    /// beyond a ticket's bounds as the sender's library sees them).
    #[error("too large: {0}")]
    TooLarge(&'static str),
    /// A malformed ticket, seed or protocol message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The OS's random source failed.
    #[error("random source: {0}")]
    Random(#[source] std::io::Error),
}

impl From<vmmc::Error> for Error {
    fn from(e: vmmc::Error) -> Error {
        match e {
            vmmc::Error::PeerLost(p) => Error::PeerLost(p),
            vmmc::Error::WouldBlock => Error::WouldBlock("transport queue full"),
            e => Error::Vmmc(e),
        }
    }
}
