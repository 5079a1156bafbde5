//! The conformance suite: every rule of the VMMC model, written once as scenarios that each
//! transport runs from its own tests (the way libfabric's fabtests run against every provider).
//!
//! A [`Scenario`] is a function run by every process of a job of [`Scenario::procs`]
//! processes; each process plays the role of its rank. The transport's harness starts the job
//! (real processes for shm, node threads for sim), runs [`Scenario::run`] in each, and checks
//! that every rank returned `Ok` — except the rank named by [`Scenario::dies`], which kills
//! itself with [`die`] and must be reported dead by the transport. Ranks synchronise with
//! [`Sync`], built on VMMC itself, and never wait on a dead peer.

use crate::error::Error;
use crate::{
    AuOptions, BufId, Endpoint, ExportOptions, MemKind, Notification, Proxy, Region, WriteOpts,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Outcome of a scenario in one process.
pub type Check = std::result::Result<(), String>;

/// One conformance scenario.
pub struct Scenario {
    /// Name, used as the test name.
    pub name: &'static str,
    /// Number of processes.
    pub procs: usize,
    /// A rank that kills itself during the scenario.
    pub dies: Option<usize>,
    /// The body, run by every rank.
    pub run: fn(&Endpoint) -> Check,
}

/// Every scenario of the suite.
pub fn scenarios() -> &'static [Scenario] {
    &[
        Scenario {
            name: "identity",
            procs: 3,
            dies: None,
            run: identity,
        },
        Scenario {
            name: "deliberate_update_rules",
            procs: 2,
            dies: None,
            run: du_rules,
        },
        Scenario {
            name: "export_import_permissions",
            procs: 3,
            dies: None,
            run: permissions,
        },
        Scenario {
            name: "ordering_last_word_last",
            procs: 2,
            dies: None,
            run: ordering,
        },
        Scenario {
            name: "unexport_while_sending",
            procs: 2,
            dies: None,
            run: unexport_while_sending,
        },
        Scenario {
            name: "peer_killed",
            procs: 3,
            dies: Some(2),
            run: peer_killed,
        },
        Scenario {
            name: "notification_arguments",
            procs: 2,
            dies: None,
            run: notify_args,
        },
        Scenario {
            name: "notification_blocking",
            procs: 2,
            dies: None,
            run: notify_blocking,
        },
        Scenario {
            name: "notification_overflow",
            procs: 2,
            dies: None,
            run: notify_overflow,
        },
        Scenario {
            name: "handlers_never_concurrent",
            procs: 3,
            dies: None,
            run: handlers_serial,
        },
        Scenario {
            name: "redirection",
            procs: 2,
            dies: None,
            run: redirection,
        },
        Scenario {
            name: "remote_read",
            procs: 2,
            dies: None,
            run: remote_read,
        },
        Scenario {
            name: "automatic_update",
            procs: 2,
            dies: None,
            run: automatic_update,
        },
        Scenario {
            name: "async_send",
            procs: 2,
            dies: None,
            run: async_send,
        },
        Scenario {
            name: "handlers_read_each_other",
            procs: 2,
            dies: None,
            run: handlers_read_each_other,
        },
    ]
}

/// A transport with its native paths hidden: no remote read, no automatic update into a
/// mapping. Running the suite over it checks the core's emulations (remote read by request and
/// reply, automatic update by deliberate updates) against the same rules.
pub struct Degraded<T>(pub T);

struct DegradedRemote(Box<dyn crate::RemoteBuffer>);

impl crate::RemoteBuffer for DegradedRemote {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> crate::Result<()> {
        self.0.write(offset, data, opts)
    }
    fn fence(&self) -> crate::Result<()> {
        self.0.fence()
    }
}

impl<T: crate::Transport> crate::Transport for Degraded<T> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn caps(&self) -> crate::Caps {
        crate::Caps {
            remote_read: false,
            native_au: false,
            ..self.0.caps()
        }
    }
    fn job(&self) -> &crate::JobInfo {
        self.0.job()
    }
    fn export(&self, spec: crate::ExportSpec<'_>) -> crate::Result<()> {
        self.0.export(spec)
    }
    fn unexport(&self, buf: BufId) -> crate::Result<()> {
        self.0.unexport(buf)
    }
    fn import_request(&self, owner: crate::ProcId, buf: BufId) -> crate::Result<u64> {
        self.0.import_request(owner, buf)
    }
    fn import_cancel(&self, request: u64) {
        self.0.import_cancel(request)
    }
    fn import_poll(&self, request: u64, wait: bool) -> crate::Result<crate::ImportPoll> {
        Ok(match self.0.import_poll(request, wait)? {
            crate::ImportPoll::Ready(r) => crate::ImportPoll::Ready(Box::new(DegradedRemote(r))),
            crate::ImportPoll::Pending => crate::ImportPoll::Pending,
        })
    }
    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> crate::Result<usize> {
        self.0.progress(sink, timeout)
    }
    fn wake(&self) {
        self.0.wake()
    }
    fn peer_alive(&self, p: crate::ProcId) -> bool {
        self.0.peer_alive(p)
    }
    fn peer_failed(&self, p: crate::ProcId) -> bool {
        self.0.peer_failed(p)
    }
    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> crate::Result<()> {
        self.0.post_redir(buf, dest, dest_offset, buf_offset, len)
    }
    fn end_redir(&self, buf: BufId) -> crate::Result<crate::Redirected> {
        self.0.end_redir(buf)
    }
    fn data_end(&self, buf: BufId) -> crate::Result<Option<usize>> {
        self.0.data_end(buf)
    }
    fn clear_data_end(&self, buf: BufId) -> crate::Result<()> {
        self.0.clear_data_end(buf)
    }
    fn finish(&self) -> crate::Result<()> {
        self.0.finish()
    }
}

/// Finds a scenario by name.
pub fn scenario(name: &str) -> Option<&'static Scenario> {
    scenarios().iter().find(|s| s.name == name)
}

