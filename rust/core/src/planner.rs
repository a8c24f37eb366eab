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

/// [`lower_bound`] of sizes sorted ascending.
///
/// Per rank of a data-parallel plan this ran as long as the splits themselves when written as
/// the formulas read (a division per distinct size and `k`, two searches per threshold), so:
/// L2 sweeps its thresholds with two pointers, and each `u_k` is constant on `k + 2` runs of
/// the sorted sizes, which binary searches find (O(k^2 log n) in all, not O(k n)).
fn lower_bound_sorted(sizes: &[u64], cap: u64) -> usize {
    let n = sizes.len();
    let cap128 = cap as u128;
    let total: u128 = sizes.iter().map(|&s| s as u128).sum();
    let mut bound = total.div_ceil(cap128).max(1);

    // L2 over the thresholds a in {0} and the distinct sizes with 2a <= cap, ascending: the
    // items above cap - a (J1) shrink and the items below a grow as a rises.
    let half = sizes.partition_point(|&s| s <= cap / 2);
    let half_sum: u128 = sizes[..half].iter().map(|&s| s as u128).sum();
    let (mut above, mut above_sum) = (n, total); // sizes[..above] are <= cap - a
    let (mut small, mut small_sum) = (0usize, 0u128); // sizes[..small] are < a
    let mut threshold = 0u64;
    loop {
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
    /// The items in the greedy's order, with their tokens and costs gathered in it.
    fn ordered(&self) -> Ordered {
        let order = self.order();
        let tokens = order.iter().map(|&i| self.tokens[i as usize]).collect();
        let costs = order.iter().map(|&i| self.costs[i as usize]).collect();
        Ordered { order, tokens, costs }
    }

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

    /// The cap-aware greedy split into `count` parts: the part of every item by its position in
    /// `ordered` (see [`Ordered::by_item`]), or `None` when an item fits in no part. `count` must
    /// be at least 1.
    ///
    /// Hot loop. Parts live in one of two heaps: by (cost so far, non-empty, number) while they
    /// may take the current item, by fill once they could not. Before each item the parts with
    /// room for it come back from the fill heap, so the cost heap's first fitting entry is the
    /// cheapest part with room (the oracle's rule) and a full part is not scanned again and
    /// again (scanning made a split near the lower bound cost O(n * count)). Both heaps hold
    /// packed integer keys in [`MinHeap`] (see there why not `BinaryHeap` of tuples).
    fn split(&self, ordered: &Ordered, count: usize) -> Option<Vec<u32>> {
        // Keys are (cost so far, non-empty, part) and (fill, part), packed into one integer:
        // u64 when the largest possible cost and the cap leave room for the part's bits.
        let part_bits = usize::BITS - count.saturating_sub(1).leading_zeros();
        let most = self.costs.iter().try_fold(0u64, |total, &c| total.checked_add(c));
        let fits = |value: Option<u64>, shift: u32| value.is_some_and(|v| v.leading_zeros() >= shift);
        if fits(most, part_bits + 1) && fits(Some(self.cap), part_bits) {
            self.split_with::<u64>(ordered, count, part_bits)
        } else {
            self.split_with::<u128>(ordered, count, 32)
        }
    }

    fn split_with<K: Key>(&self, ordered: &Ordered, count: usize, part_bits: u32) -> Option<Vec<u32>> {
        let mut part = Vec::with_capacity(ordered.order.len());
        let mut filled = vec![0u64; count];
        let mut load = vec![0u64; count];
        let open_shift = part_bits + 1; // the non-empty flag sits just above the part
        let nonempty = 1u64 << part_bits;
        // Every part empty: the keys 0..count are already in heap order.
        let mut open = MinHeap { keys: (0..count as u64).map(|p| K::pack(0, p, 0)).collect() };
        let mut full = MinHeap::<K> { keys: Vec::new() };
        // Tokens and costs in the greedy's order: read sequentially (gathered through the order
        // they missed the cache on most items, 70% of the loop's time outside the heap).
        for (&tokens, &cost) in ordered.tokens.iter().zip(&ordered.costs) {
            let room = self.cap - tokens;
            while let Some(key) = full.peek() {
                if key.high(part_bits) > room {
                    break;
                }
                full.pop();
                // A part that could not take an item holds tokens, so it is not empty.
                let p = key.part(part_bits);
                open.push(K::pack(load[p as usize], nonempty | p as u64, open_shift));
            }
            // The cheapest part with room takes the item; its key is replaced in place.
            loop {
                let key = open.peek()?;
                let p = key.part(part_bits) as usize;
                if filled[p] <= room {
                    filled[p] += tokens;
                    load[p] += cost;
                    part.push(p as u32);
                    open.replace_top(K::pack(load[p], nonempty | p as u64, open_shift));
                    break;
                }
                open.pop();
                full.push(K::pack(filled[p], p as u64, part_bits));
            }
        }
        Some(part)
    }

    /// The count the search settles on, and its split (empty for no items).
    pub fn own_plan(&self) -> (usize, Vec<u32>) {
        let ordered = self.ordered();
        let (count, part) = self.own_plan_in(&ordered);
        (count, ordered.by_item(&part))
    }

    /// [`Problem::own_plan`] with the items in the greedy's order already; the split by position
    /// in `ordered`.
    fn own_plan_in(&self, ordered: &Ordered) -> (usize, Vec<u32>) {
        let n = self.tokens.len();
        if n == 0 {
            return (0, Vec::new());
        }
        let m = self.multiple;
        // Costs that grow with tokens ("tokens", "workload") leave the order sorted by tokens
        // too; reading it backwards saves the bound a second sort.
        let mut sizes: Vec<u64> = ordered.tokens.iter().rev().copied().collect();
        if !sizes.is_sorted() {
            sizes.sort_unstable();
        }
        let start = round_up(lower_bound_sorted(&sizes, self.cap), m);
        drop(sizes);
        if let Some(part) = self.split(ordered, start) {
            return (start, part);
        }
        let ceiling = round_up(n, m);
        let (mut failed, mut step) = (start, m);
        let (mut count, mut part) = loop {
            let count = (failed + step).min(ceiling);
            if let Some(part) = self.split(ordered, count) {
                break (count, part);
            }
            failed = count;
            step *= 2;
        };
        while count - failed > m {
            let middle = failed + (count - failed) / m / 2 * m;
            match self.split(ordered, middle) {
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
        let ordered = self.ordered();
        self.plan_from(&ordered, self.own_plan_in(&ordered), minimum)
    }

    /// [`Problem::plan`] from the greedy's order and an own plan already computed (its split
    /// by position in `ordered`).
    fn plan_from(&self, ordered: &Ordered, own: (usize, Vec<u32>), minimum: usize) -> Vec<Vec<u32>> {
        let (own_count, own_part) = (own.0, ordered.by_item(&own.1));
        if minimum <= own_count {
            return Self::parts(&own_part, own_count);
        }
        let n = self.tokens.len();
        let filled = minimum.min(n);
        if filled > 0 {
            if let Some(part) = self.split(ordered, filled) {
                let part = ordered.by_item(&part);
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
            let sub_ordered = sub.ordered();
            let sub_part = sub.split(&sub_ordered, 2).expect("an uncapped split always fits");
            let sub_part = sub_ordered.by_item(&sub_part);
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

/// The items of a [`Problem`] in the greedy's order (cost descending, ties by position), with
/// their tokens and costs in that order.
struct Ordered {
    order: Vec<u32>,
    tokens: Vec<u64>,
    costs: Vec<u64>,
}

impl Ordered {
    /// A split by position in the order, as the part of every item.
    fn by_item(&self, part: &[u32]) -> Vec<u32> {
        let mut by_item = vec![0u32; part.len()];
        for (&item, &p) in self.order.iter().zip(part) {
            by_item[item as usize] = p;
        }
        by_item
    }
}

/// A heap key: `high << shift | low`, compared as one integer.
trait Key: Copy + Ord {
    fn pack(high: u64, low: u64, shift: u32) -> Self;
    fn high(self, shift: u32) -> u64;
    /// The part number in the lowest `bits` bits.
    fn part(self, bits: u32) -> u32;
}

impl Key for u64 {
    fn pack(high: u64, low: u64, shift: u32) -> Self {
        high << shift | low
    }
    fn high(self, shift: u32) -> u64 {
        self >> shift
    }
    fn part(self, bits: u32) -> u32 {
        (self & ((1u64 << bits) - 1)) as u32
    }
}

impl Key for u128 {
    fn pack(high: u64, low: u64, shift: u32) -> Self {
        (high as u128) << shift | low as u128
    }
    fn high(self, shift: u32) -> u64 {
        (self >> shift) as u64
    }
    fn part(self, bits: u32) -> u32 {
        (self & ((1u128 << bits) - 1)) as u32
    }
}

/// Children per node of [`MinHeap`].
const ARITY: usize = 8;

/// A d-ary min-heap of packed keys for the split's hot loop.
///
/// `BinaryHeap<Reverse<(u64, bool, u32)>>` spent as long as the rest of the split together in
/// `sift_down_range`: a tuple comparison branches field by field, and a binary heap of
/// thousands of parts is 13 levels of dependent loads. Here a key is one integer (one compare),
/// a node's 8 children share a cache line (u64 keys) and the smallest is found without
/// branching on it, so the top is replaced in about 4 levels: the hole goes down to a leaf
/// along the smallest child and the key sifts up from there, which is short because a part
/// that just took an item usually ranks near the bottom.
struct MinHeap<K> {
    keys: Vec<K>,
}

impl<K: Key> MinHeap<K> {
    fn peek(&self) -> Option<K> {
        self.keys.first().copied()
    }

    fn push(&mut self, key: K) {
        self.keys.push(key);
        self.sift_up(self.keys.len() - 1, key);
    }

    fn pop(&mut self) {
        if let Some(last) = self.keys.pop() {
            if !self.keys.is_empty() {
                self.replace_top(last);
            }
        }
    }

    /// Replace the smallest key (the heap must not be empty) by `key`.
    fn replace_top(&mut self, key: K) {
        let keys = &mut self.keys;
        let n = keys.len();
        let mut hole = 0;
        loop {
            let first = hole * ARITY + 1;
            let best = if first + ARITY <= n {
                // A full node: a fixed-size array, no bounds checks, selects without branches.
                let node: &[K; ARITY] = keys[first..first + ARITY].try_into().expect("ARITY keys");
                let (mut best, mut least) = (0, node[0]);
                for (c, &child) in node.iter().enumerate().skip(1) {
                    let less = child < least;
                    best = if less { c } else { best };
                    least = if less { child } else { least };
                }
                best
            } else if first < n {
                let node = &keys[first..n];
                (0..node.len()).min_by_key(|&c| node[c]).expect("a child")
            } else {
                break;
            };
            keys[hole] = keys[first + best];
            hole = first + best;
        }
        self.sift_up(hole, key);
    }

    fn sift_up(&mut self, mut hole: usize, key: K) {
        let keys = &mut self.keys;
        while hole > 0 {
            let parent = (hole - 1) / ARITY;
            if keys[parent] <= key {
                break;
            }
            keys[hole] = keys[parent];
            hole = parent;
        }
        keys[hole] = key;
    }
}

fn round_up(value: usize, multiple: usize) -> usize {
    value.div_ceil(multiple) * multiple
}

/// Order parts with the bubble rule: by key (cost, first sample index) descending, then
/// `mb[::2][::-1] + mb[1::2]`; empty parts last.
pub fn bubble_order(keyed: Vec<((u64, u64), Vec<u32>)>) -> Vec<Vec<u32>> {
    let total = keyed.len();
    let mut keyed: Vec<((u64, u64), Vec<u32>)> = keyed.into_iter().filter(|(_, p)| !p.is_empty()).collect();
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

/// One rank's items (groups): tokens, costs, first sample and sample count, in item order.
#[derive(Default)]
pub struct RankItems {
    pub tokens: Vec<u64>,
    pub costs: Vec<u64>,
    pub starts: Vec<u64>,
    pub sizes: Vec<u64>,
}

/// The items of each rank, in one pass over the items: `rank_of_item[i] < n_ranks`.
///
/// One sequential read of the global arrays: gathering each rank's items through its item list
/// missed the cache on nearly every item at n = 2^20 (the items of a rank are spread over it).
pub fn bucket_ranks(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    rank_of_item: &[usize],
    n_ranks: usize,
) -> Vec<RankItems> {
    let mut counts = vec![0usize; n_ranks];
    for &r in rank_of_item {
        counts[r] += 1;
    }
    let mut ranks: Vec<RankItems> = counts
        .iter()
        .map(|&c| RankItems {
            tokens: Vec::with_capacity(c),
            costs: Vec::with_capacity(c),
            starts: Vec::with_capacity(c),
            sizes: Vec::with_capacity(c),
        })
        .collect();
    for (i, &r) in rank_of_item.iter().enumerate() {
        let rank = &mut ranks[r];
        rank.tokens.push(tokens[i]);
        rank.costs.push(costs[i]);
        rank.starts.push(starts[i]);
        rank.sizes.push(sizes[i]);
    }
    ranks
}

/// The micro-batches of every rank with one common count, before ordering and expansion.
pub struct RankPlans {
    /// Micro-batches per rank.
    pub count: usize,
    /// The heaviest micro-batch's cost.
    pub heaviest_micro_batch: u64,
    /// The heaviest rank's cost.
    pub heaviest_rank: u64,
    /// Per rank, the item positions (into that rank's items, ascending) of every micro-batch,
    /// and the micro-batch's cost.
    parts: Vec<Vec<(Vec<u32>, u64)>>,
}

impl RankPlans {
    /// (heaviest rank, count, heaviest micro-batch): smaller is better, in that order.
    pub fn score(&self) -> (u64, usize, u64) {
        (self.heaviest_rank, self.count, self.heaviest_micro_batch)
    }
}

/// Plan every rank with one common count: the largest of the ranks' own counts and `minimum`.
/// Costs must sum to at most `u64::MAX`.
pub fn plan_rank_parts(ranks: &[RankItems], cap: u64, multiple: usize, minimum: usize) -> RankPlans {
    fn problem(rank: &RankItems, cap: u64, multiple: usize) -> Problem<'_> {
        Problem { tokens: &rank.tokens, costs: &rank.costs, cap, multiple }
    }
    let owns: Vec<(Ordered, (usize, Vec<u32>))> = ranks
        .iter()
        .map(|rank| {
            let ordered = problem(rank, cap, multiple).ordered();
            let own = problem(rank, cap, multiple).own_plan_in(&ordered);
            (ordered, own)
        })
        .collect();
    let count = owns.iter().map(|own| own.1 .0).fold(minimum, usize::max);
    let heaviest_rank = ranks.iter().map(|rank| rank.costs.iter().sum::<u64>()).max().unwrap_or(0);
    let parts: Vec<Vec<(Vec<u32>, u64)>> = ranks
        .iter()
        .zip(owns)
        .map(|(rank, (ordered, own))| {
            let parts = problem(rank, cap, multiple).plan_from(&ordered, own, count);
            parts
                .into_iter()
                .map(|part| {
                    let cost = part.iter().map(|&i| rank.costs[i as usize]).sum::<u64>();
                    (part, cost)
                })
                .collect()
        })
        .collect();
    let heaviest_micro_batch = parts.iter().flatten().map(|(_, cost)| *cost).max().unwrap_or(0);
    RankPlans { count, heaviest_micro_batch, heaviest_rank, parts }
}

/// Per rank, the sample indexes of every micro-batch of `plans` (ascending; bubble-ordered by
/// (cost, first sample) when `bubble`; empty ones last); `ranks` as given to
/// [`plan_rank_parts`], each rank's starts ascending.
pub fn expand_ranks(plans: RankPlans, ranks: &[RankItems], bubble: bool) -> Vec<Vec<Vec<u32>>> {
    plans
        .parts
        .into_iter()
        .zip(ranks)
        .map(|(parts, rank)| {
            // Positions ascend in a part and starts ascend in a rank, so the first position is
            // the part's first sample.
            let first = |part: &[u32]| part.first().map_or(0, |&i| rank.starts[i as usize]);
            let parts: Vec<Vec<u32>> = if bubble {
                let keyed = parts.into_iter().map(|(part, cost)| ((cost, first(&part)), part));
                bubble_order(keyed.collect())
            } else {
                parts.into_iter().map(|(part, _)| part).collect()
            };
            parts
                .iter()
                .map(|part| {
                    let mut samples = Vec::with_capacity(part.len());
                    for &i in part {
                        let (start, size) = (rank.starts[i as usize], rank.sizes[i as usize]);
                        samples.extend((start..start + size).map(|s| s as u32));
                    }
                    samples
                })
                .collect()
        })
        .collect()
}

/// The plan of every rank with one common count: items (groups starting at `starts`, ascending,
/// with `sizes` samples) go to rank `rank_of_item[i] < n_ranks`. Returns the count, the heaviest
/// micro-batch's cost, the heaviest rank's cost and, per rank, the sample indexes of every
/// micro-batch (ascending; bubble-ordered when `bubble`; empty ones last). Costs must sum to at
/// most `u64::MAX`.
#[allow(clippy::too_many_arguments)]
pub fn plan_ranks(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    rank_of_item: &[usize],
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
) -> (usize, u64, u64, Vec<Vec<Vec<u32>>>) {
    let ranks = bucket_ranks(tokens, costs, starts, sizes, rank_of_item, n_ranks);
    let plans = plan_rank_parts(&ranks, cap, multiple, minimum);
    let (count, heaviest_micro_batch, heaviest_rank) =
        (plans.count, plans.heaviest_micro_batch, plans.heaviest_rank);
    (count, heaviest_micro_batch, heaviest_rank, expand_ranks(plans, &ranks, bubble))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bounds as the formulas read: L2 per threshold with binary searches, `u_k` per item.
    fn lower_bound_plain(tokens: &[u64], cap: u64) -> usize {
        let mut sizes = tokens.to_vec();
        sizes.sort_unstable();
        let n = sizes.len();
        let cap = cap as u128;
        let sum = |range: &[u64]| range.iter().map(|&s| s as u128).sum::<u128>();
        let mut bound = sum(&sizes).div_ceil(cap).max(1);
        let half = sizes.partition_point(|&s| s as u128 * 2 <= cap);
        let mut thresholds: Vec<u128> = sizes[..half].iter().map(|&s| s as u128).collect();
        thresholds.insert(0, 0);
        for a in thresholds {
            let above = sizes.partition_point(|&s| s as u128 <= cap - a);
            let small = sizes.partition_point(|&s| (s as u128) < a);
            let room = (above - half) as u128 * cap - sum(&sizes[half..above]);
            let overflow = sum(&sizes[small..half]).saturating_sub(room);
            bound = bound.max((n - half) as u128 + overflow.div_ceil(cap));
        }
        for k in 2..=DFF_MAX as u128 {
            let total: u128 = sizes
                .iter()
                .map(|&s| {
                    let scaled = (k + 1) * s as u128;
                    if scaled % cap == 0 {
                        k * s as u128
                    } else {
                        scaled / cap * cap
                    }
                })
                .sum();
            bound = bound.max(total.div_ceil(k * cap));
        }
        bound as usize
    }

    proptest! {
        #[test]
        fn the_fast_bound_is_the_plain_formulas(
            (cap, tokens) in (1u64..200).prop_flat_map(|cap| {
                (Just(cap), prop::collection::vec(0..=cap, 0..40))
            }),
            scale in prop::sample::select(vec![1u64, 3, 1 << 40, (1 << 62) / 200]),
        ) {
            let cap = cap * scale;
            let tokens: Vec<u64> = tokens.iter().map(|&t| t * scale).collect();
            prop_assert_eq!(lower_bound(&tokens, cap), lower_bound_plain(&tokens, cap));
        }

        #[test]
        fn the_heap_pops_in_order(keys in prop::collection::vec(0u64..50, 1..200), top in 0u64..60) {
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let mut heap = MinHeap { keys: Vec::new() };
            for &key in &keys {
                heap.push(key);
            }
            prop_assert_eq!(heap.peek(), Some(sorted[0]));
            heap.replace_top(top);
            sorted[0] = top;
            sorted.sort_unstable();
            let mut popped = Vec::new();
            while let Some(key) = heap.peek() {
                popped.push(key);
                heap.pop();
            }
            prop_assert_eq!(popped, sorted);
        }
    }

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
