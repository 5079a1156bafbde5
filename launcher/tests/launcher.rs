//! The launcher across real processes: success, failing ranks, crashes and cleanup, output
//! tagging, bad arguments, and the bootstrap under an MPI launcher.

use std::path::PathBuf;
use std::process::{Command, Output};

fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vmmc-run"))
}

fn example(name: &str) -> PathBuf {
    // Integration tests live in target/<profile>/deps; examples in target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(p.exists(), "example {name} not built at {}", p.display());
    p
}

fn run(args: &[&str]) -> Output {
    Command::new(launcher())
        .args(args)
        .output()
        .expect("run vmmc-run")
}

fn job_dirs(pid: u32) -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("vmmc-job-{pid}-")))
        .collect()
}

#[test]
fn runs_a_job_and_tags_output() {
    let ring = example("ring");
    let out = run(&["-n", "3", "--tag-output", "--", ring.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..3 {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("[{r}] rank {r}/3"))),
            "{stdout}"
        );
    }
}

#[test]
fn a_failing_rank_fails_the_job_and_others_are_told() {
    let fail = example("fail");
    let out = run(&["-n", "3", "--", fail.to_str().unwrap(), "exit", "1", "3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("saw rank 1 go").count(), 2, "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 1 exited with status 3"));
}

#[test]
fn ranks_left_waiting_on_a_failed_rank_are_ended_after_the_grace() {
    let fail = example("fail");
    // Without the grace the job would hang: the limit turns that into a failure.
    let out = vmmc_run::testing::output_within(
        Command::new(launcher())
            .args(["-n", "3", "--abort-grace", "0.5", "--"])
            .arg(&fail)
            .args(["hang", "1", "3"]),
        std::time::Duration::from_secs(60),
    );
    // The failed rank's status, not the ended ones'.
    assert_eq!(out.status.code(), Some(3), "{}", out.report());
    assert!(
        out.stderr.contains("rank 1 exited with status 3"),
        "{}",
        out.report()
    );
    assert!(
        out.stderr
            .contains("2 process(es) of the job still run: ending them"),
        "{}",
        out.report()
    );
    let bad = run(&["-n", "2", "--abort-grace", "soon", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("neither a number of seconds"));
}

#[test]
fn a_killed_rank_is_reported_and_the_job_cleaned_up() {
    let fail = example("fail");
    let child = Command::new(launcher())
        .args(["-n", "3", "--", fail.to_str().unwrap(), "kill", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("saw rank 2 go").count(), 2, "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 2 killed by signal 9"));
    assert!(job_dirs(pid).is_empty(), "job directory left behind");
}

#[test]
fn bad_arguments_get_clear_errors() {
    let out = run(&["-n", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n must be at least 1"));
    let out = run(&["-n", "1", "--transport", "carrier-pigeon", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown transport"));
    let out = run(&["-n", "1", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    let out = run(&["-n", "2", "--", "true"]);
    assert!(
        out.status.success(),
        "programs that do not use VMMC still run"
    );
}

#[test]
fn a_lone_program_is_a_job_of_one() {
    let out = Command::new(example("ring")).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rank 0/1"));
}

#[test]
fn bootstrap_reports_a_bad_environment() {
    let out = Command::new(example("ring"))
        .env("VMMC_RANK", "5")
        .env("VMMC_SIZE", "2")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 5 out of range"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (rdma is built in now: a name no build has.)
    let out = Command::new(example("ring"))
        .env("VMMC_TRANSPORT", "carrier-pigeon")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("not built in"));
}

#[test]
fn runs_under_mpirun() {
    let Ok(which) = Command::new("sh")
        .args(["-c", "command -v mpirun"])
        .output()
    else {
        panic!("sh missing");
    };
    if !which.status.success() {
        panic!("mpirun is not installed: the test command installs openmpi-bin (see README)");
    }
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "3"])
        .arg(example("ring"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("got token").count(), 3, "{stdout}");
}

#[test]
fn sigterm_to_the_launcher_reaches_the_ranks() {
    // Ranks that would run for a minute; the launcher is told to stop.
    let mut child = Command::new(launcher())
        .args(["-n", "2", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    // Wait until both ranks run (they are the launcher's children).
    let t = std::time::Instant::now();
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .unwrap_or_default();
        if kids.split_whitespace().count() == 2 {
            break;
        }
        assert!(t.elapsed().as_secs() < 20, "ranks never started");
        std::thread::yield_now();
    }
    // SAFETY: kill on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "ranks ended by the forwarded SIGTERM"
    );
    assert!(t.elapsed().as_secs() < 30, "the ranks were not stopped");
}

#[test]
fn runs_over_tcp_chosen_by_flag_or_environment_and_says_so() {
    let ring = example("ring");
    let r = ring.to_str().unwrap();
    let by_flag = Command::new(launcher())
        .args(["-n", "3", "--transport", "tcp", "--", r])
        .env("VMMC_VERBOSE", "1")
        .output()
        .unwrap();
    let by_env = Command::new(launcher())
        .args(["-n", "2", "--", r])
        .env("VMMC_TRANSPORT", "tcp")
        .env("VMMC_VERBOSE", "1")
        .output()
        .unwrap();
    for (out, n) in [(by_flag, 3), (by_env, 2)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_eq!(err.matches("runs on transport tcp").count(), n, "{err}");
        assert!(!err.contains("transport shm"), "{err}");
    }
    // No silent fall-back: an unknown transport in the environment is an error.
    let out = Command::new(launcher())
        .args(["-n", "1", "--", r])
        .env("VMMC_TRANSPORT", "carrier-pigeon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown transport"));
    // And a program started alone with it says what it lacks.
    let out = Command::new(example("ring"))
        .env("VMMC_TRANSPORT", "carrier-pigeon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not built in"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn runs_over_rdma_on_the_standin_provider_and_says_so() {
    let ring = example("ring");
    // The stand-in verbs provider, built as a dev-dependency next to this test binary.
    let exe = std::env::current_exe().unwrap();
    let standin = exe.parent().unwrap().join("libvmmc_rdma_standin.so");
    assert!(standin.exists(), "{} not built", standin.display());
    let fabric = std::env::temp_dir().join(format!("vmmc-rdma-launcher-{}", std::process::id()));
    std::fs::create_dir_all(&fabric).unwrap();
    let out = Command::new(launcher())
        .args([
            "-n",
            "3",
            "--transport",
            "rdma",
            "--",
            ring.to_str().unwrap(),
        ])
        .env("VMMC_VERBOSE", "1")
        .env("VMMC_RDMA_LIB", &standin)
        .env("VMMC_RDMA_STANDIN_DIR", &fabric)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&fabric);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("runs on transport rdma").count(), 3, "{err}");
    // Without a device (and without the stand-in) the job fails and says why.
    let out = Command::new(launcher())
        .args([
            "-n",
            "2",
            "--transport",
            "rdma",
            "--",
            ring.to_str().unwrap(),
        ])
        .env("VMMC_RDMA_LIB", "/nonexistent/libibverbs.so.1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("VMMC_RDMA_LIB"), "{err}");
}

#[test]
fn a_killed_rank_over_tcp_is_reported_to_the_others() {
    let fail = example("fail");
    let out = Command::new(launcher())
        .args(["-n", "3", "--transport", "tcp", "--"])
        .args([fail.to_str().unwrap(), "kill", "2"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("saw rank 2 go").count(), 2, "{stdout}");
}

#[test]
fn runs_under_mpirun_over_tcp() {
    let which = Command::new("sh")
        .args(["-c", "command -v mpirun"])
        .output()
        .expect("sh");
    if !which.status.success() {
        panic!("mpirun is not installed: the test command installs openmpi-bin (see README)");
    }
    // A free port for rank 0, which hosts the rendezvous when no vmmc-run does; below the
    // ephemeral range, so that no connection made meanwhile (mpirun's own) takes it.
    let base = 20_000 + (std::process::id() % 5_000) as u16;
    let addr = (0..200)
        .map(|k| format!("127.0.0.1:{}", base + k))
        .find(|a| std::net::TcpListener::bind(a.as_str()).is_ok())
        .expect("a free port");
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "3"])
        .args(["-x", "VMMC_TRANSPORT=tcp", "-x", "VMMC_VERBOSE=1"])
        .args(["-x", &format!("VMMC_RENDEZVOUS={addr}")])
        .arg(example("ring"))
        .env_remove("VMMC_RENDEZVOUS_BY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("got token").count(), 3, "{stdout}");
    assert_eq!(
        stderr.matches("runs on transport tcp").count(),
        3,
        "{stderr}"
    );
}

/// `mpirun` as root and with more ranks than cores, as this machine needs.
#[cfg(feature = "mpi")]
fn mpirun() -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe"]);
    // SAFETY: geteuid has no memory effects.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c
}

#[cfg(feature = "mpi")]
#[test]
fn vmmc_run_starts_an_mpi_job_on_the_mpi_transport() {
    let out = Command::new(launcher())
        .args(["-n", "3", "--transport", "mpi", "--"])
        .arg(example("ring"))
        .env("VMMC_VERBOSE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("got token").count(), 3, "{stdout}");
    assert_eq!(
        stderr
            .matches("runs on transport mpi (MPI one-sided")
            .count(),
        3,
        "{stderr}"
    );
}

#[cfg(feature = "mpi")]
#[test]
fn mpirun_alone_is_detected_and_said() {
    // No VMMC_TRANSPORT: a program that mpirun starts runs on the mpi transport and says
    // that it found it in the launcher's environment.
    let out = mpirun()
        .args(["-n", "2", "-x", "VMMC_VERBOSE=1"])
        .arg(example("ring"))
        .env_remove("VMMC_TRANSPORT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("got token").count(), 2, "{stdout}");
    assert_eq!(
        stderr
            .matches("runs on transport mpi (MPI one-sided; detected from the MPI launcher")
            .count(),
        2,
        "{stderr}"
    );
    // A transport that is not built in is an error in every rank, never a fall-back.
    let out = mpirun()
        .args(["-n", "2", "-x", "VMMC_TRANSPORT=infiniband"])
        .arg(example("ring"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is not built in"), "{stderr}");
}
