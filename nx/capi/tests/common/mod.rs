//! What the C-program tests share: building libnx.so and compiling a test program against it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use vmmc_run::testing::{cargo_build, target_dir};

/// The nx-capi crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds libnx.so and the launcher in this test's profile, once per test process; returns
/// the library's path.
pub fn build() -> PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| cargo_build(&["nx-capi", "vmmc-run"]));
    let so = target_dir().join("libnx.so");
    assert!(so.exists(), "{} missing after the build", so.display());
    so
}

/// Compiles `tests/c/<file>` with `compiler` and `flags` against libnx into a scratch
/// directory named after `tag`.
pub fn compile(file: &str, compiler: &str, flags: &[&str], tag: &str) -> PathBuf {
    build();
    let dir = std::env::temp_dir().join(format!("nx-capi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let exe = dir.join(tag);
    let target = target_dir();
    let o = Command::new(compiler)
        .args(flags)
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(crate_dir().join("tests/c").join(file))
        .arg(format!("-L{}", target.display()))
        .arg("-lnx")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("no compiler `{compiler}` (scripts/setup.sh installs it): {e}"));
    assert!(
        o.status.success(),
        "{compiler} {flags:?} tests/c/{file} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}
