//! # nx: NX/2 message passing over VMMC
//!
//! The Intel NX/2 interface (typed messages between the nodes of a job) as the SHRIMP
//! project built it over VMMC (seed 003 §4.1), handed an [`vmmc::Endpoint`]:
//! - At start, a connection is set up between every pair of processes: each process exports
//!   one receive buffer per peer, divided into packet buffers, and imports the peer's.
//! - Messages up to the threshold ([`Config::threshold_for`]) use the **one-copy protocol**: the
//!   sender writes data and descriptor into a free packet buffer of the receiver (by
//!   deliberate update straight from the user's memory, by one deliberate update after a
//!   local copy, or by automatic update: [`SmallPath`]); the receiver copies the data out when
//!   a receive takes the message, resets the descriptor and returns a credit naming that
//!   packet buffer (receives may consume messages in any order).
//! - Longer messages use the **zero-copy protocol**: a scout descriptor goes through a packet
//!   buffer; the receive that takes it exports the user's buffer and replies with its id; the
//!   sender writes the data straight into it and sends a done descriptor. While the sender of a
//!   blocking send waits for the reply it copies the data to a safe buffer, so that it can
//!   return before the receiver replies. With the registration cache ([`Config::reg_cache`])
//!   receive memory stays exported and senders keep their imports of it.
//! - **Receiver-assisted zero-copy** ([`Config::pull`], beyond seed 003): when a blocking
//!   receive replies to the scout of a message of [`PULL_MIN`] bytes or more and the
//!   sender still reads from the user's memory, the sender exports that memory, asks the
//!   receiver to read the second half of the data from it (remote read) and writes the first
//!   half itself; the send completes when the receiver says it has read. Both processes copy at
//!   once, which on shared memory (where each copy goes through the kernel) halves the time.
//! - Packet buffers are credited back when the receiver would wait anyway (or when half of
//!   them are consumed), off the critical path of a reply.
//! - No interrupts, except: a sender out of packet buffers notifies the receiver (which copies
//!   its arrived messages out of them and returns them); a blocking send that returned before
//!   its scout's reply (its safe copy made) asks for the reply to come with a notification; and
//!   a process with handler receives posted asks its peers to notify it of new messages.
//! - Waiting goes through the VMMC layer's one policy ([`vmmc::wait`]), so the library
//!   yields and sleeps when processes outnumber cores and runs unchanged on the simulated
//!   SHRIMP.
//!
//! Type selection follows NX: a `typesel` of -1 takes any type, a type (>= 0) that type only,
//! and any other negative value every type except its one's complement (`!typesel`). Node and
//! process-type selectors take -1 for any. Between one sender and one receiver, messages that
//! a receive could take are taken in the order they were sent.
#![deny(missing_docs)]

mod config;
mod core;
mod error;
mod usermem;
mod wire;

pub use crate::config::{Config, SmallPath, AUTO_MAX, AUTO_MIN, PACKET_BUDGET, PULL_MIN};
pub use crate::core::{Mid, MID_LIMIT};
pub use crate::error::{error_str, NxError, Result};

use crate::core::{Core, HandlerFn, Quick, Sel};
use crate::usermem::UserBuf;
use std::sync::Arc;

/// What NX tells about a received or probed message (`infocount`, `infonode`, `infotype`,
/// `infoptype`; the `info` array of the `x` calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// The message's type.
    pub mtype: i64,
    /// Its length in bytes (the whole message's, even when the receive buffer was shorter).
    pub count: usize,
    /// The sending node.
    pub node: usize,
    /// The sender's process type.
    pub ptype: i64,
}

/// A completed request: the message's info (receives) and the buffer (owned receives).
#[derive(Debug)]
pub struct Completion {
    /// The received message's info; `None` for sends.
    pub info: Option<Info>,
    /// The buffer the request owned (Rust [`Nx::irecv`]), now holding the message.
    pub buf: Option<Vec<u8>>,
}

/// Largest normal message type.
pub const MAX_TYPE: i64 = 999_999_999;
/// First force type.
pub const FORCE_FIRST: i64 = 1 << 30;
/// Last force type.
pub const FORCE_LAST: i64 = 1_999_999_999;

/// How long a blocking zero-copy send whose safe copy is made still waits for the reply before
/// it returns and asks for the reply to be notified (at least; longer for longer copies).
const REPLY_GRACE_NS: u64 = 50_000;

/// Internal message types of the global operations.
const T_GATHER: i64 = 1;
const T_BCAST: i64 = 2;

/// Checks a message type.
fn check_type(t: i64) -> Result<()> {
    if (0..=MAX_TYPE).contains(&t) || (FORCE_FIRST..=FORCE_LAST).contains(&t) {
        Ok(())
    } else {
        Err(NxError::InvalidType(t))
    }
}

/// Checks a type selector: -1, a valid type, or the complement of a valid type.
fn check_typesel(t: i64) -> Result<()> {
    match t {
        -1 => Ok(()),
        t if t >= 0 => check_type(t),
        t => check_type(!t).map_err(|_| NxError::InvalidType(t)),
    }
}

