//! Python binding of the packing core (`packing/`): private functions the planners call.
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use seqbalance_core::alloc;
use seqbalance_core::error::CoreError;
use seqbalance_core::packing::{
    packed_steps, packing, packing_constrained, Algorithm, Constraints, Footprint, PackError,
};
use seqbalance_core::request::Refine;

use crate::convert::{index_lists, normalised_weights, unsigned_array};
use crate::errors::{core_error, guard, interruptible};

/// Pack non-negative int64 `lengths` into packs of total length at most `pack_max_length`:
/// lists of indexes (packs in opening order, indexes in placement order), or with `as_ids`
/// the pack of each item as an int64 array.
///
/// `max_sequences`, `padded` (the `count * longest` footprint) and `keys` (a key number per
/// item, from 0) are the shape constraints of the planning spec; at their defaults the packs are
/// the plain rules'.
///
/// Private: `seqbalance.packing.pack_sequences` validates the arguments and words the errors;
/// this function still refuses bad input with `ValueError` rather than trusting its caller.
#[pyfunction]
#[pyo3(
    name = "_pack",
    signature = (lengths, pack_max_length, algorithm, as_ids = false, max_sequences = None, padded = false, keys = None)
)]
#[allow(clippy::too_many_arguments)]
fn pack_py<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, i64>,
    pack_max_length: u64,
    algorithm: &str,
    as_ids: bool,
    max_sequences: Option<usize>,
    padded: bool,
    keys: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyAny>> {
    guard("_pack", || {
        let algorithm = Algorithm::from_name(algorithm).ok_or_else(|| {
            PyValueError::new_err(format!(
                "algorithm must be one of 'next_fit', 'first_fit', 'ffd', 'bfd', got {algorithm:?}"
            ))
        })?;
        // `as_array` also covers strided views, where `as_slice` would fail.
        let values = unsigned_array(py, lengths.as_array(), "lengths")?;
        let n = values.len();
        let key_numbers = match &keys {
            None => None,
            Some(keys) => {
                let view = keys.as_array();
                let mut numbers =
                    alloc::with_capacity(view.len(), "the keys").map_err(|e| core_error(py, e))?;
                for (position, &key) in view.iter().enumerate() {
                    let number =
                        u32::try_from(key).ok().filter(|&k| (k as usize) < n.max(1)).ok_or_else(|| {
                            PyValueError::new_err(format!(
                                "keys[{position}] must be a key number in [0, {n}), got {key}"
                            ))
                        })?;
                    numbers.push(number);
                }
                Some(numbers)
            }
        };
        let constraints = Constraints {
            max_sequences,
            footprint: if padded { Footprint::Padded } else { Footprint::Sum },
            keys: key_numbers.as_deref(),
        };
        let plain = max_sequences.is_none() && !padded && keys.is_none();
        // Packing and laying the answer out run without the GIL; only the Python objects need it.
        let (answer, raised) = interruptible(py, true, |interrupt| {
            let packed = if plain {
                packing(&values, pack_max_length, algorithm, interrupt)?
            } else {
                packing_constrained(&values, pack_max_length, algorithm, &constraints, interrupt)?
            };
            drop(values);
            Ok(if as_ids {
                Answer::Ids(packed.ids::<i64>(interrupt)?)
            } else {
                Answer::Lists(packed.grouped(interrupt)?)
            })
        });
        let answer = answer.map_err(|error| match (error, raised) {
            (PackError::Core(CoreError::Interrupted), Some(raised)) => raised,
            (PackError::Core(error), _) => core_error(py, error),
            (error, _) => PyValueError::new_err(error.to_string()),
        })?;
        match answer {
            Answer::Ids(ids) => Ok(ids.into_pyarray(py).into_any()),
            Answer::Lists(grouped) => Ok(index_lists(py, n, grouped.packs())?.into_any()),
        }
    })
}

/// `plan[rank][step][pack]` of `seqbalance.plan_packed_steps` in one core call
/// ([`seqbalance_core::packing::packed_steps`]): balance `weights` across `ranks`, each rank's
/// across `steps`, pack each bucket of `lengths` by best fit decreasing, pad the steps.
///
/// Private: `plan_packed_steps` checks the arguments, words the errors and hands `weights` as a
/// checked 1-D int64, float64 or float32 array and `refine` as `"no"`, `"local"` or `"exact"`.
#[pyfunction]
#[pyo3(
    name = "_plan_packed_steps",
    signature = (lengths, weights, ranks, steps, pack_max_length, refine, max_sequences = None, padded = false)
)]
#[allow(clippy::too_many_arguments)]
fn plan_packed_steps_py<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, i64>,
    weights: &Bound<'py, PyAny>,
    ranks: usize,
    steps: usize,
    pack_max_length: u64,
    refine: &str,
    max_sequences: Option<usize>,
    padded: bool,
) -> PyResult<Bound<'py, PyList>> {
    guard("_plan_packed_steps", || {
        let refine = match refine {
            "no" => Refine::No,
            "local" => Refine::Local,
            "exact" => Refine::Exact,
            other => {
                return Err(PyValueError::new_err(format!(
                    "refine must be 'no', 'local' or 'exact', got {other:?}"
                )))
            }
        };
        let values = unsigned_array(py, lengths.as_array(), "lengths")?;
        let weights = normalised_weights(py, weights)?
            .ok_or_else(|| PyTypeError::new_err("weights could not be read as weights"))?;
        let n = values.len();
        let constraints = Constraints {
            max_sequences,
            footprint: if padded { Footprint::Padded } else { Footprint::Sum },
            keys: None,
        };
        let (plan, raised) = interruptible(py, true, |interrupt| {
            packed_steps(&values, weights, ranks, steps, pack_max_length, refine, &constraints, interrupt)
        });
        let plan = plan.map_err(|error| match (error, raised) {
            (PackError::Core(CoreError::Interrupted), Some(raised)) => raised,
            (PackError::Core(error), _) => core_error(py, error),
            (error, _) => PyValueError::new_err(error.to_string()),
        })?;
        let ranks_list = PyList::empty(py);
        for rank_plan in &plan {
            let steps_list = PyList::empty(py);
            for packs in rank_plan {
                steps_list.append(index_lists(py, n, packs.iter())?)?;
            }
            ranks_list.append(steps_list)?;
        }
        Ok(ranks_list)
    })
}

/// What `_pack` hands back: the pack of each item, or the packs' lists of items.
enum Answer {
    Ids(Vec<i64>),
    Lists(seqbalance_core::packing::Grouped),
}

/// Add the packing functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pack_py, m)?)?;
    m.add_function(wrap_pyfunction!(plan_packed_steps_py, m)?)?;
    Ok(())
}
