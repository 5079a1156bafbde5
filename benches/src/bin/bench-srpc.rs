//! SHRIMP RPC beside VRPC and the raw VMMC round trip, in one run (issue 7; seed 003 §5,
//! Fig. 8): the null call and a single INOUT argument of 4 B to 64 KB, for
//!
//! - **SRPC-AU**, **SRPC-DU**: SHRIMP RPC over an automatic- and a deliberate-update binding
//!   (stubs generated from `benches/idl/sweep.idl` by the build script);
//! - **VRPC**: the SunRPC-compatible VRPC, null procedure and echo of the same bytes
//!   (`rpc-peer vrpc --sizes ...`);
//! - **raw-DU**, **raw-AU**: the bytes and a flag word, there and back, each side taking out
//!   the bytes that came (as stubs take arguments and results), with nothing else;
//!
//! all on the shared-memory transport, two processes under `vmmc-run -n 2` (`srpc-peer`); and,
//! against the paper, the same contenders on the simulated SHRIMP in virtual time (`-sim`),
//! where seed 003 measured 9.5 us for SHRIMP RPC's null call and 29 us for VRPC's.
//!
//! The shm contenders take turns in a rotating order for several rounds, so a noisy period
//! of the machine hits all of them; each figure is the median over rounds of each round's
//! median call (the simulator is deterministic: one round). Prints the table, the ratios with
//! the targets (SHRIMP RPC's null round trip <= 1/3 of VRPC's and <= 1.5x the raw
//! round trip, its 4 KB and 64 KB `inout` calls <= 1.5x the raw round trip of the same
//! bytes), writes `srpc.json`.
//!
//! `bench-srpc [--rounds K] [--calls N] [--quick] [--no-sim] [--out DIR]` (`--quick`: one
//! round of 300 calls, for a smoke run; `--help` says more). Build first:
//! `cargo build --release -p vmmc-run -p vmmc-benches`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;
use vmmc_benches::cli::RoundsArgs;
use vmmc_benches::report::{run_series, write_json, Report};
use vmmc_benches::stats::{Rounds, Series};

/// The shm contenders: (series, srpc-peer mode).
const SHM: [(&str, &str); 5] = [
    ("SRPC-AU", "srpc-au"),
    ("SRPC-DU", "srpc-du"),
    ("VRPC", "vrpc"),
    ("raw-DU", "raw-du"),
    ("raw-AU", "raw-au"),
];
/// The simulated contenders (virtual time).
const SIM: [(&str, &str); 4] = [
    ("SRPC-AU-sim", "srpc-au"),
    ("SRPC-DU-sim", "srpc-du"),
    ("VRPC-sim", "vrpc"),
    ("raw-AU-sim", "raw-au"),
];
/// Seed 003 §5: null round trips of SHRIMP RPC and VRPC on SHRIMP, in us.
const PAPER_SRPC_US: f64 = 9.5;
const PAPER_VRPC_US: f64 = 29.0;

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name(name)
}

/// The sweep's sizes (srpc-peer's procedures), handed to `rpc-peer vrpc --sizes`.
const SIZES: &str = "0,4,16,64,256,1024,4096,16384,65536";

/// Runs one contender as the two ranks of a job and reads its series line: `vrpc` is
/// `rpc-peer vrpc`, the rest `srpc-peer`.
fn run(mode: &str, name: &str, calls: usize, sim: bool) -> Result<Series, String> {
    let mut cmd = Command::new(sibling("vmmc-run"));
    cmd.args(["-n", "2"]);
    if sim {
        cmd.args(["--transport", "sim"]);
    }
    cmd.arg("--");
    match mode {
        "vrpc" => cmd
            .arg(sibling("rpc-peer"))
            .args(["vrpc", "--sizes", SIZES]),
        _ => cmd.arg(sibling("srpc-peer")).arg(mode),
    };
    cmd.args(["--calls", &calls.to_string(), "--name", name]);
    run_series(&mut cmd, name)
}

fn size_label(s: usize) -> String {
    match s {
        0 => "null".into(),
        s if s >= 1024 => format!("{} KB", s / 1024),
        s => format!("{s} B"),
    }
}

/// bench-srpc's options.
#[derive(clap::Parser)]
#[command(about = "SHRIMP RPC beside VRPC and the raw VMMC round trip (seed 003 Fig. 8)")]
struct Cli {
    #[command(flatten)]
    rounds: RoundsArgs,
    /// Leave out the simulated SHRIMP.
    #[arg(long)]
    no_sim: bool,
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let (rounds, calls, sim) = (cli.rounds.rounds(), cli.rounds.calls(), !cli.no_sim);
    let fail = |e: String| -> ! {
        eprintln!("bench-srpc: {e}");
        std::process::exit(1)
    };

    // Per contender, per size: each round's median.
    let mut acc = Rounds::default();
    for round in 0..rounds {
        for k in 0..SHM.len() {
            // A rotating order: each contender runs first, second and last in turn.
            let (name, mode) = SHM[(k + round) % SHM.len()];
            eprintln!("round {}/{rounds}: {name} ...", round + 1);
            acc.add(run(mode, name, calls, false).unwrap_or_else(|e| fail(e)));
        }
    }
    let sim_calls = (calls / 100).clamp(10, 40);
    if sim {
        for (name, mode) in SIM {
            eprintln!("simulated SHRIMP: {name} ...");
            acc.add(run(mode, name, sim_calls, true).unwrap_or_else(|e| fail(e)));
        }
    }

