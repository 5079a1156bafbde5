//! The tcp transport beside kernel TCP, in one run: 8 B one-way latency (ping-pong, half the
//! round trip) and 1 MiB bandwidth (a stream of 1 MiB deliberate updates, or `write_all`s,
//! then a one-word acknowledgement), over loopback and, where network namespaces can be made
//! (root, iproute2), between two namespaces joined by a veth pair. Each contender is a job of
//! two processes (this program re-run as the ranks: under `vmmc-run -n 2` on loopback, through
//! `ip netns exec` between namespaces), with the ranks bound to CPUs (rank k on the k-th, as
//! `vmmc-run` does by default) and left free to the scheduler; the contenders alternate for
//! several rounds and each figure is the median over the rounds. iperf3 (one stream, 1 s),
//! where installed, runs in each round at the same place. Prints the table and the ratios
//! against kernel TCP and iperf3 (target: within 1.5x), writes `tcp.json`.
//!
//! `bench-tcp [--rounds K] [--quick] [--no-netns] [--out DIR]`

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use vmmc::{ExportOptions, MemKind};
use vmmc_benches::stats::median;

/// Size of a bandwidth message.
const BULK: usize = 1 << 20;
/// Size of a latency message.
const SMALL: usize = 8;
/// Turns a VMMC rank spins on a flag before it starts yielding.
const SPIN: u32 = 256;

/// What one job measures: round trips of SMALL bytes, then `bulk` messages of BULK bytes.
#[derive(Clone, Copy)]
struct Work {
    trips: u32,
    bulk: u32,
}

fn result_line(oneway_us: f64, mbs: f64) {
    println!("result oneway_us={oneway_us:.3} mbs={mbs:.1}");
}

fn parse_result(out: &Output) -> Result<(f64, f64), String> {
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s
        .lines()
        .find_map(|l| l.split("result ").nth(1))
        .ok_or_else(|| {
            format!(
                "no result ({})\n{s}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let get = |k: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
    };
    match (get("oneway_us="), get("mbs=")) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(format!("bad result line {line:?}")),
    }
}

fn rank_env() -> usize {
    std::env::var("VMMC_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .expect("VMMC_RANK")
}

/// A rank of the VMMC job: the job's transport comes from the environment.
fn vmmc_rank(w: Work) {
    let ep = vmmc_run::init().expect("join the job");
    assert_eq!(ep.transport_name(), "tcp", "the job must run on tcp");
    let me = ep.rank();
    let peer = ep.proc_of(1 - me).expect("peer");
    // [0, BULK): bulk data; BULK: the ping-pong message (its last word the sequence number);
    // BULK + 16: the number of bulk messages; BULK + 32: the acknowledgement.
    let (ping, count, ack) = (BULK, BULK + 16, BULK + 32);
    let r = ep.alloc(BULK + 64, MemKind::Shared).expect("alloc");
    ep.export(1, &r, ExportOptions::new()).expect("export");
    let p = ep.import(peer, 1).expect("import");
    // Spin briefly, then yield at every turn: the data is placed by this process's progress
    // thread, which must get a CPU while this one waits (the kernel's ranks sleep in recv).
    let wait = |off: usize, want: u32| {
        let mut n = 0u32;
        while r.load_u32(off).expect("in bounds") != want {
            n = n.wrapping_add(1);
            if n.is_multiple_of(1 << 16) {
                ep.check_peer(peer).expect("peer lost");
            }
            if n > SPIN {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    };
    let warm = (w.trips / 10).max(10);
    let msg = |i: u32| [i.to_ne_bytes(), i.to_ne_bytes()].concat();
    let mut t0 = Instant::now();
    for i in 1..=warm + w.trips {
        if i == warm + 1 {
            t0 = Instant::now();
        }
        if me == 0 {
            p.send(ping, &msg(i)).expect("ping");
            wait(ping + 4, i);
        } else {
            wait(ping + 4, i);
            p.send(ping, &msg(i)).expect("pong");
        }
    }
    let oneway_us = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * f64::from(w.trips));
    let data = vec![0x5Au8; BULK];
    if me == 0 {
        let t0 = Instant::now();
        for _ in 0..w.bulk {
            p.send(0, &data).expect("bulk");
        }
        p.send(count, &w.bulk.to_ne_bytes()).expect("count");
        wait(ack, 1);
        let secs = t0.elapsed().as_secs_f64();
        result_line(oneway_us, f64::from(w.bulk) * BULK as f64 / secs / 1e6);
    } else {
        wait(count, w.bulk);
        p.send(ack, &1u32.to_ne_bytes()).expect("ack");
        // Leave only once rank 0 has the acknowledgement.
        wait(ping + 4, w.trips + warm + 1);
    }
    if me == 0 {
        p.send(ping, &msg(w.trips + warm + 1)).expect("bye");
    }
}

/// A rank of the kernel TCP job: rank 0 listens at `addr`, rank 1 connects.
fn kernel_rank(addr: &str, w: Work) {
    let me = rank_env();
    let mut s = if me == 0 {
        let l = TcpListener::bind(addr).expect("bind");
        l.accept().expect("accept").0
    } else {
        let t0 = Instant::now();
        loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("connect {addr}: {e}"),
            }
        }
    };
    s.set_nodelay(true).expect("nodelay");
    let warm = (w.trips / 10).max(10);
    let mut b = [0u8; SMALL];
    let mut t0 = Instant::now();
    for i in 1..=warm + w.trips {
        if i == warm + 1 {
            t0 = Instant::now();
        }
        if me == 0 {
            s.write_all(&b).expect("ping");
            s.read_exact(&mut b).expect("pong");
        } else {
            s.read_exact(&mut b).expect("ping");
            s.write_all(&b).expect("pong");
        }
    }
    let oneway_us = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * f64::from(w.trips));
    let mut data = vec![0x5Au8; BULK];
    if me == 0 {
        let t0 = Instant::now();
        for _ in 0..w.bulk {
            s.write_all(&data).expect("bulk");
        }
        s.read_exact(&mut b[..1]).expect("ack");
        let secs = t0.elapsed().as_secs_f64();
        result_line(oneway_us, f64::from(w.bulk) * BULK as f64 / secs / 1e6);
    } else {
        for _ in 0..w.bulk {
            s.read_exact(&mut data).expect("bulk");
        }
        s.write_all(&[1]).expect("ack");
    }
}

