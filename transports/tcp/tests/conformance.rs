//! Runs the VMMC conformance suite over the tcp transport, each scenario as a job of real
//! processes connected by TCP over loopback: this test binary hosts the rendezvous (as
//! `vmmc-run` does) and re-executes itself once per rank.
//!
//! The transport has no native remote read or automatic update, so the second pass the shm
//! suite runs (native paths hidden) would repeat this one.
//!
//! `cargo test -p vmmc-tcp --test conformance [NAME-FILTER]`

use std::process::{Command, ExitStatus, Stdio};
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
        .and_then(|env| vmmc_tcp::TcpTransport::connect(&env))
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
    let rv = Rendezvous::start("127.0.0.1:0", s.procs).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut kids = Vec::new();
    for rank in 0..s.procs {
        let c = Command::new(&exe)
            .env(CASE, s.name)
            .env(vars::TRANSPORT, "tcp")
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, s.procs.to_string())
            .env(vars::RENDEZVOUS, rv.addr().to_string())
            .env(vmmc_tcp::RENDEZVOUS_BY, "launcher")
            .env(vars::JOB, s.name)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        kids.push(c);
    }
    let start = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; s.procs];
    while status.iter().any(|x| x.is_none()) {
        for (r, k) in kids.iter_mut().enumerate() {
            if status[r].is_none() {
                if let Ok(Some(st)) = k.try_wait() {
                    status[r] = Some(st);
                }
            }
        }
        if start.elapsed() > JOB_LIMIT {
            for k in kids.iter_mut() {
                let _ = k.kill();
                let _ = k.wait();
            }
            return Err(format!("job hung for {JOB_LIMIT:?}: killed"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rv);
    let mut errs = Vec::new();
    for (r, st) in status.into_iter().enumerate() {
        let st = st.expect("all reaped");
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
        let name = format!("tcp::{}", s.name);
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
