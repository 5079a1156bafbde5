//! Soak: resource bounds over many cycles (issue 24). Under `vmmc-run -n 2`:
//! - `import`: rank 1 imports rank 0's buffer, sends through it and unimports, again and again;
//!   every tenth round an import request is dropped before it completes;
//! - `connect`: rank 1 connects a stream socket to rank 0's listener, sends a byte, reads the
//!   echo and closes, again and again.
//!
//! Each rank samples its resident memory (VmRSS) and open descriptors every `--every` cycles
//! and prints one JSON line per phase: `{"phase":..,"rank":..,"cycles":..,"fds":[..],
//! "rss_kib":[..],"fd_growth":..,"rss_growth_kib":..,"flat":..}`. After a warm-up tenth,
//! "flat" means no descriptor more and at most `--rss-slack-kib` more memory; the program
//! exits non-zero when a phase is not flat.
//!
//! `vmmc-run -n 2 -- soak [--cycles N] [--every K] [--rss-slack-kib S]`

#![forbid(unsafe_code)]

use sockets::{JobListener, VmmcStream};
use std::io::{Read, Write};
use std::process::ExitCode;
use vmmc::{Endpoint, ExportOptions, MemKind};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

struct Samples {
    phase: &'static str,
    rank: usize,
    fds: Vec<usize>,
    rss: Vec<u64>,
}

impl Samples {
    fn new(phase: &'static str, rank: usize) -> Samples {
        Samples {
            phase,
            rank,
            fds: vec![],
            rss: vec![],
        }
    }
    fn take(&mut self) {
        self.fds.push(open_fds());
        self.rss.push(rss_kib());
    }
    /// Prints the phase's line; whether it stayed flat after the warm-up.
    fn report(&self, cycles: usize, slack_kib: u64) -> bool {
        let warm = (self.fds.len() / 10).max(1).min(self.fds.len() - 1);
        let fd_growth = *self.fds.last().unwrap() as i64 - self.fds[warm] as i64;
        let rss_growth = *self.rss.last().unwrap() as i64 - self.rss[warm] as i64;
        let flat = fd_growth <= 0 && rss_growth <= slack_kib as i64;
        println!(
            "{}",
            serde_json::json!({
                "phase": self.phase,
                "rank": self.rank,
                "cycles": cycles,
                "fds": self.fds,
                "rss_kib": self.rss,
                "fd_growth": fd_growth,
                "rss_growth_kib": rss_growth,
                "flat": flat,
            })
        );
        flat
    }
}

fn imports(ep: &Endpoint, cycles: usize, every: usize) -> vmmc::Result<Samples> {
    let mut s = Samples::new("import", ep.rank());
    let r = ep.alloc(4096, MemKind::Shared)?;
    ep.export(1, &r, ExportOptions::new())?;
    let other = ep.proc_of(1 - ep.rank())?;
    if ep.rank() == 1 {
        s.take();
        for i in 0..cycles {
            if i % 10 == 9 {
                // Dropped before it completes (buffer 2 is never exported).
                drop(ep.import_async(other, 2)?);
            }
            let p = ep.import(other, 1)?;
            p.send(0, &(i as u32 + 1).to_ne_bytes())?;
            ep.unimport(p)?;
            if (i + 1) % every == 0 {
                s.take();
            }
        }
        let p = ep.import(other, 1)?;
        p.send(4, &1u32.to_ne_bytes())?; // done
    } else {
        s.take();
        r.wait_u32(4, |v| v == 1, || ep.check_peer(other))?;
        s.take();
    }
    Ok(s)
}

fn connects(ep: &Endpoint, cycles: usize, every: usize) -> std::io::Result<Samples> {
    const PORT: u16 = 31;
    let mut s = Samples::new("connect", ep.rank());
    s.take();
    if ep.rank() == 0 {
        let l = JobListener::bind(ep, PORT)?;
        for i in 0..cycles {
            let (mut c, _) = l.accept()?;
            let mut b = [0u8; 1];
            c.read_exact(&mut b)?;
            c.write_all(&b)?;
            drop(c);
            if (i + 1) % every == 0 {
                s.take();
            }
        }
    } else {
        for i in 0..cycles {
            let mut c = VmmcStream::connect_job(ep, 0, PORT)?;
            c.write_all(&[i as u8])?;
            let mut b = [0u8; 1];
            c.read_exact(&mut b)?;
            assert_eq!(b[0], i as u8);
            drop(c);
            if (i + 1) % every == 0 {
                s.take();
            }
        }
    }
    Ok(s)
}

fn main() -> ExitCode {
    let mut cycles = 2000usize;
    let mut every = 100usize;
    let mut slack = 2048u64;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| v.parse::<u64>().ok());
        match (a.as_str(), v) {
            ("--cycles", Some(v)) => cycles = v as usize,
            ("--every", Some(v)) => every = (v as usize).max(1),
            ("--rss-slack-kib", Some(v)) => slack = v,
            _ => {
                eprintln!("soak [--cycles N] [--every K] [--rss-slack-kib S]");
                return ExitCode::from(2);
            }
        }
    }
    let ep = match vmmc_run::init() {
        Ok(ep) if ep.size() == 2 => ep,
        Ok(_) => {
            eprintln!("soak runs as 2 ranks: vmmc-run -n 2 -- soak");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut flat = true;
    match imports(&ep, cycles, every) {
        Ok(s) => flat &= s.report(cycles, slack),
        Err(e) => {
            eprintln!("soak rank {}: import phase: {e}", ep.rank());
            return ExitCode::FAILURE;
        }
    }
    match connects(&ep, cycles, every) {
        Ok(s) => flat &= s.report(cycles, slack),
        Err(e) => {
            eprintln!("soak rank {}: connect phase: {e}", ep.rank());
            return ExitCode::FAILURE;
        }
    }
    if flat {
        ExitCode::SUCCESS
    } else {
        eprintln!("soak rank {}: a resource grew", ep.rank());
        ExitCode::FAILURE
    }
}
