//! The VMMC API a program uses: [`Endpoint`] (export side, identity, notifications,
//! redirection) and [`Proxy`] (an imported buffer: deliberate update, remote read, automatic
//! update bindings).

use crate::destspace::DestSpace;
use crate::emulate::ReadService;
use crate::engine::{AsyncGet, AsyncSend, Engine};
use crate::error::{Error, Result};
use crate::notify::{Handler, Notifier};
use crate::redirect::Redirected;
use crate::region::{MemKind, Region};
use crate::transport::{Caps, ExportSpec, ImportPoll, RemoteBuffer, Transport, WriteOpts};
use crate::types::{page_size, BufId, Importers, JobInfo, NodeId, Notification, ProcId, WORD_SIZE};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How a buffer is exported.
#[derive(Clone, Default)]
pub struct ExportOptions {
    /// Who may import it.
    pub importers: Importers,
    /// The notification handler, if any (seed 000: zero or one per buffer).
    pub handler: Option<Handler>,
    /// Whether the buffer takes transfer redirection (seed 004).
    pub redirectable: bool,
}

impl ExportOptions {
    /// Export to anyone, no handler.
    pub fn new() -> ExportOptions {
        ExportOptions::default()
    }
    /// Restricts importers to `procs`.
    pub fn importers(mut self, procs: impl IntoIterator<Item = ProcId>) -> Self {
        self.importers = Importers::Only(procs.into_iter().collect());
        self
    }
    /// Installs a notification handler.
    pub fn handler(mut self, h: impl Fn(Notification) + Send + Sync + 'static) -> Self {
        self.handler = Some(Arc::new(h));
        self
    }
    /// Makes the buffer redirectable.
    pub fn redirectable(mut self) -> Self {
        self.redirectable = true;
        self
    }
}

pub(crate) struct Exported {
    pub(crate) region: Region,
    pub(crate) redirectable: bool,
    pub(crate) importers: Importers,
    /// The posted redirection's destination, kept mapped until `end_redir` or `unexport`
    /// (senders write into it by address).
    pub(crate) redir_dest: Option<Region>,
}

pub(crate) struct ProxyInner {
    pub(crate) remote: Box<dyn RemoteBuffer>,
    pub(crate) len: usize,
    pub(crate) owner: ProcId,
    pub(crate) buf: BufId,
    pub(crate) addr: usize,
    pub(crate) live: AtomicBool,
    pub(crate) max_write: usize,
    /// User handles ([`Proxy`] clones); the last one to go unimports.
    pub(crate) handles: std::sync::atomic::AtomicUsize,
}

impl ProxyInner {
    /// The deliberate-update fast path: checks, then the transport's write. No allocation, no
    /// lock (the transport's write must keep that promise too).
    #[inline]
    pub(crate) fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        if !self.live.load(Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        check_transfer(offset, data.len(), self.len)?;
        if self.max_write == 0 || data.len() <= self.max_write {
            return self.remote.write(offset, data, opts);
        }
        // Split, keeping order; only the last piece carries the notification.
        let mut pos = 0;
        while pos < data.len() {
            let end = (pos + self.max_write).min(data.len());
            let last = end == data.len();
            self.remote.write(
                offset + pos,
                &data[pos..end],
                WriteOpts {
                    notify: opts.notify && last,
                    ..opts
                },
            )?;
            pos = end;
        }
        Ok(())
    }
}

/// Refuses transfers that are empty, not word-multiples or out of bounds (nothing is written).
#[inline]
pub(crate) fn check_transfer(offset: usize, len: usize, size: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument("empty transfer"));
    }
    if !offset.is_multiple_of(WORD_SIZE) || !len.is_multiple_of(WORD_SIZE) {
        return Err(Error::Unaligned { offset, len });
    }
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds { offset, len, size }),
    }
}

