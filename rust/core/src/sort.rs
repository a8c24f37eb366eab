//! Step 1 of the partitioners: items ordered ascending by (value, index).
//!
//! Sorting is the floor of the whole computation, so lengths that fit in 32 bits (every real
//! sequence length) take an LSD radix sort over `value << 32 | index` keys: one pass per
//! significant byte of the largest value, each stable, which keeps equal values in index order.
//! Wider values fall back to a comparison sort.

/// Items in ascending `(value, index)` order, as two parallel arrays.
pub struct SortedItems {
    pub values: Vec<u64>,
    pub index: Vec<u32>,
}

/// Indexes of `values` sorted ascending by `(value, index)`.
pub fn sorted_order(values: &[u64]) -> Vec<u32> {
    sort_items(values).index
}

pub fn sort_items(values: &[u64]) -> SortedItems {
    if values.len() > 256 {
        if let Some(sorted) = radix_sort(values) {
            return sorted;
        }
    }
    comparison_sort(values)
}

fn comparison_sort(values: &[u64]) -> SortedItems {
    let mut pairs: Vec<(u64, u32)> = values.iter().enumerate().map(|(i, &v)| (v, i as u32)).collect();
    // Pairs are unique (indexes are), so an unstable sort gives the one right order.
    pairs.sort_unstable();
    SortedItems {
        values: pairs.iter().map(|&(v, _)| v).collect(),
        index: pairs.iter().map(|&(_, i)| i).collect(),
    }
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

/// LSD radix sort of `value << 32 | index` keys, or `None` when a value needs more than 32 bits.
///
/// This is the floor of every partitioner, so its passes over memory are counted: one read that
/// fills the byte histograms (and finds out whether the values fit), a first pass that
/// scatters straight from `values` (building each key as it goes), and a last pass that scatters
/// straight into the two output arrays. Lengths below 65536 thus take three passes in all.
/// Bytes in which every key has the same digit would move nothing and are skipped.
fn radix_sort(values: &[u64]) -> Option<SortedItems> {
    let n = values.len();
    let mut counts = [[0u32; 256]; 4];
    let mut any_bits = 0u64;
    // Sequence lengths rarely reach 65536: count the two high bytes only when some value does.
    for &v in values {
        any_bits |= v;
        counts[0][(v & 0xff) as usize] += 1;
        counts[1][((v >> 8) & 0xff) as usize] += 1;
    }
    if any_bits > u32::MAX as u64 {
        return None;
    }
    if any_bits > 0xffff {
        for &v in values {
            counts[2][((v >> 16) & 0xff) as usize] += 1;
            counts[3][((v >> 24) & 0xff) as usize] += 1;
        }
    } else {
        counts[2][0] = n as u32;
        counts[3][0] = n as u32;
    }
    let passes: Vec<usize> = (0..4).filter(|&byte| !counts[byte].contains(&(n as u32))).collect();
    let mut sorted_values = vec![0u64; n];
    let mut index = vec![0u32; n];
    let Some((&last, middle)) = passes.split_last() else {
        // All values equal: index order is already sorted.
        sorted_values.copy_from_slice(values);
        index.iter_mut().enumerate().for_each(|(i, slot)| *slot = i as u32);
        return Some(SortedItems { values: sorted_values, index });
    };
    let mut keys: Vec<u64>;
    let remaining: &[usize];
    if let Some((&first, rest)) = middle.split_first() {
        keys = vec![0u64; n];
        let mut start = digit_starts(&counts[first]);
        let shift = 8 * first;
        for (i, &v) in values.iter().enumerate() {
            let digit = ((v >> shift) & 0xff) as usize;
            keys[start[digit] as usize] = (v << 32) | i as u64;
            start[digit] += 1;
        }
        remaining = rest;
    } else {
        keys = values.iter().enumerate().map(|(i, &v)| (v << 32) | i as u64).collect();
        remaining = &[];
    }
    if !remaining.is_empty() {
        let mut scratch = vec![0u64; n];
        for &byte in remaining {
            let mut start = digit_starts(&counts[byte]);
            let shift = 32 + 8 * byte;
            for &key in &keys {
                let digit = ((key >> shift) & 0xff) as usize;
                scratch[start[digit] as usize] = key;
                start[digit] += 1;
            }
            std::mem::swap(&mut keys, &mut scratch);
        }
    }
    let mut start = digit_starts(&counts[last]);
    let shift = 32 + 8 * last;
    for &key in &keys {
        let digit = ((key >> shift) & 0xff) as usize;
        let to = start[digit] as usize;
        sorted_values[to] = key >> 32;
        index[to] = key as u32;
        start[digit] += 1;
    }
    Some(SortedItems { values: sorted_values, index })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_index_order() {
        assert_eq!(sorted_order(&[5, 1, 5, 0, 1]), vec![3, 1, 4, 0, 2]);
        assert_eq!(sorted_order(&[]), Vec::<u32>::new());
    }

    #[test]
    fn radix_and_comparison_sorts_agree() {
        let mut state: u64 = 12345;
        // One pass, two, three, four, and values too wide for the radix sort.
        for (n, modulus) in [
            (300usize, 7u64),
            (1000, 300),
            (5000, 1 << 20),
            (4000, 1 << 31),
            (3000, u32::MAX as u64 + 1),
            (400, 1),
        ] {
            let values: Vec<u64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (state >> 11) % modulus
                })
                .collect();
            let radix = sort_items(&values);
            let plain = comparison_sort(&values);
            assert_eq!(radix.index, plain.index);
            assert_eq!(radix.values, plain.values);
        }
    }
}
