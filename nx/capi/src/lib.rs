//! # libnx: the C ABI of NX/2
//!
//! The NX calls with their `long`-typed signatures over the `nx` crate, built as `libnx.so`;
//! `include/nx.h` declares them. A program written for NX compiles with `cc prog.c -lnx` and
//! runs under the launcher (`vmmc-run -n N -- ./prog`).
//!
//! Beside the C calls, the module `fortran` has the Fortran bindings, `paragon` the rest of the
//! Paragon's message-passing calls, `compat` the iPSC compatibility, application and
//! partition calls, and `spawn` process creation (`nx_initve`, `nx_nfork`, `nx_load`).
//!
//! # Conventions
//! - The process joins the job (through [`vmmc_run::init`]) on its first NX call; the
//!   library's settings come from the environment (`NX_SMALL`, `NX_THRESHOLD`, `NX_SLOTS`).
//! - As in NX, a call that fails prints the error on stderr and ends the process (exit
//!   status 1); its underscore form (`_csend`, `_crecv`, ...) returns -1 and sets `errno` to an
//!   `EQ*` code of nx.h instead. `nx_strerror` describes a code.
//! - No call unwinds into C: a panic is reported like an error.
//! - At `exit`, the library completes the zero-copy sends still waiting for their receivers
//!   and leaves the job cleanly.

// `long` is `i64` here but not on every target: the casts between them stay.
#![allow(clippy::unnecessary_cast)]

use nx::{Info, Nx, NxError};
use std::collections::HashMap;
use std::ffi::{c_char, c_long, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, Once, OnceLock};

mod compat;
mod fortran;
mod paragon;
mod spawn;

/// A handler of `hrecv`: the message's type, length, node and process type.
pub type HrecvHandler = extern "C" fn(c_long, c_long, c_long, c_long);
/// A handler of `hrecvx`: as `hrecv`'s, with the caller's `hparam` last.
pub type HrecvxHandler = extern "C" fn(c_long, c_long, c_long, c_long, c_long);
/// The combining function of `gopf`: folds `y` into `x`.
pub type GopfFn = extern "C" fn(*mut c_void, *mut c_void) -> c_long;

struct Global {
    nx: Nx,
    /// `info` arrays of pending `irecvx` calls, filled when the receive completes: the
    /// address, and whether it is Fortran's (4-byte INTEGERs) rather than C's longs.
    infos: Mutex<HashMap<i64, (usize, bool)>>,
    /// Ids made by `msgmerge` (and `isendrecv`), each standing for the requests it merged.
    merged: Mutex<HashMap<i64, Vec<i64>>>,
}

/// The first id `msgmerge` gives: above the library's own request ids ([`nx::MID_LIMIT`]),
/// and with them below 2^31, so that Fortran's 32-bit INTEGERs hold every id.
const MERGED_FIRST: i64 = nx::MID_LIMIT;
/// The last id `msgmerge` gives before it starts again from [`MERGED_FIRST`].
const MERGED_LAST: i64 = i32::MAX as i64;

static GLOBAL: OnceLock<Result<Global, String>> = OnceLock::new();

fn global() -> Result<&'static Global, NxError> {
    GLOBAL
        .get_or_init(|| {
            let ep = vmmc_run::init().map_err(|e| format!("cannot join the job: {e}"))?;
            let mut cfg = nx::Config::from_env().map_err(|e| format!("cannot start NX: {e}"))?;
            if std::env::var_os("NX_REGCACHE").is_none() {
                cfg.reg_cache = true;
            }
            let nx = Nx::with_config(ep, cfg).map_err(|e| format!("cannot start NX: {e}"))?;
            // The process type nx_nfork or nx_load gave this node.
            if let Some(p) = std::env::var("NX_PTYPE").ok().and_then(|v| v.parse().ok()) {
                nx.setptype(p).map_err(|e| format!("NX_PTYPE: {e}"))?;
            }
            static AT_EXIT: Once = Once::new();
            AT_EXIT.call_once(|| {
                // SAFETY: registers a function with static lifetime that never unwinds.
                unsafe { libc::atexit(finish_at_exit) };
            });
            Ok(Global {
                nx,
                infos: Mutex::default(),
                merged: Mutex::default(),
            })
        })
        .as_ref()
        .map_err(|e| NxError::NotAllowed(leak(e)))
}

