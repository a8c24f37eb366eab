//! Micro-batch planning under a hard token cap: the counting search, the fit test and the
//! balanced split behind `plan_micro_batches` and `plan_dp_micro_batches`.
//!
//! Items are groups (a sample, or samples kept together): each has a token count (what the cap
//! limits) and a cost (what balancing weighs). The pure-Python oracle of the same rules is
//! `seqbalance._plan_reference`; the tests compare the two on random inputs.
//!
//! * The balanced split into `count` parts is a cap-aware greedy: items by cost descending (ties
//!   by index ascending), each into the part of least cost, ties to an empty part, then to the
//!   lowest part number, among the parts it fits in by tokens. It fails (the count is too small)
//!   when an item fits in no part.
//! * The count: from a bin-packing lower bound rounded up to the multiple, galloping up (steps of
//!   1, 2, 4, ... multiples) to a count whose split fits, then bisecting back between the last
//!   failing and the first fitting count. `n` parts (rounded up) always fit: every item then has a
//!   part of its own.
//! * A larger count than a rank's own (agreed across ranks) splits the heaviest divisible part
//!   in two, again and again, when the split at that count does not fit: halving never adds
//!   tokens to a part.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Largest `k` of the Fekete–Schepers dual-feasible functions in [`lower_bound`].
const DFF_MAX: u64 = 16;

/// A count below which no split of `tokens` into parts of at most `cap` tokens exists: the
/// largest of `ceil(total / cap)`, the Martello–Toth bound L2 and the Fekete–Schepers bounds
/// `u_k` for `k = 2..=16` (see `seqbalance._plan_reference.bin_lower_bound`, the same formulas).
/// At least 1; every item must be at most `cap`.
pub fn lower_bound(tokens: &[u64], cap: u64) -> usize {
    let mut sizes = tokens.to_vec();
    sizes.sort_unstable();
    lower_bound_sorted(&sizes, cap)
}

fn lower_bound_sorted(sizes: &[u64], cap: u64) -> usize {
    let n = sizes.len();
    let cap128 = cap as u128;
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0u128);
    for &s in sizes {
        prefix.push(prefix[prefix.len() - 1] + s as u128);
    }
    let total = prefix[n];
    let mut bound = total.div_ceil(cap128).max(1);

    // L2 over the thresholds a in {0} and the distinct sizes with 2a <= cap.
    let half = sizes.partition_point(|&s| s <= cap / 2);
    let mut thresholds = vec![0u64];
    for &s in &sizes[..half] {
        if s != thresholds[thresholds.len() - 1] {
            thresholds.push(s);
        }
    }
    for &a in &thresholds {
        let above = sizes.partition_point(|&s| s <= cap - a);
        let small = sizes.partition_point(|&s| s < a);
        let big_count = (above - half) as i128;
        let room = big_count * cap as i128 - (prefix[above] - prefix[half]) as i128;
        let overflow = (prefix[half] - prefix[small]) as i128 - room;
        let extra = if overflow > 0 { (overflow as u128).div_ceil(cap128) } else { 0 };
        bound = bound.max((n - half) as u128 + extra);
    }

    // u_k, summed over runs of equal sizes (lengths repeat a lot; one division per run), in u64
    // when (k + 1) * s cannot overflow it (u128 division is a slow library call).
    let narrow = cap <= u64::MAX / (DFF_MAX + 1);
    for k in 2..=DFF_MAX {
        let mut sum: u128 = 0;
        let mut i = 0;
        while i < n {
            let s = sizes[i];
            let mut j = i + 1;
            while j < n && sizes[j] == s {
                j += 1;
            }
            let count = if narrow {
                let scaled = (k + 1) * s;
                (if scaled % cap == 0 { k * s } else { scaled / cap * cap }) as u128
            } else {
                let scaled = (k + 1) as u128 * s as u128;
                if scaled % cap128 == 0 {
                    k as u128 * s as u128
                } else {
                    (scaled / cap128) * cap128
                }
            };
            sum += count * (j - i) as u128;
            i = j;
        }
        bound = bound.max(sum.div_ceil(k as u128 * cap128));
    }
    usize::try_from(bound).unwrap_or(usize::MAX)
}

