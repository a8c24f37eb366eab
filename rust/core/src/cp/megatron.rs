//! The scheduler Megatron-LM ships now, a second floor: its dev branch (commit d48bd6be0a, PR
//! #5154) forms each step with `next_hdp_group_packing_aware`, as the time-cost spec pins it.
//! Written from what that function does, not from its code; the pure-Python oracle
//! `tests/planning/cp_megatron_oracle.py` is the plain transcription the tests compare with.
//!
//! One step from the sequences left, longest first (ties by index): the first (the tallest) opens
//! a group of its smallest degree; every other, in order, takes the placement that keeps the
//! step's slowest rank fastest among those within a cap — joining a group of some allowed degree
//! at or above its smallest (as long as the group's tokens stay within the per-rank cap), or
//! opening one on free ranks — the first such placement on a tie (degrees ascending, a degree's
//! groups in the order they were opened, then a new group); a sequence with no placement within
//! the cap waits for the next step. Then, while ranks are free, the first group of the smallest
//! degree moves up to the next allowed degree; where no group can, and a group of every rank is
//! allowed, the step is formed again as one such group of the sequences (in order) whose shares
//! fit. The cap is `1.05 ·` the work of the tallest sequence at the fractional degree
//! `tallest / max_tokens_per_rank`. In two readings:
//!
//! * [`Workload::Shipped`]: Megatron-LM's own work `L² / c`, its cap
//!   `1.05 · tallest · max_tokens_per_rank`.
//! * [`Workload::Judged`]: the plan's own cost and comm, `cost(L) / c + comm(L, c)`, its cap
//!   `1.05 · (cost(tallest) / d + comm(tallest, d))` with `d = max(1, tallest / max_tokens_per_rank)`
//!   left fractional; `comm` at a fractional degree is interpolated linearly in `1 / c` between
//!   the allowed degrees around it (and `c = 1`, where it is 0): exact for `comm = κ`, whose
//!   `κ · L · (c − 1) / c` is linear in `1 / c`.
//!
//! Where the transcription departs from the shipped code, it says so: shares are the spec's
//! `ceil(L / c)` tokens (Megatron-LM counts `L / c` as a float, which can put a rank over the
//! cap the spec holds every plan to); the degrees are the allowed ones (Megatron-LM doubles up
//! to the world size), a group of every rank exists only where that size is allowed (else the
//! step keeps its idle ranks), and a length of 0 takes the smallest degree (Megatron-LM's
//! `log2(0)` raises).
//!
//! Finding the next sequence a step can place uses [`super::skip`] (the loop the rules describe
//! visits every waiting sequence in every step, quadratic over thousands of steps).
use super::pool::key;
use super::skip::{FirstFit, Least, MinTree, Stairs};
use super::{CpError, Group, Problem, Result, Steps};
use crate::alloc;
use crate::interrupt::Interrupt;

/// Which work the scheduler balances (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `L² / c`, as shipped.
    Shipped,
    /// `cost(L) / c + comm(L, c)`, the plan's own model.
    Judged,
}

/// Both, in that order (the first of equally fast plans wins).
pub const WORKLOADS: [Workload; 2] = [Workload::Shipped, Workload::Judged];

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Shipped => "megatron",
            Workload::Judged => "megatron-judged",
        }
    }

    pub fn from_name(name: &str) -> Option<Workload> {
        WORKLOADS.into_iter().find(|w| w.name() == name)
    }
}

/// `1 + _DYNAMIC_CP_WORKLOAD_CAP_DELTA` (0.05), computed as Megatron-LM computes it.
const CAP_FACTOR: f64 = 1.0 + 0.05;

/// The work of sequence `i` at degree index `j`.
#[inline]
fn work(problem: &Problem, workload: Workload, i: usize, j: usize) -> f64 {
    match workload {
        Workload::Shipped => {
            let length = problem.lengths[i] as f64;
            length * length / problem.degrees[j] as f64
        }
        Workload::Judged => problem.height(i, j),
    }
}

