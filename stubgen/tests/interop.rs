//! Interoperability with the system's rpcgen and libtirpc, over TCP and UDP through rpcbind.
//!
//! tests/interop/interop.x goes through both stubgen (Rust) and rpcgen -N (C). The Rust client
//! calls every procedure of the C server, and the C client calls every procedure of the Rust
//! server; both sides check every result (the servers compute the same transformations).
//!
//! Needs: rpcgen, cc, libtirpc-dev, rpcbind and rpcinfo (rpcbind is started with `-f` if it
//! is not running). Program numbers 0x20005a01 to 0x20005a03 are reserved for these tests.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

const PROG_A: u32 = 0x2000_5a01;
const PROG_B: u32 = 0x2000_5a02;
const PROG_C: u32 = 0x2000_5a03;

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (is it installed?)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the C server and client for program `prog` with rpcgen -N; returns their directory.
fn build_c(prog: u32, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("stubgen-interop-c")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["interop.x", "c_server.c", "c_client.c"] {
        std::fs::copy(interop_dir().join(f), dir.join(f)).unwrap();
    }
    let def = format!("-DPROGNUM={prog:#x}");
    for (flag, out) in [
        ("-h", "interop.h"),
        ("-c", "interop_xdr.c"),
        ("-l", "interop_clnt.c"),
        ("-m", "interop_svc.c"),
    ] {
        run(Command::new("rpcgen").current_dir(&dir).args([
            "-N",
            &def,
            flag,
            "-o",
            out,
            "interop.x",
        ]));
    }
    let cc = |out: &str, srcs: &[&str]| {
        run(Command::new("cc")
            .current_dir(&dir)
            .args(["-I/usr/include/tirpc", "-o", out])
            .args(srcs)
            .arg("-ltirpc"));
    };
    cc(
        "c_server",
        &["c_server.c", "interop_svc.c", "interop_xdr.c"],
    );
    cc(
        "c_client",
        &["c_client.c", "interop_clnt.c", "interop_xdr.c"],
    );
    dir
}

struct Built {
    rust: PathBuf,
    c_a: PathBuf,
    c_b: PathBuf,
}

/// Builds everything once per test binary, and makes sure rpcbind runs.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        ensure_rpcbind();
        let project = common::Project::new(
            "stubgen-interop",
            "[[bin]]\nname = \"interop\"\npath = \"src/rust_peer.rs\"\n",
        );
        let x = interop_dir().join("interop.x");
        for (prog, file) in [
            (PROG_A, "interop_a.rs"),
            (PROG_B, "interop_b.rs"),
            (PROG_C, "interop_c.rs"),
        ] {
            let out = stubgen::Rpcgen::new()
                .define(format!("PROGNUM={prog:#x}"))
                .strict(true)
                .generate_file(&x)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(out.warnings.is_empty(), "{:?}", out.warnings);
            project.write(file, &out.code);
        }
        for f in ["logic.rs", "rust_peer.rs"] {
            project.write(f, &std::fs::read_to_string(interop_dir().join(f)).unwrap());
        }
        project.cargo(&["build", "--bin", "interop"]);
        Built {
            rust: project.bin("interop"),
            c_a: build_c(PROG_A, "a"),
            c_b: build_c(PROG_B, "b"),
        }
    })
}

fn rpcbind_up() -> bool {
    Command::new("rpcinfo")
        .args(["-p", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ensure_rpcbind() {
    if rpcbind_up() {
        return;
    }
    // Left running for later tests, as an rpcbind started by hand would be.
    static RPCBIND: OnceLock<std::sync::Mutex<Child>> = OnceLock::new();
    RPCBIND.get_or_init(|| {
        let child = Command::new("rpcbind")
            .arg("-f")
            .stdin(Stdio::null())
            .spawn()
            .expect("rpcbind must be installed");
        std::sync::Mutex::new(child)
    });
    // Wait for it to answer (bounded: about 10 s).
    for _ in 0..200 {
        if rpcbind_up() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("rpcbind did not come up");
}

/// A server process, killed (and its registration removed) when dropped.
struct Server {
    child: Child,
    prog: u32,
}

impl Server {
    /// Starts `cmd` and waits for it to print READY (after registering with rpcbind).
    fn start(cmd: &mut Command, prog: u32) -> Server {
        // A previous run killed mid-way may have left a registration behind.
        unregister(prog);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let mut server = Server { child, prog };
        if line.trim() != "READY" {
            let status = server.child.wait();
            panic!("server did not start: {line:?}, {status:?}");
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        unregister(self.prog);
    }
}

fn unregister(prog: u32) {
    let _ = Command::new("rpcinfo")
        .args(["-d", &prog.to_string(), "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn expect_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "OK",
        "{cmd:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rust_client_calls_c_server_over_tcp_and_udp() {
    let b = built();
    let _server = Server::start(&mut Command::new(b.c_a.join("c_server")), PROG_A);
    for proto in ["tcp", "udp"] {
        expect_ok(Command::new(&b.rust).args(["a", "client", proto]));
    }
}

#[test]
fn c_client_calls_rust_server_over_tcp_and_udp() {
    let b = built();
    let mut server = Server::start(Command::new(&b.rust).args(["b", "server"]), PROG_B);
    for proto in ["tcp", "udp"] {
        expect_ok(Command::new(b.c_b.join("c_client")).args(["127.0.0.1", proto]));
    }
    // Closing stdin stops the Rust server cleanly (it unregisters itself).
    drop(server.child.stdin.take());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "Rust server exited with {status}");
}

#[test]
fn rust_client_calls_rust_server_over_tcp_and_udp() {
    let b = built();
    let mut server = Server::start(Command::new(&b.rust).args(["c", "server"]), PROG_C);
    for proto in ["tcp", "udp"] {
        expect_ok(Command::new(&b.rust).args(["c", "client", proto]));
    }
    drop(server.child.stdin.take());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "Rust server exited with {status}");
}
