//! Refinement of a k-way partition: lower the heaviest partition's load by exchanging items.
//!
//! The input is any valid partition (in practice the largest differencing answer). Two modes:
//!
//! * [`Mode::Local`]: local search over pairs of partitions. For a pair whose loads differ by
//!   `D > 0`, an exchange moves a subset of at most two items from the heavier partition to the
//!   lighter one and a subset of at most two items back, shifting a net `d` from heavy to light.
//!   It is applied only when `0 < d < D`, picking the `d` closest to `D / 2`. Both new loads then lie
//!   strictly between the two old ones, so the maximum load never grows and the sum of squared loads
//!   strictly falls, which is why the search terminates even without its work budget. Pairs are
//!   visited heaviest partition first, partnered lightest first, so a tied heaviest partition is
//!   treated like any other heavy one. With `equal_size` only exchanges of as many items as they
//!   receive are allowed (every partition keeps its count); otherwise plain moves and unequal
//!   exchanges are allowed too, but no partition is ever emptied.
//! * [`Mode::Exact`]: for at most [`EXACT_MAX_ITEMS`] items, a depth-first branch and bound over
//!   item-to-partition assignments, seeded with the local answer and bounded by a node budget. If
//!   the budget runs out, the best answer found so far (never worse than the local one) is kept.
//!
//! Output order (the tie rule): partitions by load descending, equal loads by smallest index
//! ascending; indexes ascending inside each partition. Sums are exact: `u64` when the total is
//! below 2^55, `u128` otherwise.
//! Nothing depends on wall-clock time or hashing order, so the output is deterministic.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Add, AddAssign, BitAnd, BitOr, Shl, Shr, Sub, SubAssign};

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

/// Which refinement to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pairwise exchange local search under a work budget.
    Local,
    /// Local search, then a complete branch and bound under a node budget (small inputs only).
    Exact,
}

/// Local search work budget: a fixed base plus this many units per item.
pub const LOCAL_EFFORT_BASE: u64 = 1 << 16;
/// See [`LOCAL_EFFORT_BASE`].
pub const LOCAL_EFFORT_PER_ITEM: u64 = 4;
/// Default node budget of the exact search.
pub const EXACT_DEFAULT_NODES: u64 = 1 << 18;
/// Above this many items the exact search is not attempted (its recursion depth is the item count,
/// and beyond it the budget would almost never prove anything).
pub const EXACT_MAX_ITEMS: usize = 32;
/// Exchanges of two items are only tried between partitions this small: their cost grows with the
/// square of the partition size, and large partitions are already balanced by the 1-item ones.
const PAIR_EXCHANGE_MAX_ITEMS: usize = 16;
/// Cap on the cached two-item sums (all partitions together), to bound memory on huge k; past
/// it the cache is emptied and refilled on demand.
const PAIR_CACHE_MAX: usize = if cfg!(test) { 1 << 10 } else { 1 << 20 };
/// Up to this many partitions, exhausted pairs are kept in a dense k x k table (512 KiB at most).
const DENSE_PAIRS_MAX_K: usize = 256;
/// Above it they are kept in a map that is emptied when it grows past this many entries, which
/// keeps memory bounded on huge k (the marks only save repeated work). Tests use small caps so
/// that both caches overflow.
const CLEAN_CACHE_MAX: usize = if cfg!(test) { 1 << 10 } else { 1 << 20 };

/// Why a partition cannot be refined; the text names the `partitions` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefineError {
    NoPartitions,
    EmptyPartition { partition: usize },
    IndexOutOfRange { partition: usize, index: u32, n_values: usize },
    DuplicateIndex { index: u32 },
    MissingIndex { index: usize },
}

impl fmt::Display for RefineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefineError::NoPartitions => write!(f, "partitions must hold at least one partition, got none"),
            RefineError::EmptyPartition { partition } => {
                write!(f, "partitions[{partition}] is empty; every partition needs at least one index")
            }
            RefineError::IndexOutOfRange { partition, index, n_values } => {
                write!(f, "partitions[{partition}] holds index {index}, but there are only {n_values} values")
            }
            RefineError::DuplicateIndex { index } => {
                write!(f, "partitions holds index {index} more than once")
            }
            RefineError::MissingIndex { index } => {
                write!(f, "partitions does not hold index {index}; every index must appear once")
            }
        }
    }
}

