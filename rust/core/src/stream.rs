//! A streaming packer: lengths arrive one at a time and leave in packs of bounded footprint,
//! with a bounded number of packs open at once.
//!
//! The rule (planning spec, "Streaming packer"): an arriving item goes to the open pack of its
//! key with the least room left after placing it, room measured in the footprint (`Sum`: the
//! capacity minus the sum of lengths; `Padded`: the capacity minus count × longest), ties to the
//! earliest opened pack. When no open pack of its key can take it and `max_open` packs (of all
//! keys) are open, the fullest open pack (least room, ties to the earliest opened) is closed
//! first; then a new pack opens with the item. A pack that reaches the capacity or
//! `max_sequences` closes at once. Items are numbered by arrival from 0.
//!
//! Memory is bounded by the open packs, whatever the stream's length. The search is a scan of
//! the open packs: O(`max_open`) per item. Every change of state is all-or-nothing: an item
//! that is refused, or an allocation that fails, leaves the packer as it was, and
//! [`StreamPacker::add_many`] works on a copy that replaces the packer only when the whole batch
//! went in.
use std::fmt;

use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// What a pack is charged against the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Footprint {
    /// The sum of its lengths (variable-length attention).
    Sum,
    /// Its count times its longest length (every sample padded to the longest).
    Padded,
}

/// The packer's fixed settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// The largest footprint a pack may have, >= 1.
    pub capacity: u64,
    /// The most packs open at once, >= 1.
    pub max_open: usize,
    /// The most items in a pack, >= 1 when given.
    pub max_sequences: Option<u64>,
    pub footprint: Footprint,
}

