//! # vmmc-sim: the SHRIMP-II network interface, simulated in virtual time
//!
//! N nodes (1 to 64) run in one process, each a thread with its own virtual clock, each
//! running the same Rust program through the launcher's entry point (`vmmc_run::run`, or
//! [`Sim::run`] directly). The model follows seeds 001 §2 and §4 and 003 §3; every number
//! comes from one parameter file, `params/shrimp.toml`, which gives each value's source.
//!
//! ```no_run
//! use vmmc_sim::{Params, Sim};
//! let sim = Sim::new(2, Params::default())?;
//! let outcomes = sim.run(|ep| {
//!     // every node runs this with its own endpoint
//!     ep.rank()
//! });
//! println!("{:?}", sim.stats().total);
//! # Ok::<(), vmmc::Error>(())
//! ```
//!
//! ## Time
//! Each node has a clock in virtual nanoseconds. A node computes freely between library
//! calls; at each call the host time the thread computed since the previous call, less
//! `cpu.compute_floor_ns`, times `cpu.compute_scale`, is added to its clock (the *compute
//! charge*), and the call's modelled cost follows. That host time is the thread's CPU time,
//! or the wall time where that is less: the CPU clock leaves out the time the thread was not
//! running, but reading it is a system call (0.3-1 us on the VMs measured here) of which
//! half of each of the two reads falls inside the interval, while the wall clock is read in
//! user space outside them both. On a 16-node SVM lock ping-pong those reads were half of a
//! typical interval's CPU time (median 1.0 us of 25,000 intervals, 0.3 us without), and
//! pushed 4-9% of the intervals past the floor, each charged x120, so that the run's median
//! hand-over was 28.8 us in one run of four and 52-99 us in the others; with the lesser of the
//! two it was 28.8 us in 3 of 4 runs, and the median of five rounds of `bench-svm` was 28.8 us
//! in each of three runs. A scheduler keeps the nodes in time
//! order: only the node with the earliest clock runs, and packets are written into memory
//! by their delivery events, in time order, while no node runs. A node that polls (through
//! [`vmmc::Region::wait_u32`], the conformance suite's waits, or [`vmmc::pace::relax`]) waits
//! for the next packet delivered to it and resumes at that packet's delivery time plus the
//! cost of the successful poll; a blocking send advances the clock to the moment the data
//! has left memory. [`vmmc::pace::now_ns`] reads the calling node's clock. The same program
//! with the same inputs and parameters therefore gives the same communication times and
//! statistics, up to the compute charges (set `cpu.compute_scale = 0` to remove them).
//! A program may also state computation that it does not perform
//! ([`vmmc::pace::charge`]`(`[`vmmc::pace::Cost::Compute`]`(ns))`): the node's clock moves
//! by exactly `ns`. A loop that instead spins on `now_ns` until a virtual deadline moves
//! only by the compute charges of its turns, which depend on the host, and at
//! `compute_scale = 0` never ends.
//!
//! **Compute time.** The default scale, 120, makes a current core stand for the 60 MHz
//! Pentium: the Pentium retired about one instruction per cycle on integer code (60 to 100
//! MIPS), a current server core about three per cycle at 3 GHz and more (about 10,000 MIPS).
//! Time below `compute_floor_ns` per interval (the core's own bookkeeping around each call,
//! already represented by the modelled per-call costs) is not charged.
//!
//! **One core per run.** Only the earliest node runs, so the node threads of a run share
//! one of the process's cores (a different one for each run that the process starts, so
//! that simulations at once spread over the cores; `VMMC_SIM_PIN=0` leaves them free). A
//! node thread woken on another core than the last one's finds its caches cold, and the
//! misses of its first microseconds are host CPU time like any other: at the scale of 120
//! they added 0.2 to 6 virtual ms to single lock hand-overs of shared virtual memory, and
//! the same run's median hand-over ranged from 22 us to 2 ms; on one core it is 22.4 us in
//! nearly every run. A thread that a node's program starts inherits the core (such threads
//! are outside the schedule anyway, see "What is not modelled").
//!
//! ## Calibration
//! With the default parameters the ping-pong benchmark (`benches`, run with `--transport sim`)
//! gives a one-word AU latency of 4.75 us with write-through memory and 3.70 us uncached, a
//! one-word DU latency of 7.6 us, a DU-0copy peak of 23 MB/s and a DU send overhead of 1.5 us
//! (seed 003 §3.4, seed 001 §4.2-4.3); a test checks each within 10%, and the shape of seed
//! 003's Figure 3 (AU faster for small messages, DU slightly more bandwidth for large ones).
//! The DU latency matched is seed 003's 7.6 us rather than seed 001's 6 us: every other
//! calibration figure comes from seed 003's measurement of the same prototype, while the
//! 6 us belongs to the later 16-node system. The parameter file marks which values the seeds
//! state, which were fitted to these figures, and which are estimates.
//!
//! ## A present-day machine
//! A second file, `params/modern.toml` ([`params::MODERN_PARAMS`]), puts the same model on
//! today's hardware: a current x86 server with an NVIDIA ConnectX-6 HDR InfiniBand adapter
//! (200 Gb/s, PCIe 4.0 x16) and one Quantum HDR switch. Select it with
//! `VMMC_SIM_PARAMS=transports/sim/params/modern.toml`. Deliberate update stands for an RDMA
//! write posted at user level (the work request written to the NIC, then a DMA read of the
//! payload over PCIe); automatic update, which has no modern equivalent, for write-combined
//! stores to a NIC window, packed by the NIC into packets; interrupts for MSI-X and a Linux
//! wake-up. `cpu.compute_scale` is 1: the host core is the modelled CPU. Every value names a
//! data sheet, a vendor document or a paper with measurements, or is marked an estimate with
//! its reasoning; none is fitted to a modern end-to-end figure. The ping-pong (two nodes, one
//! switch hop) gives a one-word latency of 0.95 us for AU and 1.58 us for DU, and 24 GB/s for
//! 1 MB DU messages, against NVIDIA's "sub-600ns" adapter latency plus 130 ns for the switch,
//! and the 25 GB/s of the 200 Gb/s link (`tests/modern_params.rs` checks 1-2 us and
//! 12-25 GB/s). A transfer is split at the file's 2 MB pages, not at 4 KB: a NIC translates
//! pages itself and needs one work request per message, not one per page.
//!
//! ## What is modelled
//! - **Pages and tables.** Exports pin pages and enable them in the receiver's incoming page
//!   table (IPT), with the interrupt bit set when the buffer has a handler; imports fill the
//!   importer's outgoing page table (a proxy's pages point at the remote physical pages).
//! - **Deliberate update.** Each send costs the user-level DMA initiation
//!   (`costs.du_initiate_ns`), plus a system call under `switches.syscall_per_send`. The
//!   engine splits a transfer at local and remote page boundaries (one initiation per
//!   piece), reads each piece over EISA (`ni.du_dma_start_ns` + size at `bus.dma_mb_s`) into
//!   the outgoing FIFO. With `ni.du_queue_depth` = k the CPU may initiate k pieces ahead of
//!   the one in service; a blocking send returns when its last piece has left memory.
//! - **Automatic update.** Every store through an automatic-update binding costs
//!   `costs.au_store_*_ns` per word and is snooped (`ni.snoop_ns`). Without combining each
//!   store is one packet. With combining (the binding asks for it and `switches.combining`),
//!   consecutive stores append to one packet until a non-consecutive store, a page or
//!   `ni.combine_subpage` boundary, or the timer (`ni.combine_timer_ns` after the last store).
//!   `switches.au_memory` selects write-through (the measured extra delay
//!   `costs.au_writethrough_delay_ns`) or uncached pages.
//! - **Outgoing FIFO.** Packets queue in a FIFO of `ni.fifo_capacity` bytes draining at
//!   `ni.fifo_drain_mb_s`. Above `ni.fifo_threshold` an automatic-update writer takes a
//!   threshold interrupt and is de-scheduled until the FIFO drains to `ni.fifo_resume`; the
//!   DMA engine just waits for room.
//! - **Backplane.** A 2-D mesh (4 x 4 for 16 nodes), dimension-order wormhole routing,
//!   `network.link_mb_s` per link and `network.hop_ns` per hop; a packet holds its whole path,
//!   so packets of one sender to one receiver arrive in order; the network holds at most
//!   `ni.network_buffer_ns` of data ahead of a receiver's DMA (back-pressure).
//! - **Incoming DMA.** Per packet, `ni.nic_in_ns` + `ni.in_dma_start_ns` + size at
//!   `bus.dma_mb_s`, after the IPT check: a packet for a page that is not enabled is not
//!   written; the receive path freezes for an interrupt and the violation is counted and
//!   reported ([`Sim::ipt_errors`]).
//! - **Protocol events without a transport call.** A library may charge the node the
//!   modelled cost of an event that is no transfer ([`vmmc::pace::charge`]): shared virtual
//!   memory's access fault (`costs.access_fault_ns`) and a synchronisation satisfied
//!   locally (`costs.local_sync_ns`).
//! - **Interrupts.** A notification needs the sender's bit (a `send_notify`, or a binding
//!   with `notify`) and the receiver's IPT bit; it costs the receiver `costs.interrupt_ns`.
//!   Under `switches.interrupt_every_message` every arriving message costs an interrupt.
//!
//! ## What is not modelled
//! Caches beyond the fitted write-through delay; memory-bus contention between the CPU and
//! the DMA engines (seed 001 §4.5.3); the daemons' Ethernet traffic (imports and exports cost
//! a fixed time); contention inside the network beyond whole-path reservation in initiation
//! order; the time a notification handler runs (handlers run on their own thread, and their
//! library calls are charged to the node when they happen); deliberate-update data is read
//! when the send is initiated rather than while the DMA runs. Threads a program starts itself
//! are not part of the schedule: their library calls are ordered when they happen, so a
//! program whose correctness depends on such threads is correct but not deterministic.