fn check_ptype(p: i64) -> Result<()> {
    if p >= 0 {
        Ok(())
    } else {
        Err(NxError::InvalidPtype(p))
    }
}

/// An NX process: its node in the job and its connections.
///
/// Every call takes `&self`; the library locks its state inside, so an `Nx` may be shared
/// with handler functions (through an `Arc`). Dropping it finishes the zero-copy sends still
/// waiting for their receivers (while those live and are not leaving NX themselves: NX
/// discards the messages a process did not receive when it leaves).
pub struct Nx {
    core: Arc<Core>,
}

impl std::fmt::Debug for Nx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nx")
            .field("node", &self.core.me)
            .field("nodes", &self.core.n)
            .finish()
    }
}

impl Drop for Nx {
    fn drop(&mut self) {
        if let Err(e) = self.core.finish() {
            eprintln!("nx: node {}: at exit: {e}", self.core.me);
        }
    }
}

impl Nx {
    /// Joins NX on `ep` with the settings of the environment ([`Config::from_env`]).
    pub fn new(ep: vmmc::Endpoint) -> Result<Nx> {
        Nx::with_config(ep, Config::from_env()?)
    }

    /// Joins NX on `ep` with `cfg`. Every process of the job must call it.
    pub fn with_config(ep: vmmc::Endpoint, cfg: Config) -> Result<Nx> {
        Ok(Nx {
            core: Core::new(ep, cfg)?,
        })
    }

