//! The four rules under shape constraints (planning spec, "Shapes trainers must respect"): at
//! most `max_sequences` items per pack, a footprint of `count * longest` instead of the sum, and
//! packs that never mix keys. Each rule keeps its definition with "fits" extended: an item fits a
//! pack when the pack's footprint with it stays within the capacity, the pack holds fewer than
//! `max_sequences` items, and the keys match.
//!
//! Keys: packs of different keys never interact, so first fit, ffd and bfd run on each key's
//! items alone (in the global placement order) and the packs are numbered by the step that opened
//! them. Next fit closes its one current pack on a different key, like on any misfit.
//!
//! Arithmetic is in `u128`, where `count * longest` cannot overflow; this path is O(n log n)
//! (a max-tree for first fit, an ordered set for best fit) and untuned, unlike the default one.
use super::first_fit::RoomTree;
use super::ordered::OrderedSet;
use super::{order, Algorithm, PackError, Packing};
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::{Interrupt, CHECK_EVERY};

/// What a pack is charged against the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Footprint {
    /// The sum of its lengths.
    Sum,
    /// Its item count times its longest length (every item padded to the longest).
    Padded,
}

/// The constraints beyond the capacity; [`Constraints::NONE`] packs as [`super::packing`] does.
#[derive(Clone, Copy, Debug)]
pub struct Constraints<'a> {
    /// The most items a pack may hold (`None`: no limit; `Some(0)` is an error).
    pub max_sequences: Option<usize>,
    pub footprint: Footprint,
    /// One key number per item: items of different numbers never share a pack.
    pub keys: Option<&'a [u32]>,
}

impl Constraints<'_> {
    pub const NONE: Constraints<'static> =
        Constraints { max_sequences: None, footprint: Footprint::Sum, keys: None };
}

/// What the rules know of an open pack.
#[derive(Clone, Copy)]
struct Pack {
    count: u128,
    used: u128,
    longest: u128,
}

impl Pack {
    const EMPTY: Pack = Pack { count: 0, used: 0, longest: 0 };

    fn with(self, length: u128) -> Pack {
        Pack { count: self.count + 1, used: self.used + length, longest: self.longest.max(length) }
    }

    fn footprint(self, rule: &Rule) -> u128 {
        match rule.footprint {
            Footprint::Sum => self.used,
            Footprint::Padded => self.count * self.longest,
        }
    }
}

struct Rule {
    capacity: u128,
    max_sequences: u128,
    footprint: Footprint,
}

impl Rule {
    fn fits(&self, pack: Pack, length: u128) -> bool {
        pack.count < self.max_sequences && pack.with(length).footprint(self) <= self.capacity
    }

    /// One more than the longest length `pack` can still take, or 0 when it can take none:
    /// first fit's tree value. Never grows as the pack fills.
    fn reach(&self, pack: Pack) -> u128 {
        if pack.count >= self.max_sequences {
            return 0;
        }
        match self.footprint {
            Footprint::Sum => self.capacity - pack.used + 1,
            Footprint::Padded => {
                // (count + 1) * max(longest, length) <= capacity.
                let widest = self.capacity / (pack.count + 1);
                if pack.longest > widest {
                    0
                } else {
                    widest + 1
                }
            }
        }
    }
}

