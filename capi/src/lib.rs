//! # libvmmc: the C ABI of VMMC
//!
//! The `vmmc_*` calls of the VMMC 1.0 user's guide (seed 004) over the safe Rust API of the
//! `vmmc` crate, built as `libvmmc.so`; `include/vmmc.h` declares them, with the `VMMC_ERR_*`
//! codes and the `SBL_*` names of the SHRIMP Base Library (seed 000) as aliases.
//!
//! # Conventions
//! - The process has one endpoint, created on first use by [`vmmc_run::init`] from the
//!   launcher's environment (a job of one without a launcher). If that fails, every call that
//!   needs the endpoint returns the negative code of the failure (the message is printed once
//!   on stderr).
//! - Calls return 0 or a non-negative value on success and the negative
//!   [`vmmc::Error::code`] on failure. No call unwinds into C: a panic inside one is caught
//!   and reported as `VMMC_ERR_INVALID_ARGUMENT` (`vmmc_AllocRecvBuf` and `vmmc_Version`
//!   return NULL).
//! - A DestSpace address (what an import returns) is the proxy's base plus an offset, so
//!   `dest + 16` sends to byte 16 of the receive buffer.
//! - [`vmmc_Finalize`] leaves the job: every call that needs the endpoint afterwards fails with
//!   `VMMC_ERR_BOOTSTRAP`; the process cannot rejoin. It also runs at `exit` if the program did
//!   not call it, so that peers see a clean exit rather than a crash.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use vmmc::{
    AsyncGet, AsyncSend, AsyncStatus, BufId, Endpoint, Error, ExportOptions, ImportRequest,
    MemKind, Notification, ProcId, Proxy, Region, WriteOpts, WORD_SIZE,
};

/// A notification handler as C sees it: the address of the last word of the message that
/// carried the notification (export base + offset) and that word's value as delivered.
pub type VmmcHandler = extern "C" fn(last_word_addr: *mut c_void, value: u32);

/// A failure as returned to C: the negative code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fail(c_int);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail(e.code())
    }
}

type Res<T> = std::result::Result<T, Fail>;

fn invalid(what: &'static str) -> Fail {
    Error::InvalidArgument(what).into()
}

/// Code of every call that needs the endpoint after `vmmc_Finalize`.
const FINALIZED: Fail = Fail(-17);
/// Code returned when a call panicked.
const PANICKED: c_int = -1;

// ----- process-global state -----

enum AsyncOp {
    Send(AsyncSend),
    Get {
        op: AsyncGet,
        dst: usize,
        len: usize,
    },
}

struct Global {
    ep: Endpoint,
    /// Set by `vmmc_Finalize`: every later call that needs the endpoint fails.
    finalized: AtomicBool,
    /// Memory from `vmmc_AllocRecvBuf`, by address.
    allocs: Mutex<BTreeMap<usize, Region>>,
    /// Our exports; the value keeps the allocation alive when only part of it is exported.
    exports: Mutex<HashMap<BufId, Option<Region>>>,
    /// Posted redirections' destinations, kept alive until `vmmc_EndRedir` or unexport.
    redirs: Mutex<HashMap<BufId, Region>>,
    /// Imported buffers, by DestSpace base address.
    proxies: Mutex<BTreeMap<usize, Proxy>>,
    /// Asynchronous imports in progress.
    imports: Mutex<HashMap<c_int, ImportRequest>>,
    /// Asynchronous sends and reads in progress.
    asyncs: Mutex<HashMap<c_int, AsyncOp>>,
    next_id: AtomicI32,
}

static GLOBAL: OnceLock<Res<Global>> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn global() -> Res<&'static Global> {
    GLOBAL
        .get_or_init(|| match vmmc_run::init() {
            Ok(ep) => {
                static AT_EXIT: Once = Once::new();
                AT_EXIT.call_once(|| {
                    // SAFETY: registers a function with static lifetime that never unwinds.
                    // A failure to register only loses the clean exit.
                    unsafe { libc::atexit(finalize_at_exit) };
                });
                Ok(Global {
                    ep,
                    finalized: AtomicBool::new(false),
                    allocs: Mutex::default(),
                    exports: Mutex::default(),
                    redirs: Mutex::default(),
                    proxies: Mutex::default(),
                    imports: Mutex::default(),
                    asyncs: Mutex::default(),
                    next_id: AtomicI32::new(1),
                })
            }
            Err(e) => {
                eprintln!("vmmc: cannot join the job: {e}");
                Err(e.into())
            }
        })
        .as_ref()
        .map_err(|f| *f)
}

/// The endpoint (a clone), unless finalized.
fn ep() -> Res<Endpoint> {
    with_ep(|ep| Ok(ep.clone()))
}

