//! Packing sequence lengths into packs whose total length stays within a capacity.
//!
//! Plain Rust; the binding crate (rust/bind/packing.rs) is the only place that talks to Python.
//!
//! Four classic online/offline bin-packing rules, all deterministic:
//! - next fit: input order; when an item does not fit the current pack, close it and open a new one;
//! - first fit: input order; the earliest opened pack with room, else a new pack;
//! - first fit decreasing: first fit over the items by length descending, ties by index ascending;
//! - best fit decreasing: same order; the fitting pack with the least room left, ties to the
//!   earliest opened pack, else a new pack.
//!
//! Packs come out in the order they were opened, and the indexes inside a pack in the order they
//! were placed. First fit costs O(n log n) through a max-tree over the packs' remaining room; best
//! fit costs O(n log n) through an ordered set of `(room left, pack number)`.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::fmt;

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// Which packing rule to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    NextFit,
    FirstFit,
    FirstFitDecreasing,
    BestFitDecreasing,
}

impl Algorithm {
    /// The names the Python API uses: `next_fit`, `first_fit`, `ffd`, `bfd`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "next_fit" => Some(Self::NextFit),
            "first_fit" => Some(Self::FirstFit),
            "ffd" => Some(Self::FirstFitDecreasing),
            "bfd" => Some(Self::BestFitDecreasing),
            _ => None,
        }
    }
}

/// Why a set of lengths cannot be packed.
#[derive(Debug, PartialEq)]
pub enum PackError {
    /// One item alone is longer than a pack may be.
    TooLong { index: usize, length: u64, capacity: u64 },
    /// Out of memory, or interrupted.
    Core(CoreError),
}

impl From<CoreError> for PackError {
    fn from(error: CoreError) -> Self {
        PackError::Core(error)
    }
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::TooLong { index, length, capacity } => {
                write!(f, "lengths[{index}] = {length} is longer than pack_max_length ({capacity})")
            }
            PackError::Core(error) => error.fmt(f),
        }
    }
}

/// Pack `lengths` into packs of total length at most `capacity`; each pack lists item indexes.
///
/// Fails only when a single length exceeds `capacity` (the first such index is reported).
pub fn pack(lengths: &[u64], capacity: u64, algorithm: Algorithm) -> Result<Vec<Vec<usize>>, PackError> {
    pack_interruptible(lengths, capacity, algorithm, &Interrupt::NEVER)
}

