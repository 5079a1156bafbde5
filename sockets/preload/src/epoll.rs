//! epoll with VMMC connections in the set. The kernel epoll instance keeps every kernel
//! descriptor as the program registered it; a VMMC connection is registered there only for
//! its wake-up bytes (`EPOLLIN`, with a marker instead of the program's data), and its real
//! interest (events, data, edge or level, one-shot) is kept here and evaluated on the rings.
//!
//! Edge-triggered interest reports an event when the state changed since the last report:
//! new data (the peer's tail moved), new space (the peer's consumed count moved), the peer's
//! end. A one-shot interest is disabled after one report until `EPOLL_CTL_MOD`. A descriptor
//! may be in several sets: each set keeps its own interest.
//!
//! A socket added to a set before it connects (a candidate) is registered with the kernel
//! as the program asked, and the set remembers the registration; when the connect makes it
//! a VMMC connection, the registration moves here ([`EpollSet::upgrade`]).
//!
//! Nesting: an epoll set with VMMC members that is itself in another set stays registered
//! with the kernel as the program asked (its kernel members and its members' wake-up bytes
//! make it readable), and the outer set also looks at the inner set's rings and asks the
//! inner members' peers for wake-ups before it sleeps.

use crate::real::real;
use sockets::Conn;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The kernel registration of a VMMC connection carries `MARK | fd` as its data.
const MARK: u64 = 0x564d_4d43_0000_0000;
const MARK_MASK: u64 = 0xffff_ffff_0000_0000;

struct Watch {
    conn: Arc<Conn>,
    events: u32,
    data: u64,
    last_rx: Option<u32>,
    last_tx: Option<u32>,
    end_reported: bool,
    disabled: bool,
}

/// Epoll sets nested in a set, by descriptor: the inner set, the events and data the program
/// registered it with.
type Nested = BTreeMap<i32, (Arc<EpollSet>, u32, u64)>;

/// One epoll instance's VMMC members, the epoll sets nested in it, and the events and data
/// of its members that may still become VMMC connections.
#[derive(Default)]
pub struct EpollSet {
    watches: Mutex<BTreeMap<i32, Watch>>,
    nested: Mutex<Nested>,
    candidates: Mutex<BTreeMap<i32, (u32, u64)>>,
}

