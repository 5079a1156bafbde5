//! Chaos: a library workload runs as a job of 3-4 processes under `vmmc-run`, and one rank is
//! killed with SIGKILL at a moment chosen from a recorded seed. Every trial checks that
//! - the survivors get `PeerLost` (or the library's own error for it) within a bound,
//! - nobody hangs (the launcher exits within a bound after the kill),
//! - the launcher exits non-zero and names the dead rank,
//! - nothing is left behind: no file in the trial's temporary directory (the rendezvous's
//!   socket and job directory live there), no file of the job's processes in /dev/shm, no
//!   process of the job.
//!
//! `chaos [--seeds N] [--first S] [--workload vmmc|vmmc-au|nx|nx-global|vrpc|srpc|sockets|sockets-bulk|any] [--ranks 3|4]
//! [--transport shm|tcp]` runs N trials from
//! seed S and prints one line per trial and a summary; a failing trial prints the command that
//! replays it: `chaos --seed S` (the same workload, ranks, victim and moment).
//!
//! The workloads (run by `chaos --worker WORKLOAD`, one per rank, under the launcher):
//! - `vmmc`: a token goes round the ring of ranks by deliberate update into each rank's
//!   exported buffer, with a notification every 16 hops; each rank waits for it with the
//!   core's wait, checking that every peer is alive;
//! - `vmmc-au`: the same ring through automatic-update bindings to each right neighbour
//!   (a stream of stores, flushed every hop), with a notification every 16 hops;
//! - `nx`: the same ring with NX `csend`/`crecv`;
//! - `nx-global`: NX global operations in a loop (`gisum`, `gdsum`, `gsync`);
//! - `vrpc`: rank 0 serves vecho.x (VRPC, SunRPC-compatible) to the others, which call it in a
//!   loop;
//! - `srpc`: SHRIMP RPC in a ring: each rank serves its left neighbour (in a thread) and calls
//!   its right neighbour in a loop (the sweep interface's 16-byte INOUT procedure, checked);
//! - `sockets-bulk`: each rank streams 64 KiB blocks of a known pattern to its right
//!   neighbour and checks every byte from its left one;
//! - `sockets`: the token ring over stream sockets between the ranks (`JobListener`,
//!   `VmmcStream::connect_job`).
//!
//! A survivor prints `chaos-worker rank R: lost at_ms=T hops=H: ERROR` and exits 0, so the
//! launcher's failure is the victim's alone.

#![forbid(unsafe_code)]

#[allow(dead_code, clippy::all, missing_docs)]
#[rustfmt::skip]
mod sweep {
    include!(concat!(env!("OUT_DIR"), "/sweep.rs"));
}

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "../../../rpc/tests/vrpc_gen/vecho.rs"]
mod vecho;

use sockets::{JobListener, VmmcStream};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The survivors must have reported the loss within this time of the kill.
const DETECT_LIMIT: Duration = Duration::from_secs(5);
/// The launcher must have exited within this time of the kill.
const EXIT_LIMIT: Duration = Duration::from_secs(20);
/// The latest moment of the kill after the victim process appeared.
const MAX_DELAY_MS: u64 = 400;

const WORKLOADS: &[&str] = &[
    "vmmc",
    "vmmc-au",
    "nx",
    "nx-global",
    "vrpc",
    "srpc",
    "sockets",
    "sockets-bulk",
];

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

// ----- the workloads (one process per rank) -----

fn lost(rank: usize, hops: u64, e: &dyn std::fmt::Display) -> ExitCode {
    println!(
        "chaos-worker rank {rank}: lost at_ms={} hops={hops}: {e}",
        now_ms()
    );
    ExitCode::SUCCESS
}

