//! # vmmc-rdma: the RDMA transport (hosts over ibverbs)
//!
//! Every pair of processes shares one reliable-connected (RC) queue pair. The data path is
//! one-sided, as on SHRIMP: the receiving process's CPU takes no part in a transfer.
//!
//! - **export** registers the receive buffer (`ibv_reg_mr_iova2`, with local write, remote
//!   write and remote read access) and hands its key to the trusted party; the key names the
//!   registration's rkey and the buffer's start as the importer addresses it (the
//!   registration's IOVA is the buffer's offset in its page, so a 64-bit key carries
//!   everything: rkey, page offset and a generation).
//! - **import** is the trusted party's: rank 0's (or the launcher's) rendezvous of the tcp
//!   transport checks the permission and hands the key to a permitted importer only.
//! - **deliberate update** is RDMA WRITE through a registered staging buffer: the body, its
//!   completion, then the last word as a final small write, so a receiver that sees the last
//!   word sees every earlier byte (RC acknowledges a write once it is placed; the order of
//!   placement *within* one write is not promised by the verbs specification). The send
//!   returns with the data in the receiver's memory.
//! - **remote read** is RDMA READ.
//! - **notification**: after the data, a 16-byte record (the export's slot, the last word's
//!   offset and its value as sent) is written with RDMA WRITE_WITH_IMM into a ring the
//!   receiver keeps for this sender, the immediate naming the export (its slot, carried in the
//!   key). The receiver's receive thread takes the completion off its receive CQ (sleeping on
//!   the CQ's completion channel when idle), reads the record (RC delivers in order, so the
//!   k-th arrival from a peer is its k-th record), checks the slot against its live exports,
//!   and queues the core's notification; the endpoint's progress takes them with the control
//!   plane's. Each arrival consumes a posted receive, reposted once handled; when the core
//!   lets 65,536 pile up, reposting stops and senders meet "receiver not ready" (back-pressure
//!   by RNR). Unexport frees the slot only after the receive thread has drained its CQ.
//!   Exports past 1023 with handlers, and offsets beyond 4 GiB, notify on the control
//!   connection instead. A receiver that sleeps in `vmmc::wait` without a notification is
//!   woken through the control connection: its doorbell (`vmmc::wait::bell`) is registered
//!   for remote read, and a sender reads its sleeper count with one RDMA READ after its data.
//! - **automatic update** is the core's emulation (combined stores sent as deliberate
//!   updates); redirectable buffers (seed 004) take their writes on the control connection,
//!   since their data must be placed by the receiver; a sender that switches back to RDMA
//!   first fences the control connection, so writes stay in order per receiving process.
//! - **unexport** revokes the key through the trusted party: every peer marks its links dead
//!   and waits for its writes under way through them before it answers; only then is the
//!   buffer deregistered. A revoked importer's write fails with `Unexported` before it reaches
//!   the queue pair; a write that reaches the HCA with a stale or wrong key completes with a
//!   remote access error, which is `Unexported` too.
//! - **completions** are polled by the writing thread (a send returns when its completion is
//!   in); a full send queue (`ENOMEM` from `ibv_post_send`) is `WouldBlock`.
//! - **a dead peer** is `PeerLost`: through the control connection, or as a transport retry
//!   error on the queue pair. A queue pair in the error state (after a remote access error,
//!   as on an HCA both ends of it are) is not reconnected: later writes to that peer take the
//!   control connection, reads fail.
//!
//! ibverbs is loaded at run time ([`verbs`]): `VMMC_RDMA_LIB` names the library (default
//! `libibverbs.so.1`, the stand-in provider in tests), `VMMC_RDMA_DEVICE` the device (default:
//! the first), `VMMC_RDMA_PORT` its port (1), `VMMC_RDMA_GID_INDEX` the GID on RoCE (0).
#![deny(missing_docs)]

pub mod abi;
pub mod verbs;

use abi::*;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Condvar;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use verbs::{Device, Mr, Qp, QpAddr, RecvCq};
use vmmc::bootstrap::BootEnv;
use vmmc::redirect::Redirected;
use vmmc::{
    BufId, Caps, Error, ExportSpec, ImportPoll, Importers, JobInfo, MemKind, Notification, ProcId,
    Region, RemoteBuffer, Result, Transport, WriteOpts, WORD_SIZE,
};
use vmmc_tcp::{RemoteTcp, TcpTransport};

