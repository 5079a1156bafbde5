//! Bad input at every call of `vmmc.h`, from C: NULL pointers, negative sizes and counts,
//! unknown nodes, squids, ids, requests and handles return their documented negative codes and
//! never crash the process (tests/c/bad_input.c, run as a job of one).

mod common;

use std::process::Command;

#[test]
fn bad_input_from_c_returns_the_documented_codes() {
    common::libvmmc();
    let target = common::target_dir();
    let dir = common::scratch("bad_input");
    let exe = dir.join("bad_input");
    let mut cc = common::cc();
    cc.args(["-std=c99", "-O1", "-Wall"])
        .arg(format!("-I{}", common::include_dir().display()))
        .arg(common::crate_dir().join("tests/c/bad_input.c"))
        .arg(format!("-L{}", target.display()))
        .arg("-lvmmc")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(&exe);
    common::run_ok(&mut cc, "compiling tests/c/bad_input.c");
    // A job of one: the library bootstraps alone (no launcher variables).
    let mut run = Command::new(&exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("VMMC_") {
            run.env_remove(k);
        }
    }
    let o = run.output().expect("run bad_input");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success() && out.contains("bad_input: ok"),
        "bad_input: {}\n--- stdout\n{out}\n--- stderr\n{err}",
        o.status
    );
    let _ = std::fs::remove_dir_all(dir);
}