#![deny(missing_docs)]

mod machine;
pub mod params;
pub mod stats;

pub use machine::IptError;
pub use params::Params;
pub use stats::{NodeStats, RunStats};

use machine::{Caller, Machine};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vmmc::pace::Pacer;
use vmmc::redirect::Redirected;
use vmmc::{
    AuOptions, BufId, Caps, Endpoint, Error, ExportSpec, ImportPoll, JobInfo, Notification, ProcId,
    Region, RemoteBuffer, Result, Transport, WriteOpts,
};

/// Largest number of nodes.
pub const MAX_NODES: usize = 64;

/// A simulated SHRIMP machine.
pub struct Sim {
    m: Arc<Machine>,
}

/// How a node's program ended.
#[derive(Debug)]
pub enum Outcome<T> {
    /// It returned this.
    Returned(T),
    /// It died through [`vmmc::conformance::die`] (the [`vmmc::pace::Pacer::die`] path).
    Died,
    /// It panicked with this message.
    Panicked(String),
}

/// The payload a dying node unwinds with.
struct NodeDied;

impl Sim {
    /// A machine of `nodes` nodes.
    pub fn new(nodes: usize, params: Params) -> Result<Sim> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(Error::Bootstrap(format!(
                "the simulator runs 1 to {MAX_NODES} nodes, not {nodes}"
            )));
        }
        Ok(Sim {
            m: Arc::new(Machine::new(nodes, params)),
        })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.m.n
    }

    /// The parameters in force.
    pub fn params(&self) -> &Params {
        &self.m.p
    }

    /// Runs `f` on every node, each on its own thread with its own endpoint, and returns how
    /// each ended, by rank.
    pub fn run<T, F>(&self, f: F) -> Vec<Outcome<T>>
    where
        F: Fn(Endpoint) -> T + Sync,
        T: Send,
    {
        let f = &f;
        let cpu = one_cpu();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.m.n)
                .map(|rank| {
                    let m = self.m.clone();
                    std::thread::Builder::new()
                        .name(format!("sim-node-{rank}"))
                        .spawn_scoped(s, move || {
                            if let Some(c) = cpu {
                                pin(c);
                            }
                            run_node(m, rank, f)
                        })
                        .expect("spawn a node thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Outcome::Panicked("node thread".into()))
                })
                .collect()
        })
    }

    /// The statistics so far.
    pub fn stats(&self) -> RunStats {
        let st = self.m.lock();
        RunStats::from_nodes(st.nodes.iter().map(|n| n.stats.clone()).collect())
    }

    /// Sends a raw packet from node `from` (call it on that node's thread) to physical page
    /// `page` of node `dest`, bypassing the outgoing page table: tests of the IPT check.
    #[doc(hidden)]
    pub fn inject_for_test(&self, from: usize, dest: usize, page: u64, data: &[u8]) -> Result<()> {
        let (mut st, caller) = self.m.enter(from)?;
        self.m.inject(&mut st, from, dest, page, data);
        self.m.leave(st, caller);
        Ok(())
    }

    /// The first physical page of buffer `buf` exported by `node`, if exported (tests).
    #[doc(hidden)]
    pub fn first_page_for_test(&self, node: usize, buf: BufId) -> Option<u64> {
        self.m.first_page(&self.m.lock(), node, buf)
    }

    /// Packets the incoming page tables refused.
    pub fn ipt_errors(&self) -> Vec<IptError> {
        self.m.lock().ipt_errors.clone()
    }
}

