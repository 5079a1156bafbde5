//! Two hosts on one machine: network namespaces joined by a veth pair, one rank in each
//! (started through `ip netns exec`, rank 0 hosting the rendezvous at its own address). The
//! job must see two nodes, move 4 MiB each way, and the transport's statistics and the veth
//! counters must show that the bytes crossed TCP between the namespaces. Then a second job
//! cuts the link under a quiet connection (no reset, no end of stream): keepalive must report
//! the peer lost within seconds. The namespaces are removed afterwards. Needs root and iproute2; where namespaces cannot be made, the test
//! says so and skips.
//!
//! `cargo test -p vmmc-tcp --test netns`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::{wait_for, Sync};
use vmmc::{Endpoint, ExportOptions, MemKind};
use vmmc_tcp::{Stats, TcpTransport};

const CASE: &str = "VMMC_TCP_NETNS_CASE";
const LEN: usize = 4 << 20;
const LIMIT: Duration = Duration::from_secs(60);

fn pattern(seed: u32) -> Vec<u8> {
    (0..LEN as u32 / 4)
        .flat_map(|i| i.wrapping_mul(2654435761).wrapping_add(seed).to_ne_bytes())
        .collect()
}

/// A rank: each sends LEN bytes to the other, flag after the data, and checks what it got.
fn rank_body() -> Result<(), String> {
    let env = BootEnv::from_env().map_err(|e| e.to_string())?;
    let t = Arc::new(TcpTransport::connect(&env).map_err(|e| format!("bootstrap: {e}"))?);
    let ep = Endpoint::new(t.clone()).map_err(|e| e.to_string())?;
    let job = ep.job();
    if job.procs[0].node == job.procs[1].node || ep.hosts().len() != 2 {
        return Err(format!(
            "expected two nodes, got {:?} on {:?}",
            job.procs, job.hosts
        ));
    }
    let mut sync = Sync::new(&ep)?;
    let r = ep
        .alloc(LEN + 4, MemKind::Shared)
        .map_err(|e| e.to_string())?;
    ep.export(1, &r, ExportOptions::new())
        .map_err(|e| e.to_string())?;
    sync.barrier()?;
    let peer = 1 - ep.rank();
    let p = ep
        .import(ep.proc_of(peer).map_err(|e| e.to_string())?, 1)
        .map_err(|e| e.to_string())?;
    p.send(0, &pattern(ep.rank() as u32))
        .map_err(|e| e.to_string())?;
    p.send(LEN, &1u32.to_ne_bytes())
        .map_err(|e| e.to_string())?;
    wait_for(&ep, Some(peer), "the peer's data", || {
        r.load_u32(LEN).unwrap_or(0) == 1
    })?;
    let mut got = vec![0u8; LEN];
    r.read(0, &mut got).map_err(|e| e.to_string())?;
    if got != pattern(peer as u32) {
        return Err("the data from the other namespace is wrong".into());
    }
    println!(
        "rank {} on host {} (node {})",
        ep.rank(),
        ep.my_host_name(),
        ep.me().node
    );
    sync.barrier()?;
    drop(ep);
    Ok(())
}

