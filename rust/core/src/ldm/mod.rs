//! Largest differencing method (Karmarkar–Karp), k-way, with the reference's exact tie rules.
//!
//! A *set* is a run of items with a running sum; a *state* is k sets in descending set order.
//! States leave a priority queue by (spread, first set); the first absorbs the second (its set i
//! takes the other's set k−1−i) and goes back. The partitioning contract fixes every tie, so this
//! module returns exactly what the pure-Python reference returns.
//!
//! Speed comes from the representation, all of it in this module:
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
//!
//! The files: [`keys`] (set keys), [`state`] (states, merges and run sorts), [`queue`] (the queue
//! and the run), [`read`] (reading the answer out).

mod keys;
mod queue;
mod read;
mod state;

use crate::error::{check_shape, CoreError};
use crate::interrupt::Interrupt;
use crate::parts::Partition;
use crate::sort::{sort_items, SortedItems};
pub use keys::{Key128, SumInt, Walk};
use queue::Run;
use read::{read_lists, write_ids};

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
/// their own). [`crate::request::Request`] hands over the copy the binding made of the
/// caller's list or array.
pub(crate) fn karmarkar_karp_owned(
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
/// hold what [`SumInt::from_u64`] reads (float sums: the values' bit patterns). Also returns the
/// largest sum of the final sets (float sums check it for an overflow).
pub(crate) fn run_sorted<S: SumInt>(
    sorted: &SortedItems,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<(Partition, S), CoreError> {
    let (sets, next) = Run::<S>::new(sorted, k, equal_size, interrupt)?.run_to_end(interrupt)?;
    let largest = largest_sum(&sets);
    Ok((read_lists(&sets, k, &next, &sorted.index, interrupt)?, largest))
}

/// [`run_sorted`] answering with [`partition_ids_owned`]'s numbers instead of a partition: the
/// sorted values are freed before the numbers are allocated.
pub(crate) fn ids_sorted<S: SumInt>(
    mut sorted: SortedItems,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<(Vec<i64>, S), CoreError> {
    let (sets, next) = Run::<S>::new(&sorted, k, equal_size, interrupt)?.run_to_end(interrupt)?;
    let largest = largest_sum(&sets);
    sorted.values = Vec::new();
    Ok((write_ids(&sets, next, &sorted.index, interrupt)?, largest))
}

fn largest_sum<S: SumInt>(sets: &[keys::Set<S>]) -> S {
    sets.iter().map(keys::Set::sum).max().unwrap_or_default()
}

/// [`karmarkar_karp`] with each partition's indexes sorted ascending (partition order kept).
/// (Interruptible, and on values it may drop early: [`crate::request::Request`] with
/// [`crate::request::Output::Sorted`].)
pub fn balanced_partitions(values: &[u64], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    karmarkar_karp(values, k, equal_size)?.sorted_within(&Interrupt::NEVER)
}

#[cfg(test)]
mod tests;
