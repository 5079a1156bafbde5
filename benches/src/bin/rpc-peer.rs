//! The Rust contenders of `bench-rpc`: the stubs stubgen generated from
//! `rpc/tests/vrpc_gen/vecho.x`, unchanged, over VRPC (VMMC queues between two processes) and
//! over this crate's ONC RPC on TCP loopback. Measures the null call, and the echo of 1 KB
//! and 64 KB of opaque data (or of the `--sizes` given, 0 meaning the null call: bench-srpc's
//! sweep), each call timed alone; prints one JSON line,
//! `{"series":NAME,"points":[{"size":..,"latency_us":..,"bandwidth_mbs":..},..]}`, where
//! `latency_us` is the median round trip and `bandwidth_mbs` the bytes moved (both ways)
//! over it.
//!
//! ```text
//! vmmc-run -n 2 [--transport sim] -- rpc-peer vrpc [--calls N] [--sizes A,B,..] [--name SERIES]
//!                                              rank 0 serves, rank 1 calls ("VRPC-shm");
//!                                              with more ranks, every other rank calls at
//!                                              once and prints its own line
//! rpc-peer tcp [--calls N] [--sizes A,B,..]    a `tcp-serve` child serves ("ONC-TCP-ours")
//! rpc-peer tcp-serve                           prints its port, serves until stdin closes
//! ```

#![forbid(unsafe_code)]

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "../../../rpc/tests/vrpc_gen/vecho.rs"]
mod vecho;

use rpc::client::{Call, TcpClient};
use rpc::server::Server;
use rpc::vrpc::{VrpcClient, VrpcServer};
use rpc::xdr::{Opaque, XdrString};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use vecho::{node, pair, VechoV1Client, VechoV1Server, VechoV1Service};
use vmmc_benches::stats::{median, Sample, Series};

/// The cases: (bytes echoed, 0 for the null call; share of `--calls` made).
const CASES: [(usize, usize); 3] = [(0, 1), (1024, 1), (65_536, 10)];

/// The server side of vecho.x (the benchmark uses the null procedure and ECHO).
struct Impl;

impl VechoV1Server for Impl {
    fn echo(&self, arg: vecho::blob) -> vecho::blob {
        arg
    }
    fn add(&self, a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn swap(&self, p: pair) -> pair {
        pair { a: p.b, b: p.a }
    }
    fn concat(&self, mut a: XdrString, b: XdrString) -> XdrString {
        a.0.extend_from_slice(&b.0);
        a
    }
    fn reverse(&self, list: Option<Box<node>>) -> Option<Box<node>> {
        list
    }
    fn set_value(&self, _: i64) {}
    fn get_value(&self) -> i64 {
        0
    }
}

/// The cases of `--sizes a,b,..` (a tenth of the calls from 16 KB up), or [`CASES`].
fn cases(sizes: Option<&str>) -> Result<Vec<(usize, usize)>, String> {
    let Some(list) = sizes else {
        return Ok(CASES.to_vec());
    };
    list.split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(s) => Ok((s, if s >= 16_384 { 10 } else { 1 })),
            Err(_) => Err(format!("--sizes: {v:?} is not a size")),
        })
        .collect()
}

/// Times every call of each case; the median round trip per case.
fn measure<C: Call>(
    c: &mut VechoV1Client<C>,
    name: &str,
    calls: usize,
    cases: &[(usize, usize)],
) -> Result<Series, String> {
    let mut series = Series::new(name);
    for &(size, share) in cases {
        let n = (calls / share).max(5);
        let data = Opaque(vec![0x5a; size]);
        let mut rt = Vec::with_capacity(n);
        for i in 0..n + n / 10 + 1 {
            // The node's clock: virtual time on the simulator, else the monotonic clock.
            let t0 = vmmc::pace::now_ns();
            if size == 0 {
                c.inner
                    .call::<_, ()>(vecho::VECHO_PROG, vecho::VECHO_V1, 0, &())
                    .map_err(|e| format!("null call: {e}"))?;
            } else {
                let back = c.echo(&data).map_err(|e| format!("echo {size}: {e}"))?;
                if back.len() != size {
                    return Err(format!("echo of {size} bytes returned {}", back.len()));
                }
            }
            let us = (vmmc::pace::now_ns() - t0) as f64 / 1e3;
            // The first tenth warms up.
            if i > n / 10 {
                rt.push(us);
            }
        }
        let latency_us = median(&mut rt);
        series.points.push(Sample {
            size,
            latency_us,
            bandwidth_mbs: 2.0 * size as f64 / latency_us,
        });
    }
    Ok(series)
}

