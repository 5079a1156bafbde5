//! Ocean's kernel: a multigrid solver on a grid of whole rows, and the time step around it.
//!
//! What it computes (a simplified but faithful version of SPLASH-2's Ocean, one layer
//! instead of two): the wind-driven circulation of a square basin, the barotropic vorticity
//! equation on an `n x n` grid of cells (plus a ring of boundary cells: Table 1's 514 x 514
//! is `n = 512`),
//!
//! ```text
//! d(zeta)/dt = -J(psi, zeta) - beta d(psi)/dx + F(y) - kappa zeta + nu lap(zeta),  lap(psi) = zeta
//! ```
//!
//! with `psi = 0` on the walls. Each time step solves the elliptic equation for the stream
//! function `psi` by multigrid V-cycles until the residual's norm falls below `tolerance`
//! times the right-hand side's (SPLASH-2's `-e1e-7`), warm-started from the last step's
//! `psi`, then advances the vorticity `zeta` explicitly.
//!
//! Multigrid: cell-centred, red-black Gauss-Seidel smoothing (2 sweeps before, 1 after),
//! restriction by the average of four cells, bilinear prolongation, down to one cell.
//!
//! Distribution: the rows of every level are split in contiguous blocks ([`Rows`]); node `p`
//! owns the same part of the basin at every level. Levels with fewer rows than nodes are not
//! split: every node gathers the residual of the coarsest split level and runs the rest of
//! the V-cycle on whole grids itself. All communication goes through [`Comm`]: the boundary
//! rows between neighbours before each stencil, the gather, and the per-row sums of the
//! norms. A red-black sweep updates each cell from cells of the other colour only, and norms
//! add their per-row sums in row order, so the result does not depend on the number of nodes:
//! the parallel runs agree with the sequential one ([`SerialComm`]) to the last bit.

use serde::Serialize;

/// The problem.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct OceanParams {
    /// Grid side including the boundary ring (`n + 2`, `n` a power of two).
    pub grid: usize,
    /// Time steps.
    pub steps: usize,
    /// Multigrid stops when `|residual| < tolerance * |rhs|`.
    pub tolerance: f64,
}

impl OceanParams {
    /// Table 1's 514 x 514 grid. The entry's trailing "1" we read as one time step.
    pub const PAPER: OceanParams = OceanParams {
        grid: 514,
        steps: 1,
        tolerance: 1e-7,
    };
    /// A small problem for tests.
    pub const TEST: OceanParams = OceanParams {
        grid: 18,
        steps: 1,
        tolerance: 1e-3,
    };

    /// Interior cells per side.
    pub fn n(&self) -> usize {
        self.grid - 2
    }

    /// Refuses problems the kernel cannot run.
    pub fn check(&self) -> Result<(), String> {
        if self.grid < 3 || !(self.grid - 2).is_power_of_two() {
            return Err(format!(
                "--grid {}: the interior (grid - 2) must be a power of two",
                self.grid
            ));
        }
        if !(self.tolerance > 0.0 && self.tolerance < 1.0) {
            return Err(format!("--tolerance {}: between 0 and 1", self.tolerance));
        }
        Ok(())
    }
}

/// The most V-cycles per solve.
pub const MAX_CYCLES: usize = 100;
const BETA: f64 = 2.0;
const KAPPA: f64 = 0.5;
/// Diffusion per step in grid units (explicit, stable below 0.25).
const NU_GRID: f64 = 0.1;
const DT: f64 = 2e-3;

/// Which rows of each level each node owns.
#[derive(Clone, Debug)]
pub struct Rows {
    /// Nodes.
    pub nodes: usize,
    /// Interior side of level 0.
    pub n: usize,
    /// The coarsest split level (levels `0..=split` are split between the nodes).
    pub split: usize,
}

