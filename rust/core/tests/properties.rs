//! Property tests of the core, without Python: the invariants the Python suite checks with hypothesis,
//! and the largest differencing method held to a deliberately naive model of the partition spec.
mod common;

use std::cmp::Ordering;

use common::take_first;
use proptest::prelude::*;
use seqbalance_core::error::CoreError;
use seqbalance_core::greedy::greedy_partition;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::ldm::{balanced_partitions, karmarkar_karp, partition_ids_owned};
use seqbalance_core::nearly::with_placeholders;
use seqbalance_core::packing::{pack, Algorithm, PackError};
use seqbalance_core::parts::Partition;
use seqbalance_core::refine::{refine, Mode, RefineError};

/// A set of the spec: `(index, value)` items in insertion order.
type SpecSet = Vec<(i64, u64)>;

fn set_sum(set: &SpecSet) -> u128 {
    set.iter().map(|&(_, v)| v as u128).sum()
}

/// The spec's set order, "larger" as `Greater`: sum, then count, then the item sequences.
fn set_order(a: &SpecSet, b: &SpecSet) -> Ordering {
    set_sum(a).cmp(&set_sum(b)).then(a.len().cmp(&b.len())).then_with(|| a.cmp(b))
}

fn reorder(state: &mut [SpecSet]) {
    // Stable, larger first.
    state.sort_by(|a, b| set_order(b, a));
}

fn spread(state: &[SpecSet]) -> u128 {
    set_sum(&state[0]) - set_sum(&state[state.len() - 1])
}

/// The spec's state priority, "comes first" as `Greater`.
fn state_priority(a: &[SpecSet], b: &[SpecSet]) -> Ordering {
    spread(a).cmp(&spread(b)).then_with(|| set_order(&a[0], &b[0]))
}

/// Steps 1–6 of the partition spec, one to one, quadratic and obviously so.
fn spec_model(values: &[u64], k: usize, equal_size: bool) -> Vec<Vec<usize>> {
    let pairs = values.iter().enumerate().map(|(i, &v)| (v, i as i64)).collect();
    let parts = spec_model_pairs(pairs, k, equal_size);
    parts.iter().map(|p| p.iter().map(|&i| i as usize).collect()).collect()
}

/// The spec's `equal_size="nearly"`: placeholders of value 0 with indexes -p..-1, the equal-size
/// rules on all items, then the placeholders dropped from the final sets, nothing re-ordered.
fn spec_model_nearly(values: &[u64], k: usize) -> Vec<Vec<usize>> {
    let p = (k - values.len() % k) % k;
    let placeholders = (1..=p as i64).rev().map(|i| (0u64, -i));
    let pairs = placeholders.chain(values.iter().enumerate().map(|(i, &v)| (v, i as i64))).collect();
    let parts = spec_model_pairs(pairs, k, true);
    parts.iter().map(|p| p.iter().filter(|&&i| i >= 0).map(|&i| i as usize).collect()).collect()
}

/// The model on explicit `(value, index)` pairs; indexes may be negative (placeholders).
fn spec_model_pairs(mut pairs: Vec<(u64, i64)>, k: usize, equal_size: bool) -> Vec<Vec<i64>> {
    pairs.sort();
    let mut states: Vec<Vec<SpecSet>> = Vec::new();
    if equal_size {
        for chunk in pairs.chunks(k) {
            let mut state: Vec<SpecSet> = chunk.iter().map(|&(v, i)| vec![(i, v)]).collect();
            reorder(&mut state);
            states.push(state);
        }
    } else {
        for &(v, i) in &pairs {
            let mut state = vec![Vec::new(); k];
            state[0].push((i, v));
            states.push(state);
        }
    }
    while states.len() > 1 {
        let mut a = take_first(&mut states, |a, b| state_priority(a, b));
        let b = take_first(&mut states, |a, b| state_priority(a, b));
        for i in 0..k {
            a[i].extend_from_slice(&b[k - 1 - i]);
        }
        reorder(&mut a);
        states.push(a);
    }
    states.pop().unwrap().iter().map(|set| set.iter().map(|&(i, _)| i).collect()).collect()
}

fn as_vecs(partition: &Partition) -> Vec<Vec<usize>> {
    partition.parts().map(|p| p.iter().map(|&i| i as usize).collect()).collect()
}

fn assert_covers(parts: &[Vec<usize>], n: usize) {
    let mut seen = vec![false; n];
    for &i in parts.iter().flatten() {
        assert!(i < n, "index {i} out of range");
        assert!(!seen[i], "index {i} twice");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s), "an index is missing");
}

fn load(values: &[u64], part: &[usize]) -> u128 {
    part.iter().map(|&i| values[i] as u128).sum()
}

