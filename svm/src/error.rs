//! The errors of shared virtual memory.

/// What can go wrong in a shared space.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The communication layer failed (a dead peer, an unexported buffer, ...).
    #[error(transparent)]
    Vmmc(#[from] vmmc::Error),
    /// A node of the job died or left; the space cannot go on.
    #[error("svm: node {0} is lost: {1}")]
    PeerLost(usize, String),
    /// The space has no room for an allocation.
    #[error(
        "svm: out of shared space: {wanted} bytes asked, {left} of {size} left (raise SVM_SPACE)"
    )]
    OutOfSpace {
        /// Bytes asked for (rounded up to whole pages).
        wanted: usize,
        /// Bytes still free.
        left: usize,
        /// The space's size.
        size: usize,
    },
    /// A lock id beyond the configured number of locks.
    #[error("svm: lock {0} is out of range (the space has {1} locks)")]
    LockOutOfRange(u32, u32),
    /// A flag id beyond the configured number of flags.
    #[error("svm: flag {0} is out of range (the space has {1} flags)")]
    FlagOutOfRange(u32, u32),
    /// A release of a lock this node does not hold.
    #[error("svm: release of lock {0}, which this node does not hold")]
    NotHeld(u32),
    /// The nodes disagree on a collective call (set-up, allocation or barrier).
    #[error("svm: mismatched collective call: {0}")]
    Mismatch(String),
    /// An index outside a shared array.
    #[error("svm: index {index} (+{len}) out of bounds of a shared array of {size}")]
    OutOfBounds {
        /// First element asked for.
        index: usize,
        /// Number of elements.
        len: usize,
        /// Elements in the array.
        size: usize,
    },
    /// A bad configuration value.
    #[error("svm: bad configuration: {0}")]
    Config(String),
    /// Write notices or statistics larger than the area that carries them.
    #[error("svm: {what} of {len} bytes exceed the {cap}-byte area (raise SVM_NOTICE_AREA)")]
    TooLarge {
        /// What did not fit.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The area's size.
        cap: usize,
    },
    /// A message that breaks the protocol (a bug or memory corruption).
    #[error("svm: protocol error: {0}")]
    Protocol(String),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// So that a program's body under `vmmc_run::run` can use `?` on the space's calls.
impl From<Error> for vmmc::Error {
    fn from(e: Error) -> vmmc::Error {
        match e {
            Error::Vmmc(e) => e,
            Error::PeerLost(r, m) => vmmc::Error::PeerLost(format!("node {r}: {m}")),
            e => vmmc::Error::Protocol(e.to_string()),
        }
    }
}