/// The message of a failed start, kept for the rest of the process.
fn leak(s: &str) -> &'static str {
    static MSG: OnceLock<String> = OnceLock::new();
    MSG.get_or_init(|| s.to_string())
}

extern "C" fn finish_at_exit() {
    let _ = catch_unwind(|| {
        if let Some(Ok(g)) = GLOBAL.get() {
            // On a fresh thread: at exit, the calling thread's thread-locals may already be
            // destroyed, and the waits below use some.
            let done = std::thread::Builder::new()
                .name("nx-exit".into())
                .spawn(|| {
                    if let Err(e) = g.nx.finish() {
                        eprintln!("nx: node {}: at exit: {e}", g.nx.mynode());
                    }
                });
            if let Ok(h) = done {
                let _ = h.join();
            }
            g.nx.endpoint().finish();
        }
    });
}

fn nx() -> Result<&'static Nx, NxError> {
    global().map(|g| &g.nx)
}

/// Runs an NX call: the error ends the process, as NX does.
fn fatal<T>(name: &str, f: impl FnOnce() -> Result<T, NxError>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => die(&format!("NX error in {name}: {e}\n")),
        Err(_) => die(&format!("NX error in {name}: internal failure\n")),
    }
}

/// Prints `msg` in one write (not interleaved with other processes' lines) and exits with 1.
fn die(msg: &str) -> ! {
    use std::io::Write;
    let _ = std::io::stderr().write_all(msg.as_bytes());
    std::process::exit(1)
}

/// Runs the underscore form of a call: -1 and `errno` on error.
fn soft(f: impl FnOnce() -> Result<c_long, NxError>) -> c_long {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => NxError::NotAllowed("internal failure"),
    };
    let code = e.code();
    compat::remember(code, e.to_string());
    // SAFETY: errno is the calling thread's own variable.
    unsafe { *libc::__errno_location() = code };
    -1
}

fn len_of(count: c_long) -> Result<usize, NxError> {
    usize::try_from(count).map_err(|_| NxError::InvalidLength(count))
}

/// Checks a buffer argument: NULL only with length 0.
fn check_buf(p: *const c_void, count: c_long) -> Result<usize, NxError> {
    let n = len_of(count)?;
    if p.is_null() && n > 0 {
        return Err(NxError::InvalidLength(count));
    }
    Ok(n)
}

/// The bytes at `p`.
///
/// # Safety
/// `p` valid for `n` bytes (or `n` == 0).
unsafe fn bytes<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

/// The bytes at `p`, writable.
///
/// # Safety
/// `p` valid and writable for `n` bytes (or `n` == 0).
unsafe fn bytes_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// Fills an NX info array: type, count, node, ptype.
///
/// # Safety
/// `info` NULL or valid for 4 longs.
unsafe fn put_info(info: *mut c_long, i: Info) {
    if info.is_null() {
        return;
    }
    let v = [
        i.mtype as c_long,
        i.count as c_long,
        i.node as c_long,
        i.ptype as c_long,
    ];
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), info, 4) };
}

fn to_long(v: usize) -> c_long {
    c_long::try_from(v).unwrap_or(c_long::MAX)
}

// ----- identity and small calls -----

/// This node's number.
#[no_mangle]
pub extern "C" fn mynode() -> c_long {
    fatal("mynode", || Ok(nx()?.mynode() as c_long))
}

/// The number of nodes.
#[no_mangle]
pub extern "C" fn numnodes() -> c_long {
    fatal("numnodes", || Ok(nx()?.numnodes() as c_long))
}

/// This process's type.
#[no_mangle]
pub extern "C" fn myptype() -> c_long {
    fatal("myptype", || Ok(nx()?.myptype() as c_long))
}

/// Sets this process's type.
#[no_mangle]
pub extern "C" fn setptype(ptype: c_long) {
    fatal("setptype", || nx()?.setptype(ptype as i64));
}

/// Masks (1) or unmasks (0) the handlers of handler receives; returns the previous state.
#[no_mangle]
pub extern "C" fn masktrap(state: c_long) -> c_long {
    fatal("masktrap", || Ok(nx()?.masktrap(state != 0) as c_long))
}

/// The host node (the launcher): -1, there is none among the nodes.
#[no_mangle]
pub extern "C" fn myhost() -> c_long {
    -1
}

