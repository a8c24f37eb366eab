//! Context parallelism planned per sequence: steps of groups `(cp_size, ranks, indexes)`.
//!
//! Each sequence of a step runs split over all `cp_size` ranks of its group; a group's time on
//! each of its ranks is `Σ (cost / c + comm(L, c))` over its sequences, a step's time its slowest
//! group's, a plan's time the sum over steps. Every rank holds at most `cap` tokens per step, a
//! sequence adding `ceil(L / c)` to each rank of its group. Costs and communication come in as
//! plain numbers (the Python layer evaluates the user's cost and comm), so the core never calls
//! back.
//!
//! * [`greedy`]: the published greedy (Megatron-LM's dynamic-CP scheduler as the time-cost spec
//!   defines it), in its four readings.
//! * [`megatron`]: the scheduler Megatron-LM ships now (`next_hdp_group_packing_aware`), in its
//!   two readings (its own work `L² / c`, and the plan's cost and comm).
//! * [`search`]: seqbalance's planner: for each target step time, a degree per sequence (the one
//!   occupying the least rank-time whose time fits the target), balanced steps, and the ranks
//!   a step leaves idle spent on splitting or widening its slowest group.
//! * `skip`: how the step loops find the next sequence a step can place without visiting the
//!   ones that wait (near `n log n` for any cost).
//!
//! [`plan`] runs them all and returns the fastest plan (a floor's on a tie), so the answer is
//! never slower in the model than any of the six floors. With one size per step, the floor is
//! one fixed degree for every sequence, placed by the published greedy.
//!
//! Degrees are any ascending sizes up to `world_size` (the Python layer's default: the powers
//! of two dividing it). Memory: the problem's `n · degrees` communication table, a few arrays
//! of `n` and per degree a tree of `2n` numbers, plus the plan itself.
mod greedy;
mod megatron;
mod pool;
mod search;
mod skip;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

pub use greedy::{greedy, Reading, READINGS};
pub use megatron::{megatron, Workload, WORKLOADS};
pub use search::search;

type Result<T> = std::result::Result<T, CpError>;

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq)]
pub enum CpError {
    /// A sequence whose share `ceil(L / c)` exceeds the cap at every allowed degree.
    Unfit { index: usize, length: u64 },
    /// The arrays do not describe one problem (sizes, degrees); the text says which.
    Invalid(String),
    /// Out of memory or interrupted.
    Core(CoreError),
}

impl From<CoreError> for CpError {
    fn from(error: CoreError) -> Self {
        CpError::Core(error)
    }
}

impl fmt::Display for CpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpError::Unfit { index, length } => {
                write!(f, "lengths[{index}] = {length} fits no allowed CP degree")
            }
            CpError::Invalid(text) => f.write_str(text),
            CpError::Core(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for CpError {}

/// One planning problem. `comm[i * degrees.len() + j]` is the communication of sequence `i` at
/// degree `degrees[j]`, in the costs' units.
#[derive(Clone, Copy)]
pub struct Problem<'a> {
    pub lengths: &'a [u64],
    pub costs: &'a [f64],
    pub comm: &'a [f64],
    /// The allowed degrees, ascending, each at most `world_size`.
    pub degrees: &'a [u32],
    pub world_size: u32,
    pub cap: u64,
}

impl Problem<'_> {
    /// Check the shapes and values the planner relies on.
    pub fn check(&self) -> Result<()> {
        let n = self.lengths.len();
        let k = self.degrees.len();
        if self.costs.len() != n || self.comm.len() != n.saturating_mul(k) {
            return Err(CpError::Invalid(format!(
                "costs ({}) and comm ({}) must hold n ({n}) and n * degrees ({}) values",
                self.costs.len(),
                self.comm.len(),
                n.saturating_mul(k)
            )));
        }
        if n > u32::MAX as usize - 1 {
            return Err(CoreError::TooManyItems { n_items: n }.into());
        }
        if self.world_size == 0 || self.cap == 0 || k == 0 {
            return Err(CpError::Invalid("world_size, cap and the degrees must be positive".into()));
        }
        let mut previous = 0;
        for &c in self.degrees {
            if c <= previous || c > self.world_size {
                return Err(CpError::Invalid(format!(
                    "degrees must be ascending, from 1 to world_size {}, got {:?}",
                    self.world_size, self.degrees
                )));
            }
            previous = c;
        }
        if let Some(i) = self.costs.iter().chain(self.comm).position(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(CpError::Invalid(format!("costs and comm must be finite and >= 0 (value {i})")));
        }
        Ok(())
    }

    fn k(&self) -> usize {
        self.degrees.len()
    }

    /// The share of sequence `i` on each rank at degree index `j`.
    #[inline]
    fn share(&self, i: usize, j: usize) -> u64 {
        self.lengths[i].div_ceil(self.degrees[j] as u64)
    }

    #[inline]
    fn fits(&self, i: usize, j: usize) -> bool {
        self.share(i, j) <= self.cap
    }

    /// The time sequence `i` adds to each rank of a group at degree index `j`.
    #[inline]
    fn height(&self, i: usize, j: usize) -> f64 {
        self.costs[i] / self.degrees[j] as f64 + self.comm[i * self.k() + j]
    }

    /// The smallest degree index at which sequence `i` fits, or the error naming it.
    fn smallest_fit(&self, i: usize) -> Result<usize> {
        (0..self.k()).find(|&j| self.fits(i, j)).ok_or(CpError::Unfit { index: i, length: self.lengths[i] })
    }
}

