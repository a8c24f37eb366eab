//! Step 1 of the partitioners: item indexes ordered ascending by (value, index).

/// Indexes of `values` sorted ascending by `(value, index)`.
pub fn sorted_order(values: &[u64]) -> Vec<u32> {
    let mut pairs: Vec<(u64, u32)> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, i as u32))
        .collect();
    // Pairs are unique (indexes are), so an unstable sort gives the one right order.
    pairs.sort_unstable();
    pairs.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_index_order() {
        assert_eq!(sorted_order(&[5, 1, 5, 0, 1]), vec![3, 1, 4, 0, 2]);
        assert_eq!(sorted_order(&[]), Vec::<u32>::new());
    }
}
