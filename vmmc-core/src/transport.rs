//! The boundary between the VMMC core and a fabric.
//!
//! A transport is the smallest set of operations every fabric can do, in the style of UCX's
//! transport layer under its protocol layer: it advertises what it does natively in [`Caps`]
//! and the core emulates the rest. Export names, permissions, the receive-buffer table,
//! notification dispatch and automatic update belong to the core ([`crate::Endpoint`]).
//!
//! # Contract
//! Every implementation keeps these guarantees; the conformance suite checks them.
//! - [`RemoteBuffer::write`] is reliable and in order per (sender, receiving process): when a
//!   receiver observes a write, every earlier write from the same sender to the same process is
//!   visible too.
//! - Within one write, the last word becomes visible last: a receiver that reads the last word
//!   with acquire ordering ([`crate::Region::load_u32`]) sees every earlier byte of that write.
//! - A notification is delivered by [`Transport::progress`] only after its own data and every
//!   earlier write on that path are visible.
//! - After [`Transport::unexport`] returns, no byte is written to the buffer any more, and
//!   writes through existing links fail with [`Error::Unexported`].
//! - A full queue is back-pressure ([`Error::WouldBlock`]), never a silent drop.
//! - A peer that dies is reported ([`Error::PeerLost`]); nothing waits on it forever.
//!
//! The core checks bounds and alignment before calling a transport, so a transport sees only
//! in-bounds, word-aligned transfers.

use crate::error::{Error, Result};
use crate::redirect::Redirected;
use crate::region::Region;
use crate::types::{BufId, Importers, JobInfo, Notification, ProcId};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a transport does natively (UCX's `UCT_IFACE_FLAG_*`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Caps {
    /// Reads of imported buffers without the exporter's help (`get_data`).
    pub remote_read: bool,
    /// Single stores can be propagated at memory speed (automatic update without combining).
    pub native_au: bool,
    /// Transfer redirection done where the data is placed.
    pub redirection: bool,
    /// The transport completes writes asynchronously by itself: `send_async` calls its write
    /// at once with [`WriteOpts::asynchronous`] (the simulated SHRIMP, whose DU engine and
    /// request queue are modelled) instead of queueing it for the core's engine thread.
    pub async_send: bool,
    /// Largest single write, in bytes (0: no limit); the core splits larger sends.
    pub max_write: usize,
    /// The transport packetizes automatic-update stores itself (the simulated snooping
    /// hardware with its combining and timer): the core hands it every store through
    /// [`RemoteBuffer::au_store`] instead of combining them into deliberate updates.
    pub au_packetizer: bool,
}

/// Options of one write: the options struct instead of one entry point per variant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOpts {
    /// Raise a notification at the receiver after the data is in memory.
    pub notify: bool,
    /// An asynchronous send on a transport with [`Caps::async_send`]: return once the
    /// transfer is initiated (the data is captured at the call), without waiting for it to
    /// leave memory.
    pub asynchronous: bool,
}

/// What the core asks a transport to export.
pub struct ExportSpec<'a> {
    /// The exporter's buffer id.
    pub buf: BufId,
    /// The receive buffer's memory.
    pub region: &'a Region,
    /// Who may import it; the transport's trusted party enforces this.
    pub importers: &'a Importers,
    /// Whether the buffer takes transfer redirection (seed 004).
    pub redirectable: bool,
    /// Whether the core has a handler for it (senders may skip notifications otherwise).
    pub has_handler: bool,
}

/// Result of polling an import request.
pub enum ImportPoll {
    /// The exporter has not exported the buffer yet.
    Pending,
    /// The import-export link is established.
    Ready(Box<dyn RemoteBuffer>),
}

/// Copies a message into mapped memory the way a deliberate update must land: the body with a
/// plain copy, then the last word with a release store, so a receiver that reads the last word
/// with acquire ordering sees every earlier byte.
///
/// # Safety
/// `dst..dst+data.len()` must be writable; `data.len()` a positive multiple of the word size
/// and `dst + data.len() - 4` word-aligned.
#[inline]
pub unsafe fn copy_ordered(dst: *mut u8, data: &[u8]) {
    let body = data.len() - crate::WORD_SIZE;
    let last = u32::from_ne_bytes(data[body..].try_into().expect("a word"));
    // SAFETY: the caller's contract.
    unsafe {
        if body >= 4096 && body >= stream_min() {
            stream_copy(dst, &data[..body]);
        } else {
            crate::region::copy_raw(data.as_ptr(), dst, body);
        }
        AtomicU32::from_ptr(dst.add(body).cast()).store(last, Ordering::Release);
    }
}

