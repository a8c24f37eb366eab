//! Float weights: the partitioners on `f64` or `f32` values, computed exactly as the reference
//! computes with such values (Python floats, or NumPy float32 scalars under NumPy 2).
//!
//! The largest differencing method is the one of [`crate::ldm`], with float sums in place of exact
//! ones. Three rules of the partitioning contract ("Float weights") make it reproduce the
//! reference bit for bit:
//! * a set's sum is the left fold of its items in insertion order, starting from 0, in the working
//!   precision: when set A absorbs set B, A's sum is advanced by each of B's values in turn (the
//!   reference's `self.sum += val` per item), so merges walk B's items instead of adding B's sum;
//! * a state's spread is `first.sum - last.sum`, rounded in the working precision;
//! * `-0.0` is `0.0`: values are normalised to `+0.0` on the way in, which changes no sum
//!   (`x + -0.0 == x + 0.0` for every `x` but `-0.0`, and sums start at `+0.0`).
//!
//! Values are finite and `>= 0`, so a sum's bit pattern orders as its value does: sums and keys
//! are stored as bits and compared as integers, like the exact path's.
//!
//! [`greedy_partition`] replays the reference's operations in the working precision: the bias
//! (`sum(values) + 1`, summed in input order), each biased value, and the running sums.
use std::ops::{Add, AddAssign, Sub};

use crate::alloc;
use crate::error::{check_shape, CoreError};
use crate::interrupt::Interrupt;
use crate::ldm::{ids_sorted, run_sorted, Key128, SumInt, Walk};
use crate::parts::Partition;
use crate::sort::{sort_items, SortedItems};

/// A float type the partitioners compute in: `f64` (double) or `f32` (single).
pub trait Float: Copy + PartialOrd + Send + Sync + std::fmt::Display + 'static {
    /// The sum type of the largest differencing method in this precision.
    #[doc(hidden)]
    type Sum: SumInt;
    /// Significand bits: integers below `2^MANTISSA_BITS` are exact.
    const MANTISSA_BITS: u32;
    const ZERO: Self;
    const ONE: Self;
    /// The value's bit pattern as a `u64` (zero-extended), `-0.0` read as `0.0`.
    fn key_bits(self) -> u64;
    fn from_key_bits(bits: u64) -> Self;
    fn is_finite(self) -> bool;
    fn to_f64(self) -> f64;
    fn plus(self, other: Self) -> Self;
}