/// The dimension of the smallest hypercube holding the nodes.
#[no_mangle]
pub extern "C" fn nodedim() -> c_long {
    fatal("nodedim", || {
        let n = nx()?.numnodes() as u64;
        Ok(n.next_power_of_two().trailing_zeros() as c_long)
    })
}

/// Gives up the processor briefly, after progress (a process that started NX: handlers
/// of arrived messages run, and an error left for the next call shows).
pub(crate) fn do_flick() -> Result<c_long, NxError> {
    if let Some(Ok(g)) = GLOBAL.get() {
        g.nx.poll()?;
    }
    std::thread::yield_now();
    Ok(0)
}

/// Gives up the processor briefly (an error left for the next call shows: see `do_flick`).
#[no_mangle]
pub extern "C" fn flick() {
    fatal("flick", do_flick);
}

/// The node's LED: there is none; does nothing.
#[no_mangle]
pub extern "C" fn led(_on: c_long) {}

/// Seconds on a fine clock.
#[no_mangle]
pub extern "C" fn dclock() -> f64 {
    nx::Nx::dclock_now()
}

/// The text of an `EQ*` code.
#[no_mangle]
pub extern "C" fn nx_strerror(code: c_long) -> *const c_char {
    static TABLE: OnceLock<Vec<std::ffi::CString>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        (0..=12)
            .map(|c| std::ffi::CString::new(nx::error_str(c)).expect("no NUL"))
            .collect()
    });
    let i = usize::try_from(code)
        .ok()
        .filter(|&i| i < t.len())
        .unwrap_or(12);
    t[i].as_ptr()
}

// ----- sending -----

fn do_csend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    // SAFETY: the caller passes `count` valid bytes at `buf` (NX's contract).
    let data = unsafe { bytes(buf, n) };
    nx()?.csend(ty as i64, data, node as i64, ptype as i64)?;
    Ok(0)
}

/// Sends a message; returns when `buf` may be reused. `node` -1 sends to every other node.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn csend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) {
    fatal("csend", || do_csend(ty, buf, count, node, ptype));
}

/// `csend` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _csend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) -> c_long {
    soft(|| do_csend(ty, buf, count, node, ptype))
}

fn do_isend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    // SAFETY: NX's contract: the buffer stays valid and untouched until the send completes.
    let mid = unsafe { nx()?.isend_raw(ty as i64, buf.cast(), n, node as i64, ptype as i64)? };
    Ok(mid as c_long)
}

/// Starts sending a message; returns its message id.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn isend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) -> c_long {
    fatal("isend", || do_isend(ty, buf, count, node, ptype))
}

/// `isend` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _isend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
) -> c_long {
    soft(|| do_isend(ty, buf, count, node, ptype))
}

// ----- receiving -----

fn do_crecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    // SAFETY: the caller passes `count` writable bytes at `buf`.
    let b = unsafe { bytes_mut(buf, n) };
    let i = nx()?.crecvx(typesel as i64, b, nodesel as i64, ptypesel as i64);
    if let (Err(NxError::MessageTooLong { .. }), Some(i)) = (&i, nx()?.info()) {
        // SAFETY: `info` is NULL or an NX info array.
        unsafe { put_info(info, i) };
    }
    let i = i?;
    // SAFETY: as above.
    unsafe { put_info(info, i) };
    Ok(to_long(i.count))
}

/// Receives a message of a type `typesel` selects (-1: any) into `buf`.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn crecv(typesel: c_long, buf: *mut c_void, count: c_long) {
    fatal("crecv", || {
        do_crecvx(typesel, buf, count, -1, -1, std::ptr::null_mut())
    });
}

/// `crecv` returning the length (or -1 and errno).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _crecv(typesel: c_long, buf: *mut c_void, count: c_long) -> c_long {
    soft(|| do_crecvx(typesel, buf, count, -1, -1, std::ptr::null_mut()))
}

/// Receives a message selected by type, node and process type; fills `info`.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn crecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) {
    fatal("crecvx", || {
        do_crecvx(typesel, buf, count, nodesel, ptypesel, info)
    });
}

/// `crecvx` returning the length (or -1 and errno).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _crecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    soft(|| do_crecvx(typesel, buf, count, nodesel, ptypesel, info))
}

