//! The few MPI calls the transport makes, behind safe functions. Every `unsafe` block of the
//! crate that touches MPI is here. MPI runs with `MPI_THREAD_MULTIPLE`: any thread may call.

use mpi_sys as sys;
use std::ffi::{c_int, c_void};
use vmmc::{Error, Result};

/// `MPI_SUCCESS` or an error naming the call.
fn check(rc: c_int, what: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Protocol(format!(
            "{what} failed with MPI error {rc}"
        )))
    }
}

fn count(len: usize) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| Error::InvalidArgument("transfer too long for an MPI count"))
}

/// Initialises MPI with full thread support, unless the program did already; returns whether
/// this call initialised it (and so must finalise it).
/// MPICH's switch for its progress thread (see [`init`]).
const MPICH_PROGRESS: &str = "MPIR_CVAR_ASYNC_PROGRESS";

/// `MPI_REPLACE`, found at run time: neither header defines it in a form bindgen carries
/// (Open MPI: the address of its `ompi_mpi_op_replace` object; MPICH: the constant
/// `0x5800000d` of its ABI). `None` under another MPI.
pub fn op_replace() -> Option<sys::MPI_Op> {
    static RAW: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let raw = (*RAW.get_or_init(|| {
        let v = library_version();
        if v.contains("Open MPI") {
            // SAFETY: looks a symbol up in the process's loaded objects by a NUL-terminated
            // name.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ompi_mpi_op_replace".as_ptr()) };
            (!p.is_null()).then_some(p as u64)
        } else if v.contains("MPICH") {
            Some(0x5800_000d)
        } else {
            None
        }
    }))?;
    // An `MPI_Op` is a pointer (Open MPI) or an int (MPICH): the value in the handle's size.
    match std::mem::size_of::<sys::MPI_Op>() {
        // SAFETY: both types are 8 bytes of plain data (a handle is a pointer or an int).
        8 => Some(unsafe { std::mem::transmute_copy::<u64, sys::MPI_Op>(&raw) }),
        // SAFETY: both types are 4 bytes of plain data.
        4 => Some(unsafe { std::mem::transmute_copy::<u32, sys::MPI_Op>(&(raw as u32)) }),
        _ => None,
    }
}

/// `MPI_Get_library_version` (callable before `MPI_Init`): which MPI this is.
pub fn library_version() -> String {
    let mut buf = vec![0u8; sys::MPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING bytes as the call requires.
    let rc = unsafe { sys::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return String::new();
    }
    buf.truncate((len.max(0) as usize).min(buf.len()));
    String::from_utf8_lossy(&buf).into_owned()
}

pub fn init() -> Result<bool> {
    // Threads of one process may join at once (tests do): one initialises.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut flag: c_int = 0;
    // SAFETY: MPI_Initialized may be called at any time; `flag` is a live c_int.
    let rc = unsafe { sys::MPI_Initialized(&mut flag) };
    check(rc, "MPI_Initialized")?;
    let mut provided: c_int = 0;
    let ours = flag == 0;
    if ours {
        if library_version().contains("MPICH") && std::env::var_os(MPICH_PROGRESS).is_none() {
            // MPICH completes a passive-target put only when the target's process enters
            // MPI (measured with MPICH 4.0 over UCX: a flush waits forever while its target
            // waits on a flag in memory, as every VMMC receiver does); its progress thread
            // makes the puts complete. Set before MPI reads its variables, in the one thread
            // that initialises MPI.
            std::env::set_var(MPICH_PROGRESS, "1");
        }
        // SAFETY: MPI is not initialised; MPI allows null argc/argv.
        let rc = unsafe {
            sys::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                sys::RSMPI_THREAD_MULTIPLE as c_int,
                &mut provided,
            )
        };
        check(rc, "MPI_Init_thread")?;
    } else {
        // SAFETY: MPI is initialised; `provided` is a live c_int.
        let rc = unsafe { sys::MPI_Query_thread(&mut provided) };
        check(rc, "MPI_Query_thread")?;
    }
    // SAFETY: reading an extern constant of the MPI library.
    let multiple = unsafe { sys::RSMPI_THREAD_MULTIPLE } as c_int;
    if provided != multiple {
        return Err(Error::Bootstrap(format!(
            "the mpi transport needs MPI_THREAD_MULTIPLE (this MPI gives level {provided})"
        )));
    }
    Ok(ours)
}

