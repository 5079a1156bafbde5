//! A thin, safe layer over libibverbs, loaded at run time (`dlopen`): the FFI of this crate.
//!
//! The library is `VMMC_RDMA_LIB` if set (the stand-in provider in tests), else
//! `libibverbs.so.1`. Nothing links against rdma-core at build time. The verbs that verbs.h
//! defines inline (`ibv_post_send`, `ibv_poll_cq`) call through the context's ops table, as
//! the header's inline functions do, so a real provider and the stand-in are reached the
//! same way.

use crate::abi::*;
use std::ffi::CStr;
use std::sync::OnceLock;
use vmmc::{Error, Result};

/// Names the verbs library to load.
pub const LIB_VAR: &str = "VMMC_RDMA_LIB";
/// Names the device to open (default: the first).
pub const DEVICE_VAR: &str = "VMMC_RDMA_DEVICE";
/// The device's port (default 1).
pub const PORT_VAR: &str = "VMMC_RDMA_PORT";
/// The GID index on RoCE (default 0).
pub const GID_INDEX_VAR: &str = "VMMC_RDMA_GID_INDEX";

/// The entry points, resolved once.
pub struct Lib {
    _lib: libloading::Library,
    /// Where it was loaded from.
    pub path: String,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr_iova2: RegMrIova2,
    dereg_mr: DeregMr,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    create_qp: CreateQp,
    modify_qp: ModifyQp,
    destroy_qp: DestroyQp,
    query_port: QueryPort,
    query_gid: QueryGid,
    create_comp_channel: CreateCompChannel,
    destroy_comp_channel: DestroyCompChannel,
    get_cq_event: GetCqEvent,
    ack_cq_events: AckCqEvents,
}

fn verbs_err(what: &'static str) -> Error {
    Error::io(what, std::io::Error::last_os_error())
}

static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();

impl Lib {
    /// The process's verbs library (loaded on first use, kept for the process's life).
    pub fn get() -> Result<&'static Lib> {
        LIB.get_or_init(|| {
            let path = std::env::var(LIB_VAR).unwrap_or_else(|_| "libibverbs.so.1".into());
            Lib::load(&path)
        })
        .as_ref()
        .map_err(|e| Error::Bootstrap(e.clone()))
    }

    fn load(path: &str) -> std::result::Result<Lib, String> {
        // SAFETY: loading a shared library runs its initialisers: libibverbs (or a library
        // the user named in VMMC_RDMA_LIB to stand in for it) is trusted like any library
        // the program links.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load the verbs library {path:?} ({LIB_VAR}): {e}"))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the signature verbs.h gives it (abi.rs); the
                // pointer stays valid while `lib` is loaded, and Lib keeps it loaded.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{path}: no {}: {e}", $name))?
            };
        }
        Ok(Lib {
            path: path.to_string(),
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr_iova2: sym!("ibv_reg_mr_iova2"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            create_comp_channel: sym!("ibv_create_comp_channel"),
            destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
            get_cq_event: sym!("ibv_get_cq_event"),
            ack_cq_events: sym!("ibv_ack_cq_events"),
            _lib: lib,
        })
    }

    /// The names of the devices the library sees.
    pub fn devices(&self) -> Result<Vec<String>> {
        let mut n = 0;
        // SAFETY: the library allocates the list; freed below.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(verbs_err("ibv_get_device_list"));
        }
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: `n` entries, each a device whose name is a C string.
            let name = unsafe { CStr::from_ptr((self.get_device_name)(*list.add(i))) };
            names.push(name.to_string_lossy().into_owned());
        }
        // SAFETY: the list we got above, freed once.
        unsafe { (self.free_device_list)(list) };
        Ok(names)
    }
}

/// An open device with its protection domain and port.
pub struct Device {
    lib: &'static Lib,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    /// Name of the device.
    pub name: String,
    /// Port number used.
    pub port: u8,
    /// Local identifier of the port (InfiniBand).
    pub lid: u16,
    /// The port's GID at the chosen index (RoCE needs it; zero on IB without a subnet).
    pub gid: [u8; 16],
    /// Whether the link layer is Ethernet (RoCE: addresses need the GRH).
    pub roce: bool,
    /// GID index used.
    pub gid_index: u8,
    /// The port's active MTU (enum ibv_mtu).
    pub mtu: u32,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread safe).
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

fn env_num<T: std::str::FromStr>(var: &str, default: T) -> Result<T> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| Error::Bootstrap(format!("{var}={v:?} is not a valid number"))),
    }
}

