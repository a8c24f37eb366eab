//! One micro-batch planning problem and what the count search ([`super::count`]) and the shape
//! limits ([`super::shape`]) both build on: the problem and its limits, its items in the
//! greedy's order, the split's packed heap keys and the buffers a search keeps between splits.
//! Both import this module, and the shape limits build on the count search, never the reverse.

use super::cost::{part_cost, PlanCost};
use super::{map_checked, Result};
use crate::alloc;
use crate::interrupt::Interrupt;
use crate::sort;

/// One micro-batch planning problem: items (groups) with tokens and costs, a cap, a multiple,
/// and the shape limits when there are any.
pub struct Problem<'a, C: PlanCost = u64> {
    pub tokens: &'a [u64],
    pub costs: &'a [C],
    pub cap: u64,
    pub multiple: usize,
    pub shape: Option<Shape<'a>>,
}

/// The limits themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeRule {
    /// The most samples a micro-batch may hold (`u64::MAX`: no limit).
    pub max_sequences: u64,
    /// Charge a micro-batch `samples * longest` against the cap instead of its token sum.
    pub padded: bool,
}

/// The limits and what they read of each item (a group of samples kept together).
#[derive(Clone, Copy)]
pub struct Shape<'a> {
    pub rule: ShapeRule,
    /// Samples per item.
    pub samples: &'a [u64],
    /// Each item's longest (padded) sample.
    pub longest: &'a [u64],
    /// One key number per item, or `None` when every item shares one key.
    pub keys: Option<&'a [u32]>,
}

impl<C: PlanCost> Problem<'_, C> {
    /// The items in the greedy's order (cost descending, ties by position ascending), with
    /// their tokens and costs gathered in it.
    pub(super) fn ordered(&self, interrupt: &Interrupt) -> Result<Ordered<C>> {
        // The core's radix sort (stable, interruptible) of the costs' bits turned upside down.
        let most = self.costs.iter().map(|c| c.bits()).max().unwrap_or(0);
        let flipped =
            map_checked(self.costs.iter(), "the planner's sort keys", interrupt, |c| most - c.bits())?;
        let sorted = sort::sort_items(&flipped, interrupt)?;
        drop(flipped);
        let order = sorted.index;
        // A gather through the order misses the cache on most items: checks in between.
        let mut tokens = alloc::with_capacity(order.len(), "the planner's tokens")?;
        for (step, &i) in order.iter().enumerate() {
            interrupt.every(step)?;
            tokens.push(self.tokens[i as usize]);
        }
        let costs = map_checked(sorted.values.iter(), "the planner's costs", interrupt, |&bits| {
            C::from_bits(most - bits)
        })?;
        drop(sorted.values);
        let part_tokens = per_token(&tokens, &costs, interrupt)?;
        Ok(Ordered { order, tokens, costs, part_tokens })
    }

    /// Item positions per part, ascending, for a split into `count` parts.
    pub(super) fn parts(part: &[u32], count: usize) -> Result<Vec<Vec<u32>>> {
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

    pub(super) fn cost_of(&self, items: &[u32]) -> C {
        part_cost(self.costs, items)
    }
}

/// The items of a [`Problem`] in the greedy's order (cost descending, ties by position), with
/// their tokens and costs in that order.
pub(super) struct Ordered<C> {
    pub(super) order: Vec<u32>,
    pub(super) tokens: Vec<u64>,
    pub(super) costs: Vec<C>,
    /// See [`per_token`].
    pub(super) part_tokens: Option<(u64, u64)>,
}

