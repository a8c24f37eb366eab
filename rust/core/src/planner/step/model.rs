//! The step model of `step-spec.md`: what a plan's micro-batch times make of a training step.
//!
//! * Ranks in lockstep (`sync="micro_batch"`, FSDP and ZeRO-3): the step is `Σ_k max_r t(r, k)`.
//! * Ranks meeting once a step: `max_r Σ_k t(r, k)`.
//! * Pipelines (`pipeline_stages = P > 1`): each rank runs its micro-batches in plan order
//!   through `P` stages with the non-interleaved 1F1B schedule; every stage runs `1/P` of every
//!   micro-batch, a forward `F_k = forward_share · t_k / P` and a backward
//!   `B_k = (1 − forward_share) · t_k / P`. Stage `s` (0 first) runs `min(P − s − 1, m)`
//!   forwards, then one forward and one backward while forwards remain, then the remaining
//!   backwards, all in micro-batch order. A forward of `k` on stage `s` starts when the stage is
//!   free and the forward of `k` on `s − 1` has ended; a backward of `k` on `s` when the stage is
//!   free and the backward of `k` on `s + 1` has ended (on the last stage: its own forward of
//!   `k`). A pipeline's time is when its last operation ends.
//!
//! The Python package evaluates plans with [`Pipeline::makespan`] (`seqbalance.simulate_step`),
//! and the step planner scores its candidates with it; `tests/planning/test_step.py` holds it
//! to an event-queue simulation of its own.

use super::super::Result;
use crate::alloc;
use crate::interrupt::Interrupt;

/// `Σ_k max_r t(r, k)` over ranks of equal length (`times[r][k]`); 0 for no ranks.
pub fn lockstep(times: &[Vec<f64>]) -> f64 {
    let count = times.first().map_or(0, Vec::len);
    (0..count).map(|k| times.iter().map(|rank| rank[k]).fold(0.0, f64::max)).sum()
}

/// One operation of a stage's 1F1B schedule: a forward or a backward of a micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Forward(usize),
    Backward(usize),
}

/// The `i`-th operation of stage `s` (of `stages`) running `m` micro-batches.
fn op(s: usize, i: usize, stages: usize, m: usize) -> Op {
    let warmup = (stages - s - 1).min(m);
    if i < warmup {
        return Op::Forward(i);
    }
    let j = i - warmup;
    let steady = 2 * (m - warmup);
    if j < steady {
        return if j % 2 == 0 { Op::Forward(warmup + j / 2) } else { Op::Backward(j / 2) };
    }
    Op::Backward(m - warmup + (j - steady))
}

/// The 1F1B simulator, with its buffers kept from one pipeline to the next (the step planner
/// simulates thousands of candidate orders).
///
/// One end time per micro-batch and direction is all the schedule needs, `O(P + m)` memory
/// (a table per stage, or a ring per stage of the `P + 2` end times a stage may run ahead of
/// its neighbour, is `O(P · min(m, P))`: a terabyte at `P = 2^24` with a few thousand
/// micro-batches, which an overcommitting host grants and then kills the process for). Each
/// end time is read once, by the one operation that overwrites it: the forward of `k` on stage
/// `s` reads the forward of `k` on `s − 1` and replaces it; the last stage's backward of `k`
/// reads its own forward of `k`, which nothing replaces; the backward of `k` on `s` reads the
/// backward of `k` on `s + 1` and replaces it. Each slot remembers the stage that wrote it and
/// a read checks it, so a wrong reasoning here would be an internal error, never a wrong time.
pub struct Pipeline {
    stages: usize,
    forward_share: f64,
    /// Per stage: forwards and backwards done, the time the stage is free, its next operation.
    forwards: Vec<usize>,
    backwards: Vec<usize>,
    free: Vec<f64>,
    next: Vec<usize>,
    /// Per micro-batch: `(stage, end time)` of its latest forward and of its latest backward.
    forward_ends: Vec<(usize, f64)>,
    backward_ends: Vec<(usize, f64)>,
    /// Stages that may advance.
    pending: Vec<usize>,
    queued: Vec<bool>,
}

