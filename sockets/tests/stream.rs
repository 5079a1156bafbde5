//! Stream sockets across real processes: the test binary re-runs itself as the peer
//! (`SOCK_CHILD=role`, running only the `child` test).

use sockets::{Options, Variant, VmmcListener, VmmcStream};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn_child(role: &str, args: &[&str]) -> Reaper {
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("SOCK_CHILD", role)
        .env("SOCK_ARGS", args.join(" "))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    Reaper(child)
}

/// Reads the child's first stdout line that contains `key=`.
fn child_line(child: &mut Child, key: &str) -> String {
    let out = child.stdout.as_mut().expect("stdout");
    let mut line = String::new();
    loop {
        line.clear();
        // Byte by byte, so nothing after this line is buffered away.
        let mut b = [0u8; 1];
        let mut eof = true;
        while out.read(&mut b).expect("read child") == 1 {
            eof = false;
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0] as char);
        }
        assert!(!eof, "child ended before printing {key}=");
        // libtest prints a blank line and "test child ... " around the child's own lines.
        if let Some(at) = line.find(&format!("{key}=")) {
            return line[at + key.len() + 1..].trim().to_string();
        }
    }
}

/// Kills the child if the test fails before it is reaped, so no process outlives the test.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaper {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaper {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The peer side, run in a child process.
#[test]
fn child() {
    let Ok(role) = std::env::var("SOCK_CHILD") else {
        return;
    };
    let args = std::env::var("SOCK_ARGS").unwrap_or_default();
    let args: Vec<&str> = args.split_whitespace().collect();
    match role.as_str() {
        // Echo server: accepts one connection and echoes until end of file.
        "echo" => {
            let variant = Variant::parse(args[0]).unwrap();
            let l = VmmcListener::bind_with(
                "127.0.0.1:0",
                Options {
                    variant,
                    capacity: 64 * 1024,
                },
            )
            .unwrap();
            println!("addr={}", l.local_addr().unwrap());
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 50_000];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
            s.shutdown(Shutdown::Write).unwrap();
            let st = sockets::stats();
            println!("stats={} {}", st.bytes_sent, st.bytes_received);
        }
        // Connects, writes a little, says so, then waits to be killed.
        "victim" => {
            let s = VmmcStream::connect(args[0]).unwrap();
            (&s).write_all(b"before death").unwrap();
            println!("ready=1");
            std::thread::sleep(Duration::from_secs(60));
        }
        // Sends blocks of the sizes given, then ends.
        "blocks" => {
            let s = VmmcStream::connect(args[0]).unwrap();
            for (i, len) in args[1..].iter().enumerate() {
                s.write_block(&pattern(len.parse().unwrap(), i as u32))
                    .unwrap();
            }
        }
        // Connects, writes, closes and exits, before anybody accepts.
        "write-and-exit" => {
            let mut s = VmmcStream::connect(args[0]).unwrap();
            s.write_all(&pattern(args[1].parse().unwrap(), 7)).unwrap();
        }
        // As a program that makes itself a connected pair (listen, connect, accept) does:
        // the connect must not wait for the accept that only this thread can make.
        "self-connect" => {
            let l = VmmcListener::bind("127.0.0.1:0").unwrap();
            let mut c = VmmcStream::connect(l.local_addr().unwrap()).unwrap();
            let early = pattern(100_000, 3);
            c.write_all(&early).unwrap();
            let (mut a, _) = l.accept().unwrap();
            let mut got = vec![0u8; early.len()];
            a.read_exact(&mut got).unwrap();
            assert!(got == early, "the bytes written before the accept changed");
            a.write_all(b"and back").unwrap();
            let mut back = [0u8; 8];
            c.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"and back");
            let st = sockets::stats();
            println!("through-rings={}", u8::from(st.bytes_sent >= 100_008));
            drop((a, c));
            println!("files-left={}", ring_files_of(std::process::id()).len());
        }
        // Connects and writes; the listener goes without accepting; then the stream.
        "never-accepted" => {
            let l = VmmcListener::bind("127.0.0.1:0").unwrap();
            let mut c = VmmcStream::connect(l.local_addr().unwrap()).unwrap();
            c.write_all(b"never read").unwrap();
            drop(l);
            drop(c);
            println!("files-left={}", ring_files_of(std::process::id()).len());
        }
        other => panic!("unknown role {other}"),
    }
}

