//! The trusted party of a TCP job (seed 003 §3.3: "trusted servers ... establish import/export
//! mappings"): every rank keeps one connection to it. It hands out identities and the ranks'
//! data addresses, keeps the export table with its permissions ([`vmmc::registry::Registry`]),
//! grants or refuses imports, and tells the survivors when a rank's connection ends (a clean
//! `Bye` first: the rank left; no `Bye`: it died).
//!
//! A process of the job may ask it to start another one (`vmmc_Spawn`): the launcher that
//! hosts it gave it a [`Spawner`]; it reserves the next rank (beyond the initial size, never
//! reused), has the launcher start the process, and when that process says hello it gets the
//! next squid of its node, a welcome listing every process so far, the others are told to
//! connect to it (`Joined`), and the spawner gets its identity.
//!
//! Hosted by the launcher (`vmmc-run --transport tcp`), by a test harness, or by rank 0 itself
//! when a site's launcher started the job (`VMMC_RENDEZVOUS=host:port`).

use crate::proto::Msg;
use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use vmmc::registry::{ImportOutcome, PendingImport, Registry};
use vmmc::{Error, ProcId, Result};

/// What an importer learns about an export.
#[derive(Clone, Copy, Debug)]
struct Grant {
    key: u64,
    len: u64,
    has_handler: bool,
}

struct Joined {
    stream: TcpStream,
    ip: String,
    listen: String,
}

pub use vmmc::registry::{SpawnOrder, Spawner};

struct State {
    /// The ranks the launcher started; spawned ones come after them.
    size: usize,
    joined: Vec<Option<Joined>>,
    procs: Vec<ProcId>,
    welcomed: bool,
    registry: Registry<Grant>,
    gone: Vec<bool>,
    /// Why the job can no longer start (a rank died before every rank joined).
    aborted: Option<String>,
    /// The address of each node, by node id.
    nodes: Vec<String>,
    /// The last squid given out on each node.
    squids: HashMap<u32, u32>,
    /// Spawned ranks not yet joined: (spawner's rank, its request id).
    pending: HashMap<usize, (usize, u64)>,
}

impl State {
    /// The node of a process reaching us from `ip`, and its squid there.
    fn assign(&mut self, ip: &str) -> ProcId {
        let node = match self.nodes.iter().position(|h| h == ip) {
            Some(n) => n as u32,
            None => {
                self.nodes.push(ip.to_string());
                (self.nodes.len() - 1) as u32
            }
        };
        let s = self.squids.entry(node).or_insert(0);
        *s += 1;
        ProcId { node, squid: *s }
    }

    /// Every process so far, spawned ones included.
    fn count(&self) -> usize {
        self.joined.len()
    }
}

/// A rank that never joined (its spawn failed or is under way).
pub const NOBODY: ProcId = ProcId {
    node: u32::MAX,
    squid: 0,
};

