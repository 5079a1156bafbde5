//! The Fortran bindings: every NX call as gfortran names it (`mynode_`, `csend_`, ...), its
//! arguments by reference, INTEGER and LOGICAL 4 bytes, REAL 4, DOUBLE PRECISION 8, an info
//! array of 4 INTEGERs, handlers called with their arguments by reference, strings with
//! their hidden length last. They call the C calls, so errors behave the same way.

use super::*;
use std::ffi::c_int;

/// A Fortran handler of `hrecv`/`hsend`/`hsendrecv`: type, count, node, ptype by reference.
pub type FHandler = extern "C" fn(*const c_int, *const c_int, *const c_int, *const c_int);
/// A Fortran handler of `hrecvx`/`hsendx`: as [`FHandler`], then hparam.
pub type FHandlerX =
    extern "C" fn(*const c_int, *const c_int, *const c_int, *const c_int, *const c_int);
/// A Fortran `gopf` function: folds `y` into `x`.
pub type FGopf = extern "C" fn(*mut c_void, *mut c_void) -> c_int;

/// The value of an INTEGER argument.
///
/// # Safety
/// `p` points to an INTEGER.
unsafe fn v(p: *const c_int) -> c_long {
    if p.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract.
    unsafe { *p as c_long }
}

fn i(x: c_long) -> c_int {
    c_int::try_from(x).unwrap_or(if x < 0 { c_int::MIN } else { c_int::MAX })
}

/// Fills a Fortran info array: type, count, node, ptype.
///
/// # Safety
/// `info` NULL or valid for 4 INTEGERs.
pub(crate) unsafe fn put_info(info: *mut c_int, x: Info) {
    if info.is_null() {
        return;
    }
    let a = [
        i(x.mtype as c_long),
        i(to_long(x.count)),
        i(x.node as c_long),
        i(x.ptype as c_long),
    ];
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), info, 4) };
}

macro_rules! int_fn {
    ($($f:ident => $c:expr;)*) => {$(
        #[doc = concat!("Fortran's `", stringify!($f), "`.")]
        #[no_mangle]
        pub extern "C" fn $f() -> c_int {
            i($c)
        }
    )*};
}

int_fn! {
    mynode_ => mynode();
    numnodes_ => numnodes();
    myptype_ => myptype();
    myhost_ => myhost();
    nodedim_ => nodedim();
    mypid_ => super::compat::mypid();
    infocount_ => infocount();
    infonode_ => infonode();
    infotype_ => infotype();
    infoptype_ => infoptype();
    infopid_ => super::compat::infopid();
    nx_waitall_ => super::spawn::nx_waitall();
}

/// Fortran's `dclock`.
#[no_mangle]
pub extern "C" fn dclock_() -> f64 {
    dclock()
}

/// Fortran's `mclock`: milliseconds, modulo 2^31.
#[no_mangle]
pub extern "C" fn mclock_() -> c_int {
    (super::compat::mclock() & 0x7fff_ffff) as c_int
}

/// Fortran's `flick`.
#[no_mangle]
pub extern "C" fn flick_() {
    flick()
}

/// Fortran's `gsync`.
#[no_mangle]
pub extern "C" fn gsync_() {
    gsync()
}

