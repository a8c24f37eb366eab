//! Rank plans: every rank of a data-parallel plan with one common count, the best candidate
//! kept, expanded to samples and bubble-ordered.

use super::count::{Ordered, Problem};
use super::Result;
use crate::alloc;
use crate::interrupt::Interrupt;
use std::cmp::Reverse;
use std::collections::HashMap;

/// Order parts with the bubble rule: by key (cost, first sample index) descending, then
/// `mb[::2][::-1] + mb[1::2]`; empty parts last.
pub fn bubble_order(mut keyed: Vec<((u64, u64), Vec<u32>)>) -> Result<Vec<Vec<u32>>> {
    let total = keyed.len();
    keyed.retain(|(_, p)| !p.is_empty());
    keyed.sort_unstable_by_key(|entry| Reverse(entry.0));
    let mut ordered: Vec<Vec<u32>> = alloc::with_capacity(total, "the micro-batch order")?;
    let mut odds: Vec<Vec<u32>> = alloc::with_capacity(keyed.len() / 2, "the micro-batch order")?;
    for (position, (_, part)) in keyed.into_iter().enumerate() {
        if position % 2 == 0 {
            ordered.push(part);
        } else {
            odds.push(part);
        }
    }
    ordered.reverse();
    ordered.extend(odds);
    ordered.resize(total, Vec::new());
    Ok(ordered)
}

/// One rank's items (groups): tokens, costs, first sample and sample count, in item order.
#[derive(Default)]
pub struct RankItems {
    pub tokens: Vec<u64>,
    pub costs: Vec<u64>,
    pub starts: Vec<u64>,
    pub sizes: Vec<u64>,
}

/// The items of each rank, in one pass over the items: `rank_of_item[i] < n_ranks`.
///
/// One sequential read of the global arrays: gathering each rank's items through its item list
/// missed the cache on nearly every item at n = 2^20 (the items of a rank are spread over it).
pub fn bucket_ranks(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    rank_of_item: &[usize],
    n_ranks: usize,
) -> Result<Vec<RankItems>> {
    let mut counts: Vec<usize> = alloc::zeroed(n_ranks, "the rank sizes")?;
    for &r in rank_of_item {
        counts[r] += 1;
    }
    let mut ranks: Vec<RankItems> = alloc::with_capacity(n_ranks, "the ranks")?;
    for &c in &counts {
        let what = "a rank's items";
        ranks.push(RankItems {
            tokens: alloc::with_capacity(c, what)?,
            costs: alloc::with_capacity(c, what)?,
            starts: alloc::with_capacity(c, what)?,
            sizes: alloc::with_capacity(c, what)?,
        });
    }
    for (i, &r) in rank_of_item.iter().enumerate() {
        let rank = &mut ranks[r];
        rank.tokens.push(tokens[i]);
        rank.costs.push(costs[i]);
        rank.starts.push(starts[i]);
        rank.sizes.push(sizes[i]);
    }
    Ok(ranks)
}

/// The micro-batches of every rank with one common count, before ordering and expansion.
pub struct RankPlans {
    /// Micro-batches per rank.
    pub count: usize,
    /// The heaviest micro-batch's cost.
    pub heaviest_micro_batch: u64,
    /// The heaviest rank's cost.
    pub heaviest_rank: u64,
    /// Per rank, the item positions (into that rank's items, ascending) of every micro-batch,
    /// and the micro-batch's cost.
    pub(super) parts: Vec<Vec<(Vec<u32>, u64)>>,
}

impl RankPlans {
    /// (heaviest rank, count, heaviest micro-batch): smaller is better, in that order.
    pub fn score(&self) -> (u64, usize, u64) {
        (self.heaviest_rank, self.count, self.heaviest_micro_batch)
    }
}

