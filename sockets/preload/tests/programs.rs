//! Unmodified Debian programs under `LD_PRELOAD=libvmmc_sockets.so`, and the failure cases,
//! across real processes. Each test proves that the data went through the VMMC rings with
//! the per-connection lines the library appends to `VMMC_SOCK_STATS`.
//!
//! Programs used (installed by scripts/setup.sh): sockperf, iperf3, redis-server,
//! redis-benchmark, redis-cli, nc (netcat-openbsd), nginx-light, curl, sha256sum. The
//! failure cases run this test binary itself as interposed children (`PRELOAD_ROLE=...`):
//! Rust's std calls the C library's socket functions, so it is interposed like any program.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_path_buf()
}

/// The library, built once per test process in this test's profile.
fn library() -> PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "-p", "sockets-preload"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match target_dir().file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(p) => {
                cmd.args(["--profile", p]);
            }
            None => panic!("unknown profile"),
        }
        assert!(
            cmd.status().expect("cargo").success(),
            "building the library failed"
        );
    });
    let so = target_dir().join("libvmmc_sockets.so");
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// A scratch directory and statistics file for one test.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("vmmc-preload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        // Servers that drop privileges (nginx's workers) must be able to append.
        let stats = dir.join("stats.jsonl");
        std::fs::write(&stats, "").expect("stats file");
        use std::os::unix::fs::PermissionsExt;
        for p in [&dir, &stats] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        Scratch { dir }
    }

    fn stats_path(&self) -> PathBuf {
        self.dir.join("stats.jsonl")
    }

    /// A command under the library, writing statistics here.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("LD_PRELOAD", library())
            .env("VMMC_SOCK_STATS", self.stats_path());
        c
    }

    /// (sent, received) through the rings per process id.
    fn stats(&self) -> BTreeMap<u64, (u64, u64)> {
        let text = std::fs::read_to_string(self.stats_path()).expect("stats");
        let mut m = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).expect("stats line is JSON");
            let e = m.entry(v["pid"].as_u64().expect("pid")).or_insert((0, 0));
            e.0 += v["sent"].as_u64().expect("sent");
            e.1 += v["received"].as_u64().expect("received");
        }
        m
    }

    fn stats_of(&self, pid: u32) -> (u64, u64) {
        self.stats().get(&(pid as u64)).copied().unwrap_or((0, 0))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Kills a server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first, so that a server with worker processes (nginx) takes them down.
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.0.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long any program a test starts may run: a program still running then is killed, so
/// that a hang fails its test (what it was waiting for ends) instead of stopping the suite.
const PROGRAM_LIMIT: Duration = Duration::from_secs(240);

/// Programs started by the tests, with their deadlines, and those the watchdog killed.
static WATCHED: std::sync::Mutex<Vec<(u32, Instant, String)>> = std::sync::Mutex::new(Vec::new());
static KILLED: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Starts `c` under the watchdog (a thread that kills it once [`PROGRAM_LIMIT`] has passed).
fn spawn_watched(c: &mut Command, what: &str) -> Child {
    static WATCHDOG: std::sync::Once = std::sync::Once::new();
    WATCHDOG.call_once(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = Instant::now();
            let mut w = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
            w.retain(|(pid, deadline, what)| {
                // SAFETY: signal 0 checks whether our child (or its zombie) is still there.
                if unsafe { libc::kill(*pid as i32, 0) } != 0 {
                    return false;
                }
                if now < *deadline {
                    return true;
                }
                let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                    st.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                });
                if !zombie {
                    eprintln!(
                        "watchdog: {what} (pid {pid}) still ran after {PROGRAM_LIMIT:?}: killed"
                    );
                    KILLED.lock().unwrap_or_else(|e| e.into_inner()).push(*pid);
                    // SAFETY: killing a program this test binary started.
                    unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                }
                false
            });
        });
    });
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e} (scripts/setup.sh installs the programs)"));
    WATCHED.lock().unwrap_or_else(|e| e.into_inner()).push((
        child.id(),
        Instant::now() + PROGRAM_LIMIT,
        what.to_string(),
    ));
    child
}

/// Runs `c` to its end under the watchdog, capturing its output (stdin empty unless set).
fn output_watched(c: &mut Command, what: &str) -> std::process::Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = spawn_watched(c, what);
    let pid = child.id();
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let killed = KILLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&pid);
    assert!(
        !killed,
        "{what} hung and was killed\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Waits until the interposed `child` listens on `port` (its announcement names it), without
/// connecting (a probe would use up a one-shot server). An announcement left by an earlier
/// process on the same port does not count: a client started on it would find no listener.
fn wait_listening(port: u16, child: &mut Child) {
    let path = Path::new(sockets::SHM_DIR).join(format!("l{port}"));
    let t0 = Instant::now();
    let pid = child.id().to_string();
    let names_child = |text: String| text.split_whitespace().next() == Some(pid.as_str());
    while !std::fs::read_to_string(&path).is_ok_and(names_child) {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("server exited before listening: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run_ok(mut c: Command, what: &str) -> String {
    let out = output_watched(c.stdin(Stdio::null()), what);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("digest")
        .to_string()
}

fn random_file(path: &Path, len: usize) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ len as u64;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut left = len;
    while left > 0 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        let n = left.min(8);
        f.write_all(&b[..n]).expect("write");
        left -= n;
    }
    f.flush().expect("flush");
}

/// The number after `key` in sockperf's output (`ReceivedMessages=123`).
fn field(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("{key} not in:\n{text}"));
    text[at + key.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key}"))
}

#[test]
fn sockperf_ping_pong_and_throughput() {
    let s = Scratch::new("sockperf");
    let port = free_port();
    let mut srv = s.cmd("sockperf");
    srv.args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = Server(spawn_watched(&mut srv, "sockperf server"));
    wait_listening(port, &mut srv.0);

    let mut pp = s.cmd("sockperf");
    pp.args([
        "pp",
        "--tcp",
        "-i",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "1",
        "-m",
        "64",
        "--mps=1000000",
    ]);
    let out = run_ok(pp, "sockperf ping-pong");
    let got = field(&out, "ReceivedMessages=");
    assert!(got > 100, "{got} messages in a second:\n{out}");
    assert!(out.contains("# dropped messages = 0"), "{out}");
    let mut tp = s.cmd("sockperf");
    tp.args([
        "tp",
        "--tcp",
        "-i",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        "1",
        "-m",
        "65000",
    ]);
    let out = run_ok(tp, "sockperf throughput");
    let sent = field(&out, "Total of ");
    assert!(sent > 10, "{out}");
    // Both clients' bytes went through the rings: the ping-pong's messages both ways, every
    // throughput message one way.
    let st = s.stats();
    let total_sent: u64 = st.values().map(|v| v.0).sum();
    assert!(
        total_sent >= 64 * got + 65000 * sent,
        "rings carried {total_sent} bytes; expected at least {}: {st:?}",
        64 * got + 65000 * sent
    );
}

#[test]
fn iperf3_client_and_server() {
    let s = Scratch::new("iperf3");
    let port = free_port().to_string();
    let mut srv = s.cmd("iperf3");
    srv.args(["-s", "-1", "-p", &port]).stdout(Stdio::null());
    let mut srv = Server(spawn_watched(&mut srv, "iperf3 server"));
    wait_listening(port.parse().expect("port"), &mut srv.0);
    let mut c = s.cmd("iperf3");
    c.args(["-c", "127.0.0.1", "-p", &port, "-t", "1", "-J"]);
    let out = run_ok(c, "iperf3 client");
    let v: serde_json::Value = serde_json::from_str(&out).expect("iperf3 JSON");
    let bytes = v["end"]["sum_received"]["bytes"]
        .as_u64()
        .expect("bytes received");
    assert!(bytes > 1 << 20, "{bytes} bytes in a second");
    assert!(srv.0.wait().expect("server").success());
    let st = s.stats();
    let received: u64 = st.values().map(|v| v.1).sum();
    assert!(
        received >= bytes,
        "rings carried {received} of {bytes} bytes: {st:?}"
    );
}

