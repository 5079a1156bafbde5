//! SunRPC round trips side by side, in one run (issue 6; seed 003 §4.2): the null call and
//! the echo of 1 KB and 64 KB of opaque data for
//!
//! - **VRPC-shm**: stubgen's stubs for `rpc/tests/vrpc_gen/vecho.x` over VRPC, two
//!   processes under `vmmc-run -n 2` on the shared-memory transport (`rpc-peer vrpc`);
//! - **ONC-TCP-ours**: the same stubs over this crate's ONC RPC on TCP loopback, client and
//!   server in two processes (`rpc-peer tcp`);
//! - **libtirpc-TCP**: a libtirpc C client and C server on TCP loopback (`rpc/examples/c/`,
//!   compiled here with `cc -O2 -I/usr/include/tirpc ... -ltirpc`);
//! - and, beside the paper rather than the peers, **VRPC-sim**: the VRPC job on the simulated
//!   SHRIMP (`vmmc-run --transport sim`), in virtual time, against seed 003 §4.2's null VRPC
//!   round trip of about 29 us (a twentieth of the calls: simulating is slower).
//!
//! The contenders take turns, in a rotating order, for several rounds, so that a noisy period
//! of the machine hits all of them; every figure is the median over rounds of each round's
//! median call. Prints the table and the ratios with the targets (VRPC null / libtirpc
//! null <= 0.1; ours over TCP / libtirpc <= 1), writes `rpc.json`.
//!
//! `bench-rpc [--rounds K] [--calls N] [--quick] [--out DIR]` (`--quick`: 1 round of 300
//! calls per case, for a smoke run). Build first:
//! `cargo build --release -p vmmc-run -p vmmc-benches`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;
use vmmc_benches::cli::RoundsArgs;
use vmmc_benches::report::{run_series, write_json, Report};
use vmmc_benches::stats::{Rounds, Sample, Series};
use vmmc_benches::tirpc::Tirpc;

/// vecho.x's program number, served by every contender.
const PROG: u32 = 0x2000_5b01;
/// The cases: (name, bytes echoed or 0 for the null call, share of `--calls` made).
const CASES: [(&str, usize, usize); 3] = [
    ("null", 0, 1),
    ("echo 1 KB", 1024, 1),
    ("echo 64 KB", 65_536, 10),
];
const VRPC: &str = "VRPC-shm";
const OURS: &str = "ONC-TCP-ours";
const TIRPC: &str = "libtirpc-TCP";
const SIM: &str = "VRPC-sim";
/// Seed 003 §4.2: "a round-trip time of about 29 usec for a null RPC".
const PAPER_NULL_US: f64 = 29.0;

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name(name)
}

