//! # vmmc-rdma-standin: a verbs provider in software, for tests
//!
//! A shared library that exports the libibverbs calls the rdma transport uses, with
//! rdma-core's ABI (the transport's `abi.rs`), so that the transport runs unchanged on it
//! (`VMMC_RDMA_LIB=path/to/libvmmc_rdma_standin.so`). There is no device: the "fabric" is a
//! directory (`VMMC_RDMA_STANDIN_DIR`, default `/dev/shm`) holding, in shared memory, one
//! file per queue pair (owner, state, access flags, connected peer) and one per open context
//! with its memory registrations (key, address, length, access, state, writes in flight).
//!
//! An operation is carried out when it is posted, by the requester's process, as an HCA would
//! carry it out at both ends: it checks the local key and range, the queue pairs' states and
//! connection, then at the responder's table the remote key, bounds and access flags; then it
//! moves the bytes with `process_vm_writev` / `process_vm_readv` straight into or out of the
//! responder's registered memory (any user memory can be registered, as with a real HCA). A
//! violation completes the work request with the status a real HCA gives
//! (`IBV_WC_REM_ACCESS_ERR`, `IBV_WC_LOC_PROT_ERR`, `IBV_WC_RETRY_EXC_ERR` for a responder that
//! is gone or not connected) and moves the queue pair to the error state, where later work
//! requests are flushed (`IBV_WC_WR_FLUSH_ERR`). Deregistration invalidates the key first and
//! then waits for the operations under way at the key (an HCA completes those before
//! `ibv_dereg_mr` returns), so that nothing is written after it returns.
//!
//! Files of processes that died without closing their device are removed when a device is
//! next opened in the same directory.
//!
//! RDMA WRITE_WITH_IMM consumes a receive the responder posted (none: the requester retries,
//! as `rnr_retry = 7` does, for up to a minute) and leaves the immediate in the responder
//! queue pair's ring in shared memory; the responder's `ibv_poll_cq` on its receive CQ turns
//! it into an `IBV_WC_RECV_RDMA_WITH_IMM` completion. A receive CQ armed with
//! `ibv_req_notify_cq` gets an event on its completion channel, a FIFO in the fabric
//! directory that the requester writes a byte to (`ibv_get_cq_event` reads it).
//!
//! Not modelled: send/receive with data, atomics, memory windows, shared receive queues,
//! unsignaled completion batching beyond counting, timing.
#![allow(clippy::missing_safety_doc)]

#[path = "../../src/abi.rs"]
mod abi;

use abi::*;
use std::collections::VecDeque;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The fabric's directory.
pub const DIR_VAR: &str = "VMMC_RDMA_STANDIN_DIR";
/// Registrations per context.
const SLOTS: usize = 1024;
/// Arrived immediates a queue pair holds until its owner polls them.
const RING: usize = 1024;
const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;
const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
const IBV_WC_WITH_IMM: u32 = 2;
const FREE: u32 = 0;
const VALID: u32 = 1;
const INVALID: u32 = 2;
/// How long an operation waits for a responder queue pair that is not connected yet (an HCA
/// retries: `retry_cnt` times the timeout).
const RETRY_FOR: Duration = Duration::from_secs(5);

fn dir() -> String {
    std::env::var(DIR_VAR).unwrap_or_else(|_| "/dev/shm".into())
}

fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e };
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: writes at most 4 bytes into `b`.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b)
}

/// A file of the fabric mapped shared.
struct Shm {
    ptr: *mut u8,
    len: usize,
    path: Option<String>,
}

impl Shm {
    /// Creates `path` (exclusively) of `len` zero bytes, or opens an existing one.
    fn map(path: &str, len: usize, create: bool) -> Option<Shm> {
        let c = CString::new(path).ok()?;
        let flags = if create {
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC
        } else {
            libc::O_RDWR | libc::O_CLOEXEC
        };
        // SAFETY: a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return None;
        }
        // SAFETY: our descriptor; the mapping keeps the file, the fd is closed after it.
        let ptr = unsafe {
            if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
                libc::close(fd);
                return None;
            }
            let p = libc::mmap(
                null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            p
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(Shm {
            ptr: ptr.cast(),
            len,
            path: create.then(|| path.to_string()),
        })
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once; the file we created is removed by its owner.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
        if let Some(p) = &self.path {
            if let Ok(c) = CString::new(p.as_str()) {
                // SAFETY: a valid C string.
                unsafe { libc::unlink(c.as_ptr()) };
            }
        }
    }
}