/// One group of a plan: `degree` indexes the problem's degrees.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub degree: usize,
    pub members: Vec<u32>,
}

/// A plan: steps in order, each a list of groups.
pub type Steps = Vec<Vec<Group>>;

/// The time of one group on each of its ranks, summed in member order.
pub fn group_time(problem: &Problem, group: &Group) -> f64 {
    let mut total = 0.0;
    for &i in &group.members {
        total += problem.height(i as usize, group.degree);
    }
    total
}

/// The plan's time: over steps, the slowest group's time, summed.
pub fn plan_time(problem: &Problem, steps: &Steps) -> f64 {
    let mut total = 0.0;
    for step in steps {
        total += step.iter().map(|g| group_time(problem, g)).fold(0.0, f64::max);
    }
    total
}

/// The spec's lower bound on any plan's time: the least rank-time of every sequence spread over
/// every rank, or the least time of the slowest single sequence, whichever is larger.
pub fn lower_bound(problem: &Problem) -> Result<f64> {
    let mut spread = 0.0;
    let mut longest: f64 = 0.0;
    for i in 0..problem.lengths.len() {
        let first = problem.smallest_fit(i)?;
        let (mut rank_time, mut time) = (f64::INFINITY, f64::INFINITY);
        for j in first..problem.k() {
            let height = problem.height(i, j);
            rank_time = rank_time
                .min(problem.costs[i] + problem.degrees[j] as f64 * problem.comm[i * problem.k() + j]);
            time = time.min(height);
        }
        spread += rank_time;
        longest = longest.max(time);
    }
    Ok((spread / problem.world_size as f64).max(longest))
}

/// The planned answer: steps, their time in the model, and which method made them.
#[derive(Clone, Debug)]
pub struct Plan {
    pub steps: Steps,
    pub time: f64,
    /// `"search"`, the greedy reading that won (`"1a"`, `"1b"`, `"2a"`, `"2b"`), Megatron-LM's
    /// scheduler (`"megatron"`, `"megatron-judged"`), one fixed degree (`"fixed"`), or, for
    /// [`Method::Best`], the search restricted to one size per step (`"one-size search"`).
    pub method: &'static str,
}

/// Which plans [`plan`] considers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The search and the six floors (four greedy readings, two of Megatron-LM's scheduler),
    /// then the [`Method::OneSizePerStep`] plan; the fastest wins (an earlier one on a tie).
    Best,
    /// Every step's groups of one degree (chosen per step): the search so restricted against
    /// one fixed degree for every sequence (the smallest that fits them all) placed by the
    /// published greedy; the faster wins.
    OneSizePerStep,
    /// One greedy reading alone (the benchmark's floor, and the tests' check of it).
    Greedy(Reading),
    /// One reading of Megatron-LM's scheduler alone.
    Megatron(Workload),
}