impl Device {
    /// Opens `VMMC_RDMA_DEVICE` (or the first device).
    pub fn open() -> Result<Device> {
        let lib = Lib::get()?;
        let want = std::env::var(DEVICE_VAR).ok().filter(|s| !s.is_empty());
        let port: u8 = env_num(PORT_VAR, 1)?;
        let gid_index: u8 = env_num(GID_INDEX_VAR, 0)?;
        let mut n = 0;
        // SAFETY: the library allocates the list; freed below on every path.
        let list = unsafe { (lib.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(Error::Bootstrap(format!(
                "no RDMA device: ibv_get_device_list of {} failed ({}; no kernel RDMA \
                 support?)",
                lib.path,
                std::io::Error::last_os_error()
            )));
        }
        let mut found = None;
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: `n` valid entries.
            let d = unsafe { *list.add(i) };
            // SAFETY: a device's name is a C string.
            let name = unsafe { CStr::from_ptr((lib.get_device_name)(d)) }
                .to_string_lossy()
                .into_owned();
            if found.is_none() && want.as_deref().is_none_or(|w| w == name) {
                found = Some((d, name.clone()));
            }
            names.push(name);
        }
        let Some((dev, name)) = found else {
            // SAFETY: the list from above.
            unsafe { (lib.free_device_list)(list) };
            return Err(Error::Bootstrap(match want {
                Some(w) => format!("no RDMA device {w:?} ({DEVICE_VAR}); present: {names:?}"),
                None => format!("no RDMA device found by {}", lib.path),
            }));
        };
        // SAFETY: a device of the list, which is still allocated.
        let ctx = unsafe { (lib.open_device)(dev) };
        // SAFETY: the list from above; the context does not need it.
        unsafe { (lib.free_device_list)(list) };
        if ctx.is_null() {
            return Err(verbs_err("ibv_open_device"));
        }
        // SAFETY: an open context.
        let pd = unsafe { (lib.alloc_pd)(ctx) };
        if pd.is_null() {
            let e = verbs_err("ibv_alloc_pd");
            // SAFETY: opened above, closed once.
            unsafe { (lib.close_device)(ctx) };
            return Err(e);
        }
        let mut d = Device {
            lib,
            ctx,
            pd,
            name,
            port,
            lid: 0,
            gid: [0; 16],
            roce: false,
            gid_index,
            mtu: IBV_MTU_1024,
        };
        // SAFETY: zero is a valid port attribute block; the library fills it.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a block of the compat layout's size or more.
        if unsafe { (lib.query_port)(ctx, port, &mut pa) } != 0 {
            return Err(Error::Bootstrap(format!(
                "ibv_query_port({}, port {port}) failed: {}",
                d.name,
                std::io::Error::last_os_error()
            )));
        }
        if pa.state != IBV_PORT_ACTIVE && pa.state != IBV_PORT_ACTIVE_DEFER {
            return Err(Error::Bootstrap(format!(
                "port {port} of RDMA device {} is not active (state {}; {PORT_VAR})",
                d.name, pa.state
            )));
        }
        d.lid = pa.lid;
        d.roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        d.mtu = pa.active_mtu.clamp(1, 5);
        let mut gid = [0u8; 16];
        // SAFETY: an open context and a 16-byte GID.
        if unsafe { (lib.query_gid)(ctx, port, gid_index as i32, &mut gid) } == 0 {
            d.gid = gid;
        } else if d.roce {
            return Err(Error::Bootstrap(format!(
                "ibv_query_gid({}, port {port}, index {gid_index}) failed ({GID_INDEX_VAR})",
                d.name
            )));
        }
        Ok(d)
    }

    /// Registers `len` bytes at `addr` with `access`; remote peers name it from `iova`.
    ///
    /// # Safety
    /// The memory must stay allocated until the registration drops.
    pub unsafe fn register(&self, addr: *mut u8, len: usize, iova: u64, access: u32) -> Result<Mr> {
        // SAFETY: an allocated PD; the caller keeps the memory.
        let mr = unsafe { (self.lib.reg_mr_iova2)(self.pd, addr.cast(), len, iova, access) };
        if mr.is_null() {
            return Err(verbs_err("ibv_reg_mr"));
        }
        Ok(Mr { lib: self.lib, mr })
    }

