//! The RPC server: hosts [`Service`]s, listens on TCP and UDP, dispatches each call by program,
//! version and procedure, answers errors with the right reply, and registers with rpcbind.
//!
//! ```no_run
//! use rpc::server::{DispatchError, Server, Service};
//!
//! struct Echo;
//! impl Service for Echo {
//!     fn program(&self) -> u32 { 0x2000_0001 }
//!     fn version(&self) -> u32 { 1 }
//!     fn dispatch(&self, procedure: u32, args: &[u8], reply: &mut Vec<u8>)
//!         -> Result<(), DispatchError> {
//!         match procedure {
//!             0 => Ok(()),
//!             1 => {
//!                 let s: String = rpc::xdr::from_bytes(args).map_err(|_| DispatchError::GarbageArgs)?;
//!                 rpc::xdr::to_writer(reply, &s).map_err(|_| DispatchError::SystemErr)
//!             }
//!             _ => Err(DispatchError::ProcUnavail),
//!         }
//!     }
//! }
//!
//! let server = Server::builder()
//!     .service(Echo)
//!     .listen_tcp("127.0.0.1:0".parse().unwrap())
//!     .register(true)
//!     .start()?;
//! println!("serving on {:?}", server.tcp_addr());
//! server.shutdown()?; // or drop it: both unregister from rpcbind
//! # Ok::<(), rpc::Error>(())
//! ```
//!
//! Each TCP connection is served by its own thread, calls on one connection in order; UDP
//! calls are served by one thread. A panic in a service is answered with `SYSTEM_ERR`.

use crate::msg::{
    AcceptStat, AuthStat, AuthSysParams, MsgBody, OpaqueAuth, RejectedReply, ReplyBody, RpcMsg,
    AUTH_NONE, AUTH_SYS, RPC_VERSION,
};
use crate::record::{read_record, write_record, DEFAULT_MAX_RECORD, MAX_FRAGMENT};
use crate::{rpcbind, xdr, Error};
use std::collections::HashMap;
use std::io::BufReader;
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// One version of one RPC program. Generated server stubs implement it.
pub trait Service: Send + Sync + 'static {
    /// The program number.
    fn program(&self) -> u32;
    /// The version number.
    fn version(&self) -> u32;
    /// Decodes `args` for `procedure`, runs it, and appends the XDR-encoded results to
    /// `reply`. Procedure 0 (the null procedure) is the dispatcher's to answer, too.
    fn dispatch(
        &self,
        procedure: u32,
        args: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), DispatchError>;
}

/// How a dispatch failed; each becomes the reply status of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DispatchError {
    /// `PROC_UNAVAIL`: no such procedure.
    ProcUnavail,
    /// `GARBAGE_ARGS`: the arguments could not be decoded.
    GarbageArgs,
    /// `SYSTEM_ERR`: the procedure failed.
    SystemErr,
}

/// The services of a server, and the reply to any call message. Shared by the socket server
/// and the VRPC server ([`crate::vrpc`]).
pub(crate) struct Registry {
    services: Vec<Arc<dyn Service>>,
}

/// Starts `reply` afresh after its first `base` bytes (room a transport keeps for itself).
fn restart(reply: &mut Vec<u8>, base: usize) {
    reply.resize(base, 0);
}

fn accepted(xid: u32, stat: AcceptStat, reply: &mut Vec<u8>, base: usize) {
    restart(reply, base);
    let msg = RpcMsg {
        xid,
        body: MsgBody::Reply(ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat,
        }),
    };
    // A reply header with an empty verifier always encodes.
    let _ = msg.encode(reply);
}

fn denied(xid: u32, rejected: RejectedReply, reply: &mut Vec<u8>, base: usize) {
    restart(reply, base);
    let msg = RpcMsg {
        xid,
        body: MsgBody::Reply(ReplyBody::Denied(rejected)),
    };
    let _ = msg.encode(reply);
}

fn check_auth(cred: &OpaqueAuth) -> Result<(), AuthStat> {
    match cred.flavor {
        AUTH_NONE => Ok(()),
        AUTH_SYS => xdr::from_bytes::<AuthSysParams>(&cred.body)
            .map(drop)
            .map_err(|_| AuthStat::BadCred),
        _ => Err(AuthStat::RejectedCred),
    }
}

