//! The iPSC and Touchstone DELTA compatibility calls of the Paragon, its application and
//! partition calls, and `nx_perror`.
//!
//! What has a meaning here is done: clocks, gray codes, the application's nodes and shape
//! (one row of `numnodes()` nodes). What cannot be done returns NX's error (-1 with `errno`
//! EQNOTSUP; the hard forms print it and exit) with a text that says why:
//! - process creation from a process that is already a node (see `spawn`), and
//!   `nx_initve_attr` (its attributes are partition settings);
//! - partition management (`nx_mkpart*`, `nx_rmpart`, `nx_chpart_*`, `nx_pspart`,
//!   `nx_pri`): Linux has no partitions of nodes nor their gang scheduling;
//! - killing another node's process (`killproc`, `killcube` of other nodes): a process does
//!   not know the others' process ids on every transport; the launcher ends the job;
//! - `restrictvol`: there is no parallel file system (PFS) here.

use super::*;
use std::cell::RefCell;
use std::ffi::c_int;

thread_local! {
    /// The code and text of this thread's last failed underscore call (for nx_perror).
    static LAST: RefCell<(i32, String)> = const { RefCell::new((0, String::new())) };
}

/// Records a failed underscore call's error for `nx_perror`.
pub(crate) fn remember(code: i32, text: String) {
    let _ = LAST.try_with(|l| *l.borrow_mut() = (code, text));
}

fn errno() -> i32 {
    // SAFETY: errno is the calling thread's own variable.
    unsafe { *libc::__errno_location() }
}

/// Prints `s`, a colon and the text of the last NX error (the error of the last failed
/// underscore call if `errno` still holds its code, else `errno`'s) on stderr.
/// # Safety
/// `s` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn nx_perror(s: *const c_char) {
    let code = errno();
    let what = LAST
        .try_with(|l| {
            let l = l.borrow();
            (l.0 == code && code != 0).then(|| l.1.clone())
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| nx::error_str(code).to_string());
    let prefix = if s.is_null() {
        String::new()
    } else {
        // SAFETY: a C string, by this function's contract.
        let p = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        if p.is_empty() {
            p
        } else {
            format!("{p}: ")
        }
    };
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{prefix}{what}\n").as_bytes());
}

// ----- clocks -----

/// Milliseconds on the clock of `dclock` (wraps after 49 days, as a 32-bit count did).
#[no_mangle]
pub extern "C" fn mclock() -> libc::c_ulong {
    ((nx::Nx::dclock_now() * 1e3) as u64 & 0xffff_ffff) as libc::c_ulong
}

/// `mclock` (it cannot fail).
#[no_mangle]
pub extern "C" fn _mclock() -> libc::c_ulong {
    mclock()
}

/// NX's 64-bit clock value: `slow` the low 32 bits and `shigh` the high ones.
#[repr(C)]
#[derive(Default)]
pub struct Esize {
    pub(crate) slow: c_long,
    pub(crate) shigh: c_long,
}

/// The hardware clock's count: a free-running counter, as the Paragon's, so the monotonic
/// clock since the machine started (in virtual time under the simulated SHRIMP's pacer).
/// Not `dclock`'s time, which starts at 0 in each process: a first reading of 0 looked like
/// a clock that does not run (the Fortran test's check failed on a node whose first clock
/// reading it was).
fn hw_ticks() -> u64 {
    if vmmc::pace::is_paced() {
        return (nx::Nx::dclock_now() * 1e7) as u64;
    }
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 10_000_000 + t.tv_nsec as u64 / 100
}

/// Ticks of the hardware clock (HWHZ = 10 MHz, as the Paragon's) in `*t`.
/// # Safety
/// `t` is NULL or points to an esize_t.
#[no_mangle]
pub unsafe extern "C" fn hwclock(t: *mut Esize) {
    // SAFETY: this function's contract.
    unsafe { _hwclock(t) }
}

/// `hwclock` (it cannot fail).
/// # Safety
/// `t` is NULL or points to an esize_t.
#[no_mangle]
pub unsafe extern "C" fn _hwclock(t: *mut Esize) {
    let ticks = hw_ticks();
    if !t.is_null() {
        // SAFETY: a non-NULL pointer to an esize_t.
        unsafe {
            (*t).slow = (ticks & 0xffff_ffff) as c_long;
            (*t).shigh = (ticks >> 32) as c_long;
        }
    }
}

