//! Runs the VMMC conformance suite over the rdma transport, each scenario as a job of real
//! processes whose verbs library is the stand-in provider (`libvmmc_rdma_standin.so`): the
//! transport's code runs unchanged, the data moves between the processes' registered memory
//! as the stand-in's HCA moves it. With `VMMC_RDMA_DEVICE=<name>` set, the suite runs on that
//! real device through the system's libibverbs instead.
//!
//! `cargo test -p vmmc-rdma --test conformance [NAME-FILTER]`

mod common;

use common::{reap, spawn, standin, Fabric, Verbs};
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::{scenario, scenarios, Scenario};
use vmmc_tcp::server::Rendezvous;

const CASE: &str = "VMMC_CONFORMANCE_CASE";
const JOB_LIMIT: Duration = Duration::from_secs(120);

fn child(name: &str) -> ! {
    let Some(s) = scenario(name) else {
        eprintln!("no scenario {name}");
        std::process::exit(3);
    };
    let r = BootEnv::from_env()
        .and_then(|env| vmmc_rdma::RdmaTransport::connect(&env))
        .map_err(|e| format!("bootstrap: {e}"))
        .and_then(|t| {
            let ep = vmmc::Endpoint::new(std::sync::Arc::new(t))
                .map_err(|e| format!("endpoint: {e}"))?;
            let r = (s.run)(&ep);
            drop(ep);
            r
        });
    match r {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let rank = std::env::var(vars::RANK).unwrap_or_default();
            eprintln!("rank {rank}: {e}");
            std::process::exit(1);
        }
    }
}

fn run_job(s: &Scenario) -> Result<(), String> {
    let verbs = match std::env::var("VMMC_RDMA_DEVICE") {
        Ok(d) if !d.is_empty() => Verbs::Device(d),
        _ => Verbs::Standin(standin()?, Fabric::new(s.name)?),
    };
    let rv = Rendezvous::start("127.0.0.1:0", s.procs).map_err(|e| e.to_string())?;
    let mut kids = spawn(CASE, s.name, s.procs, &verbs, &rv)?;
    let status = reap(&mut kids, JOB_LIMIT)?;
    drop(rv);
    let mut errs = Vec::new();
    for (r, st) in status.into_iter().enumerate() {
        use std::os::unix::process::ExitStatusExt;
        if Some(r) == s.dies {
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

fn main() {
    if let Ok(name) = std::env::var(CASE) {
        child(&name);
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for s in scenarios() {
        let name = format!("rdma::{}", s.name);
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        match run_job(s) {
            Ok(()) => {
                passed += 1;
                println!(
                    "test conformance::{name} ({} processes) ... ok ({:.2?})",
                    s.procs,
                    t.elapsed()
                );
            }
            Err(e) => {
                failed += 1;
                println!(
                    "test conformance::{name} ({} processes) ... FAILED: {e}",
                    s.procs
                );
            }
        }
    }
    println!();
    println!("conformance: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
