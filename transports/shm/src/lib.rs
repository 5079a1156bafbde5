//! # vmmc-shm: the shared-memory transport (the embedded default)
//!
//! Processes on one host. A receive buffer in shared memory (a memfd) is mapped by its
//! importers, and a deliberate update is a copy into the mapping at user level, like
//! SHRIMP-II's user-level DMA: the body first, then the last word with a release store, so a
//! receiver that sees the last word sees the whole message. A buffer in ordinary process
//! memory is written by the kernel with `process_vm_writev`, one system call per send, like
//! SHRIMP-I. Notifications go through a bounded queue in shared memory owned by the receiver,
//! with a futex wake-up after a short spin.
//!
//! The trusted party is the [`server::Rendezvous`]: it checks permissions and hands out the
//! descriptors an importer maps. Each receive buffer has a control block in shared memory with
//! a revocation word and one in-flight counter per rank, so `unexport` can break every link
//! and wait for the transfers in progress without a round trip to any importer.
//!
//! A job grows by `vmmc_Spawn` into the slots reserved at the start (`vmmc-run --spawn-slots K`,
//! `VMMC_CAPACITY`): the status page, every notification ring (one lane per possible sender)
//! and every control block hold the initial ranks plus K. A spawned process takes the next
//! rank, and its squid is rank + 1 like every rank's, so a process told its identity resolves
//! it from the status page (joined once its state leaves STARTING) without any table; its
//! loss shows there too.

pub mod proto;
pub mod server;
pub mod shmem;
pub mod sys;

use proto::Msg;
use shmem::{revoked, Ctrl, Map, Push, Ring, Status};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vmmc::bootstrap::{BootEnv, Launcher};
use vmmc::redirect::{Piece, Redirected};
use vmmc::{
    BufId, Caps, Error, ExportSpec, ImportPoll, JobInfo, MemKind, Notification, ProcId, Region,
    RemoteBuffer, Result, Transport, WriteOpts, WORD_SIZE,
};

/// How long a process waits for the rendezvous to appear (MPI launch: rank 0 creates it).
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// The notification thread's wait for the ring (`vmmc::wait`'s policy).
static NOTIFY_SITE: vmmc::wait::Site = vmmc::wait::Site::new("shm.notify");
/// `unexport`'s wait for the transfers in progress.
static DRAIN_SITE: vmmc::wait::Site = vmmc::wait::Site::new("shm.unexport");
/// Chunk of a transfer into a redirectable buffer (redirection is checked between chunks,
/// like the page-split transfers of the SHRIMP DMA engine).
const REDIR_CHUNK: usize = 4096;

struct LocalExport {
    ctrl: Arc<Ctrl>,
}

struct Client {
    sock: OwnedFd,
    stash: HashMap<u64, (Msg, Vec<OwnedFd>)>,
    /// A thread is reading the socket (the others wait on `replies`).
    reading: bool,
    /// Set once the rendezvous closed the connection.
    broken: Option<String>,
    /// Import requests dropped before their reply: the reply is discarded when it arrives
    /// (its descriptors closed).
    cancelled: std::collections::HashSet<u64>,
}

/// The shm transport of one process.
pub struct ShmTransport {
    job: JobInfo,
    /// The ranks the job's tables hold: its size plus the spawn slots `vmmc-run` reserved
    /// (`VMMC_CAPACITY`). Spawned processes take the ranks from the size up; their squid is
    /// their rank + 1, as for every rank.
    cap: usize,
    conn: Mutex<Client>,
    replies: Condvar,
    next_req: AtomicU64,
    ring: Ring,
    consumer: Mutex<()>,
    status: Arc<Status>,
    exports: Mutex<HashMap<BufId, LocalExport>>,
    rings: Mutex<HashMap<usize, Arc<Ring>>>,
    /// Import requests: owner and buffer, to rebuild errors.
    requests: Mutex<HashMap<u64, BufId>>,
    _own_rendezvous: Option<server::Rendezvous>,
    finished: AtomicU32,
}

