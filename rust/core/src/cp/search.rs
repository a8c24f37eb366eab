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
use super::pool::{Degree, Open, Slowest};
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

/// What spending free ranks on a group can do for it.
enum Move {
    /// Two halves of the group's sequences, each on `cp_size` ranks of its own.
    Split(Open, Open),
    /// The group on the next allowed degree, at this load.
    Widen(f64),
    /// Nothing makes it faster.
    Stay,
}

/// The faster of splitting `group` in two halves (heaviest first, each to the lighter half) and
/// widening it to the next degree, with `free` ranks to spend; [`Move::Stay`] when neither beats
/// its load (a split wins ties).
fn faster(problem: &Problem, group: &Open, free: u32) -> Move {
    let (j, c) = (group.degree, problem.degrees[group.degree]);
    let mut split: Option<(f64, Open, Open)> = None;
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
        split = Some((first.load.max(second.load), first, second));
    }
    let widened = (j + 1 < problem.k() && free >= problem.degrees[j + 1] - c)
        .then(|| group_time(problem, &Group { degree: j + 1, members: group.members.clone() }));
    match (split, widened) {
        (Some((time, first, second)), widen) if time < group.load && widen.is_none_or(|w| time <= w) => {
            Move::Split(first, second)
        }
        (_, Some(widen)) if widen < group.load => Move::Widen(widen),
        _ => Move::Stay,
    }
}

/// Spend a step's free ranks on its slowest group while that makes the group faster. The
/// slowest group comes from a heap (a step holds thousands of groups where ranks are many); the
/// rounds (up to one per free rank) ask about Ctrl-C.
fn use_idle_ranks(
    problem: &Problem,
    groups: &mut Vec<Open>,
    mut free: u32,
    interrupt: &Interrupt,
) -> Result<()> {
    let mut slowest_first = Slowest::new(groups)?;
    for round in 0usize.. {
        interrupt.every(round)?;
        let Some(slowest) = slowest_first.peek() else {
            return Ok(());
        };
        let c = problem.degrees[groups[slowest].degree];
        match faster(problem, &groups[slowest], free) {
            Move::Split(first, second) => {
                groups[slowest] = first;
                alloc::push(groups, second, "a step's groups")?;
                free -= c;
                slowest_first.pop();
                slowest_first.push(slowest, groups)?;
                slowest_first.push(groups.len() - 1, groups)?;
            }
            Move::Widen(widen) => {
                let group = &mut groups[slowest];
                let j = group.degree;
                free -= problem.degrees[j + 1] - c;
                group.degree = j + 1;
                group.load = widen;
                group.tokens = group.members.iter().map(|&i| problem.share(i as usize, j + 1)).sum();
                slowest_first.pop();
                slowest_first.push(slowest, groups)?;
            }
            Move::Stay => return Ok(()),
        }
    }
    Ok(())
}

/// Next position at or after `x` that is still waiting (`next[x] == x`), halving paths as it goes.
pub(super) fn next_waiting(next: &mut [u32], mut x: usize) -> usize {
    while next[x] as usize != x {
        let up = next[next[x] as usize];
        next[x] = up;
        x = up as usize;
    }
    x
}

