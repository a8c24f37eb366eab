//! Binding of the refinement engine (`seqbalance_core::refine`): the private `_refine` function.
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};

use seqbalance_core::alloc;
use seqbalance_core::refine::{refine_floats_interruptible, refine_interruptible, validate, Mode};

use crate::convert::{describe, index_lists, unsigned_array};
use crate::errors::{core_error, guard, interruptible, located_error, refine_result, Base, DETACH_THRESHOLD};

/// Copy `partitions` (an iterable of iterables of ints) out of Python, checking every index.
///
/// A valid partition holds each of the `n_values` indexes once in at most `n_values` non-empty
/// partitions, so reading stops as soon as more arrive (an endless iterator cannot exhaust
/// memory): what was read is then invalid, and the error is the one validating it reports.
fn extract_partitions(partitions: &Bound<'_, PyAny>, n_values: usize) -> PyResult<Vec<Vec<u32>>> {
    let py = partitions.py();
    let wrong_type = |path: &[usize], item: &Bound<'_, PyAny>, expected: &str| {
        let shown = describe(item);
        let mut place = String::from("partitions");
        for step in path {
            place += &format!("[{step}]");
        }
        let message = format!("{place} must be {expected}, got {shown}");
        let ctx = [("expected", expected), ("shown", shown.as_str())];
        located_error(py, Base::Type, "wrong_type", "partitions", path, item, &ctx, message)
    };
    let not_an_index = |p: usize, j: usize, item: &Bound<'_, PyAny>, shown: String| {
        let count = n_values.to_string();
        let message = format!("partitions[{p}][{j}] is {shown}, not an index of the {n_values} values");
        let ctx = [("shown", shown.as_str()), ("n_values", count.as_str())];
        located_error(py, Base::Value, "not_an_index", "partitions", &[p, j], item, &ctx, message)
    };
    let outer = partitions.try_iter().map_err(|_| wrong_type(&[], partitions, "a list of lists of int"))?;
    let mut parts = Vec::new();
    let mut total = 0usize;
    let too_many = |parts: &[Vec<u32>]| {
        let error = validate(n_values, parts).err();
        PyValueError::new_err(error.map_or_else(
            || format!("partitions holds more than {n_values} indexes, more than there are values"),
            |error| error.to_string(),
        ))
    };
    for (p, part) in outer.enumerate() {
        if p > n_values {
            // n + 1 partitions, all of them non-empty, would hold more than n indexes.
            return Err(too_many(&parts));
        }
        let part = part?;
        let inner = part.try_iter().map_err(|_| wrong_type(&[p], &part, "a list of int"))?;
        let mut indexes = Vec::new();
        for (j, item) in inner.enumerate() {
            if total % (1 << 16) == (1 << 16) - 1 {
                py.check_signals()?;
            }
            let item = item?;
            let index: i64 = match item.extract() {
                Ok(index) => index,
                // An int too large for i64 is still an int: report it as a bad index.
                Err(_) if item.is_instance_of::<PyInt>() => {
                    return Err(not_an_index(p, j, &item, describe(&item)))
                }
                Err(_) => return Err(wrong_type(&[p, j], &item, "an int")),
            };
            if index < 0 || index as u64 >= n_values as u64 {
                return Err(not_an_index(p, j, &item, index.to_string()));
            }
            // In range of a slice whose length fits u32 (checked by the caller).
            alloc::push(&mut indexes, index as u32, "a partition").map_err(|e| core_error(py, e))?;
            total += 1;
            if total > n_values {
                // More indexes than values, each of them in range: one is there twice.
                alloc::push(&mut parts, indexes, "the partitions").map_err(|e| core_error(py, e))?;
                return Err(too_many(&parts));
            }
        }
        alloc::push(&mut parts, indexes, "the partitions").map_err(|e| core_error(py, e))?;
    }
    Ok(parts)
}

/// The weights to refine: exact integers, or floats (float32 widened exactly; refinement judges
/// loads exactly, so the working precision plays no part).
enum Lengths {
    Ints(Vec<u64>),
    Floats(Vec<f64>),
}

impl Lengths {
    fn len(&self) -> usize {
        match self {
            Lengths::Ints(v) => v.len(),
            Lengths::Floats(v) => v.len(),
        }
    }
}

