//! The published greedy, as the time-cost spec defines it, in its four readings.
//!
//! Each sequence takes the smallest allowed degree whose share fits the cap; sequences go longest
//! first (ties by index). Within a step a sequence opens a group of its degree while that many
//! ranks are free, else joins the group of its degree with the least load (the first opened on a
//! tie) that has room for its tokens. One that fits nowhere closes the step (reading 1) or waits
//! for the next step while shorter ones go on filling this one (reading 2). Once a step is
//! formed, nothing more (a), or while ranks are free the first group of the smallest degree moves
//! up to the next allowed degree (b). Loads are in the plan's own cost and comm. The pure-Python
//! oracle `tests/planning/cp_oracle.py` is written from the same text; the tests compare them.
use super::pool::{Degree, Open};
use super::search::next_waiting;
use super::{Group, Problem, Result, Steps};
use crate::alloc;
use crate::interrupt::Interrupt;

/// One of the four readings: how a step ends (1: at the first sequence that fits nowhere;
/// 2: after every waiting sequence was tried) and what the idle ranks do (a: nothing; b: widen
/// the first group of the smallest degree, again and again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub waits: bool,
    pub widens: bool,
}

/// 1a, 1b, 2a, 2b, in that order (the first of equally fast plans wins).
pub const READINGS: [Reading; 4] = [
    Reading { waits: false, widens: false },
    Reading { waits: false, widens: true },
    Reading { waits: true, widens: false },
    Reading { waits: true, widens: true },
];

impl Reading {
    pub fn name(self) -> &'static str {
        match (self.waits, self.widens) {
            (false, false) => "1a",
            (false, true) => "1b",
            (true, false) => "2a",
            (true, true) => "2b",
        }
    }

    pub fn from_name(name: &str) -> Option<Reading> {
        READINGS.into_iter().find(|r| r.name() == name)
    }
}

/// The greedy's plan in one reading. Every sequence must fit some degree (checked by the caller).
pub fn greedy(problem: &Problem, reading: Reading, interrupt: &Interrupt) -> Result<Steps> {
    let n = problem.lengths.len();
    let mut degree = alloc::with_capacity(n, "the greedy's degrees")?;
    for i in 0..n {
        degree.push(problem.smallest_fit(i)?);
    }
    let mut pending: Vec<u32> = alloc::collect(0..n as u32, "the greedy's order")?;
    // Unstable sorts allocate nothing (a stable one takes a scratch buffer of n / 2 with an
    // allocation that aborts when memory runs out); the index breaks every tie, so the order is
    // the same.
    pending.sort_unstable_by(|&a, &b| {
        problem.lengths[b as usize].cmp(&problem.lengths[a as usize]).then(a.cmp(&b))
    });
    if reading.waits {
        return greedy_waiting(problem, reading, &degree, &pending, interrupt);
    }
    let mut steps: Steps = Vec::new();
    let mut tick = 0usize;
    // Per degree, the step's groups by load among those with room (no scan of every group).
    let mut pools: Vec<Degree> = (0..problem.k()).map(|_| Degree::default()).collect();
    // Reading 1: the first sequence that fits nowhere closes the step, so the sequences waiting
    // for the next step are always the rest of the order, from `first` on.
    let mut first = 0;
    while first < n {
        let mut free = problem.world_size;
        let mut groups: Vec<Open> = Vec::new();
        pools.iter_mut().for_each(Degree::clear);
        let mut at = first;
        while at < n {
            tick += 1;
            interrupt.every(tick)?;
            if !place(problem, &degree, pending[at], &mut free, &mut groups, &mut pools, false)? {
                break;
            }
            at += 1;
        }
        first = at;
        if reading.widens {
            widen(problem, &mut groups, free, interrupt)?;
        }
        let step = groups.into_iter().map(|g| Group { degree: g.degree, members: g.members }).collect();
        alloc::push(&mut steps, step, "the plan's steps")?;
    }
    Ok(steps)
}

/// Sequence `item` as the rules place it: open a group of its degree while ranks are free, else
/// join the least-loaded group of its degree with room (the first opened on a tie), else wait
/// (`false`). `track` keeps every group's tokens for [`Degree::least_tokens`].
fn place(
    problem: &Problem,
    degree: &[usize],
    item: u32,
    free: &mut u32,
    groups: &mut Vec<Open>,
    pools: &mut [Degree],
    track: bool,
) -> Result<bool> {
    let i = item as usize;
    let j = degree[i];
    let c = problem.degrees[j];
    let share = problem.share(i, j);
    let load = problem.height(i, j);
    let g = if *free >= c {
        let mut members = Vec::new();
        alloc::push(&mut members, item, "a group's indexes")?;
        alloc::push(groups, Open { degree: j, tokens: share, load, members }, "a step's groups")?;
        *free -= c;
        pools[j].add(groups.len() - 1, groups)?;
        groups.len() - 1
    } else {
        let best = match problem.cap.checked_sub(share) {
            Some(room) => pools[j].best(room, groups)?,
            None => None,
        };
        let Some(b) = best else {
            return Ok(false);
        };
        let group = &mut groups[b];
        group.tokens += share;
        group.load += load;
        alloc::push(&mut group.members, item, "a group's indexes")?;
        pools[j].grew(b, groups);
        b
    };
    if track {
        pools[j].track(g, groups)?;
    }
    Ok(true)
}

