//! The local search of [`Mode::Local`](super::Mode::Local): exchanges of at most two items each way
//! between pairs of partitions, with caches of item pairs and of pairs of partitions already exhausted.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::*;

/// A multiplicative hash for the map of exhausted pairs (used for k above [`DENSE_PAIRS_MAX_K`]):
/// SipHash dominated the pair loop. The map is only looked up, never iterated, so the output does
/// not depend on the hash.
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[derive(Clone, Copy, Debug)]
struct Subset {
    len: u8,
    pos: [u32; 2],
}

impl Subset {
    const EMPTY: Subset = Subset { len: 0, pos: [0, 0] };

    fn single(position: usize) -> Self {
        Subset { len: 1, pos: [position as u32, 0] }
    }

    /// The two positions packed in the low byte of a cached pair key.
    fn pair<S: Sum>(key: S) -> Self {
        let low = key.low_byte();
        Subset { len: 2, pos: [(low >> 4) as u32, (low & 15) as u32] }
    }
}

/// A candidate exchange between a heavy and a light partition.
#[derive(Clone, Copy, Debug)]
struct Exchange<S> {
    from_heavy: Subset,
    from_light: Subset,
    /// `|2 d - D|`: smaller is a better balanced pair.
    score: S,
}

/// Pairs `(heavy, light)` found to have no improving exchange, with the step of that check: a
/// pair stays exhausted until either partition changes after it.
enum ExhaustedPairs {
    /// A k x k table for small k: it is consulted on every pair visit, and one load is much
    /// cheaper than hashing.
    Dense {
        k: usize,
        checked: Vec<u64>,
    },
    Sparse(HashMap<u64, u64, BuildHasherDefault<PairHasher>>),
}

impl ExhaustedPairs {
    fn new(k: usize) -> Result<Self, CoreError> {
        Ok(if k <= DENSE_PAIRS_MAX_K {
            ExhaustedPairs::Dense { k, checked: alloc::filled(k * k, 0, "exhausted pairs")? }
        } else {
            ExhaustedPairs::Sparse(HashMap::default())
        })
    }

    /// The step at which the pair was found exhausted, or 0.
    fn get(&self, heavy: usize, light: usize) -> u64 {
        match self {
            ExhaustedPairs::Dense { k, checked } => checked[heavy * k + light],
            ExhaustedPairs::Sparse(map) => map.get(&pair_key(heavy, light)).copied().unwrap_or(0),
        }
    }

    fn set(&mut self, heavy: usize, light: usize, step: u64) -> Result<(), CoreError> {
        match self {
            ExhaustedPairs::Dense { k, checked } => checked[heavy * *k + light] = step,
            ExhaustedPairs::Sparse(map) => {
                if map.len() >= CLEAN_CACHE_MAX {
                    map.clear();
                }
                alloc::reserve_map(map, 1, "exhausted pairs")?;
                map.insert(pair_key(heavy, light), step);
            }
        }
        Ok(())
    }
}

fn pair_key(heavy: usize, light: usize) -> u64 {
    ((heavy as u64) << 32) | light as u64
}

pub(super) struct LocalSearch<S: Sum> {
    /// Each partition's `(value, index)` items, ascending; values inline to keep scans local.
    pub(super) parts: Vec<Vec<(u64, u32)>>,
    pub(super) loads: Vec<S>,
    /// The step at which each partition last changed (0: never); `step` counts applied exchanges
    /// from 1. They date the exhausted-pair marks and the two-item sums.
    changed_at: Vec<u64>,
    step: u64,
    equal_size: bool,
    budget: u64,
    /// Per partition: its two-item subsets as packed keys `sum << 8 | p << 4 | q` (positions
    /// below [`PAIR_EXCHANGE_MAX_ITEMS`] = 16), sorted, which is the order by `(sum, p, q)`, and
    /// the `changed_at` they reflect (`u64::MAX`: none). Rebuilding them for every pair visited
    /// was most of the search's time; after an exchange they are updated instead of rebuilt.
    pair_keys: Vec<Vec<S>>,
    pair_keys_at: Vec<u64>,
    /// The cache as the work budget sees it: per partition a stamp (its `changed_at` plus one
    /// when last charged for, 0: never) and the entries charged, with their total. Kept apart
    /// from the keys so that updating them in place does not change what a given effort buys.
    pair_stamp: Vec<u64>,
    pair_charged: Vec<usize>,
    pair_cache_entries: usize,
}

