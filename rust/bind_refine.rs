//! Binding of the refinement engine (`rust/refine.rs`): the private `_refine` function.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};

use crate::refine::{refine, Mode};

/// Copy `partitions` (an iterable of iterables of ints) out of Python, checking every index.
fn extract_partitions(partitions: &Bound<'_, PyAny>, n_values: usize) -> PyResult<Vec<Vec<u32>>> {
    let outer = partitions.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "partitions must be a list of lists of int, got {}",
            describe(partitions)
        ))
    })?;
    let mut parts = Vec::new();
    for (p, part) in outer.enumerate() {
        let part = part?;
        let inner = part.try_iter().map_err(|_| {
            PyTypeError::new_err(format!("partitions[{p}] must be a list of int, got {}", describe(&part)))
        })?;
        let mut indexes = Vec::new();
        for (j, item) in inner.enumerate() {
            let item = item?;
            let index: i64 = match item.extract() {
                Ok(index) => index,
                // An int too large for i64 is still an int: report it as a bad index.
                Err(_) if item.is_instance_of::<PyInt>() => {
                    return Err(PyValueError::new_err(format!(
                        "partitions[{p}][{j}] is {}, not an index of the {n_values} values",
                        describe(&item)
                    )))
                }
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "partitions[{p}][{j}] must be an int, got {}",
                        describe(&item)
                    )))
                }
            };
            if index < 0 || index as u64 >= n_values as u64 {
                return Err(PyValueError::new_err(format!(
                    "partitions[{p}][{j}] is {index}, not an index of the {n_values} values"
                )));
            }
            // In range of a slice whose length fits u32 (checked by the caller).
            indexes.push(index as u32);
        }
        parts.push(indexes);
    }
    Ok(parts)
}

fn describe(object: &Bound<'_, PyAny>) -> String {
    let text = object.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".to_owned());
    let text =
        if text.chars().count() > 60 { text.chars().take(57).collect::<String>() + "..." } else { text };
    let kind = object.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    format!("{text} ({kind})")
}

/// Refine `partitions` of `values` (int64, all >= 0) and return them heaviest first, sorted inside.
///
/// `exact` selects the branch-and-bound mode; `effort` overrides the default budget (local work
/// units, or exact-search nodes). Invalid partitions raise `ValueError`/`TypeError` naming
/// `partitions`.
#[pyfunction]
#[pyo3(signature = (values, partitions, equal_size, exact, effort=None))]
fn _refine<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, i64>,
    partitions: &Bound<'py, PyAny>,
    equal_size: bool,
    exact: bool,
    effort: Option<u64>,
) -> PyResult<Bound<'py, PyList>> {
    let view = values.as_array();
    if u32::try_from(view.len()).is_err() {
        return Err(PyValueError::new_err(format!(
            "values holds {} items; at most {} can be refined",
            view.len(),
            u32::MAX
        )));
    }
    let mut lengths = Vec::with_capacity(view.len());
    for (i, &v) in view.iter().enumerate() {
        let v = u64::try_from(v)
            .map_err(|_| PyValueError::new_err(format!("values[{i}] must be >= 0, got {v}")))?;
        lengths.push(v);
    }
    let parts = extract_partitions(partitions, lengths.len())?;
    let mode = if exact { Mode::Exact } else { Mode::Local };
    let refined = py
        .detach(|| refine(&lengths, parts, equal_size, mode, effort))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let lists = refined.iter().map(|part| PyList::new(py, part)).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, lists)
}

/// Add the refinement functions to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_refine, m)?)?;
    Ok(())
}
