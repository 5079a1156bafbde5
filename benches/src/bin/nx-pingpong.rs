//! NX ping-pong between two processes under the launcher: `csend`/`crecv` round trips of
//! 4 B to 16 MiB (doubling) with the small-message path and threshold of the environment (`NX_SMALL`,
//! `NX_THRESHOLD`). Prints one JSON line per run:
//! `{"series":"NX-du","points":[{"size":4,"latency_us":..,"bandwidth_mbs":..},...]}`.
//!
//! `vmmc-run -n 2 [--transport sim] -- nx-pingpong [--reps R] [--max-size BYTES] [--name SERIES]`
//! (on sim the times are the simulated SHRIMP's virtual time)
//!
//! For the oversubscription benchmark (`bench-oversubscribe`), with any number of nodes:
//! `--ring SECS` passes a token around (`vmmc_benches::ring`; prints `{"ring_hop_us":..}`),
//! and `--idle SECS` blocks every node but 0 in a receive for that long and prints the largest
//! share of a core one of them used (`{"idle_core_share":..}`).

#![forbid(unsafe_code)]

use nx::Nx;
use std::process::ExitCode;
use vmmc_benches::stats::{sizes_up_to, Sample, Series};

/// Seconds per repetition aimed at.
const TARGET_SECS: f64 = 0.05;

fn round_trips(nx: &Nx, buf: &mut [u8], iters: u64) -> f64 {
    let me = nx.mynode();
    let peer = 1 - me;
    let t0 = nx.dclock();
    for _ in 0..iters {
        if me == 0 {
            nx.csend(1, buf, peer, 0).expect("csend");
            nx.crecv(1, buf).expect("crecv");
        } else {
            nx.crecv(1, buf).expect("crecv");
            nx.csend(1, buf, peer, 0).expect("csend");
        }
    }
    nx.dclock() - t0
}

/// Round trips per repetition, the same on both nodes (node 0 decides, gdhigh agrees).
fn calibrate(nx: &Nx, buf: &mut [u8]) -> u64 {
    let mut n = 4u64;
    loop {
        let t = round_trips(nx, buf, n);
        let mut v = [t];
        nx.gdhigh(&mut v).expect("gdhigh");
        if v[0] >= 0.005 || n >= 1 << 22 {
            let mut iters = [((TARGET_SECS / v[0] * n as f64) as i64).max(1)];
            nx.gihigh(&mut iters).expect("gihigh");
            return iters[0] as u64;
        }
        n *= 2;
    }
}

/// CPU time of every thread of this process so far, in seconds (`/proc/self/task/*/schedstat`,
/// nanosecond counts).
fn cpu_secs() -> f64 {
    let mut ns = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    ns as f64 / 1e9
}

/// An idle job: every node but 0 blocks in a receive while node 0 sleeps `secs`, then sends
/// each a message. Prints the largest share of a core that a waiting process used.
fn idle_job(nx: &Nx, secs: f64) {
    let me = nx.mynode();
    nx.gsync().expect("gsync");
    let mut used = [0.0f64];
    if me == 0 {
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        for to in 1..nx.numnodes() {
            nx.csend(2, &[1u8; 4], to, 0).expect("csend");
        }
    } else {
        let (c0, t0) = (cpu_secs(), std::time::Instant::now());
        let mut b = [0u8; 4];
        nx.crecv(2, &mut b).expect("crecv");
        used[0] = (cpu_secs() - c0) / t0.elapsed().as_secs_f64();
    }
    nx.gdhigh(&mut used).expect("gdhigh");
    if me == 0 {
        println!("{{\"idle_core_share\":{:.5}}}", used[0]);
    }
}

