//! Stream sockets over VMMC (seed 003 §4.3) beside kernel TCP loopback and a Unix-domain
//! stream socket, in one run, through the Rust API (`sockets::VmmcStream`): ping-pong
//! latency and streaming throughput at 64 B, 7 KB and 64 KB (sockperf's usual sizes), for
//! each send protocol (one-copy DU, two-copy DU, two-copy AU). Each contender's server is a
//! separate process (this program re-run with `--serve KIND`); the contenders alternate for
//! several rounds, and each point is the median over the rounds. Prints the table and the
//! ratios against kernel TCP (targets: 64 B one-way latency <= 1/10 of TCP's; bulk
//! throughput >= 2x TCP's with the default variant, one-copy DU, and >= 1x with every
//! variant), writes `sockets.json`.
//!
//! The same comparison with unmodified programs follows when they are installed: sockperf
//! ping-pong (one-way latency) and throughput at 64 B, 7 KB and 65000 B (sockperf's TCP
//! maximum) and iperf3 (one stream), each under `LD_PRELOAD=libvmmc_sockets.so` (built beside
//! this program) with each variant (`VMMC_SOCK_VARIANT`) and over kernel TCP loopback,
//! alternating, medians over the rounds.
//!
//! `bench-sockets [--rounds K] [--quick] [--out DIR]`

#![forbid(unsafe_code)]

use sockets::{Options, Variant, VmmcListener, VmmcStream};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use vmmc_benches::report::{print_table, write_json, Point, Report, Series};
use vmmc_benches::stats::median;

/// Message sizes of the benchmark (sockperf's 64 B, 7 KB and 64 KB).
const SIZES: [usize; 3] = [64, 7 * 1024, 64 * 1024];
/// The contenders: the three VMMC send protocols, kernel TCP loopback, a Unix socket.
const KINDS: [&str; 5] = ["vmmc-du1", "vmmc-du2", "vmmc-au", "tcp", "unix"];
/// The contender with the library's default send protocol.
const DEFAULT_KIND: &str = "vmmc-du1";
/// The interposer's contenders: each variant (`VMMC_SOCK_VARIANT`), then kernel TCP.
const PROGRAM_MODES: [(&str, Option<&str>); 4] = [
    ("vmmc-du1", Some("du1")),
    ("vmmc-du2", Some("du2")),
    ("vmmc-au", Some("au")),
    ("tcp", None),
];

trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

fn variant(kind: &str) -> Option<Variant> {
    kind.strip_prefix("vmmc-")
        .map(|v| Variant::parse(v).expect("variant"))
}