macro_rules! fortran {
    ($($(#[$m:meta])* fn $f:ident ( $($a:ident : $t:ty),* $(,)? ) $(-> $r:ty)? { $($body:tt)* })*) => {$(
        #[doc = concat!("Fortran's `", stringify!($f), "`.")]
        /// # Safety
        /// Arguments by reference, valid as NX requires of its callers.
        #[no_mangle]
        $(#[$m])*
        #[allow(unused_unsafe)]
        pub unsafe extern "C" fn $f($($a: $t),*) $(-> $r)? {
            // SAFETY: this function's contract: the arguments are valid references.
            unsafe { $($body)* }
        }
    )*};
}

type I = *const c_int;
type P = *mut c_void;

fortran! {
    fn setptype_(p: I) { setptype(v(p)) }
    fn led_(on: I) { led(v(on)) }
    fn masktrap_(s: I) -> c_int { i(masktrap(v(s))) }
    fn gray_(x: I) -> c_int { i(super::compat::gray(v(x))) }
    fn ginv_(x: I) -> c_int { i(super::compat::ginv(v(x))) }
    fn csend_(t: I, buf: P, n: I, node: I, pt: I) { csend(v(t), buf, v(n), v(node), v(pt)) }
    fn isend_(t: I, buf: P, n: I, node: I, pt: I) -> c_int {
        i(isend(v(t), buf, v(n), v(node), v(pt)))
    }
    fn crecv_(t: I, buf: P, n: I) { crecv(v(t), buf, v(n)) }
    fn irecv_(t: I, buf: P, n: I) -> c_int { i(irecv(v(t), buf, v(n))) }
    fn crecvx_(t: I, buf: P, n: I, ns: I, ps: I, info: *mut c_int) {
        let mut l = [0 as c_long; 4];
        crecvx(v(t), buf, v(n), v(ns), v(ps), l.as_mut_ptr());
        copy_info(&l, info);
    }
    fn irecvx_(t: I, buf: P, n: I, ns: I, ps: I, info: *mut c_int) -> c_int {
        let mid = irecvx(v(t), buf, v(n), v(ns), v(ps), std::ptr::null_mut());
        if !info.is_null() {
            if let Ok(g) = global() {
                lock(&g.infos).insert(mid as i64, (info as usize, true));
            }
        }
        i(mid)
    }
    fn cprobe_(t: I) { cprobe(v(t)) }
    fn iprobe_(t: I) -> c_int { i(iprobe(v(t))) }
    fn cprobex_(t: I, ns: I, ps: I, info: *mut c_int) {
        let mut l = [0 as c_long; 4];
        cprobex(v(t), v(ns), v(ps), l.as_mut_ptr());
        copy_info(&l, info);
    }
    fn iprobex_(t: I, ns: I, ps: I, info: *mut c_int) -> c_int {
        let mut l = [0 as c_long; 4];
        let r = iprobex(v(t), v(ns), v(ps), l.as_mut_ptr());
        if r == 1 {
            copy_info(&l, info);
        }
        i(r)
    }
    fn msgwait_(m: I) { msgwait(v(m)) }
    fn msgdone_(m: I) -> c_int { i(msgdone(v(m))) }
    fn msgcancel_(m: I) { msgcancel(v(m)) }
    fn msgignore_(m: I) { msgignore(v(m)) }
    fn msgmerge_(a: I, b: I) -> c_int { i(msgmerge(v(a), v(b))) }
    fn flushmsg_(t: I, ns: I, ps: I) { super::paragon::flushmsg(v(t), v(ns), v(ps)) }
    #[allow(clippy::too_many_arguments)]
    fn csendrecv_(t: I, sb: P, sn: I, node: I, pt: I, ts: I, rb: P, rn: I) -> c_int {
        i(csendrecv(v(t), sb, v(sn), v(node), v(pt), v(ts), rb, v(rn)))
    }
    #[allow(clippy::too_many_arguments)]
    fn isendrecv_(t: I, sb: P, sn: I, node: I, pt: I, ts: I, rb: P, rn: I) -> c_int {
        i(super::paragon::isendrecv(v(t), sb, v(sn), v(node), v(pt), v(ts), rb, v(rn)))
    }
    fn gsendx_(t: I, buf: P, n: I, nodes: I, k: I) {
        let list: Vec<c_long> = ints(nodes, v(k)).iter().map(|&x| x as c_long).collect();
        super::paragon::gsendx(v(t), buf, v(n), list.as_ptr(), list.len() as c_long)
    }
    fn hrecv_(t: I, buf: P, n: I, h: Option<FHandler>) {
        fatal("hrecv", || {
            let h = h.ok_or(NxError::NotAllowed("hrecv: NULL handler"))?;
            let n = check_buf(buf, v(n))?;
            nx()?.hrecv_raw(v(t) as i64, buf.cast(), n, -1, -1, move |x| call4(h, x))
        });
    }
    fn hrecvx_(t: I, buf: P, n: I, ns: I, ps: I, h: Option<FHandlerX>, hp: I) {
        let hp = v(hp) as c_int;
        fatal("hrecvx", || {
            let h = h.ok_or(NxError::NotAllowed("hrecvx: NULL handler"))?;
            let n = check_buf(buf, v(n))?;
            nx()?.hrecv_raw(v(t) as i64, buf.cast(), n, v(ns) as i64, v(ps) as i64, move |x| {
                call5(h, x, hp)
            })
        });
    }
    fn hsend_(t: I, buf: P, n: I, node: I, pt: I, h: Option<FHandler>) {
        fatal("hsend", || {
            let h = h.ok_or(NxError::NotAllowed("hsend: NULL handler"))?;
            let n = check_buf(buf, v(n))?;
            nx()?.hsend_raw(v(t) as i64, buf.cast(), n, v(node) as i64, v(pt) as i64, move |x| {
                call4(h, x)
            })
        });
    }
    fn hsendx_(t: I, buf: P, n: I, node: I, pt: I, h: Option<FHandlerX>, hp: I) {
        let hp = v(hp) as c_int;
        fatal("hsendx", || {
            let h = h.ok_or(NxError::NotAllowed("hsendx: NULL handler"))?;
            let n = check_buf(buf, v(n))?;
            nx()?.hsend_raw(v(t) as i64, buf.cast(), n, v(node) as i64, v(pt) as i64, move |x| {
                call5(h, x, hp)
            })
        });
    }
    #[allow(clippy::too_many_arguments)]
    fn hsendrecv_(t: I, sb: P, sn: I, node: I, pt: I, ts: I, rb: P, rn: I, h: Option<FHandler>) {
        fatal("hsendrecv", || {
            let h = h.ok_or(NxError::NotAllowed("hsendrecv: NULL handler"))?;
            let rn = check_buf(rb, v(rn))?;
            let sn = check_buf(sb, v(sn))?;
            let g = global()?;
            let r = g.nx.hrecv_raw(v(ts) as i64, rb.cast(), rn, -1, -1, move |x| call4(h, x))?;
            // As C's hsendrecv: a handler send, so that a zero-copy one goes on unattended.
            let sent = g.nx.hsend_raw(v(t) as i64, sb.cast(), sn, v(node) as i64, v(pt) as i64, |_| {});
            if sent.is_err() {
                let _ = g.nx.msgcancel(r);
            }
            sent
        });
    }
    fn killproc_(node: I, pt: I) { super::compat::killproc(v(node), v(pt)) }
    fn killcube_(node: I, pt: I) { super::compat::killcube(v(node), v(pt)) }
    fn mypart_(rows: *mut c_int, cols: *mut c_int) -> c_int {
        let (mut r, mut c) = (0, 0);
        let n = super::compat::mypart(&mut r, &mut c);
        if !rows.is_null() {
            *rows = i(r);
        }
        if !cols.is_null() {
            *cols = i(c);
        }
        i(n)
    }
    fn nx_app_rect_(rows: *mut c_int, cols: *mut c_int) -> c_int {
        let (mut r, mut c) = (0, 0);
        let n = super::compat::nx_app_rect(&mut r, &mut c);
        if !rows.is_null() {
            *rows = i(r);
        }
        if !cols.is_null() {
            *cols = i(c);
        }
        i(n)
    }
    fn nx_perror_(s: *const c_char, len: usize) {
        super::compat::nx_perror(ftext(s, len).as_ptr())
    }
    fn gcol_(x: P, xl: I, y: P, yl: I, ncnt: *mut c_int) {
        let mut n: c_long = 0;
        gcol(x, v(xl), y, v(yl), &mut n);
        if !ncnt.is_null() {
            *ncnt = i(n);
        }
    }
    fn gcolx_(x: P, xlens: I, y: P) {
        let n = numnodes();
        let lens: Vec<c_long> = ints(xlens, n).iter().map(|&l| l as c_long).collect();
        gcolx(x, lens.as_ptr(), y)
    }
    fn gopf_(x: P, xl: I, _work: P, f: Option<FGopf>) {
        fatal("gopf", || {
            let f = f.ok_or(NxError::NotAllowed("gopf: NULL function"))?;
            let n = check_buf(x, v(xl))?;
            let xs = bytes_mut(x, n);
            nx()?.gopf(xs, |acc, other| {
                let mut y = other.to_vec();
                f(acc.as_mut_ptr().cast(), y.as_mut_ptr().cast());
            })
        });
    }
}

/// Copies a C info array into a Fortran one.
///
/// # Safety
/// `info` NULL or valid for 4 INTEGERs.
unsafe fn copy_info(l: &[c_long; 4], info: *mut c_int) {
    if !info.is_null() {
        let a = l.map(i);
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), info, 4) };
    }
}

