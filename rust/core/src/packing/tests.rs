//! The packers against quadratic textbook versions of the rules, and each fast structure
//! against its plain counterpart.
use super::*;
use crate::interrupt::Interrupt;

const ALL: [Algorithm; 4] =
    [Algorithm::NextFit, Algorithm::FirstFit, Algorithm::FirstFitDecreasing, Algorithm::BestFitDecreasing];

/// Quadratic textbook versions of the four rules, the oracle for the fast ones.
fn slow_pack(lengths: &[u64], capacity: u64, algorithm: Algorithm) -> Vec<Vec<usize>> {
    let order: Vec<usize> = match algorithm {
        Algorithm::NextFit | Algorithm::FirstFit => (0..lengths.len()).collect(),
        _ => {
            let mut order: Vec<usize> = (0..lengths.len()).collect();
            order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
            order
        }
    };
    let mut packs: Vec<Vec<usize>> = Vec::new();
    let mut rooms: Vec<u64> = Vec::new();
    for index in order {
        let length = lengths[index];
        let chosen = match algorithm {
            Algorithm::NextFit => rooms.len().checked_sub(1).filter(|&last| rooms[last] >= length),
            Algorithm::FirstFit | Algorithm::FirstFitDecreasing => {
                rooms.iter().position(|&room| room >= length)
            }
            Algorithm::BestFitDecreasing => {
                let mut best: Option<usize> = None;
                for (slot, &room) in rooms.iter().enumerate() {
                    if room >= length && best.is_none_or(|b| room < rooms[b]) {
                        best = Some(slot);
                    }
                }
                best
            }
        };
        match chosen {
            Some(slot) => {
                packs[slot].push(index);
                rooms[slot] -= length;
            }
            None => {
                packs.push(vec![index]);
                rooms.push(capacity - length);
            }
        }
    }
    packs
}

/// A small deterministic generator so the tests need no extra crate.
fn pseudo_random_lengths(seed: u64, count: usize, max: u64) -> Vec<u64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % (max + 1)
        })
        .collect()
}

#[test]
fn names_round_trip() {
    assert_eq!(Algorithm::from_name("bfd"), Some(Algorithm::BestFitDecreasing));
    assert_eq!(Algorithm::from_name("ffd"), Some(Algorithm::FirstFitDecreasing));
    assert_eq!(Algorithm::from_name("first_fit"), Some(Algorithm::FirstFit));
    assert_eq!(Algorithm::from_name("next_fit"), Some(Algorithm::NextFit));
    assert_eq!(Algorithm::from_name("BFD"), None);
}

#[test]
fn golden_examples() {
    let lengths = [5, 4, 3, 3, 2, 6];
    assert_eq!(
        pack(&lengths, 8, Algorithm::NextFit).unwrap(),
        vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]
    );
    assert_eq!(pack(&lengths, 8, Algorithm::FirstFit).unwrap(), vec![vec![0, 2], vec![1, 3], vec![4, 5]]);
    assert_eq!(
        pack(&lengths, 8, Algorithm::FirstFitDecreasing).unwrap(),
        vec![vec![5, 4], vec![0, 2], vec![1, 3]]
    );
    // Best fit puts the 2 into the 6-pack (room 2) rather than the 5-pack (room 3).
    assert_eq!(pack(&[5, 6, 2], 8, Algorithm::BestFitDecreasing).unwrap(), vec![vec![1, 2], vec![0]]);
    assert_eq!(pack(&[5, 6, 2], 8, Algorithm::FirstFitDecreasing).unwrap(), vec![vec![1, 2], vec![0]]);
    // In input order first fit takes pack 0 (room 3) although pack 1 (room 2) is tighter.
    assert_eq!(pack(&[5, 6, 2], 8, Algorithm::FirstFit).unwrap(), vec![vec![0, 2], vec![1]]);
}

#[test]
fn too_long_reports_first_offender() {
    let err = pack(&[1, 9, 10], 8, Algorithm::BestFitDecreasing).unwrap_err();
    assert_eq!(err, PackError::TooLong { index: 1, length: 9, capacity: 8 });
    assert_eq!(err.to_string(), "lengths[1] = 9 is longer than max_token_len (8)");
}

#[test]
fn empty_input_gives_no_packs() {
    for algorithm in ALL {
        assert!(pack(&[], 8, algorithm).unwrap().is_empty());
    }
}