/// Why the packer refused a request.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamError {
    /// A setting out of range (`what` names it).
    BadConfig { what: &'static str, value: u64 },
    /// A length of zero; `position` is the item's place in an `add_many` batch.
    ZeroLength { position: Option<usize> },
    /// A length whose footprint alone is above the capacity.
    TooLong { position: Option<usize>, length: u64, capacity: u64 },
    /// `add_many` with keys of another length than the lengths.
    KeysLength { lengths: usize, keys: usize },
    /// A saved state that no packer with these settings could have reached.
    BadState(&'static str),
    /// The packer has numbered [`MAX_ITEMS`] items: no index is left for another one.
    Exhausted,
    /// Out of memory, or interrupted.
    Core(CoreError),
}

/// The most items one packer numbers: every index fits a signed 64-bit integer (an int64 array).
/// Counting one item per nanosecond would take about 300 years to get there; a saved state
/// claiming more is refused when it is loaded.
pub const MAX_ITEMS: u64 = 1 << 63;

impl From<CoreError> for StreamError {
    fn from(error: CoreError) -> Self {
        StreamError::Core(error)
    }
}

fn length_name(position: Option<usize>) -> String {
    match position {
        Some(position) => format!("lengths[{position}]"),
        None => "length".to_owned(),
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::BadConfig { what, value } => write!(f, "{what} must be >= 1, got {value}"),
            StreamError::ZeroLength { position } => {
                write!(f, "{} must be >= 1, got 0", length_name(*position))
            }
            StreamError::TooLong { position, length, capacity } => {
                write!(f, "{} = {length} is longer than max_token_len ({capacity})", length_name(*position))
            }
            StreamError::KeysLength { lengths, keys } => {
                write!(f, "keys has {keys} items but lengths has {lengths}; give one key per length")
            }
            StreamError::BadState(what) => write!(f, "not a StreamPacker state: {what}"),
            StreamError::Exhausted => {
                write!(f, "this packer has numbered 2**63 items, the most it can; start a new one")
            }
            StreamError::Core(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for StreamError {}

/// One open pack as a saved state holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedPack {
    pub key: u64,
    /// The sum of its lengths.
    pub sum: u64,
    /// Its longest length.
    pub longest: u64,
    /// Its items, in the order they were placed.
    pub items: Vec<u64>,
}

/// Everything a packer needs to go on where it stopped (see [`StreamPacker::state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamState {
    pub config: StreamConfig,
    /// The number the next accepted item gets.
    pub next_index: u64,
    /// The open packs, in opening order.
    pub packs: Vec<SavedPack>,
}

/// The streaming packer (see the module documentation for the rule).
///
/// ```
/// use seqbalance_core::stream::{Footprint, StreamConfig, StreamPacker};
/// let config = StreamConfig { capacity: 10, max_open: 2, max_sequences: None, footprint: Footprint::Sum };
/// let mut packer = StreamPacker::new(config).unwrap();
/// assert!(packer.add(6, 0).unwrap().is_empty());
/// assert_eq!(packer.add(4, 0).unwrap(), vec![vec![0, 1]]); // full: closed at once
/// assert!(packer.add(7, 0).unwrap().is_empty());
/// assert_eq!(packer.flush(), vec![vec![2]]);
/// ```
#[derive(Clone, Debug)]
pub struct StreamPacker {
    config: StreamConfig,
    next_index: u64,
    // The open packs in opening order, as parallel arrays so the search scans plain integers.
    keys: Vec<u64>,
    /// The capacity minus the footprint.
    rooms: Vec<u64>,
    sums: Vec<u64>,
    longest: Vec<u64>,
    items: Vec<Vec<u64>>,
}

/// Where an item goes.
enum Placement {
    /// Into the open pack at this position.
    Join(usize),
    /// Into a new pack, after closing the open pack at this position when one is given.
    Open { evict: Option<usize> },
}

impl StreamPacker {
    /// A packer with no open pack; refuses a capacity, `max_open` or `max_sequences` of zero.
    pub fn new(config: StreamConfig) -> Result<Self, StreamError> {
        if config.capacity == 0 {
            return Err(StreamError::BadConfig { what: "pack_max_length", value: 0 });
        }
        if config.max_open == 0 {
            return Err(StreamError::BadConfig { what: "max_open", value: 0 });
        }
        if config.max_sequences == Some(0) {
            return Err(StreamError::BadConfig { what: "max_sequences", value: 0 });
        }
        Ok(StreamPacker {
            config,
            next_index: 0,
            keys: Vec::new(),
            rooms: Vec::new(),
            sums: Vec::new(),
            longest: Vec::new(),
            items: Vec::new(),
        })
    }

    pub fn config(&self) -> StreamConfig {
        self.config
    }

    /// How many packs are open.
    pub fn open_packs(&self) -> usize {
        self.items.len()
    }

    /// The number the next accepted item gets (the number of items accepted so far).
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// The open packs' items, in opening order.
    pub fn open_items(&self) -> impl ExactSizeIterator<Item = &[u64]> {
        self.items.iter().map(Vec::as_slice)
    }

    /// The open packs' keys, in opening order.
    pub fn open_keys(&self) -> &[u64] {
        &self.keys
    }

    /// Why `length` cannot be added, if it cannot.
    pub fn check_length(&self, length: u64, position: Option<usize>) -> Result<(), StreamError> {
        if length == 0 {
            return Err(StreamError::ZeroLength { position });
        }
        if length > self.config.capacity {
            return Err(StreamError::TooLong { position, length, capacity: self.config.capacity });
        }
        Ok(())
    }

    /// Room left in the open pack at `at` after placing `length` in it, if it fits.
    #[inline]
    fn room_after(&self, at: usize, length: u64) -> Option<u64> {
        match self.config.footprint {
            Footprint::Sum => self.rooms[at].checked_sub(length),
            Footprint::Padded => {
                let count = self.items[at].len() as u64 + 1;
                let footprint = count.checked_mul(self.longest[at].max(length))?;
                self.config.capacity.checked_sub(footprint)
            }
        }
    }

    fn placement(&self, length: u64, key: u64) -> Placement {
        let best = match self.config.footprint {
            // The hot loop of a stream: plain integers, no division into cases per pack.
            Footprint::Sum => {
                let mut best = (u64::MAX, usize::MAX);
                for (at, (&pack_key, &room)) in self.keys.iter().zip(&self.rooms).enumerate() {
                    // Strictly less: ties stay with the earlier pack. A room left of u64::MAX
                    // cannot happen (the item has length >= 1), so it marks "none yet".
                    if pack_key == key && room >= length && room - length < best.0 {
                        best = (room - length, at);
                    }
                }
                (best.1 != usize::MAX).then_some(best.1)
            }
            Footprint::Padded => {
                let mut best: Option<(u64, usize)> = None;
                for at in 0..self.keys.len() {
                    if self.keys[at] != key {
                        continue;
                    }
                    if let Some(room) = self.room_after(at, length) {
                        if best.is_none_or(|(least, _)| room < least) {
                            best = Some((room, at));
                        }
                    }
                }
                best.map(|(_, at)| at)
            }
        };
        if let Some(at) = best {
            return Placement::Join(at);
        }
        if self.keys.len() < self.config.max_open {
            return Placement::Open { evict: None };
        }
        let mut fullest = 0;
        for at in 1..self.rooms.len() {
            if self.rooms[at] < self.rooms[fullest] {
                fullest = at;
            }
        }
        Placement::Open { evict: Some(fullest) }
    }

    /// Whether the open pack at `at` is full: at the capacity or at `max_sequences` items.
    fn is_full(&self, at: usize) -> bool {
        self.rooms[at] == 0
            || self.config.max_sequences.is_some_and(|most| self.items[at].len() as u64 >= most)
    }

    /// Take the open pack at `at` out of the open ones (the arrays keep their order).
    fn close(&mut self, at: usize) -> Vec<u64> {
        self.keys.remove(at);
        self.rooms.remove(at);
        self.sums.remove(at);
        self.longest.remove(at);
        self.items.remove(at)
    }

    /// Add one item: the packs this closed (at most two: the fullest pack it pushed out, then its
    /// own pack when that was full at once), in the order they closed. Refused lengths and failed
    /// allocations leave the packer unchanged.
    pub fn add(&mut self, length: u64, key: u64) -> Result<Vec<Vec<u64>>, StreamError> {
        let mut closed = Vec::new();
        self.add_into(length, key, None, &mut closed)?;
        Ok(closed)
    }

    fn add_into(
        &mut self,
        length: u64,
        key: u64,
        position: Option<usize>,
        closed: &mut Vec<Vec<u64>>,
    ) -> Result<(), StreamError> {
        self.check_length(length, position)?;
        let index = self.next_index;
        if index >= MAX_ITEMS {
            return Err(StreamError::Exhausted);
        }
        // Every allocation happens before the first change, so a failure changes nothing.
        alloc::reserve(closed, 2, "the closed packs")?;
        match self.placement(length, key) {
            Placement::Join(at) => {
                alloc::reserve(&mut self.items[at], 1, "a pack")?;
                let room = self.room_after(at, length).unwrap_or(0);
                self.items[at].push(index);
                self.rooms[at] = room;
                self.sums[at] += length;
                self.longest[at] = self.longest[at].max(length);
                if self.is_full(at) {
                    closed.push(self.close(at));
                }
            }
            Placement::Open { evict } => {
                let mut pack = alloc::with_capacity(1, "a pack")?;
                pack.push(index);
                let room = self.config.capacity - length;
                let full_at_once = room == 0 || self.config.max_sequences == Some(1);
                if !full_at_once && evict.is_none() {
                    alloc::reserve(&mut self.keys, 1, "the open packs")?;
                    alloc::reserve(&mut self.rooms, 1, "the open packs")?;
                    alloc::reserve(&mut self.sums, 1, "the open packs")?;
                    alloc::reserve(&mut self.longest, 1, "the open packs")?;
                    alloc::reserve(&mut self.items, 1, "the open packs")?;
                }
                if let Some(at) = evict {
                    closed.push(self.close(at));
                }
                if full_at_once {
                    closed.push(pack);
                } else {
                    self.keys.push(key);
                    self.rooms.push(room);
                    self.sums.push(length);
                    self.longest.push(length);
                    self.items.push(pack);
                }
            }
        }
        self.next_index += 1;
        Ok(())
    }

    /// Add a batch: what the equivalent [`add`](Self::add) calls would return, concatenated.
    /// `keys`, when given, has one key per length (otherwise every key is 0). All or nothing: a
    /// refused length (the first one is named), a failed allocation or an interrupt leaves the
    /// packer as it was.
    pub fn add_many(
        &mut self,
        lengths: &[u64],
        keys: Option<&[u64]>,
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u64>>, StreamError> {
        if let Some(keys) = keys {
            if keys.len() != lengths.len() {
                return Err(StreamError::KeysLength { lengths: lengths.len(), keys: keys.len() });
            }
        }
        for (position, &length) in lengths.iter().enumerate() {
            interrupt.every(position)?;
            self.check_length(length, Some(position))?;
        }
        let mut work = self.try_clone()?;
        let mut closed = Vec::new();
        for (position, &length) in lengths.iter().enumerate() {
            interrupt.every(position)?;
            let key = keys.map_or(0, |keys| keys[position]);
            work.add_into(length, key, Some(position), &mut closed)?;
        }
        *self = work;
        Ok(closed)
    }

    /// Close every open pack: their items, in opening order.
    pub fn flush(&mut self) -> Vec<Vec<u64>> {
        self.keys.clear();
        self.rooms.clear();
        self.sums.clear();
        self.longest.clear();
        std::mem::take(&mut self.items)
    }

    /// A copy, failing instead of aborting when memory runs out.
    pub fn try_clone(&self) -> Result<Self, CoreError> {
        let what = "a copy of the open packs";
        let mut items = alloc::with_capacity(self.items.len(), what)?;
        for pack in &self.items {
            let mut copy = alloc::with_capacity(pack.len(), what)?;
            copy.extend_from_slice(pack);
            items.push(copy);
        }
        let copy = |values: &Vec<u64>| alloc::collect(values.iter().copied(), what);
        Ok(StreamPacker {
            config: self.config,
            next_index: self.next_index,
            keys: copy(&self.keys)?,
            rooms: copy(&self.rooms)?,
            sums: copy(&self.sums)?,
            longest: copy(&self.longest)?,
            items,
        })
    }

    /// The packer's state, from which [`from_state`](Self::from_state) makes an equal packer; a
    /// copy of every open pack, allocated fallibly.
    pub fn state(&self) -> Result<StreamState, CoreError> {
        let what = "a StreamPacker state";
        let mut packs = alloc::with_capacity(self.items.len(), what)?;
        for at in 0..self.items.len() {
            packs.push(SavedPack {
                key: self.keys[at],
                sum: self.sums[at],
                longest: self.longest[at],
                items: alloc::collect(self.items[at].iter().copied(), what)?,
            });
        }
        Ok(StreamState { config: self.config, next_index: self.next_index, packs })
    }

    /// A packer that goes on from `state`, after checking that a packer with its settings could
    /// have reached it: at most `max_open` packs, none empty, full or over its capacity, every
    /// item numbered below `next_index`, placed in increasing order, and in one pack only.
    pub fn from_state(state: StreamState) -> Result<Self, StreamError> {
        let mut packer = StreamPacker::new(state.config)?;
        let config = state.config;
        if state.packs.len() > config.max_open {
            return Err(StreamError::BadState("more open packs than max_open"));
        }
        if state.next_index > MAX_ITEMS {
            return Err(StreamError::BadState("next_index above 2**63, the most items a packer numbers"));
        }
        let mut seen: Vec<u64> = Vec::new();
        for pack in &state.packs {
            let count = pack.items.len() as u64;
            if count == 0 {
                return Err(StreamError::BadState("an empty pack"));
            }
            if !pack.items.windows(2).all(|pair| pair[0] < pair[1]) {
                return Err(StreamError::BadState("a pack's items out of order"));
            }
            if pack.items[pack.items.len() - 1] >= state.next_index {
                return Err(StreamError::BadState("an item numbered past next_index"));
            }
            // Each length is between 1 and the longest.
            let fits_lengths = pack.longest >= 1
                && pack.sum >= pack.longest.saturating_add(count - 1)
                && count.checked_mul(pack.longest).is_some_and(|most| pack.sum <= most);
            if !fits_lengths {
                return Err(StreamError::BadState("a pack's sum and longest length disagree with its count"));
            }
            let footprint = match config.footprint {
                Footprint::Sum => Some(pack.sum),
                Footprint::Padded => count.checked_mul(pack.longest),
            };
            let room = match footprint.and_then(|footprint| config.capacity.checked_sub(footprint)) {
                Some(room) if room > 0 => room,
                _ => return Err(StreamError::BadState("a pack at or over pack_max_length")),
            };
            if config.max_sequences.is_some_and(|most| count >= most) {
                return Err(StreamError::BadState("a pack at max_sequences"));
            }
            alloc::reserve(&mut seen, pack.items.len(), "a StreamPacker state")?;
            seen.extend_from_slice(&pack.items);
            alloc::push(&mut packer.keys, pack.key, "a StreamPacker state")?;
            alloc::push(&mut packer.rooms, room, "a StreamPacker state")?;
            alloc::push(&mut packer.sums, pack.sum, "a StreamPacker state")?;
            alloc::push(&mut packer.longest, pack.longest, "a StreamPacker state")?;
        }
        seen.sort_unstable();
        if seen.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StreamError::BadState("an item in two packs"));
        }
        packer.items =
            alloc::collect(state.packs.into_iter().map(|pack| pack.items), "a StreamPacker state")?;
        packer.next_index = state.next_index;
        Ok(packer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule written out plainly: packs as lists of (index, length, key), every figure
    /// recomputed from them.
    struct Model {
        config: StreamConfig,
        next: u64,
        packs: Vec<(u64, Vec<(u64, u64)>)>,
    }

    impl Model {
        fn footprint(&self, items: &[(u64, u64)]) -> u128 {
            let lengths = items.iter().map(|&(_, length)| length as u128);
            match self.config.footprint {
                Footprint::Sum => lengths.sum(),
                Footprint::Padded => items.len() as u128 * lengths.max().unwrap_or(0),
            }
        }

        fn room(&self, items: &[(u64, u64)]) -> i128 {
            self.config.capacity as i128 - self.footprint(items) as i128
        }

        fn full(&self, items: &[(u64, u64)]) -> bool {
            self.room(items) == 0 || self.config.max_sequences.is_some_and(|m| items.len() as u64 >= m)
        }

        fn add(&mut self, length: u64, key: u64) -> Vec<Vec<u64>> {
            let index = self.next;
            self.next += 1;
            let mut best: Option<(i128, usize)> = None;
            for (at, (pack_key, items)) in self.packs.iter().enumerate() {
                let mut placed = items.clone();
                placed.push((index, length));
                let room = self.room(&placed);
                let count_ok = self.config.max_sequences.is_none_or(|m| placed.len() as u64 <= m);
                if *pack_key == key && room >= 0 && count_ok && best.is_none_or(|(least, _)| room < least) {
                    best = Some((room, at));
                }
            }
            let mut closed = Vec::new();
            let ids = |items: &[(u64, u64)]| items.iter().map(|&(i, _)| i).collect::<Vec<_>>();
            match best {
                Some((_, at)) => {
                    self.packs[at].1.push((index, length));
                    if self.full(&self.packs[at].1) {
                        closed.push(ids(&self.packs.remove(at).1));
                    }
                }
                None => {
                    if self.packs.len() == self.config.max_open {
                        let rooms: Vec<i128> = self.packs.iter().map(|(_, items)| self.room(items)).collect();
                        let least = *rooms.iter().min().unwrap();
                        let at = rooms.iter().position(|&room| room == least).unwrap();
                        closed.push(ids(&self.packs.remove(at).1));
                    }
                    let items = vec![(index, length)];
                    if self.full(&items) {
                        closed.push(ids(&items));
                    } else {
                        self.packs.push((key, items));
                    }
                }
            }
            closed
        }

        fn flush(&mut self) -> Vec<Vec<u64>> {
            self.packs.drain(..).map(|(_, items)| items.iter().map(|&(i, _)| i).collect()).collect()
        }
    }

    fn config_strategy() -> impl Strategy<Value = StreamConfig> {
        (1u64..40, 1usize..6, prop::option::of(1u64..5), any::<bool>()).prop_map(
            |(capacity, max_open, m, padded)| StreamConfig {
                capacity,
                max_open,
                max_sequences: m,
                footprint: if padded { Footprint::Padded } else { Footprint::Sum },
            },
        )
    }

    fn stream_strategy() -> impl Strategy<Value = (StreamConfig, Vec<(u64, u64)>)> {
        config_strategy()
            .prop_flat_map(|config| (Just(config), prop::collection::vec(1..=config.capacity, 1..4)))
            .prop_flat_map(|(config, palette)| {
                // A few repeated lengths make ties (equal room in two packs) common.
                let length = prop_oneof![prop::sample::select(palette), 1..=config.capacity];
                (Just(config), prop::collection::vec((length, 0u64..3), 0..120))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn add_follows_the_model((config, stream) in stream_strategy()) {
            let mut packer = StreamPacker::new(config).unwrap();
            let mut model = Model { config, next: 0, packs: Vec::new() };
            let mut all = Vec::new();
            for &(length, key) in &stream {
                let got = packer.add(length, key).unwrap();
                prop_assert_eq!(&got, &model.add(length, key));
                prop_assert!(packer.open_packs() <= config.max_open);
                all.extend(got);
            }
            let rest = packer.flush();
            prop_assert_eq!(&rest, &model.flush());
            all.extend(rest);
            // Each index once, and every pack within the capacity, the count and one key.
            let mut seen: Vec<u64> = all.iter().flatten().copied().collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..stream.len() as u64).collect::<Vec<_>>());
            for pack in &all {
                let lengths: Vec<u64> = pack.iter().map(|&i| stream[i as usize].0).collect();
                let footprint = match config.footprint {
                    Footprint::Sum => lengths.iter().sum::<u64>(),
                    Footprint::Padded => lengths.len() as u64 * lengths.iter().max().unwrap(),
                };
                prop_assert!(footprint <= config.capacity);
                prop_assert!(config.max_sequences.is_none_or(|m| pack.len() as u64 <= m));
                prop_assert!(pack.iter().all(|&i| stream[i as usize].1 == stream[pack[0] as usize].1));
            }
        }

        #[test]
        fn add_many_equals_the_adds_and_a_saved_state_goes_on_identically(
            (config, stream) in stream_strategy(),
            split in 0usize..120,
        ) {
            let split = split.min(stream.len());
            let lengths: Vec<u64> = stream.iter().map(|&(l, _)| l).collect();
            let keys: Vec<u64> = stream.iter().map(|&(_, k)| k).collect();
            let mut one_by_one = StreamPacker::new(config).unwrap();
            let mut expected = Vec::new();
            for &(length, key) in &stream {
                expected.extend(one_by_one.add(length, key).unwrap());
            }
            let mut batched = StreamPacker::new(config).unwrap();
            let mut got = batched.add_many(&lengths[..split], Some(&keys[..split]), &Interrupt::NEVER).unwrap();
            let mut restored = StreamPacker::from_state(batched.state().unwrap()).unwrap();
            prop_assert_eq!(restored.state().unwrap(), batched.state().unwrap());
            got.extend(restored.add_many(&lengths[split..], Some(&keys[split..]), &Interrupt::NEVER).unwrap());
            prop_assert_eq!(got, expected);
            prop_assert_eq!(restored.flush(), one_by_one.flush());
        }

        #[test]
        fn a_refused_batch_changes_nothing(
            (config, stream) in stream_strategy(),
            bad in 0usize..120,
            zero in any::<bool>(),
        ) {
            let mut lengths: Vec<u64> = stream.iter().map(|&(l, _)| l).collect();
            let mut packer = StreamPacker::new(config).unwrap();
            packer.add_many(&lengths, None, &Interrupt::NEVER).unwrap();
            let before = packer.state().unwrap();
            let bad = bad.min(lengths.len());
            lengths.insert(bad, if zero { 0 } else { config.capacity + 1 });
            let error = packer.add_many(&lengths, None, &Interrupt::NEVER).unwrap_err();
            let expected = if zero {
                StreamError::ZeroLength { position: Some(bad) }
            } else {
                StreamError::TooLong { position: Some(bad), length: config.capacity + 1, capacity: config.capacity }
            };
            prop_assert_eq!(error, expected);
            prop_assert_eq!(packer.state().unwrap(), before);
        }
    }

    fn sum_config(capacity: u64, max_open: usize) -> StreamConfig {
        StreamConfig { capacity, max_open, max_sequences: None, footprint: Footprint::Sum }
    }

    #[test]
    fn best_fit_picks_the_least_room_left_then_the_earliest() {
        let mut packer = StreamPacker::new(sum_config(10, 4)).unwrap();
        for length in [6, 7, 6] {
            assert!(packer.add(length, 0).unwrap().is_empty());
        }
        // Rooms 4, 3, 4: a 2 goes to the pack with room 3; a 4 fills either pack with room 4,
        // so the earlier one, which closes at once.
        assert!(packer.add(2, 0).unwrap().is_empty());
        assert_eq!(packer.add(4, 0).unwrap(), vec![vec![0, 4]]);
        assert_eq!(packer.flush(), vec![vec![1, 3], vec![2]]);
    }

    #[test]
    fn at_max_open_the_fullest_pack_closes() {
        let mut packer = StreamPacker::new(sum_config(10, 2)).unwrap();
        packer.add(6, 0).unwrap();
        packer.add(8, 0).unwrap();
        assert_eq!(packer.add(9, 0).unwrap(), vec![vec![1]]);
        assert_eq!(packer.flush(), vec![vec![0], vec![2]]);
    }

    #[test]
    fn padded_footprint_counts_the_longest() {
        let config =
            StreamConfig { capacity: 12, max_open: 4, max_sequences: None, footprint: Footprint::Padded };
        let mut packer = StreamPacker::new(config).unwrap();
        packer.add(2, 0).unwrap();
        packer.add(5, 0).unwrap(); // 2 * 5 = 10 <= 12
        packer.add(3, 0).unwrap(); // 3 * 5 = 15 > 12: a new pack
        assert_eq!(packer.flush(), vec![vec![0, 1], vec![2]]);
    }

    #[test]
    fn errors_name_the_value() {
        let mut packer = StreamPacker::new(sum_config(10, 2)).unwrap();
        assert_eq!(
            packer.add(11, 0).unwrap_err().to_string(),
            "length = 11 is longer than max_token_len (10)"
        );
        assert_eq!(packer.add(0, 0).unwrap_err().to_string(), "length must be >= 1, got 0");
        assert_eq!(packer.next_index(), 0);
        assert!(StreamPacker::new(sum_config(10, 0)).is_err());
        let bad = StreamState {
            config: sum_config(10, 2),
            next_index: 2,
            packs: vec![SavedPack { key: 0, sum: 2, longest: 1, items: vec![0, 1] }; 2],
        };
        assert_eq!(StreamPacker::from_state(bad).unwrap_err(), StreamError::BadState("an item in two packs"));
    }

    #[test]
    fn the_last_index_is_below_2_pow_63_and_a_state_past_it_is_refused() {
        let state = |next_index| StreamState { config: sum_config(10, 2), next_index, packs: vec![] };
        for next_index in [MAX_ITEMS + 1, u64::MAX - 1, u64::MAX] {
            assert_eq!(
                StreamPacker::from_state(state(next_index)).unwrap_err(),
                StreamError::BadState("next_index above 2**63, the most items a packer numbers")
            );
        }
        let mut packer = StreamPacker::from_state(state(MAX_ITEMS - 2)).unwrap();
        assert_eq!(packer.add_many(&[3, 3, 3], None, &Interrupt::NEVER).unwrap_err(), StreamError::Exhausted);
        assert_eq!(packer.next_index(), MAX_ITEMS - 2);
        packer.add(3, 0).unwrap();
        packer.add(3, 0).unwrap();
        let before = packer.state().unwrap();
        assert_eq!(packer.add(3, 0).unwrap_err(), StreamError::Exhausted);
        assert_eq!(packer.state().unwrap(), before);
        assert_eq!(packer.flush(), vec![vec![MAX_ITEMS - 2, MAX_ITEMS - 1]]);
    }
}