/// Finalises MPI (once, after every window is freed or abandoned).
pub fn finalize() {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time; `flag` is a live c_int.
    unsafe { sys::MPI_Finalized(&mut flag) };
    if flag == 0 {
        // SAFETY: MPI is initialised and not finalised; no call of ours is in progress (the
        // transport has finished).
        unsafe { sys::MPI_Finalize() };
    }
}

/// Rank and size in `MPI_COMM_WORLD`.
pub fn world() -> Result<(usize, usize)> {
    let (mut r, mut s): (c_int, c_int) = (0, 0);
    // SAFETY: MPI is initialised; both out-pointers are live c_ints.
    let rc = unsafe {
        sys::MPI_Comm_rank(sys::RSMPI_COMM_WORLD, &mut r)
            | sys::MPI_Comm_size(sys::RSMPI_COMM_WORLD, &mut s)
    };
    check(rc, "MPI_Comm_rank/size")?;
    Ok((r as usize, s as usize))
}

/// How many ranks of `MPI_COMM_WORLD` share this process's node (memory).
pub fn local_size() -> Result<usize> {
    let mut c: sys::MPI_Comm = unsafe_comm_null();
    // SAFETY: MPI is initialised; `c` receives a new communicator, freed below.
    let rc = unsafe {
        sys::MPI_Comm_split_type(
            sys::RSMPI_COMM_WORLD,
            sys::RSMPI_COMM_TYPE_SHARED as c_int,
            0,
            sys::RSMPI_INFO_NULL,
            &mut c,
        )
    };
    check(rc, "MPI_Comm_split_type")?;
    let mut n: c_int = 0;
    // SAFETY: `c` is the communicator just created; freed once.
    unsafe {
        sys::MPI_Comm_size(c, &mut n);
        sys::MPI_Comm_free(&mut c);
    }
    Ok(n as usize)
}

fn unsafe_comm_null() -> sys::MPI_Comm {
    // SAFETY: reading an extern constant handle of the MPI library.
    unsafe { sys::RSMPI_COMM_NULL }
}

/// Rank 0's bytes to every rank (`buf` the same length everywhere).
pub fn bcast(buf: &mut [u8]) -> Result<()> {
    // SAFETY: `buf` is valid for reads and writes of its length during the blocking call.
    let rc = unsafe {
        sys::MPI_Bcast(
            buf.as_mut_ptr().cast::<c_void>(),
            count(buf.len())?,
            sys::RSMPI_UINT8_T,
            0,
            sys::RSMPI_COMM_WORLD,
        )
    };
    check(rc, "MPI_Bcast")
}

/// Every rank's `value`, by rank.
pub fn allgather(value: u64) -> Result<Vec<u64>> {
    let (_, size) = world()?;
    let mut all = vec![0u64; size];
    // SAFETY: one u64 in, `size` u64s out, both valid during the blocking call.
    let rc = unsafe {
        sys::MPI_Allgather(
            (&value as *const u64).cast::<c_void>(),
            8,
            sys::RSMPI_UINT8_T,
            all.as_mut_ptr().cast::<c_void>(),
            8,
            sys::RSMPI_UINT8_T,
            sys::RSMPI_COMM_WORLD,
        )
    };
    check(rc, "MPI_Allgather")?;
    Ok(all)
}

/// `MPI_Barrier` on `MPI_COMM_WORLD`.
pub fn barrier() -> Result<()> {
    // SAFETY: MPI is initialised.
    let rc = unsafe { sys::MPI_Barrier(sys::RSMPI_COMM_WORLD) };
    check(rc, "MPI_Barrier")
}

