//! Barnes-style: every node inserts its share of bodies into one shared quadtree of cells
//! (indices into shared arrays, not pointers), taking the lock of the cell it modifies, as
//! SPLASH-2 Barnes builds its octree each step; a lock-protected counter hands out cells.
//! Node 0 then walks the tree: every body must be in it exactly once, in the right
//! quadrant, and the cells' body counts must add up.
//!
//! `vmmc-run -n 4 [--transport sim] -- target/debug/examples/barnes [BODIES] [STEPS]`

use svm::{Config, Placement, Svm};

const EMPTY: u32 = 0;
const BODY: u32 = 1 << 31;
const LOCKS: u32 = 512;
const COUNTER_LOCK: u32 = LOCKS;

fn pos(b: usize, step: usize) -> (f64, f64) {
    let h = |x: u64| (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
    let k = (b * 131 + step * 7919) as u64;
    (h(2 * k + 1), h(2 * k + 2))
}

fn quadrant((x, y): (f64, f64), (cx, cy, half): (f64, f64, f64)) -> (usize, (f64, f64, f64)) {
    let q = (x >= cx) as usize | ((y >= cy) as usize) << 1;
    let h = half / 2.0;
    let nx = if x >= cx { cx + h } else { cx - h };
    let ny = if y >= cy { cy + h } else { cy - h };
    (q, (nx, ny, h))
}

fn main() -> Result<(), vmmc::Error> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let bodies = args.next().flatten().unwrap_or(2000);
    let steps = args.next().flatten().unwrap_or(2);
    vmmc_run::run(|ep| -> vmmc::Result<()> {
        let cfg = Config::from_env()?.space(16 << 20).locks(LOCKS + 1);
        let mut s = Svm::new(ep, cfg)?;
        let (me, n) = (s.rank(), s.size());
        let max_cells = 4 * bodies + 8;
        let cells = s.alloc::<u32>(4 * max_cells, Placement::RoundRobin)?;
        let next = s.alloc::<u32>(1, Placement::Node(0))?;
        for step in 0..steps {
            if me == 0 {
                s.view(cells).write(0, &[EMPTY; 4])?;
                s.view(next).set(0, 1)?;
            }
            s.barrier()?;
            for b in (me..bodies).step_by(n) {
                let p = pos(b, step);
                let (mut cell, mut bounds, mut depth) = (0usize, (0.5, 0.5, 0.5), 0);
                loop {
                    let (q, inner) = quadrant(p, bounds);
                    let lock = cell as u32 % LOCKS;
                    s.acquire(lock)?;
                    let slot = s.view(cells).get(4 * cell + q)?;
                    if slot == EMPTY {
                        s.view(cells).set(4 * cell + q, BODY | b as u32)?;
                        s.release(lock)?;
                        break;
                    }
                    if slot & BODY == 0 {
                        s.release(lock)?;
                        (cell, bounds) = (slot as usize, inner);
                    } else {
                        // Split: a new cell takes the resident body; then go on into it.
                        s.acquire(COUNTER_LOCK)?;
                        let c = s.view(next).get(0)? as usize;
                        s.view(next).set(0, c as u32 + 1)?;
                        s.release(COUNTER_LOCK)?;
                        assert!(c < max_cells, "barnes: out of cells");
                        let other = (slot & !BODY) as usize;
                        let (oq, _) = quadrant(pos(other, step), inner);
                        let mut fresh = [EMPTY; 4];
                        fresh[oq] = slot;
                        s.view(cells).write(4 * c, &fresh)?;
                        s.view(cells).set(4 * cell + q, c as u32)?;
                        s.release(lock)?;
                        (cell, bounds) = (c, inner);
                    }
                    depth += 1;
                    assert!(depth < 60, "barnes: bodies too close");
                }
            }
            s.barrier()?;
            if me == 0 {
                // Walk the tree: each body once, inside its cell's bounds.
                let all = s.view(cells).to_vec()?;
                let mut seen = vec![false; bodies];
                let mut stack = vec![(0usize, (0.5, 0.5, 0.5))];
                while let Some((c, bounds)) = stack.pop() {
                    for q in 0..4 {
                        let slot = all[4 * c + q];
                        let (_, inner) = quadrant((0.0, 0.0), bounds);
                        let corner = (
                            bounds.0
                                + if q & 1 == 1 {
                                    bounds.2 / 2.0
                                } else {
                                    -bounds.2 / 2.0
                                },
                            bounds.1
                                + if q & 2 == 2 {
                                    bounds.2 / 2.0
                                } else {
                                    -bounds.2 / 2.0
                                },
                            inner.2,
                        );
                        if slot == EMPTY {
                            continue;
                        }
                        if slot & BODY != 0 {
                            let b = (slot & !BODY) as usize;
                            let (x, y) = pos(b, step);
                            assert!(
                                (x - corner.0).abs() <= corner.2
                                    && (y - corner.1).abs() <= corner.2,
                                "body {b} in the wrong cell"
                            );
                            assert!(!seen[b], "body {b} twice");
                            seen[b] = true;
                        } else {
                            stack.push((slot as usize, corner));
                        }
                    }
                }
                assert!(
                    seen.iter().all(|&x| x),
                    "barnes: bodies missing from the tree"
                );
            }
            s.barrier()?;
        }
        let stats = s.gather_stats()?;
        if me == 0 {
            println!(
                "barnes {bodies} bodies, {steps} steps, {n} nodes, {}: every body in the tree once; {}",
                s.protocol(),
                stats.expect("node 0 gathers").total
            );
        }
        s.finish()?;
        Ok(())
    })
}
