//! SHRIMP RPC (seed 003 §5): the non-compatible RPC, as fast as the transport allows. Stubs
//! come from interface files through `stubgen srpc` (see `stubgen::idl`); this crate is
//! their runtime.
//!
//! A binding is one receive buffer on each side, exported and imported both ways (as
//! Bershad's URPC, which §5 follows). Every procedure's arguments have a fixed layout (every
//! type is bounded), laid out so that they end right before the call flag: the flag is at
//! the same place for every call of the binding, and one transfer carries the arguments and
//! the flag. The server waits on that flag, reads the arguments from its buffer and calls the
//! procedure. Results (`out` and `inout`) are handed to the procedure as [`Out`] / [`InOut`]
//! handles into the reply: over automatic update ([`Mode::Au`]) every `set` propagates to the
//! client at once, while the procedure goes on computing; over deliberate update
//! ([`Mode::Du`]) they are collected and sent with the done flag, in one transfer. Then the
//! server writes the done flag; the client, which waited on it, reads the results. The mode
//! is chosen per binding; the generated code is the same.
//!
//! Flags: the call flag is `sequence << 16 | procedure` (procedure 0 closes the binding); the
//! done flag `sequence << 16 | status` ([`Status`]). A wrong procedure number or arguments
//! that do not decode (a sequence longer than its bound, bad UTF-8) are answered with an
//! error status; a dead peer ends every wait with [`Error::PeerLost`].
//!
//! ```no_run
//! # mod calc { pub struct CalcClient; impl CalcClient {
//! #   pub fn bind(_: &srpc::Endpoint, _: usize, _: srpc::Mode) -> Result<Self, srpc::Error> { Ok(CalcClient) }
//! #   pub fn add(&mut self, _: &i32, _: &i32, _: &mut i32) -> Result<(), srpc::Error> { Ok(()) } } }
//! // include!(concat!(env!("OUT_DIR"), "/calc.rs")); from stubgen::idl::to_out_dir("calc.idl")
//! let ep = vmmc_run_init();
//! let mut calc = calc::CalcClient::bind(&ep, 0, srpc::Mode::Au)?;
//! let mut sum = 0;
//! calc.add(&2, &3, &mut sum)?;
//! # fn vmmc_run_init() -> srpc::Endpoint { unimplemented!() }
//! # Ok::<(), srpc::Error>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod wire;

pub use vmmc::{Endpoint, ProcId};
pub use wire::{BSeq, BString, Wire};

use std::cell::{Cell, Ref, RefCell};
use std::marker::PhantomData;
use vmmc::{AuOptions, AutoUpdateBinding, BufId, ExportOptions, MemKind, Proxy, Region};

/// Errors of SHRIMP RPC.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server has no procedure of this number.
    #[error("no procedure {0} in this interface")]
    NoSuchProcedure(u32),
    /// A value longer than its bound (refused before sending).
    #[error("{what} of {len} exceeds its bound of {max}")]
    TooLong {
        /// What: "sequence" or "string".
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Arguments or results that do not decode (as the server or the client found them).
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// The server failed the call with another status.
    #[error("the server answered status {0}")]
    Server(u32),
    /// The peer process is gone.
    #[error("peer lost: {0}")]
    PeerLost(String),
    /// The client closed the binding.
    #[error("binding closed")]
    Closed,
    /// A binding's layout that cannot work (sizes, ranks).
    #[error("bad binding: {0}")]
    Binding(String),
    /// The VMMC layer failed.
    #[error("VMMC: {0}")]
    Vmmc(vmmc::Error),
}

impl From<vmmc::Error> for Error {
    fn from(e: vmmc::Error) -> Error {
        match e {
            vmmc::Error::PeerLost(p) => Error::PeerLost(p),
            vmmc::Error::Unexported => Error::PeerLost("the peer withdrew its buffer".into()),
            e => Error::Vmmc(e),
        }
    }
}

/// The done flag's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    /// The procedure ran; the results are in place.
    Ok = 0,
    /// No procedure of that number.
    NoSuchProcedure = 1,
    /// The arguments did not decode.
    BadArguments = 2,
    /// Another failure.
    Failed = 3,
}

/// How a binding transfers: by automatic or by deliberate update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Stores propagate (the client's arguments combine with the flag into one packet; the
    /// server's results travel while the procedure computes).
    Au,
    /// One explicit send of arguments and flag, and of results and done flag.
    Du,
}

impl Mode {
    /// Parses `au` or `du`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "au" => Some(Mode::Au),
            "du" => Some(Mode::Du),
            _ => None,
        }
    }
}