/// From this size on (default 32 KiB, or `VMMC_STREAM_MIN` bytes, at least 4096; `off`
/// never), a copy into a mapping bypasses the sender's cache with non-temporal stores: the
/// receiver then reads the message from memory instead of pulling every line out of the
/// sender's cache, which on the machines measured here made a 1 MiB transfer that the receiver
/// consumes about six times faster (the price: a receiver that never reads the data sees a
/// slower sender).
fn stream_min() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        match std::env::var("VMMC_STREAM_MIN")
            .ok()
            .as_deref()
            .map(str::trim)
        {
            Some("off") => usize::MAX,
            Some(v) => v.parse().unwrap_or(32 * 1024),
            None => 32 * 1024,
        }
    })
}

/// Copies with non-temporal stores, then fences them (they are not ordered by a later release
/// store on their own).
///
/// # Safety
/// `dst..dst+src.len()` writable and not overlapping `src`.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let n = src.len();
    // Head up to 16-byte alignment of the destination, then whole 16-byte blocks, then tail.
    let head = (dst as usize).wrapping_neg() % 16;
    let head = head.min(n);
    // SAFETY: all offsets stay within `0..n` of both buffers; stream stores need the 16-byte
    // alignment of `dst + head` established above; SSE2 is part of x86_64.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        let blocks = (n - head) / 16;
        for i in 0..blocks {
            let off = head + 16 * i;
            let v = _mm_loadu_si128(src.as_ptr().add(off) as *const __m128i);
            _mm_stream_si128(dst.add(off) as *mut __m128i, v);
        }
        let done = head + 16 * blocks;
        std::ptr::copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), n - done);
        _mm_sfence();
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

/// Values of a [`Window`]'s revocation word.
pub mod revoked {
    /// The link is live.
    pub const LIVE: u32 = 0;
    /// The exporter unexported the buffer.
    pub const UNEXPORTED: u32 = 1;
    /// The exporter left the job.
    pub const OWNER_GONE: u32 = 2;
}