// ----- identity -----

/// The process's id in the iPSC sense: its process type.
#[no_mangle]
pub extern "C" fn mypid() -> c_long {
    myptype()
}

/// The process type of the sender of the last message received or probed (the iPSC
/// name of `infoptype`).
#[no_mangle]
pub extern "C" fn infopid() -> c_long {
    infoptype()
}

/// `infopid` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _infopid() -> c_long {
    super::paragon::_infoptype()
}

/// The node's LED: `_led` returns 0 (there is none).
#[no_mangle]
pub extern "C" fn _led(_on: c_long) -> c_long {
    0
}

/// The binary-reflected gray code of `i`.
#[no_mangle]
pub extern "C" fn gray(i: c_long) -> c_long {
    i ^ (i >> 1)
}

/// `gray` (it cannot fail).
#[no_mangle]
pub extern "C" fn _gray(i: c_long) -> c_long {
    gray(i)
}

/// The inverse of `gray`: the `i` whose gray code is `g`.
#[no_mangle]
pub extern "C" fn ginv(g: c_long) -> c_long {
    let mut g = g as u64;
    let mut i = g;
    while g != 0 {
        g >>= 1;
        i ^= g;
    }
    i as c_long
}

/// `ginv` (it cannot fail).
#[no_mangle]
pub extern "C" fn _ginv(g: c_long) -> c_long {
    ginv(g)
}

/// The application's nodes as one row: `*rows` 1, `*cols` numnodes(); returns numnodes().
fn rect(rows: *mut c_long, cols: *mut c_long) -> Result<c_long, NxError> {
    let n = nx()?.numnodes() as c_long;
    // SAFETY: NULL or pointers to longs, as NX requires of its callers.
    unsafe {
        if !rows.is_null() {
            *rows = 1;
        }
        if !cols.is_null() {
            *cols = n;
        }
    }
    Ok(n)
}

/// The shape of the partition: the job's nodes as 1 row of numnodes(); returns numnodes().
/// # Safety
/// Pointer arguments are NULL or point to longs.
#[no_mangle]
pub unsafe extern "C" fn mypart(rows: *mut c_long, cols: *mut c_long) -> c_long {
    fatal("mypart", || rect(rows, cols))
}

/// The shape of the application: 1 row of numnodes(); returns 0, or -1 and errno.
/// # Safety
/// Pointer arguments are NULL or point to longs.
#[no_mangle]
pub unsafe extern "C" fn nx_app_rect(rows: *mut c_long, cols: *mut c_long) -> c_long {
    soft(|| rect(rows, cols).map(|_| 0))
}

/// The nodes of the application of process `pid` (0 or this process: this job): a list
/// allocated with malloc (the caller frees it) in `*list`, its length in `*size`. Returns
/// 0, or -1 and errno (another application: EQNOTSUP, this process knows only its own job).
/// # Safety
/// `list` and `size` point to where the results go.
#[no_mangle]
pub unsafe extern "C" fn nx_app_nodes(
    pid: libc::pid_t,
    list: *mut *mut c_long,
    size: *mut libc::c_ulong,
) -> c_long {
    soft(|| {
        // SAFETY: getpid has no memory effects.
        if pid != 0 && pid != unsafe { libc::getpid() } {
            return Err(NxError::Unsupported(
                "nx_app_nodes: only this process's own application (pid 0) is known here",
            ));
        }
        if list.is_null() || size.is_null() {
            return Err(NxError::InvalidLength(-1));
        }
        let n = nx()?.numnodes() as usize;
        // SAFETY: malloc of n longs; checked below.
        let p = unsafe { libc::malloc(n.max(1) * std::mem::size_of::<c_long>()) } as *mut c_long;
        if p.is_null() {
            return Err(NxError::NotAllowed("nx_app_nodes: out of memory"));
        }
        // SAFETY: `p` holds n longs; `list` and `size` are the caller's result pointers.
        unsafe {
            for i in 0..n {
                *p.add(i) = i as c_long;
            }
            *list = p;
            *size = n as libc::c_ulong;
        }
        Ok(0)
    })
}

// ----- what cannot be done here -----

const ATTR: &str = "nx_initve_attr: its attributes are partition settings, which do not \
                    exist on Linux: use nx_initve or nx_initve_rect";
const PARTITION: &str = "partition management has no meaning on Linux: there are no \
                         partitions of nodes nor gang scheduling here";