/// The communication of sequence `i` at a fractional degree `d >= 1`: linear in `1 / c` between
/// the allowed degrees around `d` (and `(1, 0)`).
pub(super) fn comm_at(problem: &Problem, i: usize, d: f64) -> f64 {
    let (mut below, mut below_comm) = (1.0, 0.0);
    for j in 0..problem.k() {
        let c = problem.degrees[j] as f64;
        let comm = problem.comm[i * problem.k() + j];
        if c == d {
            return comm;
        }
        if c < d {
            (below, below_comm) = (c, comm);
            continue;
        }
        let t = (1.0 / below - 1.0 / d) / (1.0 / below - 1.0 / c);
        return below_comm + (comm - below_comm) * t;
    }
    below_comm
}

/// The step's cap, from its tallest sequence `i`.
pub(super) fn step_cap(problem: &Problem, workload: Workload, i: usize) -> f64 {
    let tall = problem.lengths[i] as f64;
    match workload {
        Workload::Shipped => tall * problem.cap as f64 * CAP_FACTOR,
        Workload::Judged => {
            let d = (tall / problem.cap as f64).max(1.0);
            (problem.costs[i] / d + comm_at(problem, i, d)) * CAP_FACTOR
        }
    }
}

/// A group of a step being formed.
struct Open {
    degree: usize,
    tokens: u64,
    load: f64,
    members: Vec<u32>,
}

/// Where a sequence goes.
enum Target {
    Join(usize),
    New(usize),
}

/// A step being formed: its groups, and per degree the structures that answer the scheduler's
/// questions about them without a scan.
struct Forming {
    free: u32,
    groups: Vec<Open>,
    /// Per group, its place among the groups of its degree.
    slot: Vec<u32>,
    /// Per degree, its groups (positions in `groups`) in opening order.
    of_degree: Vec<Vec<usize>>,
    /// Per degree, the groups by tokens with the least time of every prefix.
    stairs: Vec<Stairs>,
    /// Per degree, the groups in opening order (first fit on tokens and time).
    fits: Vec<FirstFit>,
}

impl Forming {
    fn new(k: usize) -> Forming {
        Forming {
            free: 0,
            groups: Vec::new(),
            slot: Vec::new(),
            of_degree: vec![Vec::new(); k],
            stairs: (0..k).map(|_| Stairs::default()).collect(),
            fits: (0..k).map(|_| FirstFit::default()).collect(),
        }
    }

    fn clear(&mut self, world_size: u32) {
        self.free = world_size;
        self.groups = Vec::new();
        self.slot.clear();
        self.of_degree.iter_mut().for_each(Vec::clear);
        self.stairs.iter_mut().for_each(Stairs::clear);
        self.fits.iter_mut().for_each(FirstFit::clear);
    }

    /// Open a group of degree index `j` (`c` ranks) holding sequence `i`.
    fn open(&mut self, j: usize, c: u32, i: usize, share: u64, load: f64) -> Result<()> {
        let s = self.of_degree[j].len();
        alloc::push(&mut self.of_degree[j], self.groups.len(), "a step's groups")?;
        alloc::push(&mut self.slot, s as u32, "a step's groups")?;
        let mut members = Vec::new();
        alloc::push(&mut members, i as u32, "a group's indexes")?;
        alloc::push(&mut self.groups, Open { degree: j, tokens: share, load, members }, "a step's groups")?;
        self.stairs[j].put(s as u32, share, key(load))?;
        self.fits[j].put(s, share, load)?;
        self.free -= c;
        Ok(())
    }

    /// Sequence `i` joins group `g`.
    fn join(&mut self, g: usize, i: usize, share: u64, load: f64) -> Result<()> {
        let group = &mut self.groups[g];
        group.tokens += share;
        group.load += load;
        alloc::push(&mut group.members, i as u32, "a group's indexes")?;
        let (j, s, tokens, load) = (group.degree, self.slot[g], group.tokens, group.load);
        self.stairs[j].put(s, tokens, key(load))?;
        Ok(self.fits[j].put(s as usize, tokens, load)?)
    }

    /// The least time among the groups of degree `j` with room for `share` tokens.
    fn least_time(&self, problem: &Problem, j: usize, share: u64) -> Option<f64> {
        let room = problem.cap.checked_sub(share)?;
        let least = self.stairs[j].least_within(|tokens| tokens <= room);
        (least != u64::MAX).then(|| f64::from_bits(least))
    }

