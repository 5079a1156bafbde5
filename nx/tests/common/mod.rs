//! Running a test's body as the ranks of a job: the test re-runs its own executable under the
//! launcher (`vmmc-run -n N -- <this test binary> --exact <test>`), and the copies, which see
//! `NX_TEST_RANK_OF`, run the body.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

/// A job's time limit.
pub const LIMIT: Duration = Duration::from_secs(90);

pub use vmmc_run::testing::Output as JobOutput;

/// Runs `cmd` under the launcher with `n` ranks; kills it after [`LIMIT`].
pub fn run_job(n: usize, cmd: &mut Command) -> JobOutput {
    vmmc_run::testing::run_job(n, cmd, LIMIT)
}

/// The variable that tells a copy of the test binary which test body to run as a rank.
pub const RANK_OF: &str = "NX_TEST_RANK_OF";

/// In a test: when run as a rank of a job, runs `body` and returns `true`; otherwise runs
/// the job (`n` ranks of this same test, with `env`), asserts that every rank reported
/// success, and returns `false`.
pub fn as_job(name: &str, n: usize, env: &[(&str, &str)], body: impl FnOnce()) -> bool {
    if std::env::var(RANK_OF).as_deref() == Ok(name) {
        body();
        println!("rank-ok");
        return true;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(RANK_OF, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_job(n, &mut cmd);
    assert!(o.status.success(), "job {name} failed\n{}", o.report());
    assert_eq!(
        o.stdout.matches("rank-ok").count(),
        n,
        "not every rank of {name} reported success\n{}",
        o.report()
    );
    false
}
