//! The Rust API as jobs of real processes under the launcher: each test re-runs itself as the
//! ranks (see `common::as_job`).

mod common;

use common::as_job;
use nx::{Info, Nx, NxError};
use vmmc_run::testing::pattern;

fn nx() -> Nx {
    let ep = vmmc_run::init().expect("join the job");
    Nx::new(ep).expect("join NX")
}

/// Panics with the first difference (never with the whole buffers).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if got.len() != want.len() {
        panic!("{what}: {} bytes, expected {}", got.len(), want.len());
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {i} of {} is {}, expected {}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

fn ring_body() {
    ring(nx());
}

fn ring(nx: Nx) {
    let (me, n) = (nx.mynode(), nx.numnodes());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let t = nx.threshold();
    // Around the ring: sizes on both sides of the threshold, and odd lengths.
    for (round, len) in [0usize, 1, 3, 4, 100, t - 1, t, t + 1, 3 * t + 5, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let msg = pattern((me as u64) << 32 | round as u64, len);
        let mut got = vec![0u8; len + 8];
        if me == 0 {
            nx.csend(round as i64, &msg, right, 0).unwrap();
            let c = nx.crecv(round as i64, &mut got).unwrap();
            assert_eq!(c, len);
        } else {
            let c = nx.crecv(round as i64, &mut got).unwrap();
            assert_eq!(c, len);
            nx.csend(round as i64, &msg, right, 0).unwrap();
        }
        let i = nx.info().unwrap();
        assert_eq!((i.count, i.node as i64, i.mtype), (len, left, round as i64));
        same(
            &got[..len],
            &pattern((left as u64) << 32 | round as u64, len),
            &format!("round {round}, {len} bytes"),
        );
    }
    nx.gsync().unwrap();
}

#[test]
fn ring_of_four_du() {
    as_job("ring_of_four_du", 4, &[("NX_SMALL", "du")], ring_body);
}

#[test]
fn ring_of_three_du2_and_small_threshold() {
    as_job(
        "ring_of_three_du2_and_small_threshold",
        3,
        &[
            ("NX_SMALL", "du2"),
            ("NX_THRESHOLD", "256"),
            ("NX_SLOTS", "4"),
        ],
        ring_body,
    );
}

/// The same program over the tcp transport, chosen by the environment alone (the launcher
/// reads `VMMC_TRANSPORT`): every rank checks it really runs on tcp.
#[test]
fn ring_of_three_over_tcp() {
    as_job(
        "ring_of_three_over_tcp",
        3,
        &[("VMMC_TRANSPORT", "tcp"), ("NX_SMALL", "du")],
        || {
            let ep = vmmc_run::init().expect("join the job");
            assert_eq!(ep.transport_name(), "tcp", "the job runs on tcp");
            ring(Nx::new(ep).expect("join NX"));
        },
    );
}

#[test]
fn ring_of_two_au() {
    as_job("ring_of_two_au", 2, &[("NX_SMALL", "au")], ring_body);
}

