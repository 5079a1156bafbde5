//! The integer radix sort of SPLASH-2's Radix kernel, as a sequential kernel that the
//! library versions share: the keys, their digits, the histograms, the global ranks of a
//! counting pass, the checksum that proves a permutation, and a plain sequential sort.
//!
//! A pass sorts stably on one digit of `radix_bits` bits (least significant digit first), so
//! after `passes()` passes keys of `key_bits` bits are sorted. Table 1's "2M keys, 3 iters" is
//! 2^21 keys of 30 bits with a radix of 2^10 (SPLASH-2's default radix of 1024): three passes.

use serde::Serialize;

/// The problem.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct RadixParams {
    /// Number of keys.
    pub keys: usize,
    /// Bits per digit (the radix is `2^radix_bits`).
    pub radix_bits: u32,
    /// Bits per key (keys are in `0 .. 2^key_bits`).
    pub key_bits: u32,
    /// Seed of the key generator.
    pub seed: u64,
}

impl RadixParams {
    /// Table 1's problem: 2M keys, three passes.
    pub const PAPER: RadixParams = RadixParams {
        keys: 1 << 21,
        radix_bits: 10,
        key_bits: 30,
        seed: 1,
    };
    /// A small problem for tests: 4096 keys, three passes of radix 2^6.
    pub const TEST: RadixParams = RadixParams {
        keys: 4096,
        radix_bits: 6,
        key_bits: 18,
        seed: 1,
    };

    /// The radix.
    pub fn radix(&self) -> usize {
        1 << self.radix_bits
    }

    /// Passes needed to sort keys of `key_bits` bits.
    pub fn passes(&self) -> u32 {
        self.key_bits.div_ceil(self.radix_bits)
    }

    /// Refuses problems the kernel cannot run.
    pub fn check(&self) -> Result<(), String> {
        if self.keys == 0 || self.keys > u32::MAX as usize {
            return Err(format!("--keys {}: 1 to 2^32-1", self.keys));
        }
        if !(1..=16).contains(&self.radix_bits) {
            return Err(format!("--radix-bits {}: 1 to 16", self.radix_bits));
        }
        if !(1..=32).contains(&self.key_bits) {
            return Err(format!("--key-bits {}: 1 to 32", self.key_bits));
        }
        Ok(())
    }

    /// Key number `i` of the input: a hash of the seed and the index, so that every node
    /// generates its own block without the others, and the input does not depend on the
    /// number of nodes.
    #[inline]
    pub fn key(&self, i: usize) -> u32 {
        (splitmix64(self.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            >> (64 - self.key_bits)) as u32
    }

    /// Keys `range` of the input.
    pub fn keys_in(&self, range: std::ops::Range<usize>) -> Vec<u32> {
        range.map(|i| self.key(i)).collect()
    }

    /// The digit of `key` in `pass`.
    #[inline]
    pub fn digit(&self, key: u32, pass: u32) -> usize {
        ((key >> (pass * self.radix_bits)) as usize) & (self.radix() - 1)
    }

    /// Counts the digits of `keys` in `pass` into `hist` (of `radix()` entries).
    pub fn histogram(&self, keys: &[u32], pass: u32, hist: &mut [u32]) {
        hist.iter_mut().for_each(|h| *h = 0);
        for &k in keys {
            hist[self.digit(k, pass)] += 1;
        }
    }
}

/// SplitMix64's finaliser (Steele, Lea and Flood), a good hash of a 64-bit counter.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// First index of block `p` of `n` items over `nodes` (block `p` is `lo(p) .. lo(p + 1)`).
#[inline]
pub fn block_lo(n: usize, nodes: usize, p: usize) -> usize {
    (n as u128 * p as u128 / nodes as u128) as usize
}

/// A multiset fingerprint: equal for two arrays that are permutations of each other (and,
/// barring a 2^-64 accident, different otherwise). Order-independent, so blocks add up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Checksum {
    /// Number of keys.
    pub count: u64,
    /// Sum of the keys.
    pub sum: u64,
    /// Sum of a hash of each key.
    pub hashed: u64,
}

impl Checksum {
    /// The fingerprint of `keys`.
    pub fn of(keys: &[u32]) -> Checksum {
        let mut c = Checksum::default();
        for &k in keys {
            c.count += 1;
            c.sum = c.sum.wrapping_add(k as u64);
            c.hashed = c.hashed.wrapping_add(splitmix64(k as u64 ^ 0x5EED));
        }
        c
    }

