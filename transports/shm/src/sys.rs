//! The system calls of the shm transport, each behind a small safe function: futexes on shared
//! memory, `process_vm_writev`/`readv`, and descriptor passing over Unix seqpacket sockets.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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
pub(crate) use syscall;

pub use vmmc::wait::{futex_wait, futex_wake};

/// Writes `pieces` (local slices) to consecutive remote addresses starting at each piece's
/// address in process `pid`, in one system call. The kernel copies the pieces in order, so a
/// piece given last (the last word) is stored by a later instruction than the ones before it.
pub fn vm_write(pid: libc::pid_t, pieces: &[(&[u8], u64)]) -> io::Result<()> {
    let mut local = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let mut remote = local;
    assert!(pieces.len() <= 2);
    let mut total = 0;
    for (i, (data, addr)) in pieces.iter().enumerate() {
        local[i] = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        remote[i] = libc::iovec {
            iov_base: *addr as *mut _,
            iov_len: data.len(),
        };
        total += data.len();
    }
    let n = pieces.len() as libc::c_ulong;
    // SAFETY: the local iovecs describe live slices; the remote ones are checked by the kernel.
    let r = syscall!(libc::process_vm_writev(
        pid,
        local.as_ptr(),
        n,
        remote.as_ptr(),
        n,
        0
    ))?;
    if r as usize != total {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "partial process_vm_writev",
        ));
    }
    Ok(())
}

/// Reads `out.len()` bytes at `addr` of process `pid`.
pub fn vm_read(pid: libc::pid_t, addr: u64, out: &mut [u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: out.len(),
    };
    // SAFETY: `out` is a live mutable slice.
    let r = syscall!(libc::process_vm_readv(pid, &local, 1, &remote, 1, 0))?;
    if r as usize != out.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "partial process_vm_readv",
        ));
    }
    Ok(())
}

/// Largest message on the rendezvous socket.
pub const MAX_MSG: usize = 64 * 1024;
/// Most descriptors in one message.
pub const MAX_FDS: usize = 4;

/// Sends one datagram with descriptors attached.
pub fn send_msg(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    let mut cbuf = [0u64; 8]; // aligned control buffer, room for MAX_FDS descriptors
                              // SAFETY: msghdr is plain data; zero is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: the control buffer is large enough for one SCM_RIGHTS header + MAX_FDS fds.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(c).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    // SAFETY: msg points to live buffers.
    syscall!(libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL))?;
    Ok(())
}

/// Receives one datagram and its descriptors. `Ok(None)` at end of stream.
pub fn recv_msg(sock: RawFd, nonblock: bool) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: zeroed msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    let flags = libc::MSG_CMSG_CLOEXEC | if nonblock { libc::MSG_DONTWAIT } else { 0 };
    let n = loop {
        // SAFETY: msg points to live buffers.
        match syscall!(libc::recvmsg(sock, &mut msg, flags)) {
            Ok(n) => break n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "rendezvous message truncated",
        ));
    }
    buf.truncate(n);
    Ok(Some((buf, fds)))
}

/// Maps `len` bytes of a shared descriptor.
pub fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a shared mapping of a memfd; the kernel checks the length against the file.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// A fresh memfd of `len` zeroed bytes.
pub fn memfd(name: &std::ffi::CStr, len: usize) -> io::Result<OwnedFd> {
    let fd = syscall!(libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC))?;
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    syscall!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t))?;
    Ok(fd)
}

/// Size of a memfd.
pub fn fd_size(fd: &OwnedFd) -> io::Result<usize> {
    // SAFETY: stat is plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    syscall!(libc::fstat(fd.as_raw_fd(), &mut st))?;
    Ok(st.st_size as usize)
}

/// The host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