#[test]
fn type_selection_and_out_of_order_receives() {
    as_job(
        "type_selection_and_out_of_order_receives",
        2,
        &[("NX_SLOTS", "4")],
        || {
            let nx = nx();
            let t = nx.threshold();
            if nx.mynode() == 0 {
                // More messages than packet buffers, types interleaved, some large.
                for i in 0..12i64 {
                    let len = if i % 5 == 4 {
                        t * 2 + 3
                    } else {
                        8 + i as usize
                    };
                    nx.csend(10 + i % 3, &pattern(i as u64, len), 1, 0).unwrap();
                }
                nx.csend(99, b"end", 1, 0).unwrap();
                // Receiver's typesel errors are ours to check too.
                assert!(matches!(
                    nx.csend(-2, b"x", 1, 0),
                    Err(NxError::InvalidType(-2))
                ));
                assert!(matches!(
                    nx.csend(1, b"x", 7, 0),
                    Err(NxError::InvalidNode(7))
                ));
            } else {
                let mut buf = vec![0u8; 4 * t];
                // The last message first: the others wait (in packet buffers or drained).
                let c = nx.crecv(99, &mut buf).unwrap();
                assert_eq!(&buf[..c], b"end");
                // Type 12 only: i = 2, 5, 8, 11 in order.
                for i in [2i64, 5, 8, 11] {
                    let c = nx.crecv(12, &mut buf).unwrap();
                    let len = if i % 5 == 4 {
                        t * 2 + 3
                    } else {
                        8 + i as usize
                    };
                    assert_eq!(c, len);
                    same(&buf[..c], &pattern(i as u64, len), &format!("message {i}"));
                }
                // Everything but type 10 (the one's complement selector): i = 1, 4, 7, 10.
                for i in [1i64, 4, 7, 10] {
                    let c = nx.crecv(!10, &mut buf).unwrap();
                    assert_eq!(nx.info().unwrap().mtype, 11);
                    same(&buf[..c], &pattern(i as u64, c), &format!("message {i}"));
                }
                // Any type: the type-10 ones, in order.
                for i in [0i64, 3, 6, 9] {
                    let c = nx.crecv(-1, &mut buf).unwrap();
                    assert_eq!(nx.info().unwrap().mtype, 10);
                    same(&buf[..c], &pattern(i as u64, c), &format!("message {i}"));
                }
                assert!(nx.iprobe(-1).unwrap().is_none());
            }
            nx.gsync().unwrap();
        },
    );
}

#[test]
fn probes_info_and_ptypes() {
    as_job("probes_info_and_ptypes", 3, &[], || {
        let nx = nx();
        let me = nx.mynode();
        assert_eq!(nx.numnodes(), 3);
        assert_eq!(nx.myptype(), 0);
        nx.setptype(me + 40).unwrap();
        assert!(nx.setptype(-5).is_err());
        if me != 0 {
            nx.csend(7 + me, &vec![me as u8; 10 * me as usize], 0, 0)
                .unwrap();
        } else {
            // Node 2's message, by node selection, without taking it.
            let i = nx.cprobex(-1, 2, -1).unwrap();
            assert_eq!(
                i,
                Info {
                    mtype: 9,
                    count: 20,
                    node: 2,
                    ptype: 42
                }
            );
            assert_eq!(nx.info(), Some(i));
            let i = nx.cprobe(8).unwrap();
            assert_eq!((i.node, i.count, i.ptype), (1, 10, 41));
            assert!(nx.iprobe(5).unwrap().is_none());
            assert!(nx.iprobex(-1, 1, 40).unwrap().is_none(), "ptype selection");
            assert!(nx.iprobex(-1, 1, 41).unwrap().is_some());
            let mut b = [0u8; 64];
            let i = nx.crecvx(-1, &mut b, -1, 42).unwrap();
            assert_eq!((i.node, i.count), (2, 20));
            assert_eq!(&b[..20], &[2u8; 20]);
            // Too long for the buffer: reported, the buffer holds the start.
            let mut small = [0u8; 4];
            match nx.crecv(8, &mut small) {
                Err(NxError::MessageTooLong { len: 10, cap: 4 }) => {}
                other => panic!("expected MessageTooLong, got {other:?}"),
            }
            assert_eq!(small, [1u8; 4]);
            assert!(matches!(
                nx.crecvx(-1, &mut b, 9, -1),
                Err(NxError::InvalidNode(9))
            ));
            // A message to oneself.
            nx.csend(3, b"self", me, 0).unwrap();
            assert_eq!(nx.crecv(3, &mut b).unwrap(), 4);
            assert_eq!(nx.info().unwrap().node, 0);
        }
        nx.gsync().unwrap();
    });
}

/// Between two nodes: node 0 sends `msg` (type 1) then receives into `got` (type 2), node 1
/// the other way round; each receives a message as long as its own.
fn swap(nx: &Nx, msg: &[u8], got: &mut [u8]) {
    let other = 1 - nx.mynode();
    let len = msg.len();
    if other == 1 {
        nx.csend(1, msg, other, 0).unwrap();
        assert_eq!(nx.crecv(2, got).unwrap(), len);
    } else {
        assert_eq!(nx.crecv(1, got).unwrap(), len);
        nx.csend(2, msg, other, 0).unwrap();
    }
}

