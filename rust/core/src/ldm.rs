//! Largest differencing method (Karmarkar–Karp), k-way, with the reference's exact tie rules.
//!
//! A *set* is a run of items with a running sum; a *state* is k sets in descending set order.
//! States leave a priority queue by (spread, first set); the first absorbs the second (its set i
//! takes the other's set k−1−i) and goes back. The partitioning contract fixes every tie, so this
//! module returns exactly what the pure-Python reference returns.
//!
//! Speed comes from the representation, all of it in this file:
//! * a set's items are an intrusive singly linked list (`next`), so absorbing a set is O(1) and
//!   the lists are read once at the end. Items are named by their rank in sorted order, not by
//!   their index: one-item states are then read sequentially, and the lists link nearby ranks;
//!   the final walk follows all k lists in turn so their cache misses overlap;
//! * a set compares in O(1) by `(sum, count, first index)`;
//! * a state stores only its non-empty sets (they always precede the empty ones), so a one-item
//!   state costs nothing: one-item states are never materialised, they wait in the sorted input
//!   (already in priority order) and the next state is taken from whichever of that array and the
//!   heap of composite states comes first, as in two-queue Huffman coding;
//! * a full state that absorbs one item only changes its smallest set; instead of shifting that
//!   set to its new place (O(k)), the state switches to a min-heap over its sets (O(log k)) and
//!   is sorted again only when a merge needs the full order;
//! * heap entries carry their priority inline, and the heap's top is updated in place.

use crate::alloc;
use crate::error::{check_shape, CoreError};
use crate::interrupt::{Interrupt, CHECK_EVERY};
use crate::parts::Partition;
use crate::sort::{sort_items, SortedItems};
use std::ops::{Add, AddAssign, Sub};

const NIL: u32 = u32::MAX;

/// Set vectors of merged-away states kept for reuse.
const SPARE_MAX: usize = 1024;

/// Exact sum type: `u64` when the total fits (the common case, cheaper to compare), else `u128`.
pub trait SumInt:
    Copy + Ord + Default + Add<Output = Self> + Sub<Output = Self> + AddAssign + Send + Sync
{
    /// A set's `(sum, count, first index)` packed into one value whose natural order is the set
    /// order (rule 3). Sets store this key and nothing else about their contents: the merges'
    /// sorts and the heaps compare it with one wide comparison, and joining two sets is one
    /// addition (measured: about a third fewer instructions than comparing the three fields).
    type Key: Copy + Ord + Send + Sync + std::fmt::Debug;
    fn from_u64(value: u64) -> Self;
    fn key(sum: Self, count: u32, head: u32) -> Self::Key;
    fn key_sum(key: Self::Key) -> Self;
    fn key_count(key: Self::Key) -> u32;
    fn key_head(key: Self::Key) -> u32;
    fn to_u128(self) -> u128;
    /// The key of `front` followed by `back`: sums and counts add, the first index is `front`'s.
    fn key_join(front: Self::Key, back: Self::Key) -> Self::Key;
    /// The key of set `front` after it absorbs set `back`, whose items are the ranks linked from
    /// `back_first` through `next` (values by rank in `values`). Integer sums are exact, so this
    /// is [`SumInt::key_join`], O(1); float sums ([`crate::float`]) walk `back`'s items, because
    /// the rounding order is part of the answer.
    #[inline]
    fn key_absorb(
        front: Self::Key,
        back: Self::Key,
        _back_first: u32,
        _next: &[u32],
        _values: &[u64],
    ) -> Self::Key {
        Self::key_join(front, back)
    }
}

/// A `u128` kept as two `u64` halves, for set keys and priorities.
///
/// Memory, not speed: `u128` is 16-byte aligned, which pads a [`Set`] (16-byte key, two `u32`
/// ranks) to 32 bytes and a queue entry to 48; with this 8-byte-aligned key they take 24 and 32.
/// With `equal_size=False` every item sits in a set of some full state for most of the run, so
/// this is about 8 bytes an item (measured: peak memory per item at 10^7 items, k = 8, from 76
/// to 64 bytes). Comparisons and arithmetic go through `u128`, so the code generated for them is
/// the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Key128 {
    lo: u64,
    hi: u64,
}

impl Key128 {
    #[inline(always)]
    pub fn new(value: u128) -> Self {
        Key128 { lo: value as u64, hi: (value >> 64) as u64 }
    }

