//! The model's properties: determinism, the IPT check, the papers' what-if switches, the
//! send overhead, and idle nodes that sleep.

use vmmc::pace::now_ns;
use vmmc::{AuOptions, Endpoint, ExportOptions, MemKind, Region};
use vmmc_sim::{Outcome, Params, RunStats, Sim};

const BUF: u32 = 7;

fn params(overrides: &[&str]) -> Params {
    Params::parse(vmmc_sim::params::DEFAULT_PARAMS, overrides).expect("parameters")
}

fn returned<T: std::fmt::Debug>(outcomes: Vec<Outcome<T>>) -> Vec<T> {
    outcomes
        .into_iter()
        .enumerate()
        .map(|(r, o)| match o {
            Outcome::Returned(v) => v,
            other => panic!("node {r}: {other:?}"),
        })
        .collect()
}

/// Every node exports a 64 KiB buffer and imports everyone's.
fn mesh(ep: &Endpoint) -> (Region, Vec<Option<vmmc::Proxy>>) {
    let r = ep.alloc(64 * 1024, MemKind::Shared).expect("alloc");
    ep.export(BUF, &r, ExportOptions::new()).expect("export");
    let proxies = (0..ep.size())
        .map(|k| (k != ep.rank()).then(|| ep.import(ep.proc_of(k).unwrap(), BUF).expect("import")))
        .collect();
    (r, proxies)
}

fn wait_word(r: &Region, off: usize, want: u32) {
    r.wait_u32(off, |v| v == want, || Ok(())).expect("wait");
}

/// A communication-heavy program: a ring of growing messages, then everyone sends to
/// node 0 at once (contention on its links and its incoming DMA), then an AU stream.
/// Returns the node's clock after each phase.
fn workload(ep: Endpoint) -> Vec<u64> {
    let (r, px) = mesh(&ep);
    let (me, n) = (ep.rank(), ep.size());
    let mut marks = vec![now_ns()];
    let next = px[(me + 1) % n].as_ref().expect("next");
    for (round, size) in [4usize, 256, 4096, 20000].into_iter().enumerate() {
        let tag = round as u32 + 1;
        let mut msg = vec![0x5Au8; size];
        msg[size - 4..].copy_from_slice(&tag.to_ne_bytes());
        if me == 0 {
            next.send(0, &msg).expect("send");
            wait_word(&r, size - 4, tag);
        } else {
            wait_word(&r, size - 4, tag);
            next.send(0, &msg).expect("send");
        }
        marks.push(now_ns());
    }
    // Everyone to node 0, into disjoint slots; node 0 waits for all.
    if me == 0 {
        for k in 1..n {
            wait_word(&r, 32768 + k * 4096 - 4, 99);
        }
    } else {
        let mut msg = vec![me as u8; 4096];
        msg[4092..].copy_from_slice(&99u32.to_ne_bytes());
        px[0]
            .as_ref()
            .unwrap()
            .send(32768 + (me - 1) * 4096, &msg)
            .expect("send");
    }
    marks.push(now_ns());
    // An AU stream with combining from node 1 to node 0.
    if me == 1 {
        // Into its own part of node 0's buffer: the ring's last message may still be on its
        // way to node 0 (virtual time), and would overwrite the start.
        let local = ep.alloc(8192, MemKind::Private).expect("alloc");
        let b = px[0]
            .as_ref()
            .unwrap()
            .bind_region(
                local,
                49152,
                AuOptions {
                    combining: true,
                    notify: false,
                },
            )
            .expect("bind");
        for i in 0..2048u32 {
            b.store_u32(4 * i as usize, i + 1).expect("store");
        }
        b.flush().expect("flush");
    } else if me == 0 {
        wait_word(&r, 49152 + 4 * 2047, 2048);
    }
    marks.push(now_ns());
    marks
}

fn run_workload(p: Params) -> (Vec<Vec<u64>>, RunStats) {
    let sim = Sim::new(4, p).unwrap();
    let marks = returned(sim.run(workload));
    (marks, sim.stats())
}

