//! Helpers shared by the integration tests: where the build's outputs are, building them, a
//! C compiler, scratch directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `capi/include`.
pub fn include_dir() -> PathBuf {
    crate_dir().join("include")
}

/// `target/<profile>`: the test executable is `target/<profile>/deps/<name>-<hash>`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_path_buf()
}

/// Builds packages with cargo in the profile of this test (a no-op when they are fresh), so
/// that `libvmmc.so` and `vmmc-run` match the sources under test.
pub fn cargo_build(packages: &[&str]) {
    let cargo = std::env::var("CARGO")
        .ok()
        .or(option_env!("CARGO").map(String::from))
        .unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("build").current_dir(crate_dir());
    for p in packages {
        cmd.args(["-p", p]);
    }
    let dir = target_dir();
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
        None => panic!("cannot tell the profile from {}", dir.display()),
    }
    let st = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    assert!(st.success(), "cargo build {packages:?} failed");
}

/// `libvmmc.so`, built if needed.
pub fn libvmmc() -> PathBuf {
    cargo_build(&["vmmc-capi"]);
    let so = target_dir().join("libvmmc.so");
    assert!(so.exists(), "{} missing after the build", so.display());
    so
}

/// The C compiler: `$CC` or `cc`. Fails (never skips) when there is none.
pub fn cc() -> Command {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Command::new(cc),
        _ => panic!("no C compiler: `{cc}` is missing or broken (install one, or set CC)"),
    }
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmmc-capi-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch directory");
    d
}

/// Runs a command and panics with its output when it fails.
pub fn run_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}
