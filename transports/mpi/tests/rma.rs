//! The mpi transport moves data by MPI one-sided operations, checked across the two ranks of
//! an MPI job (this binary under `mpirun -n 2`, twice): deliberate updates into a buffer of
//! the allocated pool and into attached process memory arrive whole and in order, their bytes
//! go by `MPI_Put` (into the pool: by stores into it mapped on this node, unless
//! `VMMC_MPI_DIRECT=0`, the second run) and not over the control connections (the
//! transport's counters say so),
//! remote read returns what was written, notifications arrive in order with their values,
//! after unexport the sender is refused, a receiver waiting for a late put sleeps and is
//! woken by the put's doorbell ring (under a tenth of a CPU while it waits), and a key that
//! comes round again (4 generations here) is unrevoked, so its new export can be imported.
//!
//! `cargo test -p vmmc-mpi --test rma`

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::conformance::{wait_for, Sync};
use vmmc::{Endpoint, ExportOptions, MemKind, Region, Transport};
use vmmc_mpi::MpiTransport;

const CASE: &str = "VMMC_MPI_RMA_CASE";
const LEN: usize = 64 * 1024;
const SENDS: usize = 200;
const CHUNK: usize = 4096;

fn pattern(i: usize) -> Vec<u8> {
    (0..CHUNK).map(|k| (i * 31 + k * 7) as u8).collect()
}

/// CPU time of this process so far, in seconds.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn rank_body() -> Result<(), String> {
    let env = BootEnv::from_env().map_err(|e| e.to_string())?;
    let t = Arc::new(MpiTransport::connect(&env).map_err(|e| format!("bootstrap: {e}"))?);
    let ep = Endpoint::new(t.clone() as Arc<dyn Transport>).map_err(|e| e.to_string())?;
    let e = |x: vmmc::Error| x.to_string();
    let mut sync = Sync::new(&ep)?;
    // Both ranks share this node: the pool is mapped unless the run says not to.
    let mapped = t.pool_mapped();
    if mapped != (std::env::var("VMMC_MPI_DIRECT").as_deref() != Ok("0")) {
        return Err(format!(
            "pool mapped here: {mapped}, against VMMC_MPI_DIRECT"
        ));
    }
    let pooled = ep.alloc(LEN, MemKind::Shared).map_err(e)?;
    let attached = Region::alloc_private(LEN).map_err(e)?;
    let noted = ep.alloc(4096, MemKind::Shared).map_err(e)?;
    let got: Arc<Mutex<Vec<u32>>> = Arc::default();
    if ep.rank() == 1 {
        ep.export(1, &pooled, ExportOptions::new()).map_err(e)?;
        ep.export(2, &attached, ExportOptions::new()).map_err(e)?;
        let g = got.clone();
        ep.export(
            3,
            &noted,
            ExportOptions::new().handler(move |n| g.lock().unwrap().push(n.value)),
        )
        .map_err(e)?;
    }
    sync.barrier()?;
    if ep.rank() == 0 {
        let peer = ep.proc_of(1).map_err(e)?;
        let (p1, p2, p3) = (
            ep.import(peer, 1).map_err(e)?,
            ep.import(peer, 2).map_err(e)?,
            ep.import(peer, 3).map_err(e)?,
        );
        let before = t.control_stats().bytes_sent;
        for i in 0..SENDS {
            let off = (i % (LEN / CHUNK - 1)) * CHUNK;
            p1.send(off, &pattern(i)).map_err(e)?;
            p2.send(off, &pattern(i)).map_err(e)?;
        }
        for v in 1..=10u32 {
            p3.send_notify(0, &v.to_ne_bytes()).map_err(e)?;
        }
        let rma = t.rma_stats();
        let control = t.control_stats().bytes_sent - before;
        let all = (SENDS * CHUNK) as u64;
        if mapped && (rma.bytes_stored < all || rma.bytes_put < all) {
            return Err(format!(
                "{} bytes were stored into the mapped pool and {} went by MPI_Put, for {all} each",
                rma.bytes_stored, rma.bytes_put
            ));
        }
        if !mapped && (rma.bytes_put < 2 * all || rma.bytes_stored != 0) {
            return Err(format!(
                "only {} bytes went by MPI_Put ({} stored)",
                rma.bytes_put, rma.bytes_stored
            ));
        }
        if control > (SENDS * CHUNK / 10) as u64 {
            return Err(format!(
                "{control} bytes went over the control connection for {} bytes of data",
                2 * SENDS * CHUNK
            ));
        }
        // Remote read of what the last sends left at offset 0.
        let last0 = (0..SENDS).rfind(|i| i % (LEN / CHUNK - 1) == 0).unwrap();
        let mut back = vec![0u8; CHUNK];
        p1.get_data(0, &mut back).map_err(e)?;
        let s = t.rma_stats();
        if back != pattern(last0) || (if mapped { s.loads } else { s.gets }) == 0 {
            return Err("remote read returned other bytes (or not by its path)".into());
        }
        // 8 aligned bytes into the pool go as one atomic accumulate (MPI_REPLACE); into
        // attached memory, or at an odd word, as two puts. (In the last chunk, which the
        // sends above leave alone, clear of its last word.)
        let before = t.rma_stats().replaces;
        let eight = 0x0123_4567_89ab_cdefu64.to_ne_bytes();
        let spare = LEN - CHUNK;
        for (p, off) in [(&p1, spare + 8), (&p2, spare + 8), (&p1, spare + 20)] {
            p.send(off, &eight).map_err(e)?;
            let mut b = [0u8; 8];
            p.get_data(off, &mut b).map_err(e)?;
            if b != eight {
                return Err(format!("an 8 B update at {off} left {b:?}"));
            }
        }
        let replaces = t.rma_stats().replaces - before;
        // (Stores, with the pool mapped here.)
        let expected = if !mapped
            && (vmmc_mpi::library_version().contains("Open MPI")
                || vmmc_mpi::library_version().contains("MPICH"))
        {
            1
        } else {
            0
        };
        if replaces != expected {
            return Err(format!(
                "{replaces} of 3 8 B updates were single accumulates"
            ));
        }
        sync.barrier()?; // rank 1 checks its buffers
        sync.barrier()?; // rank 1 has unexported buffer 1
        match p1.send(0, &[0u8; 4]) {
            Err(vmmc::Error::Unexported) => {}
            other => return Err(format!("a send after unexport gave {other:?}")),
        }
        p2.send(0, &[1u8; 4]).map_err(e)?;
        sync.barrier()?;
        // Rank 1 waits for a word that comes only now: it must sleep meanwhile (burning no
        // CPU) and be woken by the put's doorbell ring.
        std::thread::sleep(Duration::from_millis(1500));
        let (frames, rings) = (t.control_stats().frames_sent, t.rma_stats().rings);
        p2.send(LEN - 4, &0xD00Du32.to_ne_bytes()).map_err(e)?;
        // The receiver slept: the put was followed by a ring, on its doorbell mapped here
        // (both ranks on one node) or on the control connection.
        if t.control_stats().frames_sent == frames && t.rma_stats().rings == rings {
            return Err("no doorbell ring for a sleeping receiver".into());
        }
    } else {
        sync.barrier()?;
        for i in 0..SENDS {
            let off = (i % (LEN / CHUNK - 1)) * CHUNK;
            let later = (i + 1..SENDS).any(|j| j % (LEN / CHUNK - 1) == i % (LEN / CHUNK - 1));
            if later {
                continue;
            }
            for (name, r) in [("pool", &pooled), ("attached", &attached)] {
                let mut b = vec![0u8; CHUNK];
                r.read(off, &mut b).map_err(e)?;
                if b != pattern(i) {
                    return Err(format!("{name} buffer at {off}: not the last write"));
                }
            }
        }
        wait_for(&ep, Some(0), "ten notifications", || {
            got.lock().unwrap().len() >= 10
        })?;
        let g = got.lock().unwrap().clone();
        if g != (1..=10).collect::<Vec<u32>>() {
            return Err(format!("notifications {g:?}"));
        }
        ep.unexport(1).map_err(e)?;
        sync.barrier()?;
        sync.barrier()?;
        let (cpu0, t0) = (cpu_secs(), Instant::now());
        wait_for(&ep, Some(0), "the late word", || {
            attached.load_u32(LEN - 4).unwrap_or(0) == 0xD00D
        })?;
        let (cpu, wall) = (cpu_secs() - cpu0, t0.elapsed().as_secs_f64());
        if wall < 1.0 || cpu > 0.1 * wall {
            return Err(format!(
                "waiting {wall:.2} s for a put used {cpu:.3} s of CPU (expected a sleep)"
            ));
        }
        if vmmc::wait::counts().iter().all(|c| c.sleeps == 0) {
            return Err("the wait never slept".into());
        }
    }
    // Keys come round again (this job has 4 generations): one buffer exported, imported,
    // written and unexported 12 times over gets the key of an earlier export, which rank 0
    // holds revoked; each new export must still be imported and written.
    let again = Region::alloc_private(4096).map_err(e)?;
    for round in 1..=12u32 {
        if ep.rank() == 1 {
            ep.export(9, &again, ExportOptions::new()).map_err(e)?;
        }
        sync.barrier()?;
        if ep.rank() == 0 {
            let p = ep.import(ep.proc_of(1).map_err(e)?, 9).map_err(e)?;
            p.send(0, &round.to_ne_bytes())
                .map_err(|x| format!("round {round}: {x}"))?;
        }
        sync.barrier()?;
        if ep.rank() == 1 {
            let got = again.load_u32(0).map_err(e)?;
            if got != round {
                return Err(format!("round {round}: the buffer holds {got}"));
            }
            ep.unexport(9).map_err(e)?;
        }
        sync.barrier()?;
    }
    if ep.rank() == 1 && t.rma_stats().unrevoked == 0 {
        return Err("no key came round again in 12 exports of 4 generations".into());
    }
    sync.barrier()?;
    drop(sync);
    drop(ep);
    Ok(())
}