#[test]
fn redis_benchmark_and_data_check() {
    let s = Scratch::new("redis");
    let port = free_port().to_string();
    let mut srv = s.cmd("redis-server");
    srv.args([
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .arg("--dir")
    .arg(&s.dir)
    .stdout(Stdio::null());
    let mut srv = Server(spawn_watched(&mut srv, "redis-server"));
    wait_listening(port.parse().expect("port"), &mut srv.0);
    let server_pid = srv.0.id();
    let mut b = s.cmd("redis-benchmark");
    b.args([
        "-p",
        &port,
        "-n",
        "5000",
        "-c",
        "4",
        "-q",
        "-t",
        "set,get,lpush,lpop",
    ]);
    let out = run_ok(b, "redis-benchmark");
    assert!(out.contains("requests per second"), "{out}");
    let value = "x".repeat(3000) + "end";
    let mut set = s.cmd("redis-cli");
    set.args(["-p", &port, "set", "vmmc-key", &value]);
    assert_eq!(run_ok(set, "redis-cli set").trim(), "OK");
    let mut get = s.cmd("redis-cli");
    get.args(["-p", &port, "get", "vmmc-key"]);
    assert_eq!(run_ok(get, "redis-cli get").trim(), value);
    let mut stop = s.cmd("redis-cli");
    stop.args(["-p", &port, "shutdown", "nosave"]);
    let _ = output_watched(stop.stdin(Stdio::null()), "redis-cli shutdown");
    assert!(srv.0.wait().expect("redis-server").success());
    let (sent, received) = s.stats_of(server_pid);
    // 5000 requests of each of 4 commands, each at least a few dozen bytes, plus the value.
    assert!(
        received > 20_000 * 20 + 3000,
        "server received {received} bytes through rings"
    );
    assert!(
        sent > 20_000 * 4 + 3000,
        "server sent {sent} bytes through rings"
    );
}

#[test]
fn nc_moves_100_mib_intact() {
    let s = Scratch::new("nc");
    let input = s.dir.join("in.bin");
    let output = s.dir.join("out.bin");
    let len = 100 << 20;
    random_file(&input, len);
    let port = free_port().to_string();
    let mut srv = s.cmd("nc");
    srv.args(["-N", "-l", "127.0.0.1", &port])
        .stdout(std::fs::File::create(&output).expect("out"));
    let mut srv = Server(spawn_watched(&mut srv, "nc server"));
    wait_listening(port.parse().expect("port"), &mut srv.0);
    let mut c = s.cmd("nc");
    c.args(["-N", "127.0.0.1", &port])
        .stdin(std::fs::File::open(&input).expect("in"));
    assert!(output_watched(&mut c, "nc client").status.success());
    assert!(srv.0.wait().expect("nc server").success());
    assert_eq!(sha256(&output), sha256(&input));
    let received: u64 = s.stats().values().map(|v| v.1).sum();
    assert!(
        received >= len as u64,
        "rings carried {received} of {len} bytes"
    );
}

#[test]
fn nginx_serves_a_file_to_curl() {
    let s = Scratch::new("nginx");
    let root = s.dir.join("html");
    std::fs::create_dir_all(root.join("tmp")).expect("dirs");
    let len = 5 << 20;
    random_file(&root.join("f.bin"), len);
    let port = free_port();
    let conf = s.dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; sendfile on;\n\
             client_body_temp_path {dir}/html/tmp; proxy_temp_path {dir}/html/tmp;\n\
             fastcgi_temp_path {dir}/html/tmp; uwsgi_temp_path {dir}/html/tmp; scgi_temp_path {dir}/html/tmp;\n\
             server {{ listen 127.0.0.1:{port}; root {dir}/html; }} }}\n",
            dir = s.dir.display()
        ),
    )
    .expect("conf");
    let mut srv = s.cmd("nginx");
    srv.arg("-p")
        .arg(&s.dir)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = Server(spawn_watched(&mut srv, "nginx"));
    wait_listening(port, &mut srv.0);
    let got = s.dir.join("got.bin");
    let mut c = s.cmd("curl");
    c.args(["-s", "-f", "-o"])
        .arg(&got)
        .arg(format!("http://127.0.0.1:{port}/f.bin"));
    let out = output_watched(c.stdin(Stdio::null()), "curl");
    assert!(out.status.success(), "curl: {}", out.status);
    assert_eq!(sha256(&got), sha256(&root.join("f.bin")));
    // curl's process wrote its line when it closed the connection.
    let st = s.stats();
    let received: u64 = st.values().map(|v| v.1).sum();
    assert!(
        received >= len as u64,
        "rings carried {received} of {len} bytes: {st:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Failure cases, with this binary as the interposed programs.

fn child(role: &str, arg: &str) -> (Server, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", library())
        .env("PRELOAD_ROLE", role)
        .env("PRELOAD_ARG", arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut c = spawn_watched(&mut c, &format!("role {role}"));
    let out = BufReader::new(c.stdout.take().expect("stdout"));
    (Server(c), out)
}

/// The next line of a child that contains `key=`, and what follows.
fn line(out: &mut BufReader<std::process::ChildStdout>, key: &str) -> String {
    let mut l = String::new();
    loop {
        l.clear();
        assert!(
            out.read_line(&mut l).expect("child output") > 0,
            "child ended before {key}="
        );
        if let Some(at) = l.find(&format!("{key}=")) {
            return l[at + key.len() + 1..].trim().to_string();
        }
    }
}

/// The interposed programs of the failure cases.
#[test]
fn role() {
    let Ok(role) = std::env::var("PRELOAD_ROLE") else {
        return;
    };
    let arg = std::env::var("PRELOAD_ARG").unwrap_or_default();
    match role.as_str() {
        // Accepts one connection, sends a greeting, then waits to be killed.
        "greeter" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("port={}", l.local_addr().expect("addr").port());
            let (mut s, _) = l.accept().expect("accept");
            s.write_all(b"hello").expect("greet");
            std::thread::sleep(Duration::from_secs(120));
        }
        // Reads the greeting, says so, then reads and writes after the peer died.
        "survivor" => {
            let mut s = TcpStream::connect(("127.0.0.1", arg.parse::<u16>().expect("port")))
                .expect("connect");
            let mut b = [0u8; 5];
            s.read_exact(&mut b).expect("greeting");
            println!("greeted=1");
            let mut more = [0u8; 16];
            let r = s.read(&mut more);
            println!(
                "read={}",
                match r {
                    Ok(0) => "eof".to_string(),
                    Ok(n) => format!("{n} bytes"),
                    Err(e) => format!("{:?}", e.kind()),
                }
            );
            // std writes with MSG_NOSIGNAL: an error, no signal.
            let err = loop {
                match s.write(&[0u8; 4096]).map(|n| n > 0) {
                    Ok(_) => continue,
                    Err(e) => break e,
                }
            };
            println!("nosignal_write={}", err.raw_os_error().unwrap_or(0));
            // write(2) has no such flag: SIGPIPE, with its default action, ends the process.
            // SAFETY: restoring the default action and writing from a valid buffer.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::write(s.as_raw_fd(), b"x".as_ptr().cast(), 1);
            }
            println!("survived_sigpipe=1");
        }
        // A server that never writes; a thread blocks reading while the main thread closes.
        "silent" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("port={}", l.local_addr().expect("addr").port());
            let (_s, _) = l.accept().expect("accept");
            std::thread::sleep(Duration::from_secs(120));
        }
        "close_while_reading" => {
            let s = TcpStream::connect(("127.0.0.1", arg.parse::<u16>().expect("port")))
                .expect("connect");
            let fd = s.as_raw_fd();
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                let mut b = [0u8; 8];
                // SAFETY: reading into a valid buffer from a descriptor that may be closed.
                let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
                let _ = tx.send(n);
            });
            // The reader is blocked once it gave up spinning and went to sleep.
            std::thread::sleep(Duration::from_millis(200));
            std::mem::forget(s);
            // SAFETY: closing our descriptor.
            unsafe { libc::close(fd) };
            let n = rx.recv_timeout(Duration::from_secs(10));
            println!("reader_returned={}", n.is_ok());
            let _ = reader.join();
        }
        "accept_then_shutdown" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            let fd = l.as_raw_fd();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = l.accept().map(|_| ()).map_err(|e| e.raw_os_error());
                // The main thread closed the descriptor.
                std::mem::forget(l);
                let _ = tx.send(r);
            });
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: shutting down and closing our listening descriptor.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
                libc::close(fd);
            }
            let r = rx.recv_timeout(Duration::from_secs(10));
            println!("accept_returned={}", matches!(r, Ok(Err(_))));
        }
        // Echoes one line to whoever connects (interposed or not).
        "echo" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            println!("port={}", l.local_addr().expect("addr").port());
            let (s, _) = l.accept().expect("accept");
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).expect("line");
            (&s).write_all(line.as_bytes()).expect("echo");
            s.shutdown(Shutdown::Write).expect("shutdown");
        }
        "echo_client" => {
            let mut s = TcpStream::connect(("127.0.0.1", arg.parse::<u16>().expect("port")))
                .expect("connect");
            s.write_all(b"plain peer\n").expect("send");
            let mut back = String::new();
            s.read_to_string(&mut back).expect("read");
            println!("back={}", back.trim());
        }
        "semantics" => semantics(),
        "exec_holder" => exec_holder(),
        // The image exec'd by exec_holder's child: uses the inherited connection.
        "exec_child" => {
            // `fd` or `fd,dup`: a dup of the connection, closed first (the connection must
            // stay open through the other descriptor).
            let mut fds = arg.split(',').map(|f| f.parse::<i32>().expect("fd"));
            let fd = fds.next().expect("fd");
            if let Some(dup) = fds.next() {
                // SAFETY: closing an inherited descriptor of ours.
                assert_eq!(unsafe { libc::close(dup) }, 0, "close the dup");
            }
            let msg = b"exec ok";
            // SAFETY: writing from and reading into valid buffers.
            unsafe {
                assert_eq!(libc::write(fd, msg.as_ptr().cast(), msg.len()), 7);
                let mut ack = [0u8; 3];
                let mut got = 0;
                while got < 3 {
                    let n = libc::read(fd, ack[got..].as_mut_ptr().cast(), 3 - got);
                    assert!(n > 0, "read after exec");
                    got += n as usize;
                }
                assert_eq!(&ack, b"ack");
            }
            println!("adopted=1");
        }
        // Connects to a silent server and waits in epoll_wait with no timeout.
        "idle_client" => {
            let s = TcpStream::connect(("127.0.0.1", arg.parse::<u16>().expect("port")))
                .expect("connect");
            let ep = ep_create();
            ep_ctl(
                ep,
                libc::EPOLL_CTL_ADD,
                s.as_raw_fd(),
                libc::EPOLLIN as u32,
                1,
            );
            println!("waiting=1");
            let _ = ep_wait(ep, -1);
        }
        "high_descriptors" => high_descriptors(),
        "full_writes" => full_writes(),
        "sendfile_nonblocking" => sendfile_nonblocking(),
        "waitall_iovecs" => waitall_iovecs(),
        "signals" => signals(),
        "huge_timeouts" => huge_timeouts(),
        "socket_timeouts" => socket_timeouts(),
        "v4_mapped" => v4_mapped(),
        "epoll_before_connect" => epoll_before_connect(),
        "epoll_watched_by_poll" => epoll_watched_by_poll(),
        // One thread makes itself a connected pair, as programs that emulate socketpair
        // over TCP do: listen, connect, write, and only then accept.
        "self-connect" => {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            let mut c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
            c.write_all(b"written before the accept")
                .expect("early write");
            let (mut a, _) = l.accept().expect("accept");
            let mut got = [0u8; 25];
            a.read_exact(&mut got).expect("read");
            assert_eq!(&got, b"written before the accept");
            a.write_all(b"back").expect("write back");
            let mut back = [0u8; 4];
            c.read_exact(&mut back).expect("read back");
            assert_eq!(&back, b"back");
            // A non-blocking connect, then the accept, then readiness through poll.
            let port = l.local_addr().expect("addr").port();
            // SAFETY: plain system calls on a socket this code owns, with a valid address.
            let fd = unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
                assert!(fd >= 0, "socket");
                let mut a: libc::sockaddr_in = std::mem::zeroed();
                a.sin_family = libc::AF_INET as libc::sa_family_t;
                a.sin_port = port.to_be();
                a.sin_addr.s_addr = u32::to_be(0x7f00_0001);
                let rc = libc::connect(
                    fd,
                    &a as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                let err = *libc::__errno_location();
                assert!(
                    rc == 0 || err == libc::EINPROGRESS,
                    "non-blocking connect: {err}"
                );
                fd
            };
            // SAFETY: `fd` is a connected socket that only this stream owns.
            let s = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let (mut a2, _) = l.accept().expect("accept 2");
            a2.write_all(b"x").expect("write 2");
            assert_ne!(poll_in(s.as_raw_fd(), 5000) & libc::POLLIN, 0);
            let mut one = [0u8; 1];
            assert_eq!(std::io::Read::read(&mut &s, &mut one).expect("read 2"), 1);
            println!("ok=self-connect");
        }
        other => panic!("unknown role {other}"),
    }
}

