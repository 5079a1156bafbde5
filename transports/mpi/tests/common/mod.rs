//! What the mpi transport's tests share: the launcher, and running a job under it with a
//! time limit.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The launcher: `VMMC_MPIRUN` (for example `mpirun.mpich`, to run the tests built against
/// MPICH with `MPICC=mpicc.mpich`), else `mpirun`.
pub fn launcher() -> String {
    std::env::var("VMMC_MPIRUN").unwrap_or_else(|_| "mpirun".into())
}

/// Whether the launcher is Open MPI's (else MPICH's Hydra, whose options differ).
pub fn open_mpi() -> bool {
    static IS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IS.get_or_init(|| {
        Command::new(launcher())
            .arg("--version")
            .output()
            .map(|o| {
                let v = String::from_utf8_lossy(&o.stdout);
                v.contains("Open MPI") || v.contains("OpenRTE")
            })
            .unwrap_or(true)
    })
}

/// The launcher for `n` ranks with what this machine needs. Open MPI: root is allowed, more
/// ranks than cores (a spawned process needs a slot too), and no binding (Open MPI binds
/// each rank of a small job to one core, which puts the transport's progress thread on its
/// program thread's core: data arriving while the program acts could then come only when
/// the scheduler preempts one for the other). Hydra does all of this by default.
pub fn mpirun(n: usize) -> Command {
    let mut c = Command::new(launcher());
    if open_mpi() {
        c.args(["--oversubscribe", "--bind-to", "none"]);
        // SAFETY: geteuid has no memory effects.
        if unsafe { libc::geteuid() } == 0 {
            c.arg("--allow-run-as-root");
        }
    }
    c.args(["-n", &n.to_string()]);
    c
}

/// A finished job: its status (`None`: it hung past the limit and was killed) and output.
pub struct Run {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (a launcher with its job) with its output captured, for at most `limit`. The
/// job gets a process group of its own: Open MPI puts every process it starts in a group of
/// its own too, out of reach of a signal to mpirun alone (a SIGKILLed mpirun leaves them
/// running, and a rank stuck in MPI_Finalize spins on a core). A job past its limit gets
/// SIGTERM, on which mpirun ends its ranks, then SIGKILL for whatever is left of its group.
pub fn run(mut cmd: Command, limit: Duration) -> std::io::Result<Run> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut kid = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut out = kid.stdout.take().expect("stdout");
    let mut err = kid.stderr.take().expect("stderr");
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Ok(Some(st)) = kid.try_wait() {
            break Some(st);
        }
        if start.elapsed() > limit {
            let group = -(kid.id() as i32);
            // SAFETY: signals the process group made for the job above.
            unsafe { libc::kill(group, libc::SIGTERM) };
            let term = Instant::now();
            while term.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = kid.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: as above.
            unsafe { libc::kill(group, libc::SIGKILL) };
            let _ = kid.kill();
            let _ = kid.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Run {
        status,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
    })
}
