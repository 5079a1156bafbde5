//! The one waiting policy of every library: spin while it pays, then yield, then sleep until
//! the writer rings.
//!
//! A VMMC receiver has no receive call: data lands in its memory and it polls a flag. Polling
//! is the fastest wait while the writer runs on another core, and the worst one when it does
//! not: a spinning waiter holds the core the writer needs until the scheduler's time slice
//! ends (milliseconds), the known failure of busy-polling MPI and libvma on machines with
//! more processes than cores. Every wait of the core and of the libraries above it (flag and
//! word waits, NX progress, RPC replies, socket reads and writes, SVM, the notification
//! thread) goes through [`Wait`], which moves through three phases:
//!
//! 1. **spin** while the wait is likely to end soon and the machine has a core for each
//!    process that runs: the budget adapts per thread to how long recent waits lasted, up to
//!    `VMMC_SPIN_US` (50 us by default);
//! 2. **yield** while processes outnumber cores (the launcher or the MPI launcher tells, see
//!    [`Policy`], or a spin finds itself descheduled), so that the writer gets the core (a
//!    helper thread's wait, such as a transport's notification thread, sleeps at once
//!    instead: [`Wait::helper`]);
//! 3. **sleep** on a futex: the process's [`Bell`] (every transport that delivers data into a
//!    process rings its bell after the data, when somebody sleeps), or a library's own (a
//!    socket ring's); the writer's wake-up is explicit, no periodic timer ends a sleep (a
//!    long safety bound only guards against a peer that dies silently).
//!
//! Settings: `VMMC_WAIT=auto|spin|yield|block` (`spin` is the old policy: spin, and yield
//! after 65,536 turns, never sleep; `yield` never sleeps, as Open MPI's
//! `mpi_yield_when_idle`; `block` sleeps after a few turns), `VMMC_SPIN_US` (the longest
//! spin). Under the simulated SHRIMP's pacer every turn simply lets virtual time advance.
//!
//! Each library names its waits by a [`Site`]; [`counts`] reports per site how many waits
//! went past their first turns and how many times they yielded or slept, which the tests use
//! to show that a library's waits take this path (`VMMC_WAIT_STATS=1` prints them to standard
//! error when the process exits).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How a wait behaves once its condition is false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Adapt to the machine (the default).
    Auto,
    /// Spin, yielding now and then; never sleep (the policy before this module).
    Spin,
    /// Spin briefly, then yield; never sleep.
    Yield,
    /// Spin a few turns, then sleep.
    Block,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "spin" => Ok(Mode::Spin),
            "yield" => Ok(Mode::Yield),
            "block" => Ok(Mode::Block),
            _ => Err(format!(
                "VMMC_WAIT={s:?}: expected one of auto, spin, yield, block"
            )),
        }
    }
}

/// The longest spin of `auto` unless `VMMC_SPIN_US` says otherwise.
const SPIN_MAX: Duration = Duration::from_micros(50);
/// The shortest spin the adaptive budget falls to.
const SPIN_MIN: Duration = Duration::from_micros(2);
/// How long an oversubscribed wait yields before it sleeps: a few scheduler turns of the
/// processes that share a core, so that a ring of processes passes its token by yielding (as
/// Open MPI's `--oversubscribe` does) while an idle job still sleeps within milliseconds.
const YIELD_FOR: Duration = Duration::from_millis(2);
/// Longest single sleep: a waiter re-checks its reasons to give up (a peer that died without
/// anybody ringing) at least this often.
const SLEEP_MAX: Duration = Duration::from_millis(50);
/// A gap this long between two looks at the clock while spinning means the spinner was
/// descheduled (see [`gap_seen`]).
const PREEMPTED: Duration = Duration::from_micros(500);
/// Two preemptions by another thread of this machine within this time make `auto` treat the
/// machine as crowded.
const STRIKES_WITHIN: Duration = Duration::from_millis(50);
/// Turns of a wait that only spin before the policy looks at the clock (about a
/// microsecond).
const QUICK: u32 = 32;
/// How long a detected preemption makes `auto` act as on an oversubscribed machine.
const BUSY_FOR: Duration = Duration::from_millis(200);

