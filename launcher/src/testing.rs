//! Test support: a test of a cargo test binary that runs its own body as the ranks of a
//! `vmmc-run` job, across real processes.
//!
//! ```no_run
//! use vmmc_run::testing::Job;
//!
//! // #[test]
//! fn ping() {
//!     Job::new("ping", 2).run_ok(|| {
//!         let ep = vmmc_run::init().expect("join the job");
//!         // ... this runs in each rank's process
//!     });
//! }
//! ```
//!
//! The test binary starts `vmmc-run -n N -- <itself> --exact NAME`; in the ranks, an
//! environment variable tells the same test to run the body, print `rank-ok` and exit. A job
//! that outlives its time limit is stopped with SIGTERM (which the launcher passes on to its
//! ranks) and the test fails with everything the job printed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Tells a copy of the test binary which test's body to run as a rank.
const RANK_OF: &str = "VMMC_TEST_RANK_OF";

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_path_buf()
}

/// Builds `packages` with cargo in the running test's profile (a no-op when they are fresh),
/// so that the binaries and libraries a test runs match the sources under test.
pub fn cargo_build(packages: &[&str]) {
    let mut args = Vec::new();
    for p in packages {
        args.extend(["-p", p]);
    }
    // The launcher with the transports this test was built with.
    if cfg!(feature = "mpi") && packages.contains(&"vmmc-run") {
        args.extend(["--features", "vmmc-run/mpi"]);
    }
    cargo_build_args(&args);
}

/// Builds example `name` of `package` in the running test's profile and returns its path
/// (a test run on its own does not build examples).
pub fn example(package: &str, name: &str) -> PathBuf {
    cargo_build_args(&["-p", package, "--example", name]);
    let p = target_dir().join("examples").join(name);
    assert!(p.exists(), "{} missing after the build", p.display());
    p
}

/// Deterministic bytes, a function of `seed` and the position: contents whose lost,
/// repeated or misplaced pieces show.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `cargo build ARGS` in the running test's profile.
fn cargo_build_args(args: &[&str]) {
    let dir = target_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args);
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
    assert!(st.success(), "cargo build {args:?} failed");
}

/// The `vmmc-run` launcher of the test's profile, built once per test process if needed.
pub fn launcher() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            cargo_build(&["vmmc-run"]);
            let l = target_dir().join("vmmc-run");
            assert!(l.exists(), "{} missing after the build", l.display());
            l
        })
        .clone()
}

/// What a finished job printed.
#[derive(Debug)]
pub struct Output {
    /// The launcher's exit status.
    pub status: ExitStatus,
    /// Everything the ranks printed on stdout.
    pub stdout: String,
    /// Everything the launcher and the ranks printed on stderr.
    pub stderr: String,
}

impl Output {
    /// The status and both streams, for an assertion's message.
    pub fn report(&self) -> String {
        format!(
            "status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// How many ranks printed `rank-ok`.
    pub fn ranks_ok(&self) -> usize {
        self.stdout.matches("rank-ok").count()
    }
}

/// Runs `cmd` with its output captured; stops it with SIGTERM after `limit` and panics with
/// what it printed.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out_t = drain(Box::new(child.stdout.take().expect("stdout")));
    let err_t = drain(Box::new(child.stderr.take().expect("stderr")));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the job") {
            break Some(st);
        }
        if t0.elapsed() > limit {
            // SIGTERM: the launcher passes it on to the ranks (SIGKILL would orphan them).
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "{:?} did not finish in {limit:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            cmd.get_program()
        ),
    }
}

/// Runs `cmd` (its program, arguments and environment) as the `ranks` ranks of a job under
/// the launcher, within `limit` (see [`output_within`]).
pub fn run_job(ranks: usize, cmd: &Command, limit: Duration) -> Output {
    let mut full = Command::new(launcher());
    full.args(["-n", &ranks.to_string(), "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => full.env(k, v),
            None => full.env_remove(k),
        };
    }
    output_within(&mut full, limit)
}

/// A test's body run as the ranks of a job over shm.
pub struct Job {
    name: String,
    ranks: usize,
    env: Vec<(String, String)>,
    limit: Duration,
}

impl Job {
    /// The test named `name` (its path in the test binary, for `--exact`) as `ranks` ranks.
    pub fn new(name: &str, ranks: usize) -> Job {
        Job {
            name: name.to_string(),
            ranks,
            env: Vec::new(),
            limit: Duration::from_secs(120),
        }
    }

    /// Sets an environment variable in the ranks.
    pub fn env(mut self, key: &str, value: &str) -> Job {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The job's time limit (default 120 s).
    pub fn limit(mut self, limit: Duration) -> Job {
        self.limit = limit;
        self
    }

    /// In the test: starts the job and returns what it printed. In a rank: runs `body`,
    /// prints `rank-ok` and exits (a panic in `body` fails the rank).
    pub fn run(self, body: impl FnOnce()) -> Output {
        if std::env::var(RANK_OF).as_deref() == Ok(self.name.as_str()) {
            body();
            println!("rank-ok");
            std::process::exit(0);
        }
        let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
        cmd.args(["--exact", &self.name, "--nocapture", "--test-threads=1"])
            .env(RANK_OF, &self.name);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        run_job(self.ranks, &cmd, self.limit)
    }

    /// [`Job::run`], asserting that the job succeeded and every rank printed `rank-ok`.
    pub fn run_ok(self, body: impl FnOnce()) -> Output {
        let (name, ranks) = (self.name.clone(), self.ranks);
        let o = self.run(body);
        assert!(o.status.success(), "job {name} failed\n{}", o.report());
        assert_eq!(
            o.ranks_ok(),
            ranks,
            "not every rank of {name} reported success\n{}",
            o.report()
        );
        o
    }
}