/// The sizes of an interface's binding: the largest argument block, the largest result block
/// (multiples of 8), and the interface's 16-bit identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of arguments before the call flag.
    pub request: usize,
    /// Bytes of results before the done flag.
    pub reply: usize,
    /// Tells interfaces apart in buffer identities.
    pub interface: u32,
}

/// Buffer identities: `BASE | interface << 8 | peer rank` (a server's request buffer and a
/// client's reply buffer), above the ranges nx and rpc::vrpc use.
const SERVER_BASE: BufId = 0x5800_0000;
const CLIENT_BASE: BufId = 0x5900_0000;

fn buf_id(base: BufId, layout: &Layout, peer_rank: usize) -> BufId {
    base | (layout.interface & 0xffff) << 8 | peer_rank as BufId
}

/// Checks a binding's layout and ranks; returns the peer and the layout as the binding
/// places it: each area grows so that its flag sits in the last 8 bytes of a page, and
/// arguments or results of up to a page (less the flag) end in the flag's page. A transfer
/// that crossed a page boundary would be two transfers on SHRIMP (packets and DMA stop at
/// pages), and the flag's transfer would wait for both.
fn check(layout: &Layout, ep: &Endpoint, peer: usize) -> Result<(ProcId, Layout), Error> {
    if peer >= 256 || ep.rank() >= 256 {
        return Err(Error::Binding("ranks above 255".into()));
    }
    if peer == ep.rank() {
        return Err(Error::Binding("a process cannot bind to itself".into()));
    }
    if !layout.request.is_multiple_of(8)
        || !layout.reply.is_multiple_of(8)
        || layout.request > 16 << 20
        || layout.reply > 16 << 20
    {
        return Err(Error::Binding(format!("bad layout {layout:?}")));
    }
    Ok((ep.proc_of(peer)?, placed(layout, ep.page_size())))
}

/// `layout` with each area grown to end 8 bytes before a page boundary (see [`check`]).
fn placed(layout: &Layout, page: usize) -> Layout {
    let page = page.max(8);
    let place = |n: usize| (n + 8).div_ceil(page) * page - 8;
    Layout {
        request: place(layout.request),
        reply: place(layout.reply),
        interface: layout.interface,
    }
}

/// One side of a binding: exports a receive buffer `(id, len)` to `peer`, imports the peer's
/// `(id, at least len)`, and over automatic update binds to it (stores combine into packets).
fn link(
    ep: &Endpoint,
    peer: ProcId,
    mine: (BufId, usize),
    theirs: (BufId, usize),
    mode: Mode,
    whose: &str,
) -> Result<(Region, Proxy, Option<AutoUpdateBinding>), Error> {
    let region = ep.alloc(mine.1, MemKind::Shared)?;
    ep.export(mine.0, &region, ExportOptions::new().importers([peer]))?;
    let other = || -> Result<(Proxy, Option<AutoUpdateBinding>), Error> {
        let to_peer = ep.import(peer, theirs.0)?;
        if to_peer.len() < theirs.1 {
            return Err(Error::Binding(format!(
                "{whose} buffer is smaller than the layout"
            )));
        }
        let au = match mode {
            Mode::Au => Some(to_peer.bind(AuOptions {
                combining: true,
                notify: false,
            })?),
            Mode::Du => None,
        };
        Ok((to_peer, au))
    };
    match other() {
        Ok((to_peer, au)) => Ok((region, to_peer, au)),
        Err(e) => {
            // No binding: withdraw our buffer too.
            let _ = ep.unexport(mine.0);
            Err(e)
        }
    }
}

/// Waits until the word at `off` of `r` satisfies `done`, or the peer is gone.
fn wait(
    ep: &Endpoint,
    peer: ProcId,
    r: &Region,
    off: usize,
    done: impl FnMut(u32) -> bool,
) -> Result<u32, Error> {
    Ok(r.wait_u32_at(&WAIT_SITE, off, done, || ep.check_peer(peer))?)
}

/// Every wait of the library (calls, replies, the server's loop), in `vmmc::wait`'s counts.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("srpc");

/// The client side of a binding.
pub struct ClientBinding {
    ep: Endpoint,
    server: ProcId,
    layout: Layout,
    mode: Mode,
    /// Replies land here (exported to the server).
    replies: Region,
    to_server: Proxy,
    au: Option<AutoUpdateBinding>,
    /// The argument area and the flag, marshalled here.
    scratch: Vec<u8>,
    reply: Vec<u8>,
    seq: u16,
}

