//! The cluster file system of DFS-sockets (seed 001 §3) without its communication: the
//! workload, the files' contents, where each block lives, a node's memory cache, and the
//! client that reads blocks and verifies them; and the plain sequential run of the same
//! reads on one node.
//!
//! **Files and striping.** Each of the `clients` clients owns `files` files of `file_size`
//! bytes, in blocks of `block_size` bytes; client `k` has files `k * files ..`. Block `b` of
//! file `f` has its home on node `(f + b) % nodes`: every file is striped over all nodes,
//! each file starting one node further on, as in Zebra and xFS. A block's contents are a
//! hash of the seed, the file, the block and the word ([`DfsParams::fill_block`]), so any
//! node can make any block (this is the "disk") and every client knows the checksum every
//! block must have.
//!
//! **Memory.** Each node's memory cache holds `cache_size` bytes. Warm-up loads every node's
//! home blocks from the disk into its cache ([`NodeCache::warm`]); the rest of the cache keeps
//! copies of blocks the node's own clients fetched from other nodes, least recently used
//! first out ([`Copies`]). The workload is one that the cluster's memory holds (the paper's
//! "no disk I/O"), so a layout whose home blocks overflow a node's cache is refused. The
//! preset cache grows to a node's home share when that is larger (on few nodes: one node
//! holds all of Table 1's working sets), an explicit `--cache-size` does not.
//!
//! **Clients.** Clients run on the even ranks, at most half of the nodes (seed 001 §3: "client
//! threads on half of the nodes"), round robin: client `k` on rank `2 * (k % h)` with `h =
//! max(1, nodes / 2)`. Each reads its files from the first block to the last, `reads` times
//! after a warm-up pass, and checks every block it reads against the block's checksum.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

pub use super::radix::splitmix64;

/// The workload.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct DfsParams {
    /// Client threads (Table 1's problem size: 4).
    pub clients: usize,
    /// Bytes per block (a multiple of 8).
    pub block_size: usize,
    /// Bytes per file (a multiple of the block size).
    pub file_size: usize,
    /// Files per client: its working set is `files * file_size` bytes.
    pub files: usize,
    /// Bytes of each node's memory cache.
    pub cache_size: usize,
    /// Whether the cache size was chosen (then it stays as it is even where a node's home
    /// blocks do not fit), rather than the preset's (which grows to hold them).
    #[serde(skip)]
    pub cache_explicit: bool,
    /// Times each client reads its working set in the timed phase (after one warm-up pass).
    pub reads: usize,
    /// Seed of the files' contents.
    pub seed: u64,
}

impl DfsParams {
    /// Table 1's problem, 4 clients: 8 KB blocks, 3 files of 2 MB per client (a 6 MB working
    /// set) and 4 MB of cache per node, so that on the paper's 8 nodes a client's working set
    /// is 1.5 times a node's memory and the four working sets (24 MB) fill three quarters of
    /// the cluster's 32 MB; each client reads its files twice after the warm-up.
    pub const PAPER: DfsParams = DfsParams {
        clients: 4,
        block_size: 8 << 10,
        file_size: 2 << 20,
        files: 3,
        cache_size: 4 << 20,
        cache_explicit: false,
        reads: 2,
        seed: 1,
    };
    /// A small problem for tests: 2 clients, 4 KB blocks, 2 files of 32 KB each, 32 KB of
    /// cache per node, read twice.
    pub const TEST: DfsParams = DfsParams {
        clients: 2,
        block_size: 4 << 10,
        file_size: 32 << 10,
        files: 2,
        cache_size: 32 << 10,
        cache_explicit: false,
        reads: 2,
        seed: 1,
    };

