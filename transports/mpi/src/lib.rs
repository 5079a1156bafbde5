//! # vmmc-mpi: the MPI transport (hosts under an MPI job)
//!
//! The job is an MPI job: `mpirun -n N prog` (or `vmmc-run --transport mpi`, which runs
//! mpirun) starts it, and every rank is an MPI process with `MPI_THREAD_MULTIPLE`. Data moves
//! by MPI-3 one-sided operations, in one long passive epoch per window
//! (`MPI_Win_lock_all(MPI_MODE_NOCHECK)` when the window is made; windows live as long as
//! the process):
//!
//! - **export** makes the receive buffer reachable in a window: a buffer allocated through
//!   the endpoint (`Endpoint::alloc`, which libraries use) already lies in this rank's part
//!   of the *pool*, a window made with `MPI_Win_allocate` at start (`VMMC_MPI_POOL` bytes,
//!   64 MiB by default); any other memory is attached to the job's dynamic window
//!   (`MPI_Win_attach`). The key handed to importers says which window and carries the
//!   displacement (the pool offset, or the address as `MPI_Get_address` gives it).
//! - **deliberate update** is `MPI_Put` + `MPI_Win_flush`: the body, a flush, then the last
//!   word and a flush, so that a receiver who sees the last word sees every byte of the
//!   message (MPI orders no two puts by itself). The send returns with the data visible.
//!   When the whole job shares one node, the pool is an `MPI_Win_allocate_shared` window
//!   instead, every rank's part mapped in every rank (`MPI_Win_shared_query`), the node-local
//!   load/store access that MPI-3 added shared windows for (OSHMPI and MPI's own
//!   shared-memory window component work so): a deliberate update into a pool buffer is
//!   then a copy of the body and a release store of the last word into it, as the shm
//!   transport's writers do ([`RmaStats::stores`]), and a remote read from one is a copy
//!   ([`RmaStats::loads`]). `VMMC_MPI_DIRECT=0` keeps the puts (`MPI_Win_allocate`) on one
//!   node too. Nothing in the protection changes: a put already reaches the whole window,
//!   so in both cases the permission check is the import (rank 0's registry) and the bounds
//!   check the core's, made in the sender; what is revoked by unexport stays refused
//!   (every store runs inside the link's guard, as a put does).
//! - **remote read** is `MPI_Get` + flush.
//! - **notification**: after the flush, a message on the pair's control connection names the
//!   export, the offset and the value of the last word; the receiver's progress engine checks
//!   it against its exports (key, permission, bounds) and turns it into the core's
//!   notification. Without a notification, a sender wakes a receiver that sleeps waiting
//!   for data (`vmmc::wait`) by ringing its doorbell (`vmmc::wait::Bell`), which lives in a
//!   small window of its own. When the whole job shares one node that window is made with
//!   `MPI_Win_allocate_shared`, every rank's doorbell is mapped in every rank, and a sender
//!   rings it itself after its data, as the shm transport's writers do: a fence and a load of
//!   the sleeper count, and a futex wake only if somebody sleeps ([`RmaStats::rings`]).
//!   Across nodes the window is `MPI_Win_allocate`d, the sender reads the sleeper count with
//!   one `MPI_Get` after its data, and a sleeping receiver is rung by the same message as a
//!   notification, without the flag.
//! - **automatic update** is the core's emulation (combined stores sent as deliberate
//!   updates); redirectable buffers (seed 004's transfer redirection) are written through
//!   the control connection, since their data must be placed by the receiver; when a sender
//!   switches from that path back to puts it first fences the control connection, so writes
//!   stay in order per receiving process.
//! - **unexport** revokes the key: every peer's progress engine marks its links dead and
//!   waits for its puts under way through them, answers a fence, and only then is the buffer
//!   detached (`MPI_Win_detach`, for attached memory). After unexport returns nothing more
//!   is written.
//!
//! The trusted party is rank 0: it hosts the tcp transport's rendezvous (the export table,
//! the permission check at import, identities, who left), whose address it broadcasts with
//! `MPI_Bcast`; every rank also holds the tcp transport's connections, which carry the
//! notifications above and tell a rank that a peer died (`PeerLost`) — something Open MPI
//! itself does not report (it aborts the job, unless run with `--enable-recovery`), and its
//! blocking receives spin, which the idle job must not.
//!
//! ## Spawning (`vmmc_Spawn`, seed 004)
//! A process grows the job with `MPI_Comm_spawn`, by itself (over `MPI_COMM_SELF`), of one
//! process on the named host (info key "host"; a loopback address, which names this host in
//! a job on one host, becomes this host's name): the MPI launcher starts it. Rank 0's
//! rendezvous only reserves its rank in the job ([`vmmc_tcp::server::Rendezvous::set_spawn_by_requester`]);
//! the spawner sends it that rank, its parent's identity and the rendezvous's address over
//! their intercommunicator, the two merge it (`MPI_Intercomm_merge`) and allocate a window
//! over the result, and the new process joins the control plane as the tcp transport's
//! spawned processes do: it gets a new squid, every process connects to it, and it
//! exports, imports, writes, notifies and is lost like any rank. Its `MPI_COMM_WORLD` holds it
//! alone, so its data paths are:
//!
//! | from → to | path |
//! |---|---|
//! | spawner → spawned, into its pool buffers | `MPI_Put` + flush, `MPI_Get`, in the pair's window |
//! | spawned → anybody, anybody else → spawned, spawner → other memory of the spawned | the control plane's TCP connection (the tcp transport's data path) |
//!
//! The spawned process's part of the pair's window holds its doorbell and its pool (from
//! which its endpoint's allocations come, `VMMC_MPI_POOL` bytes). Nothing of the spawner's
//! lies in a window the spawned process shares: its buffers are in its own job's windows, and
//! Open MPI 4.1 refuses a dynamic window over a communicator that spans two jobs
//! (`MPI_Win_create_dynamic` fails with `MPI_ERR_WIN`, measured, also from C), which is what
//! exposing them would take. [`RmaStats::fallback_writes`] counts the deliberate updates that
//! took the TCP path for that reason; remote read over it is refused
//! ([`Error::Unsupported`]): the transport announces native remote read, which it has only
//! through a window.
//!
//! Open MPI 4.1's `MPI_Comm_spawn` is fragile, and the transport works around what it can:
//! after one failed spawn every later one ends the job, and a program its daemon cannot
//! start ends it too, so a host name that does not resolve and a program missing on this
//! host are refused before MPI is asked (a resolvable host outside mpirun's allocation still
//! fails the spawn, and then the job). At exit a spawner and its spawned process free their
//! window and merged communicator and then both disconnect their intercommunicator
//! (`MPI_Comm_disconnect`) before `MPI_Finalize`: without that, Open MPI 4.1 lets the
//! spawned process finalise and exit while its spawner's TCP BTL still writes to it, and the
//! spawner's `MPI_Finalize` then never returns (see `Connection`). MPICH 4.0 here cannot
//! spawn at all (its `MPI_Comm_spawn` fails inside Hydra, also from C): the spawn then fails
//! with MPI's error.
//!
//! ## `MPI_Win_allocate` or `MPI_Win_create_dynamic`
//! Measured here (Open MPI 4.1.4, 2 ranks on one host, `osu_put_latency`'s loop of
//! `MPI_Put` + `MPI_Win_flush`, the target outside MPI):
//!
//! | window | 8 B | 4 KiB | 1 MiB | creation |
//! |---|---|---|---|---|
//! | `MPI_Win_allocate` | 0.094 us | 0.20 us | 30.9 us | 1835 us, collective |
//! | `MPI_Win_create_dynamic` + attach | 2.58 us | 3.03 us | 121 us | 332 us once; attach local |
//! | `MPI_Win_create` (user memory) | 2.85 us | | | collective |
//!
//! On one host Open MPI serves allocated windows with its shared-memory component (a put is
//! a memcpy) and the others through the BTL's single-copy path (a `process_vm_writev` per
//! put): allocated is 27x faster for small puts and 4x for 1 MiB. But `MPI_Win_allocate` is
//! collective and allocates, and an export is neither: one process exports whenever it
//! likes, often memory it did not get from us (NX's zero-copy receives export the user's
//! buffer). So both: a pool allocated once at start, from which the endpoint's allocations
//! come (the core asks the transport first, `Transport::alloc`), and the dynamic window for
//! the rest. `bench-mpi` shows what it gives: a deliberate update into pool memory costs
//! about what `MPI_Put` + flush into an allocated window costs (2.3-2.6 times for 8 B,
//! measured on one host with the doorbell mapped: two put-flush pairs against one; 3.2-3.6
//! times with the doorbell read by `MPI_Get` as before), and 1 MiB runs at the
//! allocated window's speed. The doorbell is in a small allocated window too. Across hosts
//! both flavours take the network's RMA path and the difference shrinks.
//!
//! On one node the pool is mapped (see deliberate update above), and `bench-mpi` measured,
//! against `MPI_Put` + flush into an allocated window in the same runs: 8 B in 0.020-0.022 us
//! against 0.08-0.09 (0.21-0.26 times), 1 MiB in 31-32 us, as the put (0.96-1.02 times; a
//! plain copy: the cache-bypassing stores the shm transport uses from 32 KiB on ran it at
//! 88 us here). With `VMMC_MPI_DIRECT=0`, 8 B puts cost 1.6-1.8 times the baseline's (one
//! atomic accumulate, see [`RmaStats::replaces`]) and 1 MiB 1.0-1.1.
//!
//! ## Limits
//! - A rank that dies: the survivors learn it (`PeerLost`) through the control plane, but
//!   Open MPI 4.1 cannot keep the job going: mpirun kills every rank, and with
//!   `--enable-recovery` a survivor whose put targets the dead rank before the loss is known
//!   stays inside the shared-memory BTL for ever (it retries the write, `ESRCH`). The
//!   conformance suite's `peer_killed` and the libraries' tests that kill a rank are left
//!   out on this transport for that reason.
//! - MPI is initialised once per process (with `MPI_THREAD_MULTIPLE`, required) and
//!   finalised when it exits; a process may make several endpoints. Built against the MPI
//!   that `mpi-sys` finds: Open MPI by default here; MPICH with `MPICC=mpicc.mpich` (the
//!   conformance suite runs on both; `scripts/test.sh` builds the MPICH one in
//!   `target/mpich`). Under MPICH the transport turns on MPICH's progress thread
//!   (`MPIR_CVAR_ASYNC_PROGRESS=1`, unless the environment sets it): MPICH 4.0 completes a
//!   passive-target put only when its target enters MPI, and a VMMC receiver waits on memory.
//!   It also frees its windows before `MPI_Finalize`, which MPICH's UCX layer requires. A
//!   dead rank ends an MPICH job too (Hydra kills the others).
//! - Automatic update is emulated (no MPI operation propagates single stores).
//! - A key holds the buffer's address (or pool offset) and a 15-bit generation counted per
//!   process, so keys come round again: a buffer exported at the same address a multiple of
//!   32768 exports later gets the key of an earlier export, which its importers hold revoked.
//!   Each process remembers the keys it handed out, and before it hands one out again every
//!   peer forgets the revocation (`TcpTransport::unrevoke`, a frame and a fence to each;
//!   [`RmaStats::unrevoked`]); links made to the earlier export stay revoked. Without that,
//!   NX's zero-copy receives into one buffer without the registration cache hung at the
//!   32768th message (measured). The memory of the remembered keys grows with the number of
//!   distinct keys, as the importers' link tables do.
#![deny(missing_docs)]

