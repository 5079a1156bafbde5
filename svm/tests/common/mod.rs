//! The semantics every protocol must keep, written once and run on shm (real processes)
//! and on the simulated SHRIMP (threads in virtual time).
#![allow(dead_code)]

use svm::{Config, Error, Placement, Protocol, Result, Svm};

/// A small deterministic generator (xorshift), the same on every node.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub fn config(p: Protocol) -> Config {
    Config::new(p).space(8 << 20)
}

/// A write then a flag under a lock: the next holder that sees the flag sees the data.
pub fn lock_message(s: &mut Svm) -> Result<()> {
    let data = s.alloc::<u32>(3000, Placement::RoundRobin)?;
    let flag = s.alloc::<u32>(1, Placement::Node(s.size() - 1))?;
    if s.rank() == 0 {
        s.acquire(7)?;
        {
            let v = s.view(data);
            for i in 0..data.len() {
                v.set(i, i as u32 * 3 + 1)?;
            }
            s.view(flag).set(0, 1)?;
        }
        s.release(7)?;
    } else if s.rank() == s.size() - 1 {
        loop {
            s.acquire(7)?;
            let seen = s.view(flag).get(0)?;
            if seen == 1 {
                let got = s.view(data).to_vec()?;
                for (i, x) in got.iter().enumerate() {
                    assert_eq!(*x, i as u32 * 3 + 1, "node {}: element {i}", s.rank());
                }
                s.release(7)?;
                break;
            }
            s.release(7)?;
        }
    }
    s.barrier()
}

/// Write notices travel transitively: node 0 writes x under lock 1; node 1 sees it, then
/// writes y under lock 2; node 2 sees y and must then see x, which it had cached stale.
pub fn transitivity(s: &mut Svm) -> Result<()> {
    let n = s.size();
    let x = s.alloc::<u64>(1, Placement::Node(1 % n))?;
    let y = s.alloc::<u64>(1, Placement::Node(0))?;
    // Every node caches x's page (zero) before the writes.
    assert_eq!(s.view(x).get(0)?, 0);
    s.barrier()?;
    let last = n.min(3) - 1;
    match s.rank() {
        0 => {
            s.acquire(1)?;
            s.view(x).set(0, 42)?;
            s.release(1)?;
        }
        1 => loop {
            s.acquire(1)?;
            let v = s.view(x).get(0)?;
            s.release(1)?;
            if v == 42 {
                s.acquire(2)?;
                s.view(y).set(0, 1)?;
                s.release(2)?;
                break;
            }
        },
        r if r == last => loop {
            s.acquire(2)?;
            let v = s.view(y).get(0)?;
            s.release(2)?;
            if v == 1 {
                assert_eq!(s.view(x).get(0)?, 42, "x must be visible transitively");
                break;
            }
        },
        _ => {}
    }
    s.barrier()
}

/// Barrier visibility with write-write false sharing: every node writes an interleaved
/// share, then everybody reads all of it; several rounds on the same pages.
pub fn barrier_rounds(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    let a = s.alloc::<u32>(5000, Placement::Blocked)?;
    for round in 1..=4u32 {
        {
            let v = s.view(a);
            for i in (me..a.len()).step_by(n) {
                v.set(i, round * 100_000 + i as u32)?;
            }
        }
        s.barrier()?;
        let got = s.view(a).to_vec()?;
        for (i, x) in got.iter().enumerate() {
            assert_eq!(
                *x,
                round * 100_000 + i as u32,
                "node {me} round {round} element {i} stats {}",
                s.stats()
            );
        }
        s.barrier()?;
    }
    Ok(())
}

/// Several writers to one page, different words, several rounds: the home merges them.
pub fn one_page_many_writers(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    let words = s.page_size() / 4;
    let per = words / n;
    let a = s.alloc::<u32>(words, Placement::Node(n / 2))?;
    for round in 1..=3u32 {
        {
            let v = s.view(a);
            for i in me * per..(me + 1) * per {
                v.set(i, round << 20 | i as u32)?;
            }
        }
        s.barrier()?;
        let got = s.view(a).to_vec()?;
        for (i, x) in got.iter().enumerate().take(per * n) {
            assert_eq!(
                *x,
                round << 20 | i as u32,
                "node {me} round {round} word {i}"
            );
        }
        s.barrier()?;
    }
    Ok(())
}

