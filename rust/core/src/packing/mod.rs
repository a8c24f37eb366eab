//! Packing sequence lengths into packs whose total length stays within a capacity.
//!
//! Plain Rust; the binding crate (rust/bind/packing.rs) is the only place that talks to Python.
//!
//! Four classic online/offline bin-packing rules, all deterministic:
//! - next fit: input order; when an item does not fit the current pack, close it and open a new one;
//! - first fit: input order; the earliest opened pack with room, else a new pack;
//! - first fit decreasing: first fit over the items by length descending, ties by index ascending;
//! - best fit decreasing: same order; the fitting pack with the least room left, ties to the
//!   earliest opened pack, else a new pack.
//!
//! Packs come out in the order they were opened, and the indexes inside a pack in the order they
//! were placed.
//!
//! How it goes fast (a million lengths in a few tens of milliseconds):
//! - the decreasing order is a counting sort when the lengths are small against their count
//!   (every real batch: lengths up to a cap of a few tens of thousands), which also hands the fit
//!   loop the lengths in order, so it reads memory front to back ([`order`]);
//! - rooms are `u32` whenever the capacity fits in 32 bits, halving the memory the searches touch;
//! - first fit descends a max-tree over the pack slots, sized by the most packs any of these
//!   rules can open (fewer than `2 * total / capacity + 2`: two packs together always hold more
//!   than the capacity), not by the item count ([`first_fit`]);
//! - best fit keeps, for every possible room, the packs with that room left (a min-heap by pack
//!   number, for the ties) and a bitset of the rooms that have any, so the best fit is the first
//!   set bit at or after the item's length; packs left with less room than the shortest length
//!   are dropped, since nothing can join them ([`best_fit`]);
//! - the fit loop records only the pack of each placement; the packs' lists are grouped from it
//!   in one counting pass at the end ([`Packing::grouped`]), or the pack of each item read off
//!   ([`Packing::ids`]), with no vector per pack.

mod best_fit;
mod constrained;
mod first_fit;
mod order;
mod ordered;
mod steps;
#[cfg(test)]
mod tests;

use std::fmt;

pub use constrained::{packing_constrained, Constraints, Footprint};
pub use steps::{packed_steps, StepPlan};

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::{Interrupt, CHECK_EVERY};

/// Which packing rule to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    NextFit,
    FirstFit,
    FirstFitDecreasing,
    BestFitDecreasing,
}

impl Algorithm {
    /// The names the Python API uses: `next_fit`, `first_fit`, `ffd`, `bfd`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "next_fit" => Some(Self::NextFit),
            "first_fit" => Some(Self::FirstFit),
            "ffd" => Some(Self::FirstFitDecreasing),
            "bfd" => Some(Self::BestFitDecreasing),
            _ => None,
        }
    }
}

/// Why a set of lengths cannot be packed.
#[derive(Debug, PartialEq)]
pub enum PackError {
    /// One item alone is longer than a pack may be.
    TooLong { index: usize, length: u64, capacity: u64 },
    /// Out of memory, interrupted, or more items than the packer indexes (`u32`).
    Core(CoreError),
    /// `max_sequences` of 0: no pack could hold anything.
    NoSequencesAllowed,
    /// A key per item was asked for, and the counts differ.
    KeysLength { keys: usize, lengths: usize },
}

impl From<CoreError> for PackError {
    fn from(error: CoreError) -> Self {
        PackError::Core(error)
    }
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::TooLong { index, length, capacity } => {
                write!(f, "lengths[{index}] = {length} is longer than max_token_len ({capacity})")
            }
            PackError::Core(error) => error.fmt(f),
            PackError::NoSequencesAllowed => write!(f, "max_sequences must be >= 1, got 0"),
            PackError::KeysLength { keys, lengths } => {
                write!(f, "keys has {keys} entries for {lengths} lengths; one key per length is needed")
            }
        }
    }
}

/// A pack's room: `u32` when the capacity fits in 32 bits, else `u64`.
trait Room: Copy + Ord + std::ops::Sub<Output = Self> + fmt::Debug + 'static {
    const ZERO: Self;
    /// `value`, which the caller knows to be at most the capacity (so it fits).
    fn from_u64(value: u64) -> Self;
    fn to_u64(self) -> u64;
}

