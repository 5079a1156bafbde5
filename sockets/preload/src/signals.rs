//! Signals that interrupt a blocking call on a VMMC connection, as the kernel's do.
//!
//! A blocking read, write, `poll`, `select` or `epoll_wait` that waits in a connection's
//! rings makes no system call while it spins, so the kernel cannot end it with `EINTR` when
//! a handler runs. The hooks of `sigaction`, `signal` and its relatives install
//! the program's handler behind a trampoline that counts, per thread, the handlers that ran
//! on that thread: all of them ([`handled`]), and those installed without `SA_RESTART`
//! ([`interrupting`]). A wait that sees a count change ends as the kernel's would
//! (signal(7)): a read or write interrupted by a handler without `SA_RESTART` fails with
//! `EINTR` (a write that moved some bytes returns their count; one whose handler has
//! `SA_RESTART` goes on waiting), and `poll`, `select` and `epoll_wait` fail with `EINTR`
//! whatever the handler's flags. A wait that sleeps sees the count when its sleep ends, at
//! most [`sockets::ring::MAX_SLEEP`] later. `signal`'s other names (`bsd_signal`,
//! `ssignal`), `__sysv_signal` (what `signal` is in strict ISO C programs), `sigset` and
//! `siginterrupt` are hooked too: glibc's own go to its `sigaction` by an internal path no
//! hook sees.
//!
//! What the program sees of its handlers is unchanged: `sigaction` reports the handler and
//! flags it installed, and the handler is called with the arguments its flags ask for.
//! `SIG_DFL` and `SIG_IGN` go to the C library untouched.

