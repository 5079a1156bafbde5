//! NX ping-pong (seed 003 §4.1, Figure 4) for each small-message path beside MPI_Send /
//! MPI_Recv, in one run: `nx-pingpong` under `vmmc-run -n 2` with `NX_SMALL=du`, `du2` and
//! `au` (the registration cache on, as in C programs), and `mpi-pingpong` under `mpirun -n 2`
//! when the `mpi` feature built it, 4 B to 16 MiB. The jobs alternate for several rounds so
//! that a noisy period of the machine hits all of them; every point is the median over the
//! rounds of each round's median. Prints the table and the NX/MPI ratios (targets:
//! small-message latency <= MPI's, large-message bandwidth >= MPI's), writes `nx.json` and
//! `nx.svg`.
//!
//! `bench-nx [--reps R] [--rounds K] [--threshold BYTES] [--max-size BYTES] [--out DIR]`

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use vmmc_benches::report::{print_table, write_json, write_plot, Point, Report, Series};
use vmmc_benches::stats::median;

/// The small-message paths compared (NX_SMALL values).
const VARIANTS: [&str; 3] = ["du", "du2", "au"];
/// Largest message of the sweep (the 16 MiB), for NX and MPI alike.
const MAX_SIZE: usize = 16 << 20;

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("current exe")
        .with_file_name(name)
}

fn series_lines(out: &[u8]) -> Vec<Series> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Series>(l.trim()).ok())
        .collect()
}

/// Per series, per size: the values of every round.
type Rounds = BTreeMap<String, BTreeMap<usize, Vec<f64>>>;

fn add(acc: &mut Rounds, order: &mut Vec<String>, got: Vec<Series>) {
    for s in got {
        if !order.contains(&s.series) {
            order.push(s.series.clone());
        }
        let e = acc.entry(s.series).or_default();
        for p in s.points {
            e.entry(p.size).or_default().push(p.latency_us);
        }
    }
}

fn main() {
    let mut reps = 3usize;
    let mut rounds = 3usize;
    let mut threshold: Option<String> = None;
    let mut max_size = MAX_SIZE;
    let mut out = PathBuf::from("bench-results");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()).expect("--reps N"),
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds K")
            }
            "--threshold" => threshold = Some(args.next().expect("--threshold BYTES")),
            "--max-size" => {
                max_size = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--max-size BYTES")
            }
            "--out" => out = args.next().map(PathBuf::from).expect("--out DIR"),
            "-h" | "--help" => {
                println!("bench-nx [--reps R] [--rounds K] [--threshold BYTES] [--max-size BYTES] [--out DIR]");
                return;
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let reps_s = reps.to_string();
    let mpi_bin = sibling("mpi-pingpong");
    let mut have_mpi = mpi_bin.exists();
    if !have_mpi {
        eprintln!("mpi-pingpong not built (cargo build --release -p vmmc-benches --features mpi): no MPI baseline");
    }
    let mut acc = Rounds::new();
    let mut order = Vec::new();
    for round in 1..=rounds {
        for v in VARIANTS {
            eprintln!("round {round}/{rounds}: NX_SMALL={v}, 2 processes over shm ...");
            let mut cmd = Command::new(sibling("vmmc-run"));
            cmd.args(["-n", "2", "--"])
                .arg(sibling("nx-pingpong"))
                .args(["--reps", &reps_s, "--max-size", &max_size.to_string()])
                .env("NX_SMALL", v)
                .env("NX_REGCACHE", "1");
            if let Some(t) = &threshold {
                cmd.env("NX_THRESHOLD", t);
            }
            let o = cmd
                .output()
                .expect("run vmmc-run (build vmmc-run and nx-pingpong in release first)");
            if !o.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&o.stderr));
                std::process::exit(1);
            }
            add(&mut acc, &mut order, series_lines(&o.stdout));
        }
        if have_mpi {
            eprintln!("round {round}/{rounds}: MPI, 2 ranks under mpirun ...");
            match Command::new("mpirun")
                .args(["--allow-run-as-root", "-n", "2"])
                .arg(&mpi_bin)
                .args(["--reps", &reps_s, "--max-size", &max_size.to_string()])
                .output()
            {
                Ok(o) if o.status.success() => add(&mut acc, &mut order, series_lines(&o.stdout)),
                Ok(o) => {
                    eprintln!("mpirun failed: {}", String::from_utf8_lossy(&o.stderr));
                    have_mpi = false;
                }
                Err(e) => {
                    eprintln!("mpirun not found ({e}): no MPI baseline");
                    have_mpi = false;
                }
            }
        }
    }

    let mut report = Report::default();
    report.notes.push(format!(
        "{rounds} rounds alternating the NX and MPI jobs; each point is the median over rounds of the median of {reps} repetitions; one-way latency = round trip / 2; NX with the registration cache on (NX_REGCACHE=1)"
    ));
    report.notes.push(format!(
        "NX threshold (one-copy up to, zero-copy above): {} bytes",
        threshold
            .as_deref()
            .unwrap_or("262144 (default for 2 processes)")
    ));
    for name in &order {
        let points = acc[name]
            .iter()
            .map(|(&size, v)| {
                let l = median(&mut v.clone());
                Point {
                    size,
                    latency_us: l,
                    bandwidth_mbs: size as f64 / l,
                }
            })
            .collect();
        report.series.push(Series {
            series: name.clone(),
            points,
        });
    }
    let lat = |r: &Report, s: &str, size| r.at(s, size).map(|p| p.latency_us);
    let bw = |r: &Report, s: &str, size| r.at(s, size).map(|p| p.bandwidth_mbs);
    let mut ratios = Vec::new();
    for v in VARIANTS {
        let name = format!("NX-{v}");
        for size in [4usize, 64] {
            if let (Some(n), Some(m)) = (lat(&report, &name, size), lat(&report, "mpi", size)) {
                ratios.push((format!("{name}/MPI latency {size} B (target <= 1)"), n / m));
            }
        }
        for size in [64 << 10, 1 << 20, MAX_SIZE] {
            if let (Some(n), Some(m)) = (bw(&report, &name, size), bw(&report, "mpi", size)) {
                ratios.push((
                    format!("{name}/MPI bandwidth {} KiB (target >= 1)", size >> 10),
                    n / m,
                ));
            }
        }
    }
    for size in [4usize, 1024] {
        if let (Some(a), Some(d)) = (lat(&report, "NX-au", size), lat(&report, "NX-du", size)) {
            ratios.push((format!("NX-au/NX-du latency {size} B"), a / d));
        }
        if let (Some(a), Some(d)) = (lat(&report, "NX-du2", size), lat(&report, "NX-du", size)) {
            ratios.push((format!("NX-du2/NX-du latency {size} B"), a / d));
        }
    }
    report.ratios.extend(ratios);

    print_table(&report);
    std::fs::create_dir_all(&out).expect("create the output directory");
    write_json(&report, &out.join("nx.json")).expect("write JSON");
    if let Err(e) = write_plot(&report, &out.join("nx.svg")) {
        eprintln!("plot: {e}");
    }
    println!("\nwrote {0}/nx.json and {0}/nx.svg", out.display());
}
