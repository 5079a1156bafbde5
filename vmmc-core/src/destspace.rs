//! DestSpace: the range of the sender's address space where imported buffers appear as proxies
//! (seeds 000 and 004, "Destination proxy space").
//!
//! The space is reserved address space with no memory behind it (`PROT_NONE`), so a DestSpace
//! address can never be mistaken for local data. Each proxy gets its own fixed-size span; an
//! address is translated back to its proxy by a shift and an index into a table of atomic
//! pointers, with no lock, so sends by DestSpace address (the C ABI's) stay on the fast path.
//! Each slot counts the translations in progress; removing an entry waits for them, then frees
//! it (and with it the transport's mappings), so nothing is kept past `unimport`.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Number of proxies one process can hold at once.
pub const MAX_PROXIES: usize = 1024;
/// Span sizes tried, largest first: 4 GiB per proxy needs 4 TiB of address space; machines
/// with less (an address-space limit, 39-bit kernels) get smaller spans.
const SHIFTS: [u32; 4] = [32, 30, 28, 26];

#[repr(align(64))]
struct Slot<T> {
    ptr: AtomicPtr<T>,
    readers: AtomicU32,
}

/// A table from DestSpace spans to proxies.
pub struct DestSpace<T> {
    /// (base address, span shift), reserved on first use.
    base: OnceLock<(usize, u32)>,
    slots: Box<[Slot<T>]>,
    free: Mutex<Vec<usize>>,
}

impl<T> Default for DestSpace<T> {
    fn default() -> Self {
        DestSpace {
            base: OnceLock::new(),
            slots: (0..MAX_PROXIES)
                .map(|_| Slot {
                    ptr: AtomicPtr::new(std::ptr::null_mut()),
                    readers: AtomicU32::new(0),
                })
                .collect(),
            free: Mutex::new((0..MAX_PROXIES).rev().collect()),
        }
    }
}

/// DestSpaces of this process that may take the largest span: a process holds one per
/// endpoint, and the simulator runs every node's endpoint in one process, where 64 spans of
/// 4 TiB would exceed the 128 TiB of a 47-bit user address space.
const LARGEST_SPANS: usize = 16;

fn reserve() -> Result<(usize, u32)> {
    static RESERVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let skip = usize::from(RESERVED.fetch_add(1, Ordering::Relaxed) >= LARGEST_SPANS);
    for &shift in &SHIFTS[skip..] {
        let len = MAX_PROXIES << shift;
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
        if p != libc::MAP_FAILED {
            return Ok((p as usize, shift));
        }
    }
    Err(Error::last_os("mmap DestSpace"))
}

impl<T> DestSpace<T> {
    fn base(&self) -> Result<(usize, u32)> {
        if let Some(b) = self.base.get() {
            return Ok(*b);
        }
        let b = reserve()?;
        if self.base.set(b).is_err() {
            // Lost a race: give our reservation back.
            // SAFETY: `b` is our own reservation, unused.
            unsafe { libc::munmap(b.0 as *mut _, MAX_PROXIES << b.1) };
        }
        Ok(*self.base.get().expect("set above"))
    }

    /// The largest buffer a proxy can stand for.
    pub fn max_len(&self) -> Result<usize> {
        Ok(1usize << self.base()?.1)
    }

    /// Takes a fresh span; returns its base address. Fill it with [`DestSpace::set`].
    pub fn alloc(&self) -> Result<usize> {
        let (base, shift) = self.base()?;
        let idx = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Error::InvalidArgument(
                "too many imported buffers (DestSpace full)",
            ))?;
        Ok(base + (idx << shift))
    }

    fn index(&self, addr: usize) -> Option<(usize, usize)> {
        let (base, shift) = *self.base.get()?;
        let rel = addr.checked_sub(base)?;
        let idx = rel >> shift;
        (idx < MAX_PROXIES).then_some((idx, rel & ((1usize << shift) - 1)))
    }

    /// Puts `entry` in the empty span at `addr` (from [`DestSpace::alloc`]).
    pub fn set(&self, addr: usize, entry: Arc<T>) {
        if let Some((idx, _)) = self.index(addr) {
            let old = self.slots[idx]
                .ptr
                .swap(Arc::into_raw(entry) as *mut T, Ordering::SeqCst);
            debug_assert!(old.is_null(), "DestSpace span filled twice");
        }
    }

    /// Translates `addr` and runs `f` on its entry and the offset within it; `None` when the
    /// address belongs to no entry. No lock: a count of readers on the slot keeps the entry
    /// alive while `f` runs.
    #[inline]
    pub fn with<R>(&self, addr: usize, f: impl FnOnce(&T, usize) -> R) -> Option<R> {
        let (idx, off) = self.index(addr)?;
        let slot = &self.slots[idx];
        slot.readers.fetch_add(1, Ordering::SeqCst);
        let p = slot.ptr.load(Ordering::SeqCst);
        let r = if p.is_null() {
            None
        } else {
            // SAFETY: `remove` takes the pointer out, then waits for the readers it may have
            // missed (us) before freeing it: Dekker with the SeqCst operations on both sides.
            Some(f(unsafe { &*p }, off))
        };
        slot.readers.fetch_sub(1, Ordering::Release);
        r
    }

    /// Removes the entry at span base `addr`, waits for translations in progress, and frees
    /// the span. Must not be called from inside [`DestSpace::with`].
    pub fn remove(&self, addr: usize) {
        let Some((idx, _)) = self.index(addr) else {
            return;
        };
        let slot = &self.slots[idx];
        let p = slot.ptr.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if p.is_null() {
            return;
        }
        while slot.readers.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: `p` came from Arc::into_raw in `set`, and no reader holds it any more.
        drop(unsafe { Arc::from_raw(p) });
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(idx);
    }

    /// Runs `f` holding the table's lock (tests).
    #[doc(hidden)]
    pub fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }
}

impl<T> Drop for DestSpace<T> {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            let p = s.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: from Arc::into_raw in `set`; no readers remain at drop.
                drop(unsafe { Arc::from_raw(p) });
            }
        }
        if let Some((b, shift)) = self.base.get() {
            // SAFETY: our own reservation.
            unsafe { libc::munmap(*b as *mut _, MAX_PROXIES << shift) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_frees_and_reuses_spans() {
        let d: DestSpace<u32> = DestSpace::default();
        let a = d.alloc().unwrap();
        let entry = Arc::new(7u32);
        d.set(a, entry.clone());
        assert_eq!(d.with(a + 12, |v, off| (*v, off)), Some((7, 12)));
        assert_eq!(d.with(a.wrapping_sub(1), |v, _| *v), None);
        assert_eq!(Arc::strong_count(&entry), 2);
        d.remove(a);
        assert_eq!(Arc::strong_count(&entry), 1, "freed at remove, not kept");
        assert_eq!(d.with(a, |v, _| *v), None);
        let all: Vec<usize> = (0..MAX_PROXIES).map(|_| d.alloc().unwrap()).collect();
        assert!(d.alloc().is_err(), "bounded");
        assert!(all.contains(&a), "spans are reused");
    }
}
