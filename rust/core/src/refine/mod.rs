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
//! Float weights ([`refine_floats`]) run the same search on an integer image of the values and
//! are judged on exact loads.
//! Nothing depends on wall-clock time or hashing order, so the output is deterministic.

mod exact;
mod float;
mod local;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ops::{Add, AddAssign, BitAnd, BitOr, Shl, Shr, Sub, SubAssign};

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::{Interrupt, CHECK_EVERY};
use exact::exact_search;
pub use float::{refine_floats, refine_floats_interruptible};
use local::LocalSearch;

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
/// Work units (items examined) between two interrupt checks of the local search: about a
/// millisecond of scanning.
const CHECK_WORK: u64 = 1 << 20;
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
#[derive(Clone, Debug, PartialEq)]
pub enum RefineError {
    NoPartitions,
    EmptyPartition {
        partition: usize,
    },
    IndexOutOfRange {
        partition: usize,
        index: u32,
        n_values: usize,
    },
    DuplicateIndex {
        index: u32,
    },
    MissingIndex {
        index: usize,
    },
    /// A float weight that is NaN, infinite or negative ([`refine_floats`]).
    BadValue {
        position: usize,
    },
    /// Out of memory, or interrupted.
    Core(CoreError),
}

impl From<CoreError> for RefineError {
    fn from(error: CoreError) -> Self {
        RefineError::Core(error)
    }
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
            RefineError::BadValue { position } => write!(f, "values[{position}] must be finite and >= 0"),
            RefineError::Core(error) => error.fmt(f),
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
    refine_interruptible(values, parts, equal_size, mode, effort, &Interrupt::NEVER)
}

/// [`refine`], stopping with `RefineError::Core(CoreError::Interrupted)` when `interrupt` says so.
pub fn refine_interruptible(
    values: &[u64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<u32>>, RefineError> {
    validate_interruptible(values.len(), &parts, interrupt)?;
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    // Same search either way; u64 sums halve the cost of the exchange scans when they fit.
    Ok(if total < U64_SUMS_BELOW {
        refine_with::<u64>(values, parts, equal_size, mode, effort, interrupt)?
    } else {
        refine_with::<u128>(values, parts, equal_size, mode, effort, interrupt)?
    })
}

/// [`refine_interruptible`] in [`Mode::Local`] with the default effort, or `None` when the search
/// applies no exchange: the answer would then be `parts` itself, only renumbered (heaviest first)
/// and sorted inside, and a caller that only asks whether the refinement changed anything (the
/// refined candidate of `plan_dp_micro_batches`) skips reading it out.
pub fn refine_if_moved(
    values: &[u64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Option<Vec<Vec<u32>>>, RefineError> {
    fn run<S: Sum>(
        values: &[u64],
        parts: Vec<Vec<u32>>,
        equal_size: bool,
        interrupt: &Interrupt,
    ) -> Result<Option<Vec<Vec<u32>>>, CoreError> {
        let mut search = LocalSearch::<S>::new(values, parts, equal_size, interrupt)?;
        search.run(local_budget(values.len()), interrupt)?;
        if !search.moved() {
            return Ok(None);
        }
        Ok(Some(search.into_output()?))
    }
    validate_interruptible(values.len(), &parts, interrupt)?;
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    Ok(if total < U64_SUMS_BELOW {
        run::<u64>(values, parts, equal_size, interrupt)?
    } else {
        run::<u128>(values, parts, equal_size, interrupt)?
    })
}

fn refine_with<S: Sum>(
    values: &[u64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<u32>>, CoreError> {
    let n = values.len();
    let local_effort = match mode {
        Mode::Local => effort.unwrap_or_else(|| local_budget(n)),
        Mode::Exact => local_budget(n),
    };
    let mut search = LocalSearch::<S>::new(values, parts, equal_size, interrupt)?;
    search.run(local_effort, interrupt)?;
    if mode == Mode::Exact && n <= EXACT_MAX_ITEMS {
        let nodes = effort.unwrap_or(EXACT_DEFAULT_NODES);
        let counts: Vec<usize> = search.parts.iter().map(Vec::len).collect();
        let current_max = search.loads.iter().copied().max().map_or(0, Sum::to_u128);
        if let Some(better) = exact_search(values, &counts, equal_size, current_max, nodes, interrupt)? {
            // The exact search only cares about the maximum; polish the other loads too.
            search = LocalSearch::new(values, better, equal_size, interrupt)?;
            search.run(local_budget(n), interrupt)?;
        }
    }
    search.into_output()
}

/// Check that `parts` is a partition of `0..n_values` into non-empty parts; the first problem
/// found, in reading order, is the error.
pub fn validate(n_values: usize, parts: &[Vec<u32>]) -> Result<(), RefineError> {
    validate_interruptible(n_values, parts, &Interrupt::NEVER)
}

/// [`validate`], stopping when `interrupt` says so (marking tens of millions of indexes at
/// random places takes a good part of a second).
pub(super) fn validate_interruptible(
    n_values: usize,
    parts: &[Vec<u32>],
    interrupt: &Interrupt,
) -> Result<(), RefineError> {
    if parts.is_empty() {
        return Err(RefineError::NoPartitions);
    }
    let mut seen = alloc::filled(n_values, false, "index marks")?;
    for (p, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Err(RefineError::EmptyPartition { partition: p });
        }
        for (step, &index) in part.iter().enumerate() {
            interrupt.every(step)?;
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
