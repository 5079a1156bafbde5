//! Ocean-SVM (seed 001 §3, §4.2): the multigrid ocean of [`crate::kernels::ocean`] on shared
//! virtual memory.
//!
//! Each node owns a block of whole, contiguous rows of every grid level ([`Rows`]), as in
//! SPLASH-2's Ocean ("partitioned in blocks of p whole, contiguous rows"). Every split level
//! has a shared grid (`m` rows of `m + 2` values) whose pages are homed at the node that owns
//! their first row, so a node's block lives at that node. The kernel computes on its own
//! rows in private memory (SPLASH-2's partitions in local memory); its [`Comm`] is shared
//! memory:
//! - an exchange stores the node's first and last own rows into the level's shared grid
//!   (its home pages: no diffs, no automatic-update traffic unless a page is shared with a
//!   neighbour's block), then a barrier, then reads the neighbours' boundary rows from the
//!   shared grid (a page fault and a fetch from their home: the nearest-neighbour
//!   communication);
//! - a gather (the residual norms' per-row sums, and the residual of the coarsest split
//!   level) stores the node's part into its slot of a shared array (homed at it), a barrier,
//!   and reads every slot.
//!
//! Both kinds alternate between two copies of their shared arrays, so that a node storing
//! the next values cannot overwrite a page another node has yet to fetch for the last ones.
//!
//! The versions are the protocols ([`crate::svm_common`]): AU = AURC (or HLRC-AU with
//! `--protocol hlrc-au`), DU = HLRC. Table 1's problem is 130 x 130 (`--grid 130`, one time
//! step).
//!
//! The check: node 0 runs the sequential kernel after the timed phase and compares every
//! V-cycle's residual norm and the sums of the final fields (within a relative
//! [`crate::ocean_nx::TOLERANCE`]; they agree to the last bit by construction).

use crate::kernels::ocean::{self, Comm, Grid, Ocean, OceanParams, Rows};
use crate::ocean_nx::TOLERANCE;
use crate::svm_common::{self, homes, time_and_verdict};
use crate::{AppError, AppResult, Params, Report, Size};
use svm::{Placement, Shared, Svm};

const APP: &str = "ocean-svm";

/// Table 1's Ocean-SVM problem: a 130 x 130 grid, one time step.
pub const PAPER: OceanParams = OceanParams {
    grid: 130,
    ..OceanParams::PAPER
};

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<OceanParams> {
    let base = match params.size {
        Size::Paper => PAPER,
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

/// The kernel's communication through shared memory.
struct SvmComm<'a> {
    s: &'a mut Svm,
    rows: Rows,
    /// Per split level, two shared grids of `m x (m + 2)` values, and which is next.
    grids: Vec<([Shared<f64>; 2], usize)>,
    /// Two arrays of a slot per node (a length, then the values), and which is next.
    slots: [Shared<f64>; 2],
    slot: usize,
    next_slots: usize,
}

impl SvmComm<'_> {
    fn exchange_svm(&mut self, g: &mut Grid) -> svm::Result<()> {
        let level = (self.rows.n / g.m).trailing_zeros() as usize;
        let (pair, next) = &mut self.grids[level];
        let shared = pair[*next];
        *next ^= 1;
        let w = g.w();
        let (up, down) = (g.r0 > 0, g.r1 < g.m);
        {
            let v = self.s.view(shared);
            if up {
                v.write(g.r0 * w, g.row(g.r0))?;
            }
            if down {
                v.write((g.r1 - 1) * w, g.row(g.r1 - 1))?;
            }
        }
        self.s.barrier()?;
        let v = self.s.view(shared);
        if up {
            v.read((g.r0 - 1) * w, g.row_mut(g.r0 - 1))?;
        }
        if down {
            v.read(g.r1 * w, g.row_mut(g.r1))?;
        }
        Ok(())
    }

    fn gather_svm(&mut self, mine: &[f64]) -> svm::Result<Vec<f64>> {
        let shared = self.slots[self.next_slots];
        self.next_slots ^= 1;
        let me = self.s.rank();
        {
            let v = self.s.view(shared);
            v.set(me * self.slot, mine.len() as f64)?;
            v.write(me * self.slot + 1, mine)?;
        }
        self.s.barrier()?;
        let v = self.s.view(shared);
        let mut all = Vec::new();
        for p in 0..self.s.size() {
            let len = v.get(p * self.slot)? as usize;
            let at = all.len();
            all.resize(at + len, 0.0);
            v.read(p * self.slot + 1, &mut all[at..])?;
        }
        Ok(all)
    }
}