/// Reading b's idle ranks. "The first group of the smallest degree moves up", round after round,
/// is every group of the smallest degree in order, then every group (the moved ones among them)
/// of the next degree, and so on, until a move needs more ranks than are free: one pass per
/// degree instead of a scan of the step's groups per move.
fn widen(problem: &Problem, groups: &mut [Open], mut free: u32, interrupt: &Interrupt) -> Result<()> {
    for j in 0..problem.k() - 1 {
        interrupt.check()?;
        let extra = problem.degrees[j + 1] - problem.degrees[j];
        for group in groups.iter_mut().filter(|g| g.degree == j) {
            if extra > free {
                return Ok(());
            }
            free -= extra;
            group.degree = j + 1;
        }
    }
    Ok(())
}

/// Reading 2 (every waiting sequence tried in every step) without visiting every waiting
/// sequence in every step: the plan of the loop the rules describe (the tests compare), found as
/// the search finds its own. Once no waiting sequence can open a group (ranks only get taken),
/// each degree's sequences only join groups of that degree, so the degrees go one after the
/// other; a sequence joins some group exactly when the group with the fewest tokens has room for
/// it, and shares fall along the order (longest first), so those too long are skipped by a
/// binary search. Positions still waiting are found through links that skip placed ones.
fn greedy_waiting(
    problem: &Problem,
    reading: Reading,
    degree: &[usize],
    order: &[u32],
    interrupt: &Interrupt,
) -> Result<Steps> {
    let (n, k) = (order.len(), problem.k());
    // Per degree, its positions in `order`, one degree after another with one end marker each:
    // degree j holds [start[j], start[j + 1] - 1).
    let mut count = vec![0usize; k];
    order.iter().for_each(|&i| count[degree[i as usize]] += 1);
    let mut start = vec![0usize; k + 1];
    for j in 0..k {
        start[j + 1] = start[j] + count[j] + 1;
    }
    let mut by_degree: Vec<u32> = alloc::filled(n + k, u32::MAX, "the greedy's order by degree")?;
    let mut slot: Vec<u32> = alloc::filled(n, 0, "the greedy's order by degree")?;
    let mut fill = start.clone();
    for (position, &i) in order.iter().enumerate() {
        let j = degree[i as usize];
        slot[position] = fill[j] as u32;
        by_degree[fill[j]] = position as u32;
        fill[j] += 1;
    }
    let mut next_global: Vec<u32> = alloc::collect(0..n as u32 + 1, "the greedy's waiting links")?;
    let mut next_in_degree: Vec<u32> = alloc::collect(0..(n + k) as u32, "the greedy's waiting links")?;
    let mut waiting = count.clone();
    let mut left = n;
    let mut steps: Steps = Vec::new();
    let mut tick = 0usize;
    let mut pools: Vec<Degree> = (0..k).map(|_| Degree::default()).collect();
    // Position `p` placed: the links skip it, and its degree has one fewer waiting.
    macro_rules! remove {
        ($p:expr) => {{
            let p: usize = $p;
            next_global[p] = p as u32 + 1;
            let s = slot[p] as usize;
            next_in_degree[s] = s as u32 + 1;
            waiting[degree[order[p] as usize]] -= 1;
            left -= 1;
        }};
    }
    while left > 0 {
        let mut free = problem.world_size;
        let mut groups: Vec<Open> = Vec::new();
        pools.iter_mut().for_each(Degree::clear);
        // Every sequence in order while one could still open a group.
        let mut position = next_waiting(&mut next_global, 0);
        while position < n && (0..k).find(|&j| waiting[j] > 0).is_some_and(|j| free >= problem.degrees[j]) {
            tick += 1;
            interrupt.every(tick)?;
            if place(problem, degree, order[position], &mut free, &mut groups, &mut pools, true)? {
                remove!(position);
            }
            position = next_waiting(&mut next_global, position + 1);
        }
        // Then each degree on its own: only joins remain.
        for j in 0..k {
            let end = start[j + 1] - 1;
            let mut at = start[j] + by_degree[start[j]..end].partition_point(|&p| (p as usize) < position);
            let share = |p: u32| problem.share(order[p as usize] as usize, j);
            loop {
                at = next_waiting(&mut next_in_degree, at);
                let Some(least) = pools[j].least_tokens(&groups).filter(|_| at < end) else {
                    break;
                };
                // A sequence joins some group exactly when the one with the fewest tokens has room.
                let room = problem.cap - least;
                tick += 1;
                interrupt.every(tick)?;
                if share(by_degree[at]) > room {
                    at += by_degree[at..end].partition_point(|&p| share(p) > room);
                    continue;
                }
                let candidate = by_degree[at] as usize;
                if place(problem, degree, order[candidate], &mut free, &mut groups, &mut pools, true)? {
                    remove!(candidate);
                }
                at += 1;
            }
        }
        if reading.widens {
            widen(problem, &mut groups, free, interrupt)?;
        }
        let step = groups.into_iter().map(|g| Group { degree: g.degree, members: g.members }).collect();
        alloc::push(&mut steps, step, "the plan's steps")?;
    }
    Ok(steps)
}