/// An epoll set with a VMMC member, watched by poll and select, is readable when data is in
/// the member's ring, whether or not a wake-up byte came.
fn epoll_watched_by_poll() {
    let (a, mut b) = pair();
    let ep = ep_create();
    ep_ctl(
        ep,
        libc::EPOLL_CTL_ADD,
        a.as_raw_fd(),
        libc::EPOLLIN as u32,
        7,
    );
    assert_eq!(poll_in(ep, 0), 0, "nothing to read yet");
    assert!(!select_readable(ep, Some(0)));
    // Nobody sleeps, so no wake-up byte goes with this data.
    b.write_all(b"x").expect("write");
    assert_ne!(poll_in(ep, 0) & libc::POLLIN, 0, "poll misses the data");
    assert!(select_readable(ep, Some(0)), "select misses the data");
    let mut one = [0u8; 1];
    (&a).read_exact(&mut one).expect("read");
    assert_eq!(poll_in(ep, 0), 0, "nothing left");
    // A sleeping poll wakes for data written from another thread.
    let t = std::thread::spawn(move || {
        b.write_all(b"y").expect("write");
        b
    });
    assert_ne!(poll_in(ep, -1) & libc::POLLIN, 0);
    assert_eq!(ep_wait(ep, 0), vec![(libc::EPOLLIN as u32, 7)]);
    (&a).read_exact(&mut one).expect("read");
    assert_eq!(&one, b"y");
    let _b = t.join().expect("writer");
    println!("ok=epoll-in-poll");
}

#[test]
fn an_epoll_set_watched_by_poll_wakes_on_data() {
    let s = Scratch::new("epollpoll");
    let mut c = s.cmd(std::env::current_exe().expect("exe"));
    c.args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env("PRELOAD_ROLE", "epoll_watched_by_poll");
    let out = output_watched(c.stdin(Stdio::null()), "child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("ok=epoll-in-poll"),
        "{}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        s.stats().values().map(|v| v.0).sum::<u64>() >= 2,
        "no bytes through rings"
    );
}

