//! The crate's examples (a program of each kind the applications are: Barnes, Ocean,
//! Radix) run and check themselves under every protocol, over shm and on the simulator.

use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::{launcher, output_within, target_dir};

fn build_examples() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "svm", "--examples"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if target_dir().file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().expect("cargo").success(), "build the examples");
}

/// Runs `example` with `args` on `nodes` nodes of `transport` (and the environment `env`).
fn launch(
    example: &str,
    args: &[&str],
    nodes: usize,
    transport: &str,
    env: &[(&str, &str)],
) -> vmmc_run::testing::Output {
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", &nodes.to_string(), "--transport", transport, "--"])
        .arg(target_dir().join("examples").join(example))
        .args(args)
        .env_remove("SVM_SPACE")
        .envs(env.iter().copied());
    output_within(&mut cmd, Duration::from_secs(180))
}

fn run(example: &str, args: &[&str], nodes: usize, transport: &str, protocol: &str) {
    let o = launch(
        example,
        args,
        nodes,
        transport,
        &[("SVM_PROTOCOL", protocol)],
    );
    assert!(
        o.status.success(),
        "{example} on {nodes} {transport} nodes under {protocol}\n{}",
        o.report()
    );
    assert!(o.stdout.contains(protocol), "{}", o.report());
}

#[test]
fn examples_check_themselves_everywhere() {
    build_examples();
    for protocol in ["hlrc", "hlrc-au", "aurc"] {
        for (nodes, transport) in [(2, "shm"), (4, "sim")] {
            run("radix", &["8192"], nodes, transport, protocol);
            run("ocean", &["62", "4"], nodes, transport, protocol);
            run("barnes", &["300", "1"], nodes, transport, protocol);
        }
    }
}

/// `--help` prints the usage and succeeds; an argument that is not a number, or not a
/// sensible one (a grid or a problem of size 0), or one too many, is a usage error (exit
/// status 2) before the job starts, not a run of the default problem or a panic.
#[test]
fn examples_refuse_bad_arguments() {
    build_examples();
    for example in ["radix", "ocean", "barnes"] {
        let o = launch(example, &["--help"], 2, "shm", &[]);
        assert!(o.status.success(), "{}", o.report());
        assert!(
            o.stdout.contains(&format!("usage: {example}")),
            "{}",
            o.report()
        );
    }
    for (example, args) in [
        ("radix", &["1e6"][..]),
        ("radix", &["0"]),
        ("radix", &["-5"]),
        ("ocean", &["100", "x"]),
        ("ocean", &["0"]),
        ("ocean", &["8", "0"]),
        ("barnes", &["0"]),
        ("barnes", &["10", "2", "3"]),
    ] {
        let mut cmd = Command::new(target_dir().join("examples").join(example));
        let o = output_within(cmd.args(args), Duration::from_secs(60));
        assert_eq!(
            o.status.code(),
            Some(2),
            "{example} {args:?}: {}",
            o.report()
        );
        assert!(
            o.stderr.contains(&format!("usage: {example}")),
            "{example} {args:?}: {}",
            o.report()
        );
        // And under the launcher, which reports it.
        let o = launch(example, args, 2, "shm", &[]);
        assert!(!o.status.success(), "{example} {args:?}: {}", o.report());
    }
    // More nodes than the grid has rows.
    run("ocean", &["2", "3"], 4, "sim", "hlrc");
}

/// The examples size their space for the problem, and `SVM_SPACE` wins over that: radix
/// with 2.2 million keys (17.6 MB of keys) runs without it, and with `SVM_SPACE=1M` fails
/// saying to raise it.
#[test]
fn examples_size_their_space_and_obey_svm_space() {
    build_examples();
    run("radix", &["2200000"], 2, "shm", "hlrc");
    let o = launch("radix", &["2200000"], 2, "shm", &[("SVM_SPACE", "1M")]);
    assert!(!o.status.success(), "{}", o.report());
    assert!(
        o.stderr.contains("1048576 left (raise SVM_SPACE)"),
        "{}",
        o.report()
    );
}
