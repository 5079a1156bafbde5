//! A small all-gather over VMMC for programs that use the VMMC API directly (Radix-VMMC):
//! barriers, histogram exchange and sums, written with deliberate updates and flags.
//!
//! Every node exports one buffer of two halves (alternate rounds use alternate halves), each
//! with one slot per source node. In round `r` node `p` writes its words into slot `p` of every
//! other node with one deliberate update whose last word is `r` (VMMC shows the last word
//! of a transfer last, so a receiver that sees `r` sees the data). A node can start round
//! `r + 2`, which reuses the half of round `r`, only after it received every node's round
//! `r + 1` words, which each node sends only after it read round `r`'s: no slot is
//! overwritten before it is read.

use crate::Stats;
use std::cell::{Cell, RefCell};
use vmmc::{Endpoint, ExportOptions, MemKind, Proxy, Region, Result};

/// Buffer id of the collective's receive buffer.
const COLL_BUF: u32 = 0xC011;

/// The collective state of one node.
pub struct Coll {
    ep: Endpoint,
    region: Region,
    peers: Vec<Option<Proxy>>,
    /// Data words per slot (the largest all-gather).
    slot_words: usize,
    round: Cell<u32>,
    stats: RefCell<Stats>,
}

impl Coll {
    /// Sets up the collective for all-gathers of at most `slot_words` words. Every node of
    /// the job must call it; it returns once every node has.
    pub fn new(ep: &Endpoint, slot_words: usize) -> Result<Coll> {
        let n = ep.size();
        let bytes = 2 * n * (slot_words + 1) * 4;
        let region = ep.alloc(bytes, MemKind::Shared)?;
        region.fill(0, bytes, 0)?;
        ep.export(COLL_BUF, &region, ExportOptions::new())?;
        let mut peers = Vec::with_capacity(n);
        for p in 0..n {
            peers.push(if p == ep.rank() {
                None
            } else {
                Some(ep.import(ep.proc_of(p)?, COLL_BUF)?)
            });
        }
        let c = Coll {
            ep: ep.clone(),
            region,
            peers,
            slot_words,
            round: Cell::new(0),
            stats: RefCell::new(Stats::default()),
        };
        // Everyone has exported before anyone's first all-gather lands.
        c.barrier()?;
        Ok(c)
    }

    /// What this node's collectives sent.
    pub fn stats(&self) -> Stats {
        *self.stats.borrow()
    }

    fn slot_off(&self, round: u32, src: usize) -> usize {
        let half = (round % 2) as usize;
        ((half * self.ep.size() + src) * (self.slot_words + 1)) * 4
    }

    /// Every node's `mine` (all of the same length, at most `slot_words`), by rank.
    pub fn allgather(&self, mine: &[u32]) -> Result<Vec<Vec<u32>>> {
        assert!(
            mine.len() <= self.slot_words,
            "all-gather larger than its slot"
        );
        let r = self.round.get() + 1;
        self.round.set(r);
        let (me, n) = (self.ep.rank(), self.ep.size());
        // The data ends right before the round word: one transfer, the round word last.
        let mut msg = Vec::with_capacity((mine.len() + 1) * 4);
        for w in mine.iter().chain(std::iter::once(&r)) {
            msg.extend_from_slice(&w.to_ne_bytes());
        }
        let at = self.slot_off(r, me) + (self.slot_words - mine.len()) * 4;
        for p in self.peers.iter().flatten() {
            p.send(at, &msg)?;
            let mut s = self.stats.borrow_mut();
            s.messages += 1;
            s.bytes += msg.len() as u64;
        }
        let mut all = Vec::with_capacity(n);
        let mut bytes = vec![0u8; mine.len() * 4];
        for src in 0..n {
            if src == me {
                all.push(mine.to_vec());
                continue;
            }
            let flag = self.slot_off(r, src) + self.slot_words * 4;
            let owner = self.ep.proc_of(src)?;
            self.region
                .wait_u32(flag, |v| v == r, || self.ep.check_peer(owner))?;
            self.region.read(flag - bytes.len(), &mut bytes)?;
            all.push(words(&bytes));
        }
        Ok(all)
    }

    /// Returns when every node has called it.
    pub fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(drop)
    }

    /// Element-wise sums of 64-bit values over all nodes (wrapping), on every node.
    pub fn sum_u64(&self, x: &[u64]) -> Result<Vec<u64>> {
        let mine: Vec<u32> = x
            .iter()
            .flat_map(|v| [*v as u32, (*v >> 32) as u32])
            .collect();
        let all = self.allgather(&mine)?;
        let mut out = vec![0u64; x.len()];
        for a in &all {
            for (i, o) in out.iter_mut().enumerate() {
                *o = o.wrapping_add(a[2 * i] as u64 | (a[2 * i + 1] as u64) << 32);
            }
        }
        Ok(out)
    }

    /// Element-wise maxima of 64-bit values over all nodes, on every node.
    pub fn max_u64(&self, x: &[u64]) -> Result<Vec<u64>> {
        let mine: Vec<u32> = x
            .iter()
            .flat_map(|v| [*v as u32, (*v >> 32) as u32])
            .collect();
        let all = self.allgather(&mine)?;
        let mut out = vec![0u64; x.len()];
        for a in &all {
            for (i, o) in out.iter_mut().enumerate() {
                *o = (*o).max(a[2 * i] as u64 | (a[2 * i + 1] as u64) << 32);
            }
        }
        Ok(out)
    }
}

/// Decodes native-endian words of `bytes` into `dst` (of a quarter of its length), without
/// allocating.
pub fn decode_into(dst: &mut [u32], bytes: &[u8]) {
    for (d, c) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
        *d = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Native-endian words of `bytes` (a multiple of 4 long).
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