    #[inline(always)]
    pub fn get(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

impl PartialOrd for Key128 {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key128 {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.get().cmp(&other.get())
    }
}

// u64 sums: `sum << 64 | count << 32 | head` in a u128. Every set's sum is at most the total,
// which fits in 64 bits here, and counts stay below 2**32, so adding keys never carries across
// fields.
impl SumInt for u64 {
    type Key = Key128;
    #[inline]
    fn from_u64(value: u64) -> Self {
        value
    }
    #[inline]
    fn key(sum: Self, count: u32, head: u32) -> Key128 {
        Key128 { hi: sum, lo: ((count as u64) << 32) | head as u64 }
    }
    #[inline]
    fn key_sum(key: Key128) -> Self {
        key.hi
    }
    #[inline]
    fn key_count(key: Key128) -> u32 {
        (key.lo >> 32) as u32
    }
    #[inline]
    fn key_head(key: Key128) -> u32 {
        key.lo as u32
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self as u128
    }
    #[inline]
    fn key_join(front: Key128, back: Key128) -> Key128 {
        Key128::new(front.get() + (back.get() & !0xFFFF_FFFF))
    }
}

// u128 sums: `(sum, count << 32 | head)`.
impl SumInt for u128 {
    type Key = (u128, u64);
    #[inline]
    fn from_u64(value: u64) -> Self {
        value as u128
    }
    #[inline]
    fn key(sum: Self, count: u32, head: u32) -> (u128, u64) {
        (sum, ((count as u64) << 32) | head as u64)
    }
    #[inline]
    fn key_sum(key: (u128, u64)) -> Self {
        key.0
    }
    #[inline]
    fn key_count(key: (u128, u64)) -> u32 {
        (key.1 >> 32) as u32
    }
    #[inline]
    fn key_head(key: (u128, u64)) -> u32 {
        key.1 as u32
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self
    }
    #[inline]
    fn key_join(front: (u128, u64), back: (u128, u64)) -> (u128, u64) {
        (front.0 + back.0, front.1 + (back.1 & !0xFFFF_FFFF))
    }
}

/// Set order (rule 3): larger sum, then larger count, then larger first index. Indexes are unique,
/// so two different non-empty sets never compare equal.
type SetKey<S> = <S as SumInt>::Key;

#[derive(Clone, Copy, Debug)]
struct Set<S: SumInt> {
    key: SetKey<S>,
    /// Ranks (positions in sorted order) of the first and last items.
    first: u32,
    last: u32,
}

impl<S: SumInt> Set<S> {
    fn empty() -> Self {
        Set { key: S::key(S::default(), 0, NIL), first: NIL, last: NIL }
    }

    #[inline]
    fn single(rank: u32, index: u32, value: u64) -> Self {
        Set { key: S::key(S::from_u64(value), 1, index), first: rank, last: rank }
    }

    #[inline]
    fn key(&self) -> SetKey<S> {
        self.key
    }

    #[inline]
    fn sum(&self) -> S {
        S::key_sum(self.key)
    }
}

/// `front`'s items followed by `back`'s.
#[inline]
fn join<S: SumInt>(front: Set<S>, back: Set<S>, next: &mut [u32], values: &[u64]) -> Set<S> {
    next[front.last as usize] = back.first;
    Set {
        key: S::key_absorb(front.key, back.key, back.first, next, values),
        first: front.first,
        last: back.last,
    }
}

/// State priority (rule 4): larger spread first, then the larger first set.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Priority<S: SumInt> {
    spread: S,
    first: SetKey<S>,
}

#[inline]
fn single_priority<S: SumInt>(index: u32, value: u64, k: usize) -> Priority<S> {
    let sum = S::from_u64(value);
    // With k > 1 the other k−1 sets are empty, so the spread is the value itself.
    let spread = if k > 1 { sum } else { S::default() };
    Priority { spread, first: S::key(sum, 1, index) }
}

/// A composite state: its non-empty sets, in descending order, unless `heap_mode`.
///
/// `heap_mode` (only for full states) keeps the sets as a min-heap read backwards: logical node h
/// lives at `sets[k - 1 - h]`, so the smallest set stays at the last position, exactly where the
/// sorted layout has it, and a descending array is already a valid heap. `max` then holds the
/// largest set's key, which only changes when the growing smallest set overtakes it.
struct State<S: SumInt> {
    sets: Vec<Set<S>>,
    heap_mode: bool,
    max: SetKey<S>,
    /// With `equal_size`, a state seeded from the sorted chunk starting at this rank whose sets
    /// are not materialised yet (`sets` is empty); `NIL` otherwise. Seeding n/k states then
    /// costs no allocation, and merges reuse a few spare vectors (measured: a fifth of the
    /// instructions at n = 8192, k = 8).
    chunk: u32,
}

impl<S: SumInt> State<S> {
    fn priority(&self, k: usize) -> Priority<S> {
        let m = self.sets.len();
        let first = if self.heap_mode { self.max } else { self.sets[0].key() };
        let last_sum = if m < k { S::default() } else { self.sets[m - 1].sum() };
        Priority { spread: S::key_sum(first) - last_sum, first }
    }

    fn make_sorted(&mut self) {
        if self.heap_mode {
            sort_descending(&mut self.sets);
            self.heap_mode = false;
        }
    }

    /// Absorb a one-item set into a partial state (m < k): the item keeps a set of its own.
    fn insert_set(&mut self, set: Set<S>) -> Result<(), CoreError> {
        alloc::reserve(&mut self.sets, 1, "the sets of a state")?;
        let key = set.key();
        // One-item states arrive in descending order, so the new set is usually the smallest.
        if self.sets.last().is_none_or(|last| last.key() > key) {
            self.sets.push(set);
        } else {
            let position = self.sets.partition_point(|s| s.key() > key);
            self.sets.insert(position, set);
        }
        Ok(())
    }

    /// A full state's smallest set absorbs `set`: appended after it, or before it (`set_first`)
    /// when the one-item state came out of the queue first.
    fn grow_smallest(&mut self, set: Set<S>, set_first: bool, next: &mut [u32], values: &[u64]) {
        if !self.heap_mode {
            self.heap_mode = true;
            self.max = self.sets[0].key();
        }
        let last = self.sets.len() - 1;
        let smallest = self.sets[last];
        let grown =
            if set_first { join(set, smallest, next, values) } else { join(smallest, set, next, values) };
        self.sets[last] = grown;
        sift_down_backwards(&mut self.sets);
        // The grown set has a larger key than before, so it may become the largest, never leave it.
        if grown.key() > self.max {
            self.max = grown.key();
        }
    }

    /// A full state absorbs a partial one (rule 5 with `others.len() < k` non-empty sets): its
    /// j-th smallest set takes `others[j]` (`others` descending), after it, or before it
    /// (`others_first`) when the partial state came out of the queue first.
    ///
    /// Only those m sets change, so they are popped from the heap and pushed back grown:
    /// O(m log k) instead of re-sorting all k sets (measured: a 7x speed-up at k = n/2, where
    /// full states keep absorbing two- and three-set states).
    ///
    /// `smallest` is scratch space with room for `others.len()` sets.
    fn absorb_into_smallest(
        &mut self,
        others: &[Set<S>],
        others_first: bool,
        next: &mut [u32],
        values: &[u64],
        smallest: &mut Vec<Set<S>>,
    ) {
        if !self.heap_mode {
            self.heap_mode = true;
            self.max = self.sets[0].key();
        }
        let k = self.sets.len();
        let m = others.len();
        // The heap of `size` sets occupies sets[k - size..], its root (the smallest) at the end.
        smallest.clear();
        for size in (k - m + 1..=k).rev() {
            let region = &mut self.sets[k - size..];
            smallest.push(region[size - 1]);
            region[size - 1] = region[0];
            sift_down_backwards(&mut self.sets[k - size + 1..]);
        }
        for (size, (&small, &other)) in (k - m..k).zip(smallest.iter().zip(others)) {
            let grown = if others_first {
                join(other, small, next, values)
            } else {
                join(small, other, next, values)
            };
            self.sets[k - 1 - size] = grown;
            sift_up_backwards(&mut self.sets[k - 1 - size..]);
            if grown.key() > self.max {
                self.max = grown.key();
            }
        }
    }
}

fn sort_descending<S: SumInt>(sets: &mut [Set<S>]) {
    sets.sort_unstable_by_key(|s| std::cmp::Reverse(s.key()));
}

/// Scratch space for [`sort_runs_descending`], kept across merges so they allocate nothing.
struct RunSorter<S: SumInt> {
    buffer: Vec<Set<S>>,
    bounds: Vec<usize>,
    next_bounds: Vec<usize>,
    packed: Vec<u64>,
}

impl<S: SumInt> RunSorter<S> {
    fn new() -> Self {
        RunSorter { buffer: Vec::new(), bounds: Vec::new(), next_bounds: Vec::new(), packed: Vec::new() }
    }

