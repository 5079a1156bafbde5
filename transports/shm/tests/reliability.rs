//! Failure modes of the shm transport that must neither wedge nor leak (issue 24): a full
//! notification ring is back-pressure the sender sees at once, and an import request dropped
//! before it completes leaves nothing behind, here or at the rendezvous.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, Error, ExportOptions, MemKind};
use vmmc_shm::shmem::RING_CAP;
use vmmc_shm::ShmTransport;

/// The tests of this file count the process's descriptors: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn solo() -> (Arc<ShmTransport>, Endpoint) {
    let env = BootEnv::from_lookup(&|_| None).unwrap();
    let t = Arc::new(ShmTransport::connect(&env).unwrap());
    let ep = Endpoint::new(t.clone()).unwrap();
    (t, ep)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A watchdog: the test fails (instead of hanging the suite) if `what` has not finished in
/// `limit`.
fn within<R: Send + 'static>(limit: Duration, what: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(what());
    });
    rx.recv_timeout(limit)
        .expect("the operation hung (it must return, not wait)")
}

#[test]
fn send_notify_on_a_full_ring_returns_would_block() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_t, ep) = solo();
    let r = ep.alloc(4096, MemKind::Shared).unwrap();
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    ep.export(
        1,
        &r,
        ExportOptions::new().handler(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .unwrap();
    let p = ep.import(ep.me(), 1).unwrap();
    let ep2 = ep.clone();
    let (queued, refused_at, data_landed) = within(Duration::from_secs(30), move || {
        let mut out = (0u32, None, false);
        // Holding the transport's locks keeps its notification thread from draining the
        // ring, as a receiver that does not get the CPU would.
        ep2.hold_locks_for_test(&mut || {
            for i in 0..(RING_CAP as u32 + 8) {
                match p.send_notify(0, &(i + 1).to_ne_bytes()) {
                    Ok(()) => out.0 += 1,
                    Err(Error::WouldBlock) => {
                        out.1 = Some(i);
                        out.2 = r.load_u32(0).unwrap() == i + 1;
                        break;
                    }
                    Err(e) => panic!("send_notify: {e}"),
                }
            }
        });
        // Room again: the notification that was refused is posted by itself.
        let v = out.1.unwrap_or(0) + 1;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match p.notify(0, &v.to_ne_bytes()) {
                Ok(()) => break,
                Err(Error::WouldBlock) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("notify after room was made: {e}"),
            }
        }
        out
    });
    assert_eq!(
        queued as usize, RING_CAP,
        "a lane holds RING_CAP notifications"
    );
    assert_eq!(refused_at, Some(RING_CAP as u32));
    assert!(data_landed, "the refused send's data landed");
    let want = RING_CAP as u32 + 1;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.load(Ordering::SeqCst) < want && Instant::now() < deadline {
        ep.poll_notifications(Some(Duration::from_millis(10)))
            .unwrap();
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        want,
        "every notification delivered"
    );
}

#[test]
fn dropped_import_requests_leave_nothing_behind() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (t, ep) = solo();
    let r = ep.alloc(4096, MemKind::Shared).unwrap();
    ep.export(1, &r, ExportOptions::new()).unwrap();
    drop(ep.import(ep.me(), 1).unwrap()); // the owner's ring is mapped once and kept
    let before = open_fds();
    for i in 0..50u32 {
        // Dropped while the buffer is not exported yet: the rendezvous must not grant it
        // later into a table nobody reads.
        let waiting = ep.import_async(ep.me(), 100 + i).unwrap();
        drop(waiting);
        let b = ep.alloc(4096, MemKind::Shared).unwrap();
        ep.export(100 + i, &b, ExportOptions::new()).unwrap();
        // Dropped after its grant may have arrived.
        let granted = ep.import_async(ep.me(), 100 + i).unwrap();
        drop(granted);
        ep.unexport(100 + i).unwrap();
    }
    // One more round trip: every reply sent before it has been read.
    drop(ep.import(ep.me(), 1).unwrap());
    assert_eq!(t.import_requests_kept(), 0, "import requests kept");
    assert_eq!(open_fds(), before, "descriptors of dropped grants leaked");
}