mod ffi;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vmmc::bootstrap::{BootEnv, Launcher};
use vmmc::redirect::Redirected;
use vmmc::{
    BufId, Caps, Error, ExportSpec, ImportPoll, JobInfo, Notification, ProcId, Region,
    RemoteBuffer, Result, Transport, WriteOpts, WORD_SIZE,
};
use vmmc_tcp::{RemoteTcp, TcpTransport};

/// Bit of a key: the buffer takes writes on the control connection only (redirectable).
const VIA_CONTROL: u64 = 1 << 63;
/// Bit of a key: the buffer lies in the allocated pool window (the address bits are then
/// its offset there), not in the dynamic window.
const IN_POOL: u64 = 1 << 62;
/// Bytes of receive-buffer memory each rank allocates with `MPI_Win_allocate` at start
/// (`VMMC_MPI_POOL` overrides; 0 turns the pool off).
const POOL_DEFAULT: usize = 64 << 20;
/// Bits of a key that hold the buffer's address (x86_64 and aarch64 user space).
const ADDR_BITS: u32 = 47;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
/// A key's generation, above the address and below [`IN_POOL`] and [`VIA_CONTROL`] (16
/// bits made every export from the 32768th on look pooled, and its importers write to the
/// pool at the buffer's address).
const GEN_MASK: u64 = (1 << (62 - ADDR_BITS)) - 1;
/// Largest single put (MPI counts are C ints); the core splits larger sends.
const MAX_PUT: usize = 1 << 30;
/// Size of each rank's part of the doorbell window.
const BELL_WINDOW: usize = 4096;

/// The process's windows, made once (collectively) and kept for the process's life: MPI is
/// initialised once per process and finalised at its exit, and the doorbell stays the
/// process's bell.
struct Windows {
    /// Receive buffers are attached here; `None` in a job of one, where Open MPI has no
    /// component for dynamic windows (every buffer is then local).
    data: Option<ffi::Win>,
    /// Receive buffers allocated through the endpoint come from here (see the crate docs).
    pool: Option<Arc<Pool>>,
    /// `None` in a spawned process, whose doorbell is in its spawner's window (see [`Pair`]).
    bells: Option<ffi::Win>,
    /// By rank: the displacement of its doorbell (whose first word counts its sleepers).
    bell_at: Vec<u64>,
    /// By rank, when the whole job shares one node's memory: its doorbell, mapped here
    /// (the bells window is then `MPI_Win_allocate_shared`), which a writer rings itself.
    bell_here: Vec<usize>,
    /// By rank, when the whole job shares one node's memory and `VMMC_MPI_DIRECT` is not
    /// `0`: its part of the pool, mapped here (the pool is then `MPI_Win_allocate_shared`),
    /// which a writer stores into and a reader loads from: its address here and length.
    pool_here: Vec<(usize, usize)>,
}

static WINDOWS: Mutex<Option<Arc<Windows>>> = Mutex::new(None);
/// Set when a rank of the job crashed: MPI_Finalize would wait for it forever (Open MPI
/// retries its shared-memory writes to the dead process), so the process leaves without it.
static CRASHED: AtomicBool = AtomicBool::new(false);

