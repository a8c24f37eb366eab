//! Python binding of the packing core (`packing.rs`): private functions the planners call.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use seqbalance_core::packing::{pack, Algorithm};

/// Pack non-negative int64 `lengths` into packs of total length at most `pack_max_length`.
///
/// Private: `seqbalance.packing.pack_sequences` validates the arguments and words the errors;
/// this function still refuses bad input with `ValueError` rather than trusting its caller.
#[pyfunction]
#[pyo3(name = "_pack", signature = (lengths, pack_max_length, algorithm))]
fn pack_py(
    py: Python<'_>,
    lengths: PyReadonlyArray1<'_, i64>,
    pack_max_length: u64,
    algorithm: &str,
) -> PyResult<Vec<Vec<usize>>> {
    let algorithm = Algorithm::from_name(algorithm).ok_or_else(|| {
        PyValueError::new_err(format!(
            "algorithm must be one of 'next_fit', 'first_fit', 'ffd', 'bfd', got {algorithm:?}"
        ))
    })?;
    // `as_array` also covers strided views, where `as_slice` would fail.
    let view = lengths.as_array();
    let mut values = Vec::with_capacity(view.len());
    for (position, &length) in view.iter().enumerate() {
        let length = u64::try_from(length)
            .map_err(|_| PyValueError::new_err(format!("lengths[{position}] must be >= 0, got {length}")))?;
        values.push(length);
    }
    py.detach(|| pack(&values, pack_max_length, algorithm))
        .map_err(|err| PyValueError::new_err(err.to_string()))
}

/// Add the packing functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pack_py, m)?)?;
    Ok(())
}