/// Runs `f` on the endpoint, unless finalized: no lock, no clone, for the data path.
fn with_ep<T>(f: impl FnOnce(&Endpoint) -> Res<T>) -> Res<T> {
    let g = global()?;
    if g.finalized.load(Ordering::Acquire) {
        return Err(FINALIZED);
    }
    f(&g.ep)
}

impl Global {
    fn new_id(&self) -> c_int {
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff;
            if id != 0 {
                return id;
            }
        }
    }

    /// The allocation containing `addr`, if any: (base, region).
    fn alloc_containing(&self, addr: usize) -> Option<(usize, Region)> {
        let allocs = lock(&self.allocs);
        let (base, r) = allocs.range(..=addr).next_back()?;
        (addr < base + r.len()).then(|| (*base, r.clone()))
    }
}

thread_local! {
    /// Set while this thread runs a C notification handler.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

// ----- wrappers -----

/// Runs a call: its value, or its negative code; a panic is `VMMC_ERR_INVALID_ARGUMENT`.
fn call(f: impl FnOnce() -> Res<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(code))) => code,
        Err(_) => PANICKED,
    }
}

fn to_int<T: TryInto<c_int>>(v: T) -> Res<c_int> {
    v.try_into()
        .map_err(|_| invalid("value does not fit in an int"))
}

fn proc_id(node: c_int, squid: c_int) -> Res<ProcId> {
    match (u32::try_from(node), u32::try_from(squid)) {
        (Ok(node), Ok(squid)) => Ok(ProcId { node, squid }),
        _ => Err(invalid("negative node or squid")),
    }
}

fn bytes_of(nwords: usize) -> Res<usize> {
    nwords
        .checked_mul(WORD_SIZE)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| invalid("nwords too large"))
}

/// Writes `v` through `p` when `p` is not NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, and valid for writes per this function's contract.
        unsafe { p.write(v) };
    }
}

/// Copies `s` NUL-terminated into `buf[0..len]`; returns `s.len()`, or `OutOfBounds` (with
/// the truncated string written) when it does not fit. `buf == NULL && len == 0` asks only
/// for the length.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
unsafe fn copy_out(s: &str, buf: *mut c_char, len: c_int) -> Res<c_int> {
    let n = to_int(s.len())?;
    if buf.is_null() {
        return if len == 0 {
            Ok(n)
        } else {
            Err(invalid("NULL buffer"))
        };
    }
    let cap = usize::try_from(len).map_err(|_| invalid("negative length"))?;
    if cap == 0 {
        return Err(Error::OutOfBounds {
            offset: 0,
            len: s.len() + 1,
            size: 0,
        }
        .into());
    }
    let k = s.len().min(cap - 1);
    // SAFETY: `buf` is valid for `cap` bytes (caller's contract) and `k + 1 <= cap`; the
    // source is a Rust string, which cannot overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), k);
        buf.add(k).write(0);
    }
    if k < s.len() {
        Err(Error::OutOfBounds {
            offset: 0,
            len: s.len() + 1,
            size: cap,
        }
        .into())
    } else {
        Ok(n)
    }
}

// ----- identity -----

/// `vmmc_MyNode`: the node of the calling process.
#[no_mangle]
pub extern "C" fn vmmc_MyNode() -> c_int {
    call(|| to_int(ep()?.me().node))
}

/// `vmmc_GetSquid`: the squid of the calling process.
#[no_mangle]
pub extern "C" fn vmmc_GetSquid() -> c_int {
    call(|| to_int(ep()?.me().squid))
}

/// `vmmc_MyRank`: the rank of the calling process in its job.
#[no_mangle]
pub extern "C" fn vmmc_MyRank() -> c_int {
    call(|| to_int(ep()?.rank()))
}

/// `vmmc_JobSize`: the number of processes in the job.
#[no_mangle]
pub extern "C" fn vmmc_JobSize() -> c_int {
    call(|| to_int(ep()?.size()))
}

/// `vmmc_Parent`: node and squid of the VMMC process that started this one; -1/-1 if none.
///
/// # Safety
/// `node` and `squid` are NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_Parent(node: *mut c_int, squid: *mut c_int) -> c_int {
    call(|| {
        let (n, s) = match ep()?.parent() {
            Some(p) => (to_int(p.node)?, to_int(p.squid)?),
            None => (-1, -1),
        };
        // SAFETY: NULL or valid for writes (this function's contract).
        unsafe {
            put(node, n);
            put(squid, s);
        }
        Ok(0)
    })
}

/// `vmmc_PageSize`: the VMMC page size in bytes.
#[no_mangle]
pub extern "C" fn vmmc_PageSize() -> c_int {
    call(|| to_int(vmmc::page_size()))
}

