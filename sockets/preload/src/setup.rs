//! Deciding which connections go over VMMC, and setting them up.
//!
//! Only a TCP connection whose two ends are on this host and both run under the library may
//! use VMMC; anything else must stay a kernel connection, byte for byte. The two ends learn
//! about each other through a registry of small files in [`sockets::SHM_DIR`]:
//!
//! - a listening socket announces its port (`l<port>`, holding the process id and its start
//!   time, so that a file left by a killed listener never names a later process);
//! - a connecting socket that finds a live announcement for its destination binds to a
//!   loopback port first and announces that port (`c<port>`, holding the process id, its
//!   start time and the destination port) *before* it connects, so the accepting side knows
//!   from the peer's address alone whether to expect a hello, without waiting for data a
//!   plain client would never send. A marker whose process is gone (killed before its
//!   connection was accepted) or that names another destination does not make the accepting
//!   side wait: a later plain client that gets the same port is served at once, and the
//!   file of a dead process is removed.
//!
//! Then the connecting side sends the hello of [`sockets::Offer`] over the connection itself,
//! which stays open as the setup socket (wake-ups, end of file), and returns without waiting
//! for the accept (so one thread may connect to its own listener and accept afterwards);
//! the accepting side maps the rings the hello names and removes the marker. The accepting
//! side also peeks at the first bytes and gives up (keeping a kernel connection, nothing
//! consumed) unless they are the hello's magic, so a stale announcement cannot corrupt a
//! plain stream.

use crate::real::real;
use crate::table::{self, Entry};
use sockets::{Conn, Offer, Options, HELLO_LEN, MAGIC};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a side waits for the other's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

fn registry() -> PathBuf {
    sockets::shm_dir()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || crate::errno() == libc::EPERM)
}

fn pid() -> u32 {
    std::process::id()
}

/// When process `pid` started (clock ticks after boot, `/proc/PID/stat`'s 22nd field): with
/// the process id it names one process, even after the id is reused.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// An announcement's text: the listening process and when it started.
fn announcement() -> String {
    let me = pid();
    // A process can always read its own entry; 0 where /proc is missing altogether.
    format!("{me} {}", start_time(me as i32).unwrap_or(0))
}

