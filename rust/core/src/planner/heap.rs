//! The planner's min-heap of packed integer keys (the split's hot loop).
//!
//! Why not `BinaryHeap<Reverse<(u64, bool, u32)>>`: it spent as long as the rest of the split
//! together in `sift_down_range`: a tuple comparison branches field by field, and a binary heap
//! of thousands of parts is 13 levels of dependent loads. Here a key is one integer (one
//! compare), a node's 8 children share a cache line or two and the smallest is found without
//! branching on it, so the top is replaced in about 4 levels: the hole goes down to a leaf along
//! the smallest child and the key sifts up from there, which is short because a part that just
//! took an item usually ranks near the bottom.
//!
//! Why the children are not aligned to cache lines: a version that put every node's 8 children
//! on one 64-byte line (the root alone in line 0, the slots past the last key padded with the
//! key type's MAX) and found the least child with a tree of selects instead of a scan gave the
//! same pops and no measurable gain: `min_num_micro_batches_for` on 4*10^7 workload costs, 10^7
//! parts (an 80 MB heap), 40.8-44.5 s against 43.0-44.7 s with this layout, both on u64 keys;
//! `max_sequences=16` at 2^17 items (heaps of 8,000 parts, in the L2 cache) 18.4-18.8x a sort
//! against 18.8-19.1x (docs/performance.md). What the huge count paid in the heap was the
//! 128-bit keys; see `Problem::split_in` for the bound that keeps them in a u64.

use super::Result;
use crate::alloc;

/// Children per node of [`MinHeap`].
pub(super) const ARITY: usize = 8;

/// A d-ary min-heap of packed keys (see the module's notes on why): the children of slot `i`
/// at `8i + 1 ..= 8i + 8`.
#[derive(Clone)]
pub(super) struct MinHeap<K> {
    keys: Vec<K>,
}

impl<K: Copy + Ord> MinHeap<K> {
    pub(super) fn new() -> Self {
        MinHeap { keys: Vec::new() }
    }

    /// An empty heap in `buffer`'s memory, with room for `count` keys without growing (a
    /// `MemoryError` when a larger buffer cannot be had, the old one freed first).
    pub(super) fn reuse(mut buffer: Vec<K>, count: usize, what: &'static str) -> Result<Self> {
        if buffer.capacity() < count {
            drop(buffer);
            buffer = alloc::with_capacity(count, what)?;
        }
        buffer.clear();
        Ok(MinHeap { keys: buffer })
    }

    /// The heap's memory, for [`MinHeap::reuse`].
    pub(super) fn into_buffer(self) -> Vec<K> {
        self.keys
    }

    pub(super) fn peek(&self) -> Option<K> {
        self.keys.first().copied()
    }

    /// [`MinHeap::push`] that may grow the heap: a `MemoryError`, never an abort.
    pub(super) fn try_push(&mut self, key: K, what: &'static str) -> Result<()> {
        alloc::reserve(&mut self.keys, 1, what)?;
        self.push(key);
        Ok(())
    }

    pub(super) fn push(&mut self, key: K) {
        self.keys.push(key);
        self.sift_up(self.keys.len() - 1, key);
    }

    pub(super) fn pop(&mut self) {
        if let Some(last) = self.keys.pop() {
            if !self.keys.is_empty() {
                self.replace_top(last);
            }
        }
    }

    /// Replace the smallest key (the heap must not be empty) by `key`.
    pub(super) fn replace_top(&mut self, key: K) {
        let keys = &mut self.keys;
        let n = keys.len();
        let mut hole = 0;
        loop {
            let first = hole * ARITY + 1;
            let best = if first + ARITY <= n {
                // A full node: a fixed-size array, no bounds checks, selects without branches.
                let node: &[K; ARITY] = keys[first..first + ARITY].try_into().expect("ARITY keys");
                let (mut best, mut least) = (0, node[0]);
                for (c, &child) in node.iter().enumerate().skip(1) {
                    let less = child < least;
                    best = if less { c } else { best };
                    least = if less { child } else { least };
                }
                best
            } else if first < n {
                let node = &keys[first..n];
                (0..node.len()).min_by_key(|&c| node[c]).expect("a child")
            } else {
                break;
            };
            keys[hole] = keys[first + best];
            hole = first + best;
        }
        self.sift_up(hole, key);
    }

    fn sift_up(&mut self, mut hole: usize, key: K) {
        let keys = &mut self.keys;
        while hole > 0 {
            let parent = (hole - 1) / ARITY;
            if keys[parent] <= key {
                break;
            }
            keys[hole] = keys[parent];
            hole = parent;
        }
        keys[hole] = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The split's operations on the heap and on `BinaryHeap` (the oracle) side by side: every
    /// peek agrees, then both are drained.
    fn agree<K: Copy + Ord + std::fmt::Debug>(
        keys: &[K],
        operations: &[(u8, K)],
    ) -> std::result::Result<(), TestCaseError> {
        let mut heap = MinHeap::new();
        let mut oracle = BinaryHeap::new();
        for &key in keys {
            heap.try_push(key, "test").unwrap();
            oracle.push(Reverse(key));
        }
        for &(operation, key) in operations {
            prop_assert_eq!(heap.peek(), oracle.peek().map(|top| top.0));
            match operation {
                0 => {
                    heap.pop();
                    oracle.pop();
                }
                1 => {
                    heap.push(key);
                    oracle.push(Reverse(key));
                }
                _ if !oracle.is_empty() => {
                    heap.replace_top(key);
                    oracle.pop();
                    oracle.push(Reverse(key));
                }
                _ => {}
            }
        }
        while let Some(Reverse(key)) = oracle.pop() {
            prop_assert_eq!(heap.peek(), Some(key));
            heap.pop();
        }
        prop_assert_eq!(heap.peek(), None);
        Ok(())
    }

    proptest! {
        /// Narrow key ranges make many ties; keys at the top of the range too.
        #[test]
        fn pops_in_sorted_order(
            keys in prop::collection::vec(prop_oneof![0u64..8, Just(u64::MAX), any::<u64>()], 0..300),
            operations in prop::collection::vec(
                (0u8..3, prop_oneof![0u64..8, Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()]),
                0..400,
            ),
        ) {
            agree(&keys, &operations)?;
        }

        #[test]
        fn pops_in_sorted_order_wide(
            keys in prop::collection::vec(prop_oneof![0u128..5, Just(u128::MAX), any::<u128>()], 0..200),
            operations in prop::collection::vec(
                (0u8..3, prop_oneof![0u128..5, Just(u128::MAX), any::<u128>()]),
                0..300,
            ),
        ) {
            agree(&keys, &operations)?;
        }

        /// A reused buffer (with an earlier heap's keys) starts empty and does not grow.
        #[test]
        fn a_reused_heap_starts_empty(
            first in prop::collection::vec(0u64..20, 0..100),
            second in prop::collection::vec(0u64..20, 0..100),
        ) {
            let mut heap = MinHeap::new();
            for &key in &first {
                heap.push(key);
            }
            let mut heap = MinHeap::reuse(heap.into_buffer(), second.len(), "test").unwrap();
            let capacity = heap.keys.capacity();
            for &key in &second {
                heap.push(key);
            }
            prop_assert_eq!(heap.keys.capacity(), capacity);
            let mut sorted = second.clone();
            sorted.sort_unstable();
            let mut popped = Vec::new();
            while let Some(key) = heap.peek() {
                popped.push(key);
                heap.pop();
            }
            prop_assert_eq!(popped, sorted);
        }
    }
}
