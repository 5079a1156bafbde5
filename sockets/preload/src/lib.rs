//! `libvmmc_sockets.so`: run unmodified, dynamically linked programs with
//! `LD_PRELOAD=libvmmc_sockets.so`, and their TCP connections to other interposed processes
//! of this host go over VMMC stream sockets (seed 003 §4.3) instead of the kernel.
//!
//! The program's descriptor stays the kernel socket it created: addresses, socket options
//! and `getsockname`/`getpeername` are the kernel's (the receive and send timeouts,
//! `SO_RCVTIMEO` and `SO_SNDTIMEO`, also bound the connection's waits in its rings, and
//! expire with `EAGAIN` as the kernel's do). What changes is where the bytes go:
//! once both ends have run the setup of [`setup`], reads and writes on the descriptor move
//! data through the connection's rings, and the kernel connection only carries wake-up bytes
//! and the end of a process. Everything else (UDP, Unix sockets, other hosts, a peer without
//! the library, descriptors at or above 65536) is passed to the C library untouched.
//!
//! Environment: `VMMC_SOCK_VARIANT=du1|du2|au` picks the send protocol;
//! `VMMC_SOCK_STATS=FILE` appends a JSON line per connection and process with the bytes
//! that went through the rings (how tests prove the data did not go through the kernel).
//!
//! Rules every hook follows: the C library's function is found with `dlsym(RTLD_NEXT)` and
//! cached (no constructor needed); the path for descriptors that are not ours takes no lock
//! and allocates nothing; `errno` is left as the C library leaves it, or set as the kernel
//! would; nothing unwinds into C (a panic aborts with a message).
//!
//! `exec` keeps both: the new image is interposed (the hook puts the library back into an
//! environment that lacks it) and adopts the VMMC connections it inherits (see [`exec`]);
//! `posix_spawn` and `posix_spawnp` do the same for the child they start.
//!
//! The variadic `execl`, `execlp` and `execle` are written in C (`src/execl.c`) and exported
//! through naked trampolines ([`variadic`]): they call the hooked array forms. An epoll set
//! with VMMC members watched by `poll`/`select` is readable when a member's ring is (see
//! [`poll`]). Descriptors up to [`table::MAX_FD`] are tracked.
//!
//! A connect does not wait for the accept (see [`setup`]), so a thread may connect to its own
//! listener and accept afterwards.
//!
//! Signal handlers are installed behind a trampoline that counts them per thread, so that a
//! handler ends a wait in the rings with `EINTR` where it would end the kernel's (see
//! [`signals`]).

#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)]

mod epoll;
mod exec;
mod poll;
mod real;
mod setup;
mod signals;
mod table;
mod variadic;

use libc::{c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};
use real::real;
use sockets::{Conn, RecvFlags};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use table::{known, Entry};

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location returns the thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: as in errno().
    unsafe { *libc::__errno_location() = e }
}

/// Writes `msg` to standard error with a raw system call (never through a hooked `write`)
/// and aborts.
pub(crate) fn fatal(msg: &[u8]) -> ! {
    // SAFETY: a write of a valid buffer to descriptor 2, then abort.
    unsafe {
        libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
        libc::abort()
    }
}

/// Runs a hook's body; a panic aborts with a message instead of unwinding into C.
fn guard<R>(f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => fatal(b"vmmc_sockets: internal error (panic) in a socket call\n"),
    }
}

fn code(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::BrokenPipe => libc::EPIPE,
        io::ErrorKind::ConnectionReset => libc::ECONNRESET,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::TimedOut => libc::EAGAIN,
        _ => libc::EIO,
    })
}

fn recv_flags(flags: c_int) -> RecvFlags {
    RecvFlags {
        peek: flags & libc::MSG_PEEK != 0,
        dontwait: flags & libc::MSG_DONTWAIT != 0,
        waitall: flags & libc::MSG_WAITALL != 0,
    }
}

/// A receive on a VMMC connection, as the C call returns it.
///
/// # Safety
/// `buf` is writable for `len` bytes.
unsafe fn vrecv(c: &Conn, buf: *mut c_void, len: size_t, flags: RecvFlags) -> ssize_t {
    if len == 0 {
        return 0;
    }
    // SAFETY: the caller's buffer.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
    match guard(|| c.recv(b, flags)) {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(code(&e));
            -1
        }
    }
}

