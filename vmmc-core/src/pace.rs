//! Waiting and the clock, for transports whose time is not the machine's.
//!
//! On most transports a program that polls a flag simply spins, and time is the wall clock.
//! The simulated SHRIMP (`transports/sim`) runs every node as a thread with its own virtual
//! clock: a node that polls must let virtual time advance to the arrival of what it waits
//! for, and a benchmark must read the virtual clock. Such a transport installs a [`Pacer`] on
//! its node threads; the core's polling loops ([`crate::Region::wait_u32`], the conformance
//! suite's waits) call [`relax`], programs time themselves with [`now_ns`], and the threads
//! the core starts for an endpoint inherit their creator's pacer. Without a pacer every call
//! here is the ordinary spin-then-yield and the monotonic wall clock.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a transport with its own notion of time provides to the threads it runs.
pub trait Pacer: Send + Sync {
    /// A polling loop found its condition false: return when something this thread can
    /// observe may have changed (data arrived, a peer left), letting time advance meanwhile.
    fn idle(&self);
    /// The current time of the calling thread, in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Ends the calling node abruptly, as a process killed by a signal would end (the
    /// conformance suite's [`crate::conformance::die`] on a transport whose nodes are
    /// threads).
    fn die(&self) -> !;
    /// Charges the calling node the modelled cost of `what`, an event that is no call into
    /// the transport (a protocol library's access fault). Transports that model no such
    /// cost ignore it.
    fn charge(&self, what: Cost) {
        let _ = what;
    }
}

/// Events that cost modelled time although no transport call happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cost {
    /// An access that page-granularity shared virtual memory traps (a read of an invalid
    /// page or the first write to a page in an interval): on SHRIMP, a protection fault, the
    /// signal to the library's handler and the `mprotect` that ends it.
    AccessFault,
    /// A synchronisation call that a protocol library satisfies without communicating (a
    /// lock whose token is already here): its bookkeeping on the node's CPU.
    LocalSync,
    /// Computation the program states rather than performs: this many nanoseconds of the
    /// node's time (a benchmark's hold of a lock, a model of work). A paced transport
    /// advances the node's clock by it, beside the charge for the host time the program
    /// really spent; elsewhere nothing happens, and a program that must take the time
    /// spends it itself. A program that instead spins on [`now_ns`] until a virtual
    /// deadline advances only by its charges, which depend on the host, and never without
    /// them.
    Compute(u64),
}

/// Charges the calling thread's node the modelled cost of `what` (nothing without a pacer).
pub fn charge(what: Cost) {
    PACER.with(|c| {
        if let Some(p) = &*c.borrow() {
            p.charge(what)
        }
    })
}

thread_local! {
    static PACER: RefCell<Option<Arc<dyn Pacer>>> = const { RefCell::new(None) };
}

/// Installs `p` as the calling thread's pacer (`None` removes it); returns the previous one.
pub fn install(p: Option<Arc<dyn Pacer>>) -> Option<Arc<dyn Pacer>> {
    PACER.with(|c| c.replace(p))
}

/// The calling thread's pacer, if any (threads the core starts inherit it through this).
pub fn current() -> Option<Arc<dyn Pacer>> {
    PACER.with(|c| c.borrow().clone())
}

/// Whether the calling thread runs under a pacer.
pub fn is_paced() -> bool {
    PACER.with(|c| c.borrow().is_some())
}

/// One turn of a polling loop whose condition is false. With a pacer: waits until something
/// may have changed. Without: spins, and after many turns (`spins` counts them) yields.
#[inline]
pub fn relax(spins: &mut u32) {
    let paced = PACER.with(|c| match &*c.borrow() {
        Some(p) => {
            p.idle();
            true
        }
        None => false,
    });
    if !paced {
        *spins = spins.wrapping_add(1);
        if *spins > 1 << 16 && spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Nanoseconds on the calling thread's clock: virtual under a pacer, else monotonic wall
/// time since the first call in this process.
pub fn now_ns() -> u64 {
    if let Some(t) = PACER.with(|c| c.borrow().as_ref().map(|p| p.now_ns())) {
        return t;
    }
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The reading of [`now_ns`] `timeout` from now (`None`: no deadline). A timeout too long
/// for the clock is a wait without end: it never overflows.
pub fn deadline_after(timeout: Option<Duration>) -> Option<u64> {
    timeout.map(|t| now_ns().saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)))
}

/// Spawns a thread that inherits the calling thread's pacer (for the core's own threads).
pub(crate) fn spawn_inheriting<F, T>(
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let p = current();
    builder.spawn(move || {
        install(p);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Fake(AtomicU64);
    impl Pacer for Fake {
        fn idle(&self) {
            self.0.fetch_add(10, Ordering::SeqCst);
        }
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn die(&self) -> ! {
            panic!("died")
        }
    }

    #[test]
    fn paced_threads_use_the_pacer_and_pass_it_on() {
        assert!(!is_paced());
        let a = now_ns();
        assert!(now_ns() >= a);
        let fake = Arc::new(Fake(AtomicU64::new(5)));
        install(Some(fake.clone()));
        assert_eq!(now_ns(), 5);
        let mut n = 0;
        relax(&mut n);
        assert_eq!((now_ns(), n), (15, 0));
        let h = spawn_inheriting(std::thread::Builder::new(), now_ns).unwrap();
        assert_eq!(h.join().unwrap(), 15);
        install(None);
        relax(&mut n);
        assert_eq!(n, 1);
    }
}
