//! Process creation, the way `vmmc-run` does it, on shared memory.
//!
//! A program started on its own (not under the launcher) becomes the controlling process
//! of an application: `nx_initve` sets its size (`-sz N` on the command line or
//! `NX_DFLT_SIZE`, else the CPUs this process may use, when `size` is 0); `nx_nfork`
//! forks one process per node, each a node of a new job from its return (0 in the
//! children, the number of children in the parent); `nx_load` / `nx_loadve` / `load`
//! start a program on every node instead; the controlling process holds the job's
//! rendezvous (as vmmc-run does) and `nx_waitall` waits for the nodes. The controlling
//! process is not a node.
//!
//! What is not possible: adding processes to a job that runs (a process that is already a
//! node, started by vmmc-run, gets EQNOTSUP: the multi-host job spawn does not exist yet),
//! creating the nodes of an application one at a time (the job's nodes start together),
//! partitions (`-pn`, a partition name).

use super::*;
use std::ffi::{c_int, CString};
use std::path::PathBuf;
use std::sync::Arc;
use vmmc::bootstrap::vars;
use vmmc_shm::server::Rendezvous;

/// The application this process controls.
struct App {
    size: usize,
    job: Option<Job>,
}

/// A job this process started.
struct Job {
    dir: PathBuf,
    rv: Arc<Rendezvous>,
    /// One waiter per node: waits for it and tells the rendezvous when it ended.
    waiters: Vec<std::thread::JoinHandle<()>>,
}

static APP: Mutex<Option<App>> = Mutex::new(None);

const IN_JOB: &str = "this process is a node of a job started by the launcher (or of a job \
                      of its own, made by an earlier message-passing call): processes \
                      cannot be added to a running job (that needs the multi-host job \
                      spawn, which does not exist yet)";
const NO_APP: &str = "no application: call nx_initve first (from a program started on its \
                      own, not under vmmc-run)";
const WHOLE: &str = "the nodes of a job start together: create all of them in one call \
                     (node list NULL or numnodes -1)";
const NO_PART: &str = "partitions do not exist on Linux: give no partition name";
pub(crate) const WAITALL: &str = "nx_waitall: no process was created by nx_nfork or nx_load";

/// Whether this process is a node already, or tried to be (its children would inherit the
/// failed start).
fn in_job() -> bool {
    GLOBAL.get().is_some() || std::env::var_os(vars::RANK).is_some()
}

/// A C string argument that must be NULL or empty.
///
/// # Safety
/// `s` NULL or a C string.
unsafe fn empty(s: *const c_char) -> bool {
    // SAFETY: the caller's contract.
    s.is_null() || unsafe { *s == 0 }
}

/// Takes `-sz N` out of the command line; returns N.
///
/// # Safety
/// `argc`/`argv` NULL or main's.
unsafe fn take_sz(argc: *mut c_int, argv: *mut *mut c_char) -> Option<usize> {
    if argc.is_null() || argv.is_null() {
        return None;
    }
    // SAFETY: main's argc and argv, by the contract.
    unsafe {
        let n = *argc as usize;
        for k in 1..n.saturating_sub(1) {
            if CStr::from_ptr(*argv.add(k)).to_bytes() == b"-sz" {
                let v = CStr::from_ptr(*argv.add(k + 1))
                    .to_str()
                    .ok()?
                    .parse()
                    .ok()?;
                // Shift the rest (and the NULL after it) down by two.
                for j in k..=n - 2 {
                    *argv.add(j) = *argv.add(j + 2);
                }
                *argc -= 2;
                return Some(v);
            }
        }
    }
    None
}

