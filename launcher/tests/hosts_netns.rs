//! `vmmc-run --hosts` across two hosts on one machine: network namespaces joined by a veth
//! pair, the launcher in the first, ranks placed round-robin through `--rsh "ip netns exec"`
//! (the site's remote-shell agent; nothing of ours runs in the namespaces but the processes of
//! the job). Rank 0 then spawns a process on the second host. Every process must report the
//! namespace it was placed in, the ranks must be two nodes, the data must arrive, and the
//! transport's statistics and the veth counters must show that the bytes crossed TCP between
//! the namespaces. Needs root and iproute2; where namespaces cannot be made, the test says so
//! and skips.
//!
//! `cargo test -p vmmc-run --test hosts_netns`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

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
            ns: [format!("vmmc-run-a-{id}"), format!("vmmc-run-b-{id}")],
            dev: [format!("vra{id}"), format!("vrb{id}")],
            addr: [format!("10.214.{net}.1"), format!("10.214.{net}.2")],
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

    /// Runs a command inside namespace `i`; its stdout.
    fn exec(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i]])
            .args(args)
            .output()
            .expect("ip netns exec");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A counter of a veth end, read inside its namespace.
    fn counter(&self, i: usize, name: &str) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/{name}", self.dev[i]);
        self.exec(i, &["cat", &path]).parse().unwrap_or(0)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(p.exists(), "example {name} not built at {}", p.display());
    p
}

fn stats(dir: &Path, rank: usize) -> Result<vmmc_tcp::Stats, String> {
    let p = dir.join(format!("stats-{rank}.json"));
    let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    vmmc_tcp::Stats::from_json(&s).ok_or_else(|| format!("bad statistics {s:?}"))
}

fn run(h: &Hosts, dir: &Path) -> Result<String, String> {
    let ex = example("spawn");
    let before = h.counter(1, "tx_bytes");
    let out = Command::new("ip")
        .args(["netns", "exec", &h.ns[0]])
        .arg(env!("CARGO_BIN_EXE_vmmc-run"))
        .args(["-n", "2", "--transport", "tcp", "--tag-output"])
        .args(["--hosts", &format!("{},{}", h.ns[0], h.ns[1])])
        .args(["--rsh", "ip netns exec"])
        .args(["--rendezvous", &format!("{}:0", h.addr[0])])
        .arg("--")
        .arg(&ex)
        .env_remove("VMMC_TRANSPORT")
        .env_remove("VMMC_HOSTS")
        .env(vmmc_tcp::STATS_VAR, dir.join("stats-{rank}.json"))
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("vmmc-run: {}\n{text}{err}", out.status));
    }
    // Rank 0 in the first namespace, rank 1 and the spawned process (rank 4) in the second.
    let ns = [
        h.exec(0, &["readlink", "/proc/self/ns/net"]),
        h.exec(1, &["readlink", "/proc/self/ns/net"]),
    ];
    let mut nodes = Vec::new();
    for (rank, i) in [(0, 0), (1, 1), (4, 1)] {
        let tag = format!("[{rank}] process rank {rank} (");
        let line = text
            .lines()
            .find(|l| l.starts_with(&tag))
            .ok_or_else(|| format!("no report from rank {rank}:\n{text}{err}"))?;
        if !line.ends_with(&format!("netns {}", ns[i])) {
            return Err(format!("rank {rank} did not run in {}: {line}", h.ns[i]));
        }
        if !line.contains(&format!("session hosts {},{};", h.ns[0], h.ns[1])) {
            return Err(format!("rank {rank}'s session hosts: {line}"));
        }
        let node = line[tag.len()..]
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        nodes.push(node);
    }
    if nodes[0] == nodes[1] || nodes[1] != nodes[2] {
        return Err(format!(
            "nodes {nodes:?}: expected two, the child's rank 1's"
        ));
    }
    for want in [
        "[4] spawned process",
        "[0] rank 0 imported the spawned process",
        "[1] rank 1 imported the spawned process",
    ] {
        if !text.lines().any(|l| l.starts_with(want)) {
            return Err(format!("missing {want:?}:\n{text}{err}"));
        }
    }
    // Every process received the others' writes through its data connections.
    let mut said = Vec::new();
    for r in [0, 1, 4] {
        let s = stats(dir, r)?;
        if s.writes_placed < 1 || s.bytes_received == 0 {
            return Err(format!("rank {r}'s statistics show no transfer: {s:?}"));
        }
        said.push(format!("rank {r} placed {}", s.writes_placed));
    }
    let crossed = h.counter(1, "tx_bytes") - before;
    if crossed == 0 {
        return Err(format!("nothing left namespace {} on its veth", h.ns[1]));
    }
    said.push(format!("veth {} sent {crossed} bytes", h.dev[1]));
    Ok(said.join(", "))
}

fn main() {
    let name = "hosts_netns::ranks_and_a_spawn_across_two_namespaces";
    let t = Instant::now();
    let hosts = match Hosts::make() {
        Ok(h) => h,
        Err(e) => {
            println!(
                "test {name} ... skipped: network namespaces cannot be made here (needs root \
                 and iproute2): {e}"
            );
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("vmmc-run-netns-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let r = run(&hosts, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    drop(hosts);
    match r {
        Ok(said) => println!("test {name} ... ok ({:.2?}: {said})", t.elapsed()),
        Err(e) => {
            println!("test {name} ... FAILED: {e}");
            std::process::exit(1);
        }
    }
}