fn real_ctl(epfd: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> i32 {
    let ctl = real!(epoll_ctl: fn(i32, i32, i32, *mut libc::epoll_event) -> i32);
    // SAFETY: `ev` is null (DEL) or a valid event.
    unsafe { ctl(epfd, op, fd, ev) }
}

fn real_wait(
    epfd: i32,
    out: &mut [libc::epoll_event],
    timeout_ms: i32,
    sigmask: *const libc::sigset_t,
) -> i32 {
    let wait =
        real!(epoll_pwait: fn(i32, *mut libc::epoll_event, i32, i32, *const libc::sigset_t) -> i32);
    // SAFETY: `out` is a writable array of its length.
    unsafe {
        wait(
            epfd,
            out.as_mut_ptr(),
            out.len() as i32,
            timeout_ms,
            sigmask,
        )
    }
}

impl EpollSet {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Watch>> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `epoll_ctl` for a VMMC connection `fd`.
    pub fn ctl(
        &self,
        epfd: i32,
        op: i32,
        fd: i32,
        conn: Arc<Conn>,
        ev: Option<libc::epoll_event>,
    ) -> i32 {
        let mut w = self.lock();
        match op {
            libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
                let Some(ev) = ev else {
                    crate::set_errno(libc::EFAULT);
                    return -1;
                };
                let exists = w.contains_key(&fd);
                if op == libc::EPOLL_CTL_ADD && exists {
                    crate::set_errno(libc::EEXIST);
                    return -1;
                }
                if op == libc::EPOLL_CTL_MOD && !exists {
                    crate::set_errno(libc::ENOENT);
                    return -1;
                }
                if !exists {
                    let mut k = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: MARK | fd as u32 as u64,
                    };
                    if real_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut k) != 0 {
                        return -1;
                    }
                }
                w.insert(
                    fd,
                    Watch {
                        conn,
                        events: ev.events,
                        data: ev.u64,
                        last_rx: None,
                        last_tx: None,
                        end_reported: false,
                        disabled: false,
                    },
                );
                0
            }
            libc::EPOLL_CTL_DEL => {
                if w.remove(&fd).is_none() {
                    crate::set_errno(libc::ENOENT);
                    return -1;
                }
                real_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                0
            }
            _ => {
                crate::set_errno(libc::EINVAL);
                -1
            }
        }
    }

    /// Forgets `fd` (closed by the program).
    pub fn forget(&self, epfd: i32, fd: i32) {
        if self.lock().remove(&fd).is_some() {
            real_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
        }
        self.nested_lock().remove(&fd);
        self.forget_candidate(fd);
    }

    fn candidates_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, (u32, u64)>> {
        self.candidates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `epoll_ctl` for a socket `fd` that may yet connect over VMMC: the kernel registers it
    /// as the program asked, and this set remembers the registration for [`Self::upgrade`].
    pub fn ctl_candidate(&self, epfd: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> i32 {
        let rc = real_ctl(epfd, op, fd, ev);
        if rc == 0 {
            let mut c = self.candidates_lock();
            if op == libc::EPOLL_CTL_DEL || ev.is_null() {
                c.remove(&fd);
            } else {
                // SAFETY: a valid event (the kernel accepted it).
                let e = unsafe { *ev };
                c.insert(fd, (e.events, e.u64));
            }
        }
        rc
    }

    /// Forgets the registration of candidate `fd` (closed, or connected through the kernel,
    /// where its kernel registration stays the program's).
    pub fn forget_candidate(&self, fd: i32) {
        self.candidates_lock().remove(&fd);
    }

    /// Candidate `fd` became the VMMC connection `conn`: its registration moves from the
    /// kernel to this set, with the program's events and data.
    pub fn upgrade(&self, epfd: i32, fd: i32, conn: Arc<Conn>) {
        let Some((events, data)) = self.candidates_lock().remove(&fd) else {
            return;
        };
        real_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
        let ev = libc::epoll_event { events, u64: data };
        self.ctl(epfd, libc::EPOLL_CTL_ADD, fd, conn, Some(ev));
    }

    fn nested_lock(&self) -> std::sync::MutexGuard<'_, Nested> {
        self.nested.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `epoll_ctl` for an epoll set `fd` nested in this one: the kernel registers it as
    /// usual, and this set remembers it to look at its rings.
    pub fn ctl_nested(
        &self,
        epfd: i32,
        op: i32,
        fd: i32,
        inner: Arc<EpollSet>,
        ev: *mut libc::epoll_event,
    ) -> i32 {
        if std::ptr::eq(self, Arc::as_ptr(&inner)) {
            crate::set_errno(libc::EINVAL);
            return -1;
        }
        let rc = real_ctl(epfd, op, fd, ev);
        if rc == 0 {
            let mut n = self.nested_lock();
            if op == libc::EPOLL_CTL_DEL || ev.is_null() {
                n.remove(&fd);
            } else {
                // SAFETY: a valid event (the kernel accepted it).
                let e = unsafe { *ev };
                n.insert(fd, (inner, e.events, e.u64));
            }
        }
        rc
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty() && self.nested_lock().values().all(|(s, _, _)| s.is_empty())
    }

    /// Whether a member's rings have something to report (without consuming edge state).
    pub fn any_ready(&self) -> bool {
        let w = self.lock();
        w.values().any(|watch| {
            let c = &watch.conn;
            !watch.disabled
                && ((watch.events & libc::EPOLLIN as u32 != 0 && c.is_readable())
                    || (watch.events & libc::EPOLLOUT as u32 != 0 && c.is_writable())
                    || c.peer_lost())
        }) || self.nested_lock().values().any(|(s, _, _)| s.any_ready())
    }

    /// Fills `out` with the VMMC members' events; returns how many.
    fn ready(&self, out: &mut [libc::epoll_event]) -> usize {
        let mut n = 0;
        let mut w = self.lock();
        for watch in w.values_mut() {
            if n == out.len() {
                break;
            }
            if watch.disabled {
                continue;
            }
            let c = &watch.conn;
            let want = watch.events;
            let et = want & libc::EPOLLET as u32 != 0;
            let mut ev = 0u32;
            let ended = c.peer_finished();
            if want & libc::EPOLLIN as u32 != 0 && c.is_readable() {
                let mark = c.rx_mark();
                let fresh = watch.last_rx != Some(mark) || (ended && !watch.end_reported);
                if !et || fresh {
                    ev |= libc::EPOLLIN as u32;
                    watch.last_rx = Some(mark);
                }
            }
            if want & libc::EPOLLOUT as u32 != 0 && c.is_writable() {
                let mark = c.tx_mark();
                if !et || watch.last_tx != Some(mark) {
                    ev |= libc::EPOLLOUT as u32;
                    watch.last_tx = Some(mark);
                }
            }
            if want & libc::EPOLLRDHUP as u32 != 0 && ended && (!et || !watch.end_reported) {
                ev |= libc::EPOLLRDHUP as u32;
            }
            if c.peer_lost() && (!et || !watch.end_reported) {
                ev |= libc::EPOLLHUP as u32;
            }
            if ev != 0 {
                if ended {
                    watch.end_reported = true;
                }
                if want & libc::EPOLLONESHOT as u32 != 0 {
                    watch.disabled = true;
                }
                out[n] = libc::epoll_event {
                    events: ev,
                    u64: watch.data,
                };
                n += 1;
            }
        }
        drop(w);
        for (inner, events, data) in self.nested_lock().values() {
            if n < out.len() && events & libc::EPOLLIN as u32 != 0 && inner.any_ready() {
                out[n] = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: *data,
                };
                n += 1;
            }
        }
        n
    }

    pub fn arm(&self, on: bool) {
        for w in self.lock().values() {
            if w.disabled {
                continue;
            }
            let r = w.events & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0;
            let wr = w.events & libc::EPOLLOUT as u32 != 0;
            if on {
                w.conn.arm(r, wr);
            } else {
                w.conn.disarm(r, wr);
            }
        }
        for (inner, _, _) in self.nested_lock().values() {
            inner.arm(on);
        }
    }

    /// Moves the kernel's events into `out[n..]`, draining (not reporting) the wake-up
    /// bytes of VMMC members; returns the new count.
    fn kernel(
        &self,
        got: &[libc::epoll_event],
        out: &mut [libc::epoll_event],
        mut n: usize,
    ) -> usize {
        for ev in got {
            let data = ev.u64;
            if data & MARK_MASK == MARK {
                let fd = (data & 0xffff_ffff) as u32 as i32;
                if let Some(w) = self.lock().get(&fd) {
                    w.conn.drain();
                }
            } else if n < out.len() {
                out[n] = *ev;
                n += 1;
            }
        }
        n
    }

    /// `epoll_pwait` over the kernel members and the VMMC members.
    pub fn wait(
        &self,
        epfd: i32,
        out: &mut [libc::epoll_event],
        timeout_ms: i32,
        sigmask: *const libc::sigset_t,
    ) -> i32 {
        if self.is_empty() || out.is_empty() {
            return real_wait(epfd, out, timeout_ms, sigmask);
        }
        let start = Instant::now();
        let deadline = (timeout_ms >= 0).then(|| start + Duration::from_millis(timeout_ms as u64));
        let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let mut got = vec![libc::epoll_event { events: 0, u64: 0 }; out.len()];
        let (mut turn, mut spin) = (0u32, crate::poll::spin());
        // The caller's signal mask holds for the whole call, as the kernel's epoll_pwait
        // sets it.
        let _mask = crate::signals::MaskFor::call(sigmask);
        // A handler that runs while the rings are watched ends the call, as the kernel ends
        // an epoll_wait (whatever the handler's `SA_RESTART`).
        let signals = crate::signals::handled();
        let interrupted = || crate::signals::handled() != signals;
        // Spin: rings every turn, the kernel now and then.
        loop {
            let mut n = self.ready(out);
            if n < out.len() && turn.is_multiple_of(16) {
                let k = real_wait(epfd, &mut got[..out.len() - n], 0, std::ptr::null());
                if k < 0 {
                    return k;
                }
                n = self.kernel(&got[..k as usize], out, n);
            }
            if n > 0 || left() == Some(Duration::ZERO) {
                return n as i32;
            }
            if interrupted() {
                crate::set_errno(libc::EINTR);
                return -1;
            }
            if spin.over() {
                break;
            }
            turn += 1;
            std::hint::spin_loop();
        }
        self.arm(true);
        let result = loop {
            let n = self.ready(out);
            if n == out.len() {
                break n as i32;
            }
            if n == 0 && interrupted() {
                crate::set_errno(libc::EINTR);
                break -1;
            }
            let mut sleep = sockets::ring::MAX_SLEEP;
            if let Some(l) = left() {
                sleep = sleep.min(l);
            }
            let ms = if n > 0 {
                0
            } else {
                sleep.as_millis().max(1) as i32
            };
            if ms > 0 {
                spin.slept();
            }
            let k = real_wait(epfd, &mut got[..out.len() - n], ms, sigmask);
            if k < 0 {
                break if n > 0 { n as i32 } else { k };
            }
            let n = self.kernel(&got[..k as usize], out, n);
            let n = if n == 0 { self.ready(out) } else { n };
            if n > 0 || left() == Some(Duration::ZERO) {
                break n as i32;
            }
        };
        // Disarming may touch `errno`; a failure keeps the one it had.
        let e = crate::errno();
        self.arm(false);
        crate::set_errno(e);
        result
    }
}