    /// The scheduler's choice for sequence `i` (smallest degree index `lowest`): the placement
    /// of least projected step time within the cap, the first on a tie (degrees ascending; a
    /// degree's groups in opening order, then a new group), with that time.
    #[allow(clippy::too_many_arguments)]
    fn choose(
        &self,
        problem: &Problem,
        workload: Workload,
        slowest: f64,
        cap: f64,
        i: usize,
        lowest: usize,
    ) -> Option<(Target, f64)> {
        let mut best: Option<(Target, f64)> = None;
        for j in lowest..problem.k() {
            let w = work(problem, workload, i, j);
            let share = problem.share(i, j);
            if let Some(least) = self.least_time(problem, j, share) {
                // The least projected time over the degree's groups with room, and the first
                // group (in opening order) that reaches it.
                let projected = slowest.max(least + w);
                if projected <= cap && best.as_ref().is_none_or(|(_, b)| projected < *b) {
                    let room = problem.cap - share;
                    let s = self.fits[j].first(room, |load| slowest.max(load + w) <= projected)?;
                    best = Some((Target::Join(self.of_degree[j][s]), projected));
                }
            }
            if self.free >= problem.degrees[j] {
                let projected = slowest.max(0.0 + w);
                if projected <= cap && best.as_ref().is_none_or(|(_, b)| projected < *b) {
                    best = Some((Target::New(j), projected));
                }
            }
        }
        best
    }
}

/// The waiting sequences, longest first, and per degree a tree of their work.
struct Waiting<'a> {
    problem: &'a Problem<'a>,
    workload: Workload,
    /// Sequence indexes, longest first (ties by index).
    order: Vec<u32>,
    /// Per position, its smallest degree index.
    smallest: Vec<u32>,
    /// Degree j serves the positions from `first[j]` on (shorter sequences fit smaller degrees).
    first: Vec<usize>,
    /// Per degree, the work of the positions it serves (placed ones hold none).
    works: Vec<MinTree<f64>>,
}

impl Waiting<'_> {
    fn share(&self, p: usize, j: usize) -> u64 {
        self.problem.share(self.order[p] as usize, j)
    }

    fn set(&mut self, p: usize, placed: bool) {
        for j in 0..self.works.len() {
            if p >= self.first[j] {
                let value = if placed {
                    f64::NONE
                } else {
                    work(self.problem, self.workload, self.order[p] as usize, j)
                };
                self.works[j].set(p - self.first[j], value);
            }
        }
    }

    /// The first waiting position from `from` on that degree `j` can take within the cap: any
    /// whose work is within it while ranks are free for a group of the degree, else one that
    /// some group of the degree takes (its tokens within the per-rank cap, its time within the
    /// step's cap). Shares fall along the order, so the groups with room for a position's tokens
    /// only grow along it, and so does the least time among them: the tree tests a node at its
    /// last position and is exact there.
    fn next_placeable(&self, forming: &Forming, cap: f64, j: usize, from: usize) -> Option<usize> {
        let problem = self.problem;
        let base = self.first[j];
        let tree = &self.works[j];
        let from = from.max(base) - base;
        if forming.free >= problem.degrees[j] {
            return tree
                .first(from, tree.len(), &mut |_, least| least <= cap, &mut |_, w| w <= cap)
                .map(|t| t + base);
        }
        if forming.of_degree[j].is_empty() {
            return None;
        }
        let fits = |t: usize, w: f64| {
            forming.least_time(problem, j, self.share(t + base, j)).is_some_and(|time| time + w <= cap)
        };
        tree.first(from, tree.len(), &mut |last, least| fits(last, least), &mut |t, w| fits(t, w))
            .map(|t| t + base)
    }
}

