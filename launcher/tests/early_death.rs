//! A rank that dies before it joins the job (issue 24): the others' bootstrap fails with an
//! error at once instead of waiting for ever for a welcome that cannot come, over shm and tcp.

use std::time::{Duration, Instant};
use vmmc::Error;
use vmmc_run::testing::Job;

fn body() {
    if std::env::var("VMMC_RANK").as_deref() == Ok("2") {
        std::process::abort(); // before joining
    }
    let t0 = Instant::now();
    match vmmc_run::init() {
        Err(Error::Bootstrap(why)) => eprintln!("bootstrap refused: {why}"),
        other => panic!("joined a job that lost a rank: {:?}", other.map(|_| ())),
    }
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

fn run(name: &str, transport: &str) {
    let o = Job::new(name, 3)
        .env("VMMC_TRANSPORT", transport)
        .limit(Duration::from_secs(60))
        .run(body);
    assert!(!o.status.success(), "{}", o.report());
    assert_eq!(o.ranks_ok(), 2, "{}", o.report());
}

#[test]
fn a_rank_dead_before_joining_fails_the_start_over_shm() {
    run("a_rank_dead_before_joining_fails_the_start_over_shm", "shm");
}

#[test]
fn a_rank_dead_before_joining_fails_the_start_over_tcp() {
    run("a_rank_dead_before_joining_fails_the_start_over_tcp", "tcp");
}