struct Inner {
    state: Mutex<State>,
    stop: AtomicBool,
    spawner: Mutex<Option<Arc<Spawner>>>,
    /// The process that asks starts the spawned one itself (`Start`).
    by_requester: AtomicBool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running rendezvous; stops when dropped.
pub struct Rendezvous {
    addr: SocketAddr,
    inner: Arc<Inner>,
}

impl Rendezvous {
    /// Listens on `addr` (port 0: any free port) for a job of `size` ranks.
    pub fn start(addr: &str, size: usize) -> Result<Rendezvous> {
        let l = TcpListener::bind(addr).map_err(|e| {
            Error::Bootstrap(format!("cannot listen for the rendezvous on {addr}: {e}"))
        })?;
        let addr = l.local_addr().map_err(|e| Error::io("local_addr", e))?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                size,
                joined: (0..size).map(|_| None).collect(),
                procs: Vec::new(),
                welcomed: false,
                registry: Registry::default(),
                gone: vec![false; size],
                aborted: None,
                nodes: Vec::new(),
                squids: HashMap::new(),
                pending: HashMap::new(),
            }),
            stop: AtomicBool::new(false),
            spawner: Mutex::new(None),
            by_requester: AtomicBool::new(false),
        });
        let i = inner.clone();
        std::thread::Builder::new()
            .name("vmmc-tcp-rendezvous".into())
            .spawn(move || {
                for s in l.incoming() {
                    if i.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(s) = s else { continue };
                    // A rank whose host vanishes is found by keepalive, as on data connections.
                    let _ = crate::tune(&s);
                    let i = i.clone();
                    let _ = std::thread::Builder::new()
                        .name("vmmc-tcp-rendezvous-client".into())
                        .spawn(move || serve(&i, s));
                }
            })
            .map_err(|e| Error::io("spawn the rendezvous", e))?;
        Ok(Rendezvous { addr, inner })
    }

    /// The launcher saw `rank` fail. Before every rank joined, the job can no longer start:
    /// the ranks that joined get the error instead of waiting for ever for their welcome, and
    /// so do later ones. After the start its connection tells the others.
    pub fn mark_dead(&self, rank: usize) {
        let mut st = lock(&self.inner.state);
        abort_start(&mut st, &format!("rank {rank} died before the job started"));
    }

    /// The address ranks connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets processes of the job spawn others: `f` starts them (without it, `vmmc_Spawn`
    /// is unsupported: nobody here can start a process).
    pub fn set_spawner(&self, f: Spawner) {
        *self.inner.spawner.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(f));
    }

    /// Lets processes of the job spawn others, each starting the new process itself: the
    /// rendezvous reserves the rank and answers `Start` (an MPI job, where the process that
    /// calls `MPI_Comm_spawn` becomes connected to the new one).
    pub fn set_spawn_by_requester(&self) {
        self.inner.by_requester.store(true, Ordering::SeqCst);
    }

    /// The launcher saw the process of `rank` end (any status). A spawned process that ends
    /// before it joined fails its spawn (then this returns true); other ends are seen on
    /// their connections.
    pub fn mark_ended(&self, rank: usize, how: &str) -> bool {
        let mut st = lock(&self.inner.state);
        let Some((by, req)) = st.pending.remove(&rank) else {
            return false;
        };
        {
            let e = Error::SpawnFailed(format!(
                "the spawned process (rank {rank}) {how} before it joined the job"
            ));
            reply(&st, by, &err(req, &e));
            st.gone[rank] = true;
        }
        true
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        // Unblock the accept loop, then end every client's connection.
        let _ = TcpStream::connect(self.addr);
        let st = lock(&self.inner.state);
        for j in st.joined.iter().flatten() {
            let _ = j.stream.shutdown(Shutdown::Both);
        }
    }
}

fn reply(st: &State, rank: usize, m: &Msg) {
    if let Some(j) = &st.joined[rank] {
        // A failure means the rank is gone; its reader thread reports that.
        let _ = m.send(&j.stream);
    }
}

fn err(req: u64, e: &Error) -> Msg {
    Msg::Err {
        req,
        code: e.code(),
        text: e.to_string(),
    }
}

