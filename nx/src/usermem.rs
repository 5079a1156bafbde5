//! The user's memory as the protocol holds it while an operation is in flight.
//!
//! The only `unsafe` of the crate: a receive or send in progress refers to memory the caller
//! lent (a borrowed slice for the duration of a blocking call, a `Vec` the request owns, or a
//! C pointer whose owner promised to keep it until the message completes). The zero-copy
//! protocol exports receive memory as a VMMC receive buffer, so that senders write into it.

use vmmc::Region;

/// Memory lent to the library: `len` bytes at `ptr`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `UserBuf` is only a description of memory whose owner lent it to the library for
// the operation's lifetime (see the constructors); the library touches it from one thread at a
// time, under its state lock.
unsafe impl Send for UserBuf {}

impl UserBuf {
    /// Describes memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid (and writable, for a receive) until the operation that
    /// holds it completes, is cancelled, or the library is finished, and must not be accessed
    /// by its owner meanwhile (except reads of a send buffer).
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> UserBuf {
        UserBuf {
            ptr: if len == 0 {
                std::ptr::NonNull::dangling().as_ptr()
            } else {
                ptr
            },
            len,
        }
    }

    /// Describes a slice for sending. Callers hold the slice (a borrow for the duration of a
    /// blocking call, or a `Vec` the request owns, whose heap memory does not move with it)
    /// until the library no longer refers to it.
    pub(crate) fn lent(buf: &[u8]) -> UserBuf {
        // SAFETY: see above: the library's blocking calls complete or forget the operation
        // before they return; owned vectors stay in their request until it completes.
        unsafe { UserBuf::new(buf.as_ptr() as *mut u8, buf.len()) }
    }

    /// Describes a mutable slice for receiving, on the same terms as [`UserBuf::lent`]
    /// (blocking receives complete or cancel, which unexports the memory, before returning).
    pub(crate) fn lent_mut(buf: &mut [u8]) -> UserBuf {
        // SAFETY: as for `lent`; a cancelled receive's memory is written no more.
        unsafe { UserBuf::new(buf.as_mut_ptr(), buf.len()) }
    }

    /// No memory (zero bytes).
    pub(crate) fn empty() -> UserBuf {
        UserBuf {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }

    /// The same memory, first `len` bytes.
    pub(crate) fn prefix(self, len: usize) -> UserBuf {
        UserBuf {
            ptr: self.ptr,
            len: len.min(self.len),
        }
    }

    /// The address of the memory (a cache key).
    pub(crate) fn region_addr(&self) -> usize {
        self.ptr as usize
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes (for sending).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes per `new`'s contract; the owner does not write them
        // while the send is in flight.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Copies `data` to `offset`; bytes beyond the buffer are dropped.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        if offset >= self.len {
            return;
        }
        let n = data.len().min(self.len - offset);
        // SAFETY: in bounds; valid and writable per `new`'s contract; nobody else accesses it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), n) };
    }

    /// Copies from a region (a packet buffer) to `offset`; bytes beyond the buffer are dropped.
    pub(crate) fn fill_from(&self, offset: usize, src: &Region, src_off: usize, len: usize) {
        if offset >= self.len {
            return;
        }
        let n = len.min(self.len - offset);
        // SAFETY: in bounds; valid and writable per `new`'s contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), n) };
        // The packet buffer's bounds were checked when the descriptor was read.
        let _ = src.read(src_off, dst);
    }

    /// Reads `len` bytes at `src_off` of a peer's memory (remote read) to `offset`.
    pub(crate) fn fill_remote(
        &self,
        offset: usize,
        src: &vmmc::Proxy,
        src_off: usize,
        len: usize,
    ) -> vmmc::Result<()> {
        if offset >= self.len {
            return Ok(());
        }
        let n = len.min(self.len - offset);
        // SAFETY: in bounds; valid and writable per `new`'s contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), n) };
        src.get_data(src_off, dst)
    }

    /// The memory as a VMMC region, for export as the destination of a zero-copy transfer.
    pub(crate) fn region(&self) -> Region {
        // SAFETY: the region lives in the library only while the receive is in flight (it is
        // unexported and dropped before the receive completes or is cancelled), which is within
        // the lending period of `new`'s contract.
        unsafe { Region::from_raw_parts(self.ptr, self.len) }
    }
}