impl Rows {
    /// The partition of an `n x n` grid's levels over `nodes` nodes.
    pub fn new(n: usize, nodes: usize) -> Rows {
        let mut split = 0;
        while (n >> (split + 1)) >= nodes.max(1) && (n >> (split + 1)) >= 1 {
            split += 1;
        }
        Rows { nodes, n, split }
    }

    /// Interior side of `level`.
    pub fn side(&self, level: usize) -> usize {
        self.n >> level
    }

    /// Levels (down to one cell).
    pub fn levels(&self) -> usize {
        self.n.trailing_zeros() as usize + 1
    }

    /// Node `p`'s rows of `level` (every row on unsplit levels).
    pub fn of(&self, p: usize, level: usize) -> (usize, usize) {
        if level > self.split {
            return (0, self.side(level));
        }
        let m = self.side(self.split);
        let lo = |q: usize| (m * q / self.nodes) << (self.split - level);
        (lo(p), lo(p + 1))
    }
}

/// The rows `r0 .. r1` of a level's `m x m` grid, with one row above and below (neighbours'
/// rows or the wall's ghost cells) and a ghost column each side.
#[derive(Clone, Debug)]
pub struct Grid {
    /// Interior side.
    pub m: usize,
    /// First own row.
    pub r0: usize,
    /// End of own rows.
    pub r1: usize,
    /// Values, `(r1 - r0 + 2) x (m + 2)`, row-major; local row 0 is global row `r0 - 1`.
    pub v: Vec<f64>,
}

impl Grid {
    /// Zeros.
    pub fn new(m: usize, (r0, r1): (usize, usize)) -> Grid {
        Grid {
            m,
            r0,
            r1,
            v: vec![0.0; (r1 - r0 + 2) * (m + 2)],
        }
    }
    /// Row stride.
    pub fn w(&self) -> usize {
        self.m + 2
    }
    /// Whether this grid holds every row.
    pub fn whole(&self) -> bool {
        self.r0 == 0 && self.r1 == self.m
    }
    /// Index of global row `i` (`r0 - 1 ..= r1`), column `j` (`0 ..= m + 1`, 1-based interior).
    #[inline]
    pub fn at(&self, i: usize, j: usize) -> usize {
        (i + 1 - self.r0) * (self.m + 2) + j
    }
    /// Global row `i`'s cells, ghost columns included.
    pub fn row(&self, i: usize) -> &[f64] {
        let a = self.at(i, 0);
        &self.v[a..a + self.m + 2]
    }
    /// The same, to write.
    pub fn row_mut(&mut self, i: usize) -> &mut [f64] {
        let a = self.at(i, 0);
        let w = self.m + 2;
        &mut self.v[a..a + w]
    }
    /// The own rows, ghost columns included.
    pub fn own(&self) -> &[f64] {
        &self.v[self.w()..self.v.len() - self.w()]
    }
    /// Sets the ghost columns of own rows and, at the walls, the ghost rows: minus the cell
    /// inside, so that the wall between them is zero.
    pub fn walls(&mut self) {
        let (m, w) = (self.m, self.w());
        for i in self.r0..self.r1 {
            let a = self.at(i, 0);
            self.v[a] = -self.v[a + 1];
            self.v[a + m + 1] = -self.v[a + m];
        }
        if self.r0 == 0 {
            for j in 0..w {
                self.v[j] = -self.v[w + j];
            }
        }
        if self.r1 == m {
            let last = self.v.len() - w;
            for j in 0..w {
                self.v[last + j] = -self.v[last - w + j];
            }
        }
    }
}

/// What the kernel needs from the other nodes.
pub trait Comm {
    /// Refreshes `g`'s rows above and below its own: the neighbours' boundary rows, or the
    /// wall's ghost cells ([`Grid::walls`] has set the own rows' ghosts).
    fn exchange(&mut self, g: &mut Grid) -> Result<(), String>;
    /// Every node's `mine` (f64 per own row), concatenated in row order.
    fn gather(&mut self, mine: &[f64]) -> Result<Vec<f64>, String>;
}