/// A spawner's or a spawned process's connection to the other (see [`Pair`]), ended at exit
/// in the order made (a spawned process's link to its spawner first, then its links to the
/// processes it spawned, in order: no two processes wait for each other): the pair's window
/// freed (collective), the merged communicator freed (local), then the intercommunicator
/// disconnected (collective, on both sides). MPI makes `MPI_Finalize` collective over all
/// connected processes; Open MPI 4.1's only waits for the process's own job (a PMIx fence,
/// which it relies on because an MPI barrier does not prove that a BTL has sent what it
/// buffered). Without the disconnect a spawned process could finalise and exit while its
/// spawner's TCP BTL still had a fragment for it: `writev failed: Broken pipe`, and the
/// spawner's `MPI_Finalize` spun for ever in libevent's `event_base_free` (gdb). A C program
/// doing what the transport did (`tests/c/spawn_exit.c`) hung so in 6 of 40 runs on a
/// loaded machine, 0 of 40 with the disconnect; disconnecting on one side only fails, and
/// disconnecting the merged communicator too hangs (every run tried).
struct Connection {
    win: ffi::Win,
    merged: ffi::Comm,
    inter: ffi::Comm,
}

static CONNECTED: Mutex<Vec<Connection>> = Mutex::new(Vec::new());

extern "C" fn finalize_at_exit() {
    if !CRASHED.load(Ordering::SeqCst) {
        for c in lock(&CONNECTED).drain(..) {
            // SAFETY: the process is exiting: no endpoint uses the pair's window any more.
            unsafe { c.win.free() };
            // Disconnecting waits for what is pending on the communicator: nothing may be
            // left on the merged one (its window is freed above, so it can be).
            let _ = c.merged.free();
            let _ = c.inter.disconnect();
        }
        let _ = ffi::barrier();
        // Under MPICH the windows are freed first (its UCX layer asserts at finalize on
        // memory still registered), in the order every rank made them (collective calls).
        // The doorbell's window goes too: the process's bell returns to a local one first.
        // Open MPI needs none of this and keeps its windows to the end.
        let mpich = ffi::library_version().contains("MPICH");
        if let Some(w) = mpich.then(|| lock(&WINDOWS).take()).flatten() {
            vmmc::wait::uninstall_bell();
            // SAFETY: the process is exiting: no endpoint of it uses the windows any more
            // (every rank reaches this point after its transport finished).
            unsafe {
                if let Some(d) = &w.data {
                    d.free();
                }
                if let Some(p) = &w.pool {
                    p.win.free();
                }
                if let Some(b) = &w.bells {
                    b.free();
                }
            }
        }
        ffi::finalize();
    }
}

impl Windows {
    fn get(size: usize, all_local: bool, initialised_mpi: bool) -> Result<Arc<Windows>> {
        let mut g = lock(&WINDOWS);
        if let Some(w) = &*g {
            return Ok(w.clone());
        }
        let data = if size > 1 {
            Some(ffi::Win::dynamic()?)
        } else {
            None
        };
        let pool_len = pool_len()?;
        let shared = all_local && size > 1;
        let direct = shared && direct_wanted()?;
        let pool = if size > 1 && pool_len > 0 {
            let win = if direct {
                ffi::Win::allocate_shared(pool_len)?
            } else {
                ffi::Win::allocate(pool_len)?
            };
            Some(Arc::new(Pool {
                base: win.base() as usize,
                len: pool_len,
                free: Mutex::new(vec![(0, pool_len)]),
                win,
            }))
        } else {
            None
        };
        let mut pool_here = Vec::new();
        if let (true, Some(p)) = (direct, &pool) {
            for r in 0..size {
                let (base, len) = p.win.shared_part(r)?;
                pool_here.push((base as usize, len));
            }
        }
        let bells = if shared {
            ffi::Win::allocate_shared(BELL_WINDOW)?
        } else {
            ffi::Win::allocate(BELL_WINDOW)?
        };
        let skew = install_bell(&bells)?;
        // Also the point from which every rank's doorbell is made and installed.
        let bell_at = ffi::allgather(skew as u64)?;
        let mut bell_here = Vec::new();
        if shared {
            for (r, at) in bell_at.iter().enumerate() {
                bell_here.push(bells.shared_base(r)? as usize + *at as usize);
            }
        }
        if initialised_mpi {
            // SAFETY: registering a plain function without arguments.
            unsafe { libc::atexit(finalize_at_exit) };
        }
        let w = Arc::new(Windows {
            data,
            pool,
            bells: Some(bells),
            bell_at,
            bell_here,
            pool_here,
        });
        *g = Some(w.clone());
        Ok(w)
    }

    /// A spawned process's windows (made by [`Pair::allocate`]), kept as the process's.
    fn set(w: Windows, initialised_mpi: bool) -> Result<Arc<Windows>> {
        let mut g = lock(&WINDOWS);
        if g.is_some() {
            return Err(Error::Bootstrap(
                "a spawned process joins its job once".into(),
            ));
        }
        if initialised_mpi {
            // SAFETY: registering a plain function without arguments.
            unsafe { libc::atexit(finalize_at_exit) };
        }
        let w = Arc::new(w);
        *g = Some(w.clone());
        Ok(w)
    }
}

/// The pool's size: `VMMC_MPI_POOL` bytes, else [`POOL_DEFAULT`].
fn pool_len() -> Result<usize> {
    match std::env::var("VMMC_MPI_POOL") {
        Err(_) => Ok(POOL_DEFAULT),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| Error::Bootstrap(format!("VMMC_MPI_POOL={v:?} is not a number of bytes"))),
    }
}

/// Whether this process's endpoints on the mpi transport store their deliberate updates
/// into the pool of the job's other ranks mapped here (see [`MpiTransport::pool_mapped`]);
/// `false` before the first endpoint is made.
pub fn pool_mapped() -> bool {
    lock(&WINDOWS)
        .as_ref()
        .is_some_and(|w| !w.pool_here.is_empty())
}

/// The generations of keys: [`GEN_MASK`], or `VMMC_MPI_KEY_GENERATIONS` of them (a power of
/// two up to 32768), which tests set low to make keys come round again soon.
fn gen_mask() -> Result<u64> {
    match std::env::var("VMMC_MPI_KEY_GENERATIONS") {
        Err(_) => Ok(GEN_MASK),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n.is_power_of_two() && n <= GEN_MASK + 1 => Ok(n - 1),
            _ => Err(Error::Bootstrap(format!(
                "VMMC_MPI_KEY_GENERATIONS={v:?}: a power of two up to {}",
                GEN_MASK + 1
            ))),
        },
    }
}

/// Whether deliberate updates into the pool of a rank on this node are stores into its
/// part mapped here (`VMMC_MPI_DIRECT` unset or `1`) or puts (`0`).
fn direct_wanted() -> Result<bool> {
    match std::env::var("VMMC_MPI_DIRECT").as_deref() {
        Err(_) | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(v) => Err(Error::Bootstrap(format!(
            "VMMC_MPI_DIRECT={v:?}: 1 (stores into a pool mapped on this node, the default) or 0 (MPI_Put)"
        ))),
    }
}

