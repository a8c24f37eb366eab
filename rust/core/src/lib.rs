//! The algorithms of seqbalance, in plain Rust with no Python anywhere.
//!
//! * [`request`]: one partitioning call (k, count rule, algorithm, refinement, output) on any
//!   weights: what the Python binding runs.
//! * [`ldm`]: Karmarkar–Karp largest differencing into `k` sets, free or equal-size, exactly as the
//!   pure-Python reference computes it (the same ties, the same order of sets and items).
//! * [`nearly`]: nearly equal counts (`n / k` or `n / k + 1` per partition) on the equal-size rules.
//! * [`greedy`]: the greedy partitioner (heaviest item to the lightest set).
//! * [`float`]: both partitioners on `f64`/`f32` weights, in the reference's float arithmetic.
//! * [`refine`]: pairwise item swaps and moves that never make the heaviest set heavier.
//! * [`planner`]: micro-batches under a token cap (count search, fit test, balanced split).
//! * [`cp`]: context parallelism planned per sequence (degrees, groups, steps) in a time model.
//! * [`packing`]: bin packing under a capacity (next fit, first fit, first/best fit decreasing).
//! * [`sort`]: the seeding sort shared by the partitioners.
//! * [`stream`]: the streaming packer (bounded open packs, best fit as items arrive).
//! * [`alloc`] and [`interrupt`]: fallible allocation and cooperative cancellation, so that a
//!   call too large for memory or interrupted by the user fails with an error instead of aborting.
//!
//! The Python extension (`rust/bind`) converts arguments, releases the GIL and maps
//! [`error::CoreError`] to Python exceptions; nothing here depends on it.
//!
//! ```
//! use seqbalance_core::ldm::balanced_partitions;
//! let lengths = [5, 4, 3, 3, 2, 1];
//! let partition = balanced_partitions(&lengths, 2, true).unwrap();
//! let loads: Vec<u64> = partition.parts().map(|p| p.iter().map(|&i| lengths[i as usize]).sum()).collect();
//! assert_eq!(loads, vec![9, 9]);
//! assert!(partition.parts().all(|p| p.len() == 3));
//! ```
pub mod alloc;
pub mod cp;
pub mod error;
pub mod exact;
pub mod float;
pub mod greedy;
pub mod interrupt;
pub mod ldm;
pub mod nearly;
pub mod packing;
pub mod parts;
pub mod planner;
pub mod refine;
pub mod request;
pub mod sort;
pub mod stream;
