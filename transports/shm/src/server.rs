//! The trusted party of the shm transport: the rendezvous. It runs in the launcher (or in rank
//! 0 when a job is started by an MPI launcher, or inside a lone process), holds the job's
//! [`Registry`] (exports, permissions, waiting imports, squids) and the status page, checks
//! every import against the exporter's permissions, and hands the importer the descriptors it
//! maps only when the import is granted. It learns that a process died when its connection
//! closes without a goodbye; then it marks it dead, revokes its exports and fails the imports
//! waiting on it.

use crate::proto::Msg;
use crate::shmem::{revoked, state, Ctrl, Status};
use crate::sys;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use vmmc::registry::{ImportOutcome, PendingImport, Registry, SpawnOrder, Spawner};
use vmmc::{Error, ProcId, Result};

/// What the party keeps of an export.
pub(crate) struct ExportHandle {
    shared: bool,
    len: u64,
    addr: u64,
    owner_rank: usize,
    ctrl: Ctrl,
    region: Option<OwnedFd>,
}

struct Conn {
    stream: UnixStream,
}

struct State {
    /// The ranks the launcher started.
    size: usize,
    /// The ranks the tables hold: `size` plus the spawn slots (`vmmc-run --spawn-slots`).
    cap: usize,
    /// Spawned ranks not yet joined: (spawner's rank, its request id).
    pending: HashMap<usize, (usize, u64)>,
    spawner: Option<Arc<Spawner>>,
    registry: Registry<ExportHandle>,
    conns: Vec<Option<Arc<Conn>>>,
    rings: Vec<Option<OwnedFd>>,
    /// Each rank's ring mapped here, to ring its doorbell when another rank goes: a rank
    /// asleep in a wait (`vmmc::wait`) then sees the loss at once.
    bells: Vec<Option<crate::shmem::Ring>>,
    squids: Vec<u32>,
    hellos: usize,
    welcomed: bool,
    aborted: Option<String>,
    status: Status,
}

/// A running rendezvous.
pub struct Rendezvous {
    path: PathBuf,
    st: Arc<Mutex<State>>,
    accept: Option<JoinHandle<()>>,
}

fn send(c: &Conn, m: &Msg, fds: &[RawFd]) {
    // A failed send means the peer is gone; its reader thread notices the EOF.
    let _ = sys::send_msg(c.stream.as_raw_fd(), &m.encode(), fds);
}

impl Rendezvous {
    /// Listens on `path` for the `size` processes of a job.
    pub fn start(path: &Path, size: usize) -> Result<Rendezvous> {
        Rendezvous::start_with_capacity(path, size, size)
    }