#[test]
fn same_program_same_times_and_statistics() {
    let mut p = params(&[]);
    p.cpu.compute_scale = 0.0;
    let (a, sa) = run_workload(p.clone());
    let (b, sb) = run_workload(p);
    assert_eq!(a, b, "virtual times differ between two runs");
    assert_eq!(sa, sb, "statistics differ between two runs");
    assert!(sa.total.packets_out > 0 && sa.total.au_packets > 0);
    assert!(
        sa.combining_ratio > 1.0,
        "combining happened: {}",
        sa.combining_ratio
    );
    // With compute charged, the times move (and the combining timer may cut an AU stream
    // differently) but what is communicated does not.
    let (_, sc) = run_workload(params(&[]));
    for (x, y) in sa.nodes.iter().zip(&sc.nodes) {
        assert_eq!(
            (
                x.bytes_out,
                x.bytes_in,
                x.du_messages,
                x.du_initiations,
                x.au_stores
            ),
            (
                y.bytes_out,
                y.bytes_in,
                y.du_messages,
                y.du_initiations,
                y.au_stores
            )
        );
    }
}

#[test]
fn packets_for_pages_not_enabled_are_refused() {
    let sim = Sim::new(2, params(&[])).unwrap();
    let sim_ref = &sim;
    let out = returned(sim.run(|ep| {
        let (r, _px) = mesh(&ep);
        let before: Vec<u8> = {
            let mut v = vec![0; r.len()];
            r.read(0, &mut v).unwrap();
            v
        };
        let barrier = |v: u32| {
            // A DU flag exchange through the mesh buffers' last word.
            let p = ep.import(ep.proc_of(1 - ep.rank()).unwrap(), BUF).unwrap();
            p.send(65532, &v.to_ne_bytes()).unwrap();
            wait_word(&r, 65532, v);
        };
        if ep.rank() == 0 {
            let first = sim_ref.first_page_for_test(1, BUF).expect("exported");
            // One page past the 16 pages of node 1's buffer: not in its IPT.
            sim_ref
                .inject_for_test(0, 1, first + 16, &[1, 2, 3, 4])
                .unwrap();
        }
        barrier(1);
        let mut after = vec![0; r.len()];
        r.read(0, &mut after).unwrap();
        // Only the barrier word changed.
        after[65532..].copy_from_slice(&before[65532..]);
        after == before
    }));
    assert_eq!(out, vec![true, true], "a refused packet wrote memory");
    let errors = sim.ipt_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].node, errors[0].from), (1, 0));
    let s = sim.stats();
    assert_eq!(s.nodes[1].ipt_violations, 1);
    assert!(s.nodes[1].interrupts >= 1, "the freeze raised an interrupt");
}

/// One-way latency of a one-word DU ping-pong, in ns.
fn du_latency(p: Params) -> (u64, RunStats) {
    let sim = Sim::new(2, p).unwrap();
    let t = returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        let peer = px[1 - ep.rank()].as_ref().unwrap();
        let t0 = now_ns();
        for i in 1..=10u32 {
            if ep.rank() == 0 {
                peer.send(0, &i.to_ne_bytes()).unwrap();
                wait_word(&r, 0, i);
            } else {
                wait_word(&r, 0, i);
                peer.send(0, &i.to_ne_bytes()).unwrap();
            }
        }
        (now_ns() - t0) / 20
    }));
    (t[0], sim.stats())
}

#[test]
fn syscall_per_send_and_interrupt_per_message() {
    let base = params(&["cpu.compute_scale=0"]);
    let (lat, s) = du_latency(base.clone());
    assert_eq!(s.total.syscalls, 0);
    let (sys, ss) = du_latency(params(&[
        "cpu.compute_scale=0",
        "switches.syscall_per_send=true",
    ]));
    assert_eq!(ss.total.syscalls, ss.total.du_messages);
    assert_eq!(sys - lat, base.costs.syscall_ns, "a system call per send");
    let (irq, si) = du_latency(params(&[
        "cpu.compute_scale=0",
        "switches.interrupt_every_message=true",
    ]));
    assert_eq!(si.nodes[0].interrupts, si.nodes[0].packets_in);
    assert!(irq > lat, "interrupts cost time: {irq} vs {lat}");
}