#[test]
fn zero_lengths_join_the_first_pack_that_has_room() {
    for algorithm in [Algorithm::FirstFit, Algorithm::FirstFitDecreasing] {
        assert_eq!(pack(&[8, 0, 8, 0], 8, algorithm).unwrap(), slow_pack(&[8, 0, 8, 0], 8, algorithm));
    }
    assert_eq!(pack(&[0, 0, 0], 0, Algorithm::BestFitDecreasing).unwrap(), vec![vec![0, 1, 2]]);
}

#[test]
fn extreme_values_do_not_overflow() {
    let big = u64::MAX / 2;
    for algorithm in ALL {
        let packs = pack(&[big, 1, big, big - 1], big, algorithm).unwrap();
        assert_eq!(packs, slow_pack(&[big, 1, big, big - 1], big, algorithm));
    }
}

#[test]
fn matches_the_quadratic_oracle_and_respects_the_cap() {
    for seed in 0..200u64 {
        let count = (seed % 60) as usize;
        let capacity = 1 + seed % 50;
        let lengths = pseudo_random_lengths(seed, count, capacity);
        for algorithm in ALL {
            let packs = pack(&lengths, capacity, algorithm).unwrap();
            assert_eq!(packs, slow_pack(&lengths, capacity, algorithm), "seed {seed}");
            let mut seen = vec![false; count];
            for p in &packs {
                assert!(!p.is_empty());
                assert!(p.iter().map(|&i| lengths[i]).sum::<u64>() <= capacity);
                for &i in p {
                    assert!(!seen[i]);
                    seen[i] = true;
                }
            }
            assert!(seen.into_iter().all(|s| s));
        }
    }
}

/// Lengths with many ties and a few long ones, like real batches, `count` of them up to `max`.
fn batch_like(seed: u64, count: usize, max: u64) -> Vec<u64> {
    let small = pseudo_random_lengths(seed, count, max / 8);
    let large = pseudo_random_lengths(seed ^ 0xABCD, count, max);
    small.iter().zip(&large).enumerate().map(|(i, (&s, &l))| if i % 5 == 0 { l } else { s }).collect()
}

#[test]
fn large_inputs_take_the_fast_structures_and_match_the_oracle() {
    // Past 64 items with a small capacity: the counting sort and the room buckets.
    for seed in 0..12u64 {
        let count = 64 + (seed as usize * 397) % 1500;
        let capacity = 8 + seed * 37;
        let lengths = batch_like(seed, count, capacity);
        assert!(order::counting_pays(count, capacity) && best_fit::buckets_pay(count, capacity));
        for algorithm in ALL {
            assert_eq!(
                pack(&lengths, capacity, algorithm).unwrap(),
                slow_pack(&lengths, capacity, algorithm)
            );
        }
    }
    // A capacity far above the count: the radix sort and the ordered set.
    let lengths = batch_like(5, 900, 1 << 40);
    assert!(!order::counting_pays(900, 1 << 40) && !best_fit::buckets_pay(900, 1 << 40));
    for algorithm in ALL {
        assert_eq!(pack(&lengths, 1 << 40, algorithm).unwrap(), slow_pack(&lengths, 1 << 40, algorithm));
    }
}

#[test]
fn best_fit_ties_go_to_the_earliest_pack_not_the_first_to_arrive() {
    // Pack 1 reaches room 1 before pack 0 does; the last 1 must still go to pack 0.
    let lengths = [7, 5, 4, 2, 1];
    let expected = vec![vec![0, 3, 4], vec![1, 2]];
    assert_eq!(slow_pack(&lengths, 10, Algorithm::BestFitDecreasing), expected);
    assert_eq!(pack(&lengths, 10, Algorithm::BestFitDecreasing).unwrap(), expected);
    let sorted: Vec<u32> = lengths.iter().map(|&l| l as u32).collect();
    let never = Interrupt::NEVER;
    for placements in [
        best_fit::by_buckets(&sorted, 10u32, 1, &never).unwrap(),
        best_fit::by_ordered_set(&sorted, 10u32, 1, &never).unwrap(),
    ] {
        assert_eq!(placements, (vec![0, 1, 1, 0, 0], 2));
    }
}