/// Kills the calling process abruptly (SIGKILL: no cleanup, no goodbye); on a transport whose
/// nodes are threads, ends the calling node the same way through its [`crate::pace::Pacer`].
pub fn die() -> ! {
    if let Some(p) = crate::pace::current() {
        p.die();
    }
    // SAFETY: kill on our own pid.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL returned")
}

macro_rules! ensure {
    ($c:expr, $($m:tt)+) => {
        if !$c {
            return Err(format!("line {}: {}", line!(), format!($($m)+)));
        }
    };
}

trait Ctx<T> {
    fn ctx(self, what: &str) -> std::result::Result<T, String>;
}

impl<T> Ctx<T> for crate::Result<T> {
    fn ctx(self, what: &str) -> std::result::Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Waits until `cond` holds, giving up with an error if `peer` (a rank) dies or after a
/// minute. Waits by the core's policy ([`crate::wait`]; under a [`crate::pace::Pacer`],
/// waits for events).
pub fn wait_for(
    ep: &Endpoint,
    peer: Option<usize>,
    what: &str,
    mut cond: impl FnMut() -> bool,
) -> Check {
    let start = Instant::now();
    let mut n = 0u32;
    let mut wait = crate::wait::Wait::new(&WAIT_SITE);
    while !cond() {
        n = n.wrapping_add(1);
        if wait.resting() || n.is_multiple_of(64) {
            if let Some(r) = peer {
                // Data sent before a peer left is in memory: look once more before giving up.
                if let Err(e) = ep.check_peer(ep.proc_of(r).ctx("rank")?) {
                    if cond() {
                        return Ok(());
                    }
                    return Err(format!("{what}: {e}"));
                }
            }
            if start.elapsed() > WAIT_LIMIT {
                return Err(format!("timed out waiting for {what}"));
            }
        }
        wait.idle();
    }
    Ok(())
}

/// The suite's waits, in `crate::wait`'s counts.
static WAIT_SITE: crate::wait::Site = crate::wait::Site::new("conformance");

const SYNC_BUF: BufId = 0xFFFF_FF00;

/// A barrier among the ranks of a job, built on deliberate updates: each rank writes its epoch
/// into everyone's sync buffer, then waits for theirs. A dead peer ends the wait with an error.
pub struct Sync {
    ep: Endpoint,
    region: Region,
    peers: Vec<Option<Proxy>>,
    epoch: u32,
}

impl Sync {
    /// Exports this rank's sync buffer and imports everyone's.
    pub fn new(ep: &Endpoint) -> std::result::Result<Sync, String> {
        let n = ep.size();
        let region = ep.alloc(12 * n, MemKind::Shared).ctx("alloc sync")?;
        ep.export(SYNC_BUF, &region, ExportOptions::new())
            .ctx("export sync")?;
        let mut peers = Vec::new();
        for r in 0..n {
            peers.push(if r == ep.rank() {
                None
            } else {
                Some(
                    ep.import(ep.proc_of(r).ctx("rank")?, SYNC_BUF)
                        .ctx("import sync")?,
                )
            });
        }
        Ok(Sync {
            ep: ep.clone(),
            region,
            peers,
            epoch: 0,
        })
    }

    /// Waits for every rank.
    pub fn barrier(&mut self) -> Check {
        let all: Vec<usize> = (0..self.ep.size()).collect();
        self.exchange_among(&all, 0).map(|_| ())
    }

    /// Waits for every rank and returns each rank's `value`.
    pub fn exchange(&mut self, value: u32) -> std::result::Result<Vec<u32>, String> {
        let all: Vec<usize> = (0..self.ep.size()).collect();
        self.exchange_among(&all, value)
    }

    /// A barrier among `ranks` only (which must include this one), exchanging a value.
    pub fn exchange_among(
        &mut self,
        ranks: &[usize],
        value: u32,
    ) -> std::result::Result<Vec<u32>, String> {
        self.epoch += 1;
        let me = self.ep.rank();
        let n = self.ep.size();
        // Values alternate between two slots: a fast rank's next value must not overwrite the
        // one a slow rank has yet to read.
        let slot = |r: usize| 4 * (n + 2 * r + (self.epoch as usize & 1));
        self.region.store_u32(slot(me), value).ctx("sync")?;
        for &r in ranks {
            if let Some(p) = &self.peers[r] {
                // Value first, epoch last: delivery is in order.
                p.send(slot(me), &value.to_ne_bytes()).ctx("sync value")?;
                p.send(4 * me, &self.epoch.to_ne_bytes())
                    .ctx("sync epoch")?;
            }
        }
        let mut out = vec![0; n];
        for &r in ranks {
            if r != me {
                let e = self.epoch;
                let reg = &self.region;
                wait_for(&self.ep, Some(r), "barrier", || {
                    reg.load_u32(4 * r).unwrap_or(0) >= e
                })?;
            }
            out[r] = self.region.load_u32(slot(r)).ctx("sync")?;
        }
        Ok(out)
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed)
                .to_ne_bytes()
        })
        .collect()
}

fn words(v: u32, n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| v.to_ne_bytes()).collect()
}

fn read_all(r: &Region) -> Vec<u8> {
    let mut v = vec![0u8; r.len()];
    r.read(0, &mut v).expect("in bounds");
    v
}

// ----- scenarios -----