    /// Listens on `path` for the `size` processes of a job that may grow to `cap` by
    /// `vmmc_Spawn` (the status page, and every process's notification ring and control
    /// blocks, are sized for `cap`; the processes learn it from `VMMC_CAPACITY`).
    pub fn start_with_capacity(path: &Path, size: usize, cap: usize) -> Result<Rendezvous> {
        if size == 0 {
            return Err(Error::InvalidArgument("job size must be positive"));
        }
        let cap = cap.max(size);
        let listener = bind_seqpacket(path)?;
        let mut registry = Registry::default();
        let squids = (0..size).map(|_| registry.new_squid()).collect();
        let st = Arc::new(Mutex::new(State {
            size,
            cap,
            pending: HashMap::new(),
            spawner: None,
            registry,
            conns: (0..cap).map(|_| None).collect(),
            rings: (0..cap).map(|_| None).collect(),
            bells: (0..cap).map(|_| None).collect(),
            squids,
            hellos: 0,
            welcomed: false,
            aborted: None,
            status: Status::create(cap)?,
        }));
        let st2 = st.clone();
        let accept = std::thread::Builder::new()
            .name("vmmc-rendezvous".into())
            .spawn(move || {
                let mut readers = Vec::new();
                // Spawned processes connect after the ranks, up to the capacity.
                for _ in 0..cap {
                    let Ok((stream, _)) = listener.accept() else {
                        break;
                    };
                    let st = st2.clone();
                    readers.push(std::thread::spawn(move || serve(st, stream)));
                }
                for r in readers {
                    let _ = r.join();
                }
            })
            .map_err(|e| Error::io("spawn rendezvous", e))?;
        Ok(Rendezvous {
            path: path.to_owned(),
            st,
            accept: Some(accept),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state of each rank (see [`crate::shmem::state`]).
    pub fn states(&self) -> Vec<u32> {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        (0..st.size).map(|r| st.status.get(r)).collect()
    }

    /// Lets processes of the job spawn others (up to the capacity): `f` starts them.
    pub fn set_spawner(&self, f: Spawner) {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).spawner = Some(Arc::new(f));
    }

    /// The launcher saw the process of `rank` end: a spawned process that never joined
    /// fails its spawn (then this returns true).
    pub fn spawn_ended(&self, rank: usize, how: &str) -> bool {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let Some((by, req)) = st.pending.remove(&rank) else {
            return false;
        };
        let e = Error::SpawnFailed(format!(
            "the spawned process (rank {rank}) {how} before it joined the job"
        ));
        fail(&st, by, req, &e);
        let pid = st.status.pid(rank);
        st.status.set(rank, state::EXITED, pid);
        true
    }

    /// Marks a rank dead (the launcher saw it die before it connected, or after).
    pub fn mark_dead(&self, rank: usize) {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        if rank < st.size && st.status.alive(rank) {
            if !st.welcomed {
                abort_start(&mut st, &format!("rank {rank} died before the job started"));
            }
            gone(&mut st, rank, state::DEAD);
        }
    }

    /// A rank ended (with any status): if it never joined, the job cannot start, and the ranks
    /// waiting for it are told so instead of waiting forever.
    pub fn mark_ended(&self, rank: usize) {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        if rank < st.size && !st.welcomed && st.status.get(rank) == state::STARTING {
            abort_start(
                &mut st,
                &format!("rank {rank} ended without joining the job"),
            );
            let pid = st.status.pid(rank);
            st.status.set(rank, state::EXITED, pid);
        }
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // Readers end when their processes disconnect; do not wait for stragglers here.
        drop(self.accept.take());
    }
}

fn bind_seqpacket(path: &Path) -> Result<UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    let fd = sys::syscall!(libc::socket(
        libc::AF_UNIX,
        libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
        0
    ))
    .map_err(|e| Error::io("socket", e))?;
    // SAFETY: a fresh descriptor we own.
    let listener = unsafe { <UnixListener as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let (addr, len) = sockaddr(path.as_os_str().as_bytes())?;
    sys::syscall!(libc::bind(
        fd,
        (&addr as *const libc::sockaddr_un).cast(),
        len
    ))
    .map_err(|e| Error::io("bind rendezvous socket", e))?;
    sys::syscall!(libc::listen(fd, 128)).map_err(|e| Error::io("listen", e))?;
    Ok(listener)
}

pub(crate) fn sockaddr(path: &[u8]) -> Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.len() >= a.sun_path.len() {
        return Err(Error::Bootstrap(format!(
            "rendezvous path too long ({} bytes)",
            path.len()
        )));
    }
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in a.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    Ok((a, len as libc::socklen_t))
}

fn proc_of(st: &State, rank: usize) -> ProcId {
    ProcId {
        node: 0,
        squid: st.squids[rank],
    }
}

fn rank_of(st: &State, p: ProcId) -> Option<usize> {
    if p.node != 0 {
        return None;
    }
    st.squids.iter().position(|s| *s == p.squid)
}

/// Sends an import grant with its descriptors.
fn grant(st: &State, importer: usize, req: u64, h: &ExportHandle) {
    let Some(c) = &st.conns[importer] else { return };
    let Some(ring) = &st.rings[h.owner_rank] else {
        return;
    };
    let mut fds = vec![h.ctrl.fd().as_raw_fd(), ring.as_raw_fd()];
    if let Some(r) = &h.region {
        fds.push(r.as_raw_fd());
    }
    let m = Msg::ImportOk {
        req,
        len: h.len,
        shared: h.shared,
        addr: h.addr,
        pid: st.status.pid(h.owner_rank),
        owner_rank: h.owner_rank as u32,
    };
    send(c, &m, &fds);
}

fn fail(st: &State, importer: usize, req: u64, e: &Error) {
    if let Some(c) = &st.conns[importer] {
        send(c, &Msg::err(req, e), &[]);
    }
}

/// The job cannot start: every rank waiting for the welcome gets an error instead.
fn abort_start(st: &mut State, why: &str) {
    st.welcomed = true; // no welcome will ever be sent now
    st.aborted = Some(why.to_string());
    let m = Msg::err(0, &Error::Bootstrap(why.to_string()));
    for c in st.conns.iter().flatten() {
        send(c, &m, &[]);
    }
}

/// A process left: revoke its exports, fail imports waiting on it.
fn gone(st: &mut State, rank: usize, how: u32) {
    let pid = st.status.pid(rank);
    st.status.set(rank, how, pid);
    let p = proc_of(st, rank);
    let (exports, failed) = st.registry.proc_gone(p);
    for (_, h) in exports {
        h.ctrl.revoke(revoked::OWNER_GONE);
    }
    let e = Error::PeerLost(format!("rank {rank} ({p})"));
    for f in failed {
        if let Some(i) = rank_of(st, f.importer) {
            fail(st, i, f.request, &e);
        }
    }
    st.conns[rank] = None;
    st.bells[rank] = None;
    // The survivors' waits look at their peers again now, not at their next timeout.
    for b in st.bells.iter().flatten() {
        b.bell().ring();
    }
}

fn serve(st: Arc<Mutex<State>>, stream: UnixStream) {
    let fd = stream.as_raw_fd();
    // First message: hello.
    let rank = match sys::recv_msg(fd, false) {
        Ok(Some((b, mut fds))) => match Msg::decode(&b) {
            Ok(Msg::Hello { rank, pid }) if fds.len() == 1 => {
                let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
                let r = rank as usize;
                if let Some(why) = &s.aborted {
                    let _ = sys::send_msg(
                        fd,
                        &Msg::err(0, &Error::Bootstrap(why.clone())).encode(),
                        &[],
                    );
                    return;
                }
                let spawned = r >= s.size;
                if r >= s.cap
                    || (spawned && !s.pending.contains_key(&r))
                    || s.conns[r].is_some()
                    || s.status.get(r) != state::STARTING
                {
                    let _ = sys::send_msg(
                        fd,
                        &Msg::err(
                            0,
                            &Error::Bootstrap(format!("rank {rank} invalid or taken")),
                        )
                        .encode(),
                        &[],
                    );
                    return;
                }
                let Ok(dup) = stream.try_clone() else { return };
                s.conns[r] = Some(Arc::new(Conn { stream: dup }));
                s.rings[r] = fds.pop();
                s.bells[r] = s.rings[r]
                    .as_ref()
                    .and_then(|f| f.try_clone().ok())
                    .and_then(|f| crate::shmem::Ring::open(f).ok());
                s.status.set(r, state::ALIVE, pid);
                if spawned {
                    // Its welcome now; the spawner's answer after it.
                    let (by, req) = s.pending.remove(&r).expect("checked");
                    let w = Msg::Welcome {
                        squids: s.squids[..=r].to_vec(),
                        host: sys::hostname(),
                        cap: s.cap as u32,
                    };
                    let sfd = s.status.fd().as_raw_fd();
                    if let Some(c) = &s.conns[r] {
                        send(c, &w, &[sfd]);
                    }
                    if let Some(c) = &s.conns[by] {
                        let m = Msg::Spawned {
                            req,
                            rank: r as u32,
                            squid: s.squids[r],
                        };
                        send(c, &m, &[]);
                    }
                } else {
                    s.hellos += 1;
                }
                if !spawned && s.hellos == s.size && !s.welcomed {
                    s.welcomed = true;
                    let host = sys::hostname();
                    let w = Msg::Welcome {
                        squids: s.squids.clone(),
                        host,
                        cap: s.cap as u32,
                    };
                    let sfd = s.status.fd().as_raw_fd();
                    for c in s.conns.iter().flatten() {
                        send(c, &w, &[sfd]);
                    }
                }
                r
            }
            _ => return,
        },
        _ => return,
    };
    let mut how = state::DEAD;
    loop {
        let (bytes, mut fds) = match sys::recv_msg(fd, false) {
            Ok(Some(x)) => x,
            Ok(None) | Err(_) => break,
        };
        let msg = match Msg::decode(&bytes) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("vmmc rendezvous: rank {rank}: {e}; dropping the connection");
                break;
            }
        };
        if let Msg::Spawn {
            req,
            host,
            program,
            args,
        } = msg
        {
            spawn(&st, rank, req, host, program, args);
            continue;
        }
        let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
        let me = proc_of(&s, rank);
        let Some(conn) = s.conns[rank].clone() else {
            break;
        };
        match msg {
            Msg::Export {
                req,
                buf,
                shared,
                len,
                addr,
                importers,
            } => {
                let want = if shared { 2 } else { 1 };
                if fds.len() != want {
                    send(
                        &conn,
                        &Msg::err(
                            req,
                            &Error::Protocol("export without its descriptors".into()),
                        ),
                        &[],
                    );
                    continue;
                }
                let region = if shared { fds.pop() } else { None };
                let ctrl = match Ctrl::open(fds.pop().expect("checked"), s.cap) {
                    Ok(c) => c,
                    Err(e) => {
                        send(&conn, &Msg::err(req, &e), &[]);
                        continue;
                    }
                };
                if let Some(r) = &region {
                    if sys::fd_size(r).map(|n| (n as u64) < len).unwrap_or(true) {
                        send(
                            &conn,
                            &Msg::err(
                                req,
                                &Error::Protocol("region smaller than its length".into()),
                            ),
                            &[],
                        );
                        continue;
                    }
                }
                let h = ExportHandle {
                    shared,
                    len,
                    addr,
                    owner_rank: rank,
                    ctrl,
                    region,
                };
                match s.registry.export(me, buf, importers, h) {
                    Ok(done) => {
                        send(&conn, &Msg::Ok { req }, &[]);
                        for (p, r) in done {
                            let Some(i) = rank_of(&s, p.importer) else {
                                continue;
                            };
                            match r {
                                Ok(()) => {
                                    let h = s.registry.handle(me, buf).expect("just exported");
                                    grant(&s, i, p.request, h);
                                }
                                Err(e) => fail(&s, i, p.request, &e),
                            }
                        }
                    }
                    Err(e) => send(&conn, &Msg::err(req, &e), &[]),
                }
            }
            Msg::Unexport { req, buf } => match s.registry.unexport(me, buf) {
                Ok(_) => send(&conn, &Msg::Ok { req }, &[]),
                Err(e) => send(&conn, &Msg::err(req, &e), &[]),
            },
            Msg::Import { req, owner, buf } => {
                if rank_of(&s, owner).is_none() {
                    send(
                        &conn,
                        &Msg::err(req, &Error::PeerLost(format!("{owner} is not in this job"))),
                        &[],
                    );
                    continue;
                }
                let p = PendingImport {
                    importer: me,
                    request: req,
                    owner,
                    buf,
                };
                let failed = match s.registry.import(p) {
                    ImportOutcome::Ready(_) => None,
                    ImportOutcome::Pending => continue,
                    ImportOutcome::Failed(e) => Some(e),
                };
                match failed {
                    None => {
                        let h = s.registry.handle(owner, buf).expect("granted");
                        grant(&s, rank, req, h);
                    }
                    Some(e) => send(&conn, &Msg::err(req, &e), &[]),
                }
            }
            Msg::CancelImport { req } => {
                if s.registry.cancel(me, req) {
                    let e = Error::InvalidArgument("import request cancelled");
                    send(&conn, &Msg::err(req, &e), &[]);
                }
            }
            Msg::Bye => {
                how = state::EXITED;
                break;
            }
            other => {
                eprintln!("vmmc rendezvous: rank {rank}: unexpected {other:?}");
                break;
            }
        }
    }
    let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
    gone(&mut s, rank, how);
}