pub(crate) struct Shared {
    t: Arc<dyn Transport>,
    /// Performs `send_async` and `get_data_async`.
    pub(crate) engine: Arc<Engine>,
    caps: Caps,
    exports: Arc<Mutex<BTreeMap<BufId, Exported>>>,
    notifier: Arc<Notifier>,
    /// Remote read emulated by request and reply, when the transport has none.
    reads: Option<Arc<ReadService>>,
    dest: DestSpace<ProxyInner>,
    /// The notification thread (drains the transport) and the handler thread.
    dispatcher: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// A process's handle on VMMC: its identity, its exports, its notifications.
///
/// Cheap to clone; all clones are the same endpoint. Dropping the last clone stops the
/// notification thread and leaves the job cleanly.
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) sh: Arc<Shared>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("transport", &self.sh.t.name())
            .field("me", &self.me())
            .finish()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Shared {
    fn finish(&self) {
        self.engine.stop();
        self.stop.store(true, Ordering::SeqCst);
        self.t.wake();
        self.notifier.wake();
        let threads =
            std::mem::take(&mut *self.dispatcher.lock().unwrap_or_else(|e| e.into_inner()));
        for h in threads {
            // The last handle may go away in a handler, on one of these threads: never join
            // the current thread (it ends by itself, having seen `stop`).
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        let _ = self.t.finish();
    }
}

/// A weak handle on an endpoint, for handlers that call back into it without keeping it
/// alive (an `Endpoint` captured by its own handler would never be dropped).
#[derive(Clone)]
pub struct WeakEndpoint {
    sh: std::sync::Weak<Shared>,
}

impl WeakEndpoint {
    /// The endpoint, if it still exists.
    pub fn upgrade(&self) -> Option<Endpoint> {
        self.sh.upgrade().map(|sh| Endpoint { sh })
    }
}

impl Endpoint {
    /// Leaves the job cleanly now, as dropping the last handle does: stops the notification
    /// thread and tells the trusted party (peers see an exit, not a crash). For owners that
    /// cannot drop the endpoint, such as the C ABI's `vmmc_Finalize`; the endpoint must not be
    /// used afterwards.
    pub fn finish(&self) {
        self.sh.finish();
    }

    /// A weak handle (see [`WeakEndpoint`]).
    pub fn downgrade(&self) -> WeakEndpoint {
        WeakEndpoint {
            sh: Arc::downgrade(&self.sh),
        }
    }

    /// Wraps a transport that has completed its bootstrap. Where the transport lacks remote
    /// read, starts its emulation (two hidden exports and the notification thread).
    pub fn new(t: Arc<dyn Transport>) -> Result<Endpoint> {
        let caps = t.caps();
        let exports = Arc::new(Mutex::new(BTreeMap::new()));
        let reads = if caps.remote_read {
            None
        } else {
            Some(Arc::new(ReadService::start(t.clone(), exports.clone())?))
        };
        let ep = Endpoint {
            sh: Arc::new(Shared {
                t,
                engine: Arc::new(Engine::default()),
                caps,
                exports,
                notifier: Arc::new(Notifier::default()),
                reads,
                dest: DestSpace::default(),
                dispatcher: Mutex::new(Vec::new()),
                stop: Arc::new(AtomicBool::new(false)),
            }),
        };
        if ep.sh.reads.is_some() {
            ep.ensure_dispatcher()?;
        }
        Ok(ep)
    }

    /// Runs `f` while holding every lock of the endpoint and its transport. For tests that
    /// show the deliberate- and automatic-update fast paths take no lock.
    #[doc(hidden)]
    pub fn hold_locks_for_test(&self, f: &mut dyn FnMut()) {
        let _e = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        let _d = self.sh.dispatcher.lock().unwrap_or_else(|e| e.into_inner());
        let f = &mut || self.sh.engine.hold_lock(f);
        self.sh
            .notifier
            .hold_lock(&mut || self.sh.dest.hold_locks(&mut || self.sh.t.hold_locks(f)));
    }

    // ----- identity -----

    /// The transport's name.
    pub fn transport_name(&self) -> &'static str {
        self.sh.t.name()
    }
    /// The transport's capabilities.
    pub fn caps(&self) -> Caps {
        self.sh.caps
    }
    /// The job.
    pub fn job(&self) -> &JobInfo {
        self.sh.t.job()
    }
    /// This process: (node, squid) (`vmmc_MyNode`, `vmmc_GetSquid`).
    pub fn me(&self) -> ProcId {
        self.job().me()
    }
    /// This process's rank in the job.
    pub fn rank(&self) -> usize {
        self.job().rank
    }
    /// Number of processes in the job as this process joined it: the ranks the launcher
    /// started, `0..size`, plus, for a process that [`Endpoint::spawn`] started, the
    /// processes spawned before it (its own rank is then `size - 1`).
    ///
    /// A job grows by [`Endpoint::spawn`] but `size` never changes under a running process:
    /// ranks, and [`Endpoint::proc_of`], keep meaning what they meant when it joined (as
    /// `MPI_COMM_WORLD` does under `MPI_Comm_spawn`). A spawned process is named by the
    /// [`ProcId`] that `spawn` returns (its squid is new in the job and never reused); every
    /// process of the job can import from it and it from them, its liveness is reported by
    /// [`Endpoint::peer_alive`] like any rank's, and the trusted party keeps its exports in
    /// the same table. The spawner passes its identity on to the others as data.
    pub fn size(&self) -> usize {
        self.job().size
    }
    /// Identity of a rank, `0..size()`. In a spawned process this covers the processes
    /// spawned before it too; a rank whose spawn failed names no process (its peer is never
    /// alive). Processes that join after this one are named by the `ProcId` their spawner got.
    pub fn proc_of(&self, rank: usize) -> Result<ProcId> {
        self.job()
            .procs
            .get(rank)
            .copied()
            .ok_or(Error::InvalidArgument("rank out of range"))
    }
    /// Host names of the machine, by node id (`vmmc_AllHosts`).
    pub fn hosts(&self) -> &[String] {
        &self.job().hosts
    }
    /// This host's name (`vmmc_MyHostName`).
    pub fn my_host_name(&self) -> &str {
        &self.job().hosts[self.me().node as usize]
    }
    /// Host name of a node (`vmmc_NodeToName`).
    pub fn node_to_name(&self, node: NodeId) -> Option<&str> {
        self.job().hosts.get(node as usize).map(|s| s.as_str())
    }
    /// Node of a host name (`vmmc_NameToNode`).
    pub fn name_to_node(&self, name: &str) -> Option<NodeId> {
        self.job()
            .hosts
            .iter()
            .position(|h| h == name)
            .map(|i| i as NodeId)
    }
    /// The hosts of this session (`vmmc_SessionHosts`): the hosts `vmmc-run --hosts` named,
    /// in that order, or this host's name for a job on one host. [`Endpoint::spawn`] takes
    /// one of them. (On Windows NT a session was also a drive letter, a network share and a
    /// logging directory set up by CFGVMMC; Linux has no counterpart: a process sees the
    /// file systems of the host it runs on, and `vmmc-run` forwards output.)
    pub fn session_hosts(&self) -> Vec<String> {
        if let Some(h) = crate::bootstrap::session_hosts_from_env() {
            return h;
        }
        if self.transport_name() == "tcp" || self.transport_name() == "mpi" {
            // Nodes are told apart by address there; the session names the host.
            let mut out: Vec<String> = Vec::new();
            if let Some(h) = local_host_name() {
                out.push(h);
            }
            if self.hosts().len() <= 1 {
                return out;
            }
        }
        self.hosts().to_vec()
    }

    /// Starts `program args...` on `host` as a new process of this job (`vmmc_Spawn`, seed
    /// 004) and returns its identity once it has joined. The launcher starts it (`vmmc-run`
    /// runs it on `host` as it runs ranks: directly for this host, through the remote-shell
    /// agent for the hosts of `--hosts`); it gets a new squid, [`Endpoint::parent`] names
    /// this process, and it imports and exports like every other process. `host` must be one
    /// of [`Endpoint::session_hosts`] (or `localhost`).
    ///
    /// Under `vmmc-run`: tcp grows a job by up to 256 processes; shm by the `--spawn-slots`
    /// reserved at the start, which size its shared tables (a failed spawn uses a slot too).
    /// A process's [`Endpoint::hosts`] stay those it joined with: a spawned process on a node
    /// new to the job has a node id that older processes cannot name (`node_to_name` is
    /// `None`), though they reach it like any other.
    ///
    /// Errors: [`Error::SpawnFailed`] for an unknown host, a program that cannot be started,
    /// a process that ended before it joined, or no slot left; [`Error::Unsupported`] where
    /// nobody can start a process: sim, and shm or tcp jobs whose trusted party is not
    /// `vmmc-run` (a job of one, or an MPI launcher's). The mpi transport spawns with
    /// `MPI_Comm_spawn` (see its crate docs for the data paths a spawned process gets).
    pub fn spawn(&self, host: &str, program: &str, args: &[String]) -> Result<ProcId> {
        if host.is_empty() || program.is_empty() {
            return Err(Error::InvalidArgument("spawn needs a host and a program"));
        }
        self.sh.t.spawn(&crate::transport::SpawnSpec {
            host,
            program,
            args,
        })
    }

    /// The VMMC process that started this one, if any (`vmmc_Parent`).
    pub fn parent(&self) -> Option<ProcId> {
        self.job().parent
    }
    /// VMMC page size (`vmmc_PageSize`).
    pub fn page_size(&self) -> usize {
        page_size()
    }
    /// VMMC word size (`vmmc_WordSize`).
    pub fn word_size(&self) -> usize {
        WORD_SIZE
    }
    /// Library version (`vmmc_Version`).
    pub fn version(&self) -> &'static str {
        crate::types::VERSION
    }
    /// Whether a process of the job is still running.
    pub fn peer_alive(&self, p: ProcId) -> bool {
        self.sh.t.peer_alive(p)
    }
    /// Whether a process of the job failed (killed, crashed, exited with an error) rather
    /// than leaving cleanly; `false` where the transport cannot tell.
    pub fn peer_failed(&self, p: ProcId) -> bool {
        self.sh.t.peer_failed(p)
    }

    /// `Err(PeerLost)` when `p` is gone: for wait loops that must not hang on a dead peer.
    pub fn check_peer(&self, p: ProcId) -> Result<()> {
        if self.peer_alive(p) {
            Ok(())
        } else {
            Err(Error::PeerLost(p.to_string()))
        }
    }

    /// Allocates memory for a receive buffer. `Shared` memory is written by importers at
    /// user level; `Private` memory through the kernel, one system call per send.
    pub fn alloc(&self, len: usize, kind: MemKind) -> Result<Region> {
        if let Some(r) = self.sh.t.alloc(len, kind) {
            return r;
        }
        Region::alloc(len, kind)
    }

    // ----- export side -----

    /// Exports `region` as receive buffer `buf` (`vmmc_ExportRecvBuf`).
    pub fn export(&self, buf: BufId, region: &Region, opts: ExportOptions) -> Result<()> {
        if region.is_empty() {
            return Err(Error::InvalidArgument("empty receive buffer"));
        }
        if buf >= crate::emulate::RESERVED_IDS {
            return Err(Error::InvalidArgument(
                "buffer ids from 0xFFFFFFF0 up are reserved",
            ));
        }
        let mut ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        if ex.contains_key(&buf) {
            return Err(Error::BufIdInUse(buf));
        }
        let (lo, hi) = (
            region.as_ptr() as usize,
            region.as_ptr() as usize + region.len(),
        );
        for e in ex.values() {
            let (a, b) = (
                e.region.as_ptr() as usize,
                e.region.as_ptr() as usize + e.region.len(),
            );
            if lo < b && a < hi {
                return Err(Error::Overlap(buf));
            }
        }
        if let Some(h) = &opts.handler {
            self.sh.notifier.set_handler(buf, Some(h.clone()));
            self.ensure_dispatcher()?;
        }
        let r = self.sh.t.export(ExportSpec {
            buf,
            region,
            importers: &opts.importers,
            redirectable: opts.redirectable,
            has_handler: opts.handler.is_some(),
        });
        if let Err(e) = r {
            self.sh.notifier.set_handler(buf, None);
            return Err(e);
        }
        ex.insert(
            buf,
            Exported {
                region: region.clone(),
                redirectable: opts.redirectable,
                importers: opts.importers.clone(),
                redir_dest: None,
            },
        );
        Ok(())
    }

    /// Unexports `buf` (`vmmc_UnexportRecvBuf`): breaks every link, waits for data in flight;
    /// afterwards nothing is written to it and importers' sends fail with `Unexported`. An
    /// error (the trusted party lost on the way) still leaves the buffer unexported: its id
    /// and memory are free again.
    pub fn unexport(&self, buf: BufId) -> Result<()> {
        let mut ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        if !ex.contains_key(&buf) {
            return Err(Error::NoSuchBuffer(buf));
        }
        // The transport breaks the links first and may fail after (its trusted party gone):
        // the buffer is gone either way, never half exported, so it leaves the table too.
        let r = self.sh.t.unexport(buf);
        ex.remove(&buf);
        self.sh.notifier.set_handler(buf, None);
        r
    }

    /// The region exported as `buf`.
    pub fn exported_region(&self, buf: BufId) -> Option<Region> {
        let ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        ex.get(&buf).map(|e| e.region.clone())
    }

    fn redirectable(&self, buf: BufId) -> Result<()> {
        let ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        match ex.get(&buf) {
            None => Err(Error::NoSuchBuffer(buf)),
            Some(e) if !e.redirectable => Err(Error::NotRedirectable(buf)),
            Some(_) => Ok(()),
        }
    }

    /// Posts a transfer redirection (`vmmc_PostRedir`): data arriving for buffer offsets
    /// `buf_offset..buf_offset+len` goes to `dest[dest_offset..dest_offset+len]`.
    pub fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.redirectable(buf)?;
        let size = self.exported_region(buf).map_or(0, |r| r.len());
        check_transfer(buf_offset, len, size)?;
        match dest_offset.checked_add(len) {
            Some(e) if e <= dest.len() && len > 0 => {}
            _ => {
                return Err(Error::OutOfBounds {
                    offset: dest_offset,
                    len,
                    size: dest.len(),
                })
            }
        }
        self.sh
            .t
            .post_redir(buf, dest, dest_offset, buf_offset, len)?;
        let mut ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = ex.get_mut(&buf) {
            e.redir_dest = Some(dest.clone());
        }
        Ok(())
    }

    /// Ends the redirection (`vmmc_EndRedir`) and reports exactly what was redirected.
    pub fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        self.redirectable(buf)?;
        let r = self.sh.t.end_redir(buf);
        let mut ex = self.sh.exports.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = ex.get_mut(&buf) {
            e.redir_dest = None;
        }
        r
    }

    /// Offset of the last word of the last message (`vmmc_DataEnd`), if any since the clear.
    pub fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        self.redirectable(buf)?;
        self.sh.t.data_end(buf)
    }

    /// Clears the end-of-data word (`vmmc_ClearDataEnd`).
    pub fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.redirectable(buf)?;
        self.sh.t.clear_data_end(buf)
    }

    // ----- notifications -----

    /// Starts the notification thread, which drains the transport (and answers emulated
    /// remote reads) without ever waiting for a handler, and the handler thread.
    fn ensure_dispatcher(&self) -> Result<()> {
        let mut d = self.sh.dispatcher.lock().unwrap_or_else(|e| e.into_inner());
        if !d.is_empty() {
            return Ok(());
        }
        let t = self.sh.t.clone();
        let n = self.sh.notifier.clone();
        let reads = self.sh.reads.clone();
        let stop = self.sh.stop.clone();
        let drainer = crate::pace::spawn_inheriting(
            std::thread::Builder::new().name("vmmc-notify".into()),
            move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut sink = |x: Notification| match &reads {
                        Some(r) if x.buf == crate::emulate::SERVICE_BUF => r.serve(x),
                        _ => n.enqueue(x),
                    };
                    if let Err(e) = t.progress(&mut sink, Some(Duration::from_millis(500))) {
                        if !stop.load(Ordering::SeqCst) {
                            eprintln!("vmmc: notification thread stops: {e}");
                        }
                        break;
                    }
                }
            },
        )
        .map_err(|e| Error::io("spawn notification thread", e))?;
        d.push(drainer);
        let n = self.sh.notifier.clone();
        let stop = self.sh.stop.clone();
        let handlers = crate::pace::spawn_inheriting(
            std::thread::Builder::new().name("vmmc-handlers".into()),
            move || n.run_handlers(&stop),
        )
        .map_err(|e| Error::io("spawn handler thread", e))?;
        d.push(handlers);
        Ok(())
    }

    /// Blocks notifications (`vmmc_BlockNotifications`); nests; global to the process.
    pub fn block_notifications(&self) {
        self.sh.notifier.block()
    }

    /// Unblocks conditionally (`vmmc_UnblockNotifications`): 1 when unblocked (queued
    /// notifications delivered), 0 when still nested; `NotifyOverflow` if some were lost while
    /// blocked, `UnblockInHandler` for an unconditional unblock inside a handler.
    pub fn unblock_notifications(&self) -> Result<i32> {
        self.sh.notifier.unblock()
    }

    /// Bounds the queue of blocked notifications.
    pub fn set_notify_queue(&self, capacity: usize) {
        self.sh.notifier.set_capacity(capacity)
    }

    /// Notifications queued while blocked, and those lost to overflow not yet reported.
    pub fn notifications_pending(&self) -> (usize, u64) {
        self.sh.notifier.pending()
    }

    /// Number of handler calls completed so far.
    pub fn notifications_delivered(&self) -> u64 {
        self.sh.notifier.delivered()
    }

    /// Delivers arrived notifications on the calling thread (in addition to the endpoint's
    /// notification thread); waits up to `timeout` for one. Returns how many arrived.
    pub fn poll_notifications(&self, timeout: Option<Duration>) -> Result<usize> {
        let (n, reads) = (&self.sh.notifier, self.sh.reads.as_deref());
        self.sh.t.progress(&mut |x| route(n, reads, x), timeout)
    }

    // ----- import side -----

    /// Imports buffer `buf` of `owner` (`vmmc_ImportRecvBuf`); waits until it is exported.
    pub fn import(&self, owner: ProcId, buf: BufId) -> Result<Proxy> {
        let req = self.import_async(owner, buf)?;
        req.wait()
    }

    /// Starts an import (`vmmc_ImportRecvBufAsync`); poll its status.
    pub fn import_async(&self, owner: ProcId, buf: BufId) -> Result<ImportRequest> {
        let id = self.sh.t.import_request(owner, buf)?;
        Ok(ImportRequest {
            ep: self.clone(),
            id,
            owner,
            buf,
            done: false,
        })
    }

    fn make_proxy(
        &self,
        remote: Box<dyn RemoteBuffer>,
        owner: ProcId,
        buf: BufId,
    ) -> Result<Proxy> {
        let len = remote.len();
        if len > self.sh.dest.max_len()? {
            return Err(Error::InvalidArgument(
                "receive buffer larger than a DestSpace span",
            ));
        }
        let addr = self.sh.dest.alloc()?;
        let inner = Arc::new(ProxyInner {
            remote,
            len,
            owner,
            buf,
            addr,
            live: AtomicBool::new(true),
            max_write: self.sh.caps.max_write,
            handles: std::sync::atomic::AtomicUsize::new(1),
        });
        self.sh.dest.set(addr, inner.clone());
        Ok(Proxy {
            inner,
            ep: self.clone(),
        })
    }

    /// Releases a proxy (`vmmc_UnimportRecvBuf`): later sends through it fail.
    pub fn unimport(&self, proxy: Proxy) -> Result<()> {
        proxy.inner.live.store(false, Ordering::SeqCst);
        let r = proxy.inner.remote.fence();
        self.sh.dest.remove(proxy.inner.addr);
        r
    }

    /// Deliberate update by DestSpace address (`vmmc_SendData`): `addr` is a proxy's address
    /// plus the destination offset.
    #[inline]
    pub fn send_at(&self, addr: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        self.sh.engine.settle();
        self.sh
            .dest
            .with(addr, |p, off| p.write(off, data, opts))
            .unwrap_or(Err(Error::NotImported))
    }

    /// Remote read by DestSpace address (`vmmc_GetData`).
    pub fn get_at(&self, addr: usize, out: &mut [u8]) -> Result<()> {
        self.sh
            .dest
            .with(addr, |p, off| self.sh.get_data(p, off, out))
            .unwrap_or(Err(Error::NotImported))
    }

    /// Size of the receive buffer behind a DestSpace address, and the address's offset in it.
    pub fn proxy_extent(&self, addr: usize) -> Result<(usize, usize)> {
        self.sh
            .dest
            .with(addr, |p, off| (p.len, off))
            .ok_or(Error::NotImported)
    }
}

