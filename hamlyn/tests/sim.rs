//! Every mechanism on the simulated SHRIMP: each node a thread in virtual time.

mod common;

use hamlyn::{Config, Hamlyn};
use vmmc_sim::{Outcome, Params, Sim};

fn on_sim(
    nodes: usize,
    cfg: Config,
    body: impl Fn(&mut Hamlyn) -> hamlyn::Result<()> + Sync,
) -> Vec<Outcome<()>> {
    let sim = Sim::new(nodes, Params::default()).expect("sim");
    sim.run(|ep| {
        let mut h = Hamlyn::new(ep, cfg.clone()).expect("interface");
        body(&mut h).unwrap_or_else(|e| panic!("rank {}: {e}", h.rank()));
    })
}

fn all_ok(out: Vec<Outcome<()>>) {
    for (r, o) in out.iter().enumerate() {
        assert!(matches!(o, Outcome::Returned(())), "node {r}: {o:?}");
    }
}

#[test]
fn datagram_ping_pong() {
    all_ok(on_sim(2, Config::default(), common::datagram_ping_pong));
}

#[test]
fn permuted_reassembly() {
    all_ok(on_sim(
        2,
        common::permuted_config(),
        common::permuted_reassembly,
    ));
}

#[test]
fn group_receive() {
    all_ok(on_sim(4, Config::default(), common::group_receive));
}

#[test]
fn protection() {
    all_ok(on_sim(3, Config::default(), common::protection));
}

#[test]
fn tagged_protection() {
    all_ok(on_sim(2, Config::default(), common::tagged_protection));
}

#[test]
fn tagged_lengths() {
    all_ok(on_sim(2, Config::default(), common::tagged_lengths));
}

#[test]
fn one_shot() {
    all_ok(on_sim(2, Config::default(), common::one_shot));
}

#[test]
fn nq_wrap() {
    all_ok(on_sim(2, common::small_nq_config(), common::nq_wrap));
}

#[test]
fn stream_8_mib() {
    all_ok(on_sim(2, Config::default(), |h| common::stream(h, 8 << 20)));
}

#[test]
fn dead_sender() {
    let out = on_sim(3, Config::default(), common::dead_sender);
    let died = out.iter().filter(|o| matches!(o, Outcome::Died)).count();
    assert_eq!(died, 1, "{out:?}");
    assert!(matches!(out[0], Outcome::Returned(())), "{out:?}");
    assert!(matches!(out[2], Outcome::Returned(())), "{out:?}");
}

#[test]
fn dead_sender_unknown_to_receiver() {
    let out = on_sim(
        2,
        Config::default(),
        common::dead_sender_unknown_to_receiver,
    );
    assert!(matches!(out[0], Outcome::Returned(())), "{out:?}");
    assert!(matches!(out[1], Outcome::Died), "{out:?}");
}

#[test]
fn bad_input() {
    all_ok(on_sim(2, Config::default(), common::bad_input));
}

#[test]
fn non_blocking_long_send() {
    all_ok(on_sim(
        2,
        common::tiny_ring_non_blocking_config(),
        common::non_blocking_long_send,
    ));
}

#[test]
fn small_stream_buffer() {
    all_ok(on_sim(2, Config::default(), common::small_stream_buffer));
}

#[test]
fn nq_back_pressure() {
    all_ok(on_sim(
        2,
        common::small_nq_config(),
        common::nq_back_pressure,
    ));
}

#[test]
fn tagged_timeout() {
    all_ok(on_sim(2, Config::default(), common::tagged_timeout));
}

#[test]
fn forged_packets() {
    all_ok(on_sim(2, Config::default(), common::forged_packets));
}

#[test]
fn terminus_back_pressure() {
    let stop = std::sync::atomic::AtomicUsize::new(0);
    all_ok(on_sim(2, common::back_pressure_config(), |h| {
        common::terminus_back_pressure(h, |_| Ok(Box::new(&stop)))
    }));
}

#[test]
fn stream_out_of_tickets() {
    all_ok(on_sim(
        2,
        common::non_blocking_config(),
        common::stream_out_of_tickets,
    ));
}

#[test]
fn stream_grows() {
    all_ok(on_sim(2, Config::default(), common::stream_grows));
}

#[test]
fn fuzzed_packets() {
    all_ok(on_sim(2, Config::default(), common::fuzzed_packets));
}