fn connect_seqpacket(path: &std::path::Path) -> Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let (addr, len) = server::sockaddr(path.as_os_str().as_bytes())?;
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        let fd = sys::syscall!(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0
        ))
        .map_err(|e| Error::io("socket", e))?;
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        match sys::syscall!(libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len
        )) {
            Ok(_) => return Ok(fd),
            Err(e)
                if Instant::now() < deadline
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ECONNREFUSED)
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(Error::Bootstrap(format!(
                    "cannot reach the rendezvous at {}: {e}",
                    path.display()
                )))
            }
        }
    }
}

/// The rendezvous path of a job started by an MPI launcher: derived from the launcher's pid,
/// which all its ranks share as parent.
pub fn mpi_rendezvous_path(job: &str) -> PathBuf {
    // SAFETY: getuid has no memory effects.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("vmmc-{uid}-{job}.sock"))
}

impl ShmTransport {
    /// Joins the job described by the launcher's environment.
    pub fn connect(env: &BootEnv) -> Result<ShmTransport> {
        let (path, own) = match (&env.rendezvous, env.launcher) {
            (Some(p), _) => (PathBuf::from(p), None),
            (None, Launcher::Alone) => {
                let p = std::env::temp_dir().join(format!(
                    "vmmc-solo-{}-{}.sock",
                    std::process::id(),
                    unique()
                ));
                let rv = server::Rendezvous::start(&p, 1)?;
                (p, Some(rv))
            }
            (None, Launcher::Mpi) => {
                let p = mpi_rendezvous_path(&env.job);
                if env.rank == 0 {
                    let _ = std::fs::remove_file(&p);
                    let rv = server::Rendezvous::start(&p, env.size)?;
                    (p, Some(rv))
                } else {
                    (p, None)
                }
            }
            (None, Launcher::VmmcRun) => {
                return Err(Error::Bootstrap("VMMC_RENDEZVOUS is not set".into()));
            }
        };
        // The ring needs a lane for every process that may send to this one, spawned ones
        // included, before the welcome tells the job's capacity: vmmc-run says it.
        let lanes = match std::env::var(vmmc::bootstrap::vars::CAPACITY) {
            Ok(v) if env.launcher == Launcher::VmmcRun => {
                v.trim().parse::<usize>().map_err(|_| {
                    Error::Bootstrap(format!(
                        "{}={v:?} is not a number",
                        vmmc::bootstrap::vars::CAPACITY
                    ))
                })?
            }
            _ => env.size,
        }
        .max(env.size);
        let sock = connect_seqpacket(&path)?;
        let ring = Ring::create(lanes)?;
        let hello = Msg::Hello {
            rank: env.rank as u32,
            pid: std::process::id(),
        };
        sys::send_msg(sock.as_raw_fd(), &hello.encode(), &[ring.fd().as_raw_fd()])
            .map_err(|e| Error::io("rendezvous hello", e))?;
        let (m, mut fds) = sys::recv_msg(sock.as_raw_fd(), false)
            .map_err(|e| Error::io("rendezvous welcome", e))?
            .ok_or_else(|| Error::Bootstrap("the rendezvous closed the connection".into()))?;
        let (squids, host, cap) = match Msg::decode(&m)? {
            Msg::Welcome { squids, host, cap } if fds.len() == 1 && squids.len() == env.size => {
                (squids, host, cap as usize)
            }
            Msg::Err { text, .. } => return Err(Error::Bootstrap(text)),
            other => return Err(Error::Protocol(format!("expected welcome, got {other:?}"))),
        };
        if cap < env.size || cap > lanes {
            return Err(Error::Bootstrap(format!(
                "the job holds {cap} processes but this one was told {lanes} ({}): not \
                 started by this job's launcher?",
                vmmc::bootstrap::vars::CAPACITY
            )));
        }
        let status = Status::open(fds.pop().expect("checked"), cap)?;
        // Every rank of the job runs on this host; this process's data waits sleep on the bell
        // in its ring, which every transfer into its buffers rings. The bell gets a mapping of
        // its own that lives as long as the process (the first transport of a process wins;
        // a second one's waits still see their data at the safety bound of a sleep).
        vmmc::wait::set_local_procs(env.size);
        if let Ok(fd) = ring.fd().try_clone() {
            if let Ok(keep) = Ring::open(fd) {
                let keep = std::mem::ManuallyDrop::new(keep);
                // SAFETY: `keep`'s mapping is never unmapped (ManuallyDrop, not dropped).
                unsafe { vmmc::wait::install_bell(keep.bell()) };
            }
        }
        if own.is_some() {
            // Every rank has connected: nothing needs the path any more, and a crash must not
            // leave it behind.
            let _ = std::fs::remove_file(&path);
        }
        let job = JobInfo {
            rank: env.rank,
            size: env.size,
            procs: squids
                .iter()
                .map(|s| ProcId { node: 0, squid: *s })
                .collect(),
            hosts: vec![host],
            parent: vmmc::bootstrap::parent_from_env(),
        };
        Ok(ShmTransport {
            job,
            cap,
            conn: Mutex::new(Client {
                sock,
                stash: HashMap::new(),
                reading: false,
                broken: None,
                cancelled: Default::default(),
            }),
            replies: Condvar::new(),
            next_req: AtomicU64::new(1),
            ring,
            consumer: Mutex::new(()),
            status: Arc::new(status),
            exports: Mutex::new(HashMap::new()),
            rings: Mutex::new(HashMap::new()),
            requests: Mutex::new(HashMap::new()),
            _own_rendezvous: own,
            finished: AtomicU32::new(0),
        })
    }