impl<S: Sum> LocalSearch<S> {
    pub(super) fn new(
        values: &[u64],
        parts: Vec<Vec<u32>>,
        equal_size: bool,
        interrupt: &Interrupt,
    ) -> Result<Self, CoreError> {
        let k = parts.len();
        let mut items_of = alloc::with_capacity(k, "the partitions")?;
        for part in parts {
            interrupt.check()?;
            items_of.push(sorted_items(values, part, interrupt)?);
        }
        let parts: Vec<Vec<(u64, u32)>> = items_of;
        let loads = alloc::collect(
            parts.iter().map(|part| part.iter().fold(S::default(), |load, &(v, _)| load + S::from_u64(v))),
            "partition loads",
        )?;
        Ok(LocalSearch {
            parts,
            loads,
            changed_at: alloc::filled(k, 0, "partition steps")?,
            step: 1,
            equal_size,
            budget: 0,
            pair_keys: alloc::filled(k, Vec::new(), "pair caches")?,
            pair_keys_at: alloc::filled(k, u64::MAX, "pair caches")?,
            pair_stamp: alloc::filled(k, 0, "pair caches")?,
            pair_charged: alloc::filled(k, 0, "pair caches")?,
            pair_cache_entries: 0,
        })
    }

    /// Whether an exchange was applied (`step` counts them from 1).
    pub(super) fn moved(&self) -> bool {
        self.step > 1
    }

    fn charge(&mut self, units: usize) {
        self.budget = self.budget.saturating_sub(units as u64);
    }

