//! `vmmc-run -n N [--transport shm|sim|tcp|rdma|mpi] [--hosts H1,H2,...] [--rsh AGENT] [--spawn-slots K] [--abort-grace SECS|never] [--tag-output] -- PROGRAM ARGS...`
//!
//! Starts N processes of PROGRAM with the environment the bootstrap reads, hosts the trusted
//! party (the rendezvous) for the job, and exits non-zero if any rank fails. Without
//! `--transport`, the transport is `VMMC_TRANSPORT` from the environment, else shm. Over tcp
//! the rendezvous listens on `--rendezvous HOST:PORT` (default: a free loopback port). A rank that dies
//! is reported to the others (their operations on it fail with "peer lost"); the job's shared
//! memory is anonymous (memfd) and goes away with its last user, and the rendezvous directory
//! is removed at exit, also when ranks crash. The others may run on for `--abort-grace`
//! seconds after a rank fails (default 10), long enough to see the loss and end on their own;
//! the ones still running then are ended (SIGTERM, then SIGKILL), as mpirun ends a job whose
//! rank failed, so that a rank waiting for something only the failed one would have sent
//! cannot hang the job. The mpi transport's jobs are MPI jobs: for
//! them vmmc-run becomes `mpirun` (`VMMC_MPIRUN` names another), with `--oversubscribe`,
//! `--allow-run-as-root` when run as root, and the transport passed on with `-x`.
//!
//! `--hosts` places rank k on the k-th host, round-robin (tcp; for mpi it becomes mpirun's
//! `--host`). Ranks start through the site's remote-shell agent, as Open MPI's
//! `plm_rsh_agent` does (`--rsh`, else `VMMC_RSH`, else `ssh`; e.g. `--rsh "ip netns exec"`),
//! with the job's environment (every `VMMC_*` variable) on the command line: nothing of ours
//! runs on the hosts but the ranks. The rendezvous then listens on every address (or on
//! `--rendezvous`) and the ranks reach it at the address this host uses towards the first
//! host. A rank's `vmmc_Spawn` comes here: the process starts the same way (on this host
//! directly, on a host of `--hosts` through the agent) and joins the job (tcp: up to 256;
//! shm: as many as `--spawn-slots` reserved).

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
    /// Hosts to place the ranks on, round-robin, comma-separated (tcp, mpi).
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
    /// The remote-shell agent that starts a process on a host: `AGENT HOST COMMAND...`
    /// (default: `VMMC_RSH`, else ssh).
    #[arg(long)]
    rsh: Option<String>,
    /// How many processes the ranks may spawn (`vmmc_Spawn`) over shm, whose tables are sized
    /// at the start (tcp needs no reservation). Default 0.
    #[arg(long = "spawn-slots", default_value_t = 0)]
    spawn_slots: usize,
    /// Seconds the other ranks may run on after a rank fails before the launcher ends them
    /// ("never": they run to their own end).
    #[arg(long = "abort-grace", default_value = "10", value_parser = parse_grace)]
    abort_grace: Grace,
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
    if !args.hosts.is_empty() {
        cmd.args(["--host", &args.hosts.join(",")]);
    }
    if let Some(a) = &args.rsh {
        cmd.args(["--mca", "plm_rsh_agent", a]);
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

/// `--abort-grace`: how long the ranks may outlive a failed one (`None`: for ever).
#[derive(Clone, Copy, Debug)]
struct Grace(Option<std::time::Duration>);

fn parse_grace(s: &str) -> Result<Grace, String> {
    if s == "never" {
        return Ok(Grace(None));
    }
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is neither a number of seconds nor \"never\""))?;
    std::time::Duration::try_from_secs_f64(secs)
        .map(|d| Grace(Some(d)))
        .map_err(|_| format!("{s:?} is not a time in seconds (0 or more)"))
}

