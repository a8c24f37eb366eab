//! Refinement of float weights, judged on exactly computed loads.
//!
//! Every finite float is an integer times a power of two, so the search runs on an integer image
//! of the values: each scaled by one common power of two. When the values span at most 62 bits
//! (from the largest value's top bit to the lowest set bit of any value) the image is exact, and
//! the integer search's loads are the exact loads, scaled. Wider spans drop low bits of the small
//! values; the search's answer is then checked on exact loads (a fixed-point accumulator covering
//! every double) and kept only when its maximum load is not above the given partition's, and the
//! partitions are put in the output order by their exact loads.

use super::{refine_interruptible, validate_interruptible, Mode, RefineError};
use crate::alloc;
use crate::error::CoreError;
use crate::exact::ExactSum;
use crate::float::decompose;
use crate::interrupt::Interrupt;

/// The values times a common power of two, as integers below 2^62, and whether that is exact.
fn integer_image(values: &[f64]) -> Result<(Vec<u64>, bool), CoreError> {
    let (mut lowest, mut highest) = (i32::MAX, i32::MIN);
    for &value in values {
        let (mantissa, exponent) = decompose(value);
        if mantissa != 0 {
            lowest = lowest.min(exponent + mantissa.trailing_zeros() as i32);
            highest = highest.max(exponent + 63 - mantissa.leading_zeros() as i32);
        }
    }
    if lowest == i32::MAX {
        return Ok((alloc::zeroed(values.len(), "the weights' integer image")?, true));
    }
    // The lowest set bit lands on 2^0 when the span allows it, else the top bit on 2^61.
    let shift = if highest - lowest <= 61 { -lowest } else { 61 - highest };
    let mut exact = true;
    let image = alloc::collect(
        values.iter().map(|&value| {
            let (mantissa, exponent) = decompose(value);
            let at = exponent + shift;
            if at >= 0 {
                mantissa << at
            } else if at > -64 {
                exact &= mantissa & ((1u64 << -at) - 1) == 0;
                mantissa >> -at
            } else {
                exact &= mantissa == 0;
                0
            }
        }),
        "the weights' integer image",
    )?;
    Ok((image, exact))
}

fn exact_load(values: &[f64], part: &[u32]) -> ExactSum {
    let mut sum = ExactSum::new();
    for &index in part {
        sum.add(values[index as usize]);
    }
    sum
}

/// The output order of [`refine`]: indexes ascending inside, partitions by exact load descending,
/// equal loads by smallest index.
fn in_output_order(values: &[f64], parts: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>, CoreError> {
    let loaded = parts.into_iter().map(|mut part| {
        part.sort_unstable();
        (exact_load(values, &part), part)
    });
    let mut loaded = alloc::collect(loaded, "partition loads")?;
    loaded.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.first().cmp(&b.1.first())));
    let mut ordered = alloc::with_capacity(loaded.len(), "the refined partitions")?;
    ordered.extend(loaded.into_iter().map(|(_, part)| part));
    Ok(ordered)
}

/// A copy of `parts`, failing instead of aborting when memory runs out.
fn copy_parts(parts: &[Vec<u32>]) -> Result<Vec<Vec<u32>>, CoreError> {
    let mut copy = alloc::with_capacity(parts.len(), "a copy of the partitions")?;
    for part in parts {
        let mut items = alloc::with_capacity(part.len(), "a copy of the partitions")?;
        items.extend_from_slice(part);
        copy.push(items);
    }
    Ok(copy)
}

/// [`refine`] for float weights (`f32` weights widen exactly to `f64`): the maximum load, computed
/// exactly, is never above the given partition's. Values must be finite and `>= 0`
/// ([`RefineError::BadValue`] names the first that is not).
pub fn refine_floats(
    values: &[f64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
) -> Result<Vec<Vec<u32>>, RefineError> {
    refine_floats_interruptible(values, parts, equal_size, mode, effort, &Interrupt::NEVER)
}

/// [`refine_floats`], stopping with `RefineError::Core(CoreError::Interrupted)` when `interrupt`
/// says so.
pub fn refine_floats_interruptible(
    values: &[f64],
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    mode: Mode,
    effort: Option<u64>,
    interrupt: &Interrupt,
) -> Result<Vec<Vec<u32>>, RefineError> {
    if let Some(position) = values.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
        return Err(RefineError::BadValue { position });
    }
    validate_interruptible(values.len(), &parts, interrupt)?;
    let (image, exact) = integer_image(values)?;
    if exact {
        return refine_interruptible(&image, parts, equal_size, mode, effort, interrupt);
    }
    let refined = refine_interruptible(&image, copy_parts(&parts)?, equal_size, mode, effort, interrupt)?;
    let heaviest = |parts: &[Vec<u32>]| parts.iter().map(|part| exact_load(values, part)).max();
    let chosen = if heaviest(&refined) <= heaviest(&parts) { refined } else { parts };
    Ok(in_output_order(values, chosen)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_exact_when_the_span_allows() {
        assert_eq!(integer_image(&[0.5, 1.25, 0.0, 3.0]).unwrap(), (vec![2, 5, 0, 12], true));
        assert_eq!(integer_image(&[0.0, -0.0]).unwrap(), (vec![0, 0], true));
        let (image, exact) = integer_image(&[1e300, 1e-300]).unwrap();
        assert!(!exact && image[1] == 0 && image[0] >> 61 == 1);
        assert!(integer_image(&[5e-324, 1e-310]).unwrap().1);
    }

    #[test]
    fn exact_sums_compare_exactly() {
        // 2^60 + 1 and 2^60 round to the same double; the exact sums still differ.
        let mut a = ExactSum::new();
        a.add(1_152_921_504_606_846_976.0);
        a.add(1.0);
        let mut b = ExactSum::new();
        b.add(1_152_921_504_606_846_976.0);
        assert!(a > b);
        let mut c = ExactSum::new();
        c.add(5e-324);
        assert!(c > ExactSum::new() && c < b);
        let mut huge = ExactSum::new();
        for _ in 0..4 {
            huge.add(f64::MAX);
        }
        assert!(huge > b);
    }

    #[test]
    fn wide_spans_never_make_the_heaviest_heavier() {
        // The image drops 1e-300 entirely; the exact check still orders and keeps the guarantee.
        let values = [1e300, 1e300, 1e-300, 3e299, 5e299, 2e299];
        let start = vec![vec![0, 2], vec![1, 3, 4, 5]];
        let refined = refine_floats(&values, start.clone(), false, Mode::Local, None).unwrap();
        let max = |parts: &[Vec<u32>]| parts.iter().map(|p| exact_load(&values, p)).max().unwrap();
        assert!(max(&refined) <= max(&start));
        let loads: Vec<ExactSum> = refined.iter().map(|p| exact_load(&values, p)).collect();
        assert!(loads.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(
            refine_floats(&[1.0, f64::NAN], vec![vec![0, 1]], false, Mode::Local, None),
            Err(RefineError::BadValue { position: 1 })
        );
    }
}