#[test]
fn sixteen_mib_both_ways() {
    as_job("sixteen_mib_both_ways", 2, &[], || {
        let nx = nx();
        let me = nx.mynode();
        let other = 1 - me;
        let len = 16 << 20;
        let msg = pattern(1000 + me as u64, len);
        let mut got = vec![0u8; len];
        swap(&nx, &msg, &mut got);
        same(&got, &pattern(1000 + other as u64, len), "16 MiB");
        // A large message into a short buffer: the start arrives, the rest is reported.
        if me == 0 {
            nx.csend(3, &msg, other, 0).unwrap();
        } else {
            let mut short = vec![0u8; 1001];
            match nx.crecv(3, &mut short) {
                Err(NxError::MessageTooLong { len: l, cap: 1001 }) if l == len => {}
                other => panic!("expected MessageTooLong, got {other:?}"),
            }
            same(
                &short,
                &pattern(1000, len)[..1001],
                "start of a long message",
            );
        }
        nx.gsync().unwrap();
    });
}

/// Zero-copy messages of several lengths both ways into one receive buffer (as
/// applications and benchmarks do), with the data checked. What each receiver read itself
/// must be what its sender counts as read from its memory; with assistance some transfers
/// (once the buffers are registered, all whose receiver waits) are split, without none is.
fn large_both_ways(nx: &Nx, assisted: bool) {
    let me = nx.mynode();
    let other = 1 - me;
    let mut got = vec![0u8; 4 << 20];
    for round in 0..3u64 {
        for (k, len) in [300_001usize, 1 << 20, (3 << 20) + 7]
            .into_iter()
            .enumerate()
        {
            let seed = 2000 + round * 100 + k as u64 * 10;
            let msg = pattern(seed + me as u64, len);
            swap(nx, &msg, &mut got);
            same(&got[..len], &pattern(seed + other as u64, len), "large");
        }
    }
    // Into a short buffer: the receiver takes (and reads its part of) the start only.
    let len = 1 << 20;
    let msg = pattern(3000, len);
    if me == 0 {
        nx.csend(3, &msg, other, 0).unwrap();
    } else {
        match nx.crecv(3, &mut got[..200_003]) {
            Err(NxError::MessageTooLong {
                len: l,
                cap: 200_003,
            }) if l == len => {}
            other => panic!("expected MessageTooLong, got {other:?}"),
        }
        same(&got[..200_003], &msg[..200_003], "start of a long message");
    }
    // A non-blocking receive is never asked to read.
    let before = nx.pulled_bytes();
    if me == 0 {
        nx.csend(4, &msg, other, 0).unwrap();
    } else {
        let mid = nx.irecv(4, vec![0u8; len]).unwrap();
        let c = nx.msgwait(mid).unwrap();
        same(&c.buf.expect("the buffer"), &msg, "irecv");
    }
    assert_eq!(nx.pulled_bytes(), before, "an irecv read from the sender");
    // Each side's count against the other's.
    let (pulled, lent) = (nx.pulled_bytes(), nx.lent_bytes());
    let mut theirs = [0u8; 16];
    let mine: Vec<u8> = [pulled.to_ne_bytes(), lent.to_ne_bytes()].concat();
    if me == 0 {
        nx.csend(5, &mine, other, 0).unwrap();
        nx.crecv(5, &mut theirs).unwrap();
    } else {
        nx.crecv(5, &mut theirs).unwrap();
        nx.csend(5, &mine, other, 0).unwrap();
    }
    let their_pulled = u64::from_ne_bytes(theirs[..8].try_into().unwrap());
    let their_lent = u64::from_ne_bytes(theirs[8..].try_into().unwrap());
    assert_eq!(pulled, their_lent, "bytes I read vs bytes the sender lent");
    assert_eq!(
        lent, their_pulled,
        "bytes I lent vs bytes the receiver read"
    );
    if assisted {
        assert!(
            pulled + their_pulled > 0,
            "no transfer was receiver-assisted"
        );
    } else {
        assert_eq!(pulled + their_pulled, 0, "NX_PULL=0, yet a receiver read");
    }
    nx.gsync().unwrap();
}

