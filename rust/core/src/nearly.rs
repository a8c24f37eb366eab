//! Nearly equal counts (`equal_size="nearly"`): every partition gets `n / k` or `n / k + 1` items.
//!
//! The partition spec defines it on the equal-size rules: add `p = (-n) mod k` placeholders of
//! value 0 with indexes `-p, ..., -1`, run the equal-size algorithm on the `n + p` items, and drop
//! the placeholders from the final sets without re-ordering anything. Here the placeholders take
//! indexes `0..p` and every real item `i` becomes `i + p`: the same relative order of all indexes,
//! so every tie is decided as with negative indexes, and the partitioner runs unchanged.

use crate::alloc;
use crate::error::{check_shape, CoreError};
use crate::parts::Partition;

/// Run `equal_size_partitioner` on `values` with the spec's placeholders and drop them again.
///
/// Generic over the value type (placeholders are `T::default()`, a zero) so that every value
/// kind of the core gets the same construction. `equal_size_partitioner` must be the equal-size
/// algorithm; it sees `n + p` values, a multiple of `k`. Partition order and the order of the
/// real items inside each partition are the partitioner's.
pub fn with_placeholders<T: Copy + Default>(
    values: &[T],
    k: usize,
    equal_size_partitioner: impl FnOnce(&[T], usize) -> Result<Partition, CoreError>,
) -> Result<Partition, CoreError> {
    // The shape of the real request first: with placeholders, n < k would slip through.
    check_shape(values.len(), k, false)?;
    let p = (k - values.len() % k) % k;
    if p == 0 {
        return equal_size_partitioner(values, k);
    }
    let padded = padded(values, p)?;
    let with = equal_size_partitioner(&padded, k).map_err(|error| real_position(error, p))?;
    drop(padded);
    drop_placeholders(&with, p)
}

/// [`with_placeholders`] on values it owns, for a partitioner that takes its values by value:
/// `values` is dropped once copied behind the placeholders, so the run holds one copy of them.
pub(crate) fn with_placeholders_owned<T: Copy + Default>(
    values: Vec<T>,
    k: usize,
    equal_size_partitioner: impl FnOnce(Vec<T>, usize) -> Result<Partition, CoreError>,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, false)?;
    let p = (k - values.len() % k) % k;
    if p == 0 {
        return equal_size_partitioner(values, k);
    }
    let padded = padded(&values, p)?;
    drop(values);
    let with = equal_size_partitioner(padded, k).map_err(|error| real_position(error, p))?;
    drop_placeholders(&with, p)
}

/// `p` placeholders (zeros) followed by `values`.
fn padded<T: Copy + Default>(values: &[T], p: usize) -> Result<Vec<T>, CoreError> {
    let mut padded = alloc::with_capacity(values.len() + p, "the values with placeholders")?;
    padded.resize(p, T::default());
    padded.extend_from_slice(values);
    Ok(padded)
}

/// A bad float weight is named by its position among the real items (placeholders are 0).
fn real_position(error: CoreError, p: usize) -> CoreError {
    match error {
        CoreError::BadWeight { position, value } => CoreError::BadWeight { position: position - p, value },
        other => other,
    }
}

/// `partition` without the items below `p`, the others shifted back by `p`; nothing re-ordered.
fn drop_placeholders(partition: &Partition, p: usize) -> Result<Partition, CoreError> {
    let shift = p as u32;
    let mut order = alloc::with_capacity(partition.order.len() - p, "the partition")?;
    let mut offsets = alloc::with_capacity(partition.offsets.len(), "partition offsets")?;
    offsets.push(0);
    for part in partition.parts() {
        order.extend(part.iter().filter(|&&index| index >= shift).map(|&index| index - shift));
        offsets.push(order.len());
    }
    Ok(Partition { order, offsets })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldm::{balanced_partitions, karmarkar_karp};

    fn kk(values: &[u64], k: usize) -> Vec<Vec<u32>> {
        with_placeholders(values, k, |v, k| karmarkar_karp(v, k, true)).unwrap().to_vecs().unwrap()
    }

    fn balanced(values: &[u64], k: usize) -> Vec<Vec<u32>> {
        with_placeholders(values, k, |v, k| balanced_partitions(v, k, true)).unwrap().to_vecs().unwrap()
    }

    #[test]
    fn golden_values() {
        // The partition spec's table for equal_size="nearly".
        assert_eq!(kk(&[10, 20, 30, 40, 50], 2), vec![vec![0, 3, 2], vec![4, 1]]);
        assert_eq!(balanced(&[10, 20, 30, 40, 50], 2), vec![vec![0, 2, 3], vec![1, 4]]);
        assert_eq!(kk(&[5, 0, 0, 3, 1, 0, 2], 3), vec![vec![0, 2], vec![6, 4], vec![3, 5, 1]]);
        assert_eq!(balanced(&[5, 0, 0, 3, 1, 0, 2], 3), vec![vec![0, 2], vec![4, 6], vec![1, 3, 5]]);
        assert_eq!(kk(&[7; 7], 4), vec![vec![2, 3], vec![1, 4], vec![0, 5], vec![6]]);
        assert_eq!(kk(&[1, 2, 3, 4, 5, 6, 7, 8], 3), vec![vec![1, 5, 4], vec![0, 6, 3], vec![7, 2]]);
        assert_eq!(balanced(&[1, 2, 3, 4, 5, 6, 7, 8], 3), vec![vec![1, 4, 5], vec![0, 3, 6], vec![2, 7]]);
    }

    #[test]
    fn shape_errors_are_the_real_request_s() {
        let run = |values: &[u64], k| with_placeholders(values, k, |v, k| karmarkar_karp(v, k, true));
        assert_eq!(run(&[1, 2, 3], 5), Err(CoreError::TooFewItems { n_items: 3, k_partitions: 5 }));
        assert_eq!(run(&[], 1), Err(CoreError::TooFewItems { n_items: 0, k_partitions: 1 }));
        assert_eq!(run(&[1], 0), Err(CoreError::NoPartitions));
    }
}
