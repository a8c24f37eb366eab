//! Python binding of the seqbalance core: arguments in, one core call, answers out.
//!
//! The algorithms live in the `seqbalance-core` crate (rust/core). Each partitioning function
//! here reads its arguments once (fast paths for input that is certainly valid, `convert.rs`),
//! runs one [`Request`] of the core with the GIL released for large inputs (`errors.rs`), and
//! builds the Python answer. Input that is not certainly valid is handed, inside the same call,
//! to `seqbalance._inputs.request` (the one owner of every check and its wording), the one
//! module of the package the binding imports: it raises the documented error or returns the
//! arguments normalised (see [`read_request`]).
use numpy::IntoPyArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
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

/// What `refine` asks for, read strictly: a bool, or the string `"exact"`.
fn refine_of(obj: &Bound<'_, PyAny>) -> Option<Refine> {
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

/// Which partitioner a call is: what its request runs, and how its arguments are checked.
#[derive(Clone, Copy)]
struct Call {
    /// The values' parameter in error messages (`partition_ids` calls it `lengths`).
    name: &'static str,
    algorithm: Algorithm,
    output: Output,
}

impl Call {
    /// Greedy has an `equal_size` rule of its own (no `"nearly"`), checked in Python.
    fn greedy(self) -> bool {
        matches!(self.algorithm, Algorithm::Greedy)
    }
}

/// `seqbalance._inputs.request.partition_request`, imported on first use.
static CHECK_REQUEST: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The arguments of one partitioning call: the weights read once into one buffer, `k`, the count
/// rule and the refinement.
///
/// Input that is certainly valid is read here, on the fast paths. Anything else goes, within the
/// same call, to `seqbalance._inputs.request.partition_request` (the one owner of every check
/// and its wording, shared with the reference): it raises the documented error in the
/// reference's order, or returns the arguments normalised, which are then read here without the
/// validity checks. So a public partitioner makes one native call whatever its input.
fn read_request(
    seqlen_list: &Bound<'_, PyAny>,
    k_partitions: &Bound<'_, PyAny>,
    equal_size: &Bound<'_, PyAny>,
    refine: &Bound<'_, PyAny>,
    call: Call,
) -> PyResult<(Weights, usize, Counts, Refine)> {
    let py = seqlen_list.py();
    let options = (refine_of(refine), k_of(k_partitions), counts_of(equal_size));
    if let (Some(refine), Some(k), Some(counts)) = options {
        if !(call.greedy() && counts == Counts::Nearly) {
            if let Some(weights) = fast_weights(py, seqlen_list)? {
                return Ok((weights, k, counts, refine));
            }
        }
    }
    let check = CHECK_REQUEST.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("seqbalance._inputs.request")?.getattr("partition_request")?.unbind())
    })?;
    let answer =
        check.bind(py).call1((seqlen_list, k_partitions, equal_size, refine, call.name, call.greedy()))?;
    let (values, k, counts, refine): (
        Bound<'_, PyAny>,
        Bound<'_, PyAny>,
        Bound<'_, PyAny>,
        Bound<'_, PyAny>,
    ) = answer.extract()?;
    let unexpected = || PyTypeError::new_err("partition_request returned arguments of an unexpected type");
    let (Some(refine), Some(k), Some(counts)) = (refine_of(&refine), k_of(&k), counts_of(&counts)) else {
        return Err(unexpected());
    };
    let weights = normalised_weights(py, &values)?.ok_or_else(unexpected)?;
    Ok((weights, k, counts, refine))
}

/// One partitioning call: read the arguments once, run the whole request (partition, refine,
/// sort inside or number the items) in one core call with the GIL released for large inputs,
/// and build the answer: lists of indexes, or an int64 array for [`Output::Ids`].
fn partition<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: &Bound<'py, PyAny>,
    call: Call,
) -> PyResult<Bound<'py, PyAny>> {
    let py = seqlen_list.py();
    let (weights, k, counts, refine) = read_request(seqlen_list, k_partitions, equal_size, refine, call)?;
    let request = Request { k, counts, algorithm: call.algorithm, refine, output: call.output };
    let n = weights.len();
    Ok(match run_detached(py, n, |stop| request.run(weights, stop))? {
        Answer::Parts(partition) => nested_lists(py, &partition)?.into_any(),
        Answer::Ids(ids) => ids.into_pyarray(py).into_any(),
    })
}

/// `seqbalance.karmarkar_karp`: the partition in merge order.
#[pyfunction]
fn karmarkar_karp<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Call { name: "seqlen_list", algorithm: Algorithm::Ldm, output: Output::MergeOrder };
    let no = PyBool::new(seqlen_list.py(), false);
    guard("karmarkar_karp", || partition(seqlen_list, k_partitions, equal_size, &no, call))
}

/// `seqbalance.get_seqlen_balanced_partitions`: the partition sorted inside, refined when asked.
#[pyfunction]
fn get_seqlen_balanced_partitions<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Call { name: "seqlen_list", algorithm: Algorithm::Ldm, output: Output::Sorted };
    guard("get_seqlen_balanced_partitions", || partition(seqlen_list, k_partitions, equal_size, refine, call))
}

/// `seqbalance.greedy_partition`; `equal_size="nearly"` is refused by Python's check, with the
/// reference's wording, right after `k_partitions` is checked.
#[pyfunction]
fn greedy_partition<'py>(
    seqlen_list: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Call { name: "seqlen_list", algorithm: Algorithm::Greedy, output: Output::MergeOrder };
    let no = PyBool::new(seqlen_list.py(), false);
    guard("greedy_partition", || partition(seqlen_list, k_partitions, equal_size, &no, call))
}

/// `seqbalance.partition_ids`: a partition number per item (int64), refined when asked.
#[pyfunction]
fn partition_ids<'py>(
    lengths: &Bound<'py, PyAny>,
    k_partitions: &Bound<'py, PyAny>,
    equal_size: &Bound<'py, PyAny>,
    refine: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Call { name: "lengths", algorithm: Algorithm::Ldm, output: Output::Ids };
    guard("partition_ids", || partition(lengths, k_partitions, equal_size, refine, call))
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