    /// Room to sort `k` sets without allocating (a no-op once there).
    fn reserve(&mut self, k: usize) -> Result<(), CoreError> {
        alloc::room_for(&mut self.buffer, k, "merge scratch")?;
        alloc::room_for(&mut self.bounds, k + 1, "merge scratch")?;
        alloc::room_for(&mut self.next_bounds, k + 1, "merge scratch")?;
        alloc::room_for(&mut self.packed, k, "merge scratch")
    }
}

fn bits_for(value: u128) -> u32 {
    128 - value.leading_zeros()
}

/// Sort `sets` descending through one `u64` per set, when `(sum, count, head)` relative to the
/// smallest sum and count, plus the set's position, fit in 64 bits (they do in practice: the sums
/// of one state lie close together). Sorting 8-byte integers and then moving each set once is
/// several times cheaper than sorting the 32-byte sets by their wide keys. Returns false (and
/// leaves `sets` alone) when they do not fit.
fn sort_packed_descending<S: SumInt>(sets: &mut [Set<S>], sorter: &mut RunSorter<S>) -> bool {
    let first = sets[0].key();
    let (mut min_sum, mut max_sum) = (S::key_sum(first), S::key_sum(first));
    let (mut min_count, mut max_count) = (S::key_count(first), S::key_count(first));
    let mut max_head = 0u32;
    for set in sets.iter() {
        let key = set.key();
        let sum = S::key_sum(key);
        min_sum = min_sum.min(sum);
        max_sum = max_sum.max(sum);
        let count = S::key_count(key);
        min_count = min_count.min(count);
        max_count = max_count.max(count);
        max_head = max_head.max(S::key_head(key));
    }
    let position_bits = bits_for(sets.len() as u128 - 1);
    let head_bits = bits_for(max_head as u128);
    let count_bits = bits_for((max_count - min_count) as u128);
    // Differences of `to_u128` images, not of sums: float sums subtract with rounding, their
    // images (bit patterns) subtract exactly and order as the sums do.
    let sum_bits = bits_for(max_sum.to_u128() - min_sum.to_u128());
    if position_bits + head_bits + count_bits + sum_bits > 64 {
        return false;
    }
    let head_shift = position_bits;
    let count_shift = head_shift + head_bits;
    let sum_shift = count_shift + count_bits;
    let packed = &mut sorter.packed;
    packed.clear();
    packed.extend(sets.iter().enumerate().map(|(position, set)| {
        let key = set.key();
        let sum = (S::key_sum(key).to_u128() - min_sum.to_u128()) as u64;
        let count = (S::key_count(key) - min_count) as u64;
        // Shifts by 64 cannot happen: a field with bits is below bit 64 by the check above, and
        // `checked_shl` keeps a zero-width field's shift (possibly 64) from overflowing.
        sum.checked_shl(sum_shift).unwrap_or(0)
            | count.checked_shl(count_shift).unwrap_or(0)
            | (S::key_head(key) as u64).checked_shl(head_shift).unwrap_or(0)
            | position as u64
    }));
    packed.sort_unstable();
    let buffer = &mut sorter.buffer;
    buffer.clear();
    let position_mask = (1u64 << position_bits) - 1;
    buffer.extend(packed.iter().rev().map(|&p| sets[(p & position_mask) as usize]));
    sets.copy_from_slice(buffer);
    true
}

/// [`sort_descending`] for the sets of two full states just joined position by position.
///
/// This is the hot spot of `equal_size` (a sort of k sets after each of the n/k − 1 merges was
/// 60 % of the instructions at n = 2^20, k = 1024). The joined sets are far from random: set i of
/// the state with the larger spread took set k−1−i of the other, and the sums move little, so
/// they form a few long descending runs (about 18 per 1024 sets in that case, measured). A natural
/// merge sort finds the runs and merges neighbours pairwise, O(k log runs), ping-ponging between
/// `sets` and a reused buffer. Many short runs (inputs where sums do jump) fall back to the
/// unstable sort. Keys are unique, so both give the one descending order.
fn sort_runs_descending<S: SumInt>(sets: &mut [Set<S>], sorter: &mut RunSorter<S>) {
    let len = sets.len();
    let bounds = &mut sorter.bounds;
    bounds.clear();
    bounds.push(0);
    for i in 1..len {
        if sets[i - 1].key() < sets[i].key() {
            bounds.push(i);
        }
    }
    bounds.push(len);
    let runs = bounds.len() - 1;
    if runs == 1 {
        return;
    }
    if runs > 4 && sort_packed_descending(sets, sorter) {
        return;
    }
    if runs > len / 8 {
        sort_descending(sets);
        return;
    }
    let buffer = &mut sorter.buffer;
    buffer.clear();
    buffer.extend_from_slice(sets);
    // Each pass merges run pairs from `buffer` into `sets` or back; `in_sets` says where they are.
    let mut in_sets = true;
    while sorter.bounds.len() > 2 {
        let (from, to): (&[Set<S>], &mut [Set<S>]) =
            if in_sets { (&*sets, &mut buffer[..]) } else { (&buffer[..], &mut *sets) };
        let bounds = &sorter.bounds;
        let next_bounds = &mut sorter.next_bounds;
        next_bounds.clear();
        next_bounds.push(0);
        let mut r = 0;
        while r + 1 < bounds.len() {
            let start = bounds[r];
            if r + 2 < bounds.len() {
                let (mid, end) = (bounds[r + 1], bounds[r + 2]);
                merge_two_descending(&from[start..mid], &from[mid..end], &mut to[start..end]);
                next_bounds.push(end);
                r += 2;
            } else {
                let end = bounds[r + 1];
                to[start..end].copy_from_slice(&from[start..end]);
                next_bounds.push(end);
                r += 1;
            }
        }
        std::mem::swap(&mut sorter.bounds, &mut sorter.next_bounds);
        in_sets = !in_sets;
    }
    if !in_sets {
        sets.copy_from_slice(buffer);
    }
}

#[inline]
fn merge_two_descending<S: SumInt>(left: &[Set<S>], right: &[Set<S>], out: &mut [Set<S>]) {
    let (mut i, mut j) = (0, 0);
    for slot in out.iter_mut() {
        // Branch-free choice of the source: the comparison is unpredictable.
        let take_left = j == right.len() || (i < left.len() && left[i].key() > right[j].key());
        *slot = if take_left { left[i] } else { right[j] };
        i += usize::from(take_left);
        j += usize::from(!take_left);
    }
}

/// Restore the backwards min-heap after the root (at the last position) grew.
#[inline]
fn sift_down_backwards<S: SumInt>(sets: &mut [Set<S>]) {
    let len = sets.len();
    let at = |node: usize| len - 1 - node;
    let moving = sets[len - 1];
    let key = moving.key();
    let mut node = 0;
    loop {
        let left = 2 * node + 1;
        if left >= len {
            break;
        }
        let right = left + 1;
        let mut child = left;
        if right < len && sets[at(right)].key() < sets[at(left)].key() {
            child = right;
        }
        if sets[at(child)].key() < key {
            sets[at(node)] = sets[at(child)];
            node = child;
        } else {
            break;
        }
    }
    sets[at(node)] = moving;
}

/// Restore the backwards min-heap after a set was added as its last node (at position 0).
fn sift_up_backwards<S: SumInt>(sets: &mut [Set<S>]) {
    let len = sets.len();
    let at = |node: usize| len - 1 - node;
    let moving = sets[0];
    let key = moving.key();
    let mut node = len - 1;
    while node > 0 {
        let parent = (node - 1) / 2;
        if sets[at(parent)].key() < key {
            break;
        }
        sets[at(node)] = sets[at(parent)];
        node = parent;
    }
    sets[at(node)] = moving;
}

/// Two partial states whose non-empty positions do not meet: the result's sets are both runs,
/// merged (both are descending), with no set changed.
fn merge_runs<S: SumInt>(sets: &mut Vec<Set<S>>, other: &[Set<S>]) -> Result<(), CoreError> {
    alloc::reserve(sets, other.len(), "the sets of a state")?;
    let (mut i, mut j) = (sets.len(), other.len());
    sets.extend_from_slice(other);
    let mut write = sets.len();
    while j > 0 {
        write -= 1;
        if i > 0 && sets[i - 1].key() < other[j - 1].key() {
            sets[write] = sets[i - 1];
            i -= 1;
        } else {
            sets[write] = other[j - 1];
            j -= 1;
        }
    }
    Ok(())
}

/// The general merge (rule 5): position i of `sets` absorbs position k−1−i of `other`; both sorted.
fn merge_overlapping<S: SumInt>(
    sets: &mut Vec<Set<S>>,
    other: &[Set<S>],
    k: usize,
    next: &mut [u32],
    values: &[u64],
    sorter: &mut RunSorter<S>,
) -> Result<(), CoreError> {
    let (own, theirs) = (sets.len(), other.len());
    if own == k && theirs == k {
        // Two full states (every merge with `equal_size`): pair position i with k−1−i directly.
        for (slot, &back) in sets.iter_mut().zip(other.iter().rev()) {
            *slot = join(*slot, back, next, values);
        }
        sorter.reserve(k)?;
        sort_runs_descending(sets, sorter);
        return Ok(());
    }
    alloc::reserve(sets, k - own, "the sets of a state")?;
    sets.resize_with(k, Set::empty);
    for (i, slot) in sets.iter_mut().enumerate() {
        let partner = (i + theirs >= k).then(|| other[k - 1 - i]);
        *slot = match (i < own, partner) {
            (true, Some(back)) => join(*slot, back, next, values),
            (true, None) => *slot,
            (false, Some(back)) => back,
            (false, None) => unreachable!("own + theirs > k covers every position"),
        };
    }
    sort_descending(sets);
    Ok(())
}

/// A queue entry: a composite state's priority, inline, and its id.
#[derive(Clone, Copy)]
struct Entry<S: SumInt> {
    priority: Priority<S>,
    id: u32,
}

/// Max-heap of composite states with their priorities inline (no pointer chasing to compare).
struct Queue<S: SumInt> {
    entries: Vec<Entry<S>>,
}

impl<S: SumInt> Queue<S> {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn top(&self) -> Option<&Priority<S>> {
        self.entries.first().map(|e| &e.priority)
    }

