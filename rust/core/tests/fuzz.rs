//! A fuzz-style campaign on the core's public functions: arbitrary values (u64 extremes included),
//! arbitrary float weights (NaN, infinities, negatives, subnormals, the largest finite values),
//! arbitrary k (0 and far beyond n), nearly-equal counts, arbitrary partitions for refine,
//! arbitrary capacities for packing, and interrupts at arbitrary points. Whatever the input, no
//! function panics: it returns the error the spec names, or an answer that satisfies the spec's
//! invariants.
use std::cell::Cell;

use proptest::prelude::*;
use seqbalance_core::error::CoreError;
use seqbalance_core::float::{self, Float};
use seqbalance_core::greedy::{greedy_partition, greedy_partition_interruptible};
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::ldm::{balanced_partitions, karmarkar_karp, karmarkar_karp_interruptible};
use seqbalance_core::nearly::with_placeholders;
use seqbalance_core::packing::{pack, pack_interruptible, Algorithm, PackError};
use seqbalance_core::parts::Partition;
use seqbalance_core::refine::{refine, refine_interruptible, Mode, RefineError};
use seqbalance_core::request::{self, Answer, Output, Refine, Request, Weights};
use seqbalance_core::sort::sorted_order;

/// One value: extremes and their neighbours as often as ordinary ones.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        (u64::MAX - 3)..=u64::MAX,
        0u64..4,
        0u64..40_000,
        Just(u32::MAX as u64),
        (u32::MAX as u64)..=(u32::MAX as u64 + 2),
        any::<u64>(),
    ]
}

/// Up to `max_len` values; long enough to take the radix sorts (above 256 items).
fn values(max_len: usize) -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(value(), 0..max_len)
}

/// k anywhere: 0, small, around n, or absurdly large.
fn any_k() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..10, 0usize..400, Just(usize::MAX), any::<usize>()]
}

/// The error the spec names for this shape, if any.
fn shape_error(n: usize, k: usize, equal_size: bool) -> Option<CoreError> {
    if k == 0 {
        Some(CoreError::NoPartitions)
    } else if n < k {
        Some(CoreError::TooFewItems { n_items: n, k_partitions: k })
    } else if equal_size && n % k != 0 {
        Some(CoreError::NotDivisible { n_items: n, k_partitions: k })
    } else {
        None
    }
}

/// What a partition must hold besides every index once.
#[derive(Clone, Copy, PartialEq)]
enum Counts {
    /// Any counts; partitions may be empty (the greedy helper leaves them so on zero weights).
    Any,
    /// No partition empty (the largest differencing method with `n >= k`).
    NonEmpty,
    /// `n / k` each.
    Equal,
    /// `n / k` or `n / k + 1` each.
    Nearly,
}

/// What the partitioner promises about counts.
fn counts(name: &str, equal_size: bool) -> Counts {
    match (equal_size, name.starts_with("greedy")) {
        (true, _) => Counts::Equal,
        (false, true) => Counts::Any,
        (false, false) => Counts::NonEmpty,
    }
}

/// Every index once, and the counts as promised.
fn check_partition(partition: &Partition, n: usize, k: usize, counts: Counts) -> Result<(), TestCaseError> {
    prop_assert_eq!(partition.k(), k);
    let mut seen = vec![false; n];
    for part in partition.parts() {
        match counts {
            Counts::Any => {}
            Counts::NonEmpty => prop_assert!(!part.is_empty()),
            Counts::Equal => prop_assert_eq!(part.len(), n / k),
            Counts::Nearly => prop_assert!(part.len() == n / k || part.len() == n / k + 1),
        }
        for &index in part {
            prop_assert!((index as usize) < n);
            prop_assert!(!seen[index as usize], "index {} twice", index);
            seen[index as usize] = true;
        }
    }
    prop_assert!(seen.iter().all(|&s| s));
    Ok(())
}

type Partitioner = fn(&[u64], usize, bool) -> Result<Partition, CoreError>;

const PARTITIONERS: [(&str, Partitioner); 3] = [
    ("karmarkar_karp", karmarkar_karp),
    ("balanced_partitions", balanced_partitions),
    ("greedy_partition", greedy_partition),
];

