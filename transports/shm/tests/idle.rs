//! An idle endpoint waiting for notifications sleeps (futex) after a short spin: it must not
//! burn a core. The observation window is a sleep on purpose: nothing is synchronised by it,
//! the test measures what the notification thread costs while nothing happens.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, ExportOptions, MemKind};

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills a plain struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn an_idle_notification_thread_sleeps_and_still_wakes() {
    let env = BootEnv::from_lookup(&|_| None).unwrap();
    let ep = Endpoint::new(Arc::new(vmmc_shm::ShmTransport::connect(&env).unwrap())).unwrap();
    let r = ep.alloc(4096, MemKind::Shared).unwrap();
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    ep.export(
        1,
        &r,
        ExportOptions::new().handler(move |n| g.store(n.value, Ordering::SeqCst)),
    )
    .unwrap();
    let before = cpu_time();
    std::thread::sleep(Duration::from_millis(800));
    let used = cpu_time() - before;
    assert!(
        used < Duration::from_millis(80),
        "idle endpoint used {used:?} of CPU in 800 ms"
    );
    // And a notification still wakes it.
    let p = ep.import(ep.me(), 1).unwrap();
    p.send_notify(0, &77u32.to_ne_bytes()).unwrap();
    let t = std::time::Instant::now();
    while got.load(Ordering::SeqCst) != 77 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the sleeping notification thread never woke"
        );
        std::thread::yield_now();
    }
}
