//! Every library waits by the core's one policy (issue 19), shown by counting: the programs
//! run as jobs of real processes with `VMMC_WAIT_STATS=1`, so that each process prints its
//! `vmmc::wait` counts when it exits (`vmmc-wait: rings=N SITE=waits/yields/sleeps ...`).
//! Under `VMMC_WAIT=block` a library's waits must sleep, and since the job still completes,
//! the writers' transfers woke them; with more processes than the policy believes it has
//! cores they must yield; and an idle job's waiters must go to sleep on their own.

use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::run_job;

/// Per process: (waits, yields, sleeps) of `site`, from the job's standard error.
fn counts(stderr: &str, site: &str) -> Vec<(u64, u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("vmmc-wait: "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|part| {
                    let (name, n) = part.split_once('=')?;
                    if name != site {
                        return None;
                    }
                    let v: Vec<u64> = n.split('/').filter_map(|x| x.parse().ok()).collect();
                    (v.len() == 3).then(|| (v[0], v[1], v[2]))
                })
                .unwrap_or((0, 0, 0))
        })
        .collect()
}

/// Runs `exe args` as `ranks` ranks with `env` and the counts printed; returns stderr.
fn job(ranks: usize, exe: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = Command::new(exe);
    c.args(args).env("VMMC_WAIT_STATS", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run_job(ranks, &c, Duration::from_secs(120));
    let (out, err) = (o.stdout.clone(), o.stderr.clone());
    assert!(
        o.status.success(),
        "{exe} {args:?} failed\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    assert_eq!(
        err.matches("vmmc-wait: ").count(),
        ranks,
        "every process prints its counts\n{err}"
    );
    err
}

#[test]
fn nx_waits_sleep_under_block_and_the_senders_wake_them() {
    let err = job(
        3,
        env!("CARGO_BIN_EXE_nx-pingpong"),
        &["--ring", "0.05", "--reps", "2"],
        &[("VMMC_WAIT", "block")],
    );
    let c = counts(&err, "nx");
    assert!(c.iter().all(|&(w, _, s)| w > 0 && s > 0), "{c:?}\n{err}");
}

#[test]
fn nx_waits_yield_when_processes_outnumber_cores() {
    // The policy believes 64 processes share this host's cores.
    let err = job(
        3,
        env!("CARGO_BIN_EXE_nx-pingpong"),
        &["--ring", "0.05", "--reps", "2"],
        &[("VMMC_LOCAL_PROCS", "64")],
    );
    let c = counts(&err, "nx");
    assert!(c.iter().all(|&(_, y, _)| y > 0), "{c:?}\n{err}");
}

#[test]
fn an_idle_job_sleeps_on_its_own() {
    // Under the default policy, ranks blocked in a receive for 0.3 s go to sleep.
    let err = job(
        3,
        env!("CARGO_BIN_EXE_nx-pingpong"),
        &["--idle", "0.3"],
        &[],
    );
    let c = counts(&err, "nx");
    assert!(
        c.iter().filter(|&&(_, _, s)| s > 0).count() >= 2,
        "the two waiting ranks slept: {c:?}\n{err}"
    );
}

#[test]
fn vrpc_clients_and_server_sleep_under_block() {
    let err = job(
        3,
        env!("CARGO_BIN_EXE_rpc-peer"),
        &["vrpc", "--calls", "200", "--sizes", "0,1024"],
        &[("VMMC_WAIT", "block")],
    );
    let clients = counts(&err, "rpc.vrpc");
    let server = counts(&err, "rpc.vrpc.server");
    assert!(
        clients.iter().filter(|&&(_, _, s)| s > 0).count() >= 2,
        "both clients slept waiting for replies: {clients:?}\n{err}"
    );
    assert!(
        server.iter().any(|&(_, _, s)| s > 0),
        "the server slept waiting for requests: {server:?}\n{err}"
    );
}

#[test]
fn shrimp_rpc_waits_sleep_under_block() {
    let err = job(
        2,
        env!("CARGO_BIN_EXE_srpc-peer"),
        &["srpc-du", "--calls", "100", "--max-size", "1024"],
        &[("VMMC_WAIT", "block")],
    );
    let c = counts(&err, "srpc");
    assert!(c.iter().all(|&(_, _, s)| s > 0), "{c:?}\n{err}");
}

#[test]
fn svm_waits_sleep_under_block() {
    let err = job(
        2,
        env!("CARGO_BIN_EXE_svm-peer"),
        &["--batch", "20", "--batches", "2"],
        &[("VMMC_WAIT", "block")],
    );
    let c = counts(&err, "svm");
    assert!(c.iter().all(|&(_, _, s)| s > 0), "{c:?}\n{err}");
}
