//! # apps: the applications of seed 001 Table 1
//!
//! Each application is written against our libraries only (the VMMC API, NX, SVM, sockets),
//! never against a transport, so it runs wherever they do: `vmmc-run -n N` on shared memory,
//! `vmmc-run -n N --transport sim` on the simulated SHRIMP. Each has an automatic-update (AU)
//! and a deliberate-update (DU) version, checks its own result and reports one JSON line.
//!
//! | application | library | AU version | DU version | Table 1 problem |
//! |---|---|---|---|---|
//! | `radix-vmmc` | vmmc | keys stored straight into the remote arrays through [`vmmc::AutoUpdateBinding`]s | keys gathered per destination into one large [`vmmc::Proxy::send`], scattered by the receiver | 2M keys, 3 passes |
//! | `ocean-nx` | nx | `NX_SMALL=au` | `NX_SMALL=du` | 514 x 514 grid |
//! | `barnes-nx` | nx | `NX_SMALL=au` | `NX_SMALL=du` | 4K bodies, 20 iterations |
//! | `barnes-svm` | svm | AURC (HLRC-AU with `--protocol hlrc-au`) | HLRC | 16K bodies, 4 steps |
//! | `ocean-svm` | svm | AURC (HLRC-AU with `--protocol hlrc-au`) | HLRC | 130 x 130 grid |
//! | `radix-svm` | svm | AURC (HLRC-AU with `--protocol hlrc-au`) | HLRC | 2M keys, 3 passes |
//! | `dfs-sockets` | sockets | the sockets' automatic-update variant (ring bytes stored through an [`vmmc::AutoUpdateBinding`], with combining) | one-copy deliberate update (`du1`) | 4 clients |
//! | `render-sockets` | sockets | the sockets' AU variant (stores through an AU image of the peer's ring) | one-copy DU variant | 167 x 63 x 34 volume, a 512 x 256 picture |
//!
//! The SVM versions are the protocols of seed 001 §4.2 (see [`svm_common`]): `--version au`
//! runs AURC, `--version du` HLRC, and `--protocol hlrc-au` (with `--version au`) the third
//! implementation of Figure 4. Their reports carry the protocol's statistics of the timed
//! phase, of every node and their sum ([`svm::RunStats`]), as `svm`.
//!
//! ## Running one
//!
//! One binary, `shrimp`, lists the applications, runs one as a job, and is also the program
//! of every rank:
//!
//! ```sh
//! cargo build --release -p apps -p vmmc-run
//! target/release/shrimp list
//! target/release/shrimp run radix-vmmc -n 4                      # shm, AU, Table 1's size
//! target/release/shrimp run ocean-nx -n 16 --transport sim --version du --size test
//! target/release/shrimp run dfs-sockets -n 8 --transport sim --block-size 16k --reads 4
//! target/release/shrimp overhead radix-vmmc                      # 1 node vs plain sequential
//! target/release/shrimp table1                                   # sim, 1 node, beside Table 1
//! ```
//!
//! `shrimp run` starts `vmmc-run -n N --transport T -- shrimp rank APP ...` (the `vmmc-run`
//! found next to `shrimp`), prints what the ranks print, and appends the report to
//! `apps-results/APP.jsonl` (`--out FILE` elsewhere). On sim it points `VMMC_SIM_STATS` at a
//! file and folds the interface's statistics into the report. The rank program can also be
//! started by hand: `vmmc-run -n 4 -- shrimp rank radix-vmmc --size test`.
//!
//! A run whose result check fails prints `RESULT CHECK FAILED` with what differed and exits
//! with status 1; no time is reported for it. `--inject-fault` corrupts the result on
//! purpose before the check (for the tests that prove the check works).
//!
//! ## Measuring
//!
//! `shrimp overhead APP` runs, alternately in one process, the plain sequential code (the
//! kernel alone, no communication library) and each version on a 1-node shm job, and prints
//! the medians and the best runs of their timed phases: the library's cost on one node.
//! `shrimp table1` runs each application at Table 1's size on the simulated SHRIMP on Table 1's
//! nodes (one; two for Ocean-NX, which Table 1 times on two) and prints the virtual time beside
//! Table 1's sequential time, with their ratio. Reports accumulate in `apps-results/`.
//!
//! ## Limits
//!
//! - Ocean needs at least one grid row per node (`--grid 18`, the test size, runs on up to 16).
//! - Barnes-NX splits the bodies in equal blocks by index, not SPLASH-2's costzones, and its
//!   cells carry monopoles only (hence `theta` 0.7 rather than SPLASH-2's 1.0).
//! - Ocean is one layer (barotropic), not SPLASH-2's two-layer model; the trailing "1" of
//!   Table 1's "514 x 514, 1" is read as one time step.
//! - Barnes-SVM shares the bodies, not the tree: each node builds the octree itself from
//!   the shared positions (see [`barnes_svm`]), so it lacks SPLASH-2's lock traffic and cell
//!   write-sharing. Table 1 gives no step count for it: 4 steps (SPLASH-2's default input).
//! - The SVM applications' virtual times on sim vary from run to run by several per cent
//!   (svm's notification handler runs outside the simulator's schedule).
//! - Render-sockets: Table 1 gives only the volume's size, so the data set is a procedural
//!   fish ([`kernels::render`]) and the picture (512 x 256 in 16 x 16 tiles, the view, one
//!   sample per voxel) is our choice. With workers the controller renders nothing (it is the
//!   paper's central task queue), so two nodes are no faster than one. The paper's renderer
//!   is fault tolerant; ours ends the run when a worker is lost, without re-issuing its tiles.
//!   The picture is written as a PNG (`--image`, default `apps-results/render.png`).
//! - DFS-sockets (see [`dfs_sockets`]) reads only, from memory: the files' contents are
//!   generated, there are no disks and no writes, and a layout whose blocks do not fit in the
//!   cluster's memory is refused. Cooperative caching is reduced to the home node serving
//!   every block and each node keeping copies of what its own clients fetched (no forwarding
//!   between clients' caches). Table 1's "4 clients" is a fixed workload: on fewer than 8
//!   nodes clients share nodes, on more they stay on 4; below 6 nodes the preset cache (4
//!   MB) grows to hold a node's share of the working sets. Its AU version always combines (the sockets library
//!   has no switch for it): §4.5.1's "AU without combining" is the simulator's
//!   `VMMC_SIM_SET=switches.combining=false`. Most of its virtual time on sim is the compute
//!   charge of copying and checksumming blocks (host CPU time x 120), so on a loaded machine
//!   it varies by some 20% from run to run; with `VMMC_SIM_SET=cpu.compute_scale=0` the
//!   runs are identical.
//!
//! ## Adding an application
//!
//! The algorithms live in [`kernels`] (sequential code with no communication: Radix's
//! passes, Ocean's multigrid, Barnes-Hut's octree and forces, DFS's striped files and node
//! caches, the ray caster); a library version is a module that distributes a kernel over its
//! library ([`radix_vmmc`], [`ocean_nx`], [`barnes_nx`], [`barnes_svm`], [`ocean_svm`],
//! [`radix_svm`], [`dfs_sockets`], [`render_sockets`]). A new version is a new module plus
//! one entry in [`APPS`] (and its new parameters in [`Params`]: [`job::param_args`] hands
//! every parameter that is set to the ranks). The entry's [`App::options`] names the
//! parameters it uses: any other one given on the command line is refused
//! ([`App::check_options`]) rather than silently ignored.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod barnes_nx;
pub mod barnes_svm;
pub mod coll;
pub mod dfs_sockets;
mod idle;
pub mod job;
pub mod kernels;
pub mod ocean_nx;
pub mod ocean_svm;
pub mod paper;
pub mod radix_svm;
pub mod radix_vmmc;
pub mod render_sockets;
pub mod report;
pub mod svm_common;

