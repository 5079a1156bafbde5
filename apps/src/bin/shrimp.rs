//! `shrimp`: lists the applications of seed 001 Table 1, runs one as a job, and is the program
//! of each of its ranks. See the `apps` crate docs.

use apps::job::Job;
use apps::report::REPORT_PREFIX;
use apps::{app, run_job, App, Params, Report, Size, Version, APPS};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shrimp",
    about = "The SHRIMP papers' applications (seed 001 Table 1)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Lists the applications.
    List,
    /// Runs an application as a job: `vmmc-run -n N --transport T -- shrimp rank APP ...`.
    Run {
        /// The application (see `shrimp list`).
        app: String,
        /// Nodes.
        #[arg(short = 'n', long = "nodes", default_value_t = 1)]
        nodes: usize,
        /// Transport, passed to vmmc-run: shm (processes on this host, shared memory), sim (the
        /// simulated SHRIMP), tcp, rdma, or mpi where vmmc-run is built with it.
        #[arg(long, default_value = "shm")]
        transport: String,
        /// Where to append the JSON report (default `apps-results/APP.jsonl`).
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        params: Params,
    },
    /// The program of one rank (run under `vmmc-run`): prints the report on rank 0.
    #[command(hide = true)]
    Rank {
        /// The application.
        app: String,
        #[command(flatten)]
        params: Params,
    },
    /// The library's overhead on one node: the application on a 1-node shm job against the
    /// plain sequential implementation, alternately, in this process.
    Overhead {
        /// The application.
        app: String,
        /// Repetitions of each (the medians are compared).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        #[command(flatten)]
        params: Params,
    },
    /// Each application on the simulated SHRIMP on Table 1's nodes (one; two for Ocean-NX)
    /// at Table 1's size, its virtual time beside Table 1's sequential time.
    Table1 {
        /// Only these applications.
        apps: Vec<String>,
        /// The version to run.
        #[arg(long, value_enum, default_value = "du")]
        version: Version,
        /// Problem size preset.
        #[arg(long, value_enum, default_value = "paper")]
        size: Size,
    },
    /// Seed 001's experiments on the simulated SHRIMP, beside the paper's figures (Figures 3
    /// and 4, Tables 2-4, combining, FIFO, DU queue): tables, JSON and SVG figures.
    Paper {
        /// The test sizes and 4 nodes for the large runs (for CI).
        #[arg(long)]
        quick: bool,
        /// Only these experiments (comma-separated: fig3, fig4-svm, fig4-vmmc-nx, table2,
        /// table3, table4, combining, fifo, du-queue).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Output directory for paper.json, paper.md and the figures.
        #[arg(long, default_value = "apps-results/paper")]
        out: PathBuf,
        /// Runs of each configuration (the median is kept).
        #[arg(long, default_value_t = 1)]
        reps: usize,
        /// Also the same comparisons on this host over shared memory.
        #[arg(long)]
        shm: bool,
        /// Also Figure 4 and Tables 2-4 on a present-day machine (the sim crate's
        /// params/modern.toml).
        #[arg(long)]
        modern: bool,
        /// The present-day machine's parameter file, instead of params/modern.toml
        /// (implies --modern).
        #[arg(long)]
        modern_params: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::List => {
            println!(
                "{:<14} {:<7} {:<22} {:>9}  what",
                "app", "lib", "Table 1 problem", "Table 1"
            );
            for a in APPS {
                println!(
                    "{:<14} {:<7} {:<22} {:>8.1}s  {}",
                    a.name, a.library, a.table1_size, a.table1_seq_s, a.about
                );
            }
            Ok(())
        }
        Cmd::Run {
            app,
            nodes,
            transport,
            out,
            params,
        } => find(&app).and_then(|a| {
            let rep = launch(a, nodes, &transport, &params)?;
            println!("{}", rep.json());
            println!("{}", rep.summary());
            let path = out.unwrap_or_else(|| default_out(a.name));
            save(&path, &rep)?;
            println!("report appended to {}", path.display());
            Ok(())
        }),
        Cmd::Rank { app, params } => find(&app).and_then(|a| match run_job(a, &params) {
            Ok(Some(rep)) => {
                println!("{REPORT_PREFIX}{}", rep.json());
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e.to_string()),
        }),
        Cmd::Overhead { app, reps, params } => find(&app).and_then(|a| {
            a.check_options(&params).map_err(|e| e.to_string())?;
            overhead(a, reps, params)
        }),
        Cmd::Table1 {
            apps,
            version,
            size,
        } => table1(&apps, version, size),
        Cmd::Paper {
            quick,
            only,
            out,
            reps,
            shm,
            modern,
            modern_params,
        } => std::env::current_exe()
            .map_err(|e| format!("current_exe: {e}"))
            .and_then(|exe| {
                let o = apps::paper::Options {
                    quick,
                    only,
                    out,
                    reps,
                    shm,
                    modern: modern_params.or(modern.then(PathBuf::new)),
                    exe,
                };
                let outcome = apps::paper::run(&o)?;
                println!("{}", outcome.markdown());
                println!(
                    "wrote {} and {}",
                    o.out.join("paper.json").display(),
                    o.out.join("paper.md").display()
                );
                Ok(())
            }),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shrimp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn find(name: &str) -> Result<&'static App, String> {
    app(name).ok_or_else(|| {
        let names: Vec<_> = APPS.iter().map(|a| a.name).collect();
        format!("no application {name:?} (there are: {})", names.join(", "))
    })
}