fn identity(ep: &Endpoint) -> Check {
    let job = ep.job();
    ensure!(job.procs.len() == ep.size(), "one identity per rank");
    ensure!(
        ep.me() == job.procs[ep.rank()],
        "me() is my rank's identity"
    );
    let mut squids: Vec<_> = job.procs.iter().map(|p| (p.node, p.squid)).collect();
    squids.sort();
    squids.dedup();
    ensure!(
        squids.len() == ep.size(),
        "(node, squid) pairs are unique: {:?}",
        job.procs
    );
    ensure!(
        ep.page_size() == crate::page_size() && ep.page_size() >= 4096,
        "page size"
    );
    ensure!(ep.word_size() == 4, "word size");
    ensure!(!ep.version().is_empty(), "version");
    ensure!(!ep.hosts().is_empty(), "hosts");
    let host = ep.my_host_name().to_string();
    ensure!(
        ep.name_to_node(&host) == Some(ep.me().node),
        "name_to_node(my host)"
    );
    ensure!(
        ep.node_to_name(ep.me().node) == Some(host.as_str()),
        "node_to_name(my node)"
    );
    ensure!(ep.node_to_name(u32::MAX).is_none(), "unknown node");
    ensure!(ep.proc_of(ep.size()).is_err(), "rank out of range");
    let mut sync = Sync::new(ep)?;
    let seen = sync.exchange(ep.me().squid)?;
    for (r, s) in seen.iter().enumerate() {
        ensure!(
            *s == job.procs[r].squid,
            "rank {r} agrees on its squid: {seen:?} vs {:?}",
            job.procs
        );
        ensure!(ep.peer_alive(job.procs[r]), "rank {r} alive");
    }
    sync.barrier()
}

fn du_rules(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const B: BufId = 10;
    if ep.rank() == 1 {
        let r = ep.alloc(256, MemKind::Shared).ctx("alloc")?;
        r.fill(0, 256, 0xAA).ctx("fill")?;
        ep.export(B, &r, ExportOptions::new()).ctx("export")?;
        sync.barrier()?; // exported
        sync.barrier()?; // sender done
        let v = read_all(&r);
        ensure!(v[..16].iter().all(|b| *b == 0x11), "the valid send landed");
        ensure!(
            v[16..].iter().all(|b| *b == 0xAA),
            "refused sends wrote nothing"
        );
        sync.barrier()
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, B).ctx("import")?;
        ensure!(p.len() == 256, "proxy length {}", p.len());
        let oob = |r: crate::Result<()>| matches!(r, Err(Error::OutOfBounds { .. }));
        ensure!(oob(p.send(252, &[0x22; 8])), "send past the end refused");
        ensure!(oob(p.send(256, &[0x22; 4])), "send at the end refused");
        ensure!(
            oob(p.send(usize::MAX - 3, &[0x22; 4])),
            "overflowing offset refused"
        );
        ensure!(
            matches!(p.send(2, &[0x22; 4]), Err(Error::Unaligned { .. })),
            "unaligned offset"
        );
        ensure!(
            matches!(p.send(0, &[0x22; 6]), Err(Error::Unaligned { .. })),
            "unaligned length"
        );
        ensure!(
            matches!(p.send(0, &[]), Err(Error::InvalidArgument(_))),
            "empty send"
        );
        ensure!(
            oob(ep.send_at(p.dest_addr() + 256, &[0x22; 4], WriteOpts::default())),
            "DestSpace past the proxy"
        );
        ensure!(
            matches!(
                ep.send_at(0x1000, &[0; 4], WriteOpts::default()),
                Err(Error::NotImported)
            ),
            "address outside DestSpace"
        );
        let mut out = [0u8; 8];
        ensure!(oob(p.get_data(252, &mut out)), "remote read past the end");
        ep.send_at(p.dest_addr(), &[0x11; 16], WriteOpts::default())
            .ctx("send by DestSpace address")?;
        let addr = p.dest_addr();
        ep.unimport(p).ctx("unimport")?;
        ensure!(
            matches!(
                ep.send_at(addr, &[0; 4], WriteOpts::default()),
                Err(Error::NotImported)
            ),
            "send after unimport"
        );
        sync.barrier()?;
        sync.barrier()
    }
}

fn permissions(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    match ep.rank() {
        0 => {
            let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
            let only1 = ExportOptions::new().importers([ep.proc_of(1).ctx("rank")?]);
            ep.export(20, &r, only1.clone()).ctx("export")?;
            ensure!(
                matches!(
                    ep.export(
                        20,
                        &ep.alloc(64, MemKind::Shared).ctx("alloc")?,
                        ExportOptions::new()
                    ),
                    Err(Error::BufIdInUse(20))
                ),
                "duplicate id"
            );
            ensure!(
                matches!(
                    ep.export(22, &r, ExportOptions::new()),
                    Err(Error::Overlap(22))
                ),
                "overlapping buffers"
            );
            ensure!(
                matches!(ep.unexport(999), Err(Error::NoSuchBuffer(999))),
                "unexport unknown"
            );
            ensure!(
                matches!(
                    ep.post_redir(20, &r, 0, 0, 4),
                    Err(Error::NotRedirectable(20))
                ),
                "redirection on a plain buffer"
            );
            sync.barrier()?; // 20 exported
            sync.barrier()?; // rank 2 started its asynchronous import of 21
            let r2 = ep.alloc(64, MemKind::Private).ctx("alloc")?;
            ep.export(21, &r2, ExportOptions::new()).ctx("export 21")?;
            sync.barrier()?;
            ensure!(
                r.load_u32(0).ctx("read")? == 0x600D,
                "the permitted importer's data"
            );
            sync.barrier()
        }
        1 => {
            sync.barrier()?;
            let p = ep
                .import(ep.proc_of(0).ctx("rank")?, 20)
                .ctx("permitted import")?;
            p.send(0, &0x600Du32.to_ne_bytes()).ctx("send")?;
            sync.barrier()?;
            sync.barrier()?;
            sync.barrier()
        }
        _ => {
            sync.barrier()?;
            let owner = ep.proc_of(0).ctx("rank")?;
            ensure!(
                matches!(ep.import(owner, 20), Err(Error::PermissionDenied(20))),
                "import without permission refused"
            );
            let mut req = ep.import_async(owner, 21).ctx("import async")?;
            ensure!(
                req.status().ctx("status")?.is_none(),
                "pending before the export"
            );
            sync.barrier()?;
            let mut got = None;
            wait_for(ep, Some(0), "asynchronous import", || match req.status() {
                Ok(Some(p)) => {
                    got = Some(Ok(p));
                    true
                }
                Ok(None) => false,
                Err(e) => {
                    got = Some(Err(e));
                    true
                }
            })?;
            let p = got.expect("set").ctx("async import")?;
            ensure!(p.len() == 64, "async import length");
            sync.barrier()?;
            sync.barrier()
        }
    }
}