/// Per rank, the sample indexes of every micro-batch of `plans` (ascending; bubble-ordered by
/// (cost, first sample) when `bubble`; empty ones last); `ranks` as given to
/// [`plan_best`], each rank's starts ascending.
pub fn expand_ranks(plans: RankPlans, ranks: &[RankItems], bubble: bool) -> Result<Vec<Vec<Vec<u32>>>> {
    let mut plan = alloc::with_capacity(ranks.len(), "the plan")?;
    for (parts, rank) in plans.parts.into_iter().zip(ranks) {
        // Positions ascend in a part and starts ascend in a rank, so the first position is the
        // part's first sample.
        let first = |part: &[u32]| part.first().map_or(0, |&i| rank.starts[i as usize]);
        let parts: Vec<Vec<u32>> = if bubble {
            let keyed = parts.into_iter().map(|(part, cost)| ((cost, first(&part)), part));
            bubble_order(alloc::collect(keyed, "the micro-batch order")?)?
        } else {
            alloc::collect(parts.into_iter().map(|(part, _)| part), "the micro-batches")?
        };
        // Groups of one sample (the usual case) need no sizes, and when the rank's items are
        // samples 0, 1, 2, ... (one rank, plan_micro_batches) a position is its sample: reading
        // starts and sizes through the parts' positions missed the cache on every item.
        let unit = rank.sizes.iter().all(|&size| size == 1);
        let identity = unit && rank.starts.iter().enumerate().all(|(i, &start)| start == i as u64);
        let mut samples_of = alloc::with_capacity(parts.len(), "the micro-batches")?;
        for part in parts {
            let samples = if identity {
                part
            } else if unit {
                alloc::collect(
                    part.iter().map(|&i| rank.starts[i as usize] as u32),
                    "a micro-batch's samples",
                )?
            } else {
                let total = part.iter().map(|&i| rank.sizes[i as usize] as usize).sum();
                let mut samples = alloc::with_capacity(total, "a micro-batch's samples")?;
                for &i in &part {
                    let (start, size) = (rank.starts[i as usize], rank.sizes[i as usize]);
                    samples.extend((start..start + size).map(|s| s as u32));
                }
                samples
            };
            samples_of.push(samples);
        }
        plan.push(samples_of);
    }
    Ok(plan)
}

/// A plan of every rank with one common count: which candidate it came from (see
/// [`plan_best`]), the count, the heaviest micro-batch's cost, the heaviest rank's cost and, per
/// rank, the sample indexes of every micro-batch.
pub type BestPlan = (usize, usize, u64, u64, Vec<Vec<Vec<u32>>>);

/// A rank's own plan: the items in the greedy's order and the own count with its split.
pub(super) type Own = (Ordered, (usize, Vec<u32>));

/// Micro-batches with their costs, copied with fallible allocation.
pub(super) fn copy_parts(parts: &[(Vec<u32>, u64)]) -> Result<Vec<(Vec<u32>, u64)>> {
    let mut copy = alloc::with_capacity(parts.len(), "the micro-batches")?;
    for (part, cost) in parts {
        let mut items = alloc::with_capacity(part.len(), "a micro-batch")?;
        items.extend_from_slice(part);
        copy.push((items, *cost));
    }
    Ok(copy)
}

