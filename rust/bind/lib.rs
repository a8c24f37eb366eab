//! Python binding of the seqbalance core: argument conversion, GIL release, error mapping.
//!
//! The algorithms live in the `seqbalance-core` crate (rust/core). This file only turns Python arguments into slices
//! (fast paths for input that is certainly valid; everything else goes through
//! `seqbalance._inputs`, which owns the validation and the wording of every error), runs the core
//! with the GIL released, and builds the Python results. The public, documented functions are the
//! thin wrappers in `seqbalance/partition.py`.
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyList, PyString};

mod convert;
mod dlpack;
mod errors;
mod packing;
mod planner;
mod refine;
mod stream;

use convert::{fast_weights, nested_lists, normalised_weights, Weights};
use errors::{core_result, guard, interruptible};
use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::parts::Partition;
use seqbalance_core::{float, greedy, ldm, nearly};

// The core allocates a few arrays of n items per call; glibc returns those to the kernel and
// takes them back with fresh zeroed pages every time, which cost a third of the CPU time in the
// kernel when two threads partitioned at once. mimalloc keeps freed pages for reuse.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static INPUTS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn inputs(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(INPUTS.get_or_try_init(py, || PyModule::import(py, "seqbalance._inputs").map(Bound::unbind))?.bind(py))
}