/// `n` INTEGERs at `p`.
///
/// # Safety
/// `p` valid for `n` INTEGERs (or `n` <= 0).
unsafe fn ints<'a>(p: *const c_int, n: c_long) -> &'a [c_int] {
    if p.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n as usize) }
}

fn call4(h: FHandler, x: Info) {
    let a = [
        i(x.mtype as c_long),
        i(to_long(x.count)),
        i(x.node as c_long),
        i(x.ptype as c_long),
    ];
    h(&a[0], &a[1], &a[2], &a[3]);
}

fn call5(h: FHandlerX, x: Info, hp: c_int) {
    let a = [
        i(x.mtype as c_long),
        i(to_long(x.count)),
        i(x.node as c_long),
        i(x.ptype as c_long),
        hp,
    ];
    h(&a[0], &a[1], &a[2], &a[3], &a[4]);
}

macro_rules! fortran_gop {
    ($($f:ident, $t:ty, |$a:ident, $b:ident| $e:expr;)*) => {$(
        #[doc = concat!("Fortran's `", stringify!($f), "`: `n` elements of `x`.")]
        /// # Safety
        /// Arguments by reference, valid as NX requires of its callers.
        #[no_mangle]
        pub unsafe extern "C" fn $f(x: *mut $t, n: I, _work: *mut $t) {
            // SAFETY: NX's contract: `n` points to the count and `x` holds that many.
            fatal(stringify!($f), || nx()?.gop(unsafe { elems(x, v(n)) }?, |$a: $t, $b: $t| $e));
        }
    )*};
}