/// A send on a VMMC connection; `EPIPE` raises `SIGPIPE` unless `nosignal`.
///
/// # Safety
/// `buf` is readable for `len` bytes.
unsafe fn vsend(
    c: &Conn,
    buf: *const c_void,
    len: size_t,
    dontwait: bool,
    nosignal: bool,
) -> ssize_t {
    if len == 0 {
        return 0;
    }
    // SAFETY: the caller's buffer.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    match guard(|| c.send(b, dontwait)) {
        Ok(n) => n as ssize_t,
        Err(e) => {
            let e = code(&e);
            if e == libc::EPIPE && !nosignal {
                // SAFETY: raising a signal in this thread, as the kernel would.
                unsafe { libc::raise(libc::SIGPIPE) };
            }
            set_errno(e);
            -1
        }
    }
}

/// `readv`/`recvmsg` on a VMMC connection: the first buffer waits as the call would, the
/// rest take only what is already there; with `MSG_WAITALL` every buffer waits to be full.
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn vrecv_iov(c: &Conn, iov: *const libc::iovec, cnt: c_int, flags: RecvFlags) -> ssize_t {
    if iov.is_null() || cnt < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's array.
    let iovs = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total: ssize_t = 0;
    for v in iovs.iter().filter(|v| v.iov_len > 0) {
        let f = if total > 0 && !flags.waitall {
            RecvFlags {
                dontwait: true,
                ..flags
            }
        } else {
            flags
        };
        // SAFETY: the caller's buffer.
        let n = unsafe { vrecv(c, v.iov_base, v.iov_len, f) };
        if n < 0 {
            return if total > 0 { total } else { -1 };
        }
        total += n;
        if (n as usize) < v.iov_len || flags.peek {
            break;
        }
    }
    total
}

/// `writev`/`sendmsg` on a VMMC connection: blocking, every buffer is written (as the
/// kernel queues all of a blocking stream write); non-blocking, what fits.
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn vsend_iov(
    c: &Conn,
    iov: *const libc::iovec,
    cnt: c_int,
    dontwait: bool,
    nosignal: bool,
) -> ssize_t {
    if iov.is_null() || cnt < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's array.
    let iovs = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total: ssize_t = 0;
    for v in iovs.iter().filter(|v| v.iov_len > 0) {
        // An error after some bytes went reports them, without a signal, as the kernel does.
        // SAFETY: the caller's buffer.
        let n = unsafe { vsend(c, v.iov_base, v.iov_len, dontwait, nosignal || total > 0) };
        if n < 0 {
            return if total > 0 { total } else { -1 };
        }
        total += n;
        if (n as usize) < v.iov_len {
            break;
        }
    }
    total
}

/// Forgets `fd` before the kernel closes or replaces it.
fn forget(fd: c_int) {
    let saved = errno();
    match table::take(fd) {
        Some(Entry::Vmmc(c)) => {
            for (epfd, set) in table::epoll_sets() {
                set.forget(epfd, fd);
            }
            if !table::referenced(&c) {
                // Threads of this process blocked on it return; the connection ends when
                // the last process holding it drops it.
                c.abandon();
            }
            drop(c);
        }
        Some(Entry::Listener { port, owner }) => setup::withdraw_listener(port, owner),
        Some(Entry::Candidate) => candidate_gone(fd),
        _ => {}
    }
    set_errno(saved);
}

/// Candidate `fd` will not become a VMMC connection (closed, or connected through the
/// kernel): the epoll sets forget their record of its registrations.
fn candidate_gone(fd: c_int) {
    for (_, set) in table::epoll_sets() {
        set.forget_candidate(fd);
    }
}

/// Gives `new` the entry of `old` (after a successful dup).
fn copy_entry(old: c_int, new: c_int) {
    if let Some(e) = table::get(old) {
        drop(table::set(new, e));
    }
}

// ---------------------------------------------------------------------------------------
// Creating, connecting, accepting.

/// Hook of `socket(2)`: IPv4/IPv6 TCP sockets become candidates for VMMC.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: the C library's socket with the caller's arguments.
    let fd = unsafe { real!(socket: fn(c_int, c_int, c_int) -> c_int)(domain, ty, proto) };
    if fd >= 0
        && (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ty & 0xf == libc::SOCK_STREAM
        && (proto == 0 || proto == libc::IPPROTO_TCP)
    {
        guard(|| drop(table::set(fd, Entry::Candidate)));
    }
    fd
}

