//! Shared virtual memory's operations beside the raw VMMC operations they are built from and
//! an NX round trip, in one run (issue 15): `svm-peer` as the ranks of a job, for each
//! protocol on shared memory with 2 processes, with 4 processes on the machine's cores
//! (more processes than cores where the machine has 2), and on the simulated SHRIMP with 2
//! and 16 nodes (virtual time). The shm contenders take turns in a rotating order for
//! several rounds; each figure is the median over rounds of each round's median. The
//! simulator's columns run as many rounds: its times carry compute charges taken from the
//! host's CPU clock, so they are not exactly repeatable.
//!
//! Prints the table and the ratios (a remote page fetch within 2x of a raw
//! `get_data` of a page plus one access fault; a lock hand-over within 2x of an NX round
//! trip on the same transport: the lock ping-pong against the NX ping-pong, and a hand-over
//! to a node that waited while the holder computed against an NX message to a receiver that
//! waited as long, since both then pay the waiter's wake-up) and writes `svm.json`. Each
//! ratio is taken between the figures of one job and given as the median over rounds, with
//! the least and the greatest: the machine's phases move both figures of a job together
//! (with more processes than cores an NX round trip was 1.8 us in one job and 7 us in the
//! next), and a ratio of two medians taken over different jobs mixes phases.
//!
//! `bench-svm [--rounds K] [--quick] [--out DIR]`. Build first:
//! `cargo build --release -p vmmc-run -p vmmc-benches`.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use vmmc_benches::stats::median;

/// (column, nodes, transport, protocol).
const SHM: [(&str, usize, &str, &str); 4] = [
    ("shm-2 hlrc", 2, "shm", "hlrc"),
    ("shm-2 hlrc-au", 2, "shm", "hlrc-au"),
    ("shm-2 aurc", 2, "shm", "aurc"),
    ("shm-4 hlrc", 4, "shm", "hlrc"),
];
const SIM: [(&str, usize, &str, &str); 4] = [
    ("sim-2 hlrc", 2, "sim", "hlrc"),
    ("sim-2 aurc", 2, "sim", "aurc"),
    ("sim-16 hlrc", 16, "sim", "hlrc"),
    ("sim-16 aurc", 16, "sim", "aurc"),
];
const OPS: [(&str, &str); 13] = [
    ("raw_get_page", "raw get_data of a page"),
    ("raw_du_rtt", "raw DU round trip (word)"),
    ("nx_rtt", "NX round trip (4 B)"),
    ("nx_to_waiter", "NX message to a waiting crecv"),
    ("checked_read", "checked read of an element"),
    ("plain_read", "plain read of an element"),
    ("fault", "access fault, nothing to fetch"),
    ("fetch", "read fault + page fetch"),
    ("diff", "diff created + sent, per page"),
    ("lock_handover", "lock hand-over to a waiter"),
    ("lock_handover_late", "  turns without a hand-over"),
    ("lock_contended", "lock ping-pong, per hand-over"),
    ("barrier", "barrier of all nodes"),
];

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name(name)
}

fn run(
    col: &str,
    nodes: usize,
    transport: &str,
    proto: &str,
    quick: bool,
) -> Result<BTreeMap<String, f64>, String> {
    let mut cmd = Command::new(sibling("vmmc-run"));
    cmd.args(["-n", &nodes.to_string(), "--transport", transport, "--"])
        .arg(sibling("svm-peer"))
        .args(["--name", col])
        .env("SVM_PROTOCOL", proto);
    let (batch, batches) = match (quick, transport) {
        (true, _) => ("20", "3"),
        (false, "sim") => ("40", "3"),
        (false, _) => ("200", "7"),
    };
    cmd.args(["--batch", batch, "--batches", batches]);
    let out = cmd.output().map_err(|e| format!("{col}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{col} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("{col}: no result line in {stdout}"))?;
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{col}: {e}"))?;
    Ok(v["us"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, x)| x.as_f64().map(|x| (k.clone(), x)))
                .collect()
        })
        .unwrap_or_default())
}

