//! The planner's min-heap of packed integer keys (the split's hot loop).
//!
//! Why not `BinaryHeap<Reverse<(u64, bool, u32)>>`: it spent as long as the rest of the split
//! together in `sift_down_range`: a tuple comparison branches field by field, and a binary heap
//! of thousands of parts is 13 levels of dependent loads. Here a key is one integer (one
//! compare), a node has 8 children and the smallest is found without branching on it, so the
//! top is replaced in about 4 levels: the hole goes down to a leaf along the smallest child and
//! the key sifts up from there, which is short because a part that just took an item usually
//! ranks near the bottom.
//!
//! Why the lines: with the plain layout (the children of slot `i` at `8i + 1 ..= 8i + 8`) a
//! node's 8 children straddle two cache lines (u64 keys) or three (u128 keys), and every level
//! of a descent through a heap larger than the cache paid two or three misses instead of one
//! or two: `replace_top` held 40-62% of a binding shape limit's and a huge count's samples.
//! Here the keys sit in 64-byte aligned [`Line`]s of 8 and the root in the last slot of line 0
//! (its first 7 slots are padding), so the children of the root are line 1, and in general the
//! children of the node in slot `s` are the whole line `s - 6`; the parent of slot `s` (line
//! `s / 8`) is slot `s / 8 + 6`. Slots past the last key hold [`HeapKey::MAX`], so a partly
//! filled last node is searched like a full one: the least child is taken with the lowest slot
//! among equals, and a key equal to `MAX` sits before the padding, so a real child always wins.
//! The keys are compared as before and nothing else decides the order, so the heap gives up the
//! same keys in the same order as any min-heap (`pops_in_sorted_order` below).

use super::Result;
use crate::alloc;

/// Children per node of [`MinHeap`], and keys per [`Line`].
pub(super) const ARITY: usize = 8;

// `least_of` reads a line as a tree of pairs of this size.
const _: () = assert!(ARITY == 8);

/// Slots of line 0 in front of the root.
const ROOT: usize = ARITY - 1;

/// A key of [`MinHeap`]: compared as one integer.
pub(super) trait HeapKey: Copy + Ord {
    /// The padding after the last key (no key is less).
    const MAX: Self;
}

impl HeapKey for u64 {
    const MAX: Self = u64::MAX;
}

impl HeapKey for u128 {
    const MAX: Self = u128::MAX;
}

/// One node's children, on a cache line of their own (two lines for u128 keys).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line<K>([K; ARITY]);

/// A d-ary min-heap of packed keys laid out in [`Line`]s (see the module's notes on why).
#[derive(Clone)]
pub(super) struct MinHeap<K> {
    lines: Vec<Line<K>>,
    len: usize,
}

impl<K: HeapKey> MinHeap<K> {
    pub(super) fn new() -> Self {
        MinHeap { lines: Vec::new(), len: 0 }
    }

    /// An empty heap in `buffer`'s memory, with room for `count` keys without growing (a
    /// `MemoryError` when a larger buffer cannot be had, the old one freed first).
    pub(super) fn reuse(mut buffer: Vec<Line<K>>, count: usize, what: &'static str) -> Result<Self> {
        let lines = (count + ROOT).div_ceil(ARITY);
        if buffer.capacity() < lines {
            drop(buffer);
            buffer = alloc::with_capacity(lines, what)?;
        }
        buffer.clear();
        Ok(MinHeap { lines: buffer, len: 0 })
    }

    /// The heap's memory, for [`MinHeap::reuse`].
    pub(super) fn into_buffer(self) -> Vec<Line<K>> {
        self.lines
    }

    #[inline]
    fn get(&self, slot: usize) -> K {
        self.lines[slot / ARITY].0[slot % ARITY]
    }

    #[inline]
    fn set(&mut self, slot: usize, key: K) {
        self.lines[slot / ARITY].0[slot % ARITY] = key;
    }

    pub(super) fn peek(&self) -> Option<K> {
        (self.len > 0).then(|| self.lines[0].0[ROOT])
    }

    /// Whether the next push needs a new line.
    fn full(&self) -> bool {
        (self.len + ROOT) / ARITY == self.lines.len()
    }

    /// [`MinHeap::push`] that may grow the heap: a `MemoryError`, never an abort.
    pub(super) fn try_push(&mut self, key: K, what: &'static str) -> Result<()> {
        if self.full() {
            alloc::reserve(&mut self.lines, 1, what)?;
        }
        self.push(key);
        Ok(())
    }

    pub(super) fn push(&mut self, key: K) {
        if self.full() {
            self.lines.push(Line([K::MAX; ARITY]));
        }
        let slot = self.len + ROOT;
        self.len += 1;
        self.sift_up(slot, key);
    }

    pub(super) fn pop(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len -= 1;
        let last = self.len + ROOT;
        let key = self.get(last);
        self.set(last, K::MAX);
        if self.len > 0 {
            self.replace_top(key);
        }
    }

    /// Replace the smallest key (the heap must not be empty) by `key`.
    pub(super) fn replace_top(&mut self, key: K) {
        let end = self.len + ROOT;
        let mut hole = ROOT;
        loop {
            let line = hole - (ROOT - 1);
            if line * ARITY >= end {
                break;
            }
            let (best, least) = least_of(&self.lines[line].0);
            self.set(hole, least);
            hole = line * ARITY + best;
        }
        self.sift_up(hole, key);
    }

    fn sift_up(&mut self, mut hole: usize, key: K) {
        while hole > ROOT {
            let parent = hole / ARITY + (ROOT - 1);
            let above = self.get(parent);
            if above <= key {
                break;
            }
            self.set(hole, above);
            hole = parent;
        }
        self.set(hole, key);
    }
}

/// The least key of a whole line (padded with MAX) and its slot, the lowest slot among equals:
/// selects without branches, in a tree of pairs (3 dependent steps instead of the 7 of a scan,
/// which a descent waits on at every level).
#[inline(always)]
fn least_of<K: HeapKey>(node: &[K; ARITY]) -> (usize, K) {
    // The right one only when strictly less: the left holds the lower slots.
    let pick = |(a, x): (usize, K), (b, y): (usize, K)| {
        let less = y < x;
        (if less { b } else { a }, if less { y } else { x })
    };
    let pair = |c: usize| pick((c, node[c]), (c + 1, node[c + 1]));
    let (low, high) = (pick(pair(0), pair(2)), pick(pair(4), pair(6)));
    pick(low, high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The split's operations on the heap and on `BinaryHeap` (the oracle) side by side: every
    /// peek agrees, then both are drained.
    fn agree<K: HeapKey + std::fmt::Debug>(
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
        /// Narrow key ranges make many ties; the top of the range meets the padding's MAX.
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

        /// The least key of a line and the lowest of its slots, as a scan finds them.
        #[test]
        fn least_of_a_line_is_the_first_least(line in prop::array::uniform8(0u64..4)) {
            let least = *line.iter().min().unwrap();
            let first = line.iter().position(|&key| key == least).unwrap();
            prop_assert_eq!(least_of(&line), (first, least));
        }

        /// A reused buffer (with stale keys and padding from an earlier heap) starts empty.
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
            let capacity = heap.lines.capacity();
            for &key in &second {
                heap.push(key);
            }
            prop_assert_eq!(heap.lines.capacity(), capacity);
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
