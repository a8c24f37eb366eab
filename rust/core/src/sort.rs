//! Step 1 of the partitioners: items ordered ascending by (value, index).
//!
//! Sorting is the floor of the whole computation, so many lengths below 65536 take a counting
//! sort (one scatter of the indexes), and lengths that fit in 32 bits (every real sequence
//! length) otherwise take an LSD radix sort over `value << 32 | index` keys: one pass per
//! significant byte of the largest value, each stable, which keeps equal values in index order.
//! Wider values take a radix sort over `(value, index)` pairs (up to eight passes), tiny inputs a
//! comparison sort. Every loop over the items checks the caller's [`Interrupt`] once per chunk,
//! and every buffer is allocated fallibly.
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// Items in ascending `(value, index)` order, as two parallel arrays.
pub struct SortedItems {
    pub values: Vec<u64>,
    pub index: Vec<u32>,
}

/// Items handled between two interrupt checks.
const CHUNK: usize = 1 << 16;

/// Indexes of `values` sorted ascending by `(value, index)`.
pub fn sorted_order(values: &[u64]) -> Result<Vec<u32>, CoreError> {
    Ok(sort_items(values, &Interrupt::NEVER)?.index)
}

pub fn sort_items(values: &[u64], interrupt: &Interrupt) -> Result<SortedItems, CoreError> {
    if values.len() > 256 {
        if let Some(sorted) = radix_sort(values, interrupt)? {
            return Ok(sorted);
        }
        return wide_radix_sort(values, interrupt);
    }
    comparison_sort(values)
}

fn comparison_sort(values: &[u64]) -> Result<SortedItems, CoreError> {
    let mut pairs = alloc::collect(values.iter().enumerate().map(|(i, &v)| (v, i as u32)), "sort buffer")?;
    // Pairs are unique (indexes are), so an unstable sort gives the one right order.
    pairs.sort_unstable();
    Ok(SortedItems {
        values: alloc::collect(pairs.iter().map(|&(v, _)| v), "sorted values")?,
        index: alloc::collect(pairs.iter().map(|&(_, i)| i), "sorted order")?,
    })
}

/// Where each digit's run starts in the output of a pass.
fn digit_starts(counts: &[u32; 256]) -> [u32; 256] {
    let mut start = [0u32; 256];
    let mut running = 0u32;
    for (digit, &count) in counts.iter().enumerate() {
        start[digit] = running;
        running += count;
    }
    start
}

