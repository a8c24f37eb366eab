//! Where failures become Python exceptions: core errors, interrupts and panics.
//!
//! * [`register`] defines the package's exception classes when the module initialises:
//!   `PartitionError` and `ArgumentError` with its concrete classes, so a native raise is always of
//!   the right class (`seqbalance.errors` re-exports them).
//! * [`argument_error`] builds an `ArgumentError` that carries where it arose (`.argument`,
//!   `.loc`, `.kind`, `.input`, and `.ctx`, the values of its kind's message template).
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
    PyAssertionError, PyException, PyKeyboardInterrupt, PyMemoryError, PyOverflowError, PyRuntimeError,
    PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::IntoPyObjectExt;

use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::refine::RefineError;

/// The classes [`register`] defines: `PartitionError`, `ArgumentError` and the concrete
/// argument errors by built-in base.
struct Classes {
    partition: Py<PyType>,
    value: Py<PyType>,
    type_: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// The built-in a natively raised `ArgumentError` also is (what the same refusal raised before
/// 0.3); `ArgumentOverflowError` is only raised by the package's Python readers.
#[derive(Clone, Copy)]
pub enum Base {
    Value,
    Type,
}

const PARTITION_DOC: &str =
    "The request cannot be partitioned as asked (too few items, or counts that cannot be equal).

It subclasses both `ValueError` (what new code should catch) and `AssertionError` (what code
written against the pure-Python partitioners in RL trainers catches, since those signal the same
conditions with ``assert``). Unlike an ``assert`` it survives ``python -O``.";

const ARGUMENT_DOC: &str = "An argument seqbalance refuses, with where it is and why.

Attributes:
    argument: the parameter's name (``\"lengths\"``).
    loc: the path to the refused value: ``(\"lengths\", 7)`` for item 7 of ``lengths``,
        ``(\"max_token_len\",)`` for a scalar.
    kind: a stable name from `seqbalance.errors.KINDS`, whose template gave the message.
    input: the refused value.
    ctx: the template's other values (``{\"minimum\": 0, \"shown\": \"-3\"}``).

Each concrete class also subclasses the built-in the same refusal raised before
(`ArgumentValueError` is a `ValueError`, `ArgumentTypeError` a `TypeError`,
`ArgumentOverflowError` an `OverflowError`), so every ``except`` written before keeps working.";

/// A new class `name(bases...)` of the package's `seqbalance.errors` module.
fn new_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Vec<Bound<'py, PyType>>,
    doc: &str,
    attributes: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "seqbalance.errors")?;
    namespace.set_item("__doc__", doc)?;
    for (key, value) in attributes {
        namespace.set_item(*key, value)?;
    }
    let class = py.get_type::<PyType>().call1((name, PyTuple::new(py, bases)?, namespace))?;
    Ok(class.cast_into::<PyType>()?)
}

/// Define the package's exception classes and add them (and the hooks) to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let none = py.None().into_bound(py);
    let partition = new_class(
        py,
        "PartitionError",
        vec![py.get_type::<PyValueError>(), py.get_type::<PyAssertionError>()],
        PARTITION_DOC,
        &[],
    )?;
    let argument = new_class(
        py,
        "ArgumentError",
        vec![py.get_type::<PyException>()],
        ARGUMENT_DOC,
        &[
            ("argument", none.clone()),
            ("loc", PyTuple::empty(py).into_any()),
            ("kind", none.clone()),
            ("input", none.clone()),
            ("ctx", none),
        ],
    )?;
    let [value, type_, overflow] = [
        ("ArgumentValueError", py.get_type::<PyValueError>()),
        ("ArgumentTypeError", py.get_type::<PyTypeError>()),
        ("ArgumentOverflowError", py.get_type::<PyOverflowError>()),
    ]
    .map(|(name, builtin)| {
        let doc = format!("An `ArgumentError` that is also a `{}`.", builtin.name()?);
        new_class(py, name, vec![argument.clone(), builtin], &doc, &[])
    });
    let (value, type_, overflow) = (value?, type_?, overflow?);
    for class in [&partition, &argument, &value, &type_, &overflow] {
        m.add(class.name()?, class)?;
    }
    // A second initialisation (a reloaded module) keeps the first classes, as the package does.
    let _ = CLASSES
        .set(py, Classes { partition: partition.unbind(), value: value.unbind(), type_: type_.unbind() });
    Ok(())
}