impl Registry {
    /// A registry of `services`: at least one, each (program, version) once.
    pub(crate) fn new(services: Vec<Arc<dyn Service>>) -> Result<Registry, Error> {
        if services.is_empty() {
            return Err(Error::Config("a server needs at least one service".into()));
        }
        for (i, a) in services.iter().enumerate() {
            if services[..i]
                .iter()
                .any(|b| (a.program(), a.version()) == (b.program(), b.version()))
            {
                return Err(Error::Config(format!(
                    "program {} version {} added twice",
                    a.program(),
                    a.version()
                )));
            }
        }
        Ok(Registry { services })
    }

    /// Writes the reply to `request` into `reply`; false if no reply is due (not a call).
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) -> bool {
        self.handle_at(request, reply, 0)
    }

    /// [`Registry::handle`], writing the reply after the first `base` bytes of `reply`
    /// (their contents unspecified), which the caller keeps for its own header.
    pub(crate) fn handle_at(&self, request: &[u8], reply: &mut Vec<u8>, base: usize) -> bool {
        restart(reply, base);
        let Some(head) = request.get(..8) else {
            return false;
        };
        let xid = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if head[4..8] != [0, 0, 0, 0] {
            return false; // a reply, or no RPC message at all
        }
        let (call, args) = match RpcMsg::decode(request) {
            Ok((
                RpcMsg {
                    body: MsgBody::Call(call),
                    ..
                },
                args,
            )) => (call, args),
            _ => {
                accepted(xid, AcceptStat::GarbageArgs, reply, base);
                return true;
            }
        };
        if call.rpcvers != RPC_VERSION {
            let range = RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            };
            denied(xid, range, reply, base);
            return true;
        }
        if let Err(stat) = check_auth(&call.cred) {
            denied(xid, RejectedReply::AuthError(stat), reply, base);
            return true;
        }
        let versions = self.services.iter().filter(|s| s.program() == call.prog);
        let (low, high) = versions.clone().fold((u32::MAX, 0), |(lo, hi), s| {
            (lo.min(s.version()), hi.max(s.version()))
        });
        let Some(service) = self
            .services
            .iter()
            .find(|s| s.program() == call.prog && s.version() == call.vers)
        else {
            let stat = if versions.count() == 0 {
                AcceptStat::ProgUnavail
            } else {
                AcceptStat::ProgMismatch { low, high }
            };
            accepted(xid, stat, reply, base);
            return true;
        };
        accepted(xid, AcceptStat::Success, reply, base);
        // Deep enough to decode and drop a long linked list among the arguments.
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            crate::xdr::with_stack_for(args.len(), || service.dispatch(call.procedure, args, reply))
        }));
        let stat = match outcome {
            Ok(Ok(())) => return true,
            Ok(Err(DispatchError::ProcUnavail)) => AcceptStat::ProcUnavail,
            Ok(Err(DispatchError::GarbageArgs)) => AcceptStat::GarbageArgs,
            Ok(Err(DispatchError::SystemErr)) | Err(_) => AcceptStat::SystemErr,
        };
        accepted(xid, stat, reply, base);
        true
    }
}

/// Configures and starts a [`Server`].
pub struct ServerBuilder {
    services: Vec<Arc<dyn Service>>,
    tcp: Option<SocketAddr>,
    udp: Option<SocketAddr>,
    register: bool,
    replace_registrations: bool,
    max_record: usize,
}