fn worker_vmmc() -> ExitCode {
    use vmmc::{ExportOptions, MemKind};
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (ep.rank(), ep.size());
    let mut hops = 0u64;
    let r = (|| -> vmmc::Result<()> {
        let buf = ep.alloc(4096, MemKind::Shared)?;
        ep.export(1, &buf, ExportOptions::new().handler(|_| {}))?;
        let right = ep.import(ep.proc_of((me + 1) % n)?, 1)?;
        let peers: Vec<vmmc::ProcId> = (0..n)
            .filter(|&k| k != me)
            .map(|k| ep.proc_of(k))
            .collect::<vmmc::Result<_>>()?;
        let alive = || peers.iter().try_for_each(|p| ep.check_peer(*p));
        let mut seen = 0u32;
        if me == 0 {
            right.send(0, &1u32.to_ne_bytes())?;
        }
        loop {
            seen = buf.wait_u32(0, |v| v > seen, alive)?;
            hops += 1;
            let next = (seen + 1).to_ne_bytes();
            if hops.is_multiple_of(16) {
                right.send_notify_wait(0, &next)?;
            } else {
                right.send(0, &next)?;
            }
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, hops, &e),
    }
}

fn worker_vmmc_au() -> ExitCode {
    use vmmc::{AuOptions, ExportOptions, MemKind};
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (ep.rank(), ep.size());
    let mut hops = 0u64;
    let r = (|| -> vmmc::Result<()> {
        let buf = ep.alloc(4096, MemKind::Shared)?;
        ep.export(1, &buf, ExportOptions::new().handler(|_| {}))?;
        let right = ep.import(ep.proc_of((me + 1) % n)?, 1)?;
        let au = right.bind(AuOptions {
            combining: true,
            notify: false,
        })?;
        let peers: Vec<vmmc::ProcId> = (0..n)
            .filter(|&k| k != me)
            .map(|k| ep.proc_of(k))
            .collect::<vmmc::Result<_>>()?;
        let alive = || peers.iter().try_for_each(|p| ep.check_peer(*p));
        let mut seen = 0u32;
        if me == 0 {
            au.store_u32(0, 1)?;
            au.flush()?;
        }
        loop {
            seen = buf.wait_u32(0, |v| v > seen, alive)?;
            hops += 1;
            // A little stream of stores before the token, then the token.
            for k in 1..16 {
                au.store_u32(4 * k, seen)?;
            }
            au.store_u32(0, seen + 1)?;
            au.flush()?;
            if hops.is_multiple_of(16) {
                // The same token again, by deliberate update with a notification.
                right.send_notify_wait(0, &(seen + 1).to_ne_bytes())?;
            }
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, hops, &e),
    }
}

fn worker_nx_global() -> ExitCode {
    let nx = match vmmc_run::init()
        .map_err(nx::NxError::from)
        .and_then(nx::Nx::new)
    {
        Ok(nx) => nx,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (nx.mynode(), nx.numnodes());
    let mut rounds = 0u64;
    let r = (|| -> nx::Result<()> {
        loop {
            let mut i = [me, 1];
            nx.gisum(&mut i)?;
            assert_eq!(i, [n * (n - 1) / 2, n], "gisum");
            let mut d = [me as f64];
            nx.gdsum(&mut d)?;
            nx.gsync()?;
            rounds += 1;
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me as usize, rounds, &e),
    }
}

/// The server side of the sweep interface for the SHRIMP RPC workload: each procedure adds
/// one to the first byte of its argument.
struct Sweep;

fn bump<const N: usize>(d: &mut srpc::InOut<'_, [u8; N]>) {
    let v = d.get_mut();
    v[0] = v[0].wrapping_add(1);
}

impl sweep::SweepServer for Sweep {
    fn null(&mut self) {}
    fn io4(&mut self, d: &mut srpc::InOut<'_, [u8; 4]>) {
        bump(d)
    }
    fn io16(&mut self, d: &mut srpc::InOut<'_, [u8; 16]>) {
        bump(d)
    }
    fn io64(&mut self, d: &mut srpc::InOut<'_, [u8; 64]>) {
        bump(d)
    }
    fn io256(&mut self, d: &mut srpc::InOut<'_, [u8; 256]>) {
        bump(d)
    }
    fn io1k(&mut self, d: &mut srpc::InOut<'_, [u8; 1024]>) {
        bump(d)
    }
    fn io4k(&mut self, d: &mut srpc::InOut<'_, [u8; 4096]>) {
        bump(d)
    }
    fn io16k(&mut self, d: &mut srpc::InOut<'_, [u8; 16384]>) {
        bump(d)
    }
    fn io64k(&mut self, d: &mut srpc::InOut<'_, [u8; 65536]>) {
        bump(d)
    }
}

fn worker_srpc() -> ExitCode {
    use srpc::{Mode, ServerBinding};
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (ep.rank(), ep.size());
    let left = (me + n - 1) % n;
    // The server of the left neighbour's calls: a loss there ends this rank too.
    let sep = ep.clone();
    std::thread::spawn(move || {
        let r = ServerBinding::accept(&sep, left, sweep::SWEEP_LAYOUT, Mode::Du)
            .and_then(|mut b| b.serve(|call| sweep::sweep_dispatch(&mut Sweep, call)));
        let e: Box<dyn std::fmt::Display> = match r {
            Err(e) => Box::new(e),
            Ok(_) => Box::new("the client closed its binding"),
        };
        lost(me, 0, &e);
        std::process::exit(0);
    });
    let mut calls = 0u64;
    let r = (|| -> Result<(), srpc::Error> {
        let mut c = sweep::SweepClient::bind(&ep, (me + 1) % n, Mode::Du)?;
        let mut d = [0u8; 16];
        loop {
            let before = d[0];
            c.io16(&mut d)?;
            if d[0] != before.wrapping_add(1) {
                return Err(srpc::Error::BadArguments("a wrong result".into()));
            }
            calls += 1;
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, calls, &e),
    }
}

fn worker_nx() -> ExitCode {
    let nx = match vmmc_run::init()
        .map_err(nx::NxError::from)
        .and_then(nx::Nx::new)
    {
        Ok(nx) => nx,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (nx.mynode(), nx.numnodes());
    let right = (me + 1) % n;
    let mut hops = 0u64;
    let r = (|| -> nx::Result<()> {
        let mut tok = [0u8; 8];
        if me == 0 {
            nx.csend(7, &1u64.to_ne_bytes(), right, 0)?;
        }
        loop {
            nx.crecv(7, &mut tok)?;
            hops += 1;
            let next = u64::from_ne_bytes(tok) + 1;
            nx.csend(7, &next.to_ne_bytes(), right, 0)?;
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me as usize, hops, &e),
    }
}

/// The server side of vecho.x for the VRPC workload.
struct Echo;

impl vecho::VechoV1Server for Echo {
    fn echo(&self, arg: vecho::blob) -> vecho::blob {
        arg
    }
    fn add(&self, a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn swap(&self, p: vecho::pair) -> vecho::pair {
        vecho::pair { a: p.b, b: p.a }
    }
    fn concat(&self, mut a: rpc::xdr::XdrString, b: rpc::xdr::XdrString) -> rpc::xdr::XdrString {
        a.0.extend_from_slice(&b.0);
        a
    }
    fn reverse(&self, list: Option<Box<vecho::node>>) -> Option<Box<vecho::node>> {
        list
    }
    fn set_value(&self, _: i64) {}
    fn get_value(&self) -> i64 {
        0
    }
}

/// Rank 0 serves vecho.x to every other rank, which call it in a loop. A client learns of
/// the server's death from its call (`PeerLost`); of another client's failure from the core
/// (`peer_failed`: the application's choice to stop, as a job of NX nodes would); the server
/// reports the bindings it lost once every client has gone.
fn worker_vrpc() -> ExitCode {
    use rpc::vrpc::{VrpcClient, VrpcServer};
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let (me, n) = (ep.rank(), ep.size());
    if me == 0 {
        return match VrpcServer::builder(&ep)
            .service(vecho::VechoV1Service(Echo))
            .serve(n as u64 - 1)
        {
            Ok(s) if s.lost > 0 => lost(me, s.calls, &format!("{} bindings lost: {s:?}", s.lost)),
            Ok(s) => {
                println!("chaos-worker rank {me}: served {s:?} without a loss");
                ExitCode::SUCCESS
            }
            Err(e) => lost(me, 0, &e),
        };
    }
    let mut calls = 0u64;
    let r = (|| -> Result<(), String> {
        let server = ep.proc_of(0).map_err(|e| e.to_string())?;
        let mut c = vecho::VechoV1Client::new(
            VrpcClient::bind(&ep, server).map_err(|e| format!("bind: {e}"))?,
        );
        let others: Vec<vmmc::ProcId> = (1..n)
            .filter(|&k| k != me)
            .filter_map(|k| ep.proc_of(k).ok())
            .collect();
        let data = rpc::xdr::Opaque(vec![0x5a; 256]);
        loop {
            let back = c.echo(&data).map_err(|e| e.to_string())?;
            if back.len() != 256 {
                return Err(format!("echo returned {} bytes", back.len()));
            }
            calls += 1;
            if let Some(p) = others.iter().find(|p| ep.peer_failed(**p)) {
                return Err(format!("client {p} failed"));
            }
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, calls, &e),
    }
}

/// A ring of stream sockets inside the job: each rank reads the token from its left
/// neighbour's connection and writes it on to its right one. A dead neighbour is an error or
/// the end of the stream; a survivor that leaves closes its connections, so the loss travels
/// round the ring as ends of streams (what a TCP application sees).
/// The sockets workload's wait for its left neighbour's connection.
static ACCEPT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("chaos.accept");

/// Connects the ring of stream sockets between the ranks: (from the left, to the right). The
/// listener closes at once, which must leave the connection it accepted alone (also while
/// the connecting side has yet to see the accept).
fn socket_ring(ep: &vmmc::Endpoint, port: u16) -> std::io::Result<(VmmcStream, VmmcStream)> {
    let (me, n) = (ep.rank(), ep.size());
    let l = JobListener::bind(ep, port)?;
    let ep2 = ep.clone();
    let connector = std::thread::spawn(move || VmmcStream::connect_job(&ep2, (me + 1) % n, port));
    // An accept is tied to no peer (as with TCP): the application gives up on the one it
    // expects when that process is gone.
    let from = ep
        .proc_of((me + n - 1) % n)
        .map_err(std::io::Error::other)?;
    l.set_nonblocking(true)?;
    let nap = vmmc::wait::Nap::new();
    let mut wait = vmmc::wait::Wait::on(&ACCEPT_SITE, &nap);
    let left = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ep.check_peer(from).map_err(std::io::Error::other)?;
                wait.idle();
            }
            Err(e) => return Err(e),
        }
    };
    let right = connector
        .join()
        .map_err(|_| std::io::Error::other("connect panicked"))??;
    Ok((left, right))
}

fn worker_sockets() -> ExitCode {
    use std::io::Write;
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let me = ep.rank();
    let mut hops = 0u64;
    let r = (|| -> std::io::Result<()> {
        let (mut left, mut right) = socket_ring(&ep, 24)?;
        if me == 0 {
            right.write_all(&1u64.to_ne_bytes())?;
        }
        let mut tok = [0u8; 8];
        loop {
            left.read_exact(&mut tok)?;
            hops += 1;
            right.write_all(&(u64::from_ne_bytes(tok) + 1).to_ne_bytes())?;
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, hops, &e),
    }
}

/// The byte at `pos` of every rank's bulk stream.
fn bulk_byte(pos: u64) -> u8 {
    (pos ^ (pos >> 11)) as u8
}

fn worker_sockets_bulk() -> ExitCode {
    use std::io::Write;
    let ep = match vmmc_run::init() {
        Ok(ep) => ep,
        Err(e) => return lost(usize::MAX, 0, &e),
    };
    let me = ep.rank();
    let mut got = 0u64;
    let r = (|| -> std::io::Result<()> {
        let (mut left, mut right) = socket_ring(&ep, 25)?;
        // A writer streams 64 KiB blocks to the right; a loss there ends this rank too.
        std::thread::spawn(move || {
            let mut block = vec![0u8; 64 << 10];
            let mut pos = 0u64;
            let e = loop {
                for b in block.iter_mut() {
                    *b = bulk_byte(pos);
                    pos += 1;
                }
                if let Err(e) = right.write_all(&block) {
                    break e;
                }
            };
            lost(me, pos, &e);
            std::process::exit(0);
        });
        let mut buf = vec![0u8; 48 << 10];
        loop {
            let k = left.read(&mut buf)?;
            if k == 0 {
                return Err(std::io::Error::other("end of stream"));
            }
            for &b in &buf[..k] {
                if b != bulk_byte(got) {
                    return Err(std::io::Error::other(format!("byte {got} changed")));
                }
                got += 1;
            }
        }
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => lost(me, got, &e),
    }
}

// ----- the driver -----

/// splitmix64: the trial's choices from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
struct Plan {
    transport: &'static str,
    seed: u64,
    workload: &'static str,
    ranks: usize,
    victim: usize,
    delay_ms: u64,
}

impl Plan {
    fn new(seed: u64, workload: Option<&'static str>, ranks: Option<usize>) -> Plan {
        let mut r = Rng(seed);
        let w = WORKLOADS[r.below(WORKLOADS.len() as u64) as usize];
        let n = 3 + r.below(2) as usize;
        let ranks = ranks.unwrap_or(n);
        let victim = r.below(ranks as u64) as usize;
        let delay_ms = r.below(MAX_DELAY_MS + 1);
        Plan {
            transport: "shm",
            seed,
            workload: workload.unwrap_or(w),
            ranks,
            victim,
            delay_ms,
        }
    }
}

#[derive(Default)]
struct Outcome {
    killed: bool,
    hang: bool,
    leaks: Vec<String>,
    failures: Vec<String>,
    detect_ms: Option<u128>,
}

/// The children of `pid` (every thread's list).
fn children(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
        }
    }
    out
}

/// The rank of a process of the job, from its environment.
fn rank_of(pid: u32) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix("VMMC_RANK=")?.parse().ok()
    })
}

/// Whether a process still exists and is not a zombie.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

fn shm_entries() -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for dir in ["/dev/shm", "/dev/shm/vmmc-sockets"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                out.insert(e.path().display().to_string());
            }
        }
    }
    out
}

