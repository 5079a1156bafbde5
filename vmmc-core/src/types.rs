//! Identity and the small value types of the model (seeds 000 and 004).

use std::fmt;

/// A node: one host of the machine (seed 004: node ids from `vmmc_Hosts`).
pub type NodeId = u32;

/// A squid ("Shrimp quad-word id"): a process id unique on its node and never recycled
/// during a job (seed 004).
pub type Squid = u32;

/// A receive-buffer id chosen by the exporter, unique among its exports (seed 000).
pub type BufId = u32;

/// Size of a VMMC word in bytes (`vmmc_WordSize`).
pub const WORD_SIZE: usize = 4;

/// Library version (`vmmc_Version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Size of a VMMC page in bytes (`vmmc_PageSize`): the virtual-memory page size, queried.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Full identification of a process: (node, squid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    /// The node the process runs on.
    pub node: NodeId,
    /// The process's squid on that node.
    pub squid: Squid,
}

impl fmt::Display for ProcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.squid)
    }
}

/// Who may import an exported buffer (seed 004: "an exporter can restrict possible importers").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Importers {
    /// Any process of the job.
    #[default]
    Any,
    /// Only these processes.
    Only(Vec<ProcId>),
}

impl Importers {
    /// Whether `who` may import.
    pub fn allows(&self, who: ProcId) -> bool {
        match self {
            Importers::Any => true,
            Importers::Only(list) => list.contains(&who),
        }
    }
}

/// The facts about the job that the transport learned at bootstrap.
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// This process's rank in the job, `0..size`.
    pub rank: usize,
    /// Number of processes in the job.
    pub size: usize,
    /// Identity of each rank.
    pub procs: Vec<ProcId>,
    /// Host name of each node, indexed by node id.
    pub hosts: Vec<String>,
    /// The process that started this one, when it is a VMMC process (`vmmc_Parent`).
    pub parent: Option<ProcId>,
}

impl JobInfo {
    /// This process's identity.
    pub fn me(&self) -> ProcId {
        self.procs[self.rank]
    }

    /// The rank of a process of this job.
    pub fn rank_of(&self, p: ProcId) -> Option<usize> {
        self.procs.iter().position(|q| *q == p)
    }
}

/// A notification as delivered to a handler (seed 000): the offset of the last word of the
/// message that carried it, and that word's value as the message delivered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The receive buffer the message arrived in.
    pub buf: BufId,
    /// Byte offset, in the receive buffer, of the last word transferred.
    pub offset: usize,
    /// Value of that word as delivered (later messages may have overwritten memory since).
    pub value: u32,
}