fn do_irecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    let g = global()?;
    // SAFETY: NX's contract: the buffer stays valid and untouched until the receive completes.
    let mid = unsafe {
        g.nx.irecv_raw(
            typesel as i64,
            buf.cast(),
            n,
            nodesel as i64,
            ptypesel as i64,
        )?
    };
    if !info.is_null() {
        g.infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(mid, (info as usize, false));
    }
    Ok(mid as c_long)
}

/// Posts a receive; returns its message id.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn irecv(typesel: c_long, buf: *mut c_void, count: c_long) -> c_long {
    fatal("irecv", || {
        do_irecvx(typesel, buf, count, -1, -1, std::ptr::null_mut())
    })
}

/// `irecv` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _irecv(typesel: c_long, buf: *mut c_void, count: c_long) -> c_long {
    soft(|| do_irecvx(typesel, buf, count, -1, -1, std::ptr::null_mut()))
}

/// Posts a receive selected by type, node and process type; `info` is filled when it
/// completes (msgwait, msgdone).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn irecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    fatal("irecvx", || {
        do_irecvx(typesel, buf, count, nodesel, ptypesel, info)
    })
}

/// `irecvx` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _irecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    soft(|| do_irecvx(typesel, buf, count, nodesel, ptypesel, info))
}

/// Fills the info array of a completed `irecvx`.
fn completed(g: &Global, mid: i64, info: Option<Info>) {
    let p = g
        .infos
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&mid);
    match (p, info) {
        // SAFETY: the array given to irecvx, which NX requires to stay valid until then.
        (Some((p, false)), Some(i)) => unsafe { put_info(p as *mut c_long, i) },
        // SAFETY: as above, a Fortran INTEGER array.
        (Some((p, true)), Some(i)) => unsafe { fortran::put_info(p as *mut std::ffi::c_int, i) },
        _ => {}
    }
}

fn do_msgwait(mid: c_long) -> Result<c_long, NxError> {
    let g = global()?;
    if let Some(parts) = take_merged(g, mid) {
        // In order: for isendrecv the reply, waited for last, leaves its info.
        let mut len = 0;
        for (i, &m) in parts.iter().enumerate() {
            match do_msgwait(m as c_long) {
                Ok(n) => len = n,
                Err(e) => {
                    for &rest in &parts[i + 1..] {
                        let _ = g.nx.msgignore(rest);
                    }
                    return Err(e);
                }
            }
        }
        return Ok(len);
    }
    let (c, err) =
        g.nx.msgwait_outcome(mid as i64)
            .inspect_err(|e| forget_info(g, mid, e))?;
    // A receive that failed still fills irecvx's info (a message too long: its length).
    completed(g, mid as i64, c.info);
    err.map_or(Ok(c.info.map_or(0, |i| to_long(i.count))), Err)
}

/// After a failed call on request `mid`: an id that names no request has no info array
/// waiting either.
fn forget_info(g: &Global, mid: c_long, e: &NxError) {
    if matches!(e, NxError::InvalidMid(_)) {
        lock(&g.infos).remove(&(mid as i64));
    }
}

/// Waits for a send or receive to complete and releases its id.
#[no_mangle]
pub extern "C" fn msgwait(mid: c_long) {
    fatal("msgwait", || do_msgwait(mid));
}

/// `msgwait` returning the received length (0 for a send), or -1 and errno.
#[no_mangle]
pub extern "C" fn _msgwait(mid: c_long) -> c_long {
    soft(|| do_msgwait(mid))
}

fn do_msgdone(mid: c_long) -> Result<c_long, NxError> {
    let g = global()?;
    if let Some(parts) = take_merged(g, mid) {
        let mut left = Vec::new();
        let mut failed = None;
        for m in parts {
            match do_msgdone(m as c_long) {
                Ok(1) => {}
                Ok(_) => left.push(m),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            for m in left {
                let _ = g.nx.msgignore(m);
            }
            return Err(e);
        }
        if left.is_empty() {
            return Ok(1);
        }
        lock(&g.merged).insert(mid as i64, left);
        return Ok(0);
    }
    match g
        .nx
        .msgdone_outcome(mid as i64)
        .inspect_err(|e| forget_info(g, mid, e))?
    {
        Some((c, err)) => {
            completed(g, mid as i64, c.info);
            err.map_or(Ok(1), Err)
        }
        None => Ok(0),
    }
}

/// 1 when the request is complete (its id is then released), 0 otherwise.
#[no_mangle]
pub extern "C" fn msgdone(mid: c_long) -> c_long {
    fatal("msgdone", || do_msgdone(mid))
}

/// `msgdone` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _msgdone(mid: c_long) -> c_long {
    soft(|| do_msgdone(mid))
}

