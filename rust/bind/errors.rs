//! Where failures become Python exceptions: core errors, interrupts and panics.
//!
//! * [`core_error`] is the one place core errors become Python exceptions (an allocation failure
//!   becomes `MemoryError` naming the buffer).
//! * [`interruptible`] runs a core call (with the GIL released when asked) while watching for
//!   signals: every ~50 ms of work it re-takes the GIL briefly and lets Python run its signal
//!   handlers, so Ctrl-C stops a long call with `KeyboardInterrupt`.
//! * [`guard`] is the panic boundary every exported function runs inside: a Rust panic is a bug,
//!   and it reaches Python as a `RuntimeError` saying "internal error" and the function's name,
//!   never as an abort (the profiles never set `panic = "abort"`).
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyKeyboardInterrupt, PyMemoryError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;

static PARTITION_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The one place core errors become Python exceptions.
pub fn core_error(py: Python<'_>, error: CoreError) -> PyErr {
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
