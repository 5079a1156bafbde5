//! The mpi transport beside MPI itself, in one MPI job of two ranks, side by side:
//!
//! - **DU one-way latency** (8 B) and **1 MiB bandwidth**: rank 0 sends deliberate updates
//!   into rank 1's exported buffer back to back, each returning when its data is visible at
//!   rank 1, against `MPI_Put` + `MPI_Win_flush` in a loop — `osu_put_latency`'s method —
//!   into a window of each flavour: `MPI_Win_create_dynamic` (where the transport's receive
//!   buffers live) and `MPI_Win_allocate`.
//!   On one node the transport's DU into pool memory is a store into a shared window mapped
//!   at the sender (`MPI_Win_allocate_shared`); `VMMC_MPI_DIRECT=0` measures its puts.
//! - **NX ping-pong** over the transport (csend/crecv) against `MPI_Send`/`MPI_Recv`
//!   (two-sided), 8 B one-way (half the round trip) and 1 MiB bandwidth, with NX's
//!   registration cache on (`NX_REGCACHE=0` turns it off), as MPI keeps its own.
//!
//! Every contender runs once per round, in turn, for `--rounds` rounds (default 5), each
//! measurement about `--ms` milliseconds; the table gives the medians and the ratios
//! ("times worse than MPI"; targets: DU 1.2, NX 1.5). `bench-mpi` starts itself under
//! `mpirun -n 2` (with `--oversubscribe`, and `--allow-run-as-root` as root).

use std::ffi::{c_int, c_void};
use std::process::{Command, ExitCode};
use std::time::Instant;
use vmmc::{ExportOptions, MemKind};

mod mpi {
    //! The MPI calls of the baselines, behind safe functions (blocking, made between the
    //! transport's MPI_Init and the process's exit).
    use super::*;
    use mpi_sys as ffi;

    fn check(rc: c_int, what: &str) {
        assert_eq!(rc, 0, "{what} failed with MPI error {rc}");
    }

    pub fn barrier() {
        // SAFETY: MPI is initialised (by the transport).
        check(
            unsafe { ffi::MPI_Barrier(ffi::RSMPI_COMM_WORLD) },
            "MPI_Barrier",
        );
    }