    /// Finishes now (what dropping does), reporting failures.
    pub fn finish(&self) -> Result<()> {
        self.core.finish()
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &vmmc::Endpoint {
        &self.core.ep
    }

    // ----- identity -----

    /// This node (`mynode`).
    pub fn mynode(&self) -> i64 {
        self.core.me as i64
    }
    /// Number of nodes (`numnodes`).
    pub fn numnodes(&self) -> i64 {
        self.core.n as i64
    }
    /// This process's type (`myptype`); 0 at start.
    pub fn myptype(&self) -> i64 {
        self.core.lock().ptype()
    }
    /// Sets this process's type (`setptype`); messages sent afterwards carry it.
    pub fn setptype(&self, ptype: i64) -> Result<()> {
        check_ptype(ptype)?;
        self.core.lock().set_ptype(ptype);
        Ok(())
    }
    /// Bytes this process has read from senders' memory in receiver-assisted zero-copy
    /// transfers ([`Config::pull`]).
    pub fn pulled_bytes(&self) -> u64 {
        self.core.lock().pulled
    }

    /// Bytes receivers have read from this process's memory in receiver-assisted zero-copy
    /// transfers.
    pub fn lent_bytes(&self) -> u64 {
        self.core.lock().lent
    }

    /// The threshold in force: messages up to it use the one-copy protocol.
    pub fn threshold(&self) -> usize {
        self.core.threshold
    }

    fn check_node(&self, node: i64) -> Result<usize> {
        if (0..self.core.n as i64).contains(&node) {
            Ok(node as usize)
        } else {
            Err(NxError::InvalidNode(node))
        }
    }

    fn check_sel(&self, typesel: i64, nodesel: i64, ptypesel: i64, internal: bool) -> Result<Sel> {
        if !internal {
            check_typesel(typesel)?;
        }
        if nodesel != -1 {
            self.check_node(nodesel)?;
        }
        if ptypesel != -1 {
            check_ptype(ptypesel).map_err(|_| NxError::InvalidPtype(ptypesel))?;
        }
        Ok(Sel {
            typesel,
            nodesel,
            ptypesel,
            internal,
        })
    }

    // ----- sending -----

    /// Sends a message and returns when `buf` may be reused (`csend`). `node` -1 sends to
    /// every other node. `ptype` is the destination's process type (every process of a node
    /// receives it here: a node runs one process).
    pub fn csend(&self, mtype: i64, buf: &[u8], node: i64, ptype: i64) -> Result<()> {
        check_type(mtype)?;
        check_ptype(ptype)?;
        if node != -1 {
            return self.send_blocking(self.check_node(node)?, false, mtype, buf);
        }
        for p in (0..self.core.n).filter(|&p| p != self.core.me) {
            self.send_blocking(p, false, mtype, buf)?;
        }
        Ok(())
    }

    fn send_blocking(&self, p: usize, internal: bool, mtype: i64, buf: &[u8]) -> Result<()> {
        let threshold = self.threshold();
        if buf.len() <= threshold || p == self.core.me {
            // The fast path: a free packet buffer now.
            if self.core.lock().try_send_small(p, internal, mtype, buf)? {
                return Ok(());
            }
            return self.core.wait("sending", Some(p), |st| {
                if st.try_send_small(p, internal, mtype, buf)? {
                    Ok(Some(()))
                } else {
                    st.out_of_buffers(p)?;
                    Ok(None)
                }
            });
        }
        // SAFETY of the description: `buf` outlives this call, and the send no longer refers
        // to it when the call returns (complete, or from the completed safe copy), or fails
        // (the transfer is forgotten below).
        let data = UserBuf::lent(buf);
        let id = {
            let mut st = self.core.lock();
            st.start_large(p, internal, mtype, data, None, true)?
        };
        let start = vmmc::pace::now_ns();
        let mut copied_at = None;
        let r = self.core.wait("sending a large message", Some(p), |st| {
            if !st.large_pending(id) {
                return Ok(Some(()));
            }
            let now = vmmc::pace::now_ns();
            let Some(at) = copied_at else {
                if st.copy_safe(id) {
                    copied_at = Some(now);
                }
                return Ok(None);
            };
            // The safe copy is made: wait a little longer for the reply (as long as the copy
            // took, at least REPLY_GRACE_NS), which then needs no notification; else leave,
            // asking the receiver to notify the reply.
            // (Not under a pacer: virtual time only moves with events there.)
            let grace = if vmmc::pace::is_paced() {
                0
            } else {
                (at - start).max(REPLY_GRACE_NS)
            };
            if now - at < grace {
                // Nothing rings the bell when the grace ends: the wait must not sleep past it.
                st.look_within(std::time::Duration::from_nanos(grace - (now - at)));
                return Ok(None);
            }
            st.want_reply_notice(id)?;
            Ok(Some(()))
        });
        if let Err(e) = &r {
            self.core.lock().large_after_error(id, e);
        }
        r
    }

    /// Starts sending a message (`isend`); the request owns `buf` until it completes.
    pub fn isend(&self, mtype: i64, buf: Vec<u8>, node: i64, ptype: i64) -> Result<Mid> {
        check_type(mtype)?;
        check_ptype(ptype)?;
        let p = self.check_node(node)?;
        let data = UserBuf::lent(&buf);
        self.isend_inner(mtype, data, Some(buf), p)
    }

    /// Starts sending a message from memory the caller lends (`isend` of the C ABI).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until the request completes (msgwait,
    /// msgdone returning complete) or is cancelled (msgcancel); after msgignore, until the
    /// process finishes NX.
    pub unsafe fn isend_raw(
        &self,
        mtype: i64,
        ptr: *const u8,
        len: usize,
        node: i64,
        ptype: i64,
    ) -> Result<Mid> {
        check_type(mtype)?;
        check_ptype(ptype)?;
        if node == -1 {
            // A broadcast completes at once, like csend to -1.
            // SAFETY: valid for the call per this function's contract.
            let data = unsafe { UserBuf::new(ptr as *mut u8, len) };
            self.csend(mtype, data.bytes(), -1, ptype)?;
            return Ok(self.core.lock().new_send_req(None));
        }
        let p = self.check_node(node)?;
        // SAFETY: this function's contract is `UserBuf::new`'s.
        let data = unsafe { UserBuf::new(ptr as *mut u8, len) };
        self.isend_inner(mtype, data, None, p)
    }

    fn isend_inner(
        &self,
        mtype: i64,
        data: UserBuf,
        owned: Option<Vec<u8>>,
        p: usize,
    ) -> Result<Mid> {
        let threshold = self.threshold();
        let mut st = self.core.lock();
        st.progress(false)?;
        if data.len() <= threshold || p == self.core.me {
            st.send_small_nb(p, false, mtype, data.bytes())?;
            return Ok(st.new_send_req(None));
        }
        let id = st.start_large(p, false, mtype, data, owned, false)?;
        let mid = st.new_send_req(Some(id));
        st.bind_large(id, mid);
        Ok(mid)
    }

    /// A handler send (`hsend`, `hsendx`): starts sending `buf`, which the request owns, and
    /// returns; when the send completes, `handler` runs with the sent message's info (its
    /// type, length, destination node and process type) and gets the buffer back, as
    /// handlers of handler receives run (one at a time, held while masked by
    /// [`Nx::masktrap`]). A one-copy message is complete at once; a zero-copy one asks its
    /// receiver to notify the reply, so that the handler runs without this process calling
    /// NX again.
    pub fn hsend(
        &self,
        mtype: i64,
        buf: Vec<u8>,
        node: i64,
        ptype: i64,
        handler: impl FnMut(Info, Vec<u8>) + Send + 'static,
    ) -> Result<()> {
        let data = UserBuf::lent(&buf);
        self.hsend_inner(mtype, data, Some(buf), node, ptype, handler)
    }

    /// [`Nx::hsend`] from memory the caller lends (`hsend` of the C ABI); the handler gets an
    /// empty buffer.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until the handler has run.
    pub unsafe fn hsend_raw(
        &self,
        mtype: i64,
        ptr: *const u8,
        len: usize,
        node: i64,
        ptype: i64,
        handler: impl FnMut(Info) + Send + 'static,
    ) -> Result<()> {
        // SAFETY: this function's contract is `UserBuf::new`'s.
        let data = unsafe { UserBuf::new(ptr as *mut u8, len) };
        let mut handler = handler;
        self.hsend_inner(mtype, data, None, node, ptype, move |i, _| handler(i))
    }

    fn hsend_inner(
        &self,
        mtype: i64,
        data: UserBuf,
        owned: Option<Vec<u8>>,
        node: i64,
        ptype: i64,
        handler: impl FnMut(Info, Vec<u8>) + Send + 'static,
    ) -> Result<()> {
        check_type(mtype)?;
        check_ptype(ptype)?;
        let p = self.check_node(node)?;
        let info = Info {
            mtype,
            count: data.len(),
            node: p,
            ptype,
        };
        let mut handler = handler;
        {
            let mut st = self.core.lock();
            st.progress(false)?;
            if data.len() <= self.threshold() || p == self.core.me {
                st.send_small_nb(p, false, mtype, data.bytes())?;
                let mut owned = owned;
                let f: HandlerFn =
                    Box::new(move |i, _| handler(i, owned.take().unwrap_or_default()));
                st.queue_handler(f, info);
            } else {
                // The request owns the buffer until the send completes; the handler gets
                // it back then.
                let id = st.start_large(p, false, mtype, data, owned, false)?;
                let mid = st.new_send_req(Some(id));
                let f: HandlerFn = Box::new(move |i, b| handler(i, b.unwrap_or_default()));
                st.on_send_done(mid, f, info);
                st.bind_large(id, mid);
                st.want_reply_notice(id)?;
            }
        }
        self.core.run_ready();
        Ok(())
    }

    /// Sends a message to each node of `nodes` (`gsendx`), to the process of this process's
    /// type there. Every node is checked before anything is sent.
    pub fn gsendx(&self, mtype: i64, buf: &[u8], nodes: &[i64]) -> Result<()> {
        check_type(mtype)?;
        for &n in nodes {
            self.check_node(n)?;
        }
        let ptype = self.myptype();
        for &n in nodes {
            self.csend(mtype, buf, n, ptype)?;
        }
        Ok(())
    }

    // ----- receiving -----

    /// Receives a message of a type `typesel` selects into `buf` (`crecv`); returns its
    /// length. A longer message fills `buf` and is reported as `MessageTooLong`.
    pub fn crecv(&self, typesel: i64, buf: &mut [u8]) -> Result<usize> {
        self.crecvx(typesel, buf, -1, -1).map(|i| i.count)
    }

    /// Receives a message selected by type, node and process type (`crecvx`).
    pub fn crecvx(
        &self,
        typesel: i64,
        buf: &mut [u8],
        nodesel: i64,
        ptypesel: i64,
    ) -> Result<Info> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        self.recv_blocking(sel, buf)
    }