#[test]
fn both_best_fit_structures_and_both_room_types_agree() {
    let never = Interrupt::NEVER;
    for seed in 0..40u64 {
        let count = (seed as usize * 131) % 700;
        let capacity = 1 + seed * 13;
        let mut lengths: Vec<u64> = batch_like(seed, count, capacity);
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        let shortest = lengths.last().copied().unwrap_or(0);
        let narrow: Vec<u32> = lengths.iter().map(|&l| l as u32).collect();
        let buckets = best_fit::by_buckets(&narrow, capacity as u32, shortest as u32, &never).unwrap();
        assert_eq!(
            buckets,
            best_fit::by_ordered_set(&narrow, capacity as u32, shortest as u32, &never).unwrap()
        );
        assert_eq!(buckets, best_fit::by_ordered_set(&lengths, capacity, shortest, &never).unwrap());
        // Dropping the full packs changes nothing: with a shortest length of 0 none is dropped.
        assert_eq!(buckets.0, best_fit::by_buckets(&narrow, capacity as u32, 0, &never).unwrap().0);
    }
}

#[test]
fn both_orders_agree() {
    let never = Interrupt::NEVER;
    for seed in 0..30u64 {
        let count = (seed as usize * 211) % 900;
        let lengths = batch_like(seed, count, 1 + seed * 50);
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let counted = order::by_counting::<u32>(&lengths, longest, &never).unwrap();
        let sorted = order::by_sorting::<u32>(&lengths, longest, &never).unwrap();
        assert_eq!(counted, sorted);
        let mut expected: Vec<u32> = (0..count as u32).collect();
        expected.sort_by_key(|&i| (std::cmp::Reverse(lengths[i as usize]), i));
        assert_eq!(counted.0, expected);
        assert!(counted.1.iter().zip(&counted.0).all(|(&l, &i)| l as u64 == lengths[i as usize]));
    }
}

#[test]
fn ids_and_groups_describe_the_same_packs() {
    let lengths = batch_like(3, 500, 300);
    for algorithm in ALL {
        let packing = packing(&lengths, 300, algorithm, &Interrupt::NEVER).unwrap();
        let grouped = packing.grouped(&Interrupt::NEVER).unwrap();
        let ids: Vec<i64> = packing.ids(&Interrupt::NEVER).unwrap();
        assert_eq!(grouped.len(), packing.pack_count());
        assert_eq!(packing.item_count(), lengths.len());
        for (number, pack) in grouped.packs().enumerate() {
            assert!(pack.iter().all(|&item| ids[item as usize] == number as i64));
        }
        assert_eq!(grouped.to_lists().unwrap(), slow_pack(&lengths, 300, algorithm));
    }
}

#[test]
fn the_pack_bound_holds_on_adversarial_inputs() {
    // Just over half the capacity each: one item per pack, the most packs for the total.
    for algorithm in ALL {
        let lengths = vec![51u64; 300];
        assert_eq!(pack(&lengths, 100, algorithm).unwrap().len(), 300);
        // Alternating tiny and just-over-half items in input order.
        let lengths: Vec<u64> = (0..400).map(|i| if i % 2 == 0 { 1 } else { 51 }).collect();
        assert_eq!(pack(&lengths, 100, algorithm).unwrap(), slow_pack(&lengths, 100, algorithm));
    }
    assert_eq!(most_packs(10, 0, 0), 1);
    assert_eq!(most_packs(0, 0, 5), 0);
    assert_eq!(most_packs(1000, 10, 100), 2);
}

#[test]
fn an_interrupt_stops_every_rule() {
    let lengths = batch_like(9, 20_000, 1000);
    let stop = || true;
    for algorithm in ALL {
        let result = packing(&lengths, 1000, algorithm, &Interrupt::new(&stop));
        assert!(matches!(result, Err(PackError::Core(CoreError::Interrupted))), "{algorithm:?}");
    }
}

#[test]
fn the_bitset_finds_the_next_occupied_room() {
    let mut rooms = best_fit::Occupancy::new(5000).unwrap();
    let mut naive = vec![false; 5000];
    for (step, room) in pseudo_random_lengths(4, 3000, 4999).into_iter().enumerate() {
        let room = room as usize;
        if step % 3 == 2 {
            rooms.remove(room);
            naive[room] = false;
        } else {
            rooms.insert(room);
            naive[room] = true;
        }
        let from = (room * 7 + step) % 5000;
        assert_eq!(rooms.first_from(from), (from..5000).find(|&r| naive[r]));
    }
    assert_eq!(rooms.first_from(5000), None);
}

