//! One request type for every partitioning call: what the binding runs.
//!
//! A [`Request`] names `k`, the count rule ([`Counts`]: free, equal, or nearly equal through the
//! spec's placeholders), the algorithm ([`Algorithm`]), whether to refine the answer
//! ([`Refine`]) and the form of the answer ([`Output`]). [`Request::run`] takes the weights
//! ([`Weights`]: exact integers, or floats in double or single precision) by value, with an
//! [`Interrupt`], and does everything in one go: partition, refine if asked, and sort inside or
//! number the items. The functions it calls ([`crate::ldm`], [`crate::float`], [`crate::greedy`],
//! [`crate::nearly`], [`crate::refine`]) stay public for the tests and the benchmarks.
//!
//! ```
//! use seqbalance_core::interrupt::Interrupt;
//! use seqbalance_core::request::{Algorithm, Answer, Counts, Output, Refine, Request, Weights};
//! let request = Request {
//!     k: 2,
//!     counts: Counts::Nearly,
//!     algorithm: Algorithm::Ldm,
//!     refine: Refine::No,
//!     output: Output::MergeOrder,
//! };
//! let Answer::Parts(partition) = request.run(Weights::Exact(vec![10, 20, 30, 40, 50]), &Interrupt::NEVER).unwrap()
//! else { unreachable!() };
//! assert_eq!(partition.to_vecs().unwrap(), vec![vec![0, 3, 2], vec![4, 1]]);
//! ```

use std::borrow::Cow;

use crate::alloc;
use crate::error::CoreError;
use crate::float;
use crate::greedy;
use crate::interrupt::Interrupt;
use crate::ldm;
use crate::nearly;
use crate::parts::Partition;
use crate::refine::{self, Mode, RefineError};

/// How many items each partition gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// Any count (at least one item each).
    Free,
    /// `n / k` each; `n` must be a multiple of `k`.
    Equal,
    /// `n / k` or `n / k + 1`: the equal-count rules on `(-n) mod k` placeholders of value zero,
    /// which are dropped again (see [`crate::nearly`]).
    Nearly,
}

/// Which partitioner runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// The largest differencing method (Karmarkar–Karp), [`crate::ldm`].
    Ldm,
    /// Each item in input order to the lightest partition, [`crate::greedy`].
    Greedy,
}

/// Whether the partition is improved afterwards ([`crate::refine`]; counts are kept unless
/// [`Counts::Free`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refine {
    No,
    Local,
    Exact,
}

/// The form of the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The partition as the algorithm leaves it (for the largest differencing method: items in
    /// merge order inside each partition).
    MergeOrder,
    /// Indexes ascending inside each partition, partition order kept.
    Sorted,
    /// For every item, the number of its partition.
    Ids,
}

/// The weights, in the precision the partitioners compute in.
#[derive(Clone, Debug, PartialEq)]
pub enum Weights {
    Exact(Vec<u64>),
    Double(Vec<f64>),
    Single(Vec<f32>),
}