/// `vmmc_WordSize`: the VMMC word size in bytes.
#[no_mangle]
pub extern "C" fn vmmc_WordSize() -> c_int {
    call(|| to_int(WORD_SIZE))
}

/// `vmmc_Version`: the library version, a static string.
#[no_mangle]
pub extern "C" fn vmmc_Version() -> *const c_char {
    static V: OnceLock<CString> = OnceLock::new();
    catch_unwind(|| {
        V.get_or_init(|| CString::new(vmmc::VERSION).unwrap_or_default())
            .as_ptr()
    })
    .unwrap_or(std::ptr::null())
}

/// `vmmc_MyHostName`: this host's name, NUL-terminated, into `buf[0..len]`.
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vmmc_MyHostName(buf: *mut c_char, len: c_int) -> c_int {
    call(|| {
        let ep = ep()?;
        // SAFETY: the caller's contract on `buf`/`len`.
        unsafe { copy_out(ep.my_host_name(), buf, len) }
    })
}

/// `vmmc_AllHosts`: the host names of the machine by node id, newline-separated.
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vmmc_AllHosts(buf: *mut c_char, len: c_int) -> c_int {
    call(|| {
        let all = ep()?.hosts().join("\n");
        // SAFETY: the caller's contract on `buf`/`len`.
        unsafe { copy_out(&all, buf, len) }
    })
}

/// `vmmc_SessionHosts`: the hosts of this session (`vmmc-run --hosts`, else this host),
/// separated by newlines.
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vmmc_SessionHosts(buf: *mut c_char, len: c_int) -> c_int {
    call(|| {
        let all = ep()?.session_hosts().join("\n");
        // SAFETY: the caller's contract on `buf`/`len`.
        unsafe { copy_out(&all, buf, len) }
    })
}

/// `vmmc_Spawn`: starts `program` with the NULL-terminated `argv` (without the program
/// name; NULL for none) on `host` as a new process of the job; its node and squid go to
/// `node` and `squid` (NULL allowed).
///
/// # Safety
/// `host` and `program` are NULL or NUL-terminated; `argv` is NULL or a NULL-terminated
/// array of NUL-terminated strings; `node` and `squid` are NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_Spawn(
    host: *const c_char,
    program: *const c_char,
    argv: *const *const c_char,
    node: *mut c_int,
    squid: *mut c_int,
) -> c_int {
    call(|| {
        let text = |p: *const c_char, what: &'static str| -> Res<String> {
            if p.is_null() {
                return Err(invalid(what));
            }
            // SAFETY: non-null and NUL-terminated (caller's contract).
            let c = unsafe { CStr::from_ptr(p) };
            Ok(c.to_str()
                .map_err(|_| invalid("spawn argument not UTF-8"))?
                .to_string())
        };
        let host = text(host, "NULL host")?;
        let program = text(program, "NULL program")?;
        let mut args = Vec::new();
        if !argv.is_null() {
            for i in 0.. {
                // SAFETY: a NULL-terminated array (caller's contract): every index up to the
                // terminator is readable.
                let a = unsafe { *argv.add(i) };
                if a.is_null() {
                    break;
                }
                args.push(text(a, "NULL argument")?);
            }
        }
        let p = ep()?.spawn(&host, &program, &args)?;
        let (n, s) = (to_int(p.node)?, to_int(p.squid)?);
        // SAFETY: NULL or valid for writes (this function's contract).
        unsafe {
            put(node, n);
            put(squid, s);
        }
        Ok(0)
    })
}

/// `vmmc_NodeToName`: the host name of `node`.
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vmmc_NodeToName(node: c_int, buf: *mut c_char, len: c_int) -> c_int {
    call(|| {
        let ep = ep()?;
        let node = u32::try_from(node).map_err(|_| invalid("negative node"))?;
        let name = ep
            .node_to_name(node)
            .ok_or_else(|| invalid("no such node"))?;
        // SAFETY: the caller's contract on `buf`/`len`.
        unsafe { copy_out(name, buf, len) }
    })
}

/// `vmmc_NameToNode`: the node id of a host name.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vmmc_NameToNode(name: *const c_char) -> c_int {
    call(|| {
        if name.is_null() {
            return Err(invalid("NULL host name"));
        }
        // SAFETY: non-null and NUL-terminated (caller's contract).
        let name = unsafe { CStr::from_ptr(name) };
        let name = name.to_str().map_err(|_| invalid("host name not UTF-8"))?;
        to_int(
            ep()?
                .name_to_node(name)
                .ok_or_else(|| invalid("no such host"))?,
        )
    })
}

/// `vmmc_EqualNode`: 1 if `a` and `b` are the same node, 0 otherwise.
#[no_mangle]
pub extern "C" fn vmmc_EqualNode(a: c_int, b: c_int) -> c_int {
    c_int::from(a == b)
}

