//! The launcher's environment, read the same way by every transport (DESIGN.md, "Launching").
//!
//! `vmmc-run` sets `VMMC_TRANSPORT`, `VMMC_RANK`, `VMMC_SIZE`, `VMMC_RENDEZVOUS` and
//! `VMMC_JOB`. Under an MPI launcher the rank and size come from `OMPI_COMM_WORLD_RANK/SIZE`
//! (Open MPI) or `PMI_RANK/PMI_SIZE` (MPICH Hydra); the rendezvous then defaults to one derived
//! from the launcher's process id, which all ranks of one `mpirun` share as parent. A program
//! started alone is a job of one.

use crate::error::{Error, Result};

/// Environment variable names.
pub mod vars {
    /// Transport name.
    pub const TRANSPORT: &str = "VMMC_TRANSPORT";
    /// Rank of this process.
    pub const RANK: &str = "VMMC_RANK";
    /// Number of processes.
    pub const SIZE: &str = "VMMC_SIZE";
    /// Address of the trusted party (for shm: a Unix socket path).
    pub const RENDEZVOUS: &str = "VMMC_RENDEZVOUS";
    /// Job id.
    pub const JOB: &str = "VMMC_JOB";
    /// The session's hosts, comma-separated (`vmmc_SessionHosts`): `vmmc-run --hosts`, else
    /// the launcher's host.
    pub const HOSTS: &str = "VMMC_HOSTS";
    /// `node:squid` of the process that spawned this one (`vmmc_Parent`).
    pub const PARENT: &str = "VMMC_PARENT";
    /// How many processes the job may hold, spawned ones included (shm sizes its tables for
    /// them at the start: `vmmc-run --spawn-slots`); default `VMMC_SIZE`.
    pub const CAPACITY: &str = "VMMC_CAPACITY";
}

/// The session's hosts as the launcher wrote them in [`vars::HOSTS`] (duplicates dropped,
/// order kept), or `None` when no launcher of ours set them.
pub fn session_hosts_from_env() -> Option<Vec<String>> {
    let v = std::env::var(vars::HOSTS).ok()?;
    let mut out: Vec<String> = Vec::new();
    for h in v.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        if !out.iter().any(|o| o == h) {
            out.push(h.to_string());
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The spawner named in [`vars::PARENT`] (`node:squid`), if any.
pub fn parent_from_env() -> Option<crate::ProcId> {
    let v = std::env::var(vars::PARENT).ok()?;
    let (n, s) = v.split_once(':')?;
    Some(crate::ProcId {
        node: n.trim().parse().ok()?,
        squid: s.trim().parse().ok()?,
    })
}

/// Where the rank came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// `vmmc-run`.
    VmmcRun,
    /// An MPI launcher (`mpirun`, `mpiexec`).
    Mpi,
    /// No launcher: a job of one.
    Alone,
}

/// The bootstrap facts of this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootEnv {
    /// Transport name (default "shm").
    pub transport: String,
    /// Rank.
    pub rank: usize,
    /// Job size.
    pub size: usize,
    /// Rendezvous address, if given.
    pub rendezvous: Option<String>,
    /// Job id.
    pub job: String,
    /// Who launched us.
    pub launcher: Launcher,
}

fn num(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>> {
    match get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::Bootstrap(format!("{name}={v:?} is not a number"))),
    }
}

impl BootEnv {
    /// Reads the process environment.
    pub fn from_env() -> Result<BootEnv> {
        BootEnv::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads an environment given as a lookup function (for tests).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<BootEnv> {
        let transport = get(vars::TRANSPORT).unwrap_or_else(|| "shm".into());
        let ours = (num(get, vars::RANK)?, num(get, vars::SIZE)?);
        let ompi = (
            num(get, "OMPI_COMM_WORLD_RANK")?,
            num(get, "OMPI_COMM_WORLD_SIZE")?,
        );
        let pmi = (num(get, "PMI_RANK")?, num(get, "PMI_SIZE")?);
        let (rank, size, launcher) = match (ours, ompi, pmi) {
            ((Some(r), Some(s)), _, _) => (r, s, Launcher::VmmcRun),
            ((Some(_), None), _, _) | ((None, Some(_)), _, _) => {
                return Err(Error::Bootstrap(format!(
                    "{} and {} must be set together",
                    vars::RANK,
                    vars::SIZE
                )))
            }
            (_, (Some(r), Some(s)), _) | (_, _, (Some(r), Some(s))) => (r, s, Launcher::Mpi),
            _ => (0, 1, Launcher::Alone),
        };
        if size == 0 || rank >= size {
            return Err(Error::Bootstrap(format!(
                "rank {rank} out of range for size {size}"
            )));
        }
        let rendezvous = get(vars::RENDEZVOUS).filter(|s| !s.is_empty());
        // SAFETY: getppid has no memory effects.
        let ppid = unsafe { libc::getppid() };
        let job = get(vars::JOB).unwrap_or_else(|| match launcher {
            Launcher::Mpi => format!("mpi-{ppid}"),
            _ => format!("solo-{}", std::process::id()),
        });
        Ok(BootEnv {
            transport,
            rank,
            size,
            rendezvous,
            job,
            launcher,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<BootEnv> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BootEnv::from_lookup(&move |k| m.get(k).cloned())
    }

    #[test]
    fn reads_each_launcher() {
        let e = env(&[("VMMC_RANK", "1"), ("VMMC_SIZE", "3"), ("VMMC_JOB", "j")]).unwrap();
        assert_eq!(
            (e.rank, e.size, e.launcher, e.transport.as_str()),
            (1, 3, Launcher::VmmcRun, "shm")
        );
        let e = env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]).unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (0, 2, Launcher::Mpi));
        assert!(e.job.starts_with("mpi-"));
        let e = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]).unwrap();
        assert_eq!((e.rank, e.launcher), (1, Launcher::Mpi));
        let e = env(&[]).unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (0, 1, Launcher::Alone));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(env(&[("VMMC_RANK", "x"), ("VMMC_SIZE", "2")]).is_err());
        assert!(env(&[("VMMC_RANK", "2"), ("VMMC_SIZE", "2")]).is_err());
        assert!(env(&[("VMMC_RANK", "0")]).is_err());
        assert!(env(&[("VMMC_RANK", "0"), ("VMMC_SIZE", "0")]).is_err());
    }
}
