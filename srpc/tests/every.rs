//! SHRIMP RPC across real processes: the stubs stubgen generates from `tests/every.idl`
//! (every type, every direction), between the two ranks of a job started with the launcher
//! (`vmmc-run -n 2 -- <this test binary> --exact <test>`), over automatic and deliberate
//! update bindings; and the errors: a wrong procedure, oversized sequences, a dead server.

#[allow(dead_code, clippy::all)]
#[rustfmt::skip]
#[path = "gen/every.rs"]
mod every;

use every::*;
use srpc::{BSeq, BString, Error, InOut, Mode, Out, ServerBinding};
use std::path::Path;
use std::time::{Duration, Instant};
use vmmc_run::testing::{Job, Output};

/// The server side of every.idl.
struct Impl;

impl EveryServer for Impl {
    fn null(&mut self) {}
    fn add(&mut self, a: i32, b: i32, sum: &mut Out<'_, i64>) {
        sum.set(&(a as i64 + b as i64)).expect("set");
    }
    fn scale(&mut self, v: &mut InOut<'_, [f64; 8]>, k: f64) {
        // Changed in place: it goes back when the procedure returns.
        for x in v.get_mut() {
            *x *= k;
        }
    }
    fn echo_record(&mut self, r: Record, copy: &mut Out<'_, Record>) {
        copy.set(&r).expect("set");
    }
    fn reverse(&mut self, xs: &mut InOut<'_, Ints>) {
        let mut v = xs.get().0.clone();
        v.reverse();
        xs.set(BSeq(v)).expect("set");
    }
    fn greet(
        &mut self,
        name: BString<32>,
        greeting: &mut Out<'_, BString<64>>,
        len: &mut Out<'_, u32>,
    ) {
        let g = format!("hello, {}", name.0);
        len.set(&(g.len() as u32)).expect("set");
        greeting.set(&BString(g)).expect("set");
    }
    fn logic(&mut self, a: bool, b: bool, both: &mut Out<'_, bool>, either: &mut Out<'_, bool>) {
        both.set(&(a && b)).expect("set");
        either.set(&(a || b)).expect("set");
    }
    fn bump(&mut self, _b: &mut InOut<'_, Bytes>) {
        // Left unset: the argument goes back unchanged.
    }
    #[allow(clippy::too_many_arguments)]
    fn widen(
        &mut self,
        a: u8,
        b: u16,
        c: u32,
        d: i8,
        e: i16,
        sum: &mut Out<'_, u64>,
        signed_sum: &mut Out<'_, i64>,
        half: &mut Out<'_, f32>,
    ) {
        sum.set(&(a as u64 + b as u64 + c as u64)).expect("set");
        signed_sum.set(&(d as i64 + e as i64)).expect("set");
        half.set(&(c as f32 / 2.0)).expect("set");
    }
    fn blob(&mut self, data: &mut InOut<'_, BSeq<u8, 65536>>) {
        let v: Vec<u8> = data.get().0.iter().map(|x| x.wrapping_add(1)).collect();
        data.set(BSeq(v)).expect("set");
    }
    fn die(&mut self) {
        // Gone in the middle of a call, as a crash would leave it.
        std::process::exit(3);
    }
}

fn mode() -> Mode {
    Mode::parse(&std::env::var("SRPC_TEST_MODE").unwrap_or_default()).unwrap_or(Mode::Au)
}

fn serve(ep: &vmmc::Endpoint) -> u64 {
    let mut b = ServerBinding::accept(ep, 1, EVERY_LAYOUT, mode()).expect("accept");
    b.serve(|call| every_dispatch(&mut Impl, call))
        .expect("serve")
}

fn record(seed: i64) -> Record {
    Record {
        a: -3,
        b: -300,
        c: -70000,
        d: seed * 1_000_000_007,
        e: 250,
        f: 65000,
        g: 4_000_000_000,
        h: u64::MAX - seed as u64,
        i: 1.5,
        j: -2.25e300,
        k: true,
        name: BString::new(format!("record {seed}")).expect("name"),
        small: [1, 2, 65535],
        path: BSeq(vec![Point { x: 1.0, y: -1.0 }, Point { x: 0.5, y: 2.5 }]),
    }
}

fn every_procedure(c: &mut EveryClient) {
    c.null().expect("null");
    let mut sum = 0;
    c.add(&i32::MAX, &2, &mut sum).expect("add");
    assert_eq!(sum, i32::MAX as i64 + 2);
    let mut v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    c.scale(&mut v, &0.5).expect("scale");
    assert_eq!(v, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
    for seed in 0..3 {
        let r = record(seed);
        let mut copy = record(99);
        c.echo_record(&r, &mut copy).expect("echo_record");
        assert_eq!(copy, r);
    }
    let mut xs = BSeq((0..1000).collect::<Vec<i32>>());
    c.reverse(&mut xs).expect("reverse");
    assert_eq!(xs.0, (0..1000).rev().collect::<Vec<i32>>());
    let mut empty = BSeq(Vec::new());
    c.reverse(&mut empty).expect("reverse empty");
    assert!(empty.0.is_empty());
    let (mut g, mut len) = (BString::default(), 0);
    c.greet(&BString::new("shrimp").expect("name"), &mut g, &mut len)
        .expect("greet");
    assert_eq!((g.0.as_str(), len), ("hello, shrimp", 13));
    for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
        let (mut both, mut either) = (!(a && b), !(a || b));
        c.logic(&a, &b, &mut both, &mut either).expect("logic");
        assert_eq!((both, either), (a && b, a || b));
    }
    let mut bytes: Bytes = std::array::from_fn(|i| i as u8);
    c.bump(&mut bytes).expect("bump");
    assert_eq!(bytes, std::array::from_fn::<u8, 64, _>(|i| i as u8));
    let (mut s, mut ss, mut h) = (0, 0, 0.0);
    c.widen(
        &200,
        &60000,
        &3_000_000_000,
        &-100,
        &-30000,
        &mut s,
        &mut ss,
        &mut h,
    )
    .expect("widen");
    assert_eq!((s, ss, h), (3_000_060_200, -30100, 1.5e9));
    for len in [0, 1, 4, 1000, 65536] {
        let orig: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let mut d = BSeq(orig.clone());
        c.blob(&mut d).expect("blob");
        assert_eq!(
            d.0,
            orig.iter().map(|x| x.wrapping_add(1)).collect::<Vec<u8>>()
        );
    }
}