/// A receive buffer mapped into the sender's address space, for native automatic update: a
/// store goes straight into the mapping. The protocol that keeps `unexport`'s promise: a
/// store increments `in_flight`, then checks `revoked` (both sequentially consistent), stores,
/// and decrements; the exporter sets `revoked`, then waits for `in_flight` to drain.
#[derive(Clone)]
pub struct Window {
    base: *mut u8,
    len: usize,
    in_flight: *const AtomicU32,
    revoked: *const AtomicU32,
    bell: *const crate::wait::Bell,
    _keep: Arc<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the pointers stay valid while `_keep` holds the mappings; all access is atomic.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

impl Window {
    /// A window over `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base+len` must be mapped, writable and word-aligned at `base`, and both atomics
    /// and the owner's doorbell `bell` (rung after every store) must stay valid, for as long
    /// as `keep` lives.
    pub unsafe fn new(
        base: *mut u8,
        len: usize,
        in_flight: &AtomicU32,
        revoked: &AtomicU32,
        bell: Option<&crate::wait::Bell>,
        keep: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Window {
        Window {
            base,
            len,
            in_flight,
            revoked,
            bell: bell.map_or(std::ptr::null(), |b| b as *const _),
            _keep: keep,
        }
    }

    /// Length of the mapped receive buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores a word at `offset` (word-aligned, in bounds: checked) with release ordering.
    #[inline]
    pub fn store_u32(&self, offset: usize, value: u32) -> Result<()> {
        self.write(offset, &value.to_ne_bytes())
    }

    /// Copies `data` (whole words) to `offset`, the last word last with release ordering, as a
    /// deliberate update would.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let n = data.len();
        if n == 0
            || !offset.is_multiple_of(crate::WORD_SIZE)
            || !n.is_multiple_of(crate::WORD_SIZE)
            || offset.checked_add(n).is_none_or(|e| e > self.len)
        {
            return Err(Error::OutOfBounds {
                offset,
                len: n,
                size: self.len,
            });
        }
        // SAFETY: valid while `_keep` lives (constructor contract).
        let (in_flight, revoked) = unsafe { (&*self.in_flight, &*self.revoked) };
        in_flight.fetch_add(1, Ordering::SeqCst);
        let r = match revoked.load(Ordering::SeqCst) {
            revoked::LIVE => {
                // SAFETY: in bounds and aligned (checked above; base is word-aligned).
                unsafe { copy_ordered(self.base.add(offset), data) };
                Ok(())
            }
            revoked::UNEXPORTED => Err(Error::Unexported),
            _ => Err(Error::PeerLost("the exporter left the job".into())),
        };
        in_flight.fetch_sub(1, Ordering::SeqCst);
        crate::wait::fence_after_rmw();
        // SAFETY: valid while `_keep` lives (constructor contract), when not null.
        if let Some(bell) = unsafe { self.bell.as_ref() } {
            bell.ring_ordered();
        }
        r
    }
}

/// The sender's side of an import-export link.
pub trait RemoteBuffer: Send + Sync {
    /// The mapped receive buffer, when stores can go straight into it ([`Caps::native_au`]).
    fn window(&self) -> Option<Window> {
        None
    }
    /// Size of the receive buffer in bytes.
    fn len(&self) -> usize;
    /// Whether the receive buffer is empty (never, in practice).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Deliberate update: copies `data` to `offset` in the receive buffer and returns when the
    /// data has left (it is visible, or in flight on an ordered path).
    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()>;
    /// Posts again the notification of a deliberate update whose data landed but whose
    /// notification met a full queue at the receiver ([`Error::WouldBlock`]): `offset` of the
    /// last word and its `value`. The default writes that word again with a notification;
    /// transports with a notification queue of their own post only the notification.
    fn notify(&self, offset: usize, value: u32) -> Result<()> {
        self.write(
            offset,
            &value.to_ne_bytes(),
            WriteOpts {
                notify: true,
                ..Default::default()
            },
        )
    }
    /// Remote read of the receive buffer (when [`Caps::remote_read`]).
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let _ = (offset, out);
        Err(Error::Unsupported("remote read"))
    }
    /// Waits until every earlier write through this link is visible at the receiver.
    fn fence(&self) -> Result<()> {
        Ok(())
    }
    /// Automatic update through the transport's packetizer ([`Caps::au_packetizer`]): `data`
    /// was just stored at the sender and is snooped on its way to `offset`. Transports
    /// without a packetizer never see this call; the default sends a deliberate update.
    fn au_store(&self, offset: usize, data: &[u8], opts: crate::AuOptions) -> Result<()> {
        self.write(
            offset,
            data,
            WriteOpts {
                notify: opts.notify,
                ..Default::default()
            },
        )
    }
    /// Sends the packet the packetizer is combining, if any (a binding's flush or guard).
    fn au_flush(&self) -> Result<()> {
        Ok(())
    }
}

/// A deliberate update with notification that waits (through `vmmc::wait`) while the
/// receiver's notification queue is full ([`Error::WouldBlock`]), posting the notification
/// again once there is room.
pub(crate) fn write_notify_wait(r: &dyn RemoteBuffer, offset: usize, data: &[u8]) -> Result<()> {
    let opts = WriteOpts {
        notify: true,
        ..Default::default()
    };
    match r.write(offset, data, opts) {
        Err(Error::WouldBlock) => {}
        other => return other,
    }
    static SITE: crate::wait::Site = crate::wait::Site::new("vmmc.notify-full");
    let last = offset + data.len() - crate::WORD_SIZE;
    let value = u32::from_ne_bytes(
        data[data.len() - crate::WORD_SIZE..]
            .try_into()
            .expect("a word"),
    );
    // Nobody rings when the receiver makes room: naps past the spin.
    let nap = crate::wait::Nap::new();
    let mut w = crate::wait::Wait::on(&SITE, &nap);
    loop {
        match r.notify(last, value) {
            Err(Error::WouldBlock) => w.idle(),
            other => return other,
        }
    }
}

