//! `vmmc_Spawn` and `vmmc_SessionHosts` under vmmc-run, across real processes: a rank spawns
//! a process that imports every rank's buffer and writes into it while every rank imports
//! its buffer and writes into it (tcp and shm); a spawned process that dies is lost to all;
//! spawns of an unknown host and a missing program fail with clear errors, and so does shm
//! without spawn slots, or a job without the launcher; `--hosts` starts every process through
//! the remote-shell agent (a recording stand-in for ssh here; the netns test runs the real
//! thing across namespaces).

use std::path::PathBuf;
use std::process::{Command, Output};

fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vmmc-run"))
}

fn example(name: &str) -> PathBuf {
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
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_HOSTS")
        .env_remove("VMMC_PARENT")
        .output()
        .expect("run vmmc-run")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn has(out: &str, prefix: &str, part: &str) -> bool {
    out.lines()
        .any(|l| l.starts_with(prefix) && l.contains(part))
}

fn host_name() -> String {
    let out = Command::new("hostname").output().expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The ranks and the spawned process exchange data both ways on `transport`.
fn spawn_joins_the_job_both_ways(transport: &str) {
    let ex = example("spawn");
    let o = run(&[
        "-n",
        "2",
        "--transport",
        transport,
        // shm sizes its tables at the start: the two failing spawns take a slot each too.
        "--spawn-slots",
        "3",
        "--tag-output",
        "--",
        ex.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // The failed spawns reserve ranks 2 and 3; the child is rank 4, the job's 5th process.
    assert!(
        has(
            &out,
            "[0] ",
            "spawn on an unknown host: spawn failed: unknown host \"no-such-host.invalid\""
        ),
        "{out}"
    );
    assert!(
        has(
            &out,
            "[0] ",
            "spawn of a missing program: spawn failed: cannot start \"/nonexistent/vmmc-program\""
        ),
        "{out}"
    );
    assert!(has(&out, "[4] ", "of size 5"), "{out}");
    assert!(
        has(&out, "[4] ", "got a write from each of 2 ranks"),
        "{out}"
    );
    for r in 0..2 {
        assert!(
            has(&out, &format!("[{r}] "), "imported the spawned process"),
            "{out}"
        );
    }
    // One host: the session is this host.
    let here = host_name();
    assert!(
        has(&out, "[0] ", &format!("session hosts {here};")),
        "{out}"
    );
    assert!(
        has(&out, "[4] ", &format!("session hosts {here};")),
        "{out}"
    );
}

#[test]
fn spawn_over_tcp_joins_the_job_both_ways() {
    spawn_joins_the_job_both_ways("tcp");
}

#[test]
fn spawn_over_shm_joins_the_job_both_ways() {
    spawn_joins_the_job_both_ways("shm");
}

fn a_spawned_process_that_dies_is_lost(transport: &str, child: &str) {
    let ex = example("spawn");
    let o = Command::new(launcher())
        .args(["-n", "2", "--transport", transport, "--spawn-slots", "3"])
        .args(["--tag-output", "--"])
        .arg(&ex)
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_HOSTS")
        .env("SPAWN_CHILD", "die")
        .output()
        .expect("run vmmc-run");
    let (out, err) = text(&o);
    // The job fails with the spawned process's status; the ranks saw it go.
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    assert!(err.contains("rank 4 exited with status 3"), "{out}\n{err}");
    for r in 0..2 {
        assert!(
            has(
                &out,
                &format!("[{r}] "),
                &format!("saw the spawned process {child} fail: peer")
            ),
            "{out}\n{err}"
        );
    }
}

#[test]
fn a_spawned_process_that_dies_is_lost_to_every_rank() {
    // Squids: tcp numbers them per node as processes join; shm's are rank + 1.
    a_spawned_process_that_dies_is_lost("tcp", "0:3");
    a_spawned_process_that_dies_is_lost("shm", "0:5");
}

#[test]
fn spawn_is_refused_clearly_where_it_cannot_be_done() {
    // shm without spawn slots.
    let ex = example("spawn");
    let o = run(&[
        "-n",
        "1",
        "--transport",
        "shm",
        "--tag-output",
        "--",
        ex.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("spawn failed: no spawn slot left: this shm job holds 1 processes"),
        "{out}\n{err}"
    );
    // A job of one without the launcher: nobody can start a process.
    let o = Command::new(&ex)
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_RANK")
        .env_remove("VMMC_SIZE")
        .env_remove("VMMC_RENDEZVOUS")
        .env_remove("VMMC_HOSTS")
        .output()
        .expect("run the example alone");
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("spawn: not supported by this transport: vmmc_Spawn: no launcher"),
        "{out}\n{err}"
    );
}

#[test]
fn concurrent_spawns_from_every_rank() {
    let ex = example("spawn_many");
    for transport in ["tcp", "shm"] {
        let o = run(&[
            "-n",
            "2",
            "--transport",
            transport,
            "--spawn-slots",
            "6",
            "--tag-output",
            "--",
            ex.to_str().unwrap(),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{transport}: {out}\n{err}");
        for r in 0..2 {
            assert!(
                has(
                    &out,
                    &format!("[{r}] "),
                    "heard from all 6 spawned processes"
                ),
                "{transport}: {out}\n{err}"
            );
        }
    }
}

#[test]
fn hosts_start_every_process_through_the_agent() {
    let dir = std::env::temp_dir().join(format!("vmmc-spawn-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let agent = dir.join("agent");
    // Stands in for ssh: records the host, then runs the command here.
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nhost=\"$1\"; shift\necho \"$host $*\" | cut -c1-200 >> {}\nexec \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let ex = example("spawn");
    let o = run(&[
        "-n",
        "2",
        "--transport",
        "tcp",
        "--hosts",
        "hostA,hostB",
        "--rsh",
        agent.to_str().unwrap(),
        "--rendezvous",
        "127.0.0.1:0",
        "--tag-output",
        "--",
        ex.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    let started = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{out}\n{err}\n{started}");
    // Rank 0 on hostA, rank 1 on hostB, the spawns on hostB (the session's last): the
    // missing program starts there through the agent and fails before joining.
    let lines: Vec<&str> = started.lines().collect();
    assert_eq!(lines.len(), 4, "{started}");
    // The agents run concurrently: their lines come in any order.
    for (host, rank) in [("hostA", 0), ("hostB", 1), ("hostB", 3), ("hostB", 4)] {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{host} env "))
                && l.contains(&format!(" VMMC_RANK={rank} "))
                && (rank < 2 || l.contains(" VMMC_PARENT=0:1 "))),
            "rank {rank} not started on {host}: {started}"
        );
    }
    assert!(
        has(
            &out,
            "[0] ",
            "spawn of a missing program: spawn failed: the spawned process (rank 3) exited with \
             status 127 before it joined the job"
        ),
        "{out}"
    );
    assert!(has(&out, "[0] ", "session hosts hostA,hostB;"), "{out}");
    assert!(
        has(&out, "[4] ", "got a write from each of 2 ranks"),
        "{out}"
    );
}

#[test]
fn hosts_need_a_transport_that_crosses_hosts() {
    let o = run(&[
        "-n",
        "2",
        "--transport",
        "shm",
        "--hosts",
        "a,b",
        "--",
        "true",
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("--hosts places ranks on other hosts"),
        "{out}\n{err}"
    );
    // Unresolvable hosts without --rendezvous: the launcher cannot tell its own address.
    let o = run(&[
        "-n",
        "1",
        "--transport",
        "tcp",
        "--hosts",
        "no-such-host.invalid",
        "--",
        "true",
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("give --rendezvous"), "{out}\n{err}");
}

/// Under `vmmc-run --transport mpi` (mpirun) the spawn is `MPI_Comm_spawn`: the example's
/// child joins, writes every rank's buffer and gets a word from each (from rank 0, its
/// spawner, through their window; from rank 1 through the control plane's TCP path). The
/// two spawns that must fail are refused before MPI is asked (Open MPI ends the job after a
/// failed spawn), so they reserve no rank: the child is rank 2 of 3.
#[cfg(feature = "mpi")]
#[test]
fn spawn_over_mpi_joins_the_job_both_ways() {
    let ex = example("spawn");
    let o = run(&[
        "-n",
        "2",
        "--transport",
        "mpi",
        "--bind-to",
        "none",
        "--",
        ex.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let has = |part: &str| out.lines().any(|l| l.contains(part));
    assert!(
        has("spawn on an unknown host: spawn failed: unknown host \"no-such-host.invalid\""),
        "{out}"
    );
    assert!(
        has("spawn of a missing program: spawn failed: cannot start \"/nonexistent/vmmc-program\""),
        "{out}"
    );
    assert!(has("process rank 2 (") && has("of size 3"), "{out}");
    assert!(has("got a write from each of 2 ranks"), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("imported the spawned process"))
            .count(),
        2,
        "{out}"
    );
}
