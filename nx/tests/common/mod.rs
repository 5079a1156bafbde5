//! Running a test's body as the ranks of a job: the test re-runs its own executable under the
//! launcher (`vmmc-run -n N -- <this test binary> --exact <test>`), and the copies, which see
//! `NX_TEST_RANK_OF`, run the body.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A job's time limit.
pub const LIMIT: Duration = Duration::from_secs(90);

/// `target/<profile>`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_path_buf()
}

/// Builds packages in this test's profile (a no-op when fresh).
pub fn cargo_build(packages: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("build").current_dir(env!("CARGO_MANIFEST_DIR"));
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

/// The launcher, built if needed.
pub fn launcher() -> PathBuf {
    cargo_build(&["vmmc-run"]);
    let l = target_dir().join("vmmc-run");
    assert!(l.exists(), "{} missing after the build", l.display());
    l
}

/// What a finished job printed.
pub struct JobOutput {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl JobOutput {
    pub fn report(&self) -> String {
        format!(
            "status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` under the launcher with `n` ranks; kills it after [`LIMIT`].
pub fn run_job(n: usize, cmd: &mut Command) -> JobOutput {
    let launcher = launcher();
    let mut full = Command::new(&launcher);
    full.args(["-n", &n.to_string(), "--"])
        .arg(cmd.get_program());
    full.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => full.env(k, v),
            None => full.env_remove(k),
        };
    }
    let mut child = full
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", launcher.display()));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for vmmc-run") {
            break Some(st);
        }
        if t0.elapsed() > LIMIT {
            // SIGTERM: the launcher passes it on to the ranks (SIGKILL would orphan them).
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
    let status = status.unwrap_or_else(|| {
        panic!("the job did not finish in {LIMIT:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    });
    JobOutput {
        status,
        stdout,
        stderr,
    }
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