/// One registration as the fabric sees it.
#[repr(C)]
struct Slot {
    state: AtomicU32,
    in_flight: AtomicU32,
    key: AtomicU32,
    access: AtomicU32,
    addr: AtomicU64,
    iova: AtomicU64,
    len: AtomicU64,
}

/// A context's registration table, in shared memory.
#[repr(C)]
struct Table {
    pid: AtomicU32,
    _pad: AtomicU32,
    slots: [Slot; SLOTS],
}

/// A queue pair as the fabric sees it.
#[repr(C)]
struct QpShared {
    pid: AtomicU32,
    ctx_id: AtomicU32,
    state: AtomicU32,
    dest_qpn: AtomicU32,
    access: AtomicU32,
    /// Receive work requests posted and not consumed yet (credits for WRITE_WITH_IMM).
    recv_posted: AtomicU32,
    /// Its receive CQ asks for an event on the next completion (`ibv_req_notify_cq`).
    armed: AtomicU32,
    /// Completion channel of its receive CQ (0: none); the channel's FIFO is named by it.
    chan: AtomicU32,
    /// Arrived immediates, written by the requester, consumed by the owner's poll.
    head: AtomicU32,
    tail: AtomicU32,
    ring: [[AtomicU32; 2]; RING],
}

#[repr(C)]
struct Dev {
    _name: [u8; 16],
}

static DEVICE: Dev = Dev {
    _name: *b"standin0\0\0\0\0\0\0\0\0",
};

#[repr(C)]
struct Ctx {
    ctx: ibv_context,
    id: u32,
    table: Shm,
    alloc: Mutex<u32>,
}

impl Ctx {
    fn table(&self) -> &Table {
        // SAFETY: the mapping is a Table's size and lives as long as the context.
        unsafe { &*(self.table.ptr as *const Table) }
    }
}

#[repr(C)]
struct Pd {
    pd: ibv_pd,
}

#[repr(C)]
struct Mr {
    mr: ibv_mr,
    slot: usize,
}

#[repr(C)]
struct Cq {
    cq: ibv_cq,
    queue: Mutex<VecDeque<(ibv_wc, *const AtomicU32)>>,
    /// Queue pairs whose receive completions come here.
    recv_qps: Mutex<Vec<usize>>,
    /// Its completion channel's id (0: none).
    chan: u32,
}

/// `struct ibv_comp_channel` and its FIFO in the fabric directory, which requesters write a
/// byte to when they complete a receive on an armed CQ.
#[repr(C)]
struct Chan {
    context: *mut ibv_context,
    fd: c_int,
    refcnt: c_int,
    id: u32,
    path: String,
    cq: std::sync::atomic::AtomicPtr<ibv_cq>,
}

fn chan_path(ctx_id: u32, id: u32) -> String {
    format!("{}/vmmc-rdma-standin-ch-{ctx_id}-{id}", dir())
}

/// The responder end, mapped on first use.
struct Remote {
    qp: Shm,
    table: Shm,
    pid: i32,
}

#[repr(C)]
struct Qp {
    qp: ibv_qp,
    shared: Shm,
    max_send_wr: u32,
    max_recv_wr: u32,
    recv_wrs: Mutex<VecDeque<u64>>,
    sig_all: bool,
    outstanding: AtomicU32,
    remote: Mutex<Option<Remote>>,
}

impl Qp {
    fn sh(&self) -> &QpShared {
        // SAFETY: the mapping is a QpShared's size and lives as long as the QP.
        unsafe { &*(self.shared.ptr as *const QpShared) }
    }
}

fn qp_path(qpn: u32) -> String {
    format!("{}/vmmc-rdma-standin-qp-{qpn}", dir())
}

fn table_path(id: u32) -> String {
    format!("{}/vmmc-rdma-standin-mr-{id}", dir())
}

// ----- devices -----

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([&DEVICE as *const Dev as *mut _, null_mut()]);
    if !num.is_null() {
        // SAFETY: the caller's int.
        unsafe { *num = 1 };
    }
    Box::into_raw(list).cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        // SAFETY: made by ibv_get_device_list from a Box of this type.
        drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    dev.cast::<c_char>()
}