fn do_msgcancel(mid: c_long) -> Result<c_long, NxError> {
    let g = global()?;
    if let Some(parts) = take_merged(g, mid) {
        for m in parts {
            do_msgcancel(m as c_long)?;
        }
        return Ok(0);
    }
    g.nx.msgcancel(mid as i64)?;
    g.infos
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(mid as i64));
    Ok(0)
}

/// Cancels a request: a receive stops writing its buffer; a send goes on from a copy.
#[no_mangle]
pub extern "C" fn msgcancel(mid: c_long) {
    fatal("msgcancel", || do_msgcancel(mid));
}

/// `msgcancel` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _msgcancel(mid: c_long) -> c_long {
    soft(|| do_msgcancel(mid))
}

fn do_msgignore(mid: c_long) -> Result<c_long, NxError> {
    let g = global()?;
    if let Some(parts) = take_merged(g, mid) {
        for m in parts {
            do_msgignore(m as c_long)?;
        }
        return Ok(0);
    }
    lock(&g.infos).remove(&(mid as i64));
    g.nx.msgignore(mid as i64).map(|()| 0)
}

/// Releases a request without waiting for it.
#[no_mangle]
pub extern "C" fn msgignore(mid: c_long) {
    fatal("msgignore", || do_msgignore(mid));
}

/// `msgignore` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _msgignore(mid: c_long) -> c_long {
    soft(|| do_msgignore(mid))
}

/// The requests a merged id stands for (the id is released), or `None` for a plain id.
fn take_merged(g: &Global, mid: c_long) -> Option<Vec<i64>> {
    if (mid as i64) < MERGED_FIRST {
        return None;
    }
    lock(&g.merged).remove(&(mid as i64))
}

/// A mutex's contents, even after a panic elsewhere.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn do_msgmerge(mid1: c_long, mid2: c_long) -> Result<c_long, NxError> {
    let g = global()?;
    let mut parts = Vec::new();
    for m in [mid1, mid2] {
        if m == -1 {
            continue;
        }
        if m < 0 {
            return Err(NxError::InvalidMid(m as i64));
        }
        match take_merged(g, m) {
            Some(p) => parts.extend(p),
            None if (m as i64) >= MERGED_FIRST => return Err(NxError::InvalidMid(m as i64)),
            None => parts.push(m as i64),
        }
    }
    match parts.len() {
        0 => Err(NxError::InvalidMid(-1)),
        1 => Ok(parts[0] as c_long),
        _ => Ok(merge_ids(g, parts)),
    }
}

/// A new merged id for `parts`.
fn merge_ids(g: &Global, parts: Vec<i64>) -> c_long {
    static NEXT: Mutex<i64> = Mutex::new(MERGED_FIRST);
    let mut merged = lock(&g.merged);
    let mut next = lock(&NEXT);
    // The next id not in use (some are: at most one per request).
    let id = loop {
        let id = *next;
        *next = if id >= MERGED_LAST {
            MERGED_FIRST
        } else {
            id + 1
        };
        if !merged.contains_key(&id) {
            break id;
        }
    };
    merged.insert(id, parts);
    id as c_long
}

/// Merges two requests into one id that msgwait, msgdone, msgcancel and msgignore treat as
/// both (either may itself be merged, or -1 for none).
#[no_mangle]
pub extern "C" fn msgmerge(mid1: c_long, mid2: c_long) -> c_long {
    fatal("msgmerge", || do_msgmerge(mid1, mid2))
}

/// `msgmerge` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _msgmerge(mid1: c_long, mid2: c_long) -> c_long {
    soft(|| do_msgmerge(mid1, mid2))
}

// ----- probes and info -----

fn do_cprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> Result<c_long, NxError> {
    let i = nx()?.cprobex(typesel as i64, nodesel as i64, ptypesel as i64)?;
    // SAFETY: `info` is NULL or an NX info array.
    unsafe { put_info(info, i) };
    Ok(0)
}