/// Raises the descriptor limit so that descriptors above 65535 exist.
fn raise_nofile(to: u64) {
    let lim = libc::rlimit {
        rlim_cur: to,
        rlim_max: to,
    };
    // SAFETY: a valid rlimit; the test runs as a user allowed to raise it, or fails here.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// Moves descriptor `fd` to `to` (closing `fd`).
fn move_fd(fd: i32, to: i32) {
    // SAFETY: plain system calls on our descriptors.
    unsafe {
        assert_eq!(libc::dup2(fd, to), to, "dup2");
        libc::close(fd);
    }
}

/// A socket created, moved above 65535 before it connects, and a connection duplicated
/// there: both stay VMMC connections.
fn high_descriptors() {
    raise_nofile(200_000);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    // SAFETY: a plain socket call.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(s >= 0);
    let high = 70_000;
    move_fd(s, high);
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid sockaddr_in of its size.
    let rc = unsafe {
        libc::connect(
            high,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
    let mut b = t.join().expect("accept thread");
    // SAFETY: writing from a valid buffer.
    assert_eq!(unsafe { libc::write(high, b"high".as_ptr().cast(), 4) }, 4);
    let mut got = [0u8; 4];
    b.read_exact(&mut got).expect("read");
    assert_eq!(&got, b"high");
    // The accepted end, moved up too.
    let higher = 150_000;
    // SAFETY: duplicating our descriptor.
    assert_eq!(unsafe { libc::dup2(b.as_raw_fd(), higher) }, higher);
    drop(b);
    // SAFETY: writing from a valid buffer.
    let wrote = unsafe { libc::write(higher, b"back".as_ptr().cast(), 4) };
    assert_eq!(wrote, 4);
    // SAFETY: reading into a valid buffer.
    assert_eq!(unsafe { libc::read(high, got.as_mut_ptr().cast(), 4) }, 4);
    assert_eq!(&got, b"back");
    // SAFETY: closing our descriptors.
    unsafe {
        libc::close(higher);
        libc::close(high);
    }
    println!("ok=high");
}

/// Runs `role` of this binary under the library (statistics in a scratch directory named
/// `scratch`); checks that it succeeded, printed `ok=CHECK` for every check, and sent at
/// least `min_sent` bytes through rings (so it really talked over VMMC).
fn role_over_vmmc(scratch: &str, role: &str, checks: &[&str], min_sent: u64) {
    let s = Scratch::new(scratch);
    let mut c = s.cmd(std::env::current_exe().expect("exe"));
    c.args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env("PRELOAD_ROLE", role);
    let out = output_watched(c.stdin(Stdio::null()), "child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for check in checks {
        assert!(
            text.contains(&format!("ok={check}")),
            "{check} not reached:\n{text}"
        );
    }
    let st = s.stats();
    assert!(
        st.values().map(|v| v.0).sum::<u64>() >= min_sent,
        "the bytes did not go through the rings: {st:?}"
    );
}

#[test]
#[ignore = "needs an RLIMIT_NOFILE hard limit above 150000 (raise it, or CAP_SYS_RESOURCE); the table itself is tested by the library's unit test"]
fn descriptors_above_65535_are_vmmc_connections() {
    role_over_vmmc("highfd", "high_descriptors", &["high"], 8);
}

#[test]
fn killed_peer_gives_eof_then_epipe_and_sigpipe() {
    let (mut srv, mut so) = child("greeter", "");
    let port = line(&mut so, "port");
    let (mut cli, mut co) = child("survivor", &port);
    assert_eq!(line(&mut co, "greeted"), "1");
    srv.0.kill().expect("kill");
    srv.0.wait().expect("reap");
    let r = line(&mut co, "read");
    assert!(
        r == "eof" || r == "ConnectionReset",
        "read after the peer died: {r}"
    );
    assert_eq!(line(&mut co, "nosignal_write"), libc::EPIPE.to_string());
    let st = cli.0.wait().expect("reap client");
    assert_eq!(
        st.signal(),
        Some(libc::SIGPIPE),
        "write(2) to a dead peer: {st}"
    );
}

#[test]
fn close_while_another_thread_reads() {
    let (_srv, mut so) = child("silent", "");
    let port = line(&mut so, "port");
    let (mut cli, mut co) = child("close_while_reading", &port);
    assert_eq!(line(&mut co, "reader_returned"), "true");
    assert!(cli.0.wait().expect("reap").success());
}

#[test]
fn listener_shut_down_while_accept_blocks() {
    let (mut c, mut out) = child("accept_then_shutdown", "");
    assert_eq!(line(&mut out, "accept_returned"), "true");
    assert!(c.0.wait().expect("reap").success());
}

/// An interposed client of the plain server listening on `l` (this process): their bytes go
/// through the kernel, nothing else arrives (no hello), and nothing goes through rings.
fn interposed_client_of_a_plain_server(l: &TcpListener, scratch: &str) {
    let port = l.local_addr().expect("addr").port().to_string();
    let s = Scratch::new(scratch);
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", library())
        .env("VMMC_SOCK_STATS", s.stats_path())
        .env("PRELOAD_ROLE", "echo_client")
        .env("PRELOAD_ARG", &port)
        .stdout(Stdio::piped());
    let mut c = Server(spawn_watched(&mut c, "echo_client"));
    let (srv, _) = l.accept().expect("accept");
    let mut line_in = String::new();
    BufReader::new(&srv).read_line(&mut line_in).expect("line");
    assert_eq!(line_in, "plain peer\n");
    (&srv).write_all(b"from the kernel\n").expect("reply");
    drop(srv);
    let mut out = String::new();
    c.0.stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("out");
    assert!(out.contains("back=from the kernel"), "{out}");
    assert!(c.0.wait().expect("reap").success());
    assert!(
        s.stats().is_empty(),
        "a plain peer went over VMMC: {:?}",
        s.stats()
    );
}

/// A listener killed before it could withdraw its announcement leaves the file; a later plain
/// server on the port must still get a plain client, even once the dead listener's process
/// id names another process (here this one, which started at another time).
#[test]
fn an_announcement_left_by_a_dead_listener_is_ignored() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let path = Path::new(sockets::SHM_DIR).join(format!("l{port}"));
    let _ = std::fs::create_dir_all(sockets::SHM_DIR);
    // A process id that is alive with a start time it never had.
    std::fs::write(&path, format!("{} 1", std::process::id())).expect("announcement");
    interposed_client_of_a_plain_server(&l, "stale");
    let _ = std::fs::remove_file(&path);
}

/// A connecting process killed before its connection was accepted leaves its marker, which
/// names its loopback port; a later plain client that gets that port must be served at once
/// by an interposed server that speaks first (before, its accept waited 5 s for a hello), and
/// the dead process's file goes.
#[test]
fn a_connect_marker_left_by_a_dead_connector_is_ignored() {
    let (_srv, mut so) = child("greeter", "");
    let server: u16 = line(&mut so, "port").parse().expect("port");
    // The plain client's port, bound before it connects, as a killed connector had it.
    // SAFETY: a plain socket call; the descriptor is this test's (wrapped below).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "socket");
    // SAFETY: an all-zero sockaddr_in is a valid value.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a valid sockaddr_in of `len` bytes.
    let rc = unsafe { libc::bind(fd, &a as *const _ as *const libc::sockaddr, len) };
    assert_eq!(rc, 0, "bind");
    let mut len2 = len;
    // SAFETY: getsockname writes at most `len2` bytes into `a`.
    unsafe { libc::getsockname(fd, &mut a as *mut _ as *mut libc::sockaddr, &mut len2) };
    let mine = u16::from_be(a.sin_port);
    let dir = Path::new(sockets::SHM_DIR);
    let _ = std::fs::create_dir_all(dir);
    // This process with a start time it never had: a connector that is gone.
    let marker = dir.join(format!("c{mine}"));
    std::fs::write(&marker, format!("{} 1 {server}", std::process::id())).expect("marker");
    a.sin_port = server.to_be();
    // SAFETY: as for bind.
    let rc = unsafe { libc::connect(fd, &a as *const _ as *const libc::sockaddr, len) };
    assert_eq!(rc, 0, "connect");
    // SAFETY: `fd` is a connected socket this test owns.
    let mut plain = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut greeting = [0u8; 5];
    plain.read_exact(&mut greeting).expect("greeting");
    assert_eq!(&greeting, b"hello");
    assert!(
        !marker.exists(),
        "the dead connector's marker is still there"
    );
}

#[test]
fn interposed_and_plain_peers_talk_through_the_kernel() {
    // Interposed client, plain server (this process).
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    interposed_client_of_a_plain_server(&l, "plain");

    // Interposed server, plain client (this process).
    let (_srv, mut so) = child("echo", "");
    let port: u16 = line(&mut so, "port").parse().expect("port");
    let mut plain = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    plain.write_all(b"hello kernel\n").expect("send");
    let mut back = String::new();
    plain.read_to_string(&mut back).expect("read");
    assert_eq!(back, "hello kernel\n");
}

/// A connected pair of interposed sockets inside one process (accept in a thread).
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    let a = TcpStream::connect(addr).expect("connect");
    (a, t.join().expect("accept thread"))
}

fn ep_create() -> i32 {
    // SAFETY: plain system call.
    let ep = unsafe { libc::epoll_create1(0) };
    assert!(ep >= 0, "epoll_create1");
    ep
}

fn ep_ctl(ep: i32, op: i32, fd: i32, events: u32, data: u64) {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: a valid event.
    let rc = unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) };
    assert_eq!(
        rc,
        0,
        "epoll_ctl({op}) on {fd}: {}",
        std::io::Error::last_os_error()
    );
}

/// The events epoll_wait reports within `ms`, as (events, data).
fn ep_wait(ep: i32, ms: i32) -> Vec<(u32, u64)> {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
    // SAFETY: a valid array of 8 events.
    let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 8, ms) };
    assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
    evs[..n as usize]
        .iter()
        .map(|e| (e.events, e.u64))
        .collect()
}

fn poll_in(fd: i32, ms: i32) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll");
    p.revents
}

fn select_readable(fd: i32, ms: Option<i64>) -> bool {
    // SAFETY: a zeroed fd_set filled with FD_SET; a valid timeval or null.
    unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(fd, &mut set);
        let mut tv = ms.map(|ms| libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        });
        let tvp = tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut _);
        let n = libc::select(
            fd + 1,
            &mut set,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            tvp,
        );
        assert!(n >= 0, "select");
        n == 1 && libc::FD_ISSET(fd, &set)
    }
}

fn fionread(fd: i32) -> i32 {
    let mut n: i32 = -1;
    // SAFETY: FIONREAD into an int.
    assert_eq!(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) }, 0);
    n
}

/// Writes `data` on `s` from another thread after a moment, so that the caller is asleep
/// in its wait when the data comes.
fn write_later(s: &TcpStream, data: &'static [u8]) -> std::thread::JoinHandle<()> {
    let mut w = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        w.write_all(data).expect("write later");
    })
}

