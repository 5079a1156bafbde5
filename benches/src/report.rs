//! The benchmark report: named series of (size, latency, bandwidth) points, scalar baselines
//! and ratios; printed as a table, written as JSON and as an SVG plot.

pub use crate::stats::{Sample, Series};

/// The name the report used for [`Sample`] before it moved to [`crate::stats`].
pub type Point = Sample;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Everything one benchmark run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Series in the order they were added (names are expected to be unique).
    pub series: Vec<Series>,
    /// Scalar measurements by name (e.g. "cacheline_oneway_ns").
    pub baselines: BTreeMap<String, f64>,
    /// Ratios ours/theirs by name, the name saying which.
    pub ratios: BTreeMap<String, f64>,
    /// Free-form notes (machine, repetitions).
    pub notes: Vec<String>,
}

impl Report {
    /// Adds a series, replacing any series of the same name.
    pub fn push(&mut self, s: Series) {
        match self.series.iter_mut().find(|o| o.series == s.series) {
            Some(o) => *o = s,
            None => self.series.push(s),
        }
    }

    /// A series by name.
    pub fn get(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.series == name)
    }

    /// The point of series `name` at `size`.
    pub fn at(&self, name: &str, size: usize) -> Option<&Sample> {
        self.get(name)?.at(size)
    }

    /// All sizes of all series, increasing, without duplicates.
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.size))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }
}