#[test]
fn receiver_assisted_zero_copy() {
    as_job(
        "receiver_assisted_zero_copy",
        2,
        &[("NX_REGCACHE", "1")],
        || large_both_ways(&nx(), true),
    );
}

#[test]
fn zero_copy_without_assistance() {
    as_job(
        "zero_copy_without_assistance",
        2,
        &[("NX_REGCACHE", "1"), ("NX_PULL", "0")],
        || large_both_ways(&nx(), false),
    );
}

#[test]
fn isend_irecv_overlap() {
    as_job("isend_irecv_overlap", 2, &[], || {
        let nx = nx();
        let me = nx.mynode();
        let other = 1 - me;
        let t = nx.threshold();
        let sizes = [5usize, t, t + 1, 1 << 20, 77];
        // Post every receive first, then every send, then complete in a mixed order.
        let mut recvs = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            recvs.push(nx.irecv(100 + i as i64, vec![0u8; len]).unwrap());
        }
        let mut sends = Vec::new();
        for (i, &len) in sizes.iter().enumerate().rev() {
            let msg = pattern((me as u64) << 8 | i as u64, len);
            sends.push(nx.isend(100 + i as i64, msg, other, 0).unwrap());
        }
        let mut done = vec![false; sizes.len()];
        while done.iter().any(|d| !d) {
            for (i, mid) in recvs.iter().enumerate() {
                if done[i] {
                    continue;
                }
                if let Some(c) = nx.msgdone(*mid).unwrap() {
                    let i_info = c.info.unwrap();
                    assert_eq!(i_info.count, sizes[i]);
                    same(
                        &c.buf.unwrap(),
                        &pattern((other as u64) << 8 | i as u64, sizes[i]),
                        &format!("message {i}"),
                    );
                    done[i] = true;
                }
            }
        }
        for s in sends {
            nx.msgwait(s).unwrap();
        }
        assert!(matches!(nx.msgwait(12345), Err(NxError::InvalidMid(12345))));
        // csendrecv: node 0 asks, node 1 answers (a large answer too).
        let t = nx.threshold();
        if me == 0 {
            let mut answer = vec![0u8; 3 * t];
            let n = nx
                .csendrecv(300, b"question", other, 0, 301, &mut answer)
                .unwrap();
            assert_eq!(n, 3 * t);
            same(&answer, &pattern(301, 3 * t), "answer of csendrecv");
        } else {
            let mut q = [0u8; 16];
            assert_eq!(nx.crecv(300, &mut q).unwrap(), 8);
            assert_eq!(&q[..8], b"question");
            nx.csend(301, &pattern(301, 3 * t), other, 0).unwrap();
        }
        // Cancel a receive nobody sends to; ignore one that will complete.
        let m = nx.irecv(500, vec![0u8; 8]).unwrap();
        assert_eq!(nx.msgcancel(m).unwrap().map(|b| b.len()), Some(8));
        let m = nx.irecv(501, vec![0u8; 8]).unwrap();
        nx.msgignore(m).unwrap();
        nx.csend(501, b"ignored!", other, 0).unwrap();
        nx.gsync().unwrap();
    });
}

