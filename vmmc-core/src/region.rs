//! Memory regions that VMMC may write behind the program's back.
//!
//! A receive buffer is written by other processes while this one runs, so the program never
//! holds a `&[u8]` to it: it reads and writes through [`Region`]'s copying and atomic
//! accessors. Two kinds exist, the two SHRIMP paths of DESIGN.md: `Shared` memory (a memfd
//! that importers map and write at user level) and `Private` process memory (written by the
//! kernel on the sender's behalf, one system call per send).

use crate::error::{Error, Result};
use crate::types::WORD_SIZE;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Where a region's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Shared memory (memfd) that importers on the same host map.
    Shared,
    /// Ordinary process memory.
    Private,
}

struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Length actually mapped (rounded up to a page); 0 when the memory is borrowed.
    mapped: usize,
    fd: Option<OwnedFd>,
    /// Who gives the memory back when the last clone drops (a transport's pool).
    _owner: Option<Box<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: the mapping is plain memory; all access goes through raw pointers with the
// synchronisation the accessors state.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // SAFETY: ptr/mapped come from our own successful mmap and nobody else unmaps it.
            unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
        }
    }
}

/// A contiguous memory region owned by the library (cheap to clone: clones share it).
#[derive(Clone)]
pub struct Region {
    map: Arc<Mapping>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &self.map.ptr)
            .field("len", &self.map.len)
            .field("kind", &self.kind())
            .finish()
    }
}

/// `len` rounded up to whole pages; a length no mapping can have is an invalid argument
/// (not an overflow).
fn round_up_page(len: usize) -> Result<usize> {
    let p = crate::types::page_size();
    len.div_ceil(p)
        .max(1)
        .checked_mul(p)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(Error::InvalidArgument("region length too large"))
}

