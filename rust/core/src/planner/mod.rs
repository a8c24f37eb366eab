//! Micro-batch planning under a hard token cap: the counting search, the fit test and the
//! balanced split behind `plan_micro_batches` and `plan_dp_micro_batches`.
//!
//! Items are groups (a sample, or samples kept together): each has a token count (what the cap
//! limits) and a cost (what balancing weighs). The pure-Python oracle of the same rules is
//! `tests/planning/plan_oracle.py`; the tests compare the two on random inputs.
//!
//! * The balanced split into `count` parts is a cap-aware greedy: items by cost descending (ties
//!   by index ascending), each into the part of least cost, ties to an empty part, then to the
//!   lowest part number, among the parts it fits in by tokens. It fails (the count is too small)
//!   when an item fits in no part.
//! * The count: from a bin-packing lower bound rounded up to the multiple, galloping up (steps of
//!   1, 2, 4, ... multiples) to a count whose split fits, then bisecting back between the last
//!   failing and the first fitting count. `n` parts (rounded up) always fit: every item then has a
//!   part of its own.
//! * A larger count than a rank's own (agreed across ranks) splits the heaviest divisible part
//!   in two, again and again, when the split at that count does not fit: halving never adds
//!   tokens to a part.

//!
//! The files, each using only those before it: [`bounds`] (lower bounds on the count), [`cost`]
//! (integer and float costs), [`heap`] (the split's heap), [`problem`] (one problem, its items in
//! the greedy's order, the split's keys and buffers), [`count`] (one problem's count search and
//! split), [`shape`] (limits beyond the cap: samples per micro-batch, padded footprint, keys; and
//! the plan that applies them), [`ranks`] (every rank with one common count), [`step`] (the
//! step model of lockstep ranks and 1F1B pipelines, and the plans searched for it).

mod bounds;
mod cost;
mod count;
mod heap;
mod problem;
mod ranks;
mod shape;
mod step;

pub use bounds::lower_bound;
pub use cost::{part_cost, Exact, PlanCost};
pub use problem::{Problem, Shape, ShapeRule};
pub use ranks::{
    bubble_order, bucket_ranks, expand_ranks, order_parts, plan_best, plan_ids, BestPlan, Items, Order,
    PlanOptions, RankItems, RankPlans,
};
pub use step::{
    lockstep_step, plan_step, step_time, EqualCounts, Pipeline, StepError, StepOptions, StepPlan, Sync,
    MARGIN,
};

type Result<T> = std::result::Result<T, crate::error::CoreError>;

/// `f` of every value, collected with fallible allocation and an interrupt check every
/// [`CHECK_EVERY`](crate::interrupt::CHECK_EVERY) values: the planner's passes over tens of
/// millions of items take a second or more each.
pub(crate) fn map_checked<T: Copy, U>(
    values: impl DoubleEndedIterator<Item = T> + ExactSizeIterator,
    what: &'static str,
    interrupt: &crate::interrupt::Interrupt,
    f: impl Fn(T) -> U,
) -> Result<Vec<U>> {
    let mut out = crate::alloc::with_capacity(values.len(), what)?;
    for (step, value) in values.enumerate() {
        interrupt.every(step)?;
        out.push(f(value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
