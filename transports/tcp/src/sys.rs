//! The system calls the tcp transport makes beyond std, each behind a small safe function.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::time::Duration;

/// Runs a libc call returning -1 on error, as mio's `syscall!`.
macro_rules! syscall {
    ($e:expr) => {{
        #[allow(clippy::macro_metavars_in_unsafe)]
        // SAFETY: each caller passes valid arguments as documented at the call site.
        let r = unsafe { $e };
        if r == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }};
}

/// `sendmsg` of several pieces without raising SIGPIPE on a broken connection (`writev`
/// would), non-blocking. Returns the bytes written.
pub fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; zeroed is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    let n = syscall!(libc::sendmsg(
        fd,
        &msg,
        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
    ))?;
    Ok(n as usize)
}

/// `recv` into raw memory, non-blocking. Returns 0 at end of stream.
///
/// # Safety
/// `dst..dst+len` must be writable memory that nothing else accesses during the call.
pub unsafe fn recv_raw(fd: RawFd, dst: *mut u8, len: usize) -> io::Result<usize> {
    let n = syscall!(libc::recv(fd, dst.cast(), len, libc::MSG_DONTWAIT))?;
    Ok(n as usize)
}

/// Waits until `fd` is writable (or `timeout` passes, or a signal arrives).
pub fn wait_writable(fd: RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd; errors (EINTR) just return.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Bytes sent on a TCP socket that the peer has not acknowledged yet (`SIOCOUTQ`).
pub fn unacked(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    syscall!(libc::ioctl(fd, libc::TIOCOUTQ, &mut n))?;
    Ok(n.max(0) as usize)
}