/// Waits until a message of a type `typesel` selects has arrived.
#[no_mangle]
pub extern "C" fn cprobe(typesel: c_long) {
    fatal("cprobe", || {
        do_cprobex(typesel, -1, -1, std::ptr::null_mut())
    });
}

/// `cprobe` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _cprobe(typesel: c_long) -> c_long {
    soft(|| do_cprobex(typesel, -1, -1, std::ptr::null_mut()))
}

/// Waits for a message selected by type, node and process type; fills `info`.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn cprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) {
    fatal("cprobex", || do_cprobex(typesel, nodesel, ptypesel, info));
}

fn do_iprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> Result<c_long, NxError> {
    match nx()?.iprobex(typesel as i64, nodesel as i64, ptypesel as i64)? {
        Some(i) => {
            // SAFETY: `info` is NULL or an NX info array.
            unsafe { put_info(info, i) };
            Ok(1)
        }
        None => Ok(0),
    }
}

/// 1 if a message of a type `typesel` selects has arrived, else 0.
#[no_mangle]
pub extern "C" fn iprobe(typesel: c_long) -> c_long {
    fatal("iprobe", || {
        do_iprobex(typesel, -1, -1, std::ptr::null_mut())
    })
}

/// `iprobe` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _iprobe(typesel: c_long) -> c_long {
    soft(|| do_iprobex(typesel, -1, -1, std::ptr::null_mut()))
}

/// `iprobe` with node and process-type selection; fills `info` when a message is there.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn iprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    fatal("iprobex", || do_iprobex(typesel, nodesel, ptypesel, info))
}

fn last_info(name: &str, f: impl Fn(Info) -> c_long) -> c_long {
    fatal(name, || Ok(nx()?.info().map_or(-1, f)))
}

/// Length of the last message received or probed (-1 if none yet).
#[no_mangle]
pub extern "C" fn infocount() -> c_long {
    last_info("infocount", |i| to_long(i.count))
}

/// Node of the last message received or probed.
#[no_mangle]
pub extern "C" fn infonode() -> c_long {
    last_info("infonode", |i| i.node as c_long)
}

/// Type of the last message received or probed.
#[no_mangle]
pub extern "C" fn infotype() -> c_long {
    last_info("infotype", |i| i.mtype as c_long)
}

/// Process type of the sender of the last message received or probed.
#[no_mangle]
pub extern "C" fn infoptype() -> c_long {
    last_info("infoptype", |i| i.ptype as c_long)
}

// ----- combined and handler calls -----

#[allow(clippy::too_many_arguments)]
fn do_csendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
) -> Result<c_long, NxError> {
    let sn = check_buf(sbuf, scount)?;
    let rn = check_buf(rbuf, rcount)?;
    // SAFETY: the caller's buffers, valid for their counts.
    let (s, r) = unsafe { (bytes(sbuf, sn), bytes_mut(rbuf, rn)) };
    let n = nx()?.csendrecv(ty as i64, s, node as i64, ptype as i64, typesel as i64, r)?;
    Ok(to_long(n))
}

/// Sends a message and receives the reply; returns the reply's length.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn csendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
) -> c_long {
    fatal("csendrecv", || {
        do_csendrecv(ty, sbuf, scount, node, ptype, typesel, rbuf, rcount)
    })
}

fn do_hrecv(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    handler: Option<HrecvHandler>,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    let h = handler.ok_or(NxError::NotAllowed("hrecv: NULL handler"))?;
    // SAFETY: NX's contract: the buffer stays valid until the handler has run.
    let mid = unsafe {
        nx()?.hrecv_raw(typesel as i64, buf.cast(), n, -1, -1, move |i| {
            h(
                i.mtype as c_long,
                to_long(i.count),
                i.node as c_long,
                i.ptype as c_long,
            )
        })?
    };
    Ok(mid as c_long)
}

/// A handler receive: when a message of a type `typesel` selects arrives, it is stored in
/// `buf` and `handler(type, count, node, ptype)` runs.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn hrecv(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    handler: Option<HrecvHandler>,
) {
    fatal("hrecv", || do_hrecv(typesel, buf, count, handler));
}

/// `hrecv` returning the receive's id (for msgcancel), or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _hrecv(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    handler: Option<HrecvHandler>,
) -> c_long {
    soft(|| do_hrecv(typesel, buf, count, handler))
}

