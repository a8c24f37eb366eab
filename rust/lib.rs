//! Python binding of the seqbalance core: argument conversion, GIL release, error mapping.
//!
//! The algorithms live in plain-Rust modules. This file only turns Python arguments into slices
//! (fast paths for input that is certainly valid; everything else goes through
//! `seqbalance._inputs`, which owns the validation and the wording of every error), runs the core
//! with the GIL released, and builds the Python results. The public, documented functions are the
//! thin wrappers in `seqbalance/partition.py`.
use numpy::{IntoPyArray, PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyTuple};

pub mod error;
pub mod greedy;
pub mod ldm;
pub mod parts;
pub mod sort;

mod bind_packing;
mod bind_refine;
mod packing;
mod refine;

use error::CoreError;
use parts::Partition;

static INPUTS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
static PARTITION_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn inputs(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(INPUTS.get_or_try_init(py, || PyModule::import(py, "seqbalance._inputs").map(Bound::unbind))?.bind(py))
}

/// The one place core errors become Python exceptions.
fn core_error(py: Python<'_>, error: CoreError) -> PyErr {
    match error {
        CoreError::NoPartitions => PyValueError::new_err(error.to_string()),
        CoreError::TooFewItems { .. } | CoreError::NotDivisible { .. } | CoreError::TooManyItems { .. } => {
            let class = PARTITION_ERROR.get_or_try_init(py, || {
                PyModule::import(py, "seqbalance._errors")?.getattr("PartitionError").map(Bound::unbind)
            });
            match class.and_then(|class| class.bind(py).call1((error.to_string(),))) {
                Ok(instance) => PyErr::from_value(instance),
                Err(import_failure) => import_failure,
            }
        }
    }
}

fn item_value(item: &Bound<'_, PyAny>) -> Option<u64> {
    let value: i64 = item.extract().ok()?;
    u64::try_from(value).ok()
}

macro_rules! array_fast_path {
    ($obj:expr, $($signed:ty),* ; $($unsigned:ty),*) => {
        $(
            if let Ok(array) = $obj.cast::<PyArray1<$signed>>() {
                let view = array.try_readonly().ok()?;
                return view.as_array().iter().map(|&v| u64::try_from(v).ok()).collect();
            }
        )*
        $(
            if let Ok(array) = $obj.cast::<PyArray1<$unsigned>>() {
                let view = array.try_readonly().ok()?;
                return view
                    .as_array()
                    .iter()
                    .map(|&v| (v as u64 <= i64::MAX as u64).then_some(v as u64))
                    .collect();
            }
        )*
    };
}

/// Values of input that is certainly valid, without a Python object per array item; `None`
/// sends the input through the full normalisation (which raises the precise error).
fn fast_values(obj: &Bound<'_, PyAny>) -> Option<Vec<u64>> {
    // Collecting into `Option<Vec<_>>` would not know the length and regrow the vector.
    if let Ok(list) = obj.cast::<PyList>() {
        let mut values = Vec::with_capacity(list.len());
        for item in list.iter() {
            values.push(item_value(&item)?);
        }
        return Some(values);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        let mut values = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            values.push(item_value(&item)?);
        }
        return Some(values);
    }
    array_fast_path!(obj, i64, i32, i16, i8; u64, u32, u16, u8);
    None
}

fn values_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Some(values) = fast_values(obj) {
        return Ok(values);
    }
    let normalised = inputs(py)?.call_method1("normalize_lengths", (obj,))?;
    fast_values(&normalised)
        .ok_or_else(|| PyTypeError::new_err("seqlen_list could not be read as non-negative integers"))
}

/// `k_partitions` as usize, or `None` when it is a valid int too large for this machine (the
/// shape check then reports it).
fn k_of<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<(Option<usize>, Bound<'py, PyAny>)> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(k) = obj.extract::<usize>() {
            if k >= 1 {
                return Ok((Some(k), obj.clone()));
            }
        }
    }
    let checked = inputs(py)?.call_method1("check_k_partitions", (obj,))?;
    Ok((checked.extract::<usize>().ok(), checked))
}

/// Validate in the reference's order (k, then values, then shape) and return the values and k.
fn arguments(
    py: Python<'_>,
    seqlen_list: &Bound<'_, PyAny>,
    k_partitions: &Bound<'_, PyAny>,
    equal_size: &Bound<'_, PyAny>,
) -> PyResult<(Vec<u64>, usize, bool)> {
    let (k, k_object) = k_of(py, k_partitions)?;
    let values = values_of(py, seqlen_list)?;
    let equal_size = equal_size.is_truthy()?;
    match k {
        Some(k) => Ok((values, k, equal_size)),
        None => {
            inputs(py)?.call_method1("check_shape", (values.len(), k_object, equal_size))?;
            Err(PyValueError::new_err("k_partitions is out of range"))
        }
    }
}

fn nested_lists<'py>(py: Python<'py>, partition: &Partition) -> PyResult<Bound<'py, PyList>> {
    // Each `&[u32]` converts to a list of ints.
    PyList::new(py, partition.parts())
}

/// Below this many items the core takes a few microseconds, about what releasing and re-taking
/// the GIL costs, so small calls keep it (measured: ~0.2 µs saved per call at n = 64).
const DETACH_THRESHOLD: usize = 2048;

/// Run `core` on `values`, with the GIL released for inputs large enough to be worth it.
fn without_gil<T: Send>(py: Python<'_>, values: Vec<u64>, core: impl FnOnce(&[u64]) -> T + Send) -> T {
    if values.len() >= DETACH_THRESHOLD {
        py.detach(move || core(&values))
    } else {
        core(&values)
    }
}

fn run_core(
    py: Python<'_>,
    values: Vec<u64>,
    core: impl FnOnce(&[u64]) -> Result<Partition, CoreError> + Send,
) -> PyResult<Partition> {
    without_gil(py, values, core).map_err(|error| core_error(py, error))
}

#[pyfunction]
fn karmarkar_karp<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let (values, k, equal_size) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let partition = run_core(py, values, |v| ldm::karmarkar_karp(v, k, equal_size))?;
    nested_lists(py, &partition)
}

#[pyfunction]
fn get_seqlen_balanced_partitions<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let (values, k, equal_size) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let partition = run_core(py, values, |v| ldm::balanced_partitions(v, k, equal_size))?;
    nested_lists(py, &partition)
}

#[pyfunction]
fn greedy_partition<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let (values, k, equal_size) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let partition = run_core(py, values, |v| greedy::greedy_partition(v, k, equal_size))?;
    nested_lists(py, &partition)
}

#[pyfunction]
fn partition_ids<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (values, k, equal_size) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let n = values.len();
    let ids = without_gil(py, values, |values| ldm::karmarkar_karp(values, k, equal_size).map(|p| p.ids(n)))
        .map_err(|error| core_error(py, error))?;
    Ok(ids.into_pyarray(py))
}

/// "release" or "debug": benchmarks refuse to time a debug build.
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(karmarkar_karp, m)?)?;
    m.add_function(wrap_pyfunction!(get_seqlen_balanced_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(greedy_partition, m)?)?;
    m.add_function(wrap_pyfunction!(partition_ids, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    bind_packing::register(m)?;
    bind_refine::register(m)?;
    Ok(())
}
