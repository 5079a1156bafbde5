//! The rest of the Paragon message-passing calls: the combined and handler sends, gsendx,
//! flushmsg, and the underscore form of every call that has one.

use super::*;

// ----- underscore forms of the small calls -----

/// `mynode` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _mynode() -> c_long {
    soft(|| Ok(nx()?.mynode() as c_long))
}

/// `numnodes` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _numnodes() -> c_long {
    soft(|| Ok(nx()?.numnodes() as c_long))
}

/// `myptype` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _myptype() -> c_long {
    soft(|| Ok(nx()?.myptype() as c_long))
}

/// `setptype` returning 0, or -1 and errno.
#[no_mangle]
pub extern "C" fn _setptype(ptype: c_long) -> c_long {
    soft(|| nx()?.setptype(ptype as i64).map(|()| 0))
}

/// `masktrap` returning the previous state, or -1 and errno.
#[no_mangle]
pub extern "C" fn _masktrap(state: c_long) -> c_long {
    soft(|| Ok(nx()?.masktrap(state != 0) as c_long))
}

/// `myhost`: -1 (there is no host node), which is also what an error would return.
#[no_mangle]
pub extern "C" fn _myhost() -> c_long {
    -1
}

/// `nodedim` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _nodedim() -> c_long {
    soft(|| {
        let n = nx()?.numnodes() as u64;
        Ok(n.next_power_of_two().trailing_zeros() as c_long)
    })
}

/// `flick` returning 0, or -1 and errno.
#[no_mangle]
pub extern "C" fn _flick() -> c_long {
    soft(super::do_flick)
}

/// `dclock` (it cannot fail).
#[no_mangle]
pub extern "C" fn _dclock() -> f64 {
    nx::Nx::dclock_now()
}

fn soft_info(f: impl Fn(Info) -> c_long) -> c_long {
    soft(|| Ok(nx()?.info().map_or(-1, f)))
}

/// `infocount` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _infocount() -> c_long {
    soft_info(|i| to_long(i.count))
}

/// `infonode` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _infonode() -> c_long {
    soft_info(|i| i.node as c_long)
}

/// `infotype` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _infotype() -> c_long {
    soft_info(|i| i.mtype as c_long)
}

/// `infoptype` returning -1 and setting errno on error.
#[no_mangle]
pub extern "C" fn _infoptype() -> c_long {
    soft_info(|i| i.ptype as c_long)
}

/// `cprobex` returning 0, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _cprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    soft(|| do_cprobex(typesel, nodesel, ptypesel, info))
}

/// `iprobex` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _iprobex(
    typesel: c_long,
    nodesel: c_long,
    ptypesel: c_long,
    info: *mut c_long,
) -> c_long {
    soft(|| do_iprobex(typesel, nodesel, ptypesel, info))
}

/// `csendrecv` returning the reply's length, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn _csendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
) -> c_long {
    soft(|| do_csendrecv(ty, sbuf, scount, node, ptype, typesel, rbuf, rcount))
}

// ----- isendrecv -----

#[allow(clippy::too_many_arguments)]
fn do_isendrecv(
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
    let g = global()?;
    // The reply's receive first, so that a quick reply goes straight into `rbuf`.
    // SAFETY: NX's contract: both buffers stay valid until the request completes.
    let r = unsafe { g.nx.irecv_raw(typesel as i64, rbuf.cast(), rn, -1, -1)? };
    // SAFETY: as above.
    let s = match unsafe {
        g.nx.isend_raw(ty as i64, sbuf.cast(), sn, node as i64, ptype as i64)
    } {
        Ok(s) => s,
        Err(e) => {
            let _ = g.nx.msgcancel(r);
            return Err(e);
        }
    };
    // msgwait waits for the send, then the reply, whose info it leaves.
    Ok(merge_ids(g, vec![s, r]))
}

/// Starts sending a message and receiving its reply; returns one id for both (msgwait,
/// msgdone: `_msgwait` returns the reply's length and the info calls describe the reply).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn isendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
) -> c_long {
    fatal("isendrecv", || {
        do_isendrecv(ty, sbuf, scount, node, ptype, typesel, rbuf, rcount)
    })
}

/// `isendrecv` returning -1 and setting errno on error.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn _isendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
) -> c_long {
    soft(|| do_isendrecv(ty, sbuf, scount, node, ptype, typesel, rbuf, rcount))
}

// ----- handler sends -----

fn do_hsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
    run: impl Fn(Info) + Send + 'static,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    // SAFETY: NX's contract: the buffer stays unchanged until the handler has run.
    unsafe { nx()?.hsend_raw(ty as i64, buf.cast(), n, node as i64, ptype as i64, run)? };
    Ok(0)
}

fn hsend_fn(handler: Option<HrecvHandler>) -> Result<impl Fn(Info) + Send, NxError> {
    let h = handler.ok_or(NxError::NotAllowed("hsend: NULL handler"))?;
    Ok(move |i: Info| {
        h(
            i.mtype as c_long,
            to_long(i.count),
            i.node as c_long,
            i.ptype as c_long,
        )
    })
}

fn hsendx_fn(
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) -> Result<impl Fn(Info) + Send, NxError> {
    let h = handler.ok_or(NxError::NotAllowed("hsendx: NULL handler"))?;
    Ok(move |i: Info| {
        h(
            i.mtype as c_long,
            to_long(i.count),
            i.node as c_long,
            i.ptype as c_long,
            hparam,
        )
    })
}

