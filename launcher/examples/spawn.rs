//! `vmmc_Spawn` across real processes. Rank 0 first asks for two spawns that must fail (an
//! unknown host, a missing program), then spawns this program as a new process of the job
//! on a host of the session (the last one, or `SPAWN_HOST`) and tells rank 1 who it is. The
//! child (a rank beyond the initial ones) imports every rank's buffer and writes into it; every rank imports the child's and
//! writes into it; each checks what arrived and says so.
//!
//! `vmmc-run -n 2 --transport tcp -- target/debug/examples/spawn`
//!
//! With `SPAWN_CHILD=die` the spawned process exits with status 3 as soon as it has joined,
//! and every rank must see it fail.

use vmmc::{Endpoint, Error, ExportOptions, MemKind, ProcId, Region};

const LEN: usize = 4096;
/// In every rank's buffer: the child's data, then its flag.
const DATA: usize = 16;
const FLAG: usize = 0;
/// In rank 1's buffer: the child's identity from rank 0, then a flag.
const WHO: usize = 1024;
const WHO_FLAG: usize = 1032;

fn fail(what: &str) -> Error {
    Error::Protocol(what.to_string())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("spawn example: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Error> {
    let ep = vmmc_run::init()?;
    let hosts = ep.session_hosts();
    // The network namespace, to show where the launcher placed this process.
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    println!(
        "process rank {} ({}) of size {} on {}; session hosts {}; netns {netns}",
        ep.rank(),
        ep.me(),
        ep.size(),
        ep.my_host_name(),
        hosts.join(",")
    );
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let ranks = args
            .get(2)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| fail("usage: spawn --child RANKS"))?;
        if args.get(3).map(String::as_str) == Some("--die") {
            // Joined, then gone with an error: the others must see it lost.
            std::process::exit(3);
        }
        return child(&ep, ranks);
    }
    let buf = ep.alloc(LEN, MemKind::Shared)?;
    ep.export(1, &buf, ExportOptions::new())?;
    let child = if ep.rank() == 0 {
        let c = spawn_checked(&ep, &hosts)?;
        if ep.size() > 1 {
            // Rank 1 learns the child's identity as data.
            let p = ep.import(ep.proc_of(1)?, 1)?;
            let who: Vec<u8> = [c.node, c.squid]
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect();
            p.send(WHO, &who)?;
            p.send(WHO_FLAG, &1u32.to_ne_bytes())?;
        }
        c
    } else {
        let r0 = ep.proc_of(0)?;
        buf.wait_u32(WHO_FLAG, |v| v == 1, || ep.check_peer(r0))?;
        ProcId {
            node: buf.load_u32(WHO)?,
            squid: buf.load_u32(WHO + 4)?,
        }
    };
    if std::env::var("SPAWN_CHILD").as_deref() == Ok("die") {
        return match buf.wait_u32(FLAG, |v| v == 0xC0DE, || ep.check_peer(child)) {
            Err(e @ Error::PeerLost(_)) if ep.peer_failed(child) => {
                println!(
                    "rank {} saw the spawned process {child} fail: {e}",
                    ep.rank()
                );
                Ok(())
            }
            other => Err(fail(&format!("a spawned process that died: {other:?}"))),
        };
    }
    // The child's buffer: this rank's word at 4 * rank.
    let p = ep.import(child, 2)?;
    p.send(
        4 * ep.rank(),
        &(0xBEEF_0000u32 + ep.rank() as u32).to_ne_bytes(),
    )?;
    buf.wait_u32(FLAG, |v| v == 0xC0DE, || ep.check_peer(child))?;
    let want = pattern(ep.rank());
    let mut got = vec![0u8; want.len()];
    buf.read(DATA, &mut got)?;
    if got != want {
        return Err(fail("the spawned process's data is wrong"));
    }
    println!(
        "rank {} imported the spawned process {child}'s buffer and got its data",
        ep.rank()
    );
    Ok(())
}

/// The spawns that must fail, then the real one.
fn spawn_checked(ep: &Endpoint, hosts: &[String]) -> Result<ProcId, Error> {
    let me = std::env::current_exe().map_err(|e| Error::io("current_exe", e))?;
    let me = me.to_str().ok_or_else(|| fail("path is not UTF-8"))?;
    let host = std::env::var("SPAWN_HOST")
        .ok()
        .or_else(|| hosts.last().cloned())
        .ok_or_else(|| fail("no session host"))?;
    match ep.spawn("no-such-host.invalid", me, &["--child".into()]) {
        Err(e @ Error::SpawnFailed(_)) => println!("spawn on an unknown host: {e}"),
        Err(e @ Error::Unsupported(_)) => {
            println!("spawn: {e}");
            return Err(e);
        }
        other => return Err(fail(&format!("unknown host: {other:?}"))),
    }
    match ep.spawn(&host, "/nonexistent/vmmc-program", &[]) {
        Err(e @ Error::SpawnFailed(_)) => println!("spawn of a missing program: {e}"),
        other => return Err(fail(&format!("missing program: {other:?}"))),
    }
    let mut args = vec!["--child".to_string(), ep.size().to_string()];
    if std::env::var("SPAWN_CHILD").as_deref() == Ok("die") {
        args.push("--die".into());
    }
    let c = ep.spawn(&host, me, &args)?;
    println!("rank 0 spawned {c} on {host}");
    Ok(c)
}

/// The bytes the child writes to `rank`.
fn pattern(rank: usize) -> Vec<u8> {
    (0..64u32)
        .flat_map(|i| (i * 31 + rank as u32 * 7 + 1).to_ne_bytes())
        .collect()
}

/// The spawned process: `ranks` is the size of the job its parent saw (ranks that failed to
/// spawn before it hold numbers up to its own, never used).
fn child(ep: &Endpoint, ranks: usize) -> Result<(), Error> {
    let parent = ep
        .parent()
        .ok_or_else(|| fail("a spawned process has no parent"))?;
    if parent != ep.proc_of(0)? {
        return Err(fail("the parent is not rank 0"));
    }
    let buf: Region = ep.alloc(LEN, MemKind::Shared)?;
    ep.export(2, &buf, ExportOptions::new())?;
    for r in 0..ranks {
        let p = ep.import(ep.proc_of(r)?, 1)?;
        p.send(DATA, &pattern(r))?;
        p.send(FLAG, &0xC0DEu32.to_ne_bytes())?;
    }
    for r in 0..ranks {
        let who = ep.proc_of(r)?;
        buf.wait_u32(
            4 * r,
            |v| v == 0xBEEF_0000 + r as u32,
            || ep.check_peer(who),
        )?;
    }
    println!(
        "spawned process {} (parent {parent}) got a write from each of {ranks} ranks",
        ep.me()
    );
    Ok(())
}
