//! The count search and the cap-aware balanced split of one problem (one rank's items), with no
//! shape limits: [`super::shape`] builds on it where there are.

use super::bounds::lower_bound_sorted;
use super::cost::{part_cost, PlanCost};
use super::heap::MinHeap;
use super::problem::{reuse, round_up, Key, KeyBuffers, Ordered, Problem, SplitBuffers};
use super::{map_checked, Result};
use crate::alloc;
use crate::interrupt::Interrupt;
use crate::sort;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

impl<C: PlanCost> Problem<'_, C> {
    /// The cap-aware greedy split into `count` parts: the part of every item by its position in
    /// `ordered` (see [`Ordered::by_item`]), or `None` when an item fits in no part. `count` must
    /// be at least 1.
    ///
    /// Hot loop. Parts live in one of two heaps: by (cost so far, non-empty, number) while they
    /// may take the current item, by fill once they could not. Before each item the parts with
    /// room for it come back from the fill heap, so the cost heap's first fitting entry is the
    /// cheapest part with room (the oracle's rule) and a full part is not scanned again and
    /// again (scanning made a split near the lower bound cost O(n * count)). Both heaps hold
    /// packed integer keys in [`MinHeap`] (see `heap.rs` for why not `BinaryHeap` of tuples).
    pub(super) fn split(
        &self,
        ordered: &Ordered<C>,
        count: usize,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        self.split_in(ordered, count, &mut SplitBuffers::default(), interrupt)
    }

    /// [`Problem::split`] in `buffers`, which a count search keeps from split to split.
    pub(super) fn split_in(
        &self,
        ordered: &Ordered<C>,
        count: usize,
        buffers: &mut SplitBuffers<C>,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        // Keys are (cost so far, non-empty, part) and (fill, part), packed into one integer:
        // u64 when the largest possible cost and the cap leave room for the part's bits.
        let part_bits = usize::BITS - count.saturating_sub(1).leading_zeros();
        // The costs' sum bounds a part's cost, and so does the steepest cost per token times the
        // most tokens a part can hold: `min_num_micro_batches_for` on 4*10^7 workload costs
        // (sum 2^55) in 10^7 parts needs 128-bit keys by the first, 57 bits by the second
        // (58-61 s against 43-45 s, docs/performance.md).
        let per_part = ordered.part_tokens.and_then(|(per, most)| per.checked_mul(most.max(self.cap)));
        let most = match (C::key_bound(self.costs), per_part) {
            (Some(sum), Some(part)) => Some(sum.min(part)),
            (sum, part) => sum.or(part),
        };
        let fits = |value: Option<u64>, shift: u32| value.is_some_and(|v| v.leading_zeros() >= shift);
        // (A search whose counts cross from one key width to the other frees the other's arrays.)
        if fits(most, part_bits + 1) && fits(Some(self.cap), part_bits) {
            buffers.wide = KeyBuffers::default();
            self.split_with::<u64>(ordered, count, part_bits, buffers, interrupt)
        } else {
            buffers.narrow = KeyBuffers::default();
            self.split_with::<u128>(ordered, count, 32, buffers, interrupt)
        }
    }

    pub(super) fn split_with<K: Key>(
        &self,
        ordered: &Ordered<C>,
        count: usize,
        part_bits: u32,
        buffers: &mut SplitBuffers<C>,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        let mut part = reuse(&mut buffers.part, ordered.order.len(), "the split")?;
        // Each part's (tokens, cost) side by side: the part an item goes to is read and written
        // at a random place of a table as large as the parts, one cache miss instead of two
        // (`min_num_micro_batches_for` on 2*10^6 uniform lengths, cap 65,536, 5*10^5 parts:
        // 1.82 s against 1.91-2.01 s).
        let mut fill = reuse(&mut buffers.fill, count, "the micro-batch fills")?;
        fill.resize(count, (0, C::default()));
        let open_shift = part_bits + 1; // the non-empty flag sits just above the part
        let nonempty = 1u64 << part_bits;
        // The first `count` items go to the empty parts 0, 1, 2, ... in turn (an empty part is
        // the cheapest, the lowest number first, and has room for any item), without the heap.
        let first = count.min(ordered.tokens.len());
        let opening = ordered.tokens.iter().zip(&ordered.costs);
        for (p, (slot, (&tokens, &cost))) in fill.iter_mut().zip(opening).enumerate() {
            interrupt.every(p)?;
            *slot = (tokens, cost);
            part.push(p as u32);
        }
        // The heap in sorted order, which is heap order: the empty parts (keys below any other),
        // then the others by cost ascending, which is the reverse of their numbers except that
        // equal costs keep their numbers ascending. A part is in one heap at a time, so neither
        // ever holds more than `count` keys (no reallocation in the loop).
        let keys = K::buffers(buffers);
        let mut open_keys = reuse(&mut keys.run, count, "the micro-batch heap")?;
        open_keys.extend((first..count).map(|p| K::pack(0, p as u64, 0)));
        let mut p = first;
        while p > 0 {
            let run_end = p;
            while p > 0 && fill[p - 1].1 == fill[run_end - 1].1 {
                p -= 1;
            }
            open_keys
                .extend((p..run_end).map(|q| K::pack(fill[q].1.bits(), nonempty | q as u64, open_shift)));
        }
        let mut open = RunHeap {
            run: open_keys,
            next: 0,
            heap: MinHeap::reuse(std::mem::take(&mut keys.heap), count, "the micro-batch heap")?,
        };
        let mut full = MinHeap::reuse(std::mem::take(&mut keys.full), count, "the micro-batch heap")?;
        // Every buffer goes back for the next split, the split itself only when it failed.
        let give_back = |buffers: &mut SplitBuffers<C>, fill, open: RunHeap<K>, full: MinHeap<K>| {
            buffers.fill = fill;
            let keys = K::buffers(buffers);
            (keys.run, keys.heap, keys.full) = (open.run, open.heap.into_buffer(), full.into_buffer());
        };
        // Tokens and costs in the greedy's order: read sequentially (gathered through the order
        // they missed the cache on most items, 70% of the loop's time outside the heap).
        let rest = ordered.tokens.iter().zip(&ordered.costs).enumerate().skip(first);
        // Moves between the heaps, counted for the interrupt checks: one item can send millions
        // of parts back at once (measured: 2.3 s without a check at 4*10^7 items).
        let mut moves = 0usize;
        for (step, (&tokens, &cost)) in rest {
            interrupt.every(step)?;
            let room = self.cap - tokens;
            while let Some(key) = full.peek() {
                if key.high(part_bits) > room {
                    break;
                }
                moves += 1;
                interrupt.every(moves)?;
                full.pop();
                // A part that could not take an item holds tokens, so it is not empty.
                let p = key.part(part_bits);
                open.push(K::pack(fill[p as usize].1.bits(), nonempty | p as u64, open_shift));
            }
            // The cheapest part with room takes the item; its key is replaced in place.
            loop {
                let Some(key) = open.peek() else {
                    give_back(buffers, fill, open, full);
                    buffers.part = part;
                    return Ok(None);
                };
                let p = key.part(part_bits) as usize;
                let (filled, load) = &mut fill[p];
                if *filled <= room {
                    *filled += tokens;
                    *load = load.plus(cost);
                    part.push(p as u32);
                    open.replace_top(K::pack(load.bits(), nonempty | p as u64, open_shift));
                    break;
                }
                moves += 1;
                interrupt.every(moves)?;
                open.pop();
                full.push(K::pack(fill[p].0, p as u64, part_bits));
            }
        }
        give_back(buffers, fill, open, full);
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
    pub(super) fn own_plan_in(
        &self,
        ordered: &Ordered<C>,
        interrupt: &Interrupt,
    ) -> Result<(usize, Vec<u32>)> {
        let n = self.tokens.len();
        if n == 0 {
            return Ok((0, Vec::new()));
        }
        let m = self.multiple;
        // Costs that grow with tokens ("tokens", "workload") leave the order sorted by tokens
        // too; reading it backwards saves the bound a second sort.
        let mut sizes = map_checked(ordered.tokens.iter().rev(), "the sorted sizes", interrupt, |&t| t)?;
        let mut sorted = true;
        for (step, pair) in sizes.windows(2).enumerate() {
            interrupt.every(step)?;
            if pair[0] > pair[1] {
                sorted = false;
                break;
            }
        }
        if !sorted {
            sizes = sort::sort_items(&sizes, interrupt)?.values;
        }
        let start = round_up(lower_bound_sorted(&sizes, self.cap, interrupt)?, m);
        drop(sizes);
        let buffers = &mut SplitBuffers::default();
        if let Some(part) = self.split_in(ordered, start, buffers, interrupt)? {
            return Ok((start, part));
        }
        let ceiling = round_up(n, m);
        let (mut failed, mut step) = (start, m);
        let (mut count, mut part) = loop {
            let count = (failed + step).min(ceiling);
            if let Some(part) = self.split_in(ordered, count, buffers, interrupt)? {
                break (count, part);
            }
            failed = count;
            step *= 2;
        };
        while count - failed > m {
            let middle = failed + (count - failed) / m / 2 * m;
            match self.split_in(ordered, middle, buffers, interrupt)? {
                Some(middle_part) => (count, part) = (middle, middle_part),
                None => failed = middle,
            }
        }
        Ok((count, part))
    }

    /// Item positions per part, ascending, and each part's cost, for a split into `count`
    /// parts: one pass in item order (summing costs through the parts' items afterwards missed
    /// the cache on every item).
    pub(super) fn costed_parts(&self, part: &[u32], count: usize) -> Result<Vec<(Vec<u32>, C)>> {
        let mut sizes: Vec<usize> = alloc::zeroed(count, "the micro-batch sizes")?;
        for &p in part {
            sizes[p as usize] += 1;
        }
        let mut parts = alloc::with_capacity(count, "the micro-batches")?;
        for &size in &sizes {
            parts.push((alloc::with_capacity(size, "a micro-batch")?, C::default()));
        }
        for (item, (&p, &cost)) in part.iter().zip(self.costs).enumerate() {
            let (items, total) = &mut parts[p as usize];
            items.push(item as u32);
            *total = total.plus(cost);
        }
        if !C::EXACT {
            // Float costs: each part's left fold in placement order, not in item order.
            for (items, total) in &mut parts {
                *total = part_cost(self.costs, items);
            }
        }
        Ok(parts)
    }

    /// [`Problem::plan`] from the greedy's order and an own plan already computed (its split
    /// by position in `ordered`), with each micro-batch's cost.
    pub(super) fn plan_from(
        &self,
        ordered: &Ordered<C>,
        own: &(usize, Vec<u32>),
        minimum: usize,
        interrupt: &Interrupt,
    ) -> Result<Vec<(Vec<u32>, C)>> {
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
                parts.resize(minimum, (Vec::new(), C::default()));
                return Ok(parts);
            }
        }
        let parts = Self::parts(&own_part, own_count)?;
        let parts = self.halve_until(parts, filled, interrupt)?;
        let mut costed = alloc::with_capacity(minimum, "the micro-batches")?;
        costed.extend(parts.into_iter().map(|part| {
            let cost = self.cost_of(&part);
            (part, cost)
        }));
        costed.resize(minimum, (Vec::new(), C::default()));
        Ok(costed)
    }

    /// The non-empty `parts` (item positions), the heaviest part of two items or more (ties to
    /// the earliest) halved again and again until there are `wanted` (at most the items); the
    /// halves of a part take its place, first then second.
    ///
    /// A heap of the divisible parts by (cost, place) instead of a scan of every part per
    /// halving (quadratic when `wanted` is far above the own count). A part's place is a path
    /// from its own-plan part down the halvings (0: first half, 1: second), left-aligned in a
    /// `u128`, so paths compare as places do; when a path would pass 128 halvings, the parts are
    /// renumbered by place and the paths start again.
    pub(super) fn halve_until(
        &self,
        parts: Vec<Vec<u32>>,
        wanted: usize,
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>> {
        let mut parts: Vec<Vec<u32>> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        if parts.len() >= wanted {
            return Ok(parts);
        }
        alloc::room_for(&mut parts, wanted, "the micro-batches")?;
        // Per slot of `parts`: its place (own-plan part, path), the path's length, its cost.
        let mut places: Vec<(u64, u128)> = alloc::with_capacity(wanted, "the micro-batch places")?;
        places.extend((0..parts.len() as u64).map(|p| (p, 0u128)));
        let mut depths: Vec<u32> = alloc::filled(parts.len(), 0, "the micro-batch places")?;
        alloc::room_for(&mut depths, wanted, "the micro-batch places")?;
        let mut costs: Vec<u64> = alloc::with_capacity(wanted, "the micro-batch costs")?;
        // Costs as their bits, which order them as numbers.
        costs.extend(parts.iter().map(|part| self.cost_of(part).bits()));
        let mut heap = BinaryHeap::new();
        let divisible = |parts: &[Vec<u32>], slot: usize| parts[slot].len() >= 2;
        heap.extend(
            (0..parts.len()).filter(|&s| divisible(&parts, s)).map(|s| (costs[s], Reverse(places[s]), s)),
        );
        while parts.len() < wanted {
            interrupt.check()?;
            let (_, _, slot) = heap.pop().expect("fewer parts than items leaves a part with two items");
            if depths[slot] == u128::BITS {
                // Renumber every part by place; the order of places is unchanged.
                let mut by_place: Vec<usize> = alloc::collect(0..parts.len(), "the micro-batch places")?;
                by_place.sort_unstable_by_key(|&s| places[s]);
                for (rank, &s) in by_place.iter().enumerate() {
                    (places[s], depths[s]) = ((rank as u64, 0), 0);
                }
                heap.clear();
                heap.extend(
                    (0..parts.len())
                        .filter(|&s| divisible(&parts, s))
                        .map(|s| (costs[s], Reverse(places[s]), s)),
                );
                continue;
            }
            let members = std::mem::take(&mut parts[slot]);
            let [first, second] = self.halves(&members, interrupt)?;
            let (root, path) = places[slot];
            let depth = depths[slot] + 1;
            let second_path = path | 1u128 << (u128::BITS - depth);
            let new = parts.len();
            parts[slot] = first;
            parts.push(second);
            places.push((root, second_path));
            depths[slot] = depth;
            depths.push(depth);
            costs[slot] = self.cost_of(&parts[slot]).bits();
            costs.push(self.cost_of(&parts[new]).bits());
            for s in [slot, new] {
                if divisible(&parts, s) {
                    heap.push((costs[s], Reverse(places[s]), s));
                }
            }
        }
        let mut by_place: Vec<usize> = alloc::collect(0..parts.len(), "the micro-batch places")?;
        by_place.sort_unstable_by_key(|&s| places[s]);
        let mut ordered = alloc::with_capacity(parts.len(), "the micro-batches")?;
        for s in by_place {
            ordered.push(std::mem::take(&mut parts[s]));
        }
        Ok(ordered)
    }

    /// The uncapped balanced split of `members` (item positions) in two, as positions: the
    /// halves of a fitting part fit.
    pub(super) fn halves(&self, members: &[u32], interrupt: &Interrupt) -> Result<[Vec<u32>; 2]> {
        let sub_tokens = alloc::collect(members.iter().map(|&i| self.tokens[i as usize]), "a halved part")?;
        let sub_costs = alloc::collect(members.iter().map(|&i| self.costs[i as usize]), "a halved part")?;
        let sub = Problem { tokens: &sub_tokens, costs: &sub_costs, cap: u64::MAX, multiple: 1, shape: None };
        let sub_ordered = sub.ordered(interrupt)?;
        let sub_part = sub.split(&sub_ordered, 2, interrupt)?.expect("an uncapped split always fits");
        let halves = Self::parts(&sub_ordered.by_item(&sub_part, interrupt)?, 2)?;
        let mut mapped =
            halves.into_iter().map(|half| half.into_iter().map(|i| members[i as usize]).collect());
        Ok([mapped.next().expect("two halves"), mapped.next().expect("two halves")])
    }
}