    /// Refuses problems the file system cannot run.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=4096).contains(&self.clients) {
            return Err(format!("--clients {}: 1 to 4096", self.clients));
        }
        if !(64..=16 << 20).contains(&self.block_size) || !self.block_size.is_multiple_of(8) {
            return Err(format!(
                "--block-size {}: a multiple of 8 from 64 bytes to 16 MB",
                self.block_size
            ));
        }
        if self.file_size == 0 || !self.file_size.is_multiple_of(self.block_size) {
            return Err(format!(
                "--file-size {}: a positive multiple of the block size ({})",
                self.file_size, self.block_size
            ));
        }
        if self.files == 0 || self.reads == 0 {
            return Err("--files and --reads: at least 1".into());
        }
        if self.cache_size < self.block_size {
            return Err(format!(
                "--cache-size {}: at least one block ({})",
                self.cache_size, self.block_size
            ));
        }
        let blocks = self.files as u128 * self.clients as u128 * self.blocks_per_file() as u128;
        if blocks > u32::MAX as u128 {
            return Err(format!("{blocks} blocks in all: at most 2^32 - 1"));
        }
        Ok(())
    }

    /// Blocks per file.
    pub fn blocks_per_file(&self) -> usize {
        self.file_size / self.block_size
    }

    /// Blocks of a client's working set.
    pub fn working_set_blocks(&self) -> usize {
        self.files * self.blocks_per_file()
    }

    /// Files in the file system.
    pub fn total_files(&self) -> usize {
        self.clients * self.files
    }

    /// Writes block `block` of file `file` into `out` (`block_size` bytes): what the disk
    /// holds.
    pub fn fill_block(&self, file: u32, block: u32, out: &mut [u8]) {
        let key = splitmix64(
            self.seed
                ^ ((u64::from(file) << 32) | u64::from(block)).wrapping_mul(0xD6E8_FEB8_6659_FD93),
        );
        for (i, w) in out.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&splitmix64(key.wrapping_add(i as u64)).to_le_bytes());
        }
    }
}

/// The checksum of a block: any change of one 8-byte word changes it (each step is a
/// bijection of the running value).
#[inline]
pub fn checksum(block: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64;
    for w in block.chunks_exact(8) {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h.rotate_left(5) ^ x).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// A block: (file, block in the file).
pub type BlockId = (u32, u32);

/// Where everything is on a job of `nodes` nodes.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The workload.
    pub p: DfsParams,
    /// Nodes.
    pub nodes: usize,
    /// Nodes that run clients (the even ranks below `2 * client_nodes`).
    pub client_nodes: usize,
    /// Blocks each node's cache holds.
    pub cache_blocks: usize,
    /// `home_base[p][f]`: the cache slot of node `p`'s first home block of file `f`
    /// (`home_base[p][files]`: node `p`'s home blocks in all).
    home_base: Vec<Vec<usize>>,
}

impl Layout {
    /// The layout of `p` on `nodes` nodes; refuses one whose home blocks overflow a cache.
    pub fn new(p: DfsParams, nodes: usize) -> Result<Layout, String> {
        p.check()?;
        if nodes == 0 {
            return Err("no nodes".into());
        }
        let bpf = p.blocks_per_file();
        let home_base: Vec<Vec<usize>> = (0..nodes)
            .map(|q| {
                let mut base = Vec::with_capacity(p.total_files() + 1);
                let mut at = 0;
                base.push(0);
                for f in 0..p.total_files() {
                    // Blocks b < bpf with (f + b) % nodes == q.
                    let first = (q + nodes - f % nodes) % nodes;
                    at += if first < bpf {
                        (bpf - first).div_ceil(nodes)
                    } else {
                        0
                    };
                    base.push(at);
                }
                base
            })
            .collect();
        let most = home_base
            .iter()
            .map(|b| b[p.total_files()])
            .max()
            .unwrap_or(0);
        let preset = p.cache_size / p.block_size;
        let cache_blocks = if p.cache_explicit {
            preset
        } else {
            preset.max(most)
        };
        if most > cache_blocks {
            return Err(format!(
                "--cache-size {}: a node is home to {most} blocks of the working sets but its \
                 cache holds {cache_blocks}; DFS-sockets' workload fits in the cluster's memory \
                 (no disk I/O, seed 001 §3): raise --cache-size or use more nodes",
                p.cache_size
            ));
        }
        Ok(Layout {
            p,
            nodes,
            client_nodes: (nodes / 2).max(1),
            cache_blocks,
            home_base,
        })
    }

    /// The rank that runs client `k`.
    pub fn node_of_client(&self, k: usize) -> usize {
        2 * (k % self.client_nodes)
    }

    /// The clients on rank `node`, in order.
    pub fn clients_on(&self, node: usize) -> Vec<usize> {
        (0..self.p.clients)
            .filter(|&k| self.node_of_client(k) == node)
            .collect()
    }

