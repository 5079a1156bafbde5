//! Automatic update in software (DESIGN.md, "Automatic update in software").
//!
//! There is no snooping hardware, so an automatic-update region is a local [`Region`] whose
//! stores go through [`AutoUpdateBinding`]: each store is written locally and propagated to the
//! bound receive buffer. Without combining, every store is propagated at once (a transport
//! with [`crate::Caps::native_au`] does this at memory speed: a store into the remote mapping).
//! With combining, consecutive stores accumulate into one packet, as in the SHRIMP outgoing
//! FIFO, which is sent when a store is not consecutive, when it reaches a page, at
//! [`AutoUpdateBinding::flush`], or when a [`AuBatch`] guard drops. With `notify`, every
//! propagated packet raises a notification at the receiver (seed 000: all or nothing per
//! mapping). Unlike SHRIMP, no page alignment is required, and a deliberate update followed
//! by an automatic update to the same destination stays ordered.

use crate::endpoint::{check_transfer, Proxy};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::transport::WriteOpts;
use crate::types::WORD_SIZE;
use std::cell::Cell;

/// Options of a binding (seed 000's `SBL_Map` arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuOptions {
    /// Combine consecutive stores into one packet.
    pub combining: bool,
    /// Every propagated packet raises a notification.
    pub notify: bool,
}

/// Largest combined packet: one page, as on SHRIMP.
const MAX_PACKET: usize = 4096;

/// A local region bound to an imported buffer by automatic update.
///
/// Not `Sync`: stores from one thread keep their order; use one binding per thread.
pub struct AutoUpdateBinding {
    local: Region,
    proxy: Proxy,
    remote_offset: usize,
    opts: WriteOpts,
    combining: bool,
    /// Pending combined packet: local offsets `[start, end)`.
    dirty: Cell<Option<(usize, usize)>>,
    /// A packet being assembled from the local copy (allocated once, not per flush).
    packet: std::cell::RefCell<Vec<u8>>,
    /// The transport's native path: the receive buffer mapped here (word stores without
    /// combining or notification go straight into it).
    window: Option<crate::Window>,
    /// The transport packetizes stores itself ([`crate::Caps::au_packetizer`]).
    packetizer: bool,
    au: AuOptions,
}

impl Proxy {
    /// Binds a fresh local region of the receive buffer's size to it.
    pub fn bind(&self, opts: AuOptions) -> Result<AutoUpdateBinding> {
        let local = Region::alloc_private(self.len())?;
        self.bind_region(local, 0, opts)
    }

    /// Binds `local` to the receive buffer starting at `remote_offset`.
    pub fn bind_region(
        &self,
        local: Region,
        remote_offset: usize,
        opts: AuOptions,
    ) -> Result<AutoUpdateBinding> {
        check_transfer(remote_offset, local.len(), self.len())?;
        let packetizer = self.ep.caps().au_packetizer;
        Ok(AutoUpdateBinding {
            packetizer,
            au: opts,
            local,
            proxy: self.clone(),
            remote_offset,
            opts: WriteOpts {
                notify: opts.notify,
                ..Default::default()
            },
            combining: opts.combining,
            dirty: Cell::new(None),
            packet: std::cell::RefCell::new(Vec::new()),
            window: if opts.combining || opts.notify || packetizer {
                None
            } else {
                self.inner.remote.window()
            },
        })
    }
}