fn classes(py: Python<'_>) -> &Classes {
    CLASSES.get(py).expect("the exception classes are defined when the module initialises")
}

/// An `ArgumentError` of `kind` (a key of `seqbalance.errors.KINDS`, whose template `message`
/// follows) refusing `input` at `loc` (its first entry the argument's name), with `ctx` the
/// template's other values.
pub fn argument_error<'py>(
    py: Python<'py>,
    base: Base,
    kind: &str,
    loc: Bound<'py, PyTuple>,
    input: Bound<'py, PyAny>,
    ctx: Bound<'py, PyDict>,
    message: String,
) -> PyErr {
    let all = classes(py);
    let class = match base {
        Base::Value => &all.value,
        Base::Type => &all.type_,
    };
    let build = || -> PyResult<Bound<'py, PyAny>> {
        let error = class.bind(py).call1((message,))?;
        error.setattr("argument", loc.get_item(0)?)?;
        error.setattr("loc", &loc)?;
        error.setattr("kind", kind)?;
        error.setattr("input", input)?;
        error.setattr("ctx", ctx)?;
        Ok(error)
    };
    match build() {
        Ok(error) => PyErr::from_value(error),
        Err(failure) => failure,
    }
}

/// An `ArgumentError` refusing `name[path[0]][path[1]]...` (`name` itself for an empty path),
/// built from plain values; `ctx` holds the template's values (`shown`: how it shows `input`).
#[allow(clippy::too_many_arguments)]
pub fn located_error<'py, T: IntoPyObject<'py> + Copy>(
    py: Python<'py>,
    base: Base,
    kind: &str,
    name: &str,
    path: &[usize],
    input: T,
    ctx: &[(&str, &str)],
    message: String,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let mut entries = vec![name.into_bound_py_any(py)?];
        for &step in path {
            entries.push(step.into_bound_py_any(py)?);
        }
        let loc = PyTuple::new(py, entries)?;
        let values = PyDict::new(py);
        for (key, value) in ctx {
            values.set_item(*key, *value)?;
        }
        let input = input.into_bound_py_any(py)?;
        Ok(argument_error(py, base, kind, loc, input, values, message))
    };
    build().unwrap_or_else(|failure| failure)
}

/// The `too_small` error of item `position` of the array `name`: `value` is below `minimum`.
pub fn item_too_small(py: Python<'_>, name: &str, position: usize, value: i64, minimum: i64) -> PyErr {
    let (shown, lowest) = (value.to_string(), minimum.to_string());
    let message = format!("{name}[{position}] must be >= {minimum}, got {shown}");
    located_error(
        py,
        Base::Value,
        "too_small",
        name,
        &[position],
        value,
        &[("minimum", &lowest), ("shown", &shown)],
        message,
    )
}

/// The one place core errors become Python exceptions.
pub fn core_error(py: Python<'_>, error: CoreError) -> PyErr {
    match error {
        CoreError::NoPartitions => {
            let ctx = [("minimum", "1"), ("shown", "0")];
            located_error(py, Base::Value, "too_small", "k_partitions", &[], 0, &ctx, error.to_string())
        }
        CoreError::BadWeight { position, value } => {
            let shown = value.to_string();
            let message = error.to_string();
            let ctx = [("shown", shown.as_str())];
            located_error(
                py,
                Base::Value,
                "not_finite_or_negative",
                "seqlen_list",
                &[position],
                value,
                &ctx,
                message,
            )
        }
        CoreError::SumOverflow => PyOverflowError::new_err(error.to_string()),
        CoreError::TooFewItems { .. }
        | CoreError::NotDivisible { .. }
        | CoreError::TooManyItems { .. }
        | CoreError::UnequalCounts { .. } => {
            match classes(py).partition.bind(py).call1((error.to_string(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(failure) => failure,
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
