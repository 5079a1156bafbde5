//! `vmmc_Spawn` over the mpi transport, across real processes under `mpirun`: rank 1 of a
//! job of two spawns this test program (`MPI_Comm_spawn`) after two spawns that must fail
//! (an unknown host, a missing program); the new process joins the job with a new
//! identity, and it and both ranks export, import, write into each other's buffers (with a
//! notification each way) and read. Its spawner puts into it and reads from it through their
//! shared window; everything else (the child's writes, rank 0's writes) goes through the
//! control plane's TCP connection, and the statistics say which path each took. Open MPI only: MPICH 4.0 here cannot spawn
//! (`MPI_Comm_spawn` fails inside Hydra, also from C), which the test checks is reported as
//! a failed spawn, and then says it skipped the rest.
//!
//! `cargo test -p vmmc-mpi --test spawn` (`VMMC_MPIRUN=mpirun.mpich` for a build against MPICH)

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, Error, ExportOptions, MemKind, ProcId};
use vmmc_mpi::MpiTransport;

const CASE: &str = "VMMC_SPAWN_TEST";
const JOB_LIMIT: Duration = Duration::from_secs(120);
const LEN: usize = 4096;
/// In each rank's buffer: the child's flag (written last, with a notification), its data.
const FLAG: usize = 0;
const DATA: usize = 16;
/// In rank 0's buffer: the child's identity from rank 1, then a flag.
const WHO: usize = 2048;
const WHO_FLAG: usize = 2056;
/// In the child's buffer: rank r's data at `FROM + r * 512`, a word of it last.
const FROM: usize = 1024;
/// In the child's buffer: what the child put there itself (read remotely by its spawner).
const OWN: usize = 3072;
/// In the child's buffer: rank r is done with it at `DONE + 4 r`.
const DONE: usize = 4000;
const PIECE: usize = 256;

fn fail(what: impl Into<String>) -> Error {
    Error::Protocol(what.into())
}

fn pattern(seed: u32) -> Vec<u8> {
    (0..(PIECE / 4) as u32)
        .flat_map(|i| (i * 31 + seed * 7 + 1).to_ne_bytes())
        .collect()
}

static NOTES: AtomicU32 = AtomicU32::new(0);

fn member() -> Result<String, Error> {
    let t = Arc::new(MpiTransport::connect(&BootEnv::from_env()?)?);
    let ep = Endpoint::new(t.clone())?;
    let child = std::env::args().any(|a| a == "--child");
    let r = if child {
        as_child(&ep, &t)
    } else {
        as_rank(&ep, &t)
    };
    drop(ep);
    r
}

