//! Python binding of the seqbalance core: arguments in, one core call, answers out.
//!
//! The algorithms live in the `seqbalance-core` crate (rust/core). Each partitioning function
//! here reads its arguments once (fast paths for input that is certainly valid, `convert.rs`),
//! runs one [`Request`] of the core with the GIL released for large inputs (`errors.rs`), and
//! builds the Python answer. Input that is not certainly valid gets `None` back: the thin
//! wrappers in `seqbalance/partition.py` then validate it with `seqbalance._inputs` (the one
//! owner of every check and its wording) and call again with `checked=True`. The binding imports
//! no module of the package.
use numpy::IntoPyArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

mod convert;
mod cp;
mod dlpack;
mod errors;
mod packing;
mod planner;
mod refine;
mod step;
mod stream;

use convert::{fast_weights, nested_lists, normalised_weights};
use errors::{guard, run_detached};
use seqbalance_core::request::{Algorithm, Answer, Counts, Output, Refine, Request, Weights};

// The core allocates a few arrays of n items per call; glibc returns those to the kernel and
// takes them back with fresh zeroed pages every time, which cost a third of the CPU time in the
// kernel when two threads partitioned at once. mimalloc keeps freed pages for reuse.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in mimalloc's option enum).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages stay with mimalloc before they go back to the system, in milliseconds.
///
/// mimalloc's default, 10 ms, gave the pages back between two calls: a 2^20-item
/// `plan_dp_micro_batches` took ~22,000 page faults on every call, zeroing fresh pages for a
/// tenth to a third of its time; with a second, back-to-back calls (the several plans of one
/// training step) reuse them, and a job between steps still gets its memory back. Calls of
/// 2^22 items and more give theirs back at once (`errors::RETURN_MEMORY_FROM`). A user's own
/// `MIMALLOC_PURGE_DELAY` wins.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

fn keep_freed_pages_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: setting an option only changes when mimalloc purges its own free pages.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

/// mimalloc's purge delay in milliseconds (a test hook: the option's place in the enum is
/// checked against `MIMALLOC_PURGE_DELAY` by the tests).
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _purge_delay() -> i64 {
    // SAFETY: reading an option has no side effect.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) as i64 }
}

/// What `equal_size` asks for, read strictly: a bool, or the string `"nearly"`.
fn counts_of(obj: &Bound<'_, PyAny>) -> Option<Counts> {
    if obj.is_exact_instance_of::<PyBool>() {
        return Some(if obj.is_truthy().ok()? { Counts::Equal } else { Counts::Free });
    }
    let text = obj.cast_exact::<PyString>().ok()?;
    (text.to_str().ok()? == "nearly").then_some(Counts::Nearly)
}

/// What `refine` asks for: a bool, or the string `"exact"` (left out: no refinement).
fn refine_of(obj: Option<&Bound<'_, PyAny>>) -> Option<Refine> {
    let Some(obj) = obj else { return Some(Refine::No) };
    if obj.is_exact_instance_of::<PyBool>() {
        return Some(if obj.is_truthy().ok()? { Refine::Local } else { Refine::No });
    }
    let text = obj.cast_exact::<PyString>().ok()?;
    (text.to_str().ok()? == "exact").then_some(Refine::Exact)
}

/// `k_partitions` when it is an exact int in `1..=usize::MAX`.
fn k_of(obj: &Bound<'_, PyAny>) -> Option<usize> {
    if !obj.is_exact_instance_of::<PyInt>() {
        return None;
    }
    obj.extract::<usize>().ok().filter(|&k| k >= 1)
}

/// The arguments of one partitioning call, read once: the weights into one buffer, `k`, the
/// count rule and the refinement. `None` when any of them is not certainly valid; the Python
/// wrapper then has `seqbalance._inputs` check them (which raises the documented error, in the
/// reference's order) and calls again with `checked` and the normalised weights.
///
/// `checked`: the arguments come from `_inputs` (a validated 1-D int64, float64 or float32 array,
/// an int, a bool or `"nearly"`), so the weights are read without the validity checks.
fn read_request(
    seqlen_list: &Bound<'_, PyAny>,
    k_partitions: &Bound<'_, PyAny>,
    equal_size: &Bound<'_, PyAny>,
    refine: Option<&Bound<'_, PyAny>>,
    checked: bool,
) -> PyResult<Option<(Weights, usize, Counts, Refine)>> {
    let py = seqlen_list.py();
    let (Some(refine), Some(k), Some(counts)) =
        (refine_of(refine), k_of(k_partitions), counts_of(equal_size))
    else {
        return if checked {
            Err(PyTypeError::new_err("checked arguments of an unexpected type"))
        } else {
            Ok(None)
        };
    };
    let weights = if checked { normalised_weights(py, seqlen_list)? } else { fast_weights(py, seqlen_list)? };
    match weights {
        Some(weights) => Ok(Some((weights, k, counts, refine))),
        None if checked => Err(PyTypeError::new_err("seqlen_list could not be read as weights")),
        None => Ok(None),
    }
}

