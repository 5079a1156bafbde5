//! DFS-sockets (seed 001 §3, Table 1): a cluster file system over stream sockets that caches
//! data cooperatively in the memory of all nodes, read by client threads on half of the nodes
//! after the caches are warm, so that the run is node-to-node block transfers and no disk I/O.
//!
//! # The file system
//!
//! The workload and the caches are those of [`crate::kernels::dfs`]: every file is striped
//! block by block over all nodes; a block's *home* node holds it in its memory cache (loaded
//! from the disk, here a generator, at warm-up); the rest of a node's cache keeps copies of
//! the blocks its own clients fetched, least recently used first out. A client reads its
//! files from the first block to the last, one block at a time, and looks for each block
//! in its node's cache, as a home block or as a copy, else fetches it from the block's home
//! node over a socket and keeps a copy. A client's working set is larger than a node's
//! cache but all of them fit in the cluster's memory (Table 1's size on 8 nodes: 6 MB per
//! client, 4 MB per node, 24 MB in 32 MB), so a client's reads are remote except for the
//! blocks homed on its own node.
//!
//! # Sockets and the protocol
//!
//! Every node runs a file server on [`PORT`] ([`sockets::JobListener`]), and each client
//! opens one connection to every other node's server ([`sockets::VmmcStream::connect_job_with`]):
//! one connection per client-server pair, made before the warm-up. A request is
//! [`REQUEST_LEN`] bytes, four little-endian words `[magic "DFSQ", operation, file, block]`;
//! a read is answered with the block by the sockets' block-transfer extension
//! ([`sockets::VmmcStream::write_block`], received whole with
//! [`sockets::VmmcStream::read_block`]); the one-copy DU variant sends it straight from the
//! server's cache. A malformed
//! request (wrong magic, unknown operation, a block that does not exist or whose home is
//! another node) is answered with a block that starts with `DFS-ERR ` and says why, and both
//! sides fail with that message. At the end of the warm-up each client sends every server
//! a `DONE` request; at the end of the timed phase it closes its connections, and a server
//! stops when all of its clients' connections are closed.
//!
//! The AU version sends with the sockets' automatic-update variant ([`sockets::Variant::Au`]:
//! the bytes are stored through an automatic-update binding to the peer's ring, with
//! combining), the DU version with one-copy deliberate update ([`sockets::Variant::Du1`]).
//! A client's incoming ring holds a whole response ([`response_ring`]) and a client has one
//! request outstanding per connection, so a server's write never waits for room.
//!
//! # One thread per node
//!
//! A node's server and its clients are one event loop on one thread: it serves every
//! readable request, then moves each of its clients one step (a block from the cache, a
//! request sent, or a response taken), and when nothing was ready it waits a turn by the
//! core's policy ([`vmmc::wait`]: on the simulated SHRIMP, which runs every node as one thread
//! in virtual time, this advances the node's clock to the next arrival; elsewhere it spins,
//! yields where ranks outnumber cores, then sleeps until a peer's transfer rings). So there are no threads that the simulator does not schedule,
//! and a node waiting for its own responses still serves the others. A long wait checks that
//! the other nodes are still in the job: a node that fails leaves its connections open, and
//! the others then fail too ("node q left the job") rather than wait for it.
//!
//! # Measured
//!
//! The timed phase is the clients' `reads` passes after the warm-up pass (each node's time is
//! when its last client finished; the report's the slowest). Statistics are those of the
//! timed phase: a message is a request or a response, bytes are what went into the
//! sockets (16 per request, 8 plus the block per response), and AU words are those bytes
//! in words for the AU version (the socket library's ring-header words not counted). The
//! check: every block read, in the warm-up and the timed phase, has its checksum, and every
//! client made all its reads. `--inject-fault` flips a bit of one block in the cache of the
//! last node that is home to a block, before the warm-up.
//!
//! # How it differs from the paper's system
//!
//! - No disks and no writes: the files are read-only and their contents are generated, and
//!   a layout whose home blocks do not fit in a node's cache is refused rather than read
//!   from a disk. The paper's experiment has no disk I/O either.
//! - Cooperative caching is reduced to its core: a block is fetched from its home node
//!   (which always holds it), never forwarded from another client's copy, and nothing like
//!   N-chance forwarding of evicted singlets happens; copies are only the reading node's.
//! - Client threads are state machines in the node's event loop, not threads, and Table 1's
//!   4 clients are a fixed workload: on fewer than 8 nodes several clients share a node (all
//!   four on node 0 below 4 nodes), on more than 8 they stay on four nodes
//!   ([`crate::kernels::dfs`] says where).
//! - The preset cache (4 MB) grows where a node's share of the working sets is larger (below
//!   6 nodes at Table 1's size; on one node it holds all 24 MB), so that the run still has no
//!   disk I/O; the sequential and one-node runs read from the node's cache only.

