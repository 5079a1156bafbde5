//! The MPI baseline: the same ping-pong between two ranks with `MPI_Send`/`MPI_Recv`
//! (two-sided), through `mpi-sys` against the installed MPI:
//! `mpirun -n 2 mpi-pingpong [--reps R] [--max-size BYTES]`. Rank 0 prints one JSON line.

use std::time::Instant;
use vmmc_benches::stats::{median, sizes};

mod mpi {
    //! The few MPI calls used, behind safe functions.
    use mpi_sys as ffi;
    use std::ffi::c_void;

    pub fn init() {
        // SAFETY: called once, before any other MPI call; null argc/argv is allowed.
        unsafe { ffi::MPI_Init(std::ptr::null_mut(), std::ptr::null_mut()) };
    }
    pub fn rank_size() -> (i32, i32) {
        let (mut r, mut s) = (0, 0);
        // SAFETY: MPI is initialised; the out-pointers are valid.
        unsafe {
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut r);
            ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut s);
        }
        (r, s)
    }
    pub fn send(buf: &[u8], to: i32) {
        // SAFETY: `buf` is valid for its length for the duration of the blocking call.
        unsafe {
            ffi::MPI_Send(buf.as_ptr() as *const c_void, buf.len() as i32, ffi::RSMPI_UINT8_T, to, 0, ffi::RSMPI_COMM_WORLD)
        };
    }
    pub fn recv(buf: &mut [u8], from: i32) {
        // SAFETY: `buf` is valid and writable for its length during the blocking call.
        unsafe {
            ffi::MPI_Recv(
                buf.as_mut_ptr() as *mut c_void,
                buf.len() as i32,
                ffi::RSMPI_UINT8_T,
                from,
                0,
                ffi::RSMPI_COMM_WORLD,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
    }
    pub fn bcast_u32(v: &mut u32) {
        // SAFETY: a valid u32 for the duration of the call.
        unsafe { ffi::MPI_Bcast(v as *mut u32 as *mut c_void, 1, ffi::RSMPI_UINT32_T, 0, ffi::RSMPI_COMM_WORLD) };
    }
    pub fn finalize() {
        // SAFETY: after every other MPI call.
        unsafe { ffi::MPI_Finalize() };
    }
}

fn round_trips(rank: i32, size: usize, iters: u32, buf: &mut [u8]) -> f64 {
    let peer = 1 - rank;
    let start = Instant::now();
    for _ in 0..iters {
        if rank == 0 {
            mpi::send(&buf[..size], peer);
            mpi::recv(&mut buf[..size], peer);
        } else {
            mpi::recv(&mut buf[..size], peer);
            mpi::send(&buf[..size], peer);
        }
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let mut reps = 5usize;
    let mut max = 1usize << 20;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).expect("--reps N"),
            "--max-size" => max = args.next().and_then(|v| v.parse().ok()).expect("--max-size BYTES"),
            other => panic!("unknown argument {other}"),
        }
    }
    mpi::init();
    let (rank, size) = mpi::rank_size();
    if size != 2 {
        eprintln!("mpi-pingpong needs exactly 2 ranks");
        mpi::finalize();
        std::process::exit(2);
    }
    let mut buf = vec![0x5Au8; max.max(4)];
    let mut points = Vec::new();
    for s in sizes().into_iter().filter(|s| *s <= max) {
        let warm = round_trips(rank, s, 200, &mut buf);
        let mut iters = ((0.04 / (warm / 200.0).max(1e-9)) as u32).clamp(20, 200_000);
        mpi::bcast_u32(&mut iters);
        let mut lat: Vec<f64> = (0..reps)
            .map(|_| round_trips(rank, s, iters, &mut buf) / (2.0 * iters as f64) * 1e6)
            .collect();
        let l = median(&mut lat);
        points.push(format!("{{\"size\":{s},\"latency_us\":{l:.4},\"bandwidth_mbs\":{:.2}}}", s as f64 / l));
    }
    if rank == 0 {
        println!("{{\"series\":\"MPI\",\"points\":[{}]}}", points.join(","));
    }
    mpi::finalize();
}
