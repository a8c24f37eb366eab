//! Next fit and first fit: the pack of each placement, given the lengths in placement order.
use super::Room;
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// The pack of every placement and how many packs were opened.
pub(super) type Placements = (Vec<u32>, usize);

/// Next fit: the current pack if the item fits, else a new pack.
pub(super) fn next_fit<R: Room>(
    lengths: impl ExactSizeIterator<Item = R>,
    capacity: R,
    interrupt: &Interrupt,
) -> Result<Placements, CoreError> {
    let mut step_pack = alloc::with_capacity(lengths.len(), "the placements")?;
    let mut packs = 0u32;
    let mut room = R::ZERO;
    for (step, length) in lengths.enumerate() {
        interrupt.every(step)?;
        if packs == 0 || length > room {
            packs += 1;
            room = capacity - length;
        } else {
            room = room - length;
        }
        step_pack.push(packs - 1);
    }
    Ok((step_pack, packs as usize))
}

/// A max-tree over pack slots holding each pack's room left; unopened slots hold the full capacity.
///
/// Because packs open left to right, the leftmost slot with enough room is either the earliest
/// opened pack that fits or, if none does, the next slot to open: one descent answers first fit.
/// Slots past the last real one hold zero, so nothing that an earlier slot can take lands there.
pub(super) struct RoomTree<R> {
    leaves: usize,
    nodes: Vec<R>,
}

impl<R: Room> RoomTree<R> {
    pub(super) fn new(slots: usize, capacity: R) -> Result<Self, CoreError> {
        let leaves = slots.max(1).next_power_of_two();
        let mut nodes = alloc::filled(2 * leaves, R::ZERO, "the packing tree")?;
        nodes[leaves..leaves + slots].fill(capacity);
        for node in (1..leaves).rev() {
            nodes[node] = nodes[2 * node].max(nodes[2 * node + 1]);
        }
        Ok(RoomTree { leaves, nodes })
    }

    /// The leftmost slot whose room is at least `length` (the caller guarantees one exists).
    #[inline]
    pub(super) fn leftmost_fitting(&self, length: R) -> usize {
        let mut node = 1;
        while node < self.leaves {
            let left = 2 * node;
            // Branch-free: the way down is as good as random, so a branch would mispredict.
            node = left + usize::from(self.nodes[left] < length);
        }
        node - self.leaves
    }

    /// Take `length` out of `slot`'s room.
    #[inline]
    pub(super) fn take(&mut self, slot: usize, length: R) {
        let room = self.nodes[self.leaves + slot] - length;
        self.lower(slot, room);
    }

    /// Set `slot`'s value to `value`, which is not above its current one.
    #[inline]
    pub(super) fn lower(&mut self, slot: usize, value: R) {
        let mut node = self.leaves + slot;
        debug_assert!(value <= self.nodes[node]);
        self.nodes[node] = value;
        while node > 1 {
            let parent = node / 2;
            let largest = self.nodes[node].max(self.nodes[node ^ 1]);
            // Rooms only shrink: once a parent keeps its value, so do all above it.
            if self.nodes[parent] == largest {
                break;
            }
            self.nodes[parent] = largest;
            node = parent;
        }
    }
}

/// First fit: the earliest opened pack with room, else a new pack. `slots` bounds the packs.
pub(super) fn first_fit<R: Room>(
    lengths: impl ExactSizeIterator<Item = R>,
    capacity: R,
    slots: usize,
    interrupt: &Interrupt,
) -> Result<Placements, CoreError> {
    let mut tree = RoomTree::new(slots, capacity)?;
    let mut step_pack = alloc::with_capacity(lengths.len(), "the placements")?;
    let mut packs = 0usize;
    for (step, length) in lengths.enumerate() {
        interrupt.every(step)?;
        let slot = tree.leftmost_fitting(length);
        // The leftmost fit is an open pack or the first unopened slot.
        packs = packs.max(slot + 1);
        tree.take(slot, length);
        step_pack.push(slot as u32);
    }
    Ok((step_pack, packs))
}
