//! Ocean-NX (seed 001 §3): the multigrid ocean of [`crate::kernels::ocean`] on NX.
//!
//! Each node owns a block of whole, contiguous rows of every grid level. Before each stencil
//! it sends its first row to the node above and its last row to the node below (NX
//! messages of one row, 4 KB at 514 x 514) and receives theirs; the residual norms are
//! global reductions (every node's per-row sums collected with `gcolx`, added in row order);
//! below the coarsest split level the residual is collected whole and every node finishes
//! the V-cycle itself. The AU version sends NX's small messages by automatic update
//! (`NX_SMALL=au`), the DU version by deliberate update (`NX_SMALL=du`); `--version` sets
//! this over the environment.
//!
//! The check: node 0 runs the sequential kernel on the whole grid after the timed phase and
//! compares every V-cycle's residual norm and the sums of the final fields (they agree to
//! the last bit by construction; the check allows a relative 1e-12).

use crate::kernels::ocean::{self, Comm, Grid, Ocean, OceanParams, Rows};
use crate::{AppError, AppResult, Params, Report, Size, Stats, Version};
use nx::Nx;

const APP: &str = "ocean-nx";
/// Message types: a row going up (to the node above), a row going down.
const T_UP: i64 = 101;
const T_DOWN: i64 = 102;
pub use crate::kernels::ocean::TOLERANCE;

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<OceanParams> {
    let base = match params.size {
        Size::Paper => OceanParams::PAPER,
        Size::Test => OceanParams::TEST,
    };
    let p = OceanParams {
        grid: params.grid.unwrap_or(base.grid),
        steps: params.steps.unwrap_or(base.steps),
        tolerance: params.tolerance.unwrap_or(base.tolerance),
    };
    p.check().map_err(AppError::Usage)?;
    Ok(p)
}

/// The plain sequential run (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    Ok(ocean::sequential(&problem(params)?)
        .map_err(AppError::Comm)?
        .0)
}

/// NX settings for `version`: the environment's, with the small-message path of the version.
pub fn nx_config(version: Version) -> AppResult<nx::Config> {
    let mut cfg = nx::Config::from_env()?;
    cfg.small = match version {
        Version::Au => nx::SmallPath::Au,
        Version::Du => nx::SmallPath::Du,
    };
    Ok(cfg)
}

/// The kernel's communication over NX.
struct NxComm<'a> {
    nx: &'a Nx,
    me: usize,
    stats: Stats,
}

fn to_bytes(x: &[f64]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn to_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

impl NxComm<'_> {
    fn send(&mut self, mtype: i64, data: &[u8], to: usize) -> Result<(), String> {
        self.nx
            .csend(mtype, data, to as i64, 0)
            .map_err(|e| e.to_string())?;
        self.stats.messages += 1;
        self.stats.bytes += data.len() as u64;
        Ok(())
    }
}

impl Comm for NxComm<'_> {
    fn exchange(&mut self, g: &mut Grid) -> Result<(), String> {
        let up = g.r0 > 0;
        let down = g.r1 < g.m;
        if up {
            self.send(T_UP, &to_bytes(g.row(g.r0)), self.me - 1)?;
        }
        if down {
            self.send(T_DOWN, &to_bytes(g.row(g.r1 - 1)), self.me + 1)?;
        }
        let mut buf = vec![0u8; g.w() * 8];
        if down {
            self.nx.crecv(T_UP, &mut buf).map_err(|e| e.to_string())?;
            g.row_mut(g.r1).copy_from_slice(&to_f64(&buf));
        }
        if up {
            self.nx.crecv(T_DOWN, &mut buf).map_err(|e| e.to_string())?;
            g.row_mut(g.r0 - 1).copy_from_slice(&to_f64(&buf));
        }
        Ok(())
    }

    fn gather(&mut self, mine: &[f64]) -> Result<Vec<f64>, String> {
        let b = to_bytes(mine);
        self.stats.messages += 1;
        self.stats.bytes += b.len() as u64;
        let (all, _) = self.nx.gcolx(&b).map_err(|e| e.to_string())?;
        Ok(to_f64(&all))
    }
}

/// The end of an NX application's run on every node: whether any node's check failed (then
/// the error, with node 0's `verdict`), the slowest node's time `t` and the sum of the
/// nodes' `stats`, on node 0 only (`None` elsewhere).
pub(crate) fn agree(
    nx: &Nx,
    app: &'static str,
    verdict: Option<String>,
    stats: Stats,
    t: u64,
) -> AppResult<Option<(u64, Stats)>> {
    let mut sums = [
        verdict.is_some() as i64,
        stats.messages as i64,
        stats.bytes as i64,
    ];
    nx.gisum(&mut sums)?;
    let mut time = [t as f64];
    nx.gdhigh(&mut time)?;
    if sums[0] != 0 {
        return Err(AppError::CheckFailed {
            app,
            what: verdict
                .unwrap_or_else(|| "node 0 found a difference from the sequential run".into()),
        });
    }
    nx.gsync()?;
    if nx.mynode() != 0 {
        return Ok(None);
    }
    Ok(Some((
        time[0] as u64,
        Stats {
            messages: sums[1] as u64,
            bytes: sums[2] as u64,
            au_words: 0,
        },
    )))
}

/// Runs Ocean-NX on this node (see [`crate::RunFn`]).
pub fn run(ep: &vmmc::Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let op = problem(params)?;
    let nx = Nx::with_config(ep.clone(), nx_config(params.version)?)?;
    let (me, n) = (ep.rank(), ep.size());
    if op.n() < n {
        return Err(AppError::Usage(format!(
            "--grid {}: {} rows cannot be split over {n} nodes",
            op.grid,
            op.n()
        )));
    }
    let mut comm = NxComm {
        nx: &nx,
        me,
        stats: Stats::default(),
    };
    let mut o = Ocean::new(op, n, me);
    nx.gsync()?;
    let t0 = vmmc::pace::now_ns();
    o.run(&mut comm).map_err(AppError::Comm)?;
    let t = vmmc::pace::now_ns() - t0;
    let stats = comm.stats;

    // The check (not timed).
    let verdict = ocean::check(&mut o, &op, (me, n), params.inject_fault, &mut comm)
        .map_err(AppError::Comm)?;
    let Some((time, stats)) = agree(&nx, APP, verdict, stats, t)? else {
        return Ok(None);
    };
    let rows = Rows::new(op.n(), n);
    let mut problem = serde_json::to_value(op).expect("serializable");
    problem["levels"] = rows.levels().into();
    problem["split_levels"] = (rows.split + 1).into();
    problem["v_cycles"] = o.norms.len().into();
    Ok(Some(Report::new(
        APP,
        "nx",
        ep,
        params,
        problem,
        time,
        stats,
        format!(
            "{} V-cycles' residual norms and the final fields equal the sequential run's (within {TOLERANCE:e} relative)",
            o.norms.len()
        ),
    )))
}