fn semantics() {
    const IN: u32 = libc::EPOLLIN as u32;
    let (mut a, mut b) = pair();
    let fa = a.as_raw_fd();

    // Level-triggered, edge-triggered and one-shot interest in one descriptor, in three sets.
    let (lt, et, one) = (ep_create(), ep_create(), ep_create());
    ep_ctl(lt, libc::EPOLL_CTL_ADD, fa, IN, 1);
    ep_ctl(et, libc::EPOLL_CTL_ADD, fa, IN | libc::EPOLLET as u32, 2);
    ep_ctl(
        one,
        libc::EPOLL_CTL_ADD,
        fa,
        IN | libc::EPOLLONESHOT as u32,
        3,
    );
    assert!(ep_wait(lt, 0).is_empty(), "readable before any data");
    b.write_all(b"x").expect("x");
    assert_eq!(ep_wait(lt, 1000), vec![(IN, 1)]);
    assert_eq!(
        ep_wait(lt, 0),
        vec![(IN, 1)],
        "level-triggered reports again"
    );
    assert_eq!(ep_wait(et, 1000), vec![(IN, 2)]);
    assert!(ep_wait(et, 50).is_empty(), "edge-triggered reported twice");
    assert_eq!(ep_wait(one, 1000), vec![(IN, 3)]);
    b.write_all(b"y").expect("y");
    assert_eq!(ep_wait(et, 1000), vec![(IN, 2)], "new data is a new edge");
    assert!(
        ep_wait(one, 50).is_empty(),
        "one-shot reported before re-arming"
    );
    ep_ctl(
        one,
        libc::EPOLL_CTL_MOD,
        fa,
        IN | libc::EPOLLONESHOT as u32,
        4,
    );
    assert_eq!(ep_wait(one, 1000), vec![(IN, 4)]);
    println!("ok=epoll-lt-et-oneshot-two-sets");

    // FIONREAD counts what waits in the ring.
    assert_eq!(fionread(fa), 2);
    let mut buf = [0u8; 2];
    a.read_exact(&mut buf).expect("xy");
    assert_eq!(&buf, b"xy");
    assert_eq!(fionread(fa), 0);
    println!("ok=fionread");

    // Nested: a set holding the level-triggered set reports it when a member is ready.
    let outer = ep_create();
    ep_ctl(outer, libc::EPOLL_CTL_ADD, lt, IN, 77);
    assert!(ep_wait(outer, 0).is_empty());
    let w = write_later(&b, b"n");
    assert_eq!(ep_wait(outer, 5000), vec![(IN, 77)], "nested set not woken");
    w.join().expect("writer");
    assert_eq!(ep_wait(lt, 0), vec![(IN, 1)]);
    a.read_exact(&mut buf[..1]).expect("n");
    println!("ok=nested-epoll");

    // A sleeping edge-triggered wait is woken by new data.
    let _ = ep_wait(et, 0);
    let w = write_later(&b, b"w");
    assert_eq!(
        ep_wait(et, 5000),
        vec![(IN, 2)],
        "sleeping epoll_wait not woken"
    );
    w.join().expect("writer");
    a.read_exact(&mut buf[..1]).expect("w");
    println!("ok=epoll-sleep-wake");

    // poll and select: nothing, then woken from sleep.
    assert_eq!(poll_in(fa, 0), 0);
    let w = write_later(&b, b"p");
    assert_ne!(poll_in(fa, 5000) & libc::POLLIN, 0, "poll not woken");
    w.join().expect("writer");
    a.read_exact(&mut buf[..1]).expect("p");
    assert!(!select_readable(fa, Some(0)));
    let w = write_later(&b, b"s");
    assert!(select_readable(fa, None), "select not woken");
    w.join().expect("writer");
    a.read_exact(&mut buf[..1]).expect("s");
    println!("ok=poll-select");

    // EPOLLOUT on a ring with room; O_NONBLOCK reads give EAGAIN.
    let out = ep_create();
    ep_ctl(
        out,
        libc::EPOLL_CTL_ADD,
        b.as_raw_fd(),
        libc::EPOLLOUT as u32,
        9,
    );
    assert_eq!(ep_wait(out, 1000), vec![(libc::EPOLLOUT as u32, 9)]);
    a.set_nonblocking(true).expect("nonblocking");
    assert_eq!(
        a.read(&mut buf).expect_err("no data").kind(),
        std::io::ErrorKind::WouldBlock
    );
    a.set_nonblocking(false).expect("blocking");
    println!("ok=epollout-nonblock");

    // fork: the child writes on the inherited socket and exits; the parent's end still
    // works, and the connection ends only when the parent closes too.
    // SAFETY: fork; the child only writes and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let ok = (&a).write_all(b"from child").is_ok();
        // SAFETY: ending the child (exit runs the library's destructor).
        unsafe { libc::exit(if ok { 0 } else { 3 }) };
    }
    let mut st = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "child: {st}"
    );
    let mut got = [0u8; 10];
    b.read_exact(&mut got).expect("child's bytes");
    assert_eq!(&got, b"from child");
    a.write_all(b"parent").expect("parent still writes");
    let mut p6 = [0u8; 6];
    b.read_exact(&mut p6).expect("parent's bytes");
    assert_eq!(&p6, b"parent");
    println!("ok=fork");

    // dup: the duplicate keeps the connection open after the original closes.
    // SAFETY: dup of our descriptor.
    let d = unsafe { libc::dup(fa) };
    assert!(d >= 0);
    drop(a);
    b.write_all(b"d").expect("d");
    let mut one_byte = [0u8; 1];
    // SAFETY: reading into a valid buffer.
    assert_eq!(unsafe { libc::read(d, one_byte.as_mut_ptr().cast(), 1) }, 1);
    assert_eq!(&one_byte, b"d");
    // SAFETY: closing our descriptor.
    unsafe { libc::close(d) };
    let mut rest = Vec::new();
    b.read_to_end(&mut rest)
        .expect("end of file after the last close");
    assert!(rest.is_empty());
    println!("ok=dup");
}

#[test]
fn epoll_poll_select_fork_dup_semantics() {
    role_over_vmmc(
        "semantics",
        "semantics",
        &[
            "epoll-lt-et-oneshot-two-sets",
            "fionread",
            "nested-epoll",
            "epoll-sleep-wake",
            "poll-select",
            "epollout-nonblock",
            "fork",
            "dup",
        ],
        20,
    );
}

#[test]
fn a_thread_connects_to_its_own_listener_before_accepting() {
    role_over_vmmc("self-connect", "self-connect", &["self-connect"], 30);
}

#[test]
fn an_idle_program_sleeps() {
    // A server blocked in read and a client blocked in epoll_wait, both idle: after the
    // spinning phase neither uses the processor.
    let (_srv, mut so) = child("silent", "");
    let port = line(&mut so, "port");
    let (cli, mut co) = child("idle_client", &port);
    assert_eq!(line(&mut co, "waiting"), "1");
    let cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .expect("fields")
            .split_whitespace()
            .collect();
        // utime and stime are fields 14 and 15 (1-based; 12 and 13 after the name).
        let ticks: f64 =
            f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
        // SAFETY: sysconf has no preconditions.
        ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    };
    let before = (cpu(cli.0.id()), cpu(_srv.0.id()));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let wall = t0.elapsed().as_secs_f64();
    let after = (cpu(cli.0.id()), cpu(_srv.0.id()));
    let used = (after.0 - before.0, after.1 - before.1);
    assert!(
        used.0 < 0.2 * wall && used.1 < 0.2 * wall,
        "idle processes used {used:?} s of CPU in {wall:.2} s"
    );
}

/// A connection survives fork + exec (or posix_spawn, with `PRELOAD_ARG=spawn`): the child
/// runs this binary again (with an environment that drops LD_PRELOAD, which the library puts
/// back) and talks over the inherited socket.
fn exec_holder() {
    let (a, mut b) = pair();
    let fd = a.as_raw_fd();
    // SAFETY: clearing close-on-exec on our descriptor.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let how = std::env::var("PRELOAD_ARG").unwrap_or_default();
    // With `dup`: a second descriptor of the same connection goes along too.
    let dup = (how == "dup").then(|| {
        // SAFETY: dup of our descriptor (inheritable).
        let d = unsafe { libc::dup(fd) };
        assert!(d >= 0, "dup");
        d
    });
    let child_arg = match dup {
        Some(d) => format!("{fd},{d}"),
        None => fd.to_string(),
    };
    let exe = std::ffi::CString::new(
        std::env::current_exe()
            .expect("exe")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .expect("path");
    let args: Vec<std::ffi::CString> = ["--exact", "role", "--nocapture", "--test-threads=1"]
        .iter()
        .map(|a| std::ffi::CString::new(*a).expect("arg"))
        .collect();
    let env: Vec<std::ffi::CString> = std::env::vars()
        .filter(|(k, _)| k != "LD_PRELOAD" && k != "PRELOAD_ROLE" && k != "PRELOAD_ARG")
        .map(|(k, v)| format!("{k}={v}"))
        .chain([
            "PRELOAD_ROLE=exec_child".to_string(),
            format!("PRELOAD_ARG={child_arg}"),
        ])
        .map(|e| std::ffi::CString::new(e).expect("env"))
        .collect();
    let mut argv: Vec<*const libc::c_char> = std::iter::once(exe.as_ptr())
        .chain(args.iter().map(|a| a.as_ptr()))
        .collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    if how == "execl" || how == "execlp" {
        // These take the process's environment.
        std::env::set_var("PRELOAD_ROLE", "exec_child");
        std::env::set_var("PRELOAD_ARG", &child_arg);
    }
    let pid = if how == "spawn" {
        let mut pid = 0;
        // SAFETY: null-terminated arrays of C strings that outlive the call; no file
        // actions or attributes.
        let rc = unsafe {
            libc::posix_spawn(
                &mut pid,
                exe.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                argv.as_ptr() as *const *mut libc::c_char,
                envp.as_ptr() as *const *mut libc::c_char,
            )
        };
        assert_eq!(rc, 0, "posix_spawn");
        pid
    } else {
        // SAFETY: fork; the child only execs (or exits).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let (e, a) = (exe.as_ptr(), |i: usize| args[i].as_ptr());
            let null = std::ptr::null::<libc::c_char>();
            // SAFETY: null-terminated arrays and lists of C strings that outlive the call.
            unsafe {
                match how.as_str() {
                    // The variadic forms, which the library defines in C.
                    "execl" => libc::execl(e, e, a(0), a(1), a(2), a(3), null),
                    "execlp" => libc::execlp(e, e, a(0), a(1), a(2), a(3), null),
                    "execle" => libc::execle(e, e, a(0), a(1), a(2), a(3), null, envp.as_ptr()),
                    _ => libc::execve(e, argv.as_ptr(), envp.as_ptr()),
                };
                libc::_exit(127);
            }
        }
        pid
    };
    if let Some(d) = dup {
        // SAFETY: closing our dup (the child has its own).
        unsafe { libc::close(d) };
    }
    drop(a);
    let mut got = [0u8; 7];
    b.read_exact(&mut got).expect("bytes from the exec'd image");
    assert_eq!(&got, b"exec ok");
    b.write_all(b"ack").expect("ack");
    let mut st = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "exec'd child: {st}"
    );
    let mut rest = Vec::new();
    b.read_to_end(&mut rest)
        .expect("end of file once the exec'd image exits");
    println!("exec=ok child={pid}");
}