/// The process an announcement names, and when it started.
fn parse_announcement(text: &str) -> Option<(i32, u64)> {
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether process `pid` exists and started at `start` (where its /proc entry is hidden,
/// its existence decides).
fn same_process(pid: i32, start: u64) -> bool {
    alive(pid) && start_time(pid).is_none_or(|t| t == start)
}

/// A connect marker: the connecting process, when it started, and the port it connects to.
fn parse_marker(text: &str) -> Option<(i32, u64, u16)> {
    let mut it = text.split_whitespace();
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

/// Announces a listening port. The file appears whole (written aside, then renamed), so a
/// connecting process never reads half an announcement.
pub fn announce_listener(port: u16) {
    let dir = registry();
    let tmp = dir.join(format!(".l{port}.{}", pid()));
    if std::fs::write(&tmp, announcement()).is_ok()
        && std::fs::rename(&tmp, dir.join(format!("l{port}"))).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Withdraws the announcement of `port` if this process made it and it is still this
/// process's (a later listener on the port may have announced itself since).
pub fn withdraw_listener(port: u16, owner: u32) {
    if owner != pid() {
        return;
    }
    let path = registry().join(format!("l{port}"));
    let mine = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| parse_announcement(&s))
        .is_some_and(|(p, _)| p as u32 == owner);
    if mine {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether a live interposed process listens on `port`: the announcement names a process
/// that exists and started when it says (a process that died without withdrawing, killed
/// by a signal say, leaves a file whose process id may come to name another process).
fn listener_live(port: u16) -> bool {
    std::fs::read_to_string(registry().join(format!("l{port}")))
        .ok()
        .and_then(|s| parse_announcement(&s))
        .is_some_and(|(p, start)| same_process(p, start))
}

/// The loopback IPv4/IPv6 address and port in `addr`, if it is one.
///
/// # Safety
/// `addr` points to `len` readable bytes.
pub unsafe fn loopback_port(addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<u16> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: at least a sockaddr_in is readable (checked above).
    let family = unsafe { (*addr).sa_family } as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address of sufficient length.
            let a = unsafe { &*(addr as *const libc::sockaddr_in) };
            let ip = u32::from_be(a.sin_addr.s_addr);
            (ip >> 24 == 127).then_some(u16::from_be(a.sin_port))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: an AF_INET6 address of sufficient length.
            let a = unsafe { &*(addr as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            let lo = ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback());
            lo.then_some(u16::from_be(a.sin6_port))
        }
        _ => None,
    }
}

fn local_port(fd: i32) -> Option<(u16, i32)> {
    // SAFETY: a zeroed sockaddr_storage is valid; getsockname writes at most `len` bytes.
    unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
            return None;
        }
        match ss.ss_family as i32 {
            libc::AF_INET => {
                let a = &*(&ss as *const _ as *const libc::sockaddr_in);
                Some((u16::from_be(a.sin_port), libc::AF_INET))
            }
            libc::AF_INET6 => {
                let a = &*(&ss as *const _ as *const libc::sockaddr_in6);
                Some((u16::from_be(a.sin6_port), libc::AF_INET6))
            }
            _ => None,
        }
    }
}

fn peer_port(fd: i32) -> Option<u16> {
    // SAFETY: as in local_port.
    unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getpeername(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
            return None;
        }
        loopback_port(&ss as *const _ as *const libc::sockaddr, len)
    }
}

/// The port a listening socket is bound to.
pub fn listening_port(fd: i32) -> Option<u16> {
    local_port(fd).map(|(p, _)| p)
}

/// Whether `addr` is an IPv6 address that maps an IPv4 one (`::ffff:127.0.0.1`).
///
/// # Safety
/// `addr` points to `len` readable bytes.
unsafe fn v4_mapped(addr: *const libc::sockaddr, len: libc::socklen_t) -> bool {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in6>() {
        return false;
    }
    // SAFETY: at least a sockaddr_in6 is readable (checked above).
    let a = unsafe { &*(addr as *const libc::sockaddr_in6) };
    a.sin6_family as i32 == libc::AF_INET6
        && std::net::Ipv6Addr::from(a.sin6_addr.s6_addr)
            .to_ipv4_mapped()
            .is_some()
}

/// Binds an unbound socket to a loopback port of its family; returns the port. An IPv6
/// socket that connects to an IPv4-mapped address (`mapped`) binds to the mapped IPv4
/// loopback: bound to `::1`, it could not reach an IPv4 address.
fn bind_loopback(fd: i32, mapped: bool) -> Option<u16> {
    let (port, family) = local_port(fd)?;
    if port != 0 {
        return Some(port);
    }
    // SAFETY: zeroed addresses of the right family and size.
    let rc = unsafe {
        if family == libc::AF_INET {
            let mut a: libc::sockaddr_in = std::mem::zeroed();
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_addr.s_addr = u32::to_be(0x7f00_0001);
            libc::bind(
                fd,
                &a as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        } else {
            let mut a: libc::sockaddr_in6 = std::mem::zeroed();
            a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            a.sin6_addr.s6_addr = if mapped {
                std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets()
            } else {
                std::net::Ipv6Addr::LOCALHOST.octets()
            };
            libc::bind(
                fd,
                &a as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    };
    if rc != 0 {
        return None;
    }
    local_port(fd).map(|(p, _)| p)
}

/// Waits until `fd` has `events` or the deadline passes.
fn wait_fd(fd: i32, events: i16, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, i32) -> i32);
        // SAFETY: one valid pollfd.
        let n = unsafe { poll(&mut p, 1, left.as_millis().max(1) as i32) };
        if n > 0 {
            return true;
        }
        if n < 0 && crate::errno() != libc::EINTR {
            return false;
        }
    }
}

fn send_all(fd: i32, mut data: &[u8], deadline: Instant) -> bool {
    let send = real!(send: fn(i32, *const libc::c_void, usize, i32) -> isize);
    while !data.is_empty() {
        // SAFETY: `data` is readable for its length.
        let n = unsafe {
            send(
                fd,
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            data = &data[n as usize..];
        } else if n < 0 && matches!(crate::errno(), libc::EAGAIN | libc::EINTR) {
            if !wait_fd(fd, libc::POLLOUT, deadline) {
                return false;
            }
        } else {
            return false;
        }
    }
    true
}

fn recv_exact(fd: i32, out: &mut [u8], flags: i32, deadline: Instant) -> bool {
    let recv = real!(recv: fn(i32, *mut libc::c_void, usize, i32) -> isize);
    let mut got = 0;
    while got < out.len() {
        // SAFETY: `out[got..]` is writable for its length.
        let n = unsafe {
            recv(
                fd,
                out[got..].as_mut_ptr().cast(),
                out.len() - got,
                flags | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            if flags & libc::MSG_PEEK != 0 {
                if n as usize >= out.len() {
                    return true;
                }
            } else {
                got += n as usize;
                continue;
            }
        } else if n == 0 || !matches!(crate::errno(), libc::EAGAIN | libc::EINTR) {
            return false;
        }
        if !wait_fd(fd, libc::POLLIN, deadline) {
            return false;
        }
    }
    true
}

/// A duplicate of `fd` for the connection to keep as its setup socket.
fn setup_socket(fd: i32) -> Result<TcpStream, i32> {
    let fcntl = real!(fcntl: fn(i32, i32, usize) -> i32);
    // SAFETY: duplicating a descriptor we were handed.
    let own = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if own < 0 {
        return Err(crate::errno());
    }
    // SAFETY: `own` is a fresh descriptor that only this TcpStream owns.
    Ok(TcpStream::from(unsafe { OwnedFd::from_raw_fd(own) }))
}

fn options() -> Options {
    Options::from_env().unwrap_or_else(|e| {
        warn_once(&e.to_string());
        Options::default()
    })
}

/// Gives `conn` the receive and send timeouts (`SO_RCVTIMEO`, `SO_SNDTIMEO`) of its kernel
/// socket `fd`: the program sets them there (before or after the connection went over
/// VMMC, an accepted socket inherits its listener's), and the rings' waits honour them.
pub fn take_timeouts(fd: i32, conn: &Conn) {
    for (read, name) in [(true, libc::SO_RCVTIMEO), (false, libc::SO_SNDTIMEO)] {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        // SAFETY: a timeval of the length given.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                &mut tv as *mut libc::timeval as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            continue;
        }
        // Zero is no timeout, as for the kernel.
        let t = Duration::new(
            tv.tv_sec.max(0) as u64,
            (tv.tv_usec.clamp(0, 999_999) * 1000) as u32,
        );
        let _ = conn.set_timeout(read, (!t.is_zero()).then_some(t));
    }
}

/// Tracks `fd` as the VMMC connection `conn`, in the descriptor's blocking mode and with
/// its timeouts.
fn track(fd: i32, conn: Conn) {
    let _ = setup_nodelay(fd);
    let fcntl = real!(fcntl: fn(i32, i32, usize) -> i32);
    // SAFETY: F_GETFL on a valid descriptor.
    let fl = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    conn.set_nonblocking(fl >= 0 && fl & libc::O_NONBLOCK != 0);
    take_timeouts(fd, &conn);
    let conn = Arc::new(conn);
    drop(table::set(fd, Entry::Vmmc(conn.clone())));
    // Epoll sets the socket joined before it connected now watch its rings.
    for (epfd, set) in table::epoll_sets() {
        set.upgrade(epfd, fd, conn.clone());
    }
}

/// The connecting side's setup on `fd` (the program's descriptor; the connection keeps a
/// duplicate of its own): makes the rings and announces them. It does not wait for the
/// accept, so a thread may connect to a listener it accepts from afterwards.
fn connect_setup(fd: i32, marker: PathBuf) -> Result<(), i32> {
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let setup = setup_socket(fd)?;
    let offer = Offer::new(options()).map_err(|_| libc::ENOMEM)?;
    if !send_all(fd, offer.hello(), deadline) {
        return Err(libc::ECONNRESET);
    }
    track(fd, offer.connect(setup, vec![marker]));
    Ok(())
}

fn setup_nodelay(fd: i32) -> i32 {
    let one: i32 = 1;
    // SAFETY: a valid option value of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const i32 as *const libc::c_void,
            4,
        )
    }
}