/// One micro-batch planning problem: items (groups) with tokens and costs, a cap, a multiple.
pub struct Problem<'a> {
    pub tokens: &'a [u64],
    pub costs: &'a [u64],
    pub cap: u64,
    pub multiple: usize,
}

impl Problem<'_> {
    /// Item positions by cost descending, ties by position ascending: the greedy's order.
    fn order(&self) -> Vec<u32> {
        // Sorting packed integer keys is several times faster than a tuple comparator.
        let n = self.tokens.len() as u64;
        let most = self.costs.iter().copied().max().unwrap_or(0);
        if most < 1 << 32 && n <= 1 << 32 {
            let mut keys: Vec<u64> =
                (0..n).map(|i| (((1u64 << 32) - 1 - self.costs[i as usize]) << 32) | i).collect();
            keys.sort_unstable();
            keys.into_iter().map(|key| key as u32).collect()
        } else {
            let mut keys: Vec<u128> =
                (0..n).map(|i| (((u64::MAX - self.costs[i as usize]) as u128) << 64) | i as u128).collect();
            keys.sort_unstable();
            keys.into_iter().map(|key| key as u32).collect()
        }
    }

    /// The cap-aware greedy split into `count` parts: the part of every item, or `None` when an
    /// item fits in no part. `count` must be at least 1.
    ///
    /// Hot loop. Parts live in one of two heaps: by (cost so far, non-empty, number) while they
    /// may take the current item, by fill once they could not. Before each item the parts with
    /// room for it come back from the fill heap, so the cost heap's first fitting entry is the
    /// cheapest part with room (the oracle's rule) and a full part is not scanned again and
    /// again (scanning made a split near the lower bound cost O(n * count)).
    fn split(&self, order: &[u32], count: usize) -> Option<Vec<u32>> {
        let mut part = vec![0u32; self.tokens.len()];
        let mut filled = vec![0u64; count];
        let mut load = vec![0u64; count];
        let mut open: BinaryHeap<Reverse<(u64, bool, u32)>> =
            (0..count as u32).map(|p| Reverse((0, false, p))).collect();
        let mut full: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
        for &item in order {
            let (tokens, cost) = (self.tokens[item as usize], self.costs[item as usize]);
            let room = self.cap - tokens;
            while let Some(&Reverse((fill, p))) = full.peek() {
                if fill > room {
                    break;
                }
                full.pop();
                // A part that could not take an item holds tokens, so it is not empty.
                open.push(Reverse((load[p as usize], true, p)));
            }
            // The cheapest part with room takes the item; its entry is updated in place (one
            // sift-down instead of a pop and a push).
            loop {
                let mut top = open.peek_mut()?;
                let Reverse((cost_so_far, _, p)) = *top;
                if filled[p as usize] <= room {
                    filled[p as usize] += tokens;
                    load[p as usize] = cost_so_far + cost;
                    part[item as usize] = p;
                    *top = Reverse((cost_so_far + cost, true, p));
                    break;
                }
                std::collections::binary_heap::PeekMut::pop(top);
                full.push(Reverse((filled[p as usize], p)));
            }
        }
        Some(part)
    }

    /// The count the search settles on, and its split (empty for no items).
    pub fn own_plan(&self) -> (usize, Vec<u32>) {
        let n = self.tokens.len();
        if n == 0 {
            return (0, Vec::new());
        }
        let m = self.multiple;
        let order = self.order();
        let start = round_up(lower_bound(self.tokens, self.cap), m);
        if let Some(part) = self.split(&order, start) {
            return (start, part);
        }
        let ceiling = round_up(n, m);
        let (mut failed, mut step) = (start, m);
        let (mut count, mut part) = loop {
            let count = (failed + step).min(ceiling);
            if let Some(part) = self.split(&order, count) {
                break (count, part);
            }
            failed = count;
            step *= 2;
        };
        while count - failed > m {
            let middle = failed + (count - failed) / m / 2 * m;
            match self.split(&order, middle) {
                Some(middle_part) => (count, part) = (middle, middle_part),
                None => failed = middle,
            }
        }
        (count, part)
    }

    /// Item positions per part, ascending, for a split into `count` parts.
    fn parts(part: &[u32], count: usize) -> Vec<Vec<u32>> {
        let mut parts = vec![Vec::new(); count];
        for (item, &p) in part.iter().enumerate() {
            parts[p as usize].push(item as u32);
        }
        parts
    }

    /// Item positions per micro-batch: the own plan, or `minimum` micro-batches when that is
    /// more (the split at `minimum` when it fits, else the own plan's heaviest divisible part
    /// halved until there are enough). Empty parts only when `minimum` exceeds the items.
    pub fn plan(&self, minimum: usize) -> Vec<Vec<u32>> {
        self.plan_from(self.own_plan(), minimum)
    }

    /// [`Problem::plan`] from an own plan already computed.
    pub fn plan_from(&self, own: (usize, Vec<u32>), minimum: usize) -> Vec<Vec<u32>> {
        let (own_count, own_part) = own;
        if minimum <= own_count {
            return Self::parts(&own_part, own_count);
        }
        let n = self.tokens.len();
        let filled = minimum.min(n);
        if filled > 0 {
            if let Some(part) = self.split(&self.order(), filled) {
                let mut parts = Self::parts(&part, filled);
                parts.resize(minimum, Vec::new());
                return parts;
            }
        }
        let mut parts: Vec<Vec<u32>> =
            Self::parts(&own_part, own_count).into_iter().filter(|p| !p.is_empty()).collect();
        while parts.len() < filled {
            let heaviest = (0..parts.len())
                .filter(|&p| parts[p].len() >= 2)
                .max_by_key(|&p| (self.cost_of(&parts[p]), Reverse(p)))
                .expect("fewer parts than items leaves a part with two items");
            let members = std::mem::take(&mut parts[heaviest]);
            let sub_tokens: Vec<u64> = members.iter().map(|&i| self.tokens[i as usize]).collect();
            let sub_costs: Vec<u64> = members.iter().map(|&i| self.costs[i as usize]).collect();
            // Uncapped: the halves of a fitting part fit.
            let sub = Problem { tokens: &sub_tokens, costs: &sub_costs, cap: u64::MAX, multiple: 1 };
            let sub_part = sub.split(&sub.order(), 2).expect("an uncapped split always fits");
            let [first, second]: [Vec<u32>; 2] = Self::parts(&sub_part, 2)
                .into_iter()
                .map(|half| half.into_iter().map(|i| members[i as usize]).collect())
                .collect::<Vec<_>>()
                .try_into()
                .expect("two halves");
            parts[heaviest] = first;
            parts.insert(heaviest + 1, second);
        }
        parts.resize(minimum, Vec::new());
        parts
    }

    fn cost_of(&self, items: &[u32]) -> u64 {
        items.iter().map(|&i| self.costs[i as usize]).sum()
    }
}

