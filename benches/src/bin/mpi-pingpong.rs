//! The MPI baseline: the same ping-pong between two ranks with blocking `MPI_Send`/`MPI_Recv`
//! (two-sided, bytes on `MPI_COMM_WORLD`), through `mpi-sys` against the installed MPI:
//!
//! `mpirun --allow-run-as-root -n 2 mpi-pingpong [--reps R] [--max-size BYTES]`, or
//! `mpirun -n N mpi-pingpong --ring SECS [--reps R]` for the token ring of
//! `vmmc_benches::ring` (prints `{"ring_hop_us":..}`, the median hop over the repetitions).
//!
//! For each size of [`sizes`] up to `--max-size`: a warm-up, a calibration that picks the
//! number of round trips so that one repetition lasts about 75 ms, then `R` timed repetitions
//! (default 5). One-way latency is half a round trip; rank 0 prints one JSON line,
//! `{"series":"mpi","points":[{"size":4,"latency_us":..,"bandwidth_mbs":..},...]}`, with the
//! medians over the repetitions.

use std::process::ExitCode;
use std::time::Instant;
use vmmc_benches::stats::{sizes_up_to, Sample, Series};

/// The few MPI calls used, behind safe functions. Every call is blocking and made from the
/// main thread only, between [`mpi::init`] and [`mpi::finalize`].
mod mpi {
    use mpi_sys as ffi;
    use std::ffi::{c_int, c_void};

    /// Panics unless an MPI call returned `MPI_SUCCESS` (0).
    fn check(rc: c_int, what: &str) {
        assert_eq!(rc, 0, "{what} failed with MPI error {rc}");
    }

    fn count(len: usize) -> c_int {
        c_int::try_from(len).expect("message too long for an MPI count")
    }

    pub fn init() {
        // SAFETY: called once, first, before any other MPI call; MPI allows null argc/argv.
        let rc = unsafe { ffi::MPI_Init(std::ptr::null_mut(), std::ptr::null_mut()) };
        check(rc, "MPI_Init");
    }

