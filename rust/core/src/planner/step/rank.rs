//! One rank of today's plan at any count: the micro-batches `plan_best` would give the rank if
//! the common count were `count` (its balanced split, halving, or the shaped plan where the
//! shape limits ask for one), for the step planner to start from and to compare with.

use super::super::problem::Ordered;
use super::super::ranks::{problem, PlanOptions, RankItems};
use super::super::{PlanCost, Problem, Result};
use super::targets::Sorted;
use crate::alloc;
use crate::interrupt::Interrupt;

/// A rank's items with what every split of them reuses: the greedy's order, the own plan, the
/// shaped own plan (made when first needed) and the items as the targeted split reads them.
pub(super) struct RankPlanner<'a, C: PlanCost> {
    rank: &'a RankItems<C>,
    options: &'a PlanOptions,
    ordered: Ordered<C>,
    own: (usize, Vec<u32>),
    shaped_own: Option<Vec<Vec<u32>>>,
    /// `None` where the targeted split does not apply (see [`Sorted::new`]).
    pub(super) sorted: Option<Sorted>,
}

impl<'a, C: PlanCost> RankPlanner<'a, C> {
    pub(super) fn new(
        rank: &'a RankItems<C>,
        options: &'a PlanOptions,
        interrupt: &Interrupt,
    ) -> Result<Self> {
        let plain = problem(rank, options, false);
        let ordered = plain.ordered(interrupt)?;
        let own = plain.own_plan_in(&ordered, interrupt)?;
        let sorted = Sorted::new(&problem(rank, options, true), &ordered, interrupt)?;
        Ok(RankPlanner { rank, options, ordered, own, shaped_own: None, sorted })
    }

    /// The rank's problem, with its shape limits.
    pub(super) fn shaped(&self) -> Problem<'a, C> {
        problem(self.rank, self.options, true)
    }

    /// The rank's micro-batches at `count` as today's planner makes them (item positions of the
    /// rank, ascending in each; empty ones last), or `None` when that plan does not have
    /// exactly `count` micro-batches that keep the limits (then the count is not a candidate).
    pub(super) fn parts_at(&mut self, count: usize, interrupt: &Interrupt) -> Result<Option<Vec<Vec<u32>>>> {
        let plain = problem(self.rank, self.options, false);
        let parts = plain.plan_from(&self.ordered, &self.own, count, interrupt)?;
        let shaped = self.shaped();
        let mut parts = alloc::collect(parts.into_iter().map(|(part, _)| part), "the micro-batches")?;
        if !shaped.satisfies(parts.iter().map(Vec::as_slice)) {
            if self.shaped_own.is_none() {
                self.shaped_own = Some(shaped.shaped_own_from(&self.ordered, &self.own, interrupt)?);
            }
            let shaped_own = self.shaped_own.as_ref().expect("made above");
            if shaped_own.len() > count {
                return Ok(None);
            }
            let planned = shaped.plan_shaped(&self.ordered, &self.own, shaped_own, count, interrupt)?;
            parts = alloc::collect(planned.into_iter().map(|(part, _)| part), "the micro-batches")?;
        }
        let keeps = parts.len() == count && shaped.satisfies(parts.iter().map(Vec::as_slice));
        Ok(keeps.then_some(parts))
    }

    /// A split of the rank into parts with these targets (see [`Sorted::split`]), as item
    /// positions of the rank per part (ascending), or `None` when it does not fit or does not
    /// apply.
    pub(super) fn targeted(&self, targets: &[f64], interrupt: &Interrupt) -> Result<Option<Vec<Vec<u32>>>> {
        let Some(sorted) = &self.sorted else { return Ok(None) };
        let Some(part) = sorted.split(targets, interrupt)? else { return Ok(None) };
        let by_item = self.ordered.by_item(&part, interrupt)?;
        Ok(Some(Problem::<C>::parts(&by_item, targets.len())?))
    }

    /// The number of items.
    pub(super) fn len(&self) -> usize {
        self.rank.tokens.len()
    }
}