/// Makes the process's doorbell in `win`'s memory (this rank's part) and installs it;
/// returns its displacement there.
fn install_bell(win: &ffi::Win) -> Result<usize> {
    let align = std::mem::align_of::<vmmc::wait::Bell>();
    let skew = (win.base() as usize).wrapping_neg() % align;
    if win.base().is_null() || skew + std::mem::size_of::<vmmc::wait::Bell>() > BELL_WINDOW {
        return Err(Error::Bootstrap(
            "MPI_Win_allocate gave no memory for the doorbell".into(),
        ));
    }
    // SAFETY: in the window's memory (checked above).
    let bell = unsafe { win.base().add(skew) }.cast::<vmmc::wait::Bell>();
    // SAFETY: the window's memory is ours, aligned and large enough; the window is never
    // freed while the process runs (it lives in WINDOWS until the process exits, and the bell
    // is uninstalled first), as `install_bell` requires.
    unsafe {
        bell.write(vmmc::wait::Bell::new());
        vmmc::wait::install_bell(bell);
    }
    Ok(skew)
}

/// Memory of an allocated window handed out as receive buffers: first fit, page-rounded.
struct Pool {
    win: ffi::Win,
    base: usize,
    len: usize,
    /// Free ranges (offset, length), sorted by offset.
    free: Mutex<Vec<(usize, usize)>>,
}

impl Pool {
    fn take(self: &Arc<Pool>, len: usize) -> Option<Region> {
        let want = len.div_ceil(4096).max(1) * 4096;
        let off = {
            let mut f = lock(&self.free);
            let i = f.iter().position(|&(_, l)| l >= want)?;
            let (o, l) = f[i];
            if l == want {
                f.remove(i);
            } else {
                f[i] = (o + want, l - want);
            }
            o
        };
        let p = (self.base + off) as *mut u8;
        // SAFETY: the range lies in this rank's part of the window, which is never freed, and
        // was free: nobody else uses it. Zeroed, as the core's own allocations are.
        unsafe { std::ptr::write_bytes(p, 0, want) };
        let chunk = Chunk {
            pool: self.clone(),
            off,
            len: want,
        };
        // SAFETY: valid, zeroed memory that stays allocated until `chunk` drops.
        Some(unsafe { Region::from_owned_parts(p, len, Box::new(chunk)) })
    }

    fn give(&self, off: usize, len: usize) {
        let mut f = lock(&self.free);
        let i = f.partition_point(|&(o, _)| o < off);
        f.insert(i, (off, len));
        // Coalesce with the neighbours.
        if i + 1 < f.len() && f[i].0 + f[i].1 == f[i + 1].0 {
            f[i].1 += f[i + 1].1;
            f.remove(i + 1);
        }
        if i > 0 && f[i - 1].0 + f[i - 1].1 == f[i].0 {
            f[i - 1].1 += f[i].1;
            f.remove(i);
        }
    }

    fn contains(&self, p: usize) -> Option<usize> {
        (p >= self.base && p < self.base + self.len).then(|| p - self.base)
    }
}

/// A receive buffer's memory in the pool, given back when its region's last clone drops.
struct Chunk {
    pool: Arc<Pool>,
    off: usize,
    len: usize,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.pool.give(self.off, self.len);
    }
}

/// The MPI side of the transport, shared with the links.
struct Rma {
    win: Arc<Windows>,
    /// By rank: a write went on the control connection since the last fence.
    via_control: Vec<AtomicBool>,
    /// This process's exports by key: base address and length (for reads of its own
    /// buffers, which need no MPI).
    local: Mutex<HashMap<u64, (usize, usize)>>,
    /// The windows shared with processes spawned by this one, or with this process's
    /// spawner (see [`Pair`]).
    pairs: Mutex<Vec<Arc<Pair>>>,
    puts: AtomicU64,
    bytes_put: AtomicU64,
    gets: AtomicU64,
    fallback_writes: AtomicU64,
    fallback_bytes: AtomicU64,
    rings: AtomicU64,
    replaces: AtomicU64,
    stores: AtomicU64,
    bytes_stored: AtomicU64,
    loads: AtomicU64,
}

/// What went through MPI's one-sided operations (the control plane's traffic is
/// [`MpiTransport::control_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmaStats {
    /// Deliberate updates written by `MPI_Put` (each one or two puts).
    pub puts: u64,
    /// Their bytes.
    pub bytes_put: u64,
    /// Remote reads by `MPI_Get`.
    pub gets: u64,
    /// Deliberate updates sent on the control plane's TCP connection because the two
    /// processes share no window (a spawned process and a rank other than its spawner).
    pub fallback_writes: u64,
    /// Their bytes.
    pub fallback_bytes: u64,
    /// Receivers woken by ringing their doorbell from here (mapped here when the whole job
    /// shares one node), without a message.
    pub rings: u64,
    /// Of `puts`, those of 8 aligned bytes into the pool written as one atomic element of an
    /// `MPI_Accumulate` with `MPI_REPLACE` (one operation instead of two put+flush pairs).
    pub replaces: u64,
    /// Deliberate updates stored straight into a pool mapped here (the job on one node, see
    /// the crate docs), without MPI.
    pub stores: u64,
    /// Their bytes.
    pub bytes_stored: u64,
    /// Remote reads loaded straight from a pool mapped here.
    pub loads: u64,
    /// Keys this process handed out again after its generations wrapped (each unrevoked at
    /// every peer before the export).
    pub unrevoked: u64,
}

impl Rma {
    /// Before a put to `rank`: writes sent earlier on the control connection are placed.
    fn order_after_control(&self, rank: usize, link: &RemoteTcp) -> Result<()> {
        if self.via_control[rank].load(Ordering::Relaxed)
            && self.via_control[rank].swap(false, Ordering::AcqRel)
        {
            link.fence()?;
        }
        Ok(())
    }

