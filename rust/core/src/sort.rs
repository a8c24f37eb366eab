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
    let max = values.iter().copied().max().unwrap_or(0);
    if max <= u32::MAX as u64 && values.len() > 256 {
        radix_sort(values, max)
    } else {
        comparison_sort(values)
    }
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

fn radix_sort(values: &[u64], max: u64) -> SortedItems {
    let n = values.len();
    // One histogram per byte of a 32-bit value, all filled in a single read of the input.
    let mut counts = [[0u32; 256]; 4];
    for &v in values {
        counts[0][(v & 0xff) as usize] += 1;
        counts[1][((v >> 8) & 0xff) as usize] += 1;
        counts[2][((v >> 16) & 0xff) as usize] += 1;
        counts[3][((v >> 24) & 0xff) as usize] += 1;
    }
    let value_bytes = (64 - max.leading_zeros() as usize).div_ceil(8);
    // A byte in which every key has the same digit would not move anything: skip its pass.
    let passes: Vec<usize> = (0..value_bytes).filter(|&byte| !counts[byte].contains(&(n as u32))).collect();
    let mut keys: Vec<u64> = values.iter().enumerate().map(|(i, &v)| (v << 32) | i as u64).collect();
    let mut scratch = vec![0u64; n];
    for &byte in &passes {
        let mut start = [0u32; 256];
        let mut running = 0u32;
        for (digit, &count) in counts[byte].iter().enumerate() {
            start[digit] = running;
            running += count;
        }
        let shift = 32 + 8 * byte;
        for &key in &keys {
            let digit = ((key >> shift) & 0xff) as usize;
            scratch[start[digit] as usize] = key;
            start[digit] += 1;
        }
        std::mem::swap(&mut keys, &mut scratch);
    }
    SortedItems {
        values: keys.iter().map(|&key| key >> 32).collect(),
        index: keys.iter().map(|&key| key as u32).collect(),
    }
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
        for (n, modulus) in [(300usize, 7u64), (1000, 300), (5000, 1 << 20), (3000, u32::MAX as u64 + 1)] {
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
