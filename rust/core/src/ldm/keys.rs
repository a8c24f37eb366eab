//! Set keys: the exact sum types and a set's `(sum, count, first index)` packed into one key.

use std::ops::{Add, AddAssign, Sub};

pub(super) const NIL: u32 = u32::MAX;

/// Exact sum type: `u64` when the total fits (the common case, cheaper to compare), else `u128`.
pub trait SumInt:
    Copy + Ord + Default + Add<Output = Self> + Sub<Output = Self> + AddAssign + Send + Sync
{
    /// A set's `(sum, count, first index)` packed into one value whose natural order is the set
    /// order (rule 3). Sets store this key and nothing else about their contents: the merges'
    /// sorts and the heaps compare it with one wide comparison, and joining two sets is one
    /// addition (measured: about a third fewer instructions than comparing the three fields).
    type Key: Copy + Ord + Send + Sync + std::fmt::Debug;
    fn from_u64(value: u64) -> Self;
    fn key(sum: Self, count: u32, head: u32) -> Self::Key;
    fn key_sum(key: Self::Key) -> Self;
    fn key_count(key: Self::Key) -> u32;
    fn key_head(key: Self::Key) -> u32;
    fn to_u128(self) -> u128;
    /// The key of `front` followed by `back`: sums and counts add, the first index is `front`'s.
    fn key_join(front: Self::Key, back: Self::Key) -> Self::Key;
    /// The key of set `front` after it absorbs set `back`, whose items are the ranks linked from
    /// `back_first` through `next` (values by rank in `values`). Integer sums are exact, so this
    /// is [`SumInt::key_join`], O(1); float sums ([`crate::float`]) walk `back`'s items, because
    /// the rounding order is part of the answer.
    #[inline]
    fn key_absorb(
        front: Self::Key,
        back: Self::Key,
        _back_first: u32,
        _next: &[u32],
        _values: &[u64],
    ) -> Self::Key {
        Self::key_join(front, back)
    }
    /// Whether [`SumInt::key_absorb`] walks the absorbed set's items (float sums). Merges that
    /// join many pairs of sets at once then hand them to [`SumInt::absorb_all`] together.
    const WALKS: bool = false;
    /// Every `walk.key` becomes [`SumInt::key_absorb`]`(walk.key, walk.back, walk.first, ..)`.
    /// The walks are independent (disjoint sets), so float sums advance them side by side.
    #[inline]
    fn absorb_all(walks: &mut [Walk<Self::Key>], next: &[u32], values: &[u64]) {
        for walk in walks {
            walk.key = Self::key_absorb(walk.key, walk.back, walk.first, next, values);
        }
    }
}

/// One set absorbing another, for [`SumInt::absorb_all`]: the absorbing set's key (replaced by
/// the result), the absorbed set's key and the rank of its first item.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Walk<K> {
    pub key: K,
    pub back: K,
    pub first: u32,
}

/// A `u128` kept as two `u64` halves, for set keys and priorities.
///
/// Memory, not speed: `u128` is 16-byte aligned, which pads a [`Set`] (16-byte key, two `u32`
/// ranks) to 32 bytes and a queue entry to 48; with this 8-byte-aligned key they take 24 and 32.
/// With `equal_size=False` every item sits in a set of some full state for most of the run, so
/// this is about 8 bytes an item (measured: peak memory per item at 10^7 items, k = 8, from 76
/// to 64 bytes). Comparisons and arithmetic go through `u128`, so the code generated for them is
/// the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Key128 {
    lo: u64,
    hi: u64,
}

impl Key128 {
    #[inline(always)]
    pub fn new(value: u128) -> Self {
        Key128 { lo: value as u64, hi: (value >> 64) as u64 }
    }