fn do_hrecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    let h = handler.ok_or(NxError::NotAllowed("hrecvx: NULL handler"))?;
    // SAFETY: NX's contract: the buffer stays valid until the handler has run.
    let mid = unsafe {
        nx()?.hrecv_raw(
            typesel as i64,
            buf.cast(),
            n,
            nodesel as i64,
            ptypesel as i64,
            move |i| {
                h(
                    i.mtype as c_long,
                    to_long(i.count),
                    i.node as c_long,
                    i.ptype as c_long,
                    hparam,
                )
            },
        )?
    };
    Ok(mid as c_long)
}

/// `hrecv` with node and process-type selection; the handler gets `hparam` last.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn hrecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) {
    fatal("hrecvx", || {
        do_hrecvx(typesel, buf, count, nodesel, ptypesel, handler, hparam)
    });
}

/// `hrecvx` returning the receive's id (for msgcancel), or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _hrecvx(
    typesel: c_long,
    buf: *mut c_void,
    count: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) -> c_long {
    soft(|| do_hrecvx(typesel, buf, count, nodesel, ptypesel, handler, hparam))
}

// ----- global operations -----

/// Waits until every node has called it.
#[no_mangle]
pub extern "C" fn gsync() {
    fatal("gsync", || nx()?.gsync());
}

/// `gsync` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _gsync() -> c_long {
    soft(|| nx()?.gsync().map(|()| 0))
}

/// The `n` elements at `x`, checked.
///
/// # Safety
/// `x` holds `n` elements (or `n` is 0).
unsafe fn elems<'a, T>(x: *mut T, n: c_long) -> Result<&'a mut [T], NxError> {
    let n = len_of(n)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if x.is_null() {
        return Err(NxError::InvalidLength(n as i64));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(x, n) })
}

macro_rules! global_op {
    ($($name:ident, $soft:ident, $t:ty, $method:ident, $what:literal;)*) => {$(
        #[doc = concat!("Global ", $what, " of `n` elements of `x`, left in `x` on every node (`work` is not needed).")]
        /// # Safety
        /// Pointer arguments are valid for the lengths given, as NX requires of its callers.
        #[no_mangle]
        pub unsafe extern "C" fn $name(x: *mut $t, n: c_long, _work: *mut $t) {
            // SAFETY: NX's contract: `x` holds `n` elements.
            fatal(stringify!($name), || nx()?.$method(unsafe { elems(x, n) }?));
        }

        #[doc = concat!("`", stringify!($name), "` returning -1 and setting errno on error.")]
        /// # Safety
        /// Pointer arguments are valid for the lengths given, as NX requires of its callers.
        #[no_mangle]
        pub unsafe extern "C" fn $soft(x: *mut $t, n: c_long, _work: *mut $t) -> c_long {
            // SAFETY: NX's contract: `x` holds `n` elements.
            soft(|| nx()?.$method(unsafe { elems(x, n) }?).map(|()| 0))
        }
    )*};
}

global_op! {
    gdsum, _gdsum, f64, gdsum, "sum of doubles";
    gssum, _gssum, f32, gssum, "sum of floats";
    gsprod, _gsprod, f32, gsprod, "product of floats";
    gshigh, _gshigh, f32, gshigh, "maximum of floats";
    gslow, _gslow, f32, gslow, "minimum of floats";
    gisum, _gisum, c_long, gisum, "sum of longs";
    gdprod, _gdprod, f64, gdprod, "product of doubles";
    giprod, _giprod, c_long, giprod, "product of longs";
    gdhigh, _gdhigh, f64, gdhigh, "maximum of doubles";
    gdlow, _gdlow, f64, gdlow, "minimum of doubles";
    gihigh, _gihigh, c_long, gihigh, "maximum of longs";
    gilow, _gilow, c_long, gilow, "minimum of longs";
    giand, _giand, c_long, giand, "bitwise and of longs";
    gior, _gior, c_long, gior, "bitwise or of longs";
    gixor, _gixor, c_long, gixor, "bitwise exclusive or of longs";
    gland, _gland, c_long, gland, "logical and (1 or 0) of longs";
    glor, _glor, c_long, glor, "logical or (1 or 0) of longs";
    glxor, _glxor, c_long, glxor, "logical exclusive or (1 or 0) of longs";
}