#[test]
fn a_connection_survives_fork_and_exec() {
    inherited_by_a_new_image("exec", "fork");
}

#[test]
fn a_connection_survives_posix_spawn() {
    inherited_by_a_new_image("spawn", "spawn");
}

#[test]
fn a_duplicated_connection_survives_exec_as_one() {
    inherited_by_a_new_image("execdup", "dup");
}

#[test]
fn a_connection_survives_the_variadic_execs() {
    for how in ["execl", "execlp", "execle"] {
        inherited_by_a_new_image(how, how);
    }
}

/// exec_holder starts a new image (by fork and exec, or posix_spawn) that adopts its
/// connection and talks over the ring.
fn inherited_by_a_new_image(scratch: &str, how: &str) {
    let s = Scratch::new(scratch);
    let mut c = s.cmd(std::env::current_exe().expect("exe"));
    c.args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env("PRELOAD_ROLE", "exec_holder")
        .env("PRELOAD_ARG", how);
    let out = output_watched(c.stdin(Stdio::null()), "child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("adopted=1"), "{text}");
    let at = text.find("child=").expect("child pid");
    let pid: u32 = text[at + 6..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("pid");
    // The exec'd image's bytes went through the ring it adopted.
    let (sent, received) = s.stats_of(pid);
    assert!(
        sent >= 7 && received >= 3,
        "exec'd image: sent {sent}, received {received}"
    );
}

// ---------------------------------------------------------------------------------------
// Kernel semantics the interposer must keep (each found wrong once, by a review that
// compared with kernel TCP).

/// Ends the role with SIGALRM if it hangs (a wait that never ends is the failure).
fn alarm(secs: u32) {
    // SAFETY: alarm has no preconditions; the default action of SIGALRM ends the process.
    unsafe { libc::alarm(secs) };
}

/// Reads `b` to its end after a pause (so that the writer finds the ring full), on a
/// thread; returns what it read.
fn slow_reader(mut b: TcpStream) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut all = Vec::new();
        b.read_to_end(&mut all).expect("read to the end");
        all
    })
}

/// 4 MiB of varied bytes (larger than a ring).
fn big_buffer(seed: u8) -> Vec<u8> {
    (0..4usize << 20)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 12) as u8)
        })
        .collect()
}

/// A blocking write, send, writev or sendmsg of more than the ring holds returns only once
/// all of it is queued, as the kernel's does for a blocking stream socket.
fn full_writes() {
    alarm(60);
    let big = big_buffer(1);
    let half = big.len() / 2;
    let iov = [
        libc::iovec {
            iov_base: big.as_ptr() as *mut libc::c_void,
            iov_len: half,
        },
        libc::iovec {
            iov_base: big[half..].as_ptr() as *mut libc::c_void,
            iov_len: big.len() - half,
        },
    ];
    for how in ["write", "send", "writev", "sendmsg"] {
        let (a, b) = pair();
        let reader = slow_reader(b);
        let fd = a.as_raw_fd();
        // SAFETY: valid buffers and iovecs that outlive the calls.
        let n = unsafe {
            match how {
                "write" => libc::write(fd, big.as_ptr().cast(), big.len()),
                "send" => libc::send(fd, big.as_ptr().cast(), big.len(), 0),
                "writev" => libc::writev(fd, iov.as_ptr(), 2),
                _ => {
                    let mut m: libc::msghdr = std::mem::zeroed();
                    m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                    m.msg_iovlen = 2;
                    libc::sendmsg(fd, &m, 0)
                }
            }
        };
        assert_eq!(n, big.len() as isize, "blocking {how} of 4 MiB");
        drop(a);
        assert!(reader.join().expect("reader") == big, "{how}: bytes differ");
        println!("ok={how}");
    }
}

#[test]
fn a_blocking_write_queues_the_whole_buffer() {
    role_over_vmmc(
        "fullwrite",
        "full_writes",
        &["write", "send", "writev", "sendmsg"],
        16 << 20,
    );
}

/// sendfile without an offset on a non-blocking socket, retried after `EAGAIN` as programs
/// do, sends the whole file: the bytes read from the file but not sent are given back.
fn sendfile_nonblocking() {
    alarm(60);
    let big = big_buffer(2);
    let path = std::env::temp_dir().join(format!("vmmc-sendfile-{}", std::process::id()));
    std::fs::write(&path, &big).expect("file");
    let file = std::fs::File::open(&path).expect("open");
    let _ = std::fs::remove_file(&path);
    let (a, b) = pair();
    let reader = slow_reader(b);
    a.set_nonblocking(true).expect("nonblocking");
    let (mut total, mut again) = (0usize, 0);
    loop {
        // SAFETY: descriptors of ours; a null offset uses the file position.
        let n = unsafe {
            libc::sendfile(
                a.as_raw_fd(),
                file.as_raw_fd(),
                std::ptr::null_mut(),
                1 << 20,
            )
        };
        if n > 0 {
            total += n as usize;
        } else if n == 0 {
            break;
        } else {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "sendfile: {e}");
            again += 1;
            let mut p = libc::pollfd {
                fd: a.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            assert_eq!(unsafe { libc::poll(&mut p, 1, -1) }, 1);
        }
    }
    assert!(again > 0, "the ring never filled: the test proves nothing");
    assert_eq!(total, big.len(), "sendfile total");
    drop(a);
    assert!(
        reader.join().expect("reader") == big,
        "the file's bytes differ"
    );
    println!("ok=sendfile");
}

#[test]
fn sendfile_on_a_non_blocking_socket_loses_nothing() {
    role_over_vmmc("sendfile", "sendfile_nonblocking", &["sendfile"], 4 << 20);
}

/// recvmsg with MSG_WAITALL fills every buffer of the message, waiting for data that comes
/// later.
fn waitall_iovecs() {
    alarm(30);
    let (a, b) = pair();
    let w = std::thread::spawn(move || {
        (&b).write_all(b"0123456789").expect("first");
        std::thread::sleep(Duration::from_millis(300));
        (&b).write_all(b"abcdefghij").expect("second");
        b
    });
    let (mut x, mut y) = ([0u8; 10], [0u8; 10]);
    let iov = [
        libc::iovec {
            iov_base: x.as_mut_ptr().cast(),
            iov_len: 10,
        },
        libc::iovec {
            iov_base: y.as_mut_ptr().cast(),
            iov_len: 10,
        },
    ];
    // SAFETY: a zeroed msghdr pointing at two valid iovecs.
    let n = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = 2;
        libc::recvmsg(a.as_raw_fd(), &mut m, libc::MSG_WAITALL)
    };
    assert_eq!(n, 20, "recvmsg(MSG_WAITALL) over two buffers");
    assert_eq!((&x, &y), (b"0123456789", b"abcdefghij"));
    let _b = w.join().expect("writer");
    println!("ok=waitall");
}

#[test]
fn recvmsg_waitall_fills_every_buffer() {
    role_over_vmmc("waitall", "waitall_iovecs", &["waitall"], 20);
}