/// For integer costs, the least `r` with every item's cost at most `r` times its tokens, and the
/// most tokens of an item; `None` for float costs or an item with a cost and no tokens. A part
/// holds at most `max(cap, most tokens)` tokens (an item that opens it, then items within the
/// cap), so its cost is at most `r` times that: a bound on the split's heap keys.
fn per_token<C: PlanCost>(tokens: &[u64], costs: &[C], interrupt: &Interrupt) -> Result<Option<(u64, u64)>> {
    if !C::EXACT {
        return Ok(None);
    }
    // The steepest item so far as the fraction cost / per (compared crosswise, no division).
    let (mut cost, mut per, mut most) = (0u64, 1u64, 0u64);
    for (step, (&t, c)) in tokens.iter().zip(costs).enumerate() {
        interrupt.every(step)?;
        let c = c.bits();
        most = most.max(t);
        if t == 0 {
            if c > 0 {
                return Ok(None);
            }
        } else if c as u128 * per as u128 > cost as u128 * t as u128 {
            (cost, per) = (c, t);
        }
    }
    Ok(Some((cost.div_ceil(per), most)))
}

impl<C> Ordered<C> {
    /// A split by position in the order, as the part of every item.
    pub(super) fn by_item(&self, part: &[u32], interrupt: &Interrupt) -> Result<Vec<u32>> {
        let mut by_item: Vec<u32> = alloc::zeroed(part.len(), "the split")?;
        // A scatter that misses the cache on most items: checks in between.
        for (step, (&item, &p)) in self.order.iter().zip(part).enumerate() {
            interrupt.every(step)?;
            by_item[item as usize] = p;
        }
        Ok(by_item)
    }
}

/// The buffers of [`Problem::split`], kept by a count search from one split to the next.
///
/// Why: a split of 10^6 items allocates some 40 MB (its answer, the parts' fills, three key
/// arrays), and the allocator hands such blocks back to the kernel between splits, which then
/// faulted in and zeroed every page again: 18% of `min_num_micro_batches_for`'s samples at
/// 2*10^6 items (perf, `clear_page_erms`). A split that fits keeps its answer; the rest return.
pub(super) struct SplitBuffers<C> {
    pub(super) part: Vec<u32>,
    pub(super) fill: Vec<(u64, C)>,
    pub(super) narrow: KeyBuffers<u64>,
    pub(super) wide: KeyBuffers<u128>,
}

impl<C> Default for SplitBuffers<C> {
    fn default() -> Self {
        SplitBuffers {
            part: Vec::new(),
            fill: Vec::new(),
            narrow: KeyBuffers::default(),
            wide: KeyBuffers::default(),
        }
    }
}

/// The key arrays of a split: the opening run, the open heap, the full heap.
pub(super) struct KeyBuffers<K> {
    pub(super) run: Vec<K>,
    pub(super) heap: Vec<K>,
    pub(super) full: Vec<K>,
}

impl<K> Default for KeyBuffers<K> {
    fn default() -> Self {
        KeyBuffers { run: Vec::new(), heap: Vec::new(), full: Vec::new() }
    }
}

/// `buffer`, taken and emptied, with room for `len` items: a new one of exactly that room when
/// it is too small (a `MemoryError`, never an abort), the old one freed first.
pub(super) fn reuse<T>(buffer: &mut Vec<T>, len: usize, what: &'static str) -> Result<Vec<T>> {
    let mut vec = std::mem::take(buffer);
    if vec.capacity() < len {
        drop(vec);
        return alloc::with_capacity(len, what);
    }
    vec.clear();
    Ok(vec)
}

/// A heap key: `high << shift | low`, compared as one integer.
pub(super) trait Key: Copy + Ord {
    /// This key type's arrays in `buffers`.
    fn buffers<C>(buffers: &mut SplitBuffers<C>) -> &mut KeyBuffers<Self>;
    fn pack(high: u64, low: u64, shift: u32) -> Self;
    fn high(self, shift: u32) -> u64;
    /// The part number in the lowest `bits` bits.
    fn part(self, bits: u32) -> u32;
}

impl Key for u64 {
    fn buffers<C>(buffers: &mut SplitBuffers<C>) -> &mut KeyBuffers<Self> {
        &mut buffers.narrow
    }
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
    fn buffers<C>(buffers: &mut SplitBuffers<C>) -> &mut KeyBuffers<Self> {
        &mut buffers.wide
    }
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

pub(super) fn round_up(value: usize, multiple: usize) -> usize {
    value.div_ceil(multiple) * multiple
}