    fn top_id(&self) -> u32 {
        self.entries[0].id
    }

    /// The best entry once the top is gone: the larger of the top's children.
    fn second(&self) -> Option<&Priority<S>> {
        match self.entries.len() {
            0 | 1 => None,
            2 => Some(&self.entries[1].priority),
            _ => Some(std::cmp::max(&self.entries[1].priority, &self.entries[2].priority)),
        }
    }

    fn push(&mut self, priority: Priority<S>, id: u32) -> Result<(), CoreError> {
        alloc::push(&mut self.entries, Entry { priority, id }, "the queue of states")?;
        let mut node = self.entries.len() - 1;
        while node > 0 {
            let parent = (node - 1) / 2;
            if self.entries[parent].priority >= priority {
                break;
            }
            self.entries[node] = self.entries[parent];
            node = parent;
        }
        self.entries[node] = Entry { priority, id };
        Ok(())
    }

    fn pop(&mut self) -> u32 {
        let top = self.entries.swap_remove(0);
        if !self.entries.is_empty() {
            self.sift_down_from_top();
        }
        top.id
    }

    /// Give the top entry a new priority (and state) without a pop and a push. A state that
    /// absorbed one item usually stays on top, so this uses the sift-down that stops early.
    fn replace_top(&mut self, priority: Priority<S>, id: u32) {
        self.entries[0] = Entry { priority, id };
        self.sift_down(0);
    }

