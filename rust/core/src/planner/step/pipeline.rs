//! Pipelines (`pipeline_stages = P > 1`, ranks meeting once a step): every rank runs its
//! micro-batches through a 1F1B pipeline and the step is the slowest rank's makespan, which
//! depends on the micro-batches' sizes and order, not only on their sum.
//!
//! A pipeline fills for `P − 1` forwards and drains for `P − 1` backwards, and a micro-batch
//! much heavier than its neighbours stalls the stages around it. Equal micro-batches in the
//! "bubble" order (today's) leave both to chance; what the model rewards is small micro-batches
//! where the pipeline fills and drains and sizes that change slowly in between. So each rank
//! keeps today's items (today's rank split) and, at each count, is planned as today's planner
//! splits it (in the bubble order) and as splits whose targets ramp up over the first
//! micro-batches and down over the last ([`Ramp`]); the best of those, by the simulated
//! makespan, stands for the rank. At the best counts the slowest ranks are refined: the ramp by
//! a coordinate search, then the order by swapping micro-batches while that shortens the
//! makespan. Empty micro-batches always stay last.

use super::super::ranks::bucket_ranks;
use super::super::{PlanCost, Result};
use super::lockstep::members_of;
use super::model::Pipeline;
use super::rank::RankPlanner;
use super::{Context, Slots};
use crate::alloc;
use crate::interrupt::Interrupt;

/// Relative micro-batch sizes: 1 in the middle, rising linearly from `low_up` over the first
/// `up` micro-batches and falling to `low_down` over the last `down` (the smaller where the
/// two overlap).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ramp {
    up: usize,
    down: usize,
    low_up: f64,
    low_down: f64,
}

impl Ramp {
    /// The ramps every count is planned with, for `stages` stages.
    fn scanned(stages: usize) -> [Ramp; 3] {
        let p = stages;
        [
            Ramp { up: p - 1, down: p, low_up: 0.2, low_down: 0.3 },
            Ramp { up: p - 1, down: p, low_up: 0.5, low_down: 0.5 },
            Ramp { up: p.div_ceil(2), down: p, low_up: 0.3, low_down: 0.6 },
        ]
    }

    /// Targets summing to `total` for `count` micro-batches.
    fn targets(&self, total: f64, count: usize) -> Result<Vec<f64>> {
        let mut sizes = alloc::filled(count, 1.0f64, "the targets")?;
        for (j, size) in sizes.iter_mut().enumerate().take(self.up) {
            *size = self.low_up + (1.0 - self.low_up) * j as f64 / self.up as f64;
        }
        for j in 0..self.down.min(count) {
            let size = self.low_down + (1.0 - self.low_down) * j as f64 / self.down as f64;
            sizes[count - 1 - j] = sizes[count - 1 - j].min(size);
        }
        let scale = total / sizes.iter().sum::<f64>();
        sizes.iter_mut().for_each(|s| *s *= scale);
        Ok(sizes)
    }

    /// The ramps one step away: a ramp one micro-batch longer or shorter, its low end 0.6 or
    /// 1/0.6 times as high.
    fn neighbours(&self, stages: usize) -> Vec<Ramp> {
        let longest = 2 * stages;
        let scale = |low: f64, by: f64| (low * by).clamp(0.02, 1.0);
        let mut near = Vec::with_capacity(8);
        for (up, down) in [(self.up + 1, self.down), (self.up.wrapping_sub(1), self.down)] {
            if up <= longest {
                near.push(Ramp { up, down, ..*self });
            }
        }
        for down in [self.down + 1, self.down.wrapping_sub(1)] {
            if down <= longest {
                near.push(Ramp { down, ..*self });
            }
        }
        for by in [0.6, 1.0 / 0.6] {
            near.push(Ramp { low_up: scale(self.low_up, by), ..*self });
            near.push(Ramp { low_down: scale(self.low_down, by), ..*self });
        }
        near.retain(|ramp| ramp != self);
        near
    }
}

/// A rank's best plan at one count: its makespan, its micro-batches (global items) in order,
/// the ramp it was split with (`None`: today's split) and whether it was refined.
#[derive(Clone)]
struct RankBest {
    makespan: f64,
    parts: Vec<Vec<u32>>,
    ramp: Option<Ramp>,
    refined: bool,
}