    pub fn bcast_f64(v: &mut f64) {
        // SAFETY: one f64, valid for the blocking call.
        let rc = unsafe {
            ffi::MPI_Bcast(
                (v as *mut f64).cast::<c_void>(),
                1,
                ffi::RSMPI_DOUBLE,
                0,
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Bcast");
    }

    pub fn send(buf: &[u8], to: i32) {
        // SAFETY: `buf` is valid for reads during the blocking call.
        let rc = unsafe {
            ffi::MPI_Send(
                buf.as_ptr().cast::<c_void>(),
                buf.len() as c_int,
                ffi::RSMPI_UINT8_T,
                to,
                7,
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Send");
    }

    pub fn recv(buf: &mut [u8], from: i32) {
        // SAFETY: `buf` is valid for writes of its length during the blocking call.
        let rc = unsafe {
            ffi::MPI_Recv(
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len() as c_int,
                ffi::RSMPI_UINT8_T,
                from,
                7,
                ffi::RSMPI_COMM_WORLD,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        check(rc, "MPI_Recv");
    }

    /// A window in a passive epoch to every rank, and where rank 1's target memory is.
    pub struct Win {
        w: ffi::MPI_Win,
        disp: isize,
        _mem: Vec<u8>,
    }

    impl Win {
        pub fn allocate(len: usize) -> Win {
            // SAFETY: a null handle, overwritten by the call.
            let mut w = unsafe { ffi::RSMPI_WIN_NULL };
            let mut base: *mut u8 = std::ptr::null_mut();
            // SAFETY: `base` and `w` receive the memory and the window; then the epoch.
            let rc = unsafe {
                ffi::MPI_Win_allocate(
                    len as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    ffi::RSMPI_COMM_WORLD,
                    (&mut base as *mut *mut u8).cast::<c_void>(),
                    &mut w,
                ) | ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w)
            };
            check(rc, "MPI_Win_allocate");
            Win {
                w,
                disp: 0,
                _mem: Vec::new(),
            }
        }

        pub fn dynamic(len: usize) -> Win {
            // SAFETY: a null handle, overwritten by the call.
            let mut w = unsafe { ffi::RSMPI_WIN_NULL };
            let mut mem = vec![0u8; len];
            let mut addr: ffi::MPI_Aint = 0;
            // SAFETY: `mem` stays alive (in the returned Win) while attached; the window
            // is never freed before the process exits.
            let rc = unsafe {
                ffi::MPI_Win_create_dynamic(ffi::RSMPI_INFO_NULL, ffi::RSMPI_COMM_WORLD, &mut w)
                    | ffi::MPI_Win_attach(w, mem.as_mut_ptr().cast(), len as ffi::MPI_Aint)
                    | ffi::MPI_Get_address(mem.as_ptr().cast(), &mut addr)
                    | ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w)
            };
            check(rc, "MPI_Win_create_dynamic");
            let mut mine = addr as f64;
            let mut all = [0f64; 2];
            // Rank 1's address, to every rank (exact in an f64 below 2^53).
            // SAFETY: one f64 in, two out, valid for the blocking call.
            let rc = unsafe {
                ffi::MPI_Allgather(
                    (&mut mine as *mut f64).cast::<c_void>(),
                    1,
                    ffi::RSMPI_DOUBLE,
                    all.as_mut_ptr().cast::<c_void>(),
                    1,
                    ffi::RSMPI_DOUBLE,
                    ffi::RSMPI_COMM_WORLD,
                )
            };
            check(rc, "MPI_Allgather");
            Win {
                w,
                disp: all[1] as isize,
                _mem: mem,
            }
        }

        /// Put + flush to rank 1, `iters` times; seconds.
        pub fn puts(&self, data: &[u8], iters: u64) -> f64 {
            let t = Instant::now();
            for _ in 0..iters {
                // SAFETY: `data` is valid until the flush completes the put.
                let rc = unsafe {
                    ffi::MPI_Put(
                        data.as_ptr().cast::<c_void>(),
                        data.len() as c_int,
                        ffi::RSMPI_UINT8_T,
                        1,
                        self.disp as ffi::MPI_Aint,
                        data.len() as c_int,
                        ffi::RSMPI_UINT8_T,
                        self.w,
                    ) | ffi::MPI_Win_flush(1, self.w)
                };
                check(rc, "MPI_Put/flush");
            }
            t.elapsed().as_secs_f64()
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `f(iters)` (returning seconds) with rank 0's calibration shared, so that a
/// measurement lasts about `ms`; returns microseconds per iteration (rank 0's).
fn timed(rank: usize, ms: f64, mut f: impl FnMut(u64) -> f64) -> f64 {
    let mut n = 4u64;
    let iters = loop {
        mpi::barrier();
        let mut t = f(n);
        mpi::bcast_f64(&mut t);
        if t >= ms / 1e3 / 10.0 || n >= 1 << 24 {
            break ((ms / 1e3 / t * n as f64) as u64).max(1);
        }
        n *= 4;
    };
    mpi::barrier();
    let t = f(iters);
    let mut us = t / iters as f64 * 1e6;
    mpi::bcast_f64(&mut us);
    let _ = rank;
    us
}

fn under_mpirun() -> bool {
    std::env::var("OMPI_COMM_WORLD_RANK").is_ok() || std::env::var("PMI_RANK").is_ok()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str, default: f64| -> f64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    if !under_mpirun() {
        let mut c = Command::new(std::env::var("VMMC_MPIRUN").unwrap_or_else(|_| "mpirun".into()));
        c.args(["-n", "2", "--oversubscribe", "--bind-to", "core"]);
        // SAFETY: geteuid has no memory effects.
        if unsafe { libc::geteuid() } == 0 {
            c.arg("--allow-run-as-root");
        }
        for v in ["NX_REGCACHE", "VMMC_MPI_DIRECT"] {
            if std::env::var_os(v).is_some() {
                c.args(["-x", v]);
            }
        }
        c.args(["-x", "VMMC_TRANSPORT=mpi"])
            .env("VMMC_TRANSPORT", "mpi")
            .args(&args);
        return match c.status() {
            Ok(s) if s.success() => ExitCode::SUCCESS,
            Ok(s) => {
                eprintln!("bench-mpi: mpirun: {s}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("bench-mpi: cannot run mpirun: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rounds = opt("--rounds", 5.0) as usize;
    let ms = opt("--ms", 100.0);
    let ep = vmmc_run::init().expect("join the job on the mpi transport");
    let mapped = vmmc_mpi::pool_mapped();
    assert_eq!(ep.size(), 2, "bench-mpi runs on 2 ranks");
    let rank = ep.rank();
    const MIB: usize = 1 << 20;
    let src = vec![7u8; MIB];
    // The contenders' targets at rank 1.
    let region = ep.alloc(MIB, MemKind::Shared).expect("alloc");
    if rank == 1 {
        ep.export(1, &region, ExportOptions::new()).expect("export");
    }
    let proxy = (rank == 0).then(|| {
        ep.import(ep.proc_of(1).expect("rank 1"), 1)
            .expect("import")
    });
    let dynw = mpi::Win::dynamic(MIB);
    let allw = mpi::Win::allocate(MIB);
    // NX with its registration cache, as C programs get it from libnx by default and as MPI
    // keeps its own (a zero-copy receive otherwise exports and the sender imports its memory
    // for every message, which on this transport is a window attach and a round trip to the
    // trusted party); `NX_REGCACHE=0` measures without it.
    let mut nx_cfg = nx::Config::from_env().expect("NX settings");
    if std::env::var_os("NX_REGCACHE").is_none() {
        nx_cfg.reg_cache = true;
    }
    let nx_cache = nx_cfg.reg_cache;
    let nx = nx::Nx::with_config(ep.clone(), nx_cfg).expect("NX over the endpoint");
    let mut rows: Vec<(&str, Vec<f64>)> = [
        "DU 8 B (us)",
        "MPI_Put+flush dynamic 8 B (us)",
        "MPI_Put+flush allocate 8 B (us)",
        "DU 1 MiB (us)",
        "MPI_Put+flush dynamic 1 MiB (us)",
        "MPI_Put+flush allocate 1 MiB (us)",
        "NX 8 B one-way (us)",
        "MPI two-sided 8 B one-way (us)",
        "NX 1 MiB one-way (us)",
        "MPI two-sided 1 MiB one-way (us)",
    ]
    .into_iter()
    .map(|n| (n, Vec::new()))
    .collect();
    let mut buf = vec![0u8; MIB];
    for _ in 0..rounds {
        for (i, size) in [8usize, MIB].into_iter().enumerate() {
            let d = &src[..size];
            rows[3 * i].1.push(timed(rank, ms, |n| {
                let t = Instant::now();
                if let Some(p) = &proxy {
                    for _ in 0..n {
                        p.send(0, d).expect("DU");
                    }
                }
                t.elapsed().as_secs_f64()
            }));
            rows[3 * i + 1].1.push(timed(rank, ms, |n| {
                if rank == 0 {
                    dynw.puts(d, n)
                } else {
                    0.0
                }
            }));
            rows[3 * i + 2].1.push(timed(rank, ms, |n| {
                if rank == 0 {
                    allw.puts(d, n)
                } else {
                    0.0
                }
            }));
        }
        for (i, size) in [8usize, MIB].into_iter().enumerate() {
            let b = &mut buf[..size];
            rows[6 + 2 * i].1.push(
                timed(rank, ms, |n| {
                    let t = Instant::now();
                    for _ in 0..n {
                        if rank == 0 {
                            nx.csend(1, b, 1, 0).expect("csend");
                            nx.crecv(1, b).expect("crecv");
                        } else {
                            nx.crecv(1, b).expect("crecv");
                            nx.csend(1, b, 0, 0).expect("csend");
                        }
                    }
                    t.elapsed().as_secs_f64()
                }) / 2.0,
            );
            rows[7 + 2 * i].1.push(
                timed(rank, ms, |n| {
                    let t = Instant::now();
                    for _ in 0..n {
                        if rank == 0 {
                            mpi::send(b, 1);
                            mpi::recv(b, 1);
                        } else {
                            mpi::recv(b, 0);
                            mpi::send(b, 0);
                        }
                    }
                    t.elapsed().as_secs_f64()
                }) / 2.0,
            );
        }
    }
    nx.gsync().expect("gsync");
    if rank == 0 {
        let m: Vec<f64> = rows.iter().map(|(_, v)| median(v.clone())).collect();
        println!(
            "bench-mpi: 2 ranks under mpirun, {rounds} rounds, medians; NX's registration cache {}",
            if nx_cache {
                "on"
            } else {
                "off (NX_REGCACHE=0)"
            }
        );
        println!(
            "DU path: {}",
            if mapped {
                "stores into rank 1's pool, an MPI_Win_allocate_shared window mapped here (both \
                 ranks on one node; VMMC_MPI_DIRECT=0 for MPI_Put + flush)"
            } else {
                "MPI_Put + MPI_Win_flush (VMMC_MPI_DIRECT=0, or ranks on two nodes)"
            }
        );
        println!("| measurement | median | all rounds |");
        println!("|---|---|---|");
        for ((name, v), med) in rows.iter().zip(&m) {
            let all: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            println!("| {name} | {med:.3} | {} |", all.join(" "));
        }
        let mbs = |us: f64| MIB as f64 / us;
        println!();
        println!(
            "DU 1 MiB bandwidth {:.0} MB/s; MPI_Put dynamic {:.0} MB/s, allocate {:.0} MB/s",
            mbs(m[3]),
            mbs(m[4]),
            mbs(m[5])
        );
        println!(
            "NX 1 MiB bandwidth {:.0} MB/s; MPI two-sided {:.0} MB/s",
            mbs(m[8]),
            mbs(m[9])
        );
        println!();
        // Per round, the contenders ran back to back: the median of the rounds' ratios is
        // steadier than the ratio of medians on a noisy machine.
        let per_round = |a: usize, b: usize| -> f64 {
            median(
                rows[a]
                    .1
                    .iter()
                    .zip(&rows[b].1)
                    .map(|(x, y)| x / y)
                    .collect(),
            )
        };
        println!(
            "| ratio (times worse than MPI) | vs dynamic window | vs allocated window | \
             per-round median (vs allocated) | target |"
        );
        println!("|---|---|---|---|---|");
        println!(
            "| DU 8 B latency | {:.2} | {:.2} | {:.2} | 1.2 |",
            m[0] / m[1],
            m[0] / m[2],
            per_round(0, 2)
        );
        println!(
            "| DU 1 MiB bandwidth | {:.2} | {:.2} | {:.2} | 1.2 |",
            m[3] / m[4],
            m[3] / m[5],
            per_round(3, 5)
        );
        println!(
            "| NX 8 B latency vs MPI two-sided | {:.2} | | {:.2} | 1.5 |",
            m[6] / m[7],
            per_round(6, 7)
        );
        println!(
            "| NX 1 MiB bandwidth vs MPI two-sided | {:.2} | | {:.2} | 1.5 |",
            m[8] / m[9],
            per_round(8, 9)
        );
    }
    drop(nx);
    drop(proxy);
    ExitCode::SUCCESS
}
