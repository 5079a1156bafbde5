//! Prints the two-thread cache-line ping-pong's one-way latency: the median of 5 runs of
//! 1,000,000 round trips (or `cacheline [REPS [ITERS]]`), in nanoseconds.

#![forbid(unsafe_code)]

use vmmc_benches::cacheline::cacheline_median;

fn main() {
    let mut args = std::env::args().skip(1);
    let reps = args.next().and_then(|v| v.parse().ok()).unwrap_or(5);
    let iters = args
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let ns = cacheline_median(reps, iters);
    println!(
        "cache-line one-way latency: {ns:.1} ns (median of {reps} runs of {iters} round trips)"
    );
}