/// One count planned for every rank.
struct AtCount {
    count: usize,
    step: f64,
    ranks: Vec<RankBest>,
}

/// The best pipeline plan over the counts, `(count, slots, step)`, or `None` when no count gave
/// a plan.
pub(super) fn search<C: PlanCost>(
    cx: &Context<'_, C>,
    rank_of_item: &[usize],
    interrupt: &Interrupt,
    progress: &dyn Fn(usize, f64),
) -> Result<Option<(usize, Slots, f64)>> {
    let n_ranks = cx.options.n_ranks;
    let ranks = bucket_ranks(cx.items, rank_of_item, n_ranks)?;
    let members = members_of(rank_of_item, n_ranks)?;
    let mut planners = alloc::with_capacity(n_ranks, "the ranks")?;
    for rank in &ranks {
        planners.push(RankPlanner::new(rank, cx.options, interrupt)?);
    }
    let mut search = Search {
        cx,
        planners,
        members,
        pipeline: Pipeline::new(cx.step.stages, cx.step.forward_share, interrupt)?,
        top: Vec::new(),
        tried: Vec::new(),
    };
    for &count in &cx.counts.ladder() {
        if count != cx.counts.first && cx.budget.left() == 0 {
            break;
        }
        search.scan(count, interrupt)?;
        progress(search.tried.len(), search.best_step());
    }
    while cx.budget.left() > 0 {
        let Some(best) = search.top.first().map(|at| at.count) else { break };
        let Some(count) = cx.counts.next_beside(best, &search.tried) else { break };
        search.scan(count, interrupt)?;
        progress(search.tried.len(), search.best_step());
    }
    for place in 0..search.top.len() {
        search.refine(place, interrupt)?;
    }
    search.top.sort_by(|a, b| a.step.total_cmp(&b.step).then(a.count.cmp(&b.count)));
    let Some(best) = search.top.into_iter().next() else { return Ok(None) };
    let slots = alloc::collect(best.ranks.into_iter().map(|rank| rank.parts), "the slots")?;
    Ok(Some((best.count, slots, best.step)))
}

struct Search<'a, 'c, C: PlanCost> {
    cx: &'c Context<'a, C>,
    planners: Vec<RankPlanner<'c, C>>,
    members: Vec<Vec<u32>>,
    pipeline: Pipeline,
    /// The best counts so far, best first (at most [`Search::TOP`]).
    top: Vec<AtCount>,
    tried: Vec<usize>,
}

impl<C: PlanCost> Search<'_, '_, C> {
    /// Counts kept for refinement.
    const TOP: usize = 3;

    fn best_step(&self) -> f64 {
        self.top.first().map_or(f64::INFINITY, |at| at.step)
    }

    /// Plan every rank at `count` (today's split and the scanned ramps) and keep the count if
    /// it is among the best.
    fn scan(&mut self, count: usize, interrupt: &Interrupt) -> Result<()> {
        self.tried.push(count);
        let n_ranks = self.cx.options.n_ranks;
        let mut ranks = alloc::with_capacity(n_ranks, "the ranks")?;
        for r in 0..n_ranks {
            let Some(best) = self.rank_at(r, count, interrupt)? else { return Ok(()) };
            ranks.push(best);
        }
        let step = ranks.iter().map(|rank| rank.makespan).fold(0.0, f64::max);
        let at = AtCount { count, step, ranks };
        let place = self
            .top
            .iter()
            .position(|kept| (step, count) < (kept.step, kept.count))
            .unwrap_or(self.top.len());
        if place < Self::TOP {
            self.top.insert(place, at);
            self.top.truncate(Self::TOP);
        }
        Ok(())
    }

    /// Rank `r` at `count`: the best of today's split (bubble order) and the scanned ramps, or
    /// `None` when today's planner cannot give the rank that count.
    fn rank_at(&mut self, r: usize, count: usize, interrupt: &Interrupt) -> Result<Option<RankBest>> {
        let Some(parts) = self.planners[r].parts_at(count, interrupt)? else { return Ok(None) };
        self.cx.budget.take(self.planners[r].len() as u64);
        let parts = self.global(r, parts)?;
        let order = bubble(&parts, self.cx)?;
        let mut best = self.scored(parts, &order, None, interrupt)?;
        for ramp in Ramp::scanned(self.cx.step.stages) {
            if self.cx.budget.left() == 0 {
                break; // today's split stands for the rank (a pipeline of very many stages)
            }
            if let Some(candidate) = self.ramped(r, count, ramp, interrupt)? {
                if candidate.makespan < best.makespan {
                    best = candidate;
                }
            }
        }
        Ok(Some(best))
    }