/// What the process knows of its machine and its settings.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The mode (`VMMC_WAIT`).
    pub mode: Mode,
    /// The longest spin (`VMMC_SPIN_US`).
    pub spin: Duration,
    /// Cores the job's processes on this host share: `VMMC_JOB_CPUS` (set by `vmmc-run`),
    /// else those this process may run on (under an MPI launcher, the host's online ones).
    pub cpus: usize,
    /// Processes of the job on this host, when known.
    pub local_procs: Option<usize>,
    /// The environment says the job is oversubscribed (Open MPI's `mpi_yield_when_idle`).
    pub marked: bool,
}

impl Policy {
    fn from_env() -> Policy {
        let mode = match std::env::var("VMMC_WAIT") {
            Ok(s) if !s.is_empty() => s.parse().unwrap_or_else(|e: String| {
                eprintln!("vmmc: {e}; using auto");
                Mode::Auto
            }),
            _ => Mode::Auto,
        };
        let spin = std::env::var("VMMC_SPIN_US")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(SPIN_MAX, Duration::from_micros);
        let local = [
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "MPI_LOCALNRANKS",
            "VMMC_LOCAL_PROCS",
        ]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse::<usize>().ok());
        let marked = std::env::var("OMPI_MCA_mpi_yield_when_idle").as_deref() == Ok("1");
        // A launcher that binds each rank to a core (vmmc-run, Open MPI by default) does so
        // only when the job's ranks fit the cores: the job's CPUs, not this rank's one, are
        // what the ranks share. vmmc-run says how many; under an MPI launcher, the host's.
        let cpus = match std::env::var("VMMC_JOB_CPUS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            Some(n) if n > 0 => n,
            _ if local.is_some() => cpus().max(online_cpus()),
            _ => cpus(),
        };
        Policy {
            mode,
            spin,
            cpus,
            local_procs: local,
            marked,
        }
    }

    /// Whether the job has more processes on this host than cores.
    pub fn oversubscribed(&self) -> bool {
        self.marked || self.local_procs.is_some_and(|n| n > self.cpus)
    }
}

fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

fn cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it for this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let n = libc::CPU_COUNT(&set);
            if n > 0 {
                return n as usize;
            }
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

static POLICY: OnceLock<Mutex<Policy>> = OnceLock::new();
/// Cached `oversubscribed()` of the policy, and the mode, for the hot path.
static OVER: AtomicBool = AtomicBool::new(false);
static MODE: AtomicU32 = AtomicU32::new(u32::MAX);
static SPIN_NS: AtomicU32 = AtomicU32::new(SPIN_MAX.as_nanos() as u32);
/// Until when (ns on [`clock`]) a spin saw itself descheduled.
static BUSY_UNTIL: AtomicU64 = AtomicU64::new(0);

fn policy_cell() -> &'static Mutex<Policy> {
    POLICY.get_or_init(|| {
        let p = Policy::from_env();
        publish(&p);
        if std::env::var_os("VMMC_WAIT_STATS").is_some_and(|v| v == "1") {
            extern "C" fn print_counts() {
                use std::io::Write;
                // One write, so that the lines of the job's processes do not interleave.
                let line = format!("{}\n", counts_line());
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            // SAFETY: registers a plain function with no captured state; it only reads atomics
            // and the sites' list.
            unsafe { libc::atexit(print_counts) };
        }
        Mutex::new(p)
    })
}

fn publish(p: &Policy) {
    OVER.store(p.oversubscribed(), Ordering::Relaxed);
    SPIN_NS.store(
        p.spin.as_nanos().min(u32::MAX as u128) as u32,
        Ordering::Relaxed,
    );
    MODE.store(p.mode as u32, Ordering::Relaxed);
}

/// The process's policy.
pub fn policy() -> Policy {
    policy_cell()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Tells the policy how many processes of the job share this host (the transport knows at
/// bootstrap); the environment's count, when set, wins.
pub fn set_local_procs(n: usize) {
    let mut p = policy_cell().lock().unwrap_or_else(|e| e.into_inner());
    if p.local_procs.is_none() {
        p.local_procs = Some(n);
    }
    publish(&p);
}

/// Overrides the mode for this process (benchmarks compare the modes in one run).
pub fn set_mode(mode: Mode) {
    let mut p = policy_cell().lock().unwrap_or_else(|e| e.into_inner());
    p.mode = mode;
    publish(&p);
}

fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        u32::MAX => policy_cell().lock().unwrap_or_else(|e| e.into_inner()).mode,
        0 => Mode::Auto,
        1 => Mode::Spin,
        2 => Mode::Yield,
        _ => Mode::Block,
    }
}