fn client(ep: &vmmc::Endpoint) -> EveryClient {
    EveryClient::bind(ep, 0, mode()).expect("bind")
}

#[test]
fn every_procedure_over_automatic_update() {
    as_job("every_procedure_over_automatic_update", "au", || {
        let ep = vmmc_run::init().expect("init");
        if ep.rank() == 0 {
            assert_eq!(serve(&ep), 20);
        } else {
            let mut c = client(&ep);
            assert_eq!(c.binding().mode(), Mode::Au);
            every_procedure(&mut c);
        }
    });
}

#[test]
fn every_procedure_over_deliberate_update() {
    as_job("every_procedure_over_deliberate_update", "du", || {
        let ep = vmmc_run::init().expect("init");
        if ep.rank() == 0 {
            assert_eq!(serve(&ep), 20);
        } else {
            let mut c = client(&ep);
            assert_eq!(c.binding().mode(), Mode::Du);
            every_procedure(&mut c);
        }
    });
}

#[test]
fn wrong_procedure_and_oversized_sequences_are_refused() {
    for mode in ["au", "du"] {
        as_job(
            "wrong_procedure_and_oversized_sequences_are_refused",
            mode,
            || {
                let ep = vmmc_run::init().expect("init");
                if ep.rank() == 0 {
                    // Two refused calls and one good one are served; the refused ones still count.
                    assert_eq!(serve(&ep), 3);
                    return;
                }
                let mut c = client(&ep);
                // A procedure the interface does not have.
                match c.binding().call(99, 0, 0) {
                    Err(Error::NoSuchProcedure(99)) => {}
                    other => panic!("procedure 99: {other:?}"),
                }
                // An oversized sequence is refused before anything is sent.
                let mut xs = BSeq((0..1001).collect::<Vec<i32>>());
                match c.reverse(&mut xs) {
                    Err(Error::TooLong {
                        len: 1001,
                        max: 1000,
                        ..
                    }) => {}
                    other => panic!("1001 elements: {other:?}"),
                }
                // A client that sends one anyway (a raw request claiming 5000 elements) is
                // refused by the server when it decodes the arguments.
                let size = EVERY_PROCEDURES
                    .iter()
                    .find(|p| p.0 == 5)
                    .expect("reverse")
                    .2;
                let req = c.binding().request(size);
                req[..4].copy_from_slice(&5000u32.to_le_bytes());
                match c.binding().call(5, size, size) {
                    Err(Error::BadArguments(_)) => {}
                    other => panic!("5000 elements: {other:?}"),
                }
                // The binding still works.
                let mut sum = 0;
                c.add(&1, &2, &mut sum).expect("add after errors");
                assert_eq!(sum, 3);
            },
        );
    }
}

#[test]
fn a_dead_server_gives_peer_lost() {
    for mode in ["au", "du"] {
        let o = run_ranks("a_dead_server_gives_peer_lost", mode, || {
            let ep = vmmc_run::init().expect("init");
            if ep.rank() == 0 {
                serve(&ep);
                return;
            }
            let mut c = client(&ep);
            c.null().expect("null");
            let t0 = Instant::now();
            match c.die() {
                Err(Error::PeerLost(_)) => {}
                other => panic!("call to a dying server: {other:?}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(30));
            println!("client saw peer-lost");
        });
        assert!(
            o.stdout.contains("client saw peer-lost"),
            "{mode}: {}",
            o.report()
        );
    }
}

#[test]
fn the_generated_code_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let text = std::fs::read_to_string(dir.join("every.idl")).expect("idl");
    let fresh = stubgen::idl::generate("every.idl", &text).expect("generate");
    let checked_in = std::fs::read_to_string(dir.join("gen/every.rs")).expect("generated");
    assert!(
        fresh == checked_in,
        "tests/gen/every.rs is stale: run `stubgen srpc every.idl -o gen/every.rs` in srpc/tests"
    );
}

// ----- running a test's body as the ranks of a job -----

/// Runs this test binary's `name` as the 2 ranks of a job over shm with bindings of `mode`;
/// in a rank, runs `body` and exits.
fn run_ranks(name: &str, mode: &str, body: impl FnOnce()) -> Output {
    Job::new(name, 2).env("SRPC_TEST_MODE", mode).run(body)
}

/// [`run_ranks`], asserting that both ranks succeeded.
fn as_job(name: &str, mode: &str, body: impl FnOnce()) {
    Job::new(name, 2).env("SRPC_TEST_MODE", mode).run_ok(body);
}
