//! A C program against `libvmmc.so` and `vmmc.h`, run as a job of 2 by the launcher.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The job's time limit: the program gives up on its own after 10 s of waiting.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn notify_pingpong_in_c_as_two_ranks() {
    let lib = common::libvmmc();
    common::cargo_build(&["vmmc-run"]);
    let target = common::target_dir();
    let launcher = target.join("vmmc-run");
    assert!(
        launcher.exists(),
        "{} missing after the build",
        launcher.display()
    );
    assert_eq!(lib.parent(), Some(target.as_path()));

    let dir = common::scratch("notify_pingpong");
    let exe = dir.join("notify_pingpong");
    let mut cc = common::cc();
    cc.args(["-std=c99", "-O2", "-Wall"])
        .arg(format!("-I{}", common::include_dir().display()))
        .arg(common::crate_dir().join("tests/c/notify_pingpong.c"))
        .arg(format!("-L{}", target.display()))
        .arg("-lvmmc")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(&exe);
    common::run_ok(&mut cc, "compiling tests/c/notify_pingpong.c");

    let mut child = Command::new(&launcher)
        .args(["-n", "2", "--"])
        .arg(&exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", launcher.display()));
    // Drain the pipes while waiting, so a chatty job cannot block on them.
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
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
    let report = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let status = status.unwrap_or_else(|| panic!("the job did not finish in {LIMIT:?}\n{report}"));
    assert!(
        status.success(),
        "vmmc-run -n 2 -- notify_pingpong: {status}\n{report}"
    );
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("notify_pingpong rank {r}: ok")),
            "rank {r} did not report success\n{report}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `vmmc-run ARGS -- PROGRAM` within the time limit; stdout, stderr, success.
fn run_job(args: &[&str], exe: &std::path::Path) -> (String, String, bool) {
    let launcher = common::target_dir().join("vmmc-run");
    let mut child = Command::new(&launcher)
        .args(args)
        .arg("--")
        .arg(exe)
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_HOSTS")
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
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (o, e) = (out_t.join().unwrap(), err_t.join().unwrap());
    let ok = status.is_some_and(|s| s.success());
    (o, e, ok)
}

#[test]
fn spawn_and_session_hosts_in_c() {
    common::libvmmc();
    common::cargo_build(&["vmmc-run"]);
    let target = common::target_dir();
    let dir = common::scratch("spawn");
    let exe = dir.join("spawn");
    let mut cc = common::cc();
    cc.args(["-std=c99", "-O2", "-Wall"])
        .arg(format!("-I{}", common::include_dir().display()))
        .arg(common::crate_dir().join("tests/c/spawn.c"))
        .arg(format!("-L{}", target.display()))
        .arg("-lvmmc")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(&exe);
    common::run_ok(&mut cc, "compiling tests/c/spawn.c");

    let here =
        String::from_utf8_lossy(&Command::new("hostname").output().expect("hostname").stdout)
            .trim()
            .to_string();
    let (out, err, ok) = run_job(&["-n", "1", "--transport", "tcp"], &exe);
    let report = format!("--- stdout\n{out}\n--- stderr\n{err}");
    assert!(ok, "spawn over tcp\n{report}");
    assert!(
        out.contains(&format!("spawn session hosts: {here}\n")),
        "{report}"
    );
    assert!(
        out.contains("spawn child ") && out.contains(": ok"),
        "{report}"
    );
    assert!(out.contains("spawn parent: spawned "), "{report}");

    let (out, err, ok) = run_job(
        &["-n", "1", "--transport", "shm", "--spawn-slots", "2"],
        &exe,
    );
    let report = format!("--- stdout\n{out}\n--- stderr\n{err}");
    assert!(ok, "spawn over shm\n{report}");
    assert!(out.contains("spawn parent: spawned 0:3 on "), "{report}");

    // Without the launcher nobody can start a process.
    let o = Command::new(&exe)
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_RANK")
        .env_remove("VMMC_SIZE")
        .env_remove("VMMC_RENDEZVOUS")
        .env_remove("VMMC_HOSTS")
        .output()
        .expect("run spawn alone");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("spawn: unsupported here: not supported by this transport"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