pub use report::Report;

use serde::Serialize;

fn parse_protocol(s: &str) -> Result<svm::Protocol, String> {
    s.parse().map_err(|e: svm::Error| e.to_string())
}

/// `AxBxC` (or `AxB`, or `A` for a cube or square) as `N` sizes.
fn parse_dims<const N: usize>(s: &str) -> Result<[usize; N], String> {
    let parts: Vec<usize> = s
        .split(['x', 'X'])
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?}: {e}"))?;
    match parts.len() {
        1 => Ok([parts[0]; N]),
        k if k == N => Ok(std::array::from_fn(|i| parts[i])),
        _ => Err(format!("{s:?}: {N} sizes joined by 'x', or one")),
    }
}

/// Parses a size in bytes: a number with an optional `k`, `m` or `g` suffix (binary).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, shift) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 10),
        Some(b'm') => (&t[..t.len() - 1], 20),
        Some(b'g') => (&t[..t.len() - 1], 30),
        _ => (t.as_str(), 0),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s:?} is not a size (bytes, or with a k/m/g suffix)"))
}

/// Which communication mechanism a version uses for its data (seed 001 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Version {
    /// Automatic update.
    Au,
    /// Deliberate update.
    Du,
}

impl Version {
    /// "AU" or "DU".
    pub fn name(self) -> &'static str {
        match self {
            Version::Au => "AU",
            Version::Du => "DU",
        }
    }
}