/// One rank's connection: its hello, then its requests until it leaves.
fn serve(inner: &Inner, s: TcpStream) {
    let Ok(Some(Msg::Hello { rank, size, listen })) = Msg::recv(&s) else {
        return;
    };
    let rank = rank as usize;
    let ip = s
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    {
        let mut st = lock(&inner.state);
        if let Some(why) = &st.aborted {
            let _ = err(0, &Error::Bootstrap(why.clone())).send(&s);
            return;
        }
        if rank >= st.size {
            if !st.welcomed || !st.pending.contains_key(&rank) || st.joined[rank].is_some() {
                let why = format!("rank {rank} is no process this job spawned");
                let _ = err(0, &Error::Bootstrap(why)).send(&s);
                return;
            }
            let Ok(w) = s.try_clone() else { return };
            st.joined[rank] = Some(Joined {
                stream: w,
                ip: ip.clone(),
                listen,
            });
            join_spawned(&mut st, rank, &ip);
        } else if size as usize != st.size || st.joined[rank].is_some() {
            let why = format!(
                "rank {rank} of {size} cannot join a job of {} (or joined twice)",
                st.size
            );
            let _ = err(0, &Error::Bootstrap(why)).send(&s);
            return;
        } else {
            let Ok(w) = s.try_clone() else { return };
            st.joined[rank] = Some(Joined {
                stream: w,
                ip,
                listen,
            });
            if st.joined.iter().all(Option::is_some) {
                welcome(&mut st);
            }
        }
    }
    let mut clean = false;
    loop {
        match Msg::recv(&s) {
            Ok(Some(Msg::Bye)) => {
                clean = true;
                break;
            }
            Ok(Some(m)) => request(inner, rank, m),
            _ => break,
        }
    }
    let mut st = lock(&inner.state);
    if inner.stop.load(Ordering::SeqCst) || st.gone[rank] {
        return;
    }
    st.gone[rank] = true;
    if !st.welcomed {
        // Gone before the start: nobody can be welcomed any more.
        let why = format!("rank {rank} left before the job started");
        abort_start(&mut st, &why);
        return;
    }
    if st.welcomed {
        let me = st.procs[rank];
        let (_, failed) = st.registry.proc_gone(me);
        for p in failed {
            if let Some(r) = st.procs.iter().position(|q| *q == p.importer) {
                let e = Error::PeerLost(format!("rank {rank} (the exporter) left the job"));
                reply(&st, r, &err(p.request, &e));
            }
        }
    }
    let m = Msg::Gone {
        rank: rank as u32,
        crashed: !clean,
    };
    for r in 0..st.count() {
        if r != rank && !st.gone[r] {
            reply(&st, r, &m);
        }
    }
}

/// A spawned process said hello: its identity, its welcome (the data listeners of every
/// process alive, which connect to it), the others' `Joined`, and the spawner's answer.
fn join_spawned(st: &mut State, rank: usize, ip: &str) {
    let me = st.assign(ip);
    st.procs[rank] = me;
    let (by, req) = st.pending.remove(&rank).expect("checked");
    let listen = |st: &State, r: usize| match &st.joined[r] {
        Some(j) if !st.gone[r] => j.listen.clone(),
        _ => String::new(),
    };
    // Every process so far, spawned ones that joined before it included (a spawn asked for
    // later may say hello first): all of them connect to it.
    let addrs: Vec<String> = (0..st.count()).map(|r| listen(st, r)).collect();
    reply(
        st,
        rank,
        &Msg::Welcome {
            procs: st.procs.clone(),
            hosts: st.nodes.clone(),
            addrs,
        },
    );
    let joined = Msg::Joined {
        rank: rank as u32,
        proc: me,
        addr: listen(st, rank),
    };
    for r in 0..st.count() {
        if r != rank && !st.gone[r] && st.joined[r].is_some() {
            reply(st, r, &joined);
        }
    }
    // After `Joined` on the same stream: the spawner knows how to reach it when told.
    reply(
        st,
        by,
        &Msg::Spawned {
            req,
            rank: rank as u32,
            proc: me,
        },
    );
}

/// `vmmc_Spawn`: reserves a rank and has the launcher start the process.
fn spawn(inner: &Inner, by: usize, req: u64, host: String, program: String, args: Vec<String>) {
    let spawner = inner
        .spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let by_requester = inner.by_requester.load(Ordering::SeqCst);
    let order = {
        let mut st = lock(&inner.state);
        if spawner.is_none() && !by_requester {
            let e = Error::Unsupported(
                "vmmc_Spawn: no launcher hosts this job's rendezvous (start the job with vmmc-run)",
            );
            reply(&st, by, &err(req, &e));
            return;
        }
        let rank = st.count();
        if rank >= st.size + crate::MAX_SPAWNED {
            let e = Error::SpawnFailed(format!(
                "this job has spawned its limit of {} processes",
                crate::MAX_SPAWNED
            ));
            reply(&st, by, &err(req, &e));
            return;
        }
        st.joined.push(None);
        st.gone.push(false);
        st.procs.push(NOBODY);
        st.pending.insert(rank, (by, req));
        if by_requester {
            let m = Msg::Start {
                req,
                rank: rank as u32,
                parent: st.procs[by],
            };
            reply(&st, by, &m);
            return;
        }
        SpawnOrder {
            rank,
            host,
            program,
            args,
            parent: st.procs[by],
        }
    };
    // Outside the lock: the launcher takes its own locks and may report an end at once.
    if let Err(why) = (spawner.expect("checked"))(&order) {
        let mut st = lock(&inner.state);
        if st.pending.remove(&order.rank).is_some() {
            st.gone[order.rank] = true;
            reply(&st, by, &err(req, &Error::SpawnFailed(why)));
        }
    }
}

