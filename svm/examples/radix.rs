//! Radix-style: keys permuted into a shared destination array in a scattered, interleaved
//! pattern (write-write false sharing at page granularity), with the global histogram
//! built through a chain of flags (SPLASH-2 Radix's prefix tree of PAUSE events, reduced to
//! a chain). Checks that the output is sorted and a permutation of the input.
//!
//! `vmmc-run -n 4 [--transport sim] -- target/debug/examples/radix [KEYS]`
//! (`SVM_PROTOCOL=hlrc|hlrc-au|aurc`; the space is sized for KEYS unless `SVM_SPACE` is set).

mod common;

use common::Arg;
use svm::{Placement, Svm};

const USAGE: &str = "usage: radix [KEYS]
  KEYS  keys to sort, 1 to 2^31 (default 32768)
under vmmc-run; SVM_PROTOCOL=hlrc|hlrc-au|aurc, SVM_SPACE (default: sized for KEYS)";

const BITS: u32 = 8;
const RADIX: usize = 1 << BITS;
const PASSES: u32 = 2;

fn main() -> Result<(), vmmc::Error> {
    let keys = common::parse_args(
        USAGE,
        &[Arg {
            name: "KEYS",
            min: 1,
            default: 1 << 15,
        }],
    )[0];
    if keys > 1 << 31 {
        eprintln!("KEYS: {keys} is more than 2^31\n{USAGE}");
        std::process::exit(2);
    }
    vmmc_run::run(|ep| -> vmmc::Result<()> {
        // Two arrays of keys, two histograms of RADIX words per node.
        let need = 2 * 4 * keys + 2 * 4 * RADIX * ep.size();
        let mut s = Svm::new(ep, common::config(need)?)?;
        let (me, n) = (s.rank(), s.size());
        let per = keys.div_ceil(n);
        let (lo, hi) = ((me * per).min(keys), ((me + 1) * per).min(keys));
        let mut a = s.alloc::<u32>(keys, Placement::Blocked)?;
        let mut b = s.alloc::<u32>(keys, Placement::Blocked)?;
        // Global histogram: for each digit, each node's count, then the running offsets.
        let hist = s.alloc::<u32>(n * RADIX, Placement::RoundRobin)?;
        let offs = s.alloc::<u32>(n * RADIX, Placement::RoundRobin)?;
        let key =
            |i: usize| ((i as u64 * 2_654_435_761) >> 7) as u32 & ((1 << (BITS * PASSES)) - 1);
        {
            let v = s.view(a);
            for i in lo..hi {
                v.set(i, key(i))?;
            }
        }
        s.barrier()?;
        let t0 = vmmc::pace::now_ns();
        for pass in 0..PASSES {
            let digit = |k: u32| ((k >> (pass * BITS)) as usize) & (RADIX - 1);
            let mut mine = vec![0u32; hi - lo];
            s.view(a).read(lo, &mut mine)?;
            let mut count = vec![0u32; RADIX];
            for &k in &mine {
                count[digit(k)] += 1;
            }
            s.view(hist).write(me * RADIX, &count)?;
            s.barrier()?;
            // Prefix over (digit, node) in order: node k waits for node k-1's flag.
            let flag = pass * n as u32;
            if me > 0 {
                s.flag_wait(flag + me as u32 - 1, 1)?;
            }
            {
                let (h, o) = (s.view(hist), s.view(offs));
                let mut start = vec![0u32; RADIX];
                if me > 0 {
                    o.read((me - 1) * RADIX, &mut start)?;
                    let mut prev = vec![0u32; RADIX];
                    h.read((me - 1) * RADIX, &mut prev)?;
                    for d in 0..RADIX {
                        start[d] += prev[d];
                    }
                }
                o.write(me * RADIX, &start)?;
            }
            s.flag_set(flag + me as u32, 1)?;
            s.barrier()?;
            // Digit d of node k starts after all smaller digits and after nodes < k.
            let h = s.view(hist).to_vec()?;
            let o = s.view(offs).to_vec()?;
            let mut base = vec![0u32; RADIX];
            for d in 1..RADIX {
                base[d] = base[d - 1] + (0..n).map(|k| h[k * RADIX + d - 1]).sum::<u32>();
            }
            let mut next: Vec<u32> = (0..RADIX).map(|d| base[d] + o[me * RADIX + d]).collect();
            {
                let v = s.view(b);
                for &k in &mine {
                    let d = digit(k);
                    v.set(next[d] as usize, k)?;
                    next[d] += 1;
                }
            }
            s.barrier()?;
            std::mem::swap(&mut a, &mut b);
        }
        let dt = vmmc::pace::now_ns() - t0;
        let stats = s.gather_stats()?;
        if me == 0 {
            let out = s.view(a).to_vec()?;
            assert!(
                out.windows(2).all(|w| w[0] <= w[1]),
                "radix: output not sorted"
            );
            let want: u64 = (0..keys).map(|i| key(i) as u64).sum();
            assert_eq!(
                out.iter().map(|&k| k as u64).sum::<u64>(),
                want,
                "radix: not a permutation"
            );
            let st = stats.expect("node 0 gathers");
            println!(
                "radix {} keys, {} nodes, {}: {:.3} ms, sorted; {}",
                keys,
                n,
                s.protocol(),
                dt as f64 / 1e6,
                st.total
            );
            println!("{}", st.to_json());
        }
        s.finish()?;
        Ok(())
    })
}