/// [`super::packing`] under `constraints`.
pub fn packing_constrained(
    lengths: &[u64],
    capacity: u64,
    algorithm: Algorithm,
    constraints: &Constraints<'_>,
    interrupt: &Interrupt,
) -> Result<Packing, PackError> {
    let n = lengths.len();
    if let Some(index) = lengths.iter().position(|&length| length > capacity) {
        return Err(PackError::TooLong { index, length: lengths[index], capacity });
    }
    if constraints.max_sequences == Some(0) {
        return Err(PackError::NoSequencesAllowed);
    }
    if let Some(keys) = constraints.keys {
        if keys.len() != n {
            return Err(PackError::KeysLength { keys: keys.len(), lengths: n });
        }
    }
    if n >= u32::MAX as usize {
        return Err(CoreError::TooManyItems { n_items: n }.into());
    }
    let rule = Rule {
        capacity: capacity as u128,
        max_sequences: constraints.max_sequences.map_or(u128::MAX, |m| m as u128),
        footprint: constraints.footprint,
    };
    let (order, sorted) = match algorithm {
        Algorithm::NextFit | Algorithm::FirstFit => (None, None),
        Algorithm::FirstFitDecreasing | Algorithm::BestFitDecreasing => {
            let longest = lengths.iter().copied().max().unwrap_or(0);
            let (order, sorted) = order::decreasing::<u64>(lengths, longest, interrupt)?;
            (Some(order), Some(sorted))
        }
    };
    let length_at = |step: usize| match &sorted {
        Some(sorted) => sorted[step],
        None => lengths[step],
    };
    let item_at = |step: usize| match &order {
        Some(order) => order[step] as usize,
        None => step,
    };
    let (step_pack, packs) = if algorithm == Algorithm::NextFit {
        next_fit(n, &length_at, &|step| constraints.keys.map_or(0, |keys| keys[step]), &rule, interrupt)?
    } else {
        by_key(n, &length_at, &item_at, constraints.keys, algorithm, &rule, interrupt)?
    };
    Ok(Packing { order, step_pack, packs })
}

fn next_fit(
    n: usize,
    length_at: &dyn Fn(usize) -> u64,
    key_at: &dyn Fn(usize) -> u32,
    rule: &Rule,
    interrupt: &Interrupt,
) -> Result<(Vec<u32>, usize), CoreError> {
    let mut step_pack = alloc::with_capacity(n, "the placements")?;
    let mut packs = 0u32;
    let mut current = Pack::EMPTY;
    let mut current_key = 0;
    for step in 0..n {
        interrupt.every(step)?;
        let length = length_at(step) as u128;
        let key = key_at(step);
        if packs == 0 || key != current_key || !rule.fits(current, length) {
            packs += 1;
            current = Pack::EMPTY;
            current_key = key;
        }
        current = current.with(length);
        step_pack.push(packs - 1);
    }
    Ok((step_pack, packs as usize))
}

/// First fit, ffd or bfd on each key's steps alone, packs numbered by their opening step.
fn by_key(
    n: usize,
    length_at: &dyn Fn(usize) -> u64,
    item_at: &dyn Fn(usize) -> usize,
    keys: Option<&[u32]>,
    algorithm: Algorithm,
    rule: &Rule,
    interrupt: &Interrupt,
) -> Result<(Vec<u32>, usize), CoreError> {
    // The steps of each key, in step order: a counting sort of the steps by key.
    let key_of = |step: usize| keys.map_or(0, |keys| keys[item_at(step)]) as usize;
    let groups = keys.map_or(1, |keys| keys.iter().max().map_or(0, |&k| k as usize + 1));
    let mut starts = alloc::zeroed::<usize>(groups + 1, "the key groups")?;
    // (Every pass over the steps checks for interrupts: reading the keys in placement order is a
    // cache miss a step, seconds for tens of millions of items.)
    for step in 0..n {
        interrupt.every(step)?;
        starts[key_of(step) + 1] += 1;
    }
    for group in 0..groups {
        starts[group + 1] += starts[group];
    }
    let mut next = alloc::collect(starts[..groups].iter().copied(), "the key cursors")?;
    let mut steps = alloc::zeroed::<u32>(n, "the steps by key")?;
    for step in 0..n {
        interrupt.every(step)?;
        let cursor = &mut next[key_of(step)];
        steps[*cursor] = step as u32;
        *cursor += 1;
    }
    // Each group's packs, as the step that opened them; the group-local pack of each step.
    let mut local = alloc::zeroed::<u32>(n, "the local placements")?;
    let mut opening = alloc::zeroed::<u32>(n, "the opening steps")?;
    let mut opened = 0usize;
    let mut opens_pack = alloc::filled(n, false, "the opening marks")?;
    for group in 0..groups {
        let group_steps = &steps[starts[group]..starts[group + 1]];
        let lengths: Vec<u128> = alloc::collect(
            group_steps.iter().map(|&step| length_at(step as usize) as u128),
            "a key's lengths",
        )?;
        let placements = match algorithm {
            Algorithm::BestFitDecreasing => best_fit(&lengths, rule, interrupt)?,
            _ => first_fit(&lengths, rule, interrupt)?,
        };
        let base = opened;
        for (position, &pack) in placements.iter().enumerate() {
            interrupt.every(position)?;
            let step = group_steps[position] as usize;
            if pack as usize + base == opened {
                opening[opened] = step as u32;
                opens_pack[step] = true;
                opened += 1;
            }
            local[step] = opening[base + pack as usize];
        }
        interrupt.check()?;
    }
    // Number the packs by opening step: the rank of that step among the opening ones.
    let mut rank = alloc::zeroed::<u32>(n, "the pack numbers")?;
    let mut count = 0u32;
    for step in 0..n {
        interrupt.every(step)?;
        rank[step] = count;
        count += u32::from(opens_pack[step]);
    }
    let mut step_pack = alloc::with_capacity(n, "the placements")?;
    for (chunk, opening_steps) in local.chunks(CHECK_EVERY).enumerate() {
        interrupt.every(chunk * CHECK_EVERY)?;
        step_pack.extend(opening_steps.iter().map(|&step| rank[step as usize]));
    }
    Ok((step_pack, opened))
}