impl Comm for SvmComm<'_> {
    fn exchange(&mut self, g: &mut Grid) -> Result<(), String> {
        self.exchange_svm(g).map_err(|e| e.to_string())
    }

    fn gather(&mut self, mine: &[f64]) -> Result<Vec<f64>, String> {
        self.gather_svm(mine).map_err(|e| e.to_string())
    }
}

/// Runs Ocean-SVM on this node (see [`crate::RunFn`]).
pub fn run(ep: &vmmc::Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let op = problem(params)?;
    let protocol = svm_common::protocol(params)?;
    let (me, n) = (ep.rank(), ep.size());
    if op.n() < n {
        return Err(AppError::Usage(format!(
            "--grid {}: {} rows cannot be split over {n} nodes",
            op.grid,
            op.n()
        )));
    }
    let rows = Rows::new(op.n(), n);
    let page = svm_common::page_size()?;
    // A gather's largest part: a node's per-row sums of level 0, or its rows of the coarsest
    // split level (ghost columns included).
    let part = (0..=rows.split)
        .flat_map(|l| (0..n).map(move |p| (l, p)))
        .map(|(l, p)| {
            let (a, b) = rows.of(p, l);
            (b - a) * (rows.side(l) + 2)
        })
        .max()
        .unwrap_or(0);
    let slot = (part + 1).next_multiple_of(page / 8);
    let grid_bytes: usize = (0..=rows.split)
        .map(|l| (rows.side(l) * (rows.side(l) + 2) * 8).next_multiple_of(page))
        .sum();
    let mut s = svm_common::open(ep, params, 2 * grid_bytes + 2 * n * slot * 8)?;
    let mut grids = Vec::new();
    for l in 0..=rows.split {
        let (m, w) = (rows.side(l), rows.side(l) + 2);
        let owner = |i: usize| {
            let row = i / w;
            (0..n).find(|&p| rows.of(p, l).1 > row).unwrap_or(n - 1)
        };
        let place = homes(m * w, 8, s.page_size(), owner);
        grids.push(([s.alloc(m * w, place.clone())?, s.alloc(m * w, place)?], 0));
    }
    let slots = [
        s.alloc(n * slot, Placement::Blocked)?,
        s.alloc(n * slot, Placement::Blocked)?,
    ];
    let mut o = Ocean::new(op, n, me);
    // The start barrier, and every node's counters so far (set-up is not counted).
    let before = s.gather_stats()?;

    let t0 = vmmc::pace::now_ns();
    let mut comm = SvmComm {
        s: &mut s,
        rows: rows.clone(),
        grids,
        slots,
        slot,
        next_slots: 0,
    };
    o.run(&mut comm).map_err(AppError::Comm)?;
    let t = vmmc::pace::now_ns() - t0;
    let stats = svm_common::since(before, comm.s.gather_stats()?);

    // The check (not timed).
    let verdict = ocean::check(&mut o, &op, (me, n), params.inject_fault, &mut comm)
        .map_err(AppError::Comm)?;
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
    let mut problem = serde_json::to_value(op).expect("serializable");
    problem["levels"] = rows.levels().into();
    problem["split_levels"] = (rows.split + 1).into();
    problem["v_cycles"] = o.norms.len().into();
    Ok(Some(svm_common::report(
        APP,
        ep,
        params,
        protocol,
        page,
        problem,
        time,
        &stats,
        format!(
            "{} V-cycles' residual norms and the final fields equal the sequential run's (within {TOLERANCE:e} relative)",
            o.norms.len()
        ),
    )))
}
