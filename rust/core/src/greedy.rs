//! verl's greedy helper: items in input order, each to the partition with the smallest running sum.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::alloc;
use crate::error::{check_shape, CoreError};
use crate::interrupt::Interrupt;
use crate::parts::Partition;

/// Put each item, in input order, on the partition with the smallest running sum (lowest
/// partition number on ties). With `equal_size`, every value is compared with
/// `bias = sum(values) + 1` added, which forces round-robin counts.
pub fn greedy_partition(values: &[u64], k: usize, equal_size: bool) -> Result<Partition, CoreError> {
    greedy_partition_interruptible(values, k, equal_size, &Interrupt::NEVER)
}

/// [`greedy_partition`], stopping with [`CoreError::Interrupted`] when `interrupt` says so.
pub fn greedy_partition_interruptible(
    values: &[u64],
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    check_shape(values.len(), k, equal_size)?;
    // n < 2**32 and values < 2**64: sums and the biased sums stay below 2**128.
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    let bias = if equal_size { total + 1 } else { 0 };
    let open = alloc::collect((0..k as u32).map(|p| Reverse((0u128, p))), "the partition heap")?;
    // Every sum is 0: already a heap, so the conversion does not move anything.
    let mut open = BinaryHeap::from(open);
    let mut assignment = alloc::zeroed(values.len(), "partition numbers")?;
    for (step, (slot, &value)) in assignment.iter_mut().zip(values).enumerate() {
        interrupt.every(step)?;
        let Some(Reverse((sum, p))) = open.pop() else { unreachable!("k >= 1 partitions are always open") };
        *slot = p;
        open.push(Reverse((sum + value as u128 + bias, p)));
    }
    let result = Partition::from_assignment(&assignment, k)?;
    debug_assert!(!equal_size || result.parts().all(|p| p.len() == values.len() / k));
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_sum_then_lowest_partition() {
        let got = greedy_partition(&[5, 1, 1, 4, 2], 2, false).unwrap().to_vecs().unwrap();
        assert_eq!(got, vec![vec![0, 4], vec![1, 2, 3]]);
    }

    #[test]
    fn equal_size_keeps_counts() {
        let got = greedy_partition(&[9, 1, 1, 1], 2, true).unwrap().to_vecs().unwrap();
        assert_eq!(got, vec![vec![0, 3], vec![1, 2]]);
    }

    #[test]
    fn rejects_bad_shapes() {
        assert_eq!(
            greedy_partition(&[1, 2, 3], 5, false),
            Err(CoreError::TooFewItems { n_items: 3, k_partitions: 5 })
        );
        assert_eq!(
            greedy_partition(&[1, 2, 3], 2, true),
            Err(CoreError::NotDivisible { n_items: 3, k_partitions: 2 })
        );
    }
}