fn round_up(value: usize, multiple: usize) -> usize {
    value.div_ceil(multiple) * multiple
}

/// Order parts with the bubble rule: by `key` (cost, first sample index) descending, then
/// `mb[::2][::-1] + mb[1::2]`; empty parts last.
pub fn bubble_order(parts: Vec<Vec<u32>>, key: impl Fn(&[u32]) -> (u64, u64)) -> Vec<Vec<u32>> {
    let total = parts.len();
    let mut keyed: Vec<((u64, u64), Vec<u32>)> =
        parts.into_iter().filter(|p| !p.is_empty()).map(|p| (key(&p), p)).collect();
    keyed.sort_unstable_by_key(|entry| Reverse(entry.0));
    let mut evens: Vec<Vec<u32>> = Vec::new();
    let mut odds: Vec<Vec<u32>> = Vec::new();
    for (position, (_, part)) in keyed.into_iter().enumerate() {
        if position % 2 == 0 {
            evens.push(part);
        } else {
            odds.push(part);
        }
    }
    let mut ordered: Vec<Vec<u32>> = Vec::with_capacity(total);
    ordered.extend(evens.into_iter().rev());
    ordered.extend(odds);
    ordered.resize(total, Vec::new());
    ordered
}

/// The plan of every rank with one common count: `ranks` lists item positions (ascending) per
/// rank. Returns the count, the heaviest micro-batch's cost, the heaviest rank's cost and, per
/// rank, the sample indexes of every micro-batch (ascending; bubble-ordered when `bubble`; empty
/// ones last). Costs must sum to at most `u64::MAX`.
#[allow(clippy::too_many_arguments)]
pub fn plan_ranks(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    ranks: &[Vec<u32>],
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
) -> (usize, u64, u64, Vec<Vec<Vec<u32>>>) {
    let pick =
        |rank: &[u32], values: &[u64]| -> Vec<u64> { rank.iter().map(|&g| values[g as usize]).collect() };
    let subs: Vec<[Vec<u64>; 4]> = ranks
        .iter()
        .map(|rank| [pick(rank, tokens), pick(rank, costs), pick(rank, starts), pick(rank, sizes)])
        .collect();
    fn problem(sub: &[Vec<u64>; 4], cap: u64, multiple: usize) -> Problem<'_> {
        Problem { tokens: &sub[0], costs: &sub[1], cap, multiple }
    }
    let owns: Vec<(usize, Vec<u32>)> =
        subs.iter().map(|sub| problem(sub, cap, multiple).own_plan()).collect();
    let count = owns.iter().map(|own| own.0).fold(minimum, usize::max);
    let mut heaviest = 0u64;
    let heaviest_rank = subs.iter().map(|sub| sub[1].iter().sum::<u64>()).max().unwrap_or(0);
    let plan = subs
        .iter()
        .zip(owns)
        .map(|(sub, own)| {
            let parts = problem(sub, cap, multiple).plan_from(own, count);
            let cost_of = |part: &[u32]| part.iter().map(|&i| sub[1][i as usize]).sum::<u64>();
            for part in &parts {
                heaviest = heaviest.max(cost_of(part));
            }
            let parts = if bubble {
                bubble_order(parts, |part| {
                    (cost_of(part), part.iter().map(|&i| sub[2][i as usize]).min().unwrap_or(0))
                })
            } else {
                parts
            };
            expand(&parts, &sub[2], &sub[3])
        })
        .collect();
    (count, heaviest, heaviest_rank, plan)
}