/// The plan for one target, or `None` once its steps add up to `limit` or more.
///
/// The same plan as the rules read (each step visits the waiting sequences in order: open, join
/// or wait), found without visiting every waiting sequence in every step: once no sequence left
/// can open a group, each degree's sequences only join groups of that degree, and those too tall
/// for the least-loaded group of their degree (heights fall along the order) are skipped by a
/// binary search. Positions still waiting are found through `next` links that skip placed ones.
fn plan_for(
    problem: &Problem,
    tau: f64,
    least: usize,
    limit: f64,
    interrupt: &Interrupt,
) -> Result<Option<(Steps, f64)>> {
    let items = items(problem, tau, least, interrupt)?;
    let n = items.len();
    let k = problem.k();
    // Per degree, its sequences' positions in `items` (in order), laid out one degree after
    // another with one end marker each: degree j holds [start[j], start[j + 1] - 1).
    let mut count = vec![0usize; k];
    items.iter().for_each(|item| count[item.degree] += 1);
    let mut start = vec![0usize; k + 1];
    for j in 0..k {
        start[j + 1] = start[j] + count[j] + 1;
    }
    let mut by_degree: Vec<u32> = alloc::filled(n + k, u32::MAX, "the planner's order by degree")?;
    let mut slot: Vec<u32> = alloc::filled(n, 0, "the planner's order by degree")?;
    let mut fill = start.clone();
    for (position, item) in items.iter().enumerate() {
        slot[position] = fill[item.degree] as u32;
        by_degree[fill[item.degree]] = position as u32;
        fill[item.degree] += 1;
    }
    // Per degree, whether shares fall along the order as heights do (any cost that grows with
    // the length): then a binary search skips sequences too long for every group's tokens too.
    let falling_shares: Vec<bool> = (0..k)
        .map(|j| {
            by_degree[start[j]..start[j + 1] - 1]
                .windows(2)
                .all(|pair| items[pair[0] as usize].share >= items[pair[1] as usize].share)
        })
        .collect();
    let mut next_global: Vec<u32> = alloc::collect(0..n as u32 + 1, "the planner's waiting links")?;
    let mut next_in_degree: Vec<u32> = alloc::collect(0..(n + k) as u32, "the planner's waiting links")?;
    let mut waiting = count.clone();
    let mut left = n;
    let mut steps: Steps = Vec::new();
    let mut total = 0.0;
    let mut tick = 0usize;
    // Per degree, the step's groups by load among those with room, and by load and tokens.
    let mut pools: Vec<Degree> = (0..k).map(|_| Degree::default()).collect();
    let mut opened = vec![0usize; k];
    let mut least_load = vec![f64::INFINITY; k];
    let mut least_tokens = vec![u64::MAX; k];
    while left > 0 {
        let mut free = problem.world_size;
        let mut groups: Vec<Open> = Vec::new();
        pools.iter_mut().for_each(Degree::clear);
        opened.iter_mut().for_each(|count| *count = 0);
        least_load.iter_mut().for_each(|v| *v = f64::INFINITY);
        least_tokens.iter_mut().for_each(|v| *v = u64::MAX);
        // One sequence: open a group, join one, or wait (false).
        let place = |position: usize,
                     free: &mut u32,
                     groups: &mut Vec<Open>,
                     pools: &mut [Degree],
                     opened: &mut [usize],
                     least_load: &mut [f64],
                     least_tokens: &mut [u64]|
         -> Result<bool> {
            let item = &items[position];
            let (j, c) = (item.degree, problem.degrees[item.degree]);
            if *free < c
                && (least_load[j] + item.height > tau
                    || least_tokens[j].saturating_add(item.share) > problem.cap)
            {
                return Ok(false);
            }
            // The least-loaded group of degree j with room for the tokens (the first opened on a
            // tie), if it stays within the target (then it is the scan's answer: loads at least
            // as large stay within it no sooner).
            let best = match problem.cap.checked_sub(item.share) {
                Some(room) => pools[j].best(room, groups)?,
                None => None,
            }
            .filter(|&b| groups[b].load + item.height <= tau);
            if *free >= c && best.is_none_or(|b| groups[b].load > 0.0) {
                *free -= c;
                let members = vec![item.index];
                alloc::push(
                    groups,
                    Open { degree: j, tokens: item.share, load: item.height, members },
                    "a step's groups",
                )?;
                pools[j].add(groups.len() - 1, groups)?;
                pools[j].track(groups.len() - 1, groups)?;
                opened[j] += 1;
                least_load[j] = least_load[j].min(item.height);
                least_tokens[j] = least_tokens[j].min(item.share);
            } else if let Some(b) = best {
                let group = &mut groups[b];
                group.load += item.height;
                group.tokens += item.share;
                alloc::push(&mut group.members, item.index, "a group's indexes")?;
                pools[j].grew(b, groups);
                pools[j].track(b, groups)?;
                least_load[j] = pools[j].least_load(groups);
                least_tokens[j] = pools[j].least_tokens(groups).unwrap_or(u64::MAX);
            } else {
                return Ok(false);
            }
            Ok(true)
        };
        let remove = |position: usize,
                      next_global: &mut [u32],
                      next_in_degree: &mut [u32],
                      waiting: &mut [usize],
                      left: &mut usize| {
            next_global[position] = position as u32 + 1;
            let s = slot[position] as usize;
            next_in_degree[s] = s as u32 + 1;
            waiting[items[position].degree] -= 1;
            *left -= 1;
        };
        // Every sequence in order while one could still open a group.
        let can_open = |free: u32, waiting: &[usize]| {
            (0..k).find(|&j| waiting[j] > 0).is_some_and(|j| free >= problem.degrees[j])
        };
        let mut position = next_waiting(&mut next_global, 0);
        while position < n && can_open(free, &waiting) {
            tick += 1;
            interrupt.every(tick)?;
            if place(
                position,
                &mut free,
                &mut groups,
                &mut pools,
                &mut opened,
                &mut least_load,
                &mut least_tokens,
            )? {
                remove(position, &mut next_global, &mut next_in_degree, &mut waiting, &mut left);
            }
            position = next_waiting(&mut next_global, position + 1);
        }
        // Then each degree on its own: only joins remain.
        for j in 0..k {
            let end = start[j + 1] - 1;
            let mut at = start[j] + by_degree[start[j]..end].partition_point(|&p| (p as usize) < position);
            while opened[j] > 0 {
                at = next_waiting(&mut next_in_degree, at);
                if at >= end {
                    break;
                }
                tick += 1;
                interrupt.every(tick)?;
                let (room, tokens_room) = (tau - least_load[j], problem.cap.saturating_sub(least_tokens[j]));
                let fails = |p: u32| {
                    let item = &items[p as usize];
                    item.height > room || (falling_shares[j] && item.share > tokens_room)
                };
                if fails(by_degree[at]) {
                    // Heights (and, where they fall too, shares) fall along the order: skip to
                    // the first that fits the least-loaded (and the least-filled) group.
                    at += by_degree[at..end].partition_point(|&p| fails(p));
                    continue;
                }
                let candidate = by_degree[at] as usize;
                if place(
                    candidate,
                    &mut free,
                    &mut groups,
                    &mut pools,
                    &mut opened,
                    &mut least_load,
                    &mut least_tokens,
                )? {
                    remove(candidate, &mut next_global, &mut next_in_degree, &mut waiting, &mut left);
                }
                at += 1;
            }
        }
        use_idle_ranks(problem, &mut groups, free, interrupt)?;
        let step: Vec<Group> =
            groups.into_iter().map(|g| Group { degree: g.degree, members: g.members }).collect();
        total += step.iter().map(|g| group_time(problem, g)).fold(0.0, f64::max);
        alloc::push(&mut steps, step, "the plan's steps")?;
        if total >= limit {
            return Ok(None);
        }
    }
    Ok(Some((steps, total)))
}