fn sigkill(pid: u32) -> bool {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn trial(exe: &Path, launcher: &Path, scratch: &Path, p: &Plan) -> Outcome {
    let mut o = Outcome::default();
    let tmp = scratch.join(format!("seed-{}", p.seed));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("scratch directory");
    let shm_before = shm_entries();
    let mut child = Command::new(launcher)
        .args(["-n", &p.ranks.to_string(), "--bind-to", "none"])
        .args(["--transport", p.transport, "--"])
        .arg(exe)
        .args(["--worker", p.workload])
        .env("TMPDIR", &tmp)
        .env_remove("VMMC_TRANSPORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vmmc-run");
    let lpid = child.id();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // Find the victim (the launcher starts the ranks one after the other).
    let t0 = Instant::now();
    let mut victim = None;
    let mut pids = vec![];
    let mut job_pids = std::collections::BTreeSet::from([lpid]);
    while t0.elapsed() < EXIT_LIMIT {
        pids = children(lpid);
        job_pids.extend(pids.iter().copied());
        victim = pids.iter().copied().find(|&c| rank_of(c) == Some(p.victim));
        if victim.is_some() || child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut kill_ms = None;
    if let Some(v) = victim {
        // The chaos itself: the moment of the kill, from the seed.
        std::thread::sleep(Duration::from_millis(p.delay_ms));
        pids = children(lpid);
        job_pids.extend(pids.iter().copied());
        kill_ms = Some(now_ms());
        o.killed = sigkill(v);
    } else {
        o.failures.push(format!("rank {} never started", p.victim));
    }
    let killed_at = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for vmmc-run") {
            break Some(st);
        }
        if killed_at.elapsed() > EXIT_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if status.is_none() {
        o.hang = true;
        for c in children(lpid) {
            sigkill(c);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
    let survivors = p.ranks - 1;
    if let Some(st) = status {
        if st.success() {
            o.failures.push("the launcher exited 0".into());
        }
        if o.killed && !stderr.contains(&format!("rank {} killed by signal 9", p.victim)) {
            o.failures
                .push(format!("the launcher did not name rank {}", p.victim));
        }
    } else {
        o.failures.push(format!(
            "hang: the job was still running {EXIT_LIMIT:?} after the kill"
        ));
    }
    // The survivors' reports.
    let mut reported = 0;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("chaos-worker rank ") else {
            continue;
        };
        let at = rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("at_ms="))
            .and_then(|x| x.parse::<u128>().ok());
        reported += 1;
        if let (Some(at), Some(k)) = (at, kill_ms) {
            let d = at.saturating_sub(k);
            o.detect_ms = Some(o.detect_ms.unwrap_or(0).max(d));
            if d > DETECT_LIMIT.as_millis() {
                o.failures.push(format!(
                    "a survivor learned of the loss after {d} ms: {line}"
                ));
            }
        }
    }
    if o.killed && reported < survivors {
        o.failures.push(format!(
            "{reported} of {survivors} survivors reported the loss"
        ));
    }
    // What is left behind.
    for pid in pids {
        if running(pid) {
            o.leaks.push(format!("process {pid} still running"));
            sigkill(pid);
        }
    }
    if let Ok(rd) = std::fs::read_dir(&tmp) {
        for e in rd.flatten() {
            o.leaks
                .push(format!("left in TMPDIR: {}", e.path().display()));
        }
    }
    // Files in /dev/shm carry their creator's pid (the host-local socket rings: c<pid>,
    // l<pid>); other jobs on the machine may be making their own meanwhile.
    for f in shm_entries().difference(&shm_before) {
        let name = f.rsplit('/').next().unwrap_or("");
        let digits: String = name.chars().filter(|c| c.is_ascii_digit()).collect();
        if digits
            .parse::<u32>()
            .is_ok_and(|pid| job_pids.contains(&pid))
        {
            o.leaks.push(format!("left in /dev/shm: {f}"));
        }
    }
    if !o.failures.is_empty() || !o.leaks.is_empty() {
        eprintln!(
            "--- seed {} stdout\n{stdout}--- stderr\n{stderr}---",
            p.seed
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    o
}

fn driver(args: &[String]) -> ExitCode {
    let mut seeds = 20u64;
    let mut first = 1u64;
    let mut one = None;
    let mut workload = None;
    let mut ranks = None;
    let mut transport = "shm";
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--seeds" => seeds = val().parse().expect("--seeds N"),
            "--first" => first = val().parse().expect("--first S"),
            "--seed" => one = Some(val().parse::<u64>().expect("--seed S")),
            "--workload" => {
                let w = val();
                workload = match w.as_str() {
                    "any" => None,
                    w => Some(*WORKLOADS.iter().find(|x| **x == w).expect(
                        "--workload vmmc|vmmc-au|nx|nx-global|vrpc|srpc|sockets|sockets-bulk|any",
                    )),
                }
            }
            "--ranks" => ranks = Some(val().parse().expect("--ranks 3|4")),
            "--transport" => {
                transport = match val().as_str() {
                    "shm" => "shm",
                    "tcp" => "tcp",
                    other => panic!("--transport shm|tcp, not {other:?}"),
                }
            }
            "-h" | "--help" => {
                println!(
                    "chaos [--seeds N] [--first S] [--seed S] [--workload vmmc|vmmc-au|nx|nx-global|vrpc|srpc|sockets|sockets-bulk|any] [--ranks N] [--transport shm|tcp]"
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("chaos: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let exe = std::env::current_exe().expect("current_exe");
    let launcher = exe.with_file_name("vmmc-run");
    if !launcher.exists() {
        eprintln!(
            "chaos: {} is missing (cargo build -p vmmc-run)",
            launcher.display()
        );
        return ExitCode::from(2);
    }
    let scratch: PathBuf = std::env::temp_dir().join(format!("vmmc-chaos-{}", std::process::id()));
    let list: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (first..first + seeds).collect(),
    };
    let (mut kills, mut hangs, mut leaks, mut failed) = (0, 0, 0, vec![]);
    let mut worst_detect = 0u128;
    for seed in list {
        let mut p = Plan::new(seed, workload, ranks);
        p.transport = transport;
        let o = trial(&exe, &launcher, &scratch, &p);
        kills += o.killed as u32;
        hangs += o.hang as u32;
        leaks += o.leaks.len();
        worst_detect = worst_detect.max(o.detect_ms.unwrap_or(0));
        let ok = o.failures.is_empty() && o.leaks.is_empty();
        println!(
            "seed={} transport={} workload={} ranks={} victim={} delay_ms={} killed={} detect_ms={} {}",
            p.seed,
            p.transport,
            p.workload,
            p.ranks,
            p.victim,
            p.delay_ms,
            o.killed,
            o.detect_ms.map_or("-".into(), |d| d.to_string()),
            if ok {
                "ok".to_string()
            } else {
                format!("FAILED: {}", [o.failures, o.leaks].concat().join("; "))
            }
        );
        if !ok {
            failed.push(seed);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let trials = if one.is_some() { 1 } else { seeds };
    println!(
        "chaos: {trials} trials, {kills} kills, {hangs} hangs, {leaks} leaks, {} failed, worst detection {worst_detect} ms",
        failed.len()
    );
    let on = if transport == "shm" {
        String::new()
    } else {
        format!(" --transport {transport}")
    };
    for s in &failed {
        println!("replay: chaos --seed {s}{on}");
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return match args.get(1).map(String::as_str) {
            Some("vmmc") => worker_vmmc(),
            Some("nx") => worker_nx(),
            Some("vmmc-au") => worker_vmmc_au(),
            Some("nx-global") => worker_nx_global(),
            Some("srpc") => worker_srpc(),
            Some("sockets-bulk") => worker_sockets_bulk(),
            Some("vrpc") => worker_vrpc(),
            Some("sockets") => worker_sockets(),
            other => {
                eprintln!("chaos: unknown workload {other:?}");
                ExitCode::from(2)
            }
        };
    }
    driver(&args)
}