/// The scheduler's plan in one reading. Every sequence must fit some degree (checked by the
/// caller).
pub fn megatron<'a>(problem: &'a Problem<'a>, workload: Workload, interrupt: &Interrupt) -> Result<Steps> {
    let n = problem.lengths.len();
    let k = problem.k();
    let mut order: Vec<u32> = alloc::collect(0..n as u32, "the scheduler's order")?;
    order.sort_unstable_by(|&a, &b| {
        problem.lengths[b as usize].cmp(&problem.lengths[a as usize]).then(a.cmp(&b))
    });
    let mut smallest: Vec<u32> = alloc::with_capacity(n, "the scheduler's degrees")?;
    for &i in &order {
        smallest.push(problem.smallest_fit(i as usize)? as u32);
    }
    let first: Vec<usize> = (0..k).map(|j| smallest.partition_point(|&s| s as usize > j)).collect();
    let mut works: Vec<MinTree<f64>> = alloc::with_capacity(k, "the scheduler's waiting sequences")?;
    for j in 0..k {
        let values = order[first[j]..].iter().map(|&i| work(problem, workload, i as usize, j));
        works.push(MinTree::new(values, "the scheduler's waiting sequences")?);
    }
    let mut waiting = Waiting { problem, workload, order, smallest, first, works };
    let mut steps: Steps = Vec::new();
    let mut left = n;
    let mut tick = 0usize;
    let mut forming = Forming::new(k);
    let mut placed: Vec<u32> = Vec::new();
    let mut candidate: Vec<Option<usize>> = vec![None; k];
    while left > 0 {
        interrupt.check()?;
        let Some(tallest) = waiting.works[k - 1].first_waiting(0, n) else {
            break;
        };
        let tall = waiting.order[tallest] as usize;
        let cap = step_cap(problem, workload, tall);
        forming.clear(problem.world_size);
        placed.clear();
        // The tallest opens a group of its smallest degree, whatever the cap.
        let j = waiting.smallest[tallest] as usize;
        let mut slowest = work(problem, workload, tall, j);
        forming.open(j, problem.degrees[j], tall, waiting.share(tallest, j), slowest)?;
        waiting.set(tallest, true);
        alloc::push(&mut placed, tallest as u32, "the scheduler's step")?;
        left -= 1;
        if slowest <= cap {
            for (j, slot) in candidate.iter_mut().enumerate() {
                *slot = waiting.next_placeable(&forming, cap, j, tallest + 1);
            }
            while let Some(p) = candidate.iter().flatten().copied().min() {
                tick += 1;
                interrupt.every(tick)?;
                let i = waiting.order[p] as usize;
                let lowest = waiting.smallest[p] as usize;
                let Some((target, projected)) = forming.choose(problem, workload, slowest, cap, i, lowest)
                else {
                    return Err(CpError::Invalid(format!("internal error: no placement for lengths[{i}]")));
                };
                let before = forming.free;
                let moved = match target {
                    Target::Join(g) => {
                        let j = forming.groups[g].degree;
                        forming.join(g, i, waiting.share(p, j), work(problem, workload, i, j))?;
                        j
                    }
                    Target::New(j) => {
                        forming.open(
                            j,
                            problem.degrees[j],
                            i,
                            waiting.share(p, j),
                            work(problem, workload, i, j),
                        )?;
                        j
                    }
                };
                slowest = projected;
                waiting.set(p, true);
                alloc::push(&mut placed, p as u32, "the scheduler's step")?;
                left -= 1;
                // Asked again: the degrees whose next was this position, the degree that took it,
                // and those that can no longer open a group; the others' answers still hold.
                for (j, next) in candidate.iter_mut().enumerate() {
                    let c = problem.degrees[j];
                    if *next == Some(p) || j == moved || (before >= c && forming.free < c) {
                        *next = next.and_then(|q| waiting.next_placeable(&forming, cap, j, q.max(p + 1)));
                    }
                }
            }
        }
        let step = match fill(problem, &mut forming.groups, forming.free, interrupt)? {
            Some(step) => step,
            None => {
                // Formed again as one group of every rank: the sequences of this step wait again,
                // and those whose shares fit, in order, make the group.
                for &p in &placed {
                    waiting.set(p as usize, false);
                }
                left += placed.len();
                let mut members = Vec::new();
                let mut tokens = 0u64;
                let mut at = 0;
                loop {
                    let room = problem.cap - tokens;
                    at = at.max(waiting.order.partition_point(|&i| problem.share(i as usize, k - 1) > room));
                    let Some(p) = waiting.works[k - 1].first_waiting(at, n) else {
                        break;
                    };
                    tokens += waiting.share(p, k - 1);
                    alloc::push(&mut members, waiting.order[p], "a group's indexes")?;
                    waiting.set(p, true);
                    left -= 1;
                    at = p + 1;
                }
                vec![Group { degree: k - 1, members }]
            }
        };
        alloc::push(&mut steps, step, "the plan's steps")?;
    }
    Ok(steps)
}