/// A rank of the keepalive job: both wait at a barrier, say so, then rank 1 goes quiet and
/// rank 0 waits for its loss (the harness cuts the link).
fn keepalive_body() -> Result<(), String> {
    use std::io::Write;
    let env = BootEnv::from_env().map_err(|e| e.to_string())?;
    let t = TcpTransport::connect(&env).map_err(|e| format!("bootstrap: {e}"))?;
    let ep = Endpoint::new(Arc::new(t)).map_err(|e| e.to_string())?;
    let mut sync = Sync::new(&ep)?;
    sync.barrier()?;
    println!("ready");
    let _ = std::io::stdout().flush();
    if ep.rank() == 1 {
        loop {
            std::thread::park();
        }
    }
    let peer = ep.proc_of(1).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    // Polls a state the progress engine sets; nothing to wait on.
    loop {
        match ep.check_peer(peer) {
            Err(vmmc::Error::PeerLost(_)) => break,
            Err(e) => return Err(format!("check_peer: {e}")),
            Ok(()) if t0.elapsed() > Duration::from_secs(40) => {
                return Err("a silent peer behind a cut link is still alive after 40 s".into())
            }
            Ok(()) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    println!("lost after {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Runs `ip ARGS`, returning its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Hosts {
    ns: [String; 2],
    dev: [String; 2],
    addr: [String; 2],
}

impl Hosts {
    fn make() -> Result<Hosts, String> {
        let id = std::process::id() % 100_000;
        let net = 16 + id % 200;
        let h = Hosts {
            ns: [format!("vmmc-tcp-a-{id}"), format!("vmmc-tcp-b-{id}")],
            dev: [format!("vta{id}"), format!("vtb{id}")],
            addr: [format!("10.213.{net}.1"), format!("10.213.{net}.2")],
        };
        ip(&["netns", "add", &h.ns[0]])?;
        // From here on, drop removes whatever was made.
        ip(&["netns", "add", &h.ns[1]])?;
        ip(&[
            "link", "add", &h.dev[0], "type", "veth", "peer", "name", &h.dev[1],
        ])?;
        for i in 0..2 {
            ip(&["link", "set", &h.dev[i], "netns", &h.ns[i]])?;
            let cidr = format!("{}/24", h.addr[i]);
            ip(&["-n", &h.ns[i], "addr", "add", &cidr, "dev", &h.dev[i]])?;
            ip(&["-n", &h.ns[i], "link", "set", &h.dev[i], "up"])?;
            ip(&["-n", &h.ns[i], "link", "set", "lo", "up"])?;
        }
        Ok(h)
    }

    /// A counter of a veth end, read inside its namespace.
    fn counter(&self, i: usize, name: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], "cat"])
            .arg(format!("/sys/class/net/{}/statistics/{name}", self.dev[i]))
            .output()
            .expect("ip netns exec cat");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            // Deleting a namespace deletes its end of the veth pair, and with it the pair.
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn read_stats(dir: &Path, rank: usize) -> Result<Stats, String> {
    let p = dir.join(format!("stats-{rank}.json"));
    let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    Stats::from_json(&s).ok_or_else(|| format!("bad statistics {s:?}"))
}

fn run(h: &Hosts, dir: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let rendezvous = format!("{}:7471", h.addr[0]);
    let stats = dir.join("stats-{rank}.json");
    let before = h.counter(1, "tx_bytes");
    let mut kids = Vec::new();
    for rank in 0..2 {
        let c = Command::new("ip")
            .args(["netns", "exec", &h.ns[rank]])
            .arg(&exe)
            .env(CASE, "rank")
            .env(vars::TRANSPORT, "tcp")
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, "2")
            .env(vars::RENDEZVOUS, &rendezvous)
            .env_remove(vmmc_tcp::RENDEZVOUS_BY)
            .env(vmmc_tcp::STATS_VAR, &stats)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        kids.push(c);
    }
    let start = Instant::now();
    let mut outs = Vec::new();
    for mut k in kids {
        while k.try_wait().map_err(|e| e.to_string())?.is_none() {
            if start.elapsed() > LIMIT {
                let _ = k.kill();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        outs.push(k.wait_with_output().map_err(|e| e.to_string())?);
    }
    for (r, o) in outs.iter().enumerate() {
        if !o.status.success() {
            return Err(format!(
                "rank {r}: {}\n{}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        print!("  {}", String::from_utf8_lossy(&o.stdout));
    }
    let crossed = h.counter(1, "tx_bytes") - before;
    for r in 0..2 {
        let s = read_stats(dir, r)?;
        println!("  rank {r} statistics: {}", s.to_json());
        if s.bytes_sent < LEN as u64 || s.bytes_received < LEN as u64 || s.writes_placed < 2 {
            return Err(format!(
                "rank {r}'s statistics do not show the transfers: {s:?}"
            ));
        }
    }
    println!("  veth {} sent {crossed} bytes", h.dev[1]);
    if crossed < LEN as u64 {
        return Err(format!(
            "only {crossed} bytes left namespace {} on its veth",
            h.ns[1]
        ));
    }
    Ok(())
}

/// The keepalive job: returns what rank 0 printed.
fn run_keepalive(h: &Hosts) -> Result<String, String> {
    use std::io::BufRead;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let rendezvous = format!("{}:7472", h.addr[0]);
    let mut kids = Vec::new();
    for rank in 0..2 {
        let c = Command::new("ip")
            .args(["netns", "exec", &h.ns[rank]])
            .arg(&exe)
            .env(CASE, "keepalive")
            .env(vars::TRANSPORT, "tcp")
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, "2")
            .env(vars::RENDEZVOUS, &rendezvous)
            .env_remove(vmmc_tcp::RENDEZVOUS_BY)
            .env_remove(vmmc_tcp::STATS_VAR)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        kids.push(c);
    }
    let mut outs: Vec<_> = kids
        .iter_mut()
        .map(|k| std::io::BufReader::new(k.stdout.take().expect("piped")))
        .collect();
    for (r, o) in outs.iter_mut().enumerate() {
        let mut line = String::new();
        let _ = o.read_line(&mut line);
        if line.trim() != "ready" {
            for k in kids.iter_mut() {
                let _ = k.kill();
                let _ = k.wait();
            }
            return Err(format!("rank {r} said {line:?}"));
        }
    }
    // Cut the link: packets are dropped, nobody resets or closes anything.
    ip(&["-n", &h.ns[1], "link", "set", &h.dev[1], "down"])?;
    let start = Instant::now();
    let st = loop {
        if let Some(st) = kids[0].try_wait().map_err(|e| e.to_string())? {
            break Some(st);
        }
        if start.elapsed() > LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for k in kids.iter_mut() {
        let _ = k.kill();
        let _ = k.wait();
    }
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut outs[0], &mut rest);
    let mut err = String::new();
    if let Some(e) = kids[0].stderr.as_mut() {
        let _ = std::io::Read::read_to_string(e, &mut err);
    }
    match st {
        Some(st) if st.success() => Ok(rest.trim().to_string()),
        Some(st) => Err(format!("rank 0: {st}: {rest}{err}")),
        None => Err("rank 0 did not finish".into()),
    }
}

fn main() {
    if std::env::var(CASE).as_deref() == Ok("keepalive") {
        match keepalive_body() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!(
                    "rank {}: {e}",
                    std::env::var(vars::RANK).unwrap_or_default()
                );
                std::process::exit(1);
            }
        }
    }
    if std::env::var(CASE).is_ok() {
        match rank_body() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!(
                    "rank {}: {e}",
                    std::env::var(vars::RANK).unwrap_or_default()
                );
                std::process::exit(1);
            }
        }
    }
    let t = Instant::now();
    let hosts = match Hosts::make() {
        Ok(h) => h,
        Err(e) => {
            println!(
                "test netns::two_namespaces_over_a_veth_pair ... skipped: network namespaces \
                 cannot be made here (needs root and iproute2): {e}"
            );
            return;
        }
    };
    let dir: PathBuf = std::env::temp_dir().join(format!("vmmc-tcp-netns-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let r = run(&hosts, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let mut failed = false;
    match r {
        Ok(()) => println!(
            "test netns::two_namespaces_over_a_veth_pair ... ok ({:.2?})",
            t.elapsed()
        ),
        Err(e) => {
            println!("test netns::two_namespaces_over_a_veth_pair ... FAILED: {e}");
            failed = true;
        }
    }
    let t = Instant::now();
    match run_keepalive(&hosts) {
        Ok(said) => println!(
            "test netns::a_silent_peer_behind_a_cut_link_is_lost ... ok ({:.2?}: {said})",
            t.elapsed()
        ),
        Err(e) => {
            println!("test netns::a_silent_peer_behind_a_cut_link_is_lost ... FAILED: {e}");
            failed = true;
        }
    }
    drop(hosts);
    if failed {
        std::process::exit(1);
    }
}