/// One partitioning call: read the arguments once, run the whole request (partition, refine,
/// sort inside or number the items) in one core call with the GIL released for large inputs,
/// and build the answer: lists of indexes, or an int64 array for [`Output::Ids`]. `None` when the
/// arguments need checking in Python (see [`read_request`]).
fn partition<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: Option<&Bound<'py, PyAny>>,
    checked: bool,
    algorithm: Algorithm,
    output: Output,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = seqlen_list.py();
    let Some((weights, k, counts, refine)) =
        read_request(seqlen_list, k_partitions, equal_size, refine, checked)?
    else {
        return Ok(None);
    };
    let request = Request { k, counts, algorithm, refine, output };
    let n = weights.len();
    Ok(Some(match run_detached(py, n, |stop| request.run(weights, stop))? {
        Answer::Parts(partition) => nested_lists(py, &partition)?.into_any(),
        Answer::Ids(ids) => ids.into_pyarray(py).into_any(),
    }))
}

/// `seqbalance.karmarkar_karp`: the partition in merge order, or `None` (see [`read_request`]).
#[pyfunction]
#[pyo3(signature = (seqlen_list, k_partitions, equal_size, *, checked=false))]
fn karmarkar_karp<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    checked: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    guard("karmarkar_karp", || {
        partition(seqlen_list, k_partitions, equal_size, None, checked, Algorithm::Ldm, Output::MergeOrder)
    })
}

/// `seqbalance.get_seqlen_balanced_partitions`: the partition sorted inside, refined when asked.
#[pyfunction]
#[pyo3(signature = (seqlen_list, k_partitions, equal_size, refine=None, *, checked=false))]
fn get_seqlen_balanced_partitions<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: Option<&Bound<'py, PyAny>>,
    checked: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    guard("get_seqlen_balanced_partitions", || {
        partition(seqlen_list, k_partitions, equal_size, refine, checked, Algorithm::Ldm, Output::Sorted)
    })
}

/// `seqbalance.greedy_partition`; `equal_size="nearly"` is left to Python, which refuses it with
/// the reference's wording right after `k_partitions` is checked.
#[pyfunction]
#[pyo3(signature = (seqlen_list, k_partitions, equal_size, *, checked=false))]
fn greedy_partition<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    checked: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    guard("greedy_partition", || {
        if !checked && counts_of(equal_size) == Some(Counts::Nearly) {
            return Ok(None);
        }
        partition(seqlen_list, k_partitions, equal_size, None, checked, Algorithm::Greedy, Output::MergeOrder)
    })
}

/// `seqbalance.partition_ids`: a partition number per item (int64), refined when asked.
#[pyfunction]
#[pyo3(signature = (seqlen_list, k_partitions, equal_size, refine=None, *, checked=false))]
fn partition_ids<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: Option<&Bound<'py, PyAny>>,
    checked: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    guard("partition_ids", || {
        partition(seqlen_list, k_partitions, equal_size, refine, checked, Algorithm::Ldm, Output::Ids)
    })
}

/// Test hook of the panic boundary: panics inside it (after releasing the GIL when `detached`).
#[cfg(feature = "test-hooks")]
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
    keep_freed_pages_a_while();
    convert::init_shared_indexes(m.py());
    m.add_function(wrap_pyfunction!(karmarkar_karp, m)?)?;
    m.add_function(wrap_pyfunction!(get_seqlen_balanced_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(greedy_partition, m)?)?;
    m.add_function(wrap_pyfunction!(partition_ids, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    dlpack::register(m)?;
    cp::register(m)?;
    packing::register(m)?;
    planner::register(m)?;
    refine::register(m)?;
    step::register(m)?;
    stream::register(m)?;
    register_test_hooks(m)
}

/// The tests' entry points, in the test build only (feature `test-hooks`; see Cargo.toml).
/// Set as attributes, not added to `__all__`, so the module's `__all__` is the same in both
/// builds (and the stub's, for stubtest).
#[cfg(feature = "test-hooks")]
fn register_test_hooks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.setattr("_purge_delay", wrap_pyfunction!(_purge_delay, m)?)?;
    m.setattr("_input_reads", wrap_pyfunction!(convert::_input_reads, m)?)?;
    m.setattr("_internal_error_check", wrap_pyfunction!(_internal_error_check, m)?)?;
    Ok(())
}

/// The release build has no test entry point.
#[cfg(not(feature = "test-hooks"))]
fn register_test_hooks(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