/// The step once its idle ranks are filled: while ranks are free, the first group of the
/// smallest degree moves up to the next allowed degree. `None` when no group can and a group of
/// every rank is allowed (the caller forms the step again as one); idle ranks stay otherwise.
fn fill(
    problem: &Problem,
    groups: &mut [Open],
    mut free: u32,
    interrupt: &Interrupt,
) -> Result<Option<Vec<Group>>> {
    let k = problem.k();
    let mut round = 0usize;
    while free > 0 {
        // Up to one round per free rank (sizes one apart): ask about Ctrl-C now and then.
        round += 1;
        interrupt.every(round)?;
        let narrowest = groups.iter().map(|g| g.degree).min().unwrap_or(k - 1);
        let needed = (narrowest + 1 < k).then(|| problem.degrees[narrowest + 1] - problem.degrees[narrowest]);
        match needed {
            Some(needed) if needed <= free => {
                if let Some(group) = groups.iter_mut().find(|g| g.degree == narrowest) {
                    group.degree = narrowest + 1;
                }
                free -= needed;
            }
            _ if problem.degrees[k - 1] == problem.world_size => return Ok(None),
            _ => break,
        }
    }
    let mut step = alloc::with_capacity(groups.len(), "a step's groups")?;
    step.extend(
        groups.iter_mut().map(|g| Group { degree: g.degree, members: std::mem::take(&mut g.members) }),
    );
    Ok(Some(step))
}