    /// Rings `rank`'s doorbell from here when it is mapped here (the job on one node): a
    /// fence, a load of its sleeper count, and a futex wake only if somebody sleeps — what
    /// the shm transport's writers do. `false` when it is not mapped.
    #[inline]
    fn ring_here(&self, rank: usize) -> bool {
        let Some(&at) = self.win.bell_here.get(rank) else {
            return false;
        };
        // SAFETY: `rank`'s doorbell, made and installed before the allgather that gave its
        // place, in a shared window that stays mapped until the process exits (MPICH frees
        // it at exit, after the transport finished).
        let bell = unsafe { &*(at as *const vmmc::wait::Bell) };
        // After our data, before the load: pairs with the sleeper's count increment, made
        // before it looks at the data a last time (`vmmc::wait`).
        std::sync::atomic::fence(Ordering::SeqCst);
        if bell.sleepers() != 0 {
            bell.ring_ordered();
            self.rings.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Whether a thread of `rank` sleeps on its doorbell (read after our data is visible).
    fn sleeping(&self, rank: usize) -> Result<bool> {
        let (Some(bells), Some(at)) = (&self.win.bells, self.win.bell_at.get(rank)) else {
            return Ok(true);
        };
        let mut w = [0u8; 4];
        bells.get(&mut w, rank, *at as i64)?;
        Ok(u32::from_ne_bytes(w) != 0)
    }
}

/// The window of a spawner and a process it spawned (`MPI_Comm_spawn`): the two share no
/// window of `MPI_COMM_WORLD`, so they allocate one over their merged communicator
/// (`MPI_Intercomm_merge`, the spawner rank 0, the spawned process rank 1). The spawned
/// process's part holds its doorbell and then its pool, from which its endpoint's
/// allocations come: the spawner puts into the spawned process's pool buffers and reads its
/// sleeper count there. Nothing goes the other way: Open MPI 4.1 refuses a dynamic window
/// over a communicator that spans two jobs (`MPI_Win_create_dynamic` fails with
/// `MPI_ERR_WIN`, measured), and the spawner's buffers lie in its job's windows, so the
/// spawned process writes to its spawner (and to every other process) on the control
/// plane's TCP connection.
struct Pair {
    /// The spawned process's rank in the job.
    rank: usize,
    win: ffi::Win,
    /// Where its doorbell lies in its part of the window.
    bell: u64,
}

/// The MPI rank of the spawned process in a [`Pair`]'s communicator.
const SPAWNED: usize = 1;

impl Pair {
    /// Allocates the pair's window over `comm` (collective with the spawned process, which
    /// calls [`Pair::allocate`]) and learns where the spawned process's doorbell is.
    fn make(rank: usize, inter: ffi::Comm, comm: ffi::Comm) -> Result<Pair> {
        let win = ffi::Win::allocate_on(WORD_SIZE, &comm)?;
        let mut b = [0u8; 8];
        comm.recv(&mut b, SPAWNED)?;
        lock(&CONNECTED).push(Connection {
            win: win.alias(),
            merged: comm,
            inter,
        });
        Ok(Pair {
            rank,
            win,
            bell: u64::from_ne_bytes(b),
        })
    }

    /// The spawned process's side: its part of the window (doorbell, then a pool of
    /// `pool_len` bytes); installs the doorbell and tells the spawner where it is.
    fn allocate(inter: ffi::Comm, comm: ffi::Comm, pool_len: usize) -> Result<Windows> {
        let win = ffi::Win::allocate_on(BELL_WINDOW + pool_len, &comm)?;
        let skew = install_bell(&win)?;
        comm.send(&(skew as u64).to_ne_bytes(), 0)?;
        lock(&CONNECTED).push(Connection {
            win: win.alias(),
            merged: comm,
            inter,
        });
        let base = win.base() as usize + BELL_WINDOW;
        Ok(Windows {
            data: None,
            pool: (pool_len > 0).then(|| {
                Arc::new(Pool {
                    base,
                    len: pool_len,
                    free: Mutex::new(vec![(0, pool_len)]),
                    win,
                })
            }),
            bells: None,
            bell_at: Vec::new(),
            bell_here: Vec::new(),
            pool_here: Vec::new(),
        })
    }

    /// Whether a thread of the spawned process sleeps on its doorbell.
    fn sleeping(&self) -> Result<bool> {
        let mut w = [0u8; 4];
        self.win.get(&mut w, SPAWNED, self.bell as i64)?;
        Ok(u32::from_ne_bytes(w) != 0)
    }
}

/// What a spawner tells the process it spawned over their intercommunicator (its
/// environment is the MPI launcher's, not ours).
struct Order {
    rank: usize,
    parent: ProcId,
    parent_rank: usize,
    rendezvous: String,
    job: String,
}

/// Size of an encoded [`Order`] on the wire.
const ORDER_LEN: usize = 1024;

impl Order {
    fn encode(&self) -> Result<Vec<u8>> {
        let t = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n",
            self.rank,
            self.parent.node,
            self.parent.squid,
            self.parent_rank,
            self.rendezvous,
            self.job
        );
        if t.len() > ORDER_LEN {
            return Err(Error::InvalidArgument(
                "the job's name is too long to spawn",
            ));
        }
        let mut b = t.into_bytes();
        b.resize(ORDER_LEN, 0);
        Ok(b)
    }

    fn decode(b: &[u8]) -> Result<Order> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let t = String::from_utf8_lossy(&b[..end]).into_owned();
        let f: Vec<&str> = t.split('\n').collect();
        let bad = || Error::Bootstrap(format!("a malformed spawn order from the spawner: {t:?}"));
        if f.len() < 6 {
            return Err(bad());
        }
        let n = |i: usize| f[i].parse::<u64>().map_err(|_| bad());
        Ok(Order {
            rank: n(0)? as usize,
            parent: ProcId {
                node: n(1)? as u32,
                squid: n(2)? as u32,
            },
            parent_rank: n(3)? as usize,
            rendezvous: f[4].to_string(),
            job: f[5].to_string(),
        })
    }
}

/// The name MPI knows this host by when a spawn names it by a loopback address (a job on one
/// host lists its node as 127.0.0.1).
fn mpi_host(host: &str) -> String {
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback());
    if loopback {
        if let Some(h) = host_name() {
            return h;
        }
    }
    host.to_string()
}

fn host_name() -> Option<String> {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into the buffer.
    let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    if rc != 0 {
        return None;
    }
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Whether `program` names an executable file here (as a path, or found on `PATH`).
fn executable_here(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return ok(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| ok(&d.join(program))))
}

/// Which MPI library this is (`MPI_Get_library_version`, callable before MPI is
/// initialised).
pub fn library_version() -> String {
    ffi::library_version()
}

/// The mpi transport of one process.
pub struct MpiTransport {
    tcp: TcpTransport,
    rma: Arc<Rma>,
    /// Exported buffers, by id: their base address and whether it is attached to the dynamic
    /// window (not in the pool).
    attached: Mutex<HashMap<BufId, (usize, bool)>>,
    generation: AtomicU64,
    /// The generations a key may carry ([`GEN_MASK`], or fewer for tests:
    /// `VMMC_MPI_KEY_GENERATIONS`).
    gen_mask: u64,
    /// Every key this process handed out (a key handed out again is unrevoked first).
    keys_used: Mutex<std::collections::HashSet<u64>>,
    /// Keys handed out again, each unrevoked at every peer.
    unrevoked: AtomicU64,
    finished: AtomicBool,
    /// This process was spawned (`MPI_Comm_spawn`): its `MPI_COMM_WORLD` is itself alone and
    /// it shares a window with its spawner only.
    spawned: bool,
    /// Where the trusted party listens (told to spawned processes).
    rendezvous: String,
    job_id: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where rank 0's rendezvous listens: `VMMC_RENDEZVOUS` if given, loopback when the whole
/// job shares this host, else this host's name.
fn rendezvous_address(env: &BootEnv, all_local: bool) -> Result<String> {
    if let Some(a) = &env.rendezvous {
        return Ok(a.clone());
    }
    if all_local {
        return Ok("127.0.0.1:0".into());
    }
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into the buffer.
    let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    if rc != 0 {
        return Err(Error::io("gethostname", std::io::Error::last_os_error()));
    }
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let host = String::from_utf8_lossy(&name[..end]).into_owned();
    use std::net::ToSocketAddrs;
    let ip = (host.as_str(), 0)
        .to_socket_addrs()
        .map_err(|e| Error::Bootstrap(format!("cannot resolve this host's name {host:?}: {e}")))?
        .find(|a| a.is_ipv4() && !a.ip().is_loopback())
        .ok_or_else(|| {
            Error::Bootstrap(format!(
                "{host:?} has no address the other hosts can reach: set VMMC_RENDEZVOUS=host:port"
            ))
        })?;
    Ok(format!("{}:0", ip.ip()))
}

impl MpiTransport {
    /// Joins the MPI job this process belongs to (initialising MPI unless the program did).
    /// The rank and size are MPI's; `env` gives the rendezvous address, if any.
    pub fn connect(env: &BootEnv) -> Result<MpiTransport> {
        let initialised_mpi = ffi::init()?;
        if let Some(parent) = ffi::Comm::parent()? {
            return Self::join_spawned(env, parent, initialised_mpi);
        }
        let (rank, size) = ffi::world()?;
        if env.launcher != Launcher::Alone && (env.rank, env.size) != (rank, size) {
            return Err(Error::Bootstrap(format!(
                "the launcher says rank {} of {}, MPI says rank {rank} of {size}: start the \
                 job with mpirun (vmmc-run --transport mpi does)",
                env.rank, env.size
            )));
        }
        let all_local = ffi::local_size()? == size;
        // Rank 0 hosts the trusted party and tells everybody where it is.
        let mut addr = [0u8; 256];
        let mut hosted = None;
        if rank == 0 {
            let rv =
                vmmc_tcp::server::Rendezvous::start(&rendezvous_address(env, all_local)?, size);
            // Every rank waits in the broadcast: tell them of a failure too (empty address).
            if let Ok(rv) = &rv {
                // A rank that spawns a process starts it itself (MPI_Comm_spawn connects
                // the two): the rendezvous only reserves its rank.
                rv.set_spawn_by_requester();
                let a = rv.addr().to_string();
                addr[..a.len()].copy_from_slice(a.as_bytes());
            }
            ffi::bcast(&mut addr)?;
            hosted = Some(rv?);
        } else {
            ffi::bcast(&mut addr)?;
        }
        let end = addr.iter().position(|&b| b == 0).unwrap_or(addr.len());
        if end == 0 {
            return Err(Error::Bootstrap(
                "rank 0 could not start the rendezvous".into(),
            ));
        }
        let at = String::from_utf8_lossy(&addr[..end]).into_owned();
        let tenv = BootEnv {
            transport: "mpi".into(),
            rank,
            size,
            rendezvous: Some(at.clone()),
            job: env.job.clone(),
            launcher: env.launcher,
        };
        let tcp = TcpTransport::connect_with(&tenv, hosted)?;
        tcp.set_revoke_waits(true);
        let win = Windows::get(size, all_local, initialised_mpi)?;
        ffi::barrier()?;
        Self::assemble(tcp, win, false, at, env.job.clone())
    }