/// `vmmc_RankToProc`: node and squid of the process of rank `rank`.
///
/// # Safety
/// `node` and `squid` are NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_RankToProc(
    rank: c_int,
    node: *mut c_int,
    squid: *mut c_int,
) -> c_int {
    call(|| {
        let rank = usize::try_from(rank).map_err(|_| invalid("negative rank"))?;
        let p = ep()?.proc_of(rank)?;
        let (n, s) = (to_int(p.node)?, to_int(p.squid)?);
        // SAFETY: NULL or valid for writes (this function's contract).
        unsafe {
            put(node, n);
            put(squid, s);
        }
        Ok(0)
    })
}

// ----- receive-buffer memory -----

/// `vmmc_AllocRecvBuf`: `len` zeroed bytes of shared memory for a receive buffer (importers on
/// this host write it at user level); NULL on failure.
#[no_mangle]
pub extern "C" fn vmmc_AllocRecvBuf(len: usize) -> *mut c_void {
    let r = catch_unwind(|| -> Res<*mut c_void> {
        let g = global()?;
        let region = ep()?.alloc(len, MemKind::Shared)?;
        let p = region.as_ptr();
        lock(&g.allocs).insert(p as usize, region);
        Ok(p.cast())
    });
    match r {
        Ok(Ok(p)) => p,
        _ => std::ptr::null_mut(),
    }
}

/// `vmmc_FreeRecvBuf`: releases memory from `vmmc_AllocRecvBuf`. Memory still exported or
/// posted as a redirection destination stays mapped until unexported.
#[no_mangle]
pub extern "C" fn vmmc_FreeRecvBuf(addr: *mut c_void) -> c_int {
    call(|| {
        let g = global()?;
        match lock(&g.allocs).remove(&(addr as usize)) {
            Some(_) => Ok(0),
            None => Err(invalid("not an address from vmmc_AllocRecvBuf")),
        }
    })
}

/// Wraps `addr[0..len]` as a region: a clone of an allocation when it is exactly one, a view
/// of part of it (with the allocation to keep alive) when it lies inside one, or the caller's
/// own memory.
///
/// # Safety
/// Outside allocations, `addr[0..len]` is valid, writable memory that stays allocated for as
/// long as the region is exported or posted.
unsafe fn region_of(g: &Global, addr: *mut c_void, len: usize) -> Res<(Region, Option<Region>)> {
    if addr.is_null() {
        return Err(invalid("NULL address"));
    }
    if len == 0 {
        return Err(invalid("zero length"));
    }
    let a = addr as usize;
    match g.alloc_containing(a) {
        Some((base, r)) if a == base && len == r.len() => Ok((r, None)),
        Some((base, r)) => {
            let off = a - base;
            if len > r.len() - off {
                return Err(Error::OutOfBounds {
                    offset: off,
                    len,
                    size: r.len(),
                }
                .into());
            }
            // SAFETY: `addr[0..len]` lies inside the allocation `r`, which the caller keeps
            // alive with the returned clone for as long as the view is used.
            let view = unsafe { Region::from_raw_parts(addr.cast(), len) };
            Ok((view, Some(r)))
        }
        None => {
            if a.checked_add(len).is_none() {
                return Err(invalid("address range wraps"));
            }
            // SAFETY: the caller's memory, valid and writable while exported or posted (this
            // function's contract, i.e. the C caller's).
            Ok((unsafe { Region::from_raw_parts(addr.cast(), len) }, None))
        }
    }
}

// ----- export side -----

/// `vmmc_ExportRecvBuf`: exports `addr[0..len]` as receive buffer `bufid`.
///
/// # Safety
/// `addr[0..len]` is valid, writable memory that stays allocated until the buffer is
/// unexported; `importers` is NULL or holds `2 * n_importers` ints; `handler` is NULL or a
/// function that may be called from another thread until the buffer is unexported.
#[no_mangle]
pub unsafe extern "C" fn vmmc_ExportRecvBuf(
    bufid: u32,
    addr: *mut c_void,
    len: usize,
    handler: Option<VmmcHandler>,
    importers: *const c_int,
    n_importers: c_int,
    redirectable: c_int,
) -> c_int {
    call(|| {
        let g = global()?;
        let ep = ep()?;
        let n = usize::try_from(n_importers).map_err(|_| invalid("negative n_importers"))?;
        let mut opts = ExportOptions::new();
        if n > 0 {
            if importers.is_null() {
                return Err(invalid("NULL importers with n_importers > 0"));
            }
            let pairs = n
                .checked_mul(2)
                .ok_or_else(|| invalid("n_importers too large"))?;
            // SAFETY: non-null and holding 2 * n_importers ints (caller's contract).
            let list = unsafe { std::slice::from_raw_parts(importers, pairs) };
            let procs = list
                .chunks_exact(2)
                .map(|c| proc_id(c[0], c[1]))
                .collect::<Res<Vec<_>>>()?;
            opts = opts.importers(procs);
        }
        if let Some(h) = handler {
            let base = addr as usize;
            opts = opts.handler(move |n: Notification| {
                IN_HANDLER.with(|f| f.set(true));
                h(base.wrapping_add(n.offset) as *mut c_void, n.value);
                IN_HANDLER.with(|f| f.set(false));
            });
        }
        if redirectable != 0 {
            opts = opts.redirectable();
        }
        // SAFETY: the caller's contract on `addr[0..len]`.
        let (region, keep) = unsafe { region_of(g, addr, len)? };
        // No lock of ours is held across the export: a handler running meanwhile may call in.
        ep.export(bufid, &region, opts)?;
        lock(&g.exports).insert(bufid, keep);
        Ok(0)
    })
}