/// The constrained rules, quadratic and literal: "fits" is footprint, count and key.
fn slow_constrained(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    max_sequences: usize,
    padded: bool,
    keys: &[u32],
) -> Vec<Vec<usize>> {
    let order: Vec<usize> = match algorithm {
        Algorithm::NextFit | Algorithm::FirstFit => (0..lengths.len()).collect(),
        _ => {
            let mut order: Vec<usize> = (0..lengths.len()).collect();
            order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
            order
        }
    };
    let footprint = |pack: &[usize]| -> u128 {
        if padded {
            pack.len() as u128 * pack.iter().map(|&i| lengths[i] as u128).max().unwrap_or(0)
        } else {
            pack.iter().map(|&i| lengths[i] as u128).sum()
        }
    };
    let mut packs: Vec<Vec<usize>> = Vec::new();
    for item in order {
        let fits = |pack: &Vec<usize>| {
            let mut with = pack.clone();
            with.push(item);
            pack.len() < max_sequences && keys[pack[0]] == keys[item] && footprint(&with) <= capacity as u128
        };
        let room_after = |pack: &Vec<usize>| {
            let mut with = pack.clone();
            with.push(item);
            capacity as u128 - footprint(&with)
        };
        let chosen = match algorithm {
            Algorithm::NextFit => packs.len().checked_sub(1).filter(|&last| fits(&packs[last])),
            Algorithm::FirstFit | Algorithm::FirstFitDecreasing => packs.iter().position(fits),
            Algorithm::BestFitDecreasing => {
                let mut best: Option<usize> = None;
                for (number, pack) in packs.iter().enumerate() {
                    if fits(pack) && best.is_none_or(|b| room_after(pack) < room_after(&packs[b])) {
                        best = Some(number);
                    }
                }
                best
            }
        };
        match chosen {
            Some(number) => packs[number].push(item),
            None => packs.push(vec![item]),
        }
    }
    packs
}

#[test]
fn constrained_rules_match_their_literal_versions() {
    let never = Interrupt::NEVER;
    for seed in 0..150u64 {
        let count = (seed as usize * 37) % 120;
        let capacity = 1 + seed % 60;
        let lengths = batch_like(seed, count, capacity);
        let keys: Vec<u32> =
            pseudo_random_lengths(seed ^ 77, count, seed % 4).iter().map(|&k| k as u32).collect();
        let max_sequences = 1 + (seed as usize % 5);
        for algorithm in ALL {
            for (m, padded, with_keys) in [
                (max_sequences, false, false),
                (usize::MAX, true, false),
                (usize::MAX, false, true),
                (max_sequences, true, true),
            ] {
                let constraints = Constraints {
                    max_sequences: (m != usize::MAX).then_some(m),
                    footprint: if padded { Footprint::Padded } else { Footprint::Sum },
                    keys: with_keys.then_some(&keys[..]),
                };
                let packed =
                    packing_constrained(&lengths, capacity, algorithm, &constraints, &never).unwrap();
                let key_list = if with_keys { keys.clone() } else { vec![0; count] };
                let expected = slow_constrained(&lengths, capacity, algorithm, m, padded, &key_list);
                assert_eq!(
                    packed.grouped(&never).unwrap().to_lists().unwrap(),
                    expected,
                    "seed {seed} {algorithm:?}"
                );
            }
            // No constraint at all: the default packer's answer.
            let plain =
                packing_constrained(&lengths, capacity, algorithm, &Constraints::NONE, &never).unwrap();
            assert_eq!(
                plain.grouped(&never).unwrap().to_lists().unwrap(),
                pack(&lengths, capacity, algorithm).unwrap()
            );
        }
    }
}

#[test]
fn constrained_errors() {
    let never = Interrupt::NEVER;
    let none = Constraints { max_sequences: Some(0), ..Constraints::NONE };
    assert_eq!(
        packing_constrained(&[1], 8, Algorithm::BestFitDecreasing, &none, &never).unwrap_err(),
        PackError::NoSequencesAllowed
    );
    let keys = [0u32];
    let short = Constraints { keys: Some(&keys), ..Constraints::NONE };
    let error = packing_constrained(&[1, 2], 8, Algorithm::FirstFit, &short, &never).unwrap_err();
    assert_eq!(error.to_string(), "keys has 1 entries for 2 lengths; one key per length is needed");
    let error = packing_constrained(&[9], 8, Algorithm::NextFit, &short, &never).unwrap_err();
    assert_eq!(error, PackError::TooLong { index: 0, length: 9, capacity: 8 });
    // The largest capacity: no overflow in the padded footprint.
    let padded = Constraints { footprint: Footprint::Padded, ..Constraints::NONE };
    let packed = packing_constrained(
        &[u64::MAX, u64::MAX / 2, 1],
        u64::MAX,
        Algorithm::BestFitDecreasing,
        &padded,
        &never,
    )
    .unwrap();
    assert_eq!(packed.grouped(&never).unwrap().to_lists().unwrap(), vec![vec![0], vec![1, 2]]);
}
