//! Planning for the step the trainer runs (`step-spec.md`, "Planning for it"): micro-batches
//! in lockstep across ranks (`sync="micro_batch"`: FSDP, ZeRO-3) and 1F1B pipelines
//! (`pipeline_stages > 1`), each judged by the step model of [`model`].
//!
//! Today's plan ([`plan_best`] in the bubble order) is planned first and is always a candidate:
//! the answer is a new plan only when its step is below today's by more than float rounding can
//! explain ([`MARGIN`]), so it is never above today's in the model. The searches:
//!
//! * lockstep ([`lockstep`]): at each count, the rank split of today's plan with every rank's
//!   micro-batches sorted alike (the slowest of each slot against the slowest), and splits of
//!   the whole batch into `ranks × count` parts dealt slot by slot (the heaviest `ranks` parts
//!   to the first slot, ...), the parts' targets levelled so that a slot whose slowest part is
//!   one long document has every other part as heavy;
//! * pipelines ([`pipeline`]): today's rank split, each rank's micro-batches at each count as
//!   today's planner makes them and as splits with a ramp of sizes at both ends (what a 1F1B
//!   pipeline fills and drains with), each in the order a swap search finds.
//!
//! The count runs from today's up to the largest asked for; when there are more counts than a
//! fixed work budget covers, a ladder of them and a bisection around the best. The budget is
//! counted in units of work (items placed, pipeline operations simulated), not in time, so the
//! answer is deterministic.

mod lockstep;
mod model;
mod pipeline;
mod rank;
mod targets;

pub use model::{lockstep as lockstep_step, Pipeline};

use super::ranks::{plan_best, Items, Order, PlanOptions};
use super::{PlanCost, Result};
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;
use std::cell::Cell;

/// A new plan replaces today's only when its step is below `today × (1 − MARGIN)`: the planner
/// adds times in float64 in its own order, `simulate_step` in NumPy's, and sums of up to 2^26
/// positive terms differ by less than this relative amount.
pub const MARGIN: f64 = 1e-8;

/// Where ranks wait for each other (see [`model`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Once per step: gradients reduced after the last micro-batch.
    Step,
    /// At every micro-batch: collectives in every forward and backward.
    MicroBatch,
}

/// How many items (groups) each rank holds: the rule of `equal_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqualCounts {
    Free,
    Equal,
    Nearly,
}

/// What the step planner plans for, besides today's [`PlanOptions`].
#[derive(Clone, Copy, Debug)]
pub struct StepOptions {
    pub sync: Sync,
    /// Pipeline stages (1: no pipeline); more than 1 only with [`Sync::Step`].
    pub stages: usize,
    /// The forward's share of a micro-batch's time, in (0, 1).
    pub forward_share: f64,
    /// What a micro-batch holding a document costs beside its items, in the items' units
    /// (a `TimeCost`'s per-micro-batch term; 0 for a cost that prices none).
    pub micro_batch_time: f64,
    /// The largest count searched; `None`: 4 × today's, rounded down to the multiple and never
    /// above the number of samples (nor below today's count).
    pub max_count: Option<usize>,
    /// The rank split's count rule, which dealing parts to ranks must keep.
    pub equal_counts: EqualCounts,
    /// Samples in all.
    pub n_samples: usize,
}

/// Why the step planner refused.
#[derive(Debug, Clone, PartialEq)]
pub enum StepError {
    Core(CoreError),
    /// `max_count` below the count today's plan needs.
    MaxBelowToday {
        max: usize,
        today: usize,
    },
}

impl From<CoreError> for StepError {
    fn from(error: CoreError) -> Self {
        StepError::Core(error)
    }
}

/// The step planner's answer.
pub struct StepPlan {
    /// Micro-batches per rank.
    pub count: usize,
    /// Per rank, the sample indexes of every micro-batch (ascending; empty ones last).
    pub plan: Vec<Vec<Vec<u32>>>,
    /// Its step in the model (the planner's float64 arithmetic).
    pub step: f64,
    /// Today's plan: its count, its step in the model, and its micro-batches when the answer is
    /// another plan (`None` when the answer is today's plan itself).
    pub today_count: usize,
    pub today_step: f64,
    pub today: Option<Vec<Vec<Vec<u32>>>>,
}

/// The planner's time of every item (its cost as a float64) and whether it holds a document
/// (tokens): a micro-batch with one takes the per-micro-batch term too.
pub(super) struct Timing {
    pub(super) seconds: Vec<f64>,
    pub(super) document: Vec<bool>,
    pub(super) micro_batch: f64,
}

impl Timing {
    /// The times of every rank's micro-batches.
    pub(super) fn of_slots(&self, slots: &Slots) -> Result<Vec<Vec<f64>>> {
        let mut times = alloc::with_capacity(slots.len(), "the micro-batch times")?;
        for rank in slots {
            times.push(self.of_parts(rank)?);
        }
        Ok(times)
    }

    /// The time of each of these micro-batches.
    pub(super) fn of_parts(&self, parts: &[Vec<u32>]) -> Result<Vec<f64>> {
        alloc::collect(parts.iter().map(|part| self.of(part)), "the micro-batch times")
    }