#[test]
fn send_overhead_is_under_two_microseconds() {
    let sim = Sim::new(2, params(&["cpu.compute_scale=0"])).unwrap();
    let sim_ref = &sim;
    let per = returned(sim.run(|ep| {
        let (_r, px) = mesh(&ep);
        if ep.rank() != 0 {
            return 0;
        }
        let p = px[1].as_ref().unwrap();
        let blocked0 = sim_ref.stats().nodes[0].blocked_ns;
        let t0 = now_ns();
        for i in 0..50u32 {
            p.send(4 * (i as usize % 64), &i.to_ne_bytes()).unwrap();
        }
        let busy = now_ns() - t0 - (sim_ref.stats().nodes[0].blocked_ns - blocked0);
        busy / 50
    }));
    assert!(per[0] > 0 && per[0] < 2000, "send overhead {} ns", per[0]);
}

/// An AU stream of `words` stores from node 0 into node 1; returns node 0's stats.
fn au_stream(p: Params, combining: bool, words: u32) -> vmmc_sim::NodeStats {
    let sim = Sim::new(2, p).unwrap();
    returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        if ep.rank() == 0 {
            let b = px[1]
                .as_ref()
                .unwrap()
                .bind(AuOptions {
                    combining,
                    notify: false,
                })
                .unwrap();
            for i in 0..words {
                b.store_u32(4 * i as usize, i + 1).unwrap();
            }
            b.flush().unwrap();
        } else {
            wait_word(&r, 4 * (words as usize - 1), words);
        }
    }));
    sim.stats().nodes[0].clone()
}

#[test]
fn combining_switch_and_fifo_capacity() {
    let on = au_stream(params(&["cpu.compute_scale=0"]), true, 4096);
    assert_eq!(on.au_stores, 4096);
    assert!(
        on.combining_ratio() >= 256.0,
        "ratio {}",
        on.combining_ratio()
    );
    let off = au_stream(
        params(&["cpu.compute_scale=0", "switches.combining=false"]),
        true,
        4096,
    );
    assert_eq!(off.au_packets, off.au_stores, "one packet per store");
    assert!(off.end_ns > on.end_ns, "combining is faster for a stream");
    // One packet per store overruns a 1 KB FIFO: threshold interrupts de-schedule the
    // writer; a 32 KB FIFO takes fewer.
    let small = au_stream(
        params(&[
            "cpu.compute_scale=0",
            "ni.fifo_capacity=1024",
            "ni.fifo_threshold=768",
            "ni.fifo_resume=256",
        ]),
        false,
        4096,
    );
    let big = au_stream(params(&["cpu.compute_scale=0"]), false, 4096);
    assert!(small.fifo_threshold_events > 0, "{small:?}");
    assert!(small.fifo_max_bytes <= 1024 + 12, "{small:?}");
    assert!(
        small.fifo_threshold_events > big.fifo_threshold_events,
        "small {} big {}",
        small.fifo_threshold_events,
        big.fifo_threshold_events
    );
}

#[test]
fn du_queue_overlaps_initiation_with_transfer() {
    let time = |depth: &str| {
        let sim = Sim::new(2, params(&["cpu.compute_scale=0", depth])).unwrap();
        let t = returned(sim.run(|ep| {
            let (r, px) = mesh(&ep);
            let t0 = now_ns();
            if ep.rank() == 0 {
                let mut msg = vec![1u8; 65536];
                msg[65532..].copy_from_slice(&7u32.to_ne_bytes());
                px[1].as_ref().unwrap().send(0, &msg).unwrap();
            } else {
                wait_word(&r, 65532, 7);
            }
            now_ns() - t0
        }));
        (t[1], sim.stats().nodes[0].du_initiations)
    };
    let (t0, n0) = time("ni.du_queue_depth=0");
    let (t2, n2) = time("ni.du_queue_depth=2");
    assert_eq!(
        (n0, n2),
        (16, 16),
        "a 64 KiB transfer is 16 page-sized pieces"
    );
    assert!(t2 < t0, "queueing helps: depth 2 {t2} ns, depth 0 {t0} ns");
}