    /// Bottom-up sift-down for `pop`: the entry moved to the top came from the bottom and almost
    /// always belongs there again, so walk the hole down to a leaf with one comparison per level,
    /// then move the entry up from there.
    fn sift_down_from_top(&mut self) {
        let entries = &mut self.entries;
        let len = entries.len();
        let moving = entries[0];
        let mut hole = 0;
        loop {
            let left = 2 * hole + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child =
                if right < len && entries[right].priority > entries[left].priority { right } else { left };
            entries[hole] = entries[child];
            hole = child;
        }
        while hole > 0 {
            let parent = (hole - 1) / 2;
            if entries[parent].priority >= moving.priority {
                break;
            }
            entries[hole] = entries[parent];
            hole = parent;
        }
        entries[hole] = moving;
    }

    fn sift_down(&mut self, mut node: usize) {
        let len = self.entries.len();
        let moving = self.entries[node];
        loop {
            let left = 2 * node + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.entries[right].priority > self.entries[left].priority {
                right
            } else {
                left
            };
            if self.entries[child].priority > moving.priority {
                self.entries[node] = self.entries[child];
                node = child;
            } else {
                break;
            }
        }
        self.entries[node] = moving;
    }

    fn heapify(&mut self) {
        for node in (0..self.entries.len() / 2).rev() {
            self.sift_down(node);
        }
    }
}

/// Which queue holds the next state.
#[derive(PartialEq, Eq)]
enum Source {
    Single,
    Composite,
}

struct Run<'a, S: SumInt> {
    sorted: &'a SortedItems,
    k: usize,
    next: Vec<u32>,
    states: Vec<State<S>>,
    /// Ids of merged-away states, and set vectors they no longer need.
    free: Vec<u32>,
    spare: Vec<Vec<Set<S>>>,
    /// Scratch for `absorb_into_smallest` (fewer than k sets).
    smallest: Vec<Set<S>>,
    queue: Queue<S>,
    /// One-item states are `sorted[..singles]`; the best is the last.
    singles: usize,
    sorter: RunSorter<S>,
}

impl<'a, S: SumInt> Run<'a, S> {
    fn new(
        sorted: &'a SortedItems,
        k: usize,
        equal_size: bool,
        interrupt: &Interrupt,
    ) -> Result<Self, CoreError> {
        let n = sorted.index.len();
        let mut run = Run {
            sorted,
            k,
            next: alloc::filled_checked(n, NIL, "the item lists", interrupt)?,
            states: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            smallest: alloc::with_capacity(k, "merge scratch")?,
            queue: Queue { entries: Vec::new() },
            singles: n,
            sorter: RunSorter::new(),
        };
        // With k = 1 a chunk of one is a one-item state, which the single queue already models.
        if equal_size && k > 1 {
            run.singles = 0;
            alloc::reserve(&mut run.states, n / k, "the states")?;
            alloc::reserve(&mut run.queue.entries, n / k, "the queue of states")?;
            for start in (0..n).step_by(k) {
                // The chunk is ascending by (value, index): its largest set is its last item and
                // its smallest its first.
                let top = start + k - 1;
                let first = S::key(S::from_u64(sorted.values[top]), 1, sorted.index[top]);
                // Subtracted as sums (float sums round as the reference's spread does).
                let spread = S::from_u64(sorted.values[top]) - S::from_u64(sorted.values[start]);
                let id = run.states.len() as u32;
                run.queue.entries.push(Entry { priority: Priority { spread, first }, id });
                run.states.push(State {
                    sets: Vec::new(),
                    heap_mode: false,
                    max: first,
                    chunk: start as u32,
                });
            }
            run.queue.heapify();
        }
        Ok(run)
    }

    #[inline]
    fn single_set(&self, rank: usize) -> (Set<S>, Priority<S>) {
        let index = self.sorted.index[rank];
        let value = self.sorted.values[rank];
        (Set::single(rank as u32, index, value), single_priority(index, value, self.k))
    }

    /// Where the best state is, when the top composite (if `skip_top`) is already taken.
    fn best_source(&self, skip_top: bool) -> Source {
        let composite = if skip_top { self.queue.second() } else { self.queue.top() };
        match (self.singles > 0, composite) {
            (false, _) => Source::Composite,
            (true, None) => Source::Single,
            (true, Some(best)) => {
                let (_, single) = self.single_set(self.singles - 1);
                if single > *best {
                    Source::Single
                } else {
                    Source::Composite
                }
            }
        }
    }

    fn take_single(&mut self) -> Set<S> {
        self.singles -= 1;
        self.single_set(self.singles).0
    }

    fn new_state(&mut self, sets: &[Set<S>]) -> Result<u32, CoreError> {
        let mut vector = match self.spare.pop() {
            Some(vector) => vector,
            // Exactly as many sets as it starts with: most states never grow (a state of two
            // one-item sets is the most common), and a spare one more than doubles them.
            None => alloc::with_capacity(sets.len(), "the sets of a state")?,
        };
        alloc::reserve(&mut vector, sets.len(), "the sets of a state")?;
        vector.extend_from_slice(sets);
        let state = State { sets: vector, heap_mode: false, max: S::key(S::default(), 0, NIL), chunk: NIL };
        Ok(if let Some(id) = self.free.pop() {
            self.states[id as usize] = state;
            id
        } else {
            alloc::push(&mut self.states, state, "the states")?;
            (self.states.len() - 1) as u32
        })
    }

    /// Give a seeded chunk state its sets: the chunk reversed is in descending set order.
    /// Inline, because with `equal_size=False` it is called on every merge and never has work
    /// to do (measured: a call per merge cost 4 % of the instructions at 2^20 items).
    #[inline(always)]
    fn materialise(&mut self, id: u32) -> Result<(), CoreError> {
        if self.states[id as usize].chunk != NIL {
            self.materialise_chunk(id)?;
        }
        Ok(())
    }

    #[inline(never)]
    fn materialise_chunk(&mut self, id: u32) -> Result<(), CoreError> {
        let mut vector = match self.spare.pop() {
            Some(vector) => vector,
            None => alloc::with_capacity(self.k, "the sets of a state")?,
        };
        alloc::reserve(&mut vector, self.k, "the sets of a state")?;
        let state = &mut self.states[id as usize];
        let start = state.chunk as usize;
        state.chunk = NIL;
        let sorted = self.sorted;
        vector.extend(
            (start..start + self.k)
                .rev()
                .map(|rank| Set::single(rank as u32, sorted.index[rank], sorted.values[rank])),
        );
        state.sets = vector;
        Ok(())
    }

