//! Several threads of one process talk to the trusted party at once: a blocking import that
//! waits for a late export must not hold up the other threads' requests.

use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, ExportOptions, MemKind};

#[test]
fn a_waiting_import_does_not_block_other_threads() {
    let env = BootEnv::from_lookup(&|_| None).unwrap();
    let ep = Endpoint::new(Arc::new(vmmc_shm::ShmTransport::connect(&env).unwrap())).unwrap();
    let me = ep.me();
    let waiter = {
        let ep = ep.clone();
        std::thread::spawn(move || ep.import(me, 99).map(|p| p.len()))
    };
    // A regression would deadlock: watch the rest from another thread with a time limit.
    let (tx, rx) = std::sync::mpsc::channel();
    let ep2 = ep.clone();
    std::thread::spawn(move || {
        rest(&ep2, waiter);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("a waiting import held up the other threads' requests");
}

fn rest(ep: &Endpoint, waiter: std::thread::JoinHandle<vmmc::Result<usize>>) {
    let me = ep.me();
    // Exports and a second import from this thread go through while the first waits.
    let a = ep.alloc(64, MemKind::Shared).unwrap();
    ep.export(98, &a, ExportOptions::new()).unwrap();
    let p = ep.import(me, 98).unwrap();
    assert_eq!(p.len(), 64);
    let mut pending = ep.import_async(me, 97).unwrap();
    assert!(pending.status().unwrap().is_none());
    // Now satisfy both waiting imports.
    let b = ep.alloc(128, MemKind::Shared).unwrap();
    ep.export(99, &b, ExportOptions::new()).unwrap();
    let c = ep.alloc(32, MemKind::Private).unwrap();
    ep.export(97, &c, ExportOptions::new()).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), 128);
    let t = Instant::now();
    let q = loop {
        if let Some(q) = pending.status().unwrap() {
            break q;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "asynchronous import never completed"
        );
        std::thread::yield_now();
    };
    assert_eq!(q.len(), 32);
}