    /// Import requests this process still keeps anything for: outstanding, answered but not
    /// yet polled, or dropped and waiting for their reply to discard (tests).
    #[doc(hidden)]
    pub fn import_requests_kept(&self) -> usize {
        let c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            + c.stash.len()
            + c.cancelled.len()
    }

    /// The rank of a process: one of the job when this one joined, or one spawned since
    /// (squid = rank + 1 on node 0, once it has said hello to the trusted party).
    fn rank_of(&self, p: ProcId) -> Option<usize> {
        self.job.rank_of(p).or_else(|| {
            let r = (p.squid as usize).checked_sub(1)?;
            (p.node == 0
                && r >= self.job.size
                && r < self.cap
                && self.status.get(r) != shmem::state::STARTING)
                .then_some(r)
        })
    }

    /// Sends a request and waits for its reply.
    fn call(&self, req: u64, m: &Msg, fds: &[i32]) -> Result<(Msg, Vec<OwnedFd>)> {
        {
            let c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            sys::send_msg(c.sock.as_raw_fd(), &m.encode(), fds)
                .map_err(|_| Error::PeerLost("the rendezvous (launcher) is gone".into()))?;
        }
        self.wait_reply(req, true).map(|r| r.expect("blocking"))
    }

    /// The reply to `req`, if it arrived (with `block`, waits for it). Replies arrive in any
    /// order: one waiting thread at a time reads the socket, without holding the lock while it
    /// sleeps, and files every reply it reads; the others wait on the condition variable. So a
    /// blocking import that waits for a late export does not hold up other threads' requests.
    fn wait_reply(&self, req: u64, block: bool) -> Result<Option<(Msg, Vec<OwnedFd>)>> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = c.stash.remove(&req) {
                return Ok(Some(r));
            }
            if let Some(e) = &c.broken {
                return Err(Error::PeerLost(e.clone()));
            }
            if c.reading {
                if !block {
                    return Ok(None);
                }
                c = self.replies.wait(c).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Become the reader: sleep on the socket unlocked, then drain it locked.
            let fd = c.sock.as_raw_fd();
            if block {
                c.reading = true;
                drop(c);
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; a failure (EINTR) just loops.
                unsafe { libc::poll(&mut p, 1, -1) };
                c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
                c.reading = false;
            }
            let drained = Self::drain(&mut c);
            self.replies.notify_all();
            drained?;
            if !block && !c.stash.contains_key(&req) {
                return Ok(None);
            }
        }
    }

    /// Files every reply waiting on the socket.
    fn drain(c: &mut Client) -> Result<()> {
        loop {
            match sys::recv_msg(c.sock.as_raw_fd(), true) {
                Ok(Some((b, fds))) => {
                    let m = Msg::decode(&b)?;
                    let id = match &m {
                        Msg::Ok { req }
                        | Msg::Err { req, .. }
                        | Msg::ImportOk { req, .. }
                        | Msg::Spawned { req, .. } => *req,
                        other => return Err(Error::Protocol(format!("unexpected {other:?}"))),
                    };
                    if !c.cancelled.remove(&id) {
                        c.stash.insert(id, (m, fds));
                    }
                }
                Ok(None) => {
                    let why = "the rendezvous (launcher) is gone".to_string();
                    c.broken = Some(why.clone());
                    return Err(Error::PeerLost(why));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("rendezvous", e)),
            }
        }
    }

    fn ring_of(&self, rank: usize, fd: OwnedFd) -> Result<Arc<Ring>> {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = rings.get(&rank) {
            return Ok(r.clone());
        }
        let r = Arc::new(Ring::open(fd)?);
        rings.insert(rank, r.clone());
        Ok(r)
    }

    /// Waits until no live rank is in the middle of a transfer into the buffer of `ctrl`.
    fn drain_senders(&self, ctrl: &Ctrl) {
        for r in 0..self.cap {
            // A sender rings this process's bell as it leaves the transfer.
            let mut w = vmmc::wait::Wait::new(&DRAIN_SITE);
            while ctrl.in_flight(r).load(Ordering::SeqCst) != 0 && self.status.alive(r) {
                w.idle();
            }
        }
    }

    fn ctrl(&self, buf: BufId) -> Result<Arc<Ctrl>> {
        let ex = self.exports.lock().unwrap_or_else(|e| e.into_inner());
        ex.get(&buf)
            .map(|e| e.ctrl.clone())
            .ok_or(Error::NoSuchBuffer(buf))
    }

    fn build_remote(&self, buf: BufId, m: Msg, mut fds: Vec<OwnedFd>) -> Result<RemoteShm> {
        let Msg::ImportOk {
            len,
            shared,
            addr,
            pid,
            owner_rank,
            ..
        } = m
        else {
            return Err(Error::Protocol("expected an import grant".into()));
        };
        let want = if shared { 3 } else { 2 };
        if fds.len() != want || owner_rank as usize >= self.cap {
            return Err(Error::Protocol(
                "import grant with wrong descriptors".into(),
            ));
        }
        let region = if shared {
            Some(Arc::new(Map::new(
                fds.pop().expect("checked"),
                len as usize,
            )?))
        } else {
            None
        };
        let ring = self.ring_of(owner_rank as usize, fds.pop().expect("checked"))?;
        let ctrl = Arc::new(Ctrl::open(fds.pop().expect("checked"), self.cap)?);
        let base = region.as_ref().map_or(std::ptr::null_mut(), |m| m.ptr());
        Ok(RemoteShm {
            ctrl,
            region,
            base,
            len: len as usize,
            addr,
            pid: pid as libc::pid_t,
            ring,
            my_rank: self.job.rank,
            owner_rank: owner_rank as usize,
            buf,
            status: self.status.clone(),
        })
    }
}

fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn caps(&self) -> Caps {
        Caps {
            remote_read: true,
            native_au: true,
            redirection: true,
            async_send: false,
            max_write: 0,
            au_packetizer: false,
        }
    }

    fn job(&self) -> &JobInfo {
        &self.job
    }

    fn export(&self, spec: ExportSpec<'_>) -> Result<()> {
        let ctrl = Ctrl::create(self.cap)?;
        let h = ctrl.header();
        h.has_handler
            .store(spec.has_handler as u32, Ordering::SeqCst);
        h.redirectable
            .store(spec.redirectable as u32, Ordering::SeqCst);
        let shared = spec.region.kind() == MemKind::Shared;
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let m = Msg::Export {
            req,
            buf: spec.buf,
            shared,
            len: spec.region.len() as u64,
            addr: spec.region.as_ptr() as u64,
            importers: spec.importers.clone(),
        };
        if m.encode().len() > sys::MAX_MSG {
            return Err(Error::InvalidArgument(
                "importer list too long for one export",
            ));
        }
        let mut fds = vec![ctrl.fd().as_raw_fd()];
        if let Some(fd) = spec.region.fd() {
            fds.push(fd);
        }
        match self.call(req, &m, &fds)? {
            (Msg::Ok { .. }, _) => {
                let mut ex = self.exports.lock().unwrap_or_else(|e| e.into_inner());
                ex.insert(
                    spec.buf,
                    LocalExport {
                        ctrl: Arc::new(ctrl),
                    },
                );
                Ok(())
            }
            (Msg::Err { code, text, .. }, _) => Err(proto::error_from(code, text, spec.buf)),
            (other, _) => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn unexport(&self, buf: BufId) -> Result<()> {
        let ctrl = self.ctrl(buf)?;
        // Break every link, then wait for the transfers in progress (Dekker with the senders'
        // in-flight counters: both sides use sequentially consistent operations).
        ctrl.revoke(revoked::UNEXPORTED);
        self.drain_senders(&ctrl);
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let r = self.call(req, &Msg::Unexport { req, buf }, &[]);
        self.exports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&buf);
        match r? {
            (Msg::Ok { .. }, _) => Ok(()),
            (Msg::Err { code, text, .. }, _) => Err(proto::error_from(code, text, buf)),
            (other, _) => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64> {
        if self.rank_of(owner).is_none() {
            return Err(Error::PeerLost(format!(
                "{owner} (not a process of this job)"
            )));
        }
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        sys::send_msg(
            c.sock.as_raw_fd(),
            &Msg::Import { req, owner, buf }.encode(),
            &[],
        )
        .map_err(|_| Error::PeerLost("the rendezvous (launcher) is gone".into()))?;
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(req, buf);
        Ok(req)
    }

    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll> {
        let buf = *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&request)
            .ok_or(Error::InvalidArgument("unknown import request"))?;
        let reply = self.wait_reply(request, wait)?;
        let Some((m, fds)) = reply else {
            return Ok(ImportPoll::Pending);
        };
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request);
        match m {
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, buf)),
            m => Ok(ImportPoll::Ready(Box::new(self.build_remote(buf, m, fds)?))),
        }
    }

    fn import_cancel(&self, request: u64) {
        let known = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request)
            .is_some();
        if !known {
            return;
        }
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if c.stash.remove(&request).is_some() || c.broken.is_some() {
            return; // answered (its descriptors close here), or nobody will answer
        }
        // The party answers it exactly once (the grant, or an error for the withdrawal).
        c.cancelled.insert(request);
        let _ = sys::send_msg(
            c.sock.as_raw_fd(),
            &Msg::CancelImport { req: request }.encode(),
            &[],
        );
    }

    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let Ok(_guard) = self.consumer.try_lock() else {
            // Another thread consumes and delivers; do not spin the caller.
            let nap = timeout.unwrap_or(Duration::from_millis(1));
            std::thread::sleep(nap.min(Duration::from_millis(1)));
            return Ok(0);
        };
        let start = Instant::now();
        let kicks = self.ring.kicks();
        let mut w = vmmc::wait::Wait::on(&NOTIFY_SITE, &self.ring)
            .timeout(timeout)
            .helper();
        loop {
            let mut n = 0;
            while let Some(x) = self.ring.pop() {
                sink(x);
                n += 1;
            }
            if n > 0 {
                return Ok(n);
            }
            if self.ring.kicks() != kicks {
                return Ok(0); // woken by `wake`
            }
            if timeout.is_some_and(|t| start.elapsed() >= t) {
                return Ok(0);
            }
            w.idle();
        }
    }

    fn wake(&self) {
        self.ring.kick();
    }

    fn peer_alive(&self, p: ProcId) -> bool {
        self.rank_of(p).is_some_and(|r| self.status.alive(r))
    }

    fn peer_failed(&self, p: ProcId) -> bool {
        self.rank_of(p)
            .is_some_and(|r| self.status.get(r) == shmem::state::DEAD)
    }

    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        let ctrl = self.ctrl(buf)?;
        ctrl.header().redir.post(
            buf,
            dest.as_ptr() as u64 + dest_offset as u64,
            buf_offset,
            len,
        )
    }

    fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        let ctrl = self.ctrl(buf)?;
        let status = self.status.clone();
        let size = self.cap;
        ctrl.header().redir.end(|| {
            // A sender that died mid-message will never finish it.
            if (0..size).all(|r| ctrl.in_flight(r).load(Ordering::SeqCst) == 0 || !status.alive(r))
            {
                return Err(Error::PeerLost(
                    "the sender died during a redirected message".into(),
                ));
            }
            Ok(())
        })
    }

    fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        Ok(self.ctrl(buf)?.header().redir.data_end())
    }

    fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.ctrl(buf)?.header().redir.clear_data_end();
        Ok(())
    }

    fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let _n = self.consumer.lock().unwrap_or_else(|e| e.into_inner());
        let _e = self.exports.lock().unwrap_or_else(|e| e.into_inner());
        let _r = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let _q = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }

    fn spawn(&self, spec: &vmmc::SpawnSpec<'_>) -> Result<ProcId> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let m = Msg::Spawn {
            req,
            host: spec.host.to_string(),
            program: spec.program.to_string(),
            args: spec.args.to_vec(),
        };
        match self.call(req, &m, &[])?.0 {
            Msg::Spawned { squid, .. } => Ok(ProcId { node: 0, squid }),
            Msg::Err { code: -16, .. } => Err(Error::Unsupported(
                "vmmc_Spawn: no launcher hosts this job's rendezvous (start the job with vmmc-run)",
            )),
            Msg::Err { code, text, .. } => Err(proto::error_from(code, text, 0)),
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    fn finish(&self) -> Result<()> {
        if self.finished.swap(1, Ordering::SeqCst) == 0 {
            // Break our links before leaving: once we return, our memory may go away, so no
            // sender may still be writing into it (the rendezvous revokes too, but later).
            let ctrls: Vec<Arc<Ctrl>> = {
                let ex = self.exports.lock().unwrap_or_else(|e| e.into_inner());
                ex.values().map(|e| e.ctrl.clone()).collect()
            };
            for c in &ctrls {
                c.revoke(revoked::OWNER_GONE);
            }
            for c in &ctrls {
                self.drain_senders(c);
            }
            let c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let _ = sys::send_msg(c.sock.as_raw_fd(), &Msg::Bye.encode(), &[]);
        }
        Ok(())
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The sender's side of a link into shared or process memory.
pub struct RemoteShm {
    ctrl: Arc<Ctrl>,
    region: Option<Arc<Map>>,
    base: *mut u8,
    len: usize,
    addr: u64,
    pid: libc::pid_t,
    ring: Arc<Ring>,
    my_rank: usize,
    owner_rank: usize,
    buf: BufId,
    status: Arc<Status>,
}

// SAFETY: `base` points into `region`, a shared mapping accessed with raw copies and atomics.
unsafe impl Send for RemoteShm {}
// SAFETY: as above.
unsafe impl Sync for RemoteShm {}

/// Enters a transfer: counts it in flight, then checks the link (see `unexport`).
struct Entered<'a>(&'a AtomicU32);

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RemoteShm {
    #[inline]
    fn enter(&self) -> Result<Entered<'_>> {
        let c = self.ctrl.in_flight(self.my_rank);
        c.fetch_add(1, Ordering::SeqCst);
        let g = Entered(c);
        match self.ctrl.header().revoked.load(Ordering::SeqCst) {
            revoked::LIVE => Ok(g),
            revoked::UNEXPORTED => Err(Error::Unexported),
            _ => Err(Error::PeerLost(format!(
                "rank {} (owner of buffer {})",
                self.owner_rank, self.buf
            ))),
        }
    }

    /// Copies into the mapping: the body, then the last word with a release store.
    #[inline]
    fn copy_ordered(&self, offset: usize, data: &[u8]) {
        // SAFETY: the core checked offset+len <= self.len (word multiples), and the mapping
        // covers len bytes from a page-aligned base.
        unsafe { vmmc::transport::copy_ordered(self.base.add(offset), data) }
    }

    /// Writes process memory through the kernel: body and last word as two pieces of one
    /// system call, the last word after.
    fn vm_write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let body = data.len() - WORD_SIZE;
        let r = if body == 0 {
            sys::vm_write(self.pid, &[(data, addr)])
        } else {
            sys::vm_write(
                self.pid,
                &[(&data[..body], addr), (&data[body..], addr + body as u64)],
            )
        };
        r.map_err(|e| {
            if e.raw_os_error() == Some(libc::ESRCH) {
                Error::PeerLost(format!("rank {}", self.owner_rank))
            } else {
                Error::io("process_vm_writev", e)
            }
        })
    }

    fn place(&self, offset: usize, data: &[u8]) -> Result<()> {
        if self.region.is_some() {
            self.copy_ordered(offset, data);
            Ok(())
        } else {
            self.vm_write(self.addr + offset as u64, data)
        }
    }

    fn notify(&self, offset: usize, data: &[u8]) -> Result<()> {
        let body = data.len() - WORD_SIZE;
        let value = u32::from_ne_bytes(data[body..].try_into().expect("a word"));
        self.post(offset + body, value)
    }

    /// Queues a notification in this sender's lane of the owner's ring. A full lane is
    /// back-pressure: `WouldBlock` (the data has landed; the caller may post it again), or
    /// `PeerLost` when the owner is gone and will never make room.
    fn post(&self, offset: usize, value: u32) -> Result<()> {
        if self.ctrl.header().has_handler.load(Ordering::Relaxed) == 0 {
            return Ok(()); // seed 000: no handler, no effect
        }
        let n = Notification {
            buf: self.buf,
            offset,
            value,
        };
        match self.ring.push(self.my_rank, n) {
            Push::Done => Ok(()),
            Push::Full if !self.status.alive(self.owner_rank) => {
                Err(Error::PeerLost(format!("rank {}", self.owner_rank)))
            }
            Push::Full => Err(Error::WouldBlock),
        }
    }
}