use crate::coll::Coll;
use crate::idle::Idle;
use crate::kernels::dfs::{self, BlockId, DfsParams, Layout, NodeCache, Reader, Sources};
use crate::{AppError, AppResult, Params, Report, Size, Stats, Version};
use sockets::{JobListener, Options, Variant, VmmcStream, BACKLOG};
use std::io::{ErrorKind, Read, Write};
use vmmc::Endpoint;

const APP: &str = "dfs-sockets";
/// The port of every node's file server.
pub const PORT: u16 = 0xDF5;
/// Bytes of a request.
pub const REQUEST_LEN: usize = 16;
/// The first word of a request.
const MAGIC: u32 = u32::from_le_bytes(*b"DFSQ");
/// The operations of [`Request`].
const OP_READ: u32 = 1;
const OP_DONE: u32 = 2;
/// The start of a refusal.
const REFUSAL: &[u8] = b"DFS-ERR ";
/// Capacity of a server's incoming ring (requests only).
const REQUEST_RING: usize = 4096;

/// The workload of `params`.
pub fn problem(params: &Params) -> AppResult<DfsParams> {
    let base = match params.size {
        Size::Paper => DfsParams::PAPER,
        Size::Test => DfsParams::TEST,
    };
    let p = DfsParams {
        clients: params.clients.unwrap_or(base.clients),
        block_size: params.block_size.unwrap_or(base.block_size),
        file_size: params.file_size.unwrap_or(base.file_size),
        files: params.files.unwrap_or(base.files),
        cache_size: params.cache_size.unwrap_or(base.cache_size),
        cache_explicit: params.cache_size.is_some(),
        reads: params.reads.unwrap_or(base.reads),
        seed: params.seed.unwrap_or(base.seed),
    };
    p.check().map_err(AppError::Usage)?;
    Ok(p)
}

/// The plain sequential run of the same reads on one node (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    let l = Layout::new(problem(params)?, 1).map_err(AppError::Usage)?;
    dfs::sequential(&l).map_err(|what| AppError::CheckFailed { app: APP, what })
}

/// Capacity of a client's incoming ring: a whole response (length word, block, and the
/// word the ring code may pad) fits.
pub fn response_ring(block_size: usize) -> usize {
    (block_size + 64).next_power_of_two().max(4096)
}

/// A request to a file server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Read a block: answered with the block.
    Read(BlockId),
    /// This client's warm-up is over: not answered.
    Done,
}