/// Removes the files of processes that died without closing their device (their owner's
/// pid, in the file's first word, no longer exists): a crashed process cannot clean up.
fn sweep() {
    let d = dir();
    let Ok(entries) = std::fs::read_dir(&d) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("vmmc-rdma-standin-") {
            continue;
        }
        let path = e.path();
        if let Some(rest) = name.strip_prefix("vmmc-rdma-standin-ch-") {
            // A channel's FIFO lives as long as its context's table.
            let ctx = rest.split('-').next().unwrap_or("");
            if !std::path::Path::new(&format!("{d}/vmmc-rdma-standin-mr-{ctx}")).exists() {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path).map(|b| b.get(..4).map(|w| w.to_vec())) else {
            continue;
        };
        let Some(w) = bytes else { continue };
        let pid = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as i32;
        // SAFETY: signal 0 only checks that the process exists.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(_dev: *mut ibv_device) -> *mut ibv_context {
    sweep();
    let (id, table) = loop {
        let id = random_u32() | 1;
        if let Some(t) = Shm::map(&table_path(id), std::mem::size_of::<Table>(), true) {
            break (id, t);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return null_mut();
        }
    };
    // SAFETY: zero is a valid ibv_context (null pointers, no ops yet).
    let mut ctx: ibv_context = unsafe { std::mem::zeroed() };
    ctx.device = &DEVICE as *const Dev as *mut _;
    ctx.ops.poll_cq = Some(poll_cq);
    ctx.ops.post_send = Some(post_send);
    ctx.ops.post_recv = Some(post_recv);
    ctx.ops.req_notify_cq = Some(req_notify_cq);
    let c = Box::new(Ctx {
        ctx,
        id,
        table,
        alloc: Mutex::new(0),
    });
    // SAFETY: getpid has no preconditions.
    c.table()
        .pid
        .store(unsafe { libc::getpid() } as u32, SeqCst);
    Box::into_raw(c).cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: made by ibv_open_device.
    drop(unsafe { Box::from_raw(ctx.cast::<Ctx>()) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    _ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if port != 1 {
        return libc::EINVAL;
    }
    // SAFETY: the caller's block, of the compat layout's size (the fields we write).
    unsafe {
        (*attr).state = 4; // IBV_PORT_ACTIVE
        (*attr).max_mtu = 5;
        (*attr).active_mtu = 3;
        (*attr).gid_tbl_len = 1;
        (*attr).lid = 1;
        (*attr).link_layer = 1; // InfiniBand
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    if port != 1 || index != 0 {
        return -1;
    }
    // SAFETY: a context of ours; the caller's 16 bytes.
    unsafe {
        let id = (*ctx.cast::<Ctx>()).id;
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[12..].copy_from_slice(&id.to_be_bytes());
        *gid = g;
    }
    0
}

// ----- protection domains and registrations -----

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    Box::into_raw(Box::new(Pd {
        pd: ibv_pd {
            context: ctx,
            handle: 1,
        },
    }))
    .cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: made by ibv_alloc_pd.
    drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // Remote write needs local write (as verbs requires).
    if access & IBV_ACCESS_REMOTE_WRITE != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    if length == 0 || addr.is_null() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: a PD of ours, whose context is ours.
    let c = unsafe { &*((*pd).context.cast::<Ctx>()) };
    let mut next = c.alloc.lock().unwrap_or_else(|e| e.into_inner());
    let t = c.table();
    let Some(i) = (1..SLOTS).find(|&i| t.slots[i].state.load(SeqCst) == FREE) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    *next = next.wrapping_add(1);
    let generation = (*next % 255) + 1;
    let key = ((i as u32) << 8) | generation;
    let s = &t.slots[i];
    s.key.store(key, SeqCst);
    s.access.store(access, SeqCst);
    s.addr.store(addr as u64, SeqCst);
    s.iova.store(iova, SeqCst);
    s.len.store(length as u64, SeqCst);
    s.state.store(VALID, SeqCst);
    Box::into_raw(Box::new(Mr {
        mr: ibv_mr {
            context: c as *const Ctx as *mut ibv_context,
            pd,
            addr,
            length,
            handle: i as u32,
            lkey: key,
            rkey: key,
        },
        slot: i,
    }))
    .cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as u32) }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: made by ibv_reg_mr_iova2.
    let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
    // SAFETY: its context outlives it.
    let c = unsafe { &*(m.mr.context.cast::<Ctx>()) };
    let s = &c.table().slots[m.slot];
    // Invalidate, then wait for the operations under way at this key (bounded: a requester
    // that died in the middle of one never finishes it).
    s.state.store(INVALID, SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.in_flight.load(SeqCst) != 0 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    let _g = c.alloc.lock().unwrap_or_else(|e| e.into_inner());
    s.state.store(FREE, SeqCst);
    0
}

// ----- completion queues and queue pairs -----

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    _vector: c_int,
) -> *mut ibv_cq {
    if cqe <= 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: zero is a valid ibv_cq.
    let mut cq: ibv_cq = unsafe { std::mem::zeroed() };
    cq.context = ctx;
    cq.cq_context = cq_context;
    cq.cqe = cqe;
    cq.channel = channel;
    let chan = if channel.is_null() {
        0
    } else {
        // SAFETY: a channel of ours.
        unsafe { (*channel.cast::<Chan>()).id }
    };
    let c = Box::into_raw(Box::new(Cq {
        cq,
        queue: Mutex::new(VecDeque::new()),
        recv_qps: Mutex::new(Vec::new()),
        chan,
    }));
    if !channel.is_null() {
        // SAFETY: a channel of ours; it serves this CQ.
        unsafe { (*channel.cast::<Chan>()).cq.store(c.cast(), SeqCst) };
    }
    c.cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: made by ibv_create_cq.
    drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller's attributes; a PD of ours.
    let (a, ctx) = unsafe { (&*attr, (*pd).context) };
    if a.qp_type != IBV_QPT_RC || a.send_cq.is_null() || a.cap.max_send_wr == 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: a context of ours.
    let ctx_id = unsafe { (*ctx.cast::<Ctx>()).id };
    let (qpn, shared) = loop {
        let qpn = (random_u32() & 0xff_ffff).max(2);
        if let Some(s) = Shm::map(&qp_path(qpn), std::mem::size_of::<QpShared>(), true) {
            break (qpn, s);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return null_mut();
        }
    };
    // SAFETY: zero is a valid ibv_qp.
    let mut qp: ibv_qp = unsafe { std::mem::zeroed() };
    qp.context = ctx;
    qp.qp_context = a.qp_context;
    qp.pd = pd;
    qp.send_cq = a.send_cq;
    qp.recv_cq = a.recv_cq;
    qp.qp_num = qpn;
    qp.state = IBV_QPS_RESET;
    qp.qp_type = IBV_QPT_RC;
    let q = Box::new(Qp {
        qp,
        shared,
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr.min(RING as u32),
        recv_wrs: Mutex::new(VecDeque::new()),
        sig_all: a.sq_sig_all != 0,
        outstanding: AtomicU32::new(0),
        remote: Mutex::new(None),
    });
    let sh = q.sh();
    // SAFETY: getpid has no preconditions.
    sh.pid.store(unsafe { libc::getpid() } as u32, SeqCst);
    sh.ctx_id.store(ctx_id, SeqCst);
    sh.state.store(IBV_QPS_RESET, SeqCst);
    // SAFETY: the attributes' cap is ours to report back.
    unsafe { (*attr).cap.max_inline_data = 0 };
    let q = Box::into_raw(q);
    if !a.recv_cq.is_null() {
        // SAFETY: a CQ of ours, which outlives the QP.
        let rc = unsafe { &*a.recv_cq.cast::<Cq>() };
        // SAFETY: just made.
        unsafe { (*q).sh().chan.store(rc.chan, SeqCst) };
        rc.recv_qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(q as usize);
    }
    q.cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: made by ibv_create_qp.
    let q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
    // Its completions not polled yet go with it (they point at its counter).
    // SAFETY: its send CQ is ours and outlives it.
    let cq = unsafe { &*q.qp.send_cq.cast::<Cq>() };
    let mine: *const AtomicU32 = &q.outstanding;
    cq.queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(_, c)| *c != mine);
    if !q.qp.recv_cq.is_null() {
        // SAFETY: its receive CQ is ours and outlives it.
        let rc = unsafe { &*q.qp.recv_cq.cast::<Cq>() };
        let me = &*q as *const Qp as usize;
        rc.recv_qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&x| x != me);
    }
    drop(q);
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: a QP of ours; the caller's attributes.
    let (q, a) = unsafe { (&mut *qp.cast::<Qp>(), &*attr) };
    if mask & IBV_QP_STATE == 0 {
        return libc::EINVAL;
    }
    let has = |m: c_int| mask & m == m;
    let cur = q.sh().state.load(SeqCst);
    let ok = match (cur, a.qp_state) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => true,
        (IBV_QPS_RESET, IBV_QPS_INIT) => {
            has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) && a.port_num == 1
        }
        (IBV_QPS_INIT, IBV_QPS_RTR) => has(IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER),
        (IBV_QPS_RTR, IBV_QPS_RTS) => has(IBV_QP_SQ_PSN
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_MAX_QP_RD_ATOMIC),
        _ => false,
    };
    if !ok {
        return libc::EINVAL;
    }
    let sh = q.sh();
    if a.qp_state == IBV_QPS_INIT {
        sh.access.store(a.qp_access_flags, SeqCst);
    }
    if a.qp_state == IBV_QPS_RTR {
        sh.dest_qpn.store(a.dest_qp_num, SeqCst);
    }
    if a.qp_state == IBV_QPS_RESET {
        *q.remote.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    sh.state.store(a.qp_state, SeqCst);
    q.qp.state = a.qp_state;
    0
}