    pub(super) fn run(&mut self, effort: u64, interrupt: &Interrupt) -> Result<(), CoreError> {
        self.budget = effort;
        let k = self.parts.len();
        if k < 2 {
            return Ok(());
        }
        // Partitions by load descending (index ascending on ties), kept sorted as loads change.
        let mut order = alloc::collect(0..k as u32, "partition order")?;
        order.sort_by(|&a, &b| self.loads[b as usize].cmp(&self.loads[a as usize]).then(a.cmp(&b)));
        let mut exhausted = ExhaustedPairs::new(k)?;
        let mut visits = 0usize;
        // The budget left at the last interrupt check. A visit of two partitions of millions of
        // items scans them all, so checks follow the work done as well as the visits.
        let mut checked_at = self.budget;
        loop {
            let mut found = None;
            'pairs: for hi in 0..k {
                let heavy = order[hi] as usize;
                for lo in (hi + 1..k).rev() {
                    let light = order[lo] as usize;
                    if self.budget == 0 {
                        return Ok(());
                    }
                    if visits % CHECK_EVERY == 0 || checked_at - self.budget >= CHECK_WORK {
                        interrupt.check()?;
                        checked_at = self.budget;
                    }
                    visits += 1;
                    self.budget -= 1;
                    if self.loads[light] >= self.loads[heavy] {
                        // Partners only get heavier from here on.
                        break;
                    }
                    let checked = exhausted.get(heavy, light);
                    if checked != 0 && checked >= self.changed_at[heavy].max(self.changed_at[light]) {
                        continue;
                    }
                    match self.best_exchange(heavy, light) {
                        Some(exchange) => {
                            found = Some((heavy, light, exchange));
                            break 'pairs;
                        }
                        None => exhausted.set(heavy, light, self.step)?,
                    }
                }
            }
            let Some((heavy, light, exchange)) = found else {
                return Ok(());
            };
            self.apply(heavy, light, exchange)?;
            // Repositioning scans and shifts `order`: charge it, or huge k would escape the budget.
            self.charge(k / 4 + 1);
            self.reposition(&mut order, heavy as u32);
            self.reposition(&mut order, light as u32);
        }
    }

    /// Move `part` to its place in `order` after its load changed (the rest is still sorted).
    fn reposition(&self, order: &mut Vec<u32>, part: u32) {
        let Some(from) = order.iter().position(|&p| p == part) else {
            return;
        };
        order.remove(from);
        let load = self.loads[part as usize];
        let to = order.partition_point(|&p| {
            let other = self.loads[p as usize];
            other > load || (other == load && p < part)
        });
        order.insert(to, part);
    }

    /// Make `pair_keys[part]` hold the part's current two-item subsets, charging the budget as
    /// a cache of them rebuilt on every change would cost.
    fn cache_pairs(&mut self, part: usize) {
        let stamp = self.changed_at[part] + 1;
        if self.pair_stamp[part] != stamp {
            let m = self.parts[part].len();
            let needed = m * m.saturating_sub(1) / 2;
            self.pair_cache_entries -= self.pair_charged[part];
            if self.pair_cache_entries + needed > PAIR_CACHE_MAX {
                // Bounds memory on huge k: every partition's keys go.
                self.pair_stamp.fill(0);
                self.pair_charged.fill(0);
                self.pair_keys_at.fill(u64::MAX);
                for keys in &mut self.pair_keys {
                    *keys = Vec::new();
                }
                self.pair_cache_entries = 0;
            }
            // About log2(m^2) per entry: what sorting them costs.
            self.charge(needed * (usize::BITS - needed.leading_zeros()) as usize);
            self.pair_cache_entries += needed;
            self.pair_charged[part] = needed;
            self.pair_stamp[part] = stamp;
        }
        if self.pair_keys_at[part] != self.changed_at[part] {
            // Positions must fit the 4 bits each of the packed key (callers check the size).
            debug_assert!(self.parts[part].len() <= PAIR_EXCHANGE_MAX_ITEMS);
            pairs_sorted(&self.parts[part], &mut self.pair_keys[part]);
            self.pair_keys_at[part] = self.changed_at[part];
        }
        // Debug builds (the tests) check every updated list against a rebuild.
        #[cfg(debug_assertions)]
        {
            let mut rebuilt = Vec::new();
            pairs_sorted(&self.parts[part], &mut rebuilt);
            assert_eq!(self.pair_keys[part], rebuilt, "pair keys of partition {part} are stale");
        }
    }

    /// The items of `part` before an exchange, when its pair keys are current and small enough
    /// to be updated afterwards.
    fn pairs_snapshot(&self, part: usize) -> Option<([(u64, u32); PAIR_EXCHANGE_MAX_ITEMS], usize)> {
        let items = &self.parts[part];
        if self.pair_keys_at[part] != self.changed_at[part] || items.len() > PAIR_EXCHANGE_MAX_ITEMS {
            return None;
        }
        let mut copy = [(0, 0); PAIR_EXCHANGE_MAX_ITEMS];
        copy[..items.len()].copy_from_slice(items);
        Some((copy, items.len()))
    }

    /// Bring `pair_keys[part]` from the items `old` to the current ones (both at most 16): keep
    /// the pairs of items still there with their positions renumbered, which keeps them sorted
    /// (sums are unchanged and renumbering preserves the order of positions), and merge in the
    /// pairs with a newly arrived item. An exchange moves at most two items, so this is a
    /// fraction of a rebuild.
    fn update_pairs(&mut self, part: usize, old: &[(u64, u32)]) {
        const GONE: u8 = u8::MAX;
        let items = &self.parts[part];
        let keys = &mut self.pair_keys[part];
        let mut renumber = [GONE; PAIR_EXCHANGE_MAX_ITEMS];
        let mut arrived = [false; PAIR_EXCHANGE_MAX_ITEMS];
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < items.len() {
            if i < old.len() && j < items.len() && old[i] == items[j] {
                renumber[i] = j as u8;
                i += 1;
                j += 1;
            } else if j == items.len() || (i < old.len() && old[i] < items[j]) {
                i += 1;
            } else {
                arrived[j] = true;
                j += 1;
            }
        }
        let mut kept = 0;
        for r in 0..keys.len() {
            let key = keys[r];
            let low = key.low_byte();
            let (p, q) = (renumber[(low >> 4) as usize], renumber[(low & 15) as usize]);
            // Written unconditionally and kept or overwritten: whether a pair survives is data
            // dependent, and a branch on it was mispredicted often.
            keys[kept] = ((key >> 8) << 8) | S::from_u64(((p as u64) << 4) | q as u64);
            kept += usize::from((p != GONE) & (q != GONE));
        }
        keys.truncate(kept);
        // At most two items arrive, each pairing with at most 15 others.
        let mut fresh = [S::default(); 2 * PAIR_EXCHANGE_MAX_ITEMS];
        let mut n_fresh = 0;
        for a in (0..items.len()).filter(|&a| arrived[a]) {
            for b in (0..items.len()).filter(|&b| b != a && !(arrived[b] && b < a)) {
                let (p, q) = (a.min(b), a.max(b));
                let sum = S::from_u64(items[p].0) + S::from_u64(items[q].0);
                fresh[n_fresh] = (sum << 8) | S::from_u64(((p << 4) | q) as u64);
                n_fresh += 1;
            }
        }
        let fresh = &mut fresh[..n_fresh];
        fresh.sort_unstable();
        // Merge from the back, in place.
        keys.resize(kept + n_fresh, S::default());
        let (mut a, mut b) = (kept, n_fresh);
        while b > 0 {
            let from_fresh = fresh[b - 1];
            // No key is 0 (its second position is at least 1), so 0 stands for "none left".
            let from_kept = if a > 0 { keys[a - 1] } else { S::default() };
            let take_kept = from_kept > from_fresh;
            keys[a + b - 1] = if take_kept { from_kept } else { from_fresh };
            a -= usize::from(take_kept);
            b -= usize::from(!take_kept);
        }
    }

    /// The exchange between `heavy` and `light` that balances them best, if any improves them.
    fn best_exchange(&mut self, heavy: usize, light: usize) -> Option<Exchange<S>> {
        let gap = self.loads[heavy] - self.loads[light];
        let (heavy_len, light_len) = (self.parts[heavy].len(), self.parts[light].len());
        let pairs_ok = heavy_len.max(light_len) <= PAIR_EXCHANGE_MAX_ITEMS;
        let mut best: Option<Exchange<S>> = None;
        // Cheapest kinds first; the sizes given and taken by the heavy partition.
        const KINDS: [(u8, u8); 6] = [(1, 0), (1, 1), (2, 1), (1, 2), (2, 2), (2, 0)];
        // The kinds that keep both counts, in the same order.
        const EQUAL_KINDS: [(u8, u8); 2] = [(1, 1), (2, 2)];
        let kinds: &[(u8, u8)] = if self.equal_size { &EQUAL_KINDS } else { &KINDS };
        for &(give, take) in kinds {
            // Two-item exchanges cost far more to enumerate; only pay for them when needed.
            if give + take > 2 && best.is_some() {
                break;
            }
            if self.equal_size && give != take {
                continue;
            }
            if (give == 2 || take == 2) && !pairs_ok {
                continue;
            }
            // Neither partition may be emptied, and subsets need enough items.
            if heavy_len < give as usize || light_len < take as usize {
                continue;
            }
            if heavy_len + (take as usize) <= give as usize || light_len + (give as usize) <= take as usize {
                continue;
            }
            if give == 2 {
                self.cache_pairs(heavy);
            }
            if take == 2 {
                self.cache_pairs(light);
            }
            let xs = if give == 2 {
                Side::Pairs(&self.pair_keys[heavy])
            } else {
                Side::Singles(&self.parts[heavy])
            };
            let ys = match take {
                0 => Side::Empty,
                1 => Side::Singles(&self.parts[light]),
                _ => Side::Pairs(&self.pair_keys[light]),
            };
            let units = xs.len() + ys.len();
            // Only a strictly better score than the earlier kinds' replaces their answer.
            let bar = best.map_or(gap, |b| b.score);
            let candidate = closest_difference(xs, ys, gap, bar);
            self.charge(units);
            if let Some(candidate) = candidate {
                best = Some(candidate);
            }
        }
        best
    }

    fn apply(&mut self, heavy: usize, light: usize, exchange: Exchange<S>) -> Result<(), CoreError> {
        let snapshots = [(heavy, self.pairs_snapshot(heavy)), (light, self.pairs_snapshot(light))];
        let (leaving_heavy, n_heavy) = self.take_subset(heavy, exchange.from_heavy);
        let (leaving_light, n_light) = self.take_subset(light, exchange.from_light);
        for &item in &leaving_heavy[..n_heavy] {
            self.put(light, item)?;
        }
        for &item in &leaving_light[..n_light] {
            self.put(heavy, item)?;
        }
        self.step += 1;
        self.changed_at[heavy] = self.step;
        self.changed_at[light] = self.step;
        for (part, snapshot) in snapshots {
            if let Some((old, len)) = snapshot {
                if self.parts[part].len() <= PAIR_EXCHANGE_MAX_ITEMS {
                    self.update_pairs(part, &old[..len]);
                    self.pair_keys_at[part] = self.step;
                }
            }
        }
        Ok(())
    }

    fn take_subset(&mut self, part: usize, subset: Subset) -> ([(u64, u32); 2], usize) {
        let mut taken = [(0, 0); 2];
        let n = subset.len as usize;
        // Remove the later position first so the earlier one stays valid.
        let mut positions = subset.pos;
        if n == 2 && positions[0] < positions[1] {
            positions.swap(0, 1);
        }
        for (slot, &p) in taken.iter_mut().zip(&positions[..n]) {
            let item = self.parts[part].remove(p as usize);
            self.loads[part] -= S::from_u64(item.0);
            *slot = item;
        }
        (taken, n)
    }

    fn put(&mut self, part: usize, item: (u64, u32)) -> Result<(), CoreError> {
        alloc::reserve(&mut self.parts[part], 1, "a partition")?;
        let at = self.parts[part].partition_point(|&other| other < item);
        self.parts[part].insert(at, item);
        self.loads[part] += S::from_u64(item.0);
        Ok(())
    }

    pub(super) fn into_output(self) -> Result<Vec<Vec<u32>>, CoreError> {
        let LocalSearch { parts, loads, .. } = self;
        let mut output = alloc::with_capacity(parts.len(), "the refined partitions")?;
        for (load, part) in loads.into_iter().zip(parts) {
            let mut indexes = alloc::collect(part.into_iter().map(|(_, i)| i), "a refined partition")?;
            indexes.sort_unstable();
            output.push((load, indexes));
        }
        // Validated partitions are never empty, so the first index is always there.
        output.sort_by(|a: &(S, Vec<u32>), b| b.0.cmp(&a.0).then_with(|| a.1.first().cmp(&b.1.first())));
        alloc::collect(output.into_iter().map(|(_, part)| part), "the refined partitions")
    }
}