/// The host's monotonic clock in ns: the same in every process, so a ring's time written
/// by one process compares with a wait's start in another.
fn clock() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Whether `auto` currently treats the machine as having fewer cores than runnable
/// processes.
pub fn crowded() -> bool {
    OVER.load(Ordering::Relaxed) || clock() < BUSY_UNTIL.load(Ordering::Relaxed)
}

/// When the last preemption of a spinner by another runnable thread was seen (ns on
/// [`clock`]).
static LAST_STRIKE: AtomicU64 = AtomicU64::new(0);
/// Preemptions by other threads seen so far (statistics).
static STRIKES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The calling thread's involuntary context switches when it last looked.
    static SWITCHES: std::cell::Cell<i64> = const { std::cell::Cell::new(-1) };
}

/// A spin found a gap in its own progress. On a virtual machine the hypervisor takes the
/// virtual processor away now and then (steal time), which yielding cannot help: only a
/// preemption by another runnable thread of this system counts, as the thread's count of
/// involuntary context switches shows; two such within [`STRIKES_WITHIN`] make `auto` act
/// as on a crowded machine for [`BUSY_FOR`].
#[cold]
fn gap_seen(now: u64) {
    // SAFETY: a zeroed rusage is a valid out-parameter; RUSAGE_THREAD reports the caller.
    let n = unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut r) != 0 {
            return;
        }
        r.ru_nivcsw
    };
    let before = SWITCHES.with(|s| s.replace(n));
    if before < 0 || n <= before {
        return;
    }
    let prev = LAST_STRIKE.swap(now, Ordering::Relaxed);
    STRIKES.fetch_add(1, Ordering::Relaxed);
    if prev != 0 && now - prev.min(now) < STRIKES_WITHIN.as_nanos() as u64 {
        BUSY_UNTIL.store(now + BUSY_FOR.as_nanos() as u64, Ordering::Relaxed);
    }
}

// ----- futexes -----

/// Sleeps while `*word == expected`, at most `timeout` (a shared futex: the word may live in
/// memory shared between processes). Returns on wake-up, timeout, signal or value change.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid aligned u32 for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Wakes every waiter on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned u32 for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Orders a writer's earlier stores before its later loads, after a sequentially consistent
/// read-modify-write (a transfer's in-flight count): on x86-64 that instruction is already a
/// full barrier, elsewhere a fence is needed.
#[inline(always)]
pub fn fence_after_rmw() {
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

// ----- sleeping -----

/// Something a waiter can sleep on until a writer wakes it: an event count. The waiter
/// [arms](Sleep::arm) it, re-checks its condition, then [sleeps](Sleep::sleep) with the
/// token, which returns at once if a writer rang in between.
pub trait Sleep {
    /// Announces a sleeper; returns the token to sleep with.
    fn arm(&self) -> u64;
    /// Sleeps unless rung since `token`, at most `timeout`.
    fn sleep(&self, token: u64, timeout: Duration);
    /// Withdraws the announcement of [`Sleep::arm`].
    fn disarm(&self);
    /// When the last ring came, on the host's monotonic clock in ns (0: not known). A wait
    /// that slept measures its length up to there, not up to its wake-up, whose cost (tens
    /// of microseconds on a virtual machine) says nothing about how long a spin would
    /// have had to last.
    fn rung_at(&self) -> u64 {
        0
    }
}

/// A process's doorbell: an event count in memory that its writers can reach (shared memory
/// on shm). A writer rings it after its data is visible; the ring costs one load unless
/// somebody sleeps.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Bell {
    sleepers: AtomicU32,
    seq: AtomicU32,
    /// When the last ring that woke somebody came (see [`Sleep::rung_at`]).
    rung_at: AtomicU64,
}

