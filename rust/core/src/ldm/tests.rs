use super::keys::{Set, SumInt};
use super::state::{sort_descending, sort_runs_descending, RunSorter};
use super::{balanced_partitions, karmarkar_karp};
use crate::error::CoreError;

fn kk(values: &[u64], k: usize, equal_size: bool) -> Vec<Vec<u32>> {
    karmarkar_karp(values, k, equal_size).unwrap().to_vecs().unwrap()
}

fn balanced(values: &[u64], k: usize, equal_size: bool) -> Vec<Vec<u32>> {
    balanced_partitions(values, k, equal_size).unwrap().to_vecs().unwrap()
}

#[test]
fn golden_values() {
    assert_eq!(kk(&[10, 20, 30, 40], 2, true), vec![vec![3, 0], vec![2, 1]]);
    assert_eq!(balanced(&[10, 20, 30, 40], 2, true), vec![vec![0, 3], vec![1, 2]]);
    assert_eq!(kk(&[100, 90, 50, 10, 5, 1], 2, true), vec![vec![2, 1, 5], vec![3, 0, 4]]);
    assert_eq!(balanced(&[100, 90, 50, 10, 5, 1], 2, true), vec![vec![1, 2, 5], vec![0, 3, 4]]);
    assert_eq!(kk(&[100, 10, 10, 10, 10], 2, false), vec![vec![0], vec![4, 3, 2, 1]]);
    assert_eq!(balanced(&[100, 10, 10, 10, 10], 2, false), vec![vec![0], vec![1, 2, 3, 4]]);
    assert_eq!(kk(&[100, 80, 60, 40, 20, 10], 3, true), vec![vec![0, 5], vec![2, 3], vec![1, 4]]);
    assert_eq!(kk(&[50, 50, 50, 50], 2, true), vec![vec![3, 0], vec![2, 1]]);
    assert_eq!(balanced(&[1, 2, 3, 4, 5, 6, 7, 8], 3, false), vec![vec![1, 4, 5], vec![0, 3, 6], vec![2, 7]]);
    assert_eq!(balanced(&[5, 5, 5, 5, 5, 5], 3, false), vec![vec![0, 5], vec![1, 4], vec![2, 3]]);
    assert_eq!(
        karmarkar_karp(&[1, 2, 3], 5, false),
        Err(CoreError::TooFewItems { n_items: 3, k_partitions: 5 })
    );
}

#[test]
fn one_partition_takes_items_largest_first() {
    assert_eq!(kk(&[3, 1, 3, 0], 1, false), vec![vec![2, 0, 1, 3]]);
    assert_eq!(kk(&[3, 1, 3, 0], 1, true), vec![vec![2, 0, 1, 3]]);
}

#[test]
fn sums_beyond_64_bits_are_exact() {
    let big = (1u64 << 63) - 1;
    let values = vec![big; 6];
    let parts = kk(&values, 2, false);
    assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 3]);
    let parts = kk(&[big, big, big, 1], 2, false);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 4);
}

#[test]
fn every_index_once_and_equal_counts() {
    let values: Vec<u64> = (0..997u64).map(|i| (i * 7919) % 1013).collect();
    for k in [1, 2, 3, 7, 64, 997] {
        let parts = kk(&values, k, false);
        let mut all: Vec<u32> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..997).collect::<Vec<u32>>());
        assert!(parts.iter().all(|p| !p.is_empty()));
    }
    let values = &values[..996];
    for k in [1, 2, 3, 4, 6, 12, 83] {
        let parts = kk(values, k, true);
        assert!(parts.iter().all(|p| p.len() == 996 / k));
    }
}

#[test]
fn rejects_bad_shapes() {
    assert_eq!(karmarkar_karp(&[], 1, false), Err(CoreError::TooFewItems { n_items: 0, k_partitions: 1 }));
    assert_eq!(
        karmarkar_karp(&[1, 2, 3], 2, true),
        Err(CoreError::NotDivisible { n_items: 3, k_partitions: 2 })
    );
    assert_eq!(karmarkar_karp(&[1], 0, false), Err(CoreError::NoPartitions));
}

/// Every path of the merge sort (already sorted, few runs, packed keys, keys too wide to pack,
/// many short runs) gives the order of the plain sort.
#[test]
fn run_sort_agrees_with_the_plain_sort() {
    fn check<S: SumInt>(sums: &[u128], counts: &[u32], sorter: &mut RunSorter<S>) {
        let mut sets: Vec<Set<S>> = sums
            .iter()
            .zip(counts)
            .enumerate()
            .map(|(head, (&sum, &count))| Set {
                key: S::key(S::from_u64(0) + from_u128::<S>(sum), count, (head * 7919 % 100_003) as u32),
                first: head as u32,
                last: head as u32,
            })
            .collect();
        let mut expected = sets.clone();
        sort_descending(&mut expected);
        sort_runs_descending(&mut sets, sorter);
        let keys = |v: &[Set<S>]| v.iter().map(|s| (s.key(), s.first)).collect::<Vec<_>>();
        assert_eq!(keys(&sets), keys(&expected));
    }
    fn from_u128<S: SumInt>(value: u128) -> S {
        // Only called with values that fit S (u128 always; u64 below 2^64).
        let high = S::from_u64((value >> 64) as u64);
        let mut shifted = high;
        for _ in 0..64 {
            shifted = shifted + shifted;
        }
        shifted + S::from_u64(value as u64)
    }
    let mut state: u64 = 99;
    let mut random = |modulus: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 17) % modulus
    };
    let mut sorter64 = RunSorter::<u64>::new();
    let mut sorter128 = RunSorter::<u128>::new();
    for len in [1usize, 2, 5, 64, 1024] {
        // A few long descending runs with small noise, then random values, then huge spreads.
        let runs: Vec<u128> =
            (0..len).map(|i| (1_000_000 - (i % (len / 4 + 1)) * 10 + random(3) as usize) as u128).collect();
        let noise: Vec<u128> = (0..len).map(|_| random(50) as u128).collect();
        let wide: Vec<u128> = (0..len).map(|_| (random(1 << 40) as u128) << 23).collect();
        let sorted: Vec<u128> = (0..len as u128).rev().collect();
        let same: Vec<u32> = vec![4; len];
        let mixed: Vec<u32> = (0..len).map(|_| random(3) as u32 + 1).collect();
        for sums in [&runs, &noise, &wide, &sorted] {
            for counts in [&same, &mixed] {
                check::<u64>(sums, counts, &mut sorter64);
                check::<u128>(sums, counts, &mut sorter128);
            }
        }
        let beyond_64: Vec<u128> = (0..len).map(|_| (random(1 << 50) as u128) << 70).collect();
        check::<u128>(&beyond_64, &mixed, &mut sorter128);
    }
}