impl Weights {
    pub fn len(&self) -> usize {
        match self {
            Weights::Exact(v) => v.len(),
            Weights::Double(v) => v.len(),
            Weights::Single(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What [`Request::run`] returns: the partition (heaviest first), or a partition number per item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Parts(Partition),
    Ids(Vec<i64>),
}

/// One partitioning call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub k: usize,
    pub counts: Counts,
    pub algorithm: Algorithm,
    pub refine: Refine,
    pub output: Output,
}

impl Request {
    /// Partition `weights`, refine and shape the answer as asked.
    ///
    /// Errors: the shape errors of [`crate::error::check_shape`] (for [`Counts::Nearly`]: fewer
    /// items than partitions only), float weights that are not finite and `>= 0` or whose total
    /// is too large ([`crate::float::check_values`]), [`CoreError::UnequalCounts`] from the float
    /// greedy, and [`CoreError::OutOfMemory`] / [`CoreError::Interrupted`].
    pub fn run(&self, weights: Weights, interrupt: &Interrupt) -> Result<Answer, CoreError> {
        match weights {
            Weights::Exact(values) => self.run_on(values, interrupt),
            Weights::Double(values) => self.run_on(values, interrupt),
            Weights::Single(values) => self.run_on(values, interrupt),
        }
    }

    fn run_on<V: Weight>(&self, values: Vec<V>, interrupt: &Interrupt) -> Result<Answer, CoreError> {
        let k = self.k;
        if self.refine == Refine::No {
            if self.output == Output::Ids && self.algorithm == Algorithm::Ldm && self.counts != Counts::Nearly
            {
                return Ok(Answer::Ids(V::ldm_ids_owned(
                    values,
                    k,
                    self.counts == Counts::Equal,
                    interrupt,
                )?));
            }
            let n = values.len();
            let partition = self.partition_owned(values, interrupt)?;
            return self.shape(partition, n, interrupt);
        }
        // Refinement reads the values after the partitioner, so it borrows them.
        let partition = self.partition_borrowed(&values, interrupt)?;
        // Indexes ascending inside each partition: the start refinement gets whatever asked for it.
        let partition = partition.sorted_within(interrupt)?;
        let mut parts = alloc::with_capacity(partition.k(), "the partitions")?;
        for part in partition.parts() {
            parts.push(alloc::collect(part.iter().copied(), "a partition")?);
        }
        drop(partition);
        let mode = if self.refine == Refine::Exact { Mode::Exact } else { Mode::Local };
        let refined =
            V::refine(&values, parts, self.counts != Counts::Free, mode, interrupt).map_err(|error| {
                match error {
                    RefineError::Core(error) => error,
                    // The partitioners' answers are partitions of every item into non-empty parts, and
                    // the weights were checked before: refinement has nothing else to refuse.
                    error => panic!("refinement refused the partitioner's own answer: {error}"),
                }
            })?;
        let n = values.len();
        drop(values);
        let mut offsets = alloc::with_capacity(refined.len() + 1, "partition offsets")?;
        offsets.push(0usize);
        for part in &refined {
            offsets.push(offsets[offsets.len() - 1] + part.len());
        }
        if self.output == Output::Ids {
            let mut ids = alloc::filled_checked(n, 0i64, "partition numbers", interrupt)?;
            for (number, part) in refined.iter().enumerate() {
                interrupt.check()?;
                for &index in part {
                    ids[index as usize] = number as i64;
                }
            }
            return Ok(Answer::Ids(ids));
        }
        let mut order = alloc::with_capacity(n, "the partition")?;
        for part in refined {
            order.extend_from_slice(&part);
        }
        Ok(Answer::Parts(Partition { order, offsets }))
    }

    /// The partition of values it may drop as soon as they are sorted.
    fn partition_owned<V: Weight>(
        &self,
        values: Vec<V>,
        interrupt: &Interrupt,
    ) -> Result<Partition, CoreError> {
        let (k, algorithm) = (self.k, self.algorithm);
        let core = |values: Vec<V>, k: usize, equal: bool| match algorithm {
            Algorithm::Ldm => V::ldm_owned(values, k, equal, interrupt),
            Algorithm::Greedy => V::greedy(&values, k, equal, interrupt),
        };
        match self.counts {
            Counts::Free => core(values, k, false),
            Counts::Equal => core(values, k, true),
            Counts::Nearly => nearly::with_placeholders_owned(values, k, |values, k| core(values, k, true)),
        }
    }

    /// The partition of values that are still needed afterwards.
    fn partition_borrowed<V: Weight>(
        &self,
        values: &[V],
        interrupt: &Interrupt,
    ) -> Result<Partition, CoreError> {
        let (k, algorithm) = (self.k, self.algorithm);
        let core = |values: &[V], k: usize, equal: bool| match algorithm {
            Algorithm::Ldm => V::ldm(values, k, equal, interrupt),
            Algorithm::Greedy => V::greedy(values, k, equal, interrupt),
        };
        match self.counts {
            Counts::Free => core(values, k, false),
            Counts::Equal => core(values, k, true),
            Counts::Nearly => nearly::with_placeholders(values, k, |values, k| core(values, k, true)),
        }
    }

    fn shape(&self, partition: Partition, n: usize, interrupt: &Interrupt) -> Result<Answer, CoreError> {
        Ok(match self.output {
            Output::MergeOrder => Answer::Parts(partition),
            Output::Sorted => Answer::Parts(partition.sorted_within(interrupt)?),
            Output::Ids => Answer::Ids(partition.ids(n, interrupt)?),
        })
    }
}

/// A weight type the partitioners and refinement run on: `u64` exactly, `f64` and `f32` in the
/// reference's float arithmetic.
trait Weight: Copy + Default + Send + Sync {
    fn ldm(values: &[Self], k: usize, equal: bool, interrupt: &Interrupt) -> Result<Partition, CoreError>;
    fn ldm_owned(
        values: Vec<Self>,
        k: usize,
        equal: bool,
        interrupt: &Interrupt,
    ) -> Result<Partition, CoreError>;
    fn greedy(values: &[Self], k: usize, equal: bool, interrupt: &Interrupt) -> Result<Partition, CoreError>;
    fn refine(
        values: &[Self],
        parts: Vec<Vec<u32>>,
        keep_counts: bool,
        mode: Mode,
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>, RefineError>;

    /// The partition numbers of the largest differencing method's answer.
    fn ldm_ids_owned(
        values: Vec<Self>,
        k: usize,
        equal: bool,
        interrupt: &Interrupt,
    ) -> Result<Vec<i64>, CoreError> {
        let n = values.len();
        Self::ldm_owned(values, k, equal, interrupt)?.ids(n, interrupt)
    }
}

impl Weight for u64 {
    fn ldm(values: &[u64], k: usize, equal: bool, interrupt: &Interrupt) -> Result<Partition, CoreError> {
        ldm::karmarkar_karp_interruptible(values, k, equal, interrupt)
    }
    fn ldm_owned(
        values: Vec<u64>,
        k: usize,
        equal: bool,
        interrupt: &Interrupt,
    ) -> Result<Partition, CoreError> {
        ldm::karmarkar_karp_owned(values, k, equal, interrupt)
    }
    fn greedy(values: &[u64], k: usize, equal: bool, interrupt: &Interrupt) -> Result<Partition, CoreError> {
        greedy::greedy_partition_interruptible(values, k, equal, interrupt)
    }
    fn refine(
        values: &[u64],
        parts: Vec<Vec<u32>>,
        keep_counts: bool,
        mode: Mode,
        interrupt: &Interrupt,
    ) -> Result<Vec<Vec<u32>>, RefineError> {
        refine::refine_interruptible(values, parts, keep_counts, mode, None, interrupt)
    }
    /// Numbered straight from the merge lists, without the partition in between.
    fn ldm_ids_owned(
        values: Vec<u64>,
        k: usize,
        equal: bool,
        interrupt: &Interrupt,
    ) -> Result<Vec<i64>, CoreError> {
        ldm::partition_ids_owned(values, k, equal, interrupt)
    }
}

/// Refinement judges loads exactly, in `f64`: `f64` weights as they are...
fn as_f64(values: &[f64]) -> Result<Cow<'_, [f64]>, CoreError> {
    Ok(Cow::Borrowed(values))
}

/// ...and `f32` weights widened (exactly).
fn widened(values: &[f32]) -> Result<Cow<'static, [f64]>, CoreError> {
    Ok(Cow::Owned(alloc::collect(values.iter().map(|&v| f64::from(v)), "the widened weights")?))
}

/// The float precisions run the same float partitioners; they differ only in how refinement
/// reads their weights (`$exact`).
macro_rules! float_weight {
    ($float:ty, $exact:ident) => {
        impl Weight for $float {
            fn ldm(
                values: &[$float],
                k: usize,
                equal: bool,
                interrupt: &Interrupt,
            ) -> Result<Partition, CoreError> {
                float::karmarkar_karp_interruptible(values, k, equal, interrupt)
            }
            /// Numbered straight from the merge lists, without the partition in between.
            fn ldm_ids_owned(
                values: Vec<$float>,
                k: usize,
                equal: bool,
                interrupt: &Interrupt,
            ) -> Result<Vec<i64>, CoreError> {
                float::partition_ids_owned(values, k, equal, interrupt)
            }
            fn ldm_owned(
                values: Vec<$float>,
                k: usize,
                equal: bool,
                interrupt: &Interrupt,
            ) -> Result<Partition, CoreError> {
                float::karmarkar_karp_owned(values, k, equal, interrupt)
            }
            fn greedy(
                values: &[$float],
                k: usize,
                equal: bool,
                interrupt: &Interrupt,
            ) -> Result<Partition, CoreError> {
                float::greedy_partition_interruptible(values, k, equal, interrupt)
            }
            fn refine(
                values: &[$float],
                parts: Vec<Vec<u32>>,
                keep_counts: bool,
                mode: Mode,
                interrupt: &Interrupt,
            ) -> Result<Vec<Vec<u32>>, RefineError> {
                let exact = $exact(values)?;
                refine::refine_floats_interruptible(&exact, parts, keep_counts, mode, None, interrupt)
            }
        }
    };
}

float_weight!(f64, as_f64);
float_weight!(f32, widened);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(request: Request, weights: Weights) -> Answer {
        request.run(weights, &Interrupt::NEVER).unwrap()
    }