/// Bit of a key: the buffer takes writes on the control connection only (redirectable).
const VIA_CONTROL: u64 = 1 << 63;
const GEN_SHIFT: u32 = 54;
const GEN_MASK: u64 = (1 << 9) - 1;
/// Bits of a key naming the export's notification slot (the immediate of WRITE_WITH_IMM).
const SLOT_SHIFT: u32 = 44;
const SLOTS: usize = 1 << 10;
/// The slot of an export without native notifications (no handler, or no slot left).
const NO_SLOT: u64 = SLOTS as u64 - 1;
const IOVA_SHIFT: u32 = 32;
/// Receives posted per queue pair for WRITE_WITH_IMM (each arrival consumes one).
const RECV_DEPTH: u32 = 128;
/// Bytes of one notification record (slot, offset, value, unused).
const RECORD: usize = 16;
/// Bytes of the notification ring each process keeps for each peer.
const RING_BYTES: usize = RECV_DEPTH as usize * RECORD;
/// Notifications arrived by WRITE_WITH_IMM that the core has not taken yet, at most.
const NOTE_CAP: usize = 1 << 16;
/// Largest single write; the core splits larger sends.
const MAX_WRITE: usize = 1 << 30;
/// Registered staging memory per queue pair: larger transfers go through it in pieces.
const STAGING: usize = 1 << 20;
/// Send-queue depth per queue pair.
const SQ_DEPTH: u32 = 64;
/// The buffer id of the start-up exchange of queue-pair addresses (exported and unexported
/// before the endpoint exists).
const INBOX: BufId = 0xfffe_5244;
/// Bytes per rank in the inbox; its last word says the slot is complete.
const SLOT: usize = 64;
const SLOT_DONE: u32 = 0x5244_4d41;
/// How long a completion may take before the peer counts as lost.
const COMPLETION_WAIT: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One queue pair with its staging memory; used under the peer's lock.
struct Lane {
    qp: Arc<Qp>,
    staging_mr: Mr,
    staging: Region,
    next_wr: u64,
    /// The peer stopped answering on the queue pair (retries exhausted).
    lost: bool,
    /// Notification records written to the peer's ring.
    records: u64,
}

impl Lane {
    /// One signaled operation of `len` bytes between the staging buffer's start and the
    /// peer's `remote`, waited for.
    fn op(&mut self, rank: usize, opcode: u32, len: usize, remote: u64, rkey: u32) -> Result<()> {
        self.op_imm(rank, opcode, len, remote, rkey, 0)
    }

