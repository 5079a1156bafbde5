//! What the rdma tests share: the stand-in provider's path, a fabric directory per job, and
//! jobs of real processes (this test binary re-executed once per rank, the rendezvous hosted
//! here as `vmmc-run` hosts it).
#![allow(dead_code)]

pub mod cases;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::{scenario, Scenario};
use vmmc_rdma::RdmaTransport;
use vmmc_tcp::server::Rendezvous;

/// Names the conformance scenario a re-executed test binary runs as one rank.
pub const CONFORMANCE_CASE: &str = "VMMC_CONFORMANCE_CASE";
const JOB_LIMIT: Duration = Duration::from_secs(120);

/// The stand-in verbs provider, built by cargo as a dependency of these tests (next to the
/// test binary, in `deps/`).
pub fn standin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let deps = exe.parent().ok_or("no directory")?;
    for d in [deps.to_path_buf(), deps.join("..")] {
        let p = d.join("libvmmc_rdma_standin.so");
        if p.exists() {
            return Ok(p);
        }
    }
    Err(format!(
        "libvmmc_rdma_standin.so not found near {} (cargo builds it with the tests)",
        exe.display()
    ))
}

/// A fabric directory of the stand-in, removed when dropped.
pub struct Fabric(pub PathBuf);

impl Fabric {
    pub fn new(tag: &str) -> Result<Fabric, String> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!("vmmc-rdma-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Fabric(p))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How the ranks reach verbs: the stand-in (with its fabric) or a real device.
pub enum Verbs {
    Standin(PathBuf, Fabric),
    Device(String),
}

impl Verbs {
    fn apply(&self, c: &mut Command) {
        match self {
            Verbs::Standin(lib, fabric) => {
                c.env("VMMC_RDMA_LIB", lib)
                    .env("VMMC_RDMA_STANDIN_DIR", &fabric.0)
                    .env_remove("VMMC_RDMA_DEVICE");
            }
            // The verbs library is the user's choice (libibverbs.so.1 unless VMMC_RDMA_LIB).
            Verbs::Device(d) => {
                c.env("VMMC_RDMA_DEVICE", d);
            }
        }
    }
}

/// Starts `procs` ranks of this binary with `case` in `var`; returns the children.
pub fn spawn(
    var: &str,
    case: &str,
    procs: usize,
    verbs: &Verbs,
    rv: &Rendezvous,
    args: &[&str],
) -> Result<Vec<Child>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut kids = Vec::new();
    for rank in 0..procs {
        let mut c = Command::new(&exe);
        c.args(args)
            .env(var, case)
            .env(vars::TRANSPORT, "rdma")
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, procs.to_string())
            .env(vars::RENDEZVOUS, rv.addr().to_string())
            .env(vmmc_tcp::RENDEZVOUS_BY, "launcher")
            .env(vars::JOB, case)
            .stdin(Stdio::null());
        verbs.apply(&mut c);
        kids.push(c.spawn().map_err(|e| e.to_string())?);
    }
    Ok(kids)
}

/// Waits for every child (killing all after `limit`).
pub fn reap(kids: &mut [Child], limit: Duration) -> Result<Vec<ExitStatus>, String> {
    let start = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; kids.len()];
    while status.iter().any(|x| x.is_none()) {
        for (r, k) in kids.iter_mut().enumerate() {
            if status[r].is_none() {
                if let Ok(Some(st)) = k.try_wait() {
                    status[r] = Some(st);
                }
            }
        }
        if start.elapsed() > limit {
            for k in kids.iter_mut() {
                let _ = k.kill();
                let _ = k.wait();
            }
            return Err(format!("job hung for {limit:?}: killed"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(status.into_iter().map(|s| s.expect("reaped")).collect())
}

fn exit_with(r: Result<(), String>) -> ! {
    match r {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let rank = std::env::var(vars::RANK).unwrap_or_default();
            eprintln!("rank {rank}: {e}");
            std::process::exit(1);
        }
    }
}

/// One rank of a conformance scenario.
pub fn conformance_child(name: &str) -> ! {
    let Some(s) = scenario(name) else {
        eprintln!("no scenario {name}");
        std::process::exit(3);
    };
    exit_with(
        BootEnv::from_env()
            .and_then(|env| RdmaTransport::connect(&env))
            .map_err(|e| format!("bootstrap: {e}"))
            .and_then(|t| {
                let ep = vmmc::Endpoint::new(Arc::new(t)).map_err(|e| format!("endpoint: {e}"))?;
                let r = (s.run)(&ep);
                drop(ep);
                r
            }),
    )
}

/// One rank of a case of `cases.rs`.
pub fn case_child(name: &str) -> ! {
    let Some(c) = cases::CASES.iter().find(|c| c.name == name) else {
        eprintln!("no case {name}");
        std::process::exit(3);
    };
    exit_with(
        BootEnv::from_env()
            .and_then(|env| RdmaTransport::connect(&env))
            .map_err(|e| format!("bootstrap: {e}"))
            .and_then(|t| {
                let t = Arc::new(t);
                let ep = vmmc::Endpoint::new(t.clone()).map_err(|e| format!("endpoint: {e}"))?;
                let r = (c.run)(&ep, &t);
                drop(ep);
                r
            }),
    )
}

/// Checks the ranks' exits: `dies` must have been killed, the others must succeed.
fn verdict(status: Vec<ExitStatus>, dies: Option<usize>) -> Result<(), String> {
    use std::os::unix::process::ExitStatusExt;
    let mut errs = Vec::new();
    for (r, st) in status.into_iter().enumerate() {
        if Some(r) == dies {
            if st.signal() != Some(libc::SIGKILL) {
                errs.push(format!("rank {r} should have died by SIGKILL: {st}"));
            }
        } else if !st.success() {
            errs.push(format!("rank {r}: {st}"));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// Runs a conformance scenario as a job of real processes (this binary with `args`).
pub fn run_conformance_job(s: &Scenario, verbs: &Verbs, args: &[&str]) -> Result<(), String> {
    let rv = Rendezvous::start("127.0.0.1:0", s.procs).map_err(|e| e.to_string())?;
    let mut kids = spawn(CONFORMANCE_CASE, s.name, s.procs, verbs, &rv, args)?;
    let status = reap(&mut kids, JOB_LIMIT)?;
    drop(rv);
    verdict(status, s.dies)
}

/// Runs a case of `cases.rs` as a job of real processes (this binary with `args`).
pub fn run_case_job(c: &cases::Case, verbs: &Verbs, args: &[&str]) -> Result<(), String> {
    let rv = Rendezvous::start("127.0.0.1:0", c.procs).map_err(|e| e.to_string())?;
    let mut kids = spawn(cases::CASE, c.name, c.procs, verbs, &rv, args)?;
    let status = reap(&mut kids, Duration::from_secs(60))?;
    drop(rv);
    verdict(status, c.dies)
}