/// Plan `problem` by `method`.
pub fn plan(problem: &Problem, method: Method, interrupt: &Interrupt) -> Result<Plan> {
    problem.check()?;
    for i in 0..problem.lengths.len() {
        problem.smallest_fit(i)?;
    }
    let timed = |steps: Steps, method: &'static str| {
        let time = plan_time(problem, &steps);
        Plan { steps, time, method }
    };
    // Only the fastest plan so far is kept (each is as large as the answer).
    let mut best: Option<Plan> = None;
    let mut consider = |floor: Plan| {
        if best.as_ref().is_none_or(|b| floor.time < b.time) {
            best = Some(floor);
        }
    };
    match method {
        Method::Greedy(reading) => return Ok(timed(greedy(problem, reading, interrupt)?, reading.name())),
        Method::Megatron(workload) => {
            return Ok(timed(megatron(problem, workload, interrupt)?, workload.name()));
        }
        Method::Best => {
            for reading in READINGS {
                consider(timed(greedy(problem, reading, interrupt)?, reading.name()));
            }
            for workload in WORKLOADS {
                consider(timed(megatron(problem, workload, interrupt)?, workload.name()));
            }
        }
        Method::OneSizePerStep => {
            if let Some(steps) = fixed_degree(problem, interrupt)? {
                consider(timed(steps, "fixed"));
            }
        }
    }
    let limit = best.as_ref().map_or(f64::INFINITY, |b| b.time);
    if let Some(steps) = search(problem, limit, method == Method::OneSizePerStep, interrupt)? {
        let searched = timed(steps, "search");
        if searched.time < limit {
            best = Some(searched);
        }
    }
    if method == Method::Best {
        // One size per step is a restriction of the free plan, yet its search widens a whole
        // step at once, a move the free search does not make: its plan (exactly what
        // `OneSizePerStep` answers) is a candidate, kept only when strictly faster.
        let single = plan(problem, Method::OneSizePerStep, interrupt)?;
        if best.as_ref().is_none_or(|b| single.time < b.time) {
            let method = if single.method == "fixed" { "fixed" } else { "one-size search" };
            best = Some(Plan { method, ..single });
        }
    }
    Ok(best.unwrap_or(Plan { steps: Vec::new(), time: 0.0, method: "search" }))
}

/// One fixed degree for every sequence (the smallest that fits them all), placed by the
/// published greedy (the faster of readings 1a and 2a; with one degree, b adds nothing), or
/// `None` without sequences.
fn fixed_degree(problem: &Problem, interrupt: &Interrupt) -> Result<Option<Steps>> {
    let n = problem.lengths.len();
    let mut j = 0;
    for i in 0..n {
        j = j.max(problem.smallest_fit(i)?);
    }
    if n == 0 {
        return Ok(None);
    }
    let k = problem.k();
    let comm = alloc::collect((0..n).map(|i| problem.comm[i * k + j]), "the fixed degree's communication")?;
    let degrees = [problem.degrees[j]];
    let fixed = Problem { comm: &comm, degrees: &degrees, ..*problem };
    let mut best: Option<(Steps, f64)> = None;
    for reading in [READINGS[0], READINGS[2]] {
        let mut steps = greedy(&fixed, reading, interrupt)?;
        steps.iter_mut().flatten().for_each(|group| group.degree = j);
        let time = plan_time(problem, &steps);
        if best.as_ref().is_none_or(|(_, b)| time < *b) {
            best = Some((steps, time));
        }
    }
    Ok(best.map(|(steps, _)| steps))
}

/// The plan laid out for the binding: per group `(step, cp_size, first rank, end of members)`,
/// members concatenated. Within a step, groups take consecutive ranks from 0: those whose size
/// is a power of two first, widest first, so each starts at a multiple of its size (the blocks
/// Megatron-LM creates its dynamic-CP process groups on); then the others, widest first, each a
/// block of consecutive ranks (Megatron-LM #6801's logical groups take any such interval). Ties
/// keep the plan's order.
pub struct Layout {
    pub groups: Vec<[u64; 4]>,
    pub members: Vec<u32>,
}

pub fn layout(problem: &Problem, steps: &Steps) -> Result<Layout> {
    let n_groups = steps.iter().map(Vec::len).sum();
    let mut groups = alloc::with_capacity(n_groups, "the plan's groups")?;
    let mut members = alloc::with_capacity(problem.lengths.len(), "the plan's indexes")?;
    for (s, step) in steps.iter().enumerate() {
        let mut order: Vec<usize> = alloc::collect(0..step.len(), "the plan's groups")?;
        order.sort_unstable_by_key(|&g| {
            let c = problem.degrees[step[g].degree];
            (!c.is_power_of_two(), std::cmp::Reverse(c), g)
        });
        let mut rank = 0u64;
        for g in order {
            let group = &step[g];
            let c = problem.degrees[group.degree] as u64;
            alloc::reserve(&mut members, group.members.len(), "the plan's indexes")?;
            members.extend_from_slice(&group.members);
            groups.push([s as u64, c, rank, members.len() as u64]);
            rank += c;
        }
    }
    Ok(Layout { groups, members })
}