/// Hands an arrived notification to the read service or to the user's handlers.
fn route(n: &Notifier, reads: Option<&ReadService>, x: Notification) {
    match reads {
        Some(r) if x.buf == crate::emulate::SERVICE_BUF => r.serve(x),
        _ => n.deliver(x),
    }
}

impl Shared {
    /// Remote read: the transport's own, or the emulation.
    pub(crate) fn get_data(&self, p: &ProxyInner, offset: usize, out: &mut [u8]) -> Result<()> {
        if !p.live.load(Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        check_transfer(offset, out.len(), p.len)?;
        match &self.reads {
            None => p.remote.read(offset, out),
            Some(r) => r.read(p.owner, p.buf, p.len, offset, out),
        }
    }
}

/// A sender's wait for room in a receiver's full notification queue.
static NOTIFY_FULL_SITE: crate::wait::Site = crate::wait::Site::new("vmmc.proxy-notify-full");

/// An import in progress (`vmmc_ImportRecvBufAsync` / `vmmc_ImportRecvBufStatus`).
pub struct ImportRequest {
    ep: Endpoint,
    id: u64,
    owner: ProcId,
    buf: BufId,
    done: bool,
}

impl ImportRequest {
    /// `Ok(None)` while the exporter has not exported the buffer; the proxy once it has.
    pub fn status(&mut self) -> Result<Option<Proxy>> {
        if self.done {
            return Err(Error::InvalidArgument("import request already completed"));
        }
        match self.ep.sh.t.import_poll(self.id, false)? {
            ImportPoll::Pending => Ok(None),
            ImportPoll::Ready(r) => {
                self.done = true;
                self.ep.make_proxy(r, self.owner, self.buf).map(Some)
            }
        }
    }

