//! The VRPC server: one polling loop over the listen buffer and every binding's call queue.
//!
//! The seed's libraries poll rather than block (seed 003 §6, "Polling vs. Blocking"): the
//! loop spins over its queues, and only after a long idle spell (about a second without a
//! call) does it back off to short sleeps, so that an idle server does not hold a processor.
//! Calls are served one at a time, in the order the loop finds them; a server must finish one
//! call before the next in any case (seed 003 §4.2).

use super::link::{check_queue, export_queue, import_within, Link, ACCEPT, CONTROL};
use super::{DEFAULT_PORT, DEFAULT_QUEUE, LISTEN_BASE};
use crate::client::DEFAULT_TIMEOUT;
use crate::record::DEFAULT_MAX_RECORD;
use crate::server::{Registry, Service};
use crate::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vmmc::{BufId, Endpoint, ExportOptions, MemKind, Region};

/// Bytes of a listen slot: queue id, queue size, bind sequence (the flag), a spare word.
pub(crate) const SLOT: usize = 16;

/// The server thread's wait for requests, in `vmmc::wait`'s counts.
static SERVER_SITE: vmmc::wait::Site = vmmc::wait::Site::new("rpc.vrpc.server");
/// `wait_closed`'s wait.
static CLOSED_SITE: vmmc::wait::Site = vmmc::wait::Site::new("rpc.vrpc.closed");
/// How long the server waits for a binding client's queue to be importable.
const BIND_IMPORT: Duration = Duration::from_secs(1);
/// Idle turns between checks that the clients are alive.
const LIVENESS_EVERY: u32 = 1 << 12;

/// What a server has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Bindings accepted.
    pub accepted: u64,
    /// Bindings that ended, for any reason.
    pub closed: u64,
    /// Of those, bindings that ended because the client died or broke the protocol.
    pub lost: u64,
    /// Calls received.
    pub calls: u64,
    /// Bind requests refused (a client that died meanwhile, or a malformed request).
    pub refused: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    closed: AtomicU64,
    lost: AtomicU64,
    calls: AtomicU64,
    refused: AtomicU64,
}

impl Counters {
    fn get(&self) -> ServerStats {
        ServerStats {
            accepted: self.accepted.load(Ordering::Acquire),
            closed: self.closed.load(Ordering::Acquire),
            lost: self.lost.load(Ordering::Acquire),
            calls: self.calls.load(Ordering::Acquire),
            refused: self.refused.load(Ordering::Acquire),
        }
    }
}

/// Configures a [`VrpcServer`].
pub struct VrpcServerBuilder {
    ep: Endpoint,
    services: Vec<Arc<dyn Service>>,
    port: u16,
    queue: usize,
    max_record: usize,
    timeout: Option<Duration>,
}

/// A VRPC server running on a thread of its own ([`VrpcServerBuilder::start`]). Stopping it
/// ([`VrpcServer::shutdown`] or drop) closes every binding (waiting clients get
/// [`Error::ConnectionClosed`]) and withdraws the listen buffer.
pub struct VrpcServer {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<Result<(), Error>>>,
}

impl VrpcServer {
    /// A builder serving no service yet, on the default port, with the default queue size.
    pub fn builder(ep: &Endpoint) -> VrpcServerBuilder {
        VrpcServerBuilder {
            ep: ep.clone(),
            services: Vec::new(),
            port: DEFAULT_PORT,
            queue: DEFAULT_QUEUE,
            max_record: DEFAULT_MAX_RECORD,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }

    /// What the server has done so far.
    pub fn stats(&self) -> ServerStats {
        self.counters.get()
    }

    /// Waits until `n` bindings have ended (closed by their clients, or lost).
    pub fn wait_closed(&self, n: u64) -> Result<ServerStats, Error> {
        // The server thread rings this process's bell when a binding ends.
        let mut wait = vmmc::wait::Wait::new(&CLOSED_SITE);
        loop {
            let s = self.stats();
            if s.closed >= n {
                return Ok(s);
            }
            if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Err(Error::Config("the VRPC server thread has stopped".into()));
            }
            wait.idle();
        }
    }

    /// Stops the server; reports an error that ended its loop early.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        self.stop.store(true, Ordering::Release);
        // The server thread may sleep in its wait.
        vmmc::wait::ring_local();
        match self.thread.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Config("the VRPC server thread panicked".into())),
        }
    }
}

impl Drop for VrpcServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl VrpcServerBuilder {
    /// Adds a service (one version of one program).
    pub fn service(self, service: impl Service) -> Self {
        self.service_arc(Arc::new(service))
    }

    /// Adds a shared service.
    pub fn service_arc(mut self, service: Arc<dyn Service>) -> Self {
        self.services.push(service);
        self
    }

    /// Listens on `port` (the listen buffer [`LISTEN_BASE`]` + port`).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Size of each binding's call queue (a power of two).
    pub fn queue(mut self, bytes: usize) -> Self {
        self.queue = bytes;
        self
    }