    /// The composite state on top of the queue absorbs a one-item state, which came out of the
    /// queue first (`single_first`: its item goes before the set it joins) or second.
    fn top_absorbs_single(&mut self, single: Set<S>, single_first: bool) -> Result<(), CoreError> {
        let k = self.k;
        let id = self.queue.top_id();
        self.materialise(id)?;
        let state = &mut self.states[id as usize];
        if state.sets.len() < k {
            // The single lands on an empty position: it keeps a set of its own.
            state.insert_set(single)?;
        } else {
            state.grow_smallest(single, single_first, &mut self.next, &self.sorted.values);
        }
        let priority = state.priority(k);
        self.queue.replace_top(priority, id);
        Ok(())
    }

    fn step(&mut self) -> Result<(), CoreError> {
        let k = self.k;
        if self.best_source(false) == Source::Single {
            let first = self.take_single();
            if self.best_source(false) == Source::Single {
                let second = self.take_single();
                let id = if k == 1 {
                    let joined = join(first, second, &mut self.next, &self.sorted.values);
                    self.new_state(&[joined])?
                } else {
                    self.new_state(&[first, second])?
                };
                let priority = self.states[id as usize].priority(k);
                self.queue.push(priority, id)?;
            } else {
                // first's set 0 absorbs the composite's set k−1: empty unless it is full.
                self.top_absorbs_single(first, true)?;
            }
        } else if self.best_source(true) == Source::Single {
            let second = self.take_single();
            self.top_absorbs_single(second, false)?;
        } else {
            // (An error leaves the run half-merged; it is abandoned then.)
            alloc::reserve(&mut self.free, 1, "the free state ids")?;
            let first_id = self.queue.pop();
            let second_id = self.queue.top_id();
            self.materialise(first_id)?;
            self.materialise(second_id)?;
            let first_full = self.states[first_id as usize].sets.len() == k;
            let second_full = self.states[second_id as usize].sets.len() == k;
            // Partial states are always sorted; only full ones may be in heap mode.
            let (kept, gone, mut other) = if first_full && !second_full {
                let other = std::mem::take(&mut self.states[second_id as usize].sets);
                self.states[first_id as usize].absorb_into_smallest(
                    &other,
                    false,
                    &mut self.next,
                    &self.sorted.values,
                    &mut self.smallest,
                );
                (first_id, second_id, other)
            } else if second_full && !first_full {
                let other = std::mem::take(&mut self.states[first_id as usize].sets);
                self.states[second_id as usize].absorb_into_smallest(
                    &other,
                    true,
                    &mut self.next,
                    &self.sorted.values,
                    &mut self.smallest,
                );
                (second_id, first_id, other)
            } else {
                let mut other = std::mem::take(&mut self.states[second_id as usize].sets);
                if self.states[second_id as usize].heap_mode {
                    sort_descending(&mut other);
                }
                let state = &mut self.states[first_id as usize];
                state.make_sorted();
                if state.sets.len() + other.len() <= k {
                    merge_runs(&mut state.sets, &other)?;
                } else {
                    merge_overlapping(
                        &mut state.sets,
                        &other,
                        k,
                        &mut self.next,
                        &self.sorted.values,
                        &mut self.sorter,
                    )?;
                }
                (first_id, second_id, other)
            };
            let priority = self.states[kept as usize].priority(k);
            self.queue.replace_top(priority, kept);
            // A bounded pool: vectors beyond it are freed now, a step at a time, instead of
            // millions at once when the run ends (which held up Ctrl-C for a second) and
            // instead of keeping capacity no new state needs.
            if self.spare.len() < SPARE_MAX {
                other.clear();
                self.spare.push(other);
            }
            self.free.push(gone);
        }
        Ok(())
    }

    fn finish(self, interrupt: &Interrupt) -> Result<Partition, CoreError> {
        let (k, index) = (self.k, &self.sorted.index);
        let (final_sets, next) = self.run_to_end(interrupt)?;
        read_lists(&final_sets, k, &next, index, interrupt)
    }

    /// Run every merge: the last state's sets (descending) and the item lists they head. The
    /// states and their sets are freed on return.
    fn run_to_end(mut self, interrupt: &Interrupt) -> Result<(Vec<Set<S>>, Vec<u32>), CoreError> {
        let mut steps = 0usize;
        while self.singles + self.queue.len() > 1 {
            interrupt.every(steps)?;
            steps += 1;
            self.step()?;
        }
        let final_sets: Vec<Set<S>> = if self.queue.len() == 1 {
            let id = self.queue.top_id();
            self.materialise(id)?;
            let state = &mut self.states[id as usize];
            state.make_sorted();
            std::mem::take(&mut state.sets)
        } else {
            vec![self.single_set(0).0]
        };
        Ok((final_sets, self.next))
    }
}

/// Write out the final sets' items (as input indexes, in list order), partition by partition.
///
/// Each list is a chain of dependent loads that mostly miss the cache; walking all lists a step
/// at a time lets the misses of different lists overlap instead of waiting for each in turn.
fn read_lists<S: SumInt>(
    sets: &[Set<S>],
    k: usize,
    next: &[u32],
    index: &[u32],
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    let mut offsets = alloc::with_capacity(k + 1, "partition offsets")?;
    offsets.push(0usize);
    for p in 0..k {
        let count = sets.get(p).map_or(0, |s| S::key_count(s.key) as usize);
        offsets.push(offsets[p] + count);
    }
    let mut order = alloc::zeroed(offsets[k], "the partition")?;
    // (rank of the next item to write, where it goes)
    let mut cursors =
        alloc::collect(sets.iter().zip(&offsets).map(|(set, &start)| (set.first, start)), "cursors")?;
    let mut written = 0usize;
    while !cursors.is_empty() {
        // One round writes one item of every list still open.
        if written >= CHECK_EVERY {
            interrupt.check()?;
            written = 0;
        }
        written += cursors.len();
        let mut i = 0;
        while i < cursors.len() {
            let (rank, position) = cursors[i];
            order[position] = index[rank as usize];
            let following = next[rank as usize];
            if following == NIL {
                cursors.swap_remove(i);
            } else {
                cursors[i] = (following, position + 1);
                i += 1;
            }
        }
    }
    Ok(Partition { order, offsets })
}

