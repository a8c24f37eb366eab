//! The split the step planner builds its candidates from: items into parts of *given* sizes.
//!
//! The balanced split of the count search (`count.rs`) makes every part as light as it can,
//! which is right for a rank's total and wrong for a step: in lockstep a slot whose slowest
//! part holds a long document should have every other rank's part as heavy (the slot takes
//! that long anyway), and a pipeline wants small micro-batches where it fills and drains. Both
//! are parts with a target each. The rule (the count search's greedy with targets): items by
//! cost descending (ties by position), each into the part with the most room below its target
//! (`target − load`, compared in float32; ties to the lowest part number) among those it fits
//! in, by the cap and the shape limits; no part fitting: the split fails. With equal targets it
//! is the balanced greedy up to its ties.

use super::super::heap::MinHeap;
use super::super::problem::{Key, Ordered, Problem, ShapeRule};
use super::super::shape::Fill;
use super::super::{PlanCost, Result};
use crate::alloc;
use crate::interrupt::Interrupt;

/// The items of a problem in the greedy's order, as the targeted split reads them: each one's
/// time and what the limits read of it. Built once per problem, read by every split.
pub(super) struct Sorted {
    /// Item positions in the problem, cost descending (ties by position).
    pub(super) order: Vec<u32>,
    /// The time of each, in that order.
    pub(super) seconds: Vec<f64>,
    /// What the cap and the limits read of each, in that order.
    fills: Vec<Fill>,
    rule: ShapeRule,
    cap: u64,
    keys: usize,
}

/// The limits of a problem without shape limits: the cap alone.
const CAP_ONLY: ShapeRule = ShapeRule { max_sequences: u64::MAX, padded: false };

impl Sorted {
    /// The items of `problem` (ordered as `ordered` holds them), or `None` where the targeted
    /// split does not apply: groups of several samples under shape limits, whose fit is not a
    /// threshold on one length (the candidates built from it are then left out; the plan the
    /// count search makes stays a candidate).
    pub(super) fn new<C: PlanCost>(
        problem: &Problem<'_, C>,
        ordered: &Ordered<C>,
        interrupt: &Interrupt,
    ) -> Result<Option<Sorted>> {
        let order = alloc::collect(ordered.order.iter().copied(), "the step planner's items")?;
        let seconds = alloc::collect(ordered.costs.iter().map(|c| c.to_f64()), "the step planner's items")?;
        let (fills, rule, keys) = match &problem.shape {
            None => {
                let fill = |&tokens: &u64| Fill { tokens, samples: 1, longest: tokens, key: 0 };
                (alloc::collect(ordered.tokens.iter().map(fill), "the step planner's items")?, CAP_ONLY, 1)
            }
            Some(shape) if shape.unit() => {
                (problem.placed(ordered, interrupt)?.fills, shape.rule, shape.key_count())
            }
            Some(_) => return Ok(None),
        };
        Ok(Some(Sorted { order, seconds, fills, rule, cap: problem.cap, keys }))
    }