/// Each node writes a shuffled share of a large array; every node checks the sum. Then a
/// lock-protected counter under contention ends at the exact total; a never-written page
/// reads as zeros.
pub fn random_and_counter(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    let len = 4000 * (12 - n.min(8));
    let a = s.alloc::<u64>(len, Placement::RoundRobin)?;
    let untouched = s.alloc::<u64>(1024, Placement::RoundRobin)?;
    let counter = s.alloc::<u64>(1, Placement::Node(0))?;
    let mut perm: Vec<usize> = (0..len).collect();
    let mut rng = Rng::new(0x5eed);
    for i in (1..len).rev() {
        perm.swap(i, rng.next() as usize % (i + 1));
    }
    {
        let v = s.view(a);
        for &i in perm.iter().skip(me).step_by(n) {
            v.set(i, i as u64 * 3 + 1)?;
        }
    }
    s.barrier()?;
    let sum: u64 = s.view(a).to_vec()?.iter().sum();
    let want: u64 = (0..len as u64).map(|i| i * 3 + 1).sum();
    assert_eq!(sum, want, "node {me}: sum of the shuffled array");
    assert!(s.view(untouched).to_vec()?.iter().all(|&x| x == 0));
    let per = 40u64;
    for _ in 0..per {
        s.acquire(3)?;
        let c = s.view(counter);
        c.set(0, c.get(0)? + 1)?;
        s.release(3)?;
    }
    s.barrier()?;
    assert_eq!(
        s.view(counter).get(0)?,
        per * n as u64,
        "node {me}: the counter"
    );
    Ok(())
}

/// Several locks taken in a random order by every node at once: each node picks one of
/// four locks per round and adds one to that lock's counter under it. The requests cross
/// on their way to the queues' tails (which move from node to node), and every counter ends
/// at the number of times its lock was taken anywhere.
pub fn many_locks(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    const LOCKS: usize = 4;
    let rounds = if n > 8 { 30 } else { 60 };
    // counters per lock, then each node's count of its picks per lock
    let c = s.alloc::<u64>(LOCKS + n * LOCKS, Placement::RoundRobin)?;
    let mut rng = Rng::new(0x10c5 + me as u64 * 7919);
    let mut mine = [0u64; LOCKS];
    for _ in 0..rounds {
        let l = rng.next() as usize % LOCKS;
        s.acquire(4 + l as u32)?;
        let v = s.view(c);
        v.set(l, v.get(l)? + 1)?;
        s.release(4 + l as u32)?;
        mine[l] += 1;
    }
    {
        let v = s.view(c);
        for (l, &k) in mine.iter().enumerate() {
            v.set(LOCKS + me * LOCKS + l, k)?;
        }
    }
    s.barrier()?;
    let w = s.view(c).to_vec()?;
    for l in 0..LOCKS {
        let picked: u64 = (0..n).map(|j| w[LOCKS + j * LOCKS + l]).sum();
        assert_eq!(w[l], picked, "node {me}: lock {}'s counter", 4 + l);
    }
    assert_eq!(
        w[..LOCKS].iter().sum::<u64>(),
        (rounds * n) as u64,
        "node {me}: every round counted"
    );
    s.barrier()?;
    Ok(())
}

/// Flags with acquire/release semantics, as Radix's prefix tree uses them: node k waits for
/// node k-1's flag, adds its own value to the running sum, and sets its flag.
pub fn flag_chain(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    let sums = s.alloc::<u64>(n, Placement::RoundRobin)?;
    for round in 1..=2u32 {
        if me > 0 {
            s.flag_wait(me as u32 - 1 + 10 * round, round)?;
        }
        {
            let v = s.view(sums);
            let before = if me > 0 { v.get(me - 1)? } else { 0 };
            v.set(me, before + (me as u64 + 1) * round as u64)?;
        }
        s.flag_set(me as u32 + 10 * round, round)?;
        s.barrier()?;
        let all = s.view(sums).to_vec()?;
        for (k, x) in all.iter().enumerate() {
            assert_eq!(
                *x,
                ((k + 1) * (k + 2) / 2) as u64 * round as u64,
                "node {me} round {round} sum {k}"
            );
        }
        s.barrier()?;
    }
    Ok(())
}

