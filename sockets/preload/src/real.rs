//! The C library's own functions, found with `dlsym(RTLD_NEXT, ..)` on first use and cached
//! in an atomic: no lock and no allocation, so a hook may run before the constructor or in a
//! signal handler (DESIGN.md, "LD_PRELOAD in Rust").

use std::sync::atomic::{AtomicUsize, Ordering};

/// Looks `name` (NUL-terminated) up in the next object after this one; the result is cached
/// in `slot`. Aborts when the C library lacks it: every hooked function exists in glibc.
pub fn lookup(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated symbol name; RTLD_NEXT is a valid pseudo-handle.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        crate::fatal(b"vmmc_sockets: a hooked function is missing from the C library\n");
    }
    slot.store(p, Ordering::Relaxed);
    p
}

/// `real!(name: fn(args) -> ret)` is the C library's `name`, typed.
macro_rules! real {
    ($name:ident : fn($($t:ty),*) -> $r:ty) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
        // SAFETY: `p` is the address of the C function of that name, whose C signature
        // is the one written here.
        #[allow(unused_unsafe)]
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) };
        f
    }};
}
pub(crate) use real;
