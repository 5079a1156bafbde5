//! The rdma transport's ping-pong and bandwidth, two processes: `cargo bench -p vmmc-rdma
//! --bench pingpong`.
//!
//! With `VMMC_RDMA_DEVICE=<name>` it runs on that device and prints the measured figures
//! beside public figures for a ConnectX-class NIC. Without one it runs on the stand-in
//! provider, where the figures mean nothing (the stand-in copies with `process_vm_writev`):
//! it then checks that every message arrives intact and says so, and nothing more.
//!
//! The ping-pong is SHRIMP's: a deliberate update whose last word is the flag, which the
//! receiver polls, then the same back; one-way = round trip / 2. Bandwidth: 1 MiB deliberate
//! updates back to back, then an acknowledgement.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::Sync;
use vmmc::{Endpoint, ExportOptions, MemKind, Region};
use vmmc_rdma::RdmaTransport;

const ROLE: &str = "VMMC_RDMA_BENCH_RANK";
const SIZES: &[usize] = &[8, 64, 512, 4096, 65536];
const BIG: usize = 1 << 20;

/// Public figures for a ConnectX-class NIC, with their sources.
const REFERENCES: &[(&str, &str, &str)] = &[
    (
        "RDMA latency, 1 B",
        "1.2 us",
        "Azure HBv3 (ConnectX-6, HDR 200 Gb/s InfiniBand), docs.azure.cn/en-us/virtual-machines/hbv3-performance",
    ),
    (
        "MPI one-way, 8 B",
        "0.98 us",
        "OSU osu_latency over UCX on InfiniBand, gist.github.com/jfgrimm/3af692a5475bdd4ed836b5a18197a209",
    ),
    (
        "ib_write_bw, EDR 4x",
        "96.6 Gb/s (12.1 GB/s)",
        "perftest on ConnectX EDR, forums.developer.nvidia.com/t/theortical-bandwidth-and-latency-of-nic/273376",
    ),
    (
        "link rate, HDR 4x",
        "200 Gb/s (25 GB/s)",
        "InfiniBand HDR, 4 lanes of 50 Gb/s",
    ),
];

fn wait_word(r: &Region, off: usize, want: u32, ep: &Endpoint) -> Result<(), String> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if r.load_u32(off).map_err(|e| e.to_string())? == want {
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            ep.check_peer(ep.proc_of(1 - ep.rank()).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("no word {want} at {off} in 60 s"));
            }
            std::thread::yield_now();
        }
    }
}

fn stamp(buf: &mut [u8], v: u32) {
    for w in buf.chunks_exact_mut(4) {
        w.copy_from_slice(&v.to_ne_bytes());
    }
}