/// Hook of `listen(2)`: announces the port of a candidate socket.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: the C library's listen.
    let rc = unsafe { real!(listen: fn(c_int, c_int) -> c_int)(fd, backlog) };
    if rc == 0 && known(fd) {
        let saved = errno();
        guard(|| {
            if let Some(Entry::Candidate) = table::get(fd) {
                if let Some(port) = setup::listening_port(fd) {
                    setup::announce_listener(port);
                    let owner = std::process::id();
                    drop(table::set(fd, Entry::Listener { port, owner }));
                }
            }
        });
        set_errno(saved);
    }
    rc
}

/// Hook of `connect(2)`: to an interposed listener of this host, the connection is set up
/// over VMMC; anything else goes to the kernel.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if known(fd) && matches!(table::get(fd), Some(Entry::Candidate)) {
        let saved = errno();
        // SAFETY: the caller's address.
        if let Some(rc) = guard(|| unsafe { setup::connect(fd, addr, len) }) {
            if rc == 0 {
                set_errno(saved);
            }
            return rc;
        }
        // A kernel connection: stop tracking it, so its reads take the fast path.
        drop(table::take(fd));
        guard(|| candidate_gone(fd));
        set_errno(saved);
    }
    // SAFETY: the C library's connect.
    unsafe { real!(connect: fn(c_int, *const sockaddr, socklen_t) -> c_int)(fd, addr, len) }
}

fn after_accept(listener: c_int, fd: c_int) -> c_int {
    if fd < 0 || !known(listener) {
        return fd;
    }
    let saved = errno();
    if !matches!(table::get(listener), Some(Entry::Listener { .. })) {
        return fd;
    }
    match guard(|| setup::accepted(fd)) {
        Ok(()) => {
            set_errno(saved);
            fd
        }
        Err(_) => {
            // SAFETY: closing the descriptor we just accepted.
            unsafe { real!(close: fn(c_int) -> c_int)(fd) };
            set_errno(libc::ECONNABORTED);
            -1
        }
    }
}

/// Hook of `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the C library's accept.
    let nfd =
        unsafe { real!(accept: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, addr, len) };
    after_accept(fd, nfd)
}

/// Hook of `accept4(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the C library's accept4.
    let nfd = unsafe {
        real!(accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int)(
            fd, addr, len, flags,
        )
    };
    after_accept(fd, nfd)
}

// ---------------------------------------------------------------------------------------
// Data.

/// Hook of `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's buffer.
            return unsafe { vrecv(&c, buf, n, RecvFlags::default()) };
        }
    }
    // SAFETY: the C library's read.
    unsafe { real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n) }
}

/// Hook of `__read_chk` (`read` in programs built with `_FORTIFY_SOURCE`).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        fatal(b"*** buffer overflow detected ***: read\n");
    }
    // SAFETY: as read.
    unsafe { read(fd, buf, n) }
}

/// Hook of `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's buffer.
            return unsafe { vsend(&c, buf, n, false, false) };
        }
    }
    // SAFETY: the C library's write.
    unsafe { real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n) }
}

/// Hook of `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's iovecs.
            return unsafe { vrecv_iov(&c, iov, cnt, RecvFlags::default()) };
        }
    }
    // SAFETY: the C library's readv.
    unsafe { real!(readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt) }
}

/// Hook of `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's iovecs.
            return unsafe { vsend_iov(&c, iov, cnt, false, false) };
        }
    }
    // SAFETY: the C library's writev.
    unsafe { real!(writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt) }
}

/// Hook of `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's buffer.
            return unsafe { vrecv(&c, buf, n, recv_flags(flags)) };
        }
    }
    // SAFETY: the C library's recv.
    unsafe { real!(recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags) }
}

/// Hook of `__recv_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen {
        fatal(b"*** buffer overflow detected ***: recv\n");
    }
    // SAFETY: as recv.
    unsafe { recv(fd, buf, n, flags) }
}

/// Hook of `recvfrom(2)`: on a VMMC connection the source address is left empty, as Linux
/// does for a connected TCP socket.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            if !addr.is_null() && !addrlen.is_null() {
                // SAFETY: the caller's length slot.
                unsafe { *addrlen = 0 };
            }
            // SAFETY: the caller's buffer.
            return unsafe { vrecv(&c, buf, n, recv_flags(flags)) };
        }
    }
    // SAFETY: the C library's recvfrom.
    unsafe {
        real!(recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t)(
            fd, buf, n, flags, addr, addrlen,
        )
    }
}

