//! The chaos program's short run (issue 24): jobs of 3-4 processes running the VMMC ring (by
//! deliberate or automatic update), the NX ring or NX global operations, VRPC calls, SHRIMP
//! RPC calls, the socket ring or socket streams, one rank killed with SIGKILL at a moment drawn from each seed; the survivors must
//! learn of it within 5 s, the launcher must exit non-zero naming the dead rank, and nothing
//! may be left behind, over shm and over tcp. A failure prints `replay: chaos --seed S`.

use std::process::Command;
use std::time::Duration;

#[test]
fn killed_ranks_are_reported_and_nothing_hangs_or_leaks() {
    vmmc_run::testing::launcher(); // beside the chaos binary, in the test's profile
    let o = vmmc_run::testing::output_within(
        Command::new(env!("CARGO_BIN_EXE_chaos")).args(["--seeds", "40", "--first", "1000"]),
        Duration::from_secs(300),
    );
    let (out, err) = (&o.stdout, &o.stderr);
    let summary = out
        .lines()
        .find(|l| l.starts_with("chaos: "))
        .unwrap_or_else(|| panic!("no summary\n--- stdout\n{out}\n--- stderr\n{err}"));
    assert!(
        o.status.success() && summary.contains("40 kills, 0 hangs, 0 leaks, 0 failed"),
        "{summary}\n--- stdout\n{out}\n--- stderr\n{err}"
    );
}

#[test]
fn killed_ranks_over_tcp_are_reported_too() {
    vmmc_run::testing::launcher();
    let o = vmmc_run::testing::output_within(
        Command::new(env!("CARGO_BIN_EXE_chaos")).args([
            "--seeds",
            "16",
            "--first",
            "2000",
            "--transport",
            "tcp",
        ]),
        Duration::from_secs(300),
    );
    let (out, err) = (&o.stdout, &o.stderr);
    let summary = out
        .lines()
        .find(|l| l.starts_with("chaos: "))
        .unwrap_or_else(|| panic!("no summary\n--- stdout\n{out}\n--- stderr\n{err}"));
    assert!(
        o.status.success() && summary.contains("16 kills, 0 hangs, 0 leaks, 0 failed"),
        "{summary}\n--- stdout\n{out}\n--- stderr\n{err}"
    );
}