    fn assemble(
        tcp: TcpTransport,
        win: Arc<Windows>,
        spawned: bool,
        rendezvous: String,
        job_id: String,
    ) -> Result<MpiTransport> {
        let size = tcp.job().size + vmmc_tcp::MAX_SPAWNED;
        Ok(MpiTransport {
            tcp,
            rma: Arc::new(Rma {
                win,
                via_control: (0..size).map(|_| AtomicBool::new(false)).collect(),
                local: Mutex::new(HashMap::new()),
                pairs: Mutex::new(Vec::new()),
                puts: AtomicU64::new(0),
                bytes_put: AtomicU64::new(0),
                gets: AtomicU64::new(0),
                fallback_writes: AtomicU64::new(0),
                fallback_bytes: AtomicU64::new(0),
                rings: AtomicU64::new(0),
                replaces: AtomicU64::new(0),
                stores: AtomicU64::new(0),
                bytes_stored: AtomicU64::new(0),
                loads: AtomicU64::new(0),
            }),
            attached: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(1),
            gen_mask: gen_mask()?,
            keys_used: Mutex::new(std::collections::HashSet::new()),
            unrevoked: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            spawned,
            rendezvous,
            job_id,
        })
    }

    /// A process that `MPI_Comm_spawn` started for `vmmc_Spawn`: its spawner sends it its
    /// rank in the job, its parent and the rendezvous over their intercommunicator, then the
    /// two make their window; then it joins the control plane like the tcp transport's
    /// spawned processes.
    fn join_spawned(
        env: &BootEnv,
        parent: ffi::Comm,
        initialised_mpi: bool,
    ) -> Result<MpiTransport> {
        let mut b = vec![0u8; ORDER_LEN];
        parent.recv(&mut b, 0)?;
        let order = Order::decode(&b)?;
        let merged = parent.merge(true)?;
        // Its own MPI_COMM_WORLD holds it alone: its windows are the one it shares with its
        // spawner.
        let win = Windows::set(
            Pair::allocate(parent, merged, pool_len()?)?,
            initialised_mpi,
        )?;
        let tenv = BootEnv {
            transport: "mpi".into(),
            rank: order.rank,
            size: order.rank + 1,
            rendezvous: Some(order.rendezvous.clone()),
            job: order.job.clone(),
            launcher: env.launcher,
        };
        let tcp = TcpTransport::connect_spawned(&tenv, order.parent)?;
        tcp.set_revoke_waits(true);
        Self::assemble(tcp, win, true, order.rendezvous, order.job)
    }

    /// This process's one-sided traffic so far.
    pub fn rma_stats(&self) -> RmaStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RmaStats {
            puts: g(&self.rma.puts),
            bytes_put: g(&self.rma.bytes_put),
            gets: g(&self.rma.gets),
            fallback_writes: g(&self.rma.fallback_writes),
            fallback_bytes: g(&self.rma.fallback_bytes),
            rings: g(&self.rma.rings),
            replaces: g(&self.rma.replaces),
            unrevoked: g(&self.unrevoked),
            stores: g(&self.rma.stores),
            bytes_stored: g(&self.rma.bytes_stored),
            loads: g(&self.rma.loads),
        }
    }

    /// Whether deliberate updates into the pool of the job's other ranks are stores into it
    /// mapped here (the whole job on one node, `VMMC_MPI_DIRECT` not `0`) rather than puts.
    pub fn pool_mapped(&self) -> bool {
        !self.rma.win.pool_here.is_empty()
    }

    /// The control plane's statistics (notifications, announcements, control writes).
    pub fn control_stats(&self) -> vmmc_tcp::Stats {
        self.tcp.stats()
    }
}