/// Problem size preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// Table 1's problem.
    Paper,
    /// A tiny problem for tests and CI.
    Test,
}

/// The parameters of a run: the version, the size preset, and every problem parameter
/// (unset ones come from the preset).
#[derive(Clone, Debug, clap::Args, Serialize)]
pub struct Params {
    /// The version: automatic or deliberate update.
    #[arg(long, value_enum, default_value = "au")]
    pub version: Version,
    /// Problem size preset.
    #[arg(long, value_enum, default_value = "paper")]
    pub size: Size,
    /// Seed of the input generator.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Radix: number of keys.
    #[arg(long)]
    pub keys: Option<usize>,
    /// Radix: bits per digit.
    #[arg(long)]
    pub radix_bits: Option<u32>,
    /// Radix: bits per key (passes = key_bits / radix_bits, rounded up).
    #[arg(long)]
    pub key_bits: Option<u32>,
    /// Radix AU version: combine consecutive stores into one packet.
    #[arg(long)]
    pub combining: Option<bool>,
    /// Ocean: grid side including the boundary (interior + 2; the interior a power of two).
    #[arg(long)]
    pub grid: Option<usize>,
    /// Ocean: time steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Ocean: multigrid stopping tolerance (relative residual norm).
    #[arg(long)]
    pub tolerance: Option<f64>,
    /// Barnes: number of bodies.
    #[arg(long)]
    pub bodies: Option<usize>,
    /// Barnes: time steps.
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Barnes: opening criterion.
    #[arg(long)]
    pub theta: Option<f64>,
    /// Barnes: time step.
    #[arg(long)]
    pub dt: Option<f64>,
    /// Barnes: softening length.
    #[arg(long)]
    pub eps: Option<f64>,
    /// Render: voxels of the data set, `XxYxZ` (Table 1: 167x63x34).
    #[arg(long, value_parser = parse_dims::<3>)]
    pub volume: Option<[usize; 3]>,
    /// Render: picture size in pixels, `WxH`.
    #[arg(long, value_parser = parse_dims::<2>)]
    pub image_size: Option<[usize; 2]>,
    /// Render: tile (task) size in pixels, `WxH` (or `N` for a square).
    #[arg(long, value_parser = parse_dims::<2>)]
    pub tile: Option<[usize; 2]>,
    /// Render: camera azimuth about the vertical axis, in degrees.
    #[arg(long, allow_negative_numbers = true)]
    pub azimuth: Option<f64>,
    /// Render: camera elevation, in degrees.
    #[arg(long, allow_negative_numbers = true)]
    pub elevation: Option<f64>,
    /// Render: horizontal field of view in degrees (0: orthographic).
    #[arg(long)]
    pub fov: Option<f64>,
    /// Render: distance between samples along a ray, in voxels.
    #[arg(long)]
    pub step: Option<f64>,
    /// Render: tiles a worker holds at once.
    #[arg(long)]
    pub in_flight: Option<usize>,
    /// Render: where rank 0 writes the picture, a PNG (default `apps-results/render.png`).
    #[arg(long)]
    pub image: Option<std::path::PathBuf>,
    /// SVM applications: the protocol (hlrc, hlrc-au, aurc). By default AURC for `--version
    /// au`, HLRC for `--version du`; HLRC-AU is `--version au --protocol hlrc-au`.
    #[arg(long, value_parser = parse_protocol)]
    pub protocol: Option<svm::Protocol>,
    /// DFS: client threads (Table 1's size: 4).
    #[arg(long)]
    pub clients: Option<usize>,
    /// DFS: bytes per block (a multiple of 8; `k`/`m` suffixes allowed).
    #[arg(long, value_parser = parse_bytes)]
    pub block_size: Option<usize>,
    /// DFS: bytes per file (a multiple of the block size).
    #[arg(long, value_parser = parse_bytes)]
    pub file_size: Option<usize>,
    /// DFS: files per client (a client's working set).
    #[arg(long)]
    pub files: Option<usize>,
    /// DFS: bytes of memory cache per node. Unset, the preset's, grown where a node's share of
    /// the working sets needs more (few nodes); set, a layout that does not fit is refused.
    #[arg(long, value_parser = parse_bytes)]
    pub cache_size: Option<usize>,
    /// DFS: times each client reads its working set in the timed phase (after a warm-up pass).
    #[arg(long)]
    pub reads: Option<usize>,
    /// Test only: corrupt the result before the check, which must then fail.
    #[arg(long)]
    pub inject_fault: bool,
    /// Test only (Render-sockets): the highest rank, a worker, dies abruptly (SIGKILL; its
    /// node ends on sim) once it has its first tile; the run must end with an error.
    #[arg(long)]
    pub inject_death: bool,
}