impl Room for u32 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn from_u64(value: u64) -> Self {
        value as u32
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
}

impl Room for u128 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn from_u64(value: u64) -> Self {
        value as u128
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
}

impl Room for u64 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn from_u64(value: u64) -> Self {
        value
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self
    }
}

/// What a packer decided: the pack of every placement, in placement order.
///
/// Packs are numbered in the order they were opened. Turn it into lists of indexes with
/// [`grouped`](Self::grouped), or into the pack of each item with [`ids`](Self::ids).
#[derive(Debug)]
pub struct Packing {
    /// The item placed at each step; `None` when the items were placed in input order.
    order: Option<Vec<u32>>,
    /// The pack that took the item of each step.
    step_pack: Vec<u32>,
    packs: usize,
}

impl Packing {
    /// How many packs were opened.
    pub fn pack_count(&self) -> usize {
        self.packs
    }

    /// How many items were packed.
    pub fn item_count(&self) -> usize {
        self.step_pack.len()
    }

    /// The pack of every item, by item index.
    pub fn ids<T: alloc::Zero + From<u32>>(&self, interrupt: &Interrupt) -> Result<Vec<T>, CoreError> {
        let n = self.step_pack.len();
        match &self.order {
            None => {
                let mut ids = alloc::with_capacity(n, "the pack ids")?;
                ids.extend(self.step_pack.iter().map(|&pack| T::from(pack)));
                Ok(ids)
            }
            Some(order) => {
                let mut ids = alloc::zeroed(n, "the pack ids")?;
                for (chunk, (items, packs)) in
                    order.chunks(CHECK_EVERY).zip(self.step_pack.chunks(CHECK_EVERY)).enumerate()
                {
                    interrupt.every(chunk * CHECK_EVERY)?;
                    for (&item, &pack) in items.iter().zip(packs) {
                        ids[item as usize] = T::from(pack);
                    }
                }
                Ok(ids)
            }
        }
    }

    /// The packs as lists of item indexes: packs in opening order, items in placement order.
    pub fn grouped(&self, interrupt: &Interrupt) -> Result<Grouped, CoreError> {
        let n = self.step_pack.len();
        // One counting pass: pack sizes, then where each pack starts, then every placement
        // dropped at its pack's next free position (placements arrive in order, so each pack's
        // items keep theirs).
        let mut starts = alloc::zeroed::<usize>(self.packs + 1, "the pack starts")?;
        for &pack in &self.step_pack {
            starts[pack as usize + 1] += 1;
        }
        for pack in 0..self.packs {
            starts[pack + 1] += starts[pack];
        }
        let mut next = alloc::collect(starts[..self.packs].iter().copied(), "the pack cursors")?;
        let mut items = alloc::zeroed::<u32>(n, "the packed items")?;
        for (step, &pack) in self.step_pack.iter().enumerate() {
            interrupt.every(step)?;
            let item = match &self.order {
                Some(order) => order[step],
                None => step as u32,
            };
            let cursor = &mut next[pack as usize];
            items[*cursor] = item;
            *cursor += 1;
        }
        Ok(Grouped { items, starts })
    }
}

/// Packs as one array of item indexes, pack after pack, and where each pack starts.
#[derive(Debug, PartialEq)]
pub struct Grouped {
    items: Vec<u32>,
    /// `starts[p]..starts[p + 1]` is pack `p` in `items`; one more entry than packs.
    starts: Vec<usize>,
}

impl Grouped {
    /// How many packs.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Whether there are no packs (no items).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The item indexes of each pack, in opening order.
    pub fn packs(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        self.starts.windows(2).map(|bounds| &self.items[bounds[0]..bounds[1]])
    }

    /// The packs as vectors of `usize` indexes.
    pub fn to_lists(&self) -> Result<Vec<Vec<usize>>, CoreError> {
        let mut lists = alloc::with_capacity(self.len(), "the packs")?;
        for pack in self.packs() {
            lists.push(alloc::collect(pack.iter().map(|&item| item as usize), "a pack")?);
        }
        Ok(lists)
    }
}