/// Address of `p` as MPI displaces into a dynamic window.
pub fn address(p: *const u8) -> Result<i64> {
    let mut a: sys::MPI_Aint = 0;
    // SAFETY: MPI_Get_address only computes from the pointer's value.
    let rc = unsafe { sys::MPI_Get_address(p.cast::<c_void>(), &mut a) };
    check(rc, "MPI_Get_address")?;
    Ok(a as i64)
}

/// A window of `MPI_COMM_WORLD`, in one passive epoch to every rank from its creation on
/// (`MPI_Win_lock_all` with `MPI_MODE_NOCHECK`: nobody ever locks exclusively).
pub struct Win {
    w: sys::MPI_Win,
    /// For an allocated window: this rank's memory.
    base: *mut u8,
}

// SAFETY: an MPI window handle may be used from any thread under MPI_THREAD_MULTIPLE, which
// `init` insists on; `base` is memory owned by the window, valid until it is freed.
unsafe impl Send for Win {}
// SAFETY: as above.
unsafe impl Sync for Win {}

impl Win {
    fn epoch(w: sys::MPI_Win, base: *mut u8) -> Result<Win> {
        // SAFETY: `w` is a window just created; errors come back as codes from now on.
        let rc = unsafe {
            sys::MPI_Win_set_errhandler(w, sys::RSMPI_ERRORS_RETURN)
                | sys::MPI_Win_lock_all(sys::MPI_MODE_NOCHECK as c_int, w)
        };
        check(rc, "MPI_Win_lock_all")?;
        Ok(Win { w, base })
    }

    /// `MPI_Win_create_dynamic` (collective): memory is attached later, rank by rank.
    pub fn dynamic() -> Result<Win> {
        Win::dynamic_on(&Comm::world())
    }

    /// `MPI_Win_create_dynamic` over `comm` (collective).
    pub fn dynamic_on(comm: &Comm) -> Result<Win> {
        // SAFETY: a null handle, overwritten by the call.
        let mut w: sys::MPI_Win = unsafe { sys::RSMPI_WIN_NULL };
        // SAFETY: MPI is initialised; `w` receives the window.
        let rc = unsafe { sys::MPI_Win_create_dynamic(sys::RSMPI_INFO_NULL, comm.0, &mut w) };
        check(rc, "MPI_Win_create_dynamic")?;
        Win::epoch(w, std::ptr::null_mut())
    }

    /// `MPI_Win_allocate` of `len` bytes per rank (collective).
    pub fn allocate(len: usize) -> Result<Win> {
        Win::allocate_on(len, &Comm::world())
    }

