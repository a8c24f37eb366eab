//! The queue of composite states and the run that drives the merges to the last state.

use super::keys::{join, Set, SumInt, NIL};
use super::read::read_lists;
use super::state::{
    merge_overlapping, merge_runs, single_priority, sort_descending, Priority, RunSorter, State,
};
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;
use crate::parts::Partition;
use crate::sort::SortedItems;

/// Set vectors of merged-away states kept for reuse.
pub(super) const SPARE_MAX: usize = 1024;

/// A queue entry: a composite state's priority, inline, and its id.
#[derive(Clone, Copy)]
pub(super) struct Entry<S: SumInt> {
    pub(super) priority: Priority<S>,
    pub(super) id: u32,
}

/// Max-heap of composite states with their priorities inline (no pointer chasing to compare).
pub(super) struct Queue<S: SumInt> {
    pub(super) entries: Vec<Entry<S>>,
}

impl<S: SumInt> Queue<S> {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn top(&self) -> Option<&Priority<S>> {
        self.entries.first().map(|e| &e.priority)
    }

    pub(super) fn top_id(&self) -> u32 {
        self.entries[0].id
    }

    /// The best entry once the top is gone: the larger of the top's children.
    pub(super) fn second(&self) -> Option<&Priority<S>> {
        match self.entries.len() {
            0 | 1 => None,
            2 => Some(&self.entries[1].priority),
            _ => Some(std::cmp::max(&self.entries[1].priority, &self.entries[2].priority)),
        }
    }

    pub(super) fn push(&mut self, priority: Priority<S>, id: u32) -> Result<(), CoreError> {
        alloc::push(&mut self.entries, Entry { priority, id }, "the queue of states")?;
        let mut node = self.entries.len() - 1;
        while node > 0 {
            let parent = (node - 1) / 2;
            if self.entries[parent].priority >= priority {
                break;
            }
            self.entries[node] = self.entries[parent];
            node = parent;
        }
        self.entries[node] = Entry { priority, id };
        Ok(())
    }

    pub(super) fn pop(&mut self) -> u32 {
        let top = self.entries.swap_remove(0);
        if !self.entries.is_empty() {
            self.sift_down_from_top();
        }
        top.id
    }

    /// Give the top entry a new priority (and state) without a pop and a push. A state that
    /// absorbed one item usually stays on top, so this uses the sift-down that stops early.
    pub(super) fn replace_top(&mut self, priority: Priority<S>, id: u32) {
        self.entries[0] = Entry { priority, id };
        self.sift_down(0);
    }

    /// Bottom-up sift-down for `pop`: the entry moved to the top came from the bottom and almost
    /// always belongs there again, so walk the hole down to a leaf with one comparison per level,
    /// then move the entry up from there.
    pub(super) fn sift_down_from_top(&mut self) {
        let entries = &mut self.entries;
        let len = entries.len();
        let moving = entries[0];
        let mut hole = 0;
        loop {
            let left = 2 * hole + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child =
                if right < len && entries[right].priority > entries[left].priority { right } else { left };
            entries[hole] = entries[child];
            hole = child;
        }
        while hole > 0 {
            let parent = (hole - 1) / 2;
            if entries[parent].priority >= moving.priority {
                break;
            }
            entries[hole] = entries[parent];
            hole = parent;
        }
        entries[hole] = moving;
    }

    pub(super) fn sift_down(&mut self, mut node: usize) {
        let len = self.entries.len();
        let moving = self.entries[node];
        loop {
            let left = 2 * node + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.entries[right].priority > self.entries[left].priority {
                right
            } else {
                left
            };
            if self.entries[child].priority > moving.priority {
                self.entries[node] = self.entries[child];
                node = child;
            } else {
                break;
            }
        }
        self.entries[node] = moving;
    }

    pub(super) fn heapify(&mut self) {
        for node in (0..self.entries.len() / 2).rev() {
            self.sift_down(node);
        }
    }
}

/// Which queue holds the next state.
#[derive(PartialEq, Eq)]
pub(super) enum Source {
    Single,
    Composite,
}

pub(super) struct Run<'a, S: SumInt> {
    pub(super) sorted: &'a SortedItems,
    pub(super) k: usize,
    pub(super) next: Vec<u32>,
    pub(super) states: Vec<State<S>>,
    /// Ids of merged-away states, and set vectors they no longer need.
    pub(super) free: Vec<u32>,
    pub(super) spare: Vec<Vec<Set<S>>>,
    /// Scratch for `absorb_into_smallest` (fewer than k sets).
    pub(super) smallest: Vec<Set<S>>,
    pub(super) queue: Queue<S>,
    /// One-item states are `sorted[..singles]`; the best is the last.
    pub(super) singles: usize,
    pub(super) sorter: RunSorter<S>,
}

