//! The simulated SHRIMP against the papers: the ping-pong benchmark, run on the sim transport,
//! must reproduce seed 003 §3.4's figures within 10% (and seed 001 §4.2's 3.71 us for
//! uncached automatic update), and the shape of its Figure 3.
//!
//! The runs charge no compute (`cpu.compute_scale = 0`): the papers' figures are the library
//! and hardware path, which the model's per-call costs represent, and the ping-pong loop's
//! own few instructions would cost the Pentium nothing measurable; while this test binary's
//! host CPU time (a debug build, beside other tests) would add noise to a timing test.

use std::process::Command;

type Series = Vec<(String, Vec<(usize, f64, f64)>)>;

/// (size, one-way latency us, bandwidth MB/s) per series, from `pingpong --json` on sim.
fn pingpong(set: &str, args: &[&str]) -> Series {
    let mut a = args.to_vec();
    a.push("--json");
    on_sim(env!("CARGO_BIN_EXE_pingpong"), set, &a)
}

/// The series a ping-pong program (`pingpong`, `nx-pingpong`) prints, run on 2 sim nodes
/// with no compute charged and the parameters `set`.
fn on_sim(exe: &str, set: &str, args: &[&str]) -> Series {
    let out = Command::new(exe)
        .args(args)
        .env("VMMC_TRANSPORT", "sim")
        .env("VMMC_RANK", "0")
        .env("VMMC_SIZE", "2")
        .env("VMMC_SIM_SET", format!("cpu.compute_scale=0,{set}"))
        .output()
        .unwrap_or_else(|e| panic!("run {exe}: {e}"));
    assert!(
        out.status.success(),
        "{exe} on sim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON series");
            let pts = v["points"]
                .as_array()
                .expect("points")
                .iter()
                .map(|p| {
                    (
                        p["size"].as_u64().unwrap() as usize,
                        p["latency_us"].as_f64().unwrap(),
                        p["bandwidth_mbs"].as_f64().unwrap(),
                    )
                })
                .collect();
            (v["series"].as_str().unwrap().to_string(), pts)
        })
        .collect()
}

fn series<'a>(all: &'a Series, name: &str) -> &'a [(usize, f64, f64)] {
    &all.iter().find(|(n, _)| n == name).expect("series").1
}

fn within(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 0.1 * want,
        "{what}: {got:.2}, the paper {want:.2} (more than 10% off)"
    );
}

#[test]
fn ping_pong_matches_the_papers() {
    let all = pingpong("", &["--max-size", "65536"]);
    let au = series(&all, "AU-1copy");
    let du = series(&all, "DU-0copy");
    within("AU one-word latency, write-through (us)", au[0].1, 4.75);
    within("DU one-word latency (us)", du[0].1, 7.6);
    let peak = |s: &[(usize, f64, f64)]| s.iter().map(|p| p.2).fold(0.0, f64::max);
    within("DU-0copy peak bandwidth (MB/s)", peak(du), 23.0);
    // Figure 3's shape: AU faster for small messages, DU slightly more bandwidth for large.
    for (a, d) in au.iter().zip(du).filter(|(a, _)| a.0 <= 32) {
        assert!(a.1 < d.1, "AU slower than DU at {} B: {a:?} {d:?}", a.0);
    }
    let ratio = peak(du) / peak(au);
    assert!(
        (1.0..1.5).contains(&ratio),
        "DU/AU peak bandwidth {ratio:.2}: not 'slightly higher'"
    );
    let uncached = pingpong(
        "switches.au_memory=uncached",
        &["--max-size", "4", "--only", "AU-1copy"],
    );
    within(
        "AU one-word latency, uncached (us)",
        series(&uncached, "AU-1copy")[0].1,
        3.7,
    );
}

/// NX's ping-pong runs on sim (every node a thread of one process, `vmmc_run::run`), timed by
/// the virtual clock: with no compute charged, two runs give the same figures, and NX's
/// 4-byte one-way time is above the raw deliberate update's that it is built on.
#[test]
fn nx_pingpong_runs_on_sim_in_virtual_time() {
    let nx = || {
        let all = on_sim(
            env!("CARGO_BIN_EXE_nx-pingpong"),
            "",
            &["--max-size", "64", "--reps", "3"],
        );
        series(&all, "NX-du")
            .iter()
            .map(|p| p.1)
            .collect::<Vec<f64>>()
    };
    let (a, b) = (nx(), nx());
    assert_eq!(a.len(), 5, "4 B to 64 B: {a:?}");
    assert_eq!(a, b, "virtual times differ between two runs");
    let du = series(&pingpong("", &["--max-size", "4"]), "DU-0copy")[0].1;
    assert!(
        a[0] > du && a[0] < 4.0 * du,
        "NX 4 B one way {:.2} us against the raw DU's {du:.2} us",
        a[0]
    );
}
