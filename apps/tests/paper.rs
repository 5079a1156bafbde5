//! `shrimp paper --quick`: every experiment runs at the test sizes, every table has its rows
//! and a verdict on each, the JSON and the figures are written; and the simulated runs are
//! deterministic once compute is not charged.

mod common;

use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::{launcher, output_within};

const EXPERIMENTS: [&str; 9] = [
    "fig3",
    "fig4-svm",
    "fig4-vmmc-nx",
    "table2",
    "table3",
    "table4",
    "combining",
    "fifo",
    "du-queue",
];

#[test]
fn the_quick_suite_has_every_experiment_row_and_verdict() {
    launcher();
    let out = std::env::temp_dir().join(format!("shrimp-paper-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shrimp"));
    cmd.args(["paper", "--quick", "--modern", "--out"])
        .arg(&out);
    let o = output_within(&mut cmd, Duration::from_secs(1200));
    assert!(o.status.success(), "shrimp paper failed\n{}", o.report());
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("paper.json")).expect("paper.json written"),
    )
    .expect("paper.json is JSON");
    let tables = json["tables"].as_array().expect("tables");
    let ids: Vec<&str> = tables.iter().filter_map(|t| t["id"].as_str()).collect();
    for e in EXPERIMENTS {
        assert!(ids.contains(&e), "experiment {e} missing: {ids:?}");
    }
    // The present-day machine reruns Figure 4 and Tables 2-4.
    for e in ["fig4-svm", "fig4-vmmc-nx", "table2", "table3", "table4"] {
        let m = format!("{e}-modern");
        assert!(ids.contains(&m.as_str()), "{m} missing: {ids:?}");
    }
    let apps: Vec<String> = {
        let o = Command::new(env!("CARGO_BIN_EXE_shrimp"))
            .arg("list")
            .output()
            .expect("shrimp list");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect()
    };
    for t in tables {
        let id = t["id"].as_str().unwrap_or("?");
        let columns = t["columns"].as_array().expect("columns").len();
        let rows = t["rows"].as_array().expect("rows");
        assert!(!rows.is_empty(), "{id}: no rows");
        for r in rows {
            let cells = r["cells"].as_array().expect("cells");
            assert_eq!(
                cells.len(),
                columns,
                "{id}: a row's cells and the columns: {r}"
            );
            let v = r["verdict"].as_str().expect("a verdict");
            assert!(
                ["holds", "sign-holds", "differs", "no-claim"].contains(&v),
                "{id}: verdict {v}"
            );
            assert!(
                !r["why"].as_str().unwrap_or("").is_empty(),
                "{id}: no reason: {r}"
            );
        }
        if id == "fig3" {
            // Every application, both versions at every node count in the JSON.
            assert_eq!(rows.len(), apps.len(), "{id}: one row per application");
            for r in rows {
                let s = &r["values"]["speedups"];
                for n in ["1", "2", "4"] {
                    assert!(
                        s[n]["AU"].as_f64().is_some() && s[n]["DU"].as_f64().is_some(),
                        "{r}"
                    );
                }
            }
        }
    }
    for svg in ["fig3.svg", "fig4-svm.svg", "fig4-vmmc-nx.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).expect("figure written");
        assert!(text.starts_with("<svg"), "{svg}");
    }
    let md = std::fs::read_to_string(out.join("paper.md")).expect("paper.md written");
    assert!(md.contains("| verdict | why |"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Two runs of the same simulated job with compute charges off: the same virtual times and
/// the same counts of everything the interface did.
#[test]
fn simulated_runs_are_deterministic_without_compute_charges() {
    for (app, version) in [
        ("radix-vmmc", "au"),
        ("ocean-nx", "du"),
        ("barnes-nx", "au"),
    ] {
        let run = || {
            let o = common::shrimp_env(
                app,
                4,
                "sim",
                version,
                &[],
                &[("VMMC_SIM_SET", "cpu.compute_scale=0")],
            );
            assert!(o.status.success(), "{app}\n{}", o.report());
            let line = o
                .stdout
                .lines()
                .find(|l| l.starts_with('{'))
                .expect("report");
            let r: serde_json::Value = serde_json::from_str(line).expect("JSON");
            (r["time_ns"].clone(), r["sim"]["total"].clone())
        };
        let (t1, s1) = run();
        let (t2, s2) = run();
        assert_eq!(t1, t2, "{app}: virtual times differ");
        assert_eq!(s1, s2, "{app}: the interface's counts differ");
        assert!(t1.as_u64() > Some(0), "{app}");
    }
}
