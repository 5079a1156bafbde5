//! Barnes-NX (seed 001 §3): the Barnes-Hut simulation of [`crate::kernels::barnes`] on NX.
//!
//! Every node keeps every body's position, owns an equal block of the bodies (by index, not
//! SPLASH-2's costzones), builds the whole octree itself each step, computes the forces on
//! its block and advances it, then sends its block's new positions to every other node (one
//! NX message per pair and step, `P (P - 1)` in all) and receives theirs. The AU version sends
//! NX's small messages by automatic update (`NX_SMALL=au`), the DU version by deliberate
//! update (`NX_SMALL=du`); `--version` sets this over the environment.
//!
//! The check, after the timed phase: the final positions and velocities are collected from
//! their owners; node 0 runs the sequential kernel and requires every coordinate to agree
//! within [`POS_TOLERANCE`] (they agree to the last bit by construction), the total energy
//! to agree with the sequential run's within 1e-9 relative, and to have drifted from the
//! initial energy by less than [`ENERGY_DRIFT`].

use crate::kernels::barnes::{self, Barnes, BarnesParams, BodyComm, V3};
use crate::kernels::radix::block_lo;
use crate::ocean_nx::{agree, nx_config};
use crate::{AppError, AppResult, Params, Report, Size, Stats};
use nx::Nx;

const APP: &str = "barnes-nx";
/// Message types: `T_BODIES + sender`.
const T_BODIES: i64 = 1000;
/// Message types of the final state sent to node 0 for the check: positions, velocities.
const T_FINAL: i64 = 900;
/// Largest difference of a coordinate from the sequential run.
pub const POS_TOLERANCE: f64 = 1e-9;
/// Largest relative drift of the total energy over the run.
pub const ENERGY_DRIFT: f64 = 0.01;

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<BarnesParams> {
    let base = match params.size {
        Size::Paper => BarnesParams::PAPER,
        Size::Test => BarnesParams::TEST,
    };
    let p = BarnesParams {
        bodies: params.bodies.unwrap_or(base.bodies),
        iterations: params.iterations.unwrap_or(base.iterations),
        theta: params.theta.unwrap_or(base.theta),
        dt: params.dt.unwrap_or(base.dt),
        eps: params.eps.unwrap_or(base.eps),
        seed: params.seed.unwrap_or(base.seed),
    };
    p.check().map_err(AppError::Usage)?;
    Ok(p)
}

/// The plain sequential run (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    Ok(barnes::sequential(&problem(params)?)
        .map_err(AppError::Comm)?
        .0)
}

fn to_bytes(x: &[V3]) -> Vec<u8> {
    x.iter().flatten().flat_map(|v| v.to_ne_bytes()).collect()
}

fn to_v3(b: &[u8]) -> Vec<V3> {
    b.chunks_exact(24)
        .map(|c| {
            let f = |k: usize| f64::from_ne_bytes(c[k * 8..k * 8 + 8].try_into().expect("8"));
            [f(0), f(1), f(2)]
        })
        .collect()
}

struct NxComm<'a> {
    nx: &'a Nx,
    me: usize,
    n: usize,
    stats: Stats,
}

impl BodyComm for NxComm<'_> {
    fn allgather(&mut self, pos: &mut [V3]) -> Result<(), String> {
        let (len, n) = (pos.len(), self.n);
        let lo = move |p: usize| block_lo(len, n, p);
        let mine = to_bytes(&pos[lo(self.me)..lo(self.me + 1)]);
        for p in (0..self.n).filter(|&p| p != self.me) {
            self.nx
                .csend(T_BODIES + self.me as i64, &mine, p as i64, 0)
                .map_err(|e| e.to_string())?;
            self.stats.messages += 1;
            self.stats.bytes += mine.len() as u64;
        }
        let mut buf = Vec::new();
        for p in (0..self.n).filter(|&p| p != self.me) {
            buf.resize((lo(p + 1) - lo(p)) * 24, 0);
            self.nx
                .crecv(T_BODIES + p as i64, &mut buf)
                .map_err(|e| e.to_string())?;
            pos[lo(p)..lo(p + 1)].copy_from_slice(&to_v3(&buf));
        }
        Ok(())
    }
}

