//! Runs the VMMC conformance suite over the shm transport, each scenario as a job of real
//! processes: this test binary starts a rendezvous and re-executes itself once per rank.
//!
//! `cargo test -p vmmc-shm --test conformance [NAME-FILTER]`

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::{scenario, scenarios, Scenario};
use vmmc_shm::server::Rendezvous;

const CASE: &str = "VMMC_CONFORMANCE_CASE";
/// Set for the second pass: the transport with its native paths hidden.
const DEGRADED: &str = "VMMC_CONFORMANCE_DEGRADED";
const JOB_LIMIT: Duration = Duration::from_secs(180);

fn child(name: &str) -> ! {
    let Some(s) = scenario(name) else {
        eprintln!("no scenario {name}");
        std::process::exit(3);
    };
    let r = BootEnv::from_env()
        .and_then(|env| vmmc_shm::ShmTransport::connect(&env))
        .map_err(|e| format!("bootstrap: {e}"))
        .and_then(|t| {
            let ep = if std::env::var_os(DEGRADED).is_some() {
                vmmc::Endpoint::new(std::sync::Arc::new(vmmc::conformance::Degraded(t)))
            } else {
                vmmc::Endpoint::new(std::sync::Arc::new(t))
            }
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

fn run_job(s: &Scenario, degraded: bool) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!(
        "vmmc-conf-{}-{}-{}",
        std::process::id(),
        s.name,
        degraded as u8
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let sock = dir.join("rv.sock");
    let rv = Rendezvous::start(&sock, s.procs).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut kids = Vec::new();
    for rank in 0..s.procs {
        let mut cmd = Command::new(&exe);
        if degraded {
            cmd.env(DEGRADED, "1");
        }
        let c = cmd
            .env(CASE, s.name)
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, s.procs.to_string())
            .env(vars::RENDEZVOUS, &sock)
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
                    if !st.success() {
                        rv.mark_dead(r);
                    }
                    status[r] = Some(st);
                }
            }
        }
        if start.elapsed() > JOB_LIMIT {
            for k in kids.iter_mut() {
                let _ = k.kill();
                let _ = k.wait();
            }
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("job hung for {JOB_LIMIT:?}: killed"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rv);
    let _ = std::fs::remove_dir_all(&dir);
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
    for degraded in [false, true] {
        let mode = if degraded {
            "shm_without_native_paths"
        } else {
            "shm"
        };
        for s in scenarios() {
            let name = format!("{mode}::{}", s.name);
            if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
                continue;
            }
            let t = Instant::now();
            match run_job(s, degraded) {
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
    }
    println!();
    println!("conformance: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
