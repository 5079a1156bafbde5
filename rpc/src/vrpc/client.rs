//! The VRPC client: binding to a server process, and [`Call`] over the binding's queues.

use super::link::{check_queue, export_queue, import_within, wait_word, Link, ACCEPT, CONTROL};
use super::server::SLOT;
use super::{DEFAULT_PORT, DEFAULT_QUEUE, LISTEN_BASE};
use crate::client::{decode_reply, encode_call, initial_xid, Call, DEFAULT_TIMEOUT};
use crate::msg::OpaqueAuth;
use crate::record::DEFAULT_MAX_RECORD;
use crate::Error;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use vmmc::{BufId, Endpoint, ProcId};

/// How a client binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindOptions {
    /// The server's port (its listen buffer is [`LISTEN_BASE`]` + port`).
    pub port: u16,
    /// Size of the client's reply queue, a power of two (the server picks its call queue's).
    pub queue: usize,
    /// How long binding and each call may wait for the server (`None`: forever; a dead
    /// server is detected either way).
    pub timeout: Option<Duration>,
}

impl Default for BindOptions {
    fn default() -> Self {
        BindOptions {
            port: DEFAULT_PORT,
            queue: DEFAULT_QUEUE,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }
}

/// An RPC client over VMMC: bound to one server process, it calls any program and version
/// that server serves. Generated client stubs take it like any other [`Call`].
pub struct VrpcClient {
    ep: Endpoint,
    server: ProcId,
    opts: BindOptions,
    link: Option<Link>,
    xid: u32,
    cred: OpaqueAuth,
    max_record: usize,
    /// The outgoing record: the call is serialized straight into it after the mark's word.
    sbuf: Vec<u8>,
    /// The incoming record, copied out of the reply queue.
    rbuf: Vec<u8>,
}

impl VrpcClient {
    /// Binds to the VRPC server of process `server` on the default port.
    pub fn bind(ep: &Endpoint, server: ProcId) -> Result<Self, Error> {
        Self::bind_with(ep, server, BindOptions::default())
    }

    /// Binds to the VRPC server of process `server` as `opts` say.
    pub fn bind_with(ep: &Endpoint, server: ProcId, opts: BindOptions) -> Result<Self, Error> {
        check_queue(opts.queue)?;
        let link = connect(ep, server, &opts)?;
        Ok(VrpcClient {
            ep: ep.clone(),
            server,
            opts,
            link: Some(link),
            xid: initial_xid(),
            cred: OpaqueAuth::none(),
            max_record: DEFAULT_MAX_RECORD,
            sbuf: Vec::new(),
            rbuf: Vec::new(),
        })
    }

    /// The server process.
    pub fn server(&self) -> ProcId {
        self.server
    }

    /// Whether the client holds a binding now (after a failure it binds again on the next
    /// call).
    pub fn is_bound(&self) -> bool {
        self.link.is_some()
    }

    /// Sets how long a call waits for the server (`None`: forever); applies from the next
    /// binding, which this call starts afresh.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.opts.timeout = timeout;
        if let Some(link) = &mut self.link {
            link.set_timeout(timeout);
        }
    }

    /// Sets the credential sent with each call (default AUTH_NONE).
    pub fn set_credential(&mut self, cred: OpaqueAuth) {
        self.cred = cred;
    }

    /// Sets the largest reply record accepted.
    pub fn set_max_record(&mut self, max_record: usize) {
        self.max_record = max_record;
    }

    /// A call: serialized, sent (with `pause` run where it says, for tests), and its reply
    /// decoded.
    fn call_with<A: Serialize + ?Sized, R: DeserializeOwned, F: FnOnce()>(
        &mut self,
        (prog, vers, procedure): (u32, u32, u32),
        args: &A,
        pause: Option<(Pause, F)>,
    ) -> Result<R, Error> {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        self.sbuf.clear();
        // The record mark's word, then the call serialized in place (seed 003 §4.2: the
        // stream layer folded into XDR).
        self.sbuf.extend_from_slice(&[0; 4]);
        encode_call(
            &mut self.sbuf,
            xid,
            &self.cred,
            (prog, vers, procedure),
            args,
        )?;
        match self.exchange(xid, pause) {
            Ok(n) => decode_reply(&self.rbuf[..n]),
            Err(e) => {
                // The queues may be in the middle of a record: bind afresh next time.
                self.link = None;
                Err(e)
            }
        }
    }