/// `vmmc_UnexportRecvBuf`: unexports `bufid`; importers' later sends fail.
#[no_mangle]
pub extern "C" fn vmmc_UnexportRecvBuf(bufid: u32) -> c_int {
    call(|| {
        let g = global()?;
        ep()?.unexport(bufid)?;
        lock(&g.exports).remove(&bufid);
        lock(&g.redirs).remove(&bufid);
        Ok(0)
    })
}

// ----- import side -----

fn register_proxy(g: &Global, p: Proxy, dest_addr: *mut *mut c_void, len: *mut usize) -> Res<()> {
    let (addr, size) = (p.dest_addr(), p.len());
    lock(&g.proxies).insert(addr, p);
    // SAFETY: NULL or valid for writes (the public callers' contract).
    unsafe {
        put(dest_addr, addr as *mut c_void);
        put(len, size);
    }
    Ok(())
}

/// `vmmc_ImportRecvBuf`: imports buffer `bufid` of process (node, squid), waiting until it is
/// exported; sets `*dest_addr` to its DestSpace address and `*len` to its size in bytes.
///
/// # Safety
/// `dest_addr` is valid for writing a pointer; `len` is NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn vmmc_ImportRecvBuf(
    node: c_int,
    squid: c_int,
    bufid: u32,
    dest_addr: *mut *mut c_void,
    len: *mut usize,
) -> c_int {
    call(|| {
        if dest_addr.is_null() {
            return Err(invalid("NULL dest_addr"));
        }
        let g = global()?;
        let p = ep()?.import(proc_id(node, squid)?, bufid)?;
        register_proxy(g, p, dest_addr, len)?;
        Ok(0)
    })
}

/// `vmmc_ImportRecvBufAsync`: starts an import; `*req` identifies it for
/// `vmmc_ImportRecvBufStatus`.
///
/// # Safety
/// `req` is valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_ImportRecvBufAsync(
    node: c_int,
    squid: c_int,
    bufid: u32,
    req: *mut c_int,
) -> c_int {
    call(|| {
        if req.is_null() {
            return Err(invalid("NULL req"));
        }
        let g = global()?;
        let r = ep()?.import_async(proc_id(node, squid)?, bufid)?;
        let id = g.new_id();
        lock(&g.imports).insert(id, r);
        // SAFETY: non-null and valid for writes (caller's contract).
        unsafe { req.write(id) };
        Ok(0)
    })
}

/// `vmmc_ImportRecvBufStatus`: 1 when the import is done (outputs set, request freed), 0
/// while pending, negative on error (request freed).
///
/// # Safety
/// `dest_addr` is valid for writing a pointer; `len` is NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn vmmc_ImportRecvBufStatus(
    req: c_int,
    dest_addr: *mut *mut c_void,
    len: *mut usize,
) -> c_int {
    call(|| {
        if dest_addr.is_null() {
            return Err(invalid("NULL dest_addr"));
        }
        let g = global()?;
        let mut imports = lock(&g.imports);
        let r = imports
            .get_mut(&req)
            .ok_or_else(|| invalid("no such import request"))?;
        match r.status() {
            Ok(None) => Ok(0),
            Ok(Some(p)) => {
                imports.remove(&req);
                drop(imports);
                register_proxy(g, p, dest_addr, len)?;
                Ok(1)
            }
            Err(e) => {
                imports.remove(&req);
                Err(e.into())
            }
        }
    })
}

/// `vmmc_UnimportRecvBuf`: releases the proxy at `dest_addr` (its base); later sends fail.
#[no_mangle]
pub extern "C" fn vmmc_UnimportRecvBuf(dest_addr: *mut c_void) -> c_int {
    call(|| {
        let g = global()?;
        let ep = ep()?;
        let p = lock(&g.proxies)
            .remove(&(dest_addr as usize))
            .ok_or(Error::NotImported)?;
        ep.unimport(p)?;
        Ok(0)
    })
}

