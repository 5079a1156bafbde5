//! C programs that use only nx.h, compiled against libnx.so and run as jobs of 2-4 processes
//! under the launcher.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use vmmc_run::testing::run_job;

mod common;

/// A job's time limit.
const LIMIT: Duration = Duration::from_secs(120);

/// Compiles `tests/c/<name>.c` with `cc -lnx` (or `$CC`) into a scratch directory.
fn compile(name: &str) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    common::compile(
        &format!("{name}.c"),
        &cc,
        &["-std=gnu99", "-O1", "-Wall", "-Werror"],
        name,
    )
}

struct Job {
    ok: bool,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `exe` as a job of `n` under the launcher, with `env`.
fn run(exe: &Path, n: usize, env: &[(&str, &str)]) -> Job {
    let mut cmd = Command::new(exe);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let o = run_job(n, &cmd, LIMIT);
    Job {
        ok: o.status.success(),
        stdout: o.stdout,
        stderr: o.stderr,
        took: t0.elapsed(),
    }
}

/// Compiles and runs `name` with `n` ranks; every rank must print "`name` node R: ok".
fn run_ok(name: &str, n: usize, env: &[(&str, &str)]) {
    let exe = compile(name);
    let j = run(&exe, n, env);
    let report = format!("--- stdout\n{}\n--- stderr\n{}", j.stdout, j.stderr);
    assert!(j.ok, "{name} with {n} ranks {env:?} failed\n{report}");
    for r in 0..n {
        assert!(
            j.stdout.contains(&format!("{name} node {r}: ok")),
            "{name}: node {r} did not report success\n{report}"
        );
    }
    eprintln!("{name} x{n} {env:?}: {:?}", j.took);
}

#[test]
fn c_ring_du_au_du2() {
    // Sizes around 16 KiB straddle this threshold; the default one is tried too.
    run_ok("ring", 4, &[("NX_SMALL", "du"), ("NX_THRESHOLD", "16384")]);
    run_ok("ring", 2, &[]);
    run_ok("ring", 3, &[("NX_SMALL", "au")]);
    run_ok("ring", 2, &[("NX_SMALL", "du2"), ("NX_THRESHOLD", "1000")]);
}

#[test]
fn c_typesel_out_of_order() {
    run_ok("typesel", 3, &[("NX_SLOTS", "4")]);
}

#[test]
fn c_probes_and_info() {
    run_ok("probe", 3, &[]);
}

#[test]
fn c_sixteen_mib() {
    run_ok("big", 2, &[]);
    // Seed 003's zero-copy protocol as it is (no receiver-assisted reads).
    run_ok("big", 2, &[("NX_PULL", "0")]);
}

#[test]
fn c_exchange_with_senders_first() {
    // Before their receivers receive, blocking zero-copy sends return on their safe copies
    // at memory speed; oversubscribed too (more ranks than the machine's cores). A send
    // that crawled (seconds a message) runs the job into its limit.
    let t = ("NX_THRESHOLD", "16384");
    run_ok("exchange", 2, &[t]);
    run_ok("exchange", 4, &[t]);
}

#[test]
fn c_exit_discards_unreceived_messages() {
    // Unreceived zero-copy messages in a cycle: each node leaves without waiting for the
    // others, which are leaving too (a wait would hang the job into its limit).
    run_ok("exit_unreceived", 2, &[]);
    run_ok("exit_unreceived", 3, &[("NX_THRESHOLD", "16384")]);
    // Leaving while a peer computes, its packet buffers full of unreceived messages.
    run_ok("exit_full", 2, &[("NX_SLOTS", "4")]);
    run_ok("exit_full", 2, &[]);
}

#[test]
fn c_receives_into_overlapping_memory() {
    // The registration cache exports whole receive buffers: overlapping ones still work.
    run_ok("overlap", 2, &[("NX_THRESHOLD", "1024")]);
    run_ok("overlap", 2, &[("NX_THRESHOLD", "1024"), ("NX_PULL", "0")]);
    run_ok(
        "overlap",
        3,
        &[("NX_THRESHOLD", "1024"), ("NX_REGCACHE", "0")],
    );
}

#[test]
fn c_handler_receive_of_a_too_long_message_fails() {
    run_ok("hrecv_error", 2, &[("NX_THRESHOLD", "16384")]);
    run_ok(
        "hrecv_error",
        3,
        &[("NX_THRESHOLD", "16384"), ("NX_SMALL", "au")],
    );
}

#[test]
fn c_irecvx_of_a_too_long_message_fills_info() {
    run_ok("irecvx_long", 2, &[("NX_THRESHOLD", "16384")]);
}

#[test]
fn c_isend_irecv_msgwait_msgdone() {
    run_ok("async", 2, &[("NX_THRESHOLD", "16384")]);
    run_ok("async", 2, &[("NX_SMALL", "au")]);
}

#[test]
fn c_global_operations() {
    run_ok("gops", 3, &[]);
    run_ok("gops", 4, &[("NX_SMALL", "au")]);
}

#[test]
fn c_handler_receives() {
    run_ok("handler", 2, &[]);
}

#[test]
fn c_stress_100000_messages() {
    // 1.5% of the messages are longer than 8 KiB: zero-copy.
    run_ok("stress", 3, &[("NX_SLOTS", "8"), ("NX_THRESHOLD", "8192")]);
}

#[test]
fn c_dead_receiver_fails_senders() {
    let exe = compile("dead");
    let j = run(&exe, 3, &[]);
    let report = format!("--- stdout\n{}\n--- stderr\n{}", j.stdout, j.stderr);
    assert!(!j.ok, "a job with a killed rank must fail\n{report}");
    assert!(
        j.stderr.contains("NX error in csend") && j.stderr.contains("gone"),
        "node 0's csend did not report the dead receiver\n{report}"
    );
    assert!(
        !j.stdout.contains("sent everything"),
        "node 0 sent to a dead node without error\n{report}"
    );
    assert!(j.stdout.contains("dead node 2: ok"), "node 2\n{report}");
    assert!(!j.stderr.contains("panicked"), "a panic\n{report}");
}

#[test]
fn c_combined_handler_sends_merge_flush_and_errors() {
    run_ok("calls", 2, &[]);
    run_ok("calls", 4, &[("NX_THRESHOLD", "16384")]);
    run_ok("calls", 3, &[("NX_SMALL", "au")]);
}

#[test]
fn c_handlers_serve_requests_while_computing() {
    run_ok("hload", 2, &[]);
    run_ok("hload", 4, &[]);
}

#[test]
fn c_compatibility_and_what_linux_cannot_do() {
    let exe = compile("compat");
    for n in [2, 3] {
        let j = run(&exe, n, &[]);
        let report = format!("--- stdout\n{}\n--- stderr\n{}", j.stdout, j.stderr);
        assert!(j.ok, "compat with {n} ranks failed\n{report}");
        for r in 0..n {
            assert!(
                j.stdout.contains(&format!("compat node {r}: ok")),
                "node {r}\n{report}"
            );
        }
        // nx_perror says why, in NX's form "s: text".
        for line in [
            "nx_initve: this process is a node of a job started by the launcher",
            "nx_waitall: nx_waitall: no process was created by nx_nfork or nx_load",
            "nx_mkpart: partition management has no meaning on Linux",
            "killproc: killing another node's process needs the launcher's process table",
        ] {
            assert!(
                j.stderr.contains(line),
                "nx_perror did not print {line:?}\n{report}"
            );
        }
    }
}

#[test]
fn c_nx_initve_nfork_load_waitall_without_the_launcher() {
    let exe = compile("spawn");
    let mut cmd = Command::new(&exe);
    cmd.args(["-sz", "3", "extra"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VMMC_") {
            cmd.env_remove(k);
        }
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("spawn runs");
    // A deadline, not a synchronisation: the program's own waits end the run.
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("spawn did not finish in {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    let report = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(o.status.success(), "spawn failed\n{report}");
    for r in 0..3 {
        assert!(
            stdout.contains(&format!("spawn nfork node {r} of 3: ok")),
            "nfork {r}\n{report}"
        );
    }
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("spawn load node {r} of 2: ok")),
            "load {r}\n{report}"
        );
    }
    assert!(stdout.contains("spawn parent: ok"), "{report}");
    eprintln!("spawn: {:?}", t0.elapsed());
}

#[test]
fn c_bad_input_returns_eq_codes() {
    run_ok("bad_input", 2, &[]);
}
