//! Runs `shrimp run APP ...` as a real job (vmmc-run and its ranks) and checks its report.
// Each test crate uses a part of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::{launcher, output_within, Output};

/// `shrimp run app -n nodes --transport transport --version version --size test extra...`.
pub fn shrimp(app: &str, nodes: usize, transport: &str, version: &str, extra: &[&str]) -> Output {
    shrimp_env(app, nodes, transport, version, extra, &[])
}

/// [`shrimp`] with more environment for the job.
pub fn shrimp_env(
    app: &str,
    nodes: usize,
    transport: &str,
    version: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Output {
    shrimp_within(
        app,
        nodes,
        transport,
        version,
        extra,
        env,
        Duration::from_secs(120),
    )
}

/// [`shrimp_env`] whose job is stopped, and the test failed, after `limit`.
pub fn shrimp_within(
    app: &str,
    nodes: usize,
    transport: &str,
    version: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    // `shrimp` starts the `vmmc-run` beside it: build it in this profile.
    launcher();
    let out = out_file(app, nodes, transport, version);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shrimp"));
    cmd.args([
        "run",
        app,
        "-n",
        &nodes.to_string(),
        "--transport",
        transport,
    ])
    .args(["--version", version, "--size", "test", "--out"])
    .arg(&out)
    .args(extra)
    .envs(env.iter().copied());
    let o = output_within(&mut cmd, limit);
    let _ = std::fs::remove_file(&out);
    o
}

/// The ranks' program straight under the launcher, `vmmc-run -n nodes launcher_args... --
/// shrimp rank app --version version --size test extra...`, stopped (the test failed) after
/// `limit`. Unlike `shrimp run`, whose launcher would outlive it, the launcher passes the
/// stop on to the ranks, so a hung job ends with the test.
pub fn rank_job(
    app: &str,
    nodes: usize,
    launcher_args: &[&str],
    version: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", &nodes.to_string()])
        .args(launcher_args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_shrimp"))
        .args(["rank", app, "--version", version, "--size", "test"])
        .args(extra)
        .envs(env.iter().copied());
    output_within(&mut cmd, limit)
}

/// Rank 0's report in what a job run by [`rank_job`] printed.
pub fn rank_report(o: &Output) -> serde_json::Value {
    let line = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("SHRIMP-REPORT "))
        .unwrap_or_else(|| panic!("no report\n{}", o.report()));
    serde_json::from_str(line).expect("the report is JSON")
}

fn out_file(app: &str, nodes: usize, transport: &str, version: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "shrimp-test-{}-{app}-{nodes}-{transport}-{version}.jsonl",
        std::process::id()
    ))
}

/// Runs the job and asserts that it succeeded with a report that says what ran.
pub fn ok(app: &str, nodes: usize, transport: &str, version: &str) -> serde_json::Value {
    ok_with(app, nodes, transport, version, &[])
}

/// [`ok`] with more options.
pub fn ok_with(
    app: &str,
    nodes: usize,
    transport: &str,
    version: &str,
    extra: &[&str],
) -> serde_json::Value {
    let o = shrimp(app, nodes, transport, version, extra);
    let what = format!("{app} on {nodes} x {transport}, {version}");
    assert!(o.status.success(), "{what} failed\n{}", o.report());
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{what}: no JSON report\n{}", o.report()));
    let r: serde_json::Value = serde_json::from_str(line).expect("the report is JSON");
    assert_eq!(r["app"], app, "{what}: {line}");
    assert_eq!(r["nodes"], nodes, "{what}: {line}");
    assert_eq!(r["transport"], transport, "{what}: {line}");
    assert_eq!(r["version"], version.to_uppercase(), "{what}: {line}");
    assert!(
        r["time_ns"].as_u64().is_some_and(|t| t > 0),
        "{what}: {line}"
    );
    if transport == "sim" {
        assert!(
            r["sim"]["total"]["end_ns"].as_u64().is_some(),
            "{what}: {line}"
        );
    }
    if nodes > 1 {
        assert!(r["bytes"].as_u64().is_some_and(|b| b > 0), "{what}: {line}");
    }
    r
}

/// Runs the job with `--inject-fault` and asserts that the check caught it.
pub fn caught(app: &str, nodes: usize, transport: &str) {
    let o = shrimp(app, nodes, transport, "du", &["--inject-fault"]);
    assert!(
        !o.status.success(),
        "{app}: a corrupted result passed the check\n{}",
        o.report()
    );
    assert!(
        o.stderr.contains("RESULT CHECK FAILED"),
        "{app}: no clear message\n{}",
        o.report()
    );
    assert!(
        !o.stdout.lines().any(|l| l.starts_with('{')),
        "{app}: a time was reported for a wrong result\n{}",
        o.report()
    );
}

/// [`ok`] for an SVM application: the report also carries the protocol's statistics, the
/// version's protocol (AURC for AU, HLRC for DU), and AU traffic only under AURC.
pub fn svm_ok(app: &str, nodes: usize, transport: &str, version: &str) -> serde_json::Value {
    let r = ok(app, nodes, transport, version);
    let what = format!("{app} on {nodes} x {transport}, {version}");
    let want = if version == "au" { "aurc" } else { "hlrc" };
    assert_eq!(r["problem"]["protocol"], want, "{what}: {r}");
    assert_eq!(r["svm"]["protocol"], want, "{what}: {r}");
    let t = &r["svm"]["total"];
    assert_eq!(
        r["svm"]["nodes"].as_array().map(|a| a.len()),
        Some(nodes),
        "{what}: {r}"
    );
    assert!(t["barriers"].as_u64() > Some(0), "{what}: {r}");
    if nodes > 1 {
        if version == "au" {
            assert!(t["au_stores"].as_u64() > Some(0), "{what}: {r}");
        } else {
            assert_eq!(t["au_stores"].as_u64(), Some(0), "{what}: {r}");
        }
    }
    if transport == "sim" && version == "du" {
        assert_eq!(
            r["sim"]["total"]["au_packets"].as_u64(),
            Some(0),
            "{what}: {r}"
        );
    }
    r
}

/// The node counts every application is tested on, over shm and on the simulated SHRIMP.
pub const SHM_NODES: [usize; 3] = [1, 2, 4];
/// See [`SHM_NODES`].
pub const SIM_NODES: [usize; 2] = [4, 16];

/// A run that asserts success and returns the report ([`ok`] or [`svm_ok`]).
pub type Run = fn(&str, usize, &str, &str) -> serde_json::Value;

/// Runs `app` in both versions on each of `nodes` over `transport` through `run`, and hands
/// every report to `check` with its version.
pub fn each_version(
    app: &str,
    transport: &str,
    nodes: &[usize],
    run: Run,
    mut check: impl FnMut(&str, &serde_json::Value),
) {
    for &n in nodes {
        for v in ["au", "du"] {
            let r = run(app, n, transport, v);
            check(v, &r);
        }
    }
}

/// On sim: automatic-update packets in the AU version, none in the DU version.
pub fn au_traffic_only_in_au(version: &str, r: &serde_json::Value) {
    let packets = r["sim"]["total"]["au_packets"].as_u64();
    if version == "au" {
        assert!(packets > Some(0), "{r}");
    } else {
        assert_eq!(packets, Some(0), "{r}");
    }
}