/// Pack `lengths` into packs of total length at most `capacity`; each pack lists item indexes.
///
/// Fails only when a single length exceeds `capacity` (the first such index is reported).
pub fn pack(lengths: &[u64], capacity: u64, algorithm: Algorithm) -> Result<Vec<Vec<usize>>, PackError> {
    pack_interruptible(lengths, capacity, algorithm, &Interrupt::NEVER)
}

/// [`pack`], stopping with `PackError::Core(CoreError::Interrupted)` when `interrupt` says so.
pub fn pack_interruptible(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<usize>>, PackError> {
    let packing = packing(lengths, capacity, algorithm, interrupt)?;
    Ok(packing.grouped(interrupt)?.to_lists()?)
}

/// What the rules need to know of the lengths before placing any.
struct Summary {
    total: u128,
    shortest: u64,
    longest: u64,
}

/// One pass over `lengths`: their total, shortest and longest, or the first one above `capacity`.
fn summarize(lengths: &[u64], capacity: u64) -> Result<Summary, PackError> {
    let mut summary = Summary { total: 0, shortest: u64::MAX, longest: 0 };
    for (index, &length) in lengths.iter().enumerate() {
        if length > capacity {
            return Err(PackError::TooLong { index, length, capacity });
        }
        summary.total += length as u128;
        summary.shortest = summary.shortest.min(length);
        summary.longest = summary.longest.max(length);
    }
    Ok(summary)
}

/// The most packs any of the four rules opens, capped by the item count.
///
/// Whenever a rule opens pack `j`, its first item did not fit in any earlier pack `i`, and packs
/// only fill up, so every two packs together hold more than `capacity`. Pairing the packs up,
/// `floor(m / 2) * capacity < total`, so `m < 2 * total / capacity + 2`.
fn most_packs(n: usize, total: u128, capacity: u64) -> usize {
    if capacity == 0 {
        // Every length is 0 (none may exceed the capacity): one pack holds them all.
        return n.min(1);
    }
    let bound = 2 * total / capacity as u128 + 2;
    usize::try_from(bound).map_or(n, |bound| bound.min(n))
}

/// Pack `lengths` under `capacity` with `algorithm`, stopping when `interrupt` says so.
///
/// Fails with [`PackError::TooLong`] on the first length above the capacity, and with
/// `CoreError::TooManyItems` from `u32::MAX - 1` items on (the packer indexes items in 32 bits).
pub fn packing(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    interrupt: &Interrupt,
) -> Result<Packing, PackError> {
    let summary = summarize(lengths, capacity)?;
    if lengths.len() >= u32::MAX as usize {
        return Err(CoreError::TooManyItems { n_items: lengths.len() }.into());
    }
    let packing = if capacity <= u32::MAX as u64 {
        packing_in::<u32>(lengths, capacity, algorithm, &summary, interrupt)
    } else {
        packing_in::<u64>(lengths, capacity, algorithm, &summary, interrupt)
    }?;
    Ok(packing)
}

/// [`packing`] with rooms of type `R` (which holds `capacity`).
fn packing_in<R: Room>(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    summary: &Summary,
    interrupt: &Interrupt,
) -> Result<Packing, CoreError> {
    let room = R::from_u64(capacity);
    let input_order = lengths.iter().map(|&length| R::from_u64(length));
    let slots = most_packs(lengths.len(), summary.total, capacity);
    let (order, (step_pack, packs)) = match algorithm {
        Algorithm::NextFit => (None, first_fit::next_fit(input_order, room, interrupt)?),
        Algorithm::FirstFit => (None, first_fit::first_fit(input_order, room, slots, interrupt)?),
        Algorithm::FirstFitDecreasing => {
            let (order, sorted) = order::decreasing::<R>(lengths, summary.longest, interrupt)?;
            (Some(order), first_fit::first_fit(sorted.iter().copied(), room, slots, interrupt)?)
        }
        Algorithm::BestFitDecreasing => {
            let (order, sorted) = order::decreasing::<R>(lengths, summary.longest, interrupt)?;
            let shortest = R::from_u64(summary.shortest.min(capacity));
            (Some(order), best_fit::best_fit(&sorted, room, shortest, interrupt)?)
        }
    };
    Ok(Packing { order, step_pack, packs })
}