impl ClientBinding {
    /// Binds to the server process of rank `server`, which accepts with the same layout.
    pub fn bind(
        ep: &Endpoint,
        server: usize,
        layout: Layout,
        mode: Mode,
    ) -> Result<ClientBinding, Error> {
        let (sp, layout) = check(&layout, ep, server)?;
        let (replies, to_server, au) = link(
            ep,
            sp,
            (buf_id(CLIENT_BASE, &layout, server), layout.reply + 8),
            (buf_id(SERVER_BASE, &layout, ep.rank()), layout.request + 8),
            mode,
            "the server's",
        )?;
        Ok(ClientBinding {
            ep: ep.clone(),
            server: sp,
            layout,
            mode,
            replies,
            to_server,
            au,
            scratch: vec![0; layout.request + 8],
            reply: vec![0; layout.reply],
            seq: 0,
        })
    }

    /// The binding's transfer mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The argument block of the next call (`size` bytes, ending right before the flag):
    /// stubs marshal into it.
    pub fn request(&mut self, size: usize) -> &mut [u8] {
        let end = self.layout.request;
        &mut self.scratch[end - size.min(end)..end]
    }

    /// Makes call `procedure` with the `req_size` bytes of arguments of [`Self::request`];
    /// returns the `rep_size` bytes of results.
    pub fn call(
        &mut self,
        procedure: u32,
        req_size: usize,
        rep_size: usize,
    ) -> Result<&[u8], Error> {
        self.call_raw(procedure, req_size, rep_size)?;
        let start = self.layout.reply - rep_size;
        self.replies.read(start, &mut self.reply[..rep_size])?;
        Ok(&self.reply[..rep_size])
    }

    /// Makes call `procedure` as [`Self::call`] does, leaving the `rep_size` bytes of results
    /// in the receive buffer for [`Self::result_into`].
    pub fn call_raw(
        &mut self,
        procedure: u32,
        req_size: usize,
        rep_size: usize,
    ) -> Result<(), Error> {
        self.call_inner(procedure, req_size, rep_size, None)
    }

    /// Makes call `procedure` whose whole `req_size`-byte argument block is `arg`: over DU a
    /// byte array goes to the server from where it is (then the flag, in order), anything
    /// else through [`Self::request`]. Results are left for [`Self::result_into`].
    pub fn call_whole<T: Wire>(
        &mut self,
        procedure: u32,
        arg: &T,
        req_size: usize,
        rep_size: usize,
    ) -> Result<(), Error> {
        match arg.wire_bytes() {
            // Over AU the arguments and the flag combine into one propagation through the
            // scratch block; measured, writing them from the caller's memory made the 4 KB and
            // 64 KB calls slower there.
            Some(b)
                if self.au.is_none()
                    && b.len() == req_size
                    && req_size.is_multiple_of(4)
                    && req_size > 0 =>
            {
                self.call_inner(procedure, req_size, rep_size, Some(b))
            }
            _ => {
                arg.put(self.request(req_size))?;
                self.call_inner(procedure, req_size, rep_size, None)
            }
        }
    }

    fn call_inner(
        &mut self,
        procedure: u32,
        req_size: usize,
        rep_size: usize,
        direct: Option<&[u8]>,
    ) -> Result<(), Error> {
        if req_size > self.layout.request || rep_size > self.layout.reply || procedure > 0xffff {
            return Err(Error::Binding(format!(
                "call {procedure} with {req_size}/{rep_size} bytes exceeds the binding"
            )));
        }
        self.seq = self.seq.wrapping_add(1).max(1);
        let seq = self.seq as u32;
        match direct {
            Some(b) => {
                let end = self.layout.request;
                self.to_server.send(end - b.len(), b)?;
                self.send_flag(seq << 16 | procedure, 0)?;
            }
            None => self.send_flag(seq << 16 | procedure, req_size)?,
        }
        let v = wait(
            &self.ep,
            self.server,
            &self.replies,
            self.layout.reply,
            |v| v >> 16 == seq,
        )?;
        match v & 0xffff {
            0 => {}
            1 => return Err(Error::NoSuchProcedure(procedure)),
            2 => return Err(Error::BadArguments("refused by the server".into())),
            s => return Err(Error::Server(s)),
        }
        Ok(())
    }

