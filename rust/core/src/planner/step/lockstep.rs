//! Ranks in lockstep (`sync="micro_batch"`): the step is `Σ_k max_r t(r, k)`, so what matters
//! is that the parts in one slot weigh alike, not that ranks do.
//!
//! Given the `ranks × count` parts, the best slots are the parts sorted by time and dealt in
//! runs of `ranks` (the heaviest `ranks` parts in the first slot, ...): the `k`-th slowest slot
//! can be no faster than the `(k·ranks + 1)`-th slowest part. Which rank of a slot takes which
//! part changes nothing in the model; the dealing gives the heaviest part to the rank with the
//! least so far (or, under `equal_size`, the part of most items to the rank of fewest).
//!
//! The parts: the split of the whole batch with levelled targets (a slot's target is the
//! longest item left for it, while that is above an even share of what is left; then the even
//! share), else with even targets; and today's plan with every rank's micro-batches sorted alike
//! (not dealt again: it keeps today's rank split, and is never slower than today's order in
//! lockstep).

use super::super::problem::Problem;
use super::super::shape::Placed;
use super::super::{PlanCost, Result, Shape};
use super::targets::Sorted;
use super::{Context, EqualCounts, Slots};
use crate::alloc;
use crate::interrupt::Interrupt;

/// The best lockstep plan over the counts, `(count, slots, step)`, or `None` when no count gave
/// a plan (today's then stands). `today` is today's plan as global items.
pub(super) fn search<C: PlanCost>(
    cx: &Context<'_, C>,
    today: Slots,
    interrupt: &Interrupt,
    progress: &dyn Fn(usize, f64),
) -> Result<Option<(usize, Slots, f64)>> {
    let whole = Whole::new(cx, interrupt)?;
    let mut search = Search { cx, whole, best: None, tried: Vec::new() };
    // Today's micro-batches, every rank's sorted alike.
    let mut aligned = alloc::with_capacity(today.len(), "the slots")?;
    for rank in today {
        aligned.push(sort_parts(rank, cx)?);
    }
    let times = cx.timing.of_slots(&aligned)?;
    search.keep(cx.counts.first, aligned, super::model::lockstep(&times));
    for &count in &cx.counts.ladder() {
        if count != cx.counts.first && cx.budget.left() == 0 {
            break;
        }
        search.try_count(count, interrupt)?;
        progress(search.tried.len(), search.best_step());
    }
    // Bisect between the best count and its neighbours on the ladder while the budget lasts.
    while cx.budget.left() > 0 {
        let Some((best, _, _)) = &search.best else { break };
        let Some(count) = cx.counts.next_beside(*best, &search.tried) else { break };
        search.try_count(count, interrupt)?;
        progress(search.tried.len(), search.best_step());
    }
    Ok(search.best)
}

/// The global item numbers of each rank, ascending (the order of [`bucket_ranks`]).
pub(super) fn members_of(rank_of_item: &[usize], n_ranks: usize) -> Result<Vec<Vec<u32>>> {
    let mut members: Vec<Vec<u32>> = alloc::filled(n_ranks, Vec::new(), "the ranks' items")?;
    for (i, &r) in rank_of_item.iter().enumerate() {
        alloc::push(&mut members[r], i as u32, "a rank's items")?;
    }
    Ok(members)
}

/// The whole batch as one problem, for the splits into `ranks × count` parts.
struct Whole<'a, C: PlanCost> {
    problem: Problem<'a, C>,
    ordered: super::super::problem::Ordered<C>,
    sorted: Option<Sorted>,
    /// For the count search's shaped split, where the targeted one does not apply.
    placed: Option<Placed>,
}

impl<'a, C: PlanCost> Whole<'a, C> {
    fn new(cx: &Context<'a, C>, interrupt: &Interrupt) -> Result<Self> {
        let items = cx.items;
        let shape = cx.options.shape.map(|rule| Shape {
            rule,
            samples: items.sizes,
            longest: items.longest.unwrap_or(items.tokens),
            keys: items.keys,
        });
        let problem =
            Problem { tokens: items.tokens, costs: items.costs, cap: cx.options.cap, multiple: 1, shape };
        let ordered = problem.ordered(interrupt)?;
        let sorted = Sorted::new(&problem, &ordered, interrupt)?;
        let placed = match (&sorted, &problem.shape) {
            (None, Some(_)) => Some(problem.placed(&ordered, interrupt)?),
            _ => None,
        };
        Ok(Whole { problem, ordered, sorted, placed })
    }