fn do_gcol(
    x: *const c_void,
    xlen: c_long,
    y: *mut c_void,
    ylen: c_long,
    ncnt: *mut c_long,
) -> Result<c_long, NxError> {
    let xn = check_buf(x, xlen)?;
    let yn = check_buf(y, ylen)?;
    // SAFETY: the caller's buffers, valid for their lengths.
    let (xs, ys) = unsafe { (bytes(x, xn), bytes_mut(y, yn)) };
    let (all, _) = nx()?.gcolx(xs)?;
    if all.len() > yn {
        return Err(NxError::MessageTooLong {
            len: all.len(),
            cap: yn,
        });
    }
    ys[..all.len()].copy_from_slice(&all);
    if !ncnt.is_null() {
        // SAFETY: a non-NULL pointer to a long.
        unsafe { *ncnt = to_long(all.len()) };
    }
    Ok(0)
}

/// Concatenates every node's `xlen` bytes of `x` in node order into `y` (of `ylen` bytes);
/// `*ncnt` gets the total length.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn gcol(
    x: *const c_void,
    xlen: c_long,
    y: *mut c_void,
    ylen: c_long,
    ncnt: *mut c_long,
) {
    fatal("gcol", || do_gcol(x, xlen, y, ylen, ncnt));
}

/// `gcol` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _gcol(
    x: *const c_void,
    xlen: c_long,
    y: *mut c_void,
    ylen: c_long,
    ncnt: *mut c_long,
) -> c_long {
    soft(|| do_gcol(x, xlen, y, ylen, ncnt))
}

fn do_gcolx(x: *const c_void, xlens: *const c_long, y: *mut c_void) -> Result<c_long, NxError> {
    let n = nx()?.numnodes() as usize;
    if xlens.is_null() {
        return Err(NxError::InvalidLength(-1));
    }
    // SAFETY: NX's contract: one length per node.
    let lens = unsafe { std::slice::from_raw_parts(xlens, n) };
    let mine = check_buf(x, lens[nx()?.mynode() as usize])?;
    let total = lens.iter().map(|&l| len_of(l)).sum::<Result<usize, _>>()?;
    check_buf(y, to_long(total))?;
    // SAFETY: the caller's buffers: `x` holds this node's length, `y` the total.
    let (xs, ys) = unsafe { (bytes(x, mine), bytes_mut(y, total)) };
    let (all, got) = nx()?.gcolx(xs)?;
    if got.iter().zip(lens).any(|(&g, &l)| g as c_long != l) || all.len() != total {
        return Err(NxError::InvalidLength(all.len() as i64));
    }
    ys.copy_from_slice(&all);
    Ok(0)
}

/// Concatenates every node's `x` in node order into `y`; `xlens[i]` is node i's length.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn gcolx(x: *const c_void, xlens: *const c_long, y: *mut c_void) {
    fatal("gcolx", || do_gcolx(x, xlens, y));
}

/// `gcolx` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _gcolx(x: *const c_void, xlens: *const c_long, y: *mut c_void) -> c_long {
    soft(|| do_gcolx(x, xlens, y))
}

fn do_gopf(x: *mut c_void, xlen: c_long, f: Option<GopfFn>) -> Result<c_long, NxError> {
    let n = check_buf(x, xlen)?;
    let f = f.ok_or(NxError::NotAllowed("gopf: NULL function"))?;
    // SAFETY: NX's contract: `x` holds `xlen` bytes.
    let xs = unsafe { bytes_mut(x, n) };
    nx()?.gopf(xs, |acc, other| {
        let mut y = other.to_vec();
        f(acc.as_mut_ptr().cast(), y.as_mut_ptr().cast());
    })?;
    Ok(0)
}

/// Global operation with a user function: `f(x, y)` folds `y` into `x` (both `xlen` bytes),
/// over the nodes in order; every node gets the result in `x`.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn gopf(x: *mut c_void, xlen: c_long, _work: *mut c_void, f: Option<GopfFn>) {
    fatal("gopf", || do_gopf(x, xlen, f));
}

/// `gopf` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _gopf(
    x: *mut c_void,
    xlen: c_long,
    _work: *mut c_void,
    f: Option<GopfFn>,
) -> c_long {
    soft(|| do_gopf(x, xlen, f))
}

/// The version of this library.
#[no_mangle]
pub extern "C" fn nx_version() -> *const c_char {
    static V: &CStr = c"shrimp-rs nx 0.1";
    V.as_ptr()
}
