//! One error type for the whole VMMC API, named after the error cases of seeds 000 and 004.
//!
//! The C ABI returns the negative [`Error::code`] of each case; [`error_str`] gives the text
//! behind a code (`vmmc_ErrorStr`).

use std::io;

/// Result of every fallible VMMC call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a VMMC call can refuse or report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument is malformed (zero length, bad id, bad option).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// Offsets and lengths of transfers are in words (seed 004: `nwords`).
    #[error("offset {offset} or length {len} is not a multiple of the word size")]
    Unaligned {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
    },
    /// Export with a buffer id this process already exports.
    #[error("buffer id {0} is already exported by this process")]
    BufIdInUse(u32),
    /// Receive buffers cannot overlap (seed 000).
    #[error("receive buffer {0} would overlap an exported buffer")]
    Overlap(u32),
    /// No such exported buffer (unexport, redirection or import of an unknown id).
    #[error("no exported buffer with id {0}")]
    NoSuchBuffer(u32),
    /// The exporter's permissions do not list the importer.
    #[error("import of buffer {0} refused: not in the exporter's list of importers")]
    PermissionDenied(u32),
    /// A transfer outside the proxy's bounds; nothing was written.
    #[error("transfer [{offset}, {offset}+{len}) is outside the {size}-byte receive buffer")]
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
        /// Size of the receive buffer.
        size: usize,
    },
    /// The exporter unexported the buffer: the import-export link is broken.
    #[error("the receive buffer was unexported; the link is broken")]
    Unexported,
    /// The proxy was unimported, or the DestSpace address belongs to no proxy.
    #[error("not an imported buffer (unimported proxy or address outside DestSpace)")]
    NotImported,
    /// The peer process died or left the job.
    #[error("peer {0} is gone (exited or killed)")]
    PeerLost(String),
    /// Blocked notifications overflowed their bounded queue; this many were lost.
    #[error("notification queue overflowed while notifications were blocked: {0} lost")]
    NotifyOverflow(u64),
    /// An unconditional unblock inside a notification handler (seed 000).
    #[error("notifications must remain blocked inside a handler")]
    UnblockInHandler,
    /// A queue is full: retry after progress (back-pressure, never a silent drop).
    #[error("resource temporarily unavailable (queue full)")]
    WouldBlock,
    /// The buffer was not exported as redirectable.
    #[error("buffer {0} is not redirectable")]
    NotRedirectable(u32),
    /// A redirection is already posted on this buffer.
    #[error("a redirection is already posted on buffer {0}")]
    RedirPosted(u32),
    /// The transport cannot do this and the core has no emulation for it.
    #[error("not supported by this transport: {0}")]
    Unsupported(&'static str),
    /// The launcher's environment is missing or malformed.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A malformed message from a peer or from the trusted party.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// `vmmc_Spawn` could not start the process (unknown host, missing program, the
    /// launcher refused, or the process ended before it joined the job).
    #[error("spawn failed: {0}")]
    SpawnFailed(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// The operation that failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Stable negative codes, one per case, for the C ABI.
const CODES: &[(i32, &str)] = &[
    (-1, "invalid argument"),
    (-2, "offset or length not a multiple of the word size"),
    (-3, "buffer id already exported"),
    (-4, "receive buffers overlap"),
    (-5, "no such exported buffer"),
    (-6, "permission denied"),
    (-7, "transfer out of the receive buffer's bounds"),
    (-8, "receive buffer unexported"),
    (-9, "not an imported buffer"),
    (-10, "peer process lost"),
    (-11, "notification queue overflow"),
    (-12, "unconditional unblock inside a notification handler"),
    (-13, "would block (queue full)"),
    (-14, "buffer not redirectable"),
    (-15, "redirection already posted"),
    (-16, "not supported by this transport"),
    (-17, "bootstrap error"),
    (-18, "protocol error"),
    (-19, "system call failed"),
    (-20, "spawn failed"),
];

impl Error {
    /// The negative code of this error in the C ABI.
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidArgument(_) => -1,
            Error::Unaligned { .. } => -2,
            Error::BufIdInUse(_) => -3,
            Error::Overlap(_) => -4,
            Error::NoSuchBuffer(_) => -5,
            Error::PermissionDenied(_) => -6,
            Error::OutOfBounds { .. } => -7,
            Error::Unexported => -8,
            Error::NotImported => -9,
            Error::PeerLost(_) => -10,
            Error::NotifyOverflow(_) => -11,
            Error::UnblockInHandler => -12,
            Error::WouldBlock => -13,
            Error::NotRedirectable(_) => -14,
            Error::RedirPosted(_) => -15,
            Error::Unsupported(_) => -16,
            Error::Bootstrap(_) => -17,
            Error::Protocol(_) => -18,
            Error::Io { .. } => -19,
            Error::SpawnFailed(_) => -20,
        }
    }

    /// Wraps the last OS error.
    pub fn last_os(what: &'static str) -> Error {
        Error::Io {
            what,
            source: io::Error::last_os_error(),
        }
    }

    /// Wraps an `io::Error`.
    pub fn io(what: &'static str, source: io::Error) -> Error {
        Error::Io { what, source }
    }
}

/// The text behind a C ABI error code (`vmmc_ErrorStr`); 0 is success.
pub fn error_str(code: i32) -> &'static str {
    if code >= 0 {
        return "no error";
    }
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, s)| *s)
        .unwrap_or("unknown error code")
}

/// Every code the C ABI can return, with its text (for headers and docs).
pub fn all_codes() -> &'static [(i32, &'static str)] {
    CODES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_described() {
        let samples = [
            Error::InvalidArgument("x"),
            Error::Unaligned { offset: 1, len: 4 },
            Error::BufIdInUse(1),
            Error::Overlap(1),
            Error::NoSuchBuffer(1),
            Error::PermissionDenied(1),
            Error::OutOfBounds {
                offset: 0,
                len: 8,
                size: 4,
            },
            Error::Unexported,
            Error::NotImported,
            Error::PeerLost("1".into()),
            Error::NotifyOverflow(1),
            Error::UnblockInHandler,
            Error::WouldBlock,
            Error::NotRedirectable(1),
            Error::RedirPosted(1),
            Error::Unsupported("x"),
            Error::Bootstrap("x".into()),
            Error::Protocol("x".into()),
            Error::io("x", io::Error::from_raw_os_error(1)),
            Error::SpawnFailed("x".into()),
        ];
        let mut seen = std::collections::HashSet::new();
        for e in &samples {
            assert!(e.code() < 0);
            assert!(seen.insert(e.code()), "duplicate code {}", e.code());
            assert_ne!(error_str(e.code()), "unknown error code");
        }
        assert_eq!(seen.len(), CODES.len());
        assert_eq!(error_str(0), "no error");
        assert_eq!(error_str(-1000), "unknown error code");
    }
}