fn ordering(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const LEN: usize = 64 * 1024;
    const N: u32 = 1500;
    for (kind, data_id, flag_id, n) in [
        (MemKind::Shared, 30, 31, N),
        (MemKind::Private, 32, 33, N / 3),
    ] {
        let len = if kind == MemKind::Shared { LEN } else { 4096 };
        if ep.rank() == 1 {
            let a = ep.alloc(len, kind).ctx("alloc")?;
            let f = ep.alloc(4, kind).ctx("alloc")?;
            ep.export(data_id, &a, ExportOptions::new()).ctx("export")?;
            ep.export(flag_id, &f, ExportOptions::new()).ctx("export")?;
            sync.barrier()?;
            let mut snap = vec![0u8; len];
            let start = Instant::now();
            loop {
                let flag = f.load_u32(0).ctx("flag")?;
                let last = a.load_u32(len - 4).ctx("last")?;
                a.read(0, &mut snap).ctx("read")?;
                let min = snap
                    .chunks_exact(4)
                    .map(|w| u32::from_ne_bytes(w.try_into().expect("word")))
                    .min()
                    .expect("words");
                ensure!(
                    min >= last,
                    "{kind:?}: saw last word {last} but an earlier word {min}"
                );
                ensure!(
                    min >= flag,
                    "{kind:?}: flag {flag} arrived before message {flag}'s data ({min})"
                );
                if flag == n {
                    break;
                }
                ensure!(start.elapsed() < WAIT_LIMIT, "timed out");
                ep.check_peer(ep.proc_of(0).ctx("rank")?).ctx("sender")?;
            }
            sync.barrier()?;
        } else {
            sync.barrier()?;
            let owner = ep.proc_of(1).ctx("rank")?;
            let a = ep.import(owner, data_id).ctx("import")?;
            let f = ep.import(owner, flag_id).ctx("import")?;
            for i in 1..=n {
                a.send(0, &words(i, len / 4)).ctx("send data")?;
                if i % 7 == 0 || i == n {
                    f.send(0, &i.to_ne_bytes()).ctx("send flag")?;
                }
            }
            sync.barrier()?;
        }
    }
    Ok(())
}

fn unexport_while_sending(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const B: BufId = 40;
    if ep.rank() == 0 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        ep.export(B, &r, ExportOptions::new()).ctx("export")?;
        sync.barrier()?;
        wait_for(ep, Some(1), "sends to land", || {
            r.load_u32(4092).unwrap_or(0) >= 200
        })?;
        ep.unexport(B).ctx("unexport")?;
        let snap = read_all(&r);
        let counts = sync.exchange(0)?; // the sender has seen its error
        ensure!(read_all(&r) == snap, "data written after unexport returned");
        ensure!(counts[1] >= 200, "sender reports {} sends", counts[1]);
        let last = u32::from_ne_bytes(snap[4092..].try_into().expect("word"));
        ensure!(
            last <= counts[1],
            "last word {last} beyond the {} successful sends",
            counts[1]
        );
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(0).ctx("rank")?, B).ctx("import")?;
        let mut i = 0u32;
        let err = loop {
            match p.send(0, &words(i + 1, 1024)) {
                Ok(()) => i += 1,
                Err(e) => break e,
            }
            if i > 50_000_000 {
                return Err("unexport never took effect".into());
            }
        };
        ensure!(
            matches!(err, Error::Unexported),
            "sender's error is Unexported, got {err}"
        );
        ensure!(
            matches!(p.send(0, &[0; 4]), Err(Error::Unexported)),
            "and stays so"
        );
        sync.exchange(i)?;
        Ok(())
    }
}

fn peer_killed(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 2 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        ep.export(50, &r, ExportOptions::new()).ctx("export")?;
        let _p = ep.import(ep.proc_of(0).ctx("rank")?, 52).ctx("import")?;
        sync.barrier()?;
        sync.barrier()?;
        die();
    }
    let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
    if ep.rank() == 0 {
        ep.export(52, &r, ExportOptions::new()).ctx("export")?;
    }
    sync.barrier()?;
    let victim = ep.proc_of(2).ctx("rank")?;
    let p = ep.import(victim, 50).ctx("import")?;
    let pending = ep.import_async(victim, 51).ctx("import async")?;
    sync.barrier()?;
    // The victim is dying: sends must start failing with PeerLost, in bounded time.
    let start = Instant::now();
    let err = loop {
        if let Err(e) = p.send(0, &[1; 64]) {
            break e;
        }
        ensure!(
            start.elapsed() < WAIT_LIMIT,
            "sends to a dead peer keep succeeding"
        );
        std::thread::yield_now();
    };
    ensure!(
        matches!(err, Error::PeerLost(_)),
        "send to a dead peer: {err}"
    );
    ensure!(!ep.peer_alive(victim), "the victim is reported dead");
    ensure!(
        matches!(ep.check_peer(victim), Err(Error::PeerLost(_))),
        "check_peer"
    );
    ensure!(
        matches!(pending.wait(), Err(Error::PeerLost(_))),
        "an import waiting on the dead exporter fails"
    );
    ensure!(
        matches!(ep.import(victim, 50), Err(Error::PeerLost(_))),
        "new import from the dead peer fails"
    );
    ensure!(
        matches!(p.get_data(0, &mut [0u8; 4]), Err(Error::PeerLost(_))),
        "remote read from the dead peer"
    );
    ensure!(
        sync.barrier().is_err(),
        "a barrier with the dead peer fails instead of hanging"
    );
    if ep.rank() == 0 {
        // The dead rank had imported 52: unexport must not wait for it.
        ep.unexport(52).ctx("unexport with a dead importer")?;
    }
    Ok(())
}

type Log = Arc<Mutex<Vec<Notification>>>;

