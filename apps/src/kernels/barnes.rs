//! Barnes' kernel: the Barnes-Hut hierarchical N-body method of SPLASH-2's Barnes.
//!
//! Bodies of a Plummer model (Aarseth, Henon and Wielen's recipe, in the standard units of
//! total mass 1 and total energy -1/4) come from a seeded generator, so every node makes the
//! same ones. Each time step builds an octree of all bodies (inserted in index order; cells
//! keep their mass and centre of mass, monopoles only), computes each body's acceleration by
//! walking the tree with the opening criterion `cell side < theta * distance` (a softened
//! gravity of length `eps`), and advances with leapfrog (kick, drift, kick).
//!
//! Distribution: nodes own equal blocks of bodies ([`crate::kernels::radix::block_lo`]),
//! keep every body's position, build the whole tree themselves, compute the forces of their
//! block, and exchange their block's new positions through [`BodyComm`] each step. A body's
//! acceleration depends only on the tree and on its own position, summed in the tree's fixed
//! order, so the parallel runs agree with the sequential one to the last bit.

use crate::kernels::radix::{block_lo, splitmix64};
use serde::Serialize;

/// A vector.
pub type V3 = [f64; 3];

/// The problem.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct BarnesParams {
    /// Bodies.
    pub bodies: usize,
    /// Time steps.
    pub iterations: usize,
    /// Opening criterion.
    pub theta: f64,
    /// Time step.
    pub dt: f64,
    /// Softening length.
    pub eps: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl BarnesParams {
    /// Table 1's problem: 4K bodies, 20 iterations (SPLASH-2's time step and softening;
    /// theta 0.7 since our cells carry no quadrupole moments).
    pub const PAPER: BarnesParams = BarnesParams {
        bodies: 4096,
        iterations: 20,
        theta: 0.7,
        dt: 0.025,
        eps: 0.05,
        seed: 123,
    };
    /// A small problem for tests.
    pub const TEST: BarnesParams = BarnesParams {
        bodies: 64,
        iterations: 2,
        theta: 0.7,
        dt: 0.025,
        eps: 0.05,
        seed: 123,
    };

    /// Refuses problems the kernel cannot run.
    pub fn check(&self) -> Result<(), String> {
        if self.bodies < 2 {
            return Err(format!("--bodies {}: at least 2", self.bodies));
        }
        if !(self.theta >= 0.0 && self.dt > 0.0 && self.eps > 0.0) {
            return Err("--theta >= 0, --dt > 0, --eps > 0".into());
        }
        Ok(())
    }
}

/// A deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(1);
        (splitmix64(self.0) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A random direction scaled to `r`.
    fn sphere(&mut self, r: f64) -> V3 {
        loop {
            let v = [
                2.0 * self.uniform() - 1.0,
                2.0 * self.uniform() - 1.0,
                2.0 * self.uniform() - 1.0,
            ];
            let s = dot(v, v);
            if s > 1e-6 && s <= 1.0 {
                let k = r / s.sqrt();
                return [v[0] * k, v[1] * k, v[2] * k];
            }
        }
    }
}

fn dot(a: V3, b: V3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// The bodies of a Plummer model: positions, velocities, masses.
pub fn plummer(n: usize, seed: u64) -> (Vec<V3>, Vec<V3>, Vec<f64>) {
    let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    // Standard units: length scale 3 pi / 16, velocity scale its inverse square root.
    let rsc = 3.0 * std::f64::consts::PI / 16.0;
    let vsc = (1.0 / rsc).sqrt();
    let (mut pos, mut vel) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let r = loop {
            let x = rng.uniform().max(1e-10);
            let r = 1.0 / (x.powf(-2.0 / 3.0) - 1.0).sqrt();
            if r < 9.0 {
                break r;
            }
        };
        pos.push(rng.sphere(rsc * r));
        let q = loop {
            let (x, y) = (rng.uniform(), 0.1 * rng.uniform());
            if y < x * x * (1.0 - x * x).powf(3.5) {
                break x;
            }
        };
        let v = q * std::f64::consts::SQRT_2 * (1.0 + r * r).powf(-0.25);
        vel.push(rng.sphere(vsc * v));
    }
    // Centre of mass at rest at the origin.
    for a in [&mut pos, &mut vel] {
        let mut c = [0.0; 3];
        for p in a.iter() {
            for k in 0..3 {
                c[k] += p[k] / n as f64;
            }
        }
        for p in a.iter_mut() {
            for k in 0..3 {
                p[k] -= c[k];
            }
        }
    }
    (pos, vel, vec![1.0 / n as f64; n])
}

const BODY: u32 = 1 << 31;
const EMPTY: u32 = u32::MAX;

/// A cell of the octree.
#[derive(Clone, Debug)]
struct Cell {
    centre: V3,
    half: f64,
    mass: f64,
    com: V3,
    /// Children: [`EMPTY`], a body (`BODY | index`) or a cell index.
    kids: [u32; 8],
}