macro_rules! float_sum {
    ($sum:ident, $float:ty, $bits:ty) => {
        /// A non-negative sum in this precision, stored as its bits (ordered as the value).
        #[doc(hidden)]
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Debug)]
        pub struct $sum($bits);

        impl $sum {
            #[inline]
            fn value(self) -> $float {
                <$float>::from_bits(self.0)
            }
            #[inline]
            fn of(value: $float) -> Self {
                $sum(value.to_bits())
            }
        }

        impl Add for $sum {
            type Output = Self;
            #[inline]
            fn add(self, other: Self) -> Self {
                $sum::of(self.value() + other.value())
            }
        }

        impl AddAssign for $sum {
            #[inline]
            fn add_assign(&mut self, other: Self) {
                *self = *self + other;
            }
        }

        impl Sub for $sum {
            type Output = Self;
            /// Only ever `larger - smaller`: the result is `>= +0.0` (`x - x` is `+0.0`).
            #[inline]
            fn sub(self, other: Self) -> Self {
                $sum::of(self.value() - other.value())
            }
        }

        // Keys as the exact path's u64 keys: `sum bits << 64 | count << 32 | first index`.
        impl SumInt for $sum {
            type Key = Key128;
            #[inline]
            fn from_u64(bits: u64) -> Self {
                $sum(bits as $bits)
            }
            #[inline]
            fn key(sum: Self, count: u32, head: u32) -> Key128 {
                Key128::new(((sum.0 as u128) << 64) | ((count as u128) << 32) | head as u128)
            }
            #[inline]
            fn key_sum(key: Key128) -> Self {
                $sum((key.get() >> 64) as $bits)
            }
            #[inline]
            fn key_count(key: Key128) -> u32 {
                (key.get() >> 32) as u32
            }
            #[inline]
            fn key_head(key: Key128) -> u32 {
                key.get() as u32
            }
            /// The bit pattern, which orders as the (non-negative) sum does.
            #[inline]
            fn to_u128(self) -> u128 {
                self.0 as u128
            }
            /// Adds the two sums as wholes: not the reference's rounding, so the method uses
            /// [`SumInt::key_absorb`] instead.
            #[inline]
            fn key_join(front: Key128, back: Key128) -> Key128 {
                let sum = Self::key_sum(front) + Self::key_sum(back);
                Self::key(sum, Self::key_count(front) + Self::key_count(back), Self::key_head(front))
            }
            /// The hot loop of float merges: one dependent load per item of `back` (the reference
            /// pays the same walk, one Python addition per item).
            #[inline]
            fn key_absorb(
                front: Key128,
                back: Key128,
                back_first: u32,
                next: &[u32],
                values: &[u64],
            ) -> Key128 {
                let count = Self::key_count(back);
                let mut sum = Self::key_sum(front).value();
                let mut rank = back_first as usize;
                for _ in 0..count {
                    sum += <$float>::from_bits(values[rank] as $bits);
                    rank = next[rank] as usize;
                }
                Self::key($sum::of(sum), Self::key_count(front) + count, Self::key_head(front))
            }
            const WALKS: bool = true;
            /// [`SumInt::key_absorb`] for independent walks, [`LANES`] of them side by side:
            /// each walk's additions stay in their order, but the walks' dependent loads (each
            /// step's link names the next item) and additions overlap instead of waiting for
            /// each other. Merges of full states join up to k pairs of sets at once, and there
            /// the walks are long (measured at 2^20 lognormal costs, k = 1024, free counts:
            /// 15.5 million items walked, 98 % of them in such batches).
            #[inline]
            fn absorb_all(walks: &mut [Walk<Key128>], next: &[u32], values: &[u64]) {
                let value = |rank: u32| <$float>::from_bits(values[rank as usize] as $bits);
                let mut sums = [0.0 as $float; LANES];
                let mut ranks = [0u32; LANES];
                let mut left = [0u32; LANES];
                let mut slots = [0usize; LANES];
                let mut active = 0;
                let mut pending = 0;
                loop {
                    while active < LANES && pending < walks.len() {
                        let walk = walks[pending];
                        let start = Self::key_sum(walk.key).value();
                        let count = Self::key_count(walk.back);
                        if count == 1 {
                            // One addition: nothing to overlap.
                            let sum = $sum::of(start + value(walk.first));
                            walks[pending].key =
                                Self::key(sum, Self::key_count(walk.key) + 1, Self::key_head(walk.key));
                        } else {
                            sums[active] = start;
                            ranks[active] = walk.first;
                            left[active] = count;
                            slots[active] = pending;
                            active += 1;
                        }
                        pending += 1;
                    }
                    if active == 0 {
                        break;
                    }
                    // Every lane takes as many steps as the shortest has left.
                    let steps = left[..active].iter().copied().min().unwrap_or(0);
                    for _ in 0..steps {
                        for lane in 0..active {
                            sums[lane] += value(ranks[lane]);
                            ranks[lane] = next[ranks[lane] as usize];
                        }
                    }
                    let mut lane = 0;
                    while lane < active {
                        left[lane] -= steps;
                        if left[lane] > 0 {
                            lane += 1;
                            continue;
                        }
                        let walk = &mut walks[slots[lane]];
                        let count = Self::key_count(walk.key) + Self::key_count(walk.back);
                        walk.key = Self::key($sum::of(sums[lane]), count, Self::key_head(walk.key));
                        active -= 1;
                        sums[lane] = sums[active];
                        ranks[lane] = ranks[active];
                        left[lane] = left[active];
                        slots[lane] = slots[active];
                    }
                }
            }
        }
    };
}

/// Walks that [`SumInt::absorb_all`] advances side by side.
const LANES: usize = 16;

float_sum!(Sum64, f64, u64);
float_sum!(Sum32, f32, u32);

impl Float for f64 {
    type Sum = Sum64;
    const MANTISSA_BITS: u32 = 53;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline]
    fn key_bits(self) -> u64 {
        // `self + 0.0` turns -0.0 into +0.0 and leaves every other value alone.
        (self + 0.0).to_bits()
    }
    #[inline]
    fn from_key_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    #[inline]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn plus(self, other: Self) -> Self {
        self + other
    }
}

