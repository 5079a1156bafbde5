//! Two threads bounce a counter through two cache lines: the physical limit of a small message
//! between two cores, against which the VMMC latency is compared.
//!
//! Thread A stores `i` into its line with `Release` and spins with `Acquire` until the other
//! line holds `i`; thread B waits for `i` on A's line and mirrors it back. Each round trip is
//! therefore two cache-line transfers; one-way latency is half a round trip.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// One flag on its own cache line. Aligned to 128 bytes (so also 64-byte aligned): besides
/// sitting on separate 64-byte lines, the two flags do not share the 128-byte pair that
/// adjacent-line prefetchers fetch together, which would add false traffic.
#[repr(align(128))]
struct Line(AtomicU32);

fn wait_for(line: &Line, want: u32) {
    while line.0.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
    }
}

/// The first two online CPUs (from `/sys/devices/system/cpu/online`, e.g. "0-1" or "0,2-3"),
/// or none when there are fewer.
fn two_cpus() -> Option<(usize, usize)> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let mut cpus = Vec::new();
    for part in s.trim().split(',') {
        let mut ends = part.split('-').map(|x| x.trim().parse::<usize>());
        let lo = ends.next()?.ok()?;
        let hi = match ends.next() {
            Some(h) => h.ok()?,
            None => lo,
        };
        cpus.extend(lo..=hi);
        if cpus.len() >= 2 {
            break;
        }
    }
    (cpus.len() >= 2).then(|| (cpus[0], cpus[1]))
}

fn pin(cpu: Option<usize>) {
    if let Some(id) = cpu {
        // Best effort: unpinned threads still measure, only less steadily.
        let _ = core_affinity::set_for_current(core_affinity::CoreId { id });
    }
}

/// One-way latency in nanoseconds of `iters` round trips of the two-thread cache-line
/// ping-pong (elapsed time / (2 × `iters`)); `iters == 0` is measured as 1.
///
/// Both threads spin, so this needs two idle cores to mean anything. Each thread is pinned to
/// its own CPU (the first two online ones), as the launchers pin the processes of a job;
/// the calling thread's own affinity is left alone, so a pinned process can measure too.
pub fn cacheline_pingpong(iters: u64) -> f64 {
    let iters = iters.max(1);
    let a = Line(AtomicU32::new(0));
    let b = Line(AtomicU32::new(0));
    let cpus = two_cpus();
    // The counter is carried modulo 2^32 and never revisits its previous value, and the
    // handshake value `u32::MAX` is used only before the timed loop starts at 1.
    let ready = u32::MAX;
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpus.map(|c| c.1));
            // Handshake first, so the thread's start-up is outside the timed loop.
            b.0.store(ready, Ordering::Release);
            for i in 1..=iters {
                let i = i as u32;
                wait_for(&a, i);
                b.0.store(i, Ordering::Release);
            }
        });
        s.spawn(|| {
            pin(cpus.map(|c| c.0));
            wait_for(&b, ready);
            let start = Instant::now();
            for i in 1..=iters {
                let i = i as u32;
                a.0.store(i, Ordering::Release);
                wait_for(&b, i);
            }
            start.elapsed().as_nanos() as f64 / (2.0 * iters as f64)
        })
        .join()
        .expect("cache-line thread")
    })
}

/// Median over `reps` runs of [`cacheline_pingpong`]`(iters)`, in nanoseconds.
pub fn cacheline_median(reps: usize, iters: u64) -> f64 {
    let mut v: Vec<f64> = (0..reps.max(1))
        .map(|_| cacheline_pingpong(iters))
        .collect();
    crate::stats::median(&mut v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn measures_something_positive() {
        let ns = super::cacheline_pingpong(10_000);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }

    #[test]
    fn median_is_positive_too() {
        let ns = super::cacheline_median(3, 1_000);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }
}
