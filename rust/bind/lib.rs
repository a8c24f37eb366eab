//! Python binding of the seqbalance core: argument conversion, GIL release, error mapping.
//!
//! The algorithms live in the `seqbalance-core` crate (rust/core). This file only turns Python arguments into slices
//! (fast paths for input that is certainly valid; everything else goes through
//! `seqbalance._inputs`, which owns the validation and the wording of every error), runs the core
//! with the GIL released, and builds the Python results. The public, documented functions are the
//! thin wrappers in `seqbalance/partition.py`.
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyList, PyString};

mod convert;
mod dlpack;
mod packing;
mod planner;
mod refine;

use convert::{fast_weights, nested_lists, normalised_weights, Weights};
use seqbalance_core::error::CoreError;
use seqbalance_core::parts::Partition;
use seqbalance_core::{float, greedy, ldm, nearly};

// The core allocates a few arrays of n items per call; glibc returns those to the kernel and
// takes them back with fresh zeroed pages every time, which cost a third of the CPU time in the
// kernel when two threads partitioned at once. mimalloc keeps freed pages for reuse.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static INPUTS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
static PARTITION_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn inputs(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(INPUTS.get_or_try_init(py, || PyModule::import(py, "seqbalance._inputs").map(Bound::unbind))?.bind(py))
}

/// The one place core errors become Python exceptions.
fn core_error(py: Python<'_>, error: CoreError) -> PyErr {
    match error {
        CoreError::NoPartitions | CoreError::BadWeight { .. } => PyValueError::new_err(error.to_string()),
        CoreError::SumOverflow => PyOverflowError::new_err(error.to_string()),
        CoreError::TooFewItems { .. }
        | CoreError::NotDivisible { .. }
        | CoreError::TooManyItems { .. }
        | CoreError::UnequalCounts { .. } => {
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

fn values_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Weights> {
    if let Some(values) = fast_weights(obj) {
        return Ok(values);
    }
    let normalised = inputs(py)?.call_method1("normalize_weights", (obj,))?.getattr("values")?;
    normalised_weights(&normalised)
        .ok_or_else(|| PyTypeError::new_err("seqlen_list could not be read as weights"))
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

/// What `equal_size` asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counts {
    Free,
    Equal,
    /// `"nearly"`: counts within one, by the spec's placeholder construction.
    Nearly,
}

/// `equal_size` strictly: a bool is read here, everything else by `_inputs.check_equal_size`,
/// which accepts 0/1 and `"nearly"` and raises the `TypeError` for anything else.
fn counts_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Counts> {
    let checked = if obj.is_exact_instance_of::<PyBool>() {
        obj.clone()
    } else {
        inputs(py)?.call_method1("check_equal_size", (obj,))?
    };
    if checked.is_instance_of::<PyString>() {
        Ok(Counts::Nearly)
    } else if checked.is_truthy()? {
        Ok(Counts::Equal)
    } else {
        Ok(Counts::Free)
    }
}

/// Validate in the reference's order (k, equal_size, then values, then shape) and return the
/// values, k and the count rule.
fn arguments(
    py: Python<'_>,
    seqlen_list: &Bound<'_, PyAny>,
    k_partitions: &Bound<'_, PyAny>,
    equal_size: &Bound<'_, PyAny>,
) -> PyResult<(Weights, usize, Counts)> {
    let (k, k_object) = k_of(py, k_partitions)?;
    let counts = counts_of(py, equal_size)?;
    let values = values_of(py, seqlen_list)?;
    match k {
        Some(k) => Ok((values, k, counts)),
        None => {
            let mode = match counts {
                Counts::Free => PyBool::new(py, false).to_owned().into_any(),
                Counts::Equal => PyBool::new(py, true).to_owned().into_any(),
                Counts::Nearly => PyString::new(py, "nearly").into_any(),
            };
            inputs(py)?.call_method1("check_shape", (values.len(), k_object, mode))?;
            Err(PyValueError::new_err("k_partitions is out of range"))
        }
    }
}

/// Below this many items the core takes a few microseconds, about what releasing and re-taking
/// the GIL costs (a few hundred nanoseconds), so small calls keep it.
const DETACH_THRESHOLD: usize = 2048;

/// Run `core` on `values`, with the GIL released for inputs large enough to be worth it.
fn without_gil<V: Send, T: Send>(py: Python<'_>, values: Vec<V>, core: impl FnOnce(&[V]) -> T + Send) -> T {
    if values.len() >= DETACH_THRESHOLD {
        py.detach(move || core(&values))
    } else {
        core(&values)
    }
}

/// A partitioner in each precision: the exact one and the float ones (`seqbalance_core::float`).
struct Core {
    exact: fn(&[u64], usize, bool) -> Result<Partition, CoreError>,
    double: fn(&[f64], usize, bool) -> Result<Partition, CoreError>,
    single: fn(&[f32], usize, bool) -> Result<Partition, CoreError>,
}

const KARMARKAR_KARP: Core =
    Core { exact: ldm::karmarkar_karp, double: float::karmarkar_karp, single: float::karmarkar_karp };
const BALANCED: Core = Core {
    exact: ldm::balanced_partitions,
    double: float::balanced_partitions,
    single: float::balanced_partitions,
};
const GREEDY: Core = Core {
    exact: greedy::greedy_partition,
    double: float::greedy_partition,
    single: float::greedy_partition,
};

/// Run a partitioner under the count rule: `"nearly"` wraps its equal-size form in the spec's
/// placeholders (value zero in every precision).
fn under<V: Copy + Default>(
    core: fn(&[V], usize, bool) -> Result<Partition, CoreError>,
    values: &[V],
    k: usize,
    counts: Counts,
) -> Result<Partition, CoreError> {
    match counts {
        Counts::Free => core(values, k, false),
        Counts::Equal => core(values, k, true),
        Counts::Nearly => nearly::with_placeholders(values, k, |values, k| core(values, k, true)),
    }
}

/// Run `core` in the weights' precision and `finish` on its answer, with the GIL released for
/// large inputs.
fn run_core<T: Send>(
    py: Python<'_>,
    weights: Weights,
    k: usize,
    counts: Counts,
    core: &Core,
    finish: fn(Partition) -> T,
) -> PyResult<T> {
    let result = match weights {
        Weights::Exact(values) => without_gil(py, values, |v| under(core.exact, v, k, counts).map(finish)),
        Weights::Double(values) => without_gil(py, values, |v| under(core.double, v, k, counts).map(finish)),
        Weights::Single(values) => without_gil(py, values, |v| under(core.single, v, k, counts).map(finish)),
    };
    result.map_err(|error| core_error(py, error))
}

/// Validate, run `core` and return its partition as lists: the body of the three list functions.
fn partition_lists<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    core: &Core,
) -> PyResult<Bound<'py, PyList>> {
    let (values, k, counts) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let partition = run_core(py, values, k, counts, core, |partition| partition)?;
    nested_lists(py, &partition)
}

#[pyfunction]
fn karmarkar_karp<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    partition_lists(py, seqlen_list, k_partitions, equal_size, &KARMARKAR_KARP)
}