    /// Waits for the import to complete.
    pub fn wait(mut self) -> Result<Proxy> {
        match self.ep.sh.t.import_poll(self.id, true)? {
            ImportPoll::Pending => Err(Error::Protocol("blocking import returned pending".into())),
            ImportPoll::Ready(r) => {
                self.done = true;
                self.ep.make_proxy(r, self.owner, self.buf)
            }
        }
    }
}

impl Drop for ImportRequest {
    /// A request dropped before it completed leaves nothing behind.
    fn drop(&mut self) {
        if !self.done {
            self.ep.sh.t.import_cancel(self.id);
        }
    }
}

/// An imported receive buffer: the sender's proxy for it (seed 000's DestSpace range).
///
/// `Send + Sync`: one proxy may be used from several threads; sends from one thread are in
/// order.
pub struct Proxy {
    pub(crate) inner: Arc<ProxyInner>,
    pub(crate) ep: Endpoint,
}

impl Clone for Proxy {
    fn clone(&self) -> Proxy {
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        Proxy {
            inner: self.inner.clone(),
            ep: self.ep.clone(),
        }
    }
}

impl Drop for Proxy {
    /// The last handle unimports: the DestSpace span and the transport's link are freed.
    fn drop(&mut self) {
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.live.store(false, Ordering::SeqCst);
            self.ep.sh.dest.remove(self.inner.addr);
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("owner", &self.inner.owner)
            .field("buf", &self.inner.buf)
            .field("len", &self.inner.len)
            .field("dest_addr", &format_args!("{:#x}", self.inner.addr))
            .finish()
    }
}

impl Proxy {
    /// Size of the receive buffer in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// Whether the receive buffer is empty (never).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// The exporter.
    pub fn owner(&self) -> ProcId {
        self.inner.owner
    }
    /// The exporter's buffer id.
    pub fn buf_id(&self) -> BufId {
        self.inner.buf
    }
    /// The proxy's base address in DestSpace.
    pub fn dest_addr(&self) -> usize {
        self.inner.addr
    }
    /// The endpoint that imported it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// Deliberate update (`vmmc_SendData`): copies `data` to `offset` of the receive buffer;
    /// returns when the data has left. Offset and length are word multiples.
    #[inline]
    pub fn send(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.ep.sh.engine.settle();
        self.inner.write(offset, data, WriteOpts::default())
    }

