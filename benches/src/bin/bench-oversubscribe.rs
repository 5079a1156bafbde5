//! Jobs with more processes than cores (issue 19), side by side with the peers in one run, at
//! 1x, 2x, 4x and 8x as many processes as the machine has cores:
//!
//! - **NX ring**: a token passed around every rank (`nx-pingpong --ring` under `vmmc-run`),
//!   with the default waiting policy (`VMMC_WAIT=auto`) and the old one (`spin`, at 1x and 2x
//!   only: it takes milliseconds a hop beyond), against the same ring over MPI
//!   (`mpi-pingpong --ring` under `mpirun --oversubscribe`, which makes Open MPI yield when
//!   idle);
//! - **idle job**: every rank but one blocked in a receive for a second, at 2x: the largest
//!   share of a core one of them used (`nx-pingpong --idle`), auto against spin;
//! - **VRPC with concurrent clients**: 2 and 8 clients making null calls at once against one
//!   server (`rpc-peer vrpc` with 3 and 9 ranks), against libtirpc's C client and server over
//!   TCP with the same number of client processes; calls per second are the sum over the
//!   clients of one over each client's median call;
//! - **request/response under the interposer**: `redis-benchmark -t ping` with 1 to 16
//!   connections against `redis-server`, both unmodified, under `libvmmc_sockets.so` against
//!   kernel TCP: requests per second.
//!
//! Contenders alternate within each round; every figure is the median over the rounds.
//! Prints the tables with the ratios and the targets, writes `oversubscribe.json`.
//!
//! `bench-oversubscribe [--rounds K] [--quick] [--out DIR]`. Build first:
//! `cargo build --release -p vmmc-run -p sockets-preload -p vmmc-benches --features vmmc-benches/mpi`.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmmc_benches::cli::RoundsArgs;
use vmmc_benches::report::{write_json, Report};
use vmmc_benches::stats::median;
use vmmc_benches::tirpc::ChildGuard;

/// vecho.x's program number (the libtirpc C server serves it).
const PROG: u32 = 0x2000_5b01;
/// Oversubscription factors: processes per core.
const FACTORS: [usize; 4] = [1, 2, 4, 8];

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name(name)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The value after `"key":` in a JSON line a program printed.
fn json_number(out: &str, key: &str) -> Option<f64> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .find_map(|v| v.get(key).and_then(|x| x.as_f64()))
}

fn output(cmd: &mut Command, what: &str) -> Option<String> {
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => {
            eprintln!(
                "{what} failed: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            eprintln!("{what}: {e}");
            None
        }
    }
}

/// `nx-pingpong ARGS` under `vmmc-run -n procs` with `VMMC_WAIT=wait`.
fn nx(procs: usize, wait: &str, args: &[&str]) -> Option<String> {
    let mut c = Command::new(sibling("vmmc-run"));
    c.args(["-n", &procs.to_string(), "--"])
        .arg(sibling("nx-pingpong"))
        .args(args)
        .env("VMMC_WAIT", wait);
    output(&mut c, &format!("NX ({wait}) with {procs} ranks"))
}

fn mpi_ring(procs: usize, secs: &str) -> Option<f64> {
    let exe = sibling("mpi-pingpong");
    if !exe.exists() {
        return None;
    }
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &procs.to_string(),
    ])
    .arg(exe)
    .args(["--ring", secs, "--reps", "3"]);
    output(&mut c, &format!("MPI ring with {procs} ranks"))
        .and_then(|o| json_number(&o, "ring_hop_us"))
}

/// VRPC null calls per second with `clients` clients at once.
fn vrpc_rate(clients: usize, calls: usize) -> Option<f64> {
    let mut c = Command::new(sibling("vmmc-run"));
    c.args(["-n", &(clients + 1).to_string(), "--"])
        .arg(sibling("rpc-peer"))
        .args(["vrpc", "--calls", &calls.to_string(), "--sizes", "0"]);
    let out = output(&mut c, &format!("VRPC with {clients} clients"))?;
    let lat: Vec<f64> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<vmmc_benches::stats::Series>(l.trim()).ok())
        .filter_map(|s| s.at(0).map(|p| p.latency_us))
        .collect();
    (lat.len() == clients).then(|| lat.iter().map(|us| 1e6 / us).sum())
}

