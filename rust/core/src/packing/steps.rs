//! Ranks × optimizer steps × packs in one call: what `seqbalance.plan_packed_steps` runs.
//!
//! 1. The samples are balanced by their weights across `ranks` (the largest differencing method,
//!    free counts, indexes ascending inside each rank, as `get_seqlen_balanced_partitions` gives).
//! 2. Each rank's samples are balanced the same way across `min(steps, its sample count)` steps.
//! 3. Each (rank, step) bucket is packed by best fit decreasing under the capacity.
//! 4. Every step gets as many packs on every rank (empty ones added), so the ranks' gradient
//!    accumulation collectives line up; a rank with fewer samples than steps gets empty steps.
//!
//! The weights decide the balance and the lengths the packing; both are indexed alike.

use super::{packing, packing_constrained, Algorithm, Constraints, PackError};
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;
use crate::request::{Answer, Counts, Output, Refine, Request, Weights};

/// `plan[rank][step][pack]`: sample indexes into the input.
pub type StepPlan = Vec<Vec<Vec<Vec<u32>>>>;

/// One packed-steps plan; see the module's description.
///
/// Errors: `CoreError::TooFewItems` when there are fewer samples than `ranks * steps` (or
/// `ranks`/`steps` of 0), [`PackError::TooLong`] for a length above `capacity`, the float weights'
/// errors of [`Request::run`], and out-of-memory or an interrupt.
#[allow(clippy::too_many_arguments)]
pub fn packed_steps(
    lengths: &[u64],
    weights: Weights,
    ranks: usize,
    steps: usize,
    capacity: u64,
    refine: Refine,
    constraints: &Constraints<'_>,
    interrupt: &Interrupt,
) -> Result<StepPlan, PackError> {
    let n = lengths.len();
    if weights.len() != n {
        return Err(PackError::KeysLength { keys: weights.len(), lengths: n });
    }
    let needed = ranks.saturating_mul(steps);
    if ranks == 0 || steps == 0 || n < needed {
        return Err(CoreError::TooFewItems { n_items: n, k_partitions: needed.max(1) }.into());
    }
    if let Some(index) = lengths.iter().position(|&length| length > capacity) {
        return Err(PackError::TooLong { index, length: lengths[index], capacity });
    }
    let balance = |k: usize| Request {
        k,
        counts: Counts::Free,
        algorithm: crate::request::Algorithm::Ldm,
        refine,
        output: Output::Sorted,
    };
    let rank_parts = parts_of(balance(ranks).run(weights.clone(), interrupt)?)?;
    let plain = constraints.max_sequences.is_none()
        && constraints.footprint == super::Footprint::Sum
        && constraints.keys.is_none();
    let mut plan: StepPlan = alloc::with_capacity(ranks, "the ranks' plans")?;
    let mut bucket_lengths: Vec<u64> = alloc::with_capacity(0, "a bucket's lengths")?;
    for rank_samples in rank_parts.parts() {
        let filled = steps.min(rank_samples.len());
        let step_parts = parts_of(balance(filled).run(gather(&weights, rank_samples)?, interrupt)?)?;
        let mut rank_plan: Vec<Vec<Vec<u32>>> = alloc::with_capacity(steps, "a rank's steps")?;
        for part in step_parts.parts() {
            bucket_lengths.clear();
            bucket_lengths.try_reserve(part.len()).map_err(|_| CoreError::OutOfMemory {
                what: "a bucket's lengths",
                bytes: part.len().saturating_mul(8),
            })?;
            bucket_lengths.extend(part.iter().map(|&i| lengths[rank_samples[i as usize] as usize]));
            let packed = if plain {
                packing(&bucket_lengths, capacity, Algorithm::BestFitDecreasing, interrupt)?
            } else {
                packing_constrained(
                    &bucket_lengths,
                    capacity,
                    Algorithm::BestFitDecreasing,
                    constraints,
                    interrupt,
                )?
            };
            let grouped = packed.grouped(interrupt)?;
            let mut packs: Vec<Vec<u32>> = alloc::with_capacity(grouped.len(), "a step's packs")?;
            for pack in grouped.packs() {
                packs.push(alloc::collect(
                    pack.iter().map(|&j| rank_samples[part[j as usize] as usize]),
                    "a pack",
                )?);
            }
            rank_plan.push(packs);
        }
        rank_plan.resize_with(steps, Vec::new);
        plan.push(rank_plan);
    }
    for step in 0..steps {
        interrupt.check()?;
        let width = plan.iter().map(|rank_plan| rank_plan[step].len()).max().unwrap_or(0);
        for rank_plan in &mut plan {
            rank_plan[step].resize_with(width, Vec::new);
        }
    }
    Ok(plan)
}