/// One node alone: every grid is whole.
pub struct SerialComm;

impl Comm for SerialComm {
    fn exchange(&mut self, g: &mut Grid) -> Result<(), String> {
        debug_assert!(g.whole());
        Ok(())
    }
    fn gather(&mut self, mine: &[f64]) -> Result<Vec<f64>, String> {
        Ok(mine.to_vec())
    }
}

/// Fills halos: walls first, then the neighbours' rows through `comm` when split.
fn refresh(g: &mut Grid, comm: &mut dyn Comm) -> Result<(), String> {
    g.walls();
    if !g.whole() {
        comm.exchange(g)?;
    }
    Ok(())
}

/// One red-black Gauss-Seidel sweep for `lap(u) = f` with cell size `h`.
fn sweep(u: &mut Grid, f: &Grid, h2: f64, comm: &mut dyn Comm) -> Result<(), String> {
    for colour in 0..2 {
        refresh(u, comm)?;
        let w = u.w();
        for i in u.r0..u.r1 {
            let first = 1 + (i + 1 + colour) % 2;
            let (a, fa) = (u.at(i, 0), f.at(i, 0));
            let mut j = first;
            while j <= u.m {
                let c = a + j;
                u.v[c] =
                    0.25 * (u.v[c - w] + u.v[c + w] + u.v[c - 1] + u.v[c + 1] - h2 * f.v[fa + j]);
                j += 2;
            }
        }
    }
    Ok(())
}

/// `r = f - lap(u)` on own rows.
fn residual(
    u: &mut Grid,
    f: &Grid,
    r: &mut Grid,
    h2: f64,
    comm: &mut dyn Comm,
) -> Result<(), String> {
    refresh(u, comm)?;
    let w = u.w();
    let inv = 1.0 / h2;
    for i in u.r0..u.r1 {
        let a = u.at(i, 0);
        for j in 1..=u.m {
            let c = a + j;
            let lap = (u.v[c - w] + u.v[c + w] + u.v[c - 1] + u.v[c + 1] - 4.0 * u.v[c]) * inv;
            r.v[c] = f.v[c] - lap;
        }
    }
    Ok(())
}

/// Root of the mean square of `g`'s interior, its rows summed in row order across nodes.
pub fn norm(g: &Grid, comm: &mut dyn Comm) -> Result<f64, String> {
    let mine: Vec<f64> = (g.r0..g.r1)
        .map(|i| g.row(i)[1..=g.m].iter().map(|x| x * x).sum())
        .collect();
    let rows = if g.whole() { mine } else { comm.gather(&mine)? };
    Ok((rows.iter().sum::<f64>() / (g.m * g.m) as f64).sqrt())
}

/// The sum of `g`'s interior, rows in row order across nodes (a fingerprint of a field).
pub fn total(g: &Grid, comm: &mut dyn Comm) -> Result<f64, String> {
    let mine: Vec<f64> = (g.r0..g.r1)
        .map(|i| g.row(i)[1..=g.m].iter().sum())
        .collect();
    let rows = if g.whole() { mine } else { comm.gather(&mine)? };
    Ok(rows.iter().sum())
}

/// One level's arrays.
struct Level {
    u: Grid,
    f: Grid,
    r: Grid,
    h2: f64,
}

/// The multigrid solver of one node.
pub struct Multigrid {
    rows: Rows,
    levels: Vec<Level>,
}

impl Multigrid {
    /// Levels of an `n x n` grid over `rows.nodes` nodes, for node `me`.
    pub fn new(rows: Rows, me: usize) -> Multigrid {
        let levels = (0..rows.levels())
            .map(|l| {
                let (m, part) = (rows.side(l), rows.of(me, l));
                let h = 1.0 / m as f64;
                Level {
                    u: Grid::new(m, part),
                    f: Grid::new(m, part),
                    r: Grid::new(m, part),
                    h2: h * h,
                }
            })
            .collect();
        Multigrid { rows, levels }
    }

