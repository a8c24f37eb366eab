//! Errors of the partitioning core (plain Rust; the binding maps them to Python exceptions).
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum CoreError {
    /// `k_partitions` is zero.
    NoPartitions,
    /// Fewer items than partitions: some partition would be empty.
    TooFewItems { n_items: usize, k_partitions: usize },
    /// `equal_size` asks for equal counts that `n_items` cannot give.
    NotDivisible { n_items: usize, k_partitions: usize },
    /// Item positions are stored as `u32`.
    TooManyItems { n_items: usize },
    /// A float weight that is NaN, infinite or negative (the first such position).
    BadWeight { position: usize, value: f64 },
    /// A float sum reached infinity (the total was above half the largest finite value).
    SumOverflow,
    /// `greedy_partition` with `equal_size`: float rounding of the biased sums broke equal counts.
    UnequalCounts { smallest: usize, largest: usize },
    /// A buffer that grows with the input could not be allocated.
    OutOfMemory { what: &'static str, bytes: usize },
    /// The caller's [`Interrupt`](crate::interrupt::Interrupt) asked to stop.
    Interrupted,
}

impl fmt::Display for CoreError {
    // The wording matches `seqbalance._inputs.check_shape`, which the pure-Python reference raises;
    // the tests compare the two messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::NoPartitions => write!(f, "k_partitions must be >= 1, got 0"),
            CoreError::TooFewItems { n_items, k_partitions } => {
                write!(f, "number of items ({n_items}) is smaller than k_partitions ({k_partitions})")
            }
            CoreError::NotDivisible { n_items, k_partitions } => write!(
                f,
                "number of items ({n_items}) is not divisible by k_partitions ({k_partitions}) \
                 with equal_size=True (equal_size='nearly' allows counts that differ by one)"
            ),
            CoreError::TooManyItems { n_items } => {
                write!(f, "number of items ({n_items}) exceeds the supported maximum ({})", u32::MAX - 1)
            }
            CoreError::BadWeight { position, value } => {
                write!(f, "seqlen_list[{position}] must be finite and >= 0, got {value}")
            }
            CoreError::SumOverflow => {
                write!(f, "seqlen_list sums past the largest finite float; scale the weights down")
            }
            CoreError::UnequalCounts { smallest, largest } => write!(
                f,
                "greedy_partition with equal_size=True lost equal counts (parts of {smallest} to \
                 {largest} items): float rounding of the biased sums; pass integer or smaller weights"
            ),
            CoreError::OutOfMemory { what, bytes } => {
                write!(f, "out of memory: could not allocate {bytes} bytes for {what}")
            }
            CoreError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for CoreError {}

/// Check the request's shape, in the reference's order.
pub fn check_shape(n_items: usize, k_partitions: usize, equal_size: bool) -> Result<(), CoreError> {
    if k_partitions == 0 {
        return Err(CoreError::NoPartitions);
    }
    if n_items < k_partitions {
        return Err(CoreError::TooFewItems { n_items, k_partitions });
    }
    if equal_size && n_items % k_partitions != 0 {
        return Err(CoreError::NotDivisible { n_items, k_partitions });
    }
    if n_items >= u32::MAX as usize {
        return Err(CoreError::TooManyItems { n_items });
    }
    Ok(())
}