/// The connecting side: when the destination is an interposed listener of this host,
/// connects (completing even a non-blocking connect, as loopback connects can) and sets the
/// connection up over VMMC. `None`: not for VMMC, the caller connects through the kernel.
///
/// # Safety
/// `addr` points to `len` readable bytes.
pub unsafe fn connect(fd: i32, addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<i32> {
    // SAFETY: the caller's promise.
    let port = unsafe { loopback_port(addr, len) }?;
    if !listener_live(port) {
        return None;
    }
    // SAFETY: the caller's promise.
    let me = bind_loopback(fd, unsafe { v4_mapped(addr, len) })?;
    let marker = registry().join(format!("c{me}"));
    let _ = std::fs::write(&marker, format!("{} {port}", announcement()));
    let real_connect = real!(connect: fn(i32, *const libc::sockaddr, libc::socklen_t) -> i32);
    // SAFETY: the caller's address.
    let mut rc = unsafe { real_connect(fd, addr, len) };
    if rc != 0 && crate::errno() == libc::EINPROGRESS {
        let deadline = Instant::now() + HELLO_TIMEOUT;
        rc = if wait_fd(fd, libc::POLLOUT, deadline) {
            let mut err: i32 = 0;
            let mut l = 4 as libc::socklen_t;
            // SAFETY: SO_ERROR into an int.
            unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    &mut err as *mut i32 as *mut libc::c_void,
                    &mut l,
                )
            };
            if err != 0 {
                crate::set_errno(err);
                -1
            } else {
                0
            }
        } else {
            crate::set_errno(libc::ETIMEDOUT);
            -1
        };
    }
    // The marker stays until the accepting side has read it (it removes it), or the
    // connection closes unaccepted by a listener that went.
    let result = if rc != 0 {
        rc
    } else {
        match connect_setup(fd, marker.clone()) {
            Ok(()) => return Some(0),
            Err(e) => {
                crate::set_errno(e);
                -1
            }
        }
    };
    let _ = std::fs::remove_file(marker);
    Some(result)
}