    /// The time of a micro-batch of these items (global item numbers): 0 when it holds no
    /// document.
    pub(super) fn of(&self, items: &[u32]) -> f64 {
        let mut total = 0.0;
        let mut any = false;
        for &i in items {
            total += self.seconds[i as usize];
            any |= self.document[i as usize];
        }
        if any {
            total + self.micro_batch
        } else {
            total
        }
    }
}

/// Work left to the search, in units of items placed and pipeline operations simulated.
pub(super) struct Budget {
    left: Cell<u64>,
}

impl Budget {
    /// Work per item the search may do on a large batch, and the least it may do on any.
    const PER_ITEM: u64 = 24;
    const LEAST: u64 = 1 << 21;

    fn for_items(n_items: usize) -> Self {
        Budget { left: Cell::new((n_items as u64).saturating_mul(Self::PER_ITEM).max(Self::LEAST)) }
    }

    /// Take `units` of work: whether any was left before (work already started is finished).
    pub(super) fn take(&self, units: u64) -> bool {
        let left = self.left.get();
        self.left.set(left.saturating_sub(units));
        left > 0
    }

    pub(super) fn left(&self) -> u64 {
        self.left.get()
    }
}

/// A plan of the search: per rank, the global item numbers of each micro-batch in order.
pub(super) type Slots = Vec<Vec<Vec<u32>>>;

/// The counts searched, from `first` to `last` (both multiples of `multiple`, `first <= last`):
/// all of them when there are few, else a ladder growing by about √2 a rung; `refine` then
/// bisects between the best count and its neighbours.
pub(super) struct Counts {
    first: usize,
    last: usize,
    multiple: usize,
}

impl Counts {
    /// Every count up to this many is tried.
    const ALL_UP_TO: usize = 40;

    pub(super) fn ladder(&self) -> Vec<usize> {
        let steps = (self.last - self.first) / self.multiple;
        if steps < Self::ALL_UP_TO {
            return (0..=steps).map(|s| self.first + s * self.multiple).collect();
        }
        let mut rungs = vec![self.first];
        let mut step = 1.0f64;
        loop {
            let count = self.first + (step.round() as usize) * self.multiple;
            if count >= self.last {
                break;
            }
            if rungs.last() != Some(&count) {
                rungs.push(count);
            }
            step *= std::f64::consts::SQRT_2;
        }
        rungs.push(self.last);
        rungs
    }

    /// Counts between `low` and `high` (tried, neighbours on the ladder) to bisect: the middle.
    pub(super) fn middle(&self, low: usize, high: usize) -> Option<usize> {
        let steps = (high - low) / self.multiple;
        (steps >= 2).then(|| low + steps / 2 * self.multiple)
    }

    /// The next count to try beside the `best` one: the middle between it and its nearest tried
    /// neighbour below, else above, that no search has tried yet (`None`: nothing left there).
    pub(super) fn next_beside(&self, best: usize, tried: &[usize]) -> Option<usize> {
        let below = tried.iter().copied().filter(|&c| c < best).max();
        let above = tried.iter().copied().filter(|&c| c > best).min();
        [below.and_then(|b| self.middle(b, best)), above.and_then(|a| self.middle(best, a))]
            .into_iter()
            .flatten()
            .find(|c| !tried.contains(c))
    }
}

/// Plan for the step: today's plan (see the module's documentation) and, when the search finds
/// one with a lower step in the model, that one. `progress(counts tried, best step so far)` is
/// called after each count.
pub fn plan_step<C: PlanCost>(
    items: &Items<'_, C>,
    candidates: &[Vec<usize>],
    options: &PlanOptions,
    step: &StepOptions,
    interrupt: &Interrupt,
    progress: &dyn Fn(usize, f64),
) -> std::result::Result<StepPlan, StepError> {
    let today_options = PlanOptions { order: Order::Bubble, ..*options };
    let (kept, today_count, today_plan) = plan_best(items, candidates, &today_options, interrupt)?;
    let largest = match step.max_count {
        Some(max) if max < today_count => return Err(StepError::MaxBelowToday { max, today: today_count }),
        Some(max) => max / options.multiple * options.multiple,
        // More micro-batches look free to a cost that does not price one: it never guesses.
        None if step.micro_batch_time <= 0.0 => today_count,
        None => {
            let four = today_count.saturating_mul(4) / options.multiple * options.multiple;
            let samples = step.n_samples / options.multiple * options.multiple;
            four.min(samples)
        }
    }
    .max(today_count);
    let timing = timing(items, step.micro_batch_time, interrupt)?;
    let today_slots = items_of_samples(&today_plan, items)?;
    let today_times = timing.of_slots(&today_slots)?;
    let today_step = step_of(&today_times, step, interrupt)?;
    let counts = Counts { first: today_count, last: largest, multiple: options.multiple };
    let budget = Budget::for_items(items.tokens.len());
    let context = Context { items, options, step, timing: &timing, budget: &budget, counts: &counts };
    let rank_of_item = &candidates[kept];
    let found = match (step.sync, step.stages) {
        (Sync::MicroBatch, _) => lockstep::search(&context, today_slots, interrupt, progress)?,
        (Sync::Step, stages) if stages > 1 => pipeline::search(&context, rank_of_item, interrupt, progress)?,
        (Sync::Step, _) => None,
    };
    match found {
        Some((count, slots, found_step)) if found_step < today_step * (1.0 - MARGIN) => Ok(StepPlan {
            count,
            plan: expand(&slots, items, interrupt)?,
            step: found_step,
            today_count,
            today_step,
            today: Some(today_plan),
        }),
        _ => Ok(StepPlan {
            count: today_count,
            plan: today_plan,
            step: today_step,
            today_count,
            today_step,
            today: None,
        }),
    }
}

