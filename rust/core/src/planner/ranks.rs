//! Rank plans: every rank of a data-parallel plan with one common count, the best candidate
//! kept, expanded to samples and bubble-ordered.

use super::cost::{Exact, PlanCost};
use super::problem::{Ordered, Problem, Shape, ShapeRule};
use super::Result;
use crate::alloc;
use crate::interrupt::Interrupt;
use std::cmp::Reverse;
use std::collections::HashMap;

/// How a rank's micro-batches are ordered (empty ones always last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The split's order.
    None,
    /// By (cost, first sample index) descending, then `mb[::2][::-1] + mb[1::2]`.
    Bubble,
    /// By (cost, first sample index) descending.
    LargestFirst,
}

/// Order parts by `order`, each keyed by (cost, first sample index); empty parts last.
pub fn order_parts<T: Default + Clone>(
    keyed: Vec<((u64, u64), Vec<T>)>,
    order: Order,
) -> Result<Vec<Vec<T>>> {
    let total = keyed.len();
    if order == Order::None {
        let mut parts = alloc::collect(keyed.into_iter().map(|(_, p)| p), "the micro-batch order")?;
        // Stable: the filled ones keep their order, the empty ones go last.
        parts.sort_by_key(|p| p.is_empty());
        return Ok(parts);
    }
    let mut keyed = keyed;
    keyed.retain(|(_, p)| !p.is_empty());
    keyed.sort_unstable_by_key(|entry| Reverse(entry.0));
    let mut ordered: Vec<Vec<T>> = alloc::with_capacity(total, "the micro-batch order")?;
    if order == Order::LargestFirst {
        ordered.extend(keyed.into_iter().map(|(_, p)| p));
        ordered.resize(total, Vec::new());
        return Ok(ordered);
    }
    let mut odds: Vec<Vec<T>> = alloc::with_capacity(keyed.len() / 2, "the micro-batch order")?;
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

/// Order parts with the bubble rule: by key (cost, first sample index) descending, then
/// `mb[::2][::-1] + mb[1::2]`; empty parts last.
pub fn bubble_order(keyed: Vec<((u64, u64), Vec<u32>)>) -> Result<Vec<Vec<u32>>> {
    order_parts(keyed, Order::Bubble)
}

/// What [`plan_best`] plans, besides the items and candidates.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    /// Ranks of every candidate; each gives every item a rank below it.
    pub n_ranks: usize,
    /// Token cap of a micro-batch.
    pub cap: u64,
    /// The count is a multiple of this (at least 1).
    pub multiple: usize,
    /// The count is at least this.
    pub minimum: usize,
    /// How each rank's micro-batches are ordered.
    pub order: Order,
    /// Limits beyond the cap (the items' longest samples and keys come in [`Items`]).
    pub shape: Option<ShapeRule>,
}

/// The items (groups) of a plan, in item order: tokens, costs, first sample and sample count,
/// and for shape limits each item's longest sample and its key.
#[derive(Clone, Copy)]
pub struct Items<'a, C = u64> {
    pub tokens: &'a [u64],
    pub costs: &'a [C],
    pub starts: &'a [u64],
    pub sizes: &'a [u64],
    /// Each item's longest (padded) sample: needed with a padded footprint.
    pub longest: Option<&'a [u64]>,
    /// Each item's key number: items of different keys never share a micro-batch.
    pub keys: Option<&'a [u32]>,
}

/// One rank's items (groups): tokens, costs, first sample and sample count, in item order
/// (longest samples and keys only when the plan has them).
#[derive(Default)]
pub struct RankItems<C = u64> {
    pub tokens: Vec<u64>,
    pub costs: Vec<C>,
    pub starts: Vec<u64>,
    pub sizes: Vec<u64>,
    pub longest: Vec<u64>,
    pub keys: Vec<u32>,
}