impl Request {
    /// The request's bytes: `[magic, operation, file, block]`, little-endian words.
    pub fn encode(self) -> [u8; REQUEST_LEN] {
        let (op, (file, block)) = match self {
            Request::Read(id) => (OP_READ, id),
            Request::Done => (OP_DONE, (0, 0)),
        };
        let mut r = [0u8; REQUEST_LEN];
        for (i, w) in [MAGIC, op, file, block].into_iter().enumerate() {
            r[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        r
    }

    /// Parses a request that node `me` of layout `l` received; the error says what is wrong
    /// with a malformed one.
    pub fn parse(l: &Layout, me: usize, req: &[u8; REQUEST_LEN]) -> Result<Request, String> {
        let w = |k: usize| u32::from_le_bytes(req[4 * k..4 * k + 4].try_into().expect("4 bytes"));
        let (magic, op, id) = (w(0), w(1), (w(2), w(3)));
        if magic != MAGIC {
            return Err(format!("bad magic {magic:#010x}"));
        }
        match op {
            OP_DONE => Ok(Request::Done),
            OP_READ if !l.exists(id) => Err(format!("no block {} of file {}", id.1, id.0)),
            OP_READ if l.home(id) != me => Err(format!(
                "block {} of file {} has its home on node {}",
                id.1,
                id.0,
                l.home(id)
            )),
            OP_READ => Ok(Request::Read(id)),
            op => Err(format!("unknown operation {op}")),
        }
    }
}

/// What a server did with one readable connection.
enum Served {
    /// Answered a read.
    Block,
    /// A client's warm-up is over.
    Done,
    /// The client closed the connection.
    Closed,
}

/// One node: its cache, its clients, the connections its server accepted, what it sent.
struct Node<'a> {
    ep: &'a Endpoint,
    l: &'a Layout,
    me: usize,
    version: Version,
    cache: NodeCache,
    clients: Vec<Client>,
    /// Connections from other nodes' clients (`None` once closed).
    incoming: Vec<Option<VmmcStream>>,
    stats: Stats,
}

/// A client: its reads, and a connection to every other node's server.
struct Client {
    r: Reader,
    /// By server rank; `None` for this node, and once closed.
    conns: Vec<Option<VmmcStream>>,
    /// The block requested and its server, while the request is outstanding.
    waiting: Option<(usize, BlockId)>,
    /// The end of its phase was announced (warm-up) or its connections closed (timed).
    announced: bool,
}

fn comm(what: String) -> AppError {
    AppError::Comm(format!("{APP}: {what}"))
}

impl Node<'_> {
    fn count(&mut self, bytes: usize) {
        self.stats.messages += 1;
        self.stats.bytes += bytes as u64;
        if self.version == Version::Au {
            self.stats.au_words += bytes.div_ceil(4) as u64;
        }
    }

    /// Answers `why` to the client of connection `i` and fails.
    fn refuse(&self, i: usize, why: String) -> AppError {
        let s = self.incoming[i].as_ref().expect("an open connection");
        let rank = s.peer_rank().unwrap_or(usize::MAX);
        let mut msg = REFUSAL.to_vec();
        msg.extend_from_slice(why.as_bytes());
        let _ = s.write_block(&msg);
        comm(format!(
            "node {}: malformed request from rank {rank}: {why}",
            self.me
        ))
    }

    /// Serves one request of connection `i` (which is readable).
    fn serve(&mut self, i: usize) -> AppResult<Served> {
        let s = self.incoming[i].as_ref().expect("an open connection");
        let mut req = [0u8; REQUEST_LEN];
        let mut r = s;
        let got = r.read(&mut req).map_err(|e| {
            comm(format!(
                "node {} reading a request of rank {}: {e}",
                self.me,
                s.peer_rank().unwrap_or(usize::MAX)
            ))
        })?;
        if got == 0 {
            return Ok(Served::Closed);
        }
        if let Err(e) = r.read_exact(&mut req[got..]) {
            return Err(if e.kind() == ErrorKind::UnexpectedEof {
                self.refuse(i, format!("a request of {got} bytes, not {REQUEST_LEN}"))
            } else {
                comm(format!("node {} reading a request: {e}", self.me))
            });
        }
        match Request::parse(self.l, self.me, &req) {
            Ok(Request::Done) => Ok(Served::Done),
            Ok(Request::Read(id)) => {
                let block = self.cache.slot(self.l.home_slot(id));
                s.write_block(block).map_err(|e| {
                    comm(format!(
                        "node {} sending block {} of file {} to rank {}: {e}",
                        self.me,
                        id.1,
                        id.0,
                        s.peer_rank().unwrap_or(usize::MAX)
                    ))
                })?;
                let n = 8 + block.len();
                self.count(n);
                Ok(Served::Block)
            }
            Err(why) => Err(self.refuse(i, why)),
        }
    }