/// For every item, its partition's number: what [`Partition::ids`] gives, without the partition.
///
/// Partition `p` is the final state's set `p` (descending set order). Two passes: the lists are
/// walked a step of each at a time (as in [`read_lists`]), overwriting each item's link with its
/// partition's number, which touches one cache line per item; then the numbers go to the items'
/// input indexes in rank order, a sequential read with scattered writes that do not wait on each
/// other. (Measured at n = 2^20, k = 1024, equal sizes, CPU time of `partition_ids`: about 36 ms
/// against 39 ms when the walk itself stores `ids[index[rank]]`, three cache misses an item on
/// its critical path, and 39 ms through the partition's `order`.)
fn write_ids<S: SumInt>(
    sets: &[Set<S>],
    mut next: Vec<u32>,
    index: &[u32],
    interrupt: &Interrupt,
) -> Result<Vec<i64>, CoreError> {
    // (rank of the next item to number, its partition)
    let mut cursors =
        alloc::collect(sets.iter().enumerate().map(|(p, set)| (set.first, p as u32)), "cursors")?;
    let mut written = 0usize;
    while !cursors.is_empty() {
        if written >= CHECK_EVERY {
            interrupt.check()?;
            written = 0;
        }
        written += cursors.len();
        let mut i = 0;
        while i < cursors.len() {
            let (rank, p) = cursors[i];
            let following = next[rank as usize];
            next[rank as usize] = p;
            if following == NIL {
                cursors.swap_remove(i);
            } else {
                cursors[i].0 = following;
                i += 1;
            }
        }
    }
    let numbers = next;
    // Every item is in exactly one list, so every zero is overwritten.
    let mut ids = alloc::zeroed(index.len(), "partition numbers")?;
    for (indexes, numbers) in index.chunks(CHECK_EVERY).zip(numbers.chunks(CHECK_EVERY)) {
        interrupt.check()?;
        for (&i, &p) in indexes.iter().zip(numbers) {
            ids[i as usize] = p as i64;
        }
    }
    Ok(ids)
}

/// [`karmarkar_karp_owned`]`(..).ids(..)`, without the partition in between: for every item,
/// the number of its partition (heaviest first). Besides skipping the partition's `order`, the
/// sorted values are freed before the numbers are allocated, so the call's peak is lower too.
pub fn partition_ids_owned(
    values: Vec<u64>,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Vec<i64>, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    let mut sorted = sort_items(&values, interrupt)?;
    drop(values);
    let total: u128 = sorted.values.iter().map(|&v| v as u128).sum();
    if total <= u64::MAX as u128 {
        let (sets, next) = Run::<u64>::new(&sorted, k, equal_size, interrupt)?.run_to_end(interrupt)?;
        sorted.values = Vec::new();
        write_ids(&sets, next, &sorted.index, interrupt)
    } else {
        let (sets, next) = Run::<u128>::new(&sorted, k, equal_size, interrupt)?.run_to_end(interrupt)?;
        sorted.values = Vec::new();
        write_ids(&sets, next, &sorted.index, interrupt)
    }
}

/// The largest differencing method: k partitions, heaviest first, items in merge order.
///
/// `equal_size` seeds the states with sorted chunks of k (so every partition gets n/k items)
/// and requires `n % k == 0`; otherwise each item starts a state of its own.
pub fn karmarkar_karp(values: &[u64], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    karmarkar_karp_interruptible(values, k, equal_size, &Interrupt::NEVER)
}

/// [`karmarkar_karp`], stopping with [`CoreError::Interrupted`] when `interrupt` says so.
pub fn karmarkar_karp_interruptible(
    values: &[u64],
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    let sorted = sort_items(values, interrupt)?;
    run_exact(&sorted, k, equal_size, interrupt)
}

/// [`karmarkar_karp_interruptible`] on values it owns: they are dropped as soon as they are
/// sorted, so the run's peak holds no copy of them (8 bytes an item less; the sorted items keep
/// their own). The binding hands over the copy it made of the caller's list or array.
pub fn karmarkar_karp_owned(
    values: Vec<u64>,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    let sorted = sort_items(&values, interrupt)?;
    drop(values);
    run_exact(&sorted, k, equal_size, interrupt)
}

/// The method on sorted integer values: `u64` sums when their total fits, else `u128`.
fn run_exact(
    sorted: &SortedItems,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    let total: u128 = sorted.values.iter().map(|&v| v as u128).sum();
    if total <= u64::MAX as u128 {
        Run::<u64>::new(sorted, k, equal_size, interrupt)?.finish(interrupt)
    } else {
        Run::<u128>::new(sorted, k, equal_size, interrupt)?.finish(interrupt)
    }
}

/// The method on items already in `(value, index)` order, with sums of type `S`; `sorted.values`
/// hold what [`SumInt::from_u64`] reads (float sums: the values' bit patterns).
pub(crate) fn run_sorted<S: SumInt>(
    sorted: &SortedItems,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    Run::<S>::new(sorted, k, equal_size, interrupt)?.finish(interrupt)
}

/// [`karmarkar_karp`] with each partition's indexes sorted ascending (partition order kept).
pub fn balanced_partitions(values: &[u64], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    balanced_partitions_interruptible(values, k, equal_size, &Interrupt::NEVER)
}

/// [`balanced_partitions`], stopping with [`CoreError::Interrupted`] when `interrupt` says so.
pub fn balanced_partitions_interruptible(
    values: &[u64],
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    let partition = karmarkar_karp_interruptible(values, k, equal_size, interrupt)?;
    debug_assert!(partition.parts().all(|p| !p.is_empty()));
    debug_assert_eq!(partition.order.len(), values.len());
    partition.sorted_within(interrupt)
}