/// After a rank failed: waits `grace`, then ends the processes of the job still running
/// (SIGTERM; SIGKILL to the ones left 3 s later). The reaping loop sees them end.
fn end_after(launch: Arc<Launch>, failed: usize, grace: std::time::Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(grace);
        let signal_all = |sig: libc::c_int| {
            let kids = lock(&launch.kids);
            // Every pid here is unreaped (the reaper removes one under this lock after
            // waitpid), so none can have been reused.
            for (_, c) in kids.iter() {
                // SAFETY: kill on a child of ours that is not yet reaped.
                unsafe { libc::kill(c.id() as libc::pid_t, sig) };
            }
            kids.len()
        };
        let left = lock(&launch.kids).len();
        if left == 0 {
            return;
        }
        eprintln!(
            "vmmc-run: rank {failed} failed {:.1} s ago and {left} process(es) of the job \
             still run: ending them (--abort-grace)",
            grace.as_secs_f64()
        );
        signal_all(libc::SIGTERM);
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(3) {
            if lock(&launch.kids).is_empty() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        signal_all(libc::SIGKILL);
    });
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
    /// Whether `rank` was a spawned process that never joined (its spawner is told).
    fn mark_ended(&self, rank: usize, how: &str) -> bool {
        match self {
            Trusted::Shm(rv) => {
                rv.mark_ended(rank);
                rv.spawn_ended(rank, how)
            }
            Trusted::Tcp(rv) => rv.mark_ended(rank, how),
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
    if !args.hosts.is_empty() && !["tcp", "rdma", "mpi"].contains(&transport.as_str()) {
        return Err(format!(
            "--hosts places ranks on other hosts over the tcp, rdma or mpi transport, not \
             {transport}"
        ));
    }
    if args.hosts.iter().any(|h| h.trim().is_empty()) {
        return Err("--hosts has an empty host name".into());
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
        let (at, advertise) = match (&args.rendezvous, args.hosts.first()) {
            (Some(a), _) => (a.clone(), None),
            (None, None) => ("127.0.0.1:0".to_string(), None),
            // Other hosts must reach it: every address, advertised as the one this host
            // uses towards them.
            (None, Some(h)) => ("0.0.0.0:0".to_string(), Some(route_to(h)?)),
        };
        let rv = vmmc_tcp::server::Rendezvous::start(&at, args.n).map_err(|e| e.to_string())?;
        let a = match advertise {
            Some(ip) => std::net::SocketAddr::new(ip, rv.addr().port()).to_string(),
            None => rv.addr().to_string(),
        };
        (Trusted::Tcp(rv), a)
    } else {
        let cap = args.n.saturating_add(args.spawn_slots);
        let rv = Rendezvous::start_with_capacity(&sock, args.n, cap).map_err(|e| e.to_string())?;
        (Trusted::Shm(rv), sock.display().to_string())
    };
    let allowed = allowed_cpus();
    let bind = match args.bind_to.as_deref() {
        Some("core") => true,
        Some(_) => false,
        None => args.hosts.is_empty() && allowed.len() >= args.n,
    };
    let here = host_name();
    let session = if args.hosts.is_empty() {
        vec![here.clone()]
    } else {
        args.hosts.clone()
    };
    let rsh = args
        .rsh
        .clone()
        .or_else(|| {
            std::env::var("VMMC_RSH")
                .ok()
                .filter(|a| !a.trim().is_empty())
        })
        .unwrap_or_else(|| "ssh".into());
    let launch = Arc::new(Launch {
        transport: transport.clone(),
        capacity: args.n.saturating_add(args.spawn_slots),
        rv_addr,
        job: format!("{}", std::process::id()),
        job_cpus: allowed.len().max(1),
        remote: !args.hosts.is_empty(),
        session,
        here,
        rsh: rsh.split_whitespace().map(String::from).collect(),
        tag_output: args.tag_output,
        pids: pids.clone(),
        kids: Mutex::new(Vec::new()),
        pumps: Mutex::new(Vec::new()),
    });
    let l = launch.clone();
    let spawner: vmmc::registry::Spawner = Box::new(move |o| l.spawn(o));
    match &rv {
        Trusted::Tcp(t) => t.set_spawner(spawner),
        Trusted::Shm(t) => t.set_spawner(spawner),
    }
    for rank in 0..args.n {
        // Rank k on the k-th allowed CPU (wrapping when asked to bind more ranks than CPUs).
        let cpu = (bind && !allowed.is_empty()).then(|| allowed[rank % allowed.len()]);
        let host = (!args.hosts.is_empty()).then(|| args.hosts[rank % args.hosts.len()].clone());
        let started = launch.start(
            rank,
            args.n,
            host.as_deref(),
            &args.command[0],
            &args.command[1..],
            cpu,
            None,
        );
        if let Err(e) = started {
            eprintln!("vmmc-run: {e}");
            rv.mark_dead(rank);
            for (_, c) in lock(&launch.kids).iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Ok(ExitCode::from(127));
        }
    }
    let mut worst: u8 = 0;
    // Reap in any order, spawned processes too: a rank that dies is marked dead at once.
    while !lock(&launch.kids).is_empty() {
        // Look without reaping: a process whose start is failing is reaped by the thread
        // starting it (std's spawn waits for it), which holds `kids` meanwhile.
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own children with a valid siginfo pointer.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        // SAFETY: waitid filled a child's siginfo.
        let pid = unsafe { info.si_pid() };
        let mut status = 0;
        let rank = {
            let mut k = lock(&launch.kids);
            let Some(pos) = k.iter().position(|(_, c)| c.id() as i32 == pid) else {
                continue;
            };
            // SAFETY: reaps the child just seen ended, with a valid status pointer.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            k.remove(pos).0
        };
        lock(&pids).pids.retain(|&p| p != pid);
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status) as u8
        } else if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            eprintln!("vmmc-run: rank {rank} killed by signal {sig}");
            128u8.saturating_add(sig as u8)
        } else {
            1
        };
        let how = if code == 0 {
            "exited".to_string()
        } else {
            format!("exited with status {code}")
        };
        // A spawned process that never joined: its spawner has the error, the job goes on.
        if rv.mark_ended(rank, &how) {
            continue;
        }
        if code != 0 {
            if libc::WIFEXITED(status) {
                eprintln!("vmmc-run: rank {rank} exited with status {code}");
            }
            rv.mark_dead(rank);
            if worst == 0 {
                worst = code;
                if let Grace(Some(grace)) = args.abort_grace {
                    end_after(launch.clone(), rank, grace);
                }
            }
        }
    }
    for p in std::mem::take(&mut *lock(&launch.pumps)) {
        let _ = p.join();
    }
    drop(rv);
    drop(cleanup);
    Ok(ExitCode::from(worst))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How the job's processes start: the ranks at launch and the ones `vmmc_Spawn` asks for.
