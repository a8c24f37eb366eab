//! Lower bounds on the count: total over cap, Martello–Toth L2, Fekete–Schepers `u_k`.

use super::Result;
use crate::alloc;
use crate::interrupt::Interrupt;

/// Largest `k` of the Fekete–Schepers dual-feasible functions in [`lower_bound`].
pub(super) const DFF_MAX: u64 = 16;

/// A count below which no split of `tokens` into parts of at most `cap` tokens exists: the
/// largest of `ceil(total / cap)`, the Martello–Toth bound L2 and the Fekete–Schepers bounds
/// `u_k` for `k = 2..=16` (see `bin_lower_bound` in `tests/planning/plan_oracle.py`, the same formulas).
/// At least 1; every item must be at most `cap`.
pub fn lower_bound(tokens: &[u64], cap: u64) -> Result<usize> {
    let mut sizes = alloc::collect(tokens.iter().copied(), "the sorted sizes")?;
    sizes.sort_unstable();
    lower_bound_sorted(&sizes, cap, &Interrupt::NEVER)
}

/// [`lower_bound`] of sizes sorted ascending.
///
/// Per rank of a data-parallel plan this ran as long as the splits themselves when written as
/// the formulas read (a division per distinct size and `k`, two searches per threshold), so:
/// L2 sweeps its thresholds with two pointers, and each `u_k` is constant on `k + 2` runs of
/// the sorted sizes, which binary searches find (O(k^2 log n) in all, not O(k n)).
pub(super) fn lower_bound_sorted(sizes: &[u64], cap: u64, interrupt: &Interrupt) -> Result<usize> {
    let n = sizes.len();
    let cap128 = cap as u128;
    let sum = |values: &[u64]| -> Result<u128> {
        let mut total = 0u128;
        for chunk in values.chunks(crate::interrupt::CHECK_EVERY) {
            interrupt.check()?;
            total += chunk.iter().map(|&s| s as u128).sum::<u128>();
        }
        Ok(total)
    };
    let total = sum(sizes)?;
    let mut bound = total.div_ceil(cap128).max(1);

    // L2 over the thresholds a in {0} and the distinct sizes with 2a <= cap, ascending: the
    // items above cap - a (J1) shrink and the items below a grow as a rises.
    let half = sizes.partition_point(|&s| s <= cap / 2);
    let half_sum = sum(&sizes[..half])?;
    let (mut above, mut above_sum) = (n, total); // sizes[..above] are <= cap - a
    let (mut small, mut small_sum) = (0usize, 0u128); // sizes[..small] are < a
    let mut threshold = 0u64;
    // A pass over tens of millions of sizes takes a second: checks on the way.
    let mut step = 0usize;
    loop {
        step += 1;
        interrupt.every(step)?;
        while above > half && sizes[above - 1] > cap - threshold {
            above -= 1;
            above_sum -= sizes[above] as u128;
        }
        while small < half && sizes[small] < threshold {
            small_sum += sizes[small] as u128;
            small += 1;
        }
        // J2 = sizes[half..above] each open a part with cap - s room; J3 = sizes[small..half]
        // fill that room first, the rest opens parts of its own.
        let big_count = (above - half) as u128;
        let room = big_count * cap128 - (above_sum - half_sum);
        let overflow = (half_sum - small_sum).saturating_sub(room);
        bound = bound.max((n - half) as u128 + overflow.div_ceil(cap128));
        // The next distinct size in sizes[small..half] above the threshold.
        let next = sizes[small..half].iter().find(|&&s| s > threshold);
        match next {
            Some(&s) => threshold = s,
            None => break,
        }
    }

    // u_k(s) = k s when (k + 1) s is a multiple of cap, else floor((k + 1) s / cap) cap: on the
    // sizes with floor((k + 1) s / cap) = j, that is [ceil(j cap / (k + 1)), ceil((j + 1) cap /
    // (k + 1))), it is j cap, except at s = j cap / (k + 1) exactly, where it is k s.
    let below = |value: u128| sizes.partition_point(|&s| (s as u128) < value);
    for k in 2..=DFF_MAX as u128 {
        let mut sum: u128 = 0;
        let mut low = below(cap128.div_ceil(k + 1));
        for j in 1..=k + 1 {
            let start = j * cap128;
            let high = below(((j + 1) * cap128).div_ceil(k + 1));
            let mut count = (high - low) as u128;
            if start % (k + 1) == 0 {
                let s = start / (k + 1);
                let exact = (below(s + 1) - below(s)) as u128;
                count -= exact;
                sum += exact * k * s;
            }
            sum += count * start;
            low = high;
        }
        bound = bound.max(sum.div_ceil(k * cap128));
    }
    Ok(usize::try_from(bound).unwrap_or(usize::MAX))
}
