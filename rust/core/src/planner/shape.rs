//! Shape limits of a micro-batch beyond the token cap (planning spec, "Shapes trainers must
//! respect"): at most `max_sequences` samples, a padded footprint (`samples * longest` against
//! the cap instead of the token sum) and one key per micro-batch.
//!
//! A plan made without them is kept whenever it already satisfies them (the caller checks with
//! [`Problem::satisfies`]). Otherwise [`Problem::shaped_own`] searches the count with the same
//! balanced greedy as the plain planner, "fits" extended by the limits, between a lower bound and
//! the count of first-fit decreasing under the same limits (by tokens, ties by index), which it
//! never exceeds: where the greedy does not fit at that count, first fit's own split is used.
//! Splitting a part in two never breaks a limit (fewer samples, no longer sample, one key), so
//! more micro-batches than that are made by halving.

use super::cost::PlanCost;
use super::heap::MinHeap;
use super::problem::{round_up, Key, Ordered, Problem, Shape, ShapeRule};
use super::Result;
use crate::alloc;
use crate::interrupt::Interrupt;
use crate::packing::{packing_constrained, Algorithm, Constraints, Footprint, PackError};
use crate::sort;

/// What a limit knows of a micro-batch (or of an item, a micro-batch of its own).
#[derive(Clone, Copy, Default)]
pub(super) struct Fill {
    pub(super) tokens: u64,
    pub(super) samples: u64,
    pub(super) longest: u64,
    pub(super) key: u32,
}

impl Fill {
    /// Whether `item` fits beside this micro-batch's members (an empty one takes any item,
    /// each fitting alone: the caller checks).
    pub(super) fn fits(&self, item: &Fill, rule: ShapeRule, cap: u64) -> bool {
        if self.samples == 0 {
            return true;
        }
        let samples = self.samples + item.samples;
        if self.key != item.key || samples > rule.max_sequences {
            return false;
        }
        if rule.padded {
            samples as u128 * self.longest.max(item.longest) as u128 <= cap as u128
        } else {
            self.tokens + item.tokens <= cap
        }
    }

    pub(super) fn take(&mut self, item: &Fill) {
        self.tokens += item.tokens;
        self.samples += item.samples;
        self.longest = self.longest.max(item.longest);
        self.key = item.key;
    }

    /// For items of one sample: the longest item this micro-batch may still take (the room
    /// left, or with a padded footprint `cap / (samples + 1)` while its longest still fits that
    /// many), or `None` when it takes no more.
    pub(super) fn threshold(&self, rule: ShapeRule, cap: u64) -> Option<u64> {
        if self.samples >= rule.max_sequences {
            None
        } else if rule.padded {
            let next = self.samples + 1;
            (next as u128 * self.longest as u128 <= cap as u128).then(|| cap / next)
        } else {
            Some(cap - self.tokens)
        }
    }

    /// The smallest of each measure (a virtual item no real one undercuts).
    fn least(&self, other: &Fill) -> Fill {
        Fill {
            tokens: self.tokens.min(other.tokens),
            samples: self.samples.min(other.samples),
            longest: self.longest.min(other.longest),
            key: other.key,
        }
    }
}

/// The items in the greedy's order as the limits read them, and for groups the least measures
/// still to come of each item's key: read once for all the splits of a count search (gathering
/// them through the order on every split was an eighth of its time).
pub(super) struct Placed {
    pub(super) fills: Vec<Fill>,
    pub(super) least: Option<Vec<Fill>>,
}

impl Shape<'_> {
    pub(super) fn item(&self, tokens: &[u64], i: usize) -> Fill {
        Fill {
            tokens: tokens[i],
            samples: self.samples[i],
            longest: self.longest[i],
            key: self.keys.map_or(0, |keys| keys[i]),
        }
    }

    pub(super) fn key_count(&self) -> usize {
        self.keys.map_or(1, |keys| keys.iter().max().map_or(1, |&k| k as usize + 1))
    }

    pub(super) fn unit(&self) -> bool {
        self.samples.iter().all(|&s| s == 1)
    }
}