impl Bell {
    /// A bell nobody sleeps on.
    pub const fn new() -> Bell {
        Bell {
            sleepers: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            rung_at: AtomicU64::new(0),
        }
    }

    /// Wakes the sleepers, if any, after the caller's stores. Full fence included.
    #[inline]
    pub fn ring(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.ring_ordered()
    }

    /// [`Bell::ring`] for a caller whose stores are already ordered before this load (see
    /// [`fence_after_rmw`]).
    #[inline]
    pub fn ring_ordered(&self) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        self.rung_at.store(clock(), Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(&self.seq);
        RINGS.fetch_add(1, Ordering::Relaxed);
    }

    /// How many threads sleep on it now.
    pub fn sleepers(&self) -> u32 {
        self.sleepers.load(Ordering::Relaxed)
    }
}

impl Sleep for Bell {
    fn arm(&self) -> u64 {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.seq.load(Ordering::SeqCst).into()
    }
    fn sleep(&self, token: u64, timeout: Duration) {
        futex_wait(&self.seq, token as u32, Some(timeout));
    }
    fn disarm(&self) {
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
    fn rung_at(&self) -> u64 {
        self.rung_at.load(Ordering::Relaxed)
    }
}

/// The sleep of a wait whose writer cannot ring (a reply another thread reads from a socket,
/// a listener's kernel queue): naps that double from 20 us to 1 ms.
pub struct Nap {
    next: std::cell::Cell<Duration>,
}

impl Nap {
    /// A fresh nap (its first sleep is the shortest).
    pub fn new() -> Nap {
        Nap {
            next: std::cell::Cell::new(Duration::from_micros(20)),
        }
    }
}

impl Default for Nap {
    fn default() -> Nap {
        Nap::new()
    }
}

impl Sleep for Nap {
    fn arm(&self) -> u64 {
        0
    }
    fn sleep(&self, _: u64, timeout: Duration) {
        let d = self.next.get();
        std::thread::sleep(d.min(timeout));
        self.next.set((d * 2).min(Duration::from_millis(1)));
    }
    fn disarm(&self) {}
}

static LOCAL_BELL: Bell = Bell::new();
static BELL: AtomicU64 = AtomicU64::new(0);
static RINGS: AtomicU64 = AtomicU64::new(0);

/// The process's bell: the one its transport rings when data arrives (see
/// [`install_bell`]), or a private one that only local writers ring.
pub fn bell() -> &'static Bell {
    match BELL.load(Ordering::Acquire) {
        0 => &LOCAL_BELL,
        // SAFETY: `install_bell`'s contract keeps the bell valid for the process's lifetime.
        p => unsafe { &*(p as *const Bell) },
    }
}

/// Makes `bell` the process's bell, if none is installed yet; returns whether it was
/// installed. A transport calls it with the bell that its writers ring (in shared memory).
///
/// # Safety
/// `bell` must stay valid for the rest of the process (a mapping never unmapped).
pub unsafe fn install_bell(bell: *const Bell) -> bool {
    BELL.compare_exchange(0, bell as u64, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Returns the process to its local bell (a transport leaving the process for good, whose
/// bell's memory is about to go: a ring after this reaches nobody, as none is needed).
pub fn uninstall_bell() {
    BELL.store(0, Ordering::Release);
}

/// Rings the process's own bell: for a local writer (a handler thread, a library's service
/// thread) that completes what a waiter of this process may sleep for.
#[inline]
pub fn ring_local() {
    bell().ring()
}

// ----- statistics -----

/// A place that waits, named for the statistics ([`counts`]).
pub struct Site {
    name: &'static str,
    listed: AtomicBool,
    waits: AtomicU64,
    yields: AtomicU64,
    sleeps: AtomicU64,
}

impl Site {
    /// A site called `name` ("nx", "sockets.read", ...).
    pub const fn new(name: &'static str) -> Site {
        Site {
            name,
            listed: AtomicBool::new(false),
            waits: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
        }
    }

    fn list(&'static self) {
        if !self.listed.load(Ordering::Relaxed) && !self.listed.swap(true, Ordering::AcqRel) {
            policy_cell();
            SITES.lock().unwrap_or_else(|e| e.into_inner()).push(self);
        }
    }
}

static SITES: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());

/// One site's counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteCount {
    /// The site's name.
    pub name: &'static str,
    /// Waits whose condition was false at the first look.
    pub waits: u64,
    /// Yields.
    pub yields: u64,
    /// Sleeps.
    pub sleeps: u64,
}

/// The counts of every site that waited in this process.
pub fn counts() -> Vec<SiteCount> {
    SITES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|s| SiteCount {
            name: s.name,
            waits: s.waits.load(Ordering::Relaxed),
            yields: s.yields.load(Ordering::Relaxed),
            sleeps: s.sleeps.load(Ordering::Relaxed),
        })
        .collect()
}