/// The octree of all bodies.
pub struct Tree {
    cells: Vec<Cell>,
}

impl Tree {
    /// Builds the tree of `pos` (inserted in index order).
    pub fn build(pos: &[V3], mass: &[f64]) -> Tree {
        let (mut lo, mut hi) = ([f64::MAX; 3], [f64::MIN; 3]);
        for p in pos {
            for k in 0..3 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
        }
        let half = (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max) * 0.5 * 1.0001 + 1e-9;
        let centre = [
            0.5 * (lo[0] + hi[0]),
            0.5 * (lo[1] + hi[1]),
            0.5 * (lo[2] + hi[2]),
        ];
        let mut t = Tree {
            cells: vec![Cell::new(centre, half)],
        };
        for i in 0..pos.len() {
            t.insert(i, pos);
        }
        t.summarize(0, pos, mass);
        t
    }

    fn insert(&mut self, i: usize, pos: &[V3]) {
        let mut c = 0usize;
        for _depth in 0..128 {
            let o = self.cells[c].octant(pos[i]);
            let k = self.cells[c].kids[o];
            if k == EMPTY {
                self.cells[c].kids[o] = BODY | i as u32;
                return;
            }
            if k & BODY == 0 {
                c = k as usize;
                continue;
            }
            // A body is there: split the octant into a cell and put it there first.
            let j = (k & !BODY) as usize;
            let sub = self.cells[c].child(o);
            let idx = self.cells.len() as u32;
            let mut cell = sub;
            cell.kids[cell.octant(pos[j])] = k;
            self.cells.push(cell);
            self.cells[c].kids[o] = idx;
            c = idx as usize;
        }
        // Bodies at one point: the last one shares the deepest cell's slot's mass (never
        // happens with a continuous distribution; kept finite rather than looping).
        panic!("barnes: bodies {i} and another coincide");
    }

    fn summarize(&mut self, c: usize, pos: &[V3], mass: &[f64]) {
        let (mut m, mut com) = (0.0, [0.0; 3]);
        for o in 0..8 {
            let k = self.cells[c].kids[o];
            let (km, kc) = if k == EMPTY {
                continue;
            } else if k & BODY != 0 {
                let j = (k & !BODY) as usize;
                (mass[j], pos[j])
            } else {
                self.summarize(k as usize, pos, mass);
                (self.cells[k as usize].mass, self.cells[k as usize].com)
            };
            m += km;
            for d in 0..3 {
                com[d] += km * kc[d];
            }
        }
        for v in com.iter_mut() {
            *v /= m;
        }
        self.cells[c].mass = m;
        self.cells[c].com = com;
    }

    /// The acceleration of body `i`.
    pub fn accel(&self, i: usize, pos: &[V3], mass: &[f64], theta: f64, eps: f64) -> V3 {
        let mut a = [0.0; 3];
        self.walk(0, i, pos, mass, theta * theta, eps * eps, &mut a);
        a
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(&self, c: usize, i: usize, pos: &[V3], mass: &[f64], th2: f64, e2: f64, a: &mut V3) {
        let p = pos[i];
        for &k in &self.cells[c].kids {
            if k == EMPTY {
                continue;
            }
            if k & BODY != 0 {
                let j = (k & !BODY) as usize;
                if j != i {
                    pull(a, p, pos[j], mass[j], e2);
                }
                continue;
            }
            let cell = &self.cells[k as usize];
            let d = [cell.com[0] - p[0], cell.com[1] - p[1], cell.com[2] - p[2]];
            let side = 2.0 * cell.half;
            if side * side < th2 * dot(d, d) {
                pull(a, p, cell.com, cell.mass, e2);
            } else {
                self.walk(k as usize, i, pos, mass, th2, e2, a);
            }
        }
    }
}

#[inline]
fn pull(a: &mut V3, p: V3, q: V3, m: f64, e2: f64) {
    let d = [q[0] - p[0], q[1] - p[1], q[2] - p[2]];
    let r2 = dot(d, d) + e2;
    let f = m / (r2 * r2.sqrt());
    for k in 0..3 {
        a[k] += f * d[k];
    }
}

impl Cell {
    fn new(centre: V3, half: f64) -> Cell {
        Cell {
            centre,
            half,
            mass: 0.0,
            com: [0.0; 3],
            kids: [EMPTY; 8],
        }
    }
    fn octant(&self, p: V3) -> usize {
        (p[0] > self.centre[0]) as usize
            | ((p[1] > self.centre[1]) as usize) << 1
            | ((p[2] > self.centre[2]) as usize) << 2
    }
    fn child(&self, o: usize) -> Cell {
        let h = self.half * 0.5;
        let s = |bit: usize, k: usize| {
            if o & bit != 0 {
                self.centre[k] + h
            } else {
                self.centre[k] - h
            }
        };
        Cell::new([s(1, 0), s(2, 1), s(4, 2)], h)
    }
}

/// What the kernel needs from the other nodes.
pub trait BodyComm {
    /// Every other node's block of `pos` (node `p` owns `block_lo(n, nodes, p) ..`), from them;
    /// this node's block is up to date in `pos`.
    fn allgather(&mut self, pos: &mut [V3]) -> Result<(), String>;
}

/// One node alone.
pub struct Alone;

impl BodyComm for Alone {
    fn allgather(&mut self, _pos: &mut [V3]) -> Result<(), String> {
        Ok(())
    }
}

/// One node's state: every body's position, and velocities and accelerations of its block.
pub struct Barnes {
    /// The problem.
    pub p: BarnesParams,
    /// Every body's position (this node's block is the up-to-date one between exchanges).
    pub pos: Vec<V3>,
    /// Every body's velocity (only this node's block advances).
    pub vel: Vec<V3>,
    /// Every body's acceleration (only this node's block is computed).
    pub acc: Vec<V3>,
    /// Masses.
    pub mass: Vec<f64>,
    /// This node's block.
    pub mine: std::ops::Range<usize>,
}

impl Barnes {
    /// The initial state of node `me` of `nodes`.
    pub fn new(p: BarnesParams, nodes: usize, me: usize) -> Barnes {
        let (pos, vel, mass) = plummer(p.bodies, p.seed);
        let mine = block_lo(p.bodies, nodes, me)..block_lo(p.bodies, nodes, me + 1);
        Barnes {
            acc: vec![[0.0; 3]; p.bodies],
            pos,
            vel,
            mass,
            mine,
            p,
        }
    }

