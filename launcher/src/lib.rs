//! # vmmc-run: launching VMMC jobs
//!
//! [`init`] is the one entry point that lets a program run unchanged under any transport: it
//! reads the launcher's environment ([`vmmc::bootstrap::BootEnv`]) and returns this process's
//! [`Endpoint`]. Protocol libraries never call it; they are handed the endpoint.
//!
//! ```no_run
//! let ep = vmmc_run::init()?;
//! println!("rank {} of {}", ep.rank(), ep.size());
//! # Ok::<(), vmmc::Error>(())
//! ```
//!
//! [`run`] is the entry point for programs that must also run on the simulated SHRIMP, where
//! every node is a thread of one process: it calls the program's body once per node.
//!
//! ```no_run
//! vmmc_run::run(|ep| {
//!     println!("rank {} of {}", ep.rank(), ep.size());
//!     Ok(())
//! })?;
//! # Ok::<(), vmmc::Error>(())
//! ```
//!
//! The `vmmc-run` binary starts the processes of a job (see its `--help`); [`testing`] runs a
//! test's body as the ranks of a job.
#![deny(missing_docs)]

pub mod testing;

use std::sync::Arc;
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, Error, Result};

/// The transports this build knows.
#[cfg(not(feature = "mpi"))]
pub const TRANSPORTS: &[&str] = &["shm", "sim", "tcp", "rdma"];
/// The transports this build knows.
#[cfg(feature = "mpi")]
pub const TRANSPORTS: &[&str] = &["shm", "sim", "tcp", "rdma", "mpi"];

/// Set to 1 to have every rank say on stderr which transport it runs on.
pub const VERBOSE_VAR: &str = "VMMC_VERBOSE";

fn verbose() -> bool {
    std::env::var(VERBOSE_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Says which transport the job runs on (`VMMC_VERBOSE=1`): a silent fall-back to another
/// transport is the failure users of other stacks report most.
fn announce(env: &BootEnv, detail: &str) {
    if verbose() {
        use std::io::Write;
        // One write: ranks share the launcher's stderr, and a formatted print may take several.
        let line = format!(
            "vmmc: rank {} of {} runs on transport {}{detail}\n",
            env.rank, env.size, env.transport
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Where the simulator writes its run statistics (JSON), when set.
pub const SIM_STATS_VAR: &str = "VMMC_SIM_STATS";

/// Joins the job described by the environment and returns this process's endpoint.
pub fn init() -> Result<Endpoint> {
    init_with(&detect(BootEnv::from_env()?))
}

/// A program that an MPI launcher started without `VMMC_TRANSPORT` runs on the mpi
/// transport when it is built in (and says so with `VMMC_VERBOSE=1`); otherwise the
/// environment's choice stands (shm by default), and an unknown name is an error.
fn detect(mut env: BootEnv) -> BootEnv {
    let chosen = std::env::var(vmmc::bootstrap::vars::TRANSPORT).is_ok_and(|t| !t.is_empty());
    if cfg!(feature = "mpi") && !chosen && env.launcher == vmmc::bootstrap::Launcher::Mpi {
        env.transport = "mpi".into();
    }
    env
}

/// Joins the job described by `env`.
pub fn init_with(env: &BootEnv) -> Result<Endpoint> {
    let ep = match env.transport.as_str() {
        "shm" => Endpoint::new(Arc::new(vmmc_shm::ShmTransport::connect(env)?)),
        "tcp" => Endpoint::new(Arc::new(vmmc_tcp::TcpTransport::connect(env)?)),
        "rdma" => Endpoint::new(Arc::new(vmmc_rdma::RdmaTransport::connect(env)?)),
        #[cfg(feature = "mpi")]
        "mpi" => Endpoint::new(Arc::new(vmmc_mpi::MpiTransport::connect(env)?)),
        "sim" => Err(Error::Bootstrap(
            "the sim transport runs every node as a thread of one process: start the program \
             through vmmc_run::run"
                .into(),
        )),
        other => Err(Error::Bootstrap(format!(
            "transport {other:?} is not built in (this build has: {})",
            TRANSPORTS.join(", ")
        ))),
    }?;
    let detail = match (env.transport.as_str(), &env.rendezvous) {
        ("tcp" | "rdma", Some(rv)) => format!(" (rendezvous {rv}, host {})", ep.my_host_name()),
        ("mpi", _) if std::env::var(vmmc::bootstrap::vars::TRANSPORT).is_err() => format!(
            " (MPI one-sided; detected from the MPI launcher's environment, host {})",
            ep.my_host_name()
        ),
        ("mpi", _) => format!(" (MPI one-sided, host {})", ep.my_host_name()),
        _ => String::new(),
    };
    announce(env, &detail);
    Ok(ep)
}

/// Runs `body` as this job's program: once in this process with its endpoint (shm and other
/// process-per-rank transports), or once per node on threads of this process (sim, where
/// `VMMC_SIZE` nodes run in virtual time with the parameters of `VMMC_SIM_PARAMS` /
/// `VMMC_SIM_SET`, and the run's statistics go to the file named by [`SIM_STATS_VAR`]).
/// Returns the first failure.
pub fn run<F>(body: F) -> Result<()>
where
    F: Fn(Endpoint) -> Result<()> + Sync,
{
    let env = detect(BootEnv::from_env()?);
    if env.transport != "sim" {
        return body(init_with(&env)?);
    }
    announce(
        &env,
        &format!(" ({} nodes as threads of this process)", env.size),
    );
    let sim = vmmc_sim::Sim::new(env.size, vmmc_sim::Params::from_env()?)?;
    let outcomes = sim.run(body);
    if let Ok(path) = std::env::var(SIM_STATS_VAR) {
        if !path.is_empty() {
            let json = serde_json::to_string_pretty(&sim.stats())
                .map_err(|e| Error::Protocol(format!("statistics: {e}")))?;
            std::fs::write(&path, json).map_err(|e| Error::io("write the sim statistics", e))?;
        }
    }
    let mut first = None;
    for (rank, o) in outcomes.into_iter().enumerate() {
        let err = match o {
            vmmc_sim::Outcome::Returned(Ok(())) => continue,
            vmmc_sim::Outcome::Returned(Err(e)) => e,
            vmmc_sim::Outcome::Died => Error::PeerLost(format!("node {rank} died")),
            vmmc_sim::Outcome::Panicked(m) => Error::Protocol(format!("node {rank} panicked: {m}")),
        };
        eprintln!("vmmc-run: node {rank}: {err}");
        first.get_or_insert(err);
    }
    first.map_or(Ok(()), Err)
}