/// Plan every rank with one common count (the largest of the ranks' own counts and `minimum`)
/// for each candidate assignment of items to ranks, and keep the best. Items are groups starting
/// at `starts` (ascending) with `sizes` samples; a candidate gives each item its rank
/// (`< n_ranks`). A later candidate replaces the kept one when it is no worse on the heaviest
/// rank and on the count, and better on (heaviest rank, count, heaviest micro-batch). Only the
/// kept plan is expanded to samples (ascending in each micro-batch; bubble-ordered when
/// `bubble`; empty micro-batches last). Costs must sum to at most `u64::MAX`; at least one
/// candidate.
///
/// A rank that holds exactly the items of a rank in an earlier candidate reuses that rank's
/// plans: the refined candidate of `plan_dp_micro_batches` renumbers the ranks and moves items
/// between a few of them only, and planning every rank again doubled the call's time.
#[allow(clippy::too_many_arguments)]
pub fn plan_best(
    tokens: &[u64],
    costs: &[u64],
    starts: &[u64],
    sizes: &[u64],
    candidates: &[Vec<usize>],
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
    interrupt: &Interrupt,
) -> Result<BestPlan> {
    fn problem(rank: &RankItems, cap: u64, multiple: usize) -> Problem<'_> {
        Problem { tokens: &rank.tokens, costs: &rank.costs, cap, multiple }
    }
    let n_candidates = candidates.len();
    let mut bucketed: Vec<Vec<RankItems>> = alloc::with_capacity(n_candidates, "the ranks")?;
    for rank_of_item in candidates {
        bucketed.push(bucket_ranks(tokens, costs, starts, sizes, rank_of_item, n_ranks)?);
    }
    // source[c][r]: the (candidate, rank) whose own plan rank r of candidate c uses (itself, or
    // an earlier rank holding the same items, whatever its number: the refinement renumbers
    // ranks); owns[c][r] is computed only for sources.
    // Keyed by the rank's first start (a group is in one rank of a candidate), then compared
    // in full: hashing every rank's starts cost as much as bucketing them.
    let mut first_with: HashMap<Option<u64>, Vec<(usize, usize)>> = HashMap::new();
    let mut source: Vec<Vec<(usize, usize)>> = alloc::with_capacity(n_candidates, "the rank plans")?;
    let mut owns: Vec<Vec<Option<Own>>> = alloc::with_capacity(n_candidates, "the rank plans")?;
    for (c, ranks) in bucketed.iter().enumerate() {
        let mut sources = alloc::with_capacity(n_ranks, "the rank plans")?;
        let mut candidate_owns = alloc::with_capacity(n_ranks, "the rank plans")?;
        for (r, rank) in ranks.iter().enumerate() {
            // Equal starts are equal items: a start names its group.
            let key = rank.starts.first().copied();
            let same = first_with.get(&key).and_then(|earlier| {
                earlier.iter().copied().find(|&(e, q)| bucketed[e][q].starts == rank.starts)
            });
            match same {
                Some(earlier) => {
                    sources.push(earlier);
                    candidate_owns.push(None);
                }
                None => {
                    let ordered = problem(rank, cap, multiple).ordered(interrupt)?;
                    let own = problem(rank, cap, multiple).own_plan_in(&ordered, interrupt)?;
                    first_with.entry(key).or_default().push((c, r));
                    sources.push((c, r));
                    candidate_owns.push(Some((ordered, own)));
                }
            }
        }
        source.push(sources);
        owns.push(candidate_owns);
    }
    let own_of = |c: usize, r: usize| -> &Own {
        let (e, q) = source[c][r];
        owns[e][q].as_ref().expect("a source has its own plan")
    };
    let mut plans: Vec<RankPlans> = alloc::with_capacity(n_candidates, "the rank plans")?;
    for c in 0..n_candidates {
        let count = (0..n_ranks).map(|r| own_of(c, r).1 .0).fold(minimum, usize::max);
        let ranks = &bucketed[c];
        let heaviest_rank = ranks.iter().map(|rank| rank.costs.iter().sum::<u64>()).max().unwrap_or(0);
        let mut parts: Vec<Vec<(Vec<u32>, u64)>> = alloc::with_capacity(n_ranks, "the rank plans")?;
        for (r, rank) in ranks.iter().enumerate() {
            let (e, q) = source[c][r];
            if e < c && plans[e].count == count {
                parts.push(copy_parts(&plans[e].parts[q])?);
                continue;
            }
            let (ordered, own) = own_of(c, r);
            parts.push(problem(rank, cap, multiple).plan_from(ordered, own, count, interrupt)?);
        }
        let heaviest_micro_batch = parts.iter().flatten().map(|(_, cost)| *cost).max().unwrap_or(0);
        plans.push(RankPlans { count, heaviest_micro_batch, heaviest_rank, parts });
    }
    let mut kept = 0;
    for (c, plan) in plans.iter().enumerate().skip(1) {
        let best = &plans[kept];
        if plan.heaviest_rank <= best.heaviest_rank && plan.count <= best.count && plan.score() < best.score()
        {
            kept = c;
        }
    }
    let plan = plans.swap_remove(kept);
    let (count, heaviest_micro_batch, heaviest_rank) =
        (plan.count, plan.heaviest_micro_batch, plan.heaviest_rank);
    let plan = expand_ranks(plan, &bucketed[kept], bubble)?;
    Ok((kept, count, heaviest_micro_batch, heaviest_rank, plan))
}