fn values_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Weights> {
    if let Some(values) = fast_weights(py, obj)? {
        return Ok(values);
    }
    let normalised = inputs(py)?.call_method1("normalize_weights", (obj,))?.getattr("values")?;
    normalised_weights(py, &normalised)?
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

/// Run `core` on `values` under a signal watch (Ctrl-C), with the GIL released for inputs large
/// enough to be worth it.
fn without_gil<V: Send, T: Send>(
    py: Python<'_>,
    values: Vec<V>,
    core: impl FnOnce(Vec<V>, &Interrupt<'_>) -> Result<T, CoreError> + Send,
) -> PyResult<T> {
    let n = values.len();
    let detach = n >= DETACH_THRESHOLD;
    let result = core_result(py, interruptible(py, detach, move |interrupt| core(values, interrupt)));
    if n >= RETURN_MEMORY_FROM {
        // SAFETY: mi_collect only walks and releases mimalloc's own free pages.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
    result
}

/// From this many items a call's working memory (tens of bytes an item) goes back to the system
/// when it returns, instead of staying with mimalloc for the next call: hundreds of MB left
/// resident after one call look like a leak, and the next allocation (a NumPy array the caller
/// makes from the answer) would stack its peak on them (measured: the CLI's peak on a 22M-line
/// file varied from 1.39 to 1.52 GB with the moment mimalloc happened to purge). Smaller calls
/// keep the pages: re-faulting them every call is what mimalloc is here to avoid (see
/// `GLOBAL`).
const RETURN_MEMORY_FROM: usize = 1 << 22;

/// A partitioner that owns its copy of the values, so it can drop them once sorted (the
/// `*_owned` core functions: 8 bytes an item off the peak of a large call).
type CoreFn<V> = fn(Vec<V>, usize, bool, &Interrupt<'_>) -> Result<Partition, CoreError>;

/// A partitioner in each precision: the exact one and the float ones (`seqbalance_core::float`).
struct Core {
    exact: CoreFn<u64>,
    double: CoreFn<f64>,
    single: CoreFn<f32>,
}

const KARMARKAR_KARP: Core = Core {
    exact: ldm::karmarkar_karp_owned,
    double: float::karmarkar_karp_owned,
    single: float::karmarkar_karp_owned,
};
const BALANCED: Core = Core {
    exact: ldm::balanced_partitions_owned,
    double: float::balanced_partitions_owned,
    single: float::balanced_partitions_owned,
};
const GREEDY: Core = Core {
    exact: |values, k, equal_size, stop| greedy::greedy_partition_interruptible(&values, k, equal_size, stop),
    double: |values, k, equal_size, stop| float::greedy_partition_interruptible(&values, k, equal_size, stop),
    single: |values, k, equal_size, stop| float::greedy_partition_interruptible(&values, k, equal_size, stop),
};

/// Run a partitioner under the count rule: `"nearly"` wraps its equal-size form in the spec's
/// placeholders (value zero in every precision).
fn under<V: Copy + Default>(
    core: CoreFn<V>,
    values: Vec<V>,
    k: usize,
    counts: Counts,
    interrupt: &Interrupt<'_>,
) -> Result<Partition, CoreError> {
    match counts {
        Counts::Free => core(values, k, false, interrupt),
        Counts::Equal => core(values, k, true, interrupt),
        Counts::Nearly => {
            nearly::with_placeholders_owned(values, k, |values, k| core(values, k, true, interrupt))
        }
    }
}

/// What to make of a partition, still under the signal watch.
type Finish<T> = fn(Partition, &Interrupt<'_>) -> Result<T, CoreError>;

/// Run `core` in the weights' precision and `finish` on its answer, with the GIL released for
/// large inputs.
fn run_core<T: Send>(
    py: Python<'_>,
    weights: Weights,
    k: usize,
    counts: Counts,
    core: &Core,
    finish: Finish<T>,
) -> PyResult<T> {
    match weights {
        Weights::Exact(values) => {
            without_gil(py, values, |v, stop| finish(under(core.exact, v, k, counts, stop)?, stop))
        }
        Weights::Double(values) => {
            without_gil(py, values, |v, stop| finish(under(core.double, v, k, counts, stop)?, stop))
        }
        Weights::Single(values) => {
            without_gil(py, values, |v, stop| finish(under(core.single, v, k, counts, stop)?, stop))
        }
    }
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
    let partition = run_core(py, values, k, counts, core, |partition, _| Ok(partition))?;
    nested_lists(py, &partition)
}

#[pyfunction]
fn karmarkar_karp<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guard("karmarkar_karp", || partition_lists(py, seqlen_list, k_partitions, equal_size, &KARMARKAR_KARP))
}

#[pyfunction]
fn get_seqlen_balanced_partitions<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guard("get_seqlen_balanced_partitions", || {
        partition_lists(py, seqlen_list, k_partitions, equal_size, &BALANCED)
    })
}

#[pyfunction]
fn greedy_partition<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    guard("greedy_partition", || {
        // "nearly" is refused right after k is checked, as the reference does.
        k_of(py, k_partitions)?;
        if counts_of(py, equal_size)? == Counts::Nearly {
            return Err(PyValueError::new_err("greedy_partition does not support equal_size='nearly'"));
        }
        partition_lists(py, seqlen_list, k_partitions, equal_size, &GREEDY)
    })
}

#[pyfunction]
fn partition_ids<'py>(
    py: Python<'py>,
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    guard("partition_ids", || {
        let (values, k, counts) = arguments(py, seqlen_list, k_partitions, equal_size)?;
        let ids = match (values, counts) {
            // Integer weights without placeholders: numbered straight from the core's lists.
            (Weights::Exact(values), Counts::Free | Counts::Equal) => {
                let equal = counts == Counts::Equal;
                without_gil(py, values, |v, stop| ldm::partition_ids_owned(v, k, equal, stop))?
            }
            (values, counts) => run_core(py, values, k, counts, &KARMARKAR_KARP, |partition, stop| {
                let n = partition.order.len();
                partition.ids(n, stop)
            })?,
        };
        Ok(ids.into_pyarray(py))
    })
}

/// Test hook of the panic boundary: panics inside it (after releasing the GIL when `detached`).
#[pyfunction]
fn _internal_error_check(py: Python<'_>, detached: bool) -> PyResult<()> {
    guard("_internal_error_check", || {
        let fail = || -> () { panic!("deliberate panic to test the boundary") };
        if detached {
            py.detach(fail);
        } else {
            fail();
        }
        Ok(())
    })
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
    m.add_function(wrap_pyfunction!(_internal_error_check, m)?)?;
    packing::register(m)?;
    planner::register(m)?;
    refine::register(m)?;
    stream::register(m)?;
    Ok(())
}