impl Float for f32 {
    type Sum = Sum32;
    const MANTISSA_BITS: u32 = 24;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline]
    fn key_bits(self) -> u64 {
        (self + 0.0).to_bits() as u64
    }
    #[inline]
    fn from_key_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    #[inline]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn plus(self, other: Self) -> Self {
        self + other
    }
}

/// `value = mantissa * 2^exponent` for a finite `value >= 0` (`mantissa` below `2^53`).
pub(crate) fn decompose(value: f64) -> (u64, i32) {
    let bits = value.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), exponent - 1075)
    }
}

/// Every value finite and `>= 0` (`-0.0` counts as 0), or the first that is not.
pub fn check_values<F: Float>(values: &[F]) -> Result<(), CoreError> {
    match values.iter().position(|&v| !(v.is_finite() && v >= F::ZERO)) {
        Some(position) => Err(CoreError::BadWeight { position, value: values[position].to_f64() }),
        None => Ok(()),
    }
}

/// The values divided by the largest power of two that divides them all, when the total of
/// those integers stays below `2^F::MANTISSA_BITS`: then every sum of any of the values, in any
/// order, is exact in `F` (a multiple of that power of two below `2^MANTISSA_BITS` of it), and
/// so is every difference of two such sums. Integral weights such as lengths passed as floats
/// take this path.
fn exact_image<F: Float>(values: &[F]) -> Result<Option<Vec<u64>>, CoreError> {
    // The lowest set bit of any value and the highest mantissa exponent: once a mantissa would
    // shift up by more than 10 bits there is no image (see the shifts below), whatever the other
    // values, so real-valued costs stop here after a few values instead of a pass over all.
    let (mut lowest, mut highest) = (i32::MAX, i32::MIN);
    for &value in values {
        let (mantissa, exponent) = decompose(value.to_f64());
        if mantissa != 0 {
            lowest = lowest.min(exponent + mantissa.trailing_zeros() as i32);
            highest = highest.max(exponent);
            if highest - lowest > 10 {
                return Ok(None);
            }
        }
    }
    let lowest = if lowest == i32::MAX { 0 } else { lowest };
    let mut image = alloc::with_capacity(values.len(), "the weights' integer image")?;
    let limit = 1u64 << F::MANTISSA_BITS;
    let mut total = 0u64;
    for &value in values {
        let (mantissa, exponent) = decompose(value.to_f64());
        let shift = exponent - lowest;
        // `shift < 0` only drops zero bits (no value has a set bit below `lowest`).
        let scaled = match shift {
            _ if mantissa == 0 => 0,
            ..=-1 => mantissa >> -shift,
            0..=10 => mantissa << shift,
            _ => return Ok(None),
        };
        total += scaled;
        if total >= limit {
            return Ok(None);
        }
        image.push(scaled);
    }
    Ok(Some(image))
}

/// Items handled between two interrupt checks in [`sort_bits`].
const CHUNK: usize = 1 << 16;

/// Digit width of [`sort_bits`]' passes: 256 counters and write positions.
///
/// Why bytes and not 11-bit digits (three passes instead of four): a pass writes to as many
/// places at once as its digit has values, and 2048 of them overflow the cache's lines and the
/// TLB's pages, so each 11-bit pass over random low bits took about 8 ms at 2^20 lognormal
/// costs against about 2 ms for a byte pass (the whole sort, best of 20 in one process on a
/// loaded machine: 18.0-19.5 ms against 14.6-15.7 ms; the top digit, which few values share,
/// was always fast).
const DIGIT: u32 = 8;
const DIGIT_MASK: u64 = (1 << DIGIT) - 1;

/// Digits of the pattern in a [`sort_bits`] key.
const DIGITS: usize = 4;

/// Pattern bits in a [`sort_bits`] key.
const KEY_BITS: u32 = DIGITS as u32 * DIGIT;