    fn request(counts: Counts, algorithm: Algorithm, refine: Refine, output: Output) -> Request {
        Request { k: 3, counts, algorithm, refine, output }
    }

    /// Every combination gives what the separate functions give, in every precision.
    #[test]
    fn agrees_with_the_separate_functions() {
        let values: Vec<u64> = (0..23u64).map(|i| (i * 7919) % 101 + 1).collect();
        let floats: Vec<f64> = values.iter().map(|&v| v as f64 / 4.0).collect();
        let never = &Interrupt::NEVER;
        for counts in [Counts::Free, Counts::Equal, Counts::Nearly] {
            let equal = counts != Counts::Free;
            let n = if counts == Counts::Equal { 21 } else { 23 };
            let values = &values[..n];
            let floats = &floats[..n];
            let ldm = |v: &[u64]| {
                if counts == Counts::Nearly {
                    nearly::with_placeholders(v, 3, |v, k| ldm::karmarkar_karp(v, k, true))
                } else {
                    ldm::karmarkar_karp(v, 3, equal)
                }
                .unwrap()
            };
            let expected = ldm(values);
            let got = run(
                request(counts, Algorithm::Ldm, Refine::No, Output::MergeOrder),
                Weights::Exact(values.to_vec()),
            );
            assert_eq!(got, Answer::Parts(expected.clone()));
            let got = run(
                request(counts, Algorithm::Ldm, Refine::No, Output::Ids),
                Weights::Exact(values.to_vec()),
            );
            assert_eq!(got, Answer::Ids(expected.ids(n, never).unwrap()));
            let sorted = expected.clone().sorted_within(never).unwrap();
            let got = run(
                request(counts, Algorithm::Ldm, Refine::No, Output::Sorted),
                Weights::Exact(values.to_vec()),
            );
            assert_eq!(got, Answer::Parts(sorted.clone()));
            let refined =
                refine::refine(values, sorted.to_vecs().unwrap(), equal, Mode::Local, None).unwrap();
            let got = run(
                request(counts, Algorithm::Ldm, Refine::Local, Output::Sorted),
                Weights::Exact(values.to_vec()),
            );
            let Answer::Parts(got) = got else { panic!("parts asked for") };
            assert_eq!(got.to_vecs().unwrap(), refined);
            let float_expected = if counts == Counts::Nearly {
                nearly::with_placeholders(floats, 3, |v, k| float::karmarkar_karp(v, k, true))
            } else {
                float::karmarkar_karp(floats, 3, equal)
            }
            .unwrap();
            let got = run(
                request(counts, Algorithm::Ldm, Refine::No, Output::MergeOrder),
                Weights::Double(floats.to_vec()),
            );
            assert_eq!(got, Answer::Parts(float_expected));
            if counts != Counts::Nearly {
                let greedy = greedy::greedy_partition(values, 3, equal).unwrap();
                let got = run(
                    request(counts, Algorithm::Greedy, Refine::No, Output::MergeOrder),
                    Weights::Exact(values.to_vec()),
                );
                assert_eq!(got, Answer::Parts(greedy));
            }
        }
    }