/// What [`Transport::spawn`] starts.
#[derive(Clone, Copy, Debug)]
pub struct SpawnSpec<'a> {
    /// The host, one of the session's hosts (`Endpoint::session_hosts`).
    pub host: &'a str,
    /// The program (a path, or a name looked up in the `PATH` of the host).
    pub program: &'a str,
    /// Its arguments, without the program name.
    pub args: &'a [String],
}

/// A fabric under the VMMC core. Object safe: the core holds it as `Arc<dyn Transport>`.
pub trait Transport: Send + Sync {
    /// Short name ("shm", "sim", ...).
    fn name(&self) -> &'static str;
    /// What the transport does natively.
    fn caps(&self) -> Caps;
    /// The job as learned at bootstrap.
    fn job(&self) -> &JobInfo;
    /// Allocates memory for a receive buffer where the transport writes it fastest (an MPI
    /// transport's allocated window), or `None` to let the core map it ([`Region::alloc`]).
    fn alloc(&self, len: usize, kind: crate::MemKind) -> Option<Result<Region>> {
        let _ = (len, kind);
        None
    }
    /// Makes a receive buffer importable, through the trusted party.
    fn export(&self, spec: ExportSpec<'_>) -> Result<()>;
    /// Breaks every link to `buf`, waits for data in flight, and unregisters it. The buffer
    /// is gone even when this returns an error (the core forgets it either way).
    fn unexport(&self, buf: BufId) -> Result<()>;
    /// Starts an import; returns a request handle to poll.
    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64>;
    /// Polls an import request; with `wait`, blocks until it is ready or fails.
    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll>;
    /// Forgets an import request that will not be polled to completion (dropped): nothing
    /// of it may stay behind, neither at the trusted party nor in a late grant's resources.
    fn import_cancel(&self, request: u64) {
        let _ = request;
    }
    /// Delivers arrived notifications to `sink`, waiting up to `timeout` for the first one
    /// (`None`: until one arrives or [`Transport::wake`] is called). Returns how many.
    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize>;
    /// Makes a concurrent [`Transport::progress`] return early.
    fn wake(&self);
    /// Whether a process of the job is still running.
    fn peer_alive(&self, p: ProcId) -> bool;
    /// Whether a process of the job ended by failing (killed, crashed, or exited with an
    /// error) rather than by leaving cleanly. `false` where the transport cannot tell.
    fn peer_failed(&self, p: ProcId) -> bool {
        let _ = p;
        false
    }
    /// Posts a redirection on an exported redirectable buffer: data arriving for
    /// `buf_offset..buf_offset+len` goes to `dest[dest_offset..]` instead.
    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()>;
    /// Cancels the posted redirection and reports exactly what was redirected.
    fn end_redir(&self, buf: BufId) -> Result<Redirected>;
    /// Offset of the last word of the last message into a redirectable buffer, if any since
    /// the last clear.
    fn data_end(&self, buf: BufId) -> Result<Option<usize>>;
    /// Clears the end-of-data word.
    fn clear_data_end(&self, buf: BufId) -> Result<()>;
    /// Runs `f` while holding every lock of the transport (tests use it to show that the
    /// deliberate- and automatic-update paths take none).
    #[doc(hidden)]
    fn hold_locks(&self, f: &mut dyn FnMut()) {
        f()
    }
    /// Starts a new process of the job on `host` (seed 004, `vmmc_Spawn`) through the job's
    /// trusted party and returns its identity once it has joined: a fresh squid, importable
    /// and importing like the processes the launcher started. A transport that cannot grow a
    /// job returns [`Error::Unsupported`].
    fn spawn(&self, spec: &SpawnSpec<'_>) -> Result<ProcId> {
        let _ = spec;
        Err(Error::Unsupported(
            "vmmc_Spawn: this transport cannot add processes to a running job",
        ))
    }
    /// Leaves the job cleanly (peers see an exit, not a crash).
    fn finish(&self) -> Result<()> {
        Ok(())
    }
}