fn logging_export(ep: &Endpoint, id: BufId, r: &Region) -> std::result::Result<Log, String> {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    ep.export(
        id,
        r,
        ExportOptions::new().handler(move |n| l.lock().expect("log").push(n)),
    )
    .ctx("export")?;
    Ok(log)
}

fn notify_args(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let log = logging_export(ep, 60, &r)?;
        let plain = ep.alloc(64, MemKind::Shared).ctx("alloc")?;
        ep.export(61, &plain, ExportOptions::new()).ctx("export")?;
        sync.barrier()?;
        sync.barrier()?;
        wait_for(ep, None, "two notifications", || {
            log.lock().expect("log").len() >= 2
        })?;
        let got = log.lock().expect("log").clone();
        ensure!(got.len() == 2, "exactly two notifications, got {got:?}");
        ensure!(
            got[0]
                == Notification {
                    buf: 60,
                    offset: 92,
                    value: 0xABCD_0001
                },
            "first: {:?}",
            got[0]
        );
        ensure!(
            got[1]
                == Notification {
                    buf: 60,
                    offset: 0,
                    value: 0x77
                },
            "second: {:?}",
            got[1]
        );
        ensure!(
            r.load_u32(92).ctx("read")? == 0x55,
            "memory holds the later plain send"
        );
        ensure!(
            plain.load_u32(60).ctx("read")? == 9,
            "data of a notification without handler landed"
        );
        Ok(())
    } else {
        sync.barrier()?;
        let owner = ep.proc_of(1).ctx("rank")?;
        let p = ep.import(owner, 60).ctx("import")?;
        let q = ep.import(owner, 61).ctx("import")?;
        q.send_notify(0, &words(9, 16))
            .ctx("notify without handler")?;
        let mut msg = words(3, 8);
        msg[28..].copy_from_slice(&0xABCD_0001u32.to_ne_bytes());
        p.send_notify(64, &msg).ctx("send_notify")?;
        p.send(92, &0x55u32.to_ne_bytes()).ctx("overwrite")?;
        p.send_notify(0, &0x77u32.to_ne_bytes())
            .ctx("send_notify")?;
        sync.barrier()
    }
}

fn notify_blocking(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const N: u32 = 20;
    if ep.rank() == 1 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let inner: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
        let (l, inn, weak) = (log.clone(), inner.clone(), ep.downgrade());
        ep.export(
            70,
            &r,
            ExportOptions::new().handler(move |n| {
                if n.value == 1000 {
                    // Inside a handler: paired block/unblock is fine, an unconditional
                    // unblock is an error.
                    if let Some(ep) = weak.upgrade() {
                        ep.block_notifications();
                        let paired = ep.unblock_notifications();
                        let extra = ep.unblock_notifications();
                        inn.lock()
                            .expect("log")
                            .push(format!("{paired:?} {:?}", extra.map_err(|e| e.code())));
                    }
                } else {
                    l.lock().expect("log").push(n);
                }
            }),
        )
        .ctx("export")?;
        ep.block_notifications();
        ep.block_notifications();
        sync.barrier()?;
        sync.barrier()?; // all N sent
        wait_for(ep, Some(0), "notifications to queue", || {
            ep.notifications_pending().0 == N as usize
        })?;
        ensure!(
            log.lock().expect("log").is_empty(),
            "a handler ran while blocked"
        );
        ensure!(
            ep.unblock_notifications().ctx("unblock")? == 0,
            "inner unblock returns 0"
        );
        ensure!(
            log.lock().expect("log").is_empty(),
            "a handler ran while still blocked"
        );
        ensure!(
            ep.unblock_notifications().ctx("unblock")? > 0,
            "outer unblock returns > 0"
        );
        let vals: Vec<u32> = log.lock().expect("log").iter().map(|n| n.value).collect();
        ensure!(
            vals == (0..N).collect::<Vec<_>>(),
            "queued notifications delivered in order by unblock: {vals:?}"
        );
        ensure!(
            ep.unblock_notifications().ctx("unblock")? > 0,
            "unblock when unblocked: no effect, > 0"
        );
        sync.barrier()?;
        wait_for(ep, None, "the handler's report", || {
            !inner.lock().expect("log").is_empty()
        })?;
        let rep = inner.lock().expect("log")[0].clone();
        let want = format!("Ok(0) Err({})", Error::UnblockInHandler.code());
        ensure!(rep == want, "inside a handler: {rep}, want {want}");
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, 70).ctx("import")?;
        for v in 0..N {
            p.send_notify_wait(4 * v as usize, &v.to_ne_bytes())
                .ctx("send_notify")?;
        }
        sync.barrier()?;
        sync.barrier()?;
        p.send_notify(0, &1000u32.to_ne_bytes())
            .ctx("send_notify")?;
        Ok(())
    }
}

fn notify_overflow(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const N: u32 = 12;
    const CAP: usize = 5;
    if ep.rank() == 1 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let log = logging_export(ep, 75, &r)?;
        ep.set_notify_queue(CAP);
        ep.block_notifications();
        sync.barrier()?;
        sync.barrier()?;
        wait_for(ep, None, "notifications to arrive", || {
            let (q, lost) = ep.notifications_pending();
            q as u64 + lost == N as u64
        })?;
        let lost = u64::from(N) - CAP as u64;
        match ep.unblock_notifications() {
            Err(Error::NotifyOverflow(n)) => {
                ensure!(n == lost, "overflow reports {n}, want {lost}")
            }
            other => return Err(format!("unblock after overflow: {other:?}")),
        }
        let vals: Vec<u32> = log.lock().expect("log").iter().map(|n| n.value).collect();
        ensure!(
            vals == (0..CAP as u32).collect::<Vec<_>>(),
            "the queued ones are delivered: {vals:?}"
        );
        ensure!(
            ep.unblock_notifications().ctx("unblock")? > 0,
            "reported once"
        );
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, 75).ctx("import")?;
        for v in 0..N {
            p.send_notify_wait(0, &v.to_ne_bytes()).ctx("send_notify")?;
        }
        sync.barrier()
    }
}