impl Transport for MpiTransport {
    fn name(&self) -> &'static str {
        "mpi"
    }

    /// `MPI_Comm_spawn` by this process alone (see the crate docs): the rendezvous reserves
    /// the rank, MPI starts the program on the host (info key "host"; a loopback address is
    /// this host's name), the two merge their intercommunicator and make their window, and
    /// the new process joins the control plane.
    fn spawn(&self, spec: &vmmc::SpawnSpec<'_>) -> Result<ProcId> {
        let host = mpi_host(spec.host);
        // Open MPI 4.1 fails every later spawn of the job after one failed MPI_Comm_spawn
        // (measured: an unknown host, then a good spawn, ends the job), and ends the whole
        // job when its daemon cannot start the program: refuse first what can be checked.
        use std::net::ToSocketAddrs;
        if (host.as_str(), 0).to_socket_addrs().is_err() {
            return Err(Error::SpawnFailed(format!("unknown host {:?}", spec.host)));
        }
        let here = host_name().is_some_and(|h| h == host);
        if here && !executable_here(spec.program) {
            return Err(Error::SpawnFailed(format!(
                "cannot start {:?}: no such executable file",
                spec.program
            )));
        }
        let me = self.tcp.job().rank;
        self.tcp.spawn_started_by(spec, &mut |order| {
            let inter = ffi::Comm::spawn(&order.program, &order.args, &host)?;
            let o = Order {
                rank: order.rank,
                parent: order.parent,
                parent_rank: me,
                rendezvous: self.rendezvous.clone(),
                job: self.job_id.clone(),
            };
            let made = (|| {
                inter.send(&o.encode()?, 0)?;
                let merged = inter.merge(false)?;
                let pair = Pair::make(order.rank, inter, merged)?;
                lock(&self.rma.pairs).push(Arc::new(pair));
                Ok::<(), Error>(())
            })();
            made.map_err(|e| format!("the spawned process did not set up its window: {e}"))
        })
    }

    fn caps(&self) -> Caps {
        Caps {
            remote_read: true,
            native_au: false,
            redirection: true,
            async_send: false,
            max_write: MAX_PUT,
            au_packetizer: false,
        }
    }

    fn job(&self) -> &JobInfo {
        self.tcp.job()
    }

    fn alloc(&self, len: usize, _kind: vmmc::MemKind) -> Option<Result<Region>> {
        self.rma.win.pool.as_ref()?.take(len).map(Ok)
    }

    fn export(&self, spec: ExportSpec<'_>) -> Result<()> {
        let base = spec.region.as_ptr();
        let pooled = self
            .rma
            .win
            .pool
            .as_ref()
            .and_then(|p| p.contains(base as usize));
        let addr = match pooled {
            Some(off) => off as u64,
            None => ffi::address(base)? as u64,
        };
        if addr & !ADDR_MASK != 0 {
            return Err(Error::InvalidArgument(
                "a receive buffer above 2^47 cannot be named in a key",
            ));
        }
        if lock(&self.attached).contains_key(&spec.buf) {
            return Err(Error::BufIdInUse(spec.buf));
        }
        // A key revoked at unexport stays revoked for its importers: a generation keeps a
        // buffer exported again at the same address from looking revoked, and a key handed
        // out again once the generations wrapped is unrevoked at every peer first.
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) & self.gen_mask;
        let mut key = (generation << ADDR_BITS) | addr;
        if spec.redirectable {
            key |= VIA_CONTROL;
        }
        if pooled.is_some() {
            key |= IN_POOL;
        }
        if !lock(&self.keys_used).insert(key) {
            self.tcp.unrevoke(key);
            self.unrevoked.fetch_add(1, Ordering::Relaxed);
        }
        let len = spec.region.len();
        if let (Some(w), None) = (&self.rma.win.data, pooled) {
            // SAFETY: the core keeps the region alive while it is exported; detached in
            // unexport before the core may free it.
            unsafe { w.attach(base, len)? };
        }
        let buf = spec.buf;
        lock(&self.rma.local).insert(key, (base as usize, len));
        if let Err(e) = self.tcp.export_keyed(spec, key) {
            lock(&self.rma.local).remove(&key);
            if let (Some(w), None) = (&self.rma.win.data, pooled) {
                let _ = w.detach(base);
            }
            return Err(e);
        }
        lock(&self.attached).insert(buf, (base as usize, pooled.is_none()));
        Ok(())
    }

    fn unexport(&self, buf: BufId) -> Result<()> {
        // Revokes the key at every peer, which waits for its puts under way (see the crate
        // docs), before the memory leaves the window.
        let r = self.tcp.unexport(buf);
        if let Some((base, was_attached)) = lock(&self.attached).remove(&buf) {
            lock(&self.rma.local).retain(|_, v| v.0 != base);
            if let (Some(w), true) = (&self.rma.win.data, was_attached) {
                w.detach(base as *mut u8)?;
            }
        }
        r
    }

    fn import_request(&self, owner: ProcId, buf: BufId) -> Result<u64> {
        self.tcp.import_request(owner, buf)
    }

    fn import_poll(&self, request: u64, wait: bool) -> Result<ImportPoll> {
        Ok(match self.tcp.import_poll_link(request, wait)? {
            None => ImportPoll::Pending,
            Some(link) => {
                let key = link.key();
                let rank = link.owner();
                let pooled = key & IN_POOL != 0;
                let mut disp = (key & ADDR_MASK) as i64;
                // A process this one spawned: its pool buffers are in their shared window.
                let pair = lock(&self.rma.pairs)
                    .iter()
                    .find(|p| p.rank == rank)
                    .filter(|_| pooled)
                    .cloned();
                if pair.is_some() {
                    disp += BELL_WINDOW as i64;
                }
                let control = key & VIA_CONTROL != 0 || link.is_local();
                // A window of MPI_COMM_WORLD reaches the job's first ranks from each other;
                // a spawned process shares none with anybody (see [`Pair`]).
                let shared = link.is_local()
                    || pair.is_some()
                    || (!self.spawned && rank < self.tcp.job().size);
                let via_control = control || !shared;
                let direct = match self.rma.win.pool_here.get(rank) {
                    Some(&(base, len)) if pooled && pair.is_none() && !via_control => {
                        // The registry's length, checked against the exporter's part of
                        // the pool: nothing is stored outside it, whatever a key says.
                        if (disp as usize)
                            .checked_add(link.len())
                            .is_none_or(|e| e > len)
                        {
                            return Err(Error::Protocol(format!(
                                "rank {rank}'s key names {} bytes at {disp:#x} of its pool of {len}",
                                link.len()
                            )));
                        }
                        Some(base + disp as usize)
                    }
                    _ => None,
                };
                ImportPoll::Ready(Box::new(RemoteMpi {
                    rank,
                    disp,
                    direct,
                    via_control,
                    fallback: !shared,
                    pooled,
                    pair,
                    link,
                    rma: self.rma.clone(),
                }))
            }
        })
    }

    fn progress(
        &self,
        sink: &mut dyn FnMut(Notification),
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.tcp.progress(sink, timeout)
    }

    fn wake(&self) {
        self.tcp.wake()
    }

    fn peer_alive(&self, p: ProcId) -> bool {
        self.tcp.peer_alive(p)
    }

    fn post_redir(
        &self,
        buf: BufId,
        dest: &Region,
        dest_offset: usize,
        buf_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.tcp.post_redir(buf, dest, dest_offset, buf_offset, len)
    }

    fn end_redir(&self, buf: BufId) -> Result<Redirected> {
        self.tcp.end_redir(buf)
    }

    fn data_end(&self, buf: BufId) -> Result<Option<usize>> {
        self.tcp.data_end(buf)
    }

    fn clear_data_end(&self, buf: BufId) -> Result<()> {
        self.tcp.clear_data_end(buf)
    }

    fn hold_locks(&self, f: &mut dyn FnMut()) {
        let _a = lock(&self.attached);
        self.tcp.hold_locks(f)
    }

    fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Leave the control plane first: rank 0 stays until every other rank has left, so
        // no rank frees a window another still writes to.
        let crashed_before = (0..self.tcp.job().size).any(|r| self.tcp.peer_crashed(r));
        let r = self.tcp.finish();
        // MPI is finalised when the process exits (it cannot be initialised again, and
        // another endpoint of this process may follow).
        let crashed = crashed_before || (0..self.tcp.job().size).any(|r| self.tcp.peer_crashed(r));
        if crashed {
            CRASHED.store(true, Ordering::SeqCst);
        }
        r
    }
}

