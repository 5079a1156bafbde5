//! Radix-VMMC (seed 001 §3, §4.2): SPLASH-2's integer radix sort on the VMMC API.
//!
//! Node `p` holds block `p` of the keys ([`block_lo`]). Each pass (one digit, least
//! significant first): every node counts its digits; the histograms are all-gathered
//! ([`Coll`]), which gives every node the global position of every key it holds (stable: by
//! digit, then by node, then by position); then the keys move to their positions, which
//! belong to the node whose block contains them:
//! - **AU**: every node binds an automatic-update region to every other node's key array and
//!   stores each key straight into place (a "highly scattered and irregular permutation").
//!   After its keys, a node stores a flag word through the same binding; the receiver waits
//!   for every sender's flag and takes the keys the others wrote out of its array.
//! - **DU**: every node gathers the keys for each other node, in digit order, into one
//!   buffer and sends it with one deliberate update into that node's inbox, then a flag; the
//!   receiver scatters each sender's runs into place (it knows them from the histograms).
//!
//! Keys that stay on their node are written locally in both versions, so on one node the
//! program does what the plain sequential sort does ([`crate::kernels::radix::sort`]).
//! The check: every block sorted, blocks in order across nodes, and the output a permutation
//! of the input (a multiset [`Checksum`] summed over nodes).

use crate::coll::{decode_into, Coll};
use crate::kernels::radix::{block_lo, first_unsorted, scatter, Checksum, RadixParams};
use crate::{AppError, AppResult, Params, Report, Size, Stats, Version};
use vmmc::{AuOptions, AutoUpdateBinding, Endpoint, ExportOptions, MemKind, Proxy};

const APP: &str = "radix-vmmc";
/// Buffer id of each node's key array (AU) or inbox (DU).
const KEYS_BUF: u32 = 0x4AD1;

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<RadixParams> {
    let base = match params.size {
        Size::Paper => RadixParams::PAPER,
        Size::Test => RadixParams::TEST,
    };
    let p = RadixParams {
        keys: params.keys.unwrap_or(base.keys),
        radix_bits: params.radix_bits.unwrap_or(base.radix_bits),
        key_bits: params.key_bits.unwrap_or(base.key_bits),
        seed: params.seed.unwrap_or(base.seed),
    };
    p.check().map_err(AppError::Usage)?;
    Ok(p)
}

/// The plain sequential sort of the same problem (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    crate::kernels::radix::sequential(&problem(params)?)
        .map_err(|what| AppError::CheckFailed { app: APP, what })
}

/// Where keys go in one pass: for each node and digit, the global range its keys of that
/// digit take.
struct Layout {
    n: usize,
    radix: usize,
    /// `los[q]`: first global position of node `q`'s block (`los[n]` = the number of keys).
    los: Vec<usize>,
    /// `start[p * radix + d]`: first global position of node `p`'s keys of digit `d`.
    start: Vec<usize>,
    /// `count[p * radix + d]`.
    count: Vec<usize>,
}

impl Layout {
    fn new(hists: &[Vec<u32>], keys: usize, radix: usize) -> Layout {
        let n = hists.len();
        let mut start = vec![0; n * radix];
        let mut count = vec![0; n * radix];
        let mut at = 0usize;
        for d in 0..radix {
            for (p, h) in hists.iter().enumerate() {
                start[p * radix + d] = at;
                count[p * radix + d] = h[d] as usize;
                at += h[d] as usize;
            }
        }
        Layout {
            n,
            radix,
            los: (0..=n).map(|q| block_lo(keys, n, q)).collect(),
            start,
            count,
        }
    }

    fn lo(&self, q: usize) -> usize {
        self.los[q]
    }

    /// The node whose block holds global position `g` (the last of empty blocks at `g`).
    fn owner(&self, g: usize) -> usize {
        self.los.partition_point(|&l| l <= g) - 1
    }

    /// The part of node `p`'s digit-`d` run that lands in node `q`'s block.
    fn part(&self, p: usize, d: usize, q: usize) -> (usize, usize) {
        let s = self.start[p * self.radix + d];
        let e = s + self.count[p * self.radix + d];
        (s.max(self.lo(q)), e.min(self.lo(q + 1)))
    }

