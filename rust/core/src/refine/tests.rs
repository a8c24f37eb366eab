use super::*;

fn max_load(values: &[u64], parts: &[Vec<u32>]) -> u128 {
    parts.iter().map(|p| p.iter().map(|&i| values[i as usize] as u128).sum::<u128>()).max().unwrap_or(0)
}

/// Smallest maximum load over every assignment (k^n of them), with the count rule.
fn brute_force(values: &[u64], counts: &[usize], equal_size: bool) -> u128 {
    let n = values.len();
    let k = counts.len();
    let mut best = u128::MAX;
    let mut assignment = vec![0usize; n];
    loop {
        let mut loads = vec![0u128; k];
        let mut sizes = vec![0usize; k];
        for (i, &p) in assignment.iter().enumerate() {
            loads[p] += values[i] as u128;
            sizes[p] += 1;
        }
        let ok = if equal_size {
            let mut a = sizes.clone();
            let mut b = counts.to_vec();
            a.sort_unstable();
            b.sort_unstable();
            a == b
        } else {
            sizes.iter().all(|&s| s > 0)
        };
        if ok {
            best = best.min(loads.into_iter().max().unwrap_or(0));
        }
        let mut digit = 0;
        loop {
            if digit == n {
                return best;
            }
            assignment[digit] += 1;
            if assignment[digit] < k {
                break;
            }
            assignment[digit] = 0;
            digit += 1;
        }
    }
}

/// A small deterministic generator so the tests need no crate.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn round_robin(n: usize, k: usize) -> Vec<Vec<u32>> {
    let mut parts = vec![Vec::new(); k];
    for i in 0..n {
        parts[i % k].push(i as u32);
    }
    parts
}

