//! The one place where Hamlyn waits: every blocking call (a full work queue, a sender out of
//! tickets, `h_recv_block`) turns the loop through [`Waiter`], which is the core's one waiting
//! policy ([`vmmc::wait`], issue 19): spin while that pays, yield where processes outnumber
//! cores, then sleep on the process's doorbell, which every packet a sender writes into this
//! process's rings rings. On a paced transport (the simulator) every turn lets virtual time
//! advance to the next event. A waiter never spins forever: callers check a deadline and their
//! peers' liveness through [`Waiter::due`].

use std::time::Duration;

/// The longest nap of the optional blocking wake-up's wait (bounds a lost wake-up, see
/// `Hamlyn::h_recv_block`).
pub const MAX_NAP: Duration = Duration::from_millis(1);

/// Hamlyn's waits, in `vmmc::wait`'s counts.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("hamlyn");

/// The state of one waiting loop.
pub struct Waiter {
    wait: vmmc::wait::Wait<'static>,
    turns: u32,
}

impl Default for Waiter {
    fn default() -> Self {
        Waiter::new()
    }
}

impl Waiter {
    /// A new loop.
    pub fn new() -> Waiter {
        Waiter {
            wait: vmmc::wait::Wait::new(&WAIT_SITE),
            turns: 0,
        }
    }

    /// Whether this loop is past its spin (the caller may now ask for a wake-up).
    pub fn sleepy(&self) -> bool {
        self.wait.resting()
    }

    /// One turn whose condition was false.
    pub fn relax(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        self.wait.idle();
    }

    /// Whether it is time for the slow checks (peer alive, deadline): on every turn once past
    /// the spin (or under a pacer), else every 256 turns.
    pub fn due(&mut self) -> bool {
        self.wait.resting() || self.turns.is_multiple_of(256)
    }
}

/// The clock reading (of [`now_ns`]) `timeout` from now; `None` for none. A time-out too
/// long for the clock is a wait without one.
pub fn deadline_after(timeout: Option<std::time::Duration>) -> Option<u64> {
    vmmc::pace::deadline_after(timeout)
}

/// Nanoseconds on the calling thread's clock (virtual under the simulator).
pub fn now_ns() -> u64 {
    vmmc::pace::now_ns()
}