    fn recv_blocking(&self, sel: Sel, buf: &mut [u8]) -> Result<Info> {
        // The description is used only until this call returns: the receive completes, or
        // is cancelled below (which unexports the memory) before the borrow ends.
        let desc = UserBuf::lent_mut(buf);
        // The fast path: no request while no receive is posted and the message is small.
        let watch = (sel.nodesel >= 0).then_some(sel.nodesel as usize);
        let quick = self.core.wait_fast(
            "waiting for a message",
            watch,
            |st| Ok(st.take_direct(sel, desc)?.map(|(i, e)| Quick::Got(i, e))),
            |st| match st.take_arrived(sel, desc)? {
                Quick::Nothing => Ok(None),
                q => Ok(Some(q)),
            },
        )?;
        if let Quick::Got(info, err) = quick {
            return err.map_or(Ok(info), Err);
        }
        let (mid, done, watch) = {
            let mut st = self.core.lock();
            st.take_deferred()?;
            st.progress(false)?;
            let mid = st.post_recv(sel, desc, None, None, true)?;
            (mid, st.take_done(mid)?, st.waits_for(mid))
        };
        let r = match done {
            Some(c) => c
                .err
                .map_or(Ok(c.info), Err)
                .map(|info| Completion { info, buf: c.buf }),
            None => self.wait_mid_for(mid, watch),
        };
        // A sender may wait for the word that this receive's reads are done (best effort: a
        // failure here shows again at the next call).
        let _ = self.flush_pulled();
        match r {
            Ok(c) => Ok(c.info.expect("a receive has info")),
            Err(e) => {
                let _ = self.core.lock().cancel(mid);
                Err(e)
            }
        }
    }

