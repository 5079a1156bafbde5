//! An option the chosen application does not use is refused, naming the option and the
//! application, before any job starts (by `shrimp run`) and by the ranks' program too; the
//! options it uses still pass. And `shrimp run --help` names the launcher's transports.

mod common;

use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::output_within;

/// `shrimp run app -n 2 ... extra` must fail, saying that `refused` does not apply to `app`.
fn refused(app: &str, version: &str, extra: &[&str], refused: &[&str]) {
    let o = common::shrimp(app, 2, "shm", version, extra);
    let what = format!("{app} --version {version} {}", extra.join(" "));
    assert!(!o.status.success(), "{what}: accepted\n{}", o.report());
    let says = o
        .stderr
        .lines()
        .find(|l| l.contains("does not use"))
        .unwrap_or_else(|| panic!("{what}: no clear error\n{}", o.report()));
    assert!(says.contains(app), "{what}: {says}");
    for r in refused {
        assert!(says.contains(r), "{what}: {r} not named: {says}");
    }
    // Refused before the job: no rank ran.
    assert!(
        !o.stderr.contains("vmmc-run"),
        "{what}: a job ran\n{}",
        o.report()
    );
    assert!(!o.stdout.contains("report appended"), "{}", o.report());
}

#[test]
fn options_an_application_does_not_use_are_refused() {
    refused(
        "barnes-nx",
        "du",
        &["--keys", "5", "--grid", "7"],
        &["--keys", "--grid"],
    );
    // Its AU version always combines: the sockets library has no switch.
    refused(
        "dfs-sockets",
        "au",
        &["--combining", "false"],
        &["--combining"],
    );
    refused(
        "radix-svm",
        "au",
        &["--combining", "false"],
        &["--combining"],
    );
    // Combining is a switch of the AU version's bindings; the DU version has none.
    refused(
        "radix-vmmc",
        "du",
        &["--combining", "false"],
        &["--combining"],
    );
    refused("ocean-nx", "du", &["--inject-death"], &["--inject-death"]);
    refused(
        "render-sockets",
        "du",
        &["--protocol", "hlrc", "--seed", "3"],
        &["--protocol", "--seed"],
    );
}

#[test]
fn the_ranks_program_refuses_them_too() {
    let mut cmd = Command::new(vmmc_run::testing::launcher());
    cmd.args(["-n", "2", "--"])
        .arg(env!("CARGO_BIN_EXE_shrimp"))
        .args(["rank", "ocean-svm", "--size", "test", "--bodies", "64"]);
    let o = output_within(&mut cmd, Duration::from_secs(60));
    assert!(!o.status.success(), "{}", o.report());
    assert!(
        o.stderr.contains("ocean-svm does not use --bodies"),
        "{}",
        o.report()
    );
}

#[test]
fn options_an_application_uses_pass() {
    let r = common::ok_with("radix-vmmc", 2, "shm", "au", &["--combining", "false"]);
    assert_eq!(r["problem"]["combining"], false, "{r}");
    common::ok_with(
        "barnes-nx",
        2,
        "shm",
        "du",
        &["--seed", "7", "--theta", "0.6"],
    );
}

#[test]
fn run_help_names_the_launchers_transports() {
    let o = Command::new(env!("CARGO_BIN_EXE_shrimp"))
        .args(["run", "--help"])
        .output()
        .expect("shrimp run --help");
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{help}");
    for t in ["shm", "sim", "tcp", "rdma", "mpi"] {
        assert!(help.contains(t), "{t} missing from\n{help}");
    }
}