use crate::real::real;
use libc::{c_int, c_void, sighandler_t, siginfo_t};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Signals 1 to 64 (the kernel's `_NSIG` is 65).
const SIGNALS: usize = 65;

/// The program's handler for one signal and its flags, under a sequence lock: a writer
/// makes the sequence odd, stores, and makes it even, with every signal blocked on its
/// thread (so no handler of its own thread can find the slot half written) and other
/// writers of the slot kept out; a trampoline reads until it sees the same even sequence
/// before and after. No allocation and no lock a handler could wait on for long (DESIGN.md:
/// hooks may run inside signal handlers, and `sigaction` is one a handler may call).
struct Slot {
    seq: AtomicU32,
    writing: AtomicBool,
    handler: AtomicUsize,
    flags: AtomicI32,
}

static TABLE: [Slot; SIGNALS] = [const {
    Slot {
        seq: AtomicU32::new(0),
        writing: AtomicBool::new(false),
        handler: AtomicUsize::new(0),
        flags: AtomicI32::new(0),
    }
}; SIGNALS];

impl Slot {
    /// The handler and flags (handler 0: none installed through the library).
    fn get(&self) -> (sighandler_t, c_int) {
        loop {
            let before = self.seq.load(Ordering::SeqCst);
            if before.is_multiple_of(2) {
                let h = self.handler.load(Ordering::SeqCst);
                let f = self.flags.load(Ordering::SeqCst);
                if self.seq.load(Ordering::SeqCst) == before {
                    return (h, f);
                }
            }
            // Another thread is writing, a few stores away (it may have lost its core).
            std::thread::yield_now();
        }
    }

    /// Publishes a handler and its flags; returns the ones it replaces.
    fn set(&self, handler: sighandler_t, flags: c_int) -> (sighandler_t, c_int) {
        // SAFETY: plain data, filled by sigfillset; the masks are valid sets.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sets.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        }
        while self
            .writing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        self.seq.fetch_add(1, Ordering::SeqCst);
        let was = (
            self.handler.swap(handler, Ordering::SeqCst),
            self.flags.swap(flags, Ordering::SeqCst),
        );
        self.seq.fetch_add(1, Ordering::SeqCst);
        self.writing.store(false, Ordering::Release);
        // SAFETY: the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        was
    }
}

thread_local! {
    /// Handlers that ran on this thread: (all, installed without `SA_RESTART`). The
    /// library is loaded at start, so its thread-locals are in the static TLS block and a
    /// handler reaches them without allocating.
    static COUNTS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Handlers that ran on this thread so far (`poll`'s and `epoll_wait`'s interruptions).
pub fn handled() -> u64 {
    COUNTS.with(|c| c.get().0)
}

/// Handlers installed without `SA_RESTART` that ran on this thread so far (a read's and a
/// write's interruptions).
pub fn interrupting() -> u64 {
    COUNTS.with(|c| c.get().1)
}

/// Runs in place of every handler the program installs.
extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(slot) = usize::try_from(sig).ok().and_then(|s| TABLE.get(s)) else {
        return;
    };
    let (handler, flags) = slot.get();
    if handler == 0 || is_ours(handler) {
        return;
    }
    COUNTS.with(|c| {
        let (all, hard) = c.get();
        let hard = hard + u64::from(flags & libc::SA_RESTART == 0);
        c.set((all + 1, hard));
    });
    // SAFETY: the program installed this function with these flags, which say its type.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = std::mem::transmute(handler);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}

fn is_ours(handler: sighandler_t) -> bool {
    handler == trampoline as *const () as sighandler_t
}

/// What the program installed, in place of the trampoline, in `old` (from the C library).
fn restore(sig: usize, old: &mut libc::sigaction) {
    if !is_ours(old.sa_sigaction) {
        return;
    }
    let (handler, flags) = TABLE[sig].get();
    if handler != 0 {
        old.sa_sigaction = handler;
        old.sa_flags = flags;
    }
}

/// `sigaction(2)` with the program's handlers behind the trampoline.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub unsafe fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let real = real!(sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int);
    let slot = usize::try_from(sig).ok().filter(|&s| s > 0 && s < SIGNALS);
    // SAFETY: the caller's pointers.
    let (Some(s), Some(new)) = (slot, unsafe { act.as_ref() }) else {
        // A query, or a signal the kernel will refuse.
        // SAFETY: the caller's arguments.
        let r = unsafe { real(sig, act, old) };
        // SAFETY: the caller's pointer, null or valid.
        if let (0, Some(s), Some(o)) = (r, slot, unsafe { old.as_mut() }) {
            restore(s, o);
        }
        return r;
    };
    crate::register();
    if new.sa_sigaction == libc::SIG_DFL || new.sa_sigaction == libc::SIG_IGN {
        // SAFETY: the caller's arguments.
        let r = unsafe { real(sig, act, old) };
        // SAFETY: the caller's pointer, null or valid.
        if let (0, Some(o)) = (r, unsafe { old.as_mut() }) {
            restore(s, o);
        }
        return r;
    }
    // A program that hands back the trampoline (an address it learnt through a query the
    // hooks did not see) keeps the handler it had, with the flags it gives now.
    let handler = if is_ours(new.sa_sigaction) {
        match TABLE[s].get() {
            (0, _) => libc::SIG_DFL,
            (h, f) => {
                let mut act = *new;
                act.sa_sigaction = h;
                act.sa_flags = (new.sa_flags & !libc::SA_SIGINFO) | (f & libc::SA_SIGINFO);
                // SAFETY: a valid structure; the caller's `old`.
                return unsafe { sigaction(sig, &act, old) };
            }
        }
    } else {
        new.sa_sigaction
    };
    if handler == libc::SIG_DFL {
        let mut act = *new;
        act.sa_sigaction = handler;
        // SAFETY: a valid structure; the caller's `old`.
        return unsafe { sigaction(sig, &act, old) };
    }
    // Published before the trampoline is installed, so that it always finds the handler.
    let before = TABLE[s].set(handler, new.sa_flags);
    let mut ours = *new;
    ours.sa_sigaction = trampoline as *const () as sighandler_t;
    ours.sa_flags |= libc::SA_SIGINFO;
    // SAFETY: plain data; zero is a valid initial state.
    let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid structures.
    let r = unsafe { real(sig, &ours, &mut prev) };
    if r != 0 {
        // Refused: the table says what is installed again.
        TABLE[s].set(before.0, before.1);
        return r;
    }
    if is_ours(prev.sa_sigaction) && before.0 != 0 {
        (prev.sa_sigaction, prev.sa_flags) = before;
    }
    // SAFETY: the caller's pointer, null or valid.
    if let Some(o) = unsafe { old.as_mut() } {
        *o = prev;
    }
    0
}

/// Signals that `siginterrupt(sig, 1)` set to interrupt system calls: `signal` installs
/// their handlers without `SA_RESTART`, as glibc's does.
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// The flags glibc's `signal` (BSD semantics) gives `sig`'s handler.
pub fn bsd_flags(sig: c_int) -> c_int {
    let interrupts = u32::try_from(sig)
        .ok()
        .filter(|&s| s < 64)
        .is_some_and(|s| INTERRUPTS.load(Ordering::Relaxed) & (1 << s) != 0);
    if interrupts {
        0
    } else {
        libc::SA_RESTART
    }
}

/// `siginterrupt(3)`: whether `sig`'s handler interrupts system calls (`flag` != 0) or lets
/// them restart, now and for the handlers `signal` installs later.
pub fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    let Some(bit) = u32::try_from(sig).ok().filter(|&s| s > 0 && s < 64) else {
        crate::set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: zeroed plain data, then a query into it.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query into a valid structure.
    if unsafe { sigaction(sig, std::ptr::null(), &mut act) } != 0 {
        return -1;
    }
    if flag != 0 {
        INTERRUPTS.fetch_or(1 << bit, Ordering::Relaxed);
        act.sa_flags &= !libc::SA_RESTART;
    } else {
        INTERRUPTS.fetch_and(!(1 << bit), Ordering::Relaxed);
        act.sa_flags |= libc::SA_RESTART;
    }
    // SAFETY: the structure the query filled, with new flags.
    unsafe { sigaction(sig, &act, std::ptr::null_mut()) }
}

/// `SIG_HOLD` of `sigset(3)`.
const SIG_HOLD: sighandler_t = 2;

/// `sigset(3)` (System V): installs `disp` with no flags and unblocks `sig`, or with
/// `SIG_HOLD` blocks it; returns the previous disposition (`SIG_HOLD` if it was blocked).
pub fn sigset(sig: c_int, disp: sighandler_t) -> sighandler_t {
    // SAFETY: plain data, filled below.
    let mut one: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut was: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sets.
    if unsafe { libc::sigemptyset(&mut one) } != 0 || unsafe { libc::sigaddset(&mut one, sig) } != 0
    {
        return libc::SIG_ERR;
    }
    // SAFETY: zeroed plain data.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let r = if disp == SIG_HOLD {
        // SAFETY: a query into a valid structure.
        unsafe { sigaction(sig, std::ptr::null(), &mut old) }
    } else {
        // SAFETY: zeroed plain data, then valid structures.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = disp;
        // SAFETY: a valid set.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: valid structures.
        unsafe { sigaction(sig, &act, &mut old) }
    };
    if r != 0 {
        return libc::SIG_ERR;
    }
    let how = if disp == SIG_HOLD {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: valid sets.
    unsafe { libc::pthread_sigmask(how, &one, &mut was) };
    // SAFETY: a valid set.
    if unsafe { libc::sigismember(&was, sig) } == 1 {
        SIG_HOLD
    } else {
        old.sa_sigaction
    }
}

/// In a child after `fork`: a slot another thread of the parent was writing is left as it
/// is, unlocked (its writer does not exist in the child).
pub extern "C" fn after_fork_in_child() {
    for slot in &TABLE {
        if slot.writing.load(Ordering::Relaxed) {
            if !slot.seq.load(Ordering::Relaxed).is_multiple_of(2) {
                slot.seq.fetch_add(1, Ordering::Relaxed);
            }
            slot.writing.store(false, Ordering::Relaxed);
        }
    }
}

/// `signal(3)` and its relatives: `flags` are the ones the C library gives them (glibc's
/// `signal` and `bsd_signal`: [`bsd_flags`]; `sysv_signal`: `SA_RESETHAND | SA_NODEFER`).
pub fn install(sig: c_int, handler: sighandler_t, flags: c_int) -> sighandler_t {
    // SAFETY: plain data; zero is a valid initial state.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: a valid, empty set.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: zeroed plain data.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid structures.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// The signal mask of a `ppoll`, `pselect` or `epoll_pwait` call, set for as long as it
/// lives (the waits in the rings included), and the thread's own put back after it, with
/// `errno` kept.
pub struct MaskFor(Option<libc::sigset_t>);

impl MaskFor {
    /// Sets `mask` (null: nothing changes).
    pub fn call(mask: *const libc::sigset_t) -> MaskFor {
        if mask.is_null() {
            return MaskFor(None);
        }
        // SAFETY: plain data, filled by the call.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `mask` is the caller's valid set; `old` a valid one.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
        MaskFor(Some(old))
    }
}

impl Drop for MaskFor {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let e = crate::errno();
            // SAFETY: the set saved by `call`. Signals it unblocks are delivered here, after
            // the call's result, as after the kernel's.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
            crate::set_errno(e);
        }
    }
}