/// The server: accepts connections one after another; each starts with a request
/// `[mode, size, count]` (u64 little-endian): mode 0 echoes `count` messages of `size`
/// bytes, mode 1 reads `count * size` bytes and answers one byte, mode 2 exits.
fn serve(kind: &str) {
    let accept: Box<dyn Fn() -> Box<dyn Conn>> = if let Some(v) = variant(kind) {
        let l = VmmcListener::bind_with(
            "127.0.0.1:0",
            Options {
                variant: v,
                ..Options::default()
            },
        )
        .expect("bind");
        println!("addr={}", l.local_addr().expect("addr"));
        Box::new(move || Box::new(l.accept().expect("accept").0))
    } else if kind == "tcp" {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        println!("addr={}", l.local_addr().expect("addr"));
        Box::new(move || {
            let s = l.accept().expect("accept").0;
            s.set_nodelay(true).expect("nodelay");
            Box::new(s)
        })
    } else {
        let path = std::env::temp_dir().join(format!("bench-sockets-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).expect("bind");
        println!("addr={}", path.display());
        Box::new(move || Box::new(l.accept().expect("accept").0))
    };
    std::io::stdout().flush().expect("stdout");
    let mut buf = vec![0u8; *SIZES.iter().max().unwrap_or(&65536)];
    loop {
        let mut s = accept();
        let mut req = [0u8; 24];
        s.read_exact(&mut req).expect("request");
        let w = |i: usize| u64::from_le_bytes(req[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let (mode, size, count) = (w(0), w(1) as usize, w(2));
        match mode {
            0 => {
                for _ in 0..count {
                    s.read_exact(&mut buf[..size]).expect("ping");
                    s.write_all(&buf[..size]).expect("pong");
                }
            }
            1 => {
                let mut left = count as usize * size;
                while left > 0 {
                    let n = s.read(&mut buf[..left.min(size)]).expect("sink");
                    assert!(n > 0, "client ended early");
                    left -= n;
                }
                s.write_all(&[1]).expect("ack");
            }
            _ => {
                if kind == "unix" {
                    let path =
                        std::env::temp_dir().join(format!("bench-sockets-{}", std::process::id()));
                    let _ = std::fs::remove_file(path);
                }
                return;
            }
        }
    }
}

struct Server {
    kind: &'static str,
    addr: String,
    child: Child,
}

impl Server {
    fn start(kind: &'static str) -> Server {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["--serve", kind])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn server");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("server address");
        let addr = line
            .trim()
            .strip_prefix("addr=")
            .expect("addr= line")
            .to_string();
        Server { kind, addr, child }
    }

    fn connect(&self, req: [u64; 3]) -> Box<dyn Conn> {
        let mut c: Box<dyn Conn> = if let Some(v) = variant(self.kind) {
            Box::new(
                VmmcStream::connect_with(
                    self.addr.as_str(),
                    Options {
                        variant: v,
                        ..Options::default()
                    },
                )
                .expect("connect"),
            )
        } else if self.kind == "tcp" {
            let s = TcpStream::connect(self.addr.as_str()).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            Box::new(s)
        } else {
            Box::new(UnixStream::connect(&self.addr).expect("connect"))
        };
        let mut b = [0u8; 24];
        for (i, v) in req.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        c.write_all(&b).expect("request");
        c
    }

    /// One-way latency in microseconds: half the mean round trip of `count` ping-pongs.
    fn latency(&self, size: usize, count: u64) -> f64 {
        let mut c = self.connect([0, size as u64, count + count / 10]);
        let mut buf = vec![7u8; size];
        // A tenth of the exchanges warm the caches and the spin paths; they are not timed.
        for _ in 0..count / 10 {
            c.write_all(&buf).expect("ping");
            c.read_exact(&mut buf).expect("pong");
        }
        let t = Instant::now();
        for _ in 0..count {
            c.write_all(&buf).expect("ping");
            c.read_exact(&mut buf).expect("pong");
        }
        t.elapsed().as_secs_f64() * 1e6 / (2.0 * count as f64)
    }

    /// Throughput in MB/s of `count` messages of `size` bytes streamed to the server, until
    /// its acknowledgement of the last byte.
    fn throughput(&self, size: usize, count: u64) -> f64 {
        let mut c = self.connect([1, size as u64, count]);
        let buf = vec![7u8; size];
        let t = Instant::now();
        for _ in 0..count {
            c.write_all(&buf).expect("stream");
        }
        let mut ack = [0u8; 1];
        c.read_exact(&mut ack).expect("ack");
        (size as f64 * count as f64) / t.elapsed().as_secs_f64() / 1e6
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.connect([2, 0, 0]));
        let _ = self.child.wait();
    }
}

fn main() {
    let mut rounds = 5usize;
    let mut quick = false;
    let mut out = PathBuf::from("bench-results");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--serve" => return serve(&args.next().expect("--serve KIND")),
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds K")
            }
            "--quick" => quick = true,
            "--out" => out = args.next().map(PathBuf::from).expect("--out DIR"),
            "-h" | "--help" => {
                println!("bench-sockets [--rounds K] [--quick] [--out DIR]");
                return;
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    if quick {
        rounds = 1;
    }
    // Latency exchanges and streamed bytes per point.
    let (pings, stream_bytes) = if quick {
        (200u64, 8u64 << 20)
    } else {
        (20_000, 512 << 20)
    };
    let servers: Vec<Server> = KINDS.iter().map(|k| Server::start(k)).collect();
    // name -> size -> values over rounds
    let mut lat: BTreeMap<&str, BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    let mut tput: BTreeMap<&str, BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    for r in 0..rounds {
        eprintln!("round {}/{rounds}", r + 1);
        // Each round starts with another contender: no one always runs first.
        let n = servers.len();
        for s in (0..n).map(|i| &servers[(i + r) % n]) {
            for &size in &SIZES {
                let l = s.latency(size, if size > 8192 { pings / 4 } else { pings });
                lat.entry(s.kind)
                    .or_default()
                    .entry(size)
                    .or_default()
                    .push(l);
                let t = s.throughput(size, (stream_bytes / size as u64).clamp(16, 200_000));
                tput.entry(s.kind)
                    .or_default()
                    .entry(size)
                    .or_default()
                    .push(t);
            }
        }
    }
    drop(servers);
    let mut report = Report::default();
    let mut med = BTreeMap::new();
    for k in KINDS {
        let mut ls = Series::new(format!("{k} lat"));
        let mut ts = Series::new(format!("{k} tput"));
        for &size in &SIZES {
            let l = median(
                lat.get_mut(k)
                    .and_then(|m| m.get_mut(&size))
                    .expect("measured"),
            );
            let t = median(
                tput.get_mut(k)
                    .and_then(|m| m.get_mut(&size))
                    .expect("measured"),
            );
            med.insert((k, size), (l, t));
            ls.points.push(Point {
                size,
                latency_us: l,
                bandwidth_mbs: size as f64 / l,
            });
            ts.points.push(Point {
                size,
                latency_us: size as f64 / t,
                bandwidth_mbs: t,
            });
        }
        report.push(ls);
        report.push(ts);
    }
    for k in ["vmmc-du1", "vmmc-du2", "vmmc-au", "unix"] {
        for &size in &SIZES {
            let (l, t) = med[&(k, size)];
            let (tl, tt) = med[&("tcp", size)];
            let vmmc = k.starts_with("vmmc");
            let lat_target = if vmmc && size == 64 {
                " (target <= 0.1)"
            } else {
                ""
            };
            let tput_target = match (vmmc, size == 65536, k == DEFAULT_KIND) {
                (true, true, true) => " (default variant; target >= 2)",
                (true, true, false) => " (target >= 1)",
                _ => "",
            };
            report.ratios.insert(
                format!("{k}/tcp one-way latency {size} B{lat_target}"),
                l / tl,
            );
            report
                .ratios
                .insert(format!("{k}/tcp throughput {size} B{tput_target}"), t / tt);
        }
    }
    report.notes.push(format!(
        "{rounds} rounds alternating the contenders; each point is the median over rounds; latency = one-way (half a round trip) in us, throughput in MB/s (lat series: bandwidth = size / latency; tput series: latency column = time per message)"
    ));
    report
        .notes
        .push("kernel TCP with TCP_NODELAY, blocking; VMMC spins briefly, then sleeps".into());
    programs(rounds, quick, &mut report);
    print_table(&report);
    if let Err(e) =
        std::fs::create_dir_all(&out).and_then(|_| write_json(&report, &out.join("sockets.json")))
    {
        eprintln!("writing {}: {e}", out.display());
        std::process::exit(1);
    }
    println!("\nwrote {}", out.join("sockets.json").display());
}

/// The number after `key` in a program's output.
fn number_after(text: &str, key: &str) -> Option<f64> {
    let at = text.find(key)? + key.len();
    let t = text[at..].trim_start();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    t[..end].parse().ok()
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The library and the variant a program runs under, if any.
type Under<'a> = Option<(&'a PathBuf, &'a str)>;

fn interpose(c: &mut Command, under: Under) {
    if let Some((lib, variant)) = under {
        c.env("LD_PRELOAD", lib).env("VMMC_SOCK_VARIANT", variant);
    }
}

/// Runs `program args` (under the library when asked) and returns its output.
fn run(program: &str, args: &[String], under: Under) -> Option<String> {
    let mut c = Command::new(program);
    c.args(args).stdin(Stdio::null()).stderr(Stdio::null());
    interpose(&mut c, under);
    let out = c.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// A server program under the library or not, stopped when dropped.
struct Program(Child);

impl Program {
    fn start(program: &str, args: &[String], under: Under, port: u16) -> Program {
        let mut c = Command::new(program);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        interpose(&mut c, under);
        let p = Program(c.spawn().expect("server program"));
        // Ready when something accepts on the port (a probe connection is harmless to a
        // sockperf server; iperf3 is started without --one-off).
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed().as_secs() < 20,
                "{program} does not listen on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        p
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// sockperf and iperf3 with and without the interposer.
fn programs(rounds: usize, quick: bool, report: &mut Report) {
    let lib = std::env::current_exe()
        .expect("exe")
        .with_file_name("libvmmc_sockets.so");
    if !lib.exists() {
        eprintln!("{} not built: no program comparison", lib.display());
        return;
    }
    let sizes: &[usize] = if quick { &[64] } else { &[64, 7 * 1024, 65000] };
    let secs = "1".to_string();
    let modes: Vec<(&str, Under)> = PROGRAM_MODES
        .iter()
        .map(|&(mode, v)| (mode, v.map(|v| (&lib, v))))
        .collect();
    let mut lat: BTreeMap<(&str, usize), Vec<f64>> = BTreeMap::new();
    let mut tput: BTreeMap<(&str, usize), Vec<f64>> = BTreeMap::new();
    let mut iperf: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    if have("sockperf") {
        for r in 0..rounds {
            eprintln!("sockperf round {}/{rounds}", r + 1);
            for &(mode, pre) in &modes {
                let port = free_port();
                let p = port.to_string();
                let ip = "127.0.0.1".to_string();
                let _srv = Program::start(
                    "sockperf",
                    &[
                        "sr".into(),
                        "--tcp".into(),
                        "-i".into(),
                        ip.clone(),
                        "-p".into(),
                        p.clone(),
                    ],
                    pre,
                    port,
                );
                for &size in sizes {
                    let m = size.to_string();
                    let base = |kind: &str| -> Vec<String> {
                        [kind, "--tcp", "-i", &ip, "-p", &p, "-t", &secs, "-m", &m]
                            .iter()
                            .map(|s| s.to_string())
                            .collect()
                    };
                    // sockperf's table of sequence numbers overflows ("_seqN >
                    // m_maxSequenceNo") at the round-trip rate VMMC reaches: cap the rate at
                    // 10^6 messages/s for both modes (kernel TCP stays far below it).
                    let mut pp = base("pp");
                    pp.push("--mps=1000000".into());
                    if let Some(v) =
                        run("sockperf", &pp, pre).and_then(|o| number_after(&o, "avg-latency="))
                    {
                        lat.entry((mode, size)).or_default().push(v);
                    }
                    if !quick {
                        if let Some(v) = run("sockperf", &base("tp"), pre)
                            .and_then(|o| number_after(&o, "BandWidth is"))
                        {
                            tput.entry((mode, size)).or_default().push(v);
                        }
                    }
                }
            }
        }
    } else {
        eprintln!("sockperf not installed: no sockperf comparison");
    }
    if have("iperf3") {
        for r in 0..rounds {
            eprintln!("iperf3 round {}/{rounds}", r + 1);
            for &(mode, pre) in &modes {
                let port = free_port();
                let p = port.to_string();
                let _srv =
                    Program::start("iperf3", &["-s".into(), "-p".into(), p.clone()], pre, port);
                let args: Vec<String> = ["-c", "127.0.0.1", "-p", &p, "-t", &secs, "-J"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                if let Some(v) = run("iperf3", &args, pre)
                    .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
                    .and_then(|j| j["end"]["sum_received"]["bits_per_second"].as_f64())
                {
                    iperf.entry(mode).or_default().push(v / 1e9);
                }
            }
        }
    } else {
        eprintln!("iperf3 not installed: no iperf3 comparison");
    }
    for &(mode, _) in &modes {
        let mut ls = Series::new(format!("sockperf-{mode} lat"));
        let mut ts = Series::new(format!("sockperf-{mode} tput"));
        for &size in sizes {
            if let Some(v) = lat.get_mut(&(mode, size)) {
                let l = median(v);
                ls.points.push(Point {
                    size,
                    latency_us: l,
                    bandwidth_mbs: size as f64 / l,
                });
            }
            if let Some(v) = tput.get_mut(&(mode, size)) {
                let t = median(v);
                ts.points.push(Point {
                    size,
                    latency_us: size as f64 / t,
                    bandwidth_mbs: t,
                });
            }
        }
        for s in [ls, ts] {
            if !s.points.is_empty() {
                report.push(s);
            }
        }
        if let Some(v) = iperf.get_mut(mode) {
            report
                .baselines
                .insert(format!("iperf3-{mode} Gbit/s"), median(v));
        }
    }
    for &(mode, variant) in &modes {
        if variant.is_none() {
            continue;
        }
        let default = mode == DEFAULT_KIND;
        for &size in sizes {
            let pick = |m: &BTreeMap<(&str, usize), Vec<f64>>, mode| {
                m.get(&(mode, size)).map(|v| {
                    let mut v = v.clone();
                    median(&mut v)
                })
            };
            if let (Some(v), Some(t)) = (pick(&lat, mode), pick(&lat, "tcp")) {
                let target = if size == 64 { " (target <= 0.1)" } else { "" };
                report.ratios.insert(
                    format!("sockperf {mode}/tcp one-way latency {size} B{target}"),
                    v / t,
                );
            }
            if let (Some(v), Some(t)) = (pick(&tput, mode), pick(&tput, "tcp")) {
                let target = match (size == 65000, default) {
                    (true, true) => " (default variant; target >= 2)",
                    (true, false) => " (target >= 1)",
                    _ => "",
                };
                report.ratios.insert(
                    format!("sockperf {mode}/tcp throughput {size} B{target}"),
                    v / t,
                );
            }
        }
        if let (Some(v), Some(t)) = (
            report.baselines.get(&format!("iperf3-{mode} Gbit/s")),
            report.baselines.get("iperf3-tcp Gbit/s"),
        ) {
            let target = if default {
                " (default variant; target >= 2)"
            } else {
                " (target >= 1)"
            };
            report
                .ratios
                .insert(format!("iperf3 {mode}/tcp throughput{target}"), v / t);
        }
    }
    report.notes.push(
        "sockperf: pp = avg one-way latency (us, --mps=1000000), tp = bandwidth (MB/s), default (blocking recvfrom) mode for both; vmmc-VARIANT = LD_PRELOAD=libvmmc_sockets.so and VMMC_SOCK_VARIANT=VARIANT on client and server; the library's default variant is du1".into(),
    );
}