/// Hook of `__recvfrom_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        fatal(b"*** buffer overflow detected ***: recvfrom\n");
    }
    // SAFETY: as recvfrom.
    unsafe { recvfrom(fd, buf, n, flags, addr, addrlen) }
}

/// Hook of `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    if known(fd) && !msg.is_null() {
        if let Some(c) = table::conn(fd) {
            // SAFETY: the caller's message header.
            unsafe {
                let m = &mut *msg;
                m.msg_namelen = 0;
                m.msg_controllen = 0;
                m.msg_flags = 0;
                return vrecv_iov(&c, m.msg_iov, m.msg_iovlen as c_int, recv_flags(flags));
            }
        }
    }
    // SAFETY: the C library's recvmsg.
    unsafe { real!(recvmsg: fn(c_int, *mut libc::msghdr, c_int) -> ssize_t)(fd, msg, flags) }
}

/// Hook of `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            let (dw, ns) = (
                flags & libc::MSG_DONTWAIT != 0,
                flags & libc::MSG_NOSIGNAL != 0,
            );
            // SAFETY: the caller's buffer.
            return unsafe { vsend(&c, buf, n, dw, ns) };
        }
    }
    // SAFETY: the C library's send.
    unsafe { real!(send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags) }
}

/// Hook of `sendto(2)` (the address is ignored on a connection, as for connected TCP).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            let (dw, ns) = (
                flags & libc::MSG_DONTWAIT != 0,
                flags & libc::MSG_NOSIGNAL != 0,
            );
            // SAFETY: the caller's buffer.
            return unsafe { vsend(&c, buf, n, dw, ns) };
        }
    }
    // SAFETY: the C library's sendto.
    unsafe {
        real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t)(
            fd, buf, n, flags, addr, addrlen,
        )
    }
}

/// Hook of `sendmsg(2)` (ancillary data is not carried over VMMC).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    if known(fd) && !msg.is_null() {
        if let Some(c) = table::conn(fd) {
            let (dw, ns) = (
                flags & libc::MSG_DONTWAIT != 0,
                flags & libc::MSG_NOSIGNAL != 0,
            );
            // SAFETY: the caller's message header.
            unsafe {
                let m = &*msg;
                return vsend_iov(&c, m.msg_iov, m.msg_iovlen as c_int, dw, ns);
            }
        }
    }
    // SAFETY: the C library's sendmsg.
    unsafe { real!(sendmsg: fn(c_int, *const libc::msghdr, c_int) -> ssize_t)(fd, msg, flags) }
}

/// `sendfile` to a VMMC connection: reads the file and sends what it read.
///
/// # Safety
/// `off` is null or a valid offset.
unsafe fn vsendfile(c: &Conn, infd: c_int, off: *mut libc::off_t, count: size_t) -> ssize_t {
    let mut buf = vec![0u8; count.clamp(1, 1 << 16)];
    let mut total: ssize_t = 0;
    while (total as usize) < count {
        let want = buf.len().min(count - total as usize);
        // SAFETY: reading into our buffer; `off` is the caller's.
        let got = unsafe {
            if off.is_null() {
                real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(
                    infd,
                    buf.as_mut_ptr().cast(),
                    want,
                )
            } else {
                libc::pread(
                    infd,
                    buf.as_mut_ptr().cast(),
                    want,
                    *off + total as libc::off_t,
                )
            }
        };
        if got <= 0 {
            if got < 0 && total == 0 {
                return -1;
            }
            break;
        }
        let mut sent = 0usize;
        while sent < got as usize {
            // SAFETY: our buffer.
            let n = unsafe {
                vsend(
                    c,
                    buf[sent..].as_ptr().cast(),
                    got as usize - sent,
                    false,
                    total > 0 || sent > 0,
                )
            };
            if n < 0 {
                // Bytes read but not sent: give them back to a file read without offset
                // (also when nothing was sent: the call fails, and the file lost nothing).
                if off.is_null() {
                    let saved = errno();
                    // SAFETY: moving the file position back over what was not sent.
                    unsafe {
                        libc::lseek(
                            infd,
                            -((got as usize - sent) as libc::off_t),
                            libc::SEEK_CUR,
                        )
                    };
                    set_errno(saved);
                }
                if total == 0 && sent == 0 {
                    return -1;
                }
                total += sent as ssize_t;
                if !off.is_null() {
                    // SAFETY: the caller's offset.
                    unsafe { *off += total as libc::off_t };
                }
                return total;
            }
            sent += n as usize;
        }
        total += got;
    }
    if !off.is_null() {
        // SAFETY: the caller's offset.
        unsafe { *off += total as libc::off_t };
    }
    total
}