    /// `MPI_Win_allocate` of `len` bytes per rank of `comm` (collective).
    pub fn allocate_on(len: usize, comm: &Comm) -> Result<Win> {
        // SAFETY: a null handle, overwritten by the call.
        let mut w: sys::MPI_Win = unsafe { sys::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: MPI is initialised; `base` receives the address of the window's memory
        // (the C signature takes it as `void *`), `w` the window.
        let rc = unsafe {
            sys::MPI_Win_allocate(
                len as sys::MPI_Aint,
                1,
                sys::RSMPI_INFO_NULL,
                comm.0,
                (&mut base as *mut *mut u8).cast::<c_void>(),
                &mut w,
            )
        };
        check(rc, "MPI_Win_allocate")?;
        Win::epoch(w, base)
    }

    /// Ends the window's epoch and frees it (collective: every rank frees its windows in
    /// the same order). MPICH's UCX layer insists on it before `MPI_Finalize`.
    ///
    /// # Safety
    /// Nothing may use the window, or an allocated window's memory, afterwards.
    pub unsafe fn free(&self) {
        let mut w = self.w;
        // SAFETY: a window in its `lock_all` epoch; the caller guarantees no later use.
        unsafe {
            sys::MPI_Win_unlock_all(w);
            sys::MPI_Win_free(&mut w);
        }
    }

    /// `MPI_Win_allocate_shared` of `len` bytes per rank of `MPI_COMM_WORLD` (collective;
    /// every rank on one node): every rank can address every rank's part directly
    /// ([`Win::shared_base`]).
    pub fn allocate_shared(len: usize) -> Result<Win> {
        // SAFETY: a null handle, overwritten by the call.
        let mut w: sys::MPI_Win = unsafe { sys::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: MPI is initialised; `base` receives the address of this rank's part (the C
        // signature takes it as `void *`), `w` the window.
        let rc = unsafe {
            sys::MPI_Win_allocate_shared(
                len as sys::MPI_Aint,
                1,
                sys::RSMPI_INFO_NULL,
                sys::RSMPI_COMM_WORLD,
                (&mut base as *mut *mut u8).cast::<c_void>(),
                &mut w,
            )
        };
        check(rc, "MPI_Win_allocate_shared")?;
        Win::epoch(w, base)
    }

    /// Where `rank`'s part of a window made by [`Win::allocate_shared`] lies in this
    /// process (`MPI_Win_shared_query`).
    pub fn shared_base(&self, rank: usize) -> Result<*mut u8> {
        Ok(self.shared_part(rank)?.0)
    }

    /// Where `rank`'s part of a window made by [`Win::allocate_shared`] lies in this
    /// process, and its length in bytes.
    pub fn shared_part(&self, rank: usize) -> Result<(*mut u8, usize)> {
        let (mut size, mut unit): (sys::MPI_Aint, c_int) = (0, 0);
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: a shared window; the out-pointers are live.
        let rc = unsafe {
            sys::MPI_Win_shared_query(
                self.w,
                rank as c_int,
                &mut size,
                &mut unit,
                (&mut base as *mut *mut u8).cast::<c_void>(),
            )
        };
        check(rc, "MPI_Win_shared_query")?;
        Ok((base, size as usize))
    }

    /// A second handle to the same window (to free it at exit through one of them only).
    pub fn alias(&self) -> Win {
        Win {
            w: self.w,
            base: self.base,
        }
    }

    /// This rank's memory of an allocated window.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Attaches `len` bytes at `base` to a dynamic window.
    ///
    /// # Safety
    /// The memory must stay valid until [`Win::detach`].
    pub unsafe fn attach(&self, base: *mut u8, len: usize) -> Result<()> {
        // SAFETY: the caller keeps the memory valid while attached.
        let rc =
            unsafe { sys::MPI_Win_attach(self.w, base.cast::<c_void>(), len as sys::MPI_Aint) };
        check(rc, "MPI_Win_attach")
    }

    /// Detaches memory attached at `base`.
    pub fn detach(&self, base: *mut u8) -> Result<()> {
        // SAFETY: MPI only looks the address up among the attached regions.
        let rc = unsafe { sys::MPI_Win_detach(self.w, base.cast::<c_void>()) };
        check(rc, "MPI_Win_detach")
    }

    /// Starts writing `data` to `rank`'s window at displacement `disp` (complete at the
    /// target after [`Win::flush`]).
    pub fn put(&self, data: &[u8], rank: usize, disp: i64) -> Result<()> {
        let n = count(data.len())?;
        // SAFETY: `data` stays borrowed until the caller's flush, which completes the put
        // (every caller flushes before returning); MPI reads `n` bytes of it.
        let rc = unsafe {
            sys::MPI_Put(
                data.as_ptr().cast::<c_void>(),
                n,
                sys::RSMPI_UINT8_T,
                rank as c_int,
                disp as sys::MPI_Aint,
                n,
                sys::RSMPI_UINT8_T,
                self.w,
            )
        };
        check(rc, "MPI_Put")
    }

    /// Starts replacing the 8 bytes of `rank`'s window at `disp` as one element of an
    /// accumulate (`MPI_REPLACE` on an `MPI_UINT64_T`): MPI makes an accumulate's elements
    /// atomic, so a reader never sees half of them (complete after [`Win::flush`]).
    pub fn replace_u64(
        &self,
        data: &[u8; 8],
        op: sys::MPI_Op,
        rank: usize,
        disp: i64,
    ) -> Result<()> {
        // SAFETY: `data` stays borrowed until the caller's flush; MPI reads 8 bytes of it.
        let rc = unsafe {
            sys::MPI_Accumulate(
                data.as_ptr().cast::<c_void>(),
                1,
                sys::RSMPI_UINT64_T,
                rank as c_int,
                disp as sys::MPI_Aint,
                1,
                sys::RSMPI_UINT64_T,
                op,
                self.w,
            )
        };
        check(rc, "MPI_Accumulate")
    }

    /// Reads `out.len()` bytes of `rank`'s window at `disp` (complete after the flush made
    /// here).
    pub fn get(&self, out: &mut [u8], rank: usize, disp: i64) -> Result<()> {
        let n = count(out.len())?;
        // SAFETY: `out` is valid for writes of `n` bytes until the flush below completes the
        // get.
        let rc = unsafe {
            sys::MPI_Get(
                out.as_mut_ptr().cast::<c_void>(),
                n,
                sys::RSMPI_UINT8_T,
                rank as c_int,
                disp as sys::MPI_Aint,
                n,
                sys::RSMPI_UINT8_T,
                self.w,
            )
        };
        check(rc, "MPI_Get")?;
        self.flush(rank)
    }

    /// `MPI_Win_flush`: every operation of this process to `rank` is complete there.
    pub fn flush(&self, rank: usize) -> Result<()> {
        // SAFETY: the window is in its passive epoch.
        let rc = unsafe { sys::MPI_Win_flush(rank as c_int, self.w) };
        check(rc, "MPI_Win_flush")
    }
}

/// A communicator other than `MPI_COMM_WORLD`: the intercommunicator between a spawner and
/// the process it spawned, or their merged intracommunicator. Kept until the process exits,
/// when the merged one is freed ([`Comm::free`]) and the intercommunicator disconnected
/// ([`Comm::disconnect`]).
pub struct Comm(sys::MPI_Comm);

// SAFETY: a communicator handle may be used from any thread under MPI_THREAD_MULTIPLE,
// which `init` insists on.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl Comm {
    fn world() -> Comm {
        // SAFETY: reading an extern constant handle of the MPI library.
        Comm(unsafe { sys::RSMPI_COMM_WORLD })
    }

    /// The intercommunicator to the process that spawned this one (`MPI_Comm_get_parent`),
    /// if one did.
    pub fn parent() -> Result<Option<Comm>> {
        let mut c = unsafe_comm_null();
        // SAFETY: MPI is initialised; `c` receives the handle.
        let rc = unsafe { sys::MPI_Comm_get_parent(&mut c) };
        check(rc, "MPI_Comm_get_parent")?;
        Ok((c != unsafe_comm_null()).then_some(Comm(c)))
    }

    /// `MPI_Comm_spawn` of one process running `program args` on `host` (info key "host"),
    /// by this process alone (`MPI_COMM_SELF`): the intercommunicator to it. MPI's error,
    /// if any, comes back as text (the spawn is then failed, not the job aborted).
    pub fn spawn(program: &str, args: &[String], host: &str) -> std::result::Result<Comm, String> {
        use std::ffi::CString;
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"));
        let prog = cstr(program)?;
        let args = args
            .iter()
            .map(|a| cstr(a))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut argv: Vec<*mut std::ffi::c_char> =
            args.iter().map(|a| a.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        let (key, value) = (cstr("host")?, cstr(host)?);
        let mut info = std::mem::MaybeUninit::<sys::MPI_Info>::uninit();
        // SAFETY: MPI is initialised; `info` receives a new info object, freed below.
        let rc = unsafe { sys::MPI_Info_create(info.as_mut_ptr()) };
        if rc != 0 {
            return Err(format!("MPI_Info_create failed with MPI error {rc}"));
        }
        // SAFETY: initialised by the successful call above.
        let mut info = unsafe { info.assume_init() };
        let mut inter = unsafe_comm_null();
        let mut code: c_int = 0;
        // SAFETY: `info` is live; key and value are NUL-terminated; `argv` is a
        // NULL-terminated array of NUL-terminated strings that outlive the call (MPI copies
        // them); `inter` and `code` receive one handle and one error code (maxprocs 1).
        // Errors on MPI_COMM_SELF are returned, not fatal.
        let rc = unsafe {
            sys::MPI_Info_set(info, key.as_ptr(), value.as_ptr());
            sys::MPI_Comm_set_errhandler(sys::RSMPI_COMM_SELF, sys::RSMPI_ERRORS_RETURN);
            let rc = sys::MPI_Comm_spawn(
                prog.as_ptr(),
                argv.as_mut_ptr(),
                1,
                info,
                0,
                sys::RSMPI_COMM_SELF,
                &mut inter,
                &mut code,
            );
            sys::MPI_Info_free(&mut info);
            rc
        };
        if rc != 0 || code != 0 {
            return Err(format!(
                "MPI_Comm_spawn of {program:?} on {host:?} failed: {}",
                error_string(if rc != 0 { rc } else { code })
            ));
        }
        Ok(Comm(inter))
    }

    /// `MPI_Intercomm_merge` (collective over both groups): the spawner passes
    /// `high = false` and so is rank 0 of the result, the spawned process rank 1.
    pub fn merge(&self, high: bool) -> Result<Comm> {
        let mut c = unsafe_comm_null();
        // SAFETY: `self` is an intercommunicator; `c` receives the new communicator.
        let rc = unsafe { sys::MPI_Intercomm_merge(self.0, high as c_int, &mut c) };
        check(rc, "MPI_Intercomm_merge")?;
        Ok(Comm(c))
    }

    /// `MPI_Comm_free` (local): the communicator is gone once nothing is pending on it.
    pub fn free(mut self) -> Result<()> {
        // SAFETY: a communicator of ours, consumed: no later use of the handle.
        check(unsafe { sys::MPI_Comm_free(&mut self.0) }, "MPI_Comm_free")
    }

    /// `MPI_Comm_disconnect` of an intercommunicator, collective over both of its groups:
    /// returns when the communication on it is complete on both sides and the two
    /// processes are no longer connected, so each may finalise without the other.
    pub fn disconnect(mut self) -> Result<()> {
        // SAFETY: a communicator of ours, consumed: no later use of the handle.
        check(
            unsafe { sys::MPI_Comm_disconnect(&mut self.0) },
            "MPI_Comm_disconnect",
        )
    }

    /// Sends `data` to `rank` (of the remote group, for an intercommunicator).
    pub fn send(&self, data: &[u8], rank: usize) -> Result<()> {
        // SAFETY: `data` is valid for reads during the blocking call.
        let rc = unsafe {
            sys::MPI_Send(
                data.as_ptr().cast::<c_void>(),
                count(data.len())?,
                sys::RSMPI_UINT8_T,
                rank as c_int,
                0,
                self.0,
            )
        };
        check(rc, "MPI_Send")
    }

    /// Receives exactly `out.len()` bytes from `rank` (what [`Comm::send`] sent).
    pub fn recv(&self, out: &mut [u8], rank: usize) -> Result<()> {
        // SAFETY: `out` is valid for writes during the blocking call.
        let rc = unsafe {
            sys::MPI_Recv(
                out.as_mut_ptr().cast::<c_void>(),
                count(out.len())?,
                sys::RSMPI_UINT8_T,
                rank as c_int,
                0,
                self.0,
                sys::RSMPI_STATUS_IGNORE,
            )
        };
        check(rc, "MPI_Recv")
    }
}

/// MPI's text for an error code.
fn error_string(code: c_int) -> String {
    let mut buf = vec![0u8; sys::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING bytes as the call requires.
    let rc = unsafe { sys::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return format!("MPI error {code}");
    }
    buf.truncate((len.max(0) as usize).min(buf.len()));
    String::from_utf8_lossy(&buf).into_owned()
}