    /// Decodes the result at `range` of the last call's `rep_size`-byte result block into
    /// `value`: a byte array is copied straight out of the receive buffer, anything else
    /// through a copy of its encoding.
    pub fn result_into<T: Wire>(
        &mut self,
        rep_size: usize,
        range: std::ops::Range<usize>,
        value: &mut T,
    ) -> Result<(), Error> {
        let rep_size = rep_size.min(self.layout.reply);
        if range.end > rep_size || range.start > range.end {
            return Err(Error::Binding(format!(
                "result {range:?} outside a {rep_size}-byte block"
            )));
        }
        let start = self.layout.reply - rep_size + range.start;
        let len = range.len();
        if self.au.is_none() {
            if let Some(bytes) = value.wire_bytes_mut() {
                if bytes.len() == len {
                    return Ok(self.replies.read(start, bytes)?);
                }
            }
        }
        self.replies.read(start, &mut self.reply[..len])?;
        value.get_into(&self.reply[..len])
    }

    /// Sends the last `size` bytes of the argument area and `flag` after them: one transfer.
    fn send_flag(&mut self, flag: u32, size: usize) -> Result<(), Error> {
        let end = self.layout.request;
        self.scratch[end..end + 4].copy_from_slice(&flag.to_le_bytes());
        let block = &self.scratch[end - size..end + 4];
        match &self.au {
            // The stores fill consecutive words up to the flag: one combined packet.
            Some(au) => {
                au.write(end - size, block)?;
                au.flush()?;
            }
            None => self.to_server.send(end - size, block)?,
        }
        Ok(())
    }
}

impl Drop for ClientBinding {
    fn drop(&mut self) {
        // Procedure 0 closes the binding (the server's loop ends).
        self.seq = self.seq.wrapping_add(1).max(1);
        let flag = (self.seq as u32) << 16;
        let _ = self.send_flag(flag, 0);
        let _ = self.ep.unexport(buf_id(
            CLIENT_BASE,
            &self.layout,
            rank_of(&self.ep, self.server),
        ));
    }
}

fn rank_of(ep: &Endpoint, p: ProcId) -> usize {
    (0..ep.size())
        .find(|&r| ep.proc_of(r).ok() == Some(p))
        .unwrap_or(0)
}

/// The server side of a binding (one client).
pub struct ServerBinding {
    core: Core,
}

struct Core {
    ep: Endpoint,
    client: ProcId,
    client_rank: usize,
    layout: Layout,
    mode: Mode,
    /// Calls land here (exported to the client).
    calls: Region,
    to_client: Proxy,
    au: Option<AutoUpdateBinding>,
    /// The request block, read once from the receive buffer.
    req: RefCell<Vec<u8>>,
    /// The reply area and the done flag (deliberate update).
    reply: RefCell<Vec<u8>>,
    /// A result being encoded for an automatic-update store.
    enc: RefCell<Vec<u8>>,
    /// The current call's result size.
    rep_size: Cell<usize>,
    /// The current call's whole result block has gone to the client already (DU).
    sent_whole: Cell<bool>,
    last: Cell<u32>,
}

impl ServerBinding {
    /// Accepts a binding from the client process of rank `client`.
    pub fn accept(
        ep: &Endpoint,
        client: usize,
        layout: Layout,
        mode: Mode,
    ) -> Result<ServerBinding, Error> {
        let (cp, layout) = check(&layout, ep, client)?;
        let (calls, to_client, au) = link(
            ep,
            cp,
            (buf_id(SERVER_BASE, &layout, client), layout.request + 8),
            (buf_id(CLIENT_BASE, &layout, ep.rank()), layout.reply + 8),
            mode,
            "the client's",
        )?;
        Ok(ServerBinding {
            core: Core {
                ep: ep.clone(),
                client: cp,
                client_rank: client,
                layout,
                mode,
                calls,
                to_client,
                au,
                req: RefCell::new(vec![0; layout.request]),
                reply: RefCell::new(vec![0; layout.reply + 8]),
                enc: RefCell::new(Vec::new()),
                rep_size: Cell::new(0),
                sent_whole: Cell::new(false),
                last: Cell::new(0),
            },
        })
    }

    /// The binding's transfer mode.
    pub fn mode(&self) -> Mode {
        self.core.mode
    }