/// Hook of `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    infd: c_int,
    off: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    if known(out) {
        if let Some(c) = table::conn(out) {
            // SAFETY: the caller's offset.
            return guard(|| unsafe { vsendfile(&c, infd, off, count) });
        }
    }
    // SAFETY: the C library's sendfile.
    unsafe {
        real!(sendfile: fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t)(
            out, infd, off, count,
        )
    }
}

/// Hook of `sendfile64` (the same function on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    infd: c_int,
    off: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: as sendfile.
    unsafe { sendfile(out, infd, off, count) }
}

// ---------------------------------------------------------------------------------------
// Descriptors.

/// Hook of `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if known(fd) {
        guard(|| forget(fd));
    }
    // SAFETY: the C library's close.
    unsafe { real!(close: fn(c_int) -> c_int)(fd) }
}

/// Hook of `shutdown(2)`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            let how = match how {
                libc::SHUT_RD => std::net::Shutdown::Read,
                libc::SHUT_WR => std::net::Shutdown::Write,
                libc::SHUT_RDWR => std::net::Shutdown::Both,
                _ => {
                    set_errno(libc::EINVAL);
                    return -1;
                }
            };
            guard(|| c.shutdown(how));
            return 0;
        }
    }
    // SAFETY: the C library's shutdown.
    unsafe { real!(shutdown: fn(c_int, c_int) -> c_int)(fd, how) }
}

/// Hook of `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the C library's dup.
    let n = unsafe { real!(dup: fn(c_int) -> c_int)(fd) };
    if n >= 0 && known(fd) {
        guard(|| copy_entry(fd, n));
    }
    n
}

/// Hook of `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && known(new) {
        guard(|| forget(new));
    }
    // SAFETY: the C library's dup2.
    let n = unsafe { real!(dup2: fn(c_int, c_int) -> c_int)(old, new) };
    if n >= 0 && old != new && known(old) {
        guard(|| copy_entry(old, n));
    }
    n
}

/// Hook of `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && known(new) {
        guard(|| forget(new));
    }
    // SAFETY: the C library's dup3.
    let n = unsafe { real!(dup3: fn(c_int, c_int, c_int) -> c_int)(old, new, flags) };
    if n >= 0 && known(old) {
        guard(|| copy_entry(old, n));
    }
    n
}

/// Hook of `fcntl(2)`. The variadic third argument is taken as a machine word (valid on
/// x86_64 and aarch64 Linux: DESIGN.md).
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the C library's fcntl with the caller's word.
    let rc = unsafe { real!(fcntl: fn(c_int, c_int, usize) -> c_int)(fd, cmd, arg) };
    if rc >= 0 && known(fd) {
        let saved = errno();
        guard(|| match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => copy_entry(fd, rc),
            libc::F_SETFL => {
                if let Some(c) = table::conn(fd) {
                    c.set_nonblocking(arg as c_int & libc::O_NONBLOCK != 0);
                }
            }
            _ => {}
        });
        set_errno(saved);
    }
    rc
}

/// Hook of `fcntl64` (the same on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: as fcntl.
    unsafe { fcntl(fd, cmd, arg) }
}

/// Hook of `ioctl(2)`: `FIONREAD` counts the bytes in the ring; `FIONBIO` also sets the
/// connection's mode. The third argument is taken as a machine word.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    if known(fd) {
        if let Some(c) = table::conn(fd) {
            if req == libc::FIONREAD as libc::c_ulong && arg != 0 {
                let n = c.readable_bytes().min(i32::MAX as usize) as c_int;
                // SAFETY: FIONREAD's argument is an int pointer.
                unsafe { *(arg as *mut c_int) = n };
                return 0;
            }
            if req == libc::FIONBIO as libc::c_ulong && arg != 0 {
                // SAFETY: FIONBIO's argument is an int pointer.
                c.set_nonblocking(unsafe { *(arg as *const c_int) } != 0);
            }
        }
    }
    // SAFETY: the C library's ioctl with the caller's word.
    unsafe { real!(ioctl: fn(c_int, libc::c_ulong, usize) -> c_int)(fd, req, arg) }
}

/// `SO_RCVTIMEO` and `SO_SNDTIMEO` of 64-bit `time_t` on 32-bit machines (the kernel's
/// `SO_*TIMEO_NEW`), which the C library may pass instead.
const SO_RCVTIMEO_NEW: c_int = 66;
const SO_SNDTIMEO_NEW: c_int = 67;