    /// Both blocks' fingerprint.
    pub fn plus(self, o: Checksum) -> Checksum {
        Checksum {
            count: self.count + o.count,
            sum: self.sum.wrapping_add(o.sum),
            hashed: self.hashed.wrapping_add(o.hashed),
        }
    }

    /// As three words for a reduction.
    pub fn to_words(self) -> [u64; 3] {
        [self.count, self.sum, self.hashed]
    }

    /// From [`Checksum::to_words`].
    pub fn from_words(w: [u64; 3]) -> Checksum {
        Checksum {
            count: w[0],
            sum: w[1],
            hashed: w[2],
        }
    }
}

/// The first index where `keys` descends, if any.
pub fn first_unsorted(keys: &[u32]) -> Option<usize> {
    keys.windows(2).position(|w| w[0] > w[1]).map(|i| i + 1)
}

/// The plain sequential radix sort (no communication library): the same passes, histograms
/// and stable permutation as the parallel versions on one node.
pub fn sort(p: &RadixParams, keys: &mut Vec<u32>) {
    let mut out = vec![0u32; keys.len()];
    sort_with(p, keys, &mut out);
}

/// [`sort`] with the second array given (its contents are overwritten).
pub fn sort_with(p: &RadixParams, keys: &mut Vec<u32>, out: &mut Vec<u32>) {
    let mut place = vec![0u32; p.radix()];
    for pass in 0..p.passes() {
        p.histogram(keys, pass, &mut place);
        let mut at = 0u32;
        for h in place.iter_mut() {
            let c = *h;
            *h = at;
            at += c;
        }
        let placed = scatter(p, pass, keys, &mut place, out, 0);
        debug_assert_eq!(placed, keys.len());
        std::mem::swap(keys, out);
    }
}

/// The permutation of one pass: puts each key of `src` at `out[place[digit] - lo]` and
/// advances `place[digit]`, up to the first key whose place falls outside `out`; returns how
/// many keys it placed. Alone, every key's place is in `out`; a node of a parallel sort
/// holds the block of positions starting at `lo`, and sends the keys that fall elsewhere.
#[inline(never)]
pub fn scatter(
    p: &RadixParams,
    pass: u32,
    src: &[u32],
    place: &mut [u32],
    out: &mut [u32],
    lo: usize,
) -> usize {
    for (i, &k) in src.iter().enumerate() {
        let d = p.digit(k, pass);
        let g = place[d];
        match out.get_mut((g as usize).wrapping_sub(lo)) {
            Some(slot) => *slot = k,
            None => return i,
        }
        place[d] = g + 1;
    }
    src.len()
}

/// The sequential run that `shrimp overhead` compares with the 1-node library run: generates
/// the input, sorts it (the timed phase, in ns of [`vmmc::pace::now_ns`]) and checks it.
pub fn sequential(p: &RadixParams) -> Result<u64, String> {
    let mut keys = p.keys_in(0..p.keys);
    let want = Checksum::of(&keys);
    // Both arrays are touched before the clock starts, as in the library versions.
    let mut out = vec![1u32; keys.len()];
    let t0 = vmmc::pace::now_ns();
    sort_with(p, &mut keys, &mut out);
    let t = vmmc::pace::now_ns() - t0;
    if let Some(i) = first_unsorted(&keys) {
        return Err(format!("sequential radix: not sorted at {i}"));
    }
    if Checksum::of(&keys) != want {
        return Err("sequential radix: not a permutation of the input".into());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_passes_at_both_sizes_and_the_sort_sorts() {
        assert_eq!(RadixParams::PAPER.passes(), 3);
        assert_eq!(RadixParams::TEST.passes(), 3);
        let p = RadixParams::TEST;
        let mut k = p.keys_in(0..p.keys);
        let c = Checksum::of(&k);
        let mut want = k.clone();
        want.sort_unstable();
        sort(&p, &mut k);
        assert_eq!(k, want);
        assert_eq!(Checksum::of(&k), c);
        assert!(k.iter().all(|&x| x < 1 << p.key_bits));
    }

    #[test]
    fn blocks_cover_and_checksums_add() {
        for (n, p) in [(10, 3), (4096, 16), (7, 7), (1, 1)] {
            assert_eq!(block_lo(n, p, 0), 0);
            assert_eq!(block_lo(n, p, p), n);
        }
        let p = RadixParams::TEST;
        let k = p.keys_in(0..100);
        assert_eq!(
            Checksum::of(&k),
            Checksum::of(&k[..40]).plus(Checksum::of(&k[40..]))
        );
        let mut bad = k.clone();
        bad[3] ^= 1;
        assert_ne!(Checksum::of(&bad), Checksum::of(&k));
    }
}
