//! The ping-pong of seed 003 §3.4 over VMMC, run as two ranks:
//! `vmmc-run -n 2 -- pingpong [--reps R] [--max-size BYTES] [--json]`.
//!
//! Two processes bounce equally sized messages; one-way latency is half a round trip and
//! bandwidth is the message size over it. The strategies:
//! - `DU-0copy`: a deliberate update from the sender's user buffer straight into the
//!   receiver's buffer (a memfd mapping, written at user level); the receiver reads nothing.
//! - `DU-1copy`: the same, and the receiver copies the message out to a user buffer.
//! - `DU-syscall`: DU-0copy into ordinary process memory, one `process_vm_writev` per send
//!   (SHRIMP-I's kernel path).
//! - `AU-1copy`: the sender writes the message into its automatic-update region (the copy), which
//!   propagates it; the receiver reads nothing.
//! - `AU-2copy`: AU-1copy plus the receiver's copy out.
//!
//! The last word of each message carries a sequence number; the receiver spins on it (a
//! receiver that sees the last word sees the whole message).
//!
//! On the simulated SHRIMP (`vmmc-run -n 2 --transport sim -- pingpong`) times are virtual
//! and deterministic: each point is measured once over a fixed number of round trips, the
//! host-only series (cache-line, DU-syscall) are left out, and the AU strategies combine
//! stores as the hardware's bandwidth runs must have (`--au-combining on|off` chooses).

#![forbid(unsafe_code)]

use std::time::Duration;
use vmmc::pace;

/// The program's waits for a word, by the core's policy (as a VMMC program polls a flag).
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("pingpong");
use vmmc::{AuOptions, Endpoint, ExportOptions, MemKind, Proxy, Region};
use vmmc_benches::cacheline::cacheline_pingpong;
use vmmc_benches::stats::{median, sizes};

const BUF: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Du0,
    Du1,
    DuSys,
    Au1,
    Au2,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Du0 => "DU-0copy",
            Strategy::Du1 => "DU-1copy",
            Strategy::DuSys => "DU-syscall",
            Strategy::Au1 => "AU-1copy",
            Strategy::Au2 => "AU-2copy",
        }
    }
}

struct Side {
    ep: Endpoint,
    shared: Region,
    private: Region,
    to_shared: Proxy,
    to_private: Proxy,
    ctrl: Region,
    to_ctrl: Proxy,
    seq: u32,
}

fn wait_word(r: &Region, off: usize, want: u32, ep: &Endpoint, peer: vmmc::ProcId) {
    let mut n = 0u32;
    let mut wait = vmmc::wait::Wait::new(&WAIT_SITE);
    while r.load_u32(off).expect("in bounds") != want {
        n = n.wrapping_add(1);
        if wait.resting() || n.is_multiple_of(1 << 20) {
            ep.check_peer(peer).expect("peer died");
        }
        wait.idle();
    }
}

/// Runs `iters` round trips of `size` bytes; returns the elapsed time.
fn round_trips(
    s: &mut Side,
    st: Strategy,
    size: usize,
    iters: u32,
    combining: bool,
    mut each: Option<&mut Vec<f64>>,
) -> Duration {
    let me = s.ep.rank();
    let peer = s.ep.proc_of(1 - me).expect("peer");
    let last = size - 4;
    let mut msg = vec![0xA5u8; size];
    let mut sink = vec![0u8; size];
    let (dest_proxy, my_buf) = match st {
        Strategy::DuSys => (&s.to_private, &s.private),
        _ => (&s.to_shared, &s.shared),
    };
    let au = match st {
        Strategy::Au1 | Strategy::Au2 => Some(
            dest_proxy
                .bind_region(
                    s.ep.alloc(size, MemKind::Private).expect("alloc"),
                    0,
                    AuOptions {
                        combining,
                        notify: false,
                    },
                )
                .expect("bind"),
        ),
        _ => None,
    };
    let copy_out = matches!(st, Strategy::Du1 | Strategy::Au2);
    let start = pace::now_ns();
    for _ in 0..iters {
        let t0 = each.as_ref().map(|_| pace::now_ns());
        s.seq = s.seq.wrapping_add(1);
        let seq = s.seq;
        msg[last..].copy_from_slice(&seq.to_ne_bytes());
        let send = |msg: &[u8]| match &au {
            // A one-word message is a single store; longer ones a copy into the region.
            Some(b) if msg.len() == 4 => b
                .store_u32(0, u32::from_ne_bytes(msg.try_into().expect("a word")))
                .expect("AU store"),
            Some(b) => b.write(0, msg).expect("AU write"),
            None => dest_proxy.send(0, msg).expect("DU send"),
        };
        if me == 0 {
            send(&msg);
            wait_word(my_buf, last, seq, &s.ep, peer);
            if copy_out {
                my_buf.read(0, &mut sink).expect("copy out");
            }
        } else {
            wait_word(my_buf, last, seq, &s.ep, peer);
            if copy_out {
                my_buf.read(0, &mut sink).expect("copy out");
            }
            send(&msg);
        }
        if let (Some(v), Some(t0)) = (each.as_deref_mut(), t0) {
            v.push((pace::now_ns() - t0) as f64 / 2000.0);
        }
    }
    std::hint::black_box(&sink);
    Duration::from_nanos(pace::now_ns() - start)
}