fortran_gop! {
    gdsum_, f64, |a, b| a + b;
    gdprod_, f64, |a, b| a * b;
    gdhigh_, f64, |a, b| a.max(b);
    gdlow_, f64, |a, b| a.min(b);
    gssum_, f32, |a, b| a + b;
    gsprod_, f32, |a, b| a * b;
    gshigh_, f32, |a, b| a.max(b);
    gslow_, f32, |a, b| a.min(b);
    gisum_, c_int, |a, b| a.wrapping_add(b);
    giprod_, c_int, |a, b| a.wrapping_mul(b);
    gihigh_, c_int, |a, b| a.max(b);
    gilow_, c_int, |a, b| a.min(b);
    giand_, c_int, |a, b| a & b;
    gior_, c_int, |a, b| a | b;
    gixor_, c_int, |a, b| a ^ b;
}

macro_rules! fortran_glogical {
    ($($f:ident, |$a:ident, $b:ident| $e:expr;)*) => {$(
        #[doc = concat!("Fortran's `", stringify!($f), "`: `n` LOGICALs of `x`.")]
        /// # Safety
        /// Arguments by reference, valid as NX requires of its callers.
        #[no_mangle]
        pub unsafe extern "C" fn $f(x: *mut c_int, n: I, _work: *mut c_int) {
            // SAFETY: NX's contract: `n` points to the count and `x` holds that many.
            fatal(stringify!($f), || nx()?.glogical(unsafe { elems(x, v(n)) }?, |$a, $b| $e));
        }
    )*};
}

fortran_glogical! {
    gland_, |a, b| a && b;
    glor_, |a, b| a || b;
    glxor_, |a, b| a != b;
}

/// A Fortran string argument's text, blanks at the end removed.
///
/// # Safety
/// `s` NULL or valid for `len` bytes.
unsafe fn ftext(s: *const c_char, len: usize) -> std::ffi::CString {
    let b = if s.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(s.cast::<u8>(), len) }
    };
    let t = String::from_utf8_lossy(b).trim_end().to_string();
    std::ffi::CString::new(t).unwrap_or_default()
}

