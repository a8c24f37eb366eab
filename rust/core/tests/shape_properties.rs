//! Property tests of the micro-batch planner under shape limits, without Python: every limit
//! holds on every plan, every item is planned once, and the count never passes first-fit
//! decreasing's under the same limits (the Python suite holds the planner to a full model).
use proptest::prelude::*;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::packing::{packing_constrained, Algorithm, Constraints, Footprint};
use seqbalance_core::planner::{Problem, Shape, ShapeRule};

/// Whether a micro-batch (item indexes) keeps the cap and the limits.
fn keeps(part: &[u32], lengths: &[u64], keys: &[u32], rule: ShapeRule, cap: u64) -> bool {
    let count = part.len() as u64;
    let longest = part.iter().map(|&i| lengths[i as usize]).max().unwrap_or(0);
    let total: u64 = part.iter().map(|&i| lengths[i as usize]).sum();
    let footprint = if rule.padded { count * longest } else { total };
    let one_key = part.windows(2).all(|w| keys[w[0] as usize] == keys[w[1] as usize]);
    count <= rule.max_sequences && footprint <= cap && one_key
}

fn cases() -> impl Strategy<Value = (Vec<u64>, Vec<u32>, u64, ShapeRule, Vec<f64>, usize)> {
    (1usize..40).prop_flat_map(|n| {
        (
            prop::collection::vec(1u64..30, n),
            prop::collection::vec(0u32..3, n),
            0u64..40,
            prop_oneof![Just(u64::MAX), 1u64..5],
            any::<bool>(),
            prop::collection::vec(0.0f64..1e6, n),
            0usize..12,
        )
            .prop_map(|(lengths, keys, extra, max_sequences, padded, costs, minimum)| {
                let cap = lengths.iter().copied().max().unwrap() + extra;
                (lengths, keys, cap, ShapeRule { max_sequences, padded }, costs, minimum)
            })
    })
}

proptest! {
    #[test]
    fn shaped_plans_keep_every_limit((lengths, keys, cap, rule, costs, minimum) in cases()) {
        let samples = vec![1u64; lengths.len()];
        let shape = Shape { rule, samples: &samples, longest: &lengths, keys: Some(&keys) };
        let problem = Problem { tokens: &lengths, costs: &costs, cap, multiple: 1, shape: Some(shape) };
        let never = Interrupt::NEVER;
        let plan = problem.plan(minimum, &never).unwrap();
        let mut seen: Vec<u32> = plan.iter().flatten().copied().collect();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..lengths.len() as u32).collect::<Vec<_>>());
        for part in &plan {
            prop_assert!(keeps(part, &lengths, &keys, rule, cap), "{:?}", part);
        }
        let own = problem.own_count(&never).unwrap();
        prop_assert_eq!(plan.len(), own.max(minimum));
        let constraints = Constraints {
            max_sequences: usize::try_from(rule.max_sequences).ok(),
            footprint: if rule.padded { Footprint::Padded } else { Footprint::Sum },
            keys: Some(&keys),
        };
        let ffd = packing_constrained(&lengths, cap, Algorithm::FirstFitDecreasing, &constraints, &never).unwrap();
        let plain = Problem { tokens: &lengths, costs: &costs, cap, multiple: 1, shape: None };
        let plain_plan = plain.plan(0, &never).unwrap();
        let plain_keeps = plain_plan.iter().all(|part| keeps(part, &lengths, &keys, rule, cap));
        if plain_keeps {
            prop_assert_eq!(own, plain_plan.len());
        } else {
            prop_assert!(own <= ffd.pack_count(), "{} > {}", own, ffd.pack_count());
        }
    }
}