/// From this many items a partition's items are sorted by the partitioners' interruptible sort
/// (a sort of millions of items takes a good part of a second).
const INTERRUPTIBLE_SORT_FROM: usize = 1 << 16;

/// `part`'s items as `(value, index)` pairs, ascending.
pub(super) fn sorted_items(
    values: &[u64],
    part: Vec<u32>,
    interrupt: &Interrupt,
) -> Result<Vec<(u64, u32)>, CoreError> {
    if part.len() >= INTERRUPTIBLE_SORT_FROM && part.is_sorted() {
        // Ascending by (value, position) is ascending by (value, index) when the indexes are.
        let mut part_values = alloc::with_capacity(part.len(), "a partition")?;
        for chunk in part.chunks(CHECK_EVERY) {
            interrupt.check()?;
            part_values.extend(chunk.iter().map(|&index| values[index as usize]));
        }
        let sorted = crate::sort::sort_items(&part_values, interrupt)?;
        drop(part_values);
        let mut items = alloc::with_capacity(part.len(), "a partition")?;
        for (values, positions) in sorted.values.chunks(CHECK_EVERY).zip(sorted.index.chunks(CHECK_EVERY)) {
            interrupt.check()?;
            items.extend(values.iter().zip(positions).map(|(&value, &at)| (value, part[at as usize])));
        }
        return Ok(items);
    }
    let mut items = alloc::collect(part.into_iter().map(|i| (values[i as usize], i)), "a partition")?;
    items.sort_unstable();
    Ok(items)
}