fn echo_roundtrip(variant: Variant) {
    let mut child = spawn_child("echo", &[variant.name()]);
    let addr = child_line(&mut child, "addr");
    let before = sockets::stats();
    let s = VmmcStream::connect_with(
        addr.as_str(),
        Options {
            variant,
            capacity: 64 * 1024,
        },
    )
    .unwrap();
    assert_eq!(s.peer_addr().unwrap().to_string(), addr);
    assert_eq!(s.local_addr().unwrap().ip().to_string(), "127.0.0.1");
    let data = pattern(3 << 20, 7);
    let r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        (&r).read_to_end(&mut got).unwrap();
        got
    });
    // Odd sizes at odd offsets: the ring wraps at every alignment, and the one-copy variant
    // must fall back to two copies for some of them.
    let mut scratch = vec![0u8; 100_004];
    let mut off = 0;
    let mut k = 0usize;
    while off < data.len() {
        let n = [1, 3, 4097, 65_536, 7, 100_003][k % 6].min(data.len() - off);
        if k % 4 == 3 {
            // From a source one byte off the data's alignment relative to the ring.
            scratch[1..1 + n].copy_from_slice(&data[off..off + n]);
            (&s).write_all(&scratch[1..1 + n]).unwrap();
        } else {
            (&s).write_all(&data[off..off + n]).unwrap();
        }
        off += n;
        k += 1;
    }
    s.shutdown(Shutdown::Write).unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "echoed data differs");
    let st = child_line(&mut child, "stats");
    assert_eq!(st, format!("{} {}", data.len(), data.len()));
    assert!(child.wait().unwrap().success());
    let after = sockets::stats();
    assert!(after.bytes_sent - before.bytes_sent >= data.len() as u64);
    match variant {
        Variant::Du1 => {
            assert!(after.sends_one_copy > before.sends_one_copy);
            assert!(after.align_fallbacks > before.align_fallbacks);
        }
        Variant::Du2 => assert!(after.sends_two_copy > before.sends_two_copy),
        Variant::Au => assert!(after.sends_au > before.sends_au),
    }
}

#[test]
fn echo_two_copy_du() {
    echo_roundtrip(Variant::Du2);
}

#[test]
fn echo_one_copy_du() {
    echo_roundtrip(Variant::Du1);
}

#[test]
fn echo_two_copy_au() {
    echo_roundtrip(Variant::Au);
}

#[test]
fn killed_peer_gives_eof_or_reset_and_epipe() {
    let l = VmmcListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let mut child = spawn_child("victim", &[&addr]);
    let (s, _) = l.accept().unwrap();
    assert_eq!(child_line(&mut child, "ready"), "1");
    let mut buf = [0u8; 12];
    (&s).read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"before death");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut b = [0u8; 16];
    match (&s).read(&mut b) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("read {n} bytes from a dead peer"),
    }
    let err = loop {
        match (&s).write(&[0u8; 4096]).map(|n| n > 0) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
}