/// Ends a start that cannot complete: every rank that joined gets `why`.
fn abort_start(st: &mut State, why: &str) {
    if st.welcomed || st.aborted.is_some() {
        return;
    }
    st.aborted = Some(why.to_string());
    let m = err(0, &Error::Bootstrap(why.to_string()));
    for r in 0..st.count() {
        reply(st, r, &m);
    }
}

/// Everyone has joined: one node per distinct address, squids unique per node.
fn welcome(st: &mut State) {
    let ips: Vec<String> = st.joined.iter().flatten().map(|j| j.ip.clone()).collect();
    let procs: Vec<ProcId> = ips.iter().map(|ip| st.assign(ip)).collect();
    let nodes = st.nodes.clone();
    let addrs = st
        .joined
        .iter()
        .flatten()
        .map(|j| j.listen.clone())
        .collect();
    st.procs = procs.clone();
    st.welcomed = true;
    let m = Msg::Welcome {
        procs,
        hosts: nodes,
        addrs,
    };
    for r in 0..st.count() {
        reply(st, r, &m);
    }
}

fn request(inner: &Inner, rank: usize, m: Msg) {
    if let Msg::Spawn {
        req,
        host,
        program,
        args,
    } = m
    {
        if lock(&inner.state).welcomed {
            spawn(inner, rank, req, host, program, args);
        }
        return;
    }
    if let Msg::StartFailed {
        rank: spawned,
        text,
    } = m
    {
        let mut st = lock(&inner.state);
        let spawned = spawned as usize;
        if st.pending.get(&spawned).is_some_and(|&(by, _)| by == rank) {
            let (by, req) = st.pending.remove(&spawned).expect("checked");
            st.gone[spawned] = true;
            reply(&st, by, &err(req, &Error::SpawnFailed(text)));
        }
        return;
    }
    let mut st = lock(&inner.state);
    if !st.welcomed {
        return;
    }
    let me = st.procs[rank];
    match m {
        Msg::Export {
            req,
            buf,
            len,
            key,
            has_handler,
            importers,
        } => {
            let g = Grant {
                key,
                len,
                has_handler,
            };
            match st.registry.export(me, buf, importers, g) {
                Ok(done) => {
                    reply(&st, rank, &Msg::Ok { req });
                    for (p, r) in done {
                        let Some(to) = st.procs.iter().position(|q| *q == p.importer) else {
                            continue;
                        };
                        let m = match r {
                            Ok(()) => Msg::ImportOk {
                                req: p.request,
                                key,
                                len,
                                has_handler,
                            },
                            Err(e) => err(p.request, &e),
                        };
                        reply(&st, to, &m);
                    }
                }
                Err(e) => reply(&st, rank, &err(req, &e)),
            }
        }
        Msg::Sync { req } => reply(&st, rank, &Msg::Ok { req }),
        Msg::Unexport { req, buf } => {
            let m = match st.registry.unexport(me, buf) {
                Ok(_) => Msg::Ok { req },
                Err(e) => err(req, &e),
            };
            reply(&st, rank, &m);
        }
        Msg::Import { req, owner, buf } => {
            let Some(&owner) = st.procs.get(owner as usize).filter(|p| **p != NOBODY) else {
                reply(
                    &st,
                    rank,
                    &err(req, &Error::InvalidArgument("no such rank")),
                );
                return;
            };
            let p = PendingImport {
                importer: me,
                request: req,
                owner,
                buf,
            };
            let m = match st.registry.import(p) {
                ImportOutcome::Ready(g) => Some(Msg::ImportOk {
                    req,
                    key: g.key,
                    len: g.len,
                    has_handler: g.has_handler,
                }),
                ImportOutcome::Pending => None,
                ImportOutcome::Failed(e) => Some(err(req, &e)),
            };
            if let Some(m) = m {
                reply(&st, rank, &m);
            }
        }
        _ => {}
    }
}