    /// `m[p * n + q]`: keys node `p` sends to node `q`.
    fn matrix(&self) -> Vec<usize> {
        let mut m = vec![0; self.n * self.n];
        // Runs lie in order of (digit, node), so the owner only moves forward.
        let mut q = 0;
        for d in 0..self.radix {
            for p in 0..self.n {
                let (mut g, e) = (
                    self.start[p * self.radix + d],
                    self.start[p * self.radix + d] + self.count[p * self.radix + d],
                );
                while g < e {
                    while self.lo(q + 1) <= g {
                        q += 1;
                    }
                    let qe = self.lo(q + 1).min(e);
                    m[p * self.n + q] += qe - g;
                    g = qe;
                }
            }
        }
        m
    }
}

/// Where node `me`'s keys of one digit that leave the node go: the node, the end of its
/// block, and what to add to a global position to get the index in that node's array (AU) or
/// in my message to it (DU).
#[derive(Clone, Copy)]
struct Cursor {
    owner: usize,
    end: usize,
    adj: i64,
}

/// The keys that leave the node (kept out of the hot loop).
struct Away<'a> {
    cursors: &'a mut [Cursor],
    later: &'a [Vec<(usize, i64)>],
    lay: &'a Layout,
    bindings: &'a [Option<AutoUpdateBinding>],
    outbox: &'a mut [Vec<u8>],
    me: usize,
    du: bool,
}

impl Away<'_> {
    /// Places key `k` of digit `d` at global position `g`, in another node's block.
    #[cold]
    #[inline(never)]
    fn place(&mut self, d: usize, g: usize, k: u32) -> vmmc::Result<()> {
        let c = &mut self.cursors[d];
        if g >= c.end || c.owner == self.me {
            // This run goes on in a later node's block.
            c.owner = self.lay.owner(g);
            c.end = self.lay.lo(c.owner + 1);
            c.adj = if self.du {
                let owner = c.owner;
                self.later[d]
                    .iter()
                    .find(|(q, _)| *q == owner)
                    .expect("a part per block the run reaches")
                    .1
            } else {
                -(self.lay.lo(c.owner) as i64)
            };
        }
        let idx = (g as i64 + c.adj) as usize;
        match &self.bindings[c.owner] {
            Some(b) => b.store_u32(idx * 4, k),
            None => {
                self.outbox[c.owner][idx * 4..idx * 4 + 4].copy_from_slice(&k.to_ne_bytes());
                Ok(())
            }
        }
    }
}