    /// Sends the words of receiver-assisted transfers still queued for want of a packet
    /// buffer ([`Config::pull`]): their senders wait for them, and this process may not call
    /// NX again for a while.
    fn flush_pulled(&self) -> Result<()> {
        let waiting: Vec<usize> = {
            let st = self.core.lock();
            (0..self.core.n)
                .filter(|&p| p != self.core.me && st.pulled_queued(p))
                .collect()
        };
        for p in waiting {
            match self.core.wait("sending", Some(p), |st| {
                Ok((!st.pulled_queued(p)).then_some(()))
            }) {
                Ok(()) | Err(NxError::PeerLost { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Posts a receive into `buf` (`irecv`); [`Nx::msgwait`] gives the buffer back.
    pub fn irecv(&self, typesel: i64, buf: Vec<u8>) -> Result<Mid> {
        self.irecvx(typesel, buf, -1, -1)
    }

    /// Posts a receive selected by type, node and process type (`irecvx`).
    pub fn irecvx(
        &self,
        typesel: i64,
        mut buf: Vec<u8>,
        nodesel: i64,
        ptypesel: i64,
    ) -> Result<Mid> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        let desc = UserBuf::lent_mut(&mut buf);
        let mut st = self.core.lock();
        st.progress(false)?;
        st.post_recv(sel, desc, Some(buf), None, false)
    }

    /// Posts a receive into memory the caller lends (`irecvx` of the C ABI).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid, writable and untouched until the request completes or
    /// is cancelled; after msgignore, until the process finishes NX.
    pub unsafe fn irecv_raw(
        &self,
        typesel: i64,
        ptr: *mut u8,
        len: usize,
        nodesel: i64,
        ptypesel: i64,
    ) -> Result<Mid> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        // SAFETY: this function's contract is `UserBuf::new`'s.
        let desc = unsafe { UserBuf::new(ptr, len) };
        let mut st = self.core.lock();
        st.progress(false)?;
        st.post_recv(sel, desc, None, None, false)
    }

    /// A handler receive (`hrecvx`): when a message selected by type, node and process type
    /// arrives, it is stored in `buf` and `handler` runs with its info and the buffer, on the
    /// thread of whichever NX call or notification finds it (never two handlers at once;
    /// handlers do not nest). The receive can be cancelled with the returned id.
    ///
    /// A handler receive that fails (the message is longer than `buf`: [`NxError::MessageTooLong`];
    /// its sender could not write the data) does not run its handler: nobody waits for the
    /// receive, so its error is returned by the process's next call that waits or polls (a
    /// blocking call that has to wait, `msgwait`, `msgdone`, `iprobe`, [`Nx::poll`]; a `crecv`
    /// whose message is already there or a short `csend` that goes at once does not look), as
    /// NX reports an error of its own.
    pub fn hrecvx(
        &self,
        typesel: i64,
        mut buf: Vec<u8>,
        nodesel: i64,
        ptypesel: i64,
        handler: impl FnMut(Info, Vec<u8>) + Send + 'static,
    ) -> Result<Mid> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        let desc = UserBuf::lent_mut(&mut buf);
        let mut handler = handler;
        let f: HandlerFn = Box::new(move |info, b| handler(info, b.unwrap_or_default()));
        let mid = {
            let mut st = self.core.lock();
            st.progress(false)?;
            st.post_recv(sel, desc, Some(buf), Some(f), false)?
        };
        self.core.run_ready();
        Ok(mid)
    }

    /// A handler receive into memory the caller lends (`hrecv`/`hrecvx` of the C ABI).
    ///
    /// # Safety
    /// As [`Nx::irecv_raw`], until the handler has run or the receive is cancelled.
    pub unsafe fn hrecv_raw(
        &self,
        typesel: i64,
        ptr: *mut u8,
        len: usize,
        nodesel: i64,
        ptypesel: i64,
        handler: impl FnMut(Info) + Send + 'static,
    ) -> Result<Mid> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        // SAFETY: this function's contract is `UserBuf::new`'s.
        let desc = unsafe { UserBuf::new(ptr, len) };
        let mut handler = handler;
        let f: HandlerFn = Box::new(move |info, _| handler(info));
        let mid = {
            let mut st = self.core.lock();
            st.progress(false)?;
            st.post_recv(sel, desc, None, Some(f), false)?
        };
        self.core.run_ready();
        Ok(mid)
    }

    /// Masks (`true`) or unmasks handler receives' handlers (`masktrap`); returns the previous
    /// state. While masked, handlers of messages that arrive wait (masking waits for a
    /// handler running on another thread to finish); unmasking runs them.
    pub fn masktrap(&self, mask: bool) -> bool {
        let old = self
            .core
            .masked
            .swap(mask, std::sync::atomic::Ordering::AcqRel);
        if mask {
            // A handler already running on another thread finishes before this returns.
            self.core.wait_handlers();
        } else {
            self.core.run_ready();
        }
        old
    }

    /// Sends a message and receives the reply (`csendrecv`): returns the reply's length.
    #[allow(clippy::too_many_arguments)]
    pub fn csendrecv(
        &self,
        mtype: i64,
        sbuf: &[u8],
        node: i64,
        ptype: i64,
        typesel: i64,
        rbuf: &mut [u8],
    ) -> Result<usize> {
        check_type(mtype)?;
        check_ptype(ptype)?;
        let p = self.check_node(node)?;
        let sel = self.check_sel(typesel, -1, -1, false)?;
        // Post the receive first, so that a quick reply goes straight into `rbuf`.
        let desc = UserBuf::lent_mut(rbuf);
        let mid = self.core.lock().post_recv(sel, desc, None, None, true)?;
        let r = self
            .send_blocking(p, false, mtype, sbuf)
            .and_then(|()| self.wait_mid(mid));
        let _ = self.flush_pulled();
        match r {
            Ok(c) => Ok(c.info.expect("a receive has info").count),
            Err(e) => {
                let _ = self.core.lock().cancel(mid);
                Err(e)
            }
        }
    }

    // ----- requests -----

    fn wait_mid(&self, mid: Mid) -> Result<Completion> {
        let watch = self.core.lock().waits_for(mid);
        self.wait_mid_for(mid, watch)
    }

    fn wait_mid_for(&self, mid: Mid, watch: Option<usize>) -> Result<Completion> {
        let (c, err) = self.wait_mid_outcome(mid, watch)?;
        err.map_or(Ok(c), Err)
    }

    /// Waits for request `mid`: its completion, with the error it completed with.
    fn wait_mid_outcome(
        &self,
        mid: Mid,
        watch: Option<usize>,
    ) -> Result<(Completion, Option<NxError>)> {
        // Look the request up only when some request completed since the last look.
        let mut seen = None;
        let c = self.core.wait("waiting for a message", watch, |st| {
            if seen == Some(st.completions) {
                return Ok(None);
            }
            seen = Some(st.completions);
            st.take_done(mid)
        })?;
        let done = Completion {
            info: c.info,
            buf: c.buf,
        };
        Ok((done, c.err))
    }

    /// Waits for a request to complete and releases it (`msgwait`).
    pub fn msgwait(&self, mid: Mid) -> Result<Completion> {
        self.wait_mid(mid)
    }

    /// [`Nx::msgwait`] that hands back the completion of a request that failed too, with its
    /// error: a receive of a message too long for its buffer has the message's info, which NX
    /// puts in `irecvx`'s info array then too. `Err` only when the request did not complete
    /// (an invalid id, a peer lost, an error of an earlier call).
    pub fn msgwait_outcome(&self, mid: Mid) -> Result<(Completion, Option<NxError>)> {
        let watch = self.core.lock().waits_for(mid);
        self.wait_mid_outcome(mid, watch)
    }

    /// The request's completion if it is complete (then released), `None` otherwise
    /// (`msgdone`).
    pub fn msgdone(&self, mid: Mid) -> Result<Option<Completion>> {
        match self.msgdone_outcome(mid)? {
            None => Ok(None),
            Some((c, err)) => err.map_or(Ok(Some(c)), Err),
        }
    }

    /// [`Nx::msgdone`] that hands back the completion of a request that failed too, with its
    /// error, as [`Nx::msgwait_outcome`].
    pub fn msgdone_outcome(&self, mid: Mid) -> Result<Option<(Completion, Option<NxError>)>> {
        let c = {
            let mut st = self.core.lock();
            st.take_deferred()?;
            st.progress(false)?;
            st.take_done(mid)?
        };
        self.core.run_ready();
        Ok(c.map(|c| {
            let done = Completion {
                info: c.info,
                buf: c.buf,
            };
            (done, c.err)
        }))
    }

    /// Cancels a request (`msgcancel`): a receive stops and its memory is not written any
    /// more (a message it had started taking is lost); a send continues from a copy. Returns
    /// the buffer an owned request held.
    pub fn msgcancel(&self, mid: Mid) -> Result<Option<Vec<u8>>> {
        self.core.lock().cancel(mid)
    }

    /// Releases a request without waiting (`msgignore`); it completes in the background.
    pub fn msgignore(&self, mid: Mid) -> Result<()> {
        self.core.lock().ignore(mid)
    }

    /// Discards the messages selected by type, node and process type that have arrived
    /// (`flushmsg`); returns how many. The info of the last message received or probed is
    /// left as it was.
    pub fn flushmsg(&self, typesel: i64, nodesel: i64, ptypesel: i64) -> Result<usize> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        let last = self.core.lock().last;
        let mut flushed = 0;
        let r = loop {
            let found = {
                let mut st = self.core.lock();
                match st.progress(false) {
                    Ok(()) => st.probe(sel),
                    Err(e) => break Err(e),
                }
            };
            let Some(i) = found else { break Ok(flushed) };
            // The message probed, or another one the selector takes: either goes.
            let one = Sel {
                nodesel: i.node as i64,
                ..sel
            };
            let mut v = vec![0u8; i.count];
            match self.recv_blocking(one, &mut v) {
                Ok(_) | Err(NxError::MessageTooLong { .. }) => flushed += 1,
                Err(e) => break Err(e),
            }
        };
        self.core.lock().last = last;
        self.core.run_ready();
        r
    }