/// [`greedy`] with the group to join found by a scan of the step's groups (the oracle the tests
/// compare the heaps with).
#[cfg(test)]
fn greedy_plain(problem: &Problem, reading: Reading, interrupt: &Interrupt) -> Result<Steps> {
    let n = problem.lengths.len();
    let mut degree = alloc::with_capacity(n, "the greedy's degrees")?;
    for i in 0..n {
        degree.push(problem.smallest_fit(i)?);
    }
    let mut pending: Vec<u32> = alloc::collect(0..n as u32, "the greedy's order")?;
    pending.sort_by(|&a, &b| problem.lengths[b as usize].cmp(&problem.lengths[a as usize]).then(a.cmp(&b)));
    let mut waiting: Vec<u32> = alloc::with_capacity(n, "the greedy's waiting sequences")?;
    let mut steps: Steps = Vec::new();
    let mut tick = 0usize;
    while !pending.is_empty() {
        let mut free = problem.world_size;
        let mut groups: Vec<Open> = Vec::new();
        let mut closed = false;
        for &item in &pending {
            tick += 1;
            interrupt.every(tick)?;
            let i = item as usize;
            if closed {
                waiting.push(item);
                continue;
            }
            let j = degree[i];
            let c = problem.degrees[j];
            let share = problem.share(i, j);
            let load = problem.height(i, j);
            if free >= c {
                let mut members = Vec::new();
                alloc::push(&mut members, item, "a group's indexes")?;
                alloc::push(
                    &mut groups,
                    Open { degree: j, tokens: share, load, members },
                    "a step's groups",
                )?;
                free -= c;
                continue;
            }
            let mut best: Option<usize> = None;
            for (g, group) in groups.iter().enumerate() {
                if group.degree == j
                    && group.tokens.checked_add(share).is_some_and(|t| t <= problem.cap)
                    && best.is_none_or(|b| group.load < groups[b].load)
                {
                    best = Some(g);
                }
            }
            if let Some(b) = best {
                let group = &mut groups[b];
                group.tokens += share;
                group.load += load;
                alloc::push(&mut group.members, item, "a group's indexes")?;
                continue;
            }
            waiting.push(item);
            closed = !reading.waits;
        }
        if reading.widens {
            // "The first group of the smallest degree moves up", round after round, is every
            // group of the smallest degree in order, then every group (the moved ones among them)
            // of the next degree, and so on, until a move needs more ranks than are free: one
            // pass per degree instead of a scan of the step's groups per move.
            'widen: for j in 0..problem.k() - 1 {
                interrupt.check()?;
                let extra = problem.degrees[j + 1] - problem.degrees[j];
                for group in groups.iter_mut().filter(|g| g.degree == j) {
                    if extra > free {
                        break 'widen;
                    }
                    free -= extra;
                    group.degree = j + 1;
                }
            }
        }
        let step = groups.into_iter().map(|g| Group { degree: g.degree, members: g.members }).collect();
        alloc::push(&mut steps, step, "the plan's steps")?;
        std::mem::swap(&mut pending, &mut waiting);
        waiting.clear();
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_heaps_join_the_group_the_scan_joins(
            shape in (prop::sample::select(vec![1u32, 2, 4, 8, 16, 64]), 1u64..60, 0usize..200),
            seed in any::<u64>(),
            quadratic in 0.0f64..0.05,
            kappa in 0.0f64..1.0,
            scrambled in any::<bool>(),
        ) {
            let (world_size, cap, n) = shape;
            // Costs that follow the length, or not (then loads and tokens disagree on the order).
            let owned = crate::cp::tests::Owned::drawn(
                world_size, cap, n, seed, quadratic, kappa, scrambled.then_some(13), None,
            );
            let problem = owned.problem();
            for reading in READINGS {
                let fast = greedy(&problem, reading, &Interrupt::NEVER).unwrap();
                let plain = greedy_plain(&problem, reading, &Interrupt::NEVER).unwrap();
                prop_assert_eq!(fast, plain);
            }
        }
    }
}