/// [`pack`], stopping with `PackError::Core(CoreError::Interrupted)` when `interrupt` says so.
pub fn pack_interruptible(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<usize>>, PackError> {
    if let Some(index) = lengths.iter().position(|&length| length > capacity) {
        return Err(PackError::TooLong { index, length: lengths[index], capacity });
    }
    let packs = match algorithm {
        Algorithm::NextFit => next_fit(lengths, capacity, interrupt),
        Algorithm::FirstFit => first_fit(lengths, capacity, 0..lengths.len(), interrupt),
        Algorithm::FirstFitDecreasing => {
            first_fit(lengths, capacity, decreasing_order(lengths)?.into_iter(), interrupt)
        }
        Algorithm::BestFitDecreasing => best_fit(lengths, capacity, &decreasing_order(lengths)?, interrupt),
    }?;
    Ok(packs)
}

/// Item indexes by length descending, ties by index ascending.
fn decreasing_order(lengths: &[u64]) -> Result<Vec<usize>, CoreError> {
    let mut order = alloc::collect(0..lengths.len(), "packing order")?;
    // The index in the key makes the unstable (faster) sort deterministic.
    order.sort_unstable_by_key(|&index| (Reverse(lengths[index]), index));
    Ok(order)
}

/// A new pack holding `index`, added to `packs`.
fn open_pack(packs: &mut Vec<Vec<usize>>, index: usize) -> Result<(), CoreError> {
    let mut pack = alloc::with_capacity(1, "a pack")?;
    pack.push(index);
    alloc::push(packs, pack, "the packs")
}

fn next_fit(lengths: &[u64], capacity: u64, interrupt: &Interrupt) -> Result<Vec<Vec<usize>>, CoreError> {
    let mut packs: Vec<Vec<usize>> = Vec::new();
    let mut room = 0u64;
    for (index, &length) in lengths.iter().enumerate() {
        interrupt.every(index)?;
        match packs.last_mut() {
            Some(current) if length <= room => {
                alloc::push(current, index, "a pack")?;
                room -= length;
            }
            _ => {
                open_pack(&mut packs, index)?;
                room = capacity - length;
            }
        }
    }
    Ok(packs)
}

/// A max-tree over pack slots holding each pack's room left; unopened slots hold the full capacity.
///
/// Because packs open left to right, the leftmost slot with enough room is either the earliest
/// opened pack that fits or, if none does, the next slot to open: one descent answers first fit.
struct RoomTree {
    leaves: usize,
    nodes: Vec<u64>,
}

impl RoomTree {
    fn new(slots: usize, capacity: u64) -> Result<Self, CoreError> {
        let leaves = slots.max(1).next_power_of_two();
        let mut nodes = alloc::filled(2 * leaves, 0u64, "the packing tree")?;
        for node in &mut nodes[leaves..leaves + slots] {
            *node = capacity;
        }
        for node in (1..leaves).rev() {
            nodes[node] = nodes[2 * node].max(nodes[2 * node + 1]);
        }
        Ok(RoomTree { leaves, nodes })
    }

    /// The leftmost slot whose room is at least `length` (the caller guarantees one exists).
    fn leftmost_fitting(&self, length: u64) -> usize {
        let mut node = 1;
        while node < self.leaves {
            node = if self.nodes[2 * node] >= length { 2 * node } else { 2 * node + 1 };
        }
        node - self.leaves
    }

    fn room(&self, slot: usize) -> u64 {
        self.nodes[self.leaves + slot]
    }

    fn set_room(&mut self, slot: usize, room: u64) {
        let mut node = self.leaves + slot;
        self.nodes[node] = room;
        while node > 1 {
            node /= 2;
            self.nodes[node] = self.nodes[2 * node].max(self.nodes[2 * node + 1]);
        }
    }
}

fn first_fit(
    lengths: &[u64],
    capacity: u64,
    order: impl Iterator<Item = usize>,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<usize>>, CoreError> {
    // At most one pack per item, so `lengths.len()` slots always leave an unopened one free.
    let mut tree = RoomTree::new(lengths.len(), capacity)?;
    let mut packs: Vec<Vec<usize>> = Vec::new();
    for (step, index) in order.enumerate() {
        interrupt.every(step)?;
        let length = lengths[index];
        let slot = tree.leftmost_fitting(length);
        if slot == packs.len() {
            open_pack(&mut packs, index)?;
        } else {
            alloc::push(&mut packs[slot], index, "a pack")?;
        }
        let room = tree.room(slot) - length;
        tree.set_room(slot, room);
    }
    Ok(packs)
}

fn best_fit(
    lengths: &[u64],
    capacity: u64,
    order: &[usize],
    interrupt: &Interrupt,
) -> Result<Vec<Vec<usize>>, CoreError> {
    // Ordered by room left, then pack number: the first entry with room >= length is the best
    // fit, ties going to the earliest pack.
    let mut open: BTreeSet<(u64, usize)> = BTreeSet::new();
    let mut packs: Vec<Vec<usize>> = Vec::new();
    // (The ordered set's nodes are the one allocation here that cannot fail softly: std's
    // BTreeSet has no fallible insert. It holds at most one entry per pack.)
    for (step, &index) in order.iter().enumerate() {
        interrupt.every(step)?;
        let length = lengths[index];
        match open.range((length, 0)..).next().copied() {
            Some((room, slot)) => {
                open.remove(&(room, slot));
                open.insert((room - length, slot));
                alloc::push(&mut packs[slot], index, "a pack")?;
            }
            None => {
                open.insert((capacity - length, packs.len()));
                open_pack(&mut packs, index)?;
            }
        }
    }
    Ok(packs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Algorithm; 4] = [
        Algorithm::NextFit,
        Algorithm::FirstFit,
        Algorithm::FirstFitDecreasing,
        Algorithm::BestFitDecreasing,
    ];

    /// Quadratic textbook versions of the four rules, the oracle for the fast ones.
    fn slow_pack(lengths: &[u64], capacity: u64, algorithm: Algorithm) -> Vec<Vec<usize>> {
        let order: Vec<usize> = match algorithm {
            Algorithm::NextFit | Algorithm::FirstFit => (0..lengths.len()).collect(),
            _ => {
                let mut order: Vec<usize> = (0..lengths.len()).collect();
                order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
                order
            }
        };
        let mut packs: Vec<Vec<usize>> = Vec::new();
        let mut rooms: Vec<u64> = Vec::new();
        for index in order {
            let length = lengths[index];
            let chosen = match algorithm {
                Algorithm::NextFit => rooms.len().checked_sub(1).filter(|&last| rooms[last] >= length),
                Algorithm::FirstFit | Algorithm::FirstFitDecreasing => {
                    rooms.iter().position(|&room| room >= length)
                }
                Algorithm::BestFitDecreasing => {
                    let mut best: Option<usize> = None;
                    for (slot, &room) in rooms.iter().enumerate() {
                        if room >= length && best.is_none_or(|b| room < rooms[b]) {
                            best = Some(slot);
                        }
                    }
                    best
                }
            };
            match chosen {
                Some(slot) => {
                    packs[slot].push(index);
                    rooms[slot] -= length;
                }
                None => {
                    packs.push(vec![index]);
                    rooms.push(capacity - length);
                }
            }
        }
        packs
    }

    /// A small deterministic generator so the tests need no extra crate.
    fn pseudo_random_lengths(seed: u64, count: usize, max: u64) -> Vec<u64> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..count)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) % (max + 1)
            })
            .collect()
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(Algorithm::from_name("bfd"), Some(Algorithm::BestFitDecreasing));
        assert_eq!(Algorithm::from_name("ffd"), Some(Algorithm::FirstFitDecreasing));
        assert_eq!(Algorithm::from_name("first_fit"), Some(Algorithm::FirstFit));
        assert_eq!(Algorithm::from_name("next_fit"), Some(Algorithm::NextFit));
        assert_eq!(Algorithm::from_name("BFD"), None);
    }

    #[test]
    fn golden_examples() {
        let lengths = [5, 4, 3, 3, 2, 6];
        assert_eq!(
            pack(&lengths, 8, Algorithm::NextFit).unwrap(),
            vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]
        );
        assert_eq!(pack(&lengths, 8, Algorithm::FirstFit).unwrap(), vec![vec![0, 2], vec![1, 3], vec![4, 5]]);
        assert_eq!(
            pack(&lengths, 8, Algorithm::FirstFitDecreasing).unwrap(),
            vec![vec![5, 4], vec![0, 2], vec![1, 3]]
        );
        // Best fit puts the 2 into the 6-pack (room 2) rather than the 5-pack (room 3).
        assert_eq!(pack(&[5, 6, 2], 8, Algorithm::BestFitDecreasing).unwrap(), vec![vec![1, 2], vec![0]]);
        assert_eq!(pack(&[5, 6, 2], 8, Algorithm::FirstFitDecreasing).unwrap(), vec![vec![1, 2], vec![0]]);
        // In input order first fit takes pack 0 (room 3) although pack 1 (room 2) is tighter.
        assert_eq!(pack(&[5, 6, 2], 8, Algorithm::FirstFit).unwrap(), vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn too_long_reports_first_offender() {
        let err = pack(&[1, 9, 10], 8, Algorithm::BestFitDecreasing).unwrap_err();
        assert_eq!(err, PackError::TooLong { index: 1, length: 9, capacity: 8 });
        assert_eq!(err.to_string(), "lengths[1] = 9 is longer than pack_max_length (8)");
    }

    #[test]
    fn empty_input_gives_no_packs() {
        for algorithm in ALL {
            assert!(pack(&[], 8, algorithm).unwrap().is_empty());
        }
    }

    #[test]
    fn zero_lengths_join_the_first_pack_that_has_room() {
        for algorithm in [Algorithm::FirstFit, Algorithm::FirstFitDecreasing] {
            assert_eq!(pack(&[8, 0, 8, 0], 8, algorithm).unwrap(), slow_pack(&[8, 0, 8, 0], 8, algorithm));
        }
        assert_eq!(pack(&[0, 0, 0], 0, Algorithm::BestFitDecreasing).unwrap(), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let big = u64::MAX / 2;
        for algorithm in ALL {
            let packs = pack(&[big, 1, big, big - 1], big, algorithm).unwrap();
            assert_eq!(packs, slow_pack(&[big, 1, big, big - 1], big, algorithm));
        }
    }

    #[test]
    fn matches_the_quadratic_oracle_and_respects_the_cap() {
        for seed in 0..200u64 {
            let count = (seed % 60) as usize;
            let capacity = 1 + seed % 50;
            let lengths = pseudo_random_lengths(seed, count, capacity);
            for algorithm in ALL {
                let packs = pack(&lengths, capacity, algorithm).unwrap();
                assert_eq!(packs, slow_pack(&lengths, capacity, algorithm), "seed {seed}");
                let mut seen = vec![false; count];
                for p in &packs {
                    assert!(!p.is_empty());
                    assert!(p.iter().map(|&i| lengths[i]).sum::<u64>() <= capacity);
                    for &i in p {
                        assert!(!seen[i]);
                        seen[i] = true;
                    }
                }
                assert!(seen.into_iter().all(|s| s));
            }
        }
    }
}