    /// A completion queue of `depth` entries.
    pub fn cq(&self, depth: i32) -> Result<Cq> {
        // SAFETY: an open context; no channel.
        let cq = unsafe {
            (self.lib.create_cq)(
                self.ctx,
                depth,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(verbs_err("ibv_create_cq"));
        }
        Ok(Cq { lib: self.lib, cq })
    }

    /// A completion queue for receives, with a completion channel to sleep on.
    pub fn recv_cq(&self, depth: i32) -> Result<RecvCq> {
        // SAFETY: an open context.
        let ch = unsafe { (self.lib.create_comp_channel)(self.ctx) };
        if ch.is_null() {
            return Err(verbs_err("ibv_create_comp_channel"));
        }
        // SAFETY: an open context and our channel.
        let cq =
            unsafe { (self.lib.create_cq)(self.ctx, depth, std::ptr::null_mut(), ch.cast(), 0) };
        if cq.is_null() {
            let e = verbs_err("ibv_create_cq");
            // SAFETY: made above, destroyed once.
            unsafe { (self.lib.destroy_comp_channel)(ch) };
            return Err(e);
        }
        Ok(RecvCq {
            cq: Cq { lib: self.lib, cq },
            ch,
        })
    }

    /// An RC queue pair completing sends into `cq` and receives into `recv` (or `cq`), in
    /// RESET.
    pub fn qp(&self, cq: Cq, depth: u32, recv: Option<&RecvCq>, recv_depth: u32) -> Result<Qp> {
        let mut attr = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.cq,
            recv_cq: recv.map_or(cq.cq, |r| r.cq.cq),
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: recv_depth.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a valid PD and attributes.
        let qp = unsafe { (self.lib.create_qp)(self.pd, &mut attr) };
        if qp.is_null() {
            return Err(verbs_err("ibv_create_qp"));
        }
        Ok(Qp {
            lib: self.lib,
            qp,
            _cq: cq,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: allocated in open, released once, after every object of ours that used
        // them (they hold an Arc of the device).
        unsafe {
            (self.lib.dealloc_pd)(self.pd);
            (self.lib.close_device)(self.ctx);
        }
    }
}

/// A memory registration.
pub struct Mr {
    lib: &'static Lib,
    mr: *mut ibv_mr,
}

// SAFETY: a registration is a handle usable from any thread.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Key for local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        // SAFETY: valid until drop.
        unsafe { (*self.mr).lkey }
    }
    /// Key remote peers use.
    pub fn rkey(&self) -> u32 {
        // SAFETY: valid until drop.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once.
        unsafe { (self.lib.dereg_mr)(self.mr) };
    }
}

/// A completion queue.
pub struct Cq {
    lib: &'static Lib,
    cq: *mut ibv_cq,
}

// SAFETY: a CQ handle; polling is serialised by its owner (the queue pair's lock).
unsafe impl Send for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        if !self.cq.is_null() {
            // SAFETY: created in `Device::cq`, destroyed once after its queue pair.
            unsafe { (self.lib.destroy_cq)(self.cq) };
        }
    }
}

/// What a peer tells us about its end of our queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAddr {
    /// Queue-pair number.
    pub qpn: u32,
    /// Port's local identifier (InfiniBand).
    pub lid: u16,
    /// First packet sequence number.
    pub psn: u32,
    /// Port's GID (RoCE, or IB across subnets).
    pub gid: [u8; 16],
}

/// An RC queue pair (its CQ serves both directions).
pub struct Qp {
    lib: &'static Lib,
    qp: *mut ibv_qp,
    _cq: Cq,
}

// SAFETY: a QP handle; verbs are thread safe (sends and receives may be posted from
// different threads); the send CQ is polled by one thread at a time (its owner's lock).
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `Device::qp`, destroyed once (before its CQ, a later field).
        unsafe { (self.lib.destroy_qp)(self.qp) };
    }
}

