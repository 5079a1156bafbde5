//! Connections inside a VMMC job: the same semantics on shm (real processes, started by the
//! launcher) and on the simulated SHRIMP (every node a thread of this process, in virtual
//! time), with every send protocol.

use sockets::{JobListener, Options, Variant, VmmcStream};
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use vmmc::Endpoint;
use vmmc_run::testing::Job;

const PORT: u16 = 5;
/// Small rings, so that transfers wrap around and writers wait for room.
const CAP: usize = 8192;
/// Write and read sizes that keep the ring positions unaligned.
const CHUNKS: &[usize] = &[1, 3, 7, 64, 65, 1000, 4093, 10_000, 2];

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn opts(variant: Variant) -> Options {
    Options {
        variant,
        capacity: CAP,
    }
}

/// Writes `data` in chunks of the sizes of [`CHUNKS`] (each `write` may take less).
fn write_chunked(s: &VmmcStream, data: &[u8]) {
    let mut w = s;
    let mut at = 0;
    for &c in CHUNKS.iter().cycle() {
        if at == data.len() {
            break;
        }
        let end = (at + c).min(data.len());
        w.write_all(&data[at..end]).expect("write");
        at = end;
    }
}

/// Reads `len` bytes with buffers of the sizes of [`CHUNKS`], in reverse order.
fn read_chunked(s: &VmmcStream, len: usize) -> Vec<u8> {
    let mut r = s;
    let mut out = Vec::with_capacity(len);
    let mut buf = vec![0u8; 10_000];
    for &c in CHUNKS.iter().rev().cycle() {
        if out.len() == len {
            break;
        }
        let want = c.min(len - out.len());
        let n = r.read(&mut buf[..want]).expect("read");
        assert!(n > 0, "end of file after {} of {len} bytes", out.len());
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn large(rank: usize, idx: usize) -> usize {
    50_000 + 7 * rank + idx
}

const BLOCKS: &[usize] = &[0, 1, 5, 4096, 20_001];

/// The listener's side of one connection (see [`client_one`]).
fn serve_one(s: VmmcStream, rank: usize, idx: usize) {
    let seed = (rank * 100 + idx) as u32;
    // Ordering and a large transfer, checked byte for byte.
    let got = read_chunked(&s, large(rank, idx));
    assert!(
        got == pattern(got.len(), seed),
        "rank {rank} #{idx}: corrupted"
    );
    write_chunked(&s, &pattern(large(rank, idx) + 1, seed + 1));
    // Block transfer: each block echoed.
    let mut block = vec![0u8; 32 * 1024];
    for &len in BLOCKS {
        let n = s.read_block(&mut block).expect("read_block");
        assert_eq!(n, len);
        assert!(
            block[..n] == pattern(n, seed + len as u32)[..],
            "block {len}"
        );
        s.write_block(&block[..n]).expect("write_block");
    }
    // End of file after the peer's shutdown; then a last word and close.
    let mut b = [0u8; 4];
    assert_eq!((&s).read(&mut b).expect("read at end of file"), 0);
    (&s).write_all(b"bye").expect("bye");
}

/// The connecting side of one connection.
fn client_one(s: VmmcStream, rank: usize, idx: usize) {
    let seed = (rank * 100 + idx) as u32;
    write_chunked(&s, &pattern(large(rank, idx), seed));
    let got = read_chunked(&s, large(rank, idx) + 1);
    assert!(
        got == pattern(got.len(), seed + 1),
        "rank {rank} #{idx}: reply corrupted"
    );
    let mut block = vec![0u8; 32 * 1024];
    for &len in BLOCKS {
        s.write_block(&pattern(len, seed + len as u32))
            .expect("write_block");
        let n = s.read_block(&mut block).expect("read_block");
        assert!(
            block[..n] == pattern(len, seed + len as u32)[..],
            "echo {len}"
        );
    }
    s.shutdown(Shutdown::Write).expect("shutdown");
    let mut rest = Vec::new();
    (&s).read_to_end(&mut rest).expect("read to end of file");
    assert_eq!(rest, b"bye");
    // The listener closed its end: writes fail (at once, or once the close is visible).
    let mut spins = 0u32;
    loop {
        match (&s).write(b"x") {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => break,
            Ok(_) => vmmc::pace::relax(&mut spins),
            Err(e) => panic!("write after close: {e}"),
        }
    }
}

/// Rank 0 accepts `per_rank` connections from every other rank, and serves them in the order
/// each rank uses them; every connection runs the whole exchange.
fn semantics(ep: &Endpoint, variant: Variant, per_rank: usize) {
    if ep.rank() == 0 {
        let l = JobListener::bind_with(ep, PORT, opts(variant)).expect("bind");
        let mut conns = Vec::new();
        for _ in 0..(ep.size() - 1) * per_rank {
            let (s, rank) = l.accept().expect("accept");
            assert_eq!(s.peer_rank(), Some(rank));
            let mut hello = [0u8; 8];
            (&s).read_exact(&mut hello).expect("hello");
            let r = u32::from_le_bytes(hello[..4].try_into().unwrap()) as usize;
            let i = u32::from_le_bytes(hello[4..].try_into().unwrap()) as usize;
            assert_eq!(r, rank);
            conns.push(((r, i), s));
        }
        conns.sort_by_key(|c| c.0);
        for ((rank, idx), s) in conns {
            serve_one(s, rank, idx);
        }
    } else {
        // All connections first (a connect does not wait for the accept), then the hellos.
        let streams: Vec<VmmcStream> = (0..per_rank)
            .map(|_| VmmcStream::connect_job_with(ep, 0, PORT, opts(variant)).expect("connect"))
            .collect();
        for (i, s) in streams.iter().enumerate() {
            let mut hello = [0u8; 8];
            hello[..4].copy_from_slice(&(ep.rank() as u32).to_le_bytes());
            hello[4..].copy_from_slice(&(i as u32).to_le_bytes());
            (&*s).write_all(&hello).expect("hello");
            assert_eq!(s.variant(), variant);
        }
        for (i, s) in streams.into_iter().enumerate() {
            client_one(s, ep.rank(), i);
        }
    }
}

/// Node 1 connects, writes, and dies; node 0 reads what came, then end of file, and its
/// writes fail.
fn dead_peer(ep: &Endpoint, variant: Variant) {
    if ep.rank() == 0 {
        let l = JobListener::bind_with(ep, PORT + 1, opts(variant)).expect("bind");
        let (s, _) = l.accept().expect("accept");
        let mut b = [0u8; 12];
        (&s).read_exact(&mut b).expect("data written before death");
        assert_eq!(&b, b"before death");
        let mut rest = Vec::new();
        (&s).read_to_end(&mut rest)
            .expect("end of file from a dead peer");
        assert!(rest.is_empty());
        assert!(s.conn().peer_lost());
        let chunk = vec![7u8; 1000];
        loop {
            match (&s).write(&chunk) {
                Err(e) if e.kind() == ErrorKind::BrokenPipe => break,
                Ok(_) => {}
                Err(e) => panic!("write to a dead peer: {e}"),
            }
        }
    } else if ep.rank() == 1 {
        let s = VmmcStream::connect_job_with(ep, 0, PORT + 1, opts(variant)).expect("connect");
        (&s).write_all(b"before death").expect("write");
        die();
    }
}

/// Ends the calling node abruptly: through the pacer on the simulator, SIGKILL elsewhere.
fn die() -> ! {
    if let Some(p) = vmmc::pace::current() {
        p.die();
    }
    // SAFETY: kill on our own pid.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL returned")
}

// ----- on the simulated SHRIMP, in this process -----

fn on_sim(nodes: usize, body: impl Fn(&Endpoint) + Sync) -> Vec<vmmc_sim::Outcome<()>> {
    let sim = vmmc_sim::Sim::new(nodes, vmmc_sim::Params::default()).expect("sim");
    sim.run(|ep| body(&ep))
}

fn all_ok(outcomes: &[vmmc_sim::Outcome<()>], what: &str) {
    for (rank, o) in outcomes.iter().enumerate() {
        assert!(
            matches!(o, vmmc_sim::Outcome::Returned(())),
            "{what}: node {rank}: {o:?}"
        );
    }
}

const VARIANTS: [Variant; 3] = [Variant::Du1, Variant::Du2, Variant::Au];

#[test]
fn sim_two_nodes_every_variant() {
    for v in VARIANTS {
        all_ok(&on_sim(2, |ep| semantics(ep, v, 2)), v.name());
    }
}

#[test]
fn sim_four_nodes_every_variant() {
    for v in VARIANTS {
        all_ok(&on_sim(4, |ep| semantics(ep, v, 2)), v.name());
    }
}

#[test]
fn sim_dead_peer_is_reported() {
    for v in VARIANTS {
        let o = on_sim(2, |ep| dead_peer(ep, v));
        assert!(
            matches!(o[0], vmmc_sim::Outcome::Returned(())),
            "{v:?}: {o:?}"
        );
        assert!(matches!(o[1], vmmc_sim::Outcome::Died), "{v:?}: {o:?}");
    }
}

// ----- on shm, across real processes -----

fn shm_job(name: &str, ranks: usize, variant: Variant, body: impl FnOnce()) {
    Job::new(name, ranks)
        .env("VMMC_SOCK_VARIANT", variant.name())
        .run_ok(body);
}

fn variant_from_env() -> Variant {
    Variant::from_env().expect("VMMC_SOCK_VARIANT")
}

#[test]
fn shm_three_ranks_du1() {
    shm_job("shm_three_ranks_du1", 3, Variant::Du1, || {
        semantics(&vmmc_run::init().unwrap(), variant_from_env(), 2)
    });
}

#[test]
fn shm_three_ranks_du2() {
    shm_job("shm_three_ranks_du2", 3, Variant::Du2, || {
        semantics(&vmmc_run::init().unwrap(), variant_from_env(), 2)
    });
}

#[test]
fn shm_three_ranks_au() {
    shm_job("shm_three_ranks_au", 3, Variant::Au, || {
        semantics(&vmmc_run::init().unwrap(), variant_from_env(), 2)
    });
}

#[test]
fn shm_dead_peer_is_reported() {
    const NAME: &str = "shm_dead_peer_is_reported";
    let o = Job::new(NAME, 2).run(|| dead_peer(&vmmc_run::init().unwrap(), Variant::Du1));
    // Rank 1 dies by design; rank 0 must have finished its checks.
    assert_eq!(o.ranks_ok(), 1, "{}", o.report());
}

/// One thread connects to its own listener, accepts, and talks to itself: a connect does not
/// wait for the accept. Non-blocking reads, a taken port, and addresses.
fn one_thread(ep: &Endpoint, variant: Variant) {
    let me = ep.rank();
    let l = JobListener::bind_with(ep, PORT + 2, opts(variant)).expect("bind");
    let again = JobListener::bind_with(ep, PORT + 2, opts(variant));
    assert_eq!(again.map(|_| ()).unwrap_err().kind(), ErrorKind::AddrInUse);
    let c = VmmcStream::connect_job_with(ep, me, PORT + 2, opts(variant)).expect("connect");
    // A second connection too, before any accept.
    let c2 = VmmcStream::connect_job_with(ep, me, PORT + 2, opts(variant)).expect("connect");
    let (s, rank) = l.accept().expect("accept");
    let (s2, _) = l.accept().expect("accept the second");
    assert_eq!(rank, me);
    assert_eq!(c.local_addr().unwrap_err().kind(), ErrorKind::Unsupported);
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 5];
    assert_eq!((&s).read(&mut b).unwrap_err().kind(), ErrorKind::WouldBlock);
    l.set_nonblocking(true).unwrap();
    assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    (&c).write_all(b"hello").unwrap();
    (&c2).write_all(b"other").unwrap();
    let mut spins = 0u32;
    let n = loop {
        match (&s).read(&mut b) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => vmmc::pace::relax(&mut spins),
            Err(e) => panic!("{e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    (&s).read_exact(&mut b[n..]).unwrap();
    assert_eq!(&b, b"hello");
    (&s2).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"other");
    (&s).write_all(b"back!").unwrap();
    (&c).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"back!");
}

#[test]
fn sim_one_thread_connects_to_its_own_listener() {
    for v in VARIANTS {
        all_ok(&on_sim(2, |ep| one_thread(ep, v)), v.name());
    }
}

#[test]
fn shm_one_thread_connects_to_its_own_listener() {
    shm_job(
        "shm_one_thread_connects_to_its_own_listener",
        1,
        Variant::Du1,
        || one_thread(&vmmc_run::init().unwrap(), variant_from_env()),
    );
}

/// On shm a reader that finds nothing sleeps (it does not spin) and the writer's
/// notification wakes it; a read timeout gives `WouldBlock`.
#[test]
fn shm_idle_reader_sleeps_and_is_woken() {
    shm_job(
        "shm_idle_reader_sleeps_and_is_woken",
        2,
        Variant::Du1,
        || {
            let ep = vmmc_run::init().unwrap();
            if ep.rank() == 0 {
                let l = JobListener::bind(&ep, PORT + 3).unwrap();
                let (data, _) = l.accept().unwrap();
                let (go, _) = l.accept().unwrap();
                data.set_read_timeout(Some(std::time::Duration::from_millis(5)))
                    .unwrap();
                let mut b = [0u8; 4];
                assert_eq!(
                    (&data).read(&mut b).unwrap_err().kind(),
                    ErrorKind::WouldBlock
                );
                data.set_read_timeout(None).unwrap();
                let sleeps = sockets::stats().sleeps;
                let reader = std::thread::spawn(move || {
                    let mut b = [0u8; 4];
                    (&data).read_exact(&mut b).unwrap();
                    b
                });
                // Once the reader sleeps, let the writer go.
                while sockets::stats().sleeps == sleeps {
                    std::thread::yield_now();
                }
                (&go).write_all(b"go").unwrap();
                assert_eq!(&reader.join().unwrap(), b"data");
            } else {
                let data = VmmcStream::connect_job(&ep, 0, PORT + 3).unwrap();
                let go = VmmcStream::connect_job(&ep, 0, PORT + 3).unwrap();
                // Both accepted before anything is written (the listener takes them in turn).
                (&data).write_all(b"").unwrap();
                let mut b = [0u8; 2];
                (&go).read_exact(&mut b).unwrap();
                (&data).write_all(b"data").unwrap();
                assert!(sockets::stats().wakeups_sent >= 1, "{:?}", sockets::stats());
            }
        },
    );
}

/// Every node listens, connects to every other node, then accepts: the pattern of a
/// cooperative cache, where a connect that waited for its accept would deadlock. Blocks go
/// both ways on every connection.
fn all_to_all(ep: &Endpoint, variant: Variant) {
    let (me, n) = (ep.rank(), ep.size());
    // Rings large enough for a whole block: every node writes before it reads.
    let opts = Options {
        variant,
        capacity: 64 * 1024,
    };
    let l = JobListener::bind_with(ep, PORT + 4, opts).expect("bind");
    let out: Vec<(usize, VmmcStream)> = (0..n)
        .filter(|&r| r != me)
        .map(|r| {
            let s = VmmcStream::connect_job_with(ep, r, PORT + 4, opts).expect("connect");
            (r, s)
        })
        .collect();
    let mut inc: Vec<(usize, VmmcStream)> = (1..n)
        .map(|_| {
            let (s, r) = l.accept().expect("accept");
            (r, s)
        })
        .collect();
    inc.sort_by_key(|c| c.0);
    let block = |from: usize, to: usize| pattern(20_000 + 13 * from + to, (from * 64 + to) as u32);
    // Write a block on each outgoing connection (each fits in the peer's ring), then read
    // each incoming one.
    for (r, s) in &out {
        s.write_block(&block(me, *r)).expect("write_block");
    }
    let mut buf = vec![0u8; 64 * 1024];
    for (r, s) in &inc {
        let got = s.read_block(&mut buf).expect("read_block");
        assert!(buf[..got] == block(*r, me)[..], "block from {r}");
        s.write_block(&buf[..got]).expect("echo");
    }
    for (r, s) in &out {
        let got = s.read_block(&mut buf).expect("echoed block");
        assert!(buf[..got] == block(me, *r)[..], "echo from {r}");
    }
}

#[test]
fn sim_all_to_all_every_variant() {
    for v in VARIANTS {
        all_ok(&on_sim(4, |ep| all_to_all(ep, v)), v.name());
    }
}

#[test]
fn shm_all_to_all() {
    shm_job("shm_all_to_all", 3, Variant::Du1, || {
        all_to_all(&vmmc_run::init().unwrap(), variant_from_env())
    });
}

/// A listener closed right after its accept leaves the accepted connection working, as a
/// kernel's does, also when the connecting side waits for the accept while it happens.
fn listener_closed_after_accept(ep: &Endpoint, variant: Variant, rounds: u32) {
    for round in 0..rounds {
        let word = round.to_le_bytes();
        if ep.rank() == 0 {
            let l = JobListener::bind_with(ep, PORT + 6, opts(variant)).expect("bind");
            let (s, _) = l.accept().expect("accept");
            drop(l);
            let mut b = [0u8; 4];
            (&s).read_exact(&mut b)
                .expect("read after the listener closed");
            assert_eq!(b, word, "round {round}");
            (&s).write_all(&b).expect("echo");
        } else {
            let s = VmmcStream::connect_job_with(ep, 0, PORT + 6, opts(variant)).expect("connect");
            (&s).write_all(&word)
                .unwrap_or_else(|e| panic!("round {round}: write: {e}"));
            let mut b = [0u8; 4];
            (&s).read_exact(&mut b).expect("echo");
            assert_eq!(b, word, "round {round}");
        }
    }
}

#[test]
fn sim_listener_closed_after_accept() {
    all_ok(
        &on_sim(2, |ep| listener_closed_after_accept(ep, Variant::Du1, 50)),
        "du1",
    );
}

#[test]
fn shm_listener_closed_after_accept() {
    shm_job("shm_listener_closed_after_accept", 2, Variant::Du1, || {
        listener_closed_after_accept(&vmmc_run::init().unwrap(), variant_from_env(), 300)
    });
}

/// A rank's connections are accepted in the order it made them, as from a kernel's backlog:
/// after a first connection (which leaves the listener's scan just past that rank's first
/// request slot), the rank connects twice before either is accepted, and writes on each as
/// soon as it is accepted; the first accept returns the first connection.
fn accepted_in_connect_order(ep: &Endpoint, variant: Variant) {
    let port = PORT + 7;
    if ep.rank() == 0 {
        let l = JobListener::bind_with(ep, port, opts(variant)).expect("bind");
        let (first, _) = l.accept().expect("accept");
        let mut b = [0u8; 2];
        // Both requests are in the listener's slots before the second byte comes.
        (&first).read_exact(&mut b).expect("both connects made");
        assert_eq!(&b, b"x!");
        for want in [b'a', b'b'] {
            let (s, rank) = l.accept().expect("accept");
            assert_eq!(rank, 1);
            (&s).read_exact(&mut b[..1]).expect("read");
            assert_eq!(b[0] as char, want as char, "accepted out of connect order");
        }
        (&first).write_all(b"k").expect("done");
    } else if ep.rank() == 1 {
        let first = VmmcStream::connect_job_with(ep, 0, port, opts(variant)).expect("connect");
        // Returns once accepted: its request slot is free again, the scan past it.
        (&first).write_all(b"x").expect("write");
        let a = VmmcStream::connect_job_with(ep, 0, port, opts(variant)).expect("connect");
        let b = VmmcStream::connect_job_with(ep, 0, port, opts(variant)).expect("connect");
        (&first).write_all(b"!").expect("write");
        // Each written once accepted, in whichever order that comes (no deadlock either way).
        a.set_nonblocking(true).expect("nonblocking");
        b.set_nonblocking(true).expect("nonblocking");
        let mut left = vec![(&a, b"a"), (&b, b"b")];
        let (mut spins, listener) = (0u32, ep.proc_of(0).expect("rank 0"));
        while !left.is_empty() {
            ep.check_peer(listener).expect("the listener's process");
            left.retain(|&(mut s, w)| match s.write(&w[..]) {
                Ok(1) => false,
                Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                r => panic!("write: {r:?}"),
            });
            vmmc::pace::relax(&mut spins);
        }
        let mut k = [0u8; 1];
        (&first).read_exact(&mut k).expect("done");
    }
}

#[test]
fn sim_accepted_in_connect_order() {
    for v in VARIANTS {
        all_ok(&on_sim(2, |ep| accepted_in_connect_order(ep, v)), v.name());
    }
}

#[test]
fn shm_accepted_in_connect_order() {
    shm_job("shm_accepted_in_connect_order", 2, Variant::Du1, || {
        accepted_in_connect_order(&vmmc_run::init().unwrap(), variant_from_env())
    });
}

/// Data written just before a close is read before the end of file, also by a reader that
/// looks at the ring while the last write and the close land (nonblocking reads in a loop).
fn last_write_before_close(ep: &Endpoint, variant: Variant, rounds: u32) {
    let port = PORT + 8;
    if ep.rank() == 0 {
        let l = JobListener::bind_with(ep, port, opts(variant)).expect("bind");
        for round in 0..rounds {
            let (s, _) = l.accept().expect("accept");
            (&s).write_all(&round.to_le_bytes()).expect("write");
        }
    } else {
        let peer = ep.proc_of(0).expect("rank 0");
        for round in 0..rounds {
            let s = VmmcStream::connect_job_with(ep, 0, port, opts(variant)).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            let (mut got, mut b, mut spins) = (Vec::new(), [0u8; 8], 0u32);
            // The writer may end (its last round written and closed) between a read that
            // found nothing and the look at it: what it wrote must still be read, then the
            // end of file. A read that would block once the writer is known gone fails.
            let mut gone = false;
            loop {
                match (&s).read(&mut b) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&b[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        assert!(
                            !gone,
                            "round {round}: the writer is gone and a read still would block"
                        );
                        gone = ep.check_peer(peer).is_err();
                        vmmc::pace::relax(&mut spins);
                    }
                    Err(e) => panic!("round {round}: read: {e}"),
                }
            }
            assert_eq!(
                got,
                round.to_le_bytes(),
                "round {round}: what came before the end"
            );
        }
    }
}

#[test]
fn sim_last_write_before_close() {
    for v in VARIANTS {
        all_ok(
            &on_sim(2, |ep| last_write_before_close(ep, v, 20)),
            v.name(),
        );
    }
}

#[test]
fn shm_last_write_before_close() {
    for v in VARIANTS {
        shm_job("shm_last_write_before_close", 2, v, || {
            last_write_before_close(&vmmc_run::init().unwrap(), variant_from_env(), 400)
        });
    }
}
