//! The contenders of `bench-srpc`, each run as two ranks (rank 0 serves, rank 1 calls and
//! measures): the null call and a single INOUT argument of 4 B to 64 KB (seed 003 Fig. 8).
//!
//! - `srpc-au`, `srpc-du`: SHRIMP RPC, the stubs stubgen generates from `idl/sweep.idl` at
//!   build time, over an automatic- or a deliberate-update binding. The server's procedures
//!   change the first byte of their argument (the client checks it), so results travel back.
//! - (VRPC, the null procedure and the echo of the same bytes, is `rpc-peer vrpc --sizes`.)
//! - `raw-du`, `raw-au`: the raw VMMC round trip: the same bytes plus a flag word right after
//!   them, sent (DU) or stored (AU) into the peer's buffer, and back, with the waiting the RPCs
//!   use (`Region::wait_u32`); each side copies out the bytes that came, as the server's stub
//!   takes its arguments and the client's its results (bytes nobody reads stay in the
//!   sender's cache: such a round trip would move nothing between the cores). No
//!   marshalling, no dispatch: what the transport allows.
//!
//! Each call is timed alone (after a tenth as many untimed warm-up calls); the line printed
//! is one JSON [`Series`]: per size, `latency_us` is the median round trip and `bandwidth_mbs`
//! the bytes moved both ways over it.
//!
//! ```text
//! vmmc-run -n 2 [--transport sim] -- srpc-peer srpc-au|srpc-du|raw-du|raw-au
//!                                      [--calls N] [--max-size BYTES] [--name SERIES]
//! ```

#![forbid(unsafe_code)]

#[allow(dead_code, clippy::all, missing_docs)]
#[rustfmt::skip]
mod sweep {
    include!(concat!(env!("OUT_DIR"), "/sweep.rs"));
}

use srpc::{InOut, Mode, ServerBinding};
use std::process::ExitCode;
use sweep::{SweepClient, SweepServer, SWEEP_LAYOUT};
use vmmc::{pace, AuOptions, Endpoint, ExportOptions, MemKind};
use vmmc_benches::stats::{median, Sample, Series};

/// The sizes of the sweep: 0 is the null call (bench-srpc gives VRPC the same list).
const SIZES: [usize; 9] = [0, 4, 16, 64, 256, 1024, 4096, 16384, 65536];

/// The sizes of the sweep up to `max`.
fn sizes(max: usize) -> impl Iterator<Item = usize> {
    SIZES.into_iter().filter(move |&s| s <= max)
}

/// Calls timed at `size`: fewer for the largest arguments.
fn calls_at(size: usize, calls: usize) -> usize {
    if size >= 16384 {
        (calls / 10).max(5)
    } else {
        calls.max(5)
    }
}

/// Calls made at `size`, warm-up included (both ranks of the raw contender count them).
fn total_at(size: usize, calls: usize) -> usize {
    let n = calls_at(size, calls);
    n + n / 10 + 1
}

/// Times `n` calls of `f` one by one after a tenth as many untimed ones; the median, in us.
fn time(n: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    for _ in 0..n / 10 + 1 {
        f()?;
    }
    let mut rt = Vec::with_capacity(n);
    for _ in 0..n {
        // The node's clock: virtual time on the simulator, else the monotonic clock.
        let t0 = pace::now_ns();
        f()?;
        rt.push((pace::now_ns() - t0) as f64 / 1e3);
    }
    Ok(median(&mut rt))
}

fn sample(size: usize, latency_us: f64) -> Sample {
    Sample {
        size,
        latency_us,
        bandwidth_mbs: 2.0 * size as f64 / latency_us,
    }
}

/// The server side of sweep.idl: every procedure bumps the first byte of its argument.
struct Sweep;

fn bump<const N: usize>(d: &mut InOut<'_, [u8; N]>) {
    let v = d.get_mut();
    v[0] = v[0].wrapping_add(1);
}

impl SweepServer for Sweep {
    fn null(&mut self) {}
    fn io4(&mut self, d: &mut InOut<'_, [u8; 4]>) {
        bump(d)
    }
    fn io16(&mut self, d: &mut InOut<'_, [u8; 16]>) {
        bump(d)
    }
    fn io64(&mut self, d: &mut InOut<'_, [u8; 64]>) {
        bump(d)
    }
    fn io256(&mut self, d: &mut InOut<'_, [u8; 256]>) {
        bump(d)
    }
    fn io1k(&mut self, d: &mut InOut<'_, [u8; 1024]>) {
        bump(d)
    }
    fn io4k(&mut self, d: &mut InOut<'_, [u8; 4096]>) {
        bump(d)
    }
    fn io16k(&mut self, d: &mut InOut<'_, [u8; 16384]>) {
        bump(d)
    }
    fn io64k(&mut self, d: &mut InOut<'_, [u8; 65536]>) {
        bump(d)
    }
}

type Proc<const N: usize> = fn(&mut SweepClient, &mut [u8; N]) -> Result<(), srpc::Error>;

/// Times procedure `p` with an INOUT argument of `N` bytes, checking what comes back.
fn inout<const N: usize>(c: &mut SweepClient, n: usize, p: Proc<N>) -> Result<f64, String> {
    let mut d = Box::new([0x5au8; N]);
    let mut want = d[0];
    time(n, || {
        p(c, &mut d).map_err(|e| format!("{N}-byte call: {e}"))?;
        want = want.wrapping_add(1);
        if d[0] != want || d[N - 1] != 0x5a {
            return Err(format!("{N}-byte call: wrong result"));
        }
        Ok(())
    })
}