    fn exchange<F: FnOnce()>(
        &mut self,
        xid: u32,
        pause: Option<(Pause, F)>,
    ) -> Result<usize, Error> {
        if self.link.is_none() {
            self.link = Some(connect(&self.ep, self.server, &self.opts)?);
        }
        let link = self.link.as_mut().ok_or(Error::ConnectionClosed)?;
        match pause {
            None => link.send_record(&mut self.sbuf)?,
            Some((Pause::MidCall(split), f)) => link.send_split(&mut self.sbuf, split, f)?,
            Some((Pause::BeforeReply, f)) => {
                link.send_record(&mut self.sbuf)?;
                f();
            }
        }
        loop {
            let n = link.recv_record(&mut self.rbuf, self.max_record)?;
            // A reply to an earlier call that timed out is skipped.
            if self.rbuf[..n].get(..4) == Some(&xid.to_be_bytes()[..]) {
                return Ok(n);
            }
        }
    }

    /// [`Call::call`] that runs `pause` in the middle of the call or before reading the
    /// reply: a client that stalls there, for tests of a server's patience with it.
    #[doc(hidden)]
    pub fn call_paused<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        procedure: (u32, u32, u32),
        args: &A,
        at: Pause,
        pause: impl FnOnce(),
    ) -> Result<R, Error> {
        self.call_with(procedure, args, Some((at, pause)))
    }
}

/// Where [`VrpcClient::call_paused`] pauses.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Pause {
    /// After the first this many bytes of the call (after the record mark), sent as a
    /// fragment of their own.
    MidCall(usize),
    /// After the whole call, before the reply is read.
    BeforeReply,
}

impl Call for VrpcClient {
    fn call<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        self.call_with((prog, vers, procedure), args, None::<(Pause, fn())>)
    }
}

/// Withdraws an exported queue unless the binding it belongs to was made.
struct ExportGuard<'a> {
    ep: &'a Endpoint,
    id: Option<BufId>,
}

impl Drop for ExportGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let _ = self.ep.unexport(id);
        }
    }
}

/// (client, server, port) of a binding.
type BindKey = (ProcId, ProcId, u16);

/// Bindings from one process to one server's port take turns: they write the same slot.
fn bind_lock(key: BindKey) -> Arc<Mutex<()>> {
    static LOCKS: Mutex<BTreeMap<BindKey, Arc<Mutex<()>>>> = Mutex::new(BTreeMap::new());
    let mut locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    locks.entry(key).or_default().clone()
}

/// The bind handshake (see the module documentation).
fn connect(ep: &Endpoint, server: ProcId, opts: &BindOptions) -> Result<Link, Error> {
    static SEQ: AtomicU32 = AtomicU32::new(1);
    let lock = bind_lock((ep.me(), server, opts.port));
    let _turn = lock.lock().unwrap_or_else(PoisonError::into_inner);
    let cap = opts.queue;
    let (rx, rx_id) = export_queue(ep, cap, server)?;
    let mut guard = ExportGuard {
        ep,
        id: Some(rx_id),
    };
    let listen = import_within(
        ep,
        server,
        LISTEN_BASE + BufId::from(opts.port),
        opts.timeout,
    )?;
    let seq = loop {
        match SEQ.fetch_add(1, Ordering::Relaxed) {
            0 => continue,
            s => break s,
        }
    };
    let mut slot = [0u8; 12];
    slot[..4].copy_from_slice(&rx_id.to_ne_bytes());
    slot[4..8].copy_from_slice(&(cap as u32).to_ne_bytes());
    slot[8..].copy_from_slice(&seq.to_ne_bytes());
    listen.send(ep.rank() * SLOT, &slot)?;
    drop(listen);
    wait_word(ep, server, &rx, cap + ACCEPT + 8, None, opts.timeout, |v| {
        v == seq
    })?;
    let call_id = rx.load_u32(cap + ACCEPT)?;
    let call_cap = check_queue(rx.load_u32(cap + ACCEPT + 4)? as usize)?;
    let tx = import_within(ep, server, call_id, opts.timeout)?;
    if tx.len() < call_cap + CONTROL {
        return Err(Error::BadMessage(
            "VRPC bind: the server's call queue is smaller than announced".into(),
        ));
    }
    guard.id = None;
    Ok(Link::new(
        ep.clone(),
        server,
        (rx, rx_id, cap),
        (tx, call_cap),
        opts.timeout,
    ))
}