fn main() -> ExitCode {
    let mut reps = 5usize;
    let mut max = 16usize << 20;
    let mut name = None;
    let mut ring = None;
    let mut idle = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(5).max(1),
            "--max-size" => max = args.next().and_then(|v| v.parse().ok()).unwrap_or(max),
            "--name" => name = args.next(),
            "--ring" => ring = args.next().and_then(|v| v.parse::<f64>().ok()),
            "--idle" => idle = args.next().and_then(|v| v.parse::<f64>().ok()),
            other => {
                eprintln!("usage: vmmc-run -n 2 -- nx-pingpong [--reps R] [--max-size BYTES] [--name SERIES] [--ring SECS] [--idle SECS] ({other}?)");
                return ExitCode::from(2);
            }
        }
    }
    if idle.is_some() && std::env::var(vmmc::bootstrap::vars::TRANSPORT).as_deref() == Ok("sim") {
        eprintln!(
            "nx-pingpong: --idle measures host CPU use, which the sim transport does not model"
        );
        return ExitCode::from(2);
    }
    let job = |ep: vmmc::Endpoint| -> vmmc::Result<()> {
        let nx = Nx::new(ep).map_err(|e| vmmc::Error::Protocol(format!("NX: {e}")))?;
        if let Some(secs) = ring {
            ring_job(&nx, reps, secs);
        } else if let Some(secs) = idle {
            idle_job(&nx, secs);
        } else {
            pingpong_job(&nx, reps, max, name.clone())?;
        }
        Ok(())
    };
    // Through `run`: one process per rank, or every node a thread of this one on sim.
    match vmmc_run::run(job) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nx-pingpong: {e}");
            ExitCode::from(1)
        }
    }
}

/// `--ring SECS`: a token passed around every node (`vmmc_benches::ring`).
fn ring_job(nx: &Nx, reps: usize, secs: f64) {
    let mut hops: Vec<f64> = (0..reps)
        .map(|_| {
            vmmc_benches::ring::ring(
                nx.mynode() as usize,
                nx.numnodes() as usize,
                secs,
                |to, t| nx.csend(1, &t.to_ne_bytes(), to as i64, 0).expect("csend"),
                |_| {
                    let mut b = [0u8; 4];
                    nx.crecv(1, &mut b).expect("crecv");
                    u32::from_ne_bytes(b)
                },
            )
        })
        .collect();
    if nx.mynode() == 0 {
        println!("{{\"ring_hop_us\":{:.3}}}", vmmc_benches::median(&mut hops));
    }
}

/// The ping-pong of two nodes: round trips of every size, one JSON line from node 0.
fn pingpong_job(nx: &Nx, reps: usize, max: usize, name: Option<String>) -> vmmc::Result<()> {
    if nx.numnodes() != 2 {
        return Err(vmmc::Error::InvalidArgument(
            "nx-pingpong needs exactly 2 nodes (-n 2)",
        ));
    }
    let name = name.unwrap_or_else(|| {
        format!(
            "NX-{}",
            std::env::var("NX_SMALL").unwrap_or_else(|_| "du".into())
        )
    });
    // 4 B, 8 B, ... doubling to 16 MiB: the sizes of mpi-pingpong and beyond.
    let sizes = sizes_up_to(max);
    let mut buf = vec![0x5Au8; sizes.last().copied().unwrap_or(4).max(4)];
    let mut series = Series::new(name);
    // A warm-up of the whole job first (about as long as a size's measurement): the first
    // size measured must not pay for the start (caches, page faults, clocks ramping up).
    let warm_iters = calibrate(nx, &mut buf[..4]);
    for _ in 0..reps {
        round_trips(nx, &mut buf[..4], warm_iters);
    }
    for size in sizes {
        let msg = &mut buf[..size];
        round_trips(nx, msg, 20);
        let iters = calibrate(nx, msg);
        let secs: Vec<f64> = (0..reps).map(|_| round_trips(nx, msg, iters)).collect();
        series
            .points
            .push(Sample::from_round_trip_secs(size, iters, &secs));
    }
    nx.gsync().expect("gsync");
    if nx.mynode() == 0 {
        println!(
            "{}",
            serde_json::to_string(&series).expect("a series serialises")
        );
    }
    Ok(())
}