/// libtirpc null calls per second with `clients` C clients at once.
fn tirpc_rate(t: &vmmc_benches::tirpc::Tirpc, clients: usize, calls: usize) -> Option<f64> {
    let kids: Vec<_> = (0..clients)
        .filter_map(|_| {
            Command::new(&t.client)
                .args([
                    t.port.to_string(),
                    PROG.to_string(),
                    "0".into(),
                    calls.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .ok()
        })
        .collect();
    let mut rate = 0.0;
    let mut ok = kids.len() == clients;
    for k in kids {
        match k.wait_with_output() {
            Ok(o) if o.status.success() => {
                match String::from_utf8_lossy(&o.stdout).trim().parse::<f64>() {
                    Ok(ns) if ns > 0.0 => rate += 1e9 / ns,
                    _ => ok = false,
                }
            }
            _ => ok = false,
        }
    }
    ok.then_some(rate)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// redis-benchmark's PING requests per second with `conns` connections, under the interposer
/// (`lib`) or over kernel TCP (`None`).
fn redis_rate(lib: Option<&PathBuf>, conns: usize, requests: usize) -> Option<f64> {
    let port = free_port();
    let mut srv = Command::new("redis-server");
    srv.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if let Some(l) = lib {
        srv.env("LD_PRELOAD", l);
    }
    let _srv = ChildGuard(srv.spawn().ok()?);
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            eprintln!("redis-server does not listen on {port}");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Command::new("redis-benchmark");
    c.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "ping_mbulk",
        "-c",
        &conns.to_string(),
        "-n",
        &requests.to_string(),
        "--csv",
    ]);
    if let Some(l) = lib {
        c.env("LD_PRELOAD", l);
    }
    let out = output(&mut c, &format!("redis-benchmark -c {conns}"))?;
    // "PING_MBULK","123456.79",...: the second field.
    out.lines()
        .find(|l| l.contains("PING"))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Values of every round, by name.
type Acc = BTreeMap<String, Vec<f64>>;

fn put(acc: &mut Acc, key: String, v: Option<f64>) {
    if let Some(v) = v {
        acc.entry(key).or_default().push(v);
    }
}

fn med(acc: &mut Acc, key: &str) -> Option<f64> {
    acc.get_mut(key)
        .filter(|v| !v.is_empty())
        .map(|v| median(v))
}

fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// bench-oversubscribe's options.
#[derive(clap::Parser)]
#[command(about = "NX, VRPC and interposed sockets with more processes than cores (issue 19)")]
struct Cli {
    #[command(flatten)]
    rounds: RoundsArgs,
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let quick = cli.rounds.quick();
    let rounds = cli.rounds.rounds();
    let ncores = cores();
    let secs = if quick { "0.1" } else { "0.3" };
    let calls = if quick { 300 } else { 5_000 };
    let requests = if quick { 2_000 } else { 50_000 };
    let conns: &[usize] = if quick { &[1, 4] } else { &[1, 2, 4, 8, 16] };
    let clients: &[usize] = if quick { &[2] } else { &[2, 8] };
    let lib = sibling("libvmmc_sockets.so");
    let lib = lib.exists().then_some(lib);
    let tmp = std::env::temp_dir().join(format!("bench-oversubscribe-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&tmp);
    let tirpc = match vmmc_benches::tirpc::start(&tmp, PROG) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("no libtirpc peer: {e}");
            None
        }
    };
    let redis = have("redis-server") && have("redis-benchmark");
    let mut acc = Acc::new();
    for round in 1..=rounds {
        eprintln!("round {round}/{rounds}");
        for f in FACTORS {
            let procs = (f * ncores).max(2);
            let ring = ["--ring", secs, "--reps", "3"];
            put(
                &mut acc,
                format!("nx-auto/{f}"),
                nx(procs, "auto", &ring).and_then(|o| json_number(&o, "ring_hop_us")),
            );
            if f <= 2 {
                put(
                    &mut acc,
                    format!("nx-spin/{f}"),
                    nx(procs, "spin", &ring).and_then(|o| json_number(&o, "ring_hop_us")),
                );
            }
            put(&mut acc, format!("mpi/{f}"), mpi_ring(procs, secs));
        }
        for wait in ["auto", "spin"] {
            put(
                &mut acc,
                format!("idle-{wait}"),
                nx(2 * ncores, wait, &["--idle", "1"])
                    .and_then(|o| json_number(&o, "idle_core_share")),
            );
        }
        for &n in clients {
            put(&mut acc, format!("vrpc/{n}"), vrpc_rate(n, calls));
            if let Some(t) = &tirpc {
                put(&mut acc, format!("tirpc/{n}"), tirpc_rate(t, n, calls));
            }
        }
        if redis {
            for &c in conns {
                put(
                    &mut acc,
                    format!("kernel/{c}"),
                    redis_rate(None, c, requests),
                );
                if let Some(l) = &lib {
                    put(
                        &mut acc,
                        format!("vmmc/{c}"),
                        redis_rate(Some(l), c, requests),
                    );
                }
            }
        }
    }
    let mut report = Report::default();
    report.notes.push(format!(
        "{ncores} cores; medians over {rounds} rounds; NX and MPI rings of {secs} s x 3"
    ));
    println!("\nNX ring, time per hop (us), by processes per core ({ncores} cores)");
    println!(
        "{:>6} {:>6} | {:>10} {:>10} {:>10} | {:>12} {:>12}",
        "x", "procs", "NX auto", "NX spin", "MPI", "auto / MPI", "target <= 2"
    );
    for f in FACTORS {
        let (a, s, m) = (
            med(&mut acc, &format!("nx-auto/{f}")),
            med(&mut acc, &format!("nx-spin/{f}")),
            med(&mut acc, &format!("mpi/{f}")),
        );
        let ratio = a.zip(m).map(|(a, m)| a / m);
        println!(
            "{:>5}x {:>6} | {:>10} {:>10} {:>10} | {:>12} {:>12}",
            f,
            (f * ncores).max(2),
            cell(a, 3),
            cell(s, 3),
            cell(m, 3),
            cell(ratio, 2),
            match (f, ratio) {
                (1, _) | (_, None) => "",
                (_, Some(r)) if r <= 2.0 => "met",
                _ => "NOT met",
            }
        );
        for (k, v) in [("nx_auto", a), ("nx_spin", s), ("mpi", m)] {
            if let Some(v) = v {
                report.baselines.insert(format!("ring_hop_us/{k}/{f}x"), v);
            }
        }
        if let Some(r) = ratio {
            report.ratios.insert(format!("ring nx/mpi {f}x"), r);
        }
        if let (1, Some(a), Some(s)) = (f, a, s) {
            report.ratios.insert("ring auto/spin 1x".into(), a / s);
            println!(
                "       not oversubscribed: auto / spin = {:.2} (target <= 1.1)",
                a / s
            );
        }
    }
    let (ia, is) = (med(&mut acc, "idle-auto"), med(&mut acc, "idle-spin"));
    println!(
        "\nidle job ({} ranks blocked in a receive): share of a core, auto {} (target < 0.01), spin {}",
        2 * ncores,
        cell(ia, 4),
        cell(is, 4)
    );
    for (k, v) in [("idle_core_share/auto", ia), ("idle_core_share/spin", is)] {
        if let Some(v) = v {
            report.baselines.insert(k.into(), v);
        }
    }
    println!("\nVRPC null calls per second with concurrent clients, against libtirpc over TCP");
    println!(
        "{:>8} | {:>12} {:>12} | {:>8}",
        "clients", "VRPC", "libtirpc", "ratio"
    );
    for &n in clients {
        let (v, t) = (
            med(&mut acc, &format!("vrpc/{n}")),
            med(&mut acc, &format!("tirpc/{n}")),
        );
        let r = v.zip(t).map(|(v, t)| v / t);
        println!(
            "{:>8} | {:>12} {:>12} | {:>8}{}",
            n,
            cell(v, 0),
            cell(t, 0),
            cell(r, 2),
            if n == 8 { "  (target >= 2)" } else { "" }
        );
        if let Some(r) = r {
            report
                .ratios
                .insert(format!("vrpc/libtirpc {n} clients"), r);
        }
    }
    println!("\nredis-benchmark PING requests per second, interposed against kernel TCP");
    println!(
        "{:>8} | {:>12} {:>12} | {:>8}",
        "conns", "interposed", "kernel", "ratio"
    );
    for &c in conns {
        let (v, k) = (
            med(&mut acc, &format!("vmmc/{c}")),
            med(&mut acc, &format!("kernel/{c}")),
        );
        let r = v.zip(k).map(|(v, k)| v / k);
        println!(
            "{:>8} | {:>12} {:>12} | {:>8}  (target >= {})",
            c,
            cell(v, 0),
            cell(k, 0),
            cell(r, 2),
            if c == 1 { "2" } else { "1" }
        );
        if let Some(r) = r {
            report
                .ratios
                .insert(format!("redis vmmc/kernel {c} conns"), r);
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = std::fs::create_dir_all(&cli.rounds.out);
    let path = cli.rounds.out.join("oversubscribe.json");
    match write_json(&report, &path) {
        Ok(()) => println!("\nwrote {}", path.display()),
        Err(e) => eprintln!("writing {}: {e}", path.display()),
    }
}