/// [`balanced_partitions_interruptible`] on values it owns (see [`karmarkar_karp_owned`]).
pub fn balanced_partitions_owned(
    values: Vec<u64>,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    karmarkar_karp_owned(values, k, equal_size, interrupt)?.sorted_within(interrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kk(values: &[u64], k: usize, equal_size: bool) -> Vec<Vec<u32>> {
        karmarkar_karp(values, k, equal_size).unwrap().to_vecs()
    }

    fn balanced(values: &[u64], k: usize, equal_size: bool) -> Vec<Vec<u32>> {
        balanced_partitions(values, k, equal_size).unwrap().to_vecs()
    }

    #[test]
    fn golden_values() {
        assert_eq!(kk(&[10, 20, 30, 40], 2, true), vec![vec![3, 0], vec![2, 1]]);
        assert_eq!(balanced(&[10, 20, 30, 40], 2, true), vec![vec![0, 3], vec![1, 2]]);
        assert_eq!(kk(&[100, 90, 50, 10, 5, 1], 2, true), vec![vec![2, 1, 5], vec![3, 0, 4]]);
        assert_eq!(balanced(&[100, 90, 50, 10, 5, 1], 2, true), vec![vec![1, 2, 5], vec![0, 3, 4]]);
        assert_eq!(kk(&[100, 10, 10, 10, 10], 2, false), vec![vec![0], vec![4, 3, 2, 1]]);
        assert_eq!(balanced(&[100, 10, 10, 10, 10], 2, false), vec![vec![0], vec![1, 2, 3, 4]]);
        assert_eq!(kk(&[100, 80, 60, 40, 20, 10], 3, true), vec![vec![0, 5], vec![2, 3], vec![1, 4]]);
        assert_eq!(kk(&[50, 50, 50, 50], 2, true), vec![vec![3, 0], vec![2, 1]]);
        assert_eq!(
            balanced(&[1, 2, 3, 4, 5, 6, 7, 8], 3, false),
            vec![vec![1, 4, 5], vec![0, 3, 6], vec![2, 7]]
        );
        assert_eq!(balanced(&[5, 5, 5, 5, 5, 5], 3, false), vec![vec![0, 5], vec![1, 4], vec![2, 3]]);
        assert_eq!(
            karmarkar_karp(&[1, 2, 3], 5, false),
            Err(CoreError::TooFewItems { n_items: 3, k_partitions: 5 })
        );
    }

    #[test]
    fn one_partition_takes_items_largest_first() {
        assert_eq!(kk(&[3, 1, 3, 0], 1, false), vec![vec![2, 0, 1, 3]]);
        assert_eq!(kk(&[3, 1, 3, 0], 1, true), vec![vec![2, 0, 1, 3]]);
    }

    #[test]
    fn sums_beyond_64_bits_are_exact() {
        let big = (1u64 << 63) - 1;
        let values = vec![big; 6];
        let parts = kk(&values, 2, false);
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 3]);
        let parts = kk(&[big, big, big, 1], 2, false);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 4);
    }

    #[test]
    fn every_index_once_and_equal_counts() {
        let values: Vec<u64> = (0..997u64).map(|i| (i * 7919) % 1013).collect();
        for k in [1, 2, 3, 7, 64, 997] {
            let parts = kk(&values, k, false);
            let mut all: Vec<u32> = parts.concat();
            all.sort_unstable();
            assert_eq!(all, (0..997).collect::<Vec<u32>>());
            assert!(parts.iter().all(|p| !p.is_empty()));
        }
        let values = &values[..996];
        for k in [1, 2, 3, 4, 6, 12, 83] {
            let parts = kk(values, k, true);
            assert!(parts.iter().all(|p| p.len() == 996 / k));
        }
    }

    #[test]
    fn rejects_bad_shapes() {
        assert_eq!(
            karmarkar_karp(&[], 1, false),
            Err(CoreError::TooFewItems { n_items: 0, k_partitions: 1 })
        );
        assert_eq!(
            karmarkar_karp(&[1, 2, 3], 2, true),
            Err(CoreError::NotDivisible { n_items: 3, k_partitions: 2 })
        );
        assert_eq!(karmarkar_karp(&[1], 0, false), Err(CoreError::NoPartitions));
    }

    /// Every path of the merge sort (already sorted, few runs, packed keys, keys too wide to pack,
    /// many short runs) gives the order of the plain sort.
    #[test]
    fn run_sort_agrees_with_the_plain_sort() {
        fn check<S: SumInt>(sums: &[u128], counts: &[u32], sorter: &mut RunSorter<S>) {
            let mut sets: Vec<Set<S>> = sums
                .iter()
                .zip(counts)
                .enumerate()
                .map(|(head, (&sum, &count))| Set {
                    key: S::key(S::from_u64(0) + from_u128::<S>(sum), count, (head * 7919 % 100_003) as u32),
                    first: head as u32,
                    last: head as u32,
                })
                .collect();
            let mut expected = sets.clone();
            sort_descending(&mut expected);
            sort_runs_descending(&mut sets, sorter);
            let keys = |v: &[Set<S>]| v.iter().map(|s| (s.key(), s.first)).collect::<Vec<_>>();
            assert_eq!(keys(&sets), keys(&expected));
        }
        fn from_u128<S: SumInt>(value: u128) -> S {
            // Only called with values that fit S (u128 always; u64 below 2^64).
            let high = S::from_u64((value >> 64) as u64);
            let mut shifted = high;
            for _ in 0..64 {
                shifted = shifted + shifted;
            }
            shifted + S::from_u64(value as u64)
        }
        let mut state: u64 = 99;
        let mut random = |modulus: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 17) % modulus
        };
        let mut sorter64 = RunSorter::<u64>::new();
        let mut sorter128 = RunSorter::<u128>::new();
        for len in [1usize, 2, 5, 64, 1024] {
            // A few long descending runs with small noise, then random values, then huge spreads.
            let runs: Vec<u128> = (0..len)
                .map(|i| (1_000_000 - (i % (len / 4 + 1)) * 10 + random(3) as usize) as u128)
                .collect();
            let noise: Vec<u128> = (0..len).map(|_| random(50) as u128).collect();
            let wide: Vec<u128> = (0..len).map(|_| (random(1 << 40) as u128) << 23).collect();
            let sorted: Vec<u128> = (0..len as u128).rev().collect();
            let same: Vec<u32> = vec![4; len];
            let mixed: Vec<u32> = (0..len).map(|_| random(3) as u32 + 1).collect();
            for sums in [&runs, &noise, &wide, &sorted] {
                for counts in [&same, &mixed] {
                    check::<u64>(sums, counts, &mut sorter64);
                    check::<u128>(sums, counts, &mut sorter128);
                }
            }
            let beyond_64: Vec<u128> = (0..len).map(|_| (random(1 << 50) as u128) << 70).collect();
            check::<u128>(&beyond_64, &mixed, &mut sorter128);
        }
    }
}
