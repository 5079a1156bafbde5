//! `vmmc-run -n N [--transport shm|sim|tcp|rdma|mpi] [--tag-output] -- PROGRAM ARGS...`
//!
//! Starts N processes of PROGRAM with the environment the bootstrap reads, hosts the trusted
//! party (the rendezvous) for the job, and exits non-zero if any rank fails. Without
//! `--transport`, the transport is `VMMC_TRANSPORT` from the environment, else shm. Over tcp
//! the rendezvous listens on `--rendezvous HOST:PORT` (default: a free loopback port). A rank that dies
//! is reported to the others (their operations on it fail with "peer lost"); the job's shared
//! memory is anonymous (memfd) and goes away with its last user, and the rendezvous directory
//! is removed at exit, also when ranks crash. The mpi transport's jobs are MPI jobs: for
//! them vmmc-run becomes `mpirun` (`VMMC_MPIRUN` names another), with `--oversubscribe`,
//! `--allow-run-as-root` when run as root, and the transport passed on with `-x`.

use clap::Parser;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use vmmc::bootstrap::vars;
use vmmc_shm::server::Rendezvous;

#[derive(Parser, Debug)]
#[command(name = "vmmc-run", version, about = "Start a VMMC job")]
struct Args {
    /// Number of processes.
    #[arg(short = 'n', long = "np", default_value_t = 1)]
    n: usize,
    /// Transport (default: `VMMC_TRANSPORT`, else shm).
    #[arg(long)]
    transport: Option<String>,
    /// Where the tcp transport's rendezvous listens (default 127.0.0.1:0, a free port).
    #[arg(long)]
    rendezvous: Option<String>,
    /// Prefix every output line with "[rank] ".
    #[arg(long)]
    tag_output: bool,
    /// Pin each rank to a CPU ("core", rank k on the k-th CPU this launcher may use) or not
    /// ("none"). Default: core when there are at least as many CPUs as ranks, as MPI
    /// launchers do; spinning ranks that share a CPU would crawl.
    #[arg(long = "bind-to", value_parser = ["core", "none"])]
    bind_to: Option<String>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

fn job_dir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let d = base.join(format!("vmmc-job-{}-{i}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free job directory"))
}

/// Runs the job as an MPI job: this process becomes mpirun (signals then reach it directly).
fn exec_mpirun(args: &Args) -> Result<ExitCode, String> {
    use std::os::unix::process::CommandExt;
    if args.rendezvous.is_some() {
        return Err("--rendezvous is for the tcp transport (set VMMC_RENDEZVOUS for mpi)".into());
    }
    let mpirun = std::env::var("VMMC_MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = Command::new(&mpirun);
    cmd.args(["-n", &args.n.to_string(), "--oversubscribe"]);
    // SAFETY: geteuid has no memory effects.
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    if args.tag_output {
        cmd.arg("--tag-output");
    }
    if let Some(b) = &args.bind_to {
        cmd.args(["--bind-to", b]);
    }
    // A new job: not the MPI identity of a process that started us (an MPI singleton, such
    // as a test harness that made a job of one, carries its own in the environment, and
    // mpirun then fails without a word). The user's tuning (other OMPI_MCA_*) stays.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if [
            "PMIX_",
            "ORTE_",
            "OMPI_MCA_ess",
            "OMPI_MCA_orte_",
            "OMPI_MCA_pmix",
            "OMPI_COMM_WORLD_",
        ]
        .iter()
        .any(|p| k.starts_with(p))
            || [
                "OMPI_APP_CTX_NUM_PROCS",
                "OMPI_COMMAND",
                "OMPI_UNIVERSE_SIZE",
            ]
            .contains(&&*k)
        {
            cmd.env_remove(&*k);
        }
    }
    cmd.args(["-x", "VMMC_TRANSPORT=mpi"])
        .env(vars::TRANSPORT, "mpi")
        .args(&args.command);
    let e = cmd.exec();
    Err(format!("cannot run {mpirun}: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vmmc-run: {e}");
            ExitCode::from(2)
        }
    }
}

