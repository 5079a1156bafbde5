//! DestSpace: the range of the sender's address space where imported buffers appear as proxies
//! (seeds 000 and 004, "Destination proxy space").
//!
//! The space is reserved address space with no memory behind it (`PROT_NONE`), so a DestSpace
//! address can never be mistaken for local data. Each proxy gets its own fixed-size span; an
//! address is translated back to its proxy by a shift and an index into a table of atomic
//! pointers, with no lock, so sends by DestSpace address (the C ABI's) stay on the fast path.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes of DestSpace per proxy: the largest importable buffer.
pub const SPAN_SHIFT: u32 = 32;
/// Number of proxies one process can hold at once.
pub const MAX_PROXIES: usize = 1024;

/// A table from DestSpace spans to proxies.
pub struct DestSpace<T> {
    base: OnceLock<usize>,
    slots: Box<[AtomicPtr<T>]>,
    /// Entries unimported while a sender might still be translating through them; freed with
    /// the table (bounded by the number of unimports).
    retired: Mutex<Vec<Arc<T>>>,
    free: Mutex<Vec<usize>>,
}

impl<T> Default for DestSpace<T> {
    fn default() -> Self {
        DestSpace {
            base: OnceLock::new(),
            slots: (0..MAX_PROXIES)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            retired: Mutex::new(Vec::new()),
            free: Mutex::new((0..MAX_PROXIES).rev().collect()),
        }
    }
}

fn reserve() -> Result<usize> {
    let len = MAX_PROXIES << SPAN_SHIFT;
    // SAFETY: an inaccessible, unbacked reservation of address space.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os("mmap DestSpace"));
    }
    Ok(p as usize)
}

impl<T> DestSpace<T> {
    fn base(&self) -> Result<usize> {
        if let Some(b) = self.base.get() {
            return Ok(*b);
        }
        let b = reserve()?;
        if self.base.set(b).is_err() {
            // Lost a race: give our reservation back.
            // SAFETY: `b` is our own reservation, unused.
            unsafe { libc::munmap(b as *mut _, MAX_PROXIES << SPAN_SHIFT) };
        }
        Ok(*self.base.get().expect("set above"))
    }

    /// Takes a fresh span; returns its base address. Fill it with [`DestSpace::set`].
    pub fn alloc(&self) -> Result<usize> {
        let base = self.base()?;
        let idx = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Error::InvalidArgument(
                "too many imported buffers (DestSpace full)",
            ))?;
        Ok(base + (idx << SPAN_SHIFT))
    }

    /// Puts `entry` in the span at `addr` (from [`DestSpace::alloc`]).
    pub fn set(&self, addr: usize, entry: Arc<T>) {
        let Some(base) = self.base.get() else { return };
        let idx = (addr - base) >> SPAN_SHIFT;
        let old = self.slots[idx].swap(Arc::into_raw(entry) as *mut T, Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: from Arc::into_raw; keep it alive for concurrent translators.
            let a = unsafe { Arc::from_raw(old) };
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(a);
        }
    }

    /// Translates an address: the proxy and the offset within it.
    pub fn lookup(&self, addr: usize) -> Option<(&T, usize)> {
        let base = *self.base.get()?;
        let rel = addr.checked_sub(base)?;
        let idx = rel >> SPAN_SHIFT;
        let p = self.slots.get(idx)?.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null slots point to entries kept alive by `retired` or the slot itself
        // until the table is dropped.
        Some((unsafe { &*p }, rel & ((1usize << SPAN_SHIFT) - 1)))
    }

    /// Runs `f` holding the table's locks (tests).
    #[doc(hidden)]
    pub fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let _f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }

    /// Removes the entry at span base `addr`.
    pub fn remove(&self, addr: usize) {
        let Some(base) = self.base.get() else { return };
        let Some(idx) = addr.checked_sub(*base).map(|r| r >> SPAN_SHIFT) else {
            return;
        };
        let Some(slot) = self.slots.get(idx) else {
            return;
        };
        let p = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: `p` came from Arc::into_raw in `insert`.
            let a = unsafe { Arc::from_raw(p) };
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(a);
            self.free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(idx);
        }
    }
}

impl<T> Drop for DestSpace<T> {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            let p = s.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: from Arc::into_raw in `insert`.
                drop(unsafe { Arc::from_raw(p) });
            }
        }
        if let Some(b) = self.base.get() {
            // SAFETY: our own reservation.
            unsafe { libc::munmap(*b as *mut _, MAX_PROXIES << SPAN_SHIFT) };
        }
    }
}