fn default_size() -> usize {
    std::env::var("NX_DFLT_SIZE")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn do_initve(
    partition: *const c_char,
    size: c_long,
    argc: *mut c_int,
    argv: *mut *mut c_char,
) -> Result<c_long, NxError> {
    if in_job() {
        return Err(NxError::Unsupported(IN_JOB));
    }
    // SAFETY: NX's contract: a C string or NULL.
    if !unsafe { empty(partition) } {
        return Err(NxError::Unsupported(NO_PART));
    }
    if size < 0 {
        return Err(NxError::InvalidLength(size as i64));
    }
    // SAFETY: main's argc and argv, as NX requires.
    let sz = unsafe { take_sz(argc, argv) };
    let n = if size > 0 {
        size as usize
    } else {
        sz.unwrap_or_else(default_size)
    };
    let mut app = lock(&APP);
    if app.as_ref().is_some_and(|a| a.job.is_some()) {
        return Err(NxError::NotAllowed(
            "nx_initve: this process's application runs (nx_waitall first)",
        ));
    }
    *app = Some(App { size: n, job: None });
    Ok(n as c_long)
}

/// Makes this process the controlling process of an application of `size` nodes (0: `-sz
/// N` of the command line, which is taken out of argv, or `NX_DFLT_SIZE`, or the CPUs);
/// returns the size. `partition` must be NULL or empty; `account` is not used.
/// # Safety
/// `partition` NULL or a C string; `argc`, `argv` NULL or main's.
#[no_mangle]
pub unsafe extern "C" fn nx_initve(
    partition: *const c_char,
    size: c_long,
    _account: *const c_char,
    argc: *mut c_int,
    argv: *mut *mut c_char,
) -> c_long {
    soft(|| do_initve(partition, size, argc, argv))
}

/// `nx_initve` of `rows` x `cols` nodes (`anchor` must be 0 or -1: no partitions).
/// # Safety
/// As `nx_initve`.
#[no_mangle]
pub unsafe extern "C" fn nx_initve_rect(
    partition: *const c_char,
    anchor: c_long,
    rows: c_long,
    cols: c_long,
    _account: *const c_char,
    argc: *mut c_int,
    argv: *mut *mut c_char,
) -> c_long {
    soft(|| {
        if anchor > 0 {
            return Err(NxError::Unsupported(NO_PART));
        }
        if rows <= 0 || cols <= 0 {
            return Err(NxError::InvalidLength(rows.min(cols) as i64));
        }
        do_initve(partition, rows * cols, argc, argv)
    })
}

/// The application's size, checking a node list: all nodes at once only.
fn whole(nodes: *const c_long, nnodes: c_long) -> Result<usize, NxError> {
    let size = lock(&APP)
        .as_ref()
        .map(|a| a.size)
        .ok_or(NxError::Unsupported(if in_job() { IN_JOB } else { NO_APP }))?;
    if nodes.is_null() && nnodes == -1 {
        return Ok(size);
    }
    if nnodes as usize == size && !nodes.is_null() {
        // SAFETY: NX's contract: `nnodes` longs.
        let l = unsafe { std::slice::from_raw_parts(nodes, size) };
        if l.iter().enumerate().all(|(i, &v)| v as usize == i) {
            return Ok(size);
        }
    }
    Err(NxError::Unsupported(WHOLE))
}

/// A fresh job directory for the rendezvous socket, as vmmc-run makes.
fn job_dir() -> Result<PathBuf, NxError> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let d = base.join(format!("nx-job-{}-{i}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => break,
        }
    }
    Err(NxError::NotAllowed("cannot create a job directory"))
}

/// The environment of node `rank`: what vmmc-run sets, and the node's process type.
fn node_env(
    rank: usize,
    size: usize,
    sock: &std::path::Path,
    ptype: c_long,
) -> Vec<(String, String)> {
    vec![
        (vars::TRANSPORT.into(), "shm".into()),
        (vars::RANK.into(), rank.to_string()),
        (vars::SIZE.into(), size.to_string()),
        (vars::RENDEZVOUS.into(), sock.to_string_lossy().into_owned()),
        (vars::JOB.into(), format!("nx-{}", std::process::id())),
        ("NX_PTYPE".into(), ptype.to_string()),
    ]
}

