//! Where the planners find the next sequence a step can take without visiting the ones it cannot.
//!
//! A step's loop visits the waiting sequences in order and places those that fit; the ones that
//! do not fit wait for the next step. Visiting every waiting sequence in every step is quadratic
//! (thousands of steps of a few sequences each, over a hundred thousand waiting ones), so the
//! planners ask instead for the first waiting position, from some position on, that can be
//! placed — an answer the visits would reach, with the visits in between all waiting.
//!
//! * [`MinTree`]: a segment tree over positions holding one number per waiting position (its
//!   share of tokens, or its time) and the least of them per node; a placed position holds
//!   "none". [`MinTree::first`] descends to the first position that a caller's test accepts,
//!   skipping every node whose least number the test already refuses.
//! * [`Stairs`]: the groups of one degree in a step, ordered by one of their two loads (tokens or
//!   time), with the least of the other over every prefix: "the fewest tokens among the groups
//!   whose time leaves room for this sequence". With it a test on a node is exact for the
//!   node's last position, where the room is largest, so a node is entered in vain only when
//!   the room changes inside it: once per group per step and per sequence placed, which keeps a
//!   whole plan near `n log n` for any cost.
use crate::alloc;
use crate::error::CoreError;

/// Numbers a [`MinTree`] holds: ordered, with a largest value that stands for "placed".
pub(super) trait Least: Copy + PartialOrd {
    const NONE: Self;
}

impl Least for u64 {
    const NONE: u64 = u64::MAX;
}

impl Least for f64 {
    const NONE: f64 = f64::INFINITY;
}

#[inline]
fn least<V: Least>(a: V, b: V) -> V {
    if b < a {
        b
    } else {
        a
    }
}

/// The least number of every node over positions `0..len`; a placed position holds
/// [`Least::NONE`] (no real number reaches it: shares are below `2**63`, times are finite).
pub(super) struct MinTree<V> {
    /// Leaves start here (a power of two, at least 1).
    size: usize,
    len: usize,
    tree: Vec<V>,
}

impl<V: Least> MinTree<V> {
    pub fn new(values: impl ExactSizeIterator<Item = V>, what: &'static str) -> Result<Self, CoreError> {
        let len = values.len();
        let size = len.max(1).next_power_of_two();
        let mut tree = alloc::filled(2 * size, V::NONE, what)?;
        for (position, value) in values.enumerate() {
            tree[size + position] = value;
        }
        for node in (1..size).rev() {
            tree[node] = least(tree[2 * node], tree[2 * node + 1]);
        }
        Ok(MinTree { size, len, tree })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Set the number at `position` ([`Least::NONE`]: placed). The walk up stops where a
    /// node's least number stays what it was (most placed positions were not their node's
    /// least): the placements of a plan are this tree's hot path.
    pub fn set(&mut self, position: usize, value: V) {
        let mut node = self.size + position;
        self.tree[node] = value;
        while node > 1 {
            node /= 2;
            let updated = least(self.tree[2 * node], self.tree[2 * node + 1]);
            if updated == self.tree[node] {
                return;
            }
            self.tree[node] = updated;
        }
    }

    /// The first position in `from..to` whose number `accept(position, number)` takes, or
    /// `None`. `hopeful(last, least)` is asked of a node before its positions: `last` is the
    /// node's last position inside the range and `least` its least number; it must answer true
    /// whenever some position of the node could be accepted (false prunes the node).
    pub fn first(
        &self,
        from: usize,
        to: usize,
        hopeful: &mut impl FnMut(usize, V) -> bool,
        accept: &mut impl FnMut(usize, V) -> bool,
    ) -> Option<usize> {
        let to = to.min(self.len);
        if from >= to {
            return None;
        }
        self.descend(1, 0, self.size, from, to, hopeful, accept)
    }

    #[allow(clippy::too_many_arguments)]
    fn descend(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        from: usize,
        to: usize,
        hopeful: &mut impl FnMut(usize, V) -> bool,
        accept: &mut impl FnMut(usize, V) -> bool,
    ) -> Option<usize> {
        if hi <= from || lo >= to {
            return None;
        }
        let value = self.tree[node];
        if value >= V::NONE || !hopeful(hi.min(to) - 1, value) {
            return None;
        }
        if hi - lo == 1 {
            return accept(lo, value).then_some(lo);
        }
        let mid = (lo + hi) / 2;
        self.descend(2 * node, lo, mid, from, to, hopeful, accept)
            .or_else(|| self.descend(2 * node + 1, mid, hi, from, to, hopeful, accept))
    }

    /// The first position in `from..to` not yet placed.
    pub fn first_waiting(&self, from: usize, to: usize) -> Option<usize> {
        self.first(from, to, &mut |_, _| true, &mut |_, _| true)
    }
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    key: u64,
    value: u64,
    /// The least value of the subtree.
    least: u64,
    priority: u32,
    left: u32,
    right: u32,
}

/// Up to this many groups, a scan of them answers faster than the treap.
const SMALL: usize = 8;

/// Groups ordered by `(key, id)`, each with a value, answering "the least value among the
/// groups of a prefix of that order" in `O(log groups)`: a treap (a binary search tree kept
/// balanced by random priorities, here a hash of the id so plans stay deterministic) whose
/// nodes carry their subtree's least value. Node `id` is the group's own slot. Up to
/// [`SMALL`] groups (8 ranks and fewer, the common case), a list scanned instead.
pub(super) struct Stairs {
    nodes: Vec<Node>,
    present: Vec<bool>,
    root: u32,
    /// While the groups are few: `(key, value)` by id, and the treap is empty.
    few: Vec<(u64, u64)>,
    treap: bool,
}

impl Default for Stairs {
    fn default() -> Self {
        Stairs { nodes: Vec::new(), present: Vec::new(), root: NIL, few: Vec::new(), treap: false }
    }
}

/// A well-mixed 32-bit hash of `id` (the treap's priority).
fn priority(id: u32) -> u32 {
    let mut x = (id as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) as u32
}

impl Stairs {
    /// Forget every group (the allocation stays for the next step).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.present.clear();
        self.root = NIL;
        self.few.clear();
        self.treap = false;
    }