/// Every two items of `items` (ascending, at most 16) as packed keys `sum << 8 | p << 4 | q`,
/// ascending, into `out`. (Merging the already ascending rows instead of sorting measured slower.)
fn pairs_sorted<S: Sum>(items: &[(u64, u32)], out: &mut Vec<S>) {
    out.clear();
    out.reserve(items.len() * items.len().saturating_sub(1) / 2);
    for (p, &(v, _)) in items.iter().enumerate() {
        for (q, &(w, _)) in items.iter().enumerate().skip(p + 1) {
            let sum = S::from_u64(v) + S::from_u64(w);
            out.push((sum << 8) | S::from_u64(((p << 4) | q) as u64));
        }
    }
    out.sort_unstable();
}

/// The subsets one side of an exchange offers, ascending by `(sum, positions)`.
#[derive(Clone, Copy)]
enum Side<'a, S> {
    /// Only the empty subset.
    Empty,
    /// Every single item of the partition.
    Singles(&'a [(u64, u32)]),
    /// Every two items, as cached packed keys.
    Pairs(&'a [S]),
}

impl<S> Side<'_, S> {
    fn len(&self) -> usize {
        match self {
            Side::Empty => 1,
            Side::Singles(items) => items.len(),
            Side::Pairs(keys) => keys.len(),
        }
    }
}