/// The counts as one line (`vmmc-wait: rings=N SITE=waits/yields/sleeps ...`), for
/// `VMMC_WAIT_STATS=1` and the tests' children.
pub fn counts_line() -> String {
    let mut v: Vec<String> = counts()
        .iter()
        .map(|c| format!("{}={}/{}/{}", c.name, c.waits, c.yields, c.sleeps))
        .collect();
    v.sort();
    let p = policy();
    format!(
        "vmmc-wait: rings={} preempted={} cpus={} local={} {}",
        RINGS.load(Ordering::Relaxed),
        STRIKES.load(Ordering::Relaxed),
        p.cpus,
        p.local_procs.unwrap_or(0),
        v.join(" ")
    )
}

// ----- a wait with its own loop -----

/// The policy for a wait that keeps its own loop and sleep (the interposer's `poll` and
/// `epoll_wait`, which sleep in the kernel on several descriptors at once): asked once per
/// turn whether the spin is over.
pub struct Spin {
    site: &'static Site,
    start: u64,
    last: u64,
    max: u64,
    turns: u32,
}

impl Spin {
    /// Starts a spin of at most `max` at `site` (counted as a wait).
    pub fn new(site: &'static Site, max: Duration) -> Spin {
        site.list();
        site.waits.fetch_add(1, Ordering::Relaxed);
        let now = clock();
        Spin {
            site,
            start: now,
            last: now,
            max: max.as_nanos() as u64,
            turns: 0,
        }
    }

    /// Whether to stop spinning and sleep: after `max`, at once where processes outnumber
    /// cores (or the spinner finds itself descheduled) or with `VMMC_WAIT=block`; never with
    /// `spin` or `yield`, which yield now and then instead.
    pub fn over(&mut self) -> bool {
        let now = clock();
        if now - self.last > PREEMPTED.as_nanos() as u64 {
            gap_seen(now);
        }
        self.last = now;
        self.turns = self.turns.wrapping_add(1);
        match mode() {
            Mode::Block => true,
            Mode::Spin | Mode::Yield => {
                if self.turns.is_multiple_of(64) {
                    self.site.yields.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
                false
            }
            Mode::Auto => crowded() || now - self.start >= self.max,
        }
    }

    /// Counts a sleep of this wait.
    pub fn slept(&self) {
        self.site.sleeps.fetch_add(1, Ordering::Relaxed);
    }
}

// ----- the wait -----

thread_local! {
    /// This thread's spin budget in ns (0: not set yet).
    static BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    First,
    Paced,
    Spin,
    Yield,
    Arm,
    Sleep,
}

/// One wait for a condition, driven by the caller's loop:
///
/// ```ignore
/// let mut w = Wait::new(&SITE);
/// while !ready() {
///     w.idle(); // spins, yields or sleeps on the process's bell
/// }
/// ```
///
/// After a turn that armed the sleep the caller must check its condition again before the
/// next turn sleeps, which the loop above does: a writer that made the condition true after
/// the check rings the bell and the sleep returns at once.
pub struct Wait<'a> {
    site: &'static Site,
    on: &'a dyn Sleep,
    phase: Phase,
    start: u64,
    last: u64,
    turns: u32,
    token: u64,
    slept: bool,
    budget: Option<(&'a AtomicU32, u32)>,
    paced: bool,
    deadline: Option<Instant>,
    background: bool,
    helper: bool,
}

impl Wait<'static> {
    /// A wait at `site` that sleeps on the process's [`bell`].
    #[inline]
    pub fn new(site: &'static Site) -> Wait<'static> {
        Wait::on(site, bell())
    }
}

impl<'a> Wait<'a> {
    /// A wait at `site` that sleeps on `on` (a library's own event count).
    #[inline]
    pub fn on(site: &'static Site, on: &'a dyn Sleep) -> Wait<'a> {
        Wait {
            site,
            on,
            phase: Phase::First,
            start: 0,
            last: 0,
            turns: 0,
            token: 0,
            slept: false,
            budget: None,
            paced: false,
            deadline: None,
            background: false,
            helper: false,
        }
    }