fn parts_of(answer: Answer) -> Result<crate::parts::Partition, CoreError> {
    match answer {
        Answer::Parts(partition) => Ok(partition),
        // Output::Sorted always answers parts.
        Answer::Ids(_) => unreachable!("a sorted request answered ids"),
    }
}

/// The weights of `indexes`, in their order and precision.
fn gather(weights: &Weights, indexes: &[u32]) -> Result<Weights, CoreError> {
    let what = "a rank's weights";
    Ok(match weights {
        Weights::Exact(v) => Weights::Exact(alloc::collect(indexes.iter().map(|&i| v[i as usize]), what)?),
        Weights::Double(v) => Weights::Double(alloc::collect(indexes.iter().map(|&i| v[i as usize]), what)?),
        Weights::Single(v) => Weights::Single(alloc::collect(indexes.iter().map(|&i| v[i as usize]), what)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ldm::balanced_partitions;
    use proptest::prelude::*;

    /// The plan composed from the public pieces, one call each (the binding's former route).
    fn composed(lengths: &[u64], ranks: usize, steps: usize, capacity: u64) -> StepPlan {
        let rank_parts =
            balanced_partitions(lengths, ranks, false).unwrap().sorted_within(&Interrupt::NEVER).unwrap();
        let mut plan: StepPlan = Vec::new();
        for rank_samples in rank_parts.parts() {
            let sub: Vec<u64> = rank_samples.iter().map(|&i| lengths[i as usize]).collect();
            let filled = steps.min(sub.len());
            let step_parts =
                balanced_partitions(&sub, filled, false).unwrap().sorted_within(&Interrupt::NEVER).unwrap();
            let mut rank_plan = Vec::new();
            for part in step_parts.parts() {
                let bucket: Vec<u64> = part.iter().map(|&j| sub[j as usize]).collect();
                let packs = super::super::pack(&bucket, capacity, Algorithm::BestFitDecreasing).unwrap();
                rank_plan.push(
                    packs
                        .iter()
                        .map(|p| p.iter().map(|&b| rank_samples[part[b] as usize]).collect())
                        .collect(),
                );
            }
            rank_plan.resize_with(steps, Vec::new);
            plan.push(rank_plan);
        }
        for step in 0..steps {
            let width = plan.iter().map(|r| r[step].len()).max().unwrap();
            for r in &mut plan {
                r[step].resize_with(width, Vec::new);
            }
        }
        plan
    }

    #[test]
    fn the_docs_example() {
        let lengths = [4, 4, 3, 3, 2, 2, 1, 1, 1];
        let plan = packed_steps(
            &lengths,
            Weights::Exact(lengths.to_vec()),
            2,
            2,
            5,
            Refine::No,
            &Constraints::NONE,
            &Interrupt::NEVER,
        )
        .unwrap();
        let expected: StepPlan = vec![
            vec![vec![vec![0, 6], vec![7]], vec![vec![2, 4]]],
            vec![vec![vec![3, 5], vec![]], vec![vec![1, 8]]],
        ];
        assert_eq!(plan, expected);
    }

    #[test]
    fn too_few_samples_and_too_long_ones_are_refused() {
        let lengths = [3, 3, 3];
        let run = |capacity, ranks, steps| {
            packed_steps(
                &lengths,
                Weights::Exact(lengths.to_vec()),
                ranks,
                steps,
                capacity,
                Refine::No,
                &Constraints::NONE,
                &Interrupt::NEVER,
            )
        };
        assert_eq!(
            run(5, 2, 2),
            Err(PackError::Core(CoreError::TooFewItems { n_items: 3, k_partitions: 4 }))
        );
        assert_eq!(run(2, 1, 1), Err(PackError::TooLong { index: 0, length: 3, capacity: 2 }));
    }

    proptest! {
        #[test]
        fn one_request_is_the_composed_plan(
            lengths in prop::collection::vec(0u64..50, 1..80),
            ranks in 1usize..5,
            steps in 1usize..5,
            slack in 0u64..60,
        ) {
            prop_assume!(lengths.len() >= ranks * steps);
            let capacity = lengths.iter().copied().max().unwrap() + slack;
            let plan = packed_steps(
                &lengths,
                Weights::Exact(lengths.clone()),
                ranks,
                steps,
                capacity,
                Refine::No,
                &Constraints::NONE,
                &Interrupt::NEVER,
            ).unwrap();
            prop_assert_eq!(&plan, &composed(&lengths, ranks, steps, capacity));
            let mut seen: Vec<u32> = plan.iter().flatten().flatten().flatten().copied().collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..lengths.len() as u32).collect::<Vec<_>>());
            for step in 0..steps {
                prop_assert!(plan.iter().all(|r| r[step].len() == plan[0][step].len()));
            }
            for pack in plan.iter().flatten().flatten() {
                prop_assert!(pack.iter().map(|&i| lengths[i as usize]).sum::<u64>() <= capacity);
            }
        }
    }
}
