//! Surviving `exec`: the new image is interposed too, and keeps the VMMC connections it
//! inherits.
//!
//! Before `execve` the hook makes sure `LD_PRELOAD` names this library in the new
//! environment (a program may pass an environment of its own), and describes every VMMC
//! connection whose descriptor survives the exec (no `FD_CLOEXEC`) in `VMMC_SOCK_INHERIT`:
//! the program's descriptors of it (`3+7` after a `dup`), inheritable duplicates of the two rings' files and of the setup
//! socket, the capacities, the variant and the mode. The new image's constructor maps the
//! rings again and tracks the descriptors as before. The connection's positions and process
//! count live in the rings, so nothing else needs to travel; the exec'd image takes the old
//! image's place as a holder of the connection.

use crate::real::real;
use crate::table::{self, Entry};
use sockets::{Conn, Variant};
use std::ffi::{CStr, CString};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

const INHERIT: &str = "VMMC_SOCK_INHERIT";

/// The path of this library, for `LD_PRELOAD`.
fn library_path() -> Option<CString> {
    // SAFETY: dladdr on an address inside this library fills `info` with static strings.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(library_path as *const libc::c_void, &mut info) == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        Some(CStr::from_ptr(info.dli_fname).to_owned())
    }
}

fn dup_inheritable(fd: i32) -> Option<i32> {
    let fcntl = real!(fcntl: fn(i32, i32, usize) -> i32);
    // SAFETY: duplicating a descriptor we own, without close-on-exec.
    let d = unsafe { fcntl(fd, libc::F_DUPFD, 3) };
    (d >= 0).then_some(d)
}

/// What an exec needs: the environment strings to add, and the duplicates to close if the
/// exec fails.
pub struct Prepared {
    env: Vec<CString>,
    dups: Vec<i32>,
    /// The connections handed over, one per entry (a spawned child holds each once more).
    pub conns: Vec<Arc<Conn>>,
}

impl Prepared {
    /// Closes the duplicates (the exec failed).
    pub fn abandon(self) {
        let close = real!(close: fn(i32) -> i32);
        for d in self.dups {
            // SAFETY: closing our duplicates.
            unsafe { close(d) };
        }
    }
}

/// Builds the additions to the environment of an exec whose environment is `envp`.
///
/// # Safety
/// `envp` is null or a null-terminated array of C strings.
pub unsafe fn prepare(envp: *const *const libc::c_char) -> Prepared {
    let mut p = Prepared {
        env: Vec::new(),
        dups: Vec::new(),
        conns: Vec::new(),
    };
    // SAFETY: the caller's array.
    let has_preload = unsafe { env_has(envp, b"LD_PRELOAD=") };
    if !has_preload {
        if let Some(path) = library_path() {
            let mut s = b"LD_PRELOAD=".to_vec();
            s.extend_from_slice(path.as_bytes());
            p.env.extend(CString::new(s));
        }
    }
    let fcntl = real!(fcntl: fn(i32, i32, usize) -> i32);
    // One entry per connection, naming every inheritable descriptor of it (`dup`s share
    // one connection, which the new image must hold once).
    let mut by_conn: Vec<(Arc<Conn>, Vec<i32>)> = Vec::new();
    for (fd, c) in table::vmmc_fds() {
        // SAFETY: F_GETFD on a tracked descriptor.
        let flags = unsafe { fcntl(fd, libc::F_GETFD, 0) };
        if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
            continue;
        }
        match by_conn.iter_mut().find(|(o, _)| Arc::ptr_eq(o, &c)) {
            Some((_, fds)) => fds.push(fd),
            None => by_conn.push((c, vec![fd])),
        }
    }
    let mut entries = Vec::new();
    for (c, fds) in by_conn {
        let fd = fds.iter().map(i32::to_string).collect::<Vec<_>>().join("+");
        let Some((inc, out, in_cap, out_cap)) = c.ring_fds() else {
            continue;
        };
        let (Some(i), Some(o), Some(s)) = (
            dup_inheritable(inc),
            dup_inheritable(out),
            dup_inheritable(c.setup_fd()),
        ) else {
            continue;
        };
        p.dups.extend([i, o, s]);
        entries.push(format!(
            "{fd}:{i}:{o}:{s}:{in_cap}:{out_cap}:{}:{}",
            c.variant().name(),
            u8::from(c.is_nonblocking())
        ));
        p.conns.push(c);
    }
    if !entries.is_empty() {
        p.env
            .extend(CString::new(format!("{INHERIT}={}", entries.join(","))));
    }
    p
}