/// The items in ascending `(bit pattern, index)` order (`values` as [`Float::key_bits`]): what
/// [`sort_items`] gives on the patterns, in fewer passes over less memory.
///
/// Float patterns are wide (a double's spans 50 to 60 bits on real costs), so `sort_items` would
/// take its wide radix sort: a pass per byte over 16-byte `(value, index)` pairs, eight for
/// doubles. Here each item is one `u64` key, the pattern's offset from the lowest one cut to its
/// top [`KEY_BITS`] bits, above the index; an LSD radix sort on those bits (the passes are stable
/// and start in index order, which orders ties by index) takes four byte passes over 8-byte
/// keys, fewer where a byte is the same in every key; the first builds the keys from the values
/// as it reads them. Items whose cut patterns tie without their patterns being equal (rare:
/// their patterns lie within 2^`dropped` units in the last place of each other; some hundreds
/// at 2^20 lognormal costs) are put in order afterwards, run by run, so adversarial inputs (many
/// close values beside a huge one) cost at most a comparison sort more.
pub fn sort_bits<F: Float>(values: &[F], interrupt: &Interrupt) -> Result<SortedItems, CoreError> {
    let n = values.len();
    if n <= 256 {
        let bits = alloc::collect(values.iter().map(|v| v.key_bits()), "the weights' bits")?;
        return sort_items(&bits, interrupt);
    }
    let (mut lowest, mut highest) = (u64::MAX, 0u64);
    for chunk in values.chunks(CHUNK) {
        interrupt.check()?;
        for value in chunk {
            let bits = value.key_bits();
            lowest = lowest.min(bits);
            highest = highest.max(bits);
        }
    }
    // Indexes are u32, so index and cut pattern fit in 64 bits.
    let index_bits = u64::BITS - ((n - 1) as u64).leading_zeros();
    let range_bits = u64::BITS - (highest - lowest).leading_zeros();
    let dropped = range_bits.saturating_sub(KEY_BITS);
    let passes = (range_bits - dropped).div_ceil(DIGIT) as usize;
    let key_of = |c: usize, i: usize, value: &F| {
        (((value.key_bits() - lowest) >> dropped) << index_bits) | (c * CHUNK + i) as u64
    };
    let mut counts = [[0u32; 1 << DIGIT]; DIGITS];
    for (c, chunk) in values.chunks(CHUNK).enumerate() {
        interrupt.check()?;
        for (i, value) in chunk.iter().enumerate() {
            let key = key_of(c, i, value);
            for (pass, count) in counts.iter_mut().enumerate() {
                count[((key >> (index_bits + DIGIT * pass as u32)) & DIGIT_MASK) as usize] += 1;
            }
        }
    }
    let digit_starts = |pass: usize| {
        let mut start = [0u32; 1 << DIGIT];
        let mut running = 0;
        for (slot, &count) in start.iter_mut().zip(&counts[pass]) {
            *slot = running;
            running += count;
        }
        start
    };
    // Passes in which every key has the same digit would move nothing.
    let mut moving = (0..passes).filter(|&pass| !counts[pass].contains(&(n as u32)));
    let mut keys: Vec<u64>;
    if let Some(pass) = moving.next() {
        keys = alloc::zeroed(n, "sort keys")?;
        let mut start = digit_starts(pass);
        let shift = index_bits + DIGIT * pass as u32;
        for (c, chunk) in values.chunks(CHUNK).enumerate() {
            interrupt.check()?;
            for (i, value) in chunk.iter().enumerate() {
                let key = key_of(c, i, value);
                let to = &mut start[((key >> shift) & DIGIT_MASK) as usize];
                keys[*to as usize] = key;
                *to += 1;
            }
        }
    } else {
        keys = alloc::with_capacity(n, "sort keys")?;
        for (c, chunk) in values.chunks(CHUNK).enumerate() {
            interrupt.check()?;
            keys.extend(chunk.iter().enumerate().map(|(i, value)| key_of(c, i, value)));
        }
    }
    let mut scratch: Vec<u64> = Vec::new();
    for pass in moving {
        if scratch.is_empty() {
            scratch = alloc::zeroed(n, "sort buffer")?;
        }
        let mut start = digit_starts(pass);
        let shift = index_bits + DIGIT * pass as u32;
        for chunk in keys.chunks(CHUNK) {
            interrupt.check()?;
            for &key in chunk {
                let to = &mut start[((key >> shift) & DIGIT_MASK) as usize];
                scratch[*to as usize] = key;
                *to += 1;
            }
        }
        std::mem::swap(&mut keys, &mut scratch);
    }
    let index_mask = (1u64 << index_bits) - 1;
    // The sorted patterns go into the buffer the last pass read from (empty when fewer than two
    // passes moved): memory already touched, instead of fresh pages to fault in.
    let mut sorted_values = scratch;
    sorted_values.clear();
    alloc::reserve(&mut sorted_values, n, "sorted values")?;
    let mut sorted = SortedItems {
        index: alloc::collect(keys.iter().map(|&key| (key & index_mask) as u32), "sorted order")?,
        values: sorted_values,
    };
    if dropped == 0 {
        // The keys hold the whole patterns: no reads of the values in a random order.
        sorted.values.extend(keys.iter().map(|&key| (key >> index_bits) + lowest));
    } else {
        for chunk in sorted.index.chunks(CHUNK) {
            interrupt.check()?;
            sorted.values.extend(chunk.iter().map(|&i| values[i as usize].key_bits()));
        }
        order_ties(&mut sorted, &keys, index_bits, interrupt)?;
    }
    Ok(sorted)
}