/// `x <= limit`, false for NaN (a NaN fails a check).
fn within(x: f64, limit: f64) -> bool {
    x <= limit
}

/// Runs Barnes-NX on this node (see [`crate::RunFn`]).
pub fn run(ep: &vmmc::Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let bp = problem(params)?;
    let nx = Nx::with_config(ep.clone(), nx_config(params.version)?)?;
    let (me, n) = (ep.rank(), ep.size());
    let mut comm = NxComm {
        nx: &nx,
        me,
        n,
        stats: Stats::default(),
    };
    let mut b = Barnes::new(bp, n, me);
    let e0 = barnes::energy(&b.pos, &b.vel, &b.mass, bp.eps);
    nx.gsync()?;
    let t0 = vmmc::pace::now_ns();
    b.run(&mut comm).map_err(AppError::Comm)?;
    let t = vmmc::pace::now_ns() - t0;
    let stats = comm.stats;

    // The check (not timed): the final state from its owners.
    if params.inject_fault && me == n - 1 && !b.mine.is_empty() {
        b.pos[b.mine.start][0] += 1e-3;
    }
    // Each node sends node 0 its block (no broadcast: only node 0 compares).
    let (mut pos, mut vel) = (b.pos.clone(), b.vel.clone());
    let lo = |p: usize| block_lo(bp.bodies, n, p);
    if me != 0 {
        let mine = b.mine.clone();
        nx.csend(T_FINAL, &to_bytes(&b.pos[mine.clone()]), 0, 0)?;
        nx.csend(T_FINAL + 1, &to_bytes(&b.vel[mine]), 0, 0)?;
    } else {
        let mut buf = Vec::new();
        for p in 1..n {
            buf.resize((lo(p + 1) - lo(p)) * 24, 0);
            for (t, into) in [(T_FINAL, &mut pos), (T_FINAL + 1, &mut vel)] {
                nx.crecvx(t, &mut buf, p as i64, -1)?;
                into[lo(p)..lo(p + 1)].copy_from_slice(&to_v3(&buf));
            }
        }
    }
    let mut verdict = None;
    let mut e1 = 0.0;
    if me == 0 {
        let (_, want) = barnes::sequential(&bp).map_err(AppError::Comm)?;
        e1 = barnes::energy(&pos, &vel, &b.mass, bp.eps);
        let e_seq = barnes::energy(&want.pos, &want.vel, &want.mass, bp.eps);
        let worst = (0..bp.bodies)
            .flat_map(|i| (0..3).map(move |k| (i, k)))
            .map(|(i, k)| ((pos[i][k] - want.pos[i][k]).abs(), i))
            .fold((0.0, 0), |a, x| if x.0 > a.0 { x } else { a });
        verdict = if !within(worst.0, POS_TOLERANCE) {
            Some(format!(
                "body {} is {:e} away from where the sequential run puts it (tolerance {POS_TOLERANCE:e})",
                worst.1, worst.0
            ))
        } else if !within((e1 - e_seq).abs(), 1e-9 * e_seq.abs()) {
            Some(format!("total energy {e1}, the sequential run's {e_seq}"))
        } else if !within(((e1 - e0) / e0).abs(), ENERGY_DRIFT) {
            Some(format!(
                "the total energy drifted from {e0} to {e1} (more than {ENERGY_DRIFT})"
            ))
        } else {
            None
        };
    }
    let Some((time, stats)) = agree(&nx, APP, verdict, stats, t)? else {
        return Ok(None);
    };
    Ok(Some(Report::new(
        APP,
        "nx",
        ep,
        params,
        serde_json::to_value(bp).expect("serializable"),
        time,
        stats,
        format!(
            "positions equal the sequential run's (within {POS_TOLERANCE:e}); energy {e0:.6} -> {e1:.6} ({:+.3}%)",
            (e1 - e0) / e0.abs() * 100.0
        ),
    )))
}