const KILL: &str = "killing another node's process needs the launcher's process table (not \
                    known to a process on every transport): end the job through vmmc-run";
const PFS: &str = "restrictvol: there is no parallel file system (PFS) here";

fn unsupported(why: &'static str) -> Result<c_long, NxError> {
    Err(NxError::Unsupported(why))
}

macro_rules! cannot {
    ($($why:ident => { $($name:ident ( $($a:ident : $t:ty),* ) -> $r:ty;)* })*) => {$($(
        #[doc = concat!("`", stringify!($name), "`: cannot be done here; returns -1 with errno EQNOTSUP (see the module's documentation).")]
        #[no_mangle]
        pub extern "C" fn $name($(_: $t),*) -> $r {
            soft(|| unsupported($why)) as $r
        }
    )*)*};
}

cannot! {
    ATTR => {
        nx_initve_attr(partition: *const c_char, argc: *mut c_int, argv: *mut *mut c_char) -> c_long;
    }
    PARTITION => {
        nx_mkpart(partition: *const c_char, size: c_long, sched: c_long) -> c_long;
        nx_mkpart_rect(partition: *const c_char, rows: c_long, cols: c_long, sched: c_long) -> c_long;
        nx_mkpart_map(partition: *const c_char, nnodes: c_long, nodes: *const c_long, sched: c_long) -> c_long;
        nx_mkpart_attr(partition: *const c_char) -> c_long;
        nx_rmpart(partition: *const c_char, force: c_long, recursive: c_long) -> c_long;
        nx_chpart_epl(partition: *const c_char, epl: c_long) -> c_long;
        nx_chpart_mod(partition: *const c_char, mode: c_long) -> c_long;
        nx_chpart_name(partition: *const c_char, name: *const c_char) -> c_long;
        nx_chpart_owner(partition: *const c_char, owner: c_long, group: c_long) -> c_long;
        nx_chpart_rq(partition: *const c_char, rq: c_long) -> c_long;
        nx_chpart_sched(partition: *const c_char, sched: c_long) -> c_long;
        nx_pspart(partition: *const c_char, info: *mut *mut c_void, count: *mut libc::c_ulong) -> c_int;
        nx_pri(pgroup: c_long, priority: c_long) -> c_long;
    }
    PFS => {
        restrictvol(fd: c_int, nvol: c_int, vols: *mut c_int) -> c_long;
        _restrictvol(fd: c_int, nvol: c_int, vols: *mut c_int) -> c_long;
    }
}

/// Kills the process of type `ptype` on `node` (-1: every node). This node's own process
/// can be killed (it exits at once, status 1, as a killed node ends its job); another
/// node's cannot (EQNOTSUP).
fn do_kill(name: &'static str, node: c_long, ptype: c_long) -> Result<c_long, NxError> {
    let nx = nx()?;
    let me = nx.mynode() as c_long;
    if node != -1 && !(0..nx.numnodes() as c_long).contains(&node) {
        return Err(NxError::InvalidNode(node as i64));
    }
    let others = node == -1 && nx.numnodes() > 1 || node != -1 && node != me;
    if others {
        return unsupported(KILL);
    }
    if ptype == -1 || ptype as i64 == nx.myptype() {
        die(&format!("NX: {name}: node {me} killed itself\n"));
    }
    Ok(0)
}

/// Kills processes: see `killproc`. The whole job is ended by the launcher instead.
#[no_mangle]
pub extern "C" fn killcube(node: c_long, ptype: c_long) {
    fatal("killcube", || do_kill("killcube", node, ptype));
}

/// `killcube` returning 0, or -1 and errno.
#[no_mangle]
pub extern "C" fn _killcube(node: c_long, ptype: c_long) -> c_int {
    soft(|| do_kill("killcube", node, ptype)) as c_int
}

/// Kills the process of type `ptype` on `node`: this node's own process only (another's:
/// EQNOTSUP, see the module's documentation).
#[no_mangle]
pub extern "C" fn killproc(node: c_long, ptype: c_long) {
    fatal("killproc", || do_kill("killproc", node, ptype));
}

/// `killproc` returning 0, or -1 and errno.
#[no_mangle]
pub extern "C" fn _killproc(node: c_long, ptype: c_long) -> c_int {
    soft(|| do_kill("killproc", node, ptype)) as c_int
}