impl std::error::Error for RefineError {}

fn local_budget(n_items: usize) -> u64 {
    LOCAL_EFFORT_BASE.saturating_add(LOCAL_EFFORT_PER_ITEM.saturating_mul(n_items as u64))
}

/// Refine `parts` (a partition of `0..values.len()`) to a maximum load no larger than its own.
///
/// `effort` bounds the work: for [`Mode::Local`] in work units (one per pair of partitions visited
/// and one per candidate item or item pair examined), for [`Mode::Exact`] in search nodes (its
/// local phase uses the default local budget). `None` picks the default:
/// [`LOCAL_EFFORT_BASE`] plus [`LOCAL_EFFORT_PER_ITEM`] per item, or [`EXACT_DEFAULT_NODES`].
pub fn refine(
    values: &[u64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
) -> Result<Vec<Vec<u32>>, RefineError> {
    validate(values.len(), &parts)?;
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    // Same search either way; u64 sums halve the cost of the exchange scans when they fit.
    Ok(if total < U64_SUMS_BELOW {
        refine_with::<u64>(values, parts, equal_size, mode, effort)
    } else {
        refine_with::<u128>(values, parts, equal_size, mode, effort)
    })
}

fn refine_with<S: Sum>(
    values: &[u64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
) -> Vec<Vec<u32>> {
    let n = values.len();
    let local_effort = match mode {
        Mode::Local => effort.unwrap_or_else(|| local_budget(n)),
        Mode::Exact => local_budget(n),
    };
    let mut search = LocalSearch::<S>::new(values, parts, equal_size);
    search.run(local_effort);
    if mode == Mode::Exact && n <= EXACT_MAX_ITEMS {
        let nodes = effort.unwrap_or(EXACT_DEFAULT_NODES);
        let counts: Vec<usize> = search.parts.iter().map(Vec::len).collect();
        let current_max = search.loads.iter().copied().max().map_or(0, Sum::to_u128);
        if let Some(better) = exact_search(values, &counts, equal_size, current_max, nodes) {
            // The exact search only cares about the maximum; polish the other loads too.
            search = LocalSearch::new(values, better, equal_size);
            search.run(local_budget(n));
        }
    }
    search.into_output()
}

fn validate(n_values: usize, parts: &[Vec<u32>]) -> Result<(), RefineError> {
    if parts.is_empty() {
        return Err(RefineError::NoPartitions);
    }
    let mut seen = vec![false; n_values];
    for (p, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Err(RefineError::EmptyPartition { partition: p });
        }
        for &index in part {
            let slot = seen.get_mut(index as usize).ok_or(RefineError::IndexOutOfRange {
                partition: p,
                index,
                n_values,
            })?;
            if *slot {
                return Err(RefineError::DuplicateIndex { index });
            }
            *slot = true;
        }
    }
    match seen.iter().position(|&s| !s) {
        Some(index) => Err(RefineError::MissingIndex { index }),
        None => Ok(()),
    }
}

/// Below this total, loads, doubled differences and the packed two-item keys (a sum shifted left
/// by 8 bits) all fit in a `u64`.
const U64_SUMS_BELOW: u128 = 1 << 55;

/// Load arithmetic of the local search: `u64` when the total allows it, else `u128` (exact for
/// any input: at most 2^32 items below 2^63 each).
trait Sum:
    Copy
    + Ord
    + Default
    + fmt::Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + AddAssign
    + SubAssign
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
    + BitOr<Output = Self>
    + BitAnd<Output = Self>
{
    fn from_u64(value: u64) -> Self;
    fn to_u128(self) -> u128;
    fn low_byte(self) -> u8;
}

impl Sum for u64 {
    #[inline]
    fn from_u64(value: u64) -> Self {
        value
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self as u128
    }
    #[inline]
    fn low_byte(self) -> u8 {
        self as u8
    }
}

impl Sum for u128 {
    #[inline]
    fn from_u64(value: u64) -> Self {
        value as u128
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self
    }
    #[inline]
    fn low_byte(self) -> u8 {
        self as u8
    }
}

/// A subset of at most two items of one partition, by position in its value-sorted item list.
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
    fn new(k: usize) -> Self {
        if k <= DENSE_PAIRS_MAX_K {
            ExhaustedPairs::Dense { k, checked: vec![0; k * k] }
        } else {
            ExhaustedPairs::Sparse(HashMap::default())
        }
    }

    /// The step at which the pair was found exhausted, or 0.
    fn get(&self, heavy: usize, light: usize) -> u64 {
        match self {
            ExhaustedPairs::Dense { k, checked } => checked[heavy * k + light],
            ExhaustedPairs::Sparse(map) => map.get(&pair_key(heavy, light)).copied().unwrap_or(0),
        }
    }

    fn set(&mut self, heavy: usize, light: usize, step: u64) {
        match self {
            ExhaustedPairs::Dense { k, checked } => checked[heavy * *k + light] = step,
            ExhaustedPairs::Sparse(map) => {
                if map.len() >= CLEAN_CACHE_MAX {
                    map.clear();
                }
                map.insert(pair_key(heavy, light), step);
            }
        }
    }
}