    fn least_of(&self, node: u32) -> u64 {
        if node == NIL {
            u64::MAX
        } else {
            self.nodes[node as usize].least
        }
    }

    fn update(&mut self, node: u32) {
        let n = self.nodes[node as usize];
        let least = n.value.min(self.least_of(n.left)).min(self.least_of(n.right));
        self.nodes[node as usize].least = least;
    }

    /// The subtrees of `node` before `(key, id)` and from it on.
    fn split(&mut self, node: u32, key: (u64, u32)) -> (u32, u32) {
        if node == NIL {
            return (NIL, NIL);
        }
        let n = self.nodes[node as usize];
        if (n.key, node) < key {
            let (left, right) = self.split(n.right, key);
            self.nodes[node as usize].right = left;
            self.update(node);
            (node, right)
        } else {
            let (left, right) = self.split(n.left, key);
            self.nodes[node as usize].left = right;
            self.update(node);
            (left, node)
        }
    }

    /// Every node of `a` comes before every node of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].priority > self.nodes[b as usize].priority {
            let right = self.nodes[a as usize].right;
            let merged = self.merge(right, b);
            self.nodes[a as usize].right = merged;
            self.update(a);
            a
        } else {
            let left = self.nodes[b as usize].left;
            let merged = self.merge(a, left);
            self.nodes[b as usize].left = merged;
            self.update(b);
            b
        }
    }

    /// Group `id` with `key` and `value`, or its new key and value if it is already here. Ids
    /// come in order: a new group's id is the number of groups so far.
    pub fn put(&mut self, id: u32, key: u64, value: u64) -> Result<(), CoreError> {
        if !self.treap {
            let slot = id as usize;
            if slot < self.few.len() {
                self.few[slot] = (key, value);
                return Ok(());
            }
            if slot < SMALL {
                alloc::push(&mut self.few, (key, value), "a step's groups")?;
                return Ok(());
            }
            self.treap = true;
            let few = std::mem::take(&mut self.few);
            for (g, &(key, value)) in few.iter().enumerate() {
                self.insert(g as u32, key, value)?;
            }
            self.few = few;
            self.few.clear();
        }
        self.insert(id, key, value)
    }

    fn insert(&mut self, id: u32, key: u64, value: u64) -> Result<(), CoreError> {
        let slot = id as usize;
        if slot >= self.nodes.len() {
            let blank = Node { key: 0, value: 0, least: 0, priority: 0, left: NIL, right: NIL };
            alloc::room_for(&mut self.nodes, slot + 1, "a step's groups")?;
            alloc::room_for(&mut self.present, slot + 1, "a step's groups")?;
            self.nodes.resize(slot + 1, blank);
            self.present.resize(slot + 1, false);
        }
        if self.present[slot] {
            self.root = self.erase(self.root, (self.nodes[slot].key, id));
        }
        self.nodes[slot] = Node { key, value, least: value, priority: priority(id), left: NIL, right: NIL };
        self.present[slot] = true;
        self.root = self.insert_at(self.root, id);
        Ok(())
    }

    /// The subtree `node` without the node of `key` (which it holds): one walk down to it, and
    /// its two subtrees merged in its place.
    fn erase(&mut self, node: u32, key: (u64, u32)) -> u32 {
        let n = self.nodes[node as usize];
        let here = (n.key, node);
        if here == key {
            return self.merge(n.left, n.right);
        }
        if key < here {
            let left = self.erase(n.left, key);
            self.nodes[node as usize].left = left;
        } else {
            let right = self.erase(n.right, key);
            self.nodes[node as usize].right = right;
        }
        self.update(node);
        node
    }

    /// The subtree `node` with node `id` added: one walk down to where its priority belongs,
    /// and the subtree there split around it.
    fn insert_at(&mut self, node: u32, id: u32) -> u32 {
        if node == NIL {
            return id;
        }
        let (n, new) = (self.nodes[node as usize], self.nodes[id as usize]);
        if new.priority > n.priority {
            let (left, right) = self.split(node, (new.key, id));
            self.nodes[id as usize].left = left;
            self.nodes[id as usize].right = right;
            self.update(id);
            return id;
        }
        if (new.key, id) < (n.key, node) {
            let left = self.insert_at(n.left, id);
            self.nodes[node as usize].left = left;
        } else {
            let right = self.insert_at(n.right, id);
            self.nodes[node as usize].right = right;
        }
        self.update(node);
        node
    }

    /// The least value of the groups whose key `within` accepts, or `u64::MAX` when none does.
    /// `within` must accept a prefix of the keys (true, then false, as keys grow).
    pub fn least_within(&self, within: impl Fn(u64) -> bool) -> u64 {
        let mut best = u64::MAX;
        if !self.treap {
            for &(key, value) in &self.few {
                if value < best && within(key) {
                    best = value;
                }
            }
            return best;
        }
        let mut node = self.root;
        while node != NIL {
            let n = &self.nodes[node as usize];
            if within(n.key) {
                best = best.min(n.value).min(self.least_of(n.left));
                node = n.right;
            } else {
                node = n.left;
            }
        }
        best
    }
}