/// Runs Radix-VMMC on this node (see [`crate::RunFn`]).
pub fn run(ep: &Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let rp = problem(params)?;
    let (me, n) = (ep.rank(), ep.size());
    let radix = rp.radix();
    let combining = params.combining.unwrap_or(true);
    let lo = |p: usize| block_lo(rp.keys, n, p);
    let (my_lo, my_len) = (lo(me), lo(me + 1) - lo(me));
    let chunk_max = (0..n).map(|p| lo(p + 1) - lo(p)).max().unwrap_or(0);

    // Start-up (not timed): the collective, the key arrays or inboxes, the imports, the
    // bindings, the input.
    let coll = Coll::new(ep, radix.max(8))?;
    // Alone, a node keeps every key: its array is only for the others' keys. Fresh memory
    // reads as zeros (the flags start at 0).
    let flags_at = if n > 1 { chunk_max * 4 } else { 0 };
    let region = ep.alloc(flags_at + n * 4, MemKind::Shared)?;
    ep.export(KEYS_BUF, &region, ExportOptions::new())?;
    let mut proxies: Vec<Option<Proxy>> = Vec::with_capacity(n);
    for q in 0..n {
        proxies.push(if q == me {
            None
        } else {
            Some(ep.import(ep.proc_of(q)?, KEYS_BUF)?)
        });
    }
    let bindings: Vec<Option<AutoUpdateBinding>> = match params.version {
        Version::Au => proxies
            .iter()
            .map(|p| {
                p.as_ref()
                    .map(|p| {
                        p.bind(AuOptions {
                            combining,
                            notify: false,
                        })
                    })
                    .transpose()
            })
            .collect::<vmmc::Result<_>>()?,
        Version::Du => (0..n).map(|_| None).collect(),
    };
    let mut src = rp.keys_in(my_lo..my_lo + my_len);
    // Touched now, so that the timed phase takes no first-touch page faults.
    let mut next = vec![1u32; my_len];
    let input = Checksum::of(&src);
    let mut stats = Stats::default();
    let mut hist = vec![0u32; radix];
    let mut cursors = vec![
        Cursor {
            owner: 0,
            end: 0,
            adj: 0
        };
        radix
    ];
    let mut outbox: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut inbox = Vec::new();
    let mut later: Vec<Vec<(usize, i64)>> = vec![Vec::new(); radix];
    // Positions as u32, as the sequential sort's counters: 1024 of them stay in fewer cache
    // lines beside the 1024 lines the keys are being written to.
    let mut place = vec![0u32; radix];

    coll.barrier()?;
    let t0 = vmmc::pace::now_ns();
    for pass in 0..rp.passes() {
        rp.histogram(&src, pass, &mut hist);
        let lay = Layout::new(&coll.allgather(&hist)?, rp.keys, radix);
        let m = lay.matrix();
        // Where each of my runs goes: the block it starts in and, for DU, the place of each
        // of its parts in my message to the node of that part (messages hold runs by digit).
        let du = params.version == Version::Du;
        let mut msg_pos = vec![0usize; n];
        for (d, parts) in later.iter_mut().enumerate() {
            parts.clear();
            let s = lay.start[me * radix + d];
            let e = s + lay.count[me * radix + d];
            if s == e {
                continue;
            }
            let q0 = lay.owner(s);
            let adj = if du {
                let mut q = q0;
                while q < n && lay.lo(q) < e {
                    let (a, b) = lay.part(me, d, q);
                    if a < b {
                        parts.push((
                            q,
                            if q == me {
                                -(my_lo as i64)
                            } else {
                                let adj = msg_pos[q] as i64 - a as i64;
                                msg_pos[q] += b - a;
                                adj
                            },
                        ));
                    }
                    q += 1;
                }
                parts[0].1
            } else if q0 == me {
                -(my_lo as i64)
            } else {
                -(lo(q0) as i64)
            };
            cursors[d] = Cursor {
                owner: q0,
                end: lay.lo(q0 + 1),
                adj,
            };
        }
        if du {
            for q in (0..n).filter(|&q| q != me) {
                outbox[q].clear();
                outbox[q].resize(m[me * n + q] * 4, 0);
            }
        }
        // The hot loop: a key whose place is in my block goes straight there, as in the
        // sequential sort; the others take their digit's cursor.
        for (d, p) in place.iter_mut().enumerate() {
            *p = lay.start[me * radix + d] as u32;
        }
        let mut at = 0;
        loop {
            at += scatter(&rp, pass, &src[at..], &mut place, &mut next, my_lo);
            let Some(&k) = src.get(at) else { break };
            at += 1;
            let d = rp.digit(k, pass);
            let g = place[d];
            place[d] = g + 1;
            let g = g as usize;
            let mut away = Away {
                cursors: &mut cursors,
                later: &later,
                lay: &lay,
                bindings: &bindings,
                outbox: &mut outbox,
                me,
                du,
            };
            away.place(d, g, k)?;
        }
        // Tell every other node that my keys are there (the flag after the data).
        let flag = pass + 1;
        let my_flag = flags_at + me * 4;
        for q in (0..n).filter(|&q| q != me) {
            let sent = m[me * n + q] as u64;
            if let Some(b) = &bindings[q] {
                b.store_u32(my_flag, flag)?;
                b.flush()?;
                stats.au_words += sent + 1;
                stats.bytes += (sent + 1) * 4;
            } else {
                let p = proxies[q].as_ref().expect("a proxy per other node");
                if sent > 0 {
                    // My place in q's inbox: after the nodes before me.
                    let at: usize = (0..me).filter(|&s| s != q).map(|s| m[s * n + q]).sum();
                    p.send(at * 4, &outbox[q])?;
                    stats.messages += 1;
                    stats.bytes += sent * 4;
                }
                p.send(my_flag, &flag.to_ne_bytes())?;
                stats.messages += 1;
                stats.bytes += 4;
            }
        }
        // Wait for everyone's keys, then take them into place.
        for s in (0..n).filter(|&s| s != me) {
            let owner = ep.proc_of(s)?;
            region.wait_u32(flags_at + s * 4, |v| v == flag, || ep.check_peer(owner))?;
        }
        if n > 1 {
            match params.version {
                Version::Au => {
                    inbox.resize(my_len * 4, 0);
                    region.read(0, &mut inbox)?;
                    for s in (0..n).filter(|&s| s != me) {
                        for d in 0..radix {
                            let (a, b) = lay.part(s, d, me);
                            if a < b {
                                let (i, j) = (a - my_lo, b - my_lo);
                                decode_into(&mut next[i..j], &inbox[i * 4..j * 4]);
                            }
                        }
                    }
                }
                Version::Du => {
                    let from_others: usize =
                        (0..n).filter(|&s| s != me).map(|s| m[s * n + me]).sum();
                    inbox.resize(from_others * 4, 0);
                    if from_others > 0 {
                        region.read(0, &mut inbox)?;
                    }
                    let mut pos = 0;
                    for s in (0..n).filter(|&s| s != me) {
                        for d in 0..radix {
                            let (a, b) = lay.part(s, d, me);
                            if a < b {
                                let (i, j) = (a - my_lo, b - my_lo);
                                decode_into(&mut next[i..j], &inbox[pos * 4..(pos + j - i) * 4]);
                                pos += j - i;
                            }
                        }
                    }
                }
            }
        }
        std::mem::swap(&mut src, &mut next);
    }
    let t = vmmc::pace::now_ns() - t0;
    let stats = stats.plus(coll.stats());

    // The check (not timed).
    if params.inject_fault && me == n - 1 && !src.is_empty() {
        let i = src.len() / 2;
        src[i] ^= 1;
    }
    let local_bad = first_unsorted(&src).map_or(0, |i| (my_lo + i + 1) as u64);
    let edges = [
        src.first().copied().unwrap_or(0),
        src.last().copied().unwrap_or(0),
        (!src.is_empty()) as u32,
    ];
    let all_edges = coll.allgather(&edges)?;
    let sums = coll.sum_u64(
        &[
            &input.to_words()[..],
            &Checksum::of(&src).to_words()[..],
            &[local_bad.min(1)],
            &stats.to_words()[..],
        ]
        .concat(),
    )?;
    let time = coll.max_u64(&[t, local_bad])?;
    let fail = |what: String| AppError::CheckFailed { app: APP, what };
    if time[1] > 0 {
        return Err(fail(format!(
            "{} node(s) hold keys out of order (e.g. global index {})",
            sums[6],
            time[1] - 1
        )));
    }
    let mut last: Option<u32> = None;
    for (p, e) in all_edges.iter().enumerate() {
        if e[2] == 0 {
            continue;
        }
        if let Some(l) = last {
            if l > e[0] {
                return Err(fail(format!(
                    "node {p}'s first key {} is below the previous block's last {l}",
                    e[0]
                )));
            }
        }
        last = Some(e[1]);
    }
    let (cin, cout) = (
        Checksum::from_words([sums[0], sums[1], sums[2]]),
        Checksum::from_words([sums[3], sums[4], sums[5]]),
    );
    if cin != cout {
        return Err(fail(format!(
            "the output is not a permutation of the input (input {cin:?}, output {cout:?})"
        )));
    }
    if me != 0 {
        return Ok(None);
    }
    let mut problem = serde_json::to_value(rp).expect("serializable");
    problem["passes"] = rp.passes().into();
    problem["combining"] = combining.into();
    Ok(Some(Report::new(
        APP,
        "vmmc",
        ep,
        params,
        problem,
        time[0],
        Stats::from_words(&sums[7..10]),
        format!(
            "{} keys sorted across {n} nodes, a permutation of the input (checksum)",
            cout.count
        ),
    )))
}