    fn forces(&mut self) {
        let t = Tree::build(&self.pos, &self.mass);
        for i in self.mine.clone() {
            self.acc[i] = t.accel(i, &self.pos, &self.mass, self.p.theta, self.p.eps);
        }
    }

    /// Runs every step (the timed phase).
    pub fn run(&mut self, comm: &mut dyn BodyComm) -> Result<(), String> {
        self.forces();
        let dt = self.p.dt;
        for _ in 0..self.p.iterations {
            for i in self.mine.clone() {
                for k in 0..3 {
                    self.vel[i][k] += 0.5 * dt * self.acc[i][k];
                    self.pos[i][k] += dt * self.vel[i][k];
                }
            }
            comm.allgather(&mut self.pos)?;
            self.forces();
            for i in self.mine.clone() {
                for k in 0..3 {
                    self.vel[i][k] += 0.5 * dt * self.acc[i][k];
                }
            }
        }
        Ok(())
    }
}

/// Total energy (kinetic plus softened potential, summed directly) of every body.
pub fn energy(pos: &[V3], vel: &[V3], mass: &[f64], eps: f64) -> f64 {
    let mut e = 0.0;
    for i in 0..pos.len() {
        e += 0.5 * mass[i] * dot(vel[i], vel[i]);
        for j in i + 1..pos.len() {
            let d = [
                pos[i][0] - pos[j][0],
                pos[i][1] - pos[j][1],
                pos[i][2] - pos[j][2],
            ];
            e -= mass[i] * mass[j] / (dot(d, d) + eps * eps).sqrt();
        }
    }
    e
}

/// The sequential run: the timed phase's ns and the final state.
pub fn sequential(p: &BarnesParams) -> Result<(u64, Barnes), String> {
    let mut b = Barnes::new(*p, 1, 0);
    let t0 = vmmc::pace::now_ns();
    b.run(&mut Alone)?;
    Ok((vmmc::pace::now_ns() - t0, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plummer_is_bound_and_energy_is_kept() {
        let p = BarnesParams::TEST;
        let (pos, vel, mass) = plummer(p.bodies, p.seed);
        let e0 = energy(&pos, &vel, &mass, p.eps);
        assert!(e0 < -0.1 && e0 > -0.4, "{e0}");
        let (_, b) = sequential(&p).unwrap();
        let e1 = energy(&b.pos, &b.vel, &b.mass, p.eps);
        assert!(((e1 - e0) / e0).abs() < 0.01, "{e0} {e1}");
    }

    #[test]
    fn the_tree_with_theta_zero_is_the_direct_sum() {
        let (pos, _, mass) = plummer(64, 5);
        let t = Tree::build(&pos, &mass);
        let a = t.accel(3, &pos, &mass, 0.0, 0.05);
        let mut d = [0.0; 3];
        for j in 0..64 {
            if j != 3 {
                pull(&mut d, pos[3], pos[j], mass[j], 0.0025);
            }
        }
        for k in 0..3 {
            assert!(
                (a[k] - d[k]).abs() < 1e-12 * d[k].abs().max(1.0),
                "{a:?} {d:?}"
            );
        }
    }
}