fn vrpc(calls: usize, name: &str, cases: &[(usize, usize)]) -> Result<(), String> {
    // `run`: on the simulator both ranks are threads of this process, in virtual time.
    vmmc_run::run(|ep| {
        let fail = |e: String| vmmc::Error::Protocol(e);
        if ep.size() < 2 {
            return Err(fail(
                "rpc-peer vrpc runs as 2 ranks or more: vmmc-run -n 2 -- rpc-peer vrpc".into(),
            ));
        }
        if ep.rank() == 0 {
            // One server thread for every client, as libtirpc's svc_run serves them.
            VrpcServer::builder(&ep)
                .service(VechoV1Service(Impl))
                .serve(ep.size() as u64 - 1)
                .map_err(|e| fail(format!("VRPC server: {e}")))?;
            return Ok(());
        }
        let client =
            VrpcClient::bind(&ep, ep.proc_of(0)?).map_err(|e| fail(format!("bind: {e}")))?;
        let series = measure(&mut VechoV1Client::new(client), name, calls, cases).map_err(fail)?;
        println!(
            "{}",
            serde_json::to_string(&series).map_err(|e| fail(e.to_string()))?
        );
        Ok(())
    })
    .map_err(|e| e.to_string())
}

fn tcp_serve() -> Result<(), String> {
    let server = Server::builder()
        .service(VechoV1Service(Impl))
        .listen_tcp(([127, 0, 0, 1], 0).into())
        .start()
        .map_err(|e| e.to_string())?;
    let port = server.tcp_addr().ok_or("no TCP address")?.port();
    println!("{port}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Serve until the parent closes our stdin.
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink()).map_err(|e| e.to_string())?;
    server.shutdown().map_err(|e| e.to_string())
}

fn tcp(calls: usize, cases: &[(usize, usize)]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("tcp-serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start the TCP server: {e}"))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let result = line
        .trim()
        .parse::<u16>()
        .map_err(|e| format!("the TCP server's port {line:?}: {e}"))
        .and_then(|port| {
            let client = TcpClient::connect(([127, 0, 0, 1], port).into())
                .map_err(|e| format!("connect: {e}"))?;
            measure(
                &mut VechoV1Client::new(client),
                "ONC-TCP-ours",
                calls,
                cases,
            )
        });
    drop(child.stdin.take());
    let _ = child.wait();
    let series = result?;
    println!(
        "{}",
        serde_json::to_string(&series).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut calls = 20_000usize;
    if let Some(i) = args.iter().position(|a| a == "--calls") {
        match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(n) => calls = n,
            None => {
                eprintln!("--calls N");
                return ExitCode::from(2);
            }
        }
    }
    let sizes = args
        .iter()
        .position(|a| a == "--sizes")
        .map(|i| args.get(i + 1).map_or("", String::as_str));
    let cases = match cases(sizes) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rpc-peer: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match args.first().map(String::as_str) {
        Some("vrpc") => {
            let name = match args.iter().position(|a| a == "--name") {
                Some(i) => args.get(i + 1).cloned().unwrap_or_default(),
                None => "VRPC-shm".into(),
            };
            vrpc(calls, &name, &cases)
        }
        Some("tcp") => tcp(calls, &cases),
        Some("tcp-serve") => tcp_serve(),
        _ => {
            eprintln!("usage: vmmc-run -n 2 -- rpc-peer vrpc [--calls N] [--sizes A,B,..] [--name SERIES] | rpc-peer tcp [--calls N] [--sizes A,B,..] | rpc-peer tcp-serve");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc-peer: {e}");
            ExitCode::from(1)
        }
    }
}