    /// Moves client `c` one step; whether it did anything.
    fn step(&mut self, c: usize) -> AppResult<bool> {
        let (l, me) = (self.l, self.me);
        let cl = &mut self.clients[c];
        if let Some((server, id)) = cl.waiting {
            let s = cl.conns[server].as_ref().expect("a connection per server");
            if !s.is_readable() {
                return Ok(false);
            }
            let n = s.read_block(&mut cl.r.buf).map_err(|e| {
                comm(format!(
                    "client {} reading block {} of file {} from node {server}: {e}",
                    cl.r.k, id.1, id.0
                ))
            })?;
            if n != l.p.block_size {
                return Err(comm(format!(
                    "node {server} refused client {}'s read of block {} of file {}: {}",
                    cl.r.k,
                    id.1,
                    id.0,
                    String::from_utf8_lossy(&cl.r.buf[..n])
                )));
            }
            cl.waiting = None;
            self.cache.keep_copy(id, &cl.r.buf);
            cl.r.done(id);
            return Ok(true);
        }
        if cl.r.finished() {
            return Ok(false);
        }
        let id = l.read_at(cl.r.k, cl.r.next);
        let home = l.home(id);
        if home == me {
            cl.r.buf.copy_from_slice(self.cache.slot(l.home_slot(id)));
            cl.r.sources.local += 1;
            cl.r.done(id);
        } else if let Some(copy) = self.cache.copy(id) {
            cl.r.buf.copy_from_slice(copy);
            cl.r.sources.copies += 1;
            cl.r.done(id);
        } else {
            let mut s = cl.conns[home].as_ref().expect("a connection per server");
            s.write_all(&Request::Read(id).encode()).map_err(|e| {
                comm(format!(
                    "client {} requesting block {} of file {} from node {home}: {e}",
                    cl.r.k, id.1, id.0
                ))
            })?;
            cl.r.sources.remote += 1;
            cl.waiting = Some((home, id));
            self.count(REQUEST_LEN);
        }
        Ok(true)
    }

    /// Fails if another node left the job (a node that failed does not close its
    /// connections: without this, its servers' clients and its clients' servers would wait
    /// for it forever).
    fn check_peers(&self) -> AppResult<()> {
        for q in (0..self.l.nodes).filter(|&q| q != self.me) {
            if !self.ep.peer_alive(self.ep.proc_of(q)?) {
                return Err(comm(format!("node {}: node {q} left the job", self.me)));
            }
        }
        Ok(())
    }

    /// One phase: every client reads its working set `passes` times, and the server serves
    /// until every client is through (`last`: until every client closed its connections).
    /// Returns when this node's clients finished, on the node's clock.
    fn phase(&mut self, passes: usize, last: bool) -> AppResult<Option<u64>> {
        for c in &mut self.clients {
            c.r.start(passes);
            c.announced = false;
        }
        let mut done_msgs = 0;
        let mut finished_at = None;
        let mut idle = Idle::new(&WAIT_SITE);
        loop {
            let mut progress = false;
            for i in 0..self.incoming.len() {
                if !self.incoming[i].as_ref().is_some_and(|s| s.is_readable()) {
                    continue;
                }
                progress = true;
                match self.serve(i)? {
                    Served::Block => {}
                    Served::Done if !last => done_msgs += 1,
                    Served::Done => {
                        return Err(comm(format!(
                            "node {}: a client announced the end of its warm-up twice",
                            self.me
                        )))
                    }
                    Served::Closed if last => self.incoming[i] = None,
                    Served::Closed => {
                        return Err(comm(format!(
                            "node {}: a client closed its connection during the warm-up",
                            self.me
                        )))
                    }
                }
            }
            for c in 0..self.clients.len() {
                progress |= self.step(c)?;
                let cl = &mut self.clients[c];
                if cl.r.finished() && cl.waiting.is_none() && !cl.announced {
                    cl.announced = true;
                    if last {
                        // Closing is the end of the client: the servers see end of file.
                        cl.conns.clear();
                    } else {
                        let done = Request::Done.encode();
                        let mut sent = 0;
                        for mut s in cl.conns.iter().flatten() {
                            s.write_all(&done).map_err(|e| {
                                comm(format!("client {} ending its warm-up: {e}", cl.r.k))
                            })?;
                            sent += 1;
                        }
                        for _ in 0..sent {
                            self.count(REQUEST_LEN);
                        }
                    }
                }
            }
            let mine_done = self.clients.iter().all(|c| c.announced);
            if mine_done && finished_at.is_none() {
                finished_at = Some(vmmc::pace::now_ns());
            }
            let served = if last {
                self.incoming.iter().all(Option::is_none)
            } else {
                done_msgs == self.incoming.len()
            };
            if mine_done && served {
                return Ok(if self.clients.is_empty() {
                    None
                } else {
                    finished_at
                });
            }
            if progress {
                idle.reset();
            } else if idle.wait() {
                self.check_peers()?;
            }
        }
    }
}