    /// Keeps the adaptive spin budget (ns) in `budget`, for a wait whose length depends on
    /// what it waits for (a connection's direction) rather than on the thread, with `max` its
    /// upper bound instead of `VMMC_SPIN_US`.
    pub fn spin_budget(mut self, budget: &'a AtomicU32, max: Duration) -> Self {
        self.budget = Some((budget, max.as_nanos().min(u32::MAX as u128) as u32));
        self
    }

    /// Marks the wait as a background thread's (a notification thread's), which sleeps
    /// under `VMMC_WAIT=spin` too, as it did before the policy: only program threads spin
    /// forever in that mode.
    pub fn background(mut self) -> Self {
        self.background = true;
        self
    }

    /// Marks the wait as a helper thread's, which runs beside the program's threads (a
    /// transport's notification thread): as [`Wait::background`], and where processes
    /// outnumber cores it sleeps at once rather than yield. A yield hands the core to a
    /// runnable thread and takes it back a turn later; a helper that yields after each of
    /// its events takes turns from the program threads of its own process, which are
    /// waiting for the peer on that core too. Measured, SVM with 4 processes on 2 cores:
    /// a notification thread that served a lock request during the holder's computation
    /// then yielded for its 2 ms (`YIELD_FOR`), and the hand-over that followed took
    /// 3.3-5.8 us (median of 700) where an NX message to a waiting `crecv` took 1.0-2.7;
    /// sleeping at once, 2.1-2.6 us against 1.5-1.8. The price: a notification that comes
    /// while the helper sleeps costs its sender a wake-up; the contended lock ping-pong,
    /// whose requests come microseconds apart, took 1.7-2.3 us a hand-over in `bench-svm`
    /// where it took 1.3-1.7, and `bench-oversubscribe`'s NX ring, VRPC and interposed
    /// redis figures moved within their run-to-run spread.
    pub fn helper(mut self) -> Self {
        self.background = true;
        self.helper = true;
        self
    }

    fn mode(&self) -> Mode {
        match mode() {
            Mode::Spin if self.background => Mode::Auto,
            m => m,
        }
    }

