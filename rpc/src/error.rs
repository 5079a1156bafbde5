//! The crate's error type.

use crate::msg::AuthStat;
use crate::xdr;
use std::io;

/// Errors of the RPC runtime. Each accept and reject status of a reply has its own variant.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `PROG_UNAVAIL`: the server does not serve the program.
    #[error("program unavailable")]
    ProgUnavail,
    /// `PROG_MISMATCH`: the server serves the program, in versions `low..=high` only.
    #[error("program version mismatch: the server has versions {low} to {high}")]
    ProgMismatch {
        /// Lowest version served.
        low: u32,
        /// Highest version served.
        high: u32,
    },
    /// `PROC_UNAVAIL`: the program has no such procedure.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// `GARBAGE_ARGS`: the server could not decode the arguments.
    #[error("the server could not decode the arguments")]
    GarbageArgs,
    /// `SYSTEM_ERR`: the server failed while handling the call.
    #[error("system error on the server")]
    SystemErr,
    /// `RPC_MISMATCH`: the server speaks RPC versions `low..=high` only.
    #[error("RPC version mismatch: the server speaks versions {low} to {high}")]
    RpcMismatch {
        /// Lowest RPC version.
        low: u32,
        /// Highest RPC version.
        high: u32,
    },
    /// `AUTH_ERROR`: the server refused the credentials.
    #[error("authentication error: {0:?}")]
    AuthError(AuthStat),
    /// No reply came in time.
    #[error("timed out waiting for the reply")]
    Timeout,
    /// The connection ended in the middle of a record or before the reply.
    #[error("connection closed by the peer")]
    ConnectionClosed,
    /// A record was larger than the configured limit.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Bytes announced so far.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A message that is not a valid RPC reply (e.g. a call, or an unknown status).
    #[error("malformed RPC message: {0}")]
    BadMessage(String),
    /// rpcbind does not know the program and version on that transport.
    #[error("program {prog} version {vers} is not registered with rpcbind ({netid})")]
    NotRegistered {
        /// Program number.
        prog: u32,
        /// Version.
        vers: u32,
        /// `tcp` or `udp`.
        netid: &'static str,
    },
    /// rpcbind refused a registration, usually because the program and version are already
    /// registered (a killed server leaves its registration behind: `rpcinfo -d PROG VERS`).
    #[error("rpcbind refused to register program {prog} version {vers} ({netid}); if a killed server left it behind, remove it with `rpcinfo -d {prog} {vers}`")]
    RegistrationRefused {
        /// Program number.
        prog: u32,
        /// Version.
        vers: u32,
        /// `tcp` or `udp`.
        netid: &'static str,
    },
    /// A server was configured wrongly (no service, a program version added twice...).
    #[error("server configuration: {0}")]
    Config(String),
    /// Encoding the arguments or decoding the results failed.
    #[error("XDR: {0}")]
    Xdr(#[from] xdr::Error),
    /// A socket operation failed.
    #[error("I/O: {0}")]
    Io(#[source] io::Error),
    /// VRPC: the peer process of a binding is gone (it exited or was killed).
    #[error("the peer is gone: {0}")]
    PeerLost(String),
    /// VRPC: a VMMC operation failed.
    #[error("VMMC: {0}")]
    Vmmc(#[source] vmmc::Error),
}

impl From<vmmc::Error> for Error {
    fn from(e: vmmc::Error) -> Self {
        match e {
            vmmc::Error::PeerLost(who) => Error::PeerLost(who),
            // The peer withdrew its queue: the binding is closed.
            vmmc::Error::Unexported => Error::ConnectionClosed,
            other => Error::Vmmc(other),
        }
    }
}

impl Error {
    /// Maps an I/O error, turning read timeouts into [`Error::Timeout`].
    pub(crate) fn from_io(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout,
            io::ErrorKind::UnexpectedEof => Error::ConnectionClosed,
            _ => Error::Io(e),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::from_io(e)
    }
}