/// What every search reads.
pub(super) struct Context<'a, C> {
    pub(super) items: &'a Items<'a, C>,
    pub(super) options: &'a PlanOptions,
    pub(super) step: &'a StepOptions,
    pub(super) timing: &'a Timing,
    pub(super) budget: &'a Budget,
    pub(super) counts: &'a Counts,
}

fn timing<C: PlanCost>(items: &Items<'_, C>, micro_batch: f64, interrupt: &Interrupt) -> Result<Timing> {
    let seconds = super::map_checked(items.costs.iter(), "the items' times", interrupt, |c| c.to_f64())?;
    let document = super::map_checked(items.tokens.iter(), "the items' times", interrupt, |&t| t > 0)?;
    Ok(Timing { seconds, document, micro_batch })
}

/// A plan given as samples (`plan[rank][micro_batch]`) as global item numbers: a group counts
/// once, at its first sample.
fn items_of_samples<C: PlanCost>(plan: &[Vec<Vec<u32>>], items: &Items<'_, C>) -> Result<Slots> {
    let n_samples = items.starts.iter().zip(items.sizes).map(|(&s, &z)| (s + z) as usize).max().unwrap_or(0);
    let mut item_at: Vec<u32> = alloc::filled(n_samples, u32::MAX, "the samples' items")?;
    for (i, &start) in items.starts.iter().enumerate() {
        item_at[start as usize] = i as u32;
    }
    let mut slots = alloc::with_capacity(plan.len(), "the plan's items")?;
    for rank in plan {
        let mut parts = alloc::with_capacity(rank.len(), "the plan's items")?;
        for samples in rank {
            let mut firsts = alloc::with_capacity(samples.len(), "a micro-batch's items")?;
            firsts.extend(samples.iter().map(|&s| item_at[s as usize]).filter(|&i| i != u32::MAX));
            parts.push(firsts);
        }
        slots.push(parts);
    }
    Ok(slots)
}

/// The step of these times (`times[rank][slot]`) under `step`'s synchronisation.
pub(super) fn step_of(times: &[Vec<f64>], step: &StepOptions, interrupt: &Interrupt) -> Result<f64> {
    step_time(times, step.sync, step.stages, step.forward_share, interrupt)
}

/// The step model, once for the planners and `seqbalance.simulate_step`: the step that
/// micro-batch times `times[rank][slot]` make under `sync`, with `stages`-stage 1F1B pipelines
/// (`stages > 1` only with [`Sync::Step`]; `forward_share` in (0, 1)). Ranks run in lockstep
/// (`Σ_k max_r t`), meet once a step (`max_r Σ_k t`, each rank's times summed in slot order), or
/// run a pipeline each ([`Pipeline::makespan`], the slowest rank's).
pub fn step_time(
    times: &[Vec<f64>],
    sync: Sync,
    stages: usize,
    forward_share: f64,
    interrupt: &Interrupt,
) -> Result<f64> {
    match (sync, stages) {
        (Sync::MicroBatch, _) => Ok(model::lockstep(times)),
        (Sync::Step, 1) => Ok(times.iter().map(|rank| rank.iter().sum::<f64>()).fold(0.0, f64::max)),
        (Sync::Step, stages) => {
            let mut pipeline = Pipeline::new(stages, forward_share, interrupt)?;
            let mut slowest = 0.0f64;
            for rank in times {
                slowest = slowest.max(pipeline.makespan(rank, interrupt)?);
            }
            Ok(slowest)
        }
    }
}

/// The samples of every micro-batch of `slots` (global items), ascending.
fn expand<C: PlanCost>(
    slots: &Slots,
    items: &Items<'_, C>,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<Vec<u32>>>> {
    let mut plan = alloc::with_capacity(slots.len(), "the plan")?;
    for rank in slots {
        let mut micro_batches = alloc::with_capacity(rank.len(), "the micro-batches")?;
        for part in rank {
            interrupt.check()?;
            let mut members = alloc::collect(part.iter().copied(), "a micro-batch")?;
            members.sort_unstable();
            let total = members.iter().map(|&i| items.sizes[i as usize] as usize).sum();
            let mut samples = alloc::with_capacity(total, "a micro-batch's samples")?;
            for &i in &members {
                let (start, size) = (items.starts[i as usize], items.sizes[i as usize]);
                samples.extend((start..start + size).map(|s| s as u32));
            }
            micro_batches.push(samples);
        }
        plan.push(micro_batches);
    }
    Ok(plan)
}