fn pair_key(heavy: usize, light: usize) -> u64 {
    ((heavy as u64) << 32) | light as u64
}

struct LocalSearch<S: Sum> {
    /// Each partition's `(value, index)` items, ascending; values inline to keep scans local.
    parts: Vec<Vec<(u64, u32)>>,
    loads: Vec<S>,
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
    fn new(values: &[u64], parts: Vec<Vec<u32>>, equal_size: bool) -> Self {
        let parts: Vec<Vec<(u64, u32)>> = parts
            .into_iter()
            .map(|part| {
                let mut items: Vec<(u64, u32)> = part.into_iter().map(|i| (values[i as usize], i)).collect();
                items.sort_unstable();
                items
            })
            .collect();
        let loads = parts
            .iter()
            .map(|part| part.iter().fold(S::default(), |load, &(v, _)| load + S::from_u64(v)))
            .collect();
        let k = parts.len();
        LocalSearch {
            parts,
            loads,
            changed_at: vec![0; k],
            step: 1,
            equal_size,
            budget: 0,
            pair_keys: vec![Vec::new(); k],
            pair_keys_at: vec![u64::MAX; k],
            pair_stamp: vec![0; k],
            pair_charged: vec![0; k],
            pair_cache_entries: 0,
        }
    }

    fn charge(&mut self, units: usize) {
        self.budget = self.budget.saturating_sub(units as u64);
    }

    fn run(&mut self, effort: u64) {
        self.budget = effort;
        let k = self.parts.len();
        if k < 2 {
            return;
        }
        // Partitions by load descending (index ascending on ties), kept sorted as loads change.
        let mut order: Vec<u32> = (0..k as u32).collect();
        order.sort_by(|&a, &b| self.loads[b as usize].cmp(&self.loads[a as usize]).then(a.cmp(&b)));
        let mut exhausted = ExhaustedPairs::new(k);
        loop {
            let mut found = None;
            'pairs: for hi in 0..k {
                let heavy = order[hi] as usize;
                for lo in (hi + 1..k).rev() {
                    let light = order[lo] as usize;
                    if self.budget == 0 {
                        return;
                    }
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
                        None => exhausted.set(heavy, light, self.step),
                    }
                }
            }
            let Some((heavy, light, exchange)) = found else {
                return;
            };
            self.apply(heavy, light, exchange);
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