/// # Safety
/// `envp` is null or a null-terminated array of C strings.
unsafe fn env_has(envp: *const *const libc::c_char, prefix: &[u8]) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut i = 0;
    loop {
        // SAFETY: within the null-terminated array.
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            return false;
        }
        // SAFETY: a C string of the array.
        if unsafe { CStr::from_ptr(e) }.to_bytes().starts_with(prefix) {
            return true;
        }
        i += 1;
    }
}

/// The environment for the exec: `envp` without a stale `VMMC_SOCK_INHERIT`, plus `p`'s
/// strings; the vector of pointers ends with null. The strings must outlive the exec call.
///
/// # Safety
/// `envp` is null or a null-terminated array of C strings.
pub unsafe fn environment(
    envp: *const *const libc::c_char,
    p: &Prepared,
) -> Vec<*const libc::c_char> {
    let mut v = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: within the null-terminated array.
            let e = unsafe { *envp.add(i) };
            if e.is_null() {
                break;
            }
            // SAFETY: a C string of the array.
            let bytes = unsafe { CStr::from_ptr(e) }.to_bytes();
            if !bytes.starts_with(INHERIT.as_bytes()) || bytes.get(INHERIT.len()) != Some(&b'=') {
                v.push(e);
            }
            i += 1;
        }
    }
    v.extend(p.env.iter().map(|s| s.as_ptr()));
    v.push(std::ptr::null());
    v
}

/// Rebuilds the connections described in `VMMC_SOCK_INHERIT` (run by the constructor).
pub fn adopt() {
    let Ok(list) = std::env::var(INHERIT) else {
        return;
    };
    // Not for this image's own children: they get their own description.
    std::env::remove_var(INHERIT);
    for entry in list.split(',') {
        let f: Vec<&str> = entry.split(':').collect();
        if f.len() != 8 {
            continue;
        }
        let num = |i: usize| f[i].parse::<i64>().ok();
        let fds: Option<Vec<i32>> = f[0].split('+').map(|d| d.parse().ok()).collect();
        let (Some(fds), Some(inc), Some(out), Some(setup), Some(in_cap), Some(out_cap)) =
            (fds, num(1), num(2), num(3), num(4), num(5))
        else {
            continue;
        };
        let Ok(variant) = Variant::parse(f[6]) else {
            continue;
        };
        // SAFETY: the previous image handed these descriptors to this one, for this use.
        let (inc, out, setup) = unsafe {
            (
                OwnedFd::from_raw_fd(inc as i32),
                OwnedFd::from_raw_fd(out as i32),
                OwnedFd::from_raw_fd(setup as i32),
            )
        };
        let rings = vmmc::Region::map_shared_fd(inc, sockets::ring::HEADER + in_cap as usize)
            .and_then(|i| {
                vmmc::Region::map_shared_fd(out, sockets::ring::HEADER + out_cap as usize)
                    .map(|o| (i, o))
            });
        let Ok((i, o)) = rings else {
            continue;
        };
        let conn = Conn::restore(i, o, out_cap as usize, variant, TcpStream::from(setup));
        conn.set_nonblocking(f[7] == "1");
        crate::setup::take_timeouts(conn.setup_fd(), &conn);
        // Every descriptor of the connection shares it, as before the exec.
        let conn = Arc::new(conn);
        for fd in fds {
            drop(table::set(fd, Entry::Vmmc(conn.clone())));
        }
    }
}