    /// The number of items.
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    /// The split into `targets.len()` parts with those targets (in the items' own time, no
    /// per-micro-batch term): the part of every item by its position in this order, or `None`
    /// when an item fits in no part. At least one part.
    ///
    /// Parts that may take the current item wait in a heap per key by (load − target, part);
    /// a part that cannot take it moves to a heap by the longest item it can still take, and
    /// comes back when a short enough item arrives (as in the balanced split), so a full part is
    /// not looked at again and again. Empty parts wait apart, by target: each one is a
    /// candidate for any item.
    pub(super) fn split(&self, targets: &[f64], interrupt: &Interrupt) -> Result<Option<Vec<u32>>> {
        let count = targets.len();
        let (rule, cap) = (self.rule, self.cap);
        let mut part: Vec<u32> = alloc::with_capacity(self.len(), "the split")?;
        let mut load: Vec<f64> = alloc::filled(count, 0.0, "the micro-batch loads")?;
        let mut fills: Vec<Fill> = alloc::filled(count, Fill::default(), "the micro-batch fills")?;
        // Empty parts by target descending, ties by number.
        let mut empty: Vec<u32> = alloc::collect(0..count as u32, "the empty micro-batches")?;
        empty.sort_unstable_by(|&a, &b| targets[b as usize].total_cmp(&targets[a as usize]).then(a.cmp(&b)));
        let mut next_empty = 0usize;
        let mut open: Vec<MinHeap<u64>> = alloc::filled(self.keys, MinHeap::new(), "the micro-batch heaps")?;
        let mut full: Vec<MinHeap<u128>> = alloc::filled(self.keys, MinHeap::new(), "the micro-batch heaps")?;
        // The room as a float32 beside the part's number in one u64: half the bytes of a u128
        // key, and the heap of open parts is where a split spends its time (measured: a third
        // of a lockstep search at 2^16 items in 12,800 parts went to its sift-downs). Rooms
        // within float32 rounding of each other tie, to the lowest part number.
        let open_key = |load: f64, target: f64, p: usize| {
            u64::pack(ordered_bits32((load - target) as f32), p as u64, 32)
        };
        let full_key = |room: u64, p: usize| u128::pack(cap - room, p as u64, 32);
        let mut moves = 0usize;
        for (position, item) in self.fills.iter().enumerate() {
            interrupt.every(position)?;
            let key = item.key as usize;
            while let Some(waiting) = full[key].peek() {
                if waiting.high(32) > cap - item.tokens {
                    break;
                }
                moves += 1;
                interrupt.every(moves)?;
                full[key].pop();
                let p = waiting.part(32) as usize;
                open[key].try_push(open_key(load[p], targets[p], p), "the micro-batch heap")?;
            }
            let mut best: Option<usize> = None;
            while let Some(top) = open[key].peek() {
                let p = top.part(32) as usize;
                match fills[p].threshold(rule, cap) {
                    Some(room) if room >= item.tokens && fills[p].fits(item, rule, cap) => {
                        best = Some(p);
                        break;
                    }
                    Some(room) => {
                        open[key].pop();
                        full[key].try_push(full_key(room.min(cap), p), "the micro-batch heap")?;
                    }
                    None => open[key].pop(),
                }
                moves += 1;
                interrupt.every(moves)?;
            }
            let fresh = empty.get(next_empty).map(|&p| p as usize);
            let chosen = match (best, fresh) {
                (Some(p), Some(q)) => {
                    let (room_p, room_q) = (targets[p] - load[p], targets[q]);
                    if room_q > room_p || (room_q == room_p && q < p) {
                        q
                    } else {
                        p
                    }
                }
                (Some(p), None) => p,
                (None, Some(q)) => q,
                (None, None) => return Ok(None),
            };
            let was_empty = fills[chosen].samples == 0;
            fills[chosen].take(item);
            load[chosen] += self.seconds[position];
            part.push(chosen as u32);
            let new_key = open_key(load[chosen], targets[chosen], chosen);
            if was_empty {
                next_empty += 1;
                open[key].try_push(new_key, "the micro-batch heap")?;
            } else {
                open[key].replace_top(new_key);
            }
        }
        Ok(Some(part))
    }
}

/// An unsigned integer ordered as the float `value` is (finite values; `-0.0` below `0.0`).
fn ordered_bits32(value: f32) -> u64 {
    let bits = value.to_bits();
    u64::from(if bits >> 31 == 1 { !bits } else { bits | 1 << 31 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_bits_order_floats() {
        let values = [-1e30f32, -2.5, -0.0, 0.0, 1e-30, 3.0, 1e30];
        assert!(values.windows(2).all(|w| ordered_bits32(w[0]) < ordered_bits32(w[1])));
    }

    fn sorted(tokens: &[u64], costs: &[u64], cap: u64) -> Sorted {
        let problem = Problem { tokens, costs, cap, multiple: 1, shape: None };
        let ordered = problem.ordered(&Interrupt::NEVER).unwrap();
        Sorted::new(&problem, &ordered, &Interrupt::NEVER).unwrap().unwrap()
    }

    #[test]
    fn items_go_where_the_most_room_is_left() {
        // Costs 5, 4, 3, 1 into targets 8 and 5: 5 -> part 0 (room 8), 4 -> part 1 (room 5 > 3),
        // 3 -> part 0 (room 3 > 1), 1 -> part 1 (room 1 > 0).
        let s = sorted(&[5, 4, 3, 1], &[5, 4, 3, 1], 100);
        assert_eq!(s.split(&[8.0, 5.0], &Interrupt::NEVER).unwrap(), Some(vec![0, 1, 0, 1]));
    }

    #[test]
    fn the_cap_is_kept_or_the_split_fails() {
        let s = sorted(&[6, 6, 6], &[6, 6, 6], 10);
        assert_eq!(s.split(&[100.0, 1.0], &Interrupt::NEVER).unwrap(), None);
        assert!(s.split(&[100.0, 1.0, 1.0], &Interrupt::NEVER).unwrap().is_some());
    }

    proptest! {
        /// Every item lands in a part, no part passes the cap, and when the split fails some
        /// item really fits nowhere at that point (checked by replaying the placements).
        #[test]
        fn splits_keep_the_cap(
            tokens in prop::collection::vec(1u64..50, 1..40),
            cap in 50u64..120,
            targets in prop::collection::vec(0.0f64..300.0, 1..8),
        ) {
            let s = sorted(&tokens, &tokens, cap);
            if let Some(part) = s.split(&targets, &Interrupt::NEVER).unwrap() {
                let mut fill = vec![0u64; targets.len()];
                for (position, &p) in part.iter().enumerate() {
                    fill[p as usize] += tokens[s.order[position] as usize];
                }
                prop_assert!(fill.iter().all(|&f| f <= cap));
            }
        }
    }
}