    #[inline(always)]
    pub fn get(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

impl PartialOrd for Key128 {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key128 {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.get().cmp(&other.get())
    }
}

// u64 sums: `sum << 64 | count << 32 | head` in a u128. Every set's sum is at most the total,
// which fits in 64 bits here, and counts stay below 2**32, so adding keys never carries across
// fields.
impl SumInt for u64 {
    type Key = Key128;
    #[inline]
    fn from_u64(value: u64) -> Self {
        value
    }
    #[inline]
    fn key(sum: Self, count: u32, head: u32) -> Key128 {
        Key128 { hi: sum, lo: ((count as u64) << 32) | head as u64 }
    }
    #[inline]
    fn key_sum(key: Key128) -> Self {
        key.hi
    }
    #[inline]
    fn key_count(key: Key128) -> u32 {
        (key.lo >> 32) as u32
    }
    #[inline]
    fn key_head(key: Key128) -> u32 {
        key.lo as u32
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self as u128
    }
    #[inline]
    fn key_join(front: Key128, back: Key128) -> Key128 {
        Key128::new(front.get() + (back.get() & !0xFFFF_FFFF))
    }
}

// u128 sums: `(sum, count << 32 | head)`.
impl SumInt for u128 {
    type Key = (u128, u64);
    #[inline]
    fn from_u64(value: u64) -> Self {
        value as u128
    }
    #[inline]
    fn key(sum: Self, count: u32, head: u32) -> (u128, u64) {
        (sum, ((count as u64) << 32) | head as u64)
    }
    #[inline]
    fn key_sum(key: (u128, u64)) -> Self {
        key.0
    }
    #[inline]
    fn key_count(key: (u128, u64)) -> u32 {
        (key.1 >> 32) as u32
    }
    #[inline]
    fn key_head(key: (u128, u64)) -> u32 {
        key.1 as u32
    }
    #[inline]
    fn to_u128(self) -> u128 {
        self
    }
    #[inline]
    fn key_join(front: (u128, u64), back: (u128, u64)) -> (u128, u64) {
        (front.0 + back.0, front.1 + (back.1 & !0xFFFF_FFFF))
    }
}

/// Set order (rule 3): larger sum, then larger count, then larger first index. Indexes are unique,
/// so two different non-empty sets never compare equal.
pub(super) type SetKey<S> = <S as SumInt>::Key;

#[derive(Clone, Copy, Debug)]
pub(super) struct Set<S: SumInt> {
    pub(super) key: SetKey<S>,
    /// Ranks (positions in sorted order) of the first and last items.
    pub(super) first: u32,
    pub(super) last: u32,
}

impl<S: SumInt> Set<S> {
    pub(super) fn empty() -> Self {
        Set { key: S::key(S::default(), 0, NIL), first: NIL, last: NIL }
    }

    #[inline]
    pub(super) fn single(rank: u32, index: u32, value: u64) -> Self {
        Set { key: S::key(S::from_u64(value), 1, index), first: rank, last: rank }
    }

    #[inline]
    pub(super) fn key(&self) -> SetKey<S> {
        self.key
    }

    #[inline]
    pub(super) fn sum(&self) -> S {
        S::key_sum(self.key)
    }
}

/// `front`'s items followed by `back`'s.
#[inline]
pub(super) fn join<S: SumInt>(front: Set<S>, back: Set<S>, next: &mut [u32], values: &[u64]) -> Set<S> {
    next[front.last as usize] = back.first;
    Set {
        key: S::key_absorb(front.key, back.key, back.first, next, values),
        first: front.first,
        last: back.last,
    }
}

/// [`join`] for many pairs at once: each `sets[i]` becomes `others[i]` followed by `sets[i]`
/// (`others_first`) or `sets[i]` followed by `others[i]`. The lists are linked first, then every
/// sum is advanced by [`SumInt::absorb_all`]: no walk reads a link another pair changes, since
/// a walk takes exactly its set's count of steps through its own, disjoint, items.
///
/// `walks` is scratch space, with room for `sets.len()` walks (nothing is allocated here).
#[inline]
pub(super) fn join_all<S: SumInt>(
    sets: &mut [Set<S>],
    others: impl Iterator<Item = Set<S>>,
    others_first: bool,
    walks: &mut Vec<Walk<SetKey<S>>>,
    next: &mut [u32],
    values: &[u64],
) {
    walks.clear();
    for (set, other) in sets.iter_mut().zip(others) {
        let (front, back) = if others_first { (other, *set) } else { (*set, other) };
        next[front.last as usize] = back.first;
        debug_assert!(walks.len() < walks.capacity(), "join_all: scratch without room");
        walks.push(Walk { key: front.key, back: back.key, first: back.first });
        *set = Set { key: front.key, first: front.first, last: back.last };
    }
    S::absorb_all(walks, next, values);
    for (set, walk) in sets.iter_mut().zip(walks.iter()) {
        set.key = walk.key;
    }
}