/// The environment variable that lets a run's node threads run on any core
/// (`VMMC_SIM_PIN=0`; by default they share one).
pub const PIN_VAR: &str = "VMMC_SIM_PIN";

/// The core a run's node threads share: one of the cores this process may use, a different
/// one for each run of the process (several simulations at once spread over the cores), or
/// none (`VMMC_SIM_PIN=0`, or only one core allowed).
///
/// (The crate docs, "One core per run", say why.)
fn one_cpu() -> Option<usize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    if std::env::var(PIN_VAR).is_ok_and(|v| v == "0" || v == "off") {
        return None;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and sched_getaffinity fills the one
    // we pass with its size.
    let allowed: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    };
    if allowed.len() < 2 {
        return None;
    }
    let k = NEXT.fetch_add(1, Ordering::Relaxed) + std::process::id() as usize;
    Some(allowed[k % allowed.len()])
}

/// Keeps the calling thread on `cpu` (a failure leaves it where it was: only the charge's
/// noise depends on it).
fn pin(cpu: usize) {
    // SAFETY: as in `one_cpu`; sched_setaffinity with pid 0 sets the calling thread's mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn run_node<T, F>(m: Arc<Machine>, rank: usize, f: &F) -> Outcome<T>
where
    F: Fn(Endpoint) -> T + Sync,
{
    m.start_node(rank);
    let pacer: Arc<dyn Pacer> = Arc::new(NodePacer {
        m: m.clone(),
        node: rank,
    });
    vmmc::pace::install(Some(pacer));
    let t = Arc::new(SimTransport::new(m.clone(), rank));
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| Endpoint::new(t).map(f)));
    let out = match r {
        Ok(Ok(v)) => Outcome::Returned(v),
        Ok(Err(e)) => Outcome::Panicked(format!("endpoint: {e}")),
        Err(p) if p.is::<NodeDied>() => Outcome::Died,
        Err(p) => Outcome::Panicked(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        ),
    };
    let died = !matches!(out, Outcome::Returned(_));
    if !died && m.has_buffered() {
        // Stores the program made after its last library call take effect before it ends.
        let _ = m.call(rank, |_, _, _| Ok(()));
    }
    m.end_node(rank, died);
    vmmc::pace::install(None);
    out
}