impl Pipeline {
    /// A simulator of `stages` (>= 1) stages with this forward share (in (0, 1)). Its stages'
    /// state is filled with interrupt checks: at `2^24` stages it is most of a gigabyte.
    pub fn new(stages: usize, forward_share: f64, interrupt: &Interrupt) -> Result<Self> {
        let what = "the pipeline's stages";
        Ok(Pipeline {
            stages,
            forward_share,
            forwards: alloc::filled_checked(stages, 0, what, interrupt)?,
            backwards: alloc::filled_checked(stages, 0, what, interrupt)?,
            free: alloc::filled_checked(stages, 0.0, what, interrupt)?,
            next: alloc::filled_checked(stages, 0, what, interrupt)?,
            forward_ends: Vec::new(),
            backward_ends: Vec::new(),
            pending: alloc::with_capacity(stages, what)?,
            queued: alloc::filled_checked(stages, false, what, interrupt)?,
        })
    }

    /// The stages.
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// When the last operation of the pipeline running `times` (micro-batch times, in order)
    /// ends; 0 for no micro-batches.
    pub fn makespan(&mut self, times: &[f64], interrupt: &Interrupt) -> Result<f64> {
        let (p, m) = (self.stages, times.len());
        if m == 0 {
            return Ok(0.0);
        }
        for ends in [&mut self.forward_ends, &mut self.backward_ends] {
            ends.clear();
            alloc::room_for(ends, m, "the pipeline's end times")?;
            ends.resize(m, (usize::MAX, 0.0));
        }
        let p_float = p as f64;
        let backward_share = 1.0 - self.forward_share;
        for s in 0..p {
            interrupt.every(s + 1)?;
            self.forwards[s] = 0;
            self.backwards[s] = 0;
            self.free[s] = 0.0;
            self.next[s] = 0;
            self.queued[s] = true;
        }
        self.pending.clear();
        self.pending.extend((0..p).rev());
        let total = 2 * m;
        let mut done = 0usize;
        while let Some(s) = self.pending.pop() {
            self.queued[s] = false;
            while self.next[s] < total {
                let operation = op(s, self.next[s], p, m);
                let ready = match operation {
                    Op::Forward(_) if s == 0 => Some(0.0),
                    Op::Forward(k) => (self.forwards[s - 1] > k).then(|| read(&self.forward_ends, k, s - 1)),
                    // The last stage's backward follows its own forward of the same micro-batch.
                    Op::Backward(k) if s == p - 1 => Some(read(&self.forward_ends, k, s)),
                    Op::Backward(k) => {
                        (self.backwards[s + 1] > k).then(|| read(&self.backward_ends, k, s + 1))
                    }
                };
                let Some(ready) = ready else { break };
                let start = self.free[s].max(ready);
                done += 1;
                interrupt.every(done)?;
                match operation {
                    Op::Forward(k) => {
                        let end = start + self.forward_share * times[k] / p_float;
                        self.forward_ends[k] = (s, end);
                        self.forwards[s] += 1;
                        self.free[s] = end;
                        if s + 1 < p {
                            self.wake(s + 1);
                        }
                    }
                    Op::Backward(k) => {
                        let end = start + backward_share * times[k] / p_float;
                        self.backward_ends[k] = (s, end);
                        self.backwards[s] += 1;
                        self.free[s] = end;
                        if s > 0 {
                            self.wake(s - 1);
                        }
                    }
                }
                self.next[s] += 1;
            }
        }
        assert_eq!(done, total * p, "the 1F1B schedule ran every operation");
        Ok(self.free.iter().copied().fold(0.0, f64::max))
    }

    fn wake(&mut self, s: usize) {
        if !self.queued[s] {
            self.queued[s] = true;
            self.pending.push(s);
        }
    }
}

