use super::bounds::DFF_MAX;
use super::heap::MinHeap;
use super::*;
use crate::interrupt::Interrupt;
use proptest::prelude::*;

/// The bounds as the formulas read: L2 per threshold with binary searches, `u_k` per item.
fn lower_bound_plain(tokens: &[u64], cap: u64) -> usize {
    let mut sizes = tokens.to_vec();
    sizes.sort_unstable();
    let n = sizes.len();
    let cap = cap as u128;
    let sum = |range: &[u64]| range.iter().map(|&s| s as u128).sum::<u128>();
    let mut bound = sum(&sizes).div_ceil(cap).max(1);
    let half = sizes.partition_point(|&s| s as u128 * 2 <= cap);
    let mut thresholds: Vec<u128> = sizes[..half].iter().map(|&s| s as u128).collect();
    thresholds.insert(0, 0);
    for a in thresholds {
        let above = sizes.partition_point(|&s| s as u128 <= cap - a);
        let small = sizes.partition_point(|&s| (s as u128) < a);
        let room = (above - half) as u128 * cap - sum(&sizes[half..above]);
        let overflow = sum(&sizes[small..half]).saturating_sub(room);
        bound = bound.max((n - half) as u128 + overflow.div_ceil(cap));
    }
    for k in 2..=DFF_MAX as u128 {
        let total: u128 = sizes
            .iter()
            .map(|&s| {
                let scaled = (k + 1) * s as u128;
                if scaled % cap == 0 {
                    k * s as u128
                } else {
                    scaled / cap * cap
                }
            })
            .sum();
        bound = bound.max(total.div_ceil(k * cap));
    }
    bound as usize
}

proptest! {
    #[test]
    fn the_fast_bound_is_the_plain_formulas(
        (cap, tokens) in (1u64..200).prop_flat_map(|cap| {
            (Just(cap), prop::collection::vec(0..=cap, 0..40))
        }),
        scale in prop::sample::select(vec![1u64, 3, 1 << 40, (1 << 62) / 200]),
    ) {
        let cap = cap * scale;
        let tokens: Vec<u64> = tokens.iter().map(|&t| t * scale).collect();
        prop_assert_eq!(lower_bound(&tokens, cap).unwrap(), lower_bound_plain(&tokens, cap));
    }

    #[test]
    fn the_heap_pops_in_order(keys in prop::collection::vec(0u64..50, 1..200), top in 0u64..60) {
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut heap = MinHeap::new();
        for &key in &keys {
            heap.push(key);
        }
        prop_assert_eq!(heap.peek(), Some(sorted[0]));
        heap.replace_top(top);
        sorted[0] = top;
        sorted.sort_unstable();
        let mut popped = Vec::new();
        while let Some(key) = heap.peek() {
            popped.push(key);
            heap.pop();
        }
        prop_assert_eq!(popped, sorted);
    }
}

#[test]
fn bound_counts_items_just_over_half() {
    assert_eq!(lower_bound(&[501; 10], 1000).unwrap(), 10);
    assert_eq!(lower_bound(&[334; 6], 1000).unwrap(), 3);
    assert_eq!(lower_bound(&[1000, 1, 1], 1000).unwrap(), 2);
}

#[test]
fn plan_keeps_the_cap_and_every_item() {
    let tokens = [6u64, 15, 17, 16, 18, 20];
    let problem = Problem { tokens: &tokens, costs: &tokens, cap: 27, multiple: 1, shape: None };
    let parts = problem.plan(0, &Interrupt::NEVER).unwrap();
    let mut seen: Vec<u32> = parts.iter().flatten().copied().collect();
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
    assert!(parts.iter().all(|p| p.iter().map(|&i| tokens[i as usize]).sum::<u64>() <= 27));
    let more = problem.plan(9, &Interrupt::NEVER).unwrap();
    assert_eq!(more.len(), 9);
    assert_eq!(more.iter().filter(|p| !p.is_empty()).count(), 6);
}