/// DFS-sockets' waits, in `vmmc::wait`'s counts.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("apps.dfs");

/// Runs DFS-sockets on this node (see [`crate::RunFn`]).
pub fn run(ep: &Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let p = problem(params)?;
    let (me, n) = (ep.rank(), ep.size());
    let l = Layout::new(p, n).map_err(AppError::Usage)?;
    let coll = Coll::new(ep, 16)?;

    // Start-up (not timed): the warm caches, the clients' checksums, the connections.
    let mut cache = NodeCache::warm(&l, me);
    let victim = (0..n).rev().find(|&q| l.home_blocks(q) > 0);
    if params.inject_fault && victim == Some(me) {
        cache.corrupt(0);
    }
    let variant = match params.version {
        Version::Au => Variant::Au,
        Version::Du => Variant::Du1,
    };
    let listener = JobListener::bind_with(
        ep,
        PORT,
        Options {
            variant,
            capacity: REQUEST_RING,
        },
    )?;
    let to_server = Options {
        variant,
        capacity: response_ring(p.block_size),
    };
    let mut clients: Vec<Client> = l
        .clients_on(me)
        .into_iter()
        .map(|k| Client {
            r: Reader::new(&l, k),
            conns: (0..n).map(|_| None).collect(),
            waiting: None,
            announced: false,
        })
        .collect();
    // A process has at most BACKLOG connections waiting for one listener's accept: connect
    // in rounds of BACKLOG clients per node, each round accepted before the next starts.
    let per_node: Vec<usize> = (0..n).map(|q| l.clients_on(q).len()).collect();
    let rounds = per_node
        .iter()
        .max()
        .copied()
        .unwrap_or(0)
        .div_ceil(BACKLOG);
    let mut incoming = Vec::new();
    for round in 0..rounds {
        let these = round * BACKLOG..(round + 1) * BACKLOG;
        for c in clients.iter_mut().take(these.end).skip(these.start) {
            for (q, conn) in c.conns.iter_mut().enumerate().filter(|&(q, _)| q != me) {
                *conn = Some(VmmcStream::connect_job_with(ep, q, PORT, to_server)?);
            }
        }
        let expect: usize = (0..n)
            .filter(|&q| q != me)
            .map(|q| per_node[q].clamp(these.start, these.end) - these.start)
            .sum();
        for _ in 0..expect {
            incoming.push(Some(listener.accept()?.0));
        }
        // A connection holds its backlog slot until its side learns of the accept (on its
        // first use): learn it now, so that the next round finds the slots free.
        let mut idle = Idle::new(&WAIT_SITE);
        for c in clients.iter().take(these.end).skip(these.start) {
            for (q, s) in c.conns.iter().enumerate() {
                let Some(s) = s else { continue };
                while !s.is_writable() {
                    if idle.wait() {
                        ep.check_peer(ep.proc_of(q)?)?;
                    }
                }
                idle.reset();
            }
        }
        coll.barrier()?;
    }
    drop(listener);
    let mut node = Node {
        ep,
        l: &l,
        me,
        version: params.version,
        cache,
        clients,
        incoming,
        stats: Stats::default(),
    };
    coll.barrier()?;
    // Warm-up: a pass over every working set fills the copies and touches every path.
    node.phase(1, false)?;
    node.stats = Stats::default();
    coll.barrier()?;
    let t0 = vmmc::pace::now_ns();
    let finished = node.phase(p.reads, true)?;
    let t = finished.map_or(0, |f| f - t0);

    // The check (not timed).
    let mut sources = Sources::default();
    let (mut bad, mut first) = (0u64, None);
    for c in &node.clients {
        sources = sources.plus(c.r.sources);
        bad += c.r.bad;
        first = first.or(c.r.first_bad);
    }
    let first_words = first.map_or([0; 4], |b| [1, b.client as u32, b.id.0, b.id.1]);
    let firsts = coll.allgather(&first_words)?;
    let sums = coll.sum_u64(
        &[
            &[bad][..],
            &sources.to_words()[..],
            &node.stats.to_words()[..],
        ]
        .concat(),
    )?;
    let time = coll.max_u64(&[t])?[0];
    if sums[0] > 0 {
        let (q, w) = firsts
            .iter()
            .enumerate()
            .find(|(_, w)| w[0] == 1)
            .expect("a node with a bad block");
        return Err(AppError::CheckFailed {
            app: APP,
            what: format!(
                "{} block(s) read with a wrong checksum, e.g. block {} of file {} by client {} on node {q}",
                sums[0], w[3], w[2], w[1]
            ),
        });
    }
    let sources = Sources::from_words(&sums[1..4]);
    let want = (p.clients * p.reads * p.working_set_blocks()) as u64;
    if sources.total() != want {
        return Err(AppError::CheckFailed {
            app: APP,
            what: format!(
                "{} blocks read in the timed phase, not {want}",
                sources.total()
            ),
        });
    }
    if me != 0 {
        return Ok(None);
    }
    let mut problem = serde_json::to_value(p).expect("serializable");
    problem["cache_size"] = (l.cache_blocks * p.block_size).into();
    problem["blocks_per_file"] = p.blocks_per_file().into();
    problem["working_set"] = (p.working_set_blocks() * p.block_size).into();
    problem["client_nodes"] = (0..n)
        .filter(|&q| per_node[q] > 0)
        .collect::<Vec<_>>()
        .into();
    problem["home_blocks_max"] = (0..n).map(|q| l.home_blocks(q)).max().into();
    problem["variant"] = variant.name().into();
    problem["timed_reads"] = serde_json::to_value(sources).expect("serializable");
    Ok(Some(Report::new(
        APP,
        "sockets",
        ep,
        params,
        problem,
        time,
        Stats::from_words(&sums[4..7]),
        format!(
            "{} blocks read by {} clients ({} local, {} from copies, {} remote), and the warm-up's, each with its checksum",
            sources.total(),
            p.clients,
            sources.local,
            sources.copies,
            sources.remote
        ),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_malformed_ones_say_why() {
        let l = Layout::new(DfsParams::TEST, 4).unwrap();
        let id = (1, 2);
        let home = l.home(id);
        let r = Request::Read(id).encode();
        assert_eq!(Request::parse(&l, home, &r), Ok(Request::Read(id)));
        assert_eq!(
            Request::parse(&l, 0, &Request::Done.encode()),
            Ok(Request::Done)
        );
        let other = (home + 1) % 4;
        assert!(Request::parse(&l, other, &r)
            .unwrap_err()
            .contains(&format!("has its home on node {home}")));
        let mut bad = r;
        bad[0] ^= 1;
        assert!(Request::parse(&l, home, &bad)
            .unwrap_err()
            .contains("bad magic"));
        let mut bad = r;
        bad[4] = 9;
        assert!(Request::parse(&l, home, &bad)
            .unwrap_err()
            .contains("unknown operation 9"));
        let missing = Request::Read((l.p.total_files() as u32, 0)).encode();
        assert!(Request::parse(&l, home, &missing)
            .unwrap_err()
            .contains("no block 0 of file 4"));
    }

    #[test]
    fn a_response_fits_in_the_ring() {
        for bs in [64, 4096, 8192, 1 << 20] {
            assert!(response_ring(bs) >= bs + 8 + 4);
        }
    }
}