struct Launch {
    transport: String,
    /// `VMMC_CAPACITY`: the ranks plus the spawn slots.
    capacity: usize,
    rv_addr: String,
    job: String,
    job_cpus: usize,
    /// Hosts were named (`--hosts`): every process on one starts through the agent.
    remote: bool,
    /// The session's hosts (`VMMC_HOSTS`).
    session: Vec<String>,
    /// This host's name.
    here: String,
    /// The remote-shell agent, split into words.
    rsh: Vec<String>,
    tag_output: bool,
    pids: Arc<Mutex<Ranks>>,
    /// Processes not yet reaped, with their rank.
    kids: Mutex<Vec<(usize, std::process::Child)>>,
    pumps: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Launch {
    /// The environment of a process of the job: what the bootstrap reads.
    fn env(&self, rank: usize, size: usize, parent: Option<vmmc::ProcId>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        if self.remote {
            // The user's VMMC_* settings go along, as mpirun's -x would take them.
            env.extend(std::env::vars().filter(|(k, _)| k.starts_with("VMMC_")));
        }
        let mut set = |k: &str, v: String| {
            env.retain(|(x, _)| x != k);
            env.push((k.to_string(), v));
        };
        set(vars::TRANSPORT, self.transport.clone());
        set(vars::RANK, rank.to_string());
        set(vars::SIZE, size.to_string());
        // The CPUs the job's ranks share, for the waiting policy (`vmmc::wait`): a rank
        // bound to one core must not take the job for oversubscribed.
        set("VMMC_JOB_CPUS", self.job_cpus.to_string());
        set(vars::RENDEZVOUS, self.rv_addr.clone());
        set(vmmc_tcp::RENDEZVOUS_BY, "launcher".into());
        set(vars::JOB, self.job.clone());
        set(vars::HOSTS, self.session.join(","));
        set(vars::CAPACITY, self.capacity.to_string());
        match parent {
            Some(p) => set(vars::PARENT, format!("{}:{}", p.node, p.squid)),
            None => env.retain(|(k, _)| k != vars::PARENT),
        }
        env
    }

    /// Starts one process: here, or on `host` through the agent. The process is in `kids`
    /// when this returns, added under the lock the reaper looks it up with.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        rank: usize,
        size: usize,
        host: Option<&str>,
        program: &str,
        args: &[String],
        cpu: Option<usize>,
        parent: Option<vmmc::ProcId>,
    ) -> Result<(), String> {
        let env = self.env(rank, size, parent);
        let mut cmd = match host {
            None => {
                let mut c = Command::new(program);
                c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if parent.is_none() {
                    c.env_remove(vars::PARENT);
                }
                c
            }
            Some(h) => {
                let (agent, rest) = self
                    .rsh
                    .split_first()
                    .ok_or("the remote-shell agent is empty")?;
                // ssh and rsh hand the command to a shell: quote it. Other agents (ip netns
                // exec, srun, ...) exec their arguments.
                let shell = ["ssh", "rsh"].iter().any(|s| agent.ends_with(s));
                let q = |w: &str| if shell { quote(w) } else { w.to_string() };
                let mut c = Command::new(agent);
                c.args(rest).arg(h).arg("env");
                c.args(env.iter().map(|(k, v)| q(&format!("{k}={v}"))));
                c.arg(q(program)).args(args.iter().map(|a| q(a)));
                c
            }
        };
        cmd.stdin(if rank == 0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        if self.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
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
        let mut kids = lock(&self.kids);
        let mut c = cmd.spawn().map_err(|e| {
            let what = match host {
                None => program.to_string(),
                Some(h) => format!("{} for host {h}", self.rsh.join(" ")),
            };
            format!("cannot start {what:?}: {e}")
        })?;
        let mut r = lock(&self.pids);
        r.pids.push(c.id() as libc::pid_t);
        if let Some(sig) = r.signal {
            // SAFETY: kill on the process just started.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
        drop(r);
        if self.tag_output {
            let mut p = lock(&self.pumps);
            p.push(pump(rank, c.stdout.take().expect("piped"), false));
            p.push(pump(rank, c.stderr.take().expect("piped"), true));
        }
        kids.push((rank, c));
        Ok(())
    }

    /// `vmmc_Spawn`, as the rendezvous asks: on this host, or on a host of `--hosts`.
    fn spawn(&self, o: &vmmc::registry::SpawnOrder) -> Result<(), String> {
        let local = o.host == "localhost" || (!self.remote && o.host == self.here);
        if !local && !self.session.contains(&o.host) {
            return Err(format!(
                "unknown host {:?}: this session's hosts are {}",
                o.host,
                self.session.join(", ")
            ));
        }
        let host = (!local).then_some(o.host.as_str());
        self.start(
            o.rank,
            o.rank + 1,
            host,
            &o.program,
            &o.args,
            None,
            Some(o.parent),
        )
    }
}

/// A word for a remote shell: single-quoted unless it is plainly safe.
fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// This host's name.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer of the length given.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if r != 0 || n == 0 {
        return "localhost".into();
    }
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The address this host uses towards `host` (the route's source): where the ranks there
/// reach the rendezvous.
fn route_to(host: &str) -> Result<std::net::IpAddr, String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let fail = |why: String| {
        format!(
            "cannot tell which address {host} reaches this launcher at ({why}); give \
             --rendezvous ADDRESS:PORT"
        )
    };
    let to = (host, 9)
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(any).map_err(|e| fail(e.to_string()))?;
    // A UDP connect sends nothing: it only picks the route.
    s.connect(to).map_err(|e| fail(e.to_string()))?;
    s.local_addr()
        .map(|a| a.ip())
        .map_err(|e| fail(e.to_string()))
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

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn remote_shell_words_are_quoted_only_when_needed() {
        assert_eq!(quote("VMMC_RANK=1"), "VMMC_RANK=1");
        assert_eq!(quote("/usr/bin/prog"), "/usr/bin/prog");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }
}
