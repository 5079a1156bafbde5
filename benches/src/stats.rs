//! Statistics of repeated measurements.

/// The median of `v` (sorted in place); NaN for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Message sizes of the sweep: 4 B doubling to 1 MiB.
pub fn sizes() -> Vec<usize> {
    (2..=20).map(|p| 1usize << p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn sizes_span_4_bytes_to_1_mib() {
        let s = sizes();
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (4, 1 << 20, 19));
        assert!(s.windows(2).all(|w| w[1] == 2 * w[0]));
    }
}
