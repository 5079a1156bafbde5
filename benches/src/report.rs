//! The benchmark report: series of (size, latency, bandwidth) points, scalar baselines and
//! ratios; printed as a table, written as JSON and as an SVG plot.

use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One measured message size.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Message size in bytes.
    pub size: usize,
    /// Median one-way latency in microseconds.
    pub latency_us: f64,
    /// Bandwidth in MB/s (10^6 bytes per second).
    pub bandwidth_mbs: f64,
}

/// One line of a program's JSON output: a named series.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    /// Name ("DU-0copy", "mpi", ...).
    pub series: String,
    /// Points by size.
    pub points: Vec<Point>,
}

/// Everything one benchmark run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Series in the order they were added.
    pub series: Vec<Series>,
    /// Scalar measurements (e.g. "cacheline_oneway_ns").
    pub baselines: BTreeMap<String, f64>,
    /// Ratios ours/theirs, with the name saying which.
    pub ratios: BTreeMap<String, f64>,
    /// Free-form notes (machine, repetitions).
    pub notes: Vec<String>,
}

impl Report {
    /// A series by name.
    pub fn get(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.series == name)
    }

    /// The point of a series at a size.
    pub fn at(&self, name: &str, size: usize) -> Option<&Point> {
        self.get(name)?.points.iter().find(|p| p.size == size)
    }
}

fn fmt_size(s: usize) -> String {
    if s >= 1 << 20 {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 {
        format!("{}K", s >> 10)
    } else {
        format!("{s}")
    }
}

/// Prints the latency and bandwidth tables, then baselines and ratios.
pub fn print_table(r: &Report) {
    let mut sizes: Vec<usize> = r.series.iter().flat_map(|s| s.points.iter().map(|p| p.size)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for (title, f) in [
        ("one-way latency (us), median", (|p: &Point| p.latency_us) as fn(&Point) -> f64),
        ("bandwidth (MB/s), median", |p: &Point| p.bandwidth_mbs),
    ] {
        println!("\n{title}");
        print!("{:>6}", "size");
        for s in &r.series {
            print!(" {:>11}", s.series);
        }
        println!();
        for &size in &sizes {
            print!("{:>6}", fmt_size(size));
            for s in &r.series {
                match s.points.iter().find(|p| p.size == size) {
                    Some(p) => print!(" {:>11.3}", f(p)),
                    None => print!(" {:>11}", "-"),
                }
            }
            println!();
        }
    }
    if !r.baselines.is_empty() {
        println!();
        for (k, v) in &r.baselines {
            println!("{k:<40} {v:>10.3}");
        }
    }
    if !r.ratios.is_empty() {
        println!();
        for (k, v) in &r.ratios {
            println!("{k:<40} {v:>10.3}");
        }
    }
}

/// Writes the report as pretty JSON.
pub fn write_json(r: &Report, path: &Path) -> std::io::Result<()> {
    let s = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(path, s)
}

/// Draws latency (sizes up to 4 KiB) and bandwidth (all sizes) against size, log2 x axis.
pub fn write_plot(r: &Report, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    let colors = [&RED, &BLUE, &GREEN, &MAGENTA, &CYAN, &BLACK, &RGBColor(200, 120, 0)];
    let log2 = |s: usize| (s as f64).log2();
    for (area, title, small, f) in [
        (&left, "one-way latency (us)", true, (|p: &Point| p.latency_us) as fn(&Point) -> f64),
        (&right, "bandwidth (MB/s)", false, |p: &Point| p.bandwidth_mbs),
    ] {
        let pts = |s: &Series| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .filter(|p| !small || p.size <= 4096)
                .map(|p| (log2(p.size), f(p)))
                .filter(|(_, y)| y.is_finite())
                .collect()
        };
        let all: Vec<(f64, f64)> = r.series.iter().flat_map(pts).collect();
        if all.is_empty() {
            continue;
        }
        let xmax = all.iter().map(|p| p.0).fold(2.0, f64::max);
        let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(2.0..xmax, 0.0..ymax.max(1e-9))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes, log2)")
            .x_label_formatter(&|x| fmt_size(2f64.powf(*x).round() as usize))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in r.series.iter().enumerate() {
            let c = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(pts(s), c))
                .map_err(|e| e.to_string())?
                .label(s.series.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(if small { SeriesLabelPosition::UpperLeft } else { SeriesLabelPosition::UpperLeft })
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_and_plot() {
        let mut r = Report::default();
        for (name, k) in [("a", 1.0), ("b", 2.0)] {
            r.series.push(Series {
                series: name.into(),
                points: crate::stats::sizes()
                    .into_iter()
                    .map(|s| Point {
                        size: s,
                        latency_us: k + s as f64 / 1e4,
                        bandwidth_mbs: s as f64 / (k + s as f64 / 1e4),
                    })
                    .collect(),
            });
        }
        r.ratios.insert("a/b".into(), 0.5);
        let dir = std::env::temp_dir().join(format!("vmmc-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_json(&r, &dir.join("r.json")).unwrap();
        let back: Report = serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
        assert_eq!(back.at("b", 4).unwrap().latency_us, r.at("b", 4).unwrap().latency_us);
        write_plot(&r, &dir.join("r.svg")).unwrap();
        let svg = std::fs::read_to_string(dir.join("r.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("polyline"), "an SVG with lines");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
