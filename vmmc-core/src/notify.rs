//! Notification dispatch with every rule of seed 000 ("Notifications").
//!
//! - One optional handler per exported buffer; a notification for a buffer without one has no
//!   effect.
//! - Blocking is global to the process and nests; `unblock` returns >0 only when it leaves the
//!   outermost level (and >0 when nothing is blocked), 0 otherwise.
//! - While blocked, notifications queue in arrival order in a bounded queue; when it is full
//!   the overflow is counted and reported by the unblock that ends the blocked period
//!   ([`Error::NotifyOverflow`]), never dropped silently.
//! - A handler runs with notifications blocked: it may block/unblock in pairs, but an
//!   unconditional unblock inside it is [`Error::UnblockInHandler`].
//! - Handlers never run concurrently; they run in arrival order, on the endpoint's handler
//!   thread (the notification thread that drains the transport only queues them, so it never
//!   waits for a handler), or on the thread that unblocks (queued ones are delivered before
//!   `unblock` returns), or on a caller of `poll`.
//! - The queue is bounded also while unblocked: handlers slower than the arrivals for long
//!   lose the overflow, counted and reported the same way.

use crate::error::{Error, Result};
use crate::types::{BufId, Notification};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A notification handler: called with the notification after its data is in memory.
pub type Handler = Arc<dyn Fn(Notification) + Send + Sync>;

/// Default bound of the queue of notifications waiting for their handlers.
pub const DEFAULT_QUEUE: usize = 4096;

thread_local! {
    /// The handlers this thread is running, innermost last: the dispatcher each belongs to
    /// and the handler's own block nesting. Keyed by dispatcher, so a handler of one endpoint
    /// that blocks another endpoint's notifications acts on that endpoint (the in-handler
    /// state is per endpoint, not per thread).
    static IN_HANDLER: RefCell<Vec<(u64, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Identity of a dispatcher, never reused.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, AtomicOrdering::Relaxed)
}

struct State {
    depth: u32,
    running: bool,
    queue: VecDeque<Notification>,
    capacity: usize,
    lost: u64,
    handlers: HashMap<BufId, Handler>,
    delivered: u64,
}

/// The per-process notification dispatcher.
pub struct Notifier {
    id: u64,
    st: Mutex<State>,
    cv: Condvar,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier::new(DEFAULT_QUEUE)
    }
}