/// Receive work requests: only WRITE_WITH_IMM consumes them (there are no sends), so their
/// buffers are never written.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: a QP of ours.
    let q = unsafe { &*qp.cast::<Qp>() };
    let mut w = wr;
    while !w.is_null() {
        // SAFETY: the caller's list.
        let r = unsafe { &*w };
        let fail = |e: c_int| {
            // SAFETY: the caller's pointer.
            unsafe { *bad = w };
            e
        };
        if q.sh().state.load(SeqCst) == IBV_QPS_RESET || r.num_sge < 0 || r.num_sge > 1 {
            return fail(libc::EINVAL);
        }
        let mut wrs = q.recv_wrs.lock().unwrap_or_else(|e| e.into_inner());
        if wrs.len() >= q.max_recv_wr as usize {
            return fail(libc::ENOMEM);
        }
        wrs.push_back(r.wr_id);
        q.sh().recv_posted.fetch_add(1, SeqCst);
        w = r.next;
    }
    0
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: a CQ of ours; its QPs are alive while registered.
    let c = unsafe { &*cq.cast::<Cq>() };
    for &q in c.recv_qps.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        // SAFETY: as above.
        unsafe { (*(q as *const Qp)).sh().armed.store(1, SeqCst) };
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut c_void {
    // SAFETY: a context of ours.
    let ctx_id = unsafe { (*ctx.cast::<Ctx>()).id };
    let (id, path) = loop {
        let id = random_u32() | 1;
        let path = chan_path(ctx_id, id);
        let Ok(c) = CString::new(path.as_str()) else {
            return null_mut();
        };
        // SAFETY: a valid C string.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
            break (id, path);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return null_mut();
        }
    };
    let Ok(c) = CString::new(path.as_str()) else {
        return null_mut();
    };
    // Read and write: the FIFO stays open without a writer, and reads never see its end.
    // SAFETY: a valid C string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        // SAFETY: as above.
        unsafe { libc::unlink(c.as_ptr()) };
        return null_mut();
    }
    Box::into_raw(Box::new(Chan {
        context: ctx,
        fd,
        refcnt: 0,
        id,
        path,
        cq: std::sync::atomic::AtomicPtr::new(null_mut()),
    }))
    .cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut c_void) -> c_int {
    // SAFETY: made by ibv_create_comp_channel.
    let c = unsafe { Box::from_raw(ch.cast::<Chan>()) };
    // SAFETY: its descriptor, closed once.
    unsafe { libc::close(c.fd) };
    let _ = std::fs::remove_file(&c.path);
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut c_void,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: a channel of ours.
    let c = unsafe { &*ch.cast::<Chan>() };
    let mut b = [0u8; 1];
    loop {
        // SAFETY: one byte into `b`.
        let n = unsafe { libc::read(c.fd, b.as_mut_ptr().cast(), 1) };
        if n == 1 {
            break;
        }
        let mut p = libc::pollfd {
            fd: c.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, -1) };
    }
    let q = c.cq.load(SeqCst);
    // SAFETY: the caller's pointers; the CQ is ours.
    unsafe {
        *cq = q;
        *cq_context = if q.is_null() {
            null_mut()
        } else {
            (*q).cq_context
        };
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(_cq: *mut ibv_cq, _n: u32) {}

/// Rings the channel of `rs`'s receive CQ if it is armed.
fn signal(rs: &QpShared) {
    if rs.armed.swap(0, SeqCst) == 0 {
        return;
    }
    let ch = rs.chan.load(SeqCst);
    if ch == 0 {
        return;
    }
    let Ok(c) = CString::new(chan_path(rs.ctx_id.load(SeqCst), ch)) else {
        return;
    };
    // SAFETY: a valid C string; one byte written to our descriptor, closed once.
    unsafe {
        let fd = libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, [1u8].as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let wc_ptr = wc;
    // SAFETY: a CQ of ours.
    let c = unsafe { &*cq.cast::<Cq>() };
    let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
    let mut got = 0;
    while got < n.max(0) as usize {
        let Some((w, counter)) = q.pop_front() else {
            break;
        };
        // SAFETY: the caller's array of `n` entries; the counter belongs to a QP that
        // completes into this CQ and outlives its completions (destroyed after them).
        unsafe {
            *wc.add(got) = w;
            (*counter).fetch_sub(1, SeqCst);
        }
        got += 1;
    }
    drop(q);
    // Then the receive completions of its queue pairs: arrived immediates, each consuming
    // the oldest posted receive; a queue pair in error flushes its receives.
    for &qa in c.recv_qps.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        // SAFETY: registered QPs are alive.
        let qp = unsafe { &*(qa as *const Qp) };
        let sh = qp.sh();
        let mut wrs = qp.recv_wrs.lock().unwrap_or_else(|e| e.into_inner());
        let mut h = sh.head.load(SeqCst);
        while got < n.max(0) as usize && h != sh.tail.load(SeqCst) {
            let e = &sh.ring[h as usize % RING];
            let wc = ibv_wc {
                wr_id: wrs.pop_front().unwrap_or(0),
                status: IBV_WC_SUCCESS,
                opcode: IBV_WC_RECV_RDMA_WITH_IMM,
                byte_len: e[1].load(SeqCst),
                imm_data: e[0].load(SeqCst),
                qp_num: qp.qp.qp_num,
                wc_flags: IBV_WC_WITH_IMM,
                ..Default::default()
            };
            // SAFETY: the caller's array of `n` entries.
            unsafe { *wc_out(wc_ptr, got) = wc };
            got += 1;
            h = h.wrapping_add(1);
        }
        sh.head.store(h, SeqCst);
        if sh.state.load(SeqCst) == IBV_QPS_ERR && h == sh.tail.load(SeqCst) {
            while got < n.max(0) as usize {
                let Some(id) = wrs.pop_front() else { break };
                sh.recv_posted.fetch_sub(1, SeqCst);
                let wc = ibv_wc {
                    wr_id: id,
                    status: IBV_WC_WR_FLUSH_ERR,
                    opcode: 128, // IBV_WC_RECV
                    qp_num: qp.qp.qp_num,
                    ..Default::default()
                };
                // SAFETY: as above.
                unsafe { *wc_out(wc_ptr, got) = wc };
                got += 1;
            }
        }
    }
    got as c_int
}

/// The `i`th entry of the caller's completion array.
///
/// # Safety
/// `i` is below the array's length.
unsafe fn wc_out(wc: *mut ibv_wc, i: usize) -> *mut ibv_wc {
    // SAFETY: the caller's contract.
    unsafe { wc.add(i) }
}

/// Outcome of one operation.
fn execute(q: &Qp, wr: &ibv_send_wr) -> u32 {
    // SAFETY: the QP's context is ours.
    let ctx = unsafe { &*(q.qp.context.cast::<Ctx>()) };
    let (write, needs_remote, needs_local) = match wr.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => (true, IBV_ACCESS_REMOTE_WRITE, 0),
        IBV_WR_RDMA_READ => (false, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE),
        _ => return IBV_WC_LOC_QP_OP_ERR,
    };
    // The local side: one SGE inside a registration of this context, under its lkey.
    let (laddr, len) = if wr.num_sge == 0 {
        (0u64, 0usize)
    } else {
        // SAFETY: the caller's SGE list of `num_sge` (1) entries.
        let sge = unsafe { &*wr.sg_list };
        let i = (sge.lkey >> 8) as usize;
        let t = ctx.table();
        let ok = i < SLOTS && {
            let s = &t.slots[i];
            s.state.load(SeqCst) == VALID
                && s.key.load(SeqCst) == sge.lkey
                && s.access.load(SeqCst) & needs_local == needs_local
                && sge.addr >= s.addr.load(SeqCst)
                && sge.addr + sge.length as u64 <= s.addr.load(SeqCst) + s.len.load(SeqCst)
        };
        if !ok {
            return IBV_WC_LOC_PROT_ERR;
        }
        (sge.addr, sge.length as usize)
    };
    // The responder: connected back to us, in RTR or RTS, alive.
    let mut r = q.remote.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        if r.is_none() {
            let dest = q.sh().dest_qpn.load(SeqCst);
            if let Some(qs) = Shm::map(&qp_path(dest), std::mem::size_of::<QpShared>(), false) {
                // SAFETY: a QpShared mapping.
                let (pid, id) = unsafe {
                    let s = &*(qs.ptr as *const QpShared);
                    (s.pid.load(SeqCst), s.ctx_id.load(SeqCst))
                };
                if let Some(t) = Shm::map(&table_path(id), std::mem::size_of::<Table>(), false) {
                    *r = Some(Remote {
                        qp: qs,
                        table: t,
                        pid: pid as i32,
                    });
                }
            }
        }
        if let Some(rem) = &*r {
            // SAFETY: a QpShared mapping.
            let rs = unsafe { &*(rem.qp.ptr as *const QpShared) };
            let st = rs.state.load(SeqCst);
            // SAFETY: signal 0 only checks that the process exists.
            let alive = unsafe { libc::kill(rem.pid, 0) } == 0;
            if !alive {
                return IBV_WC_RETRY_EXC_ERR;
            }
            if (st == IBV_QPS_RTR || st == IBV_QPS_RTS) && rs.dest_qpn.load(SeqCst) == q.qp.qp_num {
                break;
            }
            if st == IBV_QPS_ERR {
                return IBV_WC_RETRY_EXC_ERR;
            }
        }
        if Instant::now() > deadline {
            return IBV_WC_RETRY_EXC_ERR;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let rem = r.as_ref().expect("connected above");
    // SAFETY: mappings of the right types, held while `r` is locked.
    let (rs, rt) = unsafe {
        (
            &*(rem.qp.ptr as *const QpShared),
            &*(rem.table.ptr as *const Table),
        )
    };
    if rs.access.load(SeqCst) & needs_remote != needs_remote {
        rs.state.store(IBV_QPS_ERR, SeqCst);
        return IBV_WC_REM_ACCESS_ERR;
    }
    let i = (wr.rkey >> 8) as usize;
    if i >= SLOTS {
        rs.state.store(IBV_QPS_ERR, SeqCst);
        return IBV_WC_REM_ACCESS_ERR;
    }
    let s = &rt.slots[i];
    s.in_flight.fetch_add(1, SeqCst);
    let status = (|| {
        let iova = s.iova.load(SeqCst);
        let ok = s.state.load(SeqCst) == VALID
            && s.key.load(SeqCst) == wr.rkey
            && s.access.load(SeqCst) & needs_remote == needs_remote
            && wr.remote_addr >= iova
            && wr
                .remote_addr
                .checked_add(len as u64)
                .is_some_and(|e| e <= iova + s.len.load(SeqCst));
        if !ok {
            return IBV_WC_REM_ACCESS_ERR;
        }
        let imm = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        if imm {
            // A receive must be posted (and room to record it): else the responder answers
            // "receiver not ready" and the requester retries, as rnr_retry = 7 does, for as
            // long as the responder lives (bounded here).
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let room = rs.tail.load(SeqCst).wrapping_sub(rs.head.load(SeqCst)) < RING as u32;
                let c = rs.recv_posted.load(SeqCst);
                if room
                    && c > 0
                    && rs
                        .recv_posted
                        .compare_exchange(c, c - 1, SeqCst, SeqCst)
                        .is_ok()
                {
                    break;
                }
                // SAFETY: signal 0 only checks that the process exists.
                if unsafe { libc::kill(rem.pid, 0) } != 0 || rs.state.load(SeqCst) == IBV_QPS_ERR {
                    return IBV_WC_RETRY_EXC_ERR;
                }
                if Instant::now() > deadline {
                    return IBV_WC_RNR_RETRY_EXC_ERR;
                }
                std::thread::yield_now();
            }
        }
        let push = |status: u32| {
            if imm && status == IBV_WC_SUCCESS {
                let t = rs.tail.load(SeqCst);
                let e = &rs.ring[t as usize % RING];
                e[0].store(wr.imm_data, SeqCst);
                e[1].store(len as u32, SeqCst);
                rs.tail.store(t.wrapping_add(1), SeqCst);
                signal(rs);
            } else if imm {
                rs.recv_posted.fetch_add(1, SeqCst);
            }
            status
        };
        if len == 0 {
            return push(IBV_WC_SUCCESS);
        }
        let raddr = s.addr.load(SeqCst) + (wr.remote_addr - iova);
        let local = libc::iovec {
            iov_base: laddr as *mut c_void,
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: raddr as *mut c_void,
            iov_len: len,
        };
        // SAFETY: the kernel checks both address spaces; the local range is registered
        // memory of ours (checked above).
        let n = unsafe {
            if write {
                libc::process_vm_writev(rem.pid, &local, 1, &remote, 1, 0)
            } else {
                libc::process_vm_readv(rem.pid, &local, 1, &remote, 1, 0)
            }
        };
        push(if n == len as isize {
            IBV_WC_SUCCESS
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            IBV_WC_RETRY_EXC_ERR
        } else {
            IBV_WC_REM_ACCESS_ERR
        })
    })();
    s.in_flight.fetch_sub(1, SeqCst);
    if status == IBV_WC_REM_ACCESS_ERR {
        // A NAK for an access violation moves the responder's QP to the error state too.
        rs.state.store(IBV_QPS_ERR, SeqCst);
    }
    status
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: a QP of ours.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: its send CQ is ours.
    let cq = unsafe { &*q.qp.send_cq.cast::<Cq>() };
    let mut w = wr;
    while !w.is_null() {
        // SAFETY: the caller's list of work requests.
        let r = unsafe { &*w };
        let state = q.sh().state.load(SeqCst);
        let fail = |e: c_int| {
            // SAFETY: the caller's pointer.
            unsafe { *bad = w };
            e
        };
        if state != IBV_QPS_RTS && state != IBV_QPS_ERR {
            return fail(libc::EINVAL);
        }
        if r.num_sge < 0 || r.num_sge > 1 {
            return fail(libc::EINVAL);
        }
        if q.outstanding.load(SeqCst) >= q.max_send_wr {
            return fail(libc::ENOMEM);
        }
        let status = if state == IBV_QPS_ERR {
            IBV_WC_WR_FLUSH_ERR
        } else {
            execute(q, r)
        };
        if status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR {
            q.sh().state.store(IBV_QPS_ERR, SeqCst);
        }
        let signaled = q.sig_all || r.send_flags & IBV_SEND_SIGNALED != 0;
        if signaled || status != IBV_WC_SUCCESS {
            let len = if r.num_sge == 1 {
                // SAFETY: one SGE.
                unsafe { (*r.sg_list).length }
            } else {
                0
            };
            let wc = ibv_wc {
                wr_id: r.wr_id,
                status,
                opcode: if r.opcode == IBV_WR_RDMA_READ {
                    IBV_WC_RDMA_READ
                } else {
                    IBV_WC_RDMA_WRITE
                },
                byte_len: len,
                qp_num: q.qp.qp_num,
                ..Default::default()
            };
            q.outstanding.fetch_add(1, SeqCst);
            cq.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back((wc, &q.outstanding));
        }
        w = r.next;
    }
    0
}