/// ppoll, pselect and select with the largest timeouts wait without end (here: return at
/// once, data being there) instead of failing.
fn huge_timeouts() {
    alarm(30);
    let (a, mut b) = pair();
    b.write_all(b"x").expect("write");
    let fd = a.as_raw_fd();
    let ts = libc::timespec {
        tv_sec: libc::time_t::MAX,
        tv_nsec: 0,
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    assert_eq!((n, p.revents & libc::POLLIN), (1, libc::POLLIN), "ppoll");
    println!("ok=ppoll");
    // SAFETY: a zeroed fd_set filled with FD_SET; valid timeouts.
    unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(fd, &mut set);
        let none = std::ptr::null_mut();
        let n = libc::pselect(fd + 1, &mut set, none, none, &ts, std::ptr::null());
        assert_eq!(n, 1, "pselect");
        let mut tv = libc::timeval {
            tv_sec: libc::time_t::MAX,
            tv_usec: 0,
        };
        libc::FD_SET(fd, &mut set);
        let n = libc::select(fd + 1, &mut set, none, none, &mut tv);
        assert_eq!(n, 1, "select");
    }
    println!("ok=select");
}

#[test]
fn the_largest_poll_timeouts_wait_forever() {
    role_over_vmmc("hugetimeout", "huge_timeouts", &["ppoll", "select"], 1);
}

fn set_timeo(fd: i32, name: i32, ms: i64) {
    let tv = libc::timeval {
        tv_sec: ms / 1000,
        tv_usec: (ms % 1000) * 1000,
    };
    // SAFETY: a valid timeval of its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// A blocking read on `fd` with nothing coming: -1/EAGAIN after about `ms`.
fn read_times_out(fd: i32, ms: u64, what: &str) {
    let t0 = Instant::now();
    let mut b = [0u8; 8];
    // SAFETY: reading into a valid buffer.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    let e = std::io::Error::last_os_error().raw_os_error();
    let took = t0.elapsed();
    assert_eq!((n, e), (-1, Some(libc::EAGAIN)), "{what}: read");
    assert!(
        took >= Duration::from_millis(ms * 9 / 10) && took < Duration::from_millis(ms + 2000),
        "{what}: timed out after {took:?}"
    );
}

/// SO_RCVTIMEO and SO_SNDTIMEO bound a VMMC connection's waits, whether set after the
/// connect, before it, or on the listener before the accept; getsockopt reads them back.
fn socket_timeouts() {
    alarm(20);
    // After the connect.
    let (a, b) = pair();
    set_timeo(a.as_raw_fd(), libc::SO_RCVTIMEO, 300);
    assert_eq!(
        a.read_timeout().expect("getsockopt"),
        Some(Duration::from_millis(300))
    );
    read_times_out(a.as_raw_fd(), 300, "set after connect");
    println!("ok=rcvtimeo");
    // A write that fills the ring stops at the send timeout, with what it queued.
    set_timeo(a.as_raw_fd(), libc::SO_SNDTIMEO, 300);
    let big = vec![7u8; 4 << 20];
    // SAFETY: writing from a valid buffer.
    let n = unsafe { libc::write(a.as_raw_fd(), big.as_ptr().cast(), big.len()) };
    assert!(
        n > 0 && (n as usize) < big.len(),
        "write with SO_SNDTIMEO returned {n}"
    );
    // SAFETY: as above.
    let n = unsafe { libc::write(a.as_raw_fd(), big.as_ptr().cast(), big.len()) };
    let e = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((n, e), (-1, Some(libc::EAGAIN)), "write on a full ring");
    println!("ok=sndtimeo");
    // The written bytes went through the ring.
    let mut first = [0u8; 4];
    (&b).read_exact(&mut first).expect("read");
    // Set before the connect, and on the listener before the accept.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    set_timeo(l.as_raw_fd(), libc::SO_RCVTIMEO, 300);
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    // SAFETY: plain socket calls on a socket this code owns, with a valid address.
    let fd = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        set_timeo(fd, libc::SO_RCVTIMEO, 300);
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port.to_be();
        sa.sin_addr.s_addr = u32::to_be(0x7f00_0001);
        let rc = libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect");
        fd
    };
    let accepted = t.join().expect("accept thread");
    // SAFETY: writing from a valid buffer.
    assert_eq!(unsafe { libc::write(fd, b"v".as_ptr().cast(), 1) }, 1);
    let mut one = [0u8; 1];
    (&accepted)
        .read_exact(&mut one)
        .expect("over the connection");
    read_times_out(fd, 300, "set before connect");
    read_times_out(accepted.as_raw_fd(), 300, "inherited from the listener");
    // SAFETY: closing our descriptor.
    unsafe { libc::close(fd) };
    println!("ok=before-connect");
}

#[test]
fn socket_timeouts_bound_vmmc_waits() {
    role_over_vmmc(
        "timeouts",
        "socket_timeouts",
        &["rcvtimeo", "sndtimeo", "before-connect"],
        1 << 20,
    );
}

/// An IPv6 socket connects to the IPv4-mapped loopback address of a dual-stack listener.
fn v4_mapped() {
    alarm(30);
    let l = TcpListener::bind("[::]:0").expect("bind [::]");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut b = [0u8; 6];
        s.read_exact(&mut b).expect("read");
        s.write_all(&b).expect("echo");
    });
    let mut c = TcpStream::connect(format!("[::ffff:127.0.0.1]:{port}")).expect("connect mapped");
    c.write_all(b"mapped").expect("write");
    let mut back = [0u8; 6];
    c.read_exact(&mut back).expect("read back");
    assert_eq!(&back, b"mapped");
    t.join().expect("server");
    println!("ok=mapped");
}

#[test]
fn an_ipv6_socket_reaches_the_v4_mapped_loopback() {
    role_over_vmmc("mapped", "v4_mapped", &["mapped"], 12);
}