/// `vmmc_Spawn`: reserves the next rank (its squid is the next one too: squid = rank + 1, as
/// for the ranks the launcher started) and has the launcher start the process.
fn spawn(st: &Mutex<State>, by: usize, req: u64, host: String, program: String, args: Vec<String>) {
    let (spawner, order) = {
        let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
        let Some(spawner) = s.spawner.clone() else {
            let e = Error::Unsupported(
                "vmmc_Spawn: no launcher hosts this job's rendezvous (start the job with vmmc-run)",
            );
            fail(&s, by, req, &e);
            return;
        };
        let rank = s.squids.len();
        if rank >= s.cap {
            let e = Error::SpawnFailed(format!(
                "no spawn slot left: this shm job holds {} processes (start it with vmmc-run \
                 --spawn-slots K to let it spawn K)",
                s.cap
            ));
            fail(&s, by, req, &e);
            return;
        }
        let squid = s.registry.new_squid();
        debug_assert_eq!(squid as usize, rank + 1);
        s.squids.push(squid);
        s.pending.insert(rank, (by, req));
        let order = SpawnOrder {
            rank,
            host,
            program,
            args,
            parent: proc_of(&s, by),
        };
        (spawner, order)
    };
    // Outside the lock: the launcher takes its own locks and may report an end at once.
    if let Err(why) = spawner(&order) {
        let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
        if s.pending.remove(&order.rank).is_some() {
            let pid = s.status.pid(order.rank);
            s.status.set(order.rank, state::EXITED, pid);
            fail(&s, by, req, &Error::SpawnFailed(why));
        }
    }
}