fn pump(
    rank: usize,
    src: impl std::io::Read + Send + 'static,
    to_err: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let r = BufReader::new(src);
        for line in r.split(b'\n') {
            let Ok(line) = line else { break };
            let mut out: Vec<u8> = format!("[{rank}] ").into_bytes();
            out.extend_from_slice(&line);
            out.push(b'\n');
            if to_err {
                let _ = std::io::stderr().lock().write_all(&out);
            } else {
                let _ = std::io::stdout().lock().write_all(&out);
            }
        }
    })
}

/// The simulator runs every node as a thread of one process: start that one process.
fn run_sim(args: &Args) -> Result<ExitCode, String> {
    if args.n > vmmc_sim::MAX_NODES {
        return Err(format!(
            "the sim transport runs at most {} nodes",
            vmmc_sim::MAX_NODES
        ));
    }
    let status = Command::new(&args.command[0])
        .args(&args.command[1..])
        .env(vars::TRANSPORT, "sim")
        .env(vars::RANK, "0")
        .env(vars::SIZE, args.n.to_string())
        .env(vars::JOB, std::process::id().to_string())
        .status()
        .map_err(|e| format!("cannot start {}: {e}", args.command[0]))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(c.clamp(1, 255) as u8),
        None => ExitCode::from(1),
    })
}

/// The job's trusted party: the shm rendezvous (a Unix socket, told of every rank's end by
/// the launcher) or the tcp one (which sees ranks leave on their connections; held to keep it
/// running).
enum Trusted {
    Shm(Rendezvous),
    Tcp(vmmc_tcp::server::Rendezvous),
}

impl Trusted {
    fn mark_dead(&self, rank: usize) {
        match self {
            Trusted::Shm(rv) => rv.mark_dead(rank),
            Trusted::Tcp(rv) => rv.mark_dead(rank),
        }
    }
    fn mark_ended(&self, rank: usize) {
        if let Trusted::Shm(rv) = self {
            rv.mark_ended(rank);
        }
    }
}