/// The split's heap of open parts: their keys in a sorted run, as the split starts, in front of
/// a [`MinHeap`] that takes every key pushed or replaced since; the least key is the least of
/// the run's next one and the heap's top, so the parts come out in the order one heap of all
/// the keys gives (keys are unique: they end in the part number).
///
/// Why: the first item after the `count` opening ones goes to the part with the lightest
/// opening item, the next to the next lightest, and so on for a whole round, and a part that
/// took a second item is usually heavier than every part still waiting with one. One heap paid
/// a descent to a leaf for each of those items, a cache miss a level once the heap outgrows the
/// cache (10^7 parts at 4*10^7 items); here the round reads the run in order, and the heap's
/// pushes of heavy keys mostly stop at the bottom. Later rounds go through the heap as before.
struct RunHeap<K> {
    /// Ascending; `run[next..]` not yet taken.
    run: Vec<K>,
    next: usize,
    heap: MinHeap<K>,
}

impl<K: Key> RunHeap<K> {
    /// Whether the least key is the run's next one.
    fn least_in_run(&self) -> bool {
        self.run.get(self.next).is_some_and(|&key| self.heap.peek().is_none_or(|top| key < top))
    }

    fn peek(&self) -> Option<K> {
        if self.least_in_run() {
            Some(self.run[self.next])
        } else {
            self.heap.peek()
        }
    }

