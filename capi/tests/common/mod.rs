//! Helpers shared by the integration tests: where the build's outputs are, building them, a
//! C compiler, scratch directories.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `capi/include`.
pub fn include_dir() -> PathBuf {
    crate_dir().join("include")
}

pub use vmmc_run::testing::{cargo_build, target_dir};

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