    /// Deliberate update with notification (`vmmc_SendDataNotify`).
    ///
    /// A receiver whose notification queue is full does not make the sender wait:
    /// [`Error::WouldBlock`] says that the data has landed but the notification has not been
    /// posted; [`Proxy::notify`] posts it again (or the caller gives up on it).
    #[inline]
    pub fn send_notify(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.ep.sh.engine.settle();
        self.inner.write(
            offset,
            data,
            WriteOpts {
                notify: true,
                ..Default::default()
            },
        )
    }

    /// Posts the notification of an earlier `send_notify(offset, data)` whose data landed but
    /// whose notification returned [`Error::WouldBlock`]; may return `WouldBlock` again.
    pub fn notify(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.inner.live.load(Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        check_transfer(offset, data.len(), self.inner.len)?;
        let last = data.len() - crate::WORD_SIZE;
        let value = u32::from_ne_bytes(data[last..].try_into().expect("a word"));
        self.inner.remote.notify(offset + last, value)
    }

    /// [`Proxy::send_notify`] that waits (through `vmmc::wait`) while the receiver's
    /// notification queue is full, for protocols whose notification must not be lost.
    pub fn send_notify_wait(&self, offset: usize, data: &[u8]) -> Result<()> {
        match self.send_notify(offset, data) {
            Err(Error::WouldBlock) => {}
            r => return r,
        }
        // Nobody rings when the receiver makes room: naps past the spin.
        let nap = crate::wait::Nap::new();
        let mut w = crate::wait::Wait::on(&NOTIFY_FULL_SITE, &nap);
        loop {
            match self.notify(offset, data) {
                Err(Error::WouldBlock) => w.idle(),
                r => return r,
            }
        }
    }

    /// Deliberate update with explicit options.
    #[inline]
    pub fn send_with(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        self.ep.sh.engine.settle();
        self.inner.write(offset, data, opts)
    }

    /// Asynchronous deliberate update (`vmmc_SendDataAsync`); holds `data` until done.
    pub fn send_async(&self, offset: usize, data: impl Into<Arc<[u8]>>) -> Result<AsyncSend> {
        self.send_async_with(offset, data, WriteOpts::default())
    }

    /// Asynchronous deliberate update with notification (`vmmc_SendDataAsyncNotify`).
    pub fn send_async_notify(
        &self,
        offset: usize,
        data: impl Into<Arc<[u8]>>,
    ) -> Result<AsyncSend> {
        self.send_async_with(
            offset,
            data,
            WriteOpts {
                notify: true,
                ..Default::default()
            },
        )
    }

    fn send_async_with(
        &self,
        offset: usize,
        data: impl Into<Arc<[u8]>>,
        opts: WriteOpts,
    ) -> Result<AsyncSend> {
        let data = data.into();
        // Bad arguments are refused at once, as for the blocking send.
        if !self.inner.live.load(Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        check_transfer(offset, data.len(), self.inner.len)?;
        if self.ep.sh.caps.async_send {
            // The transport models the engine itself: initiate now, in order with the
            // blocking sends, and return without waiting for the data to leave memory.
            self.ep.sh.engine.settle();
            let r = self.inner.write(
                offset,
                &data,
                WriteOpts {
                    asynchronous: true,
                    ..opts
                },
            );
            return Ok(AsyncSend::finished(data, r));
        }
        self.ep
            .sh
            .engine
            .write(self.inner.clone(), offset, data, opts)
    }

    /// Remote read (`vmmc_GetData`): copies `out.len()` bytes from `offset` of the receive
    /// buffer.
    pub fn get_data(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.ep.sh.get_data(&self.inner, offset, out)
    }

    /// Asynchronous remote read (`vmmc_GetDataAsync`); the result owns the data read.
    pub fn get_data_async(&self, offset: usize, len: usize) -> Result<AsyncGet> {
        if !self.inner.live.load(Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        check_transfer(offset, len, self.inner.len)?;
        self.ep
            .sh
            .engine
            .read(self.inner.clone(), self.ep.sh.clone(), offset, len)
    }

    /// Waits until every earlier send through this proxy is visible at the receiver.
    pub fn fence(&self) -> Result<()> {
        self.inner.remote.fence()
    }
}

/// This host's name (`gethostname`).
fn local_host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer of the length given; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(Mutex<Vec<(usize, usize, bool)>>);

    impl RemoteBuffer for Arc<Recorder> {
        fn len(&self) -> usize {
            64
        }
        fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push((offset, data.len(), opts.notify));
            Ok(())
        }
    }

    #[test]
    fn writes_larger_than_the_transport_takes_are_split_in_order() {
        let rec = Arc::new(Recorder(Mutex::new(vec![])));
        let p = ProxyInner {
            remote: Box::new(rec.clone()),
            len: 64,
            owner: ProcId { node: 0, squid: 1 },
            buf: 1,
            addr: 0,
            live: AtomicBool::new(true),
            max_write: 16,
            handles: std::sync::atomic::AtomicUsize::new(1),
        };
        p.write(
            8,
            &[0u8; 40],
            WriteOpts {
                notify: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![(8, 16, false), (24, 16, false), (40, 8, true)],
            "in order, the notification on the last piece only"
        );
        assert!(matches!(
            p.write(32, &[0u8; 40], WriteOpts::default()),
            Err(Error::OutOfBounds { .. })
        ));
        assert_eq!(
            rec.0.lock().unwrap().len(),
            3,
            "a refused send writes nothing"
        );
        p.live.store(false, Ordering::SeqCst);
        assert!(matches!(
            p.write(0, &[0u8; 4], WriteOpts::default()),
            Err(Error::NotImported)
        ));
    }

    /// A transport whose trusted party is gone by the time of an unexport: the links are
    /// broken, but the party's confirmation fails.
    struct LosesParty {
        job: JobInfo,
        imports: Mutex<Vec<u64>>,
    }

    impl Transport for LosesParty {
        fn name(&self) -> &'static str {
            "loses-party"
        }
        fn caps(&self) -> Caps {
            Caps {
                remote_read: true,
                ..Default::default()
            }
        }
        fn job(&self) -> &JobInfo {
            &self.job
        }
        fn export(&self, _: ExportSpec<'_>) -> Result<()> {
            Ok(())
        }
        fn unexport(&self, _: BufId) -> Result<()> {
            Err(Error::PeerLost("the rendezvous is gone".into()))
        }
        fn import_request(&self, _: ProcId, _: BufId) -> Result<u64> {
            let mut g = self.imports.lock().unwrap();
            let id = g.len() as u64;
            g.push(id);
            Ok(id)
        }
        fn import_poll(&self, _: u64, _: bool) -> Result<ImportPoll> {
            Ok(ImportPoll::Pending)
        }
        fn import_cancel(&self, request: u64) {
            self.imports.lock().unwrap().retain(|r| *r != request);
        }
        fn progress(&self, _: &mut dyn FnMut(Notification), _: Option<Duration>) -> Result<usize> {
            Ok(0)
        }
        fn wake(&self) {}
        fn peer_alive(&self, _: ProcId) -> bool {
            true
        }
        fn post_redir(&self, _: BufId, _: &Region, _: usize, _: usize, _: usize) -> Result<()> {
            Ok(())
        }
        fn end_redir(&self, _: BufId) -> Result<Redirected> {
            Err(Error::Unsupported("redirection"))
        }
        fn data_end(&self, _: BufId) -> Result<Option<usize>> {
            Ok(None)
        }
        fn clear_data_end(&self, _: BufId) -> Result<()> {
            Ok(())
        }
    }

    fn loses_party() -> (Arc<LosesParty>, Endpoint) {
        let me = ProcId { node: 0, squid: 1 };
        let t = Arc::new(LosesParty {
            job: JobInfo {
                rank: 0,
                size: 1,
                procs: vec![me],
                hosts: vec!["here".into()],
                parent: None,
            },
            imports: Mutex::new(vec![]),
        });
        let ep = Endpoint::new(t.clone()).unwrap();
        (t, ep)
    }

    #[test]
    fn a_failed_unexport_leaves_the_buffer_gone_not_half() {
        let (_t, ep) = loses_party();
        let r = ep.alloc(4096, MemKind::Shared).unwrap();
        ep.export(3, &r, ExportOptions::new().handler(|_| {}))
            .unwrap();
        assert!(matches!(ep.unexport(3), Err(Error::PeerLost(_))));
        assert!(
            ep.exported_region(3).is_none(),
            "the transport broke the links: the core must not still list the buffer"
        );
        assert!(!ep.sh.notifier.has_handlers(), "its handler is gone too");
        // The id and the memory can be exported again.
        ep.export(3, &r, ExportOptions::new()).unwrap();
    }

    #[test]
    fn a_dropped_import_request_is_withdrawn_from_the_transport() {
        let (t, ep) = loses_party();
        let mut pending = ep.import_async(ep.me(), 1).unwrap();
        assert!(pending.status().unwrap().is_none());
        let other = ep.import_async(ep.me(), 2).unwrap();
        drop(pending);
        assert_eq!(*t.imports.lock().unwrap(), vec![1], "request 0 withdrawn");
        drop(other);
        assert!(t.imports.lock().unwrap().is_empty());
    }
}