    /// The home node of a block (striping).
    pub fn home(&self, (file, block): BlockId) -> usize {
        (file as usize + block as usize) % self.nodes
    }

    /// Blocks whose home is `node`.
    pub fn home_blocks(&self, node: usize) -> usize {
        self.home_base[node][self.p.total_files()]
    }

    /// The cache slot of a block on its home node.
    pub fn home_slot(&self, (file, block): BlockId) -> usize {
        let q = self.home((file, block));
        self.home_base[q][file as usize] + block as usize / self.nodes
    }

    /// Whether `id` names a block of the file system.
    pub fn exists(&self, (file, block): BlockId) -> bool {
        (file as usize) < self.p.total_files() && (block as usize) < self.p.blocks_per_file()
    }

    /// Read `i` of client `k` (reads go through its working set in order, again and again).
    pub fn read_at(&self, k: usize, i: usize) -> BlockId {
        let bpf = self.p.blocks_per_file();
        let w = i % self.p.working_set_blocks();
        ((k * self.p.files + w / bpf) as u32, (w % bpf) as u32)
    }
}

/// The copies of other nodes' blocks in a node's cache, least recently used first out.
#[derive(Debug, Default)]
pub struct Copies {
    /// Slots of the cache that hold copies: `first .. first + capacity`.
    first: usize,
    capacity: usize,
    /// Block -> (slot, time of last use).
    map: HashMap<BlockId, (usize, u64)>,
    /// Time of last use -> block.
    order: BTreeMap<u64, BlockId>,
    clock: u64,
}

impl Copies {
    /// Copies kept in slots `first .. first + capacity`.
    pub fn new(first: usize, capacity: usize) -> Copies {
        Copies {
            first,
            capacity,
            ..Copies::default()
        }
    }

    /// The slot of a copy of `id`, if there is one (it becomes the most recently used).
    pub fn get(&mut self, id: BlockId) -> Option<usize> {
        let (slot, used) = self.map.get_mut(&id)?;
        self.order.remove(used);
        self.clock += 1;
        *used = self.clock;
        self.order.insert(self.clock, id);
        Some(*slot)
    }

    /// A slot for a new copy of `id` (not yet kept), evicting the least recently used copy if
    /// the slots are full; `None` when there is no room for copies at all.
    pub fn insert(&mut self, id: BlockId) -> Option<usize> {
        if self.capacity == 0 {
            return None;
        }
        let slot = if self.map.len() < self.capacity {
            self.first + self.map.len()
        } else {
            let (_, old) = self.order.pop_first()?;
            self.map.remove(&old)?.0
        };
        self.clock += 1;
        self.map.insert(id, (slot, self.clock));
        self.order.insert(self.clock, id);
        Some(slot)
    }

    /// Copies held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no copy is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One node's memory cache: its home blocks, then copies of others' blocks.
pub struct NodeCache {
    block_size: usize,
    /// `cache_blocks` blocks.
    data: Vec<u8>,
    copies: Copies,
}

impl NodeCache {
    /// The cache of node `me` after warm-up: its home blocks read from the disk.
    pub fn warm(l: &Layout, me: usize) -> NodeCache {
        let bs = l.p.block_size;
        let home = l.home_blocks(me);
        let mut data = vec![0u8; l.cache_blocks * bs];
        for f in 0..l.p.total_files() as u32 {
            for b in 0..l.p.blocks_per_file() as u32 {
                if l.home((f, b)) == me {
                    let s = l.home_slot((f, b));
                    l.p.fill_block(f, b, &mut data[s * bs..(s + 1) * bs]);
                }
            }
        }
        NodeCache {
            block_size: bs,
            data,
            copies: Copies::new(home, l.cache_blocks - home),
        }
    }

    /// The block in cache slot `slot`.
    pub fn slot(&self, slot: usize) -> &[u8] {
        &self.data[slot * self.block_size..(slot + 1) * self.block_size]
    }

    /// Test only: flips one bit of the block in slot `slot`.
    pub fn corrupt(&mut self, slot: usize) {
        self.data[slot * self.block_size + self.block_size / 2] ^= 1;
    }

