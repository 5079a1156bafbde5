//! Every mechanism across real processes over shared memory (and over tcp, mpi or rdma with
//! `VMMC_TRANSPORT`, as `scripts/test.sh` runs them).

mod common;

use hamlyn::{Config, Hamlyn};
use std::time::Duration;
use vmmc_run::testing::Job;

fn hamlyn(cfg: Config) -> Hamlyn {
    let ep = vmmc_run::init().expect("join the job");
    Hamlyn::new(ep, cfg).expect("set up the interface")
}

fn job(name: &str, ranks: usize, cfg: fn() -> Config, body: fn(&mut Hamlyn) -> hamlyn::Result<()>) {
    Job::new(name, ranks)
        .limit(Duration::from_secs(60))
        .run_ok(|| {
            let mut h = hamlyn(cfg());
            body(&mut h).expect("scenario");
            println!("rank {}: {:?}", h.rank(), h.stats());
        });
}

#[test]
fn datagram_ping_pong() {
    job(
        "datagram_ping_pong",
        2,
        Config::default,
        common::datagram_ping_pong,
    );
}

#[test]
fn permuted_reassembly() {
    job(
        "permuted_reassembly",
        2,
        common::permuted_config,
        common::permuted_reassembly,
    );
}

#[test]
fn group_receive() {
    job("group_receive", 4, Config::default, common::group_receive);
}

#[test]
fn protection() {
    job("protection", 3, Config::default, common::protection);
}

#[test]
fn tagged_protection() {
    job(
        "tagged_protection",
        2,
        Config::default,
        common::tagged_protection,
    );
}

#[test]
fn tagged_lengths() {
    job("tagged_lengths", 2, Config::default, common::tagged_lengths);
}

#[test]
fn tagged_timeout() {
    job("tagged_timeout", 2, Config::default, common::tagged_timeout);
}

#[test]
fn one_shot() {
    job("one_shot", 2, Config::default, common::one_shot);
}

#[test]
fn nq_wrap() {
    job("nq_wrap", 2, common::small_nq_config, common::nq_wrap);
}

/// 100 MiB in order, every byte checked.
#[test]
fn stream_100_mib() {
    job("stream_100_mib", 2, Config::default, |h| {
        common::stream(h, 100 << 20)
    });
}

/// A sender killed mid-stream is reported; the receiver serves another sender.
#[test]
fn dead_sender() {
    let o = Job::new("dead_sender", 3)
        .limit(Duration::from_secs(60))
        .run(|| {
            let mut h = hamlyn(Config::default());
            common::dead_sender(&mut h).expect("scenario");
        });
    assert_eq!(o.ranks_ok(), 2, "{}", o.report());
    assert!(o.stdout.contains("receiver saw: peer"), "{}", o.report());
}

#[test]
fn dead_sender_unknown_to_receiver() {
    let o = Job::new("dead_sender_unknown_to_receiver", 2)
        .limit(Duration::from_secs(60))
        .run(|| {
            let mut h = hamlyn(Config::default());
            common::dead_sender_unknown_to_receiver(&mut h).expect("scenario");
        });
    assert_eq!(o.ranks_ok(), 1, "{}", o.report());
    assert!(o.stdout.contains("h_recv_block: peer"), "{}", o.report());
}

#[test]
fn bad_input() {
    job("bad_input", 2, Config::default, common::bad_input);
}

#[test]
fn non_blocking_long_send() {
    job(
        "non_blocking_long_send",
        2,
        common::tiny_ring_non_blocking_config,
        common::non_blocking_long_send,
    );
}

#[test]
fn small_stream_buffer() {
    job(
        "small_stream_buffer",
        2,
        Config::default,
        common::small_stream_buffer,
    );
}

#[test]
fn nq_back_pressure() {
    job(
        "nq_back_pressure",
        2,
        common::small_nq_config,
        common::nq_back_pressure,
    );
}

#[test]
fn terminus_back_pressure() {
    job(
        "terminus_back_pressure",
        2,
        common::back_pressure_config,
        |h| common::terminus_back_pressure(h, |h| Ok(Box::new(common::WordStop::new(h)?))),
    );
}

#[test]
fn forged_packets() {
    job("forged_packets", 2, Config::default, common::forged_packets);
}

#[test]
fn blocking_wakeup() {
    job(
        "blocking_wakeup",
        2,
        || Config {
            wakeup: true,
            ..Config::default()
        },
        common::wakeup,
    );
}

#[test]
fn stream_out_of_tickets() {
    job(
        "stream_out_of_tickets",
        2,
        common::non_blocking_config,
        common::stream_out_of_tickets,
    );
}

#[test]
fn stream_grows() {
    job("stream_grows", 2, Config::default, common::stream_grows);
}

#[test]
fn fuzzed_packets() {
    job("fuzzed_packets", 2, Config::default, common::fuzzed_packets);
}
