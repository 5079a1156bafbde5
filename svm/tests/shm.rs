//! The shared space across real processes over shared memory, under every protocol.

mod common;

use std::time::Duration;
use svm::{Config, Error, Placement, Protocol, Svm};
use vmmc_run::testing::Job;

fn space(p: Protocol) -> Svm {
    let ep = vmmc_run::init().expect("join the job");
    Svm::new(ep, common::config(p).with_env().expect("config")).expect("set up the space")
}

fn every_scenario(name: &str, ranks: usize, p: Protocol) {
    Job::new(name, ranks)
        .limit(Duration::from_secs(240))
        .run_ok(|| {
            let mut s = space(p);
            common::all(&mut s).expect("scenarios");
            println!("node {}: {}", s.rank(), s.stats());
            s.finish().expect("finish");
        });
}

#[test]
fn hlrc_on_2_processes() {
    every_scenario("hlrc_on_2_processes", 2, Protocol::Hlrc);
}
#[test]
fn hlrc_au_on_2_processes() {
    every_scenario("hlrc_au_on_2_processes", 2, Protocol::HlrcAu);
}
#[test]
fn aurc_on_2_processes() {
    every_scenario("aurc_on_2_processes", 2, Protocol::Aurc);
}
#[test]
fn hlrc_on_4_processes() {
    every_scenario("hlrc_on_4_processes", 4, Protocol::Hlrc);
}
#[test]
fn hlrc_au_on_4_processes() {
    every_scenario("hlrc_au_on_4_processes", 4, Protocol::HlrcAu);
}
#[test]
fn aurc_on_4_processes() {
    every_scenario("aurc_on_4_processes", 4, Protocol::Aurc);
}

fn flags(name: &str, scenario: fn(&mut Svm) -> svm::Result<()>) {
    for p in Protocol::ALL {
        for ranks in [2, 3] {
            Job::new(name, ranks)
                .limit(Duration::from_secs(60))
                .env("SVM_PROTOCOL", p.name())
                .run_ok(|| {
                    let mut s = space(p);
                    scenario(&mut s).expect("scenario");
                    s.finish().expect("finish");
                });
        }
    }
}

/// A node waits on a flag it set itself, the flag's manager being another node.
#[test]
fn a_flag_setter_waits_on_its_own_flag() {
    flags("a_flag_setter_waits_on_its_own_flag", common::flag_own_set);
}

/// A flag wait sees the writes before the flag's largest set, not only before its last.
#[test]
fn a_flag_wait_sees_the_largest_set() {
    flags(
        "a_flag_wait_sees_the_largest_set",
        common::flag_largest_set_wins,
    );
}

/// The protocol comes from the environment: the same code under each.
#[test]
fn protocol_chosen_at_run_time() {
    for p in Protocol::ALL {
        let o = Job::new("protocol_chosen_at_run_time", 2)
            .env("SVM_PROTOCOL", p.name())
            .run_ok(|| {
                let ep = vmmc_run::init().expect("join");
                let mut s =
                    Svm::new(ep, Config::from_env().expect("env").space(1 << 20)).expect("space");
                println!("protocol={}", s.protocol());
                common::barrier_rounds(&mut s).expect("barrier rounds");
                s.finish().expect("finish");
            });
        assert!(
            o.stdout.contains(&format!("protocol={}", p.name())),
            "{}",
            o.report()
        );
    }
}

/// Clear errors: out of space, a lock or flag out of range, a release of a lock not held,
/// and mismatched collective calls (which every node reports, nobody hangs).
#[test]
fn bad_calls_are_clear_errors() {
    Job::new("bad_calls_are_clear_errors", 2).run_ok(|| {
        let mut s = space(Protocol::Hlrc);
        let e = s.alloc::<u64>(1 << 30, Placement::RoundRobin).unwrap_err();
        assert!(matches!(e, Error::OutOfSpace { .. }), "{e}");
        assert!(e.to_string().contains("SVM_SPACE"), "{e}");
        assert!(matches!(s.acquire(1 << 20), Err(Error::LockOutOfRange(..))));
        assert!(matches!(s.release(5), Err(Error::NotHeld(5))));
        assert!(matches!(
            s.flag_set(1 << 20, 1),
            Err(Error::FlagOutOfRange(..))
        ));
        // A length whose whole pages overflow the address space (once a panic in debug
        // builds and, wrapped in release builds, an attempt at 2^52 pages).
        let e = s
            .alloc::<u8>(usize::MAX - 1, Placement::RoundRobin)
            .unwrap_err();
        assert!(matches!(e, Error::OutOfSpace { .. }), "{e}");
        let a = s.alloc::<u32>(10, Placement::RoundRobin).unwrap();
        assert!(matches!(s.view(a).get(10), Err(Error::OutOfBounds { .. })));
        assert!(s.home_of(&a, 9).unwrap() < s.size());
        for i in [10, usize::MAX / 2] {
            let e = s.home_of(&a, i).unwrap_err();
            assert!(
                matches!(e, Error::OutOfBounds { index, .. } if index == i),
                "{e}"
            );
        }
        // Node 0 allocates 100 elements, node 1 200: both hear of it.
        let n = if s.rank() == 0 { 100 } else { 200 };
        let e = s.alloc::<u32>(n, Placement::RoundRobin).unwrap_err();
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
        // And a barrier against an allocation.
        let e = if s.rank() == 0 {
            s.barrier().unwrap_err()
        } else {
            s.alloc::<u8>(1, Placement::Node(0)).unwrap_err()
        };
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
        s.barrier().expect("the space goes on after a mismatch");
        s.finish().expect("finish");
    });
}