/// The halving as it was first written: scan every part for the heaviest divisible one (ties
/// to the earliest), put its halves in its place.
fn halve_by_scanning(problem: &Problem<'_>, parts: Vec<Vec<u32>>, wanted: usize) -> Vec<Vec<u32>> {
    let mut parts: Vec<Vec<u32>> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    while parts.len() < wanted {
        let heaviest = (0..parts.len())
            .filter(|&p| parts[p].len() >= 2)
            .max_by_key(|&p| (problem.cost_of(&parts[p]), std::cmp::Reverse(p)))
            .unwrap();
        let members = std::mem::take(&mut parts[heaviest]);
        let [first, second] = problem.halves(&members, &Interrupt::NEVER).unwrap();
        parts[heaviest] = first;
        parts.insert(heaviest + 1, second);
    }
    parts
}

proptest! {
    #[test]
    fn halving_with_a_heap_is_halving_by_scanning(
        costs in prop::collection::vec(0u64..6, 1..60),
        n_parts in 1usize..6,
        extra in 0usize..60,
    ) {
        let tokens = costs.clone();
        let problem = Problem { tokens: &tokens, costs: &costs, cap: u64::MAX, multiple: 1, shape: None };
        let n = costs.len();
        let parts: Vec<Vec<u32>> =
            (0..n_parts).map(|p| (0..n as u32).filter(|&i| i as usize % n_parts == p).collect()).collect();
        let wanted = (parts.iter().filter(|p| !p.is_empty()).count() + extra).min(n);
        let fast = problem.halve_until(parts.clone(), wanted, &Interrupt::NEVER).unwrap();
        prop_assert_eq!(fast, halve_by_scanning(&problem, parts, wanted));
    }
}

#[test]
fn halving_past_128_levels_renumbers_the_places() {
    // Zero costs: every part ties, so the earliest divisible one is halved, and the halving
    // of a zero-cost part splits off its second item: the first half is halved again and again,
    // one level deeper each time, far past 128 levels.
    let costs = vec![0u64; 300];
    let tokens = vec![1u64; costs.len()];
    let problem = Problem { tokens: &tokens, costs: &costs, cap: u64::MAX, multiple: 1, shape: None };
    let parts = vec![(0..costs.len() as u32).collect::<Vec<u32>>()];
    let fast = problem.halve_until(parts.clone(), 290, &Interrupt::NEVER).unwrap();
    assert_eq!(fast, halve_by_scanning(&problem, parts, 290));
}

proptest! {
    /// Costs whose sum leaves the part number no room in 64 bits while their cost per token
    /// times the cap does: the split packs u64 keys by that bound, and splits as with u128 keys
    /// (ties included: few distinct costs per token).
    #[test]
    fn keys_narrowed_by_cost_per_token_split_as_wide_keys(
        items in prop::collection::vec((1u64..64, 1u64..4, 0u64..3), 60..200),
        cap in 64u64..128,
        share in 35usize..100,
        scale in 44u32..50,
    ) {
        // Near the least count that fits (about 3 items a part), where most splits succeed.
        let count = (items.len() * share / 100).max(1);
        let tokens: Vec<u64> = items.iter().map(|&(t, _, _)| t).collect();
        let costs: Vec<u64> = items.iter().map(|&(t, m, small)| (t * m) << scale | small).collect();
        let problem = Problem { tokens: &tokens, costs: &costs, cap, multiple: 1, shape: None };
        let ordered = problem.ordered(&Interrupt::NEVER).unwrap();
        let part_bits = usize::BITS - (count - 1).leading_zeros();
        let sum = u64::key_bound(&costs);
        prop_assume!(sum.is_none_or(|sum| sum.leading_zeros() < part_bits + 1));
        let (per, most) = ordered.part_tokens.unwrap();
        // The bound as near 2^64 as the scales go: a bound too small by a few bits would wrap.
        prop_assume!(per.checked_mul(most.max(cap)).is_some_and(|b| b.leading_zeros() > part_bits));
        let narrow = problem.split(&ordered, count, &Interrupt::NEVER).unwrap();
        let wide = problem
            .split_with::<u128>(&ordered, count, 32, &mut Default::default(), &Interrupt::NEVER)
            .unwrap();
        prop_assert_eq!(narrow, wide);
    }
}