impl Drop for MpiTransport {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The sender's side of a link: puts into the exporter's part of the data window.
pub struct RemoteMpi {
    link: RemoteTcp,
    rma: Arc<Rma>,
    /// The exporter's rank in the job.
    rank: usize,
    disp: i64,
    via_control: bool,
    /// The two processes share no window: written on the control connection.
    fallback: bool,
    pooled: bool,
    /// The window shared with the exporter when this process spawned it.
    pair: Option<Arc<Pair>>,
    /// The buffer's address here, when it lies in a pool mapped here (see
    /// [`Windows::pool_here`]): written by stores, read by loads.
    direct: Option<usize>,
}

impl RemoteMpi {
    /// The window the buffer lies in, and the exporter's rank there.
    #[inline]
    fn window(&self) -> Result<(&ffi::Win, usize)> {
        if let Some(p) = &self.pair {
            return Ok((&p.win, SPAWNED));
        }
        let w = if self.pooled {
            self.rma.win.pool.as_ref().map(|p| &p.win)
        } else {
            self.rma.win.data.as_ref()
        };
        w.map(|w| (w, self.rank))
            .ok_or_else(|| Error::Protocol("no data window in a job of one".into()))
    }
}

impl RemoteMpi {
    /// A deliberate update stored into the exporter's pool buffer at `at` (mapped here): the
    /// body, then the last word with a release store, as the shm transport's writers do, then
    /// the doorbell or the notification.
    #[inline]
    fn store(&self, at: usize, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        {
            let _under_way = self.link.enter()?;
            // SAFETY: the exporter's pool buffer, mapped here for the process's life; the
            // range lies inside it (the core checked it against the length the exporter
            // registered, and word alignment), and the key is live: an unexport waits for
            // `_under_way` before the memory returns to the exporter's pool.
            // A plain copy, as MPI's shared-memory window component makes a put: the
            // cache-bypassing stores `copy_ordered` uses from 32 KiB on ran 1 MiB at 12 GB/s
            // here against the puts' 33 GB/s (bench-mpi).
            unsafe {
                let dst = (at as *mut u8).add(offset);
                let body = data.len() - WORD_SIZE;
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst, body);
                let last = u32::from_ne_bytes(data[body..].try_into().expect("a word"));
                std::sync::atomic::AtomicU32::from_ptr(dst.add(body).cast())
                    .store(last, Ordering::Release);
            }
        }
        self.rma.stores.fetch_add(1, Ordering::Relaxed);
        self.rma
            .bytes_stored
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        if opts.notify && self.link.has_handler() {
            let last_at = offset + data.len() - WORD_SIZE;
            let value =
                u32::from_ne_bytes(data[data.len() - WORD_SIZE..].try_into().expect("a word"));
            return self.link.placed(last_at, value, true);
        }
        self.rma.ring_here(self.rank);
        Ok(())
    }
}

impl RemoteBuffer for RemoteMpi {
    fn len(&self) -> usize {
        self.link.len()
    }

    #[inline]
    fn write(&self, offset: usize, data: &[u8], opts: WriteOpts) -> Result<()> {
        if self.via_control {
            if self.fallback {
                self.rma.fallback_writes.fetch_add(1, Ordering::Relaxed);
                self.rma
                    .fallback_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
            } else if !self.link.is_local() {
                self.rma.via_control[self.rank].store(true, Ordering::Release);
            }
            return self.link.write(offset, data, opts);
        }
        self.rma.order_after_control(self.rank, &self.link)?;
        if let Some(at) = self.direct {
            return self.store(at, offset, data, opts);
        }
        let (win, target) = self.window()?;
        let n = data.len();
        let at = self.disp + offset as i64;
        let value = u32::from_ne_bytes(data[n - WORD_SIZE..].try_into().expect("a word"));
        {
            let _under_way = self.link.enter()?;
            match (<&[u8; 8]>::try_from(data), ffi::op_replace()) {
                // Two aligned words land at once as one atomic element: the last word
                // cannot be seen before the first, and one operation does. Into the pool
                // only: Open MPI 4.1 crashes (SIGSEGV) on an accumulate into memory
                // attached to a dynamic window (measured).
                (Ok(d), Some(op)) if self.pooled && at % 8 == 0 => {
                    win.replace_u64(d, op, target, at)?;
                    win.flush(target)?;
                    self.rma.replaces.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    if n > WORD_SIZE {
                        win.put(&data[..n - WORD_SIZE], target, at)?;
                        win.flush(target)?;
                    }
                    win.put(&data[n - WORD_SIZE..], target, at + (n - WORD_SIZE) as i64)?;
                    win.flush(target)?;
                }
            }
        }
        self.rma.puts.fetch_add(1, Ordering::Relaxed);
        self.rma.bytes_put.fetch_add(n as u64, Ordering::Relaxed);
        let last_at = offset + n - WORD_SIZE;
        if opts.notify && self.link.has_handler() {
            self.link.placed(last_at, value, true)
        } else if self.pair.is_none() && self.rma.ring_here(self.rank) {
            Ok(())
        } else if match &self.pair {
            Some(p) => p.sleeping()?,
            None => self.rma.sleeping(self.rank)?,
        } {
            // The data is visible already: a peer that left meanwhile needs no wake-up, and
            // its loss is no failure of this write.
            let _ = self.link.placed(last_at, value, false);
            Ok(())
        } else {
            Ok(())
        }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let _under_way = self.link.enter()?;
        // Memory readable here: a buffer of this process's, or one in a pool mapped here.
        let here = if self.link.is_local() {
            let (base, len) = *lock(&self.rma.local)
                .get(&self.link.key())
                .ok_or(Error::Unexported)?;
            if offset + out.len() > len {
                return Err(Error::OutOfBounds {
                    offset,
                    len: out.len(),
                    size: len,
                });
            }
            Some(base)
        } else {
            self.direct.inspect(|_| {
                self.rma.loads.fetch_add(1, Ordering::Relaxed);
            })
        };
        if let Some(base) = here {
            // SAFETY: this process's export (found by its key, removed at unexport; the range
            // checked above) or the exporter's pool buffer, mapped here for the process's
            // life (the range checked by the core against the length the exporter
            // registered); the key is live (`enter` above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base as *const u8).add(offset),
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            return Ok(());
        }
        if self.fallback {
            return Err(Error::Unsupported(
                "remote read from a process that shares no MPI window with this one (a spawned \
                 process and any other; deliberate updates go over TCP there)",
            ));
        }
        self.rma.gets.fetch_add(1, Ordering::Relaxed);
        let (win, target) = self.window()?;
        win.get(out, target, self.disp + offset as i64)
    }

    fn fence(&self) -> Result<()> {
        // Puts are complete when write returns; frames on the control connection are not:
        // a round trip only when some may be under way.
        if self.via_control {
            if self.link.is_local() {
                return Ok(());
            }
            self.rma.via_control[self.rank].store(false, Ordering::Release);
            return self.link.fence();
        }
        self.rma.order_after_control(self.rank, &self.link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawn_order_round_trips() {
        let o = Order {
            rank: 7,
            parent: ProcId { node: 1, squid: 3 },
            parent_rank: 2,
            rendezvous: "10.0.0.1:7470".into(),
            job: "job-42".into(),
        };
        let b = o.encode().expect("fits");
        assert_eq!(b.len(), ORDER_LEN);
        let d = Order::decode(&b).expect("decodes");
        assert_eq!((d.rank, d.parent, d.parent_rank), (7, o.parent, 2));
        assert_eq!(
            (d.rendezvous.as_str(), d.job.as_str()),
            ("10.0.0.1:7470", "job-42")
        );
        assert!(Order::decode(b"7\n1\n").is_err());
        let long = Order {
            job: "x".repeat(ORDER_LEN),
            ..o
        };
        assert!(long.encode().is_err());
    }

    #[test]
    fn a_key_holds_address_generation_and_flags_apart() {
        let (addr, generation) = (ADDR_MASK, GEN_MASK << ADDR_BITS);
        assert_eq!(addr & generation, 0);
        assert_eq!((addr | generation) & (IN_POOL | VIA_CONTROL), 0);
        assert_eq!(IN_POOL & VIA_CONTROL, 0);
    }

    #[test]
    fn a_loopback_host_is_this_host_for_mpi() {
        let here = host_name().expect("gethostname");
        assert_eq!(mpi_host("127.0.0.1"), here);
        assert_eq!(mpi_host("localhost"), here);
        assert_eq!(mpi_host("node7"), "node7");
    }
}
