//! One-way bulk transfer between two processes over the host path, with the library's
//! counters: `bulk [MiB] [write size] [read size]` (variant from `VMMC_SOCK_VARIANT`; kernel
//! TCP with `BULK_TCP=1`); with `BULK_PINGPONG=N`, N ping-pongs of `write size` bytes and
//! the distribution of their round trips. A tool for finding where the time goes.

use std::io::{Read, Write};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let tcp = std::env::var_os("BULK_TCP").is_some();
    let pingpong: Option<usize> = std::env::var("BULK_PINGPONG")
        .ok()
        .and_then(|v| v.parse().ok());
    if args.get(1).map(String::as_str) == Some("--serve") {
        let rsize = num(2, 65536);
        let mut buf = vec![0u8; rsize];
        let mut total = 0u64;
        let mut finish = |s: &mut dyn ReadWrite| {
            if let Some(n) = pingpong {
                for _ in 0..n {
                    s.read_exact(&mut buf).expect("ping");
                    s.write_all(&buf).expect("pong");
                }
            }
            loop {
                let n = s.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            eprintln!("server: {total} bytes, {:?}", sockets::stats());
        };
        if tcp {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            println!("{}", l.local_addr().unwrap());
            let (mut s, _) = l.accept().unwrap();
            finish(&mut s);
        } else {
            let l = sockets::VmmcListener::bind("127.0.0.1:0").unwrap();
            println!("{}", l.local_addr().unwrap());
            let (mut s, _) = l.accept().unwrap();
            finish(&mut s);
        }
        return;
    }
    let (mib, wsize, rsize) = (num(1, 2048), num(2, 65536), num(3, 65536));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--serve", &rsize.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().to_string();
    let mut buf = vec![7u8; wsize];
    let count = (mib << 20) / wsize;
    let mut run = |s: &mut dyn ReadWrite| {
        if let Some(n) = pingpong {
            let mut rtts: Vec<f64> = (0..n)
                .map(|_| {
                    let t = Instant::now();
                    s.write_all(&buf).unwrap();
                    s.read_exact(&mut buf).unwrap();
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            rtts.sort_by(f64::total_cmp);
            let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
            println!(
                "rtt us: median {:.1} p90 {:.1} p99 {:.1} max {:.1} mean {:.1}",
                at(0.5),
                at(0.9),
                at(0.99),
                at(1.0),
                rtts.iter().sum::<f64>() / rtts.len() as f64
            );
        }
        let t = Instant::now();
        for _ in 0..count {
            s.write_all(&buf).unwrap();
        }
        t
    };
    let t = if tcp {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let t = run(&mut s);
        drop(s);
        t
    } else {
        let mut s = sockets::VmmcStream::connect(&addr).unwrap();
        let t = run(&mut s);
        drop(s);
        t
    };
    child.wait().unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} {:.1} Gbit/s ({} MiB in {:.3} s) client {:?}",
        if tcp { "tcp" } else { "vmmc" },
        (count * wsize) as f64 * 8.0 / secs / 1e9,
        mib,
        secs,
        sockets::stats()
    );
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