impl Region {
    /// Allocates `len` zeroed bytes of shared memory (a memfd mapped here).
    pub fn alloc_shared(len: usize) -> Result<Region> {
        if len == 0 {
            return Err(Error::InvalidArgument("region length must be positive"));
        }
        let mapped = round_up_page(len)?;
        // SAFETY: memfd_create with a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"vmmc-region".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("memfd_create"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), mapped as libc::off_t) } != 0 {
            return Err(Error::last_os("ftruncate"));
        }
        let ptr = map_fd(fd.as_raw_fd(), mapped)?;
        Ok(Region {
            map: Arc::new(Mapping {
                ptr,
                len,
                mapped,
                fd: Some(fd),
                _owner: None,
            }),
        })
    }

    /// Allocates `len` zeroed bytes of private (anonymous) process memory.
    pub fn alloc_private(len: usize) -> Result<Region> {
        if len == 0 {
            return Err(Error::InvalidArgument("region length must be positive"));
        }
        let mapped = round_up_page(len)?;
        // SAFETY: anonymous private mapping, no file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap"));
        }
        Ok(Region {
            map: Arc::new(Mapping {
                ptr: ptr.cast(),
                len,
                mapped,
                fd: None,
                _owner: None,
            }),
        })
    }

    /// Allocates a region of the given kind.
    pub fn alloc(len: usize, kind: MemKind) -> Result<Region> {
        match kind {
            MemKind::Shared => Region::alloc_shared(len),
            MemKind::Private => Region::alloc_private(len),
        }
    }

    /// Maps `len` bytes of a shared-memory descriptor received from another process.
    pub fn map_shared_fd(fd: OwnedFd, len: usize) -> Result<Region> {
        let mapped = round_up_page(len)?;
        let ptr = map_fd(fd.as_raw_fd(), mapped)?;
        Ok(Region {
            map: Arc::new(Mapping {
                ptr,
                len,
                mapped,
                fd: Some(fd),
                _owner: None,
            }),
        })
    }

    /// Wraps memory the caller owns (the C ABI's `vmmc_ExportRecvBuf(addr, len)`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, writable memory that stays allocated for as long as any
    /// clone of the returned region lives, and that the caller reads only with the same care
    /// as any memory written by another thread.
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Region {
        Region {
            map: Arc::new(Mapping {
                ptr,
                len,
                mapped: 0,
                fd: None,
                _owner: None,
            }),
        }
    }

    /// Wraps memory that a transport allocated for a receive buffer (an MPI window's, say):
    /// `owner` is dropped, and gives the memory back, when the last clone of the region is.
    /// The region reports itself as [`MemKind::Private`] (no descriptor to share).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, writable, zeroed or initialised memory that stays
    /// allocated until `owner` is dropped.
    pub unsafe fn from_owned_parts(
        ptr: *mut u8,
        len: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Region {
        Region {
            map: Arc::new(Mapping {
                ptr,
                len,
                mapped: 0,
                fd: None,
                _owner: Some(owner),
            }),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Whether the region is empty (never, for allocated regions).
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// Address of the first byte in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr
    }

    /// The memory's kind.
    pub fn kind(&self) -> MemKind {
        if self.map.fd.is_some() {
            MemKind::Shared
        } else {
            MemKind::Private
        }
    }

    /// The shared-memory descriptor, for `Shared` regions.
    pub fn fd(&self) -> Option<RawFd> {
        self.map.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Whether two regions share memory.
    pub fn same(&self, other: &Region) -> bool {
        Arc::ptr_eq(&self.map, &other.map)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.map.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                size: self.map.len,
            }),
        }
    }

    fn word(&self, offset: usize) -> Result<&AtomicU32> {
        self.check(offset, WORD_SIZE)?;
        if !(self.map.ptr as usize + offset).is_multiple_of(WORD_SIZE) {
            return Err(Error::Unaligned {
                offset,
                len: WORD_SIZE,
            });
        }
        // SAFETY: in bounds and 4-byte aligned; the mapping outlives `self`; AtomicU32 has the
        // layout of u32 and every access to shared words is atomic.
        Ok(unsafe { &*(self.map.ptr.add(offset) as *const AtomicU32) })
    }

    /// Copies `out.len()` bytes starting at `offset` out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        // SAFETY: bounds checked; the source may be written concurrently by a peer, which is
        // the documented nature of a receive buffer (bytes may be torn, words read with
        // `load_u32` are not).
        unsafe { copy_small(self.map.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into the region at `offset` (a local store, not a transfer).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: bounds checked; the region is writable memory of ours.
        unsafe { copy_small(data.as_ptr(), self.map.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check(offset, len)?;
        // SAFETY: bounds checked.
        unsafe { std::ptr::write_bytes(self.map.ptr.add(offset), byte, len) };
        Ok(())
    }

    /// Reads the word at `offset` with acquire ordering: a receiver that sees the last word of
    /// a message this way sees all of it.
    pub fn load_u32(&self, offset: usize) -> Result<u32> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Stores a word at `offset` with release ordering.
    pub fn store_u32(&self, offset: usize, value: u32) -> Result<()> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Adds `delta` (wrapping) to the word at `offset` atomically; returns the old value. For
    /// words that several processes sharing this memory update (a reference count), never for
    /// remote words, which VMMC only writes.
    pub fn fetch_add_u32(&self, offset: usize, delta: u32) -> Result<u32> {
        Ok(self.word(offset)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// Waits (spinning, yielding or sleeping as [`crate::wait`] decides) until the word at
    /// `offset` satisfies `done`; returns its value.
    /// `give_up` is polled now and then and ends the wait with its error (e.g. peer lost).
    pub fn wait_u32(
        &self,
        offset: usize,
        done: impl FnMut(u32) -> bool,
        give_up: impl FnMut() -> Result<()>,
    ) -> Result<u32> {
        self.wait_u32_at(&WORD_SITE, offset, done, give_up)
    }

    /// [`Region::wait_u32`] counted at a library's own `site` in [`crate::wait::counts`].
    pub fn wait_u32_at(
        &self,
        site: &'static crate::wait::Site,
        offset: usize,
        mut done: impl FnMut(u32) -> bool,
        mut give_up: impl FnMut() -> Result<()>,
    ) -> Result<u32> {
        let w = self.word(offset)?;
        let mut wait = crate::wait::Wait::new(site);
        let mut turns = 0u32;
        loop {
            let v = w.load(Ordering::Acquire);
            if done(v) {
                return Ok(v);
            }
            turns = turns.wrapping_add(1);
            if wait.resting() || turns.is_multiple_of(1024) {
                if let Err(e) = give_up() {
                    // Data that arrived before the reason to give up is still good.
                    let v = w.load(Ordering::Acquire);
                    return if done(v) { Ok(v) } else { Err(e) };
                }
            }
            wait.idle();
        }
    }
}

/// [`Region::wait_u32`]'s waits.
static WORD_SITE: crate::wait::Site = crate::wait::Site::new("vmmc.word");

fn map_fd(fd: RawFd, len: usize) -> Result<*mut u8> {
    // SAFETY: shared mapping of a memfd of at least `len` bytes.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::last_os("mmap"));
    }
    Ok(ptr.cast())
}

/// Copies `src` into `dst` as the core's own copies do: a copy of [`ALIGN_DST_ABOVE`] bytes
/// or more between different offsets within a cache line brings the destination to a
/// 64-byte boundary first, which keeps AMD EPYC's `rep movsb` at full speed. For libraries
/// that copy between their own buffers (a socket ring's images).
///
/// # Panics
/// If the lengths differ, as [`slice::copy_from_slice`].
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
    // SAFETY: two valid slices of the same length; a `&mut` cannot overlap a `&`.
    unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr(), dst.len()) }
}