impl<'a, S: SumInt> Run<'a, S> {
    pub(super) fn new(
        sorted: &'a SortedItems,
        k: usize,
        equal_size: bool,
        interrupt: &Interrupt,
    ) -> Result<Self, CoreError> {
        let n = sorted.index.len();
        let mut run = Run {
            sorted,
            k,
            next: alloc::filled_checked(n, NIL, "the item lists", interrupt)?,
            states: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            smallest: alloc::with_capacity(k, "merge scratch")?,
            queue: Queue { entries: Vec::new() },
            singles: n,
            sorter: RunSorter::new(),
        };
        if S::WALKS {
            // Float sums: room for the joins of any merge (`join_all`).
            alloc::room_for(&mut run.sorter.walks, k, "merge scratch")?;
        }
        // With k = 1 a chunk of one is a one-item state, which the single queue already models.
        if equal_size && k > 1 {
            run.singles = 0;
            alloc::reserve(&mut run.states, n / k, "the states")?;
            alloc::reserve(&mut run.queue.entries, n / k, "the queue of states")?;
            for start in (0..n).step_by(k) {
                // The chunk is ascending by (value, index): its largest set is its last item and
                // its smallest its first.
                let top = start + k - 1;
                let first = S::key(S::from_u64(sorted.values[top]), 1, sorted.index[top]);
                // Subtracted as sums (float sums round as the reference's spread does).
                let spread = S::from_u64(sorted.values[top]) - S::from_u64(sorted.values[start]);
                let id = run.states.len() as u32;
                run.queue.entries.push(Entry { priority: Priority { spread, first }, id });
                run.states.push(State {
                    sets: Vec::new(),
                    heap_mode: false,
                    max: first,
                    chunk: start as u32,
                });
            }
            run.queue.heapify();
        }
        Ok(run)
    }

    #[inline]
    pub(super) fn single_set(&self, rank: usize) -> (Set<S>, Priority<S>) {
        let index = self.sorted.index[rank];
        let value = self.sorted.values[rank];
        (Set::single(rank as u32, index, value), single_priority(index, value, self.k))
    }

    /// Where the best state is, when the top composite (if `skip_top`) is already taken.
    pub(super) fn best_source(&self, skip_top: bool) -> Source {
        let composite = if skip_top { self.queue.second() } else { self.queue.top() };
        match (self.singles > 0, composite) {
            (false, _) => Source::Composite,
            (true, None) => Source::Single,
            (true, Some(best)) => {
                let (_, single) = self.single_set(self.singles - 1);
                if single > *best {
                    Source::Single
                } else {
                    Source::Composite
                }
            }
        }
    }

    pub(super) fn take_single(&mut self) -> Set<S> {
        self.singles -= 1;
        self.single_set(self.singles).0
    }

    pub(super) fn new_state(&mut self, sets: &[Set<S>]) -> Result<u32, CoreError> {
        let mut vector = match self.spare.pop() {
            Some(vector) => vector,
            // Exactly as many sets as it starts with: most states never grow (a state of two
            // one-item sets is the most common), and a spare one more than doubles them.
            None => alloc::with_capacity(sets.len(), "the sets of a state")?,
        };
        alloc::reserve(&mut vector, sets.len(), "the sets of a state")?;
        vector.extend_from_slice(sets);
        let state = State { sets: vector, heap_mode: false, max: S::key(S::default(), 0, NIL), chunk: NIL };
        Ok(if let Some(id) = self.free.pop() {
            self.states[id as usize] = state;
            id
        } else {
            alloc::push(&mut self.states, state, "the states")?;
            (self.states.len() - 1) as u32
        })
    }

    /// Give a seeded chunk state its sets: the chunk reversed is in descending set order.
    /// Inline, because with `equal_size=False` it is called on every merge and never has work
    /// to do (measured: a call per merge cost 4 % of the instructions at 2^20 items).
    #[inline(always)]
    pub(super) fn materialise(&mut self, id: u32) -> Result<(), CoreError> {
        if self.states[id as usize].chunk != NIL {
            self.materialise_chunk(id)?;
        }
        Ok(())
    }

    #[inline(never)]
    pub(super) fn materialise_chunk(&mut self, id: u32) -> Result<(), CoreError> {
        let mut vector = match self.spare.pop() {
            Some(vector) => vector,
            None => alloc::with_capacity(self.k, "the sets of a state")?,
        };
        alloc::reserve(&mut vector, self.k, "the sets of a state")?;
        let state = &mut self.states[id as usize];
        let start = state.chunk as usize;
        state.chunk = NIL;
        let sorted = self.sorted;
        vector.extend(
            (start..start + self.k)
                .rev()
                .map(|rank| Set::single(rank as u32, sorted.index[rank], sorted.values[rank])),
        );
        state.sets = vector;
        Ok(())
    }