/// Hook of `setsockopt(2)`: the option is set on the kernel socket; a receive or send
/// timeout also applies to the VMMC connection (whose waits are in the rings, not in the
/// kernel), as the kernel stored it.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the C library's setsockopt with the caller's arguments.
    let rc = unsafe {
        real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(
            fd, level, name, val, len,
        )
    };
    let timeo = [
        libc::SO_RCVTIMEO,
        libc::SO_SNDTIMEO,
        SO_RCVTIMEO_NEW,
        SO_SNDTIMEO_NEW,
    ];
    if rc == 0 && level == libc::SOL_SOCKET && timeo.contains(&name) && known(fd) {
        if let Some(c) = table::conn(fd) {
            let saved = errno();
            guard(|| setup::take_timeouts(fd, &c));
            set_errno(saved);
        }
    }
    rc
}

/// Hook of `fork(2)`: the child shares this process's VMMC connections, which end only when
/// the last process holding them drops them.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let conns = guard(table::conns);
    for c in &conns {
        c.add_process_ref();
    }
    drop(conns);
    // SAFETY: the C library's fork.
    unsafe { real!(fork: fn() -> libc::pid_t)() }
}

// ---------------------------------------------------------------------------------------
// Readiness.

fn timeout_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// # Safety
/// `ts` is null or valid.
unsafe fn timeout_ts(ts: *const libc::timespec) -> Option<Duration> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: the caller's timespec.
    let t = unsafe { *ts };
    Some(Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    ))
}

/// Whether any of the poll array's descriptors is ours.
///
/// # Safety
/// `fds` points to `n` pollfds.
unsafe fn any_known(fds: *const libc::pollfd, n: libc::nfds_t) -> bool {
    !fds.is_null()
        && (0..n as usize).any(|i| {
            // SAFETY: in bounds of the caller's array.
            let fd = unsafe { (*fds.add(i)).fd };
            known(fd) && (table::conn(fd).is_some() || table::epoll_with_members(fd).is_some())
        })
}

/// Hook of `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array.
    if unsafe { any_known(fds, n) } {
        // SAFETY: the caller's array.
        let s = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
        return guard(|| poll::poll(s, timeout_ms(timeout), std::ptr::null()));
    }
    // SAFETY: the C library's poll.
    unsafe { real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int)(fds, n, timeout) }
}

/// Hook of `__poll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if fdslen / std::mem::size_of::<libc::pollfd>() < n as usize {
        fatal(b"*** buffer overflow detected ***: poll\n");
    }
    // SAFETY: as poll.
    unsafe { poll(fds, n, timeout) }
}

/// Hook of `ppoll(2)`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's array.
    if unsafe { any_known(fds, n) } {
        // SAFETY: the caller's array and timespec.
        let (s, t) = unsafe {
            (
                std::slice::from_raw_parts_mut(fds, n as usize),
                timeout_ts(ts),
            )
        };
        return guard(|| poll::poll(s, t, sigmask));
    }
    // SAFETY: the C library's ppoll.
    unsafe {
        real!(ppoll: fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int)(
            fds, n, ts, sigmask,
        )
    }
}

/// Hook of `__ppoll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    sigmask: *const libc::sigset_t,
    fdslen: size_t,
) -> c_int {
    if fdslen / std::mem::size_of::<libc::pollfd>() < n as usize {
        fatal(b"*** buffer overflow detected ***: ppoll\n");
    }
    // SAFETY: as ppoll.
    unsafe { ppoll(fds, n, ts, sigmask) }
}

/// Whether a VMMC connection is in any of the sets.
///
/// # Safety
/// The sets are null or valid.
unsafe fn sets_known(nfds: c_int, sets: [*mut libc::fd_set; 3]) -> bool {
    (0..nfds.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| {
        known(fd)
            && (table::conn(fd).is_some() || table::epoll_with_members(fd).is_some())
            // SAFETY: the caller's sets, fd < FD_SETSIZE.
            && sets.iter().any(|s| !s.is_null() && unsafe { libc::FD_ISSET(fd, *s) })
    })
}

