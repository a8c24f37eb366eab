//! Property tests of the step planner, without Python: in every mode the plan keeps today's
//! guarantees (every sample once, one count for every rank, the cap, empty micro-batches last, no
//! rank without samples), its count stays between today's and the largest allowed, and its step
//! in the model is never above today's plan's. The Python suite holds the model itself to an
//! event-queue simulation and the plans to every option of `plan_dp_micro_batches`.
use proptest::prelude::*;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::planner::{
    plan_step, EqualCounts, Items, Order, PlanOptions, StepOptions, StepPlan, Sync,
};

#[derive(Debug)]
struct Case {
    tokens: Vec<u64>,
    costs: Vec<f64>,
    ranks: usize,
    rank_of_item: Vec<usize>,
    cap: u64,
    multiple: usize,
    minimum: usize,
    step: StepOptions,
}

fn cases() -> impl Strategy<Value = Case> {
    (1usize..5, 0usize..40).prop_flat_map(|(ranks, extra)| {
        let n = ranks + extra;
        (
            prop::collection::vec(1u64..60, n),
            prop::collection::vec(0.0f64..100.0, n),
            prop::collection::vec(0usize..ranks, n),
            0u64..80,
            1usize..4,
            0usize..10,
            prop_oneof![Just((Sync::MicroBatch, 1usize)), (2usize..7).prop_map(|p| (Sync::Step, p))],
            0.05f64..0.95,
            prop_oneof![Just(0.0), 0.0f64..50.0],
            prop::option::of(1usize..30),
        )
            .prop_map(
                move |(
                    tokens,
                    costs,
                    mut rank_of_item,
                    extra_cap,
                    multiple,
                    minimum,
                    (sync, stages),
                    share,
                    per_micro_batch,
                    max_count,
                )| {
                    // Every rank holds an item, as the Python layer's rank splits do.
                    for (r, slot) in rank_of_item.iter_mut().take(ranks).enumerate() {
                        *slot = r;
                    }
                    let cap = tokens.iter().copied().max().unwrap() + extra_cap;
                    let step = StepOptions {
                        sync,
                        stages,
                        forward_share: share,
                        micro_batch_time: per_micro_batch,
                        max_count,
                        equal_counts: EqualCounts::Free,
                        n_samples: n,
                    };
                    Case { tokens, costs, ranks, rank_of_item, cap, multiple, minimum, step }
                },
            )
    })
}

fn plan(case: &Case) -> Option<StepPlan> {
    let n = case.tokens.len();
    let starts: Vec<u64> = (0..n as u64).collect();
    let sizes = vec![1u64; n];
    let items = Items {
        tokens: &case.tokens,
        costs: &case.costs,
        starts: &starts,
        sizes: &sizes,
        longest: None,
        keys: None,
    };
    let options = PlanOptions {
        n_ranks: case.ranks,
        cap: case.cap,
        multiple: case.multiple,
        minimum: case.minimum.div_ceil(case.multiple) * case.multiple,
        order: Order::Bubble,
        shape: None,
    };
    plan_step(
        &items,
        std::slice::from_ref(&case.rank_of_item),
        &options,
        &case.step,
        &Interrupt::NEVER,
        &|_, _| {},
    )
    .ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_mode_keeps_todays_guarantees_and_never_a_longer_step(case in cases()) {
        // A maximum below today's count is refused: then there is no plan to check.
        let Some(planned) = plan(&case) else { return Ok(()) };
        let n = case.tokens.len();
        prop_assert_eq!(planned.plan.len(), case.ranks);
        let mut seen = vec![false; n];
        for rank in &planned.plan {
            prop_assert_eq!(rank.len(), planned.count);
            let filled = rank.iter().take_while(|mb| !mb.is_empty()).count();
            prop_assert!(filled > 0, "a rank without samples");
            prop_assert!(rank[filled..].iter().all(|mb| mb.is_empty()), "empty micro-batches last");
            for mb in rank {
                prop_assert!(mb.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(mb.iter().map(|&i| case.tokens[i as usize]).sum::<u64>() <= case.cap);
                for &i in mb {
                    prop_assert!(!seen[i as usize], "sample {} twice", i);
                    seen[i as usize] = true;
                }
            }
        }
        prop_assert!(seen.iter().all(|&s| s));
        prop_assert!(planned.count % case.multiple == 0);
        prop_assert!(planned.count >= planned.today_count);
        let largest = match case.step.max_count {
            Some(max) => max / case.multiple * case.multiple,
            None if case.step.micro_batch_time == 0.0 => planned.today_count,
            None => (4 * planned.today_count).min(n) / case.multiple * case.multiple,
        };
        prop_assert!(planned.count <= largest.max(planned.today_count));
        prop_assert!(planned.step <= planned.today_step);
        prop_assert_eq!(planned.today.is_some(), planned.step < planned.today_step);
    }
}