    /// The composite state on top of the queue absorbs a one-item state, which came out of the
    /// queue first (`single_first`: its item goes before the set it joins) or second.
    pub(super) fn top_absorbs_single(&mut self, single: Set<S>, single_first: bool) -> Result<(), CoreError> {
        let k = self.k;
        let id = self.queue.top_id();
        self.materialise(id)?;
        let state = &mut self.states[id as usize];
        if state.sets.len() < k {
            // The single lands on an empty position: it keeps a set of its own.
            state.insert_set(single)?;
        } else {
            state.grow_smallest(single, single_first, &mut self.next, &self.sorted.values);
        }
        let priority = state.priority(k);
        self.queue.replace_top(priority, id);
        Ok(())
    }

    pub(super) fn step(&mut self) -> Result<(), CoreError> {
        let k = self.k;
        if self.best_source(false) == Source::Single {
            let first = self.take_single();
            if self.best_source(false) == Source::Single {
                let second = self.take_single();
                let id = if k == 1 {
                    let joined = join(first, second, &mut self.next, &self.sorted.values);
                    self.new_state(&[joined])?
                } else {
                    self.new_state(&[first, second])?
                };
                let priority = self.states[id as usize].priority(k);
                self.queue.push(priority, id)?;
            } else {
                // first's set 0 absorbs the composite's set k−1: empty unless it is full.
                self.top_absorbs_single(first, true)?;
            }
        } else if self.best_source(true) == Source::Single {
            let second = self.take_single();
            self.top_absorbs_single(second, false)?;
        } else {
            // (An error leaves the run half-merged; it is abandoned then.)
            alloc::reserve(&mut self.free, 1, "the free state ids")?;
            let first_id = self.queue.pop();
            let second_id = self.queue.top_id();
            self.materialise(first_id)?;
            self.materialise(second_id)?;
            let first_full = self.states[first_id as usize].sets.len() == k;
            let second_full = self.states[second_id as usize].sets.len() == k;
            // Partial states are always sorted; only full ones may be in heap mode.
            let (kept, gone, mut other) = if first_full && !second_full {
                let other = std::mem::take(&mut self.states[second_id as usize].sets);
                self.states[first_id as usize].absorb_into_smallest(
                    &other,
                    false,
                    &mut self.next,
                    &self.sorted.values,
                    &mut self.smallest,
                    &mut self.sorter.walks,
                );
                (first_id, second_id, other)
            } else if second_full && !first_full {
                let other = std::mem::take(&mut self.states[first_id as usize].sets);
                self.states[second_id as usize].absorb_into_smallest(
                    &other,
                    true,
                    &mut self.next,
                    &self.sorted.values,
                    &mut self.smallest,
                    &mut self.sorter.walks,
                );
                (second_id, first_id, other)
            } else {
                let mut other = std::mem::take(&mut self.states[second_id as usize].sets);
                if self.states[second_id as usize].heap_mode {
                    sort_descending(&mut other);
                }
                let state = &mut self.states[first_id as usize];
                state.make_sorted();
                if state.sets.len() + other.len() <= k {
                    merge_runs(&mut state.sets, &other)?;
                } else {
                    merge_overlapping(
                        &mut state.sets,
                        &other,
                        k,
                        &mut self.next,
                        &self.sorted.values,
                        &mut self.sorter,
                    )?;
                }
                (first_id, second_id, other)
            };
            let priority = self.states[kept as usize].priority(k);
            self.queue.replace_top(priority, kept);
            // A bounded pool: vectors beyond it are freed now, a step at a time, instead of
            // millions at once when the run ends (which held up Ctrl-C for a second) and
            // instead of keeping capacity no new state needs.
            if self.spare.len() < SPARE_MAX {
                other.clear();
                self.spare.push(other);
            }
            self.free.push(gone);
        }
        Ok(())
    }

    pub(super) fn finish(self, interrupt: &Interrupt) -> Result<Partition, CoreError> {
        let (k, index) = (self.k, &self.sorted.index);
        let (final_sets, next) = self.run_to_end(interrupt)?;
        read_lists(&final_sets, k, &next, index, interrupt)
    }

    /// Run every merge: the last state's sets (descending) and the item lists they head. The
    /// states and their sets are freed on return.
    pub(super) fn run_to_end(mut self, interrupt: &Interrupt) -> Result<(Vec<Set<S>>, Vec<u32>), CoreError> {
        let mut steps = 0usize;
        while self.singles + self.queue.len() > 1 {
            interrupt.every(steps)?;
            steps += 1;
            self.step()?;
        }
        let final_sets: Vec<Set<S>> = if self.queue.len() == 1 {
            let id = self.queue.top_id();
            self.materialise(id)?;
            let state = &mut self.states[id as usize];
            state.make_sorted();
            std::mem::take(&mut state.sets)
        } else {
            vec![self.single_set(0).0]
        };
        Ok((final_sets, self.next))
    }
}