    /// Rank `r` split with `ramp`'s targets, in the targets' order (empty parts last).
    fn ramped(
        &mut self,
        r: usize,
        count: usize,
        ramp: Ramp,
        interrupt: &Interrupt,
    ) -> Result<Option<RankBest>> {
        let total: f64 = self.members[r].iter().map(|&i| self.cx.timing.seconds[i as usize]).sum();
        let targets = ramp.targets(total, count)?;
        self.cx.budget.take(self.planners[r].len() as u64);
        let Some(parts) = self.planners[r].targeted(&targets, interrupt)? else { return Ok(None) };
        let parts = self.global(r, parts)?;
        let mut order: Vec<usize> = alloc::with_capacity(count, "the micro-batch order")?;
        order.extend((0..count).filter(|&k| !parts[k].is_empty()));
        order.extend((0..count).filter(|&k| parts[k].is_empty()));
        Ok(Some(self.scored(parts, &order, Some(ramp), interrupt)?))
    }

    /// `parts` in `order`, with their simulated makespan.
    fn scored(
        &mut self,
        parts: Vec<Vec<u32>>,
        order: &[usize],
        ramp: Option<Ramp>,
        interrupt: &Interrupt,
    ) -> Result<RankBest> {
        let mut slots = alloc::collect(parts.into_iter().map(Some), "the micro-batches")?;
        let parts = alloc::collect(
            order.iter().map(|&k| slots[k].take().expect("an order visits each part once")),
            "the micro-batches",
        )?;
        let times = self.cx.timing.of_parts(&parts)?;
        let makespan = self.simulate(&times, interrupt)?;
        Ok(RankBest { makespan, parts, ramp, refined: false })
    }

    fn simulate(&mut self, times: &[f64], interrupt: &Interrupt) -> Result<f64> {
        self.cx.budget.take((2 * times.len() * self.cx.step.stages) as u64);
        self.pipeline.makespan(times, interrupt)
    }

    fn global(&self, r: usize, parts: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>> {
        let members = &self.members[r];
        let mut mapped = alloc::with_capacity(parts.len(), "the micro-batches")?;
        for part in parts {
            mapped.push(alloc::collect(part.iter().map(|&i| members[i as usize]), "a micro-batch")?);
        }
        Ok(mapped)
    }

    /// Refine the `place`-th best count: its slowest rank, again and again, until the slowest
    /// is one already refined or the budget is spent.
    fn refine(&mut self, place: usize, interrupt: &Interrupt) -> Result<()> {
        let count = self.top[place].count;
        loop {
            let ranks = &self.top[place].ranks;
            let slowest = (0..ranks.len())
                .max_by(|&a, &b| ranks[a].makespan.total_cmp(&ranks[b].makespan).then(b.cmp(&a)));
            let Some(r) = slowest else { break };
            if ranks[r].refined || self.cx.budget.left() == 0 {
                break;
            }
            // Taken out while it is refined (the refinement gives it back, or a better one).
            let placeholder =
                RankBest { makespan: f64::INFINITY, parts: Vec::new(), ramp: None, refined: true };
            let start = std::mem::replace(&mut self.top[place].ranks[r], placeholder);
            let refined = self.refine_rank(r, count, start, interrupt)?;
            let at = &mut self.top[place];
            at.ranks[r] = refined;
            at.step = at.ranks.iter().map(|rank| rank.makespan).fold(0.0, f64::max);
        }
        Ok(())
    }

    /// A coordinate search over the ramp (when the rank's best was a ramp), then the order.
    fn refine_rank(
        &mut self,
        r: usize,
        count: usize,
        start: RankBest,
        interrupt: &Interrupt,
    ) -> Result<RankBest> {
        let mut best = start;
        if let Some(mut ramp) = best.ramp {
            'search: loop {
                for near in ramp.neighbours(self.cx.step.stages) {
                    if self.cx.budget.left() == 0 {
                        break 'search;
                    }
                    if let Some(candidate) = self.ramped(r, count, near, interrupt)? {
                        if candidate.makespan < best.makespan {
                            best = candidate;
                            ramp = near;
                            continue 'search;
                        }
                    }
                }
                break;
            }
        }
        let (makespan, parts) = self.order_search(best.parts, best.makespan, interrupt)?;
        Ok(RankBest { makespan, parts, ramp: best.ramp, refined: true })
    }

