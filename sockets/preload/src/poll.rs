//! `poll`, `ppoll`, `select` and `pselect` over a mix of kernel descriptors and VMMC
//! connections. A VMMC connection's readiness is the state of its rings, not of its
//! descriptor (which only carries wake-up bytes), so these calls look at the rings, spin
//! briefly when nothing is ready (the latency path; the core's policy, `vmmc::wait`, decides
//! how long, and not at all where processes outnumber cores), and then sleep in the kernel on the
//! kernel descriptors plus the connections' setup sockets, after asking the peers for a
//! wake-up byte ([`sockets::Conn::arm`]).
//!
//! An epoll set with VMMC members, watched by these calls, is readable when a member's rings
//! have something for it (as well as when the kernel says so): its members' readiness is
//! looked at here and their peers are asked for wake-up bytes, which make the set's kernel
//! instance readable, before the call sleeps.

use crate::epoll::EpollSet;
use crate::real::real;
use crate::table;
use sockets::Conn;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a waiter spins before it sleeps: several wake-ups (25-30 µs each here,
/// DESIGN.md, more on a busy machine), so that a ping-pong whose peer went to sleep comes
/// back to the fast path instead of both sides sleeping for every message.
pub const SPIN: Duration = Duration::from_micros(200);
/// The interposer's waits, in `vmmc::wait`'s counts.
pub static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("sockets.poll");

/// A spin by the core's policy: over after [`SPIN`], at once where processes outnumber cores
/// or when the spinner was descheduled (`vmmc::wait::Spin`).
pub fn spin() -> vmmc::wait::Spin {
    vmmc::wait::Spin::new(&WAIT_SITE, SPIN)
}

/// The poll events of a connection for the requested `events`.
pub fn revents(c: &Conn, events: i16) -> i16 {
    let mut r = 0;
    if events & (libc::POLLIN | libc::POLLRDNORM) != 0 && c.is_readable() {
        r |= events & (libc::POLLIN | libc::POLLRDNORM);
    }
    if events & (libc::POLLOUT | libc::POLLWRNORM) != 0 && c.is_writable() {
        r |= events & (libc::POLLOUT | libc::POLLWRNORM);
    }
    if events & libc::POLLRDHUP != 0 && c.peer_finished() {
        r |= libc::POLLRDHUP;
    }
    if c.peer_lost() {
        r |= libc::POLLHUP;
    }
    r
}

fn kernel_ppoll(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> i32 {
    let ppoll = real!(ppoll: fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> i32);
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
    // SAFETY: `fds` is a valid array of its length; `tp` and `sigmask` are null or valid.
    unsafe { ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tp, sigmask) }
}

/// `poll` / `ppoll` on `fds` with an optional timeout (`None`: forever) and signal mask.
pub fn poll(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> i32 {
    let vmmc: Vec<(usize, Arc<Conn>)> = fds
        .iter()
        .enumerate()
        .filter_map(|(i, p)| table::conn(p.fd).map(|c| (i, c)))
        .collect();
    let sets: Vec<(usize, Arc<EpollSet>)> = fds
        .iter()
        .enumerate()
        .filter_map(|(i, p)| table::epoll_with_members(p.fd).map(|s| (i, s)))
        .collect();
    if vmmc.is_empty() && sets.is_empty() {
        return kernel_ppoll(fds, timeout, sigmask);
    }
    let start = Instant::now();
    // A timeout too large to add to the clock is a wait without end, as the kernel's.
    let deadline = timeout.and_then(|t| start.checked_add(t));
    let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    // The kernel descriptors alone (a VMMC one polled as -fd is ignored by the kernel).
    let mut kernel: Vec<libc::pollfd> = fds.to_vec();
    for (i, _) in &vmmc {
        kernel[*i].fd = -1;
    }
    let has_kernel = kernel.iter().any(|p| p.fd >= 0);
    let scan = |fds: &mut [libc::pollfd], kernel: &[libc::pollfd]| -> i32 {
        let mut n = 0;
        for (i, p) in fds.iter_mut().enumerate() {
            p.revents = match vmmc.iter().find(|(j, _)| *j == i) {
                Some((_, c)) => revents(c, p.events),
                None => kernel[i].revents,
            };
            if let Some((_, set)) = sets.iter().find(|(j, _)| *j == i) {
                if p.events & (libc::POLLIN | libc::POLLRDNORM) != 0 && set.any_ready() {
                    p.revents |= p.events & (libc::POLLIN | libc::POLLRDNORM);
                }
            }
            if p.revents != 0 {
                n += 1;
            }
        }
        n
    };
    // The caller's signal mask holds for the whole call, as the kernel's ppoll sets it.
    let _mask = crate::signals::MaskFor::call(sigmask);
    // A handler that runs while the rings are watched ends the call, as the kernel ends a
    // poll (whatever the handler's `SA_RESTART`).
    let signals = crate::signals::handled();
    let interrupted = || crate::signals::handled() != signals;
    // Spin: rings every turn, the kernel now and then.
    let (mut turn, mut spin) = (0u32, self::spin());
    loop {
        if has_kernel && turn.is_multiple_of(16) {
            let k = kernel_ppoll(&mut kernel, Some(Duration::ZERO), std::ptr::null());
            if k < 0 {
                return k;
            }
        }
        let n = scan(fds, &kernel);
        if n == 0 && interrupted() {
            crate::set_errno(libc::EINTR);
            return -1;
        }
        if n > 0 || left() == Some(Duration::ZERO) || spin.over() {
            if n > 0 || left() == Some(Duration::ZERO) {
                return n;
            }
            break;
        }
        turn += 1;
        std::hint::spin_loop();
    }
    // Sleep: the kernel descriptors plus the setup sockets, which wake-up bytes make ready.
    let wants: Vec<(bool, bool)> = vmmc
        .iter()
        .map(|(i, _)| {
            let ev = fds[*i].events;
            (
                ev & (libc::POLLIN | libc::POLLRDNORM | libc::POLLRDHUP) != 0,
                ev & (libc::POLLOUT | libc::POLLWRNORM) != 0,
            )
        })
        .collect();
    let arm = |on: bool| {
        for ((_, c), (r, w)) in vmmc.iter().zip(&wants) {
            if on {
                c.arm(*r, *w);
            } else {
                c.disarm(*r, *w);
            }
        }
        for (_, set) in &sets {
            set.arm(on);
        }
    };
    arm(true);
    let result = loop {
        for p in kernel.iter_mut() {
            p.revents = 0;
        }
        let n = scan(fds, &kernel);
        if n > 0 {
            break n;
        }
        if interrupted() {
            crate::set_errno(libc::EINTR);
            break -1;
        }
        let mut sleep = sockets::ring::MAX_SLEEP;
        if let Some(l) = left() {
            if l.is_zero() {
                break 0;
            }
            sleep = sleep.min(l);
        }
        let mut all = kernel.clone();
        for (_, c) in &vmmc {
            all.push(libc::pollfd {
                fd: c.setup_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        spin.slept();
        let k = kernel_ppoll(&mut all, Some(sleep), sigmask);
        if k < 0 {
            break k;
        }
        for (p, q) in kernel.iter_mut().zip(&all) {
            p.revents = q.revents;
        }
        for (j, (_, c)) in vmmc.iter().enumerate() {
            if all[kernel.len() + j].revents != 0 {
                c.drain();
            }
        }
        let n = scan(fds, &kernel);
        if n > 0 {
            break n;
        }
    };
    // Disarming may touch `errno`; a failure keeps the one it had.
    let e = crate::errno();
    arm(false);
    crate::set_errno(e);
    result
}

/// `select` / `pselect` through [`poll`] when a VMMC connection is among the sets.
///
/// # Safety
/// The sets are null or valid `fd_set`s covering `nfds`.
pub unsafe fn select(
    nfds: i32,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> i32 {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as i32);
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        // SAFETY: the caller's sets; fd < nfds <= FD_SETSIZE.
        unsafe {
            if !r.is_null() && libc::FD_ISSET(fd, r) {
                ev |= libc::POLLIN;
            }
            if !w.is_null() && libc::FD_ISSET(fd, w) {
                ev |= libc::POLLOUT;
            }
            if !e.is_null() && libc::FD_ISSET(fd, e) {
                ev |= libc::POLLPRI;
            }
        }
        if ev != 0 {
            fds.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    let n = poll(&mut fds, timeout, sigmask);
    if n < 0 {
        return n;
    }
    let mut count = 0;
    // SAFETY: as above.
    unsafe {
        for set in [r, w, e] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
        for p in &fds {
            let bad = p.revents & libc::POLLNVAL != 0;
            if bad {
                crate::set_errno(libc::EBADF);
                return -1;
            }
            let hup = p.revents & (libc::POLLHUP | libc::POLLERR) != 0;
            if !r.is_null()
                && p.events & libc::POLLIN != 0
                && (p.revents & libc::POLLIN != 0 || hup)
            {
                libc::FD_SET(p.fd, r);
                count += 1;
            }
            if !w.is_null()
                && p.events & libc::POLLOUT != 0
                && (p.revents & libc::POLLOUT != 0 || hup)
            {
                libc::FD_SET(p.fd, w);
                count += 1;
            }
            if !e.is_null() && p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
                libc::FD_SET(p.fd, e);
                count += 1;
            }
        }
    }
    count
}