/// [`copy_bytes`] between raw pointers: for transports that copy into or out of mappings
/// that other processes write.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`] for `len` bytes.
#[inline]
pub unsafe fn copy_raw(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { copy_small(src, dst, len) }
}

/// `copy_nonoverlapping` with the sizes of single values made constant, so that a word or a
/// double word is one load and one store instead of a call to the C library's memmove (the
/// element accessors of shared virtual memory copy one value at a time), and any length up
/// to 64 at most two overlapping moves of constant size (a short message's bytes, a
/// deliberate update's body before its flag, a packet's line).
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`] for `len` bytes.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, for the same `len` in every arm; in the short arms both
    // moves stay within the `n` bytes (n >= the move's size), and the source and the
    // destination do not overlap, so a byte moved twice is the same byte.
    unsafe {
        match len {
            4 => std::ptr::copy_nonoverlapping(src, dst, 4),
            8 => std::ptr::copy_nonoverlapping(src, dst, 8),
            16 => std::ptr::copy_nonoverlapping(src, dst, 16),
            n @ 9..16 => {
                std::ptr::copy_nonoverlapping(src, dst, 8);
                std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
            }
            n @ 5..8 => {
                std::ptr::copy_nonoverlapping(src, dst, 4);
                std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
            }
            // A loop here would be turned back into a call to `memcpy` by the compiler.
            n @ 1..4 => {
                std::ptr::copy_nonoverlapping(src, dst, 1);
                if n > 1 {
                    std::ptr::copy_nonoverlapping(src.add(n - 2), dst.add(n - 2), 2);
                }
            }
            0 => {}
            // A packet's line or a short message: two overlapping moves here too, not a
            // call to the C library (which does the same two moves after its call and
            // dispatch).
            n @ 17..=32 => {
                std::ptr::copy_nonoverlapping(src, dst, 16);
                std::ptr::copy_nonoverlapping(src.add(n - 16), dst.add(n - 16), 16);
            }
            n @ 33..=64 => {
                std::ptr::copy_nonoverlapping(src, dst, 32);
                std::ptr::copy_nonoverlapping(src.add(n - 32), dst.add(n - 32), 32);
            }
            n if n > ALIASED_ABOVE && aliased(src, dst) => {
                // Backwards, a cache line at a time to 64-byte-aligned destinations (see
                // `aliased`): the last bytes first, up to a line boundary.
                let tail = (dst as usize + n) & 63;
                let mut k = n - tail;
                std::ptr::copy_nonoverlapping(src.add(k), dst.add(k), tail);
                while k >= 64 {
                    k -= 64;
                    std::ptr::copy_nonoverlapping(src.add(k), dst.add(k), 64);
                }
                std::ptr::copy_nonoverlapping(src, dst, k);
            }
            n if n >= ALIGN_DST_ABOVE && (src as usize ^ dst as usize) & 63 != 0 => {
                // The bulk of the copy goes to a cache-line-aligned destination (see
                // `ALIGN_DST_ABOVE`).
                let head = (dst as usize).wrapping_neg() & 63;
                std::ptr::copy_nonoverlapping(src, dst, head);
                std::ptr::copy_nonoverlapping(src.add(head), dst.add(head), n - head);
            }
            n => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// Whether a forward copy from `src` to `dst` would stall on 4K aliasing: the destination
/// 1 to 31 bytes ahead of the source modulo 4 KiB (measured byte by byte; 32 and more run at
/// full speed), so that each load of the source looks like a load from an address the copy
/// has just stored to (the processor compares only the low 12 bits at first). The C
/// library's `memcpy` of 4 KiB then took 2.2 us instead of 0.1, and of 64 KiB 22-35 us
/// instead of 1.3-1.6, on this machine (AMD EPYC); a backward copy by cache lines takes at
/// most 0.18 and 4 us. It is the common case, not a corner: a large buffer from `malloc`
/// starts 16 bytes into a page, and a received page or ring chunk is page-aligned (a fetch
/// of shared virtual memory into such a buffer took 3.3 us instead of 1.2).
#[inline(always)]
fn aliased(src: *const u8, dst: *mut u8) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize) & 4095;
    d != 0 && d < 32
}

/// Copies longer than this go backwards where [`aliased`]: up to 2 KiB the C library copies
/// with vector loads and stores, which the aliasing does not slow (1-2 KiB forward: 15-28 ns
/// at any distance, backward up to 84), above it with `rep movsb`, which it does (2.5 KiB:
/// 1.27 us forward, 0.12 backward).
const ALIASED_ABOVE: usize = 2048;

/// Copies from this length up start with the bytes that bring the destination to a 64-byte
/// boundary. The C library copies large blocks with `rep movsb`, which on AMD EPYC (the CI
/// machines') runs at a fifteenth of its speed when the destination is not 64-byte aligned
/// and the source sits at another offset within its cache line: 2.5 against 38 GB/s for
/// 32 KiB, measured on this machine with the C library's `memcpy`. A socket ring's reader
/// copying into a program's buffer, and a two-copy writer, met it on every chunk.
pub const ALIGN_DST_ABOVE: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_exact_at_every_relative_offset() {
        // Every distance modulo 4 KiB that takes the backward path, and some that do not,
        // for lengths around the thresholds.
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst = vec![0u8; 20_000 + 8192];
        let s0 = src.as_ptr().align_offset(4096);
        for off in (0..70).chain([4000, 4095]) {
            for len in [
                ALIGN_DST_ABOVE - 1,
                ALIGN_DST_ABOVE,
                ALIASED_ABOVE,
                ALIASED_ABOVE + 1,
                4096,
                4096 + 17,
                10_000,
            ] {
                dst.fill(0);
                let d0 = dst.as_ptr().align_offset(4096) + off;
                let from = &src[s0..s0 + len];
                copy_bytes(&mut dst[d0..d0 + len], from);
                assert!(dst[d0..d0 + len] == *from, "offset {off}, length {len}");
                assert!(dst[..d0].iter().all(|&b| b == 0), "before, offset {off}");
                assert!(
                    dst[d0 + len..].iter().all(|&b| b == 0),
                    "after, offset {off}"
                );
            }
        }
    }

    #[test]
    fn short_copies_are_exact() {
        let src: Vec<u8> = (1..=80u8).collect();
        for len in 0..=66 {
            for off in 0..8 {
                let mut dst = [0u8; 80];
                copy_bytes(&mut dst[off..off + len], &src[3..3 + len]);
                assert_eq!(dst[off..off + len], src[3..3 + len], "length {len}");
                assert!(dst[..off].iter().all(|&b| b == 0), "before, length {len}");
                assert!(
                    dst[off + len..].iter().all(|&b| b == 0),
                    "after, length {len}"
                );
            }
        }
    }

    #[test]
    fn impossible_lengths_are_refused_not_overflowed() {
        for len in [usize::MAX, usize::MAX - 4095, isize::MAX as usize + 1] {
            assert!(matches!(
                Region::alloc_shared(len),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn accessors_check_bounds() {
        let r = Region::alloc_shared(100).unwrap();
        assert_eq!(r.len(), 100);
        assert_eq!(r.kind(), MemKind::Shared);
        r.write(96, &[1, 2, 3, 4]).unwrap();
        assert_eq!(r.load_u32(96).unwrap(), u32::from_ne_bytes([1, 2, 3, 4]));
        assert!(matches!(
            r.write(97, &[0; 4]),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(r.load_u32(2), Err(Error::Unaligned { .. })));
        assert!(matches!(r.load_u32(98), Err(Error::OutOfBounds { .. })));
        let mut out = [0u8; 4];
        assert!(r.read(usize::MAX, &mut out).is_err());
        let p = Region::alloc_private(8).unwrap();
        assert_eq!(p.kind(), MemKind::Private);
        assert!(Region::alloc_shared(0).is_err());
    }
}
