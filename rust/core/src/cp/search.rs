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
use super::pool::{key, Degree, Open, Slowest};
use super::skip::{Least, MinTree, Stairs};
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
    items.sort_unstable_by(|a, b| b.height.total_cmp(&a.height).then(a.index.cmp(&b.index)));
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
/// (when `widen`) widening it to the next degree, with `free` ranks to spend; [`Move::Stay`]
/// when neither beats its load (a split wins ties).
fn faster(problem: &Problem, group: &Open, free: u32, widen: bool) -> Move {
    let (j, c) = (group.degree, problem.degrees[group.degree]);
    let mut split: Option<(f64, Open, Open)> = None;
    if free >= c && group.members.len() > 1 {
        let mut order = group.members.clone();
        order.sort_unstable_by(|&a, &b| {
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
    let widened = (widen && j + 1 < problem.k() && free >= problem.degrees[j + 1] - c)
        .then(|| time_at(problem, &group.members, j + 1));
    match (split, widened) {
        (Some((time, first, second)), widen) if time < group.load && widen.is_none_or(|w| time <= w) => {
            Move::Split(first, second)
        }
        (_, Some(widen)) if widen < group.load => Move::Widen(widen),
        _ => Move::Stay,
    }
}

/// The time of `members` as one group at degree index `j` (summed in member order).
fn time_at(problem: &Problem, members: &[u32], j: usize) -> f64 {
    let mut total = 0.0;
    for &i in members {
        total += problem.height(i as usize, j);
    }
    total
}

/// Spend a step's free ranks on its slowest group while that makes the group faster (with one
/// size per step, only splits, then [`widen_whole_step`]). The slowest group comes from a heap
/// (a step holds thousands of groups where ranks are many); the rounds (up to one per free
/// rank) ask about Ctrl-C.
fn use_idle_ranks(
    problem: &Problem,
    groups: &mut Vec<Open>,
    mut free: u32,
    one_size: bool,
    interrupt: &Interrupt,
) -> Result<()> {
    let mut slowest_first = Slowest::new(groups)?;
    for round in 0usize.. {
        interrupt.every(round)?;
        let Some(slowest) = slowest_first.peek() else {
            break;
        };
        let c = problem.degrees[groups[slowest].degree];
        match faster(problem, &groups[slowest], free, !one_size) {
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
            Move::Stay => break,
        }
    }
    if one_size {
        widen_whole_step(problem, groups, interrupt)?;
    }
    Ok(())
}

/// One size per step: while every group of the step can move up to the next degree together
/// (all of them on the world's ranks) and that makes the step faster, they do.
fn widen_whole_step(problem: &Problem, groups: &mut [Open], interrupt: &Interrupt) -> Result<()> {
    loop {
        interrupt.check()?;
        let Some(j) = groups.first().map(|g| g.degree) else {
            return Ok(());
        };
        if j + 1 >= problem.k()
            || groups.len() as u64 * problem.degrees[j + 1] as u64 > problem.world_size as u64
        {
            return Ok(());
        }
        let now = groups.iter().map(|g| g.load).fold(0.0, f64::max);
        let wider = groups.iter().map(|g| time_at(problem, &g.members, j + 1)).fold(0.0, f64::max);
        if wider >= now {
            return Ok(());
        }
        for group in groups.iter_mut() {
            group.degree = j + 1;
            group.load = time_at(problem, &group.members, j + 1);
            group.tokens = group.members.iter().map(|&i| problem.share(i as usize, j + 1)).sum();
        }
    }
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

/// A step being formed by [`plan_for`]: its groups, and per degree the structures that find
/// the group a sequence joins and the next sequence that can join one.
struct Forming {
    free: u32,
    groups: Vec<Open>,
    /// Per group, its place among the groups of its degree (its slot in `stairs`).
    slot: Vec<u32>,
    /// Per degree: the groups by load among those with room for a sequence's tokens.
    pools: Vec<Degree>,
    /// Per degree: the groups by load, with the fewest tokens of every prefix. Brought up to
    /// date only when a search past a waiting sequence needs them (most steps never do): the
    /// groups changed since are in `changed`.
    stairs: Vec<Stairs>,
    /// Per degree: the groups changed since its stairs were last brought up to date, and per
    /// group whether it is listed there.
    changed: Vec<Vec<u32>>,
    listed: Vec<bool>,
    /// Per degree: how many groups the step holds.
    opened: Vec<u32>,
}

impl Forming {
    fn new(k: usize) -> Forming {
        Forming {
            free: 0,
            groups: Vec::new(),
            slot: Vec::new(),
            pools: (0..k).map(|_| Degree::default()).collect(),
            stairs: (0..k).map(|_| Stairs::default()).collect(),
            changed: vec![Vec::new(); k],
            listed: Vec::new(),
            opened: vec![0; k],
        }
    }

    fn clear(&mut self, world_size: u32) {
        self.free = world_size;
        self.groups = Vec::new();
        self.slot.clear();
        self.pools.iter_mut().for_each(Degree::clear);
        self.stairs.iter_mut().for_each(Stairs::clear);
        self.changed.iter_mut().for_each(Vec::clear);
        self.listed.clear();
        self.opened.iter_mut().for_each(|count| *count = 0);
    }

    /// Group `g` changed: list it for its degree's stairs.
    fn mark(&mut self, g: usize) -> Result<()> {
        if !self.listed[g] {
            self.listed[g] = true;
            alloc::push(&mut self.changed[self.groups[g].degree], g as u32, "a step's groups")?;
        }
        Ok(())
    }

    /// Degree `j`'s stairs, up to date.
    fn stairs(&mut self, j: usize) -> Result<&Stairs> {
        for g in std::mem::take(&mut self.changed[j]) {
            let group = &self.groups[g as usize];
            self.stairs[j].put(self.slot[g as usize], key(group.load), group.tokens)?;
            self.listed[g as usize] = false;
        }
        Ok(&self.stairs[j])
    }

    /// Whether some group of degree `j` takes `item` within the target and the cap (the
    /// least-loaded group with room for its tokens does, if any does).
    fn takes(&mut self, problem: &Problem, item: &Item, tau: f64) -> Result<bool> {
        let j = item.degree;
        let best = match problem.cap.checked_sub(item.share) {
            Some(room) => self.pools[j].best(room, &self.groups)?,
            None => None,
        };
        Ok(best.is_some_and(|b| self.groups[b].load + item.height <= tau))
    }

    /// The rules for one sequence: open a group of its degree while ranks are free (unless a
    /// group of its degree is still empty of time), else join the least-loaded group of its
    /// degree that stays within the target and the cap, else wait (false).
    fn place(&mut self, problem: &Problem, item: &Item, tau: f64) -> Result<bool> {
        let (j, c) = (item.degree, problem.degrees[item.degree]);
        // The least-loaded group of degree j with room for the tokens (the first opened on a
        // tie), if it stays within the target (then it is the scan's answer: loads at least as
        // large stay within it no sooner).
        let best = match problem.cap.checked_sub(item.share) {
            Some(room) => self.pools[j].best(room, &self.groups)?,
            None => None,
        }
        .filter(|&b| self.groups[b].load + item.height <= tau);
        if self.free >= c && best.is_none_or(|b| self.groups[b].load > 0.0) {
            self.free -= c;
            let mut members = Vec::new();
            alloc::push(&mut members, item.index, "a group's indexes")?;
            alloc::push(
                &mut self.groups,
                Open { degree: j, tokens: item.share, load: item.height, members },
                "a step's groups",
            )?;
            alloc::push(&mut self.slot, self.opened[j], "a step's groups")?;
            alloc::push(&mut self.listed, false, "a step's groups")?;
            self.opened[j] += 1;
            self.pools[j].add(self.groups.len() - 1, &self.groups)?;
            self.mark(self.groups.len() - 1)?;
        } else if let Some(b) = best {
            let group = &mut self.groups[b];
            group.load += item.height;
            group.tokens += item.share;
            alloc::push(&mut group.members, item.index, "a group's indexes")?;
            self.pools[j].grew(b, &self.groups);
            self.mark(b)?;
        } else {
            return Ok(false);
        }
        Ok(true)
    }
}

/// The first waiting position in `from..to` of degree `j`'s order that the step can place: any
/// while ranks are free for a group of its degree, else the first that some group of its degree
/// takes within the target and the cap. The next waiting position comes from `links` (most
/// often it is the answer: the pools test it); past it, heights fall along a degree's order, so
/// the groups a position's height leaves room in only grow along it, and so does the fewest
/// tokens among them: the tree tests a node at its last position and is exact there.
#[allow(clippy::too_many_arguments)]
fn next_placeable(
    problem: &Problem,
    items: &[Item],
    by_degree: &[u32],
    shares: &MinTree<u64>,
    links: &mut [u32],
    forming: &mut Forming,
    j: usize,
    from: usize,
    to: usize,
    tau: f64,
) -> Result<Option<usize>> {
    let first = next_waiting(links, from);
    if first >= to {
        return Ok(None);
    }
    if forming.free >= problem.degrees[j] {
        return Ok(Some(first));
    }
    if forming.opened[j] == 0 {
        return Ok(None);
    }
    if forming.takes(problem, &items[by_degree[first] as usize], tau)? {
        return Ok(Some(first));
    }
    let stairs = forming.stairs(j)?;
    let fewest_tokens = |slot: usize| {
        let height = items[by_degree[slot] as usize].height;
        stairs.least_within(|load| f64::from_bits(load) + height <= tau)
    };
    let fits =
        |slot: usize, share: u64| fewest_tokens(slot).checked_add(share).is_some_and(|t| t <= problem.cap);
    // The fewest tokens of any group of the degree, whatever its time: a node whose least share
    // does not fit even that is passed without asking the stairs.
    let fewest = stairs.least_within(|_| true);
    let room = problem.cap.saturating_sub(fewest);
    Ok(shares.first(
        first + 1,
        to,
        &mut |last, least| fewest <= problem.cap && least <= room && fits(last, least),
        &mut |slot, share| fits(slot, share),
    ))
}

/// The plan for one target, or `None` once its steps add up to `limit` or more. With
/// `one_size`, a step takes only sequences of the degree of its first one.
///
/// The same plan as the rules read (each step visits the waiting sequences in order: open, join
/// or wait; the tests compare), found without visiting the sequences that wait: per degree, the
/// next position the step can place comes from [`next_placeable`]; the step places the first of
/// them, then asks again for its degree (and for the degrees that can no longer open a group).
fn plan_for(
    problem: &Problem,
    tau: f64,
    least: usize,
    limit: f64,
    one_size: bool,
    interrupt: &Interrupt,
) -> Result<Option<(Steps, f64)>> {
    let items = items(problem, tau, least, interrupt)?;
    let n = items.len();
    let k = problem.k();
    // Per degree, its sequences' positions in `items` (in order), one degree after another:
    // degree j holds slots start[j]..start[j + 1].
    let mut start = vec![0usize; k + 1];
    items.iter().for_each(|item| start[item.degree + 1] += 1);
    for j in 0..k {
        start[j + 1] += start[j];
    }
    let mut by_degree: Vec<u32> = alloc::filled(n, 0, "the planner's order by degree")?;
    let mut fill = start.clone();
    for (position, item) in items.iter().enumerate() {
        by_degree[fill[item.degree]] = position as u32;
        fill[item.degree] += 1;
    }
    let mut shares =
        MinTree::new(by_degree.iter().map(|&p| items[p as usize].share), "the planner's waiting sequences")?;
    // The next waiting slot at or after each slot (slot n: the end).
    let mut links: Vec<u32> = alloc::collect(0..n as u32 + 1, "the planner's waiting links")?;
    let mut forming = Forming::new(k);
    let mut candidate: Vec<Option<usize>> = vec![None; k];
    let mut left = n;
    let mut steps: Steps = Vec::new();
    let mut total = 0.0;
    let mut tick = 0usize;
    while left > 0 {
        forming.clear(problem.world_size);
        let mut step_degree: Option<usize> = None;
        let next = |forming: &mut Forming,
                    shares: &MinTree<u64>,
                    links: &mut [u32],
                    j: usize,
                    from: usize| {
            next_placeable(problem, &items, &by_degree, shares, links, forming, j, from, start[j + 1], tau)
        };
        for j in 0..k {
            candidate[j] = next(&mut forming, &shares, &mut links, j, start[j])?;
        }
        loop {
            let pick = (0..k)
                .filter(|&j| step_degree.is_none_or(|d| d == j))
                .filter_map(|j| candidate[j].map(|slot| (by_degree[slot], j)))
                .min();
            let Some((position, j)) = pick else {
                break;
            };
            tick += 1;
            interrupt.every(tick)?;
            let slot = candidate[j].unwrap_or(start[j]);
            let before = forming.free;
            if forming.place(problem, &items[position as usize], tau)? {
                shares.set(slot, u64::NONE);
                links[slot] = slot as u32 + 1;
                left -= 1;
                if one_size {
                    step_degree = Some(j);
                }
            }
            candidate[j] = next(&mut forming, &shares, &mut links, j, slot + 1)?;
            // The degrees that can no longer open a group are asked again; the others' answers
            // still hold (their groups did not change).
            for (other, next_slot) in candidate.iter_mut().enumerate() {
                let c = problem.degrees[other];
                if other != j && before >= c && forming.free < c {
                    if let Some(from) = *next_slot {
                        *next_slot = next(&mut forming, &shares, &mut links, other, from)?;
                    }
                }
            }
        }
        let mut groups = std::mem::take(&mut forming.groups);
        use_idle_ranks(problem, &mut groups, forming.free, one_size, interrupt)?;
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
    one_size: bool,
    interrupt: &Interrupt,
) -> Result<()> {
    loop {
        interrupt.check()?;
        let Some(slowest) =
            (0..groups.len()).reduce(|a, b| if groups[b].load > groups[a].load { b } else { a })
        else {
            break;
        };
        let c = problem.degrees[groups[slowest].degree];
        match faster(problem, &groups[slowest], free, !one_size) {
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
            Move::Stay => break,
        }
    }
    if one_size {
        widen_whole_step(problem, groups, interrupt)?;
    }
    Ok(())
}

/// [`plan_for`] as the rules read: every waiting sequence visited in every step (the oracle the
/// tests compare the fast version with).
#[cfg(test)]
fn plan_for_plain(
    problem: &Problem,
    tau: f64,
    least: usize,
    limit: f64,
    one_size: bool,
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
        let mut step_degree: Option<usize> = None;
        for item in pending.drain(..) {
            tick += 1;
            interrupt.every(tick)?;
            let (j, c) = (item.degree, problem.degrees[item.degree]);
            if step_degree.is_some_and(|d| d != j) {
                waiting.push(item);
                continue;
            }
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
                if one_size {
                    step_degree = Some(j);
                }
            } else if let Some(b) = best {
                let group = &mut groups[b];
                group.load += item.height;
                group.tokens += item.share;
                alloc::push(&mut group.members, item.index, "a group's indexes")?;
                least_load[j] = of_degree[j].iter().map(|&g| groups[g].load).fold(f64::INFINITY, f64::min);
                least_tokens[j] = of_degree[j].iter().map(|&g| groups[g].tokens).min().unwrap_or(u64::MAX);
                if one_size {
                    step_degree = Some(j);
                }
            } else {
                waiting.push(item);
            }
        }
        use_idle_ranks_plain(problem, &mut groups, free, one_size, interrupt)?;
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

/// The fastest plan the search finds that is faster than `limit`, or `None`. With `one_size`,
/// every step's groups share one degree.
pub fn search(problem: &Problem, limit: f64, one_size: bool, interrupt: &Interrupt) -> Result<Option<Steps>> {
    if problem.lengths.is_empty() {
        return Ok(None);
    }
    let (lowest, highest) = target_range(problem);
    let mut best: Option<(Steps, f64)> = None;
    let mut bound = limit;
    let try_target =
        |tau: f64, least: usize, best: &mut Option<(Steps, f64)>, bound: &mut f64| -> Result<bool> {
            if let Some((steps, time)) = plan_for(problem, tau, least, *bound, one_size, interrupt)? {
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
        use_idle_ranks(&problem, &mut groups, 7, false, &Interrupt::NEVER).unwrap();
        assert!(groups.len() > 1 || groups[0].degree > 0);
        let stop = || true;
        let error = use_idle_ranks(&problem, &mut group(), 7, false, &Interrupt::new(&stop)).unwrap_err();
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
            one_size in any::<bool>(),
            any_sizes in prop::option::of(prop::collection::btree_set(1u32..=64, 1..5)),
        ) {
            let (world_size, cap, n) = shape;
            // Powers of two dividing the world, or any sizes up to it (not powers of two); a
            // cost that does not grow with the length (shares then do not fall along the order).
            let owned = crate::cp::tests::Owned::drawn(
                world_size, cap, n, seed, quadratic, kappa, scrambled.then_some(97), any_sizes,
            );
            let problem = owned.problem();
            let (lowest, highest) = target_range(&problem);
            let tau = lowest + tau_share * (highest - lowest);
            let least = least.min(owned.degrees.len() - 1);
            let fast = plan_for(&problem, tau, least, f64::INFINITY, one_size, &Interrupt::NEVER).unwrap();
            let plain = plan_for_plain(&problem, tau, least, f64::INFINITY, one_size, &Interrupt::NEVER).unwrap();
            if one_size {
                for step in fast.as_ref().map_or(&[][..], |(steps, _)| &steps[..]) {
                    prop_assert!(step.iter().all(|g| g.degree == step[0].degree));
                }
            }
            prop_assert_eq!(fast, plain);
        }
    }
}
