//! Render-sockets at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes
//! on the simulated SHRIMP; every picture is the sequential one (the job checks it, and the
//! PNG files are compared here); and a corrupted tile is caught.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A fresh path for a job's picture.
fn image(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "shrimp-test-{}-render-{name}.png",
        std::process::id()
    ))
}

/// Runs the job writing its picture to a temporary file; returns the report and the file's
/// bytes.
fn render(nodes: usize, transport: &str, version: &str) -> (serde_json::Value, Vec<u8>) {
    let path = image(&format!("{nodes}-{transport}-{version}"));
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("a UTF-8 temporary directory");
    let r = common::ok_with("render-sockets", nodes, transport, version, &["--image", p]);
    let png = std::fs::read(&path).unwrap_or_else(|e| panic!("no picture at {p}: {e}\n{r}"));
    let _ = std::fs::remove_file(&path);
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG: {r}");
    let problem = &r["problem"];
    assert_eq!(problem["workers"], nodes - 1, "{r}");
    let per: Vec<u64> = problem["tiles_per_worker"]
        .as_array()
        .expect("tiles per worker")
        .iter()
        .map(|t| t.as_u64().expect("a count"))
        .collect();
    assert_eq!(per.len(), nodes - 1, "{r}");
    if nodes > 1 {
        // Every tile came from a worker, and a worker's tasks and results are one block each.
        let tiles = problem["tiles"].as_u64().expect("tiles");
        assert_eq!(per.iter().sum::<u64>(), tiles, "{r}");
        assert_eq!(r["messages"].as_u64(), Some(2 * tiles), "{r}");
        if version == "au" {
            assert!(r["au_words"].as_u64() > Some(0), "{r}");
        } else {
            assert_eq!(r["au_words"].as_u64(), Some(0), "{r}");
        }
    } else {
        assert_eq!(r["messages"].as_u64(), Some(0), "{r}");
    }
    (r, png)
}

#[test]
fn render_sockets_on_shm() {
    let mut first: Option<Vec<u8>> = None;
    for nodes in [1, 2, 4] {
        for v in ["au", "du"] {
            let (_, png) = render(nodes, "shm", v);
            // The same pixels make the same file.
            match &first {
                None => first = Some(png),
                Some(f) => assert!(*f == png, "{nodes} x shm, {v}: another picture"),
            }
        }
    }
}

#[test]
fn render_sockets_on_sim() {
    let mut first: Option<Vec<u8>> = None;
    for nodes in [4, 16] {
        for v in ["au", "du"] {
            let (r, png) = render(nodes, "sim", v);
            let total = &r["sim"]["total"];
            // The AU variant moves the data through automatic-update bindings; the DU
            // variant never binds.
            if v == "au" {
                assert!(total["au_packets"].as_u64() > Some(0), "{r}");
            } else {
                assert_eq!(total["au_packets"].as_u64(), Some(0), "{r}");
            }
            match &first {
                None => first = Some(png),
                Some(f) => assert!(*f == png, "{nodes} x sim, {v}: another picture"),
            }
        }
    }
}

#[test]
fn render_sockets_options_reach_the_ranks() {
    let path = image("options");
    let p = path.to_str().expect("a UTF-8 temporary directory");
    let o = common::shrimp(
        "render-sockets",
        3,
        "shm",
        "du",
        &[
            "--image",
            p,
            "--volume",
            "30x12x8",
            "--image-size",
            "37x21",
            "--tile",
            "5",
            "--azimuth",
            "-40",
            "--elevation",
            "-10",
            "--fov",
            "0",
            "--step",
            "0.75",
            "--in-flight",
            "3",
        ],
    );
    let _ = std::fs::remove_file(&path);
    assert!(o.status.success(), "{}", o.report());
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a report");
    let r: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let pr = &r["problem"];
    assert_eq!(pr["volume"], serde_json::json!([30, 12, 8]), "{r}");
    assert_eq!(pr["image"], serde_json::json!([37, 21]), "{r}");
    assert_eq!(pr["tile"], serde_json::json!([5, 5]), "{r}");
    assert_eq!(pr["tiles"], 8 * 5, "{r}");
    assert_eq!(pr["azimuth"], -40.0, "{r}");
    assert_eq!(pr["elevation"], -10.0, "{r}");
    assert_eq!(pr["fov"], 0.0, "{r}");
    assert_eq!(pr["step"], 0.75, "{r}");
    assert_eq!(pr["in_flight"], 3, "{r}");
}

#[test]
fn render_sockets_corruption_is_caught() {
    common::caught("render-sockets", 2, "shm");
    common::caught("render-sockets", 4, "sim");
}

/// More tiles in flight than the rings hold: 2560 one-pixel tiles, all of them in flight,
/// through 4 KB rings (a worker's tasks fill its ring, its results the controller's). The
/// controller takes results while it deals, so the job ends; the in-flight count is clamped
/// to the number of tiles.
#[test]
fn render_sockets_with_every_tile_in_flight_ends() {
    for (transport, version) in [("shm", "du"), ("shm", "au"), ("sim", "au")] {
        let path = image(&format!("in-flight-{transport}-{version}"));
        let p = path.to_str().expect("a UTF-8 temporary directory");
        let extra = ["--image", p, "--tile", "1", "--in-flight", "100000"];
        let o = common::rank_job(
            "render-sockets",
            2,
            &["--transport", transport],
            version,
            &extra,
            &[("VMMC_SOCK_RING", "4k")],
            Duration::from_secs(60),
        );
        let _ = std::fs::remove_file(&path);
        assert!(o.status.success(), "{transport}, {version}: {}", o.report());
        let r = common::rank_report(&o);
        assert_eq!(r["problem"]["tiles"], 64 * 40, "{r}");
        assert_eq!(r["problem"]["in_flight"], 64 * 40, "{r}");
        assert_eq!(r["messages"].as_u64(), Some(2 * 64 * 40), "{r}");
    }
}

/// A worker dies (SIGKILL on shm; its node ends on sim) as soon as it has its first tile, one
/// tile in flight so that the controller writes it nothing more: the controller, polling its
/// connections, notices the lost worker and ends the run with an error that names it, long
/// before the job's limit, also when the launcher would let the others run for ever.
#[test]
fn render_sockets_ends_when_a_worker_dies() {
    for (transport, launcher) in [
        ("shm", ["--transport", "shm", "--abort-grace", "never"]),
        ("sim", ["--transport", "sim", "--abort-grace", "never"]),
    ] {
        let path = image(&format!("death-{transport}"));
        let p = path.to_str().expect("a UTF-8 temporary directory");
        let t0 = Instant::now();
        let o = common::rank_job(
            "render-sockets",
            3,
            &launcher,
            "du",
            &["--image", p, "--in-flight", "1", "--inject-death"],
            &[],
            Duration::from_secs(60),
        );
        let took = t0.elapsed();
        let _ = std::fs::remove_file(&path);
        assert!(!o.status.success(), "{transport}: {}", o.report());
        assert!(
            o.stderr.contains("render-sockets: worker 2 left the job"),
            "{transport}: no clear error\n{}",
            o.report()
        );
        assert!(
            took < Duration::from_secs(30),
            "{transport}: {took:?} to notice\n{}",
            o.report()
        );
        assert!(!o.stdout.contains("SHRIMP-REPORT"), "{}", o.report());
    }
}