/// [`use_idle_ranks`] with the slowest group found by a scan of the step's groups each round (the
/// oracle the tests compare the heap with).
#[cfg(test)]
fn use_idle_ranks_plain(
    problem: &Problem,
    groups: &mut Vec<Open>,
    mut free: u32,
    interrupt: &Interrupt,
) -> Result<()> {
    loop {
        interrupt.check()?;
        let Some(slowest) =
            (0..groups.len()).reduce(|a, b| if groups[b].load > groups[a].load { b } else { a })
        else {
            return Ok(());
        };
        let c = problem.degrees[groups[slowest].degree];
        match faster(problem, &groups[slowest], free) {
            Move::Split(first, second) => {
                groups[slowest] = first;
                alloc::push(groups, second, "a step's groups")?;
                free -= c;
            }
            Move::Widen(widen) => {
                let group = &mut groups[slowest];
                let j = group.degree;
                free -= problem.degrees[j + 1] - c;
                group.degree = j + 1;
                group.load = widen;
                group.tokens = group.members.iter().map(|&i| problem.share(i as usize, j + 1)).sum();
            }
            Move::Stay => return Ok(()),
        }
    }
}

/// [`plan_for`] as the rules read: every waiting sequence visited in every step (the oracle the
/// tests compare the fast version with).
#[cfg(test)]
fn plan_for_plain(
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
                    && group.tokens.checked_add(item.share).is_some_and(|t| t <= problem.cap)
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
        use_idle_ranks_plain(problem, &mut groups, free, interrupt)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spending_idle_ranks_asks_about_ctrl_c() {
        // One group of three sequences on one of eight ranks: splitting or widening it helps.
        let (lengths, costs, comm) = (vec![4u64, 4, 4], vec![4.0; 3], vec![0.0; 12]);
        let degrees = [1u32, 2, 4, 8];
        let problem = Problem {
            lengths: &lengths,
            costs: &costs,
            comm: &comm,
            degrees: &degrees,
            world_size: 8,
            cap: 64,
        };
        let group = || vec![Open { degree: 0, tokens: 12, load: 12.0, members: vec![0, 1, 2] }];
        let mut groups = group();
        use_idle_ranks(&problem, &mut groups, 7, &Interrupt::NEVER).unwrap();
        assert!(groups.len() > 1 || groups[0].degree > 0);
        let stop = || true;
        let error = use_idle_ranks(&problem, &mut group(), 7, &Interrupt::new(&stop)).unwrap_err();
        assert_eq!(error, crate::cp::CpError::Core(crate::error::CoreError::Interrupted));
    }

    proptest! {
        #[test]
        fn the_fast_plan_is_the_plan_of_the_rules(
            shape in (prop::sample::select(vec![1u32, 2, 4, 8, 12, 64]), 1u64..120, 0usize..160),
            seed in any::<u64>(),
            quadratic in 0.0f64..0.05,
            kappa in 0.0f64..1.0,
            tau_share in 0.0f64..1.2,
            least in 0usize..4,
            scrambled in any::<bool>(),
        ) {
            let (world_size, cap, n) = shape;
            let degrees: Vec<u32> = (0..8).map(|p| 1u32 << p).take_while(|&c| world_size % c == 0).collect();
            let top = *degrees.last().unwrap() as u64 * cap;
            let lengths = crate::cp::tests::mostly_short(seed, n, cap, top);
            // A cost that does not grow with the length (shares then do not fall along the order).
            let costs: Vec<f64> = lengths
                .iter()
                .enumerate()
                .map(|(i, &l)| if scrambled { ((i * 7919) % 97) as f64 * 3.0 } else { l as f64 + quadratic * (l as f64).powi(2) })
                .collect();
            let comm: Vec<f64> = lengths
                .iter()
                .flat_map(|&l| degrees.iter().map(move |&c| kappa * l as f64 * (c - 1) as f64 / c as f64))
                .collect();
            let problem = Problem { lengths: &lengths, costs: &costs, comm: &comm, degrees: &degrees, world_size, cap };
            let (lowest, highest) = target_range(&problem);
            let tau = lowest + tau_share * (highest - lowest);
            let least = least.min(degrees.len() - 1);
            let fast = plan_for(&problem, tau, least, f64::INFINITY, &Interrupt::NEVER).unwrap();
            let plain = plan_for_plain(&problem, tau, least, f64::INFINITY, &Interrupt::NEVER).unwrap();
            prop_assert_eq!(fast, plain);
        }
    }
}