/// Hook of `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets.
    if unsafe { sets_known(nfds, [r, w, e]) } {
        let t = if tv.is_null() {
            None
        } else {
            // SAFETY: the caller's timeval.
            let t = unsafe { *tv };
            Some(Duration::new(
                t.tv_sec.max(0) as u64,
                (t.tv_usec.clamp(0, 999_999) * 1000) as u32,
            ))
        };
        // SAFETY: the caller's sets.
        return guard(|| unsafe { poll::select(nfds, r, w, e, t, std::ptr::null()) });
    }
    // SAFETY: the C library's select.
    unsafe {
        real!(select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int)(
            nfds, r, w, e, tv,
        )
    }
}

/// Hook of `pselect(2)`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's sets.
    if unsafe { sets_known(nfds, [r, w, e]) } {
        // SAFETY: the caller's timespec and sets.
        let t = unsafe { timeout_ts(ts) };
        // SAFETY: the caller's sets.
        return guard(|| unsafe { poll::select(nfds, r, w, e, t, sigmask) });
    }
    // SAFETY: the C library's pselect.
    unsafe {
        real!(pselect: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> c_int)(
            nfds, r, w, e, ts, sigmask,
        )
    }
}

fn track_epoll(fd: c_int) -> c_int {
    if fd >= 0 {
        let saved = errno();
        guard(|| {
            drop(table::set(
                fd,
                Entry::Epoll(Arc::new(epoll::EpollSet::default())),
            ))
        });
        set_errno(saved);
    }
    fd
}

/// Hook of `epoll_create(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: the C library's epoll_create.
    track_epoll(unsafe { real!(epoll_create: fn(c_int) -> c_int)(size) })
}

/// Hook of `epoll_create1(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: the C library's epoll_create1.
    track_epoll(unsafe { real!(epoll_create1: fn(c_int) -> c_int)(flags) })
}

/// Hook of `epoll_ctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    if known(epfd) && known(fd) {
        match (table::get(epfd), table::get(fd)) {
            (Some(Entry::Epoll(set)), Some(Entry::Vmmc(c))) => {
                // SAFETY: the caller's event, if any.
                let e = (!ev.is_null()).then(|| unsafe { *ev });
                return guard(|| set.ctl(epfd, op, fd, c, e));
            }
            (Some(Entry::Epoll(set)), Some(Entry::Epoll(inner))) => {
                return guard(|| set.ctl_nested(epfd, op, fd, inner, ev));
            }
            (Some(Entry::Epoll(set)), Some(Entry::Candidate)) => {
                return guard(|| set.ctl_candidate(epfd, op, fd, ev));
            }
            _ => {}
        }
    }
    // SAFETY: the C library's epoll_ctl.
    unsafe {
        real!(epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int)(epfd, op, fd, ev)
    }
}

/// Hook of `epoll_pwait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    if known(epfd) && max > 0 && !events.is_null() {
        if let Some(Entry::Epoll(set)) = table::get(epfd) {
            // SAFETY: the caller's array of `max` events.
            let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
            return guard(|| set.wait(epfd, out, timeout, sigmask));
        }
    }
    // SAFETY: the C library's epoll_pwait.
    unsafe {
        real!(epoll_pwait: fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int)(
            epfd, events, max, timeout, sigmask,
        )
    }
}

/// Hook of `epoll_wait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: as epoll_pwait.
    unsafe { epoll_pwait(epfd, events, max, timeout, std::ptr::null()) }
}

/// `execve` through the C library with the environment [`exec::prepare`] completes.
///
/// # Safety
/// As `execve`.
unsafe fn exec_with(
    envp: *const *const libc::c_char,
    run: impl FnOnce(*const *const libc::c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's environment array.
    let p = guard(|| unsafe { exec::prepare(envp) });
    // SAFETY: as above.
    let env = unsafe { exec::environment(envp, &p) };
    let rc = run(env.as_ptr());
    let saved = errno();
    p.abandon();
    set_errno(saved);
    rc
}

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Hook of `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> c_int {
    let real = real!(execve: fn(*const libc::c_char, *const *const libc::c_char, *const *const libc::c_char) -> c_int);
    // SAFETY: the caller's arguments; the environment is built for the call.
    unsafe { exec_with(envp, |env| real(path, argv, env)) }
}

/// Hook of `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> c_int {
    // SAFETY: the process environment, as execv uses it.
    unsafe { execve(path, argv, environ) }
}

/// Hook of `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> c_int {
    let real = real!(execvpe: fn(*const libc::c_char, *const *const libc::c_char, *const *const libc::c_char) -> c_int);
    // SAFETY: the caller's arguments; the environment is built for the call.
    unsafe { exec_with(envp, |env| real(file, argv, env)) }
}