fn me() -> PathBuf {
    std::env::current_exe().expect("current exe")
}

fn work_args(w: Work) -> [String; 2] {
    [w.trips.to_string(), w.bulk.to_string()]
}

fn run_all(cmds: Vec<Command>, limit: Duration) -> Result<Output, String> {
    let kids: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let mut outs = Vec::new();
    for mut k in kids {
        while k.try_wait().map_err(|e| e.to_string())?.is_none() {
            if t0.elapsed() > limit {
                let _ = k.kill();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        outs.push(k.wait_with_output().map_err(|e| e.to_string())?);
    }
    if let Some(o) = outs.iter().find(|o| !o.status.success()) {
        return Err(format!(
            "a rank failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(outs.swap_remove(0))
}

fn free_port(host: &str) -> String {
    let l = TcpListener::bind((host, 0)).expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// Where a contender runs.
enum Place {
    Loopback,
    Netns(Netns),
}

/// One job of `kind` ("vmmc" or "kernel"): returns (one-way µs, MB/s).
fn job(kind: &str, place: &Place, w: Work, bind: &str) -> Result<(f64, f64), String> {
    let limit = Duration::from_secs(120);
    let out = match place {
        Place::Loopback => {
            let mut c = Command::new(me().with_file_name("vmmc-run"));
            c.args(["-n", "2", "--bind-to", bind, "--transport"]);
            if kind == "vmmc" {
                c.args(["tcp", "--"]).arg(me()).arg("--vmmc-rank");
            } else {
                // The same launcher (and CPU binding) for the kernel's ranks; they ignore VMMC.
                let addr = free_port("127.0.0.1");
                c.args(["shm", "--"])
                    .arg(me())
                    .args(["--kernel-rank", &addr]);
            }
            c.args(work_args(w));
            run_all(vec![c], limit)?
        }
        Place::Netns(n) => {
            let cpus = allowed_cpus();
            let addr = format!("{}:{}", n.addr[0], 7400 + (std::process::id() % 500));
            let cmds = (0..2)
                .map(|rank| {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", &n.ns[rank]]);
                    if bind == "core" {
                        // As vmmc-run binds: rank k on the k-th CPU.
                        c.args(["taskset", "-c", &cpus[rank % cpus.len()]]);
                    }
                    c.arg(me())
                        .env("VMMC_RANK", rank.to_string())
                        .env("VMMC_SIZE", "2");
                    if kind == "vmmc" {
                        c.arg("--vmmc-rank")
                            .env("VMMC_TRANSPORT", "tcp")
                            .env("VMMC_RENDEZVOUS", &addr)
                            .env_remove("VMMC_RENDEZVOUS_BY");
                    } else {
                        c.args(["--kernel-rank", &addr]);
                    }
                    c.args(work_args(w));
                    c
                })
                .collect();
            run_all(cmds, limit)?
        }
    };
    parse_result(&out)
}

/// One iperf3 run (one stream, 1 s) where the ranks would run: MB/s received, or `None`
/// when iperf3 is not installed or fails.
fn iperf3(place: &Place, bind: &str, port: u16) -> Option<f64> {
    let cpus = allowed_cpus();
    let wrap = |i: usize, args: &[&str]| -> Command {
        let mut c;
        match place {
            Place::Loopback => c = Command::new(args[0]),
            Place::Netns(n) => {
                c = Command::new("ip");
                c.args(["netns", "exec", &n.ns[i]]);
                c.arg(args[0]);
            }
        }
        if bind == "core" {
            // taskset in front: rebuild with it.
            let mut t = Command::new("taskset");
            t.args(["-c", &cpus[i % cpus.len()]]);
            t.arg(c.get_program());
            t.args(c.get_args());
            c = t;
        }
        c.args(&args[1..]);
        c
    };
    let host = match place {
        Place::Loopback => "127.0.0.1".to_string(),
        Place::Netns(n) => n.addr[0].clone(),
    };
    let p = port.to_string();
    let mut server = wrap(0, &["iperf3", "-s", "-p", &p])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // The server may not listen yet: the client is refused at once then (iperf3 -J exits 0
    // even so: look at its report), and tries again.
    let t0 = Instant::now();
    let got = loop {
        let o = wrap(1, &["iperf3", "-c", &host, "-p", &p, "-t", "1", "-J"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
            break Some(bps / 8.0 / 1e6);
        }
        if t0.elapsed() > Duration::from_secs(5) {
            eprintln!("bench-tcp: iperf3: {}", v["error"]);
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = server.kill();
    let _ = server.wait();
    got
}

/// The CPUs this process may run on, as `taskset` names them.
fn allowed_cpus() -> Vec<String> {
    let o = Command::new("taskset")
        .args(["-cp", &std::process::id().to_string()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // "pid N's current affinity list: 0-1" or "0,2,4-5"
    let list = o.rsplit(':').next().unwrap_or("").trim().to_string();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    cpus.extend((a..=b).map(|c| c.to_string()));
                }
            }
            None => cpus.push(part.to_string()),
        }
    }
    if cpus.is_empty() {
        cpus.push("0".into());
    }
    cpus
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Netns {
    ns: [String; 2],
    addr: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Netns {
    fn make() -> Result<Netns, String> {
        let id = std::process::id() % 100_000;
        let n = Netns {
            ns: [format!("vmmc-bench-a-{id}"), format!("vmmc-bench-b-{id}")],
            addr: ["10.214.0.1".into(), "10.214.0.2".into()],
        };
        let dev = [format!("vba{id}"), format!("vbb{id}")];
        ip(&["netns", "add", &n.ns[0]])?;
        ip(&["netns", "add", &n.ns[1]])?;
        ip(&[
            "link", "add", &dev[0], "type", "veth", "peer", "name", &dev[1],
        ])?;
        for (i, d) in dev.iter().enumerate() {
            ip(&["link", "set", d, "netns", &n.ns[i]])?;
            let cidr = format!("{}/24", n.addr[i]);
            ip(&["-n", &n.ns[i], "addr", "add", &cidr, "dev", d])?;
            ip(&["-n", &n.ns[i], "link", "set", d, "up"])?;
            ip(&["-n", &n.ns[i], "link", "set", "lo", "up"])?;
        }
        Ok(n)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut rounds = 5usize;
    let mut quick = false;
    let mut netns = true;
    let mut out = PathBuf::from("bench-results");
    let num = |a: Option<String>| -> u32 { a.and_then(|v| v.parse().ok()).expect("a number") };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--vmmc-rank" => {
                let w = Work {
                    trips: num(args.next()),
                    bulk: num(args.next()),
                };
                return vmmc_rank(w);
            }
            "--kernel-rank" => {
                let addr = args.next().expect("address");
                let w = Work {
                    trips: num(args.next()),
                    bulk: num(args.next()),
                };
                return kernel_rank(&addr, w);
            }
            "--rounds" => rounds = num(args.next()) as usize,
            "--quick" => quick = true,
            "--no-netns" => netns = false,
            "--out" => out = args.next().map(PathBuf::from).expect("--out DIR"),
            "-h" | "--help" => {
                println!("bench-tcp [--rounds K] [--quick] [--no-netns] [--out DIR]");
                return;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let w = if quick {
        rounds = rounds.min(1);
        Work {
            trips: 200,
            bulk: 8,
        }
    } else {
        Work {
            trips: 5000,
            bulk: 256,
        }
    };
    let mut places = vec![("loopback", Place::Loopback)];
    // Placement changes kernel TCP's latency more than anything: a wake-up on the same CPU is
    // cheap, one across CPUs costs an interrupt. Both contenders run both ways: bound (rank k
    // on the k-th CPU, as vmmc-run does by default) and left to the scheduler.
    let binds = ["core", "none"];
    if netns {
        match Netns::make() {
            Ok(n) => places.push(("namespaces", Place::Netns(n))),
            Err(e) => println!("between namespaces: skipped ({e})"),
        }
    }
    let mut json = Vec::new();
    println!(
        "tcp transport vs kernel TCP: {SMALL} B one-way latency and 1 MiB bandwidth, medians of \
         {rounds} rounds ({} round trips, {} MiB per round)",
        w.trips, w.bulk
    );
    println!(
        "{:<17} {:>11} {:>13} {:>6}   {:>10} {:>12} {:>6}   {:>11} {:>6}",
        "where, ranks",
        "vmmc 8B us",
        "kernel 8B us",
        "ratio",
        "vmmc MB/s",
        "kernel MB/s",
        "ratio",
        "iperf3 MB/s",
        "ratio"
    );
    for ((name, place), bind) in places
        .iter()
        .flat_map(|p| binds.iter().map(move |b| (p, *b)))
    {
        let row = format!("{name}, {}", if bind == "core" { "bound" } else { "free" });
        let mut got: [[Vec<f64>; 2]; 2] = Default::default();
        let mut iperf: Vec<f64> = Vec::new();
        for round in 0..rounds {
            // A port free here (below the ephemeral range; fresh namespaces have them all).
            let base = 21_000 + (std::process::id() % 4_000) as u16 + 10 * round as u16;
            let port = (base..base + 10)
                .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
                .unwrap_or(base);
            if let Some(v) = iperf3(place, bind, port) {
                iperf.push(v);
            }
            for (k, kind) in ["vmmc", "kernel"].iter().enumerate() {
                match job(kind, place, w, bind) {
                    Ok((lat, bw)) => {
                        got[k][0].push(lat);
                        got[k][1].push(bw);
                    }
                    Err(e) => {
                        eprintln!("bench-tcp: {kind} on {name}: {e}");
                        // Through drop: the namespaces must go too.
                        drop(places);
                        std::process::exit(1);
                    }
                }
            }
        }
        let m = |k: usize, i: usize| median(&mut got[k][i].clone());
        let (vl, kl, vb, kb) = (m(0, 0), m(1, 0), m(0, 1), m(1, 1));
        // Latency: ours over theirs (lower is better); bandwidth: theirs over ours, so that
        // both ratios read "how many times worse than kernel TCP" (target <= 1.5).
        let (rl, rb) = (vl / kl, kb / vb);
        let ip = (!iperf.is_empty()).then(|| median(&mut iperf));
        let (ips, ipr) = match ip {
            Some(v) => (format!("{v:.0}"), format!("{:.2}", v / vb)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{row:<17} {vl:>11.2} {kl:>13.2} {rl:>6.2}   {vb:>10.0} {kb:>12.0} {rb:>6.2}   \
             {ips:>11} {ipr:>6}"
        );
        json.push(serde_json::json!({
            "where": name, "ranks": bind, "iperf3_mbs": ip,
            "vmmc_oneway_us": vl, "kernel_oneway_us": kl, "latency_ratio": rl,
            "vmmc_mbs": vb, "kernel_mbs": kb, "bandwidth_ratio": rb,
            "rounds": rounds, "round_trips": w.trips, "bulk_mib": w.bulk,
        }));
    }
    println!(
        "ratios: vmmc/kernel for latency, kernel/vmmc and iperf3/vmmc for bandwidth (target <= 1.5)"
    );
    drop(places);
    let _ = std::fs::create_dir_all(&out);
    let path = out.join("tcp.json");
    if let Err(e) = std::fs::write(
        &path,
        serde_json::to_string_pretty(&json).expect("json") + "\n",
    ) {
        eprintln!("bench-tcp: cannot write {}: {e}", path.display());
    }
}
