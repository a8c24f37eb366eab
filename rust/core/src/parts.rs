//! The result type shared by the partitioners: k lists of item indexes in one flat buffer.
use crate::alloc;
use crate::error::CoreError;
use crate::interrupt::Interrupt;

/// Partition `p` holds `order[offsets[p]..offsets[p + 1]]`; partitions come heaviest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub order: Vec<u32>,
    pub offsets: Vec<usize>,
}

impl Partition {
    pub fn k(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn part(&self, p: usize) -> &[u32] {
        &self.order[self.offsets[p]..self.offsets[p + 1]]
    }

    pub fn parts(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.k()).map(move |p| self.part(p))
    }

    /// The partitions as one vector each, allocated fallibly (they hold every item).
    pub fn to_vecs(&self) -> Result<Vec<Vec<u32>>, CoreError> {
        let mut vecs = alloc::with_capacity(self.k(), "the partitions")?;
        for part in self.parts() {
            vecs.push(alloc::collect(part.iter().copied(), "a partition")?);
        }
        Ok(vecs)
    }

    /// `self` with [`Partition::sort_within`] applied: what the `balanced_partitions` functions
    /// return from a `karmarkar_karp` answer.
    pub fn sorted_within(mut self, interrupt: &Interrupt) -> Result<Self, CoreError> {
        self.sort_within(interrupt)?;
        Ok(self)
    }

    /// Sort the indexes inside every partition ascending; partition order is kept.
    ///
    /// `order` must hold every index below its length exactly once (a partition of all items).
    pub fn sort_within(&mut self, interrupt: &Interrupt) -> Result<(), CoreError> {
        let (n, k) = (self.order.len(), self.k());
        if n < 4096 || n / k < 64 {
            for p in 0..k {
                interrupt.check()?;
                let (start, end) = (self.offsets[p], self.offsets[p + 1]);
                self.order[start..end].sort_unstable();
            }
            return Ok(());
        }
        // Large partitions: note each index's partition, then deal the indexes out in ascending
        // order, two linear passes instead of k sorts (and interruptible).
        let mut owner = alloc::zeroed(n, "partition numbers")?;
        for (p, part) in self.parts().enumerate() {
            for (step, &index) in part.iter().enumerate() {
                interrupt.every(step)?;
                owner[index as usize] = p as u32;
            }
        }
        let mut fill = alloc::collect(self.offsets[..k].iter().copied(), "partition offsets")?;
        for (index, &p) in owner.iter().enumerate() {
            interrupt.every(index)?;
            self.order[fill[p as usize]] = index as u32;
            fill[p as usize] += 1;
        }
        Ok(())
    }

    /// For every item, the number of the partition that holds it.
    pub fn ids(&self, n_items: usize, interrupt: &Interrupt) -> Result<Vec<i64>, CoreError> {
        let mut ids = alloc::filled_checked(n_items, -1i64, "partition numbers", interrupt)?;
        for (p, part) in self.parts().enumerate() {
            for (step, &index) in part.iter().enumerate() {
                interrupt.every(step)?;
                ids[index as usize] = p as i64;
            }
        }
        Ok(ids)
    }

    /// Build from a partition number per item, keeping input order inside each partition.
    pub fn from_assignment(assignment: &[u32], k: usize) -> Result<Self, CoreError> {
        let mut offsets = alloc::filled(k + 1, 0usize, "partition offsets")?;
        for &p in assignment {
            offsets[p as usize + 1] += 1;
        }
        for p in 0..k {
            offsets[p + 1] += offsets[p];
        }
        let mut fill = alloc::collect(offsets[..k].iter().copied(), "partition offsets")?;
        let mut order = alloc::zeroed(assignment.len(), "the partition")?;
        for (index, &p) in assignment.iter().enumerate() {
            order[fill[p as usize]] = index as u32;
            fill[p as usize] += 1;
        }
        Ok(Partition { order, offsets })
    }
}