/// A flag whose manager (node `flag mod N`) is another node: node 0 sets it, then waits on
/// it itself (its manager once sent such a waiter to the last setter, here the waiter, whose
/// own forward slot nobody reads: it hung); node 1 waits too and sees node 0's write.
pub fn flag_own_set(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    if n < 2 {
        return Ok(());
    }
    let flag = (1000 / n * n + 1) as u32; // managed by node 1
    let x = s.alloc::<u32>(1, Placement::Node(n - 1))?;
    let _ = s.view(x).get(0)?;
    s.barrier()?;
    match me {
        0 => {
            s.view(x).set(0, 7)?;
            s.flag_set(flag, 1)?;
            s.flag_wait(flag, 1)?;
        }
        1 => {
            s.flag_wait(flag, 1)?;
            assert_eq!(s.view(x).get(0)?, 7, "node 1 after the flag");
        }
        _ => {}
    }
    s.barrier()
}

/// Raw one-word signals between the nodes, outside the shared space (so that they carry no
/// write notices): node `a` raises signal `i` at node `b`, node `b` waits for it.
pub struct Signals {
    ep: vmmc::Endpoint,
    words: vmmc::Region,
}

const SIGNALS: u32 = 0x2356_7E11;

impl Signals {
    /// Collective (every node exports its words, then a barrier).
    pub fn new(s: &mut Svm) -> Result<Signals> {
        let ep = s.endpoint().clone();
        let words = ep.alloc(4096, vmmc::MemKind::Shared)?;
        ep.export(SIGNALS, &words, vmmc::ExportOptions::new())?;
        s.barrier()?;
        Ok(Signals { ep, words })
    }
    pub fn raise(&self, to: usize, i: usize) -> Result<()> {
        let p = self.ep.import(self.ep.proc_of(to)?, SIGNALS)?;
        p.send(4 * i, &1u32.to_ne_bytes())?;
        Ok(())
    }
    pub fn wait(&self, from: usize, i: usize) -> Result<()> {
        let peer = self.ep.proc_of(from)?;
        self.words
            .wait_u32(4 * i, |v| v == 1, || self.ep.check_peer(peer))?;
        Ok(())
    }
}

/// A flag keeps its largest value, and a wait for it sees the writes made before the set
/// that gave it that value even when a smaller set (by a node that never saw them) reached
/// the manager later: node 1 writes x and sets the flag to 2; then node 2 (node 0 on two
/// nodes), which knows nothing of x, sets it to 1; then node 0, the flag's manager, waits
/// for 2 and must see x. The manager once granted the wait with the notices of the last
/// setter. The order of the sets is made with raw signals, and node 0 takes both sets in
/// (an acquire serves first) before its wait.
pub fn flag_largest_set_wins(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    if n < 2 {
        return Ok(());
    }
    let flag = (1000 / n * n) as u32; // managed by node 0
    let lock = (1000 / n * n) as u32; // its token at node 0, used by nobody else
    let small = if n >= 3 { 2 } else { 0 };
    let sig = Signals::new(s)?;
    let x = s.alloc::<u32>(1, Placement::Node(1))?;
    // Every node caches x's page (zero).
    assert_eq!(s.view(x).get(0)?, 0);
    s.barrier()?;
    if me == 1 {
        s.view(x).set(0, 42)?;
        s.flag_set(flag, 2)?;
        sig.raise(small, 0)?;
    }
    if me == small {
        sig.wait(1, 0)?;
        if me == 0 {
            s.acquire(lock)?;
            s.release(lock)?;
        }
        s.flag_set(flag, 1)?;
        if me != 0 {
            sig.raise(0, 1)?;
        }
    }
    if me == 0 {
        if small != 0 {
            sig.wait(small, 1)?;
            s.acquire(lock)?;
            s.release(lock)?;
        }
        s.flag_wait(flag, 2)?;
        assert_eq!(
            s.view(x).get(0)?,
            42,
            "node 0 after waiting for the flag's 2"
        );
    }
    s.barrier()
}

