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

fn run(example: &str, args: &[&str], nodes: usize, transport: &str, protocol: &str) {
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", &nodes.to_string(), "--transport", transport, "--"])
        .arg(target_dir().join("examples").join(example))
        .args(args)
        .env("SVM_PROTOCOL", protocol);
    let o = output_within(&mut cmd, Duration::from_secs(180));
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
