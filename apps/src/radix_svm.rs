//! Radix-SVM (seed 001 §3, §4.2): SPLASH-2's integer radix sort on shared virtual memory.
//!
//! The keys live in two shared arrays (source and destination, swapped after each pass);
//! node `p`'s contiguous block of each ([`block_lo`]) is homed at node `p`. Each pass (one
//! digit, least significant first):
//! 1. every node reads its block of the source and writes its histogram into its row of a
//!    shared histogram array (homed at it);
//! 2. the prefix over (digit, node): node `p` waits for node `p - 1`'s flag, reads its
//!    running offsets and histogram, writes its own running offsets and sets its flag
//!    (SPLASH-2's prefix tree of `PAUSE` events, here a chain; the last node also writes the
//!    digits' totals); a barrier;
//! 3. every node writes each of its keys into the shared destination at its rank, one store
//!    per key: the "highly scattered and irregular permutation" whose interleaved writes to
//!    the others' pages are the write-write false sharing of §4.2 (twins and diffs under
//!    HLRC and HLRC-AU, automatic-update stores under AURC); a barrier.
//!
//! The versions are the protocols ([`crate::svm_common`]): AU = AURC (or HLRC-AU with
//! `--protocol hlrc-au`), DU = HLRC. The problem is Radix-VMMC's ([`crate::radix_vmmc::problem`]:
//! Table 1's 2M keys, three passes of radix 1024).
//!
//! The check, after the timed phase: node 0 reads the whole output and requires it sorted,
//! a permutation of the input (a multiset [`Checksum`]) and equal to the kernel's sequential
//! sort ([`crate::kernels::radix::sort`]).

use crate::kernels::radix::{self, block_lo, first_unsorted, Checksum};
use crate::radix_vmmc::problem;
use crate::svm_common::{self, homes, time_and_verdict};
use crate::{AppError, AppResult, Params, Report};
use svm::{Placement, Shared};

const APP: &str = "radix-svm";

/// The plain sequential sort of the same problem (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    radix::sequential(&problem(params)?).map_err(|what| AppError::CheckFailed { app: APP, what })
}