/// The groups of one degree in a step, in the order they were opened, answering "the first
/// group with at most `room` tokens whose time a test accepts" (first fit in two dimensions, as
/// Megatron-LM's scheduler scans its groups): up to [`SMALL`] groups a scan, beyond them a
/// segment tree holding the fewest tokens and the least time of every node, which a descent
/// skips whenever either already fails.
#[derive(Default)]
pub(super) struct FirstFit {
    /// `(tokens, time)` of every group, by slot.
    groups: Vec<(u64, f64)>,
    /// Leaves start here once the tree is built (0 while the groups are few).
    size: usize,
    tree: Vec<(u64, f64)>,
}

impl FirstFit {
    pub fn clear(&mut self) {
        self.groups.clear();
        self.size = 0;
        self.tree.clear();
    }

    fn pull(&mut self, node: usize) {
        let (a, b) = (self.tree[2 * node], self.tree[2 * node + 1]);
        self.tree[node] = (a.0.min(b.0), least(a.1, b.1));
    }

    /// Group `slot` (a new one: the number of groups so far) now holds `tokens` and `time`.
    pub fn put(&mut self, slot: usize, tokens: u64, time: f64) -> Result<(), CoreError> {
        if slot == self.groups.len() {
            alloc::push(&mut self.groups, (tokens, time), "a step's groups")?;
        } else {
            self.groups[slot] = (tokens, time);
        }
        if self.groups.len() <= SMALL {
            return Ok(());
        }
        if self.size < self.groups.len() {
            // (Re)build with room to double, so a step of g groups rebuilds O(log g) times.
            self.size = (2 * self.groups.len()).next_power_of_two();
            self.tree = alloc::filled(2 * self.size, (u64::MAX, f64::INFINITY), "a step's groups")?;
            self.tree[self.size..self.size + self.groups.len()].copy_from_slice(&self.groups);
            for node in (1..self.size).rev() {
                self.pull(node);
            }
            return Ok(());
        }
        let mut node = self.size + slot;
        self.tree[node] = (tokens, time);
        while node > 1 {
            node /= 2;
            self.pull(node);
        }
        Ok(())
    }