fn rank_main(device: bool) -> Result<(), String> {
    let t = Arc::new(
        BootEnv::from_env()
            .and_then(|env| RdmaTransport::connect(&env))
            .map_err(|e| format!("bootstrap: {e}"))?,
    );
    let ep = Endpoint::new(t.clone()).map_err(|e| e.to_string())?;
    let me = ep.rank();
    let mine = ep.alloc(BIG, MemKind::Private).map_err(|e| e.to_string())?;
    ep.export(1, &mine, ExportOptions::new())
        .map_err(|e| e.to_string())?;
    let mut sync = Sync::new(&ep)?;
    sync.barrier()?;
    let peer = ep
        .import(ep.proc_of(1 - me).map_err(|e| e.to_string())?, 1)
        .map_err(|e| e.to_string())?;
    let reps = if device { 10_000 } else { 200 };
    let mut seq = 0u32;
    let mut msg = vec![0u8; BIG];
    let mut got = vec![0u8; BIG];
    let mut rows = Vec::new();
    for &size in SIZES {
        sync.barrier()?;
        let start = Instant::now();
        for i in 0..reps {
            seq += 1;
            let last = size - 4;
            // Every message arrives whole: checked on the first and the last round, before
            // the reply (after it the peer may overwrite the buffer).
            let check = |got: &mut [u8]| -> Result<(), String> {
                if i == 0 || i == reps - 1 {
                    mine.read(0, &mut got[..size]).map_err(|e| e.to_string())?;
                    if got[..size].chunks_exact(4).any(|w| w != seq.to_ne_bytes()) {
                        return Err(format!("{size} B message {seq} arrived damaged"));
                    }
                }
                Ok(())
            };
            if me == 0 {
                stamp(&mut msg[..size], seq);
                peer.send(0, &msg[..size]).map_err(|e| e.to_string())?;
                wait_word(&mine, last, seq, &ep)?;
                check(&mut got)?;
            } else {
                wait_word(&mine, last, seq, &ep)?;
                check(&mut got)?;
                stamp(&mut msg[..size], seq);
                peer.send(0, &msg[..size]).map_err(|e| e.to_string())?;
            }
        }
        rows.push((
            size,
            start.elapsed().as_secs_f64() * 1e6 / reps as f64 / 2.0,
        ));
    }
    // Bandwidth: rank 0 streams, rank 1 acknowledges the last.
    let n = if device { 2000 } else { 20 };
    sync.barrier()?;
    let start = Instant::now();
    if me == 0 {
        for _ in 0..n {
            seq += 1;
            msg[BIG - 4..].copy_from_slice(&seq.to_ne_bytes());
            peer.send(0, &msg).map_err(|e| e.to_string())?;
        }
        wait_word(&mine, 0, seq, &ep)?;
    } else {
        seq += n;
        wait_word(&mine, BIG - 4, seq, &ep)?;
        peer.send(0, &seq.to_ne_bytes())
            .map_err(|e| e.to_string())?;
    }
    let secs = start.elapsed().as_secs_f64();
    sync.barrier()?;
    if me == 0 {
        let gbs = (n as f64 * BIG as f64) / secs / 1e9;
        let s = t.rdma_stats();
        let lib = vmmc_rdma::verbs::Lib::get()
            .map(|l| l.path.clone())
            .unwrap_or_default();
        println!(
            "vmmc-rdma ping-pong on device {} through {lib} ({})",
            t.device_name(),
            if device {
                "VMMC_RDMA_DEVICE"
            } else {
                "the stand-in provider: correctness only, the figures mean nothing"
            }
        );
        println!("{:>8}  {:>12}", "bytes", "one-way us");
        for (size, us) in &rows {
            println!("{size:>8}  {us:>12.2}");
        }
        println!("1 MiB deliberate updates back to back: {gbs:.2} GB/s");
        println!(
            "RDMA traffic of rank 0: {} writes, {} bytes, {} doorbell reads",
            s.writes, s.bytes_written, s.bell_reads
        );
        if device {
            println!();
            println!("References for a ConnectX-class NIC (public figures):");
            for (what, fig, src) in REFERENCES {
                println!("  {what:<22} {fig:<22} {src}");
            }
            println!(
                "Expect: 8 B one-way about 3x the device's write latency (a send waits for the\n\
                 body's completion, then writes the last word), so 2-4 us on ConnectX; 1 MiB\n\
                 below the link rate (each piece is copied to one staging buffer and waited for)."
            );
        } else {
            println!("every message arrived intact");
        }
    }
    drop(ep);
    Ok(())
}

fn main() {
    let device = std::env::var("VMMC_RDMA_DEVICE").is_ok_and(|d| !d.is_empty());
    if std::env::var(ROLE).is_ok() {
        if let Err(e) = rank_main(device) {
            eprintln!(
                "rank {}: {e}",
                std::env::var(vars::RANK).unwrap_or_default()
            );
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let fabric = std::env::temp_dir().join(format!("vmmc-rdma-bench-{}", std::process::id()));
    let mut extra: Vec<(String, String)> = Vec::new();
    if !device {
        let lib = exe
            .parent()
            .map(|d| d.join("libvmmc_rdma_standin.so"))
            .filter(|p| p.exists());
        let Some(lib) = lib else {
            eprintln!(
                "no device (VMMC_RDMA_DEVICE) and no stand-in library next to {}",
                exe.display()
            );
            std::process::exit(2);
        };
        std::fs::create_dir_all(&fabric).expect("fabric directory");
        extra.push(("VMMC_RDMA_LIB".into(), lib.display().to_string()));
        extra.push(("VMMC_RDMA_STANDIN_DIR".into(), fabric.display().to_string()));
    }
    let rv = vmmc_tcp::server::Rendezvous::start("127.0.0.1:0", 2).expect("rendezvous");
    let mut kids = Vec::new();
    for rank in 0..2 {
        let mut c = Command::new(&exe);
        c.env(ROLE, "1")
            .env(vars::TRANSPORT, "rdma")
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, "2")
            .env(vars::RENDEZVOUS, rv.addr().to_string())
            .env(vmmc_tcp::RENDEZVOUS_BY, "launcher")
            .env(vars::JOB, "bench")
            .stdin(Stdio::null());
        for (k, v) in &extra {
            c.env(k, v);
        }
        kids.push(c.spawn().expect("spawn a rank"));
    }
    // Wait for both ranks, whatever the first one's fate.
    let done: Vec<bool> = kids
        .iter_mut()
        .map(|k| k.wait().map(|s| s.success()).unwrap_or(false))
        .collect();
    let ok = done.iter().all(|&b| b);
    let _ = std::fs::remove_dir_all(&fabric);
    std::process::exit(if ok { 0 } else { 1 });
}