impl Qp {
    /// Its number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: valid until drop.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32, what: &'static str) -> Result<()> {
        // SAFETY: a valid QP and attribute block.
        let rc = unsafe { (self.lib.modify_qp)(self.qp, attr, mask) };
        if rc != 0 {
            return Err(Error::io(what, std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    /// RESET -> INIT -> RTR -> RTS, connected to `peer`.
    pub fn connect(&self, dev: &Device, me: &QpAddr, peer: &QpAddr) -> Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            port_num: dev.port,
            pkey_index: 0,
            qp_access_flags: IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: dev.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            // One RDMA READ at a time per queue pair is all the transport issues.
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.dlid = peer.lid;
        a.ah_attr.port_num = dev.port;
        if dev.roce || peer.lid == 0 {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = peer.gid;
            a.ah_attr.grh.sgid_index = dev.gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            sq_psn: me.psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// `ibv_post_send` of one signaled RDMA operation (`opcode`) of `len` bytes between
    /// `local` (under `lkey`) and the peer's `remote` (under `rkey`).
    ///
    /// # Safety
    /// `local..local+len` must stay valid (and writable, for a read) until its completion.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post(
        &self,
        wr_id: u64,
        opcode: u32,
        local: *mut u8,
        len: u32,
        lkey: u32,
        remote: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()> {
        let mut sge = ibv_sge {
            addr: local as u64,
            length: len,
            lkey,
        };
        let mut wr = ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode,
            send_flags: IBV_SEND_SIGNALED,
            imm_data: imm.to_be(),
            remote_addr: remote,
            rkey,
            _rest: [0; 19],
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP's context and its ops table are the provider's, valid while the QP
        // lives; the work request and its SGE are valid for the call (the provider copies
        // them); the caller keeps the local memory.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_send {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::WouldBlock),
            e => Err(Error::io(
                "ibv_post_send",
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    /// `ibv_post_recv` of one receive without memory (a WRITE_WITH_IMM consumes it).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        let mut wr = ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in `post`; the work request is valid for the call.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_recv {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        match rc {
            0 => Ok(()),
            e => Err(Error::io(
                "ibv_post_recv",
                std::io::Error::from_raw_os_error(e),
            )),
        }
    }

    /// `ibv_poll_cq`: fills `out` with completions; returns how many.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize> {
        // SAFETY: as in `post`; `out` holds `out.len()` entries.
        let n = unsafe {
            let cq = (*self.qp).send_cq;
            match (*(*cq).context).ops.poll_cq {
                Some(f) => f(cq, out.len() as i32, out.as_mut_ptr()),
                None => -libc::ENOSYS,
            }
        };
        if n < 0 {
            return Err(Error::io(
                "ibv_poll_cq",
                std::io::Error::from_raw_os_error(-n),
            ));
        }
        Ok(n as usize)
    }
}

/// Whether a library and device are there (for tests that need a real one).
pub fn probe() -> std::result::Result<Vec<String>, String> {
    Lib::get()
        .map_err(|e| e.to_string())?
        .devices()
        .map_err(|e| e.to_string())
}

/// A receive completion queue with its completion channel.
pub struct RecvCq {
    cq: Cq,
    ch: *mut ibv_comp_channel,
}

// SAFETY: polled by one thread (the transport's receive thread); the handles are usable from
// any thread.
unsafe impl Send for RecvCq {}
// SAFETY: as above.
unsafe impl Sync for RecvCq {}

impl RecvCq {
    /// `ibv_poll_cq`.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize> {
        // SAFETY: our CQ, whose context's ops are the provider's; `out` holds its length.
        let n = unsafe {
            match (*(*self.cq.cq).context).ops.poll_cq {
                Some(f) => f(self.cq.cq, out.len() as i32, out.as_mut_ptr()),
                None => -libc::ENOSYS,
            }
        };
        if n < 0 {
            return Err(Error::io(
                "ibv_poll_cq",
                std::io::Error::from_raw_os_error(-n),
            ));
        }
        Ok(n as usize)
    }

    /// `ibv_req_notify_cq`: an event on the channel for the next completion.
    pub fn arm(&self) -> Result<()> {
        // SAFETY: as in `poll`.
        let rc = unsafe {
            match (*(*self.cq.cq).context).ops.req_notify_cq {
                Some(f) => f(self.cq.cq, 0),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(Error::io(
                "ibv_req_notify_cq",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    /// The channel's descriptor, readable when an event is there.
    pub fn fd(&self) -> i32 {
        // SAFETY: our channel, valid until drop.
        unsafe { (*self.ch).fd }
    }

    /// Takes one event from the channel (call when `fd` is readable) and acknowledges it.
    pub fn take_event(&self) -> Result<()> {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: our channel; the out-pointers are valid.
        if unsafe { (self.cq.lib.get_cq_event)(self.ch, &mut cq, &mut ctx) } != 0 {
            return Err(verbs_err("ibv_get_cq_event"));
        }
        // SAFETY: the CQ the event named (ours).
        unsafe { (self.cq.lib.ack_cq_events)(cq, 1) };
        Ok(())
    }
}

impl Drop for RecvCq {
    fn drop(&mut self) {
        // SAFETY: the CQ first (it uses the channel), then the channel, each once.
        unsafe {
            (self.cq.lib.destroy_cq)(self.cq.cq);
            (self.cq.lib.destroy_comp_channel)(self.ch);
        }
        // The CQ is destroyed: keep `Cq`'s drop from destroying it again.
        self.cq.cq = std::ptr::null_mut();
    }
}