/// Hook of `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(
    file: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> c_int {
    // SAFETY: the process environment, as execvp uses it.
    unsafe { execvpe(file, argv, environ) }
}

/// `posix_spawn` through the C library with the environment [`exec::prepare`] completes:
/// the child is interposed and adopts this process's VMMC connections, as after `fork` and
/// `exec`. The duplicates made for the child are closed here whatever the outcome (the child
/// has its own).
///
/// # Safety
/// As `posix_spawn`.
unsafe fn spawn_with(
    envp: *const *mut libc::c_char,
    run: impl FnOnce(*const *mut libc::c_char) -> c_int,
) -> c_int {
    let envp = envp as *const *const libc::c_char;
    // SAFETY: the caller's environment array.
    let p = guard(|| unsafe { exec::prepare(envp) });
    // SAFETY: as above.
    let env = unsafe { exec::environment(envp, &p) };
    // The child will hold each connection handed over, as a forked child does.
    for c in &p.conns {
        c.add_process_ref();
    }
    let rc = run(env.as_ptr() as *const *mut libc::c_char);
    let saved = errno();
    if rc != 0 {
        for c in &p.conns {
            c.remove_process_ref();
        }
    }
    p.abandon();
    set_errno(saved);
    rc
}

/// Hook of `posix_spawn(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> c_int {
    let real = real!(posix_spawn: fn(*mut libc::pid_t, *const libc::c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut libc::c_char, *const *mut libc::c_char) -> c_int);
    // SAFETY: the caller's arguments; the environment is built for the call.
    unsafe { spawn_with(envp, |env| real(pid, path, actions, attr, argv, env)) }
}

/// Hook of `posix_spawnp(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> c_int {
    let real = real!(posix_spawnp: fn(*mut libc::pid_t, *const libc::c_char, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const *mut libc::c_char, *const *mut libc::c_char) -> c_int);
    // SAFETY: the caller's arguments; the environment is built for the call.
    unsafe { spawn_with(envp, |env| real(pid, file, actions, attr, argv, env)) }
}

/// Hands the library's count of interrupting signal handlers to the rings' waits (see
/// [`signals`]). Done by the constructor and by every hook that installs a handler, which
/// may run before it.
pub(crate) fn register() {
    sockets::ring::set_interruptions(signals::interrupting);
}

/// Hook of `sigaction(2)` (see [`signals`]).
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments.
    guard(|| unsafe { signals::sigaction(sig, act, old) })
}

/// Hook of `signal(3)` (glibc's BSD semantics: `SA_RESTART` unless `siginterrupt` said
/// otherwise).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    guard(|| signals::install(sig, handler, signals::bsd_flags(sig)))
}

/// Hook of `bsd_signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    guard(|| signals::install(sig, handler, signals::bsd_flags(sig)))
}

/// Hook of `ssignal(3)`, glibc's other name of `signal`.
#[no_mangle]
pub unsafe extern "C" fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    guard(|| signals::install(sig, handler, signals::bsd_flags(sig)))
}

/// Hook of `sysv_signal(3)` (one-shot, not restarting).
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    guard(|| signals::install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER))
}

/// Hook of `__sysv_signal`, what `signal` is in programs built for strict ISO C
/// (`-std=c99`).
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    guard(|| signals::install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER))
}

/// Hook of `siginterrupt(3)`.
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    guard(|| signals::siginterrupt(sig, flag))
}

/// Hook of `sigset(3)`.
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: c_int, disp: libc::sighandler_t) -> libc::sighandler_t {
    guard(|| signals::sigset(sig, disp))
}

/// The constructor: adopts the VMMC connections an earlier image of this process handed
/// over through `exec`, and registers the signal count. Nothing else needs it: hooks work
/// before it has run.
extern "C" fn at_start() {
    register();
    // SAFETY: registering a plain function for the child of every fork.
    unsafe { libc::pthread_atfork(None, None, Some(signals::after_fork_in_child)) };
    let _ = catch_unwind(exec::adopt);
}

#[used]
#[link_section = ".init_array"]
static AT_START: extern "C" fn() = at_start;

/// At exit: connections still open write their statistics and end (the kernel would close
/// their sockets anyway), and this process's listeners withdraw their announcements (most
/// servers exit without closing them).
extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        for e in table::clear() {
            if let Entry::Listener { port, owner } = e {
                setup::withdraw_listener(port, owner);
            }
        }
    });
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