/// `values` (1-D int64 with all values >= 0, float64 or float32), or an error naming them.
fn lengths_of(values: &Bound<'_, PyAny>) -> PyResult<Lengths> {
    let py = values.py();
    fn buffer<T>(py: Python<'_>, len: usize) -> PyResult<Vec<T>> {
        alloc::with_capacity(len, "the values").map_err(|e| core_error(py, e))
    }
    let lengths = if let Ok(array) = values.cast::<PyArray1<i64>>() {
        Lengths::Ints(unsigned_array(py, array.readonly().as_array(), "values")?)
    } else if let Ok(array) = values.cast::<PyArray1<f64>>() {
        let view = array.readonly();
        let mut floats = buffer(py, view.as_array().len())?;
        floats.extend(view.as_array().iter().copied());
        Lengths::Floats(floats)
    } else if let Ok(array) = values.cast::<PyArray1<f32>>() {
        let view = array.readonly();
        let mut floats = buffer(py, view.as_array().len())?;
        floats.extend(view.as_array().iter().map(|&v| v as f64));
        Lengths::Floats(floats)
    } else {
        return Err(PyTypeError::new_err(format!(
            "values must be a 1-D int64, float64 or float32 array, got {}",
            describe(values)
        )));
    };
    if !matches!(lengths, Lengths::Ints(_)) {
        crate::convert::count_read(); // (unsigned_array counts the int64 read)
    }
    if u32::try_from(lengths.len()).is_err() {
        return Err(PyValueError::new_err(format!(
            "values holds {} items; at most {} can be refined",
            lengths.len(),
            u32::MAX
        )));
    }
    Ok(lengths)
}

fn run_refine(
    py: Python<'_>,
    lengths: &Lengths,
    parts: Vec<Vec<u32>>,
    equal_size: bool,
    exact: bool,
    effort: Option<u64>,
) -> PyResult<Vec<Vec<u32>>> {
    let mode = if exact { Mode::Exact } else { Mode::Local };
    let detach = lengths.len() >= DETACH_THRESHOLD;
    refine_result(
        py,
        interruptible(py, detach, |interrupt| match lengths {
            Lengths::Ints(values) => refine_interruptible(values, parts, equal_size, mode, effort, interrupt),
            Lengths::Floats(values) => {
                refine_floats_interruptible(values, parts, equal_size, mode, effort, interrupt)
            }
        }),
    )
}

/// Refine `partitions` of `values` (int64, all >= 0, or validated float64/float32) and return them heaviest first, sorted inside.
///
/// `exact` selects the branch-and-bound mode; `effort` overrides the default budget (local work
/// units, or exact-search nodes). Invalid partitions raise `ValueError`/`TypeError` naming
/// `partitions`.
#[pyfunction]
#[pyo3(signature = (values, partitions, equal_size, exact, effort=None))]
fn _refine<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    partitions: &Bound<'py, PyAny>,
    equal_size: bool,
    exact: bool,
    effort: Option<u64>,
) -> PyResult<Bound<'py, PyList>> {
    guard("_refine", || {
        let lengths = lengths_of(values)?;
        let parts = extract_partitions(partitions, lengths.len())?;
        let refined = run_refine(py, &lengths, parts, equal_size, exact, effort)?;
        index_lists(py, lengths.len(), refined.iter())
    })
}

/// Refine the partition given as a partition number per item (`ids`, int64 in `0..k`, as
/// `partition_ids` returns it) with the default effort. Returns the refined partitions as lists
/// (heaviest first, sorted inside) or, with `as_ids`, as a partition number per item in that order.
///
/// The partitioners' refine path: an array in and out skips building and re-reading a Python list
/// per partition (measured: most of a small call's fixed cost).
#[pyfunction]
#[pyo3(signature = (values, ids, k, equal_size, exact, as_ids))]
fn _refine_ids<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    ids: PyReadonlyArray1<'py, i64>,
    k: usize,
    equal_size: bool,
    exact: bool,
    as_ids: bool,
) -> PyResult<Bound<'py, PyAny>> {
    guard("_refine_ids", || {
        let lengths = lengths_of(values)?;
        let ids = ids.as_array();
        if ids.len() != lengths.len() {
            return Err(PyValueError::new_err(format!(
                "ids holds {} items, but there are {} values",
                ids.len(),
                lengths.len()
            )));
        }
        if k > lengths.len() {
            return Err(PyValueError::new_err(format!(
                "k is {k}, more partitions than the {} values",
                lengths.len()
            )));
        }
        let mut parts: Vec<Vec<u32>> =
            alloc::filled(k, Vec::new(), "the partitions").map_err(|e| core_error(py, e))?;
        for (index, &id) in ids.iter().enumerate() {
            let part = usize::try_from(id).ok().and_then(|id| parts.get_mut(id)).ok_or_else(|| {
                PyValueError::new_err(format!("ids[{index}] is {id}, not a partition number below {k}"))
            })?;
            // In range: lengths_of checked that the item count fits u32.
            alloc::push(part, index as u32, "a partition").map_err(|e| core_error(py, e))?;
        }
        let refined = run_refine(py, &lengths, parts, equal_size, exact, None)?;
        if as_ids {
            let mut numbers =
                alloc::filled(lengths.len(), 0i64, "partition numbers").map_err(|e| core_error(py, e))?;
            for (number, part) in refined.iter().enumerate() {
                for &index in part {
                    numbers[index as usize] = number as i64;
                }
            }
            return Ok(numbers.into_pyarray(py).into_any());
        }
        Ok(index_lists(py, lengths.len(), refined.iter())?.into_any())
    })
}

/// Add the refinement functions to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_refine, m)?)?;
    m.add_function(wrap_pyfunction!(_refine_ids, m)?)?;
    Ok(())
}
