//! Heaps that answer a step's questions about its groups without scanning them all (thousands
//! where ranks are many): per degree, the first-opened group of least load among those with room
//! for a sequence's tokens, and the fewest tokens of any group; per step, the slowest group. Each
//! answers exactly as the scan it replaces (ties to the first-opened group).
//!
//! A group's load and tokens only grow (heights are >= 0), and only the group a question returned
//! grows, so every heap holds current keys except the `tokens` one, whose stale entries (smaller
//! than the group's current values) are dropped as they reach the top.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::alloc;
use crate::error::CoreError;

/// A group of a step being formed.
pub(super) struct Open {
    pub degree: usize,
    pub tokens: u64,
    pub load: f64,
    pub members: Vec<u32>,
}

/// A load as an integer in the same order: loads are sums of values >= 0 (never NaN), whose bit
/// patterns order as the values do once -0 reads as +0 (which `+ 0.0` does).
#[inline]
pub(super) fn key(load: f64) -> u64 {
    (load + 0.0).to_bits()
}

/// `heap.push(item)`, with running out of memory an error naming `what`.
fn push<T: Ord>(heap: &mut BinaryHeap<T>, item: T, what: &'static str) -> Result<(), CoreError> {
    if heap.len() == heap.capacity() {
        heap.try_reserve(1).map_err(|_| CoreError::OutOfMemory {
            what,
            bytes: heap.len().saturating_add(1).saturating_mul(std::mem::size_of::<T>()),
        })?;
    }
    heap.push(item);
    Ok(())
}

/// Group `g`'s entry in a min-heap keyed by one of its values: replaced where it is the top,
/// else added (the old one goes stale).
fn replace_or_push(heap: &mut BinaryHeap<Reverse<(u64, u32)>>, g: u32, value: u64) -> Result<(), CoreError> {
    if let Some(mut top) = heap.peek_mut() {
        if top.0 .1 == g {
            *top = Reverse((value, g));
            return Ok(());
        }
    }
    push(heap, Reverse((value, g)), "a step's groups")
}

/// Up to this many groups of a degree, a scan of them answers faster than heaps.
const SMALL: usize = 8;

/// One degree's groups in a step: scanned while they are few, in heaps beyond [`SMALL`].
#[derive(Default)]
pub(super) struct Degree {
    /// The groups, in order of opening.
    ids: Vec<u32>,
    /// Whether the heaps hold the groups (from the (`SMALL` + 1)th group on).
    heaped: bool,
    /// Whether [`track`](Self::track) was called (then `tokens` is kept).
    tracked: bool,
    /// Groups that had room at the last question, by `(load, order)`.
    ready: BinaryHeap<Reverse<(u64, u32)>>,
    /// Groups that had no room then, by `(tokens, order)`: they return once the room grows.
    full: BinaryHeap<Reverse<(u64, u32)>>,
    /// Every group by tokens.
    tokens: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Degree {
    pub fn clear(&mut self) {
        self.ids.clear();
        (self.heaped, self.tracked) = (false, false);
        self.ready.clear();
        self.full.clear();
        self.tokens.clear();
    }

    /// A newly opened group `g` of this degree.
    pub fn add(&mut self, g: usize, groups: &[Open]) -> Result<(), CoreError> {
        alloc::push(&mut self.ids, g as u32, "a step's groups")?;
        if self.heaped {
            return push(&mut self.ready, Reverse((key(groups[g].load), g as u32)), "a step's groups");
        }
        if self.ids.len() > SMALL {
            self.heaped = true;
            for &h in &self.ids {
                let group = &groups[h as usize];
                push(&mut self.ready, Reverse((key(group.load), h)), "a step's groups")?;
                if self.tracked {
                    push(&mut self.tokens, Reverse((group.tokens, h)), "a step's groups")?;
                }
            }
        }
        Ok(())
    }

    /// The group of least load (the first opened on a tie) among those holding at most `room`
    /// tokens: the scan `tokens + share <= cap && load < best's load` over the groups in order.
    pub fn best(&mut self, room: u64, groups: &[Open]) -> Result<Option<usize>, CoreError> {
        if !self.heaped {
            let mut best: Option<usize> = None;
            for &g in &self.ids {
                let group = &groups[g as usize];
                if group.tokens <= room && best.is_none_or(|b| group.load < groups[b].load) {
                    best = Some(g as usize);
                }
            }
            return Ok(best);
        }
        while let Some(&Reverse((tokens, g))) = self.full.peek() {
            if tokens > room {
                break;
            }
            self.full.pop();
            push(&mut self.ready, Reverse((key(groups[g as usize].load), g)), "a step's groups")?;
        }
        while let Some(&Reverse((_, g))) = self.ready.peek() {
            let tokens = groups[g as usize].tokens;
            if tokens <= room {
                return Ok(Some(g as usize));
            }
            self.ready.pop();
            push(&mut self.full, Reverse((tokens, g)), "a step's groups")?;
        }
        Ok(None)
    }

    /// Group `g`, the one [`best`](Self::best) just returned (the top), took a sequence.
    pub fn grew(&mut self, g: usize, groups: &[Open]) {
        if !self.heaped {
            return;
        }
        if let Some(mut top) = self.ready.peek_mut() {
            debug_assert_eq!(top.0 .1 as usize, g);
            *top = Reverse((key(groups[g].load), g as u32));
        }
    }

    /// Keep group `g`'s current tokens for [`least_tokens`](Self::least_tokens) (on opening it
    /// and after it grew): its entry is replaced where it is the top, else added.
    pub fn track(&mut self, g: usize, groups: &[Open]) -> Result<(), CoreError> {
        self.tracked = true;
        if !self.heaped {
            return Ok(());
        }
        replace_or_push(&mut self.tokens, g as u32, groups[g].tokens)
    }

    /// The fewest tokens of the tracked groups (`None` when none).
    pub fn least_tokens(&mut self, groups: &[Open]) -> Option<u64> {
        if !self.heaped {
            return self.ids.iter().map(|&g| groups[g as usize].tokens).min();
        }
        while let Some(&Reverse((tokens, g))) = self.tokens.peek() {
            if groups[g as usize].tokens == tokens {
                return Some(tokens);
            }
            self.tokens.pop();
        }
        None
    }
}

/// A step's groups by load, slowest first (the first in order on a tie), for spending idle ranks:
/// the caller pops the slowest and pushes what it becomes.
pub(super) struct Slowest(BinaryHeap<(u64, Reverse<u32>)>);

impl Slowest {
    pub fn new(groups: &[Open]) -> Result<Slowest, CoreError> {
        let mut heap = BinaryHeap::new();
        heap.try_reserve_exact(groups.len()).map_err(|_| CoreError::OutOfMemory {
            what: "a step's groups",
            bytes: groups.len().saturating_mul(std::mem::size_of::<(u64, Reverse<u32>)>()),
        })?;
        heap.extend(groups.iter().enumerate().map(|(g, group)| (key(group.load), Reverse(g as u32))));
        Ok(Slowest(heap))
    }

    /// The slowest group, left in place.
    pub fn peek(&self) -> Option<usize> {
        self.0.peek().map(|&(_, Reverse(g))| g as usize)
    }

    /// Take the slowest group out (it is about to change).
    pub fn pop(&mut self) {
        self.0.pop();
    }

    /// Group `g` with its current load.
    pub fn push(&mut self, g: usize, groups: &[Open]) -> Result<(), CoreError> {
        push(&mut self.0, (key(groups[g].load), Reverse(g as u32)), "a step's groups")
    }
}