    /// Serves calls with `dispatch` (a generated dispatcher) until the client closes the
    /// binding; returns the number of calls. A client that dies ends it with `PeerLost`.
    pub fn serve(
        &mut self,
        mut dispatch: impl FnMut(&Incoming<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let mut calls = 0;
        while self.serve_one(&mut dispatch)? {
            calls += 1;
        }
        Ok(calls)
    }

    /// Serves one call; `false` when the client closed the binding.
    pub fn serve_one(
        &mut self,
        dispatch: impl FnOnce(&Incoming<'_>) -> Result<(), Error>,
    ) -> Result<bool, Error> {
        let c = &self.core;
        let last = c.last.get();
        let v = wait(&c.ep, c.client, &c.calls, c.layout.request, |v| {
            v != 0 && v != last
        })?;
        c.last.set(v);
        let procedure = v & 0xffff;
        if procedure == 0 {
            return Ok(false);
        }
        c.rep_size.set(0);
        c.sent_whole.set(false);
        let inc = Incoming { core: c, procedure };
        let status = match dispatch(&inc) {
            Ok(()) => Status::Ok,
            Err(Error::NoSuchProcedure(_)) => Status::NoSuchProcedure,
            Err(Error::BadArguments(_)) | Err(Error::TooLong { .. }) => Status::BadArguments,
            Err(Error::PeerLost(p)) => return Err(Error::PeerLost(p)),
            Err(_) => Status::Failed,
        };
        let rep_size = if status == Status::Ok {
            c.rep_size.get()
        } else {
            0
        };
        c.done(v >> 16 << 16 | status as u32, rep_size)?;
        Ok(true)
    }
}

impl Drop for ServerBinding {
    fn drop(&mut self) {
        let c = &self.core;
        let _ = c.ep.unexport(buf_id(SERVER_BASE, &c.layout, c.client_rank));
    }
}

impl Core {
    /// Puts a result at `pos` of the reply area: propagated now over AU (encoded into a
    /// scratch block, then stored), encoded in place for the done transfer over DU.
    fn put<T: Wire>(&self, pos: usize, v: &T) -> Result<(), Error> {
        match &self.au {
            Some(au) => {
                let mut e = self.enc.borrow_mut();
                e.resize(T::SIZE, 0);
                v.put(&mut e)?;
                Ok(au.write(pos, &e)?)
            }
            None => {
                // A byte array that is the whole result block leaves from where it is: no
                // copy into the reply, and the done transfer carries only the flag.
                let whole = self.layout.reply - self.rep_size.get();
                if let Some(bytes) = v.wire_bytes() {
                    if pos == whole
                        && bytes.len() == self.rep_size.get()
                        && bytes.len().is_multiple_of(4)
                        && !bytes.is_empty()
                    {
                        self.to_client.send(pos, bytes)?;
                        self.sent_whole.set(true);
                        return Ok(());
                    }
                }
                v.put(&mut self.reply.borrow_mut()[pos..pos + T::SIZE])
            }
        }
    }

    /// Zeros `len` result bytes at `pos` (an `out` parameter left unset).
    fn zero(&self, pos: usize, len: usize) -> Result<(), Error> {
        match &self.au {
            Some(au) => {
                let mut e = self.enc.borrow_mut();
                e.clear();
                e.resize(len, 0);
                Ok(au.write(pos, &e)?)
            }
            None => {
                self.reply.borrow_mut()[pos..pos + len].fill(0);
                Ok(())
            }
        }
    }

    /// Writes the done flag after the last `rep_size` bytes of results.
    fn done(&self, flag: u32, rep_size: usize) -> Result<(), Error> {
        let end = self.layout.reply;
        match &self.au {
            Some(au) => {
                au.store_u32(end, flag)?;
                au.flush()?;
            }
            None => {
                let mut r = self.reply.borrow_mut();
                r[end..end + 4].copy_from_slice(&flag.to_le_bytes());
                // After the results sent on their own (in order: the flag comes after them).
                let from = if self.sent_whole.get() {
                    end
                } else {
                    end - rep_size
                };
                self.to_client.send(from, &r[from..end + 4])?;
            }
        }
        Ok(())
    }
}

/// A call being served: its procedure, its arguments in the receive buffer, and the reply.
pub struct Incoming<'a> {
    core: &'a Core,
    procedure: u32,
}

impl<'a> Incoming<'a> {
    /// The procedure number.
    pub fn procedure(&self) -> u32 {
        self.procedure
    }

    /// The call's `size` bytes of arguments (they end right before the flag).
    pub fn request(&self, size: usize) -> Ref<'_, [u8]> {
        let c = self.core;
        let end = c.layout.request;
        let size = size.min(end);
        {
            let mut r = c.req.borrow_mut();
            // The client does not touch its arguments until the done flag.
            if c.calls.read(end - size, &mut r[..size]).is_err() {
                r[..size].fill(0);
            }
        }
        Ref::map(c.req.borrow(), |r| &r[..size])
    }