    /// Swap micro-batches while a swap shortens the makespan (first improvement, passes until
    /// none does): every pair among the first and the last `2P + 2` and every neighbouring pair;
    /// empty micro-batches stay last.
    fn order_search(
        &mut self,
        mut parts: Vec<Vec<u32>>,
        mut makespan: f64,
        interrupt: &Interrupt,
    ) -> Result<(f64, Vec<Vec<u32>>)> {
        let filled = parts.iter().take_while(|p| !p.is_empty()).count();
        let mut times = self.cx.timing.of_parts(&parts)?;
        // Every pair within the first and the last 2P + 2 (at most 64) micro-batches.
        let window = (2 * self.cx.step.stages + 2).min(64).min(filled);
        let mut ends: Vec<usize> = alloc::with_capacity(2 * window, "the swaps")?;
        ends.extend((0..window).chain(filled.saturating_sub(window)..filled));
        let mut pairs: Vec<(usize, usize)> =
            alloc::with_capacity(ends.len() * ends.len() / 2 + filled, "the swaps")?;
        for (x, &a) in ends.iter().enumerate() {
            pairs.extend(ends[x + 1..].iter().filter(|&&b| a < b).map(|&b| (a, b)));
        }
        pairs.extend((0..filled.saturating_sub(1)).map(|a| (a, a + 1)));
        pairs.sort_unstable();
        pairs.dedup();
        let mut improved = true;
        while improved {
            improved = false;
            for &(a, b) in &pairs {
                if times[a] == times[b] {
                    continue;
                }
                if self.cx.budget.left() == 0 {
                    return Ok((makespan, parts));
                }
                times.swap(a, b);
                let swapped = self.simulate(&times, interrupt)?;
                if swapped < makespan {
                    makespan = swapped;
                    parts.swap(a, b);
                    improved = true;
                } else {
                    times.swap(a, b);
                }
            }
        }
        Ok((makespan, parts))
    }
}

/// Today's order of a rank's micro-batches: by (time, first item) descending, then
/// `mb[::2][::-1] + mb[1::2]`; empty ones last.
fn bubble<C>(parts: &[Vec<u32>], cx: &Context<'_, C>) -> Result<Vec<usize>> {
    let mut filled: Vec<(f64, u32, usize)> = alloc::with_capacity(parts.len(), "the micro-batch order")?;
    let keyed = (0..parts.len()).filter(|&k| !parts[k].is_empty());
    filled.extend(keyed.map(|k| (cx.timing.of(&parts[k]), parts[k][0], k)));
    // A total order (first items differ): the in-place sort allocates nothing.
    filled.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let mut order: Vec<usize> = alloc::with_capacity(parts.len(), "the micro-batch order")?;
    order.extend(filled.iter().step_by(2).rev().map(|&(_, _, k)| k));
    order.extend(filled.iter().skip(1).step_by(2).map(|&(_, _, k)| k));
    order.extend((0..parts.len()).filter(|&k| parts[k].is_empty()));
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_sum_to_the_total_and_rise_and_fall() {
        let ramp = Ramp { up: 3, down: 4, low_up: 0.25, low_down: 0.5 };
        let targets = ramp.targets(100.0, 12).unwrap();
        assert!((targets.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        assert!(targets[0] < targets[1] && targets[1] < targets[3]);
        assert!(targets[11] < targets[10] && targets[5] == targets[6]);
    }

    #[test]
    fn neighbours_stay_in_range() {
        let ramp = Ramp { up: 0, down: 16, low_up: 0.02, low_down: 1.0 };
        for near in ramp.neighbours(8) {
            assert!(near.up <= 16 && near.down <= 16);
            assert!((0.02..=1.0).contains(&near.low_up) && (0.02..=1.0).contains(&near.low_down));
            assert_ne!(near, ramp);
        }
    }
}