/// LSD radix sort of `value << 32 | index` keys, or `None` when a value needs more than 32 bits;
/// [`counting_sort`] instead for many values below 65536.
///
/// This is the floor of every partitioner, so its passes over memory are counted: one read that
/// fills the byte histograms (and finds out whether the values fit), a first pass that
/// scatters straight from `values` (building each key as it goes), and a last pass that scatters
/// straight into the two output arrays. Lengths below 65536 thus take three passes in all.
/// Bytes in which every key has the same digit would move nothing and are skipped.
fn radix_sort(values: &[u64], interrupt: &Interrupt) -> Result<Option<SortedItems>, CoreError> {
    let n = values.len();
    let mut counts = [[0u32; 256]; 4];
    let mut any_bits = 0u64;
    if n >= COUNTING_FROM {
        // One histogram of the low 16 bits: the whole value's when every value is below 65536.
        let mut low: Vec<u32> = alloc::zeroed(1 << 16, "the sort's histogram")?;
        for chunk in values.chunks(CHUNK) {
            interrupt.check()?;
            for &v in chunk {
                any_bits |= v;
                low[(v & 0xffff) as usize] += 1;
            }
        }
        if any_bits <= 0xffff {
            return counting_sort(values, &mut low, interrupt).map(Some);
        }
        for (digits, &count) in low.iter().enumerate() {
            counts[0][digits & 0xff] += count;
            counts[1][digits >> 8] += count;
        }
    } else {
        for chunk in values.chunks(CHUNK) {
            interrupt.check()?;
            for &v in chunk {
                any_bits |= v;
                counts[0][(v & 0xff) as usize] += 1;
                counts[1][((v >> 8) & 0xff) as usize] += 1;
            }
        }
    }
    // Sequence lengths rarely reach 65536: count the two high bytes only when some value does.
    if any_bits > u32::MAX as u64 {
        return Ok(None);
    }
    if any_bits > 0xffff {
        for chunk in values.chunks(CHUNK) {
            interrupt.check()?;
            for &v in chunk {
                counts[2][((v >> 16) & 0xff) as usize] += 1;
                counts[3][((v >> 24) & 0xff) as usize] += 1;
            }
        }
    } else {
        counts[2][0] = n as u32;
        counts[3][0] = n as u32;
    }
    let passes: Vec<usize> = (0..4).filter(|&byte| !counts[byte].contains(&(n as u32))).collect();
    // Zeroed memory costs nothing until written (and then in the loops that check interrupts).
    let mut sorted_values: Vec<u64> = alloc::zeroed(n, "sorted values")?;
    let mut index: Vec<u32> = alloc::zeroed(n, "sorted order")?;
    let Some((&last, middle)) = passes.split_last() else {
        // All values equal: index order is already sorted.
        sorted_values.copy_from_slice(values);
        index.iter_mut().enumerate().for_each(|(i, slot)| *slot = i as u32);
        return Ok(Some(SortedItems { values: sorted_values, index }));
    };
    let mut keys: Vec<u64>;
    let remaining: &[usize];
    if let Some((&first, rest)) = middle.split_first() {
        keys = alloc::zeroed(n, "sort keys")?;
        let mut start = digit_starts(&counts[first]);
        let shift = 8 * first;
        for (c, chunk) in values.chunks(CHUNK).enumerate() {
            interrupt.check()?;
            for (i, &v) in chunk.iter().enumerate() {
                let digit = ((v >> shift) & 0xff) as usize;
                keys[start[digit] as usize] = (v << 32) | (c * CHUNK + i) as u64;
                start[digit] += 1;
            }
        }
        remaining = rest;
    } else {
        keys = alloc::with_capacity(n, "sort keys")?;
        for (c, chunk) in values.chunks(CHUNK).enumerate() {
            interrupt.check()?;
            keys.extend(chunk.iter().enumerate().map(|(i, &v)| (v << 32) | (c * CHUNK + i) as u64));
        }
        remaining = &[];
    }
    if !remaining.is_empty() {
        let mut scratch = alloc::zeroed(n, "sort buffer")?;
        for &byte in remaining {
            let mut start = digit_starts(&counts[byte]);
            let shift = 32 + 8 * byte;
            for chunk in keys.chunks(CHUNK) {
                interrupt.check()?;
                for &key in chunk {
                    let digit = ((key >> shift) & 0xff) as usize;
                    scratch[start[digit] as usize] = key;
                    start[digit] += 1;
                }
            }
            std::mem::swap(&mut keys, &mut scratch);
        }
    }
    let mut start = digit_starts(&counts[last]);
    let shift = 32 + 8 * last;
    for chunk in keys.chunks(CHUNK) {
        interrupt.check()?;
        for &key in chunk {
            let digit = ((key >> shift) & 0xff) as usize;
            let to = start[digit] as usize;
            sorted_values[to] = key >> 32;
            index[to] = key as u32;
            start[digit] += 1;
        }
    }
    Ok(Some(SortedItems { values: sorted_values, index }))
}

/// From this many items, values below 65536 take [`counting_sort`]: its table of 65536 counts
/// (256 KiB, zeroed and summed once) then costs a few percent of the sort at most.
const COUNTING_FROM: usize = 1 << 15;

/// A counting sort of values below 65536, given their histogram (`counts[v]` items of value v;
/// overwritten). The sorted values are runs of equal values written in order, so only the
/// indexes are scattered, once, 4 bytes an item, in index order (which keeps ties in index
/// order). The two-pass radix sort scatters 8-byte keys, then 12-byte items (measured at 2^20
/// uniform lengths below 32768: 24.7M instructions instead of 49.8M, callgrind; the seeding sort
/// was a fifth of `partition_ids`' CPU time, perf).
fn counting_sort(
    values: &[u64],
    counts: &mut [u32],
    interrupt: &Interrupt,
) -> Result<SortedItems, CoreError> {
    let n = values.len();
    let mut sorted_values: Vec<u64> = alloc::with_capacity(n, "sorted values")?;
    for (value, count) in counts.iter_mut().enumerate() {
        interrupt.every(value)?;
        let start = sorted_values.len();
        sorted_values.resize(start + *count as usize, value as u64);
        // From here on, where the next item of this value goes.
        *count = start as u32;
    }
    let mut index: Vec<u32> = alloc::zeroed(n, "sorted order")?;
    for (c, chunk) in values.chunks(CHUNK).enumerate() {
        interrupt.check()?;
        for (i, &v) in chunk.iter().enumerate() {
            let to = &mut counts[v as usize];
            index[*to as usize] = (c * CHUNK + i) as u32;
            *to += 1;
        }
    }
    Ok(SortedItems { values: sorted_values, index })
}