    let mut report = Report::default();
    report.notes.push(format!(
        "round trip (latency_us) = median over {rounds} round(s) of the median call of each round; \
         {calls} calls per size up to 4 KB, a tenth of that above; bandwidth_mbs = bytes moved \
         both ways / round trip; shm contenders alternate in a rotating order"
    ));
    if sim {
        report.notes.push(format!(
            "-sim: the same programs on the simulated SHRIMP (vmmc-run --transport sim), virtual \
             time, {sim_calls} calls per size; compared with the paper, not with the host"
        ));
    }
    report.baselines.insert(
        "paper: SHRIMP RPC null round trip, us (seed 003 §5)".into(),
        PAPER_SRPC_US,
    );
    report.baselines.insert(
        "paper: VRPC null round trip, us (seed 003 §5)".into(),
        PAPER_VRPC_US,
    );
    for (name, _) in SHM.iter().chain(SIM.iter()) {
        if let Some(s) = acc.round_trip_series(name) {
            report.push(s);
        }
    }
    let null = |r: &Report, name: &str| r.at(name, 0).map(|p| p.latency_us);
    let mut ratios = Vec::new();
    if let (Some(au), Some(du), Some(v)) = (
        null(&report, "SRPC-AU"),
        null(&report, "SRPC-DU"),
        null(&report, "VRPC"),
    ) {
        ratios.push(("SRPC-AU null / VRPC null".to_string(), au / v));
        ratios.push(("SRPC-DU null / VRPC null".to_string(), du / v));
        ratios.push((
            "fastest SRPC null / VRPC null (target <= 0.333)".to_string(),
            au.min(du) / v,
        ));
    }
    for (rpc, raw) in [("SRPC-AU", "raw-AU"), ("SRPC-DU", "raw-DU")] {
        if let (Some(a), Some(b)) = (null(&report, rpc), null(&report, raw)) {
            ratios.push((format!("{rpc} null / {raw} null (target <= 1.5)"), a / b));
        }
    }
    for size in [4096usize, 65_536] {
        let at = |n: &str| report.at(n, size).map(|p| p.latency_us);
        for (rpc, raw) in [("SRPC-AU", "raw-AU"), ("SRPC-DU", "raw-DU")] {
            if let (Some(a), Some(b)) = (at(rpc), at(raw)) {
                ratios.push((
                    format!("{rpc} / {raw}, inout {} (target <= 1.5)", size_label(size)),
                    a / b,
                ));
            }
        }
    }
    for size in [4usize, 1024, 65_536] {
        let at = |n: &str| report.at(n, size).map(|p| p.latency_us);
        if let (Some(a), Some(d), Some(v)) = (at("SRPC-AU"), at("SRPC-DU"), at("VRPC")) {
            ratios.push((
                format!("fastest SRPC / VRPC, inout {}", size_label(size)),
                a.min(d) / v,
            ));
        }
    }
    if let (Some(a), Some(v)) = (null(&report, "SRPC-AU-sim"), null(&report, "VRPC-sim")) {
        ratios.push((
            "sim: SRPC-AU null / VRPC null (target <= 0.333; paper 9.5/29 = 0.33)".into(),
            a / v,
        ));
        ratios.push((
            "sim: SRPC-AU null / the paper's 9.5 us".into(),
            a / PAPER_SRPC_US,
        ));
        ratios.push((
            "sim: VRPC null / the paper's 29 us".into(),
            v / PAPER_VRPC_US,
        ));
    }
    if let (Some(a), Some(r)) = (null(&report, "SRPC-AU-sim"), null(&report, "raw-AU-sim")) {
        ratios.push((
            "sim: SRPC-AU null / raw-AU null (target <= 1.5)".into(),
            a / r,
        ));
    }
    report.ratios.extend(ratios.iter().cloned());

    println!("Round trip, microseconds (median; lower is better)\n");
    let mut head = format!("{:<8}", "inout");
    for s in &report.series {
        head.push_str(&format!(" {:>12}", s.series));
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for size in report.sizes() {
        let mut row = format!("{:<8}", size_label(size));
        for s in &report.series {
            match s.at(size) {
                Some(p) => row.push_str(&format!(" {:>12.2}", p.latency_us)),
                None => row.push_str(&format!(" {:>12}", "-")),
            }
        }
        println!("{row}");
    }
    for (k, v) in &report.baselines {
        println!("\n{k}: {v:.1}");
    }
    println!("\nratios");
    let w = ratios.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &ratios {
        println!("  {k:<w$}  {v:>8.3}");
    }
    for n in &report.notes {
        println!("note: {n}");
    }
    std::fs::create_dir_all(&cli.rounds.out).expect("create the output directory");
    let path = cli.rounds.out.join("srpc.json");
    write_json(&report, &path).expect("write JSON");
    println!("\nwrote {}", path.display());
}