/// Cursors and scans: every node writes runs that cross pages homed elsewhere through write
/// cursors, then every node scans the whole array in place; elements that straddle pages
/// (3 bytes each) take the checked path; misuse is a clear error.
pub fn cursors_and_scans(s: &mut Svm) -> Result<()> {
    let (me, n) = (s.rank(), s.size());
    let words = s.page_size() / 4;
    // Run r (of 4 per node) of node k starts at (4k + r) * run; a run is 1.5 pages.
    let run = words * 3 / 2;
    let len = 4 * n * run;
    let a = s.alloc::<u32>(len, Placement::RoundRobin)?;
    let odd = s.alloc::<[u8; 3]>(s.page_size() * 2 / 3 + 5, Placement::RoundRobin)?;
    let value = |i: usize| (i as u32).wrapping_mul(2_654_435_761) | 1;
    {
        let v = s.view(a);
        let mut at = v.cursors((0..4).map(|r| (4 * me + r) * run))?;
        // Interleaved across the runs, as a counting sort's buckets are.
        for k in 0..run {
            for r in [2, 0, 3, 1] {
                assert_eq!(at.position(r), Some((4 * me + r) * run + k));
                at.put(r, value((4 * me + r) * run + k))?;
            }
        }
        assert!(matches!(at.put(4, 0), Err(Error::OutOfBounds { .. })));
        if me == n - 1 {
            // The last run ends the array: one more store is out of bounds.
            assert!(matches!(at.put(3, 0), Err(Error::OutOfBounds { .. })));
        }
        // One writer: diffs are word-granular, so 3-byte elements of different writers
        // would share words.
        let o = s.view(odd);
        if me == n - 1 {
            for i in 0..o.len() {
                o.set(i, [i as u8, (i >> 8) as u8, 7])?;
            }
        }
    }
    s.barrier()?;
    let v = s.view(a);
    let mut seen = 0usize;
    v.for_each(0..len, |i, x| {
        assert_eq!(x, value(i), "node {me}: element {i}");
        seen += 1;
    })?;
    assert_eq!(seen, len);
    // A part, stopping at the first error the closure returns.
    let mut last = 0;
    let r = v.try_for_each(run / 2..len, |i, _| {
        last = i;
        if i == run * 2 {
            Err(Error::Protocol("stop".into()))
        } else {
            Ok(())
        }
    });
    assert!(matches!(r, Err(Error::Protocol(_))) && last == run * 2);
    assert!(matches!(
        v.for_each(len - 1..len + 1, |_, _| ()),
        Err(Error::OutOfBounds { .. })
    ));
    let o = s.view(odd);
    o.for_each(0..o.len(), |i, x| {
        assert_eq!(x, [i as u8, (i >> 8) as u8, 7], "node {me}: odd {i}")
    })?;
    assert_eq!(
        o.get(o.len() - 1)?,
        [(o.len() - 1) as u8, ((o.len() - 1) >> 8) as u8, 7]
    );
    s.barrier()?;
    Ok(())
}

/// Every scenario in turn, on one space.
pub fn all(s: &mut Svm) -> Result<()> {
    let t = std::time::Instant::now();
    let step = |name: &str, s: &Svm| {
        if s.rank() == 0 && std::env::var_os("SVM_TRACE").is_some() {
            eprintln!("{name} done at {:?}: {}", t.elapsed(), s.stats());
        }
    };
    lock_message(s)?;
    step("lock_message", s);
    transitivity(s)?;
    step("transitivity", s);
    barrier_rounds(s)?;
    step("barrier_rounds", s);
    one_page_many_writers(s)?;
    step("one_page", s);
    random_and_counter(s)?;
    step("random", s);
    many_locks(s)?;
    step("many_locks", s);
    flag_chain(s)?;
    step("flag_chain", s);
    cursors_and_scans(s)?;
    step("cursors", s);
    let st = s.stats();
    assert!(st.barriers > 0);
    if s.size() > 1 {
        assert!(st.write_notices_received > 0, "node {}: {st}", s.rank());
    }
    Ok(())
}