fn default_out(app: &str) -> PathBuf {
    PathBuf::from("apps-results").join(format!("{app}.jsonl"))
}

fn save(path: &Path, rep: &Report) -> Result<(), String> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    writeln!(f, "{}", rep.json()).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Runs `a` as a job, echoing what its ranks print, and returns its report.
fn launch(a: &App, nodes: usize, transport: &str, params: &Params) -> Result<Report, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    Job {
        app: a,
        nodes,
        transport,
        params,
        env: Vec::new(),
        echo: true,
    }
    .run(&exe)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn best(v: &[u64]) -> u64 {
    v.iter().copied().min().unwrap_or(0)
}

/// `shrimp overhead`: medians of the sequential kernel and of each version on a 1-node job.
fn overhead(a: &'static App, reps: usize, params: Params) -> Result<(), String> {
    let reps = reps.max(1);
    let mut seq = Vec::new();
    let mut lib: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let versions = [Version::Au, Version::Du];
    for _ in 0..reps {
        seq.push((a.sequential)(&params).map_err(|e| e.to_string())?);
        for (i, v) in versions.iter().enumerate() {
            let p = Params {
                version: *v,
                // An AU switch (`--combining`) is the AU version's alone.
                combining: params.combining.filter(|_| *v == Version::Au),
                ..params.clone()
            };
            let rep = run_job(a, &p)
                .map_err(|e| e.to_string())?
                .ok_or("no report from the 1-node job")?;
            lib[i].push(rep.time_ns);
        }
    }
    let (s, s_best) = (median(seq.clone()), best(&seq));
    println!(
        "{} on 1 node (shm, in this process), size {:?}, {reps} alternating runs each:",
        a.name, params.size
    );
    println!(
        "  {:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "median s", "best s", "median", "best", "paired"
    );
    println!(
        "  {:<22} {:>10.6} {:>10.6}",
        "plain sequential",
        s as f64 / 1e9,
        s_best as f64 / 1e9
    );
    let mut worst: f64 = 0.0;
    let mut json = serde_json::json!({"app": a.name, "size": params.size, "reps": reps,
        "seq_median_ns": s, "seq_best_ns": s_best});
    for (i, v) in versions.iter().enumerate() {
        let (l, l_best) = (median(lib[i].clone()), best(&lib[i]));
        let over = l as f64 / s as f64 - 1.0;
        let over_best = l_best as f64 / s_best as f64 - 1.0;
        // Each library run beside the sequential run made just before it: the median of
        // these ratios is what a machine whose speed drifts between runs leaves intact.
        let mut pairs: Vec<f64> = lib[i]
            .iter()
            .zip(&seq)
            .map(|(&l, &q)| l as f64 / q.max(1) as f64)
            .collect();
        pairs.sort_by(f64::total_cmp);
        let over_paired = pairs[pairs.len() / 2] - 1.0;
        worst = worst.max(over_best.min(over_paired));
        println!(
            "  {:<22} {:>10.6} {:>10.6} {:>+9.2}% {:>+9.2}% {:>+9.2}%",
            format!("{} {} version", a.library, v.name()),
            l as f64 / 1e9,
            l_best as f64 / 1e9,
            over * 100.0,
            over_best * 100.0,
            over_paired * 100.0
        );
        json[v.name()] = serde_json::json!({"median_ns": l, "best_ns": l_best,
            "overhead_median": over, "overhead_best": over_best,
            "overhead_paired_median": over_paired});
    }
    println!(
        "  verdict on the best runs or the paired median, whichever is lower (a loaded machine inflates medians): {} (target: under 5%)",
        if worst < 0.05 { "ok" } else { "OVER" }
    );
    save_value(&PathBuf::from("apps-results/overhead.jsonl"), &json)
}

fn save_value(path: &Path, v: &serde_json::Value) -> Result<(), String> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    writeln!(f, "{v}").map_err(|e| format!("write {}: {e}", path.display()))?;
    println!("appended to {}", path.display());
    Ok(())
}

/// `shrimp table1`.
fn table1(names: &[String], version: Version, size: Size) -> Result<(), String> {
    let chosen: Vec<&App> = if names.is_empty() {
        APPS.iter().collect()
    } else {
        names.iter().map(|n| find(n)).collect::<Result<_, _>>()?
    };
    let mut rows = Vec::new();
    for a in chosen {
        let t0 = std::time::Instant::now();
        let rep = launch(a, a.table1_nodes, "sim", &Params::new(version, size))?;
        let real = t0.elapsed().as_secs_f64();
        rows.push((a, rep, real));
    }
    println!(
        "\n{:<12} {:>5} {:<22} {:>12} {:>14} {:>7} {:>9}",
        "app", "nodes", "Table 1 problem", "Table 1 (s)", "sim virtual (s)", "ratio", "real (s)"
    );
    for (a, rep, real) in &rows {
        println!(
            "{:<12} {:>5} {:<22} {:>12.1} {:>14.3} {:>7.3} {:>9.2}",
            a.name,
            a.table1_nodes,
            a.table1_size,
            a.table1_seq_s,
            rep.time_s,
            rep.time_s / a.table1_seq_s,
            real
        );
        save_value(
            &PathBuf::from("apps-results/table1.jsonl"),
            &serde_json::json!({"app": a.name, "nodes": a.table1_nodes,
                "table1_s": a.table1_seq_s, "sim_s": rep.time_s,
                "ratio": rep.time_s / a.table1_seq_s, "real_s": real, "report": rep}),
        )?;
    }
    Ok(())
}