#[derive(clap::Parser)]
#[command(about = "Shared virtual memory beside raw VMMC and NX (issue 15)")]
struct Cli {
    /// Rounds (runs of each column; each figure is the median over them).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// A smoke run: one round, small batches.
    #[arg(long)]
    quick: bool,
    /// Leave out the simulated SHRIMP.
    #[arg(long)]
    no_sim: bool,
    /// Where the JSON report goes.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let rounds = if cli.quick { 1 } else { cli.rounds.max(1) };
    let fail = |e: String| -> ! {
        eprintln!("bench-svm: {e}");
        std::process::exit(1)
    };
    // column -> one map (op -> us) per round
    let mut acc: BTreeMap<&str, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
    for round in 0..rounds {
        for k in 0..SHM.len() {
            let (col, n, t, p) = SHM[(k + round) % SHM.len()];
            eprintln!("round {}/{rounds}: {col} ...", round + 1);
            let r = run(col, n, t, p, cli.quick).unwrap_or_else(|e| fail(e));
            acc.entry(col).or_default().push(r);
        }
    }
    // The simulator's times carry its compute charges, which come from the host's CPU clock:
    // rounds too (a median of each figure over runs).
    for round in 0..if cli.no_sim { 0 } else { rounds } {
        for (col, n, t, p) in SIM {
            eprintln!("simulated SHRIMP, round {}/{rounds}: {col} ...", round + 1);
            let r = run(col, n, t, p, cli.quick).unwrap_or_else(|e| fail(e));
            acc.entry(col).or_default().push(r);
        }
    }
    let cols: Vec<&str> = SHM
        .iter()
        .chain(SIM.iter())
        .map(|c| c.0)
        .filter(|c| acc.contains_key(c))
        .collect();
    let med = |col: &str, op: &str| -> Option<f64> {
        let mut v: Vec<f64> = acc
            .get(col)?
            .iter()
            .filter_map(|r| r.get(op).copied())
            .collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    // A ratio is taken in each round, between figures of the same job (the same phase of a
    // noisy machine: with more processes than cores, an NX round trip measured 1.8 us in one
    // run and 7 us in the next), and the median over rounds is given, with the least and
    // the greatest.
    let ratio = |col: &str, num: &str, den: &[&str]| {
        let mut v: Vec<f64> = acc
            .get(col)?
            .iter()
            .filter_map(|r| {
                let d = den.iter().map(|op| r.get(*op)).sum::<Option<f64>>()?;
                Some(r.get(num)? / d)
            })
            .collect();
        if v.is_empty() {
            return None;
        }
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        Some((median(&mut v), lo, hi))
    };

    println!("Shared virtual memory, microseconds per operation (median; sim: virtual time)\n");
    print!("{:<34}", "operation");
    for c in &cols {
        print!("{c:>14}");
    }
    println!();
    for (op, what) in OPS {
        print!("{what:<34}");
        for c in &cols {
            match med(c, op) {
                Some(v) => print!("{v:>14.3}"),
                None => print!("{:>14}", "-"),
            }
        }
        println!();
    }
    println!();
    let mut ratios = Vec::new();
    // (what, numerator, the sum of the denominator)
    let pairs: [(&str, &str, &[&str]); 4] = [
        (
            "fetch / (raw get_data + fault) (target <= 2)",
            "fetch",
            &["raw_get_page", "fault"],
        ),
        (
            "lock ping-pong hand-over / NX round trip (target <= 2)",
            "lock_contended",
            &["nx_rtt"],
        ),
        (
            "hand-over to a waiter / NX round trip (hot)",
            "lock_handover",
            &["nx_rtt"],
        ),
        // The like-for-like comparison: both wait through the holder's computation.
        (
            "hand-over to a waiter / NX message to a waiting crecv (<= 2)",
            "lock_handover",
            &["nx_to_waiter"],
        ),
    ];
    for c in &cols {
        for (what, num, den) in &pairs {
            if let Some(r) = ratio(c, num, den) {
                ratios.push((format!("{c}: {what}"), r));
            }
        }
    }
    println!(
        "{:<80} {:>8} {:>8} {:>8}",
        "ratio (per round)", "median", "least", "most"
    );
    for (what, (r, lo, hi)) in &ratios {
        println!("{what:<80} {r:>8.2} {lo:>8.2} {hi:>8.2}");
    }
    let json = serde_json::json!({
        "rounds": rounds,
        "columns": cols,
        "us": cols.iter().map(|c| (c.to_string(), OPS.iter().filter_map(|(op, _)| med(c, op).map(|v| (op.to_string(), v))).collect::<BTreeMap<_, _>>())).collect::<BTreeMap<_, _>>(),
        "ratios": ratios.iter().map(|(w, r)| (w.clone(), r.0)).collect::<BTreeMap<_, _>>(),
        "ratio_ranges": ratios.iter().map(|(w, r)| (w.clone(), [r.1, r.2])).collect::<BTreeMap<_, _>>(),
    });
    std::fs::create_dir_all(&cli.out)
        .unwrap_or_else(|e| fail(format!("{}: {e}", cli.out.display())));
    let path = cli.out.join("svm.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("json"))
        .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    println!("\nwrote {}", path.display());
}