/// Among `x - y` for subsets `x` of the heavy side, `y` of the light side, the one strictly
/// between 0 and `gap` that is closest to `gap / 2`, if its score `|2 (x - y) - gap|` is below
/// `bar`; the first such in scan order on ties. One function per pair of side kinds, so each
/// scan compiles to a tight loop over plain words.
fn closest_difference<S: Sum>(xs: Side<'_, S>, ys: Side<'_, S>, gap: S, bar: S) -> Option<Exchange<S>> {
    let single = |items: &[(u64, u32)], i: usize| S::from_u64(items[i].0);
    let pair = |keys: &[S], i: usize| keys[i] >> 8;
    let found = match (xs, ys) {
        (Side::Singles(h), Side::Empty) => scan(h.len(), |i| single(h, i), 1, |_| S::default(), gap, bar)
            .map(|(x, _, s)| (Subset::single(x), Subset::EMPTY, s)),
        (Side::Singles(h), Side::Singles(l)) => {
            scan(h.len(), |i| single(h, i), l.len(), |j| single(l, j), gap, bar)
                .map(|(x, y, s)| (Subset::single(x), Subset::single(y), s))
        }
        (Side::Pairs(h), Side::Singles(l)) => {
            scan(h.len(), |i| pair(h, i), l.len(), |j| single(l, j), gap, bar)
                .map(|(x, y, s)| (Subset::pair(h[x]), Subset::single(y), s))
        }
        (Side::Singles(h), Side::Pairs(l)) => {
            scan(h.len(), |i| single(h, i), l.len(), |j| pair(l, j), gap, bar)
                .map(|(x, y, s)| (Subset::single(x), Subset::pair(l[y]), s))
        }
        (Side::Pairs(h), Side::Pairs(l)) => scan(h.len(), |i| pair(h, i), l.len(), |j| pair(l, j), gap, bar)
            .map(|(x, y, s)| (Subset::pair(h[x]), Subset::pair(l[y]), s)),
        (Side::Pairs(h), Side::Empty) => scan(h.len(), |i| pair(h, i), 1, |_| S::default(), gap, bar)
            .map(|(x, _, s)| (Subset::pair(h[x]), Subset::EMPTY, s)),
        // The heavy partition always gives at least one item.
        (Side::Empty, _) => None,
    };
    found.map(|(from_heavy, from_light, score)| Exchange { from_heavy, from_light, score })
}

