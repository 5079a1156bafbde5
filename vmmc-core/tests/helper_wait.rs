//! A helper thread's wait (a transport's notification thread) sleeps at once where processes
//! outnumber cores, while a program thread's wait yields its core first. Its own test binary:
//! the crowded policy it sets is the whole process's.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::wait::{counts, crowded, set_local_procs, Bell, Site, Wait};

static HELPER: Site = Site::new("test.helper");
static PROGRAM: Site = Site::new("test.program");

/// Waits on a bell at `site` until a flag is set: by the test, once the waiter sleeps or
/// after 20 ms. Returns whether the wait slept.
fn wait_once(site: &'static Site, helper: bool) -> bool {
    let bell = Arc::new(Bell::new());
    let flag = Arc::new(AtomicU32::new(0));
    let (b, f) = (bell.clone(), flag.clone());
    let h = std::thread::spawn(move || {
        let w = Wait::on(site, &*b);
        let mut w = if helper { w.helper() } else { w };
        while f.load(Ordering::Acquire) == 0 {
            w.idle();
        }
        w.slept()
    });
    let t0 = Instant::now();
    while bell.sleepers() == 0 && t0.elapsed() < Duration::from_millis(20) {
        std::thread::yield_now();
    }
    flag.store(1, Ordering::Release);
    bell.ring();
    h.join().expect("waiter")
}

fn yields_and_sleeps(name: &str) -> (u64, u64) {
    counts()
        .into_iter()
        .find(|c| c.name == name)
        .map_or((0, 0), |c| (c.yields, c.sleeps))
}

#[test]
fn on_a_crowded_machine_a_helper_sleeps_at_once_and_a_program_thread_yields() {
    // Far more processes than any machine here has cores.
    set_local_procs(4096);
    assert!(crowded(), "the policy did not take the process count");
    assert!(wait_once(&HELPER, true), "the helper's wait did not sleep");
    let (yields, sleeps) = yields_and_sleeps("test.helper");
    assert!(sleeps >= 1, "helper: {sleeps} sleeps");
    assert_eq!(
        yields, 0,
        "the helper yielded {yields} times before it slept"
    );
    // A program thread's wait yields for its first 2 ms.
    wait_once(&PROGRAM, false);
    let (yields, _) = yields_and_sleeps("test.program");
    assert!(yields > 0, "the program thread's wait never yielded");
}
