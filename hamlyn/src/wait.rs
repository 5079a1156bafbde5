//! The one place where Hamlyn waits: every blocking call (a full work queue, a sender out of
//! tickets, `h_recv_block`) turns the loop through [`Waiter`], so that the waiting policy can
//! be swapped for the core's (issue 19) in one place.
//!
//! Policy: spin briefly (a message on shm takes well under a microsecond), then yield for
//! 200 µs, then sleep in short slices that grow to [`MAX_NAP`] (a blocking wake-up costs
//! 25-30 µs on these machines, DESIGN.md). On a paced transport (the simulator) every turn is
//! [`vmmc::pace::relax`], which lets virtual time advance to the next event. A waiter never
//! spins forever: callers check a deadline and their peers' liveness through
//! [`Waiter::due`].

use std::time::{Duration, Instant};

const SPINS: u32 = 2000;
/// How long a waiter yields its core before it naps (bounded in time, not in turns: on a
/// loaded machine one yield can take a whole time slice).
const YIELD_FOR: Duration = Duration::from_micros(200);
/// The longest nap between two looks (bounds a lost wake-up, see `Hamlyn::h_recv_block`).
pub const MAX_NAP: Duration = Duration::from_millis(1);

/// The state of one waiting loop.
pub struct Waiter {
    turns: u32,
    paced: bool,
    spins: u32,
    nap: Duration,
    /// When the yielding phase began (read lazily: a short wait never reads the clock).
    yield_since: Option<Instant>,
    napping: bool,
    /// When the slow checks last ran (read lazily too).
    last_check: Option<Instant>,
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
            turns: 0,
            paced: vmmc::pace::is_paced(),
            spins: 0,
            nap: Duration::from_micros(20),
            yield_since: None,
            napping: false,
            last_check: None,
        }
    }

    /// Whether this loop has left its spinning and yielding phases (the caller may now ask
    /// for a wake-up).
    pub fn sleepy(&self) -> bool {
        self.napping
    }

    /// One turn whose condition was false.
    pub fn relax(&mut self) {
        self.turns = self.turns.saturating_add(1);
        if self.paced {
            vmmc::pace::relax(&mut self.spins);
        } else if self.turns <= SPINS {
            std::hint::spin_loop();
        } else if !self.napping {
            let since = *self.yield_since.get_or_insert_with(Instant::now);
            if since.elapsed() > YIELD_FOR {
                self.napping = true;
            }
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.nap);
            self.nap = (self.nap * 2).min(MAX_NAP);
        }
    }

    /// Whether it is time for the slow checks (peer alive, deadline): on every turn under a
    /// pacer or once napping, else every 256 turns or when a millisecond has passed.
    pub fn due(&mut self) -> bool {
        if self.paced || self.napping || self.turns.is_multiple_of(256) {
            return true;
        }
        // Reading the clock costs as much as a turn: look at it every 64 turns only.
        if self.turns.is_multiple_of(64) {
            let now = Instant::now();
            match self.last_check {
                Some(t) if now.duration_since(t) <= Duration::from_millis(1) => {}
                _ => {
                    self.last_check = Some(now);
                    return true;
                }
            }
        }
        false
    }
}

/// Nanoseconds on the calling thread's clock (virtual under the simulator).
pub fn now_ns() -> u64 {
    vmmc::pace::now_ns()
}