/// Puts in `(value, index)` order each run of items whose cut patterns (`keys >> index_bits`)
/// tie: inside a run the items are in index order, and their values may not be (see
/// [`sort_bits`]).
fn order_ties(
    sorted: &mut SortedItems,
    keys: &[u64],
    index_bits: u32,
    interrupt: &Interrupt,
) -> Result<(), CoreError> {
    let n = keys.len();
    let mut start = 0;
    while start + 1 < n {
        // The next tie (the common case is none for thousands of items).
        let Some(offset) = keys[start..].windows(2).position(|w| (w[0] ^ w[1]) >> index_bits == 0) else {
            break;
        };
        interrupt.check()?;
        let first = start + offset;
        let high = keys[first] >> index_bits;
        let end = first + keys[first..].iter().take_while(|&&key| key >> index_bits == high).count();
        start = end;
        let run = first..end;
        if sorted.values[run.clone()].is_sorted() {
            continue;
        }
        // `sort_items` orders the run by (value, position in the run), and positions follow the
        // indexes.
        let order = sort_items(&sorted.values[run.clone()], interrupt)?;
        let indexes =
            alloc::collect(order.index.iter().map(|&p| sorted.index[run.start + p as usize]), "sort buffer")?;
        sorted.index[run.clone()].copy_from_slice(&indexes);
        sorted.values[run].copy_from_slice(&order.values);
    }
    Ok(())
}

/// The largest differencing method on float weights, in their precision; see [`crate::ldm::karmarkar_karp`].
///
/// Values must be finite and `>= 0` ([`CoreError::BadWeight`] names the first that is not). The
/// partitioning contract also refuses totals above half the largest finite value, which keeps
/// every sum finite; should a sum still reach infinity, the answer is refused with
/// [`CoreError::SumOverflow`] rather than computed with NaN spreads.
pub fn karmarkar_karp<F: Float>(values: &[F], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    karmarkar_karp_interruptible(values, k, equal_size, &Interrupt::NEVER)
}

/// [`karmarkar_karp`], stopping with [`CoreError::Interrupted`] when `interrupt` says so.
pub fn karmarkar_karp_interruptible<F: Float>(
    values: &[F],
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    check_values(values)?;
    if let Some(image) = exact_image(values)? {
        // Every sum is exact, so the order of additions cannot matter: the exact path (O(1)
        // merges) gives the same answer on the scaled values.
        return crate::ldm::karmarkar_karp_owned(image, k, equal_size, interrupt);
    }
    let sorted = sort_bits(values, interrupt)?;
    run_float::<F>(sorted, k, equal_size, interrupt)
}

/// [`karmarkar_karp_interruptible`] on values it owns: they are dropped once read into their
/// bit patterns (or their exact integer image), so the run holds one copy less (see
/// [`crate::ldm::karmarkar_karp_owned`]). For [`crate::request`].
pub(crate) fn karmarkar_karp_owned<F: Float>(
    values: Vec<F>,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    check_values(&values)?;
    if let Some(image) = exact_image(&values)? {
        drop(values);
        return crate::ldm::karmarkar_karp_owned(image, k, equal_size, interrupt);
    }
    let sorted = sort_bits(&values, interrupt)?;
    drop(values);
    run_float::<F>(sorted, k, equal_size, interrupt)
}