fn check_valid(values: &[u64], input: &[Vec<u32>], output: &[Vec<u32>], equal_size: bool) {
    assert_eq!(output.len(), input.len());
    let mut seen = vec![false; values.len()];
    for part in output {
        assert!(!part.is_empty());
        assert!(part.windows(2).all(|w| w[0] < w[1]));
        for &i in part {
            assert!(!seen[i as usize]);
            seen[i as usize] = true;
        }
    }
    assert!(seen.iter().all(|&s| s));
    let loads: Vec<u128> =
        output.iter().map(|p| p.iter().map(|&i| values[i as usize] as u128).sum()).collect();
    for (w, pair) in loads.windows(2).zip(output.windows(2)) {
        assert!(w[0] > w[1] || (w[0] == w[1] && pair[0][0] < pair[1][0]));
    }
    assert!(max_load(values, output) <= max_load(values, input));
    if equal_size {
        let mut a: Vec<usize> = input.iter().map(Vec::len).collect();
        let mut b: Vec<usize> = output.iter().map(Vec::len).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}

#[test]
fn swap_fixes_an_unbalanced_pair() {
    let values = [10, 9, 1, 2];
    let parts = vec![vec![0, 1], vec![2, 3]];
    let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    check_valid(&values, &parts, &out, true);
    assert_eq!(max_load(&values, &out), 11);
}

#[test]
fn moves_only_when_counts_are_free() {
    let values = [5, 5, 5, 1];
    let parts = vec![vec![0, 1, 2], vec![3]];
    let fixed = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    assert_eq!(max_load(&values, &fixed), 11);
    let free = refine(&values, parts.clone(), false, Mode::Local, None).unwrap();
    assert_eq!(max_load(&values, &free), 10);
    check_valid(&values, &parts, &free, false);
}

#[test]
fn never_empties_a_partition() {
    let values = [100, 1];
    let parts = vec![vec![0], vec![1]];
    let out = refine(&values, parts, false, Mode::Exact, None).unwrap();
    assert_eq!(out, vec![vec![0], vec![1]]);
}

#[test]
fn two_for_two_exchange_is_used() {
    // No single move or swap helps; swapping {6, 5} for {9, 1} does.
    let values = [6, 5, 7, 9, 1, 4];
    let parts = vec![vec![0, 1, 2], vec![3, 4, 5]];
    let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    check_valid(&values, &parts, &out, true);
    assert_eq!(max_load(&values, &out), 16);
}

#[test]
fn tied_heaviest_partitions_are_both_relieved() {
    let values = [10, 10, 1, 1, 10, 10];
    let parts = vec![vec![0, 1], vec![4, 5], vec![2, 3]];
    let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    check_valid(&values, &parts, &out, true);
    assert_eq!(max_load(&values, &out), 20);
    let out = refine(&values, parts.clone(), false, Mode::Local, None).unwrap();
    assert_eq!(max_load(&values, &out), 20);
    assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[test]
fn tie_rule_orders_equal_loads_by_smallest_index() {
    let values = [3, 3, 3, 3];
    let parts = vec![vec![3, 1], vec![2, 0]];
    let out = refine(&values, parts, true, Mode::Local, None).unwrap();
    assert_eq!(out, vec![vec![0, 2], vec![1, 3]]);
}

#[test]
fn huge_values_do_not_overflow() {
    let big = (1u64 << 63) - 1;
    let values = [big, big, big, 1, 0, big];
    let parts = vec![vec![0, 1, 2], vec![3, 4, 5]];
    let out = refine(&values, parts.clone(), true, Mode::Exact, None).unwrap();
    check_valid(&values, &parts, &out, true);
    assert_eq!(max_load(&values, &out), 2 * big as u128 + 1);
}

#[test]
fn zero_effort_only_reorders() {
    let values = [1, 2, 30, 40];
    let parts = vec![vec![2, 3], vec![1, 0]];
    let out = refine(&values, parts, true, Mode::Local, Some(0)).unwrap();
    assert_eq!(out, vec![vec![2, 3], vec![0, 1]]);
}

#[test]
fn invalid_partitions_are_errors() {
    let values = [1, 2, 3];
    assert_eq!(refine(&values, vec![], false, Mode::Local, None), Err(RefineError::NoPartitions));
    assert_eq!(
        refine(&values, vec![vec![0, 1, 2], vec![]], false, Mode::Local, None),
        Err(RefineError::EmptyPartition { partition: 1 })
    );
    assert_eq!(
        refine(&values, vec![vec![0, 1], vec![5]], false, Mode::Local, None),
        Err(RefineError::IndexOutOfRange { partition: 1, index: 5, n_values: 3 })
    );
    assert_eq!(
        refine(&values, vec![vec![0, 1], vec![1, 2]], false, Mode::Local, None),
        Err(RefineError::DuplicateIndex { index: 1 })
    );
    assert_eq!(
        refine(&values, vec![vec![0], vec![2]], false, Mode::Local, None),
        Err(RefineError::MissingIndex { index: 1 })
    );
    assert!(RefineError::MissingIndex { index: 1 }.to_string().contains("partitions"));
}

#[test]
fn local_is_valid_and_never_worse_on_random_inputs() {
    let mut rng = Lcg(7);
    for case in 0..400 {
        let k = 1 + (rng.next() % 6) as usize;
        let per = 1 + (rng.next() % 6) as usize;
        let equal_size = case % 2 == 0;
        let n = if equal_size { k * per } else { k + (rng.next() % 20) as usize };
        let spread = [2, 10, 1000, u32::MAX as u64][case % 4];
        let values: Vec<u64> = (0..n).map(|_| rng.next() % spread).collect();
        let parts = round_robin(n, k);
        // A small node budget keeps the debug build fast while still running out of it.
        for (mode, effort) in [(Mode::Local, None), (Mode::Exact, Some(20_000))] {
            let out = refine(&values, parts.clone(), equal_size, mode, effort).unwrap();
            check_valid(&values, &parts, &out, equal_size);
            let again = refine(&values, parts.clone(), equal_size, mode, effort).unwrap();
            assert_eq!(out, again);
        }
    }
}

#[test]
fn exact_matches_brute_force_on_tiny_inputs() {
    let mut rng = Lcg(11);
    for case in 0..300 {
        let k = 2 + (rng.next() % 3) as usize;
        let equal_size = case % 2 == 0;
        let n = if equal_size { k * (1 + (rng.next() % 3) as usize) } else { k + (rng.next() % 5) as usize };
        if n > 9 {
            continue;
        }
        let spread = [5, 100, 1 << 40][case % 3];
        let values: Vec<u64> = (0..n).map(|_| rng.next() % spread).collect();
        let parts = round_robin(n, k);
        let counts: Vec<usize> = parts.iter().map(Vec::len).collect();
        let out = refine(&values, parts.clone(), equal_size, Mode::Exact, None).unwrap();
        check_valid(&values, &parts, &out, equal_size);
        assert_eq!(max_load(&values, &out), brute_force(&values, &counts, equal_size), "{values:?} k={k}");
    }
}

#[test]
fn exact_out_of_nodes_keeps_the_local_answer() {
    let mut rng = Lcg(3);
    let values: Vec<u64> = (0..24).map(|_| rng.next() % 100_000).collect();
    let parts = round_robin(24, 4);
    let local = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    let starved = refine(&values, parts.clone(), true, Mode::Exact, Some(1)).unwrap();
    assert_eq!(local, starved);
}

#[test]
fn many_partitions_use_the_bounded_caches() {
    // k above DENSE_PAIRS_MAX_K, and (under cfg(test)) small cache caps, so both caches
    // overflow and are emptied along the way.
    let mut rng = Lcg(9);
    for equal_size in [true, false] {
        let n = 300 * 8;
        let values: Vec<u64> = (0..n).map(|_| rng.next() % 40_000).collect();
        let parts = round_robin(n, 300);
        let out = refine(&values, parts.clone(), equal_size, Mode::Local, None).unwrap();
        check_valid(&values, &parts, &out, equal_size);
        assert!(max_load(&values, &out) < max_load(&values, &parts));
        assert_eq!(out, refine(&values, parts, equal_size, Mode::Local, None).unwrap());
    }
}

#[test]
fn local_budget_bounds_large_inputs() {
    let mut rng = Lcg(5);
    let n = 30_000;
    let values: Vec<u64> = (0..n).map(|_| rng.next() % 50_000).collect();
    let parts = round_robin(n, 64);
    let out = refine(&values, parts.clone(), true, Mode::Local, None).unwrap();
    check_valid(&values, &parts, &out, true);
}

/// `parts` with every part sorted and the parts in a canonical order (by first index).
fn as_sets(parts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut sets: Vec<Vec<u32>> = parts
        .iter()
        .map(|part| {
            let mut part = part.clone();
            part.sort_unstable();
            part
        })
        .collect();
    sets.sort();
    sets
}

#[test]
fn refine_if_moved_is_none_exactly_when_refine_only_renumbers() {
    let mut rng = Lcg(17);
    let (mut none, mut some) = (0, 0);
    for round in 0..300 {
        let n = 2 + (rng.next() % 40) as usize;
        let k = 1 + (rng.next() as usize) % n.min(6);
        let spread = [3, 100, 1 << 40][round % 3];
        let values: Vec<u64> = (0..n).map(|_| rng.next() % spread).collect();
        let parts = round_robin(n, k);
        let equal_size = round % 2 == 0;
        let refined = refine(&values, parts.clone(), equal_size, Mode::Local, None).unwrap();
        match refine_if_moved(&values, parts.clone(), equal_size, &Interrupt::NEVER).unwrap() {
            None => {
                assert_eq!(as_sets(&refined), as_sets(&parts));
                none += 1;
            }
            Some(moved) => {
                assert_eq!(moved, refined);
                assert_ne!(as_sets(&refined), as_sets(&parts));
                some += 1;
            }
        }
    }
    assert!(none > 0 && some > 0);
    assert_eq!(
        refine_if_moved(&[1, 2], vec![vec![0], vec![]], false, &Interrupt::NEVER),
        Err(RefineError::EmptyPartition { partition: 1 })
    );
}

#[test]
fn a_large_partition_is_sorted_as_a_small_one_is() {
    // From 2^16 items (indexes ascending) the interruptible sort runs; the order is the same.
    let values: Vec<u64> = (0..200_000u64).map(|i| (i * 7919) % 1013 + (i % 5) * (1 << 40)).collect();
    for part in [(0..200_000u32).filter(|i| i % 3 != 0).collect::<Vec<_>>(), (0..100u32).rev().collect()] {
        let got = local::sorted_items(&values, part.clone(), &Interrupt::NEVER).unwrap();
        let mut expected: Vec<(u64, u32)> = part.iter().map(|&i| (values[i as usize], i)).collect();
        expected.sort_unstable();
        assert_eq!(got, expected);
    }
}