fn handlers_serial(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const N: u32 = 1500;
    if ep.rank() == 0 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let inside = Arc::new(AtomicU32::new(0));
        let overlaps = Arc::new(AtomicU32::new(0));
        let order_errors = Arc::new(AtomicU32::new(0));
        let last = Arc::new(Mutex::new([0u32; 3]));
        let (i, o, oe, l) = (
            inside.clone(),
            overlaps.clone(),
            order_errors.clone(),
            last.clone(),
        );
        ep.export(
            80,
            &r,
            ExportOptions::new().handler(move |n| {
                if i.fetch_add(1, Ordering::SeqCst) != 0 {
                    o.fetch_add(1, Ordering::SeqCst);
                }
                let (from, seq) = ((n.value >> 24) as usize, n.value & 0xFF_FFFF);
                let mut l = l.lock().expect("last");
                if from > 2 || seq != l[from] + 1 {
                    oe.fetch_add(1, Ordering::SeqCst);
                }
                if from <= 2 {
                    l[from] = seq;
                }
                drop(l);
                i.fetch_sub(1, Ordering::SeqCst);
            }),
        )
        .ctx("export")?;
        ep.set_notify_queue(4 * N as usize);
        sync.barrier()?;
        sync.barrier()?;
        wait_for(ep, None, "every notification", || {
            ep.notifications_delivered() >= 2 * N as u64
        })?;
        ensure!(overlaps.load(Ordering::SeqCst) == 0, "handlers overlapped");
        ensure!(
            order_errors.load(Ordering::SeqCst) == 0,
            "a sender's notifications out of order"
        );
        ensure!(*last.lock().expect("last") == [0, N, N], "all delivered");
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(0).ctx("rank")?, 80).ctx("import")?;
        let off = 4 * ep.rank();
        for s in 1..=N {
            let v = (ep.rank() as u32) << 24 | s;
            p.send_notify_wait(off, &v.to_ne_bytes())
                .ctx("send_notify")?;
        }
        sync.barrier()
    }
}

fn redirection(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    const B: BufId = 90;
    const BIG: usize = 8 << 20;
    /// Bounds on the tries at a redirection posted during an arrival (case c).
    const REDIR_ATTEMPTS: u32 = 200;
    const REDIR_TRYING: Duration = Duration::from_secs(30);
    if ep.rank() == 1 {
        let def = ep.alloc(BIG, MemKind::Shared).ctx("alloc")?;
        let dest = ep.alloc(BIG, MemKind::Private).ctx("alloc")?;
        ep.export(B, &def, ExportOptions::new().redirectable())
            .ctx("export")?;
        ensure!(ep.data_end(B).ctx("data_end")?.is_none(), "no data yet");
        // (a) posted before arrival: the whole window goes to the destination.
        ep.post_redir(B, &dest, 0, 0, 16384).ctx("post")?;
        ensure!(
            matches!(ep.post_redir(B, &dest, 0, 0, 4), Err(Error::RedirPosted(B))),
            "one posted redirection at a time"
        );
        sync.barrier()?;
        sync.barrier()?;
        let r = ep.end_redir(B).ctx("end")?;
        ensure!(
            r == crate::Redirected {
                buf_offset: 0,
                len: 16384
            },
            "before arrival: {r:?}"
        );
        let mut got = vec![0u8; 16384];
        dest.read(0, &mut got).ctx("read")?;
        ensure!(
            got == pattern(16384, 1),
            "redirected data in the destination"
        );
        def.read(0, &mut got).ctx("read")?;
        let nz = got.iter().position(|b| *b != 0);
        ensure!(
            nz.is_none(),
            "nothing in the default buffer: first non-zero byte at {nz:?}"
        );
        ensure!(
            ep.data_end(B).ctx("data_end")? == Some(16380),
            "data_end is the last word's offset"
        );
        ep.clear_data_end(B).ctx("clear")?;
        ensure!(ep.data_end(B).ctx("data_end")?.is_none(), "cleared");
        // (b) posted after arrival: nothing redirected, data in the default buffer.
        sync.barrier()?;
        sync.barrier()?;
        ep.post_redir(B, &dest, 0, 0, 8192).ctx("post")?;
        let r = ep.end_redir(B).ctx("end")?;
        ensure!(r.len == 0, "after arrival: {r:?}");
        let mut got = vec![0u8; 8192];
        def.read(0, &mut got).ctx("read")?;
        ensure!(got == pattern(8192, 2), "data in the default buffer");
        // (c) posted during arrival: the rest of the message is redirected, reported exactly.
        // Whether the posting lands inside the few milliseconds of an arrival is up to the
        // scheduler (two ranks and their progress threads share the cores), so it is tried
        // until it does, within a bound.
        let mut partial = false;
        let tries = Instant::now();
        for attempt in 0..REDIR_ATTEMPTS {
            def.fill(0, BIG, 0).ctx("zero")?;
            dest.fill(0, BIG, 0).ctx("zero")?;
            // Ready before the barrier: the sender starts right after it.
            let marker = pattern(BIG, 100 + attempt);
            let first = u32::from_ne_bytes(marker[..4].try_into().expect("word"));
            sync.barrier()?;
            // Spinning, never asleep: the sender rings only when its whole message is in.
            let mut spins = 0u32;
            let start = Instant::now();
            while def.load_u32(0).unwrap_or(0) != first {
                ensure!(
                    start.elapsed() < WAIT_LIMIT,
                    "timed out waiting for the first chunk"
                );
                crate::pace::relax(&mut spins);
            }
            ep.post_redir(B, &dest, 0, 0, BIG).ctx("post during")?;
            sync.barrier()?;
            let r = ep.end_redir(B).ctx("end")?;
            let (mut d, mut x) = (vec![0u8; BIG], vec![0u8; BIG]);
            def.read(0, &mut d).ctx("read")?;
            dest.read(0, &mut x).ctx("read")?;
            if r.len == 0 {
                ensure!(d == marker, "unredirected message in the default buffer");
            } else {
                ensure!(
                    r.buf_offset > 0 && r.buf_offset + r.len == BIG,
                    "partial redirection {r:?}"
                );
                ensure!(
                    d[..r.buf_offset] == marker[..r.buf_offset],
                    "head in the default buffer"
                );
                ensure!(
                    x[r.buf_offset..] == marker[r.buf_offset..],
                    "tail in the destination"
                );
                ensure!(
                    x[..r.buf_offset].iter().all(|b| *b == 0),
                    "nothing else in the destination"
                );
                partial = true;
            }
            let stop = partial || attempt + 1 == REDIR_ATTEMPTS || tries.elapsed() > REDIR_TRYING;
            sync.exchange(stop as u32)?;
            if stop {
                break;
            }
        }
        ensure!(
            partial,
            "no partial redirection happened in {REDIR_ATTEMPTS} attempts or {REDIR_TRYING:?}"
        );
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, B).ctx("import")?;
        p.send(0, &pattern(16384, 1)).ctx("send")?;
        sync.barrier()?;
        sync.barrier()?;
        p.send(0, &pattern(8192, 2)).ctx("send")?;
        sync.barrier()?;
        for attempt in 0..REDIR_ATTEMPTS {
            // Made before the barrier: after it, only the send competes for the cores.
            let message = pattern(BIG, 100 + attempt);
            sync.barrier()?;
            p.send(0, &message).ctx("send big")?;
            sync.barrier()?;
            if sync.exchange(0)?[1] != 0 {
                break;
            }
        }
        Ok(())
    }
}

