//! Helpers for tests that compile generated code: a throw-away Cargo project that depends on
//! the workspace's `rpc` crate by path, built in a target directory kept between runs so that
//! only the generated code is rebuilt.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (`stubgen/..`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("stubgen lives in the workspace")
        .to_path_buf()
}

/// A scratch Cargo project under the test target directory.
pub struct Project {
    /// The project directory.
    pub dir: PathBuf,
}

impl Project {
    /// Creates (or reuses) project `name` with the given `[dependencies]` lines besides `rpc`
    /// and `[[bin]]` sections.
    pub fn new(name: &str, extra_manifest: &str) -> Project {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let root = workspace_root();
        let manifest = format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\nrpc = {{ path = \"{}\" }}\n\n{extra_manifest}\n\n[workspace]\n",
            root.join("rpc").display()
        );
        write_if_changed(&dir.join("Cargo.toml"), &manifest);
        // The workspace's lock file pins the same versions, and lets cargo work offline.
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
        write_if_changed(&dir.join("Cargo.lock"), &lock);
        Project { dir }
    }

    /// Writes `src/<rel>` (only when its content changes, to keep builds incremental).
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.dir.join("src").join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        write_if_changed(&p, content);
    }

    /// Runs `cargo <args>` in the project; panics with the compiler's output on failure.
    pub fn cargo(&self, args: &[&str]) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(args)
            .arg("--offline")
            .arg("--quiet")
            .current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", self.target_dir())
            .env_remove("RUSTFLAGS")
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "cargo {args:?} failed in {}:\n{}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The target directory, shared by the scratch projects so that `rpc` and its
    /// dependencies are built once (cargo's lock serialises concurrent builds).
    pub fn target_dir(&self) -> PathBuf {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("stubgen-scratch-target")
    }

    /// Path of a built binary (debug profile).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.target_dir().join("debug").join(name)
    }
}

fn write_if_changed(path: &Path, content: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(content) {
        std::fs::write(path, content).unwrap();
    }
}

fn rpcbind_answers() -> bool {
    Command::new("rpcinfo")
        .args(["-T", "tcp", "127.0.0.1", "100000", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Makes sure rpcbind runs (starting `rpcbind -f` in the background if needed); false, with
/// a message, if it cannot be started.
pub fn ensure_rpcbind() -> bool {
    if rpcbind_answers() {
        return true;
    }
    if let Err(e) = Command::new("rpcbind")
        .arg("-f")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        eprintln!("SKIPPED: rpcbind is not running and `rpcbind -f` failed to start: {e}");
        return false;
    }
    // Poll until it answers: there is no event to wait on for another process's socket.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if rpcbind_answers() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("SKIPPED: started `rpcbind -f` but it does not answer on 127.0.0.1:111");
    false
}