    pub fn rank_size() -> (i32, i32) {
        let (mut r, mut s): (c_int, c_int) = (0, 0);
        // SAFETY: MPI is initialised; both out-pointers point to live, writable c_ints and the
        // communicator handle comes from mpi-sys.
        let rc = unsafe {
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut r)
                | ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut s)
        };
        check(rc, "MPI_Comm_rank/size");
        (r, s)
    }

    pub fn send(buf: &[u8], to: i32) {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the whole blocking call;
        // MPI only reads it (the const cast is the C signature's).
        let rc = unsafe {
            ffi::MPI_Send(
                buf.as_ptr().cast::<c_void>(),
                count(buf.len()),
                ffi::RSMPI_UINT8_T,
                to,
                0,
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Send");
    }

    pub fn recv(buf: &mut [u8], from: i32) {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole blocking call,
        // and MPI writes at most that many (the count bounds the message); the status is
        // ignored through MPI_STATUS_IGNORE.
        let rc = unsafe {
            ffi::MPI_Recv(
                buf.as_mut_ptr().cast::<c_void>(),
                count(buf.len()),
                ffi::RSMPI_UINT8_T,
                from,
                0,
                ffi::RSMPI_COMM_WORLD,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        check(rc, "MPI_Recv");
    }

    /// Rank 0's `v` replaces everyone's.
    pub fn bcast_u64(v: &mut u64) {
        let mut bytes = v.to_ne_bytes();
        // SAFETY: `bytes` is a live 8-byte buffer for the whole blocking call (read on the
        // root, written elsewhere), and 8 MPI_UINT8_T elements fit it exactly.
        let rc = unsafe {
            ffi::MPI_Bcast(
                bytes.as_mut_ptr().cast::<c_void>(),
                8,
                ffi::RSMPI_UINT8_T,
                0,
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Bcast");
        *v = u64::from_ne_bytes(bytes);
    }

    pub fn finalize() {
        // SAFETY: called once, after every other MPI call of the program.
        let rc = unsafe { ffi::MPI_Finalize() };
        check(rc, "MPI_Finalize");
    }
}

/// Seconds per repetition aimed at (the brief: 50-100 ms).
const TARGET_SECS: f64 = 0.075;

/// `iters` round trips of `buf`; rank 0 sends first. Returns the elapsed seconds.
fn round_trips(rank: i32, buf: &mut [u8], iters: u64) -> f64 {
    let peer = 1 - rank;
    let start = Instant::now();
    for _ in 0..iters {
        if rank == 0 {
            mpi::send(buf, peer);
            mpi::recv(buf, peer);
        } else {
            mpi::recv(buf, peer);
            mpi::send(buf, peer);
        }
    }
    start.elapsed().as_secs_f64()
}

/// Round trips per repetition, the same on both ranks (rank 0 decides): doubles a trial count
/// until it takes at least 10 ms, then scales it to [`TARGET_SECS`].
fn calibrate(rank: i32, buf: &mut [u8]) -> u64 {
    let mut n = 16u64;
    loop {
        let t = round_trips(rank, buf, n);
        let mut done = u64::from(t >= 0.01 || n >= 1 << 24);
        mpi::bcast_u64(&mut done);
        if done == 1 {
            let mut iters = ((TARGET_SECS / t * n as f64) as u64).max(1);
            mpi::bcast_u64(&mut iters);
            return iters;
        }
        n *= 2;
    }
}

struct Args {
    reps: usize,
    max_size: usize,
    /// `--ring SECS`: the token ring of `vmmc_benches::ring` over every rank instead.
    ring: Option<f64>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        reps: 5,
        max_size: 1 << 20,
        ring: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |what: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{flag} needs {what}"))
        };
        match flag.as_str() {
            "--reps" => a.reps = value("a positive count")?.max(1),
            "--ring" => {
                a.ring = Some(
                    it.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--ring needs seconds")?,
                )
            }
            "--max-size" => a.max_size = value("a size in bytes")?,
            "-h" | "--help" => {
                return Err("usage: mpirun -n 2 mpi-pingpong [--reps N] [--max-size BYTES]".into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    mpi::init();
    let (rank, nranks) = mpi::rank_size();
    if let Some(secs) = args.ring {
        let mut hops = Vec::new();
        for _ in 0..args.reps {
            hops.push(vmmc_benches::ring::ring(
                rank as usize,
                nranks as usize,
                secs,
                |to, t| mpi::send(&t.to_ne_bytes(), to as i32),
                |from| {
                    let mut b = [0u8; 4];
                    mpi::recv(&mut b, from as i32);
                    u32::from_ne_bytes(b)
                },
            ));
        }
        mpi::finalize();
        if rank == 0 {
            println!("{{\"ring_hop_us\":{:.3}}}", vmmc_benches::median(&mut hops));
        }
        return ExitCode::SUCCESS;
    }
    if nranks != 2 {
        if rank == 0 {
            eprintln!("mpi-pingpong needs exactly 2 ranks (mpirun -n 2), got {nranks}");
        }
        mpi::finalize();
        return ExitCode::from(2);
    }
    let sizes = sizes_up_to(args.max_size);
    let mut buf = vec![0x5Au8; sizes.last().copied().unwrap_or(0).max(4)];
    let mut series = Series::new("mpi");
    // A warm-up of the whole job first, as nx-pingpong does: the first size measured must
    // not pay for the start.
    let warm_iters = calibrate(rank, &mut buf[..4]);
    for _ in 0..args.reps {
        round_trips(rank, &mut buf[..4], warm_iters);
    }
    for size in sizes {
        let msg = &mut buf[..size];
        // Warm-up: connections, registration caches, page faults on the buffers.
        round_trips(rank, msg, 100);
        let iters = calibrate(rank, msg);
        let secs: Vec<f64> = (0..args.reps)
            .map(|_| round_trips(rank, msg, iters))
            .collect();
        series
            .points
            .push(Sample::from_round_trip_secs(size, iters, &secs));
    }
    mpi::finalize();
    if rank == 0 {
        println!(
            "{}",
            serde_json::to_string(&series).expect("a series serialises")
        );
    }
    ExitCode::SUCCESS
}