fn run(mut args: Args) -> Result<ExitCode, String> {
    let transport = args
        .transport
        .take()
        .or_else(|| {
            std::env::var(vars::TRANSPORT)
                .ok()
                .filter(|t| !t.is_empty())
        })
        .unwrap_or_else(|| "shm".into());
    args.transport = Some(transport.clone());
    if args.n == 0 {
        return Err("-n must be at least 1".into());
    }
    if !vmmc_run::TRANSPORTS.contains(&transport.as_str()) {
        return Err(format!(
            "unknown transport {transport:?} (this build has: {})",
            vmmc_run::TRANSPORTS.join(", ")
        ));
    }
    if transport == "sim" {
        return run_sim(&args);
    }
    if transport == "mpi" {
        return exec_mpirun(&args);
    }
    // The rdma transport's trusted party and control plane are the tcp transport's.
    let tcp_rendezvous = transport == "tcp" || transport == "rdma";
    if args.rendezvous.is_some() && !tcp_rendezvous {
        return Err("--rendezvous is for the tcp and rdma transports".into());
    }
    let pids: Arc<Mutex<Ranks>> = Arc::new(Mutex::new(Ranks::default()));
    forward_signals(pids.clone());
    let dir = job_dir().map_err(|e| format!("cannot create the job directory: {e}"))?;
    let cleanup = Cleanup(dir.clone());
    let sock = dir.join("rendezvous.sock");
    let (rv, rv_addr) = if tcp_rendezvous {
        let at = args.rendezvous.as_deref().unwrap_or("127.0.0.1:0");
        let rv = vmmc_tcp::server::Rendezvous::start(at, args.n).map_err(|e| e.to_string())?;
        let a = rv.addr().to_string();
        (Trusted::Tcp(rv), a)
    } else {
        let rv = Rendezvous::start(&sock, args.n).map_err(|e| e.to_string())?;
        (Trusted::Shm(rv), sock.display().to_string())
    };
    let job = format!("{}", std::process::id());
    let allowed = allowed_cpus();
    let bind = match args.bind_to.as_deref() {
        Some("core") => true,
        Some(_) => false,
        None => allowed.len() >= args.n,
    };
    // Rank k on the k-th allowed CPU (wrapping when asked to bind more ranks than CPUs).
    let cpus: Option<Vec<usize>> = (bind && !allowed.is_empty())
        .then(|| (0..args.n).map(|r| allowed[r % allowed.len()]).collect());
    let mut children = Vec::new();
    let mut pumps = Vec::new();
    for rank in 0..args.n {
        let mut cmd = Command::new(&args.command[0]);
        cmd.args(&args.command[1..])
            .env(vars::TRANSPORT, &transport)
            .env(vars::RANK, rank.to_string())
            .env(vars::SIZE, args.n.to_string())
            // The CPUs the job's ranks share, for the waiting policy (`vmmc::wait`): a rank
            // bound to one core must not take the job for oversubscribed.
            .env("VMMC_JOB_CPUS", allowed.len().max(1).to_string())
            .env(vars::RENDEZVOUS, &rv_addr)
            .env(vmmc_tcp::RENDEZVOUS_BY, "launcher")
            .env(vars::JOB, &job)
            .stdin(if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if args.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let cpu = cpus.as_ref().map(|c| c[rank]);
        let unblock = forwarded_set();
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the child between fork and exec and only calls
            // async-signal-safe functions on data built on its stack or copied in.
            unsafe {
                cmd.pre_exec(move || {
                    // The rank gets the default signal handling the launcher blocked.
                    libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, std::ptr::null_mut());
                    if let Some(cpu) = cpu {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu, &mut set);
                        // Best effort: a refused binding leaves the rank unpinned.
                        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                    }
                    Ok(())
                });
            }
        }
        match cmd.spawn() {
            Ok(mut c) => {
                let mut r = pids.lock().unwrap_or_else(|e| e.into_inner());
                r.pids.push(c.id() as libc::pid_t);
                if let Some(sig) = r.signal {
                    // SAFETY: kill on the rank just started.
                    unsafe { libc::kill(c.id() as libc::pid_t, sig) };
                }
                drop(r);
                if args.tag_output {
                    pumps.push(pump(rank, c.stdout.take().expect("piped"), false));
                    pumps.push(pump(rank, c.stderr.take().expect("piped"), true));
                }
                children.push((rank, c));
            }
            Err(e) => {
                eprintln!("vmmc-run: cannot start {:?}: {e}", args.command[0]);
                rv.mark_dead(rank);
                for (_, c) in children.iter_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Ok(ExitCode::from(127));
            }
        }
    }
    let mut worst: u8 = 0;
    // Reap in any order: a rank that dies is marked dead at once.
    let mut left = children.len();
    while left > 0 {
        let mut status = 0;
        // SAFETY: waitpid on our own children with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let Some(pos) = children.iter().position(|(_, c)| c.id() as i32 == pid) else {
            continue;
        };
        let rank = children[pos].0;
        left -= 1;
        pids.lock()
            .unwrap_or_else(|e| e.into_inner())
            .pids
            .retain(|&p| p != pid);
        rv.mark_ended(rank);
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status) as u8
        } else if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            eprintln!("vmmc-run: rank {rank} killed by signal {sig}");
            128u8.saturating_add(sig as u8)
        } else {
            1
        };
        if code != 0 {
            if libc::WIFEXITED(status) {
                eprintln!("vmmc-run: rank {rank} exited with status {code}");
            }
            rv.mark_dead(rank);
            if worst == 0 {
                worst = code;
            }
        }
    }
    for p in pumps {
        let _ = p.join();
    }
    drop(rv);
    drop(cleanup);
    Ok(ExitCode::from(worst))
}

/// The ranks alive, and the signal forwarded to them, if any (ranks started after it get it
/// too).
#[derive(Default)]
struct Ranks {
    pids: Vec<libc::pid_t>,
    signal: Option<libc::c_int>,
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// SIGINT, SIGTERM and SIGHUP to the launcher go to its ranks instead of killing it and
/// leaving them orphaned: they are blocked in every thread (call this before starting any),
/// and one thread waits for them and passes each on to the ranks alive in `pids`.
fn forward_signals(pids: Arc<Mutex<Ranks>>) {
    let set = forwarded_set();
    // SAFETY: blocks the signals for this thread and the threads it starts later.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    std::thread::spawn(move || loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return;
        }
        let mut r = pids.lock().unwrap_or_else(|e| e.into_inner());
        r.signal = Some(sig);
        for &pid in r.pids.iter() {
            // SAFETY: kill on a rank's pid; pids leave the list when they are reaped.
            unsafe { libc::kill(pid, sig) };
        }
    });
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set we own.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