// ----- deliberate update, remote read -----

/// # Safety
/// `src` is valid for reads of `nwords` words.
unsafe fn send(dest: *mut c_void, src: *const c_void, nwords: usize, notify: bool) -> Res<c_int> {
    let n = bytes_of(nwords)?;
    if src.is_null() {
        return Err(invalid("NULL source"));
    }
    // SAFETY: non-null, valid for `n` bytes (caller's contract); `n <= isize::MAX`.
    let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) };
    with_ep(|ep| {
        Ok(ep.send_at(
            dest as usize,
            data,
            WriteOpts {
                notify,
                ..Default::default()
            },
        )?)
    })?;
    Ok(0)
}

/// `vmmc_SendData`: deliberate update of `nwords` words from `src` to DestSpace address
/// `dest`; returns when the data has left.
///
/// # Safety
/// `src` is valid for reads of `nwords` words.
#[no_mangle]
pub unsafe extern "C" fn vmmc_SendData(
    dest: *mut c_void,
    src: *const c_void,
    nwords: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    call(|| unsafe { send(dest, src, nwords, false) })
}

/// `vmmc_SendDataNotify`: as `vmmc_SendData`, and raises a notification at the receiver.
///
/// # Safety
/// `src` is valid for reads of `nwords` words.
#[no_mangle]
pub unsafe extern "C" fn vmmc_SendDataNotify(
    dest: *mut c_void,
    src: *const c_void,
    nwords: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    call(|| unsafe { send(dest, src, nwords, true) })
}

/// The proxy behind a DestSpace address, and the address's offset in it.
fn proxy_at(g: &Global, ep: &Endpoint, addr: usize) -> Res<(Proxy, usize)> {
    let (_, off) = ep.proxy_extent(addr)?;
    let p = lock(&g.proxies)
        .get(&(addr - off))
        .cloned()
        .ok_or(Error::NotImported)?;
    Ok((p, off))
}

/// # Safety
/// `src` is valid for reads of `nwords` words; `handle` is valid for writing an int.
unsafe fn send_async(
    dest: *mut c_void,
    src: *const c_void,
    nwords: usize,
    handle: *mut c_int,
    notify: bool,
) -> Res<c_int> {
    let n = bytes_of(nwords)?;
    if src.is_null() || handle.is_null() {
        return Err(invalid("NULL source or handle"));
    }
    let g = global()?;
    let ep = ep()?;
    let (p, off) = proxy_at(g, &ep, dest as usize)?;
    // Refuse a bad transfer before copying anything.
    if off.checked_add(n).is_none_or(|end| end > p.len()) {
        return Err(Error::OutOfBounds {
            offset: off,
            len: n,
            size: p.len(),
        }
        .into());
    }
    // SAFETY: non-null, valid for `n` bytes (caller's contract); `n <= isize::MAX`.
    let data: Vec<u8> = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) }.to_vec();
    let op = if notify {
        p.send_async_notify(off, data)?
    } else {
        p.send_async(off, data)?
    };
    let id = g.new_id();
    lock(&g.asyncs).insert(id, AsyncOp::Send(op));
    // SAFETY: non-null and valid for writes (caller's contract).
    unsafe { handle.write(id) };
    Ok(0)
}

/// `vmmc_SendDataAsync`: starts a deliberate update; `*handle` is for `vmmc_AsyncStatus`.
///
/// # Safety
/// `src` is valid for reads of `nwords` words; `handle` is valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_SendDataAsync(
    dest: *mut c_void,
    src: *const c_void,
    nwords: usize,
    handle: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    call(|| unsafe { send_async(dest, src, nwords, handle, false) })
}

/// `vmmc_SendDataAsyncNotify`: as `vmmc_SendDataAsync`, with a notification.
///
/// # Safety
/// `src` is valid for reads of `nwords` words; `handle` is valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_SendDataAsyncNotify(
    dest: *mut c_void,
    src: *const c_void,
    nwords: usize,
    handle: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    call(|| unsafe { send_async(dest, src, nwords, handle, true) })
}