    /// Solves `lap(u) = f` (`u` holds the first guess and gets the solution) by V-cycles;
    /// returns the residual norm after each.
    pub fn solve(
        &mut self,
        u: &mut Grid,
        f: &Grid,
        tolerance: f64,
        comm: &mut dyn Comm,
    ) -> Result<Vec<f64>, String> {
        let top = &mut self.levels[0];
        top.u.v.copy_from_slice(&u.v);
        top.f.v.copy_from_slice(&f.v);
        let fnorm = norm(f, comm)?;
        let mut norms = Vec::new();
        for _ in 0..MAX_CYCLES {
            self.vcycle(0, comm)?;
            let l = &mut self.levels[0];
            residual(&mut l.u, &l.f, &mut l.r, l.h2, comm)?;
            let rn = norm(&l.r, comm)?;
            norms.push(rn);
            if rn <= tolerance * fnorm {
                break;
            }
        }
        u.v.copy_from_slice(&self.levels[0].u.v);
        Ok(norms)
    }

    fn vcycle(&mut self, l: usize, comm: &mut dyn Comm) -> Result<(), String> {
        let last = l + 1 == self.levels.len();
        {
            let lv = &mut self.levels[l];
            let sweeps = if last { 8 } else { 2 };
            for _ in 0..sweeps {
                sweep(&mut lv.u, &lv.f, lv.h2, comm)?;
            }
            if last {
                return Ok(());
            }
            residual(&mut lv.u, &lv.f, &mut lv.r, lv.h2, comm)?;
        }
        // Restrict the residual: on a split coarse level each node its own rows; below the
        // split every node the whole grid, from the gathered residual.
        let (fine, coarse) = self.levels.split_at_mut(l + 1);
        let (fl, cl) = (&mut fine[l], &mut coarse[0]);
        let gathered;
        let src: &Grid = if l == self.rows.split && !fl.r.whole() {
            let mine: Vec<f64> = (fl.r.r0..fl.r.r1)
                .flat_map(|i| fl.r.row(i).iter().copied())
                .collect();
            let all = comm.gather(&mine)?;
            let mut g = Grid::new(fl.r.m, (0, fl.r.m));
            g.own_mut().copy_from_slice(&all);
            gathered = g;
            &gathered
        } else {
            &fl.r
        };
        for i in cl.f.r0..cl.f.r1 {
            for j in 1..=cl.f.m {
                let (a, b) = (src.at(2 * i, 2 * j - 1), src.at(2 * i + 1, 2 * j - 1));
                let v = 0.25 * (src.v[a] + src.v[a + 1] + src.v[b] + src.v[b + 1]);
                let c = cl.f.at(i, j);
                cl.f.v[c] = v;
            }
        }
        cl.u.v.iter_mut().for_each(|x| *x = 0.0);
        self.vcycle(l + 1, comm)?;
        // Prolong the correction bilinearly (the coarse grid's halo first).
        let (fine, coarse) = self.levels.split_at_mut(l + 1);
        let (fl, cl) = (&mut fine[l], &mut coarse[0]);
        refresh(&mut cl.u, comm)?;
        let e = &cl.u;
        for i in fl.u.r0..fl.u.r1 {
            let (ci, di) = (i / 2, if i % 2 == 0 { -1i64 } else { 1 });
            let ni = (ci as i64 + di) as usize;
            for j in 1..=fl.u.m {
                let cj = (j - 1) / 2 + 1;
                let nj = if (j - 1) % 2 == 0 { cj - 1 } else { cj + 1 };
                let v = 0.5625 * e.v[e.at(ci, cj)]
                    + 0.1875 * (e.v[e.at_signed(ni, cj)] + e.v[e.at(ci, nj)])
                    + 0.0625 * e.v[e.at_signed(ni, nj)];
                let c = fl.u.at(i, j);
                fl.u.v[c] += v;
            }
        }
        let lv = &mut self.levels[l];
        sweep(&mut lv.u, &lv.f, lv.h2, comm)
    }
}

