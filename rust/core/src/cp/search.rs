//! seqbalance's search: for a target step time `τ`, a degree per sequence, balanced steps, and
//! the idle ranks of each step spent on its slowest group; over a range of targets, the fastest.
//!
//! * Degree: among the degrees at which the sequence fits the cap and takes at most `τ` on each
//!   rank, the one that occupies the least rank-time `cost + c · comm(L, c)` (the smaller degree on
//!   a tie); when none takes at most `τ`, the degree that takes the least time.
//! * Steps: sequences by time descending (ties by index). Within a step a sequence opens a group
//!   of its degree while ranks are free, unless a group of its degree is still empty of time;
//!   else it joins the least-loaded group of its degree that stays within `τ` and the cap; else
//!   it waits for the next step.
//! * Idle ranks: while a step has free ranks, its slowest group is split in two (largest time
//!   first into the lighter half) or widened to the next degree, whichever makes it faster, as
//!   long as one does.
//! * Wider floors: the same with every sequence at least at each wider degree, on a coarser
//!   grid (one wide group balances a step by itself when communication is cheap).
//! * Targets: from the slowest single sequence at its fastest degree up to the most a group
//!   within the cap can take, on a geometric grid, then finer around the best. A target whose
//!   steps already add up past the best plan so far stops early.
use super::{group_time, Group, Problem, Result, Steps};
use crate::alloc;
use crate::interrupt::Interrupt;

/// Points of the coarse grid of targets (and the finer points tried around the best).
const GRID: usize = 16;
const FINE: usize = 6;

struct Item {
    index: u32,
    degree: usize,
    height: f64,
    share: u64,
}

struct Open {
    degree: usize,
    tokens: u64,
    load: f64,
    members: Vec<u32>,
}

/// The range of useful targets: `(lowest, highest)`.
fn target_range(problem: &Problem) -> (f64, f64) {
    let mut lowest: f64 = 0.0;
    let mut highest: f64 = 0.0;
    for i in 0..problem.lengths.len() {
        let mut fastest = f64::INFINITY;
        for j in 0..problem.k() {
            if !problem.fits(i, j) {
                continue;
            }
            let height = problem.height(i, j);
            fastest = fastest.min(height);
            let share = problem.share(i, j);
            if share > 0 {
                // A group within the cap holds at most cap / share such sequences.
                highest = highest.max(height * (problem.cap as f64 / share as f64));
            } else {
                highest = highest.max(height);
            }
        }
        lowest = lowest.max(fastest);
    }
    (lowest, highest.max(lowest))
}

/// The degree of every sequence for the target `tau` (at least the degree index `least` where the
/// sequence fits there), sorted by time descending.
fn items(problem: &Problem, tau: f64, least: usize, interrupt: &Interrupt) -> Result<Vec<Item>> {
    let n = problem.lengths.len();
    let mut items = alloc::with_capacity(n, "the planner's sequences")?;
    for i in 0..n {
        interrupt.every(i)?;
        let mut within: Option<(f64, usize)> = None;
        let mut fastest: Option<(f64, usize)> = None;
        let first =
            (0..problem.k()).find(|&j| problem.fits(i, j)).unwrap_or(0).max(least.min(problem.k() - 1));
        for j in first..problem.k() {
            if !problem.fits(i, j) {
                continue;
            }
            let height = problem.height(i, j);
            let rank_time = problem.costs[i] + problem.degrees[j] as f64 * problem.comm[i * problem.k() + j];
            if height <= tau && within.is_none_or(|(r, _)| rank_time < r) {
                within = Some((rank_time, j));
            }
            if fastest.is_none_or(|(h, _)| height < h) {
                fastest = Some((height, j));
            }
        }
        let j = within.or(fastest).map_or(0, |(_, j)| j);
        items.push(Item {
            index: i as u32,
            degree: j,
            height: problem.height(i, j),
            share: problem.share(i, j),
        });
    }
    items.sort_by(|a, b| b.height.total_cmp(&a.height).then(a.index.cmp(&b.index)));
    Ok(items)
}