struct NodePacer {
    m: Arc<Machine>,
    node: usize,
}

impl Pacer for NodePacer {
    fn idle(&self) {
        if let Ok((st, mut caller)) = self.m.enter(self.node) {
            let st = self.m.wait_event(st, self.node, &mut caller);
            self.m.leave(st, caller);
        } else {
            std::thread::yield_now();
        }
    }

    fn now_ns(&self) -> u64 {
        match self.m.enter(self.node) {
            Ok((st, caller)) => {
                let t = st.nodes[self.node].clock;
                self.m.leave(st, caller);
                t
            }
            Err(_) => self.m.lock().nodes[self.node].clock,
        }
    }

    fn charge(&self, what: vmmc::pace::Cost) {
        use vmmc::pace::Cost;
        let Ok((mut st, caller)) = self.m.enter(self.node) else {
            return;
        };
        let nd = &mut st.nodes[self.node];
        match what {
            Cost::AccessFault => {
                nd.clock += self.m.p.costs.access_fault_ns;
                nd.stats.access_faults += 1;
            }
            Cost::LocalSync => nd.clock += self.m.p.costs.local_sync_ns,
            Cost::Compute(ns) => {
                // Bounded as every modelled time is (`params::MAX_NS`), so that the clock's
                // arithmetic cannot overflow.
                let ns = ns.min(params::MAX_NS as u64);
                nd.clock = nd.clock.saturating_add(ns);
                nd.stats.compute_ns = nd.stats.compute_ns.saturating_add(ns);
            }
            _ => {}
        }
        self.m.leave(st, caller);
    }

