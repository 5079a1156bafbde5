//! The stopwatch of the protocol-time statistic ([`crate::Stats::protocol_ns`]).
//!
//! Every lock hand-over, fault and barrier is timed, so the clock is read twice on the path
//! that a waiting node waits for. A `clock_gettime` costs 30-40 ns on the machines we run on
//! (a KVM guest: the vDSO's scaling and its sequence lock), and four of them were a fifth of
//! a lock hand-over on shm. This stopwatch reads the time-stamp counter instead (about 10
//! ns) where the kernel itself keeps time by it, which it does only where the counter runs
//! at one rate on every core (the `tsc` clock source); the counter is scaled to nanoseconds
//! by a rate measured once against the monotonic clock. Under the simulator's pacer it is
//! the node's virtual clock, and elsewhere the monotonic one.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use vmmc::pace;

/// A point in time on one of the clocks (which one is part of it).
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    t: u64,
    counter: bool,
}

/// Now.
#[inline]
pub(crate) fn stamp() -> Stamp {
    if !pace::is_paced() {
        if let Some(t) = counter() {
            return Stamp { t, counter: true };
        }
    }
    Stamp {
        t: pace::now_ns(),
        counter: false,
    }
}

/// Nanoseconds since `s` (0 if the clock seems to have gone back).
#[inline]
pub(crate) fn since(s: Stamp) -> u64 {
    if s.counter {
        if let (Some(t), Some(&Some(ns_per_tick))) = (counter(), RATE.get()) {
            return (t.saturating_sub(s.t) as f64 * ns_per_tick) as u64;
        }
    }
    pace::now_ns().saturating_sub(s.t)
}

/// Measures the counter's rate, if the counter is used (call before timing anything: the
/// measurement spins for [`CALIBRATE`]). Not under a pacer, whose virtual clock times the
/// protocol and which would charge the spin as the node's computation.
pub(crate) fn init() {
    if !pace::is_paced() {
        RATE.get_or_init(rate);
    }
}

/// How long the rate is measured: each end's reading is bracketed within [`TIGHT`] ticks,
/// so the rate is good to a few parts in 10^4 as a rule and in 10^3 at worst.
const CALIBRATE: Duration = Duration::from_micros(300);

/// Nanoseconds per tick of the counter, where the counter is the kernel's clock source.
static RATE: OnceLock<Option<f64>> = OnceLock::new();

#[inline]
fn counter() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    if matches!(RATE.get(), Some(Some(_))) {
        // SAFETY: RDTSC has no preconditions (the clock source check made sure that it is
        // there and constant).
        return Some(unsafe { core::arch::x86_64::_rdtsc() });
    }
    None
}

fn rate() -> Option<f64> {
    let src =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    if src.trim() != "tsc" {
        return None;
    }
    measure()
}

#[cfg(target_arch = "x86_64")]
fn measure() -> Option<f64> {
    // SAFETY: as in `counter`.
    let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
    // A reading of both clocks, bracketed by the counter; one the scheduler cut into (a
    // preemption between the reads would put milliseconds into the rate) is read again.
    let pair = || {
        (0..1000).find_map(|_| {
            let (a, i, b) = (tsc(), Instant::now(), tsc());
            (b.wrapping_sub(a) < TIGHT).then(|| (i, a + (b - a) / 2))
        })
    };
    let (i0, c0) = pair()?;
    while i0.elapsed() < CALIBRATE {
        std::hint::spin_loop();
    }
    let (i1, c1) = pair()?;
    let ticks = c1.saturating_sub(c0);
    (ticks > 0).then(|| i1.duration_since(i0).as_nanos() as f64 / ticks as f64)
}

/// The widest bracket of a reading (about 0.8 us at 2.5 GHz, where a reading takes 50-100
/// ns): the rate is then good to a few parts in 10^3 at worst.
#[cfg(target_arch = "x86_64")]
const TIGHT: u64 = 2000;

#[cfg(not(target_arch = "x86_64"))]
fn measure() -> Option<f64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stopwatch_agrees_with_the_monotonic_clock() {
        init();
        // The monotonic clock's span is bracketed (a preemption between two reads widens
        // the bracket rather than failing the test).
        let outer = Instant::now();
        let s = stamp();
        let inner = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let inner_end = Instant::now();
        let ours = since(s);
        let (lo, hi) = (
            inner_end.duration_since(inner).as_nanos() as f64,
            outer.elapsed().as_nanos() as f64,
        );
        // The rate is good to far better than 1%.
        assert!(
            ours as f64 >= lo * 0.99 && ours as f64 <= hi * 1.01,
            "stopwatch {ours} ns, monotonic clock between {lo} and {hi} ns"
        );
    }
}
