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
//!   defines it), in its four readings; the fastest of them is the floor a plan must beat.
//! * [`search`]: seqbalance's planner: for each target step time, a degree per sequence (the one
//!   occupying the least rank-time whose time fits the target), balanced steps, and the ranks
//!   a step leaves idle spent on splitting or widening its slowest group.
//!
//! [`plan`] runs both and returns the faster plan (the greedy's on a tie), so the answer is never
//! slower in the model than the floor.
mod greedy;
mod pool;
mod search;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

pub use greedy::{greedy, Reading, READINGS};
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
    /// The allowed degrees, ascending, each a power of two dividing `world_size`.
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
            if c <= previous || !c.is_power_of_two() || self.world_size % c != 0 {
                return Err(CpError::Invalid(format!(
                    "degrees must be ascending powers of two dividing world_size {}, got {:?}",
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
    /// `"search"`, or the greedy reading that won (`"1a"`, `"1b"`, `"2a"`, `"2b"`).
    pub method: &'static str,
}

/// Which plans [`plan`] considers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The search and the four greedy readings; the fastest wins.
    Best,
    /// One greedy reading alone (the benchmark's floor, and the tests' check of it).
    Greedy(Reading),
}

/// Plan `problem`: the fastest of the search and the four greedy readings (`Method::Best`).
pub fn plan(problem: &Problem, method: Method, interrupt: &Interrupt) -> Result<Plan> {
    problem.check()?;
    for i in 0..problem.lengths.len() {
        problem.smallest_fit(i)?;
    }
    if let Method::Greedy(reading) = method {
        let steps = greedy(problem, reading, interrupt)?;
        let time = plan_time(problem, &steps);
        return Ok(Plan { steps, time, method: reading.name() });
    }
    let mut best: Option<Plan> = None;
    for reading in READINGS {
        let steps = greedy(problem, reading, interrupt)?;
        let time = plan_time(problem, &steps);
        if best.as_ref().is_none_or(|b| time < b.time) {
            best = Some(Plan { steps, time, method: reading.name() });
        }
    }
    let floor = best.as_ref().map_or(f64::INFINITY, |b| b.time);
    if let Some(steps) = search(problem, floor, interrupt)? {
        let time = plan_time(problem, &steps);
        if time < floor {
            best = Some(Plan { steps, time, method: "search" });
        }
    }
    Ok(best.unwrap_or(Plan { steps: Vec::new(), time: 0.0, method: "search" }))
}

/// The plan laid out for the binding: per group `(step, cp_size, first rank, end of members)`,
/// members concatenated. Within a step, groups go widest first (ties in plan order) and take
/// consecutive ranks from 0, so each group's ranks are a block aligned to its size.
pub struct Layout {
    pub groups: Vec<[u64; 4]>,
    pub members: Vec<u32>,
}

pub fn layout(problem: &Problem, steps: &Steps) -> Result<Layout> {
    let n_groups = steps.iter().map(Vec::len).sum();
    let mut groups = alloc::with_capacity(n_groups, "the plan's groups")?;
    let mut members = alloc::with_capacity(problem.lengths.len(), "the plan's indexes")?;
    for (s, step) in steps.iter().enumerate() {
        let mut order: Vec<usize> = (0..step.len()).collect();
        order.sort_by_key(|&g| std::cmp::Reverse(problem.degrees[step[g].degree]));
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