/// Runs Radix-SVM on this node (see [`crate::RunFn`]).
pub fn run(ep: &vmmc::Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let rp = problem(params)?;
    let protocol = svm_common::protocol(params)?;
    let (me, n) = (ep.rank(), ep.size());
    let radix = rp.radix();
    let keys = rp.keys;
    let lo = |p: usize| block_lo(keys, n, p);
    let owner = |i: usize| (0..n).rfind(|&p| lo(p) <= i).unwrap_or(0);
    let (my_lo, my_hi) = (lo(me), lo(me + 1));

    // Start-up (not timed): the space, the arrays, the input.
    let page = svm_common::page_size()?;
    // A histogram row per node (and the totals' row), each on pages of its own.
    let row = radix.next_multiple_of(page / 4);
    let bytes = 2 * (keys * 4).next_multiple_of(page) + (2 * n + 1) * row * 4;
    let mut s = svm_common::open(ep, params, bytes)?;
    let key_homes = homes(keys, 4, s.page_size(), owner);
    let mut src: Shared<u32> = s.alloc(keys, key_homes.clone())?;
    let mut dst: Shared<u32> = s.alloc(keys, key_homes)?;
    let hist: Shared<u32> = s.alloc(n * row, Placement::Explicit(row_homes(n, row, &s)))?;
    let mut off_homes = row_homes(n, row, &s);
    off_homes.extend(std::iter::repeat_n(
        n - 1,
        (row * 4).div_ceil(s.page_size()),
    ));
    let offs: Shared<u32> = s.alloc((n + 1) * row, Placement::Explicit(off_homes))?;
    s.view(src).write(my_lo, &rp.keys_in(my_lo..my_hi))?;
    // My block of the destination is touched too (the first pass would otherwise pay the
    // operating system's first-touch faults, which the sequential run pays before its clock).
    s.view(dst).write(my_lo, &vec![0; my_hi - my_lo])?;
    let mut count = vec![0u32; radix];
    let mut start = vec![0u32; radix];
    let mut prev = vec![0u32; radix];
    let mut totals = vec![0u32; radix];
    let mut place = vec![0u32; radix];
    // The start barrier, and every node's counters so far (set-up is not counted).
    let before = s.gather_stats()?;

    let t0 = vmmc::pace::now_ns();
    for pass in 0..rp.passes() {
        // 1. My histogram (read in place, as the sequential sort reads its array).
        histogram(&s.view(src), my_lo..my_hi, &mut count, pass * rp.radix_bits)?;
        s.view(hist).write(me * row, &count)?;
        // 2. The prefix chain: my keys of digit d start after node p - 1's.
        if me > 0 {
            s.flag_wait(me as u32 - 1, pass + 1)?;
            let (h, o) = (s.view(hist), s.view(offs));
            o.read((me - 1) * row, &mut start)?;
            h.read((me - 1) * row, &mut prev)?;
            for d in 0..radix {
                start[d] += prev[d];
            }
        } else {
            start.iter_mut().for_each(|x| *x = 0);
        }
        {
            let o = s.view(offs);
            o.write(me * row, &start)?;
            if me == n - 1 {
                for d in 0..radix {
                    totals[d] = start[d] + count[d];
                }
                o.write(n * row, &totals)?;
            }
        }
        s.flag_set(me as u32, pass + 1)?;
        s.barrier()?;
        // 3. The permutation: each key to its rank in the destination.
        {
            let o = s.view(offs);
            o.read(n * row, &mut totals)?;
            o.read(me * row, &mut start)?;
        }
        let mut base = 0u32;
        for d in 0..radix {
            place[d] = base + start[d];
            base += totals[d];
        }
        {
            // A write cursor per digit: a check per page, then one plain store per key.
            let (from, to) = (s.view(src), s.view(dst));
            let mut at = to.cursors(place.iter().map(|&p| p as usize))?;
            permute(
                &from,
                my_lo..my_hi,
                &mut at,
                pass * rp.radix_bits,
                radix - 1,
            )?;
        }
        s.barrier()?;
        std::mem::swap(&mut src, &mut dst);
    }
    let t = vmmc::pace::now_ns() - t0;
    let stats = svm_common::since(before, s.gather_stats()?);

    // The check (not timed).
    if params.inject_fault && me == n - 1 && my_hi > my_lo {
        let v = s.view(src);
        let i = my_lo + (my_hi - my_lo) / 2;
        v.set(i, v.get(i)? ^ 1)?;
    }
    s.barrier()?;
    let mut verdict = None;
    if me == 0 {
        let out = s.view(src).to_vec()?;
        let mut want = rp.keys_in(0..keys);
        let input = Checksum::of(&want);
        radix::sort(&rp, &mut want);
        verdict = if let Some(i) = first_unsorted(&out) {
            Some(format!(
                "the output is not sorted at index {i} ({} after {})",
                out[i],
                out[i - 1]
            ))
        } else if Checksum::of(&out) != input {
            Some(format!(
                "the output is not a permutation of the input (input {input:?}, output {:?})",
                Checksum::of(&out)
            ))
        } else {
            (0..keys)
                .find(|&i| out[i] != want[i])
                .map(|i| format!("key {i} is {}, the sequential sort's {}", out[i], want[i]))
        };
    }
    let (time, bad) = time_and_verdict(&mut s, t, verdict.is_some())?;
    let page = s.page_size();
    s.finish()?;
    if bad {
        return Err(AppError::CheckFailed {
            app: APP,
            what: verdict
                .unwrap_or_else(|| "node 0 found a difference from the sequential sort".into()),
        });
    }
    let Some(stats) = stats else {
        return Ok(None);
    };
    let mut problem = serde_json::to_value(rp).expect("serializable");
    problem["passes"] = rp.passes().into();
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
            "{keys} keys sorted across {n} nodes, a permutation of the input (checksum), equal to the sequential sort"
        ),
    )))
}

/// Homes of `n` rows of `row` u32s (whole pages each): row `p` at node `p`.
fn row_homes(n: usize, row: usize, s: &svm::Svm) -> Vec<usize> {
    let per = (row * 4).div_ceil(s.page_size());
    (0..n).flat_map(|p| std::iter::repeat_n(p, per)).collect()
}

/// Counts the keys of `range` by their digit at bit `shift` (the pass's digit; `count` has
/// one entry per digit value, a power of two). A function of its own, as the sequential
/// kernel's: the stores into `count` then cannot make the loop reload what it reads.
fn histogram(
    keys: &svm::View<'_, u32>,
    range: std::ops::Range<usize>,
    count: &mut [u32],
    shift: u32,
) -> svm::Result<()> {
    count.iter_mut().for_each(|c| *c = 0);
    let mask = count.len() - 1;
    keys.for_each(range, |_, k| count[(k >> shift) as usize & mask] += 1)
}

/// Stores each key of `range` through the cursor of its digit at bit `shift`.
fn permute(
    keys: &svm::View<'_, u32>,
    range: std::ops::Range<usize>,
    at: &mut svm::Cursors<'_, u32>,
    shift: u32,
    mask: usize,
) -> svm::Result<()> {
    keys.try_for_each(range, |_, k| at.put((k >> shift) as usize & mask, k))
}