impl Notifier {
    /// A dispatcher whose blocked queue holds `capacity` notifications.
    pub fn new(capacity: usize) -> Notifier {
        Notifier {
            id: next_id(),
            st: Mutex::new(State {
                depth: 0,
                running: false,
                queue: VecDeque::new(),
                capacity: capacity.max(1),
                lost: 0,
                handlers: HashMap::new(),
                delivered: 0,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the bound of the blocked queue.
    pub fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity.max(1);
    }

    /// Installs or removes the handler of a buffer.
    pub fn set_handler(&self, buf: BufId, handler: Option<Handler>) {
        let mut st = self.lock();
        match handler {
            Some(h) => {
                st.handlers.insert(buf, h);
            }
            None => {
                st.handlers.remove(&buf);
                st.queue.retain(|n| n.buf != buf);
            }
        }
    }

    /// Whether any handler is installed.
    pub fn has_handlers(&self) -> bool {
        !self.lock().handlers.is_empty()
    }

    /// How many handler calls have completed.
    pub fn delivered(&self) -> u64 {
        self.lock().delivered
    }

    /// Accepts an arrived notification: queues it and runs handlers on this thread if not
    /// blocked (the caller's own context, as `poll` uses).
    pub fn deliver(&self, n: Notification) {
        let mut st = self.lock();
        if Self::push(&mut st, n) {
            drop(self.drain(st));
        }
    }

    /// Accepts an arrived notification for the handler thread ([`Notifier::run_handlers`]):
    /// queues it and returns at once, so whoever drains the transport never waits for a
    /// handler.
    pub fn enqueue(&self, n: Notification) {
        let mut st = self.lock();
        if Self::push(&mut st, n) {
            self.cv.notify_all();
        }
    }

    fn push(st: &mut State, n: Notification) -> bool {
        if !st.handlers.contains_key(&n.buf) {
            return false; // seed 000: no handler, no effect
        }
        if st.queue.len() >= st.capacity {
            st.lost += 1;
            return false;
        }
        st.queue.push_back(n);
        true
    }

    /// The handler thread's loop: runs queued handlers whenever notifications are unblocked,
    /// until `stop` is set (then call [`Notifier::wake`]).
    pub fn run_handlers(&self, stop: &std::sync::atomic::AtomicBool) {
        let mut st = self.lock();
        loop {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if st.depth == 0 && !st.running && !st.queue.is_empty() {
                st = self.drain(st);
                // What the handlers did may be what a thread of this process sleeps for.
                crate::wait::ring_local();
                continue;
            }
            st = self
                .cv
                .wait_timeout(st, std::time::Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Wakes the handler thread (to see `stop`).
    pub fn wake(&self) {
        let _st = self.lock();
        self.cv.notify_all();
    }

    /// Runs queued handlers in order while unblocked and nobody else is running one.
    fn drain<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        // A handler that itself triggers delivery (e.g. poll) must not recurse.
        if self.handler_depth().is_some() {
            return st;
        }
        while st.depth == 0 && !st.running {
            let Some(n) = st.queue.pop_front() else { break };
            let Some(h) = st.handlers.get(&n.buf).cloned() else {
                continue;
            };
            st.running = true;
            drop(st);
            IN_HANDLER.with(|c| c.borrow_mut().push((self.id, 0)));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(n)));
            IN_HANDLER.with(|c| {
                let mut c = c.borrow_mut();
                if let Some(i) = c.iter().rposition(|(id, _)| *id == self.id) {
                    c.remove(i);
                }
            });
            if r.is_err() {
                eprintln!("vmmc: a notification handler for buffer {} panicked", n.buf);
            }
            st = self.lock();
            st.running = false;
            st.delivered += 1;
            self.cv.notify_all();
        }
        st
    }

    /// This thread's nesting inside a handler of this dispatcher, if it runs one.
    fn handler_depth(&self) -> Option<u32> {
        IN_HANDLER.with(|c| {
            c.borrow()
                .iter()
                .rev()
                .find(|(id, _)| *id == self.id)
                .map(|(_, d)| *d)
        })
    }

    /// Applies `f` to this thread's nesting inside a handler of this dispatcher, if it runs
    /// one.
    fn with_handler_depth<R>(&self, f: impl FnOnce(&mut u32) -> R) -> Option<R> {
        IN_HANDLER.with(|c| {
            c.borrow_mut()
                .iter_mut()
                .rev()
                .find(|(id, _)| *id == self.id)
                .map(|(_, d)| f(d))
        })
    }

    /// Blocks notifications (`vmmc_BlockNotifications`). Outside a handler, returns once no
    /// handler is running, so the caller's data is safe from handlers until it unblocks.
    pub fn block(&self) {
        if self.with_handler_depth(|d| *d += 1).is_some() {
            return;
        }
        let mut st = self.lock();
        st.depth += 1;
        while st.running {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Unblocks conditionally (`vmmc_UnblockNotifications`): `Ok(1)` when notifications are
    /// now unblocked (queued ones have been delivered), `Ok(0)` when still nested.
    pub fn unblock(&self) -> Result<i32> {
        let in_handler = self.with_handler_depth(|d| {
            if *d == 0 {
                Err(Error::UnblockInHandler)
            } else {
                *d -= 1;
                Ok(0)
            }
        });
        if let Some(r) = in_handler {
            return r;
        }
        let mut st = self.lock();
        if st.depth == 0 {
            return Ok(1);
        }
        st.depth -= 1;
        if st.depth > 0 {
            return Ok(0);
        }
        let mut st = self.drain(st);
        let lost = std::mem::take(&mut st.lost);
        if lost > 0 {
            return Err(Error::NotifyOverflow(lost));
        }
        Ok(1)
    }

    /// Runs `f` holding the dispatcher's lock (tests).
    #[doc(hidden)]
    pub fn hold_lock(&self, f: &mut dyn FnMut()) {
        let _g = self.lock();
        f()
    }

    /// Notifications queued (blocked) and lost so far but not yet reported.
    pub fn pending(&self) -> (usize, u64) {
        let st = self.lock();
        (st.queue.len(), st.lost)
    }

    /// Current nesting depth of blocking outside handlers.
    pub fn depth(&self) -> u32 {
        self.lock().depth
    }

    /// Notifications lost to overflow and not yet reported.
    pub fn take_lost(&self) -> u64 {
        std::mem::take(&mut self.lock().lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn n(buf: BufId, value: u32) -> Notification {
        Notification {
            buf,
            offset: 0,
            value,
        }
    }

    #[test]
    fn blocked_notifications_queue_in_order_and_nest() {
        let nt = Arc::new(Notifier::new(8));
        let seen = Arc::new(Mutex::new(vec![]));
        let s = seen.clone();
        nt.set_handler(
            1,
            Some(Arc::new(move |x: Notification| {
                s.lock().unwrap().push(x.value)
            })),
        );
        nt.deliver(n(2, 9)); // no handler: no effect
        nt.deliver(n(1, 1));
        nt.block();
        nt.block();
        nt.deliver(n(1, 2));
        nt.deliver(n(1, 3));
        assert_eq!(*seen.lock().unwrap(), vec![1]);
        assert_eq!(nt.unblock().unwrap(), 0);
        assert_eq!(*seen.lock().unwrap(), vec![1]);
        assert_eq!(nt.unblock().unwrap(), 1);
        assert_eq!(*seen.lock().unwrap(), vec![1, 2, 3]);
        assert_eq!(nt.unblock().unwrap(), 1, "unblocked: no effect, positive");
    }

    #[test]
    fn overflow_is_reported_not_silent() {
        let nt = Notifier::new(2);
        let count = Arc::new(AtomicU32::new(0));
        let c = count.clone();
        nt.set_handler(
            1,
            Some(Arc::new(move |_| {
                c.fetch_add(1, Ordering::SeqCst);
            })),
        );
        nt.block();
        for v in 0..5 {
            nt.deliver(n(1, v));
        }
        assert!(matches!(nt.unblock(), Err(Error::NotifyOverflow(3))));
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(nt.depth(), 0);
    }

    #[test]
    fn unconditional_unblock_in_handler_is_an_error() {
        let nt = Arc::new(Notifier::new(8));
        let results = Arc::new(Mutex::new(vec![]));
        let (r, nt2) = (results.clone(), nt.clone());
        nt.set_handler(
            1,
            Some(Arc::new(move |_| {
                nt2.block();
                let paired = nt2.unblock();
                let extra = nt2.unblock();
                r.lock()
                    .unwrap()
                    .push((paired.ok(), extra.err().map(|e| e.code())));
            })),
        );
        nt.deliver(n(1, 0));
        assert_eq!(
            *results.lock().unwrap(),
            vec![(Some(0), Some(Error::UnblockInHandler.code()))]
        );
    }

    #[test]
    fn handlers_never_overlap_and_block_waits_for_a_running_one() {
        let nt = Arc::new(Notifier::new(10_000));
        let inside = Arc::new(AtomicU32::new(0));
        let overlap = Arc::new(AtomicU32::new(0));
        let (i, o) = (inside.clone(), overlap.clone());
        nt.set_handler(
            1,
            Some(Arc::new(move |_| {
                if i.fetch_add(1, Ordering::SeqCst) != 0 {
                    o.fetch_add(1, Ordering::SeqCst);
                }
                std::hint::black_box((0..100).sum::<u32>());
                i.fetch_sub(1, Ordering::SeqCst);
            })),
        );
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let nt = nt.clone();
                std::thread::spawn(move || {
                    for v in 0..500 {
                        nt.deliver(n(1, v));
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            nt.block();
            assert_eq!(
                inside.load(Ordering::SeqCst),
                0,
                "a handler ran while blocked"
            );
            nt.unblock().unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        nt.block();
        nt.unblock().unwrap();
        assert_eq!(overlap.load(Ordering::SeqCst), 0);
        assert_eq!(nt.delivered(), 2000);
    }

    #[test]
    fn in_handler_state_belongs_to_its_endpoint() {
        // A handler of one endpoint that blocks and unblocks another endpoint's notifications
        // acts on that endpoint, not on its own handler nesting.
        let a = Arc::new(Notifier::new(8));
        let b = Arc::new(Notifier::new(8));
        let seen_b = Arc::new(AtomicU32::new(0));
        let sb = seen_b.clone();
        b.set_handler(
            1,
            Some(Arc::new(move |_| {
                sb.fetch_add(1, Ordering::SeqCst);
            })),
        );
        let results = Arc::new(Mutex::new(vec![]));
        let (r, b2) = (results.clone(), b.clone());
        a.set_handler(
            1,
            Some(Arc::new(move |_| {
                b2.block();
                let depth = b2.depth();
                b2.deliver(n(1, 5)); // queued: b is blocked
                let queued = b2.pending().0;
                let unblocked = b2.unblock().map_err(|e| e.code());
                b2.deliver(n(1, 6)); // b is unblocked: its handler runs here
                r.lock().unwrap().push((depth, queued, unblocked));
            })),
        );
        a.deliver(n(1, 0));
        assert_eq!(*results.lock().unwrap(), vec![(1, 1, Ok(1))]);
        assert_eq!(seen_b.load(Ordering::SeqCst), 2, "b's handlers ran");
        assert_eq!(b.depth(), 0);
    }
}