    // ----- probes and info -----

    /// Waits for a message of a type `typesel` selects, without receiving it (`cprobe`).
    pub fn cprobe(&self, typesel: i64) -> Result<Info> {
        self.cprobex(typesel, -1, -1)
    }

    /// Waits for a message selected by type, node and process type (`cprobex`).
    pub fn cprobex(&self, typesel: i64, nodesel: i64, ptypesel: i64) -> Result<Info> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        let watch = (nodesel >= 0).then_some(nodesel as usize);
        self.core
            .wait("probing for a message", watch, |st| Ok(st.probe(sel)))
    }

    /// Whether a message of a type `typesel` selects has arrived (`iprobe`).
    pub fn iprobe(&self, typesel: i64) -> Result<Option<Info>> {
        self.iprobex(typesel, -1, -1)
    }

    /// Makes progress (handlers of arrived messages run) and reports an error that an
    /// earlier call or a handler receive left for the next call (what `flick` does besides
    /// giving up the processor).
    pub fn poll(&self) -> Result<()> {
        {
            let mut st = self.core.lock();
            st.take_deferred()?;
            st.progress(false)?;
        }
        self.core.run_ready();
        Ok(())
    }

    /// Whether a message selected by type, node and process type has arrived (`iprobex`).
    pub fn iprobex(&self, typesel: i64, nodesel: i64, ptypesel: i64) -> Result<Option<Info>> {
        let sel = self.check_sel(typesel, nodesel, ptypesel, false)?;
        let r = {
            let mut st = self.core.lock();
            st.take_deferred()?;
            st.progress(false)?;
            st.probe(sel)
        };
        self.core.run_ready();
        Ok(r)
    }

    /// The info of the last message received or probed (`infocount`, `infonode`,
    /// `infotype`, `infoptype`).
    pub fn info(&self) -> Option<Info> {
        self.core.lock().last
    }

    /// Seconds on a fine clock (`dclock`): the virtual clock under the simulator.
    pub fn dclock(&self) -> f64 {
        Nx::dclock_now()
    }

    /// [`Nx::dclock`] without a handle.
    pub fn dclock_now() -> f64 {
        vmmc::pace::now_ns() as f64 * 1e-9
    }

    // ----- global operations -----

    fn internal_send(&self, p: usize, mtype: i64, data: &[u8]) -> Result<()> {
        self.send_blocking(p, true, mtype, data)
    }

    fn internal_recv(&self, from: usize, mtype: i64) -> Result<Vec<u8>> {
        let sel = Sel {
            typesel: mtype,
            nodesel: from as i64,
            ptypesel: -1,
            internal: true,
        };
        let len = self
            .core
            .wait("in a global operation", Some(from), |st| Ok(st.probe(sel)))?
            .count;
        let mut v = vec![0u8; len];
        let i = self.recv_blocking(sel, &mut v)?;
        v.truncate(i.count);
        Ok(v)
    }

    /// Node 0 gathers every node's bytes (in node order), `combine` makes the result, and
    /// every node gets it.
    fn gather_bcast(
        &self,
        mine: &[u8],
        combine: impl FnOnce(Vec<Vec<u8>>) -> Vec<u8>,
    ) -> Result<Vec<u8>> {
        let (me, n) = (self.core.me, self.core.n);
        if me == 0 {
            let mut all = Vec::with_capacity(n);
            all.push(mine.to_vec());
            for p in 1..n {
                all.push(self.internal_recv(p, T_GATHER)?);
            }
            let r = combine(all);
            for p in 1..n {
                self.internal_send(p, T_BCAST, &r)?;
            }
            Ok(r)
        } else {
            self.internal_send(0, T_GATHER, mine)?;
            self.internal_recv(0, T_BCAST)
        }
    }

    /// Waits until every node has called it (`gsync`).
    pub fn gsync(&self) -> Result<()> {
        self.gather_bcast(&[], |_| Vec::new()).map(drop)
    }

    /// Combines `x` element-wise over all nodes with `f`, in node order
    /// (`f(f(x0, x1), x2)...`), leaving the result in `x` on every node.
    pub fn gop<T: Elem>(&self, x: &mut [T], f: impl Fn(T, T) -> T) -> Result<()> {
        let mine = T::to_bytes(x);
        let r = self.gather_bcast(&mine, |all| {
            let mut acc: Vec<T> = T::from_bytes(&all[0]);
            for other in &all[1..] {
                let o = T::from_bytes(other);
                for (a, b) in acc.iter_mut().zip(o) {
                    *a = f(*a, b);
                }
            }
            T::to_bytes(&acc)
        })?;
        if r.len() != std::mem::size_of_val(x) {
            return Err(NxError::InvalidLength(r.len() as i64));
        }
        x.copy_from_slice(&T::from_bytes(&r));
        Ok(())
    }

    /// Global sum of doubles (`gdsum`).
    pub fn gdsum(&self, x: &mut [f64]) -> Result<()> {
        self.gop(x, |a, b| a + b)
    }
    /// Global sum of longs (`gisum`).
    pub fn gisum(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, |a, b| a.wrapping_add(b))
    }
    /// Global sum of floats (`gssum`).
    pub fn gssum(&self, x: &mut [f32]) -> Result<()> {
        self.gop(x, |a, b| a + b)
    }
    /// Global product of doubles (`gdprod`).
    pub fn gdprod(&self, x: &mut [f64]) -> Result<()> {
        self.gop(x, |a, b| a * b)
    }
    /// Global product of longs (`giprod`).
    pub fn giprod(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, |a, b| a.wrapping_mul(b))
    }
    /// Global product of floats (`gsprod`).
    pub fn gsprod(&self, x: &mut [f32]) -> Result<()> {
        self.gop(x, |a, b| a * b)
    }
    /// Global maximum of floats (`gshigh`).
    pub fn gshigh(&self, x: &mut [f32]) -> Result<()> {
        self.gop(x, f32::max)
    }
    /// Global minimum of floats (`gslow`).
    pub fn gslow(&self, x: &mut [f32]) -> Result<()> {
        self.gop(x, f32::min)
    }
    /// Global maximum of doubles (`gdhigh`).
    pub fn gdhigh(&self, x: &mut [f64]) -> Result<()> {
        self.gop(x, f64::max)
    }
    /// Global minimum of doubles (`gdlow`).
    pub fn gdlow(&self, x: &mut [f64]) -> Result<()> {
        self.gop(x, f64::min)
    }
    /// Global maximum of longs (`gihigh`).
    pub fn gihigh(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, i64::max)
    }
    /// Global minimum of longs (`gilow`).
    pub fn gilow(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, i64::min)
    }
    /// Global bitwise and of longs (`giand`).
    pub fn giand(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, |a, b| a & b)
    }
    /// Global bitwise or of longs (`gior`).
    pub fn gior(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, |a, b| a | b)
    }

    /// Global bitwise exclusive or of longs (`gixor`).
    pub fn gixor(&self, x: &mut [i64]) -> Result<()> {
        self.gop(x, |a, b| a ^ b)
    }
    /// Global logical and (`gland`): nonzero is true; every element becomes 1 or 0.
    pub fn gland(&self, x: &mut [i64]) -> Result<()> {
        self.glogical(x, |a, b| a && b)
    }
    /// Global logical or (`glor`): nonzero is true; every element becomes 1 or 0.
    pub fn glor(&self, x: &mut [i64]) -> Result<()> {
        self.glogical(x, |a, b| a || b)
    }
    /// Global logical exclusive or (`glxor`): nonzero is true; every element becomes 1 or 0.
    pub fn glxor(&self, x: &mut [i64]) -> Result<()> {
        self.glogical(x, |a, b| a != b)
    }

    /// A logical global operation on elements of any integer type (Fortran's LOGICAL is 4
    /// bytes, C's long 8).
    pub fn glogical<T: Elem + Default + PartialEq + From<bool>>(
        &self,
        x: &mut [T],
        f: impl Fn(bool, bool) -> bool,
    ) -> Result<()> {
        for v in x.iter_mut() {
            *v = T::from(*v != T::default());
        }
        self.gop(x, |a, b| T::from(f(a != T::default(), b != T::default())))
    }

    /// Global operation with a user function on raw bytes (`gopf`): `f(acc, other)` folds
    /// `other` into `acc`, over the nodes in order; every node gets the result in `x`.
    pub fn gopf(&self, x: &mut [u8], mut f: impl FnMut(&mut [u8], &[u8])) -> Result<()> {
        let r = self.gather_bcast(x, |all| {
            let mut acc = all[0].clone();
            for other in &all[1..] {
                f(&mut acc, other);
            }
            acc
        })?;
        if r.len() != x.len() {
            return Err(NxError::InvalidLength(r.len() as i64));
        }
        x.copy_from_slice(&r);
        Ok(())
    }

    /// Concatenates every node's `x` in node order (`gcol`, `gcolx`): every node gets the
    /// whole, and each part's length.
    pub fn gcolx(&self, x: &[u8]) -> Result<(Vec<u8>, Vec<usize>)> {
        let r = self.gather_bcast(x, |all| {
            let mut out = Vec::new();
            out.extend_from_slice(&(all.len() as u64).to_ne_bytes());
            for a in &all {
                out.extend_from_slice(&(a.len() as u64).to_ne_bytes());
            }
            for a in &all {
                out.extend_from_slice(a);
            }
            out
        })?;
        let word = |i: usize| -> Result<usize> {
            r.get(i * 8..i * 8 + 8)
                .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")) as usize)
                .ok_or(NxError::InvalidLength(r.len() as i64))
        };
        let n = word(0)?;
        let lens = (0..n).map(|i| word(i + 1)).collect::<Result<Vec<_>>>()?;
        let start = 8 * (n + 1);
        Ok((r[start..].to_vec(), lens))
    }
}

