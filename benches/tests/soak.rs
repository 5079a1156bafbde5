//! The soak program's short run (issue 24): 500 import/unimport cycles (with dropped import
//! requests) and 500 socket connect/close cycles between two processes leave descriptors and
//! resident memory flat after the warm-up.

use std::process::Command;
use std::time::Duration;

#[test]
fn import_and_connect_cycles_stay_flat() {
    let launcher = vmmc_run::testing::launcher();
    let mut cmd = Command::new(launcher);
    cmd.args(["-n", "2", "--"])
        .arg(env!("CARGO_BIN_EXE_soak"))
        .args(["--cycles", "500", "--every", "50"]);
    let o = vmmc_run::testing::output_within(&mut cmd, Duration::from_secs(120));
    let lines: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), 4, "two phases on two ranks\n{}", o.report());
    for l in &lines {
        assert!(l.contains("\"flat\":true"), "{l}\n{}", o.report());
    }
    assert!(o.status.success(), "{}", o.report());
}