/// `4`, `1K`, `1M`, ...
fn fmt_size(s: usize) -> String {
    if s >= 1 << 20 && s.is_multiple_of(1 << 20) {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 && s.is_multiple_of(1 << 10) {
        format!("{}K", s >> 10)
    } else {
        format!("{s}")
    }
}

/// Prints one row per size with, for each series, a latency column (one-way, us) and a
/// bandwidth column (MB/s); then the baselines and the ratios.
pub fn print_table(r: &Report) {
    let widths: Vec<usize> = r.series.iter().map(|s| s.series.len().max(10)).collect();
    let mut head1 = format!("{:>6}", "");
    let mut head2 = format!("{:>6}", "size");
    for (s, &w) in r.series.iter().zip(&widths) {
        head1.push_str(&format!(" | {:^width$}", s.series, width = 2 * w + 1));
        head2.push_str(&format!(" | {:>w$} {:>w$}", "lat us", "MB/s"));
    }
    println!("{head1}");
    println!("{head2}");
    println!("{}", "-".repeat(head2.len()));
    for size in r.sizes() {
        let mut row = format!("{:>6}", fmt_size(size));
        for (s, &w) in r.series.iter().zip(&widths) {
            match s.at(size) {
                Some(p) => row.push_str(&format!(
                    " | {:>w$.3} {:>w$.1}",
                    p.latency_us, p.bandwidth_mbs
                )),
                None => row.push_str(&format!(" | {:>w$} {:>w$}", "-", "-")),
            }
        }
        println!("{row}");
    }
    let width = r
        .baselines
        .keys()
        .chain(r.ratios.keys())
        .map(String::len)
        .max()
        .unwrap_or(0);
    if !r.baselines.is_empty() {
        println!("\nbaselines");
        for (k, v) in &r.baselines {
            println!("  {k:<width$}  {v:>10.3}");
        }
    }
    if !r.ratios.is_empty() {
        println!("\nratios");
        for (k, v) in &r.ratios {
            println!("  {k:<width$}  {v:>10.3}");
        }
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}

/// Runs a contender program and returns the series named `name` among the JSON lines it
/// prints (other lines are ignored); a failure carries the program's stderr.
pub fn run_series(cmd: &mut std::process::Command, name: &str) -> Result<Series, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{name}: cannot start {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{name} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str::<Series>(l.trim()).ok())
        .filter(|s| s.series == name)
        .ok_or_else(|| format!("{name}: no result line"))
}

/// Writes the report as pretty JSON to `path`.
pub fn write_json(r: &Report, path: &Path) -> io::Result<()> {
    let s = serde_json::to_string_pretty(r).map_err(io::Error::other)?;
    std::fs::write(path, s + "\n")
}

/// Draws two charts into one SVG at `path`: left, one-way latency against size for sizes up to
/// 4 KiB; right, bandwidth against all sizes. Both x axes are log2 of the size; one line per
/// series, with a legend. Text is written as SVG `<text>` elements (no font files needed).
pub fn write_plot(r: &Report, path: &Path) -> io::Result<()> {
    draw(r, path).map_err(|e| io::Error::other(e.to_string()))
}

type Metric = fn(&Sample) -> f64;

fn draw(r: &Report, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let colors = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(200, 120, 0),
        RGBColor(120, 60, 160),
    ];
    let charts: [(&DrawingArea<_, _>, &str, &str, Option<usize>, Metric); 2] = [
        (
            &left,
            "one-way latency, sizes <= 4 KiB",
            "latency (us)",
            Some(4096),
            |p| p.latency_us,
        ),
        (&right, "bandwidth", "bandwidth (MB/s)", None, |p| {
            p.bandwidth_mbs
        }),
    ];
    for (area, title, y_desc, max_size, metric) in charts {
        let pts = |s: &Series| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .filter(|p| max_size.is_none_or(|m| p.size <= m))
                .map(|p| ((p.size as f64).log2(), metric(p)))
                .filter(|(_, y)| y.is_finite())
                .collect()
        };
        let all: Vec<(f64, f64)> = r.series.iter().flat_map(pts).collect();
        let xmin = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let xmax = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        let (xmin, xmax) = if xmin < xmax {
            (xmin, xmax)
        } else {
            (2.0, 20.0)
        };
        let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1;
        let ymax = if ymax > 0.0 { ymax } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes, log2 scale)")
            .y_desc(y_desc)
            .x_labels((xmax - xmin) as usize + 1)
            .x_label_formatter(&|x| fmt_size(2f64.powf(*x).round() as usize))
            .draw()?;
        for (i, s) in r.series.iter().enumerate() {
            let c = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(pts(s), c.stroke_width(2)))?
                .label(s.series.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        if !r.series.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_report() -> Report {
        let mut r = Report::default();
        for (name, k) in [("a", 1.0), ("b", 2.0)] {
            r.push(Series {
                series: name.into(),
                points: crate::stats::sizes()
                    .into_iter()
                    .map(|s| {
                        let mut lat = [k + s as f64 / 1e4];
                        Sample::from_oneway_us(s, &mut lat)
                    })
                    .collect(),
            });
        }
        r.baselines.insert("cacheline_oneway_ns".into(), 60.0);
        r.ratios.insert("a/b latency 4 B".into(), 0.5);
        r
    }

    #[test]
    fn writes_json_and_plot() {
        let r = sample_report();
        let dir = std::env::temp_dir().join(format!("vmmc-benches-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (json, svg) = (dir.join("r.json"), dir.join("r.svg"));
        write_json(&r, &json).unwrap();
        let back: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(back.at("b", 4), r.at("b", 4));
        assert_eq!(back.baselines["cacheline_oneway_ns"], 60.0);
        write_plot(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.contains("<svg") && text.contains("polyline"),
            "an SVG with lines"
        );
        assert!(
            text.contains("\na\n</text>") && text.contains("\nb\n</text>"),
            "a legend naming the series"
        );
        print_table(&r);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn push_replaces_a_series_of_the_same_name() {
        let mut r = sample_report();
        r.push(Series::new("a"));
        assert_eq!(r.series.len(), 2);
        assert!(r.get("a").unwrap().points.is_empty());
        assert_eq!(r.sizes().len(), 19);
    }

    #[test]
    fn plot_of_an_empty_report_still_writes() {
        let path =
            std::env::temp_dir().join(format!("vmmc-benches-empty-{}.svg", std::process::id()));
        write_plot(&Report::default(), &path).unwrap();
        assert!(path.exists());
        std::fs::remove_file(&path).unwrap();
    }
}
