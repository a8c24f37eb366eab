//! States and their sets: priorities, the merges of rule 5, and the sorts of the merged runs.

use super::keys::{join, join_all, Set, SetKey, SumInt, Walk};
use crate::alloc;
use crate::error::CoreError;

/// State priority (rule 4): larger spread first, then the larger first set.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct Priority<S: SumInt> {
    pub(super) spread: S,
    pub(super) first: SetKey<S>,
}

#[inline]
pub(super) fn single_priority<S: SumInt>(index: u32, value: u64, k: usize) -> Priority<S> {
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
pub(super) struct State<S: SumInt> {
    pub(super) sets: Vec<Set<S>>,
    pub(super) heap_mode: bool,
    pub(super) max: SetKey<S>,
    /// With `equal_size`, a state seeded from the sorted chunk starting at this rank whose sets
    /// are not materialised yet (`sets` is empty); `NIL` otherwise. Seeding n/k states then
    /// costs no allocation, and merges reuse a few spare vectors (measured: a fifth of the
    /// instructions at n = 8192, k = 8).
    pub(super) chunk: u32,
}

impl<S: SumInt> State<S> {
    pub(super) fn priority(&self, k: usize) -> Priority<S> {
        let m = self.sets.len();
        let first = if self.heap_mode { self.max } else { self.sets[0].key() };
        let last_sum = if m < k { S::default() } else { self.sets[m - 1].sum() };
        Priority { spread: S::key_sum(first) - last_sum, first }
    }

    pub(super) fn make_sorted(&mut self) {
        if self.heap_mode {
            sort_descending(&mut self.sets);
            self.heap_mode = false;
        }
    }

    /// Absorb a one-item set into a partial state (m < k): the item keeps a set of its own.
    pub(super) fn insert_set(&mut self, set: Set<S>) -> Result<(), CoreError> {
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
    pub(super) fn grow_smallest(&mut self, set: Set<S>, set_first: bool, next: &mut [u32], values: &[u64]) {
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
    /// `smallest` is scratch space with room for `others.len()` sets, `walks` too (float sums).
    pub(super) fn absorb_into_smallest(
        &mut self,
        others: &[Set<S>],
        others_first: bool,
        next: &mut [u32],
        values: &[u64],
        smallest: &mut Vec<Set<S>>,
        walks: &mut Vec<Walk<SetKey<S>>>,
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
        if S::WALKS {
            // The m joins first, their item-by-item sums side by side (see `join_all`); the heap
            // then takes the grown sets in the same order as below.
            join_all(smallest, others.iter().copied(), others_first, walks, next, values);
        }
        for (size, (&small, &other)) in (k - m..k).zip(smallest.iter().zip(others)) {
            let grown = if S::WALKS {
                small
            } else if others_first {
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

pub(super) fn sort_descending<S: SumInt>(sets: &mut [Set<S>]) {
    sets.sort_unstable_by_key(|s| std::cmp::Reverse(s.key()));
}

/// Scratch space for [`sort_runs_descending`], kept across merges so they allocate nothing.
pub(super) struct RunSorter<S: SumInt> {
    pub(super) buffer: Vec<Set<S>>,
    pub(super) bounds: Vec<usize>,
    pub(super) next_bounds: Vec<usize>,
    pub(super) packed: Vec<u64>,
    /// The pending joins of a merge, for float sums ([`join_all`]).
    pub(super) walks: Vec<Walk<SetKey<S>>>,
}

impl<S: SumInt> RunSorter<S> {
    pub(super) fn new() -> Self {
        RunSorter {
            buffer: Vec::new(),
            bounds: Vec::new(),
            next_bounds: Vec::new(),
            packed: Vec::new(),
            walks: Vec::new(),
        }
    }

    /// Room to sort `k` sets without allocating (a no-op once there).
    pub(super) fn reserve(&mut self, k: usize) -> Result<(), CoreError> {
        alloc::room_for(&mut self.buffer, k, "merge scratch")?;
        alloc::room_for(&mut self.bounds, k + 1, "merge scratch")?;
        alloc::room_for(&mut self.next_bounds, k + 1, "merge scratch")?;
        alloc::room_for(&mut self.packed, k, "merge scratch")?;
        if S::WALKS {
            alloc::room_for(&mut self.walks, k, "merge scratch")?;
        }
        Ok(())
    }
}

pub(super) fn bits_for(value: u128) -> u32 {
    128 - value.leading_zeros()
}

/// Sort `sets` descending through one `u64` per set, when `(sum, count, head)` relative to the
/// smallest sum and count, plus the set's position, fit in 64 bits (they do in practice for
/// integer lengths: the sums of one state lie close together). Sorting 8-byte integers and then
/// moving each set once is several times cheaper than sorting the 32-byte sets by their wide keys.
/// When they do not fit, see [`sort_packed_wide`].
pub(super) fn sort_packed_descending<S: SumInt>(sets: &mut [Set<S>], sorter: &mut RunSorter<S>) {
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
        sort_packed_wide(sets, sorter, min_sum.to_u128(), sum_bits, position_bits);
        return;
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
}

/// [`sort_packed_descending`] when the fields do not fit in 64 bits: wide sums (float sums, whose
/// bit patterns lie some 2^40 units in the last place apart in one state of real costs, or
/// integer costs near 10^12). The packed integer is the sum's offset from the smallest, cut to
/// the bits left beside the position, and the position: sets whose cut sums differ are then in
/// order, and each group whose cut sums tie (equal sums ordered by count and first index, or
/// sums closer than the cut) is sorted by its keys afterwards. Measured at 2^20 lognormal float
/// costs, k = 1024, equal counts: the unstable sort of whole merged states that this replaces
/// was more instructions than the rest of the merges.
fn sort_packed_wide<S: SumInt>(
    sets: &mut [Set<S>],
    sorter: &mut RunSorter<S>,
    min_sum: u128,
    sum_bits: u32,
    position_bits: u32,
) {
    let dropped = (sum_bits + position_bits).saturating_sub(64);
    let packed = &mut sorter.packed;
    packed.clear();
    packed.extend(sets.iter().enumerate().map(|(position, set)| {
        let cut = ((S::key_sum(set.key()).to_u128() - min_sum) >> dropped) as u64;
        // The cut sum has at most 64 - position_bits bits; an empty position field (one set)
        // leaves a shift by 0.
        (cut << position_bits) | position as u64
    }));
    packed.sort_unstable();
    let buffer = &mut sorter.buffer;
    buffer.clear();
    let position_mask = (1u64 << position_bits) - 1;
    buffer.extend(packed.iter().rev().map(|&p| sets[(p & position_mask) as usize]));
    let mut start = 0;
    while start < packed.len() {
        // `buffer[i]` is `packed[len - 1 - i]`.
        let cut = packed[packed.len() - 1 - start] >> position_bits;
        let mut end = start + 1;
        while end < packed.len() && packed[packed.len() - 1 - end] >> position_bits == cut {
            end += 1;
        }
        if end - start > 1 {
            sort_descending(&mut buffer[start..end]);
        }
        start = end;
    }
    sets.copy_from_slice(buffer);
}

/// [`sort_descending`] for the sets of two full states just joined position by position.
///
/// This is the hot spot of `equal_size` (a sort of k sets after each of the n/k − 1 merges was
/// 60 % of the instructions at n = 2^20, k = 1024). The joined sets are far from random: set i of
/// the state with the larger spread took set k−1−i of the other, and the sums move little, so
/// they form a few long descending runs (about 18 per 1024 sets in that case, measured). A natural
/// merge sort finds the runs and merges neighbours pairwise, O(k log runs), ping-ponging between
/// `sets` and a reused buffer. More than four runs take [`sort_packed_descending`] (and very
/// short states with more runs than an eighth of their sets the unstable sort). Keys are unique,
/// so all give the one descending order.
pub(super) fn sort_runs_descending<S: SumInt>(sets: &mut [Set<S>], sorter: &mut RunSorter<S>) {
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
    if runs > 4 {
        sort_packed_descending(sets, sorter);
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
pub(super) fn merge_two_descending<S: SumInt>(left: &[Set<S>], right: &[Set<S>], out: &mut [Set<S>]) {
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
pub(super) fn sift_down_backwards<S: SumInt>(sets: &mut [Set<S>]) {
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
pub(super) fn sift_up_backwards<S: SumInt>(sets: &mut [Set<S>]) {
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
pub(super) fn merge_runs<S: SumInt>(sets: &mut Vec<Set<S>>, other: &[Set<S>]) -> Result<(), CoreError> {
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
pub(super) fn merge_overlapping<S: SumInt>(
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
        sorter.reserve(k)?;
        if S::WALKS {
            join_all(sets, other.iter().rev().copied(), false, &mut sorter.walks, next, values);
        } else {
            for (slot, &back) in sets.iter_mut().zip(other.iter().rev()) {
                *slot = join(*slot, back, next, values);
            }
        }
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