fn as_rank(ep: &Endpoint, t: &MpiTransport) -> Result<String, Error> {
    let me = ep.rank();
    let buf = ep.alloc(LEN, MemKind::Shared)?;
    ep.export(
        1,
        &buf,
        ExportOptions::new().handler(|_| {
            NOTES.fetch_add(1, Ordering::SeqCst);
        }),
    )?;
    let child = if me == 1 {
        let exe = std::env::current_exe().map_err(|e| Error::io("current_exe", e))?;
        let exe = exe.to_str().ok_or_else(|| fail("path is not UTF-8"))?;
        let host = ep.session_hosts()[0].clone();
        match ep.spawn("no-such-host.invalid", exe, &["--child".into()]) {
            Err(Error::SpawnFailed(e)) => println!("spawn on an unknown host: {e}"),
            other => return Err(fail(format!("unknown host: {other:?}"))),
        }
        match ep.spawn(&host, "/nonexistent/vmmc-program", &[]) {
            Err(Error::SpawnFailed(e)) => println!("spawn of a missing program: {e}"),
            other => return Err(fail(format!("missing program: {other:?}"))),
        }
        let c = match ep.spawn(&host, exe, &["--child".into()]) {
            Ok(c) => c,
            Err(Error::SpawnFailed(e)) if !open_mpi_here() => {
                // Tell rank 0 so that it does not wait for ever.
                let p = ep.import(ep.proc_of(0)?, 1)?;
                p.send(WHO_FLAG, &2u32.to_ne_bytes())?;
                return Ok(format!("cannot spawn under this MPI: {e}"));
            }
            Err(e) => return Err(e),
        };
        println!("rank 1 spawned {c} on {host}");
        let p = ep.import(ep.proc_of(0)?, 1)?;
        let who: Vec<u8> = [c.node, c.squid]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        p.send(WHO, &who)?;
        p.send(WHO_FLAG, &1u32.to_ne_bytes())?;
        c
    } else {
        let r1 = ep.proc_of(1)?;
        buf.wait_u32(WHO_FLAG, |v| v != 0, || ep.check_peer(r1))?;
        if buf.load_u32(WHO_FLAG)? == 2 {
            return Ok("rank 1 could not spawn".into());
        }
        ProcId {
            node: buf.load_u32(WHO)?,
            squid: buf.load_u32(WHO + 4)?,
        }
    };
    if ep.proc_of(0)? == child || ep.proc_of(1)? == child {
        return Err(fail(format!(
            "the spawned process has a rank's identity {child}"
        )));
    }
    // Into the child's buffer; rank 1 through their window, rank 0 through TCP.
    let p = ep.import(child, 2)?;
    p.send(FROM + me * 512, &pattern(10 + me as u32))?;
    buf.wait_u32(FLAG, |v| v == 0xC0DE, || ep.check_peer(child))?;
    let want = pattern(me as u32);
    let mut got = vec![0u8; want.len()];
    buf.read(DATA, &mut got)?;
    if got != want {
        return Err(fail("the spawned process's data is wrong"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while NOTES.load(Ordering::SeqCst) == 0 {
        if Instant::now() > deadline {
            return Err(fail("no notification from the spawned process"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Remote read: the spawner through the window; rank 0 has none with it.
    let mut own = vec![0u8; PIECE];
    match (me, p.get_data(OWN, &mut own)) {
        (1, Ok(())) if own == pattern(99) => {}
        (1, r) => return Err(fail(format!("remote read from the child: {r:?}"))),
        (_, Err(Error::Unsupported(_))) => {}
        (_, r) => return Err(fail(format!("remote read without a window: {r:?}"))),
    }
    p.send(DONE + 4 * me, &1u32.to_ne_bytes())?;
    let s = t.rma_stats();
    println!(
        "rank {me} stats: puts {} gets {} fallback_writes {}",
        s.puts, s.gets, s.fallback_writes
    );
    let ok = match me {
        // To rank 0 through the world's pool (puts, or stores where it is mapped here) and
        // to the child through the pair's window (puts: never mapped).
        1 => s.puts >= 2 && s.puts + s.stores == 4 && s.gets == 1 && s.fallback_writes == 0,
        _ => s.puts + s.stores == 0 && s.fallback_writes == 2,
    };
    if !ok {
        return Err(fail(format!("rank {me}: unexpected statistics {s:?}")));
    }
    Ok(format!(
        "rank {me} exchanged data with the spawned process {child}"
    ))
}

fn as_child(ep: &Endpoint, t: &MpiTransport) -> Result<String, Error> {
    let parent = ep.parent().ok_or_else(|| fail("no parent"))?;
    if parent != ep.proc_of(1)? {
        return Err(fail(format!("parent {parent} is not rank 1")));
    }
    if ep.rank() < 2 || ep.me() == ep.proc_of(0)? || ep.me() == ep.proc_of(1)? {
        return Err(fail(format!("a spawned process as rank {}", ep.rank())));
    }
    let buf = ep.alloc(LEN, MemKind::Shared)?;
    buf.write(OWN, &pattern(99))?;
    ep.export(2, &buf, ExportOptions::new())?;
    for r in 0..2 {
        let p = ep.import(ep.proc_of(r)?, 1)?;
        p.send(DATA, &pattern(r as u32))?;
        p.send_notify(FLAG, &0xC0DEu32.to_ne_bytes())?;
    }
    for r in 0..2usize {
        let who = ep.proc_of(r)?;
        let at = FROM + r * 512;
        let want = pattern(10 + r as u32);
        let last = u32::from_ne_bytes(want[PIECE - 4..].try_into().expect("word"));
        buf.wait_u32(at + PIECE - 4, |v| v == last, || ep.check_peer(who))?;
        let mut got = vec![0u8; PIECE];
        buf.read(at, &mut got)?;
        if got != want {
            return Err(fail(format!("rank {r}'s data is wrong")));
        }
    }
    for r in 0..2usize {
        let who = ep.proc_of(r)?;
        buf.wait_u32(DONE + 4 * r, |v| v == 1, || ep.check_peer(who))?;
    }
    let s = t.rma_stats();
    println!(
        "child stats: puts {} gets {} fallback_writes {} fallback_bytes {}",
        s.puts, s.gets, s.fallback_writes, s.fallback_bytes
    );
    // It shares no window it can write through (see the crate docs): four writes by TCP.
    if s.puts + s.stores != 0 || s.fallback_writes != 4 {
        return Err(fail(format!("child: unexpected statistics {s:?}")));
    }
    Ok(format!(
        "spawned process {} (rank {}, parent {parent}) exchanged data with both ranks",
        ep.me(),
        ep.rank()
    ))
}

fn open_mpi_here() -> bool {
    vmmc_mpi::library_version().contains("Open MPI")
}

fn main() {
    if std::env::var_os(CASE).is_some() {
        let tag = if std::env::args().any(|a| a == "--child") {
            "child".to_string()
        } else {
            std::env::var("OMPI_COMM_WORLD_RANK")
                .or_else(|_| std::env::var("PMI_RANK"))
                .unwrap_or_default()
        };
        match member() {
            Ok(m) => {
                println!("{m}");
                println!("member-ok {tag}");
                std::process::exit(0)
            }
            Err(e) => {
                eprintln!("member {tag}: {e}");
                std::process::exit(1)
            }
        }
    }
    let exe = std::env::current_exe().expect("current_exe");
    // One slot per rank would leave none for the spawned process: `mpirun` oversubscribes.
    let ompi = common::open_mpi();
    let mut cmd = common::mpirun(2);
    cmd.arg(&exe).env(CASE, "1").env("VMMC_TRANSPORT", "mpi");
    let start = Instant::now();
    let common::Run {
        status,
        stdout,
        stderr,
    } = common::run(cmd, JOB_LIMIT).expect("run mpirun");
    let report = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let Some(status) = status else {
        panic!("the job hung for {JOB_LIMIT:?}: killed\n{report}");
    };
    let has = |s: &str| stdout.lines().any(|l| l.contains(s));
    assert!(
        has("spawn on an unknown host: ") && has("spawn of a missing program: cannot start"),
        "the failing spawns: {report}"
    );
    if !ompi {
        assert!(
            has("cannot spawn under this MPI: ") && has("member-ok 0") && has("member-ok 1"),
            "{report}"
        );
        println!(
            "test spawn::spawned_process_joins_the_job ... ignored: this MPI (MPICH 4.0's \
             Hydra here) cannot run MPI_Comm_spawn; the spawn fails cleanly"
        );
        return;
    }
    for tag in ["0", "1", "child"] {
        assert!(has(&format!("member-ok {tag}")), "member {tag}: {report}");
    }
    assert!(status.success(), "mpirun: {status}\n{report}");
    println!(
        "test spawn::spawned_process_joins_the_job ... ok ({:.2?})",
        start.elapsed()
    );
    for l in stdout.lines().filter(|l| l.contains("stats")) {
        println!("  {l}");
    }
}