/// An element of a global operation.
pub trait Elem: Copy {
    /// The elements as bytes.
    fn to_bytes(x: &[Self]) -> Vec<u8>;
    /// The elements of bytes written by `to_bytes`.
    fn from_bytes(b: &[u8]) -> Vec<Self>;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn to_bytes(x: &[Self]) -> Vec<u8> {
                x.iter().flat_map(|v| v.to_ne_bytes()).collect()
            }
            fn from_bytes(b: &[u8]) -> Vec<Self> {
                b.chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| <$t>::from_ne_bytes(c.try_into().expect("an element")))
                    .collect()
            }
        }
    )*};
}
elem!(f64, f32, i64, i32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_selection_follows_nx() {
        use crate::core::type_matches;
        assert!(type_matches(-1, 0) && type_matches(-1, 5));
        assert!(type_matches(5, 5) && !type_matches(5, 6));
        // !5 == -6: everything but 5.
        assert!(!type_matches(!5, 5) && type_matches(!5, 6) && type_matches(!5, 0));
        assert!(check_typesel(-1).is_ok());
        assert!(check_typesel(!7).is_ok());
        assert!(check_typesel(MAX_TYPE + 1).is_err());
        assert!(check_type(FORCE_FIRST).is_ok() && check_type(-3).is_err());
    }
}