/// [`megatron`] as the rules read: every waiting sequence visited in every step, every group
/// scanned (the oracle the tests compare the fast version with).
#[cfg(test)]
pub(super) fn megatron_plain(problem: &Problem, workload: Workload) -> Steps {
    let k = problem.k();
    let mut pending: Vec<usize> = (0..problem.lengths.len()).collect();
    pending.sort_by(|&a, &b| problem.lengths[b].cmp(&problem.lengths[a]).then(a.cmp(&b)));
    let mut steps = Vec::new();
    while let Some(&tall) = pending.first() {
        let cap = step_cap(problem, workload, tall);
        let mut free = problem.world_size;
        let j = problem.smallest_fit(tall).unwrap();
        let mut slowest = work(problem, workload, tall, j);
        let mut groups = vec![Open {
            degree: j,
            tokens: problem.share(tall, j),
            load: slowest,
            members: vec![tall as u32],
        }];
        free -= problem.degrees[j];
        let mut waiting = Vec::new();
        for &i in &pending[1..] {
            let mut best: Option<(Target, f64)> = None;
            for j in problem.smallest_fit(i).unwrap()..k {
                let (w, share) = (work(problem, workload, i, j), problem.share(i, j));
                for (g, group) in groups.iter().enumerate() {
                    if group.degree != j || group.tokens.checked_add(share).is_none_or(|t| t > problem.cap) {
                        continue;
                    }
                    let projected = slowest.max(group.load + w);
                    if projected <= cap && best.as_ref().is_none_or(|(_, b)| projected < *b) {
                        best = Some((Target::Join(g), projected));
                    }
                }
                if free >= problem.degrees[j] {
                    let projected = slowest.max(0.0 + w);
                    if projected <= cap && best.as_ref().is_none_or(|(_, b)| projected < *b) {
                        best = Some((Target::New(j), projected));
                    }
                }
            }
            match best {
                None => waiting.push(i),
                Some((Target::Join(g), projected)) => {
                    let group = &mut groups[g];
                    group.tokens += problem.share(i, group.degree);
                    group.load += work(problem, workload, i, group.degree);
                    group.members.push(i as u32);
                    slowest = projected;
                }
                Some((Target::New(j), projected)) => {
                    let load = work(problem, workload, i, j);
                    groups.push(Open {
                        degree: j,
                        tokens: problem.share(i, j),
                        load,
                        members: vec![i as u32],
                    });
                    free -= problem.degrees[j];
                    slowest = projected;
                }
            }
        }
        match fill(problem, &mut groups, free, &Interrupt::NEVER).unwrap() {
            Some(step) => {
                steps.push(step);
                pending = waiting;
            }
            None => {
                let (mut members, mut rest, mut tokens) = (Vec::new(), Vec::new(), 0u64);
                for &i in &pending {
                    let share = problem.share(i, k - 1);
                    if tokens.checked_add(share).is_some_and(|t| t <= problem.cap) {
                        tokens += share;
                        members.push(i as u32);
                    } else {
                        rest.push(i);
                    }
                }
                steps.push(vec![Group { degree: k - 1, members }]);
                pending = rest;
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_fast_scheduler_is_the_scheduler_of_the_rules(
            shape in (prop::sample::select(vec![1u32, 2, 4, 8, 12, 16, 64]), 1u64..120, 0usize..160),
            seed in any::<u64>(),
            quadratic in 0.0f64..0.05,
            kappa in 0.0f64..1.0,
            scrambled in any::<bool>(),
            any_sizes in prop::option::of(prop::collection::btree_set(1u32..=64, 1..5)),
            judged in any::<bool>(),
        ) {
            let (world_size, cap, n) = shape;
            // A cost that does not grow with the length: works then do not fall along the order.
            let owned = crate::cp::tests::Owned::drawn(
                world_size, cap, n, seed, quadratic, kappa, scrambled.then_some(97), any_sizes,
            );
            let problem = owned.problem();
            let workload = if judged { Workload::Judged } else { Workload::Shipped };
            let fast = megatron(&problem, workload, &Interrupt::NEVER).unwrap();
            let plain = megatron_plain(&problem, workload);
            prop_assert_eq!(fast, plain);
        }
    }

    #[test]
    fn a_short_sequence_takes_a_wider_group_when_that_lowers_the_step() {
        // Shipped work L^2 / c, 4 ranks, cap 10. 11 opens a group of 2 (work 60.5; the step's
        // cap 11 * 10 * 1.05 = 115.5). 10 fits one rank (work 100, the step at 100), but a new
        // group of 2 keeps the step at 60.5: it takes two ranks. 3 then finds no free rank; both
        // groups have room for its 2 tokens, and joining the second (50 + 4.5) keeps the step
        // at 60.5 where the first would take it to 65.
        let (lengths, costs, comm) = (vec![10u64, 11, 3], vec![0.0; 3], vec![0.0; 9]);
        let degrees = [1u32, 2, 4];
        let problem = Problem {
            lengths: &lengths,
            costs: &costs,
            comm: &comm,
            degrees: &degrees,
            world_size: 4,
            cap: 10,
        };
        let steps = megatron(&problem, Workload::Shipped, &Interrupt::NEVER).unwrap();
        let named: Vec<Vec<(u32, Vec<u32>)>> = steps
            .iter()
            .map(|s| s.iter().map(|g| (degrees[g.degree], g.members.clone())).collect())
            .collect();
        assert_eq!(named, vec![vec![(2, vec![1]), (2, vec![0, 2])]]);
        assert_eq!(steps, megatron_plain(&problem, Workload::Shipped));
    }

    #[test]
    fn the_judged_cap_interpolates_comm_in_one_over_c() {
        // comm = kappa * L * (c - 1) / c at degrees 1, 2, 4: at d = 3 the interpolation is exact.
        let lengths = vec![30u64];
        let kappa = 0.5;
        let degrees = [1u32, 2, 4];
        let comm: Vec<f64> = degrees.iter().map(|&c| kappa * 30.0 * (c - 1) as f64 / c as f64).collect();
        let costs = vec![900.0];
        let problem = Problem {
            lengths: &lengths,
            costs: &costs,
            comm: &comm,
            degrees: &degrees,
            world_size: 4,
            cap: 10,
        };
        let exact = kappa * 30.0 * 2.0 / 3.0;
        assert!((comm_at(&problem, 0, 3.0) - exact).abs() < 1e-12);
        assert_eq!(comm_at(&problem, 0, 2.0), comm[1]);
        assert_eq!(comm_at(&problem, 0, 1.0), 0.0);
        let cap = step_cap(&problem, Workload::Judged, 0);
        assert!((cap - 1.05 * (900.0 / 3.0 + exact)).abs() < 1e-9);
        assert_eq!(step_cap(&problem, Workload::Shipped, 0), 30.0 * 10.0 * (1.0 + 0.05));
    }
}
