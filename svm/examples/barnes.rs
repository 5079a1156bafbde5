//! Barnes-style: every node inserts its share of bodies into one shared quadtree of cells
//! (indices into shared arrays, not pointers), taking the lock of the cell it modifies, as
//! SPLASH-2 Barnes builds its octree each step; a lock-protected counter hands out cells.
//! Node 0 then walks the tree: every body must be in it exactly once, in the right
//! quadrant, and the cells' body counts must add up.
//!
//! `vmmc-run -n 4 [--transport sim] -- target/debug/examples/barnes [BODIES] [STEPS]`
//! (the space is sized for BODIES unless `SVM_SPACE` is set).
//!
//! Every lock grant carries the write notices its receiver lacks, and with every node
//! inserting into one tree these grow with the bodies: with some hundreds of thousands of
//! bodies (300,000 on 4 processes under HLRC) they pass the default 4 MiB area that carries
//! them, and the run stops with "write notices ... exceed the 4194304-byte area (raise
//! SVM_NOTICE_AREA)". Raise it (`SVM_NOTICE_AREA=64M`).

mod common;

use common::Arg;
use svm::{Placement, Svm};

const USAGE: &str = "usage: barnes [BODIES] [STEPS]
  BODIES  bodies inserted in the tree, 1 to 2^28 (default 2000)
  STEPS   tree builds, at least 1 (default 2)
under vmmc-run; SVM_PROTOCOL=hlrc|hlrc-au|aurc, SVM_SPACE (default: sized for BODIES);
with some hundreds of thousands of bodies raise SVM_NOTICE_AREA (default 4M), which
carries the locks' write notices";

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
    let a = common::parse_args(
        USAGE,
        &[
            Arg {
                name: "BODIES",
                min: 1,
                default: 2000,
            },
            Arg {
                name: "STEPS",
                min: 1,
                default: 2,
            },
        ],
    );
    let (bodies, steps) = (a[0], a[1]);
    if bodies > 1 << 28 {
        eprintln!("BODIES: {bodies} is more than 2^28\n{USAGE}");
        std::process::exit(2);
    }
    let max_cells = 4 * bodies + 8;
    vmmc_run::run(|ep| -> vmmc::Result<()> {
        // Four words per cell.
        let cfg = common::config(16 * max_cells)?.locks(LOCKS + 1);
        let mut s = Svm::new(ep, cfg)?;
        let (me, n) = (s.rank(), s.size());
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
