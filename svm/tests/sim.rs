//! The shared space on the simulated SHRIMP: every node a thread with its own copy of the
//! space, automatic update through the modelled snooping hardware, faults charged.

mod common;

use svm::{Protocol, Svm};
use vmmc_sim::{Outcome, Params, Sim};

fn on_sim(nodes: usize, p: Protocol) -> (Vec<svm::Stats>, vmmc_sim::RunStats) {
    let sim = Sim::new(nodes, Params::default()).expect("sim");
    let out = sim.run(|ep| {
        let mut s = Svm::new(ep, common::config(p)).expect("space");
        common::all(&mut s).expect("scenarios");
        let st = s.stats();
        s.finish().expect("finish");
        st
    });
    let stats = out
        .into_iter()
        .enumerate()
        .map(|(r, o)| match o {
            Outcome::Returned(s) => s,
            other => panic!("{p} on {nodes} nodes: node {r} {other:?}"),
        })
        .collect();
    (stats, sim.stats())
}

fn check(nodes: usize, p: Protocol) {
    let (st, sim) = on_sim(nodes, p);
    let faults: u64 = st.iter().map(|s| s.read_faults + s.write_faults).sum();
    assert_eq!(sim.total.access_faults, faults, "every fault is charged");
    match p {
        Protocol::Hlrc => {
            assert!(st.iter().any(|s| s.diffs_created > 0));
            assert_eq!(sim.total.au_stores, 0, "HLRC uses no automatic update");
        }
        Protocol::HlrcAu => assert!(sim.total.au_stores > 0 && st.iter().any(|s| s.twins > 0)),
        Protocol::Aurc => {
            assert!(sim.total.au_stores > 0);
            assert!(st.iter().all(|s| s.twins == 0 && s.diffs_created == 0));
        }
    }
    // Page requests, lock requests and diffs raise notifications (seed 001 Table 3).
    assert!(sim.total.notifications > 0);
}

#[test]
fn hlrc_on_4_nodes() {
    check(4, Protocol::Hlrc);
}
#[test]
fn hlrc_au_on_4_nodes() {
    check(4, Protocol::HlrcAu);
}
#[test]
fn aurc_on_4_nodes() {
    check(4, Protocol::Aurc);
}
#[test]
fn hlrc_on_16_nodes() {
    check(16, Protocol::Hlrc);
}
#[test]
fn hlrc_au_on_16_nodes() {
    check(16, Protocol::HlrcAu);
}
#[test]
fn aurc_on_16_nodes() {
    check(16, Protocol::Aurc);
}

/// Runs `scenario` under every protocol on 2 and 3 nodes; a run that has not ended within
/// two minutes of host time fails the test (a hang is the failure it looks for).
fn flags(scenario: fn(&mut Svm) -> svm::Result<()>) {
    for p in Protocol::ALL {
        for nodes in [2, 3] {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let sim = Sim::new(nodes, Params::default()).expect("sim");
                let out = sim.run(|ep| {
                    let mut s = Svm::new(ep, common::config(p)).expect("space");
                    scenario(&mut s).expect("scenario");
                    s.finish().expect("finish");
                });
                let _ = tx.send(out);
            });
            let out = rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("{p} on {nodes} nodes: no end ({e})"));
            for (r, o) in out.iter().enumerate() {
                assert!(
                    matches!(o, Outcome::Returned(())),
                    "{p} on {nodes} nodes: node {r} {o:?}"
                );
            }
        }
    }
}

/// A node waits on a flag it set itself, the flag's manager being another node.
#[test]
fn a_flag_setter_waits_on_its_own_flag_on_sim() {
    flags(common::flag_own_set);
}

/// A flag wait sees the writes before the flag's largest set, not only before its last.
#[test]
fn a_flag_wait_sees_the_largest_set_on_sim() {
    flags(common::flag_largest_set_wins);
}

/// A node that dies is reported to the others, in virtual time too.
#[test]
fn a_dead_node_is_reported_on_sim() {
    let sim = Sim::new(4, Params::default()).expect("sim");
    let out = sim.run(|ep| {
        let mut s = Svm::new(ep, common::config(Protocol::Aurc)).expect("space");
        s.barrier().expect("barrier");
        if s.rank() == 3 {
            vmmc::conformance::die();
        }
        let e = s.barrier().unwrap_err();
        assert!(matches!(e, svm::Error::PeerLost(3, _)), "{e}");
    });
    let died = out.iter().filter(|o| matches!(o, Outcome::Died)).count();
    let ok = out
        .iter()
        .filter(|o| matches!(o, Outcome::Returned(())))
        .count();
    assert_eq!((died, ok), (1, 3), "{out:?}");
}