/// The end time micro-batch `k`'s slot holds, which stage `s` wrote.
fn read(ends: &[(usize, f64)], k: usize, s: usize) -> f64 {
    let (stage, end) = ends[k];
    assert_eq!(stage, s, "an end time was replaced before it was read");
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn makespan(times: &[f64], stages: usize, share: f64) -> f64 {
        Pipeline::new(stages, share, &Interrupt::NEVER).unwrap().makespan(times, &Interrupt::NEVER).unwrap()
    }

    #[test]
    fn one_stage_is_the_sum() {
        assert_eq!(makespan(&[1.0, 2.0, 3.0], 1, 1.0 / 3.0), 6.0);
    }

    #[test]
    fn equal_micro_batches_take_m_plus_p_minus_one_slots() {
        // The textbook 1F1B: (m + P - 1) * (F + B) for equal micro-batches.
        for (m, p) in [(4usize, 4usize), (8, 4), (3, 8), (13, 8), (1, 5)] {
            let got = makespan(&vec![3.0; m], p, 0.25);
            let want = (m + p - 1) as f64 * 3.0 / p as f64;
            assert!((got - want).abs() < 1e-9 * want, "m={m} P={p}: {got} != {want}");
        }
    }

    #[test]
    fn the_schedule_lists_every_operation_once() {
        for (p, m) in [(1usize, 3usize), (4, 2), (4, 9), (8, 3)] {
            for s in 0..p {
                let ops: Vec<Op> = (0..2 * m).map(|i| op(s, i, p, m)).collect();
                let forwards: Vec<usize> =
                    ops.iter().filter_map(|o| if let Op::Forward(k) = o { Some(*k) } else { None }).collect();
                let backwards: Vec<usize> = ops
                    .iter()
                    .filter_map(|o| if let Op::Backward(k) = o { Some(*k) } else { None })
                    .collect();
                assert_eq!(forwards, (0..m).collect::<Vec<_>>());
                assert_eq!(backwards, (0..m).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn empty_micro_batches_and_no_micro_batch() {
        assert_eq!(makespan(&[], 4, 0.5), 0.0);
        assert_eq!(makespan(&[0.0, 0.0], 4, 0.5), 0.0);
    }

    /// The schedule run by sweeping the stages until every operation has run, end times in
    /// full `P × m` tables: no shared slots, no work queue.
    fn swept(times: &[f64], p: usize, share: f64) -> f64 {
        let m = times.len();
        let (mut forward, mut backward) = (vec![vec![f64::NAN; m]; p], vec![vec![f64::NAN; m]; p]);
        let (mut next, mut free) = (vec![0usize; p], vec![0.0f64; p]);
        while next.iter().any(|&i| i < 2 * m) {
            for s in 0..p {
                while next[s] < 2 * m {
                    let (ready, end) = match op(s, next[s], p, m) {
                        Op::Forward(k) => {
                            let ready = if s == 0 { 0.0 } else { forward[s - 1][k] };
                            (ready, share * times[k] / p as f64)
                        }
                        Op::Backward(k) => {
                            let ready = if s == p - 1 { forward[s][k] } else { backward[s + 1][k] };
                            (ready, (1.0 - share) * times[k] / p as f64)
                        }
                    };
                    if ready.is_nan() {
                        break;
                    }
                    let finish = free[s].max(ready) + end;
                    match op(s, next[s], p, m) {
                        Op::Forward(k) => forward[s][k] = finish,
                        Op::Backward(k) => backward[s][k] = finish,
                    }
                    free[s] = finish;
                    next[s] += 1;
                }
            }
        }
        free.iter().copied().fold(0.0, f64::max)
    }

    proptest::proptest! {
        /// One end time per micro-batch never loses one still to be read: any times, stages and
        /// counts give the full tables' makespan exactly.
        #[test]
        fn per_micro_batch_end_times_agree_with_full_tables(
            times in proptest::collection::vec(0.0f64..10.0, 0..40),
            p in 1usize..12,
            share in 0.05f64..0.95,
        ) {
            let mut pipeline = Pipeline::new(p, share, &Interrupt::NEVER).unwrap();
            let got = pipeline.makespan(&times, &Interrupt::NEVER).unwrap();
            proptest::prop_assert_eq!(got, swept(&times, p, share));
            // The buffers kept from this pipeline serve the next one.
            let again = pipeline.makespan(&times[..times.len() / 2], &Interrupt::NEVER).unwrap();
            proptest::prop_assert_eq!(again, swept(&times[..times.len() / 2], p, share));
        }
    }

    #[test]
    fn lockstep_sums_the_slowest_of_each_slot() {
        assert_eq!(lockstep(&[vec![3.0, 1.0], vec![2.0, 2.0]]), 5.0);
        assert_eq!(lockstep(&[]), 0.0);
    }
}