/// Spend a step's free ranks on its slowest group while that makes the group faster.
fn use_idle_ranks(problem: &Problem, groups: &mut Vec<Open>, mut free: u32) -> Result<()> {
    loop {
        let Some(slowest) =
            (0..groups.len()).reduce(|a, b| if groups[b].load > groups[a].load { b } else { a })
        else {
            return Ok(());
        };
        let group = &groups[slowest];
        let (j, c) = (group.degree, problem.degrees[group.degree]);
        let mut best_split: Option<(f64, Open, Open)> = None;
        if free >= c && group.members.len() > 1 {
            let mut order = group.members.clone();
            order.sort_by(|&a, &b| {
                problem.height(b as usize, j).total_cmp(&problem.height(a as usize, j)).then(a.cmp(&b))
            });
            let mut halves = [
                Open { degree: j, tokens: 0, load: 0.0, members: Vec::new() },
                Open { degree: j, tokens: 0, load: 0.0, members: Vec::new() },
            ];
            for i in order {
                let half = if halves[0].load <= halves[1].load { 0 } else { 1 };
                halves[half].load += problem.height(i as usize, j);
                halves[half].tokens += problem.share(i as usize, j);
                halves[half].members.push(i);
            }
            let [first, second] = halves;
            best_split = Some((first.load.max(second.load), first, second));
        }
        let widened = (j + 1 < problem.k() && free >= problem.degrees[j + 1] - c)
            .then(|| group_time(problem, &Group { degree: j + 1, members: group.members.clone() }));
        let current = group.load;
        match (best_split, widened) {
            (Some((split, first, second)), widen) if split < current && widen.is_none_or(|w| split <= w) => {
                groups[slowest] = first;
                alloc::push(groups, second, "a step's groups")?;
                free -= c;
            }
            (_, Some(widen)) if widen < current => {
                let group = &mut groups[slowest];
                free -= problem.degrees[j + 1] - c;
                group.degree = j + 1;
                group.load = widen;
                group.tokens = group.members.iter().map(|&i| problem.share(i as usize, j + 1)).sum();
            }
            _ => return Ok(()),
        }
    }
}