fn remote_read(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let a = ep.alloc(8192, MemKind::Shared).ctx("alloc")?;
        let b = ep.alloc(4096, MemKind::Private).ctx("alloc")?;
        a.write(0, &pattern(8192, 7)).ctx("fill")?;
        b.write(0, &pattern(4096, 8)).ctx("fill")?;
        ep.export(100, &a, ExportOptions::new()).ctx("export")?;
        ep.export(101, &b, ExportOptions::new()).ctx("export")?;
        sync.barrier()?;
        sync.barrier()
    } else {
        sync.barrier()?;
        let owner = ep.proc_of(1).ctx("rank")?;
        for (id, len, seed) in [(100, 8192, 7), (101, 4096, 8)] {
            let p = ep.import(owner, id).ctx("import")?;
            let want = pattern(len, seed);
            let mut got = vec![0u8; len];
            p.get_data(0, &mut got).ctx("get_data")?;
            ensure!(got == want, "remote read of buffer {id}");
            let a = p.get_data_async(4, 16).ctx("get_data_async")?;
            ensure!(
                a.wait().ctx("async read")? == want[4..20],
                "asynchronous remote read"
            );
            let mut out = vec![0u8; 8];
            ensure!(
                matches!(
                    p.get_data(len - 4, &mut out),
                    Err(Error::OutOfBounds { .. })
                ),
                "read past the end"
            );
            let mut x = [0u8; 4];
            ep.get_at(p.dest_addr() + 8, &mut x).ctx("get by address")?;
            ensure!(x == want[8..12], "remote read by DestSpace address");
        }
        sync.barrier()
    }
}

fn automatic_update(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let log = logging_export(ep, 110, &r)?;
        sync.barrier()?;
        sync.barrier()?;
        for i in 0..4u32 {
            ensure!(
                r.load_u32(4 * i as usize).ctx("read")? == 100 + i,
                "AU store {i} propagated"
            );
        }
        let mut w = vec![0u8; 32];
        r.read(16, &mut w).ctx("read")?;
        ensure!(w == pattern(32, 3), "AU write propagated");
        for i in 0..16u32 {
            ensure!(
                r.load_u32(1024 + 4 * i as usize).ctx("read")? == 500 + i,
                "combined store {i}"
            );
        }
        ensure!(
            r.load_u32(2048).ctx("read")? == 0xA0,
            "AU after DU to the same word stays ordered"
        );
        wait_for(ep, Some(0), "the AU notification", || {
            !log.lock().expect("log").is_empty()
        })?;
        sync.barrier()?; // sender done: no more notifications
        let got = log.lock().expect("log").clone();
        ensure!(
            got == vec![Notification {
                buf: 110,
                offset: 1024 + 60,
                value: 515
            }],
            "one notification per combined packet, with its last word: {got:?}"
        );
        ep.unexport(110).ctx("unexport")?;
        let snap = read_all(&r);
        sync.barrier()?; // the sender tries its bindings again
        sync.barrier()?;
        ensure!(
            read_all(&r) == snap,
            "automatic update wrote after unexport"
        );
        Ok(())
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, 110).ctx("import")?;
        let b = p.bind(AuOptions::default()).ctx("bind")?;
        for i in 0..4u32 {
            b.store_u32(4 * i as usize, 100 + i).ctx("store")?;
        }
        b.write(16, &pattern(32, 3)).ctx("write")?;
        ensure!(b.load_u32(0).ctx("local")? == 100, "stores are local too");
        ensure!(
            matches!(b.store_u32(4096, 1), Err(Error::OutOfBounds { .. })),
            "AU store out of bounds"
        );
        let local = ep.alloc(64, MemKind::Private).ctx("alloc")?;
        let c = p
            .bind_region(
                local,
                1024,
                AuOptions {
                    combining: true,
                    notify: true,
                },
            )
            .ctx("bind combining")?;
        {
            let batch = c.batch();
            for i in 0..16u32 {
                batch.store_u32(4 * i as usize, 500 + i).ctx("store")?;
            }
        }
        p.send(2048, &0x0Fu32.to_ne_bytes()).ctx("DU")?;
        b.store_u32(2048, 0xA0).ctx("AU after DU")?;
        sync.barrier()?;
        sync.barrier()?;
        sync.barrier()?; // unexported
        ensure!(
            matches!(b.store_u32(0, 1), Err(Error::Unexported)),
            "AU store after unexport"
        );
        ensure!(
            matches!(b.write(16, &[0; 8]), Err(Error::Unexported)),
            "AU write after unexport"
        );
        // A combining store may be buffered (software combining: the flush fails) or refused
        // at once (a transport that packetizes stores itself checks its page table first).
        let stored = c.store_u32(0, 1);
        let flushed = c.flush();
        ensure!(
            matches!(stored, Err(Error::Unexported))
                || (stored.is_ok() && matches!(flushed, Err(Error::Unexported))),
            "combining store after unexport: {stored:?}, flush: {flushed:?}"
        );
        sync.barrier()
    }
}

