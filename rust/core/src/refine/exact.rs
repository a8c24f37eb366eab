//! The branch and bound of [`Mode::Exact`](super::Mode::Exact) for at most
//! [`EXACT_MAX_ITEMS`](super::EXACT_MAX_ITEMS) items.
use super::*;

/// Complete search for an assignment whose maximum load is below `upper`, keeping each partition's
/// count (`equal_size`) or only keeping partitions non-empty. Returns the best partition found, or
/// `None` when none beats `upper` (or the node budget ran out before one was found).
pub(super) fn exact_search(
    values: &[u64],
    counts: &[usize],
    equal_size: bool,
    upper: u128,
    nodes: u64,
    interrupt: &Interrupt,
) -> Result<Option<Vec<Vec<u32>>>, CoreError> {
    let n = values.len();
    let k = counts.len();
    let mut items: Vec<u32> = (0..n as u32).collect();
    items.sort_unstable_by(|&a, &b| values[b as usize].cmp(&values[a as usize]).then(a.cmp(&b)));
    let total: u128 = values.iter().map(|&v| v as u128).sum();
    let largest = items.first().map_or(0, |&i| values[i as usize] as u128);
    let mut lower_bound = total.div_ceil(k as u128).max(largest);
    if equal_size {
        // The largest item's partition also holds at least `c - 1` others, at least the smallest.
        let c = counts.iter().copied().min().unwrap_or(1);
        let smallest: u128 =
            items.iter().rev().take(c.saturating_sub(1)).map(|&i| values[i as usize] as u128).sum();
        lower_bound = lower_bound.max(largest + smallest);
    }
    if upper <= lower_bound {
        return Ok(None);
    }
    let mut suffix = vec![0u128; n + 1];
    for i in (0..n).rev() {
        suffix[i] = suffix[i + 1] + values[items[i] as usize] as u128;
    }
    let mut search = Exact {
        values,
        items,
        suffix,
        capacity: if equal_size { counts.to_vec() } else { vec![n; k] },
        equal_size,
        loads: vec![0; k],
        counts: vec![0; k],
        assignment: vec![0; n],
        best: upper,
        best_assignment: None,
        lower_bound,
        nodes_left: nodes,
        stop: false,
        interrupt,
        interrupted: false,
    };
    search.dfs(0);
    if search.interrupted {
        return Err(CoreError::Interrupted);
    }
    let Some(assignment) = search.best_assignment else {
        return Ok(None);
    };
    let mut parts = vec![Vec::new(); k];
    for (position, &part) in assignment.iter().enumerate() {
        parts[part].push(search.items[position]);
    }
    Ok(Some(parts))
}

struct Exact<'a> {
    values: &'a [u64],
    /// Items by value descending: big items first prune hardest.
    items: Vec<u32>,
    /// `suffix[i]`: total value of `items[i..]`.
    suffix: Vec<u128>,
    capacity: Vec<usize>,
    equal_size: bool,
    loads: Vec<u128>,
    counts: Vec<usize>,
    /// Partition of `items[i]`, valid for the assigned prefix.
    assignment: Vec<usize>,
    /// Maximum load to beat (that of the best answer so far).
    best: u128,
    best_assignment: Option<Vec<usize>>,
    lower_bound: u128,
    nodes_left: u64,
    stop: bool,
    interrupt: &'a Interrupt<'a>,
    /// The search stopped because `interrupt` asked it to.
    interrupted: bool,
}

impl Exact<'_> {
    fn dfs(&mut self, i: usize) {
        if self.nodes_left == 0 {
            self.stop = true;
            return;
        }
        if self.nodes_left % CHECK_EVERY as u64 == 0 && self.interrupt.check().is_err() {
            self.interrupted = true;
            self.stop = true;
            return;
        }
        self.nodes_left -= 1;
        let n = self.items.len();
        let k = self.loads.len();
        if i == n {
            self.best = self.loads.iter().copied().max().unwrap_or(0);
            self.best_assignment = Some(self.assignment.clone());
            self.stop = self.best <= self.lower_bound;
            return;
        }
        // Loads must stay <= limit; best > lower_bound >= 0 here, so this cannot underflow.
        let limit = self.best - 1;
        let room: u128 = (0..k)
            .filter(|&p| self.counts[p] < self.capacity[p])
            .map(|p| limit.saturating_sub(self.loads[p]))
            .sum();
        if room < self.suffix[i] {
            return;
        }
        if !self.equal_size {
            let empty = self.counts.iter().filter(|&&c| c == 0).count();
            if empty > n - i {
                return;
            }
        }
        let value = self.values[self.items[i] as usize] as u128;
        // k <= n <= EXACT_MAX_ITEMS (partitions are non-empty): fixed arrays avoid allocating
        // in every node, which was most of the search's time.
        let mut order = [0u8; EXACT_MAX_ITEMS];
        for (p, slot) in order.iter_mut().enumerate().take(k) {
            *slot = p as u8;
        }
        order[..k].sort_unstable_by_key(|&p| (self.loads[p as usize], p));
        // Partitions that look alike for the rest of the search lead to mirror-image subtrees.
        let mut tried = [(0u128, 0usize, 0usize); EXACT_MAX_ITEMS];
        let mut n_tried = 0;
        for &p in &order[..k] {
            let p = p as usize;
            if self.counts[p] >= self.capacity[p] || self.loads[p] + value > self.best - 1 {
                continue;
            }
            let look = if self.equal_size {
                (self.loads[p], self.counts[p], self.capacity[p])
            } else {
                (self.loads[p], usize::from(self.counts[p] > 0), 0)
            };
            if tried[..n_tried].contains(&look) {
                continue;
            }
            tried[n_tried] = look;
            n_tried += 1;
            self.loads[p] += value;
            self.counts[p] += 1;
            self.assignment[i] = p;
            self.dfs(i + 1);
            self.loads[p] -= value;
            self.counts[p] -= 1;
            if self.stop {
                return;
            }
        }
    }
}
