//! The deliberate- and automatic-update fast paths allocate nothing and take no lock.
//!
//! A counting global allocator counts the allocations of the measuring thread; another thread
//! holds every lock of the endpoint and the transport while the fast paths run, so a lock on
//! them would deadlock (and the bounded wait below would fail the test instead of hanging).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmmc::bootstrap::BootEnv;
use vmmc::{AuOptions, Endpoint, ExportOptions, MemKind, WriteOpts};

struct Counting;

thread_local! {
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local Cell that does not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocations() -> u64 {
    COUNT.with(|c| c.get())
}

fn endpoint() -> Endpoint {
    let env = BootEnv::from_lookup(&|_| None).expect("a job of one");
    Endpoint::new(Arc::new(
        vmmc_shm::ShmTransport::connect(&env).expect("connect"),
    ))
    .expect("endpoint")
}

#[test]
fn du_and_au_fast_paths_neither_allocate_nor_lock() {
    let ep = endpoint();
    let shared = ep.alloc(64 * 1024, MemKind::Shared).unwrap();
    let private = ep.alloc(4096, MemKind::Private).unwrap();
    ep.export(1, &shared, ExportOptions::new().handler(|_| {}))
        .unwrap();
    ep.export(2, &private, ExportOptions::new()).unwrap();
    let p = ep.import(ep.me(), 1).unwrap();
    let q = ep.import(ep.me(), 2).unwrap();
    let au = p.bind(AuOptions::default()).unwrap();
    let auc = p
        .bind_region(
            ep.alloc(256, MemKind::Private).unwrap(),
            4096,
            AuOptions {
                combining: true,
                notify: false,
            },
        )
        .unwrap();
    let data = vec![7u8; 4096];
    let addr = p.dest_addr();

    let run = || {
        for i in 0..1000u32 {
            p.send(0, &data).unwrap();
            p.send(8, &i.to_ne_bytes()).unwrap();
            ep.send_at(addr + 16, &data[..64], WriteOpts::default())
                .unwrap();
            au.store_u32(32, i).unwrap();
            au.write(64, &data[..128]).unwrap();
            for w in 0..64 {
                auc.store_u32(4 * w, i).unwrap();
            }
            auc.flush().unwrap();
        }
    };
    run(); // warm up (thread-local state, first-touch page faults)

    let before = allocations();
    run();
    assert_eq!(allocations() - before, 0, "the fast paths allocated");
    // The system-call path (process memory) allocates nothing either.
    let before = allocations();
    for i in 0..100u32 {
        q.send(0, &i.to_ne_bytes()).unwrap();
    }
    assert_eq!(
        allocations() - before,
        0,
        "the process_vm_writev path allocated"
    );

    // No lock: run the fast paths while another thread holds every lock.
    let stage = Arc::new(AtomicU32::new(0));
    let finished_under_locks = std::thread::scope(|s| {
        let st = stage.clone();
        let ep2 = ep.clone();
        let holder = s.spawn(move || {
            let mut ok = false;
            ep2.hold_locks_for_test(&mut || {
                st.store(1, Ordering::SeqCst);
                let t = Instant::now();
                while st.load(Ordering::SeqCst) != 2 && t.elapsed() < Duration::from_secs(20) {
                    std::thread::yield_now();
                }
                ok = st.load(Ordering::SeqCst) == 2;
            });
            ok
        });
        while stage.load(Ordering::SeqCst) != 1 {
            std::thread::yield_now();
        }
        run();
        stage.store(2, Ordering::SeqCst);
        holder.join().unwrap()
    });
    assert!(finished_under_locks, "a fast path waited for a lock");
    assert_eq!(shared.load_u32(8).unwrap(), 999);
    assert_eq!(shared.load_u32(4096 + 252).unwrap(), 999);
}

#[test]
fn a_combining_store_larger_than_a_packet_arrives_whole() {
    let ep = endpoint();
    let buf = ep.alloc(3 * 4096 + 64, MemKind::Shared).unwrap();
    ep.export(7, &buf, ExportOptions::new()).unwrap();
    let p = ep.import(ep.me(), 7).unwrap();
    let au = p
        .bind(AuOptions {
            combining: true,
            notify: false,
        })
        .unwrap();
    // Two and a half pages, then a flag right after them: the pages leave as packets, the
    // tail combines with the flag.
    let data: Vec<u8> = (0..10_240u32).map(|i| (i * 31) as u8).collect();
    au.write(4, &data).unwrap();
    au.store_u32(4 + data.len(), 0xf1a9).unwrap();
    au.flush().unwrap();
    let mut got = vec![0u8; data.len()];
    buf.read(4, &mut got).unwrap();
    assert!(got == data, "combined data differs");
    assert_eq!(buf.load_u32(4 + data.len()).unwrap(), 0xf1a9);
}