/// For every item, the number of its partition (heaviest first): what
/// [`karmarkar_karp_owned`]`(..).ids(..)` gives, the float counterpart of
/// [`crate::ldm::partition_ids_owned`].
///
/// Errors as [`karmarkar_karp`]'s. Values with an exact integer image number their items
/// through [`crate::ldm::partition_ids_owned`].
pub fn partition_ids_owned<F: Float>(
    values: Vec<F>,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Vec<i64>, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    check_values(&values)?;
    if let Some(image) = exact_image(&values)? {
        drop(values);
        return crate::ldm::partition_ids_owned(image, k, equal_size, interrupt);
    }
    let sorted = sort_bits(&values, interrupt)?;
    drop(values);
    let (ids, largest) = ids_sorted::<F::Sum>(sorted, k, equal_size, interrupt)?;
    finite::<F>(largest)?;
    Ok(ids)
}

/// [`CoreError::SumOverflow`] unless the largest final sum is finite. Sums only grow as sets
/// absorb others (a fold of non-negative values is monotone in its start), so then every sum
/// and spread along the way was finite too. A final set's sum is the fold of its items in list
/// order, exactly what the reference's sum of that partition is.
fn finite<F: Float>(largest: F::Sum) -> Result<(), CoreError> {
    if F::from_key_bits(largest.to_u128() as u64).is_finite() {
        Ok(())
    } else {
        Err(CoreError::SumOverflow)
    }
}

/// The float method on the weights' sorted bit patterns, checked for a sum that overflowed.
fn run_float<F: Float>(
    sorted: SortedItems,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    let (partition, largest) = run_sorted::<F::Sum>(&sorted, k, equal_size, interrupt)?;
    finite::<F>(largest)?;
    Ok(partition)
}

/// [`karmarkar_karp`] with each partition's indexes sorted ascending (partition order kept).
pub fn balanced_partitions<F: Float>(
    values: &[F],
    k: usize,
    equal_size: bool,
) -> Result<Partition, CoreError> {
    karmarkar_karp(values, k, equal_size)?.sorted_within(&Interrupt::NEVER)
}

/// verl's greedy helper on float weights, replaying the reference's arithmetic: `bias` is the
/// sum of the values in input order plus 1 (with `equal_size`), every item goes, in input order,
/// to the partition with the smallest running sum (lowest number on ties), whose sum then grows
/// by `value + bias`.
///
/// Rounding can make the biased sums lose the equal counts that `equal_size` promises (huge
/// totals, or many items per partition in single precision): that answer is refused with
/// [`CoreError::UnequalCounts`], as the reference's assertion refuses it.
pub fn greedy_partition<F: Float>(values: &[F], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    greedy_partition_interruptible(values, k, equal_size, &Interrupt::NEVER)
}