/// Lengths with many ties (a small alphabet) or spread wide, sometimes zero.
fn lengths(max_len: usize) -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        prop::collection::vec(0u64..4, 0..max_len),
        prop::collection::vec(0u64..1000, 0..max_len),
        prop::collection::vec(any::<u64>().prop_map(|v| v >> 8), 0..max_len),
    ]
}

/// Values, k, and whether k divides n (so equal-size cases are common).
fn instance(max_len: usize) -> impl Strategy<Value = (Vec<u64>, usize)> {
    (lengths(max_len), 1usize..9)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn karmarkar_karp_is_the_spec((values, k) in instance(40), equal_size in any::<bool>()) {
        let n = values.len();
        let result = karmarkar_karp(&values, k, equal_size);
        if n < k {
            prop_assert!(matches!(result, Err(CoreError::TooFewItems { .. })), "{:?}", result);
        } else if equal_size && n % k != 0 {
            prop_assert!(matches!(result, Err(CoreError::NotDivisible { .. })), "{:?}", result);
        } else {
            prop_assert_eq!(as_vecs(&result.unwrap()), spec_model(&values, k, equal_size));
        }
    }

    #[test]
    fn balanced_partitions_cover_sorted_and_counted((values, k) in instance(200), equal_size in any::<bool>()) {
        let n = values.len();
        prop_assume!(n >= k && (!equal_size || n % k == 0));
        let parts = as_vecs(&balanced_partitions(&values, k, equal_size).unwrap());
        prop_assert_eq!(parts.len(), k);
        assert_covers(&parts, n);
        for part in &parts {
            prop_assert!(!part.is_empty());
            prop_assert!(part.windows(2).all(|w| w[0] < w[1]), "not ascending: {:?}", part);
            if equal_size {
                prop_assert_eq!(part.len(), n / k);
            }
        }
        // Same partitions, same order, as karmarkar_karp: only the order inside each changes.
        let mut unsorted = as_vecs(&karmarkar_karp(&values, k, equal_size).unwrap());
        unsorted.iter_mut().for_each(|p| p.sort_unstable());
        prop_assert_eq!(unsorted, parts);
    }

    #[test]
    fn partition_ids_number_the_partitions_of_karmarkar_karp(
        (values, k) in prop_oneof![
            instance(300),
            // Sums beyond 64 bits (the u128 run).
            (prop::collection::vec(any::<u64>(), 0..40), 1usize..9),
        ],
        equal_size in any::<bool>(),
    ) {
        let n = values.len();
        let direct = partition_ids_owned(values.clone(), k, equal_size, &Interrupt::NEVER);
        let through_lists =
            karmarkar_karp(&values, k, equal_size).and_then(|p| p.ids(n, &Interrupt::NEVER));
        prop_assert_eq!(direct, through_lists);
    }

    #[test]
    fn nearly_equal_is_the_spec((values, k) in instance(40)) {
        let n = values.len();
        let result = with_placeholders(&values, k, |v, k| karmarkar_karp(v, k, true));
        if n < k {
            prop_assert!(matches!(result, Err(CoreError::TooFewItems { .. })), "{:?}", result);
        } else {
            prop_assert_eq!(as_vecs(&result.unwrap()), spec_model_nearly(&values, k));
        }
    }

    #[test]
    fn nearly_equal_counts_within_one_and_equal_size_when_divisible((values, k) in instance(200)) {
        let n = values.len();
        prop_assume!(n >= k);
        let parts = as_vecs(&with_placeholders(&values, k, |v, k| balanced_partitions(v, k, true)).unwrap());
        prop_assert_eq!(parts.len(), k);
        assert_covers(&parts, n);
        for part in &parts {
            prop_assert!(part.len() == n / k || part.len() == n / k + 1, "count {} of {} over {}", part.len(), n, k);
            prop_assert!(part.windows(2).all(|w| w[0] < w[1]), "not ascending: {:?}", part);
        }
        if n % k == 0 {
            prop_assert_eq!(parts, as_vecs(&balanced_partitions(&values, k, true).unwrap()));
        }
    }

    #[test]
    fn greedy_is_lightest_first_in_input_order((values, k) in instance(60), equal_size in any::<bool>()) {
        let n = values.len();
        let result = greedy_partition(&values, k, equal_size);
        if n < k {
            prop_assert!(matches!(result, Err(CoreError::TooFewItems { .. })), "{:?}", result);
            return Ok(());
        }
        if equal_size && n % k != 0 {
            prop_assert!(matches!(result, Err(CoreError::NotDivisible { .. })), "{:?}", result);
            return Ok(());
        }
        let parts = as_vecs(&result.unwrap());
        // Model: the running sums with the equal-size bias, lowest partition on ties.
        let bias: u128 = if equal_size { values.iter().map(|&v| v as u128).sum::<u128>() + 1 } else { 0 };
        let mut model = vec![Vec::new(); k];
        let mut sums = vec![0u128; k];
        for (i, &v) in values.iter().enumerate() {
            let p = (0..k).min_by_key(|&p| (sums[p], p)).unwrap();
            sums[p] += v as u128 + bias;
            model[p].push(i);
        }
        let mut got = parts.clone();
        got.iter_mut().for_each(|p| p.sort_unstable());
        prop_assert_eq!(got, model);
        if equal_size {
            prop_assert!(parts.iter().all(|p| p.len() == n / k));
        }
    }

    #[test]
    fn refinement_is_never_heavier_and_keeps_counts(
        (values, k) in instance(60),
        equal_size in any::<bool>(),
        exact in any::<bool>(),
    ) {
        let n = values.len();
        prop_assume!(n >= k && (!equal_size || n % k == 0));
        let start = as_vecs(&balanced_partitions(&values, k, equal_size).unwrap());
        let input: Vec<Vec<u32>> = start.iter().map(|p| p.iter().map(|&i| i as u32).collect()).collect();
        let mode = if exact { Mode::Exact } else { Mode::Local };
        let out = refine(&values, input, equal_size, mode, Some(2000)).unwrap();
        let out: Vec<Vec<usize>> = out.iter().map(|p| p.iter().map(|&i| i as usize).collect()).collect();
        prop_assert_eq!(out.len(), k);
        assert_covers(&out, n);
        let max_before = start.iter().map(|p| load(&values, p)).max().unwrap();
        let loads: Vec<u128> = out.iter().map(|p| load(&values, p)).collect();
        prop_assert!(loads.iter().copied().max().unwrap() <= max_before);
        prop_assert!(out.iter().all(|p| !p.is_empty()));
        if equal_size {
            prop_assert!(out.iter().all(|p| p.len() == n / k));
        }
        // The tie rule: loads descending, equal loads by smallest index; indexes ascending inside.
        for (a, b) in out.iter().zip(out.iter().skip(1)) {
            let (la, lb) = (load(&values, a), load(&values, b));
            prop_assert!(la > lb || (la == lb && a[0] < b[0]), "order {:?} then {:?}", a, b);
        }
        prop_assert!(out.iter().all(|p| p.windows(2).all(|w| w[0] < w[1])));
    }

    #[test]
    fn refinement_rejects_what_is_not_a_partition(
        values in prop::collection::vec(0u64..100, 4..30),
        flaw in 0usize..3,
    ) {
        let n = values.len();
        let mut parts: Vec<Vec<u32>> = vec![(0..n as u32 / 2).collect(), (n as u32 / 2..n as u32).collect()];
        match flaw {
            0 => parts[1].push(0),               // an index twice
            1 => { parts[1].pop(); }             // one missing
            _ => parts[0].push(n as u32 + 5),    // out of range
        }
        let result = refine(&values, parts, false, Mode::Local, None);
        let expected_kind = match &result {
            Err(RefineError::DuplicateIndex { .. }) => flaw == 0,
            Err(RefineError::MissingIndex { .. }) => flaw == 1,
            Err(RefineError::IndexOutOfRange { .. }) => flaw == 2,
            _ => false,
        };
        prop_assert!(expected_kind, "flaw {} gave {:?}", flaw, result);
    }

    #[test]
    fn packs_respect_the_capacity_and_cover(
        values in prop::collection::vec(0u64..50, 0..80),
        capacity in 1u64..60,
        which in 0usize..4,
    ) {
        let algorithm = [Algorithm::NextFit, Algorithm::FirstFit, Algorithm::FirstFitDecreasing, Algorithm::BestFitDecreasing][which];
        let result = pack(&values, capacity, algorithm);
        if let Some(index) = values.iter().position(|&v| v > capacity) {
            let refused_first = matches!(result, Err(PackError::TooLong { index: i, .. }) if i == index);
            prop_assert!(refused_first, "{:?}", result);
            return Ok(());
        }
        let bins = result.unwrap();
        assert_covers(&bins, values.len());
        for bin in &bins {
            prop_assert!(!bin.is_empty());
            prop_assert!(load(&values, bin) <= capacity as u128);
        }
        if algorithm == Algorithm::NextFit {
            // Items in input order; a bin closes only when the next item does not fit it.
            let flat: Vec<usize> = bins.iter().flatten().copied().collect();
            prop_assert_eq!(flat, (0..values.len()).collect::<Vec<_>>());
            for pair in bins.windows(2) {
                prop_assert!(load(&values, &pair[0]) + values[pair[1][0]] as u128 > capacity as u128);
            }
        }
    }
}
