//! Runs the ping-pong experiment of seed 003 §3.4 and its peers side by side, in one run:
//! the VMMC strategies over shm (two processes under `vmmc-run`), MPI between two ranks
//! (`mpirun`, when the `mpi` feature built `mpi-pingpong`), and the two-thread cache-line
//! ping-pong (alternated rep by rep with VMMC's one-word DU inside the VMMC job). The VMMC
//! and MPI jobs alternate for several rounds so that a noisy period of the machine hits both;
//! every point is the median over rounds of the per-round medians. Prints the tables and
//! our/their ratios, writes `pingpong.json` and `pingpong.svg` to the output directory.
//!
//! `bench-pingpong [--reps R] [--rounds K] [--max-size BYTES] [--out DIR]`

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use vmmc_benches::report::{print_table, write_json, write_plot, Point, Report, Series};
use vmmc_benches::stats::median;

fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.with_file_name(name)
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
    let mut reps = 5usize;
    let mut rounds = 3usize;
    let mut max = 1usize << 20;
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
            "--max-size" => {
                max = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--max-size BYTES")
            }
            "--out" => out = args.next().map(PathBuf::from).expect("--out DIR"),
            "-h" | "--help" => {
                println!("bench-pingpong [--reps R] [--rounds K] [--max-size BYTES] [--out DIR]");
                return;
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let (reps_s, max_s) = (reps.to_string(), max.to_string());
    let mpi_bin = sibling("mpi-pingpong");
    let mut have_mpi = mpi_bin.exists();
    if !have_mpi {
        eprintln!("mpi-pingpong not built (cargo build --release -p vmmc-benches --features mpi): no MPI baseline");
    }
    let mut acc = Rounds::new();
    let mut order = Vec::new();
    for round in 1..=rounds {
        eprintln!("round {round}/{rounds}: VMMC over shm, 2 processes ...");
        let o = Command::new(sibling("vmmc-run"))
            .args(["-n", "2", "--"])
            .arg(sibling("pingpong"))
            .args(["--json", "--reps", &reps_s, "--max-size", &max_s])
            .output()
            .expect("run vmmc-run (build the workspace in release first)");
        if !o.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&o.stderr));
            std::process::exit(1);
        }
        add(&mut acc, &mut order, series_lines(&o.stdout));
        if have_mpi {
            eprintln!("round {round}/{rounds}: MPI, 2 ranks under mpirun ...");
            match Command::new("mpirun")
                .args(["--allow-run-as-root", "-n", "2"])
                .arg(&mpi_bin)
                .args(["--reps", &reps_s, "--max-size", &max_s])
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
        "{rounds} rounds alternating the VMMC and MPI jobs; each point is the median over rounds of the median of {reps} repetitions; one-way latency = round trip / 2"
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
    // The interleaved pair is reported as baselines, not as table columns.
    let cl = report.at("cache-line", 4).map(|p| p.latency_us);
    let du_i = report.at("DU-0copy (interleaved)", 4).map(|p| p.latency_us);
    report
        .series
        .retain(|s| s.series != "cache-line" && s.series != "DU-0copy (interleaved)");
    if let (Some(c), Some(d)) = (cl, du_i) {
        report
            .baselines
            .insert("cache-line one-way, 2 threads (us)".into(), c);
        report
            .baselines
            .insert("DU-0copy 4 B alternated with it (us)".into(), d);
        report.ratios.insert(
            "DU-0copy/cache-line latency 4 B (target <= 1.3)".into(),
            d / c,
        );
    }
    let lat = |r: &Report, s: &str, size| r.at(s, size).map(|p| p.latency_us);
    let bw = |r: &Report, s: &str, size| r.at(s, size).map(|p| p.bandwidth_mbs);
    let mut ratios = Vec::new();
    for size in [4usize, 8] {
        if let (Some(d), Some(m)) = (lat(&report, "DU-0copy", size), lat(&report, "mpi", size)) {
            ratios.push((
                format!("DU-0copy/MPI latency {size} B (target <= 1)"),
                d / m,
            ));
        }
        if let (Some(a), Some(d)) = (
            lat(&report, "AU-1copy", size),
            lat(&report, "DU-0copy", size),
        ) {
            ratios.push((
                format!("AU-1copy/DU-0copy latency {size} B (target <= 1)"),
                a / d,
            ));
        }
    }
    if let (Some(d), Some(m)) = (bw(&report, "DU-0copy", max), bw(&report, "mpi", max)) {
        ratios.push((
            format!("DU-0copy/MPI bandwidth {max} B (target >= 1)"),
            d / m,
        ));
    }
    if let (Some(d), Some(s)) = (bw(&report, "DU-0copy", max), bw(&report, "DU-syscall", max)) {
        ratios.push((format!("DU-0copy/DU-syscall bandwidth {max} B"), d / s));
    }
    report.ratios.extend(ratios);

    print_table(&report);
    std::fs::create_dir_all(&out).expect("create the output directory");
    write_json(&report, &out.join("pingpong.json")).expect("write JSON");
    if let Err(e) = write_plot(&report, &out.join("pingpong.svg")) {
        eprintln!("plot: {e}");
    }
    println!(
        "\nwrote {0}/pingpong.json and {0}/pingpong.svg",
        out.display()
    );
    sim_table(&out);
}