    /// [`Lane::op`] with an immediate (for WRITE_WITH_IMM).
    fn op_imm(
        &mut self,
        rank: usize,
        opcode: u32,
        len: usize,
        remote: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()> {
        self.next_wr += 1;
        let id = self.next_wr;
        // SAFETY: the staging buffer is registered (lkey) and outlives the operation, which
        // is waited for below while `self` is borrowed.
        unsafe {
            self.qp.post(
                id,
                opcode,
                self.staging.as_ptr(),
                len as u32,
                self.staging_mr.lkey(),
                remote,
                rkey,
                imm,
            )?
        };
        let deadline = Instant::now() + COMPLETION_WAIT;
        let mut wc = [ibv_wc::default(); 4];
        let mut turns = 0u32;
        loop {
            let n = self.qp.poll(&mut wc)?;
            let mut mine = None;
            for w in &wc[..n] {
                if w.wr_id == id {
                    mine = Some(*w);
                } else if w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR {
                    // An earlier operation that failed after it returned (never, as every
                    // operation is waited for): reported with this one.
                    mine.get_or_insert(*w);
                }
            }
            if let Some(w) = mine {
                self.lost |= w.status == IBV_WC_RETRY_EXC_ERR;
                return completion_error(rank, w.status);
            }
            turns += 1;
            if turns > 1000 {
                if Instant::now() > deadline {
                    self.lost = true;
                    return Err(Error::PeerLost(format!(
                        "rank {rank}: no completion in {COMPLETION_WAIT:?}"
                    )));
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What a completion's status means for the core.
fn completion_error(rank: usize, status: u32) -> Result<()> {
    match status {
        IBV_WC_SUCCESS => Ok(()),
        // The key was revoked (deregistered) or never valid, or the range is outside it.
        IBV_WC_REM_ACCESS_ERR => Err(Error::Unexported),
        IBV_WC_RETRY_EXC_ERR => Err(Error::PeerLost(format!(
            "rank {rank} does not answer on its queue pair (transport retry counter exceeded)"
        ))),
        IBV_WC_WR_FLUSH_ERR => Err(Error::PeerLost(format!(
            "the queue pair to rank {rank} is in the error state"
        ))),
        s => Err(Error::Protocol(format!(
            "RDMA operation to rank {rank} failed: {} (status {s})",
            status_str(s)
        ))),
    }
}

/// This process's end of its link to one peer.
struct Peer {
    lane: Mutex<Lane>,
    /// The same queue pair, for the receive thread's reposts.
    qp: Arc<Qp>,
    /// Where the peer's doorbell lies, and its key.
    bell_addr: u64,
    bell_rkey: u32,
    /// Where this process writes its notification records at the peer, and its key.
    ring_addr: u64,
    ring_rkey: u32,
    /// A write went on the control connection since the last fence.
    via_control: AtomicBool,
    /// The queue pair failed: writes take the control connection.
    broken: AtomicBool,
    /// The peer stopped answering on the queue pair: it counts as gone even before the
    /// control plane notices.
    lost: AtomicBool,
}

impl Peer {
    /// Runs `f` on the lane; a failure leaves the queue pair in error (as an HCA does).
    fn with_lane<T>(&self, f: impl FnOnce(&mut Lane) -> Result<T>) -> Result<T> {
        let mut l = lock(&self.lane);
        let r = f(&mut l);
        if let Err(e) = &r {
            if !matches!(e, Error::WouldBlock) {
                self.broken.store(true, Ordering::SeqCst);
            }
            if l.lost {
                self.lost.store(true, Ordering::SeqCst);
            }
        }
        r
    }
}

/// State shared by the transport and its links. Fields drop in order: the queue pairs and
/// registrations before the device.
struct Shared {
    peers: Vec<Option<Peer>>,
    /// Receive completions of every queue pair (WRITE_WITH_IMM arrivals); after the peers.
    recv_cq: RecvCq,
    /// Queue-pair number -> rank, for receive completions.
    qpn_rank: HashMap<u32, usize>,
    /// By rank: notification records that arrived from it (the next is at this index, modulo
    /// the ring; RC delivers them in order).
    arrivals: Mutex<Vec<u64>>,
    /// The notification rings, RING_BYTES per peer, and their registration (dropped first).
    _rings_mr: Mr,
    rings: Region,
    /// Exports with native notifications, by slot.
    slots: Mutex<Vec<Option<Slot>>>,
    /// Notifications that arrived by WRITE_WITH_IMM, for the core's progress.
    notes: Mutex<VecDeque<Notification>>,
    notes_cv: Condvar,
    /// Unexport's request that the receive thread empties the CQ, and its answer.
    drain_asked: AtomicU64,
    drain_done: AtomicU64,
    /// Stops and kicks the receive thread.
    stop: AtomicBool,
    kick: OwnedFd,
    /// This process's exports by key: base address and length (reads of its own buffers).
    local: Mutex<HashMap<u64, (usize, usize)>>,
    writes: AtomicU64,
    bytes_written: AtomicU64,
    reads: AtomicU64,
    bell_reads: AtomicU64,
    imm_sent: AtomicU64,
    imm_arrived: AtomicU64,
    _bell_mr: Mr,
    dev: Arc<Device>,
}

/// An export whose notifications arrive as immediates.
#[derive(Clone, Copy)]
struct Slot {
    buf: BufId,
    len: usize,
}

impl Shared {
    fn kick(&self) {
        // SAFETY: eight bytes to our eventfd.
        unsafe { libc::write(self.kick.as_raw_fd(), 1u64.to_ne_bytes().as_ptr().cast(), 8) };
    }

    /// Turns one receive completion into a notification and posts the receive again.
    fn arrived(&self, w: &ibv_wc) {
        let Some(&rank) = self.qpn_rank.get(&w.qp_num) else {
            return;
        };
        if w.status != IBV_WC_SUCCESS || w.opcode != IBV_WC_RECV_RDMA_WITH_IMM {
            // Flushed: the queue pair is in error; writes to it take the control path.
            return;
        }
        // The immediate names the export (its slot); the record the same write placed in
        // this peer's ring says which word and its value as sent.
        let slot = u32::from_be(w.imm_data) as usize;
        let k = {
            let mut a = lock(&self.arrivals);
            let k = a[rank];
            a[rank] += 1;
            k
        };
        let at = rank * RING_BYTES + (k % u64::from(RECV_DEPTH)) as usize * RECORD;
        let word = |i: usize| self.rings.load_u32(at + 4 * i).unwrap_or(u32::MAX);
        let (rec_slot, offset, value) = (word(0) as usize, word(1) as usize, word(2));
        let s = lock(&self.slots).get(slot).copied().flatten();
        if let Some(s) = s.filter(|s| rec_slot == slot && offset + WORD_SIZE <= s.len) {
            let mut q = lock(&self.notes);
            while q.len() >= NOTE_CAP && !self.stop.load(Ordering::SeqCst) {
                // Back-pressure: no receive is posted again until the core takes some.
                q = self
                    .notes_cv
                    .wait_timeout(q, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            self.imm_arrived.fetch_add(1, Ordering::Relaxed);
            q.push_back(Notification {
                buf: s.buf,
                offset,
                value,
            });
        }
        if let Some(Some(p)) = self.peers.get(rank) {
            let _ = p.qp.post_recv(0);
        }
    }

    fn peer(&self, rank: usize) -> Result<&Peer> {
        self.peers
            .get(rank)
            .and_then(|p| p.as_ref())
            .ok_or(Error::InvalidArgument("no queue pair to that rank"))
    }

    /// Before an RDMA write to `rank`: writes sent earlier on the control connection are
    /// placed.
    fn order_after_control(&self, peer: &Peer, link: &RemoteTcp) -> Result<()> {
        if peer.via_control.load(Ordering::Relaxed)
            && peer.via_control.swap(false, Ordering::AcqRel)
        {
            link.fence()?;
        }
        Ok(())
    }
}

/// What went over the queue pairs (the control plane's traffic is
/// [`RdmaTransport::control_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmaStats {
    /// Deliberate updates by RDMA WRITE.
    pub writes: u64,
    /// Their bytes.
    pub bytes_written: u64,
    /// Remote reads by RDMA READ.
    pub reads: u64,
    /// Reads of a receiver's doorbell.
    pub bell_reads: u64,
    /// Notifications sent as WRITE_WITH_IMM.
    pub imm_sent: u64,
    /// Notifications that arrived as WRITE_WITH_IMM.
    pub imm_arrived: u64,
}

/// The rdma transport of one process.
pub struct RdmaTransport {
    /// Registrations of exported buffers, by id (dropped before `sh`).
    exports: Mutex<HashMap<BufId, (u64, Option<Mr>)>>,
    tcp: Arc<TcpTransport>,
    sh: Arc<Shared>,
    generation: AtomicU64,
    finished: AtomicBool,
    receiver: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// One thread delivers notifications at a time.
    consumer: Mutex<()>,
    /// `wake` was called (as opposed to the receive thread waking the control plane).
    woken: AtomicBool,
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: writes at most 4 bytes into `b`.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b)
}

/// What a rank tells a peer at start: its queue pair's address, its doorbell, and the ring
/// the peer writes its notification records to.
#[derive(Clone, Copy)]
struct PeerAt {
    qp: QpAddr,
    bell_addr: u64,
    bell_rkey: u32,
    ring_addr: u64,
    ring_rkey: u32,
}

fn encode_slot(a: &QpAddr, bell_addr: u64, bell_rkey: u32, ring: (u64, u32)) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[40..48].copy_from_slice(&ring.0.to_ne_bytes());
    s[48..52].copy_from_slice(&ring.1.to_ne_bytes());
    s[0..4].copy_from_slice(&a.qpn.to_ne_bytes());
    s[4..8].copy_from_slice(&u32::from(a.lid).to_ne_bytes());
    s[8..12].copy_from_slice(&a.psn.to_ne_bytes());
    s[12..16].copy_from_slice(&bell_rkey.to_ne_bytes());
    s[16..24].copy_from_slice(&bell_addr.to_ne_bytes());
    s[24..40].copy_from_slice(&a.gid);
    s[SLOT - 4..].copy_from_slice(&SLOT_DONE.to_ne_bytes());
    s
}

fn decode_slot(s: &[u8]) -> PeerAt {
    let u32_at = |i: usize| u32::from_ne_bytes(s[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&s[24..40]);
    PeerAt {
        qp: QpAddr {
            qpn: u32_at(0),
            lid: u32_at(4) as u16,
            psn: u32_at(8),
            gid,
        },
        bell_addr: u64_at(16),
        bell_rkey: u32_at(12),
        ring_addr: u64_at(40),
        ring_rkey: u32_at(48),
    }
}

/// The receive thread: takes WRITE_WITH_IMM arrivals off the receive CQ, sleeping on its
/// completion channel when there are none, and hands them to the core's progress.
fn receiver(sh: Arc<Shared>, wake: impl Fn()) {
    let mut wc = [ibv_wc::default(); 32];
    while !sh.stop.load(Ordering::SeqCst) {
        let asked = sh.drain_asked.load(Ordering::SeqCst);
        let mut got = 0;
        loop {
            let n = sh.recv_cq.poll(&mut wc).unwrap_or(0);
            for w in &wc[..n] {
                sh.arrived(w);
            }
            got += n;
            if n < wc.len() {
                break;
            }
        }
        if got > 0 {
            wake();
            vmmc::wait::ring_local();
        }
        sh.drain_done.store(asked, Ordering::SeqCst);
        if got > 0 {
            continue;
        }
        // Nothing there: arm, look once more, then sleep until an event or a kick.
        if sh.recv_cq.arm().is_err() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let n = sh.recv_cq.poll(&mut wc).unwrap_or(0);
        if n > 0 {
            for w in &wc[..n] {
                sh.arrived(w);
            }
            wake();
            vmmc::wait::ring_local();
            continue;
        }
        if sh.drain_asked.load(Ordering::SeqCst) != asked {
            continue;
        }
        let mut fds = [
            libc::pollfd {
                fd: sh.recv_cq.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sh.kick.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if fds[0].revents & libc::POLLIN != 0 {
            let _ = sh.recv_cq.take_event();
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let mut b = [0u8; 8];
            // SAFETY: eight bytes from our eventfd.
            unsafe { libc::read(sh.kick.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        }
    }
}

impl RdmaTransport {
    /// Joins the job described by the launcher's environment (as the tcp transport does:
    /// `VMMC_RENDEZVOUS`), opens the RDMA device and connects a queue pair to every peer.
    pub fn connect(env: &BootEnv) -> Result<RdmaTransport> {
        // The device first: a job on a machine without one fails before it waits for peers.
        let dev = Arc::new(Device::open()?);
        let tcp = TcpTransport::connect(env)?;
        let job = tcp.job().clone();
        let (rank, size) = (job.rank, job.size);
        let bell = vmmc::wait::bell() as *const vmmc::wait::Bell as *mut u8;
        let bell_len = std::mem::size_of::<vmmc::wait::Bell>();
        let bell_iova = bell as u64 & 0xfff;
        // SAFETY: the process's bell is static (it lives as long as the process).
        let bell_mr = unsafe { dev.register(bell, bell_len, bell_iova, IBV_ACCESS_REMOTE_READ) }?;
        let recv_cq = dev.recv_cq((RECV_DEPTH as i32) * (size.max(2) as i32 - 1) + 16)?;
        let mut qps = Vec::new();
        for r in 0..size {
            if r == rank {
                qps.push(None);
                continue;
            }
            let cq = dev.cq(2 * SQ_DEPTH as i32)?;
            let qp = dev.qp(cq, SQ_DEPTH, Some(&recv_cq), RECV_DEPTH)?;
            let me = QpAddr {
                qpn: qp.qpn(),
                lid: dev.lid,
                psn: random_u32() & 0xff_ffff,
                gid: dev.gid,
            };
            qps.push(Some((qp, me)));
        }
        // The out-of-band exchange of queue-pair addresses: every rank writes its own into
        // an inbox that each peer exports through the control plane.
        let inbox = Region::alloc(SLOT * size, MemKind::Private)?;
        // The notification rings: RING_BYTES per peer, written by that peer.
        let rings = Region::alloc(RING_BYTES * size.max(1), MemKind::Private)?;
        // SAFETY: the rings live in Shared next to their registration, which drops first.
        let rings_mr = unsafe {
            dev.register(
                rings.as_ptr(),
                rings.len(),
                rings.as_ptr() as u64,
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
            )
        }?;
        let mut peers_at: Vec<Option<PeerAt>> = vec![None; size];
        if size > 1 {
            tcp.export(ExportSpec {
                buf: INBOX,
                region: &inbox,
                importers: &Importers::Any,
                redirectable: false,
                has_handler: false,
            })?;
            for (r, q) in qps.iter().enumerate() {
                let Some((_, me)) = q else { continue };
                let req = tcp.import_request(job.procs[r], INBOX)?;
                let link = tcp
                    .import_poll_link(req, true)?
                    .ok_or_else(|| Error::Protocol("import pending after a wait".into()))?;
                let ring = (
                    rings.as_ptr() as u64 + (r * RING_BYTES) as u64,
                    rings_mr.rkey(),
                );
                let slot = encode_slot(me, bell_iova, bell_mr.rkey(), ring);
                link.write(rank * SLOT, &slot, WriteOpts::default())?;
                link.fence()?;
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            for r in (0..size).filter(|&r| r != rank) {
                while inbox.load_u32(r * SLOT + SLOT - 4)? != SLOT_DONE {
                    if !tcp.peer_alive(job.procs[r]) {
                        return Err(Error::PeerLost(format!(
                            "rank {r} left before its queue pair was connected"
                        )));
                    }
                    if Instant::now() > deadline {
                        return Err(Error::Bootstrap(format!(
                            "rank {r} did not send its queue-pair address"
                        )));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                let mut s = [0u8; SLOT];
                inbox.read(r * SLOT, &mut s)?;
                peers_at[r] = Some(decode_slot(&s));
            }
            tcp.unexport(INBOX)?;
        }
        let mut peers = Vec::new();
        let mut qpn_rank = HashMap::new();
        for (r, q) in qps.into_iter().enumerate() {
            let (Some((qp, me)), Some(at)) = (q, peers_at[r]) else {
                peers.push(None);
                continue;
            };
            qp.connect(&dev, &me, &at.qp)?;
            for _ in 0..RECV_DEPTH {
                qp.post_recv(0)?;
            }
            qpn_rank.insert(qp.qpn(), r);
            let qp = Arc::new(qp);
            let staging = Region::alloc(STAGING, MemKind::Private)?;
            // SAFETY: the staging region lives in the lane next to its registration, which
            // drops first (field order).
            let staging_mr = unsafe {
                dev.register(
                    staging.as_ptr(),
                    STAGING,
                    staging.as_ptr() as u64,
                    IBV_ACCESS_LOCAL_WRITE,
                )
            }?;
            peers.push(Some(Peer {
                qp: qp.clone(),
                lane: Mutex::new(Lane {
                    qp,
                    staging_mr,
                    staging,
                    next_wr: 0,
                    lost: false,
                    records: 0,
                }),
                bell_addr: at.bell_addr,
                bell_rkey: at.bell_rkey,
                ring_addr: at.ring_addr,
                ring_rkey: at.ring_rkey,
                via_control: AtomicBool::new(false),
                broken: AtomicBool::new(false),
                lost: AtomicBool::new(false),
            }));
        }
        // From now on unexport waits until every peer has seen the revocation and finished
        // its writes through the old links (see the crate docs).
        tcp.set_revoke_waits(true);
        // SAFETY: eventfd has no memory effects; the descriptor is ours.
        let kick = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if kick < 0 {
            return Err(Error::io("eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor, owned from here.
        let kick = unsafe { OwnedFd::from_raw_fd(kick) };
        let sh = Arc::new(Shared {
            peers,
            recv_cq,
            qpn_rank,
            arrivals: Mutex::new(vec![0; size]),
            rings,
            _rings_mr: rings_mr,
            slots: Mutex::new(vec![None; SLOTS - 1]),
            notes: Mutex::new(VecDeque::new()),
            notes_cv: Condvar::new(),
            drain_asked: AtomicU64::new(0),
            drain_done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            kick,
            local: Mutex::new(HashMap::new()),
            writes: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            bell_reads: AtomicU64::new(0),
            imm_sent: AtomicU64::new(0),
            imm_arrived: AtomicU64::new(0),
            _bell_mr: bell_mr,
            dev,
        });
        let tcp = Arc::new(tcp);
        let weak = Arc::downgrade(&tcp);
        let s = sh.clone();
        let thread = std::thread::Builder::new()
            .name("vmmc-rdma-recv".into())
            .spawn(move || {
                receiver(s, move || {
                    if let Some(t) = weak.upgrade() {
                        t.wake()
                    }
                })
            })
            .map_err(|e| Error::io("spawn the receive thread", e))?;
        Ok(RdmaTransport {
            exports: Mutex::new(HashMap::new()),
            tcp,
            sh,
            generation: AtomicU64::new(1),
            finished: AtomicBool::new(false),
            receiver: Mutex::new(Some(thread)),
            consumer: Mutex::new(()),
            woken: AtomicBool::new(false),
        })
    }

    /// Frees an export's notification slot once the receive thread has taken every arrival
    /// that is in the CQ now (the importers' writes are complete: unexport waited for them).
    fn free_slot(&self, key: u64) {
        let slot = ((key >> SLOT_SHIFT) & NO_SLOT) as usize;
        if slot as u64 == NO_SLOT {
            return;
        }
        let want = self.sh.drain_asked.fetch_add(1, Ordering::SeqCst) + 1;
        self.sh.kick();
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.sh.drain_done.load(Ordering::SeqCst) < want && Instant::now() < deadline {
            std::thread::yield_now();
        }
        if let Some(s) = lock(&self.sh.slots).get_mut(slot) {
            *s = None;
        }
    }

    /// Delivers the notifications that arrived by WRITE_WITH_IMM.
    fn drain_notes(&self, sink: &mut dyn FnMut(Notification)) -> usize {
        let batch = std::mem::take(&mut *lock(&self.sh.notes));
        self.sh.notes_cv.notify_all();
        let n = batch.len();
        for x in batch {
            sink(x);
        }
        n
    }

    /// This process's RDMA traffic so far.
    pub fn rdma_stats(&self) -> RdmaStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RdmaStats {
            writes: g(&self.sh.writes),
            bytes_written: g(&self.sh.bytes_written),
            reads: g(&self.sh.reads),
            bell_reads: g(&self.sh.bell_reads),
            imm_sent: g(&self.sh.imm_sent),
            imm_arrived: g(&self.sh.imm_arrived),
        }
    }

    /// The control plane's statistics (notifications, announcements, control writes).
    pub fn control_stats(&self) -> vmmc_tcp::Stats {
        self.tcp.stats()
    }

    /// The device in use.
    pub fn device_name(&self) -> &str {
        &self.sh.dev.name
    }

    /// Test hook: the key and length of `owner`'s buffer `buf`, obtained through the trusted
    /// party like an import (so only a permitted importer learns it).
    #[doc(hidden)]
    pub fn key_of(&self, owner: usize, buf: BufId) -> Result<(u64, usize)> {
        self.tcp.key_of(owner, buf)
    }

    /// Test hook: an RDMA WRITE of `data` to `rank` at `offset` of the buffer named by `key`,
    /// straight to the queue pair: no link, no revocation check, no bounds check on this
    /// side (to show what the responder's HCA enforces).
    #[doc(hidden)]
    pub fn raw_write(&self, rank: usize, key: u64, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() || data.len() > STAGING {
            return Err(Error::InvalidArgument("raw writes take 1 byte to 1 MiB"));
        }
        let peer = self.sh.peer(rank)?;
        let (iova, rkey) = ((key >> IOVA_SHIFT) & 0xfff, key as u32);
        peer.with_lane(|l| {
            l.staging.write(0, data)?;
            l.op(rank, IBV_WR_RDMA_WRITE, data.len(), iova + offset, rkey)
        })
    }

    /// Whether the queue pair to `rank` failed (writes then take the control connection).
    pub fn lane_broken(&self, rank: usize) -> bool {
        self.sh
            .peer(rank)
            .is_ok_and(|p| p.broken.load(Ordering::SeqCst))
    }
}

impl Transport for RdmaTransport {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn caps(&self) -> Caps {
        Caps {
            remote_read: true,
            native_au: false,
            redirection: true,
            async_send: false,
            max_write: MAX_WRITE,
            au_packetizer: false,
        }
    }

    fn job(&self) -> &JobInfo {
        self.tcp.job()
    }

    fn export(&self, spec: ExportSpec<'_>) -> Result<()> {
        if lock(&self.exports).contains_key(&spec.buf) {
            return Err(Error::BufIdInUse(spec.buf));
        }
        // Keys stay revoked for the whole job once unexported: the generation keeps a
        // registration that reuses an rkey from looking revoked.
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) & GEN_MASK;
        let buf = spec.buf;
        let base = spec.region.as_ptr();
        let len = spec.region.len();
        let (key, mr) = if spec.redirectable {
            (
                VIA_CONTROL | (generation << GEN_SHIFT) | (NO_SLOT << SLOT_SHIFT),
                None,
            )
        } else {
            let iova = base as u64 & 0xfff;
            // SAFETY: the core keeps the region alive while it is exported; the registration
            // is dropped in unexport (or with the transport) before the core may free it.
            let mr = unsafe {
                self.sh.dev.register(
                    base,
                    len,
                    iova,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                )
            }?;
            // A slot for native notifications (WRITE_WITH_IMM), when there is a handler.
            let slot = if spec.has_handler {
                let mut t = lock(&self.sh.slots);
                match t.iter().position(|x| x.is_none()) {
                    Some(i) => {
                        t[i] = Some(Slot { buf: spec.buf, len });
                        i as u64
                    }
                    None => NO_SLOT,
                }
            } else {
                NO_SLOT
            };
            let key = (generation << GEN_SHIFT)
                | (slot << SLOT_SHIFT)
                | (iova << IOVA_SHIFT)
                | u64::from(mr.rkey());
            (key, Some(mr))
        };
        lock(&self.sh.local).insert(key, (base as usize, len));
        if let Err(e) = self.tcp.export_keyed(spec, key) {
            lock(&self.sh.local).remove(&key);
            self.free_slot(key);
            return Err(e);
        }
        lock(&self.exports).insert(buf, (key, mr));
        Ok(())
    }

    fn unexport(&self, buf: BufId) -> Result<()> {
        // Revokes the key at every peer, which waits for its writes under way, before the
        // registration goes.
        let r = self.tcp.unexport(buf);
        if let Some((key, mr)) = lock(&self.exports).remove(&buf) {
            lock(&self.sh.local).remove(&key);
            self.free_slot(key);
            drop(mr);
        }
        r
    }

    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64> {
        self.tcp.import_request(owner, buf)
    }

    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll> {
        Ok(match self.tcp.import_poll_link(request, wait)? {
            None => ImportPoll::Pending,
            Some(link) => {
                let key = link.key();
                ImportPoll::Ready(Box::new(RemoteRdma {
                    rank: link.owner(),
                    iova: (key >> IOVA_SHIFT) & 0xfff,
                    rkey: key as u32,
                    slot: (key >> SLOT_SHIFT) & NO_SLOT,
                    via_control: key & VIA_CONTROL != 0 || link.is_local(),
                    link,
                    sh: self.sh.clone(),
                }))
            }
        })
    }

    fn import_cancel(&self, request: u64) {
        self.tcp.import_cancel(request)
    }

    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let Ok(_one) = self.consumer.try_lock() else {
            // Another thread consumes and delivers; do not spin the caller.
            let nap = timeout.unwrap_or(Duration::from_millis(1));
            std::thread::sleep(nap.min(Duration::from_millis(1)));
            return Ok(0);
        };
        // Two sources: the control plane's and the receive thread's (which wakes the control
        // plane's wait when it queues some).
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let mut n = self.drain_notes(sink);
            let left = if n > 0 {
                Some(Duration::ZERO)
            } else {
                deadline.map(|d| d.saturating_duration_since(Instant::now()))
            };
            n += self.tcp.progress(sink, left)?;
            n += self.drain_notes(sink);
            if n > 0 || self.woken.swap(false, Ordering::SeqCst) {
                return Ok(n);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
        }
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        self.tcp.wake()
    }

    fn peer_alive(&self, p: ProcId) -> bool {
        let lost = self
            .job()
            .rank_of(p)
            .and_then(|r| self.sh.peer(r).ok())
            .is_some_and(|peer| peer.lost.load(Ordering::SeqCst));
        !lost && self.tcp.peer_alive(p)
    }

    fn peer_failed(&self, p: ProcId) -> bool {
        self.tcp.peer_failed(p)
    }

    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.tcp.post_redir(buf, dest, dest_offset, buf_offset, len)
    }

    fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        self.tcp.end_redir(buf)
    }

    fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        self.tcp.data_end(buf)
    }

    fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.tcp.clear_data_end(buf)
    }

    fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _a = lock(&self.exports);
        let _b = lock(&self.sh.local);
        self.tcp.hold_locks(f)
    }

    fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let r = self.tcp.finish();
        self.sh.stop.store(true, Ordering::SeqCst);
        self.sh.kick();
        self.sh.notes_cv.notify_all();
        if let Some(t) = lock(&self.receiver).take() {
            let _ = t.join();
        }
        r
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The sender's side of a link: RDMA operations on the queue pair to the exporter.
pub struct RemoteRdma {
    link: RemoteTcp,
    sh: Arc<Shared>,
    rank: usize,
    iova: u64,
    rkey: u32,
    /// The export's notification slot (`NO_SLOT`: notifications on the control path).
    slot: u64,
    via_control: bool,
}

impl RemoteRdma {
    fn write_control(
        &self,
        peer: Option<&Peer>,
        offset: usize,
        data: &[u8],
        opts: WriteOpts,
    ) -> Result<()> {
        if let Some(p) = peer {
            p.via_control.store(true, Ordering::Release);
        }
        self.link.write(offset, data, opts)
    }
}

impl RemoteBuffer for RemoteRdma {
    fn len(&self) -> usize {
        self.link.len()
    }

    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        if self.via_control {
            let peer = if self.link.is_local() {
                None
            } else {
                self.sh.peer(self.rank).ok()
            };
            return self.write_control(peer, offset, data, opts);
        }
        let peer = self.sh.peer(self.rank)?;
        if peer.broken.load(Ordering::Acquire) {
            return self.write_control(Some(peer), offset, data, opts);
        }
        self.sh.order_after_control(peer, &self.link)?;
        let n = data.len();
        let body = n - WORD_SIZE;
        let at = self.iova + offset as u64;
        let notify = opts.notify && self.link.has_handler();
        // Records name offsets below 4 GiB; beyond, the control path carries the notification.
        let native = notify && self.slot != NO_SLOT && offset + body <= u32::MAX as usize;
        let want_bell = !notify;
        let sleeping = {
            let under_way = self.link.enter()?;
            let r = peer.with_lane(|l| {
                let mut done = 0;
                while done < body {
                    let k = (body - done).min(STAGING);
                    l.staging.write(0, &data[done..done + k])?;
                    l.op(self.rank, IBV_WR_RDMA_WRITE, k, at + done as u64, self.rkey)?;
                    done += k;
                }
                l.staging.write(0, &data[body..])?;
                l.op(
                    self.rank,
                    IBV_WR_RDMA_WRITE,
                    WORD_SIZE,
                    at + body as u64,
                    self.rkey,
                )?;
                if native {
                    // The notification: a record (slot, offset, value) written into our ring
                    // at the receiver with WRITE_WITH_IMM, whose immediate names the export;
                    // the receiver's CQ gets it after the data (RC executes in order).
                    let mut rec = [0u8; RECORD];
                    rec[0..4].copy_from_slice(&(self.slot as u32).to_ne_bytes());
                    rec[4..8].copy_from_slice(&((offset + body) as u32).to_ne_bytes());
                    rec[8..12].copy_from_slice(&data[body..]);
                    l.staging.write(0, &rec)?;
                    let at = peer.ring_addr + (l.records % u64::from(RECV_DEPTH)) * RECORD as u64;
                    l.op_imm(
                        self.rank,
                        IBV_WR_RDMA_WRITE_WITH_IMM,
                        RECORD,
                        at,
                        peer.ring_rkey,
                        self.slot as u32,
                    )?;
                    l.records += 1;
                    self.sh.imm_sent.fetch_add(1, Ordering::Relaxed);
                    return Ok(false);
                }
                if !want_bell {
                    return Ok(false);
                }
                // Whether a thread of the receiver sleeps on its doorbell: read after the
                // data is visible there.
                self.sh.bell_reads.fetch_add(1, Ordering::Relaxed);
                l.op(
                    self.rank,
                    IBV_WR_RDMA_READ,
                    4,
                    peer.bell_addr,
                    peer.bell_rkey,
                )?;
                Ok(l.staging.load_u32(0)? != 0)
            });
            match r {
                // The queue pair was in error already (the other end's access error moved
                // it there): nothing of this write went, or the same bytes again do no harm.
                Err(Error::PeerLost(_)) if !peer.lost.load(Ordering::SeqCst) => {
                    drop(under_way);
                    return self.write_control(Some(peer), offset, data, opts);
                }
                r => r?,
            }
        };
        self.sh.writes.fetch_add(1, Ordering::Relaxed);
        self.sh.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
        let value = u32::from_ne_bytes(data[body..].try_into().expect("a word"));
        if native {
            Ok(())
        } else if !want_bell {
            self.link.placed(offset + body, value, true)
        } else if sleeping {
            // The data is visible already: a peer that left meanwhile needs no wake-up.
            let _ = self.link.placed(offset + body, value, false);
            Ok(())
        } else {
            Ok(())
        }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let _under_way = self.link.enter()?;
        if self.link.is_local() {
            let (base, len) = *lock(&self.sh.local)
                .get(&self.link.key())
                .ok_or(Error::Unexported)?;
            if offset + out.len() > len {
                return Err(Error::OutOfBounds {
                    offset,
                    len: out.len(),
                    size: len,
                });
            }
            // SAFETY: the buffer is exported by this process (found by its key, removed at
            // unexport) and the range lies inside it (checked).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base as *const u8).add(offset),
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            return Ok(());
        }
        if self.via_control {
            return Err(Error::Unsupported("remote read of a redirectable buffer"));
        }
        let peer = self.sh.peer(self.rank)?;
        if peer.broken.load(Ordering::Acquire) {
            return Err(Error::PeerLost(format!(
                "the queue pair to rank {} is in the error state",
                self.rank
            )));
        }
        self.sh.reads.fetch_add(1, Ordering::Relaxed);
        let at = self.iova + offset as u64;
        peer.with_lane(|l| {
            let mut done = 0;
            while done < out.len() {
                let k = (out.len() - done).min(STAGING);
                l.op(self.rank, IBV_WR_RDMA_READ, k, at + done as u64, self.rkey)?;
                l.staging.read(0, &mut out[done..done + k])?;
                done += k;
            }
            Ok(())
        })
    }

    fn fence(&self) -> Result<()> {
        // RDMA writes are complete when write returns; frames on the control connection are
        // not: a round trip only when some may be under way.
        if self.link.is_local() {
            return Ok(());
        }
        let peer = self.sh.peer(self.rank)?;
        if self.via_control || peer.broken.load(Ordering::Acquire) {
            peer.via_control.store(false, Ordering::Release);
            return self.link.fence();
        }
        self.sh.order_after_control(peer, &self.link)
    }
}