    fn apply(&mut self, heavy: usize, light: usize, exchange: Exchange<S>) {
        let snapshots = [(heavy, self.pairs_snapshot(heavy)), (light, self.pairs_snapshot(light))];
        let (leaving_heavy, n_heavy) = self.take_subset(heavy, exchange.from_heavy);
        let (leaving_light, n_light) = self.take_subset(light, exchange.from_light);
        for &item in &leaving_heavy[..n_heavy] {
            self.put(light, item);
        }
        for &item in &leaving_light[..n_light] {
            self.put(heavy, item);
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

    fn put(&mut self, part: usize, item: (u64, u32)) {
        let at = self.parts[part].partition_point(|&other| other < item);
        self.parts[part].insert(at, item);
        self.loads[part] += S::from_u64(item.0);
    }

    fn into_output(self) -> Vec<Vec<u32>> {
        let LocalSearch { parts, loads, .. } = self;
        let mut output: Vec<(S, Vec<u32>)> = loads
            .into_iter()
            .zip(parts)
            .map(|(load, part)| {
                let mut indexes: Vec<u32> = part.into_iter().map(|(_, i)| i).collect();
                indexes.sort_unstable();
                (load, indexes)
            })
            .collect();
        // Validated partitions are never empty, so the first index is always there.
        output.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.first().cmp(&b.1.first())));
        output.into_iter().map(|(_, part)| part).collect()
    }
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

/// Complete search for an assignment whose maximum load is below `upper`, keeping each partition's
/// count (`equal_size`) or only keeping partitions non-empty. Returns the best partition found, or
/// `None` when none beats `upper` (or the node budget ran out before one was found).
fn exact_search(
    values: &[u64],
    counts: &[usize],
    equal_size: bool,
    upper: u128,
    nodes: u64,
) -> Option<Vec<Vec<u32>>> {
    let n = values.len();
    let k = counts.len();
    let mut items: Vec<u32> = (0..n as u32).collect();
    items.sort_unstable_by(|&a, &b| values[b as usize].cmp(&values[a as usize]).then(a.cmp(&b)));
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    let largest = items.first().map_or(0, |&i| values[i as usize] as u128);
    let mut lower_bound = total.div_ceil(k as u128).max(largest);
    if equal_size {
        // The largest item's partition also holds at least `c - 1` others, at least the smallest.
        let c = counts.iter().copied().min().unwrap_or(1);
        let smallest: u128 =
            items.iter().rev().take(c.saturating_sub(1)).map(|&i| values[i as usize] as u128).sum();
        lower_bound = lower_bound.max(largest + smallest);
    }
    if upper <= lower_bound {
        return None;
    }
    let mut suffix = vec![0u128; n + 1];
    for i in (0..n).rev() {
        suffix[i] = suffix[i + 1] + values[items[i] as usize] as u128;
    }
    let mut search = Exact {
        values,
        items,
        suffix,
        capacity: if equal_size { counts.to_vec() } else { vec![n; k] },
        equal_size,
        loads: vec![0; k],
        counts: vec![0; k],
        assignment: vec![0; n],
        best: upper,
        best_assignment: None,
        lower_bound,
        nodes_left: nodes,
        stop: false,
    };
    search.dfs(0);
    let assignment = search.best_assignment?;
    let mut parts = vec![Vec::new(); k];
    for (position, &part) in assignment.iter().enumerate() {
        parts[part].push(search.items[position]);
    }
    Some(parts)
}

struct Exact<'a> {
    values: &'a [u64],
    /// Items by value descending: big items first prune hardest.
    items: Vec<u32>,
    /// `suffix[i]`: total value of `items[i..]`.
    suffix: Vec<u128>,
    capacity: Vec<usize>,
    equal_size: bool,
    loads: Vec<u128>,
    counts: Vec<usize>,
    /// Partition of `items[i]`, valid for the assigned prefix.
    assignment: Vec<usize>,
    /// Maximum load to beat (that of the best answer so far).
    best: u128,
    best_assignment: Option<Vec<usize>>,
    lower_bound: u128,
    nodes_left: u64,
    stop: bool,
}

