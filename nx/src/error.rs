//! The errors of NX, named after NX's own error conditions.
//!
//! NX's calls print the error and end the process; their underscore forms (`_csend`, ...)
//! return -1 and set `errno`. The Rust API returns [`NxError`]; the C ABI does both, with
//! [`NxError::code`] as the `errno` value.

/// Result of every fallible NX call.
pub type Result<T, E = NxError> = std::result::Result<T, E>;

/// Everything an NX call can refuse or report.
#[derive(Debug, thiserror::Error)]
pub enum NxError {
    /// A message type outside NX's ranges (0..=999,999,999 and the force types
    /// 1,073,741,824..=1,999,999,999), or a type selector that selects nothing.
    #[error("invalid message type {0} (EQTYPE)")]
    InvalidType(i64),
    /// A node number outside `0..numnodes()` (or a selector other than -1 below 0).
    #[error("invalid node {0} (EQNODE)")]
    InvalidNode(i64),
    /// A process type below 0 (or a selector other than -1 below 0).
    #[error("invalid process type {0} (EQPTYPE)")]
    InvalidPtype(i64),
    /// A negative length, or a buffer pointer that is NULL with a positive length.
    #[error("invalid message length {0} (EQLEN)")]
    InvalidLength(i64),
    /// The message is longer than the receive buffer: the first `cap` bytes were stored.
    #[error("message of {len} bytes is longer than the {cap}-byte receive buffer (EQMSGLONG)")]
    MessageTooLong {
        /// The message's length.
        len: usize,
        /// The receive buffer's length.
        cap: usize,
    },
    /// No such message id (never issued, already released by msgwait/msgdone).
    #[error("invalid message id {0} (EQMID)")]
    InvalidMid(i64),
    /// The peer process is gone: the message can never be delivered or completed.
    #[error("node {node} is gone (exited or killed) while {what}")]
    PeerLost {
        /// The node.
        node: usize,
        /// What this process was doing.
        what: &'static str,
    },
    /// The sender of a zero-copy message could not write its data into this receive's
    /// memory (its send failed with the reason); the receive's buffer holds no message.
    #[error("node {node} failed to write the message's data (its send reports why)")]
    SendFailed {
        /// The sending node.
        node: usize,
    },
    /// The operation cannot be done here (e.g. a handler receive inside a handler).
    #[error("{0}")]
    NotAllowed(&'static str),
    /// A malformed setting (NX_SMALL, NX_THRESHOLD, ...).
    #[error("bad setting: {0}")]
    Config(String),
    /// The VMMC layer found a peer gone.
    #[error("a peer is gone: {0}")]
    Gone(String),
    /// The VMMC layer failed.
    #[error("vmmc: {0}")]
    Vmmc(vmmc::Error),
    /// The call has no meaning on Linux, or needs what this job does not have (the text
    /// says which: partition management, process creation outside the launcher, ...).
    #[error("{0} (EQNOTSUP)")]
    Unsupported(&'static str),
}

impl From<vmmc::Error> for NxError {
    fn from(e: vmmc::Error) -> NxError {
        match e {
            vmmc::Error::PeerLost(who) => NxError::Gone(who),
            e => NxError::Vmmc(e),
        }
    }
}

impl NxError {
    /// The positive error number the C ABI stores in `errno` (the `EQ*` constants of nx.h).
    pub fn code(&self) -> i32 {
        match self {
            NxError::InvalidType(_) => 1,
            NxError::InvalidNode(_) => 2,
            NxError::InvalidPtype(_) => 3,
            NxError::InvalidLength(_) => 4,
            NxError::MessageTooLong { .. } => 5,
            NxError::InvalidMid(_) => 6,
            NxError::PeerLost { .. } | NxError::Gone(_) => 7,
            NxError::NotAllowed(_) => 8,
            NxError::Config(_) => 9,
            NxError::Vmmc(_) | NxError::SendFailed { .. } => 10,
            NxError::Unsupported(_) => 11,
        }
    }
}

/// The text of an error number of [`NxError::code`].
pub fn error_str(code: i32) -> &'static str {
    match code {
        0 => "no error",
        1 => "invalid message type (EQTYPE)",
        2 => "invalid node (EQNODE)",
        3 => "invalid process type (EQPTYPE)",
        4 => "invalid message length (EQLEN)",
        5 => "message longer than the receive buffer (EQMSGLONG)",
        6 => "invalid message id (EQMID)",
        7 => "peer node is gone (EQPEER)",
        8 => "operation not allowed here (EQNOTALLOWED)",
        9 => "bad setting (EQCONFIG)",
        10 => "communication layer failure (EQVMMC)",
        11 => "not available on Linux or in this job (EQNOTSUP)",
        _ => "unknown NX error",
    }
}