/// The accepting side, after the kernel accepted `fd` on an interposed listener: sets the
/// connection up over VMMC when the peer announced itself and sends the hello. Returns an
/// errno when the setup failed after the hello had been read (the connection is unusable).
pub fn accepted(fd: i32) -> Result<(), i32> {
    let Some(port) = peer_port(fd) else {
        return Ok(());
    };
    // The connecting process may be gone already (it wrote, closed and exited): what it
    // wrote waits in the rings.
    let marker = registry().join(format!("c{port}"));
    let Ok(text) = std::fs::read_to_string(&marker) else {
        return Ok(());
    };
    // A marker that names another destination is another connection's (a plain client may
    // get the same source port for another destination): not for us.
    let Some((pid, start, dest)) = parse_marker(&text) else {
        return Ok(());
    };
    if local_port(fd).is_none_or(|(p, _)| p != dest) {
        return Ok(());
    }
    // A connecting process that is gone sent its hello before it could go, or never will
    // (killed before it connected): look without waiting.
    let live = same_process(pid, start);
    let mut magic = [0u8; 8];
    let deadline = if live {
        Instant::now() + HELLO_TIMEOUT
    } else {
        Instant::now()
    };
    if !recv_exact(fd, &mut magic, libc::MSG_PEEK, deadline) || &magic != MAGIC {
        if !live {
            let _ = std::fs::remove_file(&marker);
        }
        return Ok(());
    }
    let mut hello = [0u8; HELLO_LEN];
    if !recv_exact(fd, &mut hello, 0, deadline) {
        return Err(libc::ECONNRESET);
    }
    let setup = setup_socket(fd)?;
    let conn = sockets::accept_offer(&hello, setup, options(), Some(&marker))
        .map_err(|_| libc::ECONNRESET)?;
    track(fd, conn);
    Ok(())
}

/// Prints a configuration problem once per process, with a raw system call (never through a
/// hooked `write`).
fn warn_once(msg: &str) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        let line = format!("vmmc_sockets: {msg}; using the default\n");
        // SAFETY: a write of a valid buffer to descriptor 2.
        unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
    }
}