    /// The largest call record accepted (default 16 MiB); a larger one ends its binding.
    pub fn max_record(mut self, max_record: usize) -> Self {
        self.max_record = max_record;
        self
    }

    /// How long a client may leave a call half sent, or a reply half read, before the
    /// server ends its binding (default 25 s; `None`: forever). The server never waits for
    /// such a client: the call or reply is kept in its binding while the server serves the
    /// others. A client that dies is detected either way.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Exports the listen buffer and serves on a new thread.
    pub fn start(self) -> Result<VrpcServer, Error> {
        let counters = Arc::new(Counters::default());
        let mut core = Core::new(self, counters.clone())?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        // On the simulator, the serving thread keeps its node's virtual time.
        let pacer = vmmc::pace::current();
        let thread = std::thread::Builder::new()
            .name("vrpc-server".into())
            .stack_size(crate::xdr::SERVER_STACK)
            .spawn(move || {
                vmmc::pace::install(pacer);
                core.run(&|| stop_flag.load(Ordering::Acquire), false)
            })?;
        Ok(VrpcServer {
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// Exports the listen buffer and serves on the calling thread until `clients` bindings
    /// have been made and have ended; returns what was done. When every other process of the
    /// job is gone before that (clients killed before they bound), fails with `PeerLost`
    /// instead of waiting for bindings that cannot come.
    pub fn serve(self, clients: u64) -> Result<ServerStats, Error> {
        let counters = Arc::new(Counters::default());
        let mut core = Core::new(self, counters.clone())?;
        let done = || {
            let s = counters.get();
            s.accepted >= clients && s.closed >= clients
        };
        core.run(&done, true)?;
        Ok(counters.get())
    }
}

/// The server's state, owned by its loop.
struct Core {
    ep: Endpoint,
    registry: Registry,
    listen: Region,
    listen_id: BufId,
    /// The last bind sequence seen in each rank's slot.
    seen: Vec<u32>,
    links: Vec<Link>,
    queue: usize,
    max_record: usize,
    timeout: Option<Duration>,
    counters: Arc<Counters>,
    /// The current reply, encoded after the mark's word.
    reply: Vec<u8>,
}

impl Core {
    fn new(b: VrpcServerBuilder, counters: Arc<Counters>) -> Result<Core, Error> {
        let registry = Registry::new(b.services)?;
        let queue = check_queue(b.queue)?;
        let size = b.ep.size();
        let listen = b.ep.alloc(size * SLOT, MemKind::Shared)?;
        let listen_id = LISTEN_BASE + BufId::from(b.port);
        match b.ep.export(listen_id, &listen, ExportOptions::new()) {
            Ok(()) => {}
            Err(vmmc::Error::BufIdInUse(_)) => {
                return Err(Error::Config(format!(
                    "VRPC port {} is already served by this process",
                    b.port
                )))
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Core {
            ep: b.ep,
            registry,
            listen,
            listen_id,
            seen: vec![0; size],
            links: Vec::new(),
            queue,
            max_record: b.max_record,
            timeout: b.timeout,
            counters,
            reply: Vec::new(),
        })
    }

    fn run(&mut self, stop: &dyn Fn() -> bool, alone_ends: bool) -> Result<(), Error> {
        let mut idle = 0u32;
        // Clients' requests land in the queues by transfers that ring this process's bell.
        let mut wait = vmmc::wait::Wait::new(&SERVER_SITE).background();
        loop {
            if stop() {
                return Ok(());
            }
            if self.turn() {
                idle = 0;
                wait = vmmc::wait::Wait::new(&SERVER_SITE).background();
                continue;
            }
            idle = idle.saturating_add(1);
            if wait.resting() || idle.is_multiple_of(LIVENESS_EVERY) {
                self.drop_dead();
                if alone_ends && self.links.is_empty() && self.alone() {
                    // One last look at the slots: a binding asked for before its client left.
                    if self.turn() {
                        continue;
                    }
                    if stop() {
                        return Ok(());
                    }
                    let s = self.counters.get();
                    return Err(Error::PeerLost(format!(
                        "every client process is gone after {} of the bindings waited for \
                         ({s:?})",
                        s.accepted
                    )));
                }
            }
            wait.idle();
        }
    }

    /// One pass over the queues and the listen slots; whether there was anything to do.
    fn turn(&mut self) -> bool {
        let mut busy = false;
        let mut i = 0;
        while i < self.links.len() {
            let link = &mut self.links[i];
            // A binding is judged stalled only after a look at what its client did since the
            // last turn, which may have been long ago (another binding's long call).
            if link.peer_closed() {
                self.end(i, false);
                busy = true;
            } else if link.sending() {
                // The rest of a reply, as the client makes room; its next call waits.
                match link.resume_send() {
                    Ok(true) => {
                        busy = true;
                        i += 1;
                    }
                    Ok(false) if link.stalled(self.timeout) => {
                        // The client stopped reading in the middle of its reply.
                        self.end(i, false);
                        busy = true;
                    }
                    Ok(false) => i += 1,
                    Err(_) => {
                        let closed = self.links[i].peer_closed();
                        self.end(i, !closed)
                    }
                }
            } else if !link.has_data() && link.stalled(self.timeout) {
                // The client stopped in the middle of a call.
                self.end(i, false);
                busy = true;
            } else if link.has_data() {
                busy = true;
                match serve_one(
                    link,
                    &self.registry,
                    &mut self.reply,
                    self.max_record,
                    &self.counters,
                ) {
                    Ok(()) => i += 1,
                    // A client that closed its binding (and left) while the call or its reply
                    // was under way closed it: lost is a client gone without closing.
                    Err(_) => {
                        let closed = self.links[i].peer_closed();
                        self.end(i, !closed)
                    }
                }
            } else {
                i += 1;
            }
        }
        for rank in 0..self.seen.len() {
            let seq = self.listen.load_u32(rank * SLOT + 8).unwrap_or(0);
            if seq != self.seen[rank] {
                self.seen[rank] = seq;
                busy = true;
                // A client that died meanwhile, or asked for a queue we cannot take, is not
                // bound; a live one times out waiting.
                match self.accept(rank, seq) {
                    Ok(link) => {
                        self.links.push(link);
                        self.counters.accepted.fetch_add(1, Ordering::Release);
                    }
                    Err(_) => {
                        self.counters.refused.fetch_add(1, Ordering::Release);
                    }
                }
            }
        }
        busy
    }

    /// Ends binding `i` (dropping the link tells a live client).
    fn end(&mut self, i: usize, lost: bool) {
        self.links.swap_remove(i);
        if lost {
            self.counters.lost.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.closed.fetch_add(1, Ordering::Release);
        // `wait_closed` may sleep.
        vmmc::wait::ring_local();
    }

    /// Whether every other process of the job is gone (no binding can come any more).
    fn alone(&self) -> bool {
        let me = self.ep.rank();
        (0..self.ep.size())
            .filter(|&r| r != me)
            .filter_map(|r| self.ep.proc_of(r).ok())
            .all(|p| !self.ep.peer_alive(p))
    }

    fn drop_dead(&mut self) {
        let mut i = 0;
        while i < self.links.len() {
            if self.links[i].peer_alive() {
                i += 1;
            } else {
                self.end(i, true);
            }
        }
    }

    /// Makes the binding a client asked for in its slot.
    fn accept(&self, rank: usize, seq: u32) -> Result<Link, Error> {
        let mut ask = [0u8; 8];
        self.listen.read(rank * SLOT, &mut ask)?;
        let client_queue = BufId::from_ne_bytes([ask[0], ask[1], ask[2], ask[3]]);
        let client_cap =
            check_queue(u32::from_ne_bytes([ask[4], ask[5], ask[6], ask[7]]) as usize)?;
        let client = self.ep.proc_of(rank)?;
        // The client exported its queue before it wrote the slot: a queue that does not come
        // at once is a broken client, which must not hold up the others.
        let tx = import_within(&self.ep, client, client_queue, Some(BIND_IMPORT))?;
        if tx.len() < client_cap + CONTROL {
            return Err(Error::BadMessage(
                "VRPC bind: the client's queue is smaller than announced".into(),
            ));
        }
        let (rx, rx_id) = export_queue(&self.ep, self.queue, client)?;
        let mut answer = [0u8; 12];
        answer[..4].copy_from_slice(&rx_id.to_ne_bytes());
        answer[4..8].copy_from_slice(&(self.queue as u32).to_ne_bytes());
        answer[8..].copy_from_slice(&seq.to_ne_bytes());
        let link = Link::new(
            self.ep.clone(),
            client,
            (rx, rx_id, self.queue),
            (tx, client_cap),
            self.timeout,
        );
        // On failure, dropping the link withdraws the call queue.
        link.answer_bind(client_cap + ACCEPT, &answer)?;
        Ok(link)
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // Closing the bindings first tells waiting clients before the listen buffer goes.
        self.links.clear();
        let _ = self.ep.unexport(self.listen_id);
    }
}

/// Takes what has arrived on `link`; once it ends a call, dispatches the call and sends
/// the reply. A call whose last fragment has not arrived waits in the link, and the server
/// goes on with the other bindings.
fn serve_one(
    link: &mut Link,
    registry: &Registry,
    reply: &mut Vec<u8>,
    max_record: usize,
    counters: &Counters,
) -> Result<(), Error> {
    let Some(n) = link.poll_record(max_record)? else {
        return Ok(());
    };
    counters.calls.fetch_add(1, Ordering::Relaxed);
    let answered = registry.handle_at(&link.record()[..n], reply, 4);
    link.record_done();
    if answered {
        // What the client's queue has no room for goes out on later turns.
        link.offer_record(reply)?;
    }
    Ok(())
}