/// First fit (the earliest pack that fits, else a new one) over `lengths` in placement order.
fn first_fit(lengths: &[u128], rule: &Rule, interrupt: &Interrupt) -> Result<Vec<u32>, CoreError> {
    let slots = lengths.len();
    let mut tree = RoomTree::new(slots, rule.reach(Pack::EMPTY))?;
    let mut packs: Vec<Pack> = alloc::with_capacity(slots, "the packs")?;
    let mut placements = alloc::with_capacity(slots, "the placements")?;
    for (step, &length) in lengths.iter().enumerate() {
        interrupt.every(step)?;
        // The leftmost slot whose reach exceeds the length: an open pack or the next new one.
        let slot = tree.leftmost_fitting(length + 1);
        if slot == packs.len() {
            packs.push(Pack::EMPTY);
        }
        packs[slot] = packs[slot].with(length);
        tree.lower(slot, rule.reach(packs[slot]));
        placements.push(slot as u32);
    }
    Ok(placements)
}

/// Best fit over `lengths` in decreasing order: the fitting pack with the least room left after
/// placing (in the footprint), ties to the earliest opened, else a new pack.
///
/// In decreasing order a pack's first item is its longest, so the padded footprint after placing
/// any item is `(count + 1) * longest`, whatever the item: the room left after the next
/// placement is a property of the pack, and any pack where it is not negative fits.
fn best_fit(lengths: &[u128], rule: &Rule, interrupt: &Interrupt) -> Result<Vec<u32>, CoreError> {
    let mut open = OrderedSet::<(u128, u32)>::new();
    let mut packs: Vec<Pack> = alloc::with_capacity(lengths.len(), "the packs")?;
    let mut placements = alloc::with_capacity(lengths.len(), "the placements")?;
    // A pack's place in the set: its room (sum) or its room after one more item (padded).
    let key = |pack: Pack| -> Option<u128> {
        if pack.count >= rule.max_sequences {
            return None;
        }
        match rule.footprint {
            Footprint::Sum => Some(rule.capacity - pack.used),
            Footprint::Padded => rule.capacity.checked_sub((pack.count + 1) * pack.longest),
        }
    };
    for (step, &length) in lengths.iter().enumerate() {
        interrupt.every(step)?;
        let least = match rule.footprint {
            Footprint::Sum => length,
            Footprint::Padded => 0,
        };
        let pack = match open.first_at_least((least, 0)) {
            Some(entry) => {
                open.remove(entry);
                entry.1
            }
            None => {
                packs.push(Pack::EMPTY);
                (packs.len() - 1) as u32
            }
        };
        let filled = packs[pack as usize].with(length);
        packs[pack as usize] = filled;
        if let Some(key) = key(filled) {
            open.insert((key, pack))?;
        }
        placements.push(pack);
    }
    Ok(placements)
}
