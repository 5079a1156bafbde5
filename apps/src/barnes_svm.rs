//! Barnes-SVM (seed 001 §3, §4.2): the Barnes-Hut simulation of [`crate::kernels::barnes`]
//! on shared virtual memory.
//!
//! The bodies' positions and velocities live in shared arrays; node `p`'s block of bodies
//! (equal blocks by index, [`block_lo`]) is homed at node `p`. Each step every node stores
//! its block's new positions into the shared array, a barrier, and reads every body's
//! position from it (a fault and a fetch from its home for each page another node wrote),
//! builds the octree of all bodies itself from them, and computes the forces on its block.
//!
//! Not SPLASH-2's tree built in shared memory under locks: the kernel's octree is a private
//! structure built in one pass ([`barnes::Tree`]), and a shared tree whose every insertion
//! takes the lock of each cell on its path serialises on the root's lock (`svm/examples/
//! barnes.rs` does that at small scale). What remains shared is the bodies, which is where
//! SPLASH-2's Barnes does most of its communication (every processor reads every body it
//! opens in its walks); what is missing is the lock traffic of the tree build and the
//! write-sharing of cells, so AURC's gain over HLRC here understates Figure 4's.
//!
//! The versions are the protocols ([`crate::svm_common`]): AU = AURC (or HLRC-AU with
//! `--protocol hlrc-au`), DU = HLRC. Table 1's problem is 16K bodies; its number of steps is
//! not given: we take SPLASH-2's default input (`tstop` 0.075 at `dtime` 0.025: 4 steps).
//!
//! The check, after the timed phase: the final positions and velocities are stored into the
//! shared arrays; node 0 reads them, runs the sequential kernel, and requires every
//! coordinate to agree within [`POS_TOLERANCE`] (bit-for-bit by construction), the total
//! energy to agree with the sequential run's within 1e-9 relative, and to have drifted from
//! the initial energy by less than [`ENERGY_DRIFT`].

use crate::barnes_nx::{ENERGY_DRIFT, POS_TOLERANCE};
use crate::kernels::barnes::{self, Barnes, BarnesParams, BodyComm, V3};
use crate::kernels::radix::block_lo;
use crate::svm_common::{self, homes, time_and_verdict};
use crate::{AppError, AppResult, Params, Report, Size};
use svm::{Shared, Svm};

const APP: &str = "barnes-svm";

/// Table 1's Barnes-SVM problem: 16K bodies, 4 steps (SPLASH-2's default input).
pub const PAPER: BarnesParams = BarnesParams {
    bodies: 16384,
    iterations: 4,
    ..BarnesParams::PAPER
};

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<BarnesParams> {
    let base = match params.size {
        Size::Paper => PAPER,
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

/// The kernel's exchange of positions through the shared array.
struct SvmComm<'a> {
    s: &'a mut Svm,
    /// Two copies of the positions, used in turn: a node storing the next step's positions
    /// must not overwrite a page that a slower node has yet to fetch for this step's.
    pos: [Shared<V3>; 2],
    next: usize,
}

impl SvmComm<'_> {
    fn publish(&mut self, pos: &mut [V3]) -> svm::Result<()> {
        let (len, n, me) = (pos.len(), self.s.size(), self.s.rank());
        let (lo, hi) = (block_lo(len, n, me), block_lo(len, n, me + 1));
        let shared = self.pos[self.next];
        self.next ^= 1;
        self.s.view(shared).write(lo, &pos[lo..hi])?;
        self.s.barrier()?;
        // Every other node's block, read through the shared array.
        let v = self.s.view(shared);
        v.read(0, &mut pos[..lo])?;
        v.read(hi, &mut pos[hi..])
    }
}

impl BodyComm for SvmComm<'_> {
    fn allgather(&mut self, pos: &mut [V3]) -> Result<(), String> {
        self.publish(pos).map_err(|e| e.to_string())
    }
}

/// `x <= limit`, false for NaN (a NaN fails a check).
fn within(x: f64, limit: f64) -> bool {
    x <= limit
}