/// An interrupt that fires on its `after`-th question (never when `after` is `None`).
fn stop_after(after: Option<usize>) -> (Cell<usize>, impl Fn(&Cell<usize>) -> bool) {
    (Cell::new(0), move |asked: &Cell<usize>| {
        asked.set(asked.get() + 1);
        after.is_some_and(|after| asked.get() > after)
    })
}

/// Each `(interrupted, plain)` pair of one partitioner's runs: `Interrupted` (only where an
/// interrupt was asked for) or the plain call's answer, compared as debug text (NaN weights
/// compare unequal to themselves).
fn check_interrupted<T: std::fmt::Debug>(
    runs: impl IntoIterator<Item = (Result<T, CoreError>, Result<T, CoreError>)>,
    after: Option<usize>,
) -> Result<(), TestCaseError> {
    for (interrupted, plain) in runs {
        match interrupted {
            Err(CoreError::Interrupted) => prop_assert!(after.is_some()),
            other => prop_assert_eq!(format!("{other:?}"), format!("{plain:?}")),
        }
    }
    Ok(())
}

/// A [`Request`] for the largest differencing method's partition, sorted inside.
fn sorted_request(
    weights: Weights,
    k: usize,
    equal_size: bool,
    interrupt: &Interrupt,
) -> Result<Partition, CoreError> {
    let counts = if equal_size { request::Counts::Equal } else { request::Counts::Free };
    let request =
        Request { k, counts, algorithm: request::Algorithm::Ldm, refine: Refine::No, output: Output::Sorted };
    request.run(weights, interrupt).map(|answer| match answer {
        Answer::Parts(partition) => partition,
        Answer::Ids(_) => panic!("a partition was asked for"),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn partitioners_answer_or_name_the_error(values in values(600), k in any_k(), equal_size in any::<bool>()) {
        let n = values.len();
        for (name, partitioner) in PARTITIONERS {
            match (partitioner(&values, k, equal_size), shape_error(n, k, equal_size)) {
                (Err(got), Some(expected)) => prop_assert_eq!(got, expected, "{}", name),
                (Ok(partition), None) => check_partition(&partition, n, k, counts(name, equal_size))?,
                (got, expected) => prop_assert!(false, "{}: {:?}, expected {:?}", name, got, expected),
            }
        }
    }

    #[test]
    fn the_sort_is_by_value_then_index(values in values(1500)) {
        let mut naive: Vec<u32> = (0..values.len() as u32).collect();
        naive.sort_by_key(|&i| (values[i as usize], i));
        prop_assert_eq!(sorted_order(&values).unwrap(), naive);
    }

    #[test]
    fn an_interrupt_anywhere_is_an_error_or_changes_nothing(
        values in values(600),
        k in 1usize..12,
        equal_size in any::<bool>(),
        after in prop::option::of(0usize..6),
    ) {
        let (asked, stop) = stop_after(after);
        let question = || stop(&asked);
        let interrupt = Interrupt::new(&question);
        let runs: [(Result<Partition, CoreError>, Result<Partition, CoreError>); 3] = [
            (karmarkar_karp_interruptible(&values, k, equal_size, &interrupt), karmarkar_karp(&values, k, equal_size)),
            (
                sorted_request(Weights::Exact(values.clone()), k, equal_size, &interrupt),
                balanced_partitions(&values, k, equal_size),
            ),
            (greedy_partition_interruptible(&values, k, equal_size, &interrupt), greedy_partition(&values, k, equal_size)),
        ];
        check_interrupted(runs, after)?;
    }
}

proptest! {
    // Inputs large enough for the linear pass that sorts the indexes inside big partitions.
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn large_partitions_are_sorted_inside(values in prop::collection::vec(0u64..1000, 4096..6000), k in 1usize..8) {
        let balanced = balanced_partitions(&values, k, false).unwrap();
        let mut expected = karmarkar_karp(&values, k, false).unwrap();
        for p in 0..k {
            let (start, end) = (expected.offsets[p], expected.offsets[p + 1]);
            expected.order[start..end].sort_unstable();
        }
        prop_assert_eq!(balanced, expected);
    }
}

/// Arbitrary partitions of `0..n`-ish: indexes may be out of range, repeated or missing, and
/// partitions empty; half the time a valid partition (shuffled indexes dealt into k parts).
fn partitions(n: usize) -> impl Strategy<Value = Vec<Vec<u32>>> {
    let arbitrary = prop::collection::vec(prop::collection::vec(0u32..(n as u32 + 3), 0..6), 0..6);
    let valid = (1usize..=n.max(1), Just(n)).prop_flat_map(|(k, n)| {
        Just((0..n as u32).collect::<Vec<u32>>()).prop_shuffle().prop_map(move |indexes| {
            let mut parts = vec![Vec::new(); k];
            for (position, index) in indexes.into_iter().enumerate() {
                parts[position % k].push(index);
            }
            parts
        })
    });
    prop_oneof![arbitrary, valid]
}

/// Why `parts` is not a partition of `0..n` into non-empty parts, as refine reports it.
fn partition_problem(n: usize, parts: &[Vec<u32>]) -> Option<RefineError> {
    if parts.is_empty() {
        return Some(RefineError::NoPartitions);
    }
    let mut seen = vec![false; n];
    for (p, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Some(RefineError::EmptyPartition { partition: p });
        }
        for &index in part {
            if index as usize >= n {
                return Some(RefineError::IndexOutOfRange { partition: p, index, n_values: n });
            }
            if seen[index as usize] {
                return Some(RefineError::DuplicateIndex { index });
            }
            seen[index as usize] = true;
        }
    }
    seen.iter().position(|&s| !s).map(|index| RefineError::MissingIndex { index })
}

fn max_load(values: &[u64], parts: &[Vec<u32>]) -> u128 {
    parts.iter().map(|part| part.iter().map(|&i| values[i as usize] as u128).sum()).max().unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn refine_answers_or_names_the_problem(
        (values, parts) in values(14).prop_flat_map(|values| {
            let n = values.len();
            (Just(values), partitions(n))
        }),
        equal_size in any::<bool>(),
        exact in any::<bool>(),
        effort in prop::option::of(0u64..2000),
    ) {
        let n = values.len();
        let mode = if exact { Mode::Exact } else { Mode::Local };
        let problem = partition_problem(n, &parts);
        match refine(&values, parts.clone(), equal_size, mode, effort) {
            Err(error) => prop_assert_eq!(Some(error), problem),
            Ok(refined) => {
                prop_assert_eq!(problem, None);
                prop_assert_eq!(refined.len(), parts.len());
                prop_assert!(partition_problem(n, &refined).is_none());
                prop_assert!(max_load(&values, &refined) <= max_load(&values, &parts));
                if equal_size {
                    let mut before: Vec<usize> = parts.iter().map(Vec::len).collect();
                    let mut after: Vec<usize> = refined.iter().map(Vec::len).collect();
                    before.sort_unstable();
                    after.sort_unstable();
                    prop_assert_eq!(before, after);
                }
                for part in &refined {
                    prop_assert!(part.windows(2).all(|w| w[0] < w[1]));
                }
            }
        }
    }

    #[test]
    fn refine_interrupted_is_an_error_or_the_same_answer(
        (values, parts) in values(14).prop_flat_map(|values| {
            let n = values.len();
            (Just(values), partitions(n))
        }),
        exact in any::<bool>(),
        after in prop::option::of(0usize..4),
    ) {
        let mode = if exact { Mode::Exact } else { Mode::Local };
        let (asked, stop) = stop_after(after);
        let question = || stop(&asked);
        let interrupted = refine_interruptible(&values, parts.clone(), false, mode, Some(50_000), &Interrupt::new(&question));
        match interrupted {
            Err(RefineError::Core(CoreError::Interrupted)) => prop_assert!(after.is_some()),
            other => prop_assert_eq!(other, refine(&values, parts, false, mode, Some(50_000))),
        }
    }

    #[test]
    fn packing_answers_or_names_the_long_item(
        lengths in values(300),
        capacity in value(),
        algorithm in prop::sample::select(vec![
            Algorithm::NextFit,
            Algorithm::FirstFit,
            Algorithm::FirstFitDecreasing,
            Algorithm::BestFitDecreasing,
        ]),
        after in prop::option::of(0usize..3),
    ) {
        match pack(&lengths, capacity, algorithm) {
            Err(PackError::TooLong { index, length, capacity: cap }) => {
                prop_assert_eq!(cap, capacity);
                prop_assert_eq!(lengths[index], length);
                prop_assert_eq!(lengths.iter().position(|&l| l > capacity), Some(index));
            }
            Err(other) => prop_assert!(false, "{:?}", other),
            Ok(packs) => {
                let mut seen = vec![false; lengths.len()];
                for pack in &packs {
                    prop_assert!(!pack.is_empty());
                    prop_assert!(pack.iter().map(|&i| lengths[i] as u128).sum::<u128>() <= capacity as u128);
                    for &i in pack {
                        prop_assert!(!seen[i]);
                        seen[i] = true;
                    }
                }
                prop_assert!(seen.iter().all(|&s| s));
                let (asked, stop) = stop_after(after);
                let question = || stop(&asked);
                match pack_interruptible(&lengths, capacity, algorithm, &Interrupt::new(&question)) {
                    Err(PackError::Core(CoreError::Interrupted)) => prop_assert!(after.is_some()),
                    other => prop_assert_eq!(other, Ok(packs)),
                }
            }
        }
    }
}

/// Float weights of one precision: the ordinary (fractions, integers), the extremes the contract
/// accepts (the largest finite value, subnormals, `-0.0`) and, in half the vectors, the ones it
/// refuses (NaN, infinities, negatives).
macro_rules! float_weights {
    ($name:ident, $float:ty) => {
        fn $name(max_len: usize) -> impl Strategy<Value = Vec<$float>> {
            let clean = || {
                prop_oneof![
                    4 => (0.0 as $float)..1.0,
                    4 => (0u16..1000).prop_map(<$float>::from),
                    1 => Just(0.0 as $float),
                    1 => Just(-0.0 as $float),
                    1 => Just(<$float>::MAX),
                    1 => Just(<$float>::MAX / 3.0),
                    1 => Just(<$float>::MIN_POSITIVE),
                    1 => Just(<$float>::MIN_POSITIVE / 4.0),
                    1 => (0.0 as $float)..<$float>::MAX,
                ]
            };
            let hostile = prop_oneof![
                Just(<$float>::NAN),
                Just(<$float>::INFINITY),
                Just(<$float>::NEG_INFINITY),
                (-1e9 as $float)..(-1e-9 as $float),
            ];
            prop_oneof![
                prop::collection::vec(clean(), 0..max_len),
                prop::collection::vec(prop_oneof![20 => clean(), 1 => hostile], 0..max_len),
            ]
        }
    };
}

float_weights!(doubles, f64);
float_weights!(singles, f32);

type FloatPartitioner<F> = fn(&[F], usize, bool) -> Result<Partition, CoreError>;

fn float_partitioners<F: Float>() -> [(&'static str, FloatPartitioner<F>); 3] {
    [
        ("karmarkar_karp", float::karmarkar_karp::<F>),
        ("balanced_partitions", float::balanced_partitions::<F>),
        ("greedy_partition", float::greedy_partition::<F>),
    ]
}

/// The float answer is the shape error, then the first bad weight, then a partition; or, for
/// totals near the largest finite value, the overflow (largest differencing) or lost counts
/// (greedy with equal counts) errors the core documents.
fn check_float_answer<F: Float + MaxFinite>(
    name: &str,
    got: Result<Partition, CoreError>,
    values: &[F],
    k: usize,
    counts: Counts,
) -> Result<(), TestCaseError> {
    let n = values.len();
    let equal_size = counts == Counts::Equal;
    if let Some(expected) = shape_error(n, k, equal_size) {
        prop_assert_eq!(got, Err(expected), "{}", name);
        return Ok(());
    }
    let bad = values.iter().position(|&v| !(v.is_finite() && v >= F::ZERO));
    let huge = values.iter().map(|v| v.to_f64()).sum::<f64>() >= F::MAX_FINITE / 2.0;
    match (got, bad) {
        (Err(CoreError::BadWeight { position, value }), Some(bad)) => {
            prop_assert_eq!(position, bad, "{}", name);
            prop_assert_eq!(value.to_bits(), values[bad].to_f64().to_bits(), "{}", name);
        }
        (Ok(partition), None) => check_partition(&partition, n, k, counts)?,
        (Err(CoreError::SumOverflow), None) if huge && !name.starts_with("greedy") => {}
        (Err(CoreError::UnequalCounts { smallest, largest }), None)
            if equal_size && name.starts_with("greedy") =>
        {
            prop_assert!(smallest < largest)
        }
        (got, bad) => prop_assert!(false, "{}: {:?}, first bad weight at {:?}", name, got, bad),
    }
    Ok(())
}

/// The largest finite value of a precision, as `f64`.
trait MaxFinite {
    const MAX_FINITE: f64;
}

impl MaxFinite for f64 {
    const MAX_FINITE: f64 = f64::MAX;
}

impl MaxFinite for f32 {
    const MAX_FINITE: f64 = f32::MAX as f64;
}

fn float_campaign<F: Float + MaxFinite>(
    values: &[F],
    k: usize,
    equal_size: bool,
) -> Result<(), TestCaseError> {
    for (name, partitioner) in float_partitioners::<F>() {
        check_float_answer(name, partitioner(values, k, equal_size), values, k, counts(name, equal_size))?;
    }
    Ok(())
}

/// Nearly equal counts on the equal-size largest differencing method, through the placeholders.
fn nearly_campaign<F: Float + MaxFinite + Default>(values: &[F], k: usize) -> Result<(), TestCaseError> {
    for (name, partitioner) in float_partitioners::<F>().into_iter().take(2) {
        let got = with_placeholders(values, k, |values, k| partitioner(values, k, true));
        check_float_answer(name, got, values, k, Counts::Nearly)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn float_partitioners_answer_or_name_the_error(
        doubles in doubles(300),
        singles in singles(300),
        k in any_k(),
        equal_size in any::<bool>(),
    ) {
        float_campaign(&doubles, k, equal_size)?;
        float_campaign(&singles, k, equal_size)?;
    }

    #[test]
    fn nearly_equal_counts_answer_or_name_the_error(
        values in values(600),
        doubles in doubles(300),
        singles in singles(300),
        k in any_k(),
    ) {
        let n = values.len();
        for (name, partitioner) in PARTITIONERS.into_iter().take(2) {
            match (with_placeholders(&values, k, |values, k| partitioner(values, k, true)), shape_error(n, k, false)) {
                (Err(got), Some(expected)) => prop_assert_eq!(got, expected, "{}", name),
                (Ok(partition), None) => check_partition(&partition, n, k, Counts::Nearly)?,
                (got, expected) => prop_assert!(false, "{}: {:?}, expected {:?}", name, got, expected),
            }
        }
        nearly_campaign(&doubles, k)?;
        nearly_campaign(&singles, k)?;
    }

    #[test]
    fn float_interrupt_anywhere_is_an_error_or_changes_nothing(
        doubles in doubles(600),
        k in 1usize..12,
        equal_size in any::<bool>(),
        after in prop::option::of(0usize..6),
    ) {
        let (asked, stop) = stop_after(after);
        let question = || stop(&asked);
        let interrupt = Interrupt::new(&question);
        let runs = [
            (float::karmarkar_karp_interruptible(&doubles, k, equal_size, &interrupt), float::karmarkar_karp(&doubles, k, equal_size)),
            (
                sorted_request(Weights::Double(doubles.clone()), k, equal_size, &interrupt),
                float::balanced_partitions(&doubles, k, equal_size),
            ),
            (float::greedy_partition_interruptible(&doubles, k, equal_size, &interrupt), float::greedy_partition(&doubles, k, equal_size)),
        ];
        check_interrupted(runs, after)?;
    }
}