    #[test]
    fn refined_ids_number_the_refined_parts() {
        let values: Vec<u64> = vec![9, 8, 7, 1, 1, 1, 5, 5, 2];
        let lists = run(
            request(Counts::Equal, Algorithm::Ldm, Refine::Exact, Output::Sorted),
            Weights::Exact(values.clone()),
        );
        let ids = run(
            request(Counts::Free, Algorithm::Ldm, Refine::Exact, Output::Ids),
            Weights::Exact(values.clone()),
        );
        let Answer::Parts(parts) = lists else { panic!("parts asked for") };
        assert!(parts.parts().all(|p| p.windows(2).all(|w| w[0] < w[1])));
        let Answer::Ids(ids) = ids else { panic!("ids asked for") };
        assert_eq!(ids.len(), values.len());
        assert!(ids.iter().all(|&id| (0..3).contains(&id)));
    }

    #[test]
    fn shape_errors_come_first() {
        let got = request(Counts::Equal, Algorithm::Ldm, Refine::Local, Output::Ids)
            .run(Weights::Exact(vec![1, 2]), &Interrupt::NEVER);
        assert_eq!(got, Err(CoreError::TooFewItems { n_items: 2, k_partitions: 3 }));
        let got = request(Counts::Equal, Algorithm::Greedy, Refine::No, Output::MergeOrder)
            .run(Weights::Single(vec![1.0; 4]), &Interrupt::NEVER);
        assert_eq!(got, Err(CoreError::NotDivisible { n_items: 4, k_partitions: 3 }));
    }
}