    /// The batch in `parts` parts, by targets (levelled, then even) or, where targets do not
    /// apply, by the count search's shaped split: global item numbers per part.
    fn splits(&self, n_ranks: usize, count: usize, interrupt: &Interrupt) -> Result<Vec<Vec<Vec<u32>>>> {
        let parts = n_ranks * count;
        let mut found = Vec::new();
        if let Some(sorted) = &self.sorted {
            let levelled = level_targets(&sorted.seconds, n_ranks, count)?;
            let share = sorted.seconds.iter().sum::<f64>() / parts as f64;
            let even = alloc::filled(parts, share, "the targets")?;
            for targets in [levelled, even] {
                if let Some(part) = sorted.split(&targets, interrupt)? {
                    found.push(self.by_part(&part, parts, interrupt)?);
                    break;
                }
            }
        } else if let Some(placed) = &self.placed {
            if let Some(part) = self.problem.shaped_split(&self.ordered, placed, parts, interrupt)? {
                found.push(self.by_part(&part, parts, interrupt)?);
            }
        }
        Ok(found)
    }

    fn by_part(&self, part: &[u32], parts: usize, interrupt: &Interrupt) -> Result<Vec<Vec<u32>>> {
        Problem::<C>::parts(&self.ordered.by_item(part, interrupt)?, parts)
    }
}

/// Targets for `ranks × count` parts, slot by slot: a slot's is the longest item left for it
/// (the `k·ranks`-th longest) while that is above an even share of what the slots from there on
/// hold, else that even share for it and every later slot. `seconds` descending.
fn level_targets(seconds: &[f64], n_ranks: usize, count: usize) -> Result<Vec<f64>> {
    let mut targets = alloc::with_capacity(n_ranks * count, "the targets")?;
    let mut left: f64 = seconds.iter().sum();
    for slot in 0..count {
        let even = left.max(0.0) / (n_ranks * (count - slot)) as f64;
        let longest = seconds.get(slot * n_ranks).copied().unwrap_or(0.0);
        if longest <= even {
            targets.resize(n_ranks * count, even);
            break;
        }
        targets.extend(std::iter::repeat_n(longest, n_ranks));
        left -= longest * n_ranks as f64;
    }
    Ok(targets)
}

struct Search<'a, 'c, C: PlanCost> {
    cx: &'c Context<'a, C>,
    whole: Whole<'a, C>,
    best: Option<(usize, Slots, f64)>,
    tried: Vec<usize>,
}

impl<C: PlanCost> Search<'_, '_, C> {
    fn best_step(&self) -> f64 {
        self.best.as_ref().map_or(f64::INFINITY, |b| b.2)
    }

    fn keep(&mut self, count: usize, slots: Slots, step: f64) {
        let better = match &self.best {
            None => true,
            Some((kept, _, kept_step)) => step < *kept_step || (step == *kept_step && count < *kept),
        };
        if better {
            self.best = Some((count, slots, step));
        }
    }

    /// Plan `count` micro-batches per rank: the whole batch split into `ranks × count` parts and
    /// dealt.
    fn try_count(&mut self, count: usize, interrupt: &Interrupt) -> Result<()> {
        self.tried.push(count);
        let (cx, n_ranks) = (self.cx, self.cx.options.n_ranks);
        for parts in self.whole.splits(n_ranks, count, interrupt)? {
            // A split places every item, and turning its answer into dealt slots reads them again.
            cx.budget.take(2 * cx.items.tokens.len() as u64 + parts.len() as u64);
            if let Some((slots, step)) = deal(parts, cx, count)? {
                self.keep(count, slots, step);
            }
        }
        Ok(())
    }
}

/// Parts by time descending (ties by first item), empty ones last.
fn sort_parts<C>(parts: Vec<Vec<u32>>, cx: &Context<'_, C>) -> Result<Vec<Vec<u32>>> {
    let mut timed: Vec<(f64, Vec<u32>)> = alloc::with_capacity(parts.len(), "the parts' times")?;
    timed.extend(parts.into_iter().map(|part| (cx.timing.of(&part), part)));
    sort_timed(&mut timed);
    alloc::collect(timed.into_iter().map(|(_, part)| part), "the micro-batches")
}

/// Time descending (ties by first item), empty parts last: a total order (no two non-empty
/// parts share an item), so the in-place sort, which allocates nothing, is deterministic.
fn sort_timed(timed: &mut [(f64, Vec<u32>)]) {
    timed.sort_unstable_by(|(ta, a), (tb, b)| {
        a.is_empty().cmp(&b.is_empty()).then(tb.total_cmp(ta)).then(a.first().cmp(&b.first()))
    });
}