impl Exact<'_> {
    fn dfs(&mut self, i: usize) {
        if self.nodes_left == 0 {
            self.stop = true;
            return;
        }
        self.nodes_left -= 1;
        let n = self.items.len();
        let k = self.loads.len();
        if i == n {
            self.best = self.loads.iter().copied().max().unwrap_or(0);
            self.best_assignment = Some(self.assignment.clone());
            self.stop = self.best <= self.lower_bound;
            return;
        }
        // Loads must stay <= limit; best > lower_bound >= 0 here, so this cannot underflow.
        let limit = self.best - 1;
        let room: u128 = (0..k)
            .filter(|&p| self.counts[p] < self.capacity[p])
            .map(|p| limit.saturating_sub(self.loads[p]))
            .sum();
        if room < self.suffix[i] {
            return;
        }
        if !self.equal_size {
            let empty = self.counts.iter().filter(|&&c| c == 0).count();
            if empty > n - i {
                return;
            }
        }
        let value = self.values[self.items[i] as usize] as u128;
        // k <= n <= EXACT_MAX_ITEMS (partitions are non-empty): fixed arrays avoid allocating
        // in every node, which was most of the search's time.
        let mut order = [0u8; EXACT_MAX_ITEMS];
        for (p, slot) in order.iter_mut().enumerate().take(k) {
            *slot = p as u8;
        }
        order[..k].sort_unstable_by_key(|&p| (self.loads[p as usize], p));
        // Partitions that look alike for the rest of the search lead to mirror-image subtrees.
        let mut tried = [(0u128, 0usize, 0usize); EXACT_MAX_ITEMS];
        let mut n_tried = 0;
        for &p in &order[..k] {
            let p = p as usize;
            if self.counts[p] >= self.capacity[p] || self.loads[p] + value > self.best - 1 {
                continue;
            }
            let look = if self.equal_size {
                (self.loads[p], self.counts[p], self.capacity[p])
            } else {
                (self.loads[p], usize::from(self.counts[p] > 0), 0)
            };
            if tried[..n_tried].contains(&look) {
                continue;
            }
            tried[n_tried] = look;
            n_tried += 1;
            self.loads[p] += value;
            self.counts[p] += 1;
            self.assignment[i] = p;
            self.dfs(i + 1);
            self.loads[p] -= value;
            self.counts[p] -= 1;
            if self.stop {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_load(values: &[u64], parts: &[Vec<u32>]) -> u128 {
        parts.iter().map(|p| p.iter().map(|&i| values[i as usize] as u128).sum::<u128>()).max().unwrap_or(0)
    }

    /// Smallest maximum load over every assignment (k^n of them), with the count rule.
    fn brute_force(values: &[u64], counts: &[usize], equal_size: bool) -> u128 {
        let n = values.len();
        let k = counts.len();
        let mut best = u128::MAX;
        let mut assignment = vec![0usize; n];
        loop {
            let mut loads = vec![0u128; k];
            let mut sizes = vec![0usize; k];
            for (i, &p) in assignment.iter().enumerate() {
                loads[p] += values[i] as u128;
                sizes[p] += 1;
            }
            let ok = if equal_size {
                let mut a = sizes.clone();
                let mut b = counts.to_vec();
                a.sort_unstable();
                b.sort_unstable();
                a == b
            } else {
                sizes.iter().all(|&s| s > 0)
            };
            if ok {
                best = best.min(loads.into_iter().max().unwrap_or(0));
            }
            let mut digit = 0;
            loop {
                if digit == n {
                    return best;
                }
                assignment[digit] += 1;
                if assignment[digit] < k {
                    break;
                }
                assignment[digit] = 0;
                digit += 1;
            }
        }
    }

    /// A small deterministic generator so the tests need no crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    fn round_robin(n: usize, k: usize) -> Vec<Vec<u32>> {
        let mut parts = vec![Vec::new(); k];
        for i in 0..n {
            parts[i % k].push(i as u32);
        }
        parts
    }

    fn check_valid(values: &[u64], input: &[Vec<u32>], output: &[Vec<u32>], equal_size: bool) {
        assert_eq!(output.len(), input.len());
        let mut seen = vec![false; values.len()];
        for part in output {
            assert!(!part.is_empty());
            assert!(part.windows(2).all(|w| w[0] < w[1]));
            for &i in part {
                assert!(!seen[i as usize]);
                seen[i as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        let loads: Vec<u128> =
            output.iter().map(|p| p.iter().map(|&i| values[i as usize] as u128).sum()).collect();
        for (w, pair) in loads.windows(2).zip(output.windows(2)) {
            assert!(w[0] > w[1] || (w[0] == w[1] && pair[0][0] < pair[1][0]));
        }
        assert!(max_load(values, output) <= max_load(values, input));
        if equal_size {
            let mut a: Vec<usize> = input.iter().map(Vec::len).collect();
            let mut b: Vec<usize> = output.iter().map(Vec::len).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn swap_fixes_an_unbalanced_pair() {
        let values = [10, 9, 1, 2];
        let parts = vec![vec![0, 1], vec![2, 3]];
        let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        check_valid(&values, &parts, &out, true);
        assert_eq!(max_load(&values, &out), 11);
    }

    #[test]
    fn moves_only_when_counts_are_free() {
        let values = [5, 5, 5, 1];
        let parts = vec![vec![0, 1, 2], vec![3]];
        let fixed = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        assert_eq!(max_load(&values, &fixed), 11);
        let free = refine(&values, parts.clone(), false, Mode::Local, None).unwrap();
        assert_eq!(max_load(&values, &free), 10);
        check_valid(&values, &parts, &free, false);
    }

    #[test]
    fn never_empties_a_partition() {
        let values = [100, 1];
        let parts = vec![vec![0], vec![1]];
        let out = refine(&values, parts, false, Mode::Exact, None).unwrap();
        assert_eq!(out, vec![vec![0], vec![1]]);
    }

    #[test]
    fn two_for_two_exchange_is_used() {
        // No single move or swap helps; swapping {6, 5} for {9, 1} does.
        let values = [6, 5, 7, 9, 1, 4];
        let parts = vec![vec![0, 1, 2], vec![3, 4, 5]];
        let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        check_valid(&values, &parts, &out, true);
        assert_eq!(max_load(&values, &out), 16);
    }

    #[test]
    fn tied_heaviest_partitions_are_both_relieved() {
        let values = [10, 10, 1, 1, 10, 10];
        let parts = vec![vec![0, 1], vec![4, 5], vec![2, 3]];
        let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        check_valid(&values, &parts, &out, true);
        assert_eq!(max_load(&values, &out), 20);
        let out = refine(&values, parts.clone(), false, Mode::Local, None).unwrap();
        assert_eq!(max_load(&values, &out), 20);
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn tie_rule_orders_equal_loads_by_smallest_index() {
        let values = [3, 3, 3, 3];
        let parts = vec![vec![3, 1], vec![2, 0]];
        let out = refine(&values, parts, true, Mode::Local, None).unwrap();
        assert_eq!(out, vec![vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let big = (1u64 << 63) - 1;
        let values = [big, big, big, 1, 0, big];
        let parts = vec![vec![0, 1, 2], vec![3, 4, 5]];
        let out = refine(&values, parts.clone(), true, Mode::Exact, None).unwrap();
        check_valid(&values, &parts, &out, true);
        assert_eq!(max_load(&values, &out), 2 * big as u128 + 1);
    }

    #[test]
    fn zero_effort_only_reorders() {
        let values = [1, 2, 30, 40];
        let parts = vec![vec![2, 3], vec![1, 0]];
        let out = refine(&values, parts, true, Mode::Local, Some(0)).unwrap();
        assert_eq!(out, vec![vec![2, 3], vec![0, 1]]);
    }

    #[test]
    fn invalid_partitions_are_errors() {
        let values = [1, 2, 3];
        assert_eq!(refine(&values, vec![], false, Mode::Local, None), Err(RefineError::NoPartitions));
        assert_eq!(
            refine(&values, vec![vec![0, 1, 2], vec![]], false, Mode::Local, None),
            Err(RefineError::EmptyPartition { partition: 1 })
        );
        assert_eq!(
            refine(&values, vec![vec![0, 1], vec![5]], false, Mode::Local, None),
            Err(RefineError::IndexOutOfRange { partition: 1, index: 5, n_values: 3 })
        );
        assert_eq!(
            refine(&values, vec![vec![0, 1], vec![1, 2]], false, Mode::Local, None),
            Err(RefineError::DuplicateIndex { index: 1 })
        );
        assert_eq!(
            refine(&values, vec![vec![0], vec![2]], false, Mode::Local, None),
            Err(RefineError::MissingIndex { index: 1 })
        );
        assert!(RefineError::MissingIndex { index: 1 }.to_string().contains("partitions"));
    }

    #[test]
    fn local_is_valid_and_never_worse_on_random_inputs() {
        let mut rng = Lcg(7);
        for case in 0..400 {
            let k = 1 + (rng.next() % 6) as usize;
            let per = 1 + (rng.next() % 6) as usize;
            let equal_size = case % 2 == 0;
            let n = if equal_size { k * per } else { k + (rng.next() % 20) as usize };
            let spread = [2, 10, 1000, u32::MAX as u64][case % 4];
            let values: Vec<u64> = (0..n).map(|_| rng.next() % spread).collect();
            let parts = round_robin(n, k);
            // A small node budget keeps the debug build fast while still running out of it.
            for (mode, effort) in [(Mode::Local, None), (Mode::Exact, Some(20_000))] {
                let out = refine(&values, parts.clone(), equal_size, mode, effort).unwrap();
                check_valid(&values, &parts, &out, equal_size);
                let again = refine(&values, parts.clone(), equal_size, mode, effort).unwrap();
                assert_eq!(out, again);
            }
        }
    }

    #[test]
    fn exact_matches_brute_force_on_tiny_inputs() {
        let mut rng = Lcg(11);
        for case in 0..300 {
            let k = 2 + (rng.next() % 3) as usize;
            let equal_size = case % 2 == 0;
            let n =
                if equal_size { k * (1 + (rng.next() % 3) as usize) } else { k + (rng.next() % 5) as usize };
            if n > 9 {
                continue;
            }
            let spread = [5, 100, 1 << 40][case % 3];
            let values: Vec<u64> = (0..n).map(|_| rng.next() % spread).collect();
            let parts = round_robin(n, k);
            let counts: Vec<usize> = parts.iter().map(Vec::len).collect();
            let out = refine(&values, parts.clone(), equal_size, Mode::Exact, None).unwrap();
            check_valid(&values, &parts, &out, equal_size);
            assert_eq!(
                max_load(&values, &out),
                brute_force(&values, &counts, equal_size),
                "{values:?} k={k}"
            );
        }
    }

    #[test]
    fn exact_out_of_nodes_keeps_the_local_answer() {
        let mut rng = Lcg(3);
        let values: Vec<u64> = (0..24).map(|_| rng.next() % 100_000).collect();
        let parts = round_robin(24, 4);
        let local = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        let starved = refine(&values, parts.clone(), true, Mode::Exact, Some(1)).unwrap();
        assert_eq!(local, starved);
    }

    #[test]
    fn many_partitions_use_the_bounded_caches() {
        // k above DENSE_PAIRS_MAX_K, and (under cfg(test)) small cache caps, so both caches
        // overflow and are emptied along the way.
        let mut rng = Lcg(9);
        for equal_size in [true, false] {
            let n = 300 * 8;
            let values: Vec<u64> = (0..n).map(|_| rng.next() % 40_000).collect();
            let parts = round_robin(n, 300);
            let out = refine(&values, parts.clone(), equal_size, Mode::Local, None).unwrap();
            check_valid(&values, &parts, &out, equal_size);
            assert!(max_load(&values, &out) < max_load(&values, &parts));
            assert_eq!(out, refine(&values, parts, equal_size, Mode::Local, None).unwrap());
        }
    }

    #[test]
    fn local_budget_bounds_large_inputs() {
        let mut rng = Lcg(5);
        let n = 30_000;
        let values: Vec<u64> = (0..n).map(|_| rng.next() % 50_000).collect();
        let parts = round_robin(n, 64);
        let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
        check_valid(&values, &parts, &out, true);
    }
}