impl Grid {
    /// Own rows to write, ghost columns included.
    pub fn own_mut(&mut self) -> &mut [f64] {
        let w = self.w();
        let n = self.v.len();
        &mut self.v[w..n - w]
    }

    /// Index of row `ni`, column `j`, where `ni` may be row -1 (the wall's ghost row above
    /// row 0, written `usize::MAX`).
    #[inline]
    fn at_signed(&self, ni: usize, j: usize) -> usize {
        if ni == usize::MAX {
            // Row -1: the wall's ghost row, local row 0.
            return j;
        }
        self.at(ni, j)
    }
}

/// One node's state of the ocean: the vorticity and the stream function on own rows.
pub struct Ocean {
    /// The problem.
    pub p: OceanParams,
    /// The vorticity.
    pub zeta: Grid,
    /// The stream function.
    pub psi: Grid,
    mg: Multigrid,
    /// Residual norms after each V-cycle of each solve, in order.
    pub norms: Vec<f64>,
}

impl Ocean {
    /// The initial state of node `me` of `nodes`.
    pub fn new(p: OceanParams, nodes: usize, me: usize) -> Ocean {
        let n = p.n();
        let rows = Rows::new(n, nodes);
        let part = rows.of(me, 0);
        let mut zeta = Grid::new(n, part);
        let h = 1.0 / n as f64;
        for i in part.0..part.1 {
            let y = (i as f64 + 0.5) * h;
            for j in 1..=n {
                let x = (j as f64 - 0.5) * h;
                let pi = std::f64::consts::PI;
                let c = zeta.at(i, j);
                zeta.v[c] = 10.0 * (pi * x).sin() * (pi * y).sin()
                    + (3.0 * pi * x).sin() * (5.0 * pi * y).sin();
            }
        }
        Ocean {
            p,
            zeta,
            psi: Grid::new(n, part),
            mg: Multigrid::new(rows, me),
            norms: Vec::new(),
        }
    }

    /// One time step: solve for `psi`, advance `zeta`.
    pub fn step(&mut self, comm: &mut dyn Comm) -> Result<(), String> {
        let norms = self
            .mg
            .solve(&mut self.psi, &self.zeta, self.p.tolerance, comm)?;
        self.norms.extend(norms);
        refresh(&mut self.psi, comm)?;
        refresh(&mut self.zeta, comm)?;
        let (n, w) = (self.p.n(), self.zeta.w());
        let h = 1.0 / n as f64;
        let inv4h2 = 1.0 / (4.0 * h * h);
        let mut next = self.zeta.clone();
        let (z, s) = (&self.zeta.v, &self.psi.v);
        for i in self.zeta.r0..self.zeta.r1 {
            let y = (i as f64 + 0.5) * h;
            let wind = (std::f64::consts::PI * y).sin();
            let a = self.zeta.at(i, 0);
            for j in 1..=n {
                let c = a + j;
                let jac = ((s[c + 1] - s[c - 1]) * (z[c + w] - z[c - w])
                    - (s[c + w] - s[c - w]) * (z[c + 1] - z[c - 1]))
                    * inv4h2;
                let psi_x = (s[c + 1] - s[c - 1]) / (2.0 * h);
                let lap = z[c - w] + z[c + w] + z[c - 1] + z[c + 1] - 4.0 * z[c];
                next.v[c] = z[c] + DT * (-jac - BETA * psi_x + wind - KAPPA * z[c]) + NU_GRID * lap;
            }
        }
        self.zeta = next;
        Ok(())
    }