fn main() {
    if std::env::var(CASE).is_ok() {
        let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
        match rank_body() {
            Ok(()) => {
                println!("rank-ok {rank}");
                std::process::exit(0)
            }
            Err(e) => {
                eprintln!("rank {rank}: {e}");
                std::process::exit(1)
            }
        }
    }
    let mut failed = 0;
    for direct in ["1", "0"] {
        let mut c = common::mpirun(2);
        c.arg(std::env::current_exe().expect("current_exe"))
            .env(CASE, "1")
            .env("VMMC_MPI_DIRECT", direct)
            .env("VMMC_MPI_KEY_GENERATIONS", "4")
            .env("VMMC_TRANSPORT", "mpi");
        let common::Run {
            status,
            stdout,
            stderr,
        } = common::run(c, Duration::from_secs(120))
            .expect("mpirun (the test command installs openmpi-bin)");
        let ok = status.is_some_and(|s| s.success())
            && stdout.contains("rank-ok 0\n")
            && stdout.contains("rank-ok 1\n");
        println!(
            "test rma::puts_gets_notifications_and_unexport (2 processes, VMMC_MPI_DIRECT={direct}) ... {}",
            if ok { "ok" } else { "FAILED" }
        );
        if !ok {
            failed += 1;
            println!("status {status:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
        }
    }
    println!();
    println!("rma: {} passed, {failed} failed", 2 - failed);
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