fn main() -> Result<(), vmmc::Error> {
    let mut reps = 5usize;
    let mut max = BUF;
    let mut json = false;
    let mut only: Option<String> = None;
    let mut combining: Option<bool> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).expect("--reps N"),
            "--max-size" => {
                max = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--max-size BYTES")
            }
            "--json" => json = true,
            "--only" => only = args.next(),
            "--au-combining" => {
                combining = Some(match args.next().as_deref() {
                    Some("on") => true,
                    Some("off") => false,
                    _ => panic!("--au-combining on|off"),
                })
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let opts = Opts {
        reps,
        max,
        json,
        only,
        combining,
    };
    vmmc_run::run(|ep| bench(ep, &opts))
}

struct Opts {
    reps: usize,
    max: usize,
    json: bool,
    only: Option<String>,
    combining: Option<bool>,
}

fn bench(ep: Endpoint, o: &Opts) -> Result<(), vmmc::Error> {
    let (max, json) = (o.max, o.json);
    let only = o.only.clone();
    // Virtual time is deterministic: one repetition of a few round trips says it all.
    let sim = pace::is_paced();
    let reps = if sim { 1 } else { o.reps };
    let combining = o.combining.unwrap_or(sim);
    if ep.size() != 2 {
        eprintln!("pingpong needs exactly 2 ranks (vmmc-run -n 2 -- pingpong)");
        std::process::exit(2);
    }
    let shared = ep.alloc(BUF, MemKind::Shared)?;
    let private = ep.alloc(BUF, MemKind::Private)?;
    ep.export(1, &shared, ExportOptions::new())?;
    ep.export(2, &private, ExportOptions::new())?;
    let peer = ep.proc_of(1 - ep.rank())?;
    let ctrl = ep.alloc(64, MemKind::Shared)?;
    ep.export(3, &ctrl, ExportOptions::new())?;
    let to_shared = ep.import(peer, 1)?;
    let to_private = ep.import(peer, 2)?;
    let to_ctrl = ep.import(peer, 3)?;
    let mut side = Side {
        ep: ep.clone(),
        shared,
        private,
        to_shared,
        to_private,
        ctrl,
        to_ctrl,
        seq: 0,
    };
    if !sim && (only.is_none() || only.as_deref() == Some("cache-line")) {
        interleaved_cacheline(&mut side, reps, json);
    }
    let all: Vec<Strategy> = [
        Strategy::Au1,
        Strategy::Au2,
        Strategy::Du0,
        Strategy::Du1,
        Strategy::DuSys,
    ]
    .into_iter()
    .filter(|st| only.as_deref().is_none_or(|o| o == st.name()))
    .filter(|st| !(sim && *st == Strategy::DuSys))
    .collect();
    let sizes: Vec<usize> = sizes().into_iter().filter(|s| *s <= max.min(BUF)).collect();
    // Per size, the strategies take turns rep by rep, so a noisy period of the machine hits
    // them all alike. Both ranks move in lockstep; rank 0's iteration counts are agreed on.
    let mut lat: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); sizes.len()]; all.len()];
    for (si, &size) in sizes.iter().enumerate() {
        let mut iters = Vec::new();
        for &st in &all {
            let warm = round_trips(
                &mut side,
                st,
                size,
                if sim { 20 } else { 200 },
                combining,
                None,
            );
            let per = warm.as_secs_f64() / if sim { 20.0 } else { 200.0 };
            let n = if sim {
                31
            } else {
                ((0.02 / per.max(1e-9)) as u32).clamp(20, 200_000)
            };
            iters.push(agree(&mut side, n));
        }
        if sim {
            // Round trips one by one: the median drops the odd compute charge (a page
            // fault, an interrupt of the host) that would otherwise weigh on a mean.
            for (k, &st) in all.iter().enumerate() {
                round_trips(
                    &mut side,
                    st,
                    size,
                    iters[k],
                    combining,
                    Some(&mut lat[k][si]),
                );
            }
            continue;
        }
        for _ in 0..reps {
            for (k, &st) in all.iter().enumerate() {
                let t = round_trips(&mut side, st, size, iters[k], combining, None);
                lat[k][si].push(t.as_secs_f64() / (2.0 * iters[k] as f64) * 1e6);
            }
        }
    }
    if ep.rank() == 0 {
        for (k, st) in all.iter().enumerate() {
            let points: Vec<(usize, f64, f64)> = sizes
                .iter()
                .enumerate()
                .map(|(si, &size)| {
                    let l = median(&mut lat[k][si]);
                    (size, l, size as f64 / l) // bytes/us = MB/s
                })
                .collect();
            if json {
                let pts: Vec<String> = points
                    .iter()
                    .map(|(s, l, b)| {
                        format!("{{\"size\":{s},\"latency_us\":{l:.4},\"bandwidth_mbs\":{b:.2}}}")
                    })
                    .collect();
                println!(
                    "{{\"series\":\"{}\",\"points\":[{}]}}",
                    st.name(),
                    pts.join(",")
                );
            } else {
                println!("{}", st.name());
                for (s, l, b) in &points {
                    println!("  {s:>8} B  {l:>9.3} us  {b:>9.1} MB/s");
                }
            }
        }
    }
    Ok(())
}