/// Sample indexes per micro-batch for groups starting at `starts` with `sizes` samples, from
/// item positions per part (into `starts`), each list ascending.
pub fn expand(parts: &[Vec<u32>], starts: &[u64], sizes: &[u64]) -> Vec<Vec<u32>> {
    parts
        .iter()
        .map(|part| {
            let mut groups: Vec<u32> = part.clone();
            groups.sort_unstable_by_key(|&g| starts[g as usize]);
            let mut samples = Vec::with_capacity(groups.iter().map(|&g| sizes[g as usize] as usize).sum());
            for g in groups {
                let start = starts[g as usize];
                samples.extend((start..start + sizes[g as usize]).map(|i| i as u32));
            }
            samples
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_counts_items_just_over_half() {
        assert_eq!(lower_bound(&[501; 10], 1000), 10);
        assert_eq!(lower_bound(&[334; 6], 1000), 3);
        assert_eq!(lower_bound(&[1000, 1, 1], 1000), 2);
    }

    #[test]
    fn plan_keeps_the_cap_and_every_item() {
        let tokens = [6u64, 15, 17, 16, 18, 20];
        let problem = Problem { tokens: &tokens, costs: &tokens, cap: 27, multiple: 1 };
        let parts = problem.plan(0);
        let mut seen: Vec<u32> = parts.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
        assert!(parts.iter().all(|p| p.iter().map(|&i| tokens[i as usize]).sum::<u64>() <= 27));
        let more = problem.plan(9);
        assert_eq!(more.len(), 9);
        assert_eq!(more.iter().filter(|p| !p.is_empty()).count(), 6);
    }
}