/// The ping-pong on the simulated SHRIMP (virtual time, deterministic: one run each) beside
/// the papers' figures (seed 003 §3.4, seed 001 §4.2-4.3).
fn sim_table(out: &std::path::Path) {
    let run = |set: &str, args: &[&str]| -> Vec<Series> {
        let o = Command::new(sibling("pingpong"))
            .args(args)
            .arg("--json")
            .env("VMMC_TRANSPORT", "sim")
            .env("VMMC_RANK", "0")
            .env("VMMC_SIZE", "2")
            .env("VMMC_SIM_SET", set)
            .output()
            .expect("run pingpong on sim");
        assert!(o.status.success(), "pingpong on sim failed");
        series_lines(&o.stdout)
    };
    let all = run("", &["--max-size", "65536"]);
    let uncached = run(
        "switches.au_memory=uncached",
        &["--max-size", "4", "--only", "AU-1copy"],
    );
    let get = |v: &[Series], name: &str| -> Vec<(usize, f64, f64)> {
        v.iter()
            .find(|s| s.series == name)
            .map(|s| {
                s.points
                    .iter()
                    .map(|p| (p.size, p.latency_us, p.bandwidth_mbs))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (au, du, au_unc) = (
        get(&all, "AU-1copy"),
        get(&all, "DU-0copy"),
        get(&uncached, "AU-1copy"),
    );
    let peak = |s: &[(usize, f64, f64)]| s.iter().map(|p| p.2).fold(0.0, f64::max);
    let rows = [
        (
            "AU one-word latency, write-through (us)",
            4.75,
            au.first().map_or(0.0, |p| p.1),
        ),
        (
            "AU one-word latency, uncached (us)",
            3.7,
            au_unc.first().map_or(0.0, |p| p.1),
        ),
        (
            "DU one-word latency (us)",
            7.6,
            du.first().map_or(0.0, |p| p.1),
        ),
        ("DU-0copy peak bandwidth (MB/s)", 23.0, peak(&du)),
        (
            "AU-1copy peak bandwidth (MB/s, 'slightly below DU')",
            f64::NAN,
            peak(&au),
        ),
    ];
    println!("\nsimulated SHRIMP (transport sim, virtual time) beside the papers");
    println!("{:<54} {:>8} {:>8} {:>9}", "", "paper", "sim", "sim/paper");
    let mut json = Vec::new();
    for (what, paper, sim) in rows {
        println!("{what:<54} {paper:>8.2} {sim:>8.2} {:>9.2}", sim / paper);
        json.push(serde_json::json!({"what": what, "paper": paper, "sim": sim}));
    }
    let report = serde_json::json!({"vs_paper": json, "series": all, "au_uncached": uncached});
    let path = out.join("sim.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json"))
        .expect("write sim.json");
    println!("wrote {}", path.display());
}