impl AutoUpdateBinding {
    /// The local region (reads see what was stored).
    pub fn local(&self) -> &Region {
        &self.local
    }
    /// The bound proxy.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }
    /// Length of the bound range.
    pub fn len(&self) -> usize {
        self.local.len()
    }
    /// Whether the bound range is empty (never).
    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }

    /// Stores a word: written locally and propagated. The fast path: no allocation, no lock.
    #[inline]
    pub fn store_u32(&self, offset: usize, value: u32) -> Result<()> {
        self.local.store_u32(offset, value)?;
        if self.packetizer {
            self.snooped(offset, &value.to_ne_bytes())
        } else if self.combining {
            self.combine(offset, WORD_SIZE)
        } else {
            self.propagate(offset, &value.to_ne_bytes())
        }
    }

    /// Stores `data` at `offset` (word multiples): written locally and propagated.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_transfer(offset, data.len(), self.local.len())?;
        self.local.write(offset, data)?;
        if self.packetizer {
            self.snooped(offset, data)
        } else if self.combining {
            self.combine(offset, data.len())
        } else {
            self.propagate(offset, data)
        }
    }

    /// Sends local bytes at `offset` to the receive buffer. The range was checked against the
    /// local region, which `bind` checked against the receive buffer, so only unimport and
    /// the transport's own checks remain.
    #[inline]
    fn propagate(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.proxy.ep.sh.engine.settle();
        let p = &self.proxy.inner;
        if !p.live.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::NotImported);
        }
        if let Some(w) = &self.window {
            return w.write(self.remote_offset + offset, data);
        }
        if p.max_write != 0 && data.len() > p.max_write {
            return p.write(self.remote_offset + offset, data, self.opts);
        }
        p.remote.write(self.remote_offset + offset, data, self.opts)
    }

    /// Hands a store to the transport's packetizer.
    fn snooped(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.proxy.ep.sh.engine.settle();
        if !self
            .proxy
            .inner
            .live
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::NotImported);
        }
        self.proxy
            .inner
            .remote
            .au_store(self.remote_offset + offset, data, self.au)
    }

    /// Reads a word of the local copy.
    pub fn load_u32(&self, offset: usize) -> Result<u32> {
        self.local.load_u32(offset)
    }

    fn combine(&self, offset: usize, len: usize) -> Result<()> {
        match self.dirty.get() {
            Some((s, e)) if e == offset && e + len - s <= MAX_PACKET => {
                self.dirty.set(Some((s, e + len)));
                return Ok(());
            }
            Some(_) => self.flush()?,
            None => {}
        }
        // A store larger than a packet leaves as full packets, in order; its tail stays
        // pending, so that the next consecutive store (a flag) combines with it.
        let (mut at, end) = (offset, offset + len);
        while end - at > MAX_PACKET {
            self.send_local(at, MAX_PACKET)?;
            at += MAX_PACKET;
        }
        self.dirty.set(Some((at, end)));
        Ok(())
    }

    /// Propagates `len` bytes of the local copy at `at` (at most a packet).
    fn send_local(&self, at: usize, len: usize) -> Result<()> {
        let mut packet = self.packet.borrow_mut();
        if packet.len() < len {
            packet.resize(MAX_PACKET.max(len), 0);
        }
        let p = &mut packet[..len];
        self.local.read(at, p)?;
        self.propagate(at, p)
    }

    /// Sends the pending combined packet, if any.
    pub fn flush(&self) -> Result<()> {
        if self.packetizer {
            return self.proxy.inner.remote.au_flush();
        }
        let Some((s, e)) = self.dirty.take() else {
            return Ok(());
        };
        self.send_local(s, e - s)
    }

    /// A guard that batches stores and flushes when dropped.
    pub fn batch(&self) -> AuBatch<'_> {
        AuBatch { b: self }
    }
}

impl Drop for AutoUpdateBinding {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            if !matches!(e, Error::Unexported | Error::NotImported) {
                eprintln!("vmmc: automatic update lost at unbind: {e}");
            }
        }
    }
}

/// Flushes its binding when dropped (DESIGN.md: "guards that flush on drop").
pub struct AuBatch<'a> {
    b: &'a AutoUpdateBinding,
}

impl std::ops::Deref for AuBatch<'_> {
    type Target = AutoUpdateBinding;
    fn deref(&self) -> &AutoUpdateBinding {
        self.b
    }
}

impl Drop for AuBatch<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.b.flush() {
            eprintln!("vmmc: automatic update flush failed: {e}");
        }
    }
}