    /// Bounds each sleep so that it ends by `timeout` from now (the caller's loop still
    /// decides when the wait as a whole times out). A timeout too long for the clock bounds
    /// nothing.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self
    }

    /// Whether the wait is past its spin (yielding, sleeping, or paced): a loop then checks
    /// its slower reasons to give up (a dead peer) at every turn rather than now and then.
    #[inline]
    pub fn resting(&self) -> bool {
        !matches!(self.phase, Phase::First | Phase::Spin)
    }

    /// Whether the wait is yielding its core (processes outnumber cores, and it has not
    /// slept yet): the one it waits for may simply not have run yet, which a notification
    /// would not change.
    #[inline]
    pub fn yielding(&self) -> bool {
        self.phase == Phase::Yield
    }

    /// Whether the wait slept at least once.
    pub fn slept(&self) -> bool {
        self.slept
    }

    /// One turn of the caller's loop, whose condition is false.
    #[inline]
    pub fn idle(&mut self) {
        match self.phase {
            // The first turns of a wait only spin (no clock, no counting), so that the short
            // waits of a ping-pong cost what a bare poll costs; a pacer must see every turn.
            Phase::First
                if self.turns < QUICK
                    && !OVER.load(Ordering::Relaxed)
                    && (self.turns > 0 || !crate::pace::is_paced()) =>
            {
                self.turns += 1;
                std::hint::spin_loop();
                return;
            }
            Phase::Spin => {
                self.turns = self.turns.wrapping_add(1);
                if !self.turns.is_multiple_of(16) {
                    std::hint::spin_loop();
                    return;
                }
            }
            _ => {}
        }
        self.turn()
    }

    #[inline(never)]
    fn turn(&mut self) {
        match self.phase {
            Phase::First => self.begin(),
            // Under a pacer every turn waits for an event in virtual time.
            Phase::Paced => crate::pace::relax(&mut 0),
            Phase::Spin => self.spin(),
            Phase::Yield => {
                self.site.yields.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
                if self.mode() != Mode::Yield
                    && clock().saturating_sub(self.start) > YIELD_FOR.as_nanos() as u64
                {
                    self.phase = Phase::Arm;
                }
            }
            Phase::Arm => {
                self.token = self.on.arm();
                self.phase = Phase::Sleep;
            }
            Phase::Sleep => {
                self.site.sleeps.fetch_add(1, Ordering::Relaxed);
                self.slept = true;
                let t = self.deadline.map_or(SLEEP_MAX, |d| {
                    d.saturating_duration_since(Instant::now()).min(SLEEP_MAX)
                });
                self.on.sleep(self.token, t);
                self.on.disarm();
                self.phase = Phase::Arm;
            }
        }
    }

    fn begin(&mut self) {
        self.site.list();
        self.site.waits.fetch_add(1, Ordering::Relaxed);
        if crate::pace::is_paced() {
            self.paced = true;
            self.phase = Phase::Paced;
            crate::pace::relax(&mut 0);
            return;
        }
        self.start = clock();
        self.last = self.start;
        self.phase = match self.mode() {
            Mode::Block => Phase::Arm,
            // Where processes outnumber cores, the one we wait for may need this core: give
            // it up from the first turn, as Open MPI does when oversubscribed.
            Mode::Auto if crowded() && self.helper => Phase::Arm,
            Mode::Auto if crowded() => Phase::Yield,
            _ => Phase::Spin,
        };
    }

    fn spin(&mut self) {
        let now = clock();
        if now - self.last > PREEMPTED.as_nanos() as u64 {
            gap_seen(now);
        }
        self.last = now;
        let spent = now - self.start;
        match self.mode() {
            Mode::Spin => {
                if self.turns > 1 << 16 && self.turns.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
            Mode::Yield => {
                if spent > SPIN_MIN.as_nanos() as u64 {
                    self.phase = Phase::Yield;
                }
            }
            Mode::Block => self.phase = Phase::Arm,
            Mode::Auto => {
                if crowded() && self.helper {
                    self.phase = Phase::Arm;
                } else if crowded() {
                    self.phase = Phase::Yield;
                } else if spent > self.spin_ns() as u64 {
                    self.phase = Phase::Arm;
                }
            }
        }
    }
}

impl Wait<'_> {
    fn spin_ns(&self) -> u32 {
        match self.budget {
            Some((b, max)) => b.load(Ordering::Relaxed).min(max),
            None => budget(),
        }
    }
}