/// The scan behind [`closest_difference`] over `nx` ascending sums `x(i)` and `ny` ascending
/// sums `y(j)`: for each `x` only the two `y` around `x - gap / 2` can be closest, and that point
/// only moves right as `x` grows. Returns `(i, j, score)`.
#[inline(always)]
fn scan<S: Sum>(
    nx: usize,
    x: impl Fn(usize) -> S,
    ny: usize,
    y: impl Fn(usize) -> S,
    gap: S,
    mut bar: S,
) -> Option<(usize, usize, S)> {
    // Scores have the parity of `gap`: once one reaches it nothing can strictly beat it.
    let floor = gap & S::from_u64(1);
    if bar <= floor {
        return None;
    }
    // Most pairs visited have no improving exchange at all (proving that is the bulk of the
    // search); a leaner pass settles those before the scoring scan.
    if !any_within(nx, &x, ny, &y, gap - bar, gap + bar) {
        return None;
    }
    let mut best = None;
    let mut j = 0;
    for i in 0..nx {
        let xv = x(i);
        let doubled = xv + xv;
        // Advance to the first y with 2 y >= 2 x - gap, i.e. with x - y <= gap / 2. Targets grow
        // with x, so every y before it has x - y > gap / 2 > 0 and every y from it x - y <= gap / 2.
        if doubled > gap {
            let target = doubled - gap;
            while j < ny && y(j) + y(j) < target {
                j += 1;
            }
        }
        if j > 0 {
            let d = xv - y(j - 1);
            if d < gap {
                let score = d + d - gap;
                if score < bar {
                    bar = score;
                    best = Some((i, j - 1, score));
                }
            }
        }
        if j < ny {
            let yv = y(j);
            if xv > yv {
                let d = xv - yv;
                let score = gap - (d + d);
                if score < bar {
                    bar = score;
                    best = Some((i, j, score));
                }
            }
        }
        if bar == floor {
            break;
        }
    }
    best
}

/// Whether some `x(i) - y(j)` (ascending sums as in [`scan`]) has `low < 2 (x - y) < high`,
/// which for `low = gap - bar`, `high = gap + bar` is exactly a score below `bar`.
#[inline(always)]
fn any_within<S: Sum>(
    nx: usize,
    x: &impl Fn(usize) -> S,
    ny: usize,
    y: &impl Fn(usize) -> S,
    low: S,
    high: S,
) -> bool {
    // One merge step per iteration, advancing i or j without a branch: the data-dependent exits
    // of a per-x inner loop were mispredicted about once per x, which cost more than the rest.
    let (mut i, mut j, mut found) = (0, 0, 0);
    // Non-short-circuit `&` and integer flags keep the compiler from branching on the data.
    while (i < nx) & (j < ny) & (found == 0) {
        let xx = x(i) + x(i);
        let yy = y(j) + y(j);
        // 1 when y(j) is too small for x(i) (2 (x - y) >= high): it stays too small for every
        // later x. Otherwise y(j) gives the largest difference below high for x(i), later y only
        // smaller ones.
        let skip_y = usize::from(yy + high <= xx);
        found |= (skip_y ^ 1) & usize::from(xx > yy + low);
        j += skip_y;
        i += skip_y ^ 1;
    }
    found != 0
}