/// Starts the rendezvous and one waiter per node; records the job.
fn started(dir: PathBuf, sock: &std::path::Path, pids: &[libc::pid_t]) -> Result<(), NxError> {
    let rv = match Rendezvous::start(sock, pids.len()) {
        Ok(rv) => Arc::new(rv),
        Err(e) => {
            for &p in pids {
                // SAFETY: our own children.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            return Err(NxError::from(e));
        }
    };
    let waiters = pids
        .iter()
        .enumerate()
        .map(|(rank, &pid)| {
            let rv = rv.clone();
            std::thread::spawn(move || {
                let mut status = 0;
                // SAFETY: waitpid on our own child with a valid status pointer.
                while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                }
                rv.mark_ended(rank);
                if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                    rv.mark_dead(rank);
                }
            })
        })
        .collect();
    if let Some(app) = lock(&APP).as_mut() {
        app.job = Some(Job { dir, rv, waiters });
    }
    Ok(())
}

fn fill_pids(out: *mut c_long, pids: &[libc::pid_t]) {
    if !out.is_null() {
        for (i, &p) in pids.iter().enumerate() {
            // SAFETY: NX's contract: room for one pid per node.
            unsafe { *out.add(i) = p as c_long };
        }
    }
}

fn do_nfork(
    nodes: *const c_long,
    nnodes: c_long,
    ptype: c_long,
    out: *mut c_long,
) -> Result<c_long, NxError> {
    let size = whole(nodes, nnodes)?;
    if ptype < 0 {
        return Err(NxError::InvalidPtype(ptype as i64));
    }
    let dir = job_dir()?;
    let sock = dir.join("rendezvous.sock");
    // Everything the children set up, made before forking.
    let envs: Vec<Vec<(CString, CString)>> = (0..size)
        .map(|r| {
            node_env(r, size, &sock, ptype)
                .into_iter()
                .map(|(k, v)| {
                    (
                        CString::new(k).unwrap_or_default(),
                        CString::new(v).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .collect();
    let mut pids = Vec::with_capacity(size);
    for env in &envs {
        // SAFETY: fork; the child only sets its environment and returns to the program as
        // a node (it has no rendezvous: the parent starts it after the forks).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            for (k, v) in env {
                // SAFETY: C strings; the child is this process's only thread now.
                unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
            }
            *lock(&APP) = None;
            return Ok(0);
        }
        if pid < 0 {
            for &p in &pids {
                // SAFETY: our own children.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            return Err(NxError::NotAllowed("nx_nfork: fork failed"));
        }
        pids.push(pid);
    }
    started(dir, &sock, &pids)?;
    fill_pids(out, &pids);
    Ok(size as c_long)
}

/// Forks one process per node of the application (node list NULL and `nnodes` -1, or all
/// the nodes in order), each a node from its return, of process type `ptype`: returns 0 in
/// the children, the number of children in the parent (their pids in `pids`).
/// # Safety
/// `nodes` NULL or `nnodes` longs; `pids` NULL or room for a pid per node.
#[no_mangle]
pub unsafe extern "C" fn nx_nfork(
    nodes: *const c_long,
    nnodes: c_long,
    ptype: c_long,
    pids: *mut c_long,
) -> c_long {
    soft(|| do_nfork(nodes, nnodes, ptype, pids))
}

/// # Safety
/// `argv`, `envp` NULL or NULL-terminated arrays of C strings.
unsafe fn strings(p: *mut *mut c_char) -> Option<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    if p.is_null() {
        return None;
    }
    let mut v = Vec::new();
    // SAFETY: a NULL-terminated array of C strings, by the contract.
    unsafe {
        let mut k = 0;
        while !(*p.add(k)).is_null() {
            v.push(std::ffi::OsStr::from_bytes(CStr::from_ptr(*p.add(k)).to_bytes()).to_owned());
            k += 1;
        }
    }
    Some(v)
}

fn do_load(
    nodes: *const c_long,
    nnodes: c_long,
    ptype: c_long,
    out: *mut c_long,
    path: *const c_char,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> Result<c_long, NxError> {
    use std::os::unix::ffi::OsStrExt;
    let size = whole(nodes, nnodes)?;
    if ptype < 0 {
        return Err(NxError::InvalidPtype(ptype as i64));
    }
    if path.is_null() {
        return Err(NxError::InvalidLength(-1));
    }
    // SAFETY: a C string, by NX's contract.
    let prog = std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()).to_owned();
    // SAFETY: NX's contract.
    let (args, env) = unsafe { (strings(argv), strings(envp)) };
    let dir = job_dir()?;
    let sock = dir.join("rendezvous.sock");
    let mut pids = Vec::with_capacity(size);
    for rank in 0..size {
        let mut cmd = std::process::Command::new(&prog);
        if let Some(a) = &args {
            cmd.args(a.iter().skip(1));
            if let Some(a0) = a.first() {
                use std::os::unix::process::CommandExt;
                cmd.arg0(a0);
            }
        }
        if let Some(e) = &env {
            cmd.env_clear();
            for kv in e {
                let b = kv.as_bytes();
                if let Some(i) = b.iter().position(|&c| c == b'=') {
                    cmd.env(
                        std::ffi::OsStr::from_bytes(&b[..i]),
                        std::ffi::OsStr::from_bytes(&b[i + 1..]),
                    );
                }
            }
        }
        cmd.envs(node_env(rank, size, &sock, ptype));
        match cmd.spawn() {
            Ok(c) => pids.push(c.id() as libc::pid_t),
            Err(_) => {
                for &p in &pids {
                    // SAFETY: our own children.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                    // SAFETY: reaps the child just killed.
                    unsafe { libc::waitpid(p, std::ptr::null_mut(), 0) };
                }
                let _ = std::fs::remove_dir_all(&dir);
                return Err(NxError::NotAllowed("nx_load: cannot start the program"));
            }
        }
    }
    started(dir, &sock, &pids)?;
    fill_pids(out, &pids);
    Ok(size as c_long)
}

/// Starts `pathname` on every node of the application (as `nx_nfork` for the node list),
/// of process type `ptype`; returns the number of processes (their pids in `pids`).
/// # Safety
/// As `nx_nfork`; `pathname` a C string.
#[no_mangle]
pub unsafe extern "C" fn nx_load(
    nodes: *const c_long,
    nnodes: c_long,
    ptype: c_long,
    pids: *mut c_long,
    pathname: *const c_char,
) -> c_long {
    soft(|| {
        do_load(
            nodes,
            nnodes,
            ptype,
            pids,
            pathname,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    })
}

/// `nx_load` with the program's `argv` and environment `envp` (NULL: this process's).
/// # Safety
/// As `nx_load`; `argv`, `envp` NULL or NULL-terminated arrays of C strings.
#[no_mangle]
pub unsafe extern "C" fn nx_loadve(
    nodes: *const c_long,
    nnodes: c_long,
    ptype: c_long,
    pids: *mut c_long,
    pathname: *const c_char,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> c_long {
    soft(|| do_load(nodes, nnodes, ptype, pids, pathname, argv, envp))
}

fn do_load1(path: *const c_char, node: c_long, ptype: c_long) -> Result<c_long, NxError> {
    if node != -1 {
        return Err(NxError::Unsupported(WHOLE));
    }
    do_load(
        std::ptr::null(),
        -1,
        ptype,
        std::ptr::null_mut(),
        path,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
}

/// The iPSC's load: `pathname` on every node (`node` -1; one node alone: EQNOTSUP);
/// -1 and errno on error, as the `nx_` calls.
/// # Safety
/// `pathname` a C string.
#[no_mangle]
pub unsafe extern "C" fn load(pathname: *const c_char, node: c_long, ptype: c_long) -> c_long {
    soft(|| do_load1(pathname, node, ptype))
}

/// `load` returning -1 and setting errno on error.
/// # Safety
/// `pathname` a C string.
#[no_mangle]
pub unsafe extern "C" fn _load(pathname: *const c_char, node: c_long, ptype: c_long) -> c_long {
    soft(|| do_load1(pathname, node, ptype))
}

fn do_waitall() -> Result<c_long, NxError> {
    let job = lock(&APP).as_mut().and_then(|a| a.job.take());
    let Some(job) = job else {
        return Err(NxError::Unsupported(WAITALL));
    };
    for w in job.waiters {
        let _ = w.join();
    }
    drop(job.rv);
    let _ = std::fs::remove_dir_all(&job.dir);
    Ok(0)
}

/// Waits until every process that nx_nfork or nx_load created has ended; 0.
#[no_mangle]
pub extern "C" fn nx_waitall() -> c_long {
    soft(do_waitall)
}
