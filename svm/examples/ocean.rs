//! Ocean-style: a grid partitioned into blocks of whole rows, one block per node (homes
//! placed with the block), relaxed by Jacobi sweeps that read the neighbours' boundary rows,
//! with a barrier per sweep and a residual summed under a lock. Checks the grid and the
//! residual against the same sweeps run sequentially (bit for bit: the same operations in
//! the same order per cell).
//!
//! `vmmc-run -n 4 [--transport sim] -- target/debug/examples/ocean [N] [SWEEPS]`
//! (the space is sized for N unless `SVM_SPACE` is set). Nodes beyond the N rows have no
//! rows of their own and only take part in the barriers and the residual.

mod common;

use common::Arg;
use svm::{Placement, Svm};

const USAGE: &str = "usage: ocean [N] [SWEEPS]
  N       interior grid points per side, 1 to 16384 (default 126)
  SWEEPS  Jacobi sweeps, at least 1 (default 10)
under vmmc-run; SVM_PROTOCOL=hlrc|hlrc-au|aurc, SVM_SPACE (default: sized for N)";

fn init(n: usize, i: usize, j: usize) -> f64 {
    if i == 0 || j == 0 || i == n + 1 || j == n + 1 {
        ((i * 7 + j * 3) % 11) as f64
    } else {
        0.0
    }
}

/// One Jacobi sweep of rows `r0..r1` from `src` into `dst`; returns the squared change.
fn sweep(src: &[f64], dst: &mut [f64], n: usize, r0: usize, r1: usize) -> f64 {
    let w = n + 2;
    let mut res = 0.0;
    for i in r0..r1 {
        for j in 1..=n {
            let v = 0.25
                * (src[(i - 1) * w + j]
                    + src[(i + 1) * w + j]
                    + src[i * w + j - 1]
                    + src[i * w + j + 1]);
            res += (v - src[i * w + j]) * (v - src[i * w + j]);
            dst[i * w + j] = v;
        }
    }
    res
}

fn main() -> Result<(), vmmc::Error> {
    let a = common::parse_args(
        USAGE,
        &[
            Arg {
                name: "N",
                min: 1,
                default: 126,
            },
            Arg {
                name: "SWEEPS",
                min: 1,
                default: 10,
            },
        ],
    );
    let (n, sweeps) = (a[0], a[1]);
    if n > 16384 {
        eprintln!("N: {n} is more than 16384\n{USAGE}");
        std::process::exit(2);
    }
    let w = n + 2;
    vmmc_run::run(|ep| -> vmmc::Result<()> {
        // Two grids of doubles.
        let mut s = Svm::new(ep, common::config(2 * 8 * w * w)?)?;
        let (me, nodes) = (s.rank(), s.size());
        // Rows 1..=n in blocks; each block's pages at its node (a page holds whole rows only
        // when the row length divides it: the homes follow the rows, page by page).
        let rows_per = n.div_ceil(nodes);
        let block = |i: usize| (i.max(1) - 1) / rows_per;
        let page_rows = |p: usize, ps: usize| (p * ps / 8 / w).min(n + 1);
        let ps = s.page_size();
        let pages = (w * w * 8).div_ceil(ps);
        let homes: Vec<usize> = (0..pages)
            .map(|p| block(page_rows(p, ps)).min(nodes - 1))
            .collect();
        let mut grids = [
            s.alloc::<f64>(w * w, Placement::Explicit(homes.clone()))?,
            s.alloc::<f64>(w * w, Placement::Explicit(homes))?,
        ];
        let sum = s.alloc::<f64>(1, Placement::Node(0))?;
        if me == 0 {
            let v: Vec<f64> = (0..w * w).map(|k| init(n, k / w, k % w)).collect();
            s.view(grids[0]).write(0, &v)?;
            s.view(grids[1]).write(0, &v)?;
        }
        s.barrier()?;
        let (r0, r1) = (
            (1 + me * rows_per).min(n + 1),
            (1 + (me + 1) * rows_per).min(n + 1),
        );
        let mut residuals = Vec::new();
        for _ in 0..sweeps {
            // Read my rows and the two boundary rows, write my rows.
            let mut src = vec![0.0; w * w];
            s.view(grids[0])
                .read((r0 - 1) * w, &mut src[(r0 - 1) * w..(r1 + 1) * w])?;
            let mut dst = src.clone();
            let res = sweep(&src, &mut dst, n, r0, r1);
            s.view(grids[1]).write(r0 * w, &dst[r0 * w..r1 * w])?;
            if me == 0 {
                s.view(sum).set(0, 0.0)?;
            }
            s.barrier()?;
            s.acquire(0)?;
            {
                let v = s.view(sum);
                v.set(0, v.get(0)? + res)?;
            }
            s.release(0)?;
            s.barrier()?;
            residuals.push(s.view(sum).get(0)?);
            grids.swap(0, 1);
        }
        let stats = s.gather_stats()?;
        if me == 0 {
            let mut a: Vec<f64> = (0..w * w).map(|k| init(n, k / w, k % w)).collect();
            let mut b = a.clone();
            for (k, got) in residuals.iter().enumerate() {
                // The parallel sum adds per-block residuals in lock order: compare within
                // rounding, the grid bit for bit.
                let want = sweep(&a, &mut b, n, 1, n + 1);
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "sweep {k}: residual {got} != {want}"
                );
                std::mem::swap(&mut a, &mut b);
            }
            let g = s.view(grids[0]).to_vec()?;
            assert!(g == a, "ocean: the grid differs from the sequential run");
            println!(
                "ocean {n}x{n}, {sweeps} sweeps, {nodes} nodes, {}: residual {:.6e}, matches the sequential run; {}",
                s.protocol(),
                residuals.last().copied().unwrap_or(0.0),
                stats.expect("node 0 gathers").total
            );
        }
        s.finish()?;
        Ok(())
    })
}
