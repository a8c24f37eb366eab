//! Where failures become Python exceptions: core errors, interrupts and panics.
//!
//! * [`core_error`] is the one place core errors become Python exceptions (an allocation failure
//!   becomes `MemoryError` naming the buffer).
//! * [`interruptible`] runs a core call (with the GIL released when asked) while watching for
//!   signals: every ~50 ms of work it re-takes the GIL briefly and lets Python run its signal
//!   handlers, so Ctrl-C stops a long call with `KeyboardInterrupt`.
//! * [`run_detached`] is how every core call runs: under the signal watch, with the GIL released
//!   from [`DETACH_THRESHOLD`] items, its error mapped by [`core_error`].
//! * [`guard`] is the panic boundary every exported function runs inside: a Rust panic is a bug,
//!   and it reaches Python as a `RuntimeError` saying "internal error" and the function's name,
//!   never as an abort (the profiles never set `panic = "abort"`).
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use pyo3::exceptions::{
    PyKeyboardInterrupt, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::refine::RefineError;

/// `seqbalance.PartitionError`, handed over once by `seqbalance/partition.py` when it is imported
/// (see [`register`]): the extension imports no module of the package.
static PARTITION_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Take the class that shape errors are raised as (`seqbalance._errors.PartitionError`).
#[pyfunction]
fn _set_partition_error(py: Python<'_>, class: Bound<'_, PyAny>) -> PyResult<()> {
    if !class.is_instance_of::<PyType>() || !class.cast::<PyType>()?.is_subclass_of::<PyValueError>()? {
        return Err(PyTypeError::new_err("the partition error must be a subclass of ValueError"));
    }
    // A second call (a reloaded package) keeps the first class.
    let _ = PARTITION_ERROR.set(py, class.unbind());
    Ok(())
}

/// Add the error hook to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_set_partition_error, m)?)
}

/// The one place core errors become Python exceptions.
pub fn core_error(py: Python<'_>, error: CoreError) -> PyErr {
    match error {
        CoreError::NoPartitions | CoreError::BadWeight { .. } => PyValueError::new_err(error.to_string()),
        CoreError::SumOverflow => PyOverflowError::new_err(error.to_string()),
        CoreError::TooFewItems { .. }
        | CoreError::NotDivisible { .. }
        | CoreError::TooManyItems { .. }
        | CoreError::UnequalCounts { .. } => {
            match PARTITION_ERROR.get(py).map(|class| class.bind(py).call1((error.to_string(),))) {
                Some(Ok(instance)) => PyErr::from_value(instance),
                Some(Err(failure)) => failure,
                // Only before `seqbalance.partition` is imported: still a ValueError.
                None => PyValueError::new_err(error.to_string()),
            }
        }
        CoreError::OutOfMemory { what, bytes } => out_of_memory(what, bytes),
        CoreError::Interrupted => PyKeyboardInterrupt::new_err(()),
    }
}

/// `MemoryError` for a buffer of the binding's own.
pub fn out_of_memory(what: &str, bytes: usize) -> PyErr {
    PyMemoryError::new_err(format!(
        "seqbalance ran out of memory: could not allocate {bytes} bytes for {what}"
    ))
}

/// How often a running core call lets Python look at pending signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The core's [`Interrupt`] question, answered by Python's signal handlers.
struct SignalWatch {
    last: Cell<Instant>,
    /// What the signal handler raised (`KeyboardInterrupt` for Ctrl-C).
    raised: RefCell<Option<PyErr>>,
}

impl SignalWatch {
    fn stop(&self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.last.get()) < SIGNAL_POLL {
            return false;
        }
        self.last.set(now);
        // Re-takes the GIL (a no-op when the call kept it); the handlers only run on the main
        // thread, elsewhere this returns Ok at once.
        match Python::attach(|py| py.check_signals()) {
            Ok(()) => false,
            Err(raised) => {
                *self.raised.borrow_mut() = Some(raised);
                true
            }
        }
    }
}

/// Run `work` under a signal watch, with the GIL released when `detach` is set. Returns its
/// result and, when a signal handler raised, that exception (the work then stopped with an
/// interrupt error).
pub fn interruptible<T: Send>(
    py: Python<'_>,
    detach: bool,
    work: impl FnOnce(&Interrupt<'_>) -> T + Send,
) -> (T, Option<PyErr>) {
    let body = move || {
        let watch = SignalWatch { last: Cell::new(Instant::now()), raised: RefCell::new(None) };
        let stop = || watch.stop();
        let result = work(&Interrupt::new(&stop));
        (result, watch.raised.into_inner())
    };
    if detach {
        py.detach(body)
    } else {
        body()
    }
}

/// A core result as a Python result: the signal handler's exception if the work was interrupted.
pub fn core_result<T>(
    py: Python<'_>,
    (result, raised): (Result<T, CoreError>, Option<PyErr>),
) -> PyResult<T> {
    result.map_err(|error| match (error, raised) {
        (CoreError::Interrupted, Some(raised)) => raised,
        (error, _) => core_error(py, error),
    })
}

/// A refinement result as a Python result: core errors as [`core_result`] maps them, the
/// refusals of a bad partition as `ValueError` with the core's text (it names `partitions`).
pub fn refine_result<T>(
    py: Python<'_>,
    (result, raised): (Result<T, RefineError>, Option<PyErr>),
) -> PyResult<T> {
    result.map_err(|error| match (error, raised) {
        (RefineError::Core(CoreError::Interrupted), Some(raised)) => raised,
        (RefineError::Core(error), _) => core_error(py, error),
        (error, _) => PyValueError::new_err(error.to_string()),
    })
}

/// Below this many items a core call takes a few microseconds, about what releasing and
/// re-taking the GIL costs (a few hundred nanoseconds), so small calls keep it.
pub const DETACH_THRESHOLD: usize = 2048;

/// From this many items a call's working memory (tens of bytes an item) goes back to the system
/// when it returns, instead of staying with mimalloc for the next call: hundreds of MB left
/// resident after one call look like a leak, and the next allocation (a NumPy array the caller
/// makes from the answer) would stack its peak on them (measured: the CLI's peak on a 22M-line
/// file varied from 1.39 to 1.52 GB with the moment mimalloc happened to purge). Smaller calls
/// keep the pages: re-faulting them every call is what mimalloc is here to avoid (see the
/// global allocator in lib.rs).
const RETURN_MEMORY_FROM: usize = 1 << 22;

/// Run `work` (a core call on `n` items) under a signal watch (Ctrl-C), with the GIL released
/// from [`DETACH_THRESHOLD`] items, and map its error.
pub fn run_detached<T: Send>(
    py: Python<'_>,
    n: usize,
    work: impl FnOnce(&Interrupt<'_>) -> Result<T, CoreError> + Send,
) -> PyResult<T> {
    let result = core_result(py, interruptible(py, n >= DETACH_THRESHOLD, work));
    if n >= RETURN_MEMORY_FROM {
        // SAFETY: mi_collect only walks and releases mimalloc's own free pages.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
    result
}

/// The panic boundary: run the body of the exported function `name`, turning a panic into
/// `RuntimeError("seqbalance internal error in NAME: ...")`.
pub fn guard<T>(name: &str, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Err(PyRuntimeError::new_err(format!(
            "seqbalance internal error in {name}: {message} (this is a bug; please report it)"
        )))
    })
}
