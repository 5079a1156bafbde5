//! Statistics of repeated measurements: the median, the message sizes of the sweep, and the
//! measured points ([`Sample`]) and named lines ([`Series`]) built from them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The median of `v` (sorted in place); NaN for an empty slice.
///
/// For an even number of values it is the mean of the two middle ones.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Message sizes of the sweep: 4 B, 8 B, 16 B, ... doubling up to 1 MiB (1048576 B).
pub fn sizes() -> Vec<usize> {
    sizes_up_to(1 << 20)
}

/// Message sizes doubling from 4 B up to `max` bytes (included when a power of two).
pub fn sizes_up_to(max: usize) -> Vec<usize> {
    (2..usize::BITS - 1)
        .map(|p| 1usize << p)
        .take_while(|&s| s <= max)
        .collect()
}

/// One measured message size: the median one-way latency over the repetitions and the
/// bandwidth derived from it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Message size in bytes.
    pub size: usize,
    /// Median one-way latency in microseconds.
    pub latency_us: f64,
    /// Bandwidth in MB/s (1 MB = 10^6 bytes): `size / latency`.
    pub bandwidth_mbs: f64,
}

impl Sample {
    /// A sample from the one-way latencies (microseconds) of R repetitions: their median, and
    /// the bandwidth of a ping-pong, bytes over the one-way time (bytes/us = MB/s).
    pub fn from_oneway_us(size: usize, oneway_us: &mut [f64]) -> Sample {
        let latency_us = median(oneway_us);
        Sample {
            size,
            latency_us,
            bandwidth_mbs: size as f64 / latency_us,
        }
    }

    /// A sample from the wall times (seconds) of R repetitions of `round_trips` round trips
    /// each: one-way latency is half a round trip.
    pub fn from_round_trip_secs(size: usize, round_trips: u64, secs: &[f64]) -> Sample {
        let mut us: Vec<f64> = secs
            .iter()
            .map(|s| s / (2.0 * round_trips as f64) * 1e6)
            .collect();
        Sample::from_oneway_us(size, &mut us)
    }
}

/// A named line of samples by size; also the one-line JSON a benchmark program prints:
/// `{"series":"mpi","points":[{"size":4,"latency_us":..,"bandwidth_mbs":..},...]}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// Name ("DU-0copy", "mpi", ...).
    pub series: String,
    /// Samples by increasing size.
    pub points: Vec<Sample>,
}

impl Series {
    /// An empty series named `name`.
    pub fn new(name: impl Into<String>) -> Series {
        Series {
            series: name.into(),
            points: Vec::new(),
        }
    }

    /// The sample at `size`, if measured.
    pub fn at(&self, size: usize) -> Option<&Sample> {
        self.points.iter().find(|p| p.size == size)
    }
}

/// Round trips of several contenders over several rounds: each round's figure per size, kept
/// until the medians are taken.
#[derive(Debug, Default)]
pub struct Rounds {
    by: BTreeMap<String, BTreeMap<usize, Vec<f64>>>,
}

impl Rounds {
    /// Adds one round of a contender (its series' `latency_us` are round trips).
    pub fn add(&mut self, s: Series) {
        let e = self.by.entry(s.series).or_default();
        for p in s.points {
            e.entry(p.size).or_default().push(p.latency_us);
        }
    }

    /// The series `name`: per size, the median round trip over the rounds, and the bytes
    /// moved both ways over it; `None` if it never ran.
    pub fn round_trip_series(&self, name: &str) -> Option<Series> {
        let by_size = self.by.get(name)?;
        let mut s = Series::new(name);
        for (&size, v) in by_size {
            let latency_us = median(&mut v.clone());
            s.points.push(Sample {
                size,
                latency_us,
                bandwidth_mbs: 2.0 * size as f64 / latency_us,
            });
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn sizes_span_4_bytes_to_1_mib() {
        let s = sizes();
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (4, 1 << 20, 19));
        assert!(s.windows(2).all(|w| w[1] == 2 * w[0]));
    }

    #[test]
    fn sample_is_median_latency_and_bytes_over_it() {
        // 1000 round trips in 2, 4 and 3 ms: one-way 1, 2, 1.5 us; median 1.5 us.
        let s = Sample::from_round_trip_secs(3000, 1000, &[2e-3, 4e-3, 3e-3]);
        assert!((s.latency_us - 1.5).abs() < 1e-9, "{s:?}");
        assert!((s.bandwidth_mbs - 2000.0).abs() < 1e-6, "{s:?}");
        let line = Series {
            series: "x".into(),
            points: vec![s.clone()],
        };
        assert_eq!(line.at(3000), Some(&s));
        assert_eq!(line.at(4), None);
    }
}