impl<C: PlanCost> Problem<'_, C> {
    fn shape(&self) -> &Shape<'_> {
        self.shape.as_ref().expect("a shaped problem")
    }

    /// Whether every part (item positions) keeps the limits.
    pub fn satisfies<'p>(&self, parts: impl IntoIterator<Item = &'p [u32]>) -> bool {
        let Some(shape) = &self.shape else {
            return true;
        };
        parts.into_iter().all(|part| {
            let mut fill = Fill::default();
            part.iter().all(|&i| {
                let item = shape.item(self.tokens, i as usize);
                let fits = fill.fits(&item, shape.rule, self.cap);
                fill.take(&item);
                fits
            })
        })
    }

    /// [`Placed`] for the order of `ordered`.
    pub(super) fn placed(&self, ordered: &Ordered<C>, interrupt: &Interrupt) -> Result<Placed> {
        let shape = self.shape();
        let mut fills = alloc::with_capacity(ordered.order.len(), "the planner's limits")?;
        for (step, &i) in ordered.order.iter().enumerate() {
            interrupt.every(step)?;
            fills.push(shape.item(self.tokens, i as usize));
        }
        let least = if shape.unit() { None } else { Some(self.least_ahead(&ordered.order, interrupt)?) };
        Ok(Placed { fills, least })
    }

    /// Per position of `ordered`, the least measures of the items from there on with the same
    /// key: a part that cannot take that virtual item takes no later item of its key.
    fn least_ahead(&self, order: &[u32], interrupt: &Interrupt) -> Result<Vec<Fill>> {
        let shape = self.shape();
        let none = Fill { tokens: u64::MAX, samples: u64::MAX, longest: u64::MAX, key: 0 };
        let mut running: Vec<Fill> = alloc::filled(shape.key_count(), none, "the planner's limits")?;
        let mut least: Vec<Fill> = alloc::filled(order.len(), none, "the planner's limits")?;
        for (step, position) in (0..order.len()).rev().enumerate() {
            interrupt.every(step)?;
            let item = shape.item(self.tokens, order[position] as usize);
            let key = item.key as usize;
            running[key] = running[key].least(&item);
            least[position] = running[key];
        }
        Ok(least)
    }

    /// The balanced greedy of [`Problem::split`] with "fits" extended by the limits: the part of
    /// every item by its position in `ordered`, or `None` when an item fits in no part.
    ///
    /// After the first `count` items (each opening a part) every part has a key, so each key has
    /// a heap of its parts by (cost, number). A part that cannot take the current item goes
    /// aside until the item is placed, or for good when it cannot take the least item still to
    /// come of its key. Worst case O(n * count) (parts that fit later items but not this one),
    /// typically O(n log count).
    pub(super) fn shaped_split(
        &self,
        ordered: &Ordered<C>,
        placed: &Placed,
        count: usize,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        let shape = self.shape();
        let Some(least) = &placed.least else {
            return self.unit_split(ordered, placed, count, interrupt);
        };
        let n = ordered.order.len();
        let mut part: Vec<u32> = alloc::with_capacity(n, "the split")?;
        let mut fills: Vec<Fill> = alloc::filled(count, Fill::default(), "the micro-batch fills")?;
        let mut load: Vec<C> = alloc::filled(count, C::default(), "the micro-batch costs")?;
        let first = count.min(n);
        for p in 0..first {
            fills[p] = placed.fills[p];
            load[p] = ordered.costs[p];
            part.push(p as u32);
        }
        let key_of = |load: C, p: usize| (load.bits() as u128) << 32 | p as u128;
        let mut heaps: Vec<Vec<std::cmp::Reverse<u128>>> =
            alloc::filled(shape.key_count(), Vec::new(), "the micro-batch heaps")?;
        for p in 0..first {
            alloc::push(&mut heaps[fills[p].key as usize], std::cmp::Reverse(key_of(load[p], p)), "a heap")?;
        }
        let mut heaps: Vec<std::collections::BinaryHeap<std::cmp::Reverse<u128>>> =
            alloc::collect(heaps.into_iter().map(Into::into), "the micro-batch heaps")?;
        let mut aside: Vec<std::cmp::Reverse<u128>> = Vec::new();
        let mut moves = 0usize; // parts looked at, for the interrupt checks
        for (position, (item, least)) in placed.fills.iter().zip(least).enumerate().skip(first) {
            interrupt.every(position)?;
            let heap = &mut heaps[item.key as usize];
            let mut placed = false;
            while let Some(entry) = heap.pop() {
                moves += 1;
                interrupt.every(moves)?;
                let p = (entry.0 & u32::MAX as u128) as usize;
                if fills[p].fits(item, shape.rule, self.cap) {
                    fills[p].take(item);
                    load[p] = load[p].plus(ordered.costs[position]);
                    part.push(p as u32);
                    heap.push(std::cmp::Reverse(key_of(load[p], p)));
                    placed = true;
                    break;
                }
                if fills[p].fits(least, shape.rule, self.cap) {
                    alloc::push(&mut aside, entry, "the micro-batch heap")?;
                }
            }
            heap.extend(aside.drain(..));
            if !placed {
                return Ok(None);
            }
        }
        Ok(Some(part))
    }

    /// [`Problem::shaped_split`] when every item is one sample. Then whether a part takes an
    /// item depends on the item's length alone: it does up to a threshold (the room left, or
    /// with a padded footprint `cap / (samples + 1)` while the longest still fits that many), so
    /// a part that could not take an item waits in a heap by threshold until an item short
    /// enough comes, as in the plain split, instead of being scanned again and again.
    fn unit_split(
        &self,
        ordered: &Ordered<C>,
        placed: &Placed,
        count: usize,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        // Keys pack (cost bits, part) and (cap - room, part) into one integer: a u64 when the
        // costs' sum and the cap leave room for the part's bits, as in the plain split (u128
        // keys spent a third of the call in the heap).
        let part_bits = usize::BITS - count.saturating_sub(1).leading_zeros();
        let fits = |value: Option<u64>| value.is_some_and(|v| v.leading_zeros() >= part_bits);
        if fits(C::key_bound(self.costs)) && fits(Some(self.cap)) {
            self.unit_split_with::<u64>(ordered, placed, count, part_bits, interrupt)
        } else {
            self.unit_split_with::<u128>(ordered, placed, count, 32, interrupt)
        }
    }

    fn unit_split_with<K: Key>(
        &self,
        ordered: &Ordered<C>,
        placed: &Placed,
        count: usize,
        part_bits: u32,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<u32>>> {
        let shape = self.shape();
        let (rule, cap) = (shape.rule, self.cap);
        let threshold = |fill: &Fill| fill.threshold(rule, cap);
        // The parts that may take the item by (cost, part); those waiting for a shorter one by
        // (cap - room, part), so the roomiest comes first.
        let open_key = |load: C, p: usize| K::pack(load.bits(), p as u64, part_bits);
        let full_key = |room: u64, p: usize| K::pack(cap - room, p as u64, part_bits);
        let n = ordered.order.len();
        let mut part: Vec<u32> = alloc::with_capacity(n, "the split")?;
        let mut fills: Vec<Fill> = alloc::filled(count, Fill::default(), "the micro-batch fills")?;
        let mut load: Vec<C> = alloc::filled(count, C::default(), "the micro-batch costs")?;
        let first = count.min(n);
        let keys = shape.key_count();
        let empty = MinHeap::<K>::new;
        let mut open: Vec<MinHeap<K>> = alloc::filled(keys, empty(), "the micro-batch heaps")?;
        let mut full: Vec<MinHeap<K>> = alloc::filled(keys, empty(), "the micro-batch heaps")?;
        for p in 0..first {
            fills[p] = placed.fills[p];
            load[p] = ordered.costs[p];
            part.push(p as u32);
            open[fills[p].key as usize].try_push(open_key(load[p], p), "the micro-batch heap")?;
        }
        // Heap moves, counted for the interrupt checks (one item can release millions of parts).
        let mut moves = 0usize;
        for position in first..n {
            interrupt.every(position)?;
            let item = placed.fills[position];
            let key = item.key as usize;
            while let Some(waiting) = full[key].peek() {
                if waiting.high(part_bits) > cap - item.tokens {
                    break;
                }
                moves += 1;
                interrupt.every(moves)?;
                full[key].pop();
                let p = waiting.part(part_bits) as usize;
                open[key].try_push(open_key(load[p], p), "the micro-batch heap")?;
            }
            loop {
                let Some(top) = open[key].peek() else {
                    return Ok(None);
                };
                let p = top.part(part_bits) as usize;
                match threshold(&fills[p]) {
                    Some(room) if room >= item.tokens => {
                        fills[p].take(&item);
                        load[p] = load[p].plus(ordered.costs[position]);
                        part.push(p as u32);
                        open[key].replace_top(open_key(load[p], p));
                        break;
                    }
                    Some(room) => {
                        moves += 1;
                        interrupt.every(moves)?;
                        open[key].pop();
                        full[key].try_push(full_key(room, p), "the micro-batch heap")?;
                    }
                    None => open[key].pop(),
                }
            }
        }
        Ok(Some(part))
    }

    /// First-fit decreasing under the limits (items by tokens descending, ties by index): its
    /// parts as item positions, in opening order.
    pub(super) fn first_fit_decreasing(&self, interrupt: &Interrupt) -> Result<Vec<Vec<u32>>> {
        let shape = self.shape();
        if shape.unit() {
            // One sample per item: the packer's constrained first fit decreasing, O(n log n).
            let constraints = Constraints {
                max_sequences: usize::try_from(shape.rule.max_sequences).ok(),
                footprint: if shape.rule.padded { Footprint::Padded } else { Footprint::Sum },
                keys: shape.keys,
            };
            let packing = packing_constrained(
                self.tokens,
                self.cap,
                Algorithm::FirstFitDecreasing,
                &constraints,
                interrupt,
            )
            .map_err(|error| match error {
                PackError::Core(error) => error,
                other => unreachable!("the planner checks what the packer refuses: {other:?}"),
            })?;
            let grouped = packing.grouped(interrupt)?;
            let mut parts = alloc::with_capacity(grouped.len(), "the micro-batches")?;
            for pack in grouped.packs() {
                let mut members = alloc::collect(pack.iter().copied(), "a micro-batch")?;
                members.sort_unstable();
                parts.push(members);
            }
            return Ok(parts);
        }
        // Groups: a scan of the parts that can still take an item of their key.
        let most = self.tokens.iter().copied().max().unwrap_or(0);
        let flipped = alloc::collect(self.tokens.iter().map(|&t| most - t), "the planner's sort keys")?;
        let order = sort::sort_items(&flipped, interrupt)?.index;
        drop(flipped);
        let least = self.least_ahead(&order, interrupt)?;
        let mut fills: Vec<Fill> = Vec::new();
        let mut parts: Vec<Vec<u32>> = Vec::new();
        let mut live: Vec<usize> = Vec::new();
        for (position, &i) in order.iter().enumerate() {
            interrupt.check()?;
            let item = shape.item(self.tokens, i as usize);
            let (rule, cap) = (shape.rule, self.cap);
            live.retain(|&p| fills[p].key != item.key || fills[p].fits(&least[position], rule, cap));
            match live.iter().copied().find(|&p| fills[p].fits(&item, rule, cap)) {
                Some(p) => {
                    fills[p].take(&item);
                    alloc::push(&mut parts[p], i, "a micro-batch")?;
                }
                None => {
                    let mut fill = Fill::default();
                    fill.take(&item);
                    alloc::push(&mut fills, fill, "the micro-batch fills")?;
                    alloc::push(&mut parts, vec![i], "the micro-batches")?;
                    alloc::push(&mut live, parts.len() - 1, "the micro-batch fills")?;
                }
            }
        }
        for members in &mut parts {
            members.sort_unstable();
        }
        Ok(parts)
    }

    /// A lower bound on the count under the limits: per key, the plain bound of its tokens and
    /// `ceil(samples / max_sequences)`, summed over the keys.
    fn shaped_lower_bound(&self, interrupt: &Interrupt) -> Result<usize> {
        let shape = self.shape();
        let keys = shape.key_count();
        let mut by_key: Vec<Vec<u64>> = alloc::filled(keys, Vec::new(), "the sorted sizes")?;
        let mut samples: Vec<u64> = alloc::zeroed(keys, "the sample counts")?;
        for i in 0..self.tokens.len() {
            let key = shape.keys.map_or(0, |k| k[i] as usize);
            alloc::push(&mut by_key[key], self.tokens[i], "the sorted sizes")?;
            samples[key] += shape.samples[i];
        }
        let mut bound = 0usize;
        for (sizes, &count) in by_key.iter_mut().zip(&samples) {
            interrupt.check()?;
            if sizes.is_empty() {
                continue;
            }
            sizes.sort_unstable();
            let by_samples = count.div_ceil(shape.rule.max_sequences.max(1)) as usize;
            bound += super::bounds::lower_bound_sorted(sizes, self.cap, interrupt)?.max(by_samples);
        }
        Ok(bound.max(1))
    }

    /// The own plan under the limits, as item positions per part (ascending), non-empty but
    /// where the count's multiple asks for more parts than items: the count searched between
    /// [`Problem::shaped_lower_bound`] and first fit decreasing's count, both rounded up to the
    /// multiple, galloping up and bisecting back as the plain search does; at the upper end
    /// first fit's own split (halved to the count) when the greedy does not fit there. `unshaped`
    /// (the plain own plan's parts) is kept instead when it keeps the limits and has no more
    /// parts than first fit.
    pub(super) fn shaped_own(
        &self,
        ordered: &Ordered<C>,
        unshaped: &[Vec<u32>],
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>> {
        let n = self.tokens.len();
        let m = self.multiple;
        let first_fit = self.first_fit_decreasing(interrupt)?;
        let ceiling = round_up(first_fit.len(), m);
        if unshaped.len() <= ceiling && self.satisfies(unshaped.iter().map(Vec::as_slice)) {
            return copy(unshaped);
        }
        let start = round_up(self.shaped_lower_bound(interrupt)?, m).min(ceiling);
        let placed = self.placed(ordered, interrupt)?;
        let by_item = |part: Vec<u32>, count: usize| -> Result<Vec<Vec<u32>>> {
            Problem::<C>::parts(&ordered.by_item(&part, interrupt)?, count)
        };
        if let Some(part) = self.shaped_split(ordered, &placed, start, interrupt)? {
            return by_item(part, start);
        }
        let (mut failed, mut step) = (start, m);
        let mut found = None;
        while failed < ceiling {
            let count = (failed + step).min(ceiling);
            if let Some(part) = self.shaped_split(ordered, &placed, count, interrupt)? {
                found = Some((count, part));
                break;
            }
            failed = count;
            step *= 2;
        }
        let Some((mut count, mut part)) = found else {
            // The greedy fits at no count up to first fit's: first fit's split, halved to the
            // count (empty parts only past the items).
            let mut parts = self.halve_until(first_fit, ceiling.min(n), interrupt)?;
            parts.resize(ceiling, Vec::new());
            return Ok(parts);
        };
        while count - failed > m {
            let middle = failed + (count - failed) / m / 2 * m;
            match self.shaped_split(ordered, &placed, middle, interrupt)? {
                Some(middle_part) => (count, part) = (middle, middle_part),
                None => failed = middle,
            }
        }
        by_item(part, count)
    }

    /// `minimum` parts or more under the limits, from the shaped own plan `own`: `own` itself
    /// when it has enough parts, else the shaped split at `minimum` when it fits, else `own`
    /// halved until there are enough (empty parts only past the items).
    pub(super) fn shaped_at(
        &self,
        ordered: &Ordered<C>,
        own: &[Vec<u32>],
        minimum: usize,
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>> {
        if minimum <= own.len() {
            return copy(own);
        }
        let filled = minimum.min(self.tokens.len());
        let placed = self.placed(ordered, interrupt)?;
        let mut parts = match self.shaped_split(ordered, &placed, filled, interrupt)? {
            Some(part) => Problem::<C>::parts(&ordered.by_item(&part, interrupt)?, filled)?,
            None => self.halve_until(copy(own)?, filled, interrupt)?,
        };
        alloc::room_for(&mut parts, minimum, "the micro-batches")?;
        parts.resize(minimum, Vec::new());
        Ok(parts)
    }
}

impl<C: PlanCost> Problem<'_, C> {
    /// Item positions per micro-batch: the own plan, or `minimum` micro-batches when that is
    /// more (the split at `minimum` when it fits, else the own plan's heaviest divisible part
    /// halved until there are enough). Empty parts only when `minimum` exceeds the items. With
    /// shape limits that plan breaks, the shaped plan instead (see the `shape` module).
    pub fn plan(&self, minimum: usize, interrupt: &Interrupt) -> Result<Vec<Vec<u32>>> {
        let ordered = self.ordered(interrupt)?;
        let own = self.own_plan_in(&ordered, interrupt)?;
        let mut parts = self.plan_from(&ordered, &own, minimum, interrupt)?;
        if !self.satisfies(parts.iter().map(|(part, _)| part.as_slice())) {
            let shaped_own = self.shaped_own_from(&ordered, &own, interrupt)?;
            let count = shaped_own.len().max(minimum);
            parts = self.plan_shaped(&ordered, &own, &shaped_own, count, interrupt)?;
        }
        alloc::collect(parts.into_iter().map(|(part, _)| part), "the micro-batches")
    }

    /// The count [`Problem::plan`] settles on with no minimum: the plain own count when its
    /// split keeps the limits (or there are none), else the shaped own plan's. What
    /// `min_num_micro_batches_for` returns.
    pub fn own_count(&self, interrupt: &Interrupt) -> Result<usize> {
        let ordered = self.ordered(interrupt)?;
        let own = self.own_plan_in(&ordered, interrupt)?;
        if self.shape.is_none() {
            return Ok(own.0);
        }
        let parts = Self::parts(&ordered.by_item(&own.1, interrupt)?, own.0)?;
        if self.satisfies(parts.iter().map(Vec::as_slice)) {
            return Ok(own.0);
        }
        Ok(self.shaped_own(&ordered, &parts, interrupt)?.len())
    }

    /// The shaped own plan (see [`Problem::shaped_own`]) from the plain own plan `own`.
    pub(super) fn shaped_own_from(
        &self,
        ordered: &Ordered<C>,
        own: &(usize, Vec<u32>),
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>> {
        let parts = Self::parts(&ordered.by_item(&own.1, interrupt)?, own.0)?;
        self.shaped_own(ordered, &parts, interrupt)
    }

    /// `count` micro-batches (at least the shaped own plan's) that keep the limits, with their
    /// costs: the plain plan at `count` when it keeps them, else [`Problem::shaped_at`].
    pub(super) fn plan_shaped(
        &self,
        ordered: &Ordered<C>,
        own: &(usize, Vec<u32>),
        shaped_own: &[Vec<u32>],
        count: usize,
        interrupt: &Interrupt,
    ) -> Result<Vec<(Vec<u32>, C)>> {
        if own.0 <= count {
            let plain = self.plan_from(ordered, own, count, interrupt)?;
            if self.satisfies(plain.iter().map(|(part, _)| part.as_slice())) {
                return Ok(plain);
            }
        }
        let parts = self.shaped_at(ordered, shaped_own, count, interrupt)?;
        alloc::collect(
            parts.into_iter().map(|part| {
                let cost = self.cost_of(&part);
                (part, cost)
            }),
            "the micro-batches",
        )
    }
}

fn copy(parts: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    let mut copy = alloc::with_capacity(parts.len(), "the micro-batches")?;
    for part in parts {
        copy.push(alloc::collect(part.iter().copied(), "a micro-batch")?);
    }
    Ok(copy)
}
