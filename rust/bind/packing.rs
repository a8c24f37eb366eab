//! Python binding of the packing core (`packing.rs`): private functions the planners call.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use pyo3::types::PyList;

use seqbalance_core::packing::{pack_interruptible, Algorithm, PackError};

use crate::convert::unsigned_array;

use crate::convert::index_lists;
use crate::errors::{core_error, guard, interruptible};

/// Pack non-negative int64 `lengths` into packs of total length at most `pack_max_length`.
///
/// Private: `seqbalance.packing.pack_sequences` validates the arguments and words the errors;
/// this function still refuses bad input with `ValueError` rather than trusting its caller.
#[pyfunction]
#[pyo3(name = "_pack", signature = (lengths, pack_max_length, algorithm))]
fn pack_py<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, i64>,
    pack_max_length: u64,
    algorithm: &str,
) -> PyResult<Bound<'py, PyList>> {
    guard("_pack", || {
        let algorithm = Algorithm::from_name(algorithm).ok_or_else(|| {
            PyValueError::new_err(format!(
                "algorithm must be one of 'next_fit', 'first_fit', 'ffd', 'bfd', got {algorithm:?}"
            ))
        })?;
        // `as_array` also covers strided views, where `as_slice` would fail.
        let values = unsigned_array(py, lengths.as_array(), "lengths")?;
        let (packs, raised) = interruptible(py, true, |interrupt| {
            pack_interruptible(&values, pack_max_length, algorithm, interrupt)
        });
        let packs = packs.map_err(|error| match (error, raised) {
            (PackError::Core(_), Some(raised)) => raised,
            (PackError::Core(error), None) => core_error(py, error),
            (error, _) => PyValueError::new_err(error.to_string()),
        })?;
        index_lists(py, values.len(), packs.iter())
    })
}

/// Add the packing functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pack_py, m)?)?;
    Ok(())
}