impl RemoteBuffer for RemoteShm {
    fn len(&self) -> usize {
        self.len
    }

    fn window(&self) -> Option<vmmc::Window> {
        let region = self.region.as_ref()?;
        if self.ctrl.header().redirectable.load(Ordering::Relaxed) != 0 {
            return None; // redirection decides placement chunk by chunk
        }
        let keep: Arc<dyn std::any::Any + Send + Sync> =
            Arc::new((self.ctrl.clone(), region.clone()));
        // SAFETY: the mapping covers `len` bytes from its page-aligned base; the control block's
        // atomics live in `ctrl`; `keep` holds both mappings for the window's lifetime.
        Some(unsafe {
            vmmc::Window::new(
                self.base,
                self.len,
                self.ctrl.in_flight(self.my_rank),
                &self.ctrl.header().revoked,
                Some(self.ring.bell()),
                keep,
            )
        })
    }

    #[inline]
    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        {
            let _in = self.enter()?;
            if self.ctrl.header().redirectable.load(Ordering::Relaxed) == 0 {
                self.place(offset, data)?;
            } else {
                self.ctrl
                    .header()
                    .redir
                    .deliver(offset, data, REDIR_CHUNK, |p| match p {
                        Piece::Default(o, d) => self.place(o, d),
                        Piece::Redirect(a, d) => self.vm_write(a, d),
                    })?;
            }
        }
        // The data is visible and the in-flight count's read-modify-write ordered it before
        // this look at the owner's doorbell.
        vmmc::wait::fence_after_rmw();
        self.ring.bell().ring_ordered();
        // Out of the in-flight section: waiting for room in the receiver's queue must never
        // hold up its unexport (whose thread may be the one to make room).
        if opts.notify {
            self.notify(offset, data)?;
        }
        Ok(())
    }

    fn notify(&self, offset: usize, value: u32) -> Result<()> {
        // The link must still be live (a notification after unexport would reach nobody's
        // handler, or the next export's under the same id).
        drop(self.enter()?);
        self.post(offset, value)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let _in = self.enter()?;
        if self.region.is_some() {
            // SAFETY: bounds checked by the core; a raw copy from the shared mapping (the
            // core's copy, which avoids the C library's slow cases).
            unsafe { vmmc::region::copy_raw(self.base.add(offset), out.as_mut_ptr(), out.len()) };
            Ok(())
        } else {
            sys::vm_read(self.pid, self.addr + offset as u64, out).map_err(|e| {
                if e.raw_os_error() == Some(libc::ESRCH) {
                    Error::PeerLost(format!("rank {}", self.owner_rank))
                } else {
                    Error::io("process_vm_readv", e)
                }
            })
        }
    }
}