#[pyfunction]
fn get_seqlen_balanced_partitions<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    partition_lists(py, seqlen_list, k_partitions, equal_size, &BALANCED)
}

#[pyfunction]
fn greedy_partition<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    // "nearly" is refused right after k is checked, as the reference does.
    k_of(py, k_partitions)?;
    if counts_of(py, equal_size)? == Counts::Nearly {
        return Err(PyValueError::new_err("greedy_partition does not support equal_size='nearly'"));
    }
    partition_lists(py, seqlen_list, k_partitions, equal_size, &GREEDY)
}

#[pyfunction]
fn partition_ids<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (values, k, counts) = arguments(py, seqlen_list, k_partitions, equal_size)?;
    let ids = run_core(py, values, k, counts, &KARMARKAR_KARP, |partition| {
        let n = partition.order.len();
        partition.ids(n)
    })?;
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
    convert::init_shared_indexes(m.py())?;
    m.add_function(wrap_pyfunction!(karmarkar_karp, m)?)?;
    m.add_function(wrap_pyfunction!(get_seqlen_balanced_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(greedy_partition, m)?)?;
    m.add_function(wrap_pyfunction!(partition_ids, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    dlpack::register(m)?;
    packing::register(m)?;
    planner::register(m)?;
    refine::register(m)?;
    Ok(())
}