/// The plan for one target, or `None` once its steps add up to `limit` or more.
fn plan_for(
    problem: &Problem,
    tau: f64,
    least: usize,
    limit: f64,
    interrupt: &Interrupt,
) -> Result<Option<(Steps, f64)>> {
    let mut pending = items(problem, tau, least, interrupt)?;
    let mut waiting: Vec<Item> = alloc::with_capacity(pending.len(), "the planner's waiting sequences")?;
    let mut steps: Steps = Vec::new();
    let mut total = 0.0;
    let mut tick = 0usize;
    // Per degree, the step's groups of that degree (positions in `groups`).
    let mut of_degree: Vec<Vec<usize>> = vec![Vec::new(); problem.k()];
    // Per degree, the least load and the fewest tokens among the step's groups: a sequence
    // that fits neither with waits without a scan of the groups (most do, once a step is full).
    let mut least_load = vec![f64::INFINITY; problem.k()];
    let mut least_tokens = vec![u64::MAX; problem.k()];
    while !pending.is_empty() {
        let mut free = problem.world_size;
        let mut groups: Vec<Open> = Vec::new();
        of_degree.iter_mut().for_each(Vec::clear);
        least_load.iter_mut().for_each(|v| *v = f64::INFINITY);
        least_tokens.iter_mut().for_each(|v| *v = u64::MAX);
        for item in pending.drain(..) {
            tick += 1;
            interrupt.every(tick)?;
            let (j, c) = (item.degree, problem.degrees[item.degree]);
            if free < c
                && (least_load[j] + item.height > tau
                    || least_tokens[j].saturating_add(item.share) > problem.cap)
            {
                waiting.push(item);
                continue;
            }
            let mut best: Option<usize> = None;
            for &g in &of_degree[j] {
                let group = &groups[g];
                if group.load + item.height <= tau
                    && group.tokens + item.share <= problem.cap
                    && best.is_none_or(|b| group.load < groups[b].load)
                {
                    best = Some(g);
                }
            }
            if free >= c && best.is_none_or(|b| groups[b].load > 0.0) {
                free -= c;
                alloc::push(&mut of_degree[j], groups.len(), "a step's groups")?;
                let members = vec![item.index];
                alloc::push(
                    &mut groups,
                    Open { degree: j, tokens: item.share, load: item.height, members },
                    "a step's groups",
                )?;
                least_load[j] = least_load[j].min(item.height);
                least_tokens[j] = least_tokens[j].min(item.share);
            } else if let Some(b) = best {
                let group = &mut groups[b];
                group.load += item.height;
                group.tokens += item.share;
                alloc::push(&mut group.members, item.index, "a group's indexes")?;
                least_load[j] = of_degree[j].iter().map(|&g| groups[g].load).fold(f64::INFINITY, f64::min);
                least_tokens[j] = of_degree[j].iter().map(|&g| groups[g].tokens).min().unwrap_or(u64::MAX);
            } else {
                waiting.push(item);
            }
        }
        use_idle_ranks(problem, &mut groups, free)?;
        let step: Vec<Group> =
            groups.into_iter().map(|g| Group { degree: g.degree, members: g.members }).collect();
        total += step.iter().map(|g| group_time(problem, g)).fold(0.0, f64::max);
        alloc::push(&mut steps, step, "the plan's steps")?;
        if total >= limit {
            return Ok(None);
        }
        std::mem::swap(&mut pending, &mut waiting);
    }
    Ok(Some((steps, total)))
}

/// The fastest plan the search finds that is faster than `limit`, or `None`.
pub fn search(problem: &Problem, limit: f64, interrupt: &Interrupt) -> Result<Option<Steps>> {
    if problem.lengths.is_empty() {
        return Ok(None);
    }
    let (lowest, highest) = target_range(problem);
    let mut best: Option<(Steps, f64)> = None;
    let mut bound = limit;
    let try_target =
        |tau: f64, least: usize, best: &mut Option<(Steps, f64)>, bound: &mut f64| -> Result<bool> {
            if let Some((steps, time)) = plan_for(problem, tau, least, *bound, interrupt)? {
                if time < *bound {
                    *bound = time;
                    *best = Some((steps, time));
                    return Ok(true);
                }
            }
            Ok(false)
        };
    if highest <= 0.0 {
        try_target(0.0, 0, &mut best, &mut bound)?;
        return Ok(best.map(|(steps, _)| steps));
    }
    let lowest = if lowest > 0.0 { lowest } else { highest / (1u64 << 20) as f64 };
    let ratio = highest / lowest;
    let at = |position: f64| lowest * ratio.powf(position / GRID as f64);
    let mut best_position = 0.0;
    for k in 0..=GRID {
        if try_target(at(k as f64), 0, &mut best, &mut bound)? {
            best_position = k as f64;
        }
    }
    if ratio > 1.0 {
        let centre = best_position;
        for f in 1..=FINE / 2 {
            let offset = f as f64 / (FINE / 2 + 1) as f64;
            for position in [centre - offset, centre + offset] {
                if (0.0..=GRID as f64).contains(&position) {
                    try_target(at(position), 0, &mut best, &mut bound)?;
                }
            }
        }
    }
    // Every sequence at least at a wider degree: one wide group balances a step by itself, which
    // beats mixed degrees when communication is cheap (few ranks, fast links).
    for least in 1..problem.k() {
        for k in (0..=GRID).step_by(GRID / 4) {
            try_target(at(k as f64), least, &mut best, &mut bound)?;
        }
    }
    Ok(best.map(|(steps, _)| steps))
}