/// A socket added to an epoll set before it connects reports the connection's readiness
/// once the connect made it a VMMC connection, and EPOLL_CTL_MOD and DEL find it.
fn epoll_before_connect() {
    alarm(20);
    const IN: u32 = libc::EPOLLIN as u32;
    const OUT: u32 = libc::EPOLLOUT as u32;
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    // SAFETY: a plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0) };
    assert!(fd >= 0, "socket");
    let ep = ep_create();
    ep_ctl(
        ep,
        libc::EPOLL_CTL_ADD,
        fd,
        IN | OUT | libc::EPOLLET as u32,
        42,
    );
    // SAFETY: a valid sockaddr_in of its size.
    let rc = unsafe {
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port.to_be();
        sa.sin_addr.s_addr = u32::to_be(0x7f00_0001);
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert!(
        rc == 0 || err == Some(libc::EINPROGRESS),
        "connect: {err:?}"
    );
    let mut srv = t.join().expect("accept thread");
    let evs = ep_wait(ep, 5000);
    assert_eq!(evs.len(), 1, "writable after connect: {evs:?}");
    assert_eq!((evs[0].0 & OUT, evs[0].1), (OUT, 42));
    srv.write_all(b"ring").expect("write");
    let evs = ep_wait(ep, 5000);
    assert!(
        evs.iter().any(|&(e, d)| e & IN != 0 && d == 42),
        "no EPOLLIN for data in the ring: {evs:?}"
    );
    let mut b = [0u8; 4];
    // SAFETY: reading into a valid buffer.
    assert_eq!(unsafe { libc::read(fd, b.as_mut_ptr().cast(), 4) }, 4);
    assert_eq!(&b, b"ring");
    ep_ctl(ep, libc::EPOLL_CTL_MOD, fd, IN, 43);
    srv.write_all(b"x").expect("write");
    assert_eq!(ep_wait(ep, 5000), vec![(IN, 43)]);
    ep_ctl(ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
    assert!(ep_wait(ep, 0).is_empty(), "reported after EPOLL_CTL_DEL");
    // SAFETY: closing our descriptor.
    unsafe { libc::close(fd) };
    println!("ok=epoll-before-connect");
}

#[test]
fn an_epoll_registration_made_before_connect_follows_the_connection() {
    role_over_vmmc(
        "epollearly",
        "epoll_before_connect",
        &["epoll-before-connect"],
        5,
    );
}

/// Handlers that ran in the `signals` role.
static HANDLED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    HANDLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

extern "C" fn count_signal_info(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    HANDLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Installs `handler` for SIGUSR1 with `flags`.
fn on_usr1(handler: libc::sighandler_t, flags: libc::c_int) {
    // SAFETY: plain data, then a valid structure for sigaction.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = flags;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
            0
        );
    }
}

/// Runs `call` on a thread and sends that thread `sig` until it returns; `ready` says when
/// the thread is about to make its call, and `more` (given the handlers run since) whether
/// to go on signalling. Returns what `call` returned and the signals sent after `ready`.
fn signalled<T: Send + 'static>(
    sig: libc::c_int,
    call: impl FnOnce(&std::sync::atomic::AtomicBool) -> T + Send + 'static,
    mut more: impl FnMut(u32) -> bool,
) -> T {
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ready = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let r = ready.clone();
    let t = std::thread::spawn(move || {
        let v = call(&r);
        tx.send(v).ok();
    });
    let thread = t.as_pthread_t();
    let start = Instant::now();
    let base = HANDLED.load(Ordering::SeqCst);
    loop {
        if ready.load(Ordering::SeqCst) && more(HANDLED.load(Ordering::SeqCst) - base) {
            // SAFETY: the thread is alive until it sends its result (received below).
            assert_eq!(unsafe { libc::pthread_kill(thread, sig) }, 0);
        }
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(v) => {
                t.join().expect("thread");
                return v;
            }
            Err(_) => assert!(
                start.elapsed() < Duration::from_secs(30),
                "the call did not return"
            ),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// One read(2) of up to 16 bytes from `fd`, `ready` set just before it: (result, errno).
fn read_once(fd: i32, ready: &std::sync::atomic::AtomicBool) -> (isize, i32) {
    let mut buf = [0u8; 16];
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: a valid buffer.
    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    (r, errno())
}

/// Signals and blocking calls on a VMMC connection.
fn signals() {
    use std::sync::atomic::Ordering;
    let (a, mut b) = pair();
    let fa = a.as_raw_fd();

    // A handler without SA_RESTART: a read with nothing to read fails with EINTR.
    on_usr1(count_signal as *const () as libc::sighandler_t, 0);
    let (r, e) = signalled(libc::SIGUSR1, move |ready| read_once(fa, ready), |_| true);
    assert_eq!((r, e), (-1, libc::EINTR), "read under a signal");
    println!("ok=eintr_read");

    // The program sees the handler and flags it installed.
    // SAFETY: plain data; zero is a valid initial state.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query into a valid structure.
    let r = unsafe { libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old) };
    assert_eq!(r, 0);
    assert_eq!(
        old.sa_sigaction,
        count_signal as *const () as libc::sighandler_t
    );
    assert_eq!(old.sa_flags & (libc::SA_SIGINFO | libc::SA_RESTART), 0);
    println!("ok=sigaction_reports");

    // SA_RESTART (and SA_SIGINFO): the read goes on through several handlers and returns
    // the data written after them.
    on_usr1(
        count_signal_info as *const () as libc::sighandler_t,
        libc::SA_RESTART | libc::SA_SIGINFO,
    );
    let writer = std::thread::spawn({
        let mut b = b.try_clone().expect("clone");
        move || {
            // Written once five handlers ran during the read (signalled's `more`).
            while !WRITE_NOW.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            b.write_all(b"hello").expect("write");
        }
    });
    let (r, e) = signalled(
        libc::SIGUSR1,
        move |ready| read_once(fa, ready),
        |ran| {
            if ran >= 5 {
                WRITE_NOW.store(true, Ordering::SeqCst);
            }
            ran < 5
        },
    );
    writer.join().expect("writer");
    assert_eq!(r, 5, "a restarted read returns the data (errno {e})");
    println!("ok=restart_read");

    // poll and epoll_wait end with EINTR whatever SA_RESTART says.
    let (r, e) = signalled(
        libc::SIGUSR1,
        move |ready| {
            let mut p = libc::pollfd {
                fd: fa,
                events: libc::POLLIN,
                revents: 0,
            };
            ready.store(true, Ordering::SeqCst);
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, -1) };
            (r, errno())
        },
        |_| true,
    );
    assert_eq!((r, e), (-1, libc::EINTR), "poll under a signal");
    println!("ok=eintr_poll");
    let ep = ep_create();
    ep_ctl(ep, libc::EPOLL_CTL_ADD, fa, libc::EPOLLIN as u32, 7);
    let (r, e) = signalled(
        libc::SIGUSR1,
        move |ready| {
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 4];
            ready.store(true, Ordering::SeqCst);
            // SAFETY: a valid array of events.
            let r = unsafe { libc::epoll_wait(ep, ev.as_mut_ptr(), 4, -1) };
            (r, errno())
        },
        |_| true,
    );
    assert_eq!((r, e), (-1, libc::EINTR), "epoll_wait under a signal");
    println!("ok=eintr_epoll");

    // A write that fills the peer's ring, interrupted: it returns the bytes it moved.
    on_usr1(count_signal as *const () as libc::sighandler_t, 0);
    const BIG: usize = 16 << 20;
    let (r, e) = signalled(
        libc::SIGUSR1,
        move |ready| {
            let data = vec![7u8; BIG];
            ready.store(true, Ordering::SeqCst);
            // SAFETY: a valid buffer.
            let r = unsafe { libc::write(fa, data.as_ptr().cast(), data.len()) };
            (r, errno())
        },
        |_| true,
    );
    assert!(
        r > 0 && (r as usize) < BIG,
        "an interrupted write returns what it moved: {r} (errno {e})"
    );
    println!("ok=partial_write");
    let mut got = vec![0u8; r as usize];
    b.read_exact(&mut got).expect("the bytes written");
    assert!(got.iter().all(|&x| x == 7));

    // signal() says what was installed before.
    // SAFETY: installing and querying handlers.
    unsafe {
        assert_eq!(
            libc::signal(
                libc::SIGUSR2,
                count_signal as *const () as libc::sighandler_t
            ),
            libc::SIG_DFL
        );
        assert_eq!(
            libc::signal(libc::SIGUSR2, libc::SIG_DFL),
            count_signal as *const () as libc::sighandler_t
        );
    }
    println!("ok=signal_returns_previous");

    // siginterrupt decides whether signal's handlers restart, as in glibc; so does
    // __sysv_signal (what `signal` is in a program built with -std=c99).
    extern "C" {
        fn sigset(sig: libc::c_int, disp: libc::sighandler_t) -> libc::sighandler_t;
        fn siginterrupt(sig: libc::c_int, flag: libc::c_int) -> libc::c_int;
        fn __sysv_signal(sig: libc::c_int, disp: libc::sighandler_t) -> libc::sighandler_t;
    }
    let reported = |sig| {
        // SAFETY: plain data; a query into it.
        let mut q: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query into a valid structure.
        assert_eq!(unsafe { libc::sigaction(sig, std::ptr::null(), &mut q) }, 0);
        q.sa_flags & libc::SA_RESTART != 0
    };
    let handler = count_signal as *const () as libc::sighandler_t;
    // sysv_signal's handler is one-shot: SIGURG, whose default is to ignore it, so that a
    // second signal sent before the first was seen does no harm.
    for (how, sig, restarts) in [
        ("siginterrupt", libc::SIGUSR1, false),
        ("sysv_signal", libc::SIGURG, false),
        ("signal", libc::SIGUSR1, true),
    ] {
        // SAFETY: installing a handler.
        unsafe {
            match how {
                "siginterrupt" => {
                    assert_eq!(siginterrupt(sig, 1), 0);
                    libc::signal(sig, handler);
                }
                "sysv_signal" => {
                    __sysv_signal(sig, handler);
                }
                _ => {
                    assert_eq!(siginterrupt(sig, 0), 0);
                    libc::signal(sig, handler);
                }
            }
        }
        assert_eq!(
            reported(sig),
            restarts,
            "{how}: SA_RESTART as glibc sets it"
        );
        if !restarts {
            let (r, e) = signalled(sig, move |ready| read_once(fa, ready), |ran| ran == 0);
            assert_eq!((r, e), (-1, libc::EINTR), "{how}: read under a signal");
        }
    }
    println!("ok=siginterrupt_and_sysv_signal");

    // sigset says what was installed, and that can be installed again.
    // SAFETY: installing handlers; a signal to this thread, whose handler counts.
    unsafe {
        libc::signal(libc::SIGUSR2, handler);
        let prev = sigset(
            libc::SIGUSR2,
            count_signal_info as *const () as libc::sighandler_t,
        );
        assert_eq!(prev, handler, "sigset returns the handler signal installed");
        libc::signal(libc::SIGUSR2, prev);
        let before = HANDLED.load(Ordering::SeqCst);
        assert_eq!(libc::raise(libc::SIGUSR2), 0);
        assert_eq!(HANDLED.load(Ordering::SeqCst), before + 1);
    }
    println!("ok=sigset_round_trip");
}

/// Lets the `signals` role's writer go.
static WRITE_NOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[test]
fn signals_interrupt_blocking_calls_as_the_kernel_does() {
    role_over_vmmc(
        "signals",
        "signals",
        &[
            "eintr_read",
            "sigaction_reports",
            "restart_read",
            "eintr_poll",
            "eintr_epoll",
            "partial_write",
            "signal_returns_previous",
            "siginterrupt_and_sysv_signal",
            "sigset_round_trip",
        ],
        1 << 20,
    );
}