fn budget() -> u32 {
    BUDGET.with(|b| match b.get() {
        0 => {
            let v = SPIN_NS.load(Ordering::Relaxed);
            b.set(v);
            v
        }
        v => v,
    })
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.phase == Phase::Sleep {
            self.on.disarm();
        }
        if self.phase == Phase::First || self.paced {
            return;
        }
        // Adapt the spin: a wait that slept and ended within a longest spin (and a quarter)
        // would have paid to spin longer; one that slept longer would have wasted the spin.
        // Measured against the longest spin, not the current one, so that a budget fallen to
        // the minimum climbs back when the waits shorten (a ping-pong whose both sides sleep
        // stays asleep otherwise: each waits for the other's wake-up). The wait ends at the
        // ring that woke it where the sleep knows it (see `Sleep::rung_at`).
        if self.slept && self.mode() == Mode::Auto && !crowded() {
            let now = clock();
            let rung = self.on.rung_at();
            let end = if (self.start..=now).contains(&rung) {
                rung
            } else {
                now
            };
            let took = end - self.start;
            let max = match self.budget {
                Some((_, max)) => max,
                None => SPIN_NS.load(Ordering::Relaxed),
            };
            let min = (SPIN_MIN.as_nanos() as u32).min(max);
            let cur = self.spin_ns();
            let next = if took < max as u64 + max as u64 / 4 {
                cur.saturating_mul(2)
            } else {
                cur / 2
            }
            .clamp(min, max);
            match self.budget {
                Some((b, _)) => b.store(next, Ordering::Relaxed),
                None => BUDGET.with(|b| b.set(next)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    static T: Site = Site::new("test.wait");
    /// The tests that set the process's mode take turns.
    static MODE_LOCK: Mutex<()> = Mutex::new(());

    #[test]
    fn a_timeout_too_long_for_the_clock_bounds_nothing() {
        let w = Wait::new(&T).timeout(Some(Duration::MAX));
        assert_eq!(w.deadline, None);
        let w = Wait::new(&T).timeout(Some(Duration::from_secs(1)));
        assert!(w.deadline.is_some());
        assert_eq!(
            crate::pace::deadline_after(Some(Duration::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(crate::pace::deadline_after(None), None);
    }

    #[test]
    fn a_sleeping_waiter_wakes_when_the_writer_rings() {
        let _m = MODE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        set_mode(Mode::Block);
        let bell = Arc::new(Bell::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (b, f) = (bell.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            let mut w = Wait::on(&T, &*b);
            while f.load(Ordering::Acquire) == 0 {
                w.idle();
            }
            w.slept()
        });
        while bell.sleepers() == 0 {
            std::thread::yield_now();
        }
        flag.store(1, Ordering::Release);
        bell.ring();
        assert!(h.join().unwrap(), "the waiter slept");
        let c = counts()
            .into_iter()
            .find(|c| c.name == "test.wait")
            .unwrap();
        assert!(c.waits >= 1 && c.sleeps >= 1, "{c:?}");
        assert_eq!(bell.sleepers(), 0);
        set_mode(Mode::Auto);
    }

    /// A bell whose sleeper wakes late, as a descheduled thread on a busy virtual machine.
    struct LateBell(Bell);

    impl Sleep for LateBell {
        fn arm(&self) -> u64 {
            self.0.arm()
        }
        fn sleep(&self, token: u64, timeout: Duration) {
            self.0.sleep(token, timeout);
            std::thread::sleep(Duration::from_millis(60));
        }
        fn disarm(&self) {
            self.0.disarm()
        }
        fn rung_at(&self) -> u64 {
            self.0.rung_at()
        }
    }

    #[test]
    fn a_late_wake_up_does_not_shorten_the_spin() {
        // The ring comes soon after the sleep began, but the sleeper wakes 60 ms later: the
        // wait ended at the ring, within the longest spin (20 ms here), so the budget grows.
        // Measured up to the wake-up it would have halved.
        let _m = MODE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        set_mode(Mode::Auto);
        for _attempt in 0..5 {
            let bell = Arc::new(LateBell(Bell::new()));
            let flag = Arc::new(AtomicU32::new(0));
            let budget = Arc::new(AtomicU32::new(SPIN_MIN.as_nanos() as u32));
            let (b, f, g) = (bell.clone(), flag.clone(), budget.clone());
            let h = std::thread::spawn(move || {
                let mut w = Wait::on(&T, &*b).spin_budget(&g, Duration::from_millis(20));
                while f.load(Ordering::Acquire) == 0 {
                    w.idle();
                }
                let slept = w.slept();
                drop(w);
                (slept, crowded())
            });
            while bell.0.sleepers() == 0 {
                std::thread::yield_now();
            }
            flag.store(1, Ordering::Release);
            bell.0.ring();
            let (slept, crowded) = h.join().unwrap();
            if !slept || crowded {
                continue; // the policy did not adapt this time (a busy machine): again
            }
            assert!(
                budget.load(Ordering::Relaxed) > SPIN_MIN.as_nanos() as u32,
                "the budget did not grow: {} ns",
                budget.load(Ordering::Relaxed)
            );
            return;
        }
        panic!("no attempt slept on a machine that was not crowded");
    }

    #[test]
    fn modes_parse_and_bad_values_are_named() {
        assert_eq!("block".parse::<Mode>(), Ok(Mode::Block));
        assert!("fast".parse::<Mode>().unwrap_err().contains("VMMC_WAIT"));
    }
}