fortran! {
    fn nx_initve_(part: *const c_char, size: I, _acct: *const c_char, plen: usize, _alen: usize) -> c_int {
        let p = ftext(part, plen);
        let np = std::ptr::null_mut();
        i(super::spawn::nx_initve(p.as_ptr(), v(size), std::ptr::null(), np, std::ptr::null_mut()))
    }
    fn nx_nfork_(nodes: I, k: I, pt: I, pids: *mut c_int) -> c_int {
        let list: Vec<c_long> = ints(nodes, v(k)).iter().map(|&x| x as c_long).collect();
        let lp = if v(k) == -1 { std::ptr::null() } else { list.as_ptr() };
        let mut out = vec![0 as c_long; 4096];
        let r = super::spawn::nx_nfork(lp, v(k), v(pt), out.as_mut_ptr());
        if r > 0 && !pids.is_null() {
            for (j, &p) in out.iter().take(r as usize).enumerate() {
                *pids.add(j) = i(p);
            }
        }
        i(r)
    }
    fn nx_load_(nodes: I, k: I, pt: I, pids: *mut c_int, path: *const c_char, len: usize) -> c_int {
        let list: Vec<c_long> = ints(nodes, v(k)).iter().map(|&x| x as c_long).collect();
        let lp = if v(k) == -1 { std::ptr::null() } else { list.as_ptr() };
        let prog = ftext(path, len);
        let mut out = vec![0 as c_long; 4096];
        let r = super::spawn::nx_load(lp, v(k), v(pt), out.as_mut_ptr(), prog.as_ptr());
        if r > 0 && !pids.is_null() {
            for (j, &p) in out.iter().take(r as usize).enumerate() {
                *pids.add(j) = i(p);
            }
        }
        i(r)
    }
}

fortran! {
    fn hwclock_(t: *mut c_int) {
        // Two INTEGERs: the low and the high 32 bits of the tick count.
        let mut e = super::compat::Esize::default();
        super::compat::hwclock(&mut e);
        if !t.is_null() {
            *t = e.slow as u32 as c_int;
            *t.add(1) = e.shigh as c_int;
        }
    }
    fn nx_initve_rect_(
        part: *const c_char,
        anchor: I,
        rows: I,
        cols: I,
        _acct: *const c_char,
        plen: usize,
        _alen: usize,
    ) -> c_int {
        let p = ftext(part, plen);
        let np = std::ptr::null_mut();
        i(super::spawn::nx_initve_rect(p.as_ptr(), v(anchor), v(rows), v(cols), std::ptr::null(), np, std::ptr::null_mut()))
    }
    fn load_(path: *const c_char, node: I, pt: I, len: usize) -> c_int {
        i(super::spawn::load(ftext(path, len).as_ptr(), v(node), v(pt)))
    }
}

macro_rules! fortran_partition {
    ($($f:ident => $c:ident ( $($a:ident : $t:ty),* );)*) => {$(
        #[doc = concat!("Fortran's `", stringify!($f), "`: partitions do not exist here, EQNOTSUP (see nx.h).")]
        #[no_mangle]
        pub extern "C" fn $f($(_: $t),*) -> c_int {
            i(super::compat::nx_pri(0, 0))
        }
    )*};
}

fortran_partition! {
    nx_mkpart_ => nx_mkpart(p: *const c_char, size: I, sched: I, plen: usize);
    nx_mkpart_rect_ => nx_mkpart_rect(p: *const c_char, rows: I, cols: I, sched: I, plen: usize);
    nx_mkpart_map_ => nx_mkpart_map(p: *const c_char, k: I, nodes: I, sched: I, plen: usize);
    nx_rmpart_ => nx_rmpart(p: *const c_char, force: I, rec: I, plen: usize);
    nx_chpart_epl_ => nx_chpart_epl(p: *const c_char, epl: I, plen: usize);
    nx_chpart_mod_ => nx_chpart_mod(p: *const c_char, m: I, plen: usize);
    nx_chpart_name_ => nx_chpart_name(p: *const c_char, q: *const c_char, plen: usize, qlen: usize);
    nx_chpart_owner_ => nx_chpart_owner(p: *const c_char, o: I, g: I, plen: usize);
    nx_chpart_rq_ => nx_chpart_rq(p: *const c_char, rq: I, plen: usize);
    nx_chpart_sched_ => nx_chpart_sched(p: *const c_char, s: I, plen: usize);
    nx_pri_ => nx_pri(pg: I, pri: I);
}