#[test]
fn global_operations_match_sequential_results() {
    as_job("global_operations_match_sequential_results", 3, &[], || {
        let nx = nx();
        let me = nx.mynode();
        let n = nx.numnodes();
        let vals =
            |r: i64| -> Vec<f64> { (0..5).map(|k| 0.1 * (r * 7 + k) as f64 + 1.0).collect() };
        let ivals = |r: i64| -> Vec<i64> { (0..4).map(|k| (r + 3) * (k + 1) - 2 * k).collect() };
        let seq_f = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
            let mut acc = vals(0);
            for r in 1..n {
                for (a, b) in acc.iter_mut().zip(vals(r)) {
                    *a = f(*a, b);
                }
            }
            acc
        };
        let seq_i = |f: &dyn Fn(i64, i64) -> i64| -> Vec<i64> {
            let mut acc = ivals(0);
            for r in 1..n {
                for (a, b) in acc.iter_mut().zip(ivals(r)) {
                    *a = f(*a, b);
                }
            }
            acc
        };
        let mut x = vals(me);
        nx.gdsum(&mut x).unwrap();
        assert_eq!(x, seq_f(&|a, b| a + b));
        let mut x = vals(me);
        nx.gdprod(&mut x).unwrap();
        assert_eq!(x, seq_f(&|a, b| a * b));
        let mut x = vals(me);
        nx.gdhigh(&mut x).unwrap();
        assert_eq!(x, seq_f(&f64::max));
        let mut x = vals(me);
        nx.gdlow(&mut x).unwrap();
        assert_eq!(x, seq_f(&f64::min));
        let mut s: Vec<f32> = vals(me).iter().map(|v| *v as f32).collect();
        nx.gssum(&mut s).unwrap();
        let mut want: Vec<f32> = vals(0).iter().map(|v| *v as f32).collect();
        for r in 1..n {
            for (a, b) in want.iter_mut().zip(vals(r)) {
                *a += b as f32;
            }
        }
        assert_eq!(s, want);
        for (op, f) in [
            ("gisum", (|a: i64, b: i64| a + b) as fn(i64, i64) -> i64),
            ("giprod", |a, b| a * b),
            ("gihigh", i64::max),
            ("gilow", i64::min),
            ("giand", |a, b| a & b),
            ("gior", |a, b| a | b),
        ] {
            let mut x = ivals(me);
            match op {
                "gisum" => nx.gisum(&mut x),
                "giprod" => nx.giprod(&mut x),
                "gihigh" => nx.gihigh(&mut x),
                "gilow" => nx.gilow(&mut x),
                "giand" => nx.giand(&mut x),
                _ => nx.gior(&mut x),
            }
            .unwrap();
            assert_eq!(x, seq_i(&f), "{op}");
        }
        let mut b = vec![me as u8 + 1; 3];
        nx.gopf(&mut b, |acc, o| {
            for (a, x) in acc.iter_mut().zip(o) {
                *a = a.wrapping_mul(10).wrapping_add(*x);
            }
        })
        .unwrap();
        assert_eq!(b, vec![123u8; 3]);
        let (all, lens) = nx.gcolx(&vec![b'a' + me as u8; me as usize + 1]).unwrap();
        assert_eq!(all, b"abbccc");
        assert_eq!(lens, vec![1, 2, 3]);
        // User messages are not disturbed by global operations.
        assert!(nx.iprobe(-1).unwrap().is_none());
        nx.gsync().unwrap();
    });
}

/// Node 0 has a zero-copy send to node 2 in flight while it receives a stream of small
/// messages from node 1 that only ends once node 2 has its message: receiving from one node
/// must keep the transfer to another going.
#[test]
fn a_receive_loop_keeps_other_transfers_going() {
    as_job("a_receive_loop_keeps_other_transfers_going", 3, &[], || {
        let nx = nx();
        let big = pattern(77, 3 << 20);
        match nx.mynode() {
            0 => {
                let mid = nx.isend(9, big.clone(), 2, 0).unwrap();
                let mut b = [0u8; 8];
                let mut n = 0u64;
                loop {
                    nx.crecvx(1, &mut b, 1, -1).unwrap();
                    n += 1;
                    if u64::from_ne_bytes(b) == u64::MAX {
                        break;
                    }
                }
                assert!(n > 1, "the stream ended before it began");
                nx.msgwait(mid).unwrap();
            }
            1 => {
                // Sends keep a message ready at node 0 nearly all the time.
                let mut k = 0u64;
                while !k.is_multiple_of(64) || nx.iprobe(3).unwrap().is_none() {
                    nx.csend(1, &k.to_ne_bytes(), 0, 0).unwrap();
                    k += 1;
                }
                nx.crecv(3, &mut [0u8; 1]).unwrap();
                nx.csend(1, &u64::MAX.to_ne_bytes(), 0, 0).unwrap();
            }
            _ => {
                let mut got = vec![0u8; 3 << 20];
                assert_eq!(nx.crecv(9, &mut got).unwrap(), 3 << 20);
                same(&got, &big, "the zero-copy message");
                nx.csend(3, &[1], 1, 0).unwrap();
            }
        }
        nx.gsync().unwrap();
    });
}