/// An asynchronous send returns once initiated; back-to-back ones wait for the engine without
/// a queue, and not with a 2-deep one (seed 001 §4.5.3's experiment).
#[test]
fn asynchronous_sends_return_at_initiation() {
    let cost = |depth: &str| {
        let sim = Sim::new(2, params(&["cpu.compute_scale=0", depth])).unwrap();
        let t = returned(sim.run(|ep| {
            let (r, px) = mesh(&ep);
            if ep.rank() == 0 {
                let p = px[1].as_ref().unwrap();
                let t0 = now_ns();
                let one = p.send_async(0, vec![1u8; 1024]).unwrap();
                let t1 = now_ns();
                let rest: Vec<_> = (1..3u32)
                    .map(|i| {
                        p.send_async(i as usize * 1024, vec![i as u8 + 1; 1024])
                            .unwrap()
                    })
                    .collect();
                let t3 = now_ns();
                p.send(3 * 1024, &9u32.to_ne_bytes()).unwrap();
                for h in std::iter::once(one).chain(rest) {
                    h.wait().unwrap();
                }
                (t1 - t0, t3 - t0)
            } else {
                wait_word(&r, 3 * 1024, 9);
                let mut got = vec![0u8; 3 * 1024];
                r.read(0, &mut got).unwrap();
                assert!(got
                    .chunks(1024)
                    .enumerate()
                    .all(|(i, c)| c.iter().all(|&b| b == i as u8 + 1)));
                (0, 0)
            }
        }));
        t[0]
    };
    let p = params(&[]);
    let (one0, three0) = cost("ni.du_queue_depth=0");
    let (one2, three2) = cost("ni.du_queue_depth=2");
    // One send costs its initiation, not its transfer (DMA start plus 1 KiB over EISA).
    assert_eq!(one0, p.costs.du_initiate_ns, "one asynchronous send");
    assert_eq!(one2, p.costs.du_initiate_ns, "one asynchronous send");
    // Three: without a queue the third waits for the engine; a 2-deep queue takes them all.
    assert_eq!(three2, 3 * p.costs.du_initiate_ns, "three with a queue");
    assert!(
        three0 > three2 + p.ni.du_dma_start_ns,
        "without a queue the CPU waits for the engine: {three0} ns against {three2} ns"
    );
}

