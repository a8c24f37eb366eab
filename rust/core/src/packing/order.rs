//! The order of the decreasing rules: items by length descending, ties by index ascending.
//!
//! Both ways return the item indexes in that order and the lengths beside them, so the fit loop
//! reads lengths front to back instead of looking each one up at a random place.
use super::Room;
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::{Interrupt, CHECK_EVERY};
use crate::sort;

/// Items in decreasing order and their lengths (`longest` is the largest of `lengths`).
pub(super) fn decreasing<R: Room>(
    lengths: &[u64],
    longest: u64,
    interrupt: &Interrupt,
) -> Result<(Vec<u32>, Vec<R>), CoreError> {
    if counting_pays(lengths.len(), longest) {
        by_counting(lengths, longest, interrupt)
    } else {
        by_sorting(lengths, longest, interrupt)
    }
}

/// Whether a counting sort (one counter per length value) beats sorting: when there are not
/// many more possible values than items, and not so few items that clearing the counters
/// would cost more than sorting them.
pub(super) fn counting_pays(n: usize, longest: u64) -> bool {
    n >= 64 && longest <= 4 * n as u64 + 4096
}

/// A counting sort: count each length, lay the runs out longest first, then drop every index
/// at the next free place of its length's run (in index order, so ties stay by index).
pub(super) fn by_counting<R: Room>(
    lengths: &[u64],
    longest: u64,
    interrupt: &Interrupt,
) -> Result<(Vec<u32>, Vec<R>), CoreError> {
    let n = lengths.len();
    let mut next = alloc::zeroed::<u32>(longest as usize + 1, "the length counts")?;
    for (chunk, values) in lengths.chunks(CHECK_EVERY).enumerate() {
        interrupt.every(chunk * CHECK_EVERY)?;
        for &length in values {
            next[length as usize] += 1;
        }
    }
    let mut sorted = alloc::with_capacity(n, "the sorted lengths")?;
    let mut start = 0u32;
    for length in (0..=longest as usize).rev() {
        let count = next[length];
        next[length] = start;
        start += count;
        sorted.extend(std::iter::repeat_n(R::from_u64(length as u64), count as usize));
    }
    let mut order = alloc::zeroed::<u32>(n, "the packing order")?;
    for (chunk, values) in lengths.chunks(CHECK_EVERY).enumerate() {
        interrupt.every(chunk * CHECK_EVERY)?;
        let first = chunk * CHECK_EVERY;
        for (offset, &length) in values.iter().enumerate() {
            let place = &mut next[length as usize];
            order[*place as usize] = (first + offset) as u32;
            *place += 1;
        }
    }
    Ok((order, sorted))
}

/// The partitioners' sort (radix, or comparison for few items) of `longest - length`: ascending
/// by that and by index is descending by length with ties by index.
pub(super) fn by_sorting<R: Room>(
    lengths: &[u64],
    longest: u64,
    interrupt: &Interrupt,
) -> Result<(Vec<u32>, Vec<R>), CoreError> {
    let complements = alloc::collect(lengths.iter().map(|&length| longest - length), "the packing keys")?;
    let sorted = sort::sort_items(&complements, interrupt)?;
    drop(complements);
    let lengths = alloc::collect(
        sorted.values.iter().map(|&complement| R::from_u64(longest - complement)),
        "the sorted lengths",
    )?;
    Ok((sorted.index, lengths))
}