    /// A copy of `id`, if this cache holds one.
    pub fn copy(&mut self, id: BlockId) -> Option<&[u8]> {
        let s = self.copies.get(id)?;
        Some(self.slot(s))
    }

    /// Keeps a copy of `id` (`data`), evicting the least recently used copy if needed.
    pub fn keep_copy(&mut self, id: BlockId, data: &[u8]) {
        if let Some(s) = self.copies.insert(id) {
            let bs = self.block_size;
            self.data[s * bs..(s + 1) * bs].copy_from_slice(data);
        }
    }

    /// Slots for copies of other nodes' blocks.
    pub fn copy_slots(&self) -> usize {
        self.copies.capacity
    }
}

/// Where a client's reads were found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sources {
    /// In the node's own cache as a home block.
    pub local: u64,
    /// In the node's own cache as a copy.
    pub copies: u64,
    /// Fetched from another node's cache.
    pub remote: u64,
}

impl Sources {
    /// As words for a reduction.
    pub fn to_words(self) -> [u64; 3] {
        [self.local, self.copies, self.remote]
    }
    /// From [`Sources::to_words`].
    pub fn from_words(w: &[u64]) -> Sources {
        Sources {
            local: w[0],
            copies: w[1],
            remote: w[2],
        }
    }
    /// The sum.
    pub fn plus(self, o: Sources) -> Sources {
        Sources {
            local: self.local + o.local,
            copies: self.copies + o.copies,
            remote: self.remote + o.remote,
        }
    }
    /// Blocks read.
    pub fn total(self) -> u64 {
        self.local + self.copies + self.remote
    }
}

/// A block whose checksum was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadBlock {
    /// The client that read it.
    pub client: usize,
    /// The block.
    pub id: BlockId,
    /// The read's number in its phase.
    pub read: usize,
}

/// A client's reads: the next one, where they came from, and the verification of every block.
pub struct Reader {
    /// The client.
    pub k: usize,
    /// The next read of this phase.
    pub next: usize,
    /// Reads in this phase.
    pub end: usize,
    /// The block being read (the client's buffer).
    pub buf: Vec<u8>,
    /// Expected checksums of the working set, in read order.
    want: Vec<u64>,
    /// This phase's reads by source.
    pub sources: Sources,
    /// Blocks read with a wrong checksum (every phase).
    pub bad: u64,
    /// The first of them.
    pub first_bad: Option<BadBlock>,
}

impl Reader {
    /// Client `k` of `l`, with the checksums of its working set (computed from the disk).
    pub fn new(l: &Layout, k: usize) -> Reader {
        let bs = l.p.block_size;
        let mut buf = vec![0u8; bs];
        let want = (0..l.p.working_set_blocks())
            .map(|i| {
                let (f, b) = l.read_at(k, i);
                l.p.fill_block(f, b, &mut buf);
                checksum(&buf)
            })
            .collect();
        Reader {
            k,
            next: 0,
            end: 0,
            buf,
            want,
            sources: Sources::default(),
            bad: 0,
            first_bad: None,
        }
    }

    /// Starts a phase of `passes` reads of the working set.
    pub fn start(&mut self, passes: usize) {
        self.next = 0;
        self.end = passes * self.want.len();
        self.sources = Sources::default();
    }

    /// Whether the phase's reads are done.
    pub fn finished(&self) -> bool {
        self.next == self.end
    }

    /// The block `buf` now holds is read `next`'s (block `id`): verifies it and moves on.
    pub fn done(&mut self, id: BlockId) {
        if checksum(&self.buf) != self.want[self.next % self.want.len()] {
            self.bad += 1;
            self.first_bad.get_or_insert(BadBlock {
                client: self.k,
                id,
                read: self.next,
            });
        }
        self.next += 1;
    }
}