    /// Runs every step.
    pub fn run(&mut self, comm: &mut dyn Comm) -> Result<(), String> {
        for _ in 0..self.p.steps {
            self.step(comm)?;
        }
        Ok(())
    }
}

/// What a run produced, to compare with the sequential run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// Residual norms after each V-cycle.
    pub norms: Vec<f64>,
    /// Sum of the final stream function.
    pub psi_total: f64,
    /// Sum of the final vorticity.
    pub zeta_total: f64,
}

/// The sequential run: the timed phase's ns and its outcome.
pub fn sequential(p: &OceanParams) -> Result<(u64, Outcome), String> {
    let mut o = Ocean::new(*p, 1, 0);
    let t0 = vmmc::pace::now_ns();
    o.run(&mut SerialComm)?;
    let t = vmmc::pace::now_ns() - t0;
    let out = Outcome {
        psi_total: total(&o.psi, &mut SerialComm)?,
        zeta_total: total(&o.zeta, &mut SerialComm)?,
        norms: o.norms,
    };
    Ok((t, out))
}

/// Relative tolerance of the check against the sequential run (the runs agree to the last
/// bit by construction).
pub const TOLERANCE: f64 = 1e-12;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

/// The check of a distributed run, the same for every library version: corrupts the result
/// first when asked (`inject`, on the last of `n` nodes), sums the fields over the nodes, and
/// on node 0 compares the residual norms and the sums with the sequential run of `op`.
/// Returns, on node 0, what differed.
pub fn check(
    o: &mut Ocean,
    op: &OceanParams,
    (me, n): (usize, usize),
    inject: bool,
    comm: &mut dyn Comm,
) -> Result<Option<String>, String> {
    if inject && me == n - 1 {
        let c = o.psi.at(o.psi.r1 - 1, 1);
        o.psi.v[c] += 1e-3;
    }
    let psi_total = total(&o.psi, comm)?;
    let zeta_total = total(&o.zeta, comm)?;
    if me != 0 {
        return Ok(None);
    }
    let (_, want) = sequential(op)?;
    Ok(if want.norms.len() != o.norms.len() {
        Some(format!(
            "{} V-cycles, the sequential run {}",
            o.norms.len(),
            want.norms.len()
        ))
    } else if let Some(i) = (0..o.norms.len()).find(|&i| !close(o.norms[i], want.norms[i])) {
        Some(format!(
            "residual norm after V-cycle {i}: {:e}, the sequential run {:e}",
            o.norms[i], want.norms[i]
        ))
    } else if !close(psi_total, want.psi_total) {
        Some(format!(
            "the stream function sums to {psi_total:e}, the sequential run's to {:e}",
            want.psi_total
        ))
    } else if !close(zeta_total, want.zeta_total) {
        Some(format!(
            "the vorticity sums to {zeta_total:e}, the sequential run's to {:e}",
            want.zeta_total
        ))
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_nest_and_cover() {
        for (n, nodes) in [(32, 1), (32, 4), (32, 3), (512, 16), (512, 64), (8, 8)] {
            let r = Rows::new(n, nodes);
            assert!(r.side(r.split) >= nodes, "{n} {nodes}");
            for l in 0..=r.split {
                assert_eq!(r.of(0, l).0, 0);
                assert_eq!(r.of(nodes - 1, l).1, r.side(l));
                for p in 0..nodes {
                    let (a, b) = r.of(p, l);
                    assert!(a < b, "node {p} owns no row of level {l}");
                    if l < r.split {
                        assert_eq!(r.of(p, l + 1).0 * 2, a);
                    }
                }
            }
        }
    }

    #[test]
    fn multigrid_converges() {
        let (_, out) = sequential(&OceanParams::TEST).unwrap();
        assert!(out.norms.len() < 30, "{:?}", out.norms);
        let last = *out.norms.last().unwrap();
        assert!(last < 1e-3 * out.norms[0], "{:?}", out.norms);
    }
}
