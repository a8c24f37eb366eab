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

struct Open {
    degree: usize,
    tokens: u64,
    load: f64,
    members: Vec<u32>,
}

/// The greedy's plan in one reading. Every sequence must fit some degree (checked by the caller).
pub fn greedy(problem: &Problem, reading: Reading, interrupt: &Interrupt) -> Result<Steps> {
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
