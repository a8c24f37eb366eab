//! The result type shared by the partitioners: k lists of item indexes in one flat buffer.

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

    pub fn to_vecs(&self) -> Vec<Vec<u32>> {
        self.parts().map(<[u32]>::to_vec).collect()
    }

    /// Sort the indexes inside every partition ascending; partition order is kept.
    pub fn sort_within(&mut self) {
        for p in 0..self.k() {
            let (start, end) = (self.offsets[p], self.offsets[p + 1]);
            self.order[start..end].sort_unstable();
        }
    }

    /// For every item, the number of the partition that holds it.
    pub fn ids(&self, n_items: usize) -> Vec<i64> {
        let mut ids = vec![-1i64; n_items];
        for (p, part) in self.parts().enumerate() {
            for &index in part {
                ids[index as usize] = p as i64;
            }
        }
        ids
    }

    /// Build from a partition number per item, keeping input order inside each partition.
    pub fn from_assignment(assignment: &[u32], k: usize) -> Self {
        let mut offsets = vec![0usize; k + 1];
        for &p in assignment {
            offsets[p as usize + 1] += 1;
        }
        for p in 0..k {
            offsets[p + 1] += offsets[p];
        }
        let mut fill = offsets.clone();
        let mut order = vec![0u32; assignment.len()];
        for (index, &p) in assignment.iter().enumerate() {
            order[fill[p as usize]] = index as u32;
            fill[p as usize] += 1;
        }
        Partition { order, offsets }
    }
}