    /// The first group (by slot) holding at most `room` tokens whose time `accept` takes;
    /// `accept` must take every time below one it takes.
    pub fn first(&self, room: u64, accept: impl Fn(f64) -> bool) -> Option<usize> {
        if self.size == 0 {
            return self.groups.iter().position(|&(tokens, time)| tokens <= room && accept(time));
        }
        self.descend(1, room, &accept)
    }

    fn descend(&self, node: usize, room: u64, accept: &impl Fn(f64) -> bool) -> Option<usize> {
        let (tokens, time) = self.tree[node];
        if tokens > room || !accept(time) {
            return None;
        }
        if node >= self.size {
            return Some(node - self.size);
        }
        self.descend(2 * node, room, accept).or_else(|| self.descend(2 * node + 1, room, accept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_tree_finds_what_a_scan_finds(
            values in prop::collection::vec(0u64..50, 0..80),
            placed in prop::collection::vec(any::<bool>(), 80),
            from in 0usize..90,
            to in 0usize..90,
            threshold in 0u64..60,
        ) {
            let mut tree = MinTree::new(values.iter().copied(), "test").unwrap();
            for (position, &gone) in placed.iter().enumerate().take(values.len()) {
                if gone {
                    tree.set(position, u64::NONE);
                }
            }
            let found = tree.first(from, to, &mut |_, least| least <= threshold, &mut |_, v| v <= threshold);
            let scan = (from..to.min(values.len()))
                .find(|&p| !placed[p] && values[p] <= threshold);
            prop_assert_eq!(found, scan);
            let waiting = (from..to.min(values.len())).find(|&p| !placed[p]);
            prop_assert_eq!(tree.first_waiting(from, to), waiting);
        }

        #[test]
        fn first_fit_finds_the_first_group_a_scan_finds(
            moves in prop::collection::vec((0usize..40, 0u64..40, 0u32..40), 0..120),
            room in 0u64..45,
            bound in 0u32..45,
        ) {
            let mut fit = FirstFit::default();
            let mut groups: Vec<(u64, f64)> = Vec::new();
            for &(slot, tokens, time) in &moves {
                let slot = slot.min(groups.len());
                fit.put(slot, tokens, time as f64).unwrap();
                if slot == groups.len() {
                    groups.push((tokens, time as f64));
                } else {
                    groups[slot] = (tokens, time as f64);
                }
                let scan = groups.iter().position(|&(t, w)| t <= room && w <= bound as f64);
                prop_assert_eq!(fit.first(room, |w| w <= bound as f64), scan);
            }
        }

        #[test]
        fn the_stairs_answer_as_a_scan(
            moves in prop::collection::vec((0u32..30, 0u64..40, 0u64..40), 0..120),
            bound in 0u64..45,
        ) {
            let mut stairs = Stairs::default();
            let mut groups: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
            for (round, &(id, key, value)) in moves.iter().enumerate() {
                // A new group's id is the number so far; an old one's is any of them.
                let id = id.min(groups.len() as u32);
                stairs.put(id, key, value).unwrap();
                groups.insert(id, (key, value));
                if round % 41 == 40 {
                    stairs.clear();
                    groups.clear();
                }
                let scan = groups.values().filter(|(k, _)| *k <= bound).map(|&(_, v)| v).min().unwrap_or(u64::MAX);
                prop_assert_eq!(stairs.least_within(|k| k <= bound), scan);
            }
        }
    }
}