impl Params {
    /// The defaults (Table 1's size, AU), as if no option were given.
    pub fn new(version: Version, size: Size) -> Params {
        Params {
            version,
            size,
            seed: None,
            keys: None,
            radix_bits: None,
            key_bits: None,
            combining: None,
            grid: None,
            steps: None,
            tolerance: None,
            bodies: None,
            iterations: None,
            theta: None,
            dt: None,
            eps: None,
            volume: None,
            image_size: None,
            tile: None,
            azimuth: None,
            elevation: None,
            fov: None,
            step: None,
            in_flight: None,
            image: None,
            protocol: None,
            clients: None,
            block_size: None,
            file_size: None,
            files: None,
            cache_size: None,
            reads: None,
            inject_fault: false,
            inject_death: false,
        }
    }
}

/// What a node's communication did (summed over nodes in the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Messages sent (deliberate updates, NX messages).
    pub messages: u64,
    /// Bytes sent (messages and automatic-update stores).
    pub bytes: u64,
    /// Words stored through automatic-update bindings.
    pub au_words: u64,
}

impl Stats {
    /// As words for a reduction.
    pub fn to_words(self) -> [u64; 3] {
        [self.messages, self.bytes, self.au_words]
    }
    /// From [`Stats::to_words`].
    pub fn from_words(w: &[u64]) -> Stats {
        Stats {
            messages: w[0],
            bytes: w[1],
            au_words: w[2],
        }
    }
    /// The sum.
    pub fn plus(self, o: Stats) -> Stats {
        Stats {
            messages: self.messages + o.messages,
            bytes: self.bytes + o.bytes,
            au_words: self.au_words + o.au_words,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The result differs from what it must be: the run's time is worthless.
    #[error("{app}: RESULT CHECK FAILED: {what}")]
    CheckFailed {
        /// The application.
        app: &'static str,
        /// What differed.
        what: String,
    },
    /// A bad parameter.
    #[error("{0}")]
    Usage(String),
    /// The VMMC layer failed.
    #[error("vmmc: {0}")]
    Vmmc(#[from] vmmc::Error),
    /// NX failed.
    #[error("nx: {0}")]
    Nx(#[from] nx::NxError),
    /// Shared virtual memory failed.
    #[error("svm: {0}")]
    Svm(#[from] svm::Error),
    /// Communication inside a kernel failed.
    #[error("{0}")]
    Comm(String),
    /// A socket failed.
    #[error("sockets: {0}")]
    Sockets(#[from] std::io::Error),
}

/// A result of an application.
pub type AppResult<T> = std::result::Result<T, AppError>;

/// What a node's run of an application hands back: rank 0's report, `None` elsewhere.
pub type RunFn = fn(&vmmc::Endpoint, &Params) -> AppResult<Option<Report>>;

/// The plain sequential run (no communication library) of the same algorithm: the time of
/// its timed phase in ns, after its own check.
pub type SeqFn = fn(&Params) -> AppResult<u64>;

/// An application of Table 1.
pub struct App {
    /// The name used on the command line.
    pub name: &'static str,
    /// The communication library.
    pub library: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// Table 1's problem size.
    pub table1_size: &'static str,
    /// Table 1's sequential time in seconds.
    pub table1_seq_s: f64,
    /// Nodes of Table 1's time (Ocean-NX's is a 2-node time).
    pub table1_nodes: usize,
    /// Runs the application on one node of a job.
    pub run: RunFn,
    /// The plain sequential implementation.
    pub sequential: SeqFn,
    /// The [`Params`] it uses besides the version and the size (field names); it refuses
    /// the others ([`App::check_options`]).
    pub options: &'static [&'static str],
}

/// Parameters that only the AU version uses.
const AU_ONLY: &[&str] = &["combining"];

impl App {
    /// Refuses, naming them, the parameters set in `params` (given on the command line) that
    /// this application does not use, rather than running without them: `--combining`
    /// where there is no switch, Ocean's `--grid` for Barnes. A parameter left unset is
    /// fine whatever it is.
    pub fn check_options(&self, params: &Params) -> AppResult<()> {
        let serde_json::Value::Object(fields) =
            serde_json::to_value(params).expect("params serialize")
        else {
            unreachable!("Params is a struct");
        };
        let flag = |name: &str| format!("--{}", name.replace('_', "-"));
        let mut unused = Vec::new();
        for (name, v) in &fields {
            let set = match v {
                serde_json::Value::Null => false,
                // A plain flag is set when true; `--combining false` is set.
                serde_json::Value::Bool(b) if job::FLAGS.contains(&name.as_str()) => *b,
                _ => true,
            };
            if !set || matches!(name.as_str(), "version" | "size") {
                continue;
            }
            if !self.options.contains(&name.as_str()) {
                unused.push(flag(name));
            } else if params.version == Version::Du && AU_ONLY.contains(&name.as_str()) {
                return Err(AppError::Usage(format!(
                    "{} does not use {} with --version du: only its AU version has it",
                    self.name,
                    flag(name)
                )));
            }
        }
        if unused.is_empty() {
            return Ok(());
        }
        let own: Vec<String> = self.options.iter().map(|o| flag(o)).collect();
        Err(AppError::Usage(format!(
            "{} does not use {} (its options: {}, and --version, --size)",
            self.name,
            unused.join(", "),
            own.join(", ")
        )))
    }
}

/// The applications, in Table 1's order.
pub const APPS: &[App] = &[
    App {
        name: "barnes-svm",
        library: "svm",
        about:
            "Barnes-Hut N-body simulation with the bodies in shared memory (AURC/HLRC-AU vs HLRC)",
        table1_size: "16K bodies",
        table1_seq_s: 121.3,
        table1_nodes: 1,
        run: barnes_svm::run,
        sequential: barnes_svm::sequential,
        options: &["seed", "bodies", "iterations", "theta", "dt", "eps", "protocol", "inject_fault"],
    },
    App {
        name: "ocean-svm",
        library: "svm",
        about: "multigrid ocean circulation on row blocks of shared grids (AURC/HLRC-AU vs HLRC)",
        table1_size: "130 x 130",
        table1_seq_s: 12.8,
        table1_nodes: 1,
        run: ocean_svm::run,
        sequential: ocean_svm::sequential,
        options: &["grid", "steps", "tolerance", "protocol", "inject_fault"],
    },
    App {
        name: "radix-svm",
        library: "svm",
        about: "SPLASH-2 integer radix sort on shared virtual memory (AURC/HLRC-AU vs HLRC)",
        table1_size: "2M keys, 3 iters",
        table1_seq_s: 14.3,
        table1_nodes: 1,
        run: radix_svm::run,
        sequential: radix_svm::sequential,
        options: &["keys", "radix_bits", "key_bits", "seed", "protocol", "inject_fault"],
    },
    App {
        name: "radix-vmmc",
        library: "vmmc",
        about: "SPLASH-2 integer radix sort on the VMMC API",
        table1_size: "2M keys, 3 iters",
        table1_seq_s: 10.9,
        table1_nodes: 1,
        run: radix_vmmc::run,
        sequential: radix_vmmc::sequential,
        options: &["keys", "radix_bits", "key_bits", "seed", "combining", "inject_fault"],
    },
    App {
        name: "barnes-nx",
        library: "nx",
        about: "Barnes-Hut N-body simulation (Plummer model) on NX",
        table1_size: "4K bodies, 20 iters",
        table1_seq_s: 149.9,
        table1_nodes: 1,
        run: barnes_nx::run,
        sequential: barnes_nx::sequential,
        options: &["seed", "bodies", "iterations", "theta", "dt", "eps", "inject_fault"],
    },
    App {
        name: "ocean-nx",
        library: "nx",
        about: "multigrid ocean circulation on a row-partitioned grid on NX",
        table1_size: "514 x 514",
        table1_seq_s: 69.2,
        table1_nodes: 2,
        run: ocean_nx::run,
        sequential: ocean_nx::sequential,
        options: &["grid", "steps", "tolerance", "inject_fault"],
    },
    App {
        name: "dfs-sockets",
        library: "sockets",
        about: "cooperative-caching cluster file system: clients read striped files from the nodes' caches",
        table1_size: "4 clients",
        table1_seq_s: 6.9,
        table1_nodes: 1,
        run: dfs_sockets::run,
        sequential: dfs_sockets::sequential,
        options: &["seed", "clients", "block_size", "file_size", "files", "cache_size", "reads", "inject_fault"],
    },
    App {
        name: "render-sockets",
        library: "sockets",
        about: "ray-casting volume renderer: a controller's tile queue, workers on sockets",
        table1_size: "167 x 63 x 34",
        table1_seq_s: 13.8,
        table1_nodes: 1,
        run: render_sockets::run,
        sequential: render_sockets::sequential,
        options: &["volume", "image_size", "tile", "azimuth", "elevation", "fov", "step", "in_flight", "image", "inject_fault", "inject_death"],
    },
];

/// The application called `name`.
pub fn app(name: &str) -> Option<&'static App> {
    APPS.iter().find(|a| a.name == name)
}

/// Runs `app` as this process's program under `vmmc_run::run` (once per process on shm,
/// once per node-thread on sim). Returns rank 0's report.
pub fn run_job(app: &'static App, params: &Params) -> AppResult<Option<Report>> {
    app.check_options(params)?;
    let report = std::sync::Mutex::new(None);
    let failure = std::sync::Mutex::new(None::<AppError>);
    let r = vmmc_run::run(|ep| match (app.run)(&ep, params) {
        Ok(rep) => {
            if rep.is_some() {
                *report.lock().unwrap_or_else(|e| e.into_inner()) = rep;
            }
            Ok(())
        }
        Err(e) => {
            let msg = e.to_string();
            let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
            // A check failure is the story; a peer lost after it is its echo.
            if f.is_none() || matches!(e, AppError::CheckFailed { .. }) {
                *f = Some(e);
            }
            Err(vmmc::Error::Protocol(msg))
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    r?;
    Ok(report.into_inner().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_application_option_is_a_parameter() {
        let serde_json::Value::Object(fields) =
            serde_json::to_value(Params::new(Version::Au, Size::Test)).expect("serialize")
        else {
            unreachable!("Params is a struct");
        };
        for a in APPS {
            for o in a.options {
                assert!(fields.contains_key(*o), "{}: no parameter {o}", a.name);
            }
        }
    }
}