/// [`greedy_partition`], stopping with [`CoreError::Interrupted`] when `interrupt` says so.
pub fn greedy_partition_interruptible<F: Float>(
    values: &[F],
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    check_values(values)?;
    let values = alloc::collect(values.iter().map(|v| F::from_key_bits(v.key_bits())), "the weights")?;
    let bias =
        if equal_size { values.iter().fold(F::ZERO, |sum, &v| sum.plus(v)).plus(F::ONE) } else { F::ZERO };
    // Min-heap on (sum bits, partition): bits order as the non-negative sums do, +inf included
    // (sums may overflow to +inf here, as the reference's do; no NaN can arise from additions).
    let open = alloc::collect((0..k as u32).map(|p| std::cmp::Reverse((0u64, p))), "the partition heap")?;
    let mut open = std::collections::BinaryHeap::from(open);
    let mut sums = alloc::filled(k, F::ZERO, "partition sums")?;
    let mut assignment = alloc::zeroed(values.len(), "partition numbers")?;
    for (step, (slot, &value)) in assignment.iter_mut().zip(&values).enumerate() {
        interrupt.every(step)?;
        let Some(std::cmp::Reverse((_, p))) = open.pop() else {
            unreachable!("k >= 1 partitions are always open")
        };
        *slot = p;
        let sum = &mut sums[p as usize];
        *sum = sum.plus(value.plus(bias));
        open.push(std::cmp::Reverse((sum.key_bits(), p)));
    }
    let result = Partition::from_assignment(&assignment, k)?;
    if equal_size {
        let (smallest, largest) = result
            .parts()
            .map(<[u32]>::len)
            .fold((usize::MAX, 0), |(lo, hi), len| (lo.min(len), hi.max(len)));
        if smallest != largest {
            return Err(CoreError::UnequalCounts { smallest, largest });
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Adversarial doubles: zeros of both signs, subnormals, values straddling 2^53, one huge
    /// value, ties, close neighbours (patterns a few units apart) and plain random floats.
    fn double() -> impl Strategy<Value = f64> {
        prop_oneof![
            2 => (0u32..4).prop_map(f64::from),
            2 => (1u32..12).prop_map(|v| f64::from(v) * 0.1),
            1 => Just(-0.0),
            1 => (1u64..1000).prop_map(f64::from_bits),
            1 => (0u64..8).prop_map(|d| f64::from_bits(9_007_199_254_740_992f64.to_bits() - 4 + d)),
            1 => (0u64..1 << 30).prop_map(|d| f64::from_bits(1e12f64.to_bits() + d)),
            1 => Just(1e300),
            3 => 0.0f64..1e13,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The float sort is the wide sort on the patterns, on any input, including the cut
        /// patterns' ties (close neighbours beside a huge value).
        #[test]
        fn sort_bits_is_sort_items(values in prop::collection::vec(double(), 0..3000)) {
            let bits: Vec<u64> = values.iter().map(|v| v.key_bits()).collect();
            let expected = sort_items(&bits, &Interrupt::NEVER).unwrap();
            let got = sort_bits(&values, &Interrupt::NEVER).unwrap();
            prop_assert_eq!(&got.index, &expected.index);
            prop_assert_eq!(&got.values, &expected.values);
            let singles: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let bits: Vec<u64> = singles.iter().map(|v| v.key_bits()).collect();
            let expected = sort_items(&bits, &Interrupt::NEVER).unwrap();
            let got = sort_bits(&singles, &Interrupt::NEVER).unwrap();
            prop_assert_eq!(got.index, expected.index);
            prop_assert_eq!(got.values, expected.values);
        }

        /// The side-by-side walks give every sum bit for bit what one walk at a time gives.
        #[test]
        fn absorb_all_is_key_absorb(
            values in prop::collection::vec(double(), 1..400),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..60),
            starts in prop::collection::vec(double(), 60),
        ) {
            // Sets: the ranks cut into consecutive runs, each linked in a scrambled order.
            let n = values.len();
            let bits: Vec<u64> = values.iter().map(|v| v.key_bits()).collect();
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(n)).collect();
            bounds.extend([0, n]);
            bounds.sort_unstable();
            bounds.dedup();
            let mut next = vec![u32::MAX; n];
            let mut walks = Vec::new();
            for (w, pair) in bounds.windows(2).enumerate() {
                let ranks: Vec<u32> = (pair[0] as u32..pair[1] as u32).rev().collect();
                for link in ranks.windows(2) {
                    next[link[0] as usize] = link[1];
                }
                let start = starts[w % starts.len()].key_bits();
                let key = Sum64::key(Sum64::from_u64(start), 3, w as u32);
                let back = Sum64::key(Sum64::default(), ranks.len() as u32, 0);
                walks.push(Walk { key, back, first: ranks[0] });
            }
            let one_by_one: Vec<Key128> =
                walks.iter().map(|w| Sum64::key_absorb(w.key, w.back, w.first, &next, &bits)).collect();
            Sum64::absorb_all(&mut walks, &next, &bits);
            let side_by_side: Vec<Key128> = walks.iter().map(|w| w.key).collect();
            prop_assert_eq!(side_by_side, one_by_one);
        }

        /// `partition_ids_owned` numbers the items as the partition does, in both precisions
        /// and with k large enough that merges join many sets at once.
        #[test]
        fn ids_are_the_partitions(
            values in prop::collection::vec(double(), 1..600),
            k in 1usize..80,
            equal_size in any::<bool>(),
        ) {
            let k = k.min(values.len());
            let mut values = values;
            if equal_size {
                values.truncate(values.len() - values.len() % k);
            }
            let n = values.len();
            let never = &Interrupt::NEVER;
            let expected = karmarkar_karp(&values, k, equal_size).map(|p| p.ids(n, never).unwrap());
            prop_assert_eq!(partition_ids_owned(values.clone(), k, equal_size, never), expected);
            let singles: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let expected = karmarkar_karp(&singles, k, equal_size).map(|p| p.ids(n, never).unwrap());
            prop_assert_eq!(partition_ids_owned(singles, k, equal_size, never), expected);
        }
    }

    fn kk<F: Float>(values: &[F], k: usize, equal_size: bool) -> Vec<Vec<u32>> {
        karmarkar_karp(values, k, equal_size).unwrap().to_vecs().unwrap()
    }

    #[test]
    fn integral_floats_match_the_exact_path() {
        let ints: Vec<u64> = (0..500u64).map(|i| (i * 7919) % 1013).collect();
        let doubles: Vec<f64> = ints.iter().map(|&v| v as f64).collect();
        let singles: Vec<f32> = ints.iter().map(|&v| v as f32).collect();
        for k in [1, 2, 3, 5, 20, 100, 500] {
            for equal_size in [false, true] {
                if equal_size && 500 % k != 0 {
                    continue;
                }
                let exact = crate::ldm::karmarkar_karp(&ints, k, equal_size).unwrap().to_vecs().unwrap();
                assert_eq!(kk(&doubles, k, equal_size), exact);
                assert_eq!(kk(&singles, k, equal_size), exact);
            }
        }
    }

    #[test]
    fn exact_images_only_where_every_sum_is_exact() {
        assert_eq!(exact_image(&[1.0f64, 3.0, 0.0, 0.5]).unwrap(), Some(vec![2, 6, 0, 1]));
        assert_eq!(exact_image(&[0.25f32, 0.75, -0.0]).unwrap(), Some(vec![1, 3, 0]));
        assert_eq!(exact_image(&[5e-324f64, 1e-323]).unwrap(), Some(vec![1, 2]));
        // 2^24 + 1 is not exact in single precision, so neither is the total.
        assert_eq!(exact_image(&[16_777_216.0f32, 1.0]).unwrap(), None);
        assert_eq!(exact_image(&[16_777_215.0f32, 1.0]).unwrap(), None);
        assert_eq!(exact_image(&[16_777_214.0f32, 1.0]).unwrap(), Some(vec![16_777_214, 1]));
        assert_eq!(exact_image(&[0.1f64, 0.2]).unwrap(), None);
        assert_eq!(exact_image(&[1e300f64, 1.0]).unwrap(), None);
        // Stopped by the first two values: the third would only be read by a full pass.
        assert_eq!(exact_image(&[1e300f64, 1.0, 0.5]).unwrap(), None);
        assert_eq!(exact_image(&[1.0f64, 1e300, 0.0]).unwrap(), None);
    }

    #[test]
    fn negative_zero_is_zero() {
        let values = [0.0, -0.0, 1.0, -0.0];
        let plain = [0.0, 0.0, 1.0, 0.0];
        for k in [1, 2, 4] {
            assert_eq!(kk::<f64>(&values, k, false), kk::<f64>(&plain, k, false));
            assert_eq!(kk::<f64>(&values, k, k != 3), kk::<f64>(&plain, k, k != 3));
        }
    }

    #[test]
    fn refuses_bad_values() {
        assert!(matches!(
            karmarkar_karp(&[1.0, f64::NAN], 1, false),
            Err(CoreError::BadWeight { position: 1, value }) if value.is_nan()
        ));
        assert!(matches!(
            karmarkar_karp(&[1.0f32, -1.0], 1, false),
            Err(CoreError::BadWeight { position: 1, .. })
        ));
        assert!(matches!(
            greedy_partition(&[f64::INFINITY], 1, false),
            Err(CoreError::BadWeight { position: 0, .. })
        ));
        assert_eq!(karmarkar_karp(&[f32::MAX, f32::MAX], 1, false), Err(CoreError::SumOverflow));
    }

    #[test]
    fn greedy_replays_the_reference() {
        let got = greedy_partition(&[5.0, 1.0, 1.0, 4.0, 2.0], 2, false).unwrap().to_vecs().unwrap();
        assert_eq!(got, vec![vec![0, 4], vec![1, 2, 3]]);
        let got = greedy_partition(&[9.0f32, 1.0, 1.0, 1.0], 2, true).unwrap().to_vecs().unwrap();
        assert_eq!(got, vec![vec![0, 3], vec![1, 2]]);
    }

    #[test]
    fn greedy_refuses_counts_broken_by_rounding() {
        // The reference's biased sums overflow to +inf in single precision, after which ties go to
        // the lowest partition and the counts drift apart (found by a search over small inputs).
        let m = f32::MAX / 16.0;
        let values = [1.0f32, 3.0, 1.0, m, m, m, 4.0 * m, 33_554_432.0];
        assert_eq!(
            greedy_partition(&values, 2, true),
            Err(CoreError::UnequalCounts { smallest: 3, largest: 5 })
        );
    }
}