#[test]
fn idle_nodes_sleep() {
    let sim = Sim::new(2, params(&[])).unwrap();
    let out = returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        if ep.rank() == 0 {
            // Node 1 is waiting once its word is here (so the measured window is the wait
            // alone, not node 1's set-up). Then real time passes outside the library: node 1
            // has nothing to do meanwhile.
            wait_word(&r, 4, 1);
            std::thread::sleep(std::time::Duration::from_millis(400));
            px[1]
                .as_ref()
                .unwrap()
                .send(0, &5u32.to_ne_bytes())
                .unwrap();
            0.0
        } else {
            px[0]
                .as_ref()
                .unwrap()
                .send(4, &1u32.to_ne_bytes())
                .unwrap();
            let (t0, c0) = (std::time::Instant::now(), thread_cpu());
            wait_word(&r, 0, 5);
            (thread_cpu() - c0) / t0.elapsed().as_secs_f64()
        }
    }));
    assert!(
        out[1] < 0.25,
        "the waiting node used {:.0}% of a CPU",
        out[1] * 100.0
    );
}

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// An automatic-update store is a plain memory write on SHRIMP: with the default compute
/// scale, a stream of stores with nothing between them costs the modelled store (and, when
/// the FIFO backs up, its stalls), not the simulator's per-call bookkeeping multiplied by
/// `cpu.compute_scale` (before stores were buffered, each store was a library call whose
/// lock and CPU-clock reads cost more than `cpu.compute_floor_ns`: tens of microseconds of
/// "compute" per store).
#[test]
fn au_stores_cost_the_modelled_store_not_the_library_call() {
    const WORDS: u32 = 20_000;
    let sim = Sim::new(2, Params::default()).unwrap();
    let per = returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        if ep.rank() == 0 {
            // Two words per 64 bytes: no combining, one packet per store.
            let b = px[1]
                .as_ref()
                .unwrap()
                .bind(AuOptions {
                    combining: false,
                    notify: false,
                })
                .unwrap();
            let t0 = now_ns();
            for i in 0..WORDS {
                b.store_u32(4 * (i as usize % 16384), i + 1).unwrap();
            }
            b.flush().unwrap();
            (now_ns() - t0) / WORDS as u64
        } else {
            wait_word(&r, 4 * ((WORDS as usize - 1) % 16384), WORDS);
            0
        }
    }));
    let st = sim.stats().nodes[0].clone();
    assert_eq!(st.au_stores, WORDS as u64);
    assert_eq!(st.au_packets, WORDS as u64);
    // The charge is host CPU time x 120: only an optimised build says what the library's
    // path costs (a debug build runs it ten times slower, and charges that).
    if cfg!(debug_assertions) {
        eprintln!("debug build: {} ns a store, not checked", per[0]);
        return;
    }
    // 190 ns a store, plus the FIFO's back-pressure from the receiver's per-packet DMA
    // (about 2 us a packet): well under the 30 us a store that the per-call charge made.
    assert!(
        per[0] < 12_000,
        "{} ns a store ({} ns compute a store)",
        per[0],
        st.compute_ns / WORDS as u64
    );
    // Known residual: the core's and the buffer's path per store costs about 50 ns of host
    // time more than the overhead measured at start, which x120 is about 6 us (before: about
    // 30 us). The bound guards against the per-call charge coming back.
    assert!(
        st.compute_ns / (WORDS as u64) < 12_000,
        "compute charged {} ns a store",
        st.compute_ns / WORDS as u64
    );
}

/// Buffered stores take effect in time order with the other nodes' traffic: two senders
/// streaming into one receiver share its incoming DMA, and the receiver sees every word.
#[test]
fn buffered_stores_of_two_nodes_share_a_receiver() {
    const WORDS: u32 = 3000;
    let sim = Sim::new(3, params(&["cpu.compute_scale=0"])).unwrap();
    let ends = returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        let me = ep.rank();
        if me > 0 {
            let b = px[0]
                .as_ref()
                .unwrap()
                .bind(AuOptions {
                    combining: false,
                    notify: false,
                })
                .unwrap();
            for i in 0..WORDS {
                b.store_u32(32768 * (me - 1) + 4 * i as usize, i + 1)
                    .unwrap();
            }
            b.flush().unwrap();
        } else {
            for k in 0..2 {
                wait_word(&r, 32768 * k + 4 * (WORDS as usize - 1), WORDS);
            }
            for k in 0..2 {
                for i in 0..WORDS as usize {
                    assert_eq!(r.load_u32(32768 * k + 4 * i).unwrap(), i as u32 + 1);
                }
            }
        }
        now_ns()
    }));
    // One receiver's DMA takes a packet at a time (in_dma_start + 4 bytes at 24 MB/s): the
    // last word arrives no earlier than 2 x WORDS packets after the start.
    let per_packet = 1800 + 160;
    assert!(
        ends[0] >= 2 * WORDS as u64 * per_packet,
        "receiver done at {} ns",
        ends[0]
    );
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[test]
fn the_node_threads_of_a_run_share_one_core() {
    if allowed_cpus().len() < 2 || std::env::var_os(vmmc_sim::PIN_VAR).is_some() {
        eprintln!("skipped: one core allowed here, or VMMC_SIM_PIN is set");
        return;
    }
    let sim = Sim::new(4, params(&[])).unwrap();
    let cpus: Vec<Vec<usize>> = sim
        .run(|_ep| allowed_cpus())
        .into_iter()
        .map(|o| match o {
            Outcome::Returned(c) => c,
            other => panic!("a node ended with {other:?}"),
        })
        .collect();
    assert_eq!(cpus[0].len(), 1, "node 0 may run on {:?}", cpus[0]);
    assert!(cpus.iter().all(|c| *c == cpus[0]), "{cpus:?}");
    // The thread that ran the simulation is left as it was.
    assert!(allowed_cpus().len() >= 2);
}