#[test]
fn handler_receives_run_without_nx_calls() {
    as_job("handler_receives_run_without_nx_calls", 2, &[], || {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let nx = nx();
        if nx.mynode() == 0 {
            type Got = Arc<Mutex<Vec<(Info, Vec<u8>)>>>;
            let got: Got = Arc::default();
            let count = Arc::new(AtomicUsize::new(0));
            for t in [5i64, 6] {
                let (g, c) = (got.clone(), count.clone());
                nx.hrecvx(t, vec![0u8; 16], 1, -1, move |info, buf| {
                    g.lock().unwrap().push((info, buf));
                    c.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            }
            nx.gsync().unwrap();
            // No NX call until both handlers ran: they run on the notification thread.
            let t0 = std::time::Instant::now();
            while count.load(Ordering::SeqCst) < 2 {
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(20),
                    "handlers did not run"
                );
                std::hint::spin_loop();
            }
            let mut got = got.lock().unwrap().clone();
            got.sort_by_key(|(i, _)| i.mtype);
            assert_eq!(got[0].0.count, 5);
            assert_eq!(&got[0].1[..5], b"five!");
            assert_eq!(got[1].0.mtype, 6);
            assert_eq!(&got[1].1[..3], b"six");
            // A cancelled handler receive never runs.
            let m = nx
                .hrecvx(7, vec![0u8; 4], -1, -1, |_, _| panic!("cancelled"))
                .unwrap();
            nx.msgcancel(m).unwrap();
            nx.gsync().unwrap();
        } else {
            nx.gsync().unwrap();
            nx.csend(6, b"six", 0, 0).unwrap();
            nx.csend(5, b"five!", 0, 0).unwrap();
            nx.gsync().unwrap();
        }
    });
}

fn handler_sends_and_more_body() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let nx = nx();
    let (me, n) = (nx.mynode(), nx.numnodes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let t = nx.threshold();
    // hsend of a one-copy and a zero-copy message: the handlers get the buffers back, and
    // run while this process spins without calling NX.
    let done = Arc::new(AtomicUsize::new(0));
    let back = Arc::new(Mutex::new(Vec::new()));
    for (k, len) in [10, t + 100].into_iter().enumerate() {
        let (done, back) = (done.clone(), back.clone());
        let msg = pattern((me as u64) << 8 | k as u64, len);
        nx.hsend(50 + k as i64, msg, right, 0, move |i, b| {
            back.lock()
                .unwrap()
                .push((i.mtype, i.count, i.node, b.len()));
            done.fetch_add(1, Ordering::AcqRel);
        })
        .unwrap();
    }
    for (k, len) in [10, t + 100].into_iter().enumerate() {
        let mut got = vec![0u8; len];
        let i = nx.crecvx(50 + k as i64, &mut got, left, -1).unwrap();
        assert_eq!(i.count, len);
        same(
            &got,
            &pattern((left as u64) << 8 | k as u64, len),
            "hsend data",
        );
    }
    let t0 = std::time::Instant::now();
    while done.load(Ordering::Acquire) < 2 {
        assert!(
            t0.elapsed().as_secs() < 60,
            "the hsend handlers did not run"
        );
        std::hint::spin_loop();
    }
    let mut b = back.lock().unwrap().clone();
    b.sort();
    assert_eq!(
        b,
        vec![
            (50, 10, right as usize, 10),
            (51, t + 100, right as usize, t + 100)
        ]
    );
    assert!(matches!(
        nx.hsend(1, vec![1], n, 0, |_, _| {}),
        Err(NxError::InvalidNode(_))
    ));
    nx.gsync().unwrap();
    // gsendx from node 0 to the others; a bad node sends nothing.
    if me == 0 {
        let others: Vec<i64> = (1..n).collect();
        nx.gsendx(60, b"all", &others).unwrap();
        assert!(nx.gsendx(61, b"none", &[1, n]).is_err());
    } else {
        let mut got = [0u8; 8];
        assert_eq!(nx.crecv(60, &mut got).unwrap(), 3);
        assert_eq!(&got[..3], b"all");
    }
    // flushmsg: node 1's three type-70 messages go, its 71 stays.
    if me == 1 {
        for len in [1, 2, 3] {
            nx.csend(70, &vec![7; len], 0, 0).unwrap();
        }
        nx.csend(71, b"stay", 0, 0).unwrap();
    } else if me == 0 {
        nx.cprobe(71).unwrap();
        assert_eq!(nx.flushmsg(70, 1, -1).unwrap(), 3);
        assert_eq!(
            nx.info().map(|i| i.mtype),
            Some(71),
            "flushmsg keeps the info"
        );
        assert!(nx.iprobe(70).unwrap().is_none() && nx.iprobe(61).unwrap().is_none());
        let mut got = [0u8; 8];
        assert_eq!(nx.crecv(71, &mut got).unwrap(), 4);
    }
    // Logical global operations: nonzero is true, results are 1 or 0.
    let init = || vec![me + 1, 0, (me == 0) as i64];
    let mut x = init();
    nx.gland(&mut x).unwrap();
    assert_eq!(x, vec![1, 0, (n == 1) as i64]);
    let mut x = init();
    nx.glor(&mut x).unwrap();
    assert_eq!(x, vec![1, 0, 1]);
    let mut x = init();
    nx.glxor(&mut x).unwrap();
    assert_eq!(x, vec![n % 2, 0, 1]);
    let mut x = vec![me + 1];
    nx.gixor(&mut x).unwrap();
    assert_eq!(x, vec![(1..=n).fold(0, |a, b| a ^ b)]);
    nx.gsync().unwrap();
}

#[test]
fn handler_sends_gsendx_flushmsg_and_logical_operations() {
    as_job(
        "handler_sends_gsendx_flushmsg_and_logical_operations",
        3,
        &[],
        handler_sends_and_more_body,
    );
}

#[test]
fn handler_sends_etc_with_a_small_threshold() {
    as_job(
        "handler_sends_etc_with_a_small_threshold",
        2,
        &[("NX_THRESHOLD", "16384")],
        handler_sends_and_more_body,
    );
}

/// Zero-copy receives into one buffer, one after the other, without the registration
/// cache: the receiver exports the same memory for every message. On the mpi transport its
/// keys come round again (256 generations in this job, 32768 by default), and a sender that
/// held an earlier export's key revoked then hung at the wrap.
#[test]
fn zero_copy_receives_into_one_buffer_many_times() {
    as_job(
        "zero_copy_receives_into_one_buffer_many_times",
        2,
        &[
            ("NX_THRESHOLD", "1024"),
            ("VMMC_MPI_KEY_GENERATIONS", "256"),
        ],
        || {
            let nx = nx();
            let mut buf = vec![0u8; 4096];
            for i in 0..1000u64 {
                if nx.mynode() == 0 {
                    buf[..8].copy_from_slice(&i.to_le_bytes());
                    nx.csend(1, &buf, 1, 0).expect("csend");
                } else {
                    nx.crecv(-1, &mut buf).expect("crecv");
                    let got = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    assert_eq!(got, i, "message {i}");
                }
            }
            nx.gsync().expect("gsync");
        },
    );
}