/// A node that dies is reported to the others, who do not hang.
#[test]
fn a_dead_node_is_reported() {
    let o = Job::new("a_dead_node_is_reported", 3)
        .limit(Duration::from_secs(60))
        .run(|| {
            let mut s = space(Protocol::Hlrc);
            let a = s.alloc::<u32>(4096, Placement::RoundRobin).expect("alloc");
            s.barrier().expect("barrier");
            if s.rank() == 2 {
                vmmc::conformance::die();
            }
            // Node 1 waits for a lock whose token is at the dead node; node 0 in a barrier.
            let e = if s.rank() == 1 {
                s.view(a).set(0, 1).expect("write");
                let ep = s.endpoint().clone();
                let victim = ep.proc_of(2).expect("rank 2");
                while ep.peer_alive(victim) {
                    std::thread::yield_now();
                }
                s.acquire(2).unwrap_err()
            } else {
                s.barrier().unwrap_err()
            };
            assert!(matches!(e, Error::PeerLost(..)), "{e}");
            println!("node {} saw: {e}", s.rank());
        });
    assert_eq!(o.ranks_ok(), 2, "{}", o.report());
    assert!(o.stdout.contains("is lost"), "{}", o.report());
}

/// A node that computes outside the library still serves: a page request and a lock request
/// reach it by notification (seed 001 Table 3; on shm after a short delay, in case it comes
/// back in first), and the requester does not wait for the node's next call. Node 0 says,
/// through a raw VMMC word, that it left the library (a request that comes during a call is
/// served at its end, without a notification), then computes until node 1 says, through
/// another, that both were served.
#[test]
fn a_node_outside_the_library_is_notified() {
    for p in Protocol::ALL {
        Job::new("a_node_outside_the_library_is_notified", 2)
            .limit(Duration::from_secs(120))
            .env("SVM_PROTOCOL", p.name())
            .run_ok(|| {
                let mut s = space(p);
                let ep = s.endpoint().clone();
                let done = ep.alloc(4096, vmmc::MemKind::Shared).expect("alloc");
                ep.export(0x2356_7E01, &done, vmmc::ExportOptions::new())
                    .expect("export");
                let page = s.alloc::<u32>(1024, Placement::Node(0)).expect("alloc");
                if s.rank() == 0 {
                    s.view(page).set(0, 42).expect("write");
                    // Lock 0's token is at node 0.
                    s.acquire(0).expect("acquire");
                    s.release(0).expect("release");
                }
                s.barrier().expect("barrier");
                if s.rank() == 0 {
                    // Out of the library (a request that came during the barrier was served
                    // at its end): node 1 may ask now.
                    ep.import(ep.proc_of(1).expect("rank 1"), 0x2356_7E01)
                        .expect("import")
                        .send(4, &1u32.to_ne_bytes())
                        .expect("out");
                    let t0 = std::time::Instant::now();
                    while done.load_u32(0).expect("word") == 0 {
                        assert!(
                            t0.elapsed() < Duration::from_secs(30),
                            "node 1 was not served while node 0 computed"
                        );
                        std::hint::spin_loop();
                    }
                } else {
                    let rank0 = ep.proc_of(0).expect("rank 0");
                    done.wait_u32(4, |v| v == 1, || ep.check_peer(rank0))
                        .expect("node 0 computes");
                    // The page's home and the lock's token are at node 0, which computes.
                    assert_eq!(s.view(page).get(0).expect("read"), 42);
                    s.acquire(0).expect("acquire");
                    s.release(0).expect("release");
                    let zero = ep.import(ep.proc_of(0).expect("rank 0"), 0x2356_7E01);
                    zero.expect("import")
                        .send(0, &1u32.to_ne_bytes())
                        .expect("done");
                }
                if s.rank() == 1 {
                    let sent = s.stats().notifications_sent;
                    assert!(sent >= 1, "node 1 sent {sent} notifications");
                }
                s.barrier().expect("barrier");
                s.finish().expect("finish");
            });
    }
}