/// Computation a program states (`Cost::Compute`) moves its node's clock by exactly that
/// much, shows in the statistics, and orders the node's next message after it; a spin on
/// the virtual clock at `cpu.compute_scale = 0` would never end, since nothing charges it.
#[test]
fn stated_computation_advances_the_clock_exactly() {
    use vmmc::pace::{charge, Cost};
    const WORK: u64 = 3_000_000;
    let sim = Sim::new(2, params(&["cpu.compute_scale=0"])).unwrap();
    let t = returned(sim.run(|ep| {
        let (r, px) = mesh(&ep);
        if ep.rank() == 0 {
            let t0 = now_ns();
            charge(Cost::Compute(WORK));
            let took = now_ns() - t0;
            px[1]
                .as_ref()
                .unwrap()
                .send(0, &1u32.to_ne_bytes())
                .unwrap();
            took
        } else {
            wait_word(&r, 0, 1);
            now_ns()
        }
    }));
    assert_eq!(
        t[0], WORK,
        "the clock moved by the stated work and nothing else"
    );
    assert!(
        t[1] > WORK,
        "the message left after the work: arrived at {} ns",
        t[1]
    );
    assert!(
        sim.stats().nodes[0].compute_ns >= WORK,
        "counted as computation: {:?}",
        sim.stats().nodes[0]
    );
}

/// Host time between two library calls is charged as computation (x `cpu.compute_scale`,
/// less `cpu.compute_floor_ns`) when the thread computes, and not when it sleeps: the
/// interval is the lesser of the thread's CPU time and the wall time.
#[test]
fn computation_is_charged_and_a_sleep_is_not() {
    const SPIN_NS: f64 = 3e6;
    let p = Params::default();
    let (scale, floor) = (p.cpu.compute_scale, p.cpu.compute_floor_ns as f64);
    let sim = Sim::new(2, p).unwrap();
    let out = returned(sim.run(|ep| {
        if ep.rank() != 0 {
            return (0, 0, 0.0);
        }
        let t0 = now_ns();
        let c0 = thread_cpu();
        while (thread_cpu() - c0) * 1e9 < SPIN_NS {}
        let spun = (thread_cpu() - c0) * 1e9;
        let t1 = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t2 = now_ns();
        (t1 - t0, t2 - t1, spun)
    }));
    let (computed, slept, spun) = out[0];
    let want = (spun - floor) * scale;
    assert!(
        (0.97 * want..1.1 * want).contains(&(computed as f64)),
        "{spun:.0} ns of CPU time charged {computed} ns, where {want:.0} was expected"
    );
    // 30 ms of wall time at x120 would be 3.6 s. The sleep's own CPU time (its system call
    // and wake-up, 30-37 us on the VMs measured here) is charged like any other: 3.6-4.4 ms.
    assert!(slept < 36_000_000, "a 30 ms sleep was charged {slept} ns");
}

/// The simulator's reading of the thread's CPU clock (a system call of 0.3-1 us on the VMs
/// measured here) is not charged to the program: with no floor, back-to-back library calls
/// are charged only the few tens of nanoseconds between them, times the scale.
#[test]
fn reading_the_clocks_is_not_charged() {
    if cfg!(debug_assertions) {
        eprintln!("debug build: the library's own path is ten times slower, not checked");
        return;
    }
    let sim = Sim::new(1, params(&["cpu.compute_floor_ns=0"])).unwrap();
    let mut per = returned(sim.run(|_ep| {
        let mut t = now_ns();
        (0..2000)
            .map(|_| {
                let u = now_ns();
                u - std::mem::replace(&mut t, u)
            })
            .collect::<Vec<u64>>()
    }))
    .remove(0);
    per.sort_unstable();
    let median = per[per.len() / 2];
    // 0.25 us of host time at x120; one CPU-clock read inside the interval is 0.3-1 us.
    assert!(
        median < 30_000,
        "back-to-back calls were charged {median} ns each"
    );
}