    fn pop(&mut self) {
        if self.least_in_run() {
            self.next += 1;
        } else {
            self.heap.pop();
        }
    }

    /// Never grows the heap past `count` keys: a part is in one place at a time.
    fn push(&mut self, key: K) {
        self.heap.push(key);
    }

    /// Replace the least key by `key`.
    fn replace_top(&mut self, key: K) {
        if self.least_in_run() {
            self.next += 1;
            self.heap.push(key);
        } else {
            self.heap.replace_top(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The run in front of the heap gives up its keys in the order one heap of all the keys
        /// gives, under any mix of the split's operations.
        #[test]
        fn run_heap_is_one_heap(
            run in prop::collection::btree_set(0u64..1000, 0..40),
            operations in prop::collection::vec((0u8..3, 0u64..2000), 0..120),
        ) {
            let run: Vec<u64> = run.into_iter().map(|key| key << 8).collect();
            // Pushed keys end in 1, 2, 3, ... and the run's in 0: all unique, interleaved.
            let mut fresh = 1u64..;
            let mut split = RunHeap { run: run.clone(), next: 0, heap: MinHeap::new() };
            let mut one = MinHeap::new();
            for &key in &run {
                one.push(key);
            }
            for (operation, value) in operations {
                prop_assert_eq!(split.peek(), one.peek());
                let key = value << 8 | fresh.next().unwrap();
                match operation {
                    0 => {
                        split.pop();
                        one.pop();
                    }
                    1 => {
                        split.push(key);
                        one.push(key);
                    }
                    _ if one.peek().is_some() => {
                        split.replace_top(key);
                        one.replace_top(key);
                    }
                    _ => {}
                }
            }
            while let Some(key) = one.peek() {
                prop_assert_eq!(split.peek(), Some(key));
                split.pop();
                one.pop();
            }
            prop_assert_eq!(split.peek(), None);
        }
    }
}