/// `ranks × count` parts (global items) dealt into slots: sorted by time, the `k`-th run of
/// `ranks` parts is slot `k`; in a slot the heaviest part goes to the rank with the least time
/// so far, or under `equal_size` the part of most items to the rank of fewest (then a repair by
/// swapping parts within a slot). `None` when the count rule cannot be kept, or a rank would
/// get no item while there are enough for every rank.
fn deal<C: PlanCost>(
    parts: Vec<Vec<u32>>,
    cx: &Context<'_, C>,
    count: usize,
) -> Result<Option<(Slots, f64)>> {
    let n_ranks = cx.options.n_ranks;
    let mut timed: Vec<(f64, Vec<u32>)> = alloc::with_capacity(parts.len(), "the parts' times")?;
    timed.extend(parts.into_iter().map(|part| (cx.timing.of(&part), part)));
    // Time descending (ties by first item), empty parts last.
    sort_timed(&mut timed);
    let mut slots: Slots = alloc::filled(n_ranks, Vec::new(), "the slots")?;
    for rank in &mut slots {
        alloc::room_for(rank, count, "the slots")?;
    }
    let mut busy = alloc::filled(n_ranks, 0.0f64, "the ranks' times")?;
    let mut held = alloc::filled(n_ranks, 0usize, "the ranks' items")?;
    let by_count = cx.step.equal_counts != EqualCounts::Free;
    let mut step = 0.0;
    let mut order: Vec<usize> = alloc::collect(0..n_ranks, "the slots")?;
    let mut rest = timed.into_iter();
    for _ in 0..count {
        let mut run: Vec<(f64, Vec<u32>)> = alloc::with_capacity(n_ranks, "a slot")?;
        run.extend(rest.by_ref().take(n_ranks));
        step += run.first().map_or(0.0, |(time, _)| *time);
        if by_count {
            run.sort_unstable_by(|(_, a), (_, b)| b.len().cmp(&a.len()).then(a.first().cmp(&b.first())));
            order.sort_unstable_by(|&a, &b| {
                held[a].cmp(&held[b]).then(busy[a].total_cmp(&busy[b])).then(a.cmp(&b))
            });
        } else {
            order.sort_unstable_by(|&a, &b| busy[a].total_cmp(&busy[b]).then(a.cmp(&b)));
        }
        for (&r, (time, part)) in order.iter().zip(run) {
            busy[r] += time;
            held[r] += part.len();
            slots[r].push(part);
        }
    }
    if by_count && !repair_counts(&mut slots, &mut held, cx.step.equal_counts) {
        return Ok(None);
    }
    let n_items = cx.items.tokens.len();
    if n_items >= n_ranks && held.contains(&0) {
        return Ok(None);
    }
    // Within a rank the slots keep the dealing's order, empty parts last (the runs are sorted).
    Ok(Some((slots, step)))
}

/// Swap parts between the ranks of most and fewest items within one slot until the counts keep
/// the rule (`Equal`: all the same; `Nearly`: within one); whether they do.
fn repair_counts(slots: &mut Slots, held: &mut [usize], rule: EqualCounts) -> bool {
    let allowed = if rule == EqualCounts::Nearly { 1 } else { 0 };
    let count = slots.first().map_or(0, Vec::len);
    for _ in 0..=slots.len() * count {
        let most = (0..held.len()).max_by_key(|&r| (held[r], std::cmp::Reverse(r))).unwrap_or(0);
        let fewest = (0..held.len()).min_by_key(|&r| (held[r], r)).unwrap_or(0);
        let gap = held[most] - held[fewest];
        if gap <= allowed {
            return true;
        }
        // The swap that leaves the two closest: moving d items narrows the gap to |gap − 2d|.
        let best = (0..count)
            .filter_map(|k| {
                let d = slots[most][k].len().checked_sub(slots[fewest][k].len())?;
                (d > 0 && 2 * d < 2 * gap).then_some((gap.abs_diff(2 * d), k, d))
            })
            .min();
        let Some((_, k, d)) = best else { return false };
        let (a, b) = (most.min(fewest), most.max(fewest));
        let (low, high) = slots.split_at_mut(b);
        std::mem::swap(&mut low[a][k], &mut high[0][k]);
        held[most] -= d;
        held[fewest] += d;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_long_items_then_an_even_share() {
        // Two ranks, three slots; items 10, 9, 2, 2, 1, 1 (25): slot 0 takes 10 (> 25/6), then
        // 5 left per part over the 4 parts of slots 1 and 2... (25 - 20) / 4 = 1.25 < 2: slot 1
        // is levelled at the third longest, 2; then (5 - 4) / 2 = 0.5 < 1 -> slot 2 at 1.
        let targets = level_targets(&[10.0, 9.0, 2.0, 2.0, 1.0, 1.0], 2, 3).unwrap();
        assert_eq!(targets, vec![10.0, 10.0, 2.0, 2.0, 1.0, 1.0]);
        let even = level_targets(&[3.0, 3.0, 3.0, 3.0], 2, 2).unwrap();
        assert_eq!(even, vec![3.0, 3.0, 3.0, 3.0]);
    }
}