/// DU-0copy for one word, alternated rep by rep with the two-thread cache-line ping-pong run
/// by rank 0 while rank 1 sleeps in the kernel (a blocking import of a buffer rank 0 exports
/// when it is done), so both see the same machine. Prints the "cache-line" series.
fn interleaved_cacheline(s: &mut Side, reps: usize, json: bool) {
    let mut du = Vec::new();
    let mut cl = Vec::new();
    let iters = agree(s, 100_000);
    for k in 0..reps as u32 {
        let t = round_trips(s, Strategy::Du0, 4, iters, false, None);
        du.push(t.as_secs_f64() / (2.0 * iters as f64) * 1e6);
        let id = 1000 + k;
        if s.ep.rank() == 0 {
            cl.push(cacheline_pingpong(u64::from(iters.max(200_000))) / 1000.0);
            let r = s.ep.alloc(4, MemKind::Private).expect("alloc");
            s.ep.export(id, &r, ExportOptions::new()).expect("export");
        } else {
            let peer = s.ep.proc_of(0).expect("peer");
            let p = s.ep.import(peer, id).expect("import");
            s.ep.unimport(p).expect("unimport");
        }
    }
    if s.ep.rank() == 0 {
        let (d, c) = (median(&mut du), median(&mut cl));
        if json {
            println!(
                "{{\"series\":\"cache-line\",\"points\":[{{\"size\":4,\"latency_us\":{c:.4},\"bandwidth_mbs\":{:.2}}}]}}",
                4.0 / c
            );
            println!(
                "{{\"series\":\"DU-0copy (interleaved)\",\"points\":[{{\"size\":4,\"latency_us\":{d:.4},\"bandwidth_mbs\":{:.2}}}]}}",
                4.0 / d
            );
        } else {
            println!(
                "interleaved 4 B: DU-0copy {d:.4} us, cache-line {c:.4} us, ratio {:.3}",
                d / c
            );
        }
    }
}

/// Rank 0's iteration count wins: it sends it in the last word of a 4-byte DU message.
fn agree(s: &mut Side, iters: u32) -> u32 {
    // A separate control buffer, away from the messages.
    let off = 0;
    let peer = s.ep.proc_of(1 - s.ep.rank()).expect("peer");
    if s.ep.rank() == 0 {
        s.to_ctrl.send(off, &iters.to_ne_bytes()).expect("send");
        // Wait for the acknowledgement (the peer echoes it back).
        wait_word(&s.ctrl, off, iters, &s.ep, peer);
        s.ctrl.store_u32(off, 0).expect("reset");
        iters
    } else {
        let mut n = 0u32;
        let mut wait = vmmc::wait::Wait::new(&WAIT_SITE);
        let v = loop {
            let v = s.ctrl.load_u32(off).expect("read");
            if v != 0 {
                break v;
            }
            n = n.wrapping_add(1);
            if wait.resting() || n.is_multiple_of(1 << 20) {
                s.ep.check_peer(peer).expect("peer died");
            }
            wait.idle();
        };
        s.ctrl.store_u32(off, 0).expect("reset");
        s.to_ctrl.send(off, &v.to_ne_bytes()).expect("send");
        v
    }
}