    fn die(&self) -> ! {
        self.m.kill(self.node);
        std::panic::resume_unwind(Box::new(NodeDied))
    }
}

/// Pending imports: the next id, and each request's (owner rank, buffer).
type Requests = (u64, HashMap<u64, (usize, BufId)>);

/// One node's transport.
pub struct SimTransport {
    m: Arc<Machine>,
    node: usize,
    job: JobInfo,
    requests: Mutex<Requests>,
}

fn proc_of(rank: usize) -> ProcId {
    ProcId {
        node: rank as u32,
        squid: 1,
    }
}

impl SimTransport {
    fn new(m: Arc<Machine>, node: usize) -> SimTransport {
        let n = m.n;
        SimTransport {
            job: JobInfo {
                rank: node,
                size: n,
                procs: (0..n).map(proc_of).collect(),
                hosts: (0..n).map(|i| format!("shrimp{i}")).collect(),
                parent: None,
            },
            m,
            node,
            requests: Mutex::new((1, HashMap::new())),
        }
    }

    /// Runs `f` as a library call of this node.
    fn call<R>(
        &self,
        f: impl FnOnce(&Machine, &mut machine::State, Caller) -> Result<R>,
    ) -> Result<R> {
        self.m.call(self.node, f)
    }
}

impl Transport for SimTransport {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn caps(&self) -> Caps {
        Caps {
            remote_read: false,
            native_au: false,
            redirection: true,
            async_send: true,
            max_write: 0,
            au_packetizer: true,
        }
    }

    fn job(&self) -> &JobInfo {
        &self.job
    }

    fn export(&self, spec: ExportSpec<'_>) -> Result<()> {
        self.call(|m, st, caller| {
            m.export(
                st,
                caller,
                self.node,
                spec.buf,
                spec.region,
                spec.importers,
                spec.redirectable,
                spec.has_handler,
            )
        })
    }

    fn unexport(&self, buf: BufId) -> Result<()> {
        let (mut st, mut caller) = self.m.enter(self.node)?;
        let r = match self.m.revoke(&mut st, self.node, buf) {
            Ok(busy) => {
                if busy {
                    // Packets already on their way land before the pages are disabled.
                    while self.m.in_flight(&st, self.node, buf) > 0 {
                        st = self.m.wait_event(st, self.node, &mut caller);
                    }
                }
                self.m.remove_export(&mut st, self.node, buf);
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.m.leave(st, caller);
        r
    }

    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64> {
        let rank = self
            .job
            .rank_of(owner)
            .ok_or_else(|| Error::PeerLost(owner.to_string()))?;
        let mut g = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        let id = g.0;
        g.0 += 1;
        g.1.insert(id, (rank, buf));
        Ok(id)
    }

    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll> {
        let (owner, buf) = *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .get(&request)
            .ok_or(Error::InvalidArgument("unknown import request"))?;
        let (mut st, mut caller) = self.m.enter(self.node)?;
        let r = loop {
            if !self.m.alive(&st, owner) && !st.nodes[owner].exports.contains_key(&buf) {
                break Err(Error::PeerLost(proc_of(owner).to_string()));
            }
            if self.m.dead(&st, owner) {
                break Err(Error::PeerLost(proc_of(owner).to_string()));
            }
            match st.nodes[owner].exports.get(&buf) {
                Some(x) if !x.importers.allows(proc_of(self.node)) => {
                    break Err(Error::PermissionDenied(buf))
                }
                Some(x) => {
                    let remote = SimRemote {
                        m: self.m.clone(),
                        node: self.node,
                        owner,
                        buf,
                        gen: x.gen,
                        len: x.region.len(),
                        live: x.live.clone(),
                    };
                    if caller == Caller::Main {
                        st.nodes[self.node].clock += self.m.p.costs.import_ns;
                    }
                    break Ok(ImportPoll::Ready(Box::new(remote)));
                }
                None if !wait => break Ok(ImportPoll::Pending),
                None => st = self.m.wait_event(st, self.node, &mut caller),
            }
        };
        self.m.leave(st, caller);
        if !matches!(r, Ok(ImportPoll::Pending)) {
            self.requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .1
                .remove(&request);
        }
        r
    }

    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let mut st = self.m.lock();
        if st.nodes[self.node].notes.is_empty() {
            st = self
                .m
                .wait_notes(st, self.node, timeout.unwrap_or(Duration::from_millis(500)));
        }
        let notes: Vec<Notification> = st.nodes[self.node].notes.drain(..).collect();
        drop(st);
        let n = notes.len();
        for x in notes {
            sink(x);
        }
        Ok(n)
    }

    fn wake(&self) {
        self.m.kick(self.node);
    }

    fn peer_alive(&self, p: ProcId) -> bool {
        self.job
            .rank_of(p)
            .is_some_and(|r| self.m.alive(&self.m.lock(), r))
    }

    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.call(|m, st, _| m.post_redir(st, self.node, buf, dest, dest_offset, buf_offset, len))
    }

    fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        let (mut st, mut caller) = self.m.enter(self.node)?;
        let r = loop {
            match self.m.end_redir(&mut st, self.node, buf) {
                Ok(Ok(r)) => break Ok(r),
                Err(e) => break Err(e),
                Ok(Err(sender)) => {
                    if self.m.dead(&st, sender) {
                        self.m.abandon_redir(&mut st, self.node, buf);
                        break Err(Error::PeerLost(
                            "the sender died during a redirected message".into(),
                        ));
                    }
                    st = self.m.wait_event(st, self.node, &mut caller);
                }
            }
        };
        self.m.leave(st, caller);
        r
    }

    fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        self.call(|m, st, _| m.data_end(st, self.node, buf))
    }

    fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.call(|m, st, _| m.clear_data_end(st, self.node, buf))
    }
}

/// The sender's side of a link: the importer's outgoing page table entries for one buffer.
struct SimRemote {
    m: Arc<Machine>,
    node: usize,
    owner: usize,
    buf: BufId,
    gen: u64,
    len: usize,
    /// The export's liveness flag (cleared at revoke and when its node is killed).
    live: Arc<std::sync::atomic::AtomicBool>,
}

impl SimRemote {
    fn call<R>(
        &self,
        f: impl FnOnce(&Machine, &mut machine::State, Caller) -> Result<R>,
    ) -> Result<R> {
        self.m.call(self.node, f)
    }
}

impl RemoteBuffer for SimRemote {
    fn len(&self) -> usize {
        self.len
    }

    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        self.call(|m, st, caller| {
            m.write(
                st,
                caller,
                self.node,
                self.owner,
                self.buf,
                self.gen,
                offset,
                data,
                opts.notify,
                opts.asynchronous,
            )
        })
    }

    fn fence(&self) -> Result<()> {
        self.call(|m, st, caller| {
            m.check_link(st, self.owner, self.buf, self.gen)?;
            if caller == Caller::Main {
                let t = m.delivered_by(st, self.owner);
                let nd = &mut st.nodes[self.node];
                nd.clock = nd.clock.max(t);
            }
            Ok(())
        })
    }

    /// A one-word store of the node's program is buffered without a library call, as a
    /// SHRIMP store is a plain memory write: no per-call bookkeeping is charged as compute
    /// and no turn is handed over per store. The buffered stores take effect, in virtual-time
    /// order among the other nodes' events and with the compute between them, at the node's
    /// next library call (or every [`machine::STORE_BATCH`] stores), with the same model as a
    /// store made through a call.
    fn au_store(&self, offset: usize, data: &[u8], opts: AuOptions) -> Result<()> {
        if let Ok(word) = <[u8; vmmc::WORD_SIZE]>::try_from(data) {
            let s = machine::Buffered {
                owner: self.owner,
                buf: self.buf,
                gen: self.gen,
                offset,
                word,
                opts,
                stamp: machine::stamp(),
            };
            if let Some(n) = self.m.buffer_store(self.node, &self.live, s) {
                if n >= machine::STORE_BATCH {
                    self.call(|m, st, _| m.take_store_error(st, self.node))?;
                }
                return Ok(());
            }
        }
        self.call(|m, st, caller| {
            m.take_store_error(st, self.node)?;
            m.au_store(
                st, caller, self.node, self.owner, self.buf, self.gen, offset, data, opts,
            )
        })
    }

    fn au_flush(&self) -> Result<()> {
        self.call(|m, st, _| {
            m.au_flush(st, self.node);
            m.take_store_error(st, self.node)
        })
    }
}