/// `vmmc_AsyncStatus`: 1 when the operation is done (handle freed; for a read, the data is
/// in the destination), 0 while pending, negative on error (handle freed).
#[no_mangle]
pub extern "C" fn vmmc_AsyncStatus(handle: c_int) -> c_int {
    call(|| {
        let g = global()?;
        let mut asyncs = lock(&g.asyncs);
        let op = asyncs
            .get_mut(&handle)
            .ok_or_else(|| invalid("no such asynchronous operation"))?;
        let status = match op {
            AsyncOp::Send(s) => s.status(),
            AsyncOp::Get { op, .. } => Ok(op.status()),
        };
        match status {
            Ok(AsyncStatus::Pending) => Ok(0),
            Err(e) => {
                asyncs.remove(&handle);
                Err(e.into())
            }
            Ok(AsyncStatus::Done) => match asyncs.remove(&handle) {
                Some(AsyncOp::Get { op, dst, len }) => {
                    let data = op.wait()?;
                    if data.len() != len {
                        return Err(
                            Error::Protocol("remote read of the wrong length".into()).into()
                        );
                    }
                    // SAFETY: `dst` was valid for `len` bytes when the read started and the
                    // caller keeps it so until the status reports done (vmmc_GetDataAsync's
                    // contract); `data` is our own vector.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, len) };
                    Ok(1)
                }
                _ => Ok(1),
            },
        }
    })
}

/// `vmmc_GetData`: remote read of `nwords` words at DestSpace address `src` into `dst`.
///
/// # Safety
/// `dst` is valid for writes of `nwords` words.
#[no_mangle]
pub unsafe extern "C" fn vmmc_GetData(
    dst: *mut c_void,
    src: *const c_void,
    nwords: usize,
) -> c_int {
    call(|| {
        let n = bytes_of(nwords)?;
        if dst.is_null() {
            return Err(invalid("NULL destination"));
        }
        // SAFETY: non-null, valid for writes of `n` bytes (caller's contract), not aliased by
        // Rust data; `n <= isize::MAX`.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), n) };
        with_ep(|ep| Ok(ep.get_at(src as usize, out)?))?;
        Ok(0)
    })
}

/// `vmmc_GetDataAsync`: starts a remote read; the data is in `dst` once `vmmc_AsyncStatus`
/// reports done.
///
/// # Safety
/// `dst` is valid for writes of `nwords` words until the status reports done; `handle` is
/// valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn vmmc_GetDataAsync(
    dst: *mut c_void,
    src: *const c_void,
    nwords: usize,
    handle: *mut c_int,
) -> c_int {
    call(|| {
        let n = bytes_of(nwords)?;
        if dst.is_null() || handle.is_null() {
            return Err(invalid("NULL destination or handle"));
        }
        let g = global()?;
        let ep = ep()?;
        let (p, off) = proxy_at(g, &ep, src as usize)?;
        let op = p.get_data_async(off, n)?;
        let id = g.new_id();
        lock(&g.asyncs).insert(
            id,
            AsyncOp::Get {
                op,
                dst: dst as usize,
                len: n,
            },
        );
        // SAFETY: non-null and valid for writes (caller's contract).
        unsafe { handle.write(id) };
        Ok(0)
    })
}

// ----- notifications -----

/// `vmmc_BlockNotifications`: blocks notifications (nests; global to the process).
#[no_mangle]
pub extern "C" fn vmmc_BlockNotifications() -> c_int {
    call(|| {
        ep()?.block_notifications();
        Ok(0)
    })
}

/// `vmmc_UnblockNotifications`: 1 when notifications are unblocked, 0 when still nested,
/// negative on error.
#[no_mangle]
pub extern "C" fn vmmc_UnblockNotifications() -> c_int {
    call(|| Ok(ep()?.unblock_notifications()?))
}

// ----- redirection -----

/// `vmmc_PostRedir`: data arriving for `bufid` at offsets `buf_offset..buf_offset+len` goes
/// to `dest[0..len]` instead.
///
/// # Safety
/// `dest[0..dest_len]` is valid, writable memory that stays allocated until `vmmc_EndRedir`
/// or the unexport of `bufid`.
#[no_mangle]
pub unsafe extern "C" fn vmmc_PostRedir(
    bufid: u32,
    dest: *mut c_void,
    dest_len: usize,
    buf_offset: usize,
    len: usize,
) -> c_int {
    call(|| {
        let g = global()?;
        let ep = ep()?;
        if len > dest_len {
            return Err(Error::OutOfBounds {
                offset: 0,
                len,
                size: dest_len,
            }
            .into());
        }
        // SAFETY: the caller's contract on `dest[0..dest_len]`.
        let (view, keep) = unsafe { region_of(g, dest, dest_len)? };
        // Redirect into the allocation itself when there is one, at the right offset.
        let (region, off) = match keep {
            Some(r) => {
                let off = dest as usize - r.as_ptr() as usize;
                (r, off)
            }
            None => (view, 0),
        };
        ep.post_redir(bufid, &region, off, buf_offset, len)?;
        lock(&g.redirs).insert(bufid, region);
        Ok(0)
    })
}