/// Runs Barnes-SVM on this node (see [`crate::RunFn`]).
pub fn run(ep: &vmmc::Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let bp = problem(params)?;
    let protocol = svm_common::protocol(params)?;
    let (me, n) = (ep.rank(), ep.size());
    let lo = |p: usize| block_lo(bp.bodies, n, p);
    let owner = |i: usize| (0..n).rfind(|&p| lo(p) <= i).unwrap_or(0);
    let page = svm_common::page_size()?;
    let array = (bp.bodies * 24).next_multiple_of(page);
    let mut s = svm_common::open(ep, params, 3 * array)?;
    let place = homes(bp.bodies, 24, s.page_size(), owner);
    let pos: [Shared<V3>; 2] = [
        s.alloc(bp.bodies, place.clone())?,
        s.alloc(bp.bodies, place.clone())?,
    ];
    let vel: Shared<V3> = s.alloc(bp.bodies, place)?;
    let mut b = Barnes::new(bp, n, me);
    // The start barrier, and every node's counters so far (set-up is not counted).
    let before = s.gather_stats()?;

    let t0 = vmmc::pace::now_ns();
    let mut comm = SvmComm {
        s: &mut s,
        pos,
        next: 0,
    };
    b.run(&mut comm).map_err(AppError::Comm)?;
    let t = vmmc::pace::now_ns() - t0;
    let stats = svm_common::since(before, s.gather_stats()?);

    // The check (not timed): the final state through the shared arrays.
    if params.inject_fault && me == n - 1 && !b.mine.is_empty() {
        b.pos[b.mine.start][0] += 1e-3;
    }
    // Every node has passed the last exchange's barrier: the next copy is free.
    let pos = pos[bp.iterations % 2];
    {
        let mine = b.mine.clone();
        s.view(pos).write(mine.start, &b.pos[mine.clone()])?;
        s.view(vel).write(mine.start, &b.vel[mine])?;
    }
    s.barrier()?;
    let mut verdict = None;
    let (mut e0, mut e1) = (0.0, 0.0);
    if me == 0 {
        // The initial energy (a direct sum: node 0 only, after the timed phase).
        let b0 = Barnes::new(bp, 1, 0);
        e0 = barnes::energy(&b0.pos, &b0.vel, &b0.mass, bp.eps);
        let (pos, vel) = (s.view(pos).to_vec()?, s.view(vel).to_vec()?);
        let (_, want) = barnes::sequential(&bp).map_err(AppError::Comm)?;
        e1 = barnes::energy(&pos, &vel, &b.mass, bp.eps);
        let e_seq = barnes::energy(&want.pos, &want.vel, &want.mass, bp.eps);
        let worst = (0..bp.bodies)
            .flat_map(|i| (0..3).map(move |k| (i, k)))
            .map(|(i, k)| {
                let d = (pos[i][k] - want.pos[i][k]).abs();
                (d.max((vel[i][k] - want.vel[i][k]).abs()), i)
            })
            .fold(
                (0.0, 0),
                |a, x| if x.0 > a.0 || x.0.is_nan() { x } else { a },
            );
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
    let (time, bad) = time_and_verdict(&mut s, t, verdict.is_some())?;
    let page = s.page_size();
    s.finish()?;
    if bad {
        return Err(AppError::CheckFailed {
            app: APP,
            what: verdict
                .unwrap_or_else(|| "node 0 found a difference from the sequential run".into()),
        });
    }
    let Some(stats) = stats else {
        return Ok(None);
    };
    Ok(Some(svm_common::report(
        APP,
        ep,
        params,
        protocol,
        page,
        serde_json::to_value(bp).expect("serializable"),
        time,
        &stats,
        format!(
            "positions and velocities equal the sequential run's (within {POS_TOLERANCE:e}); energy {e0:.6} -> {e1:.6} ({:+.3}%)",
            (e1 - e0) / e0.abs() * 100.0
        ),
    )))
}