/// The items of each rank, in one pass over the items: `rank_of_item[i] < n_ranks`.
///
/// One sequential read of the global arrays: gathering each rank's items through its item list
/// missed the cache on nearly every item at n = 2^20 (the items of a rank are spread over it).
pub fn bucket_ranks<C: PlanCost>(
    items: &Items<'_, C>,
    rank_of_item: &[usize],
    n_ranks: usize,
) -> Result<Vec<RankItems<C>>> {
    let Items { tokens, costs, starts, sizes, longest, keys } = *items;
    let mut counts: Vec<usize> = alloc::zeroed(n_ranks, "the rank sizes")?;
    for &r in rank_of_item {
        counts[r] += 1;
    }
    let mut ranks: Vec<RankItems<C>> = alloc::with_capacity(n_ranks, "the ranks")?;
    for &c in &counts {
        let what = "a rank's items";
        ranks.push(RankItems {
            tokens: alloc::with_capacity(c, what)?,
            costs: alloc::with_capacity(c, what)?,
            starts: alloc::with_capacity(c, what)?,
            sizes: alloc::with_capacity(c, what)?,
            longest: alloc::with_capacity(if longest.is_some() { c } else { 0 }, what)?,
            keys: alloc::with_capacity(if keys.is_some() { c } else { 0 }, what)?,
        });
    }
    for (i, &r) in rank_of_item.iter().enumerate() {
        let rank = &mut ranks[r];
        rank.tokens.push(tokens[i]);
        rank.costs.push(costs[i]);
        rank.starts.push(starts[i]);
        rank.sizes.push(sizes[i]);
    }
    if let Some(longest) = longest {
        for (i, &r) in rank_of_item.iter().enumerate() {
            ranks[r].longest.push(longest[i]);
        }
    }
    if let Some(keys) = keys {
        for (i, &r) in rank_of_item.iter().enumerate() {
            ranks[r].keys.push(keys[i]);
        }
    }
    Ok(ranks)
}

/// The micro-batches of every rank with one common count, before ordering and expansion.
pub struct RankPlans<C = u64> {
    /// Micro-batches per rank.
    pub count: usize,
    /// The heaviest micro-batch's cost (its bits: see [`PlanCost::bits`]).
    pub heaviest_micro_batch: u64,
    /// The heaviest rank's cost, summed exactly.
    pub heaviest_rank: Exact,
    /// Per rank, the item positions (into that rank's items, ascending) of every micro-batch,
    /// and the micro-batch's cost.
    pub(super) parts: Vec<Vec<(Vec<u32>, C)>>,
}

impl<C> RankPlans<C> {
    /// (heaviest rank, count, heaviest micro-batch): smaller is better, in that order.
    pub fn score(&self) -> (&Exact, usize, u64) {
        (&self.heaviest_rank, self.count, self.heaviest_micro_batch)
    }
}

