//! The receiver's checks on arrival and the survivors of a killed peer, across processes
//! connected by TCP over loopback. The test binary re-executes itself once per rank.
//!
//! `cargo test -p vmmc-tcp --test arrival`

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::{vars, BootEnv};
use vmmc::conformance::Sync;
use vmmc::{Endpoint, Error, ExportOptions, MemKind};
use vmmc_tcp::server::Rendezvous;
use vmmc_tcp::TcpTransport;

const CASE: &str = "VMMC_TCP_TEST_CASE";
const LIMIT: Duration = Duration::from_secs(60);

type Check = Result<(), String>;

fn ctx<T>(r: vmmc::Result<T>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Rank 1 sends forged frames to rank 0: an unknown key, ranges outside the buffer, an
/// unaligned offset, and a key it learned from a permitted importer but may not use itself.
/// Rank 0 must place none of them, count each, and keep the connection.
fn refused(t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const ONLY2: u32 = 7;
    const ANY: u32 = 8;
    match ep.rank() {
        0 => {
            let a = ctx(ep.alloc(64, MemKind::Shared), "alloc")?;
            let b = ctx(ep.alloc(64, MemKind::Shared), "alloc")?;
            let two = ctx(ep.proc_of(2), "rank")?;
            ctx(
                ep.export(ONLY2, &a, ExportOptions::new().importers([two])),
                "export",
            )?;
            ctx(ep.export(ANY, &b, ExportOptions::new()), "export")?;
            let before = t.stats();
            sync.barrier()?; // exported
            sync.exchange(0)?; // the key travels from rank 2 to rank 1, in two halves
            sync.exchange(0)?;
            sync.barrier()?; // rank 1 has sent everything
            let s = t.stats();
            let d = |a: u64, b: u64| a - b;
            let got = (
                d(s.refused_unknown, before.refused_unknown),
                d(s.refused_bounds, before.refused_bounds),
                d(s.refused_permission, before.refused_permission),
            );
            if got != (1, 3, 1) {
                return Err(format!(
                    "refusals (unknown, bounds, permission) = {got:?}, want (1, 3, 1)"
                ));
            }
            let mut v = vec![0u8; 64];
            ctx(b.read(0, &mut v), "read")?;
            if ctx(b.load_u32(0), "read")? != 0x600D || v[4..].iter().any(|x| *x != 0) {
                return Err(format!(
                    "buffer {ANY} holds more than the valid write: {v:?}"
                ));
            }
            ctx(a.read(0, &mut v), "read")?;
            if v.iter().any(|x| *x != 0) {
                return Err(format!("the forged write reached buffer {ONLY2}"));
            }
            sync.barrier()
        }
        1 => {
            sync.barrier()?;
            let low = sync.exchange(0)?[2];
            let high = sync.exchange(0)?[2];
            let stolen = u64::from(low) | u64::from(high) << 32;
            let (key, len) = ctx(t.key_of(0, ANY), "key")?;
            if len != 64 {
                return Err(format!("length {len}"));
            }
            // The sender side checks nothing here: only the receiver stands in the way.
            let w = |k: u64, off: u64, d: &[u8]| ctx(t.send_raw_write(0, k, off, d), "raw write");
            w(key ^ 0xDEAD_0000_0000, 0, &[1; 4])?; // no such export
            w(key, 64, &[2; 4])?; // past the end
            w(key, 60, &[3; 8])?; // straddles the end
            w(key, 2, &[4; 4])?; // unaligned
            w(stolen, 0, &[5; 4])?; // not a permitted importer
            w(key, 0, &0x600Du32.to_ne_bytes())?; // valid
                                                  // The same connection still carries the barrier.
            sync.barrier()?;
            sync.barrier()
        }
        _ => {
            sync.barrier()?;
            let (key, _) = ctx(t.key_of(0, ONLY2), "permitted key")?;
            sync.exchange(key as u32)?;
            sync.exchange((key >> 32) as u32)?;
            sync.barrier()?;
            sync.barrier()
        }
    }
}

/// Rank 1 is killed from outside while rank 0 streams to it: rank 0's sends fail with
/// PeerLost in bounded time, and ranks 0 and 2 keep working together.
fn killed(_t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    let r = ctx(ep.alloc(1 << 16, MemKind::Shared), "alloc")?;
    ctx(ep.export(9, &r, ExportOptions::new()), "export")?;
    // Rank 0 links to both before rank 1 can be killed (it is, once the barrier is passed).
    let links = if ep.rank() == 0 {
        Some((
            ctx(ep.import(ctx(ep.proc_of(1), "rank")?, 9), "import")?,
            ctx(ep.import(ctx(ep.proc_of(2), "rank")?, 9), "import")?,
        ))
    } else {
        None
    };
    sync.barrier()?;
    match ep.rank() {
        1 => {
            println!("ready");
            loop {
                std::thread::park();
            }
        }
        0 => {
            let (victim, other) = links.expect("rank 0 imported");
            let start = Instant::now();
            let data = vec![7u8; 1 << 16];
            let err = loop {
                if let Err(e) = victim.send(0, &data) {
                    break e;
                }
                if start.elapsed() > LIMIT {
                    return Err("sends to a killed peer keep succeeding".into());
                }
            };
            if !matches!(err, Error::PeerLost(_)) {
                return Err(format!("send to a killed peer: {err}"));
            }
            // Survivors go on: data to rank 2, then a barrier among the two.
            ctx(other.send(0, &data), "send to the survivor")?;
            sync.exchange_among(&[0, 2], 1)?;
            if ep.peer_alive(ctx(ep.proc_of(1), "rank")?) {
                return Err("the killed rank is reported alive".into());
            }
            Ok(())
        }
        _ => {
            sync.exchange_among(&[0, 2], 1)?;
            if ctx(r.load_u32(1 << 15), "read")? != 0x0707_0707 {
                return Err("the survivor's data did not land".into());
            }
            Ok(())
        }
    }
}

/// A small job whose rendezvous rank 0 hosts at `VMMC_RENDEZVOUS` (no launcher).
fn rank0_hosts(t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    let seen = sync.exchange(ep.rank() as u32 + 10)?;
    if seen != [10, 11] {
        return Err(format!("exchange {seen:?}"));
    }
    if t.stats().writes_placed == 0 {
        return Err("no write crossed the transport".into());
    }
    sync.barrier()
}

/// A rank imports its own buffer: writes are placed at once, with the same checks, the
/// notification is raised, and unexport breaks the link.
fn self_import(t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let r = ctx(ep.alloc(64, MemKind::Shared), "alloc")?;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    ctx(
        ep.export(
            3,
            &r,
            ExportOptions::new().handler(move |n| s2.lock().expect("log").push(n)),
        ),
        "export",
    )?;
    let p = ctx(ep.import(ep.me(), 3), "import my own buffer")?;
    let before = t.stats().frames_sent;
    ctx(p.send_notify(8, &[7u8; 8]), "send to myself")?;
    if ctx(r.load_u32(12), "read")? != 0x0707_0707 {
        return Err("the write to myself did not land".into());
    }
    vmmc::conformance::wait_for(ep, None, "the notification", || {
        !seen.lock().expect("log").is_empty()
    })?;
    let n = seen.lock().expect("log")[0];
    if (n.buf, n.offset, n.value) != (3, 12, 0x0707_0707) {
        return Err(format!("notification {n:?}"));
    }
    if t.stats().frames_sent != before {
        return Err("a write to myself went through a socket".into());
    }
    ctx(ep.unexport(3), "unexport")?;
    match p.send(0, &[1; 4]) {
        Err(Error::Unexported) => Ok(()),
        other => Err(format!("send after unexport: {other:?}")),
    }
}

/// CPU time this process has used (user + system).
fn cpu_time() -> Duration {
    // SAFETY: rusage is plain data, filled by getrusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to our rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// An idle job burns no CPU: the progress engine sleeps in epoll, the core's notification
/// thread in the transport's queue.
fn idle(_t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    sync.barrier()?;
    let (c0, t0) = (cpu_time(), Instant::now());
    // The measuring window (nothing to wait for: the point is that nothing happens).
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time() - c0;
    let share = used.as_secs_f64() / t0.elapsed().as_secs_f64();
    sync.barrier()?;
    if share > 0.02 {
        return Err(format!(
            "an idle rank used {used:?} of CPU in {:?}",
            t0.elapsed()
        ));
    }
    Ok(())
}

/// Rank 1 leaves the job cleanly while rank 0 still writes to it: rank 1's socket closes
/// with frames unread, and the kernel answers them with a reset. Rank 1 said goodbye first,
/// so rank 0 must not take it for a crash (under mpi a crashed peer means leaving without
/// `MPI_Finalize`, which mpirun reports as a failed job).
fn left_cleanly(t: &Arc<TcpTransport>, ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const BUF: u32 = 9;
    let r = ctx(ep.alloc(4096, MemKind::Shared), "alloc")?;
    ctx(ep.export(BUF, &r, ExportOptions::new()), "export")?;
    sync.barrier()?;
    let one = ctx(ep.proc_of(1), "rank")?;
    let p = match ep.rank() {
        0 => ctx(ep.import(one, BUF), "import")?,
        _ => {
            sync.barrier()?;
            return Ok(());
        }
    };
    sync.barrier()?;
    let start = Instant::now();
    let mut sent = 0u64;
    // Writes until rank 1 is gone: the last ones reach a process that no longer reads.
    loop {
        match p.send(0, &[7u8; 4096]) {
            Ok(()) => sent += 1,
            Err(Error::PeerLost(_)) | Err(Error::Unexported) => break,
            Err(e) => return Err(format!("write {sent}: {e}")),
        }
        if start.elapsed() > LIMIT {
            return Err("rank 1 never left".into());
        }
    }
    vmmc::conformance::wait_for(ep, None, "rank 1's departure", || !ep.peer_alive(one))?;
    if t.peer_crashed(1) {
        return Err(format!(
            "rank 1 left cleanly (after {sent} writes) but is taken for crashed"
        ));
    }
    Ok(())
}

type Body = fn(&Arc<TcpTransport>, &Endpoint) -> Check;

fn body(name: &str) -> Body {
    match name {
        "refused" => refused,
        "killed" => killed,
        "rank0_hosts" => rank0_hosts,
        "self_import" => self_import,
        "idle" => idle,
        "left_cleanly" => left_cleanly,
        _ => panic!("no case {name}"),
    }
}

fn child(name: &str) -> ! {
    let f = body(name);
    let r = BootEnv::from_env()
        .and_then(|env| TcpTransport::connect(&env))
        .map_err(|e| format!("bootstrap: {e}"))
        .and_then(|t| {
            let t = Arc::new(t);
            let ep = Endpoint::new(t.clone()).map_err(|e| format!("endpoint: {e}"))?;
            let r = f(&t, &ep);
            drop(ep);
            r
        });
    match r {
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

/// Starts the ranks of case `name`; with `launcher`, this process hosts the rendezvous.
fn spawn(name: &str, n: usize, launcher: bool) -> (Option<Rendezvous>, Vec<Child>) {
    let (rv, addr) = if launcher {
        let rv = Rendezvous::start("127.0.0.1:0", n).expect("rendezvous");
        let a = rv.addr().to_string();
        (Some(rv), a)
    } else {
        // A free port for rank 0 to listen on.
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr").to_string();
        drop(l);
        (None, a)
    };
    let exe = std::env::current_exe().expect("exe");
    let kids = (0..n)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.env(CASE, name)
                .env(vars::TRANSPORT, "tcp")
                .env(vars::RANK, rank.to_string())
                .env(vars::SIZE, n.to_string())
                .env(vars::RENDEZVOUS, &addr)
                .env_remove(vmmc_tcp::RENDEZVOUS_BY)
                .stdin(Stdio::null())
                .stdout(Stdio::piped());
            if launcher {
                c.env(vmmc_tcp::RENDEZVOUS_BY, "launcher");
            }
            c.spawn().expect("spawn a rank")
        })
        .collect();
    (rv, kids)
}

fn wait_all(kids: &mut [Child]) -> Vec<std::process::ExitStatus> {
    let start = Instant::now();
    let mut out = vec![None; kids.len()];
    while out.iter().any(Option::is_none) {
        for (i, k) in kids.iter_mut().enumerate() {
            if out[i].is_none() {
                out[i] = k.try_wait().expect("wait");
            }
        }
        if start.elapsed() > LIMIT {
            kids.iter_mut().for_each(|k| {
                let _ = k.kill();
            });
            panic!("job hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    out.into_iter().map(Option::unwrap).collect()
}

fn main() {
    if let Ok(name) = std::env::var(CASE) {
        child(&name);
    }
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let mut failed = 0;
    let mut passed = 0;
    let mut report = |name: &str, t: Instant, r: Result<(), String>| match r {
        Ok(()) => {
            passed += 1;
            println!("test arrival::{name} ... ok ({:.2?})", t.elapsed());
        }
        Err(e) => {
            failed += 1;
            println!("test arrival::{name} ... FAILED: {e}");
        }
    };
    let all_ok = |st: &[std::process::ExitStatus]| -> Result<(), String> {
        match st.iter().position(|s| !s.success()) {
            None => Ok(()),
            Some(r) => Err(format!("rank {r}: {}", st[r])),
        }
    };
    if "refused_on_arrival".contains(&filter) {
        let t = Instant::now();
        let (_rv, mut kids) = spawn("refused", 3, true);
        report("refused_on_arrival", t, all_ok(&wait_all(&mut kids)));
    }
    if "rank0_hosts_the_rendezvous".contains(&filter) {
        let t = Instant::now();
        let (_rv, mut kids) = spawn("rank0_hosts", 2, false);
        report(
            "rank0_hosts_the_rendezvous",
            t,
            all_ok(&wait_all(&mut kids)),
        );
    }
    if "a_rank_writes_its_own_buffer".contains(&filter) {
        let t = Instant::now();
        let (_rv, mut kids) = spawn("self_import", 1, true);
        report(
            "a_rank_writes_its_own_buffer",
            t,
            all_ok(&wait_all(&mut kids)),
        );
    }
    if "an_idle_job_burns_no_cpu".contains(&filter) {
        let t = Instant::now();
        let (_rv, mut kids) = spawn("idle", 2, true);
        report("an_idle_job_burns_no_cpu", t, all_ok(&wait_all(&mut kids)));
    }
    if "a_peer_that_left_cleanly_is_no_crash".contains(&filter) {
        // Ten jobs: the reset comes only when rank 1 closes with frames unread.
        let t = Instant::now();
        let r = (0..10).try_for_each(|_| {
            let (_rv, mut kids) = spawn("left_cleanly", 2, true);
            all_ok(&wait_all(&mut kids))
        });
        report("a_peer_that_left_cleanly_is_no_crash", t, r);
    }
    if "killed_peer_is_lost_survivors_go_on".contains(&filter) {
        let t = Instant::now();
        let (_rv, mut kids) = spawn("killed", 3, true);
        // Kill rank 1 once it says it is ready (its exports are imported by then).
        let out = kids[1].stdout.take().expect("piped");
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let r = if line.trim() != "ready" {
            Err(format!("rank 1 said {line:?}"))
        } else {
            let _ = kids[1].kill();
            let st = wait_all(&mut kids);
            if st[1].signal() != Some(libc::SIGKILL) {
                Err(format!("rank 1: {}", st[1]))
            } else {
                all_ok(&[st[0], st[2]])
            }
        };
        report("killed_peer_is_lost_survivors_go_on", t, r);
    }
    println!("\narrival: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