/// The plain sequential run on the one-node layout `l`: every client in turn reads one block
/// (as the 1-node job's event loop interleaves them), a warm-up pass, then the timed `reads`
/// passes; the time of the timed passes in ns, or what failed the check.
pub fn sequential(l: &Layout) -> Result<u64, String> {
    assert_eq!(l.nodes, 1, "the sequential run is on one node");
    let p = &l.p;
    let cache = NodeCache::warm(l, 0);
    let mut readers: Vec<Reader> = (0..p.clients).map(|k| Reader::new(l, k)).collect();
    let phase = |readers: &mut [Reader], passes: usize| {
        for r in readers.iter_mut() {
            r.start(passes);
        }
        let mut busy = true;
        while busy {
            busy = false;
            for r in readers.iter_mut().filter(|r| !r.finished()) {
                let id = l.read_at(r.k, r.next);
                r.buf.copy_from_slice(cache.slot(l.home_slot(id)));
                r.sources.local += 1;
                r.done(id);
                busy = true;
            }
        }
    };
    phase(&mut readers, 1);
    let t0 = vmmc::pace::now_ns();
    phase(&mut readers, p.reads);
    let t = vmmc::pace::now_ns() - t0;
    let bad: u64 = readers.iter().map(|r| r.bad).sum();
    if let Some(b) = readers.iter().find_map(|r| r.first_bad) {
        return Err(format!(
            "{bad} block(s) read with a wrong checksum, the first by client {} (file {} block {}, read {})",
            b.client, b.id.0, b.id.1, b.read
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striping_puts_every_block_in_one_home_slot() {
        for nodes in [1, 2, 3, 5, 8, 16] {
            let l = Layout::new(DfsParams::TEST, nodes).unwrap();
            let mut seen = vec![vec![false; l.cache_blocks]; nodes];
            for f in 0..l.p.total_files() as u32 {
                for b in 0..l.p.blocks_per_file() as u32 {
                    let (q, s) = (l.home((f, b)), l.home_slot((f, b)));
                    assert!(s < l.home_blocks(q), "{nodes} nodes: ({f}, {b})");
                    assert!(!seen[q][s], "{nodes} nodes: slot {s} of node {q} twice");
                    seen[q][s] = true;
                }
            }
            let total: usize = (0..nodes).map(|q| l.home_blocks(q)).sum();
            assert_eq!(total, l.p.total_files() * l.p.blocks_per_file());
        }
    }

    #[test]
    fn the_paper_layout_on_eight_nodes() {
        let l = Layout::new(DfsParams::PAPER, 8).unwrap();
        assert_eq!(
            (0..8).map(|n| l.clients_on(n).len()).collect::<Vec<_>>(),
            [1, 0, 1, 0, 1, 0, 1, 0]
        );
        // A client's working set is larger than a node's memory; all of them fit.
        let ws = l.p.working_set_blocks();
        assert!(ws > l.cache_blocks);
        assert!(ws * l.p.clients <= l.cache_blocks * 8);
        assert_eq!(l.cache_blocks, 512);
        assert_eq!(l.home_blocks(0), 384);
        // On one node the preset cache grows to hold everything; a set one does not.
        assert_eq!(Layout::new(DfsParams::PAPER, 1).unwrap().cache_blocks, 3072);
        let set = DfsParams {
            cache_explicit: true,
            ..DfsParams::PAPER
        };
        assert!(Layout::new(set, 1).unwrap_err().contains("no disk I/O"));
    }

    #[test]
    fn copies_are_evicted_least_recently_used_first() {
        let mut c = Copies::new(10, 2);
        assert_eq!(c.insert((0, 0)), Some(10));
        assert_eq!(c.insert((0, 1)), Some(11));
        assert_eq!(c.get((0, 0)), Some(10));
        // (0, 1) is the least recently used.
        assert_eq!(c.insert((0, 2)), Some(11));
        assert_eq!(c.get((0, 1)), None);
        assert_eq!(c.get((0, 2)), Some(11));
        assert_eq!(c.len(), 2);
        assert_eq!(Copies::new(0, 0).insert((1, 1)), None);
    }

    #[test]
    fn the_checksum_sees_one_flipped_bit_and_blocks_differ() {
        let p = DfsParams::TEST;
        let mut a = vec![0u8; p.block_size];
        let mut b = vec![0u8; p.block_size];
        p.fill_block(3, 1, &mut a);
        p.fill_block(1, 3, &mut b);
        assert_ne!(checksum(&a), checksum(&b));
        let c = checksum(&a);
        a[100] ^= 4;
        assert_ne!(checksum(&a), c);
    }

    #[test]
    fn sequential_reads_check() {
        let l = Layout::new(DfsParams::TEST, 1).unwrap();
        sequential(&l).unwrap();
    }
}