/// Sends a message and returns at once; `handler(type, count, node, ptype)` runs when the
/// send is complete (the buffer may then be reused).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn hsend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
    handler: Option<HrecvHandler>,
) {
    fatal("hsend", || {
        do_hsendx(ty, buf, count, node, ptype, hsend_fn(handler)?)
    });
}

/// `hsend` returning 0, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _hsend(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
    handler: Option<HrecvHandler>,
) -> c_long {
    soft(|| do_hsendx(ty, buf, count, node, ptype, hsend_fn(handler)?))
}

/// `hsend` whose handler gets `hparam` last.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn hsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) {
    fatal("hsendx", || {
        do_hsendx(ty, buf, count, node, ptype, hsendx_fn(handler, hparam)?)
    });
}

/// `hsendx` returning 0, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _hsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    node: c_long,
    ptype: c_long,
    handler: Option<HrecvxHandler>,
    hparam: c_long,
) -> c_long {
    soft(|| do_hsendx(ty, buf, count, node, ptype, hsendx_fn(handler, hparam)?))
}

#[allow(clippy::too_many_arguments)]
fn do_hsendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
    handler: Option<HrecvHandler>,
) -> Result<c_long, NxError> {
    let sn = check_buf(sbuf, scount)?;
    let g = global()?;
    let r = do_hrecv(typesel, rbuf, rcount, handler)?;
    // A handler send (with nothing to do when it completes): a zero-copy message asks its
    // receiver to notify the reply, so that the transfer goes on while this process
    // computes without calling NX, and the reply can come.
    // SAFETY: NX's contract: `sbuf` stays unchanged until the handler has run, and the
    // reply comes after the message was received: the send is complete by then.
    let sent = unsafe {
        g.nx.hsend_raw(
            ty as i64,
            sbuf.cast(),
            sn,
            node as i64,
            ptype as i64,
            |_| {},
        )
    };
    if let Err(e) = sent {
        let _ = g.nx.msgcancel(r as i64);
        return Err(e);
    }
    Ok(0)
}

/// Sends a message and returns at once; the reply (a type `typesel` selects) is received
/// into `rbuf`, then `handler(type, count, node, ptype)` of the reply runs.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hsendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
    handler: Option<HrecvHandler>,
) {
    fatal("hsendrecv", || {
        do_hsendrecv(
            ty, sbuf, scount, node, ptype, typesel, rbuf, rcount, handler,
        )
    });
}

/// `hsendrecv` returning 0, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn _hsendrecv(
    ty: c_long,
    sbuf: *const c_void,
    scount: c_long,
    node: c_long,
    ptype: c_long,
    typesel: c_long,
    rbuf: *mut c_void,
    rcount: c_long,
    handler: Option<HrecvHandler>,
) -> c_long {
    soft(|| {
        do_hsendrecv(
            ty, sbuf, scount, node, ptype, typesel, rbuf, rcount, handler,
        )
    })
}

// ----- gsendx, flushmsg -----

fn do_gsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    nodes: *const c_long,
    nnodes: c_long,
) -> Result<c_long, NxError> {
    let n = check_buf(buf, count)?;
    let k = check_buf(nodes.cast(), nnodes)?;
    // SAFETY: NX's contract: `buf` holds `count` bytes, `nodes` `nnodes` longs.
    let (data, list) = unsafe {
        (
            bytes(buf, n),
            if k == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(nodes, k)
            },
        )
    };
    let list: Vec<i64> = list.iter().map(|&v| v as i64).collect();
    nx()?.gsendx(ty as i64, data, &list)?;
    Ok(0)
}

/// Sends a message to every node of `nodes` (`nnodes` of them).
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn gsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    nodes: *const c_long,
    nnodes: c_long,
) {
    fatal("gsendx", || do_gsendx(ty, buf, count, nodes, nnodes));
}

/// `gsendx` returning 0, or -1 and errno.
/// # Safety
/// Pointer arguments are valid for the lengths given, as NX requires of its callers.
#[no_mangle]
pub unsafe extern "C" fn _gsendx(
    ty: c_long,
    buf: *const c_void,
    count: c_long,
    nodes: *const c_long,
    nnodes: c_long,
) -> c_long {
    soft(|| do_gsendx(ty, buf, count, nodes, nnodes))
}

fn do_flushmsg(typesel: c_long, nodesel: c_long, ptypesel: c_long) -> Result<c_long, NxError> {
    nx()?
        .flushmsg(typesel as i64, nodesel as i64, ptypesel as i64)
        .map(to_long)
}

/// Discards the arrived messages selected by type, node and process type.
#[no_mangle]
pub extern "C" fn flushmsg(typesel: c_long, nodesel: c_long, ptypesel: c_long) {
    fatal("flushmsg", || do_flushmsg(typesel, nodesel, ptypesel));
}

/// `flushmsg` returning how many messages it discarded, or -1 and errno.
#[no_mangle]
pub extern "C" fn _flushmsg(typesel: c_long, nodesel: c_long, ptypesel: c_long) -> c_long {
    soft(|| do_flushmsg(typesel, nodesel, ptypesel))
}