#[test]
fn nonblocking_and_timeouts() {
    let l = VmmcListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || l.accept().unwrap().0);
    let c = VmmcStream::connect(addr).unwrap();
    let srv = t.join().unwrap();
    c.set_nonblocking(true).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(
        (&c).read(&mut b).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    c.set_nonblocking(false).unwrap();
    assert!(c.set_read_timeout(Some(Duration::ZERO)).is_err());
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    assert_eq!(c.read_timeout().unwrap(), Some(Duration::from_millis(50)));
    let t0 = Instant::now();
    assert_eq!(
        (&c).read(&mut b).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert!(t0.elapsed() >= Duration::from_millis(50));
    // A full ring blocks a non-blocking writer.
    srv.set_nonblocking(true).unwrap();
    let big = vec![1u8; 1 << 16];
    let mut total = 0;
    let err = loop {
        match (&srv).write(&big) {
            Ok(n) => total += n,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    assert_eq!(c.readable_bytes(), total);
    assert!(srv.is_writable() || total > 0);
}

#[test]
fn block_transfer_extension() {
    let l = VmmcListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let sizes = ["0", "1", "65536", "3000000", "17"];
    let mut child = spawn_child(
        "blocks",
        &[&addr, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4]],
    );
    let (s, _) = l.accept().unwrap();
    let mut out = vec![0u8; 4 << 20];
    for (i, len) in sizes.iter().enumerate() {
        let n = s.read_block(&mut out).unwrap();
        assert_eq!(n, len.parse::<usize>().unwrap());
        assert!(out[..n] == pattern(n, i as u32)[..], "block {i} differs");
    }
    let mut b = [0u8; 1];
    assert_eq!((&s).read(&mut b).unwrap(), 0);
    assert!(child.wait().unwrap().success());
}

#[test]
fn idle_reader_sleeps_and_is_woken() {
    let l = VmmcListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || l.accept().unwrap().0);
    let c = VmmcStream::connect(addr).unwrap();
    let srv = t.join().unwrap();
    let before = sockets::stats();
    // The core's policy counts the ring's waits (issue 19: every wait goes through it).
    let core_sleeps = || {
        vmmc::wait::counts()
            .into_iter()
            .find(|c| c.name == "sockets")
            .map_or(0, |c| c.sleeps)
    };
    let core_before = core_sleeps();
    let reader = std::thread::spawn(move || {
        let mut b = [0u8; 4];
        (&c).read_exact(&mut b).unwrap();
        b
    });
    // Wait until the reader has given up spinning and sleeps.
    let t0 = Instant::now();
    while sockets::stats().sleeps == before.sleeps {
        assert!(t0.elapsed() < Duration::from_secs(10), "reader never slept");
        std::thread::yield_now();
    }
    (&srv).write_all(b"wake").unwrap();
    assert_eq!(&reader.join().unwrap(), b"wake");
    assert!(sockets::stats().wakeups_sent > before.wakeups_sent);
    assert!(
        core_sleeps() > core_before,
        "the sleep went through vmmc::wait"
    );
}

/// The ring files of process `pid` still in the sockets' directory.
fn ring_files_of(pid: u32) -> Vec<String> {
    let prefix = format!("ring-{pid}-");
    std::fs::read_dir(sockets::SHM_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn one_thread_connects_to_its_own_listener_then_accepts() {
    // In a process of its own, so that the ring files it counts are this case's alone.
    let mut child = spawn_child("self-connect", &[]);
    assert_eq!(child_line(&mut child, "through-rings"), "1");
    assert_eq!(child_line(&mut child, "files-left"), "0");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_peer_that_wrote_and_exited_before_the_accept_is_read_to_the_end() {
    let l = VmmcListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let mut child = spawn_child("write-and-exit", &[&addr, "300000"]);
    let pid = child.id();
    assert!(child.wait().unwrap().success(), "writer failed");
    // Its rings wait for the accept.
    assert_eq!(
        ring_files_of(pid).len(),
        2,
        "the rings' files went before the accept"
    );
    let (mut s, _) = l.accept().unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 300_000);
    assert!(got == pattern(300_000, 7), "data changed");
    assert_eq!(
        ring_files_of(pid),
        Vec::<String>::new(),
        "accept left the files"
    );
}

#[test]
fn a_connection_the_listener_never_accepts_leaves_no_files() {
    let mut child = spawn_child("never-accepted", &[]);
    assert_eq!(child_line(&mut child, "files-left"), "0");
    assert!(child.wait().unwrap().success());
}