/// `vmmc_EndRedir`: ends the redirection on `bufid`; sets what was redirected (`*len == 0`:
/// nothing).
///
/// # Safety
/// `buf_offset` and `len` are NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn vmmc_EndRedir(
    bufid: u32,
    buf_offset: *mut usize,
    len: *mut usize,
) -> c_int {
    call(|| {
        let g = global()?;
        let r = ep()?.end_redir(bufid)?;
        lock(&g.redirs).remove(&bufid);
        // SAFETY: NULL or valid for writes (caller's contract).
        unsafe {
            put(buf_offset, r.buf_offset);
            put(len, r.len);
        }
        Ok(0)
    })
}

/// `vmmc_DataEnd`: 1 and `*offset` = offset of the last word of the last message, or 0 when
/// no message arrived since the last clear.
///
/// # Safety
/// `offset` is NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn vmmc_DataEnd(bufid: u32, offset: *mut usize) -> c_int {
    call(|| match ep()?.data_end(bufid)? {
        Some(off) => {
            // SAFETY: NULL or valid for writes (caller's contract).
            unsafe { put(offset, off) };
            Ok(1)
        }
        None => Ok(0),
    })
}

/// `vmmc_ClearDataEnd`: clears the end-of-data word of `bufid`.
#[no_mangle]
pub extern "C" fn vmmc_ClearDataEnd(bufid: u32) -> c_int {
    call(|| {
        ep()?.clear_data_end(bufid)?;
        Ok(0)
    })
}

// ----- errors -----

fn error_cstr(code: c_int) -> &'static CStr {
    static TABLE: OnceLock<Vec<CString>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        vmmc::error::all_codes()
            .iter()
            .map(|(_, s)| *s)
            .chain([vmmc::error_str(0), vmmc::error_str(c_int::MIN)])
            .filter_map(|s| CString::new(s).ok())
            .collect()
    });
    let text = vmmc::error_str(code);
    table
        .iter()
        .find(|c| c.as_bytes() == text.as_bytes())
        .map_or(c"unknown error code", |c| c.as_c_str())
}

/// `vmmc_ErrorStr`: a static string describing an error code.
#[no_mangle]
pub extern "C" fn vmmc_ErrorStr(code: c_int) -> *const c_char {
    catch_unwind(|| error_cstr(code).as_ptr()).unwrap_or(c"invalid argument".as_ptr())
}

/// `vmmc_Error`: prints "msg: text of code" on stderr.
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vmmc_Error(code: c_int, msg: *const c_char) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let text = error_cstr(code).to_string_lossy();
        if msg.is_null() {
            eprintln!("{text}");
        } else {
            // SAFETY: non-null and NUL-terminated (caller's contract).
            let msg = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
            eprintln!("{msg}: {text}");
        }
    }));
}

// ----- leaving the job -----

/// Leaves the job: cancels asynchronous requests, unimports (which waits until every send has
/// landed), unexports, and drops the endpoint (stops the notification thread, says goodbye to
/// the trusted party). Memory from `vmmc_AllocRecvBuf` stays valid until freed.
fn finalize(g: &Global) {
    if g.finalized.swap(true, Ordering::AcqRel) {
        return;
    }
    let ep = &g.ep;
    lock(&g.asyncs).clear();
    lock(&g.imports).clear();
    let proxies = std::mem::take(&mut *lock(&g.proxies));
    for p in proxies.into_values() {
        let _ = ep.unimport(p);
    }
    let exports = std::mem::take(&mut *lock(&g.exports));
    for buf in exports.keys() {
        let _ = ep.unexport(*buf);
    }
    lock(&g.redirs).clear();
    drop(exports);
    ep.finish();
}

/// `vmmc_Finalize`: leaves the job cleanly (sends through proxies are flushed, buffers
/// unexported, the trusted party told). Afterwards every call that needs the endpoint returns
/// `VMMC_ERR_BOOTSTRAP`; a second `vmmc_Finalize` returns 0. Must not be called from a
/// notification handler (returns `VMMC_ERR_INVALID_ARGUMENT`).
#[no_mangle]
pub extern "C" fn vmmc_Finalize() -> c_int {
    call(|| {
        if IN_HANDLER.with(|f| f.get()) {
            return Err(invalid("vmmc_Finalize inside a notification handler"));
        }
        if let Ok(g) = GLOBAL.get_or_init(|| Err(FINALIZED)) {
            finalize(g);
        }
        Ok(0)
    })
}

extern "C" fn finalize_at_exit() {
    let _ = catch_unwind(|| {
        if !IN_HANDLER.with(|f| f.get()) {
            if let Some(Ok(g)) = GLOBAL.get() {
                finalize(g);
            }
        }
    });
}

#[cfg(test)]
mod tests;