/// Per rank, the sample indexes of every micro-batch of `plans` (ascending; bubble-ordered by
/// (cost, first sample) as `order` says; empty ones last); `ranks` as given to [`plan_best`],
/// each rank's starts ascending.
pub fn expand_ranks<C: PlanCost>(
    plans: RankPlans<C>,
    ranks: &[RankItems<C>],
    order: Order,
) -> Result<Vec<Vec<Vec<u32>>>> {
    let mut plan = alloc::with_capacity(ranks.len(), "the plan")?;
    for (parts, rank) in plans.parts.into_iter().zip(ranks) {
        // Positions ascend in a part and starts ascend in a rank, so the first position is the
        // part's first sample.
        let first = |part: &[u32]| part.first().map_or(0, |&i| rank.starts[i as usize]);
        let parts: Vec<Vec<u32>> = if order == Order::None {
            alloc::collect(parts.into_iter().map(|(part, _)| part), "the micro-batches")?
        } else {
            let keyed = parts.into_iter().map(|(part, cost)| ((cost.bits(), first(&part)), part));
            order_parts(alloc::collect(keyed, "the micro-batch order")?, order)?
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
/// [`plan_best`]), the count and, per rank, the sample indexes of every micro-batch.
pub type BestPlan = (usize, usize, Vec<Vec<Vec<u32>>>);

/// A rank's own plan: the items in the greedy's order and the own count with its split.
pub(super) type Own<C> = (Ordered<C>, (usize, Vec<u32>));

/// A rank's micro-batches at a count: `(candidate, rank, count)` to the parts with their costs.
type PlanAt<'a, C> = dyn Fn(usize, usize, usize) -> Result<Vec<(Vec<u32>, C)>> + 'a;

/// Micro-batches with their costs, copied with fallible allocation.
pub(super) fn copy_parts<C: Copy>(parts: &[(Vec<u32>, C)]) -> Result<Vec<(Vec<u32>, C)>> {
    let mut copy = alloc::with_capacity(parts.len(), "the micro-batches")?;
    for (part, cost) in parts {
        let mut items = alloc::with_capacity(part.len(), "a micro-batch")?;
        items.extend_from_slice(part);
        copy.push((items, *cost));
    }
    Ok(copy)
}

/// A rank's planning problem.
pub(super) fn problem<'a, C: PlanCost>(
    rank: &'a RankItems<C>,
    options: &PlanOptions,
    shaped: bool,
) -> Problem<'a, C> {
    let shape = options.shape.filter(|_| shaped).map(|rule| Shape {
        rule,
        samples: &rank.sizes,
        longest: if rank.longest.is_empty() { &rank.tokens } else { &rank.longest },
        keys: if rank.keys.is_empty() { None } else { Some(&rank.keys) },
    });
    Problem { tokens: &rank.tokens, costs: &rank.costs, cap: options.cap, multiple: options.multiple, shape }
}

/// The index of the best plan: a later one replaces the kept one when it is no worse on the
/// heaviest rank and on the count, and better on (heaviest rank, count, heaviest micro-batch).
fn best_of<C>(plans: &[RankPlans<C>]) -> usize {
    let mut kept = 0;
    for (c, plan) in plans.iter().enumerate().skip(1) {
        let best = &plans[kept];
        if plan.heaviest_rank <= best.heaviest_rank && plan.count <= best.count && plan.score() < best.score()
        {
            kept = c;
        }
    }
    kept
}

/// Plan every rank with one common count (the largest of the ranks' own counts and `minimum`)
/// for each candidate assignment of items to ranks, and keep the best. Items are groups starting
/// at `starts` (ascending) with `sizes` samples; a candidate gives each item its rank
/// (`< n_ranks`). A later candidate replaces the kept one when it is no worse on the heaviest
/// rank and on the count, and better on (heaviest rank, count, heaviest micro-batch). Only the
/// kept plan is expanded to samples (ascending in each micro-batch; ordered by `options.order`;
/// empty micro-batches last). Integer costs must sum to at most `u64::MAX`; at least one
/// candidate.
///
/// With shape limits (`options.shape`), the plan made without them is kept when every
/// micro-batch of it keeps them; otherwise every candidate is planned again under them, each
/// rank from its shaped own plan (see the `shape` module), and the best of those is kept.
///
/// A rank that holds exactly the items of a rank in an earlier candidate reuses that rank's
/// plans: the refined candidate of `plan_dp_micro_batches` renumbers the ranks and moves items
/// between a few of them only, and planning every rank again doubled the call's time.
pub fn plan_best<C: PlanCost>(
    items: &Items<'_, C>,
    candidates: &[Vec<usize>],
    options: &PlanOptions,
    interrupt: &Interrupt,
) -> Result<BestPlan> {
    let PlanOptions { n_ranks, minimum, order, .. } = *options;
    let n_candidates = candidates.len();
    let mut bucketed: Vec<Vec<RankItems<C>>> = alloc::with_capacity(n_candidates, "the ranks")?;
    for rank_of_item in candidates {
        bucketed.push(bucket_ranks(items, rank_of_item, n_ranks)?);
    }
    // source[c][r]: the (candidate, rank) whose own plan rank r of candidate c uses (itself, or
    // an earlier rank holding the same items, whatever its number: the refinement renumbers
    // ranks); owns[c][r] is computed only for sources.
    // Keyed by the rank's first start (a group is in one rank of a candidate), then compared
    // in full: hashing every rank's starts cost as much as bucketing them.
    let mut first_with: HashMap<Option<u64>, Vec<(usize, usize)>> = HashMap::new();
    let mut source: Vec<Vec<(usize, usize)>> = alloc::with_capacity(n_candidates, "the rank plans")?;
    let mut owns: Vec<Vec<Option<Own<C>>>> = alloc::with_capacity(n_candidates, "the rank plans")?;
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
                    let plain = problem(rank, options, false);
                    let ordered = plain.ordered(interrupt)?;
                    let own = plain.own_plan_in(&ordered, interrupt)?;
                    first_with.entry(key).or_default().push((c, r));
                    sources.push((c, r));
                    candidate_owns.push(Some((ordered, own)));
                }
            }
        }
        source.push(sources);
        owns.push(candidate_owns);
    }
    let own_of = |c: usize, r: usize| -> &Own<C> {
        let (e, q) = source[c][r];
        owns[e][q].as_ref().expect("a source has its own plan")
    };
    // Plans of every candidate, given each rank's own count and its plan at a count.
    let plan_candidates = |own_count: &dyn Fn(usize, usize) -> usize,
                           plan_at: &PlanAt<'_, C>|
     -> Result<Vec<RankPlans<C>>> {
        let mut plans: Vec<RankPlans<C>> = alloc::with_capacity(n_candidates, "the rank plans")?;
        for c in 0..n_candidates {
            let count = (0..n_ranks).map(|r| own_count(c, r)).fold(minimum, usize::max);
            let ranks = &bucketed[c];
            let heaviest_rank = ranks
                .iter()
                .map(|rank| C::exact_sum(rank.costs.iter().copied()))
                .max()
                .unwrap_or(Exact::Int(0));
            let mut parts: Vec<Vec<(Vec<u32>, C)>> = alloc::with_capacity(n_ranks, "the rank plans")?;
            for (r, &(e, q)) in source[c].iter().enumerate() {
                if e < c && plans[e].count == count {
                    parts.push(copy_parts(&plans[e].parts[q])?);
                    continue;
                }
                parts.push(plan_at(c, r, count)?);
            }
            let heaviest_micro_batch = parts.iter().flatten().map(|(_, cost)| cost.bits()).max().unwrap_or(0);
            plans.push(RankPlans { count, heaviest_micro_batch, heaviest_rank, parts });
        }
        Ok(plans)
    };
    let mut plans = plan_candidates(&|c, r| own_of(c, r).1 .0, &|c, r, count| {
        let (ordered, own) = own_of(c, r);
        problem(&bucketed[c][r], options, false).plan_from(ordered, own, count, interrupt)
    })?;
    let mut kept = best_of(&plans);
    let keeps_shape = |plans: &RankPlans<C>, ranks: &[RankItems<C>]| {
        plans.parts.iter().zip(ranks).all(|(parts, rank)| {
            problem(rank, options, true).satisfies(parts.iter().map(|(part, _)| part.as_slice()))
        })
    };
    if options.shape.is_some() && !keeps_shape(&plans[kept], &bucketed[kept]) {
        // Every source rank's shaped own plan, then every candidate planned under the limits.
        let mut shaped_owns: Vec<Vec<Option<Vec<Vec<u32>>>>> =
            alloc::with_capacity(n_candidates, "the rank plans")?;
        for (c, ranks) in bucketed.iter().enumerate() {
            let mut candidate_owns = alloc::with_capacity(n_ranks, "the rank plans")?;
            for (r, rank) in ranks.iter().enumerate() {
                candidate_owns.push(match &owns[c][r] {
                    Some((ordered, own)) => {
                        Some(problem(rank, options, true).shaped_own_from(ordered, own, interrupt)?)
                    }
                    None => None,
                });
            }
            shaped_owns.push(candidate_owns);
        }
        let shaped_own_of = |c: usize, r: usize| -> &Vec<Vec<u32>> {
            let (e, q) = source[c][r];
            shaped_owns[e][q].as_ref().expect("a source has its own plan")
        };
        plans = plan_candidates(&|c, r| shaped_own_of(c, r).len(), &|c, r, count| {
            let (ordered, own) = own_of(c, r);
            let shaped = problem(&bucketed[c][r], options, true);
            shaped.plan_shaped(ordered, own, shaped_own_of(c, r), count, interrupt)
        })?;
        kept = best_of(&plans);
    }
    let plan = plans.swap_remove(kept);
    let count = plan.count;
    let plan = expand_ranks(plan, &bucketed[kept], order)?;
    Ok((kept, count, plan))
}

/// The plan as two numbers per sample: its rank and its micro-batch within the rank (`-1` for a
/// sample in no micro-batch, which a plan of every sample below `n_samples` never leaves).
pub fn plan_ids(plan: &[Vec<Vec<u32>>], n_samples: usize) -> Result<(Vec<i64>, Vec<i64>)> {
    let mut rank_ids: Vec<i64> = alloc::filled(n_samples, -1, "the rank ids")?;
    let mut micro_batch_ids: Vec<i64> = alloc::filled(n_samples, -1, "the micro-batch ids")?;
    for (rank, micro_batches) in plan.iter().enumerate() {
        for (number, samples) in micro_batches.iter().enumerate() {
            for &sample in samples {
                rank_ids[sample as usize] = rank as i64;
                micro_batch_ids[sample as usize] = number as i64;
            }
        }
    }
    Ok((rank_ids, micro_batch_ids))
}