    fn claim(&self, rep_size: usize) -> usize {
        let rep_size = rep_size.min(self.core.layout.reply);
        self.core
            .rep_size
            .set(self.core.rep_size.get().max(rep_size));
        self.core.layout.reply - rep_size
    }

    /// The handle of an `out` parameter at `offset` of a `rep_size`-byte result block.
    pub fn out<T: Wire>(&self, rep_size: usize, offset: usize) -> Out<'a, T> {
        Out {
            core: self.core,
            pos: self.claim(rep_size) + offset,
            set: false,
            _t: PhantomData,
        }
    }

    /// The handle of an `inout` parameter decoded from `encoded` (built in place: a large
    /// array is not decoded on the stack and then moved).
    pub fn inout_from<T: Wire>(
        &self,
        rep_size: usize,
        offset: usize,
        encoded: &[u8],
    ) -> Result<InOut<'a, T>, Error> {
        Ok(InOut {
            core: self.core,
            pos: self.claim(rep_size) + offset,
            value: T::get(encoded)?,
            set: false,
        })
    }

    /// The handle of an `inout` parameter whose argument decoded as `value`.
    pub fn inout<T: Wire>(&self, rep_size: usize, offset: usize, value: T) -> InOut<'a, T> {
        InOut {
            core: self.core,
            pos: self.claim(rep_size) + offset,
            value,
            set: false,
        }
    }
}

/// An `out` parameter: [`Out::set`] writes the result into the reply (over automatic update,
/// it travels to the client at once). Unset, it is all zeros (0, false, empty).
pub struct Out<'a, T: Wire> {
    core: &'a Core,
    pos: usize,
    set: bool,
    _t: PhantomData<T>,
}

impl<T: Wire> Out<'_, T> {
    /// Sets the result.
    pub fn set(&mut self, v: &T) -> Result<(), Error> {
        self.core.put(self.pos, v)?;
        self.set = true;
        Ok(())
    }
}

impl<T: Wire> Drop for Out<'_, T> {
    fn drop(&mut self) {
        if !self.set {
            let _ = self.core.zero(self.pos, T::SIZE);
        }
    }
}

/// An `inout` parameter: [`InOut::get`] is the argument, [`InOut::set`] writes the result
/// into the reply; a value changed through [`InOut::get_mut`] goes back when the procedure
/// returns. Unset, the argument goes back unchanged.
pub struct InOut<'a, T: Wire> {
    core: &'a Core,
    pos: usize,
    value: T,
    set: bool,
}

impl<T: Wire> InOut<'_, T> {
    /// The value (the argument, until set).
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The value, to change in place: it goes back when the handle is dropped (when the
    /// procedure returns), unless [`InOut::set`] sends it earlier.
    pub fn get_mut(&mut self) -> &mut T {
        self.set = false;
        &mut self.value
    }

    /// Sets the result: over automatic update it travels to the client now, while the
    /// procedure goes on.
    pub fn set(&mut self, v: T) -> Result<(), Error> {
        self.core.put(self.pos, &v)?;
        self.value = v;
        self.set = true;
        Ok(())
    }
}

impl<T: Wire> Drop for InOut<'_, T> {
    fn drop(&mut self) {
        if !self.set {
            let _ = self.core.put(self.pos, &self.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_byte_arrays_are_their_own_encoding() {
        let mut a = [1u8, 2, 3, 4];
        assert_eq!(a.wire_bytes(), Some(&[1u8, 2, 3, 4][..]));
        a.wire_bytes_mut().unwrap()[0] = 9;
        assert_eq!(a[0], 9);
        assert_eq!([1u16, 2].wire_bytes(), None);
        assert_eq!(7u8.wire_bytes(), None);
        assert_eq!(BSeq::<u8, 4>::default().wire_bytes(), None);
    }

    #[test]
    fn flags_sit_at_the_end_of_a_page() {
        let l = |request, reply| Layout {
            request,
            reply,
            interface: 7,
        };
        for (given, want) in [
            (0, 4088),
            (8, 4088),
            (4088, 4088),
            (4096, 8184),
            (65536, 69624),
        ] {
            let p = placed(&l(given, given), 4096);
            assert_eq!(
                (p.request, p.reply, p.interface),
                (want, want, 7),
                "{given}"
            );
            // Small blocks before the flag stay in the flag's page.
            assert_eq!((p.request - 8) / 4096, (p.request + 3) / 4096);
        }
    }
}