/// The radix sort for values above 32 bits: `(value, index)` pairs, one stable pass per byte of
/// the value that varies, so that a wide input is neither slow nor deaf to interrupts.
fn wide_radix_sort(values: &[u64], interrupt: &Interrupt) -> Result<SortedItems, CoreError> {
    let n = values.len();
    let mut counts = [[0u32; 256]; 8];
    for chunk in values.chunks(CHUNK) {
        interrupt.check()?;
        for &v in chunk {
            for (byte, count) in counts.iter_mut().enumerate() {
                count[((v >> (8 * byte)) & 0xff) as usize] += 1;
            }
        }
    }
    let mut pairs = alloc::with_capacity(n, "sort buffer")?;
    for (c, chunk) in values.chunks(CHUNK).enumerate() {
        interrupt.check()?;
        pairs.extend(chunk.iter().enumerate().map(|(i, &v)| (v, (c * CHUNK + i) as u32)));
    }
    let mut scratch = alloc::filled(n, (0u64, 0u32), "sort buffer")?;
    for (byte, count) in counts.iter().enumerate() {
        if count.contains(&(n as u32)) {
            continue;
        }
        let mut start = digit_starts(count);
        let shift = 8 * byte;
        for chunk in pairs.chunks(CHUNK) {
            interrupt.check()?;
            for &(v, i) in chunk {
                let digit = ((v >> shift) & 0xff) as usize;
                scratch[start[digit] as usize] = (v, i);
                start[digit] += 1;
            }
        }
        std::mem::swap(&mut pairs, &mut scratch);
    }
    drop(scratch);
    Ok(SortedItems {
        values: alloc::collect(pairs.iter().map(|&(v, _)| v), "sorted values")?,
        index: alloc::collect(pairs.iter().map(|&(_, i)| i), "sorted order")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_index_order() {
        assert_eq!(sorted_order(&[5, 1, 5, 0, 1]).unwrap(), vec![3, 1, 4, 0, 2]);
        assert_eq!(sorted_order(&[]).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn radix_and_comparison_sorts_agree() {
        let mut state: u64 = 12345;
        // One pass, two, three, four, and values too wide for the 32-bit radix sort.
        for (n, modulus) in [
            (300usize, 7u64),
            (1000, 300),
            (5000, 1 << 20),
            (4000, 1 << 31),
            (3000, u32::MAX as u64 + 1),
            (400, 1),
            (3000, u64::MAX),
            // Past COUNTING_FROM: the counting sort (values below 65536, ties, all equal), and
            // the radix sort from the counting sort's histogram.
            (70_000, 7),
            (40_000, 1 << 16),
            (40_000, 1),
            (40_000, (1 << 16) + 1),
            (50_000, 1 << 31),
            (40_000, u32::MAX as u64 + 1),
        ] {
            let mut values: Vec<u64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if modulus == u64::MAX {
                        // Full width, with ties.
                        (state | 1) << (state % 3)
                    } else {
                        (state >> 11) % modulus
                    }
                })
                .collect();
            if modulus != u64::MAX {
                // The largest value present, so each case takes the path its bound names.
                values[n / 2] = modulus - 1;
            }
            let radix = sort_items(&values, &Interrupt::NEVER).unwrap();
            let plain = comparison_sort(&values).unwrap();
            assert_eq!(radix.index, plain.index);
            assert_eq!(radix.values, plain.values);
        }
    }

    #[test]
    fn an_interrupt_stops_the_sort() {
        let values: Vec<u64> = (0..100_000u64).map(|i| (i * 7919) % 100_003).collect();
        let wide: Vec<u64> = values.iter().map(|&v| v << 40).collect();
        let short: Vec<u64> = values.iter().map(|&v| v % 60_000).collect();
        let stop = || true;
        for input in [&values, &wide, &short] {
            assert_eq!(sort_items(input, &Interrupt::new(&stop)).err(), Some(CoreError::Interrupted));
        }
    }
}
