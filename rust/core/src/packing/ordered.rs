//! An ordered set of distinct keys for best fit, whose memory is allocated fallibly.
//!
//! std's `BTreeSet` allocates a node every few inserts and aborts the process when one fails
//! (it has no fallible insert), so under an address-space limit a large best fit could abort
//! instead of raising `MemoryError`. This set is a treap in one vector, grown through
//! [`alloc`](crate::alloc) as keys arrive (not reserved for the most keys there could be: under
//! an address-space limit, memory the set never uses counts too), and the nodes of removed keys
//! are reused. Priorities are a hash of the node's slot, so the shape depends only on the
//! sequence of calls: the answers never depend on it.
use crate::alloc;
use crate::error::CoreError;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node<K> {
    key: K,
    priority: u32,
    left: u32,
    right: u32,
}

pub(super) struct OrderedSet<K> {
    nodes: Vec<Node<K>>,
    root: u32,
    /// Removed nodes, linked through `left`: reused before the vector grows.
    free: u32,
    len: usize,
}

/// A well-mixed priority for the node in `slot` (splitmix64's finaliser).
fn priority(slot: u32) -> u32 {
    let mut z = u64::from(slot).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

impl<K: Ord + Copy> OrderedSet<K> {
    /// An empty set (it allocates nothing until the first key).
    pub(super) fn new() -> Self {
        OrderedSet { nodes: Vec::new(), root: NIL, free: NIL, len: 0 }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The smallest key at or above `key`.
    pub(super) fn first_at_least(&self, key: K) -> Option<K> {
        let mut at = self.root;
        let mut found = None;
        while at != NIL {
            let node = &self.nodes[at as usize];
            if node.key >= key {
                found = Some(node.key);
                at = node.left;
            } else {
                at = node.right;
            }
        }
        found
    }

    /// Add `key`, which the set does not hold.
    pub(super) fn insert(&mut self, key: K) -> Result<(), CoreError> {
        let slot = if self.free != NIL {
            let slot = self.free;
            self.free = self.nodes[slot as usize].left;
            self.nodes[slot as usize] = Node { key, priority: priority(slot), left: NIL, right: NIL };
            slot
        } else {
            // At most `u32::MAX - 1` keys: the packers index fewer items than that.
            let slot = self.nodes.len() as u32;
            let node = Node { key, priority: priority(slot), left: NIL, right: NIL };
            alloc::push(&mut self.nodes, node, "the ordered set of packs")?;
            slot
        };
        let (below, above) = self.split(self.root, key);
        let joined = self.merge(below, slot);
        self.root = self.merge(joined, above);
        self.len += 1;
        Ok(())
    }

    /// Take `key` out; whether the set held it.
    pub(super) fn remove(&mut self, key: K) -> bool {
        let before = self.len;
        self.root = self.remove_below(self.root, key);
        before != self.len
    }

    fn remove_below(&mut self, at: u32, key: K) -> u32 {
        if at == NIL {
            return NIL;
        }
        let node = self.nodes[at as usize];
        match key.cmp(&node.key) {
            std::cmp::Ordering::Less => {
                self.nodes[at as usize].left = self.remove_below(node.left, key);
                at
            }
            std::cmp::Ordering::Greater => {
                self.nodes[at as usize].right = self.remove_below(node.right, key);
                at
            }
            std::cmp::Ordering::Equal => {
                let merged = self.merge(node.left, node.right);
                self.nodes[at as usize].left = self.free;
                self.free = at;
                self.len -= 1;
                merged
            }
        }
    }

    /// The tree under `at` split into the keys below `key` and those at or above it.
    fn split(&mut self, at: u32, key: K) -> (u32, u32) {
        if at == NIL {
            return (NIL, NIL);
        }
        let node = self.nodes[at as usize];
        if node.key < key {
            let (below, above) = self.split(node.right, key);
            self.nodes[at as usize].right = below;
            (at, above)
        } else {
            let (below, above) = self.split(node.left, key);
            self.nodes[at as usize].left = above;
            (below, at)
        }
    }

    /// One tree of two, every key of `low` below every key of `high`.
    fn merge(&mut self, low: u32, high: u32) -> u32 {
        if low == NIL {
            return high;
        }
        if high == NIL {
            return low;
        }
        if self.nodes[low as usize].priority > self.nodes[high as usize].priority {
            let right = self.nodes[low as usize].right;
            self.nodes[low as usize].right = self.merge(right, high);
            low
        } else {
            let left = self.nodes[high as usize].left;
            self.nodes[high as usize].left = self.merge(low, left);
            high
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn it_answers_as_a_btreeset_does(steps in prop::collection::vec((any::<bool>(), 0u32..64, 0u32..8), 0..400)) {
            let mut set = OrderedSet::new();
            let mut model = BTreeSet::new();
            for (add, room, pack) in steps {
                let key = (room, pack);
                if add && !model.contains(&key) {
                    set.insert(key).unwrap();
                    model.insert(key);
                } else {
                    prop_assert_eq!(set.remove(key), model.remove(&key));
                }
                prop_assert_eq!(set.len(), model.len());
                for probe in 0..66u32 {
                    prop_assert_eq!(set.first_at_least((probe, 0)), model.range((probe, 0)..).next().copied());
                }
            }
        }
    }

    #[test]
    fn removed_nodes_are_reused() {
        let mut set = OrderedSet::new();
        for round in 0..100u64 {
            set.insert(round).unwrap();
            set.insert(round + 1000).unwrap();
            assert!(set.remove(round) && set.remove(round + 1000));
        }
        assert_eq!(set.nodes.len(), 2);
    }
}
