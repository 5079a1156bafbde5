//! Our declarations of the subset of rdma-core's `infiniband/verbs.h` ABI that the transport
//! uses (x86_64 and aarch64 Linux, LP64), written from the header's layouts and checked
//! against them by offset (see the tests at the end). Shared, through `#[path]`, with the
//! stand-in provider, which implements the same ABI.
//!
//! Only the leading fields that either side reads or writes are named; the rest of each
//! struct is padding of the header's size, so that a real provider's objects and ours agree
//! where it matters.
#![allow(dead_code, non_camel_case_types, missing_docs)]

use std::os::raw::{c_char, c_int, c_void};

/// `struct ibv_device` is opaque to users (its name is read through `ibv_get_device_name`).
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `struct ibv_context_ops`: the provider's entry points. `ibv_post_send`, `ibv_post_recv`
/// and `ibv_poll_cq` are inline functions of verbs.h that call through these.
#[repr(C)]
pub struct ibv_context_ops {
    /// Slots 0..11 (compat and memory-window entries) that we never call.
    pub _before_poll: [*mut c_void; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _before_post: [*mut c_void; 12],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _after: [*mut c_void; 5],
}

/// `struct ibv_context` (the device's open instance).
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    /// `pthread_mutex_t mutex; void *abi_compat;`
    pub _rest: [u64; 6],
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    /// `pthread_mutex_t mutex; pthread_cond_t cond; uint32_t comp_events_completed,
    /// async_events_completed;`
    pub _rest: [u64; 12],
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    /// `pthread_mutex_t mutex; pthread_cond_t cond; uint32_t events_completed;`
    pub _rest: [u64; 12],
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route` (8-aligned: its `union ibv_gid` holds two 64-bit words).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_port_attr` (the compat layout `ibv_query_port` fills), with room to spare.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub _rest: [u32; 16],
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` with the `wr.rdma` member of its union (128 bytes in all).
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    /// Big-endian immediate (`imm_data`).
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _rest: [u32; 19],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Big-endian immediate.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// Signatures of the exported functions.
pub type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
pub type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
pub type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
pub type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
pub type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
pub type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
pub type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
pub type RegMrIova2 =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, u32) -> *mut ibv_mr;
pub type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
pub type CreateCq =
    unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut c_void, c_int) -> *mut ibv_cq;
pub type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
pub type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
pub type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
pub type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
pub type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
pub type CreateCompChannel = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel;
pub type DestroyCompChannel = unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int;
pub type GetCqEvent =
    unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
pub type AckCqEvents = unsafe extern "C" fn(*mut ibv_cq, u32);
pub type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut [u8; 16]) -> c_int;

// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;
// enum ibv_qp_state
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_ERR: u32 = 6;
// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 2;
pub const IBV_ACCESS_REMOTE_READ: u32 = 4;
// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 8;
pub const IBV_QP_PKEY_INDEX: c_int = 16;
pub const IBV_QP_PORT: c_int = 32;
pub const IBV_QP_AV: c_int = 128;
pub const IBV_QP_PATH_MTU: c_int = 256;
pub const IBV_QP_TIMEOUT: c_int = 512;
pub const IBV_QP_RETRY_CNT: c_int = 1024;
pub const IBV_QP_RNR_RETRY: c_int = 2048;
pub const IBV_QP_RQ_PSN: c_int = 4096;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 8192;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 32768;
pub const IBV_QP_SQ_PSN: c_int = 65536;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
pub const IBV_QP_DEST_QPN: c_int = 1048576;
// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_RDMA_READ: u32 = 4;
// enum ibv_send_flags
pub const IBV_SEND_SIGNALED: u32 = 2;
// enum ibv_wc_status
pub const IBV_WC_SUCCESS: u32 = 0;
pub const IBV_WC_LOC_LEN_ERR: u32 = 1;
pub const IBV_WC_LOC_QP_OP_ERR: u32 = 2;
pub const IBV_WC_LOC_PROT_ERR: u32 = 4;
pub const IBV_WC_WR_FLUSH_ERR: u32 = 5;
pub const IBV_WC_REM_INV_REQ_ERR: u32 = 9;
pub const IBV_WC_REM_ACCESS_ERR: u32 = 10;
pub const IBV_WC_REM_OP_ERR: u32 = 11;
pub const IBV_WC_RETRY_EXC_ERR: u32 = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;
// enum ibv_wc_opcode
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
// enum ibv_mtu
pub const IBV_MTU_1024: u32 = 3;
// enum ibv_port_state
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_PORT_ACTIVE_DEFER: u32 = 5;
// link layers
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// Name of a completion status, for error messages (`ibv_wc_status_str`'s words).
pub fn status_str(s: u32) -> &'static str {
    match s {
        IBV_WC_SUCCESS => "success",
        IBV_WC_LOC_LEN_ERR => "local length error",
        IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
        IBV_WC_LOC_PROT_ERR => "local protection error",
        IBV_WC_WR_FLUSH_ERR => "Work Request Flushed Error",
        IBV_WC_REM_INV_REQ_ERR => "invalid request",
        IBV_WC_REM_ACCESS_ERR => "remote access error",
        IBV_WC_REM_OP_ERR => "remote operation error",
        IBV_WC_RETRY_EXC_ERR => "transport retry counter exceeded",
        IBV_WC_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        _ => "other error",
    }
}

#[cfg(test)]
mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The offsets and sizes of rdma-core's verbs.h on LP64 (printed with offsetof from the
    /// header of rdma-core 44).
    #[test]
    fn matches_verbs_h() {
        assert_eq!(offset_of!(ibv_context, ops), 8);
        assert_eq!(offset_of!(ibv_context_ops, poll_cq), 88);
        assert_eq!(offset_of!(ibv_context_ops, post_send), 200);
        assert_eq!(offset_of!(ibv_context_ops, post_recv), 208);
        assert_eq!(size_of::<ibv_context_ops>(), 256);
        assert_eq!(size_of::<ibv_context>(), 328);
        assert_eq!(offset_of!(ibv_qp, qp_num), 52);
        assert_eq!(offset_of!(ibv_qp, state), 56);
        assert_eq!(size_of::<ibv_qp>(), 160);
        assert_eq!(offset_of!(ibv_cq, cqe), 28);
        assert_eq!(size_of::<ibv_cq>(), 128);
        assert_eq!(offset_of!(ibv_mr, lkey), 36);
        assert_eq!(offset_of!(ibv_mr, rkey), 40);
        assert_eq!(size_of::<ibv_mr>(), 48);
        assert_eq!(size_of::<ibv_pd>(), 16);
        assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
        assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
        assert_eq!(offset_of!(ibv_send_wr, imm_data), 36);
        assert_eq!(offset_of!(ibv_send_wr, remote_addr), 40);
        assert_eq!(offset_of!(ibv_send_wr, rkey), 48);
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(size_of::<ibv_recv_wr>(), 32);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(offset_of!(ibv_wc, status), 8);
        assert_eq!(offset_of!(ibv_wc, opcode), 12);
        assert_eq!(offset_of!(ibv_wc, byte_len), 20);
        assert_eq!(offset_of!(ibv_wc, imm_data), 24);
        assert_eq!(offset_of!(ibv_wc, qp_num), 28);
        assert_eq!(offset_of!(ibv_wc, wc_flags), 36);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(offset_of!(ibv_qp_attr, rq_psn), 20);
        assert_eq!(offset_of!(ibv_qp_attr, dest_qp_num), 28);
        assert_eq!(offset_of!(ibv_qp_attr, qp_access_flags), 32);
        assert_eq!(offset_of!(ibv_qp_attr, cap), 36);
        assert_eq!(offset_of!(ibv_qp_attr, ah_attr), 56);
        assert_eq!(offset_of!(ibv_qp_attr, pkey_index), 120);
        assert_eq!(offset_of!(ibv_qp_attr, max_rd_atomic), 126);
        assert_eq!(offset_of!(ibv_qp_attr, port_num), 129);
        assert_eq!(offset_of!(ibv_qp_attr, rnr_retry), 132);
        assert_eq!(size_of::<ibv_qp_attr>(), 144);
        assert_eq!(offset_of!(ibv_ah_attr, dlid), 24);
        assert_eq!(offset_of!(ibv_ah_attr, is_global), 29);
        assert_eq!(offset_of!(ibv_ah_attr, port_num), 30);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(std::mem::align_of::<ibv_qp_attr>(), 8);
        assert_eq!(offset_of!(ibv_global_route, sgid_index), 20);
        assert_eq!(offset_of!(ibv_qp_init_attr, cap), 32);
        assert_eq!(offset_of!(ibv_qp_init_attr, qp_type), 52);
        assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
        assert_eq!(offset_of!(ibv_port_attr, lid), 34);
        assert_eq!(offset_of!(ibv_port_attr, link_layer), 46);
        assert!(size_of::<ibv_port_attr>() >= 52);
        assert_eq!(offset_of!(ibv_comp_channel, fd), 8);
        assert_eq!(size_of::<ibv_comp_channel>(), 16);
    }
}
