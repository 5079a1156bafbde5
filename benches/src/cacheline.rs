//! Two threads bounce a value through two cache lines: the physical limit of a small message
//! between two cores, against which the VMMC latency is compared.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

#[repr(align(128))]
struct Line(AtomicU32);

/// One-way latency in nanoseconds of `iters` round trips.
pub fn cacheline_pingpong(iters: u32) -> f64 {
    let a = Line(AtomicU32::new(0));
    let b = Line(AtomicU32::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=iters {
                while a.0.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                b.0.store(i, Ordering::Release);
            }
        });
        let start = Instant::now();
        for i in 1..=iters {
            a.0.store(i, Ordering::Release);
            while b.0.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        }
        start.elapsed().as_nanos() as f64 / (2.0 * iters as f64)
    })
}

/// Median over `reps` runs of [`cacheline_pingpong`].
pub fn cacheline_median(reps: usize, iters: u32) -> f64 {
    let mut v: Vec<f64> = (0..reps).map(|_| cacheline_pingpong(iters)).collect();
    crate::stats::median(&mut v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_something_positive() {
        let ns = super::cacheline_pingpong(10_000);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }
}