/// One round of the libtirpc client: median round trip per case, in microseconds.
fn tirpc_round(t: &Tirpc, calls: usize) -> Result<Series, String> {
    let mut s = Series::new(TIRPC);
    for (_, size, share) in CASES {
        let n = (calls / share).max(5);
        let out = Command::new(&t.client)
            .args([
                t.port.to_string(),
                PROG.to_string(),
                size.to_string(),
                n.to_string(),
            ])
            .output()
            .map_err(|e| format!("run the C client: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the C client failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let ns: f64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("the C client's output: {e}"))?;
        let latency_us = ns / 1e3;
        s.points.push(Sample {
            size,
            latency_us,
            bandwidth_mbs: 2.0 * size as f64 / latency_us,
        });
    }
    Ok(s)
}

/// bench-rpc's options.
#[derive(clap::Parser)]
#[command(about = "VRPC beside ONC RPC over TCP and libtirpc (seed 003 §4.2)")]
struct Cli {
    #[command(flatten)]
    rounds: RoundsArgs,
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let (rounds, calls) = (cli.rounds.rounds(), cli.rounds.calls());
    let calls_s = calls.to_string();
    let tmp = std::env::temp_dir().join(format!("bench-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("a temporary directory");
    let tirpc = match vmmc_benches::tirpc::start(&tmp, PROG) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("no libtirpc contender: {e}");
            None
        }
    };

    // Per contender, per size: the median of every round.
    let mut acc = Rounds::default();
    let contenders = [VRPC, OURS, TIRPC, SIM];
    let sim_calls = (calls / 20).max(20).to_string();
    for round in 0..rounds {
        for k in 0..contenders.len() {
            // A rotating order: each contender runs first, second and last in turn.
            let name = contenders[(k + round) % contenders.len()];
            eprintln!("round {}/{rounds}: {name} ...", round + 1);
            let got = match name {
                VRPC => run_series(
                    Command::new(sibling("vmmc-run"))
                        .args(["-n", "2", "--"])
                        .arg(sibling("rpc-peer"))
                        .args(["vrpc", "--calls", &calls_s]),
                    VRPC,
                ),
                SIM => run_series(
                    Command::new(sibling("vmmc-run"))
                        .args(["-n", "2", "--transport", "sim", "--"])
                        .arg(sibling("rpc-peer"))
                        .args(["vrpc", "--calls", &sim_calls, "--name", SIM]),
                    SIM,
                ),
                OURS => run_series(
                    Command::new(sibling("rpc-peer")).args(["tcp", "--calls", &calls_s]),
                    OURS,
                ),
                _ => match &tirpc {
                    Some(t) => tirpc_round(t, calls),
                    None => continue,
                },
            };
            match got {
                Ok(s) => acc.add(s),
                Err(e) => {
                    eprintln!("bench-rpc: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    drop(tirpc);
    let _ = std::fs::remove_dir_all(&tmp);

    let mut report = Report::default();
    report.notes.push(format!(
        "round trip (latency_us) = median over {rounds} round(s) of the median call of each round; \
         {calls} calls per round for null and 1 KB, {} for 64 KB; bandwidth_mbs = bytes moved both \
         ways / round trip; contenders alternate in a rotating order",
        (calls / 10).max(5)
    ));
    report.notes.push(format!(
        "VRPC-sim: virtual time on the simulated SHRIMP ({} calls per round for null and 1 KB), \
         compared with the paper, not with the peers",
        (calls / 20).max(20)
    ));
    report.baselines.insert(
        "paper: null VRPC round trip, us (seed 003 §4.2)".into(),
        PAPER_NULL_US,
    );
    for name in contenders {
        if let Some(s) = acc.round_trip_series(name) {
            report.push(s);
        }
    }
    let rt = |r: &Report, name: &str, size| r.at(name, size).map(|p| p.latency_us);
    for (case, size, _) in CASES {
        if let (Some(v), Some(c)) = (rt(&report, VRPC, size), rt(&report, TIRPC, size)) {
            // Issue 21: 64 KB within a fifth of libtirpc's, 1 KB and null within a tenth.
            let target = if size >= 65_536 {
                " (target <= 0.2)"
            } else {
                " (target <= 0.1)"
            };
            report
                .ratios
                .insert(format!("VRPC-shm / libtirpc-TCP, {case}{target}"), v / c);
        }
        if let (Some(o), Some(c)) = (rt(&report, OURS, size), rt(&report, TIRPC, size)) {
            report.ratios.insert(
                format!("ONC-TCP-ours / libtirpc-TCP, {case} (target <= 1)"),
                o / c,
            );
        }
    }

    if let Some(v) = rt(&report, SIM, 0) {
        report.ratios.insert(
            "VRPC-sim null / the paper's 29 us (seed 003 §4.2)".into(),
            v / PAPER_NULL_US,
        );
    }

    println!("SunRPC round trip, microseconds (median; lower is better)\n");
    let mut head = format!("{:<12}", "case");
    for s in &report.series {
        head.push_str(&format!(" {:>14}", s.series));
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for (case, size, _) in CASES {
        let mut row = format!("{case:<12}");
        for s in &report.series {
            match s.at(size) {
                Some(p) => row.push_str(&format!(" {:>14.2}", p.latency_us)),
                None => row.push_str(&format!(" {:>14}", "-")),
            }
        }
        println!("{row}");
    }
    for (k, v) in &report.baselines {
        println!("\n{k}: {v:.1}");
    }
    if !report.ratios.is_empty() {
        println!("\nratios");
        let w = report.ratios.keys().map(String::len).max().unwrap_or(0);
        for (k, v) in &report.ratios {
            println!("  {k:<w$}  {v:>8.3}");
        }
    }
    for n in &report.notes {
        println!("note: {n}");
    }
    std::fs::create_dir_all(&cli.rounds.out).expect("create the output directory");
    let path = cli.rounds.out.join("rpc.json");
    write_json(&report, &path).expect("write JSON");
    println!("\nwrote {}", path.display());
}