/// State shared by the server's threads.
struct Shared {
    registry: Registry,
    stop: AtomicBool,
    max_record: usize,
    next_conn: AtomicU64,
    /// Open connections, so that stopping can shut them down.
    conns: Mutex<HashMap<u64, TcpStream>>,
    conn_threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A running RPC server. Stopping it ([`Server::shutdown`] or drop) closes its sockets, waits
/// for its threads and removes its rpcbind registrations.
pub struct Server {
    shared: Arc<Shared>,
    tcp_addr: Option<SocketAddr>,
    udp_addr: Option<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
    /// (program, version, protocol, address) registered with rpcbind.
    registrations: Vec<(u32, u32, u32, SocketAddr)>,
    stopped: bool,
}

impl Server {
    /// A builder with no services, listening (unless told otherwise) on TCP and UDP on
    /// ephemeral ports of every address, not registered with rpcbind.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            services: Vec::new(),
            tcp: None,
            udp: None,
            register: false,
            replace_registrations: false,
            max_record: DEFAULT_MAX_RECORD,
        }
    }

    /// The TCP address the server listens on.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// The UDP address the server listens on.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }

    /// Stops the server and removes its rpcbind registrations; reports a failure to remove.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        // Unregister first, so that no new client finds a server that is going away.
        let mut result = Ok(());
        for (prog, vers, prot, addr) in self.registrations.drain(..) {
            if let Err(e) = rpcbind::unregister(prog, vers, prot, addr) {
                result = Err(e);
            }
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocked accept and receive calls.
        if let Some(addr) = self.tcp_addr {
            let _ = TcpStream::connect_timeout(&reachable(addr), Duration::from_secs(1));
        }
        if let Some(addr) = self.udp_addr {
            let local = unspecified_like(addr);
            if let Ok(socket) = UdpSocket::bind(local) {
                let _ = socket.send_to(&[], reachable(addr));
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // No new connections now: close the open ones and wait for their threads.
        for conn in lock(&self.shared.conns).values() {
            let _ = conn.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *lock(&self.shared.conn_threads));
        for thread in threads {
            let _ = thread.join();
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unspecified_like(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// `addr` with an unspecified IP replaced by loopback, to connect to ourselves.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => (Ipv4Addr::LOCALHOST, a.port()).into(),
        SocketAddr::V6(a) if a.ip().is_unspecified() => (Ipv6Addr::LOCALHOST, a.port()).into(),
        other => other,
    }
}

impl ServerBuilder {
    /// Adds a service (one version of one program).
    pub fn service(self, service: impl Service) -> Self {
        self.service_arc(Arc::new(service))
    }

    /// Adds a shared service.
    pub fn service_arc(mut self, service: Arc<dyn Service>) -> Self {
        self.services.push(service);
        self
    }

    /// Listens on TCP at `addr` (port 0: an ephemeral port).
    pub fn listen_tcp(mut self, addr: SocketAddr) -> Self {
        self.tcp = Some(addr);
        self
    }

    /// Listens on UDP at `addr` (port 0: an ephemeral port).
    pub fn listen_udp(mut self, addr: SocketAddr) -> Self {
        self.udp = Some(addr);
        self
    }

    /// Whether to register every service with the local rpcbind on start (default false).
    pub fn register(mut self, register: bool) -> Self {
        self.register = register;
        self
    }

    /// Whether registering first removes whatever rpcbind has for each program and version
    /// (default false: an existing entry makes [`ServerBuilder::start`] fail with
    /// [`Error::RegistrationRefused`]). rpcgen's generated servers do this (`pmap_unset`,
    /// then `svc_register`), so that a server restarted after a crash takes over the entries
    /// its predecessor left; so do stubgen's `serve_<program>` functions.
    pub fn replace_registrations(mut self, replace: bool) -> Self {
        self.replace_registrations = replace;
        self
    }

    /// The largest call record accepted over TCP (default 16 MiB).
    pub fn max_record(mut self, max_record: usize) -> Self {
        self.max_record = max_record;
        self
    }

    /// Binds the sockets, registers with rpcbind if asked, and starts serving.
    pub fn start(self) -> Result<Server, Error> {
        let registry = Registry::new(self.services)?;
        let (tcp, udp) = match (self.tcp, self.udp) {
            (None, None) => {
                let any: SocketAddr = (Ipv4Addr::UNSPECIFIED, 0).into();
                (Some(any), Some(any))
            }
            other => other,
        };
        let listener = tcp.map(TcpListener::bind).transpose()?;
        let udp_socket = udp.map(UdpSocket::bind).transpose()?;
        let tcp_addr = listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let udp_addr = udp_socket.as_ref().map(UdpSocket::local_addr).transpose()?;
        let shared = Arc::new(Shared {
            registry,
            stop: AtomicBool::new(false),
            max_record: self.max_record,
            next_conn: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            conn_threads: Mutex::new(Vec::new()),
        });
        let mut server = Server {
            shared: shared.clone(),
            tcp_addr,
            udp_addr,
            threads: Vec::new(),
            registrations: Vec::new(),
            stopped: false,
        };
        if let Some(listener) = listener {
            let shared = shared.clone();
            server.threads.push(
                std::thread::Builder::new()
                    .name("rpc-accept".into())
                    .spawn(move || accept_loop(listener, shared))?,
            );
        }
        if let Some(socket) = udp_socket {
            let shared = shared.clone();
            server.threads.push(
                std::thread::Builder::new()
                    .name("rpc-udp".into())
                    .stack_size(crate::xdr::SERVER_STACK)
                    .spawn(move || udp_loop(socket, shared))?,
            );
        }
        if self.register {
            let endpoints = [
                (rpcbind::IPPROTO_TCP, tcp_addr),
                (rpcbind::IPPROTO_UDP, udp_addr),
            ];
            let services: Vec<(u32, u32)> = shared
                .registry
                .services
                .iter()
                .map(|s| (s.program(), s.version()))
                .collect();
            for (prog, vers) in services {
                if self.replace_registrations {
                    rpcbind::unset(prog, vers)?;
                }
                for (prot, addr) in endpoints {
                    if let Some(addr) = addr {
                        // On failure, dropping `server` removes what was registered so far.
                        rpcbind::register(prog, vers, prot, addr)?;
                        server.registrations.push((prog, vers, prot, addr));
                    }
                }
            }
        }
        Ok(server)
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // rather than spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        lock(&shared.conns).insert(id, handle);
        let conn_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("rpc-conn".into())
            .stack_size(crate::xdr::SERVER_STACK)
            .spawn(move || {
                serve_connection(stream, &conn_shared);
                lock(&conn_shared.conns).remove(&id);
            });
        let mut threads = lock(&shared.conn_threads);
        threads.retain(|t| !t.is_finished());
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(_) => {
                lock(&shared.conns).remove(&id);
            }
        }
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut request = Vec::new();
    let mut reply = Vec::new();
    while let Ok(true) = read_record(&mut reader, &mut request, shared.max_record) {
        if shared.registry.handle(&request, &mut reply)
            && write_record(&mut writer, &reply, MAX_FRAGMENT).is_err()
        {
            break;
        }
    }
}

fn udp_loop(socket: UdpSocket, shared: Arc<Shared>) {
    // A backstop: the stop flag is also checked when no datagram arrives for a while.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(500)));
    let mut request = vec![0u8; 65_536];
    let mut reply = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let Ok((n, peer)) = socket.recv_from(&mut request) else {
            continue;
        };
        if shared.registry.handle(&request[..n], &mut reply) {
            let _ = socket.send_to(&reply, peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::CallBody;

    struct Versioned(u32);
    impl Service for Versioned {
        fn program(&self) -> u32 {
            77
        }
        fn version(&self) -> u32 {
            self.0
        }
        fn dispatch(
            &self,
            procedure: u32,
            args: &[u8],
            reply: &mut Vec<u8>,
        ) -> Result<(), DispatchError> {
            match procedure {
                0 => Ok(()),
                1 => {
                    let v: u32 = xdr::from_bytes(args).map_err(|_| DispatchError::GarbageArgs)?;
                    xdr::to_writer(reply, &(v + self.0)).map_err(|_| DispatchError::SystemErr)
                }
                2 => Err(DispatchError::SystemErr),
                3 => panic!("service panics"),
                _ => Err(DispatchError::ProcUnavail),
            }
        }
    }

    fn registry() -> Registry {
        Registry {
            services: vec![
                Arc::new(Versioned(3)),
                Arc::new(Versioned(5)),
                Arc::new(Versioned(4)),
            ],
        }
    }

    fn call(
        rpcvers: u32,
        prog: u32,
        vers: u32,
        procedure: u32,
        cred: OpaqueAuth,
        args: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        RpcMsg {
            xid: 42,
            body: MsgBody::Call(CallBody {
                rpcvers,
                prog,
                vers,
                procedure,
                cred,
                verf: OpaqueAuth::none(),
            }),
        }
        .encode(&mut out)
        .unwrap();
        out.extend_from_slice(args);
        out
    }

    fn reply_to(request: &[u8]) -> (RpcMsg, Vec<u8>) {
        let mut reply = Vec::new();
        assert!(registry().handle(request, &mut reply));
        let (msg, rest) = RpcMsg::decode(&reply).unwrap();
        assert_eq!(msg.xid, 42);
        (msg, rest.to_vec())
    }

    fn stat_of(request: &[u8]) -> AcceptStat {
        match reply_to(request).0.body {
            MsgBody::Reply(ReplyBody::Accepted { stat, .. }) => stat,
            other => panic!("not accepted: {other:?}"),
        }
    }

    #[test]
    fn dispatch_by_program_version_and_procedure() {
        let none = OpaqueAuth::none;
        let (msg, results) = reply_to(&call(2, 77, 4, 1, none(), &[0, 0, 0, 10]));
        assert!(matches!(
            msg.body,
            MsgBody::Reply(ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            })
        ));
        assert_eq!(results, [0, 0, 0, 14]);
        assert_eq!(
            stat_of(&call(2, 78, 4, 1, none(), &[0, 0, 0, 10])),
            AcceptStat::ProgUnavail
        );
        assert_eq!(
            stat_of(&call(2, 77, 9, 1, none(), &[])),
            AcceptStat::ProgMismatch { low: 3, high: 5 }
        );
        assert_eq!(
            stat_of(&call(2, 77, 3, 9, none(), &[])),
            AcceptStat::ProcUnavail
        );
        assert_eq!(
            stat_of(&call(2, 77, 3, 1, none(), &[1])),
            AcceptStat::GarbageArgs
        );
        assert_eq!(
            stat_of(&call(2, 77, 3, 2, none(), &[])),
            AcceptStat::SystemErr
        );
        assert_eq!(
            stat_of(&call(2, 77, 3, 3, none(), &[])),
            AcceptStat::SystemErr
        );
    }

    #[test]
    fn rpc_version_and_credentials_are_checked() {
        let (msg, _) = reply_to(&call(3, 77, 3, 0, OpaqueAuth::none(), &[]));
        assert_eq!(
            msg.body,
            MsgBody::Reply(ReplyBody::Denied(RejectedReply::RpcMismatch {
                low: 2,
                high: 2
            }))
        );
        let bad_sys = OpaqueAuth {
            flavor: AUTH_SYS,
            body: xdr::Opaque(vec![0, 0, 0, 1]),
        };
        let (msg, _) = reply_to(&call(2, 77, 3, 0, bad_sys, &[]));
        assert_eq!(
            msg.body,
            MsgBody::Reply(ReplyBody::Denied(RejectedReply::AuthError(
                AuthStat::BadCred
            )))
        );
        let unknown = OpaqueAuth {
            flavor: 390_003,
            body: xdr::Opaque(vec![]),
        };
        let (msg, _) = reply_to(&call(2, 77, 3, 0, unknown, &[]));
        assert_eq!(
            msg.body,
            MsgBody::Reply(ReplyBody::Denied(RejectedReply::AuthError(
                AuthStat::RejectedCred
            )))
        );
        let good_sys = OpaqueAuth::sys(&AuthSysParams::default()).unwrap();
        assert_eq!(
            stat_of(&call(2, 77, 3, 0, good_sys, &[])),
            AcceptStat::Success
        );
    }

    #[test]
    fn non_calls_get_no_reply_and_broken_calls_get_garbage_args() {
        let mut reply = Vec::new();
        assert!(!registry().handle(&[0, 0, 0, 1], &mut reply));
        assert!(!registry().handle(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0], &mut reply));
        assert_eq!(
            stat_of(&[0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 2]),
            AcceptStat::GarbageArgs
        );
    }

    proptest::proptest! {
        #[test]
        fn hostile_calls_never_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            call_prefix in proptest::prelude::any::<bool>(),
        ) {
            // Half of the inputs start like a call to a served program, to get past the header.
            let mut request = if call_prefix { call(2, 77, 3, 1, OpaqueAuth::none(), &[]) } else { Vec::new() };
            if call_prefix {
                request.truncate(24);
            }
            request.extend_from_slice(&bytes);
            let mut reply = Vec::new();
            if registry().handle(&request, &mut reply) {
                proptest::prop_assert!(RpcMsg::decode(&reply).is_ok());
            }
        }
    }
}