fn async_send(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
        let log = logging_export(ep, 120, &r)?;
        sync.barrier()?;
        sync.barrier()?;
        let mut got = vec![0u8; 256];
        r.read(0, &mut got).ctx("read")?;
        ensure!(got == pattern(256, 5), "asynchronous send landed");
        wait_for(ep, None, "async notification", || {
            !log.lock().expect("log").is_empty()
        })?;
        let n = log.lock().expect("log")[0];
        ensure!(n.offset == 512 + 60 && n.value == 42, "async notify: {n:?}");
        // Order: asynchronous sends, then a blocking one into another buffer; once its flag is
        // here, every asynchronous message before it is too.
        let big = ep.alloc(BIG_ASYNC, MemKind::Shared).ctx("alloc")?;
        ep.export(121, &big, ExportOptions::new()).ctx("export")?;
        sync.barrier()?;
        wait_for(ep, Some(0), "the flag after the async sends", || {
            r.load_u32(1024).unwrap_or(0) == 77
        })?;
        let mut got = vec![0u8; BIG_ASYNC];
        big.read(0, &mut got).ctx("read")?;
        ensure!(
            got[..BIG_ASYNC / 2] == pattern(BIG_ASYNC / 2, 9)[..],
            "first async message"
        );
        ensure!(
            got[BIG_ASYNC / 2..] == pattern(BIG_ASYNC / 2, 10)[..],
            "second async message"
        );
        sync.barrier()
    } else {
        sync.barrier()?;
        let p = ep.import(ep.proc_of(1).ctx("rank")?, 120).ctx("import")?;
        let mut h = p.send_async(0, pattern(256, 5)).ctx("send_async")?;
        wait_for(ep, None, "async completion", || {
            matches!(h.status(), Ok(crate::AsyncStatus::Done))
        })?;
        let data = h.wait().ctx("wait")?;
        ensure!(
            *data == pattern(256, 5)[..],
            "the request gives its data back"
        );
        let mut msg = words(1, 16);
        msg[60..].copy_from_slice(&42u32.to_ne_bytes());
        p.send_async_notify(512, msg)
            .ctx("async notify")?
            .wait()
            .ctx("wait")?;
        ensure!(
            matches!(
                p.send_async(4094, vec![0u8; 4]),
                Err(Error::Unaligned { .. })
            ),
            "bad async send refused at once"
        );
        sync.barrier()?;
        sync.barrier()?; // 121 exported
        let owner = ep.proc_of(1).ctx("rank")?;
        let q = ep.import(owner, 121).ctx("import")?;
        let a = q.send_async(0, pattern(BIG_ASYNC / 2, 9)).ctx("async 1")?;
        let b = q
            .send_async(BIG_ASYNC / 2, pattern(BIG_ASYNC / 2, 10))
            .ctx("async 2")?;
        let g = q.get_data_async(0, 64).ctx("async read")?;
        p.send(1024, &77u32.to_ne_bytes())
            .ctx("blocking send after them")?;
        a.wait().ctx("wait 1")?;
        b.wait().ctx("wait 2")?;
        ensure!(
            g.wait().ctx("read")? == pattern(64, 9),
            "an asynchronous read after asynchronous sends sees them"
        );
        sync.barrier()
    }
}

/// Size of the asynchronous messages of `async_send`: big enough to be in flight a while.
const BIG_ASYNC: usize = 8 << 20;

/// Both ranks' handlers read the other's buffer at the same time: remote read must not wait
/// for the owner's handlers (with an emulated read, for its notification thread to be free).
fn handlers_read_each_other(ep: &Endpoint) -> Check {
    let mut sync = Sync::new(ep)?;
    let me = ep.rank() as u32;
    let r = ep.alloc(4096, MemKind::Shared).ctx("alloc")?;
    r.store_u32(64, 1000 + me).ctx("fill")?;
    let peer_proxy: Arc<Mutex<Option<Proxy>>> = Arc::new(Mutex::new(None));
    let got = Arc::new(Mutex::new(None::<std::result::Result<u32, String>>));
    let (pp, g) = (peer_proxy.clone(), got.clone());
    ep.export(
        130,
        &r,
        ExportOptions::new().handler(move |_| {
            let p = pp.lock().expect("proxy").clone();
            let res = match p {
                Some(p) => {
                    let mut w = [0u8; 4];
                    p.get_data(64, &mut w)
                        .map(|()| u32::from_ne_bytes(w))
                        .map_err(|e| e.to_string())
                }
                None => Err("no proxy yet".into()),
            };
            *g.lock().expect("got") = Some(res);
        }),
    )
    .ctx("export")?;
    sync.barrier()?;
    let peer = 1 - ep.rank();
    let p = ep
        .import(ep.proc_of(peer).ctx("rank")?, 130)
        .ctx("import")?;
    *peer_proxy.lock().expect("proxy") = Some(p.clone());
    sync.barrier()?;
    p.send_notify(0, &7u32.to_ne_bytes()).ctx("notify")?;
    wait_for(ep, None, "the handler's remote read", || {
        got.lock().expect("got").is_some()
    })?;
    let res = got.lock().expect("got").take().expect("some");
    *peer_proxy.lock().expect("proxy") = None;
    ensure!(
        res == Ok(1000 + peer as u32),
        "handler's remote read: {res:?}"
    );
    sync.barrier()
}
