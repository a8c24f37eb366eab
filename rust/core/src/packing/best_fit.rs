//! Best fit over lengths in decreasing order: the fitting pack with the least room left, ties to
//! the earliest opened, else a new pack.
//!
//! Two structures give the same answer: per-room buckets when the capacity is small against the
//! item count (every real batch), an ordered set of `(room, pack)` otherwise.
use super::first_fit::Placements;
use super::ordered::OrderedSet;
use super::Room;
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// Best fit over `lengths` (descending; `shortest` is the last and smallest).
pub(super) fn best_fit<R: Room>(
    lengths: &[R],
    capacity: R,
    shortest: R,
    interrupt: &Interrupt,
) -> Result<Placements, CoreError> {
    if buckets_pay(lengths.len(), capacity.to_u64()) {
        by_buckets(lengths, capacity, shortest, interrupt)
    } else {
        by_ordered_set(lengths, capacity, shortest, interrupt)
    }
}

/// Whether one bucket per possible room costs less than it saves: when there are not many more
/// rooms than items, and not so few items that setting the buckets up would dominate.
pub(super) fn buckets_pay(n: usize, capacity: u64) -> bool {
    n >= 64 && capacity <= 4 * n as u64 + 4096
}

/// Which rooms have packs: one bit per room, and above it one bit per nonzero word, up to a
/// single word, so the first room at or after a given one takes a few word reads.
pub(super) struct Occupancy {
    levels: Vec<Vec<u64>>,
}

impl Occupancy {
    pub(super) fn new(rooms: usize) -> Result<Self, CoreError> {
        let mut levels = Vec::new();
        let mut bits = rooms;
        loop {
            let words = bits.div_ceil(64).max(1);
            levels.push(alloc::zeroed::<u64>(words, "the room bitset")?);
            if words == 1 {
                return Ok(Occupancy { levels });
            }
            bits = words;
        }
    }

    pub(super) fn insert(&mut self, room: usize) {
        let mut position = room;
        for level in &mut self.levels {
            let word = &mut level[position / 64];
            let was_empty = *word == 0;
            *word |= 1 << (position % 64);
            if !was_empty {
                return;
            }
            position /= 64;
        }
    }

    pub(super) fn remove(&mut self, room: usize) {
        let mut position = room;
        for level in &mut self.levels {
            let word = &mut level[position / 64];
            *word &= !(1 << (position % 64));
            if *word != 0 {
                return;
            }
            position /= 64;
        }
    }

    /// The smallest occupied room at or above `room`.
    #[inline]
    pub(super) fn first_from(&self, room: usize) -> Option<usize> {
        let mut level = 0;
        let mut position = room;
        // Up until a word has a bit at or after the position...
        let found = loop {
            let words = self.levels.get(level)?;
            let word = *words.get(position / 64)?;
            let later = word & (u64::MAX << (position % 64));
            if later != 0 {
                break (position / 64) * 64 + later.trailing_zeros() as usize;
            }
            position = position / 64 + 1;
            level += 1;
        };
        // ...then down through the first set bit of each word below.
        let mut position = found;
        while level > 0 {
            level -= 1;
            position = position * 64 + self.levels[level][position].trailing_zeros() as usize;
        }
        Some(position)
    }
}

/// A min-heap of pack numbers (the packs that have one given room left).
fn heap_push(heap: &mut Vec<u32>, pack: u32) -> Result<(), CoreError> {
    alloc::push(heap, pack, "a room's packs")?;
    let mut at = heap.len() - 1;
    while at > 0 {
        let parent = (at - 1) / 2;
        if heap[parent] <= pack {
            break;
        }
        heap[at] = heap[parent];
        at = parent;
    }
    heap[at] = pack;
    Ok(())
}

/// The smallest pack number of a heap, taken out (`None` when empty).
fn heap_pop(heap: &mut Vec<u32>) -> Option<u32> {
    let last = heap.pop()?;
    let Some(&top) = heap.first() else {
        return Some(last);
    };
    let mut at = 0;
    loop {
        let mut child = 2 * at + 1;
        if child >= heap.len() {
            break;
        }
        if child + 1 < heap.len() && heap[child + 1] < heap[child] {
            child += 1;
        }
        if heap[child] >= last {
            break;
        }
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = last;
    Some(top)
}

/// Best fit with a bucket (a heap of pack numbers) per room and a bitset of the nonempty ones.
pub(super) fn by_buckets<R: Room>(
    lengths: &[R],
    capacity: R,
    shortest: R,
    interrupt: &Interrupt,
) -> Result<Placements, CoreError> {
    let rooms = capacity.to_u64() as usize + 1;
    let mut buckets: Vec<Vec<u32>> = alloc::with_capacity(rooms, "the room buckets")?;
    buckets.resize_with(rooms, Vec::new);
    let mut occupied = Occupancy::new(rooms)?;
    let mut step_pack = alloc::with_capacity(lengths.len(), "the placements")?;
    let mut packs = 0u32;
    let shortest = shortest.to_u64() as usize;
    for (step, &length) in lengths.iter().enumerate() {
        interrupt.every(step)?;
        let length = length.to_u64() as usize;
        let found = occupied.first_from(length).and_then(|room| {
            let pack = heap_pop(&mut buckets[room])?;
            if buckets[room].is_empty() {
                occupied.remove(room);
            }
            Some((pack, room))
        });
        let (pack, room_left) = match found {
            Some((pack, room)) => (pack, room - length),
            None => {
                packs += 1;
                (packs - 1, rooms - 1 - length)
            }
        };
        step_pack.push(pack);
        // A pack with less room than the shortest length can take nothing more.
        if room_left >= shortest {
            heap_push(&mut buckets[room_left], pack)?;
            occupied.insert(room_left);
        }
    }
    Ok((step_pack, packs as usize))
}

/// Best fit with an ordered set of `(room left, pack number)`: the first entry with room at
/// least the length is the best fit, ties going to the earliest pack.
pub(super) fn by_ordered_set<R: Room>(
    lengths: &[R],
    capacity: R,
    shortest: R,
    interrupt: &Interrupt,
) -> Result<Placements, CoreError> {
    let mut open = OrderedSet::<(R, u32)>::new();
    let mut step_pack = alloc::with_capacity(lengths.len(), "the placements")?;
    let mut packs = 0u32;
    for (step, &length) in lengths.iter().enumerate() {
        interrupt.every(step)?;
        let (pack, room_left) = match open.first_at_least((length, 0)) {
            Some((room, pack)) => {
                open.remove((room, pack));
                (pack, room - length)
            }
            None => {
                packs += 1;
                (packs - 1, capacity - length)
            }
        };
        step_pack.push(pack);
        if room_left >= shortest {
            open.insert((room_left, pack))?;
        }
    }
    Ok((step_pack, packs as usize))
}
