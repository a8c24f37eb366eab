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
use std::collections::HashMap;

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;
use crate::sort;

type Result<T> = std::result::Result<T, CoreError>;

/// Largest `k` of the Fekete–Schepers dual-feasible functions in [`lower_bound`].
const DFF_MAX: u64 = 16;

/// A count below which no split of `tokens` into parts of at most `cap` tokens exists: the
/// largest of `ceil(total / cap)`, the Martello–Toth bound L2 and the Fekete–Schepers bounds
/// `u_k` for `k = 2..=16` (see `seqbalance._plan_reference.bin_lower_bound`, the same formulas).
/// At least 1; every item must be at most `cap`.
pub fn lower_bound(tokens: &[u64], cap: u64) -> Result<usize> {
    let mut sizes = alloc::collect(tokens.iter().copied(), "the sorted sizes")?;
    sizes.sort_unstable();
    Ok(lower_bound_sorted(&sizes, cap))
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
    /// The items in the greedy's order (cost descending, ties by position ascending), with
    /// their tokens and costs gathered in it.
    fn ordered(&self, interrupt: &Interrupt) -> Result<Ordered> {
        // The core's radix sort (stable, interruptible) of the costs turned upside down.
        let most = self.costs.iter().copied().max().unwrap_or(0);
        let flipped = alloc::collect(self.costs.iter().map(|&c| most - c), "the planner's sort keys")?;
        let sorted = sort::sort_items(&flipped, interrupt)?;
        drop(flipped);
        let order = sorted.index;
        // A gather through the order misses the cache on most items: checks in between.
        let mut tokens = alloc::with_capacity(order.len(), "the planner's tokens")?;
        for (step, &i) in order.iter().enumerate() {
            interrupt.every(step)?;
            tokens.push(self.tokens[i as usize]);
        }
        let mut costs = sorted.values;
        for cost in &mut costs {
            *cost = most - *cost;
        }
        Ok(Ordered { order, tokens, costs })
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
    fn split(&self, ordered: &Ordered, count: usize, interrupt: &Interrupt) -> Result<Option<Vec<u32>>> {
        // Keys are (cost so far, non-empty, part) and (fill, part), packed into one integer:
        // u64 when the largest possible cost and the cap leave room for the part's bits.
        let part_bits = usize::BITS - count.saturating_sub(1).leading_zeros();
        let most = self.costs.iter().try_fold(0u64, |total, &c| total.checked_add(c));
        let fits = |value: Option<u64>, shift: u32| value.is_some_and(|v| v.leading_zeros() >= shift);
        if fits(most, part_bits + 1) && fits(Some(self.cap), part_bits) {
            self.split_with::<u64>(ordered, count, part_bits, interrupt)
        } else {
            self.split_with::<u128>(ordered, count, 32, interrupt)
        }
    }

    fn split_with<K: Key>(
        &self,
        ordered: &Ordered,
        count: usize,
        part_bits: u32,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        let mut part = alloc::with_capacity(ordered.order.len(), "the split")?;
        let mut filled: Vec<u64> = alloc::zeroed(count, "the micro-batch fills")?;
        let mut load: Vec<u64> = alloc::zeroed(count, "the micro-batch costs")?;
        let open_shift = part_bits + 1; // the non-empty flag sits just above the part
        let nonempty = 1u64 << part_bits;
        // The first `count` items go to the empty parts 0, 1, 2, ... in turn (an empty part is
        // the cheapest, the lowest number first, and has room for any item), without the heap.
        let first = count.min(ordered.tokens.len());
        for p in 0..first {
            filled[p] = ordered.tokens[p];
            load[p] = ordered.costs[p];
            part.push(p as u32);
        }
        // The heap in sorted order, which is heap order: the empty parts (keys below any other),
        // then the others by cost ascending, which is the reverse of their numbers except that
        // equal costs keep their numbers ascending. A part is in one heap at a time, so neither
        // ever holds more than `count` keys (no reallocation in the loop).
        let mut open_keys = alloc::with_capacity(count, "the micro-batch heap")?;
        open_keys.extend((first..count).map(|p| K::pack(0, p as u64, 0)));
        let mut p = first;
        while p > 0 {
            let run_end = p;
            while p > 0 && load[p - 1] == load[run_end - 1] {
                p -= 1;
            }
            open_keys.extend((p..run_end).map(|q| K::pack(load[q], nonempty | q as u64, open_shift)));
        }
        let mut open = MinHeap { keys: open_keys };
        let mut full = MinHeap::<K> { keys: alloc::with_capacity(count, "the micro-batch heap")? };
        // Tokens and costs in the greedy's order: read sequentially (gathered through the order
        // they missed the cache on most items, 70% of the loop's time outside the heap).
        let rest = ordered.tokens.iter().zip(&ordered.costs).enumerate().skip(first);
        for (step, (&tokens, &cost)) in rest {
            interrupt.every(step)?;
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
                let Some(key) = open.peek() else {
                    return Ok(None);
                };
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
        Ok(Some(part))
    }

    /// The count the search settles on, and its split (empty for no items).
    pub fn own_plan(&self, interrupt: &Interrupt) -> Result<(usize, Vec<u32>)> {
        let ordered = self.ordered(interrupt)?;
        let (count, part) = self.own_plan_in(&ordered, interrupt)?;
        Ok((count, ordered.by_item(&part, interrupt)?))
    }

    /// [`Problem::own_plan`] with the items in the greedy's order already; the split by position
    /// in `ordered`.
    fn own_plan_in(&self, ordered: &Ordered, interrupt: &Interrupt) -> Result<(usize, Vec<u32>)> {
        let n = self.tokens.len();
        if n == 0 {
            return Ok((0, Vec::new()));
        }
        let m = self.multiple;
        // Costs that grow with tokens ("tokens", "workload") leave the order sorted by tokens
        // too; reading it backwards saves the bound a second sort.
        let mut sizes = alloc::collect(ordered.tokens.iter().rev().copied(), "the sorted sizes")?;
        if !sizes.is_sorted() {
            sizes = sort::sort_items(&sizes, interrupt)?.values;
        }
        let start = round_up(lower_bound_sorted(&sizes, self.cap), m);
        drop(sizes);
        if let Some(part) = self.split(ordered, start, interrupt)? {
            return Ok((start, part));
        }
        let ceiling = round_up(n, m);
        let (mut failed, mut step) = (start, m);
        let (mut count, mut part) = loop {
            let count = (failed + step).min(ceiling);
            if let Some(part) = self.split(ordered, count, interrupt)? {
                break (count, part);
            }
            failed = count;
            step *= 2;
        };
        while count - failed > m {
            let middle = failed + (count - failed) / m / 2 * m;
            match self.split(ordered, middle, interrupt)? {
                Some(middle_part) => (count, part) = (middle, middle_part),
                None => failed = middle,
            }
        }
        Ok((count, part))
    }

    /// Item positions per part, ascending, for a split into `count` parts.
    fn parts(part: &[u32], count: usize) -> Result<Vec<Vec<u32>>> {
        let mut sizes: Vec<usize> = alloc::zeroed(count, "the micro-batch sizes")?;
        for &p in part {
            sizes[p as usize] += 1;
        }
        let mut parts = alloc::with_capacity(count, "the micro-batches")?;
        for &size in &sizes {
            parts.push(alloc::with_capacity(size, "a micro-batch")?);
        }
        for (item, &p) in part.iter().enumerate() {
            parts[p as usize].push(item as u32);
        }
        Ok(parts)
    }

    /// Item positions per micro-batch: the own plan, or `minimum` micro-batches when that is
    /// more (the split at `minimum` when it fits, else the own plan's heaviest divisible part
    /// halved until there are enough). Empty parts only when `minimum` exceeds the items.
    pub fn plan(&self, minimum: usize, interrupt: &Interrupt) -> Result<Vec<Vec<u32>>> {
        let ordered = self.ordered(interrupt)?;
        let own = self.own_plan_in(&ordered, interrupt)?;
        let parts = self.plan_from(&ordered, &own, minimum, interrupt)?;
        Ok(parts.into_iter().map(|(part, _)| part).collect())
    }

    /// Item positions per part, ascending, and each part's cost, for a split into `count`
    /// parts: one pass in item order (summing costs through the parts' items afterwards missed
    /// the cache on every item).
    fn costed_parts(&self, part: &[u32], count: usize) -> Result<Vec<(Vec<u32>, u64)>> {
        let mut sizes: Vec<usize> = alloc::zeroed(count, "the micro-batch sizes")?;
        for &p in part {
            sizes[p as usize] += 1;
        }
        let mut parts = alloc::with_capacity(count, "the micro-batches")?;
        for &size in &sizes {
            parts.push((alloc::with_capacity(size, "a micro-batch")?, 0u64));
        }
        for (item, (&p, &cost)) in part.iter().zip(self.costs).enumerate() {
            let (items, total) = &mut parts[p as usize];
            items.push(item as u32);
            *total += cost;
        }
        Ok(parts)
    }

    /// [`Problem::plan`] from the greedy's order and an own plan already computed (its split
    /// by position in `ordered`), with each micro-batch's cost.
    fn plan_from(
        &self,
        ordered: &Ordered,
        own: &(usize, Vec<u32>),
        minimum: usize,
        interrupt: &Interrupt,
    ) -> Result<Vec<(Vec<u32>, u64)>> {
        let (own_count, own_part) = (own.0, ordered.by_item(&own.1, interrupt)?);
        if minimum <= own_count {
            return self.costed_parts(&own_part, own_count);
        }
        let n = self.tokens.len();
        let filled = minimum.min(n);
        if filled > 0 {
            if let Some(part) = self.split(ordered, filled, interrupt)? {
                let mut parts = self.costed_parts(&ordered.by_item(&part, interrupt)?, filled)?;
                alloc::room_for(&mut parts, minimum, "the micro-batches")?;
                parts.resize(minimum, (Vec::new(), 0));
                return Ok(parts);
            }
        }
        let mut parts = Self::parts(&own_part, own_count)?;
        parts.retain(|p| !p.is_empty());
        alloc::room_for(&mut parts, minimum, "the micro-batches")?;
        while parts.len() < filled {
            interrupt.check()?; // each step scans every part
            let heaviest = (0..parts.len())
                .filter(|&p| parts[p].len() >= 2)
                .max_by_key(|&p| (self.cost_of(&parts[p]), Reverse(p)))
                .expect("fewer parts than items leaves a part with two items");
            let members = std::mem::take(&mut parts[heaviest]);
            let sub_tokens =
                alloc::collect(members.iter().map(|&i| self.tokens[i as usize]), "a halved part")?;
            let sub_costs = alloc::collect(members.iter().map(|&i| self.costs[i as usize]), "a halved part")?;
            // Uncapped: the halves of a fitting part fit.
            let sub = Problem { tokens: &sub_tokens, costs: &sub_costs, cap: u64::MAX, multiple: 1 };
            let sub_ordered = sub.ordered(interrupt)?;
            let sub_part = sub.split(&sub_ordered, 2, interrupt)?.expect("an uncapped split always fits");
            let [first, second]: [Vec<u32>; 2] = Self::parts(&sub_ordered.by_item(&sub_part, interrupt)?, 2)?
                .into_iter()
                .map(|half| half.into_iter().map(|i| members[i as usize]).collect())
                .collect::<Vec<_>>()
                .try_into()
                .expect("two halves");
            parts[heaviest] = first;
            parts.insert(heaviest + 1, second);
        }
        let mut costed = alloc::with_capacity(minimum, "the micro-batches")?;
        costed.extend(parts.into_iter().map(|part| {
            let cost = self.cost_of(&part);
            (part, cost)
        }));
        costed.resize(minimum, (Vec::new(), 0));
        Ok(costed)
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
    fn by_item(&self, part: &[u32], interrupt: &Interrupt) -> Result<Vec<u32>> {
        let mut by_item: Vec<u32> = alloc::zeroed(part.len(), "the split")?;
        // A scatter that misses the cache on most items: checks in between.
        for (step, (&item, &p)) in self.order.iter().zip(part).enumerate() {
            interrupt.every(step)?;
            by_item[item as usize] = p;
        }
        Ok(by_item)
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
pub fn bubble_order(mut keyed: Vec<((u64, u64), Vec<u32>)>) -> Result<Vec<Vec<u32>>> {
    let total = keyed.len();
    keyed.retain(|(_, p)| !p.is_empty());
    keyed.sort_unstable_by_key(|entry| Reverse(entry.0));
    let mut ordered: Vec<Vec<u32>> = alloc::with_capacity(total, "the micro-batch order")?;
    let mut odds: Vec<Vec<u32>> = alloc::with_capacity(keyed.len() / 2, "the micro-batch order")?;
    for (position, (_, part)) in keyed.into_iter().enumerate() {
        if position % 2 == 0 {
            ordered.push(part);
        } else {
            odds.push(part);
        }
    }
    ordered.reverse();
    ordered.extend(odds);
    ordered.resize(total, Vec::new());
    Ok(ordered)
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
) -> Result<Vec<RankItems>> {
    let mut counts: Vec<usize> = alloc::zeroed(n_ranks, "the rank sizes")?;
    for &r in rank_of_item {
        counts[r] += 1;
    }
    let mut ranks: Vec<RankItems> = alloc::with_capacity(n_ranks, "the ranks")?;
    for &c in &counts {
        let what = "a rank's items";
        ranks.push(RankItems {
            tokens: alloc::with_capacity(c, what)?,
            costs: alloc::with_capacity(c, what)?,
            starts: alloc::with_capacity(c, what)?,
            sizes: alloc::with_capacity(c, what)?,
        });
    }
    for (i, &r) in rank_of_item.iter().enumerate() {
        let rank = &mut ranks[r];
        rank.tokens.push(tokens[i]);
        rank.costs.push(costs[i]);
        rank.starts.push(starts[i]);
        rank.sizes.push(sizes[i]);
    }
    Ok(ranks)
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

/// Per rank, the sample indexes of every micro-batch of `plans` (ascending; bubble-ordered by
/// (cost, first sample) when `bubble`; empty ones last); `ranks` as given to
/// [`plan_best`], each rank's starts ascending.
pub fn expand_ranks(plans: RankPlans, ranks: &[RankItems], bubble: bool) -> Result<Vec<Vec<Vec<u32>>>> {
    let mut plan = alloc::with_capacity(ranks.len(), "the plan")?;
    for (parts, rank) in plans.parts.into_iter().zip(ranks) {
        // Positions ascend in a part and starts ascend in a rank, so the first position is the
        // part's first sample.
        let first = |part: &[u32]| part.first().map_or(0, |&i| rank.starts[i as usize]);
        let parts: Vec<Vec<u32>> = if bubble {
            let keyed = parts.into_iter().map(|(part, cost)| ((cost, first(&part)), part));
            bubble_order(alloc::collect(keyed, "the micro-batch order")?)?
        } else {
            alloc::collect(parts.into_iter().map(|(part, _)| part), "the micro-batches")?
        };
        // Groups of one sample (the usual case) need no sizes, and when the rank's items are
        // samples 0, 1, 2, ... (one rank, plan_micro_batches) a position is its sample: reading
        // starts and sizes through the parts' positions missed the cache on every item.
        let unit = rank.sizes.iter().all(|&size| size == 1);
        let identity = unit && rank.starts.iter().enumerate().all(|(i, &start)| start == i as u64);
        let mut samples_of = alloc::with_capacity(parts.len(), "the micro-batches")?;
        for part in parts {
            let samples = if identity {
                part
            } else if unit {
                alloc::collect(
                    part.iter().map(|&i| rank.starts[i as usize] as u32),
                    "a micro-batch's samples",
                )?
            } else {
                let total = part.iter().map(|&i| rank.sizes[i as usize] as usize).sum();
                let mut samples = alloc::with_capacity(total, "a micro-batch's samples")?;
                for &i in &part {
                    let (start, size) = (rank.starts[i as usize], rank.sizes[i as usize]);
                    samples.extend((start..start + size).map(|s| s as u32));
                }
                samples
            };
            samples_of.push(samples);
        }
        plan.push(samples_of);
    }
    Ok(plan)
}

/// A plan of every rank with one common count: which candidate it came from (see
/// [`plan_best`]), the count, the heaviest micro-batch's cost, the heaviest rank's cost and, per
/// rank, the sample indexes of every micro-batch.
pub type BestPlan = (usize, usize, u64, u64, Vec<Vec<Vec<u32>>>);

/// A rank's own plan: the items in the greedy's order and the own count with its split.
type Own = (Ordered, (usize, Vec<u32>));

/// Micro-batches with their costs, copied with fallible allocation.
fn copy_parts(parts: &[(Vec<u32>, u64)]) -> Result<Vec<(Vec<u32>, u64)>> {
    let mut copy = alloc::with_capacity(parts.len(), "the micro-batches")?;
    for (part, cost) in parts {
        let mut items = alloc::with_capacity(part.len(), "a micro-batch")?;
        items.extend_from_slice(part);
        copy.push((items, *cost));
    }
    Ok(copy)
}

/// Plan every rank with one common count (the largest of the ranks' own counts and `minimum`)
/// for each candidate assignment of items to ranks, and keep the best. Items are groups starting
/// at `starts` (ascending) with `sizes` samples; a candidate gives each item its rank
/// (`< n_ranks`). A later candidate replaces the kept one when it is no worse on the heaviest
/// rank and on the count, and better on (heaviest rank, count, heaviest micro-batch). Only the
/// kept plan is expanded to samples (ascending in each micro-batch; bubble-ordered when
/// `bubble`; empty micro-batches last). Costs must sum to at most `u64::MAX`; at least one
/// candidate.
///
/// A rank that holds exactly the items of a rank in an earlier candidate reuses that rank's
/// plans: the refined candidate of `plan_dp_micro_batches` renumbers the ranks and moves items
/// between a few of them only, and planning every rank again doubled the call's time.
#[allow(clippy::too_many_arguments)]
pub fn plan_best(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    candidates: &[Vec<usize>],
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
    interrupt: &Interrupt,
) -> Result<BestPlan> {
    fn problem(rank: &RankItems, cap: u64, multiple: usize) -> Problem<'_> {
        Problem { tokens: &rank.tokens, costs: &rank.costs, cap, multiple }
    }
    let n_candidates = candidates.len();
    let mut bucketed: Vec<Vec<RankItems>> = alloc::with_capacity(n_candidates, "the ranks")?;
    for rank_of_item in candidates {
        bucketed.push(bucket_ranks(tokens, costs, starts, sizes, rank_of_item, n_ranks)?);
    }
    // source[c][r]: the (candidate, rank) whose own plan rank r of candidate c uses (itself, or
    // an earlier rank holding the same items, whatever its number: the refinement renumbers
    // ranks); owns[c][r] is computed only for sources.
    // Keyed by the rank's first start (a group is in one rank of a candidate), then compared
    // in full: hashing every rank's starts cost as much as bucketing them.
    let mut first_with: HashMap<Option<u64>, Vec<(usize, usize)>> = HashMap::new();
    let mut source: Vec<Vec<(usize, usize)>> = alloc::with_capacity(n_candidates, "the rank plans")?;
    let mut owns: Vec<Vec<Option<Own>>> = alloc::with_capacity(n_candidates, "the rank plans")?;
    for (c, ranks) in bucketed.iter().enumerate() {
        let mut sources = alloc::with_capacity(n_ranks, "the rank plans")?;
        let mut candidate_owns = alloc::with_capacity(n_ranks, "the rank plans")?;
        for (r, rank) in ranks.iter().enumerate() {
            // Equal starts are equal items: a start names its group.
            let key = rank.starts.first().copied();
            let same = first_with.get(&key).and_then(|earlier| {
                earlier.iter().copied().find(|&(e, q)| bucketed[e][q].starts == rank.starts)
            });
            match same {
                Some(earlier) => {
                    sources.push(earlier);
                    candidate_owns.push(None);
                }
                None => {
                    let ordered = problem(rank, cap, multiple).ordered(interrupt)?;
                    let own = problem(rank, cap, multiple).own_plan_in(&ordered, interrupt)?;
                    first_with.entry(key).or_default().push((c, r));
                    sources.push((c, r));
                    candidate_owns.push(Some((ordered, own)));
                }
            }
        }
        source.push(sources);
        owns.push(candidate_owns);
    }
    let own_of = |c: usize, r: usize| -> &Own {
        let (e, q) = source[c][r];
        owns[e][q].as_ref().expect("a source has its own plan")
    };
    let mut plans: Vec<RankPlans> = alloc::with_capacity(n_candidates, "the rank plans")?;
    for c in 0..n_candidates {
        let count = (0..n_ranks).map(|r| own_of(c, r).1 .0).fold(minimum, usize::max);
        let ranks = &bucketed[c];
        let heaviest_rank = ranks.iter().map(|rank| rank.costs.iter().sum::<u64>()).max().unwrap_or(0);
        let mut parts: Vec<Vec<(Vec<u32>, u64)>> = alloc::with_capacity(n_ranks, "the rank plans")?;
        for (r, rank) in ranks.iter().enumerate() {
            let (e, q) = source[c][r];
            if e < c && plans[e].count == count {
                parts.push(copy_parts(&plans[e].parts[q])?);
                continue;
            }
            let (ordered, own) = own_of(c, r);
            parts.push(problem(rank, cap, multiple).plan_from(ordered, own, count, interrupt)?);
        }
        let heaviest_micro_batch = parts.iter().flatten().map(|(_, cost)| *cost).max().unwrap_or(0);
        plans.push(RankPlans { count, heaviest_micro_batch, heaviest_rank, parts });
    }
    let mut kept = 0;
    for (c, plan) in plans.iter().enumerate().skip(1) {
        let best = &plans[kept];
        if plan.heaviest_rank <= best.heaviest_rank && plan.count <= best.count && plan.score() < best.score()
        {
            kept = c;
        }
    }
    let plan = plans.swap_remove(kept);
    let (count, heaviest_micro_batch, heaviest_rank) =
        (plan.count, plan.heaviest_micro_batch, plan.heaviest_rank);
    let plan = expand_ranks(plan, &bucketed[kept], bubble)?;
    Ok((kept, count, heaviest_micro_batch, heaviest_rank, plan))
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
            prop_assert_eq!(lower_bound(&tokens, cap).unwrap(), lower_bound_plain(&tokens, cap));
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
        assert_eq!(lower_bound(&[501; 10], 1000).unwrap(), 10);
        assert_eq!(lower_bound(&[334; 6], 1000).unwrap(), 3);
        assert_eq!(lower_bound(&[1000, 1, 1], 1000).unwrap(), 2);
    }

    #[test]
    fn plan_keeps_the_cap_and_every_item() {
        let tokens = [6u64, 15, 17, 16, 18, 20];
        let problem = Problem { tokens: &tokens, costs: &tokens, cap: 27, multiple: 1 };
        let parts = problem.plan(0, &Interrupt::NEVER).unwrap();
        let mut seen: Vec<u32> = parts.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
        assert!(parts.iter().all(|p| p.iter().map(|&i| tokens[i as usize]).sum::<u64>() <= 27));
        let more = problem.plan(9, &Interrupt::NEVER).unwrap();
        assert_eq!(more.len(), 9);
        assert_eq!(more.iter().filter(|p| !p.is_empty()).count(), 6);
    }
}