fn srpc(
    ep: &Endpoint,
    mode: Mode,
    calls: usize,
    max: usize,
    name: &str,
) -> Result<Option<Series>, String> {
    if ep.rank() == 0 {
        let mut b = ServerBinding::accept(ep, 1, SWEEP_LAYOUT, mode).map_err(|e| e.to_string())?;
        b.serve(|call| sweep::sweep_dispatch(&mut Sweep, call))
            .map_err(|e| format!("server: {e}"))?;
        return Ok(None);
    }
    let mut c = SweepClient::bind(ep, 0, mode).map_err(|e| format!("bind: {e}"))?;
    let mut s = Series::new(name);
    for size in sizes(max) {
        let n = calls_at(size, calls);
        let us = match size {
            0 => time(n, || c.null().map_err(|e| format!("null call: {e}")))?,
            4 => inout(&mut c, n, SweepClient::io4)?,
            16 => inout(&mut c, n, SweepClient::io16)?,
            64 => inout(&mut c, n, SweepClient::io64)?,
            256 => inout(&mut c, n, SweepClient::io256)?,
            1024 => inout(&mut c, n, SweepClient::io1k)?,
            4096 => inout(&mut c, n, SweepClient::io4k)?,
            16384 => inout(&mut c, n, SweepClient::io16k)?,
            _ => inout(&mut c, n, SweepClient::io64k)?,
        };
        s.points.push(sample(size, us));
    }
    Ok(Some(s))
}

/// The raw contender's buffer identity (on both ranks).
const RAW_BUF: vmmc::BufId = 0x5a00_0001;

fn raw(
    ep: &Endpoint,
    au: bool,
    calls: usize,
    max: usize,
    name: &str,
) -> Result<Option<Series>, String> {
    let e = |e: vmmc::Error| e.to_string();
    let me = ep.rank();
    let peer = ep.proc_of(1 - me).map_err(e)?;
    let top = SIZES[SIZES.len() - 1];
    let mine = ep.alloc(top + 8, MemKind::Shared).map_err(e)?;
    ep.export(RAW_BUF, &mine, ExportOptions::new().importers([peer]))
        .map_err(e)?;
    let to_peer = ep.import(peer, RAW_BUF).map_err(e)?;
    let bound = match au {
        true => Some(
            to_peer
                .bind(AuOptions {
                    combining: true,
                    notify: false,
                })
                .map_err(e)?,
        ),
        false => None,
    };
    let mut msg = vec![0x5au8; top + 4];
    let mut seq = 0u32;
    // One message: `size` bytes and the flag word after them, in one transfer.
    let mut trip = |size: usize, first: bool| -> Result<(), String> {
        seq = seq.wrapping_add(1);
        msg[size..size + 4].copy_from_slice(&seq.to_le_bytes());
        let send = |msg: &[u8]| -> Result<(), vmmc::Error> {
            match &bound {
                Some(b) => {
                    b.write(0, msg)?;
                    b.flush()
                }
                None => to_peer.send(0, msg),
            }
        };
        if first {
            send(&msg[..size + 4]).map_err(e)?;
        }
        let want = seq;
        mine.wait_u32(size, |v| v == want, || ep.check_peer(peer))
            .map_err(e)?;
        // The bytes that came are taken out (the server echoes them, the client keeps the
        // reply), as an RPC's stubs take its arguments and results: data that nobody reads
        // never leaves the sender's cache, and a round trip that moves it must.
        mine.read(0, &mut msg[..size]).map_err(e)?;
        if !first {
            send(&msg[..size + 4]).map_err(e)?;
        }
        Ok(())
    };
    if me == 0 {
        for size in sizes(max) {
            for _ in 0..total_at(size, calls) {
                trip(size, false)?;
            }
        }
        return Ok(None);
    }
    let mut s = Series::new(name);
    for size in sizes(max) {
        let us = time(calls_at(size, calls), || trip(size, true))?;
        s.points.push(sample(size, us));
    }
    Ok(Some(s))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args.get(i + 1).cloned().unwrap_or_default())
    };
    let calls = match value("--calls").map(|v| v.parse::<usize>()) {
        None => 20_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("srpc-peer: --calls N");
            return ExitCode::from(2);
        }
    };
    let max = match value("--max-size").map(|v| v.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("srpc-peer: --max-size BYTES");
            return ExitCode::from(2);
        }
    };
    let which = args.first().cloned().unwrap_or_default();
    if !["srpc-au", "srpc-du", "raw-du", "raw-au"].contains(&which.as_str()) {
        eprintln!(
            "usage: vmmc-run -n 2 [--transport sim] -- srpc-peer \
             srpc-au|srpc-du|raw-du|raw-au [--calls N] [--max-size BYTES] [--name SERIES]"
        );
        return ExitCode::from(2);
    }
    let name = value("--name").unwrap_or_else(|| which.clone());
    // `run`: on the simulator both ranks are threads of this process, in virtual time.
    let r = vmmc_run::run(|ep| {
        if ep.size() != 2 {
            return Err(vmmc::Error::Protocol(
                "srpc-peer runs as 2 ranks: vmmc-run -n 2 -- srpc-peer ...".into(),
            ));
        }
        let got = match which.as_str() {
            "srpc-au" => srpc(&ep, Mode::Au, calls, max, &name),
            "srpc-du" => srpc(&ep, Mode::Du, calls, max, &name),
            "raw-du" => raw(&ep, false, calls, max, &name),
            _ => raw(&ep, true, calls, max, &name),
        };
        match got {
            Ok(Some(s)) => {
                let line =
                    serde_json::to_string(&s).map_err(|e| vmmc::Error::Protocol(e.to_string()))?;
                println!("{line}");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(vmmc::Error::Protocol(e)),
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("srpc-peer: {e}");
            ExitCode::from(1)
        }
    }
}
