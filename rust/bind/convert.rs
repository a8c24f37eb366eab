//! Python objects in and out of the core: the binding's hot loops.
//!
//! At per-step sizes, reading a list of ints and building the result lists cost as much as the
//! partitioning itself (measured at n = 1024: ~13 ns per item each way against ~20 ns per item
//! for the core), so both loops take shortcuts, all of them here:
//! * a list of exact ints is read through the C API with borrowed references, one
//!   `PyLong_AsLongLong` per item and no reference-count traffic; anything else (bools, NumPy
//!   scalars, objects with `__index__`) takes pyo3's safe path, item by item;
//! * result lists reuse one shared int object per index below `SHARED_INDEXES` (ints are
//!   immutable, so sharing is invisible), created once when the module is imported: building a
//!   list is then a reference increment per item instead of an allocation.
//!
//! Both directions allocate fallibly (a list too large for memory is a `MemoryError`, never an
//! abort or a panic on a null pointer) and let Python handle signals every [`SIGNAL_EVERY`] items.
#[cfg(feature = "test-hooks")]
use std::sync::atomic::{AtomicUsize, Ordering};

use numpy::{PyArray1, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyMemoryError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple};

use seqbalance_core::alloc;
use seqbalance_core::float::Float;
use seqbalance_core::parts::Partition;
use seqbalance_core::request::Weights;

use crate::dlpack::MAX_ITEMS;
use crate::errors::{core_error, item_too_small, out_of_memory};

/// Inputs read into a buffer of the binding's own, for the tests (`_native._input_reads`): a
/// partitioning call, refinement included, reads its input once. Counted when a reader
/// completes ([`fast_weights`], [`normalised_weights`], [`unsigned_array`], [`count_read`]).
/// Only in the test build (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
static INPUT_READS: AtomicUsize = AtomicUsize::new(0);

/// Count one completed read of an input (a test hook: nothing in the release build).
#[inline(always)]
pub fn count_read() {
    #[cfg(feature = "test-hooks")]
    INPUT_READS.fetch_add(1, Ordering::Relaxed);
}

/// How many inputs the binding has read so far (a test hook).
#[cfg(feature = "test-hooks")]
#[pyfunction]
pub fn _input_reads() -> usize {
    INPUT_READS.load(Ordering::Relaxed)
}

/// Items converted between two looks at pending signals (Ctrl-C): a millisecond or less.
const SIGNAL_EVERY: usize = 1 << 16;

/// Let Python handle pending signals when `position` ends a run of [`SIGNAL_EVERY`] items.
#[inline(always)]
pub fn poll_signals(py: Python<'_>, position: usize) -> PyResult<()> {
    if position % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
        py.check_signals()?;
    }
    Ok(())
}

/// How many index objects are shared: 2**16 ints take ~2 MB and about a millisecond to create.
const SHARED_INDEXES: usize = 1 << 16;

static INDEXES: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();

/// Create the shared index objects (at import, so no partitioning call pays for it).
///
/// Sharing only saves time: when memory runs out here (an import under a tight address-space
/// limit), the module goes on without it and result lists create their ints one by one. Every
/// allocation is checked, and a failed int is cleared here rather than turned into a `PyErr`:
/// pyo3's conversion panics on a null int, and its error path, first used while memory is
/// short, can wait forever on its own half-built exception type.
pub fn init_shared_indexes(py: Python<'_>) {
    let Ok(mut shared) = alloc::with_capacity::<Py<PyAny>>(SHARED_INDEXES, "the shared indexes") else {
        return;
    };
    for index in 0..SHARED_INDEXES {
        // SAFETY: the GIL is held; a NULL result (out of memory) is checked before any use.
        let item = unsafe { ffi::PyLong_FromSsize_t(index as ffi::Py_ssize_t) };
        if item.is_null() {
            // SAFETY: the GIL is held; this drops the MemoryError PyLong_FromSsize_t set.
            unsafe { ffi::PyErr_Clear() };
            return;
        }
        // SAFETY: `item` is a new, non-null reference, owned from here on.
        shared.push(unsafe { Bound::from_owned_ptr(py, item) }.unbind());
    }
    // Set only once, at import: a second import of the module finds it set and keeps it.
    let _ = INDEXES.set(py, shared);
}

/// An empty Python list of `len` slots, or the `MemoryError` Python raised.
pub fn new_list(py: Python<'_>, len: usize) -> PyResult<Bound<'_, PyList>> {
    let len =
        ffi::Py_ssize_t::try_from(len).map_err(|_| out_of_memory("a result list", len.saturating_mul(8)))?;
    // SAFETY: the GIL is held; a NULL result comes with the Python error set, which
    // `from_owned_ptr_or_err` fetches. The new list's slots are NULL until set below, which
    // Python tolerates (a partly filled list is freed normally when an error drops it).
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(len)).map(|list| list.cast_into_unchecked()) }
}

/// A new reference to the shared int object of `value`, if `value` is below the shared ones.
pub fn shared_int(py: Python<'_>, value: u64) -> Option<*mut ffi::PyObject> {
    let shared = INDEXES.get(py)?;
    let item = shared.get(usize::try_from(value).ok()?)?;
    Some(item.clone_ref(py).into_ptr())
}

/// Put `item` (a new reference, or NULL with a Python error set) at `position` of a new `list`.
pub fn set_new_item(
    py: Python<'_>,
    list: &Bound<'_, PyList>,
    position: usize,
    item: *mut ffi::PyObject,
) -> PyResult<()> {
    if item.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `list` is a list made by `new_list` with more than `position` slots; SetItem
    // steals the reference to `item`.
    if unsafe { ffi::PyList_SetItem(list.as_ptr(), position as ffi::Py_ssize_t, item) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// An item index as the core stores it.
pub trait Index: Copy {
    fn as_u64(self) -> u64;
}

impl Index for u32 {
    fn as_u64(self) -> u64 {
        self as u64
    }
}

impl Index for usize {
    fn as_u64(self) -> u64 {
        self as u64
    }
}

/// A list of lists of ints from `parts` (each a slice of indexes below `n_items`).
pub fn index_lists<'py, I: Index>(
    py: Python<'py>,
    n_items: usize,
    parts: impl ExactSizeIterator<Item = impl AsRef<[I]>>,
) -> PyResult<Bound<'py, PyList>> {
    let n_parts = parts.len();
    build_index_lists(py, n_items, parts).map_err(|error| {
        if error.is_instance_of::<PyMemoryError>(py) {
            // Python's own MemoryError says nothing; name what was being built (about a list
            // slot and an int object per item).
            out_of_memory("the result lists", n_items.saturating_add(n_parts).saturating_mul(40))
        } else {
            error
        }
    })
}

fn build_index_lists<'py, I: Index>(
    py: Python<'py>,
    n_items: usize,
    parts: impl ExactSizeIterator<Item = impl AsRef<[I]>>,
) -> PyResult<Bound<'py, PyList>> {
    let shared = INDEXES.get(py).filter(|shared| n_items <= shared.len());
    let outer = new_list(py, parts.len())?;
    let mut converted = 0usize;
    for (p, part) in parts.enumerate() {
        let part = part.as_ref();
        let inner = new_list(py, part.len())?;
        for (position, &index) in part.iter().enumerate() {
            converted += 1;
            if converted % SIGNAL_EVERY == 0 {
                py.check_signals()?;
            }
            let index = index.as_u64();
            let item = match shared {
                // Every index is below n_items, so one check above covers the whole partition.
                Some(shared) => shared[index as usize].clone_ref(py).into_ptr(),
                // SAFETY: the GIL is held; NULL (with MemoryError set) is handled by set_new_item.
                None => unsafe { ffi::PyLong_FromUnsignedLongLong(index) },
            };
            set_new_item(py, &inner, position, item)?;
        }
        set_new_item(py, &outer, p, inner.into_ptr())?;
    }
    Ok(outer)
}

/// `k` lists of ints, one per partition.
pub fn nested_lists<'py>(py: Python<'py>, partition: &Partition) -> PyResult<Bound<'py, PyList>> {
    index_lists(py, partition.order.len(), (0..partition.k()).map(|p| partition.part(p)))
}

fn item_value(item: &Bound<'_, PyAny>) -> Option<u64> {
    let value: i64 = item.extract().ok()?;
    u64::try_from(value).ok()
}

/// Room for `len` values, or `MemoryError`.
fn value_buffer(py: Python<'_>, len: usize) -> PyResult<Vec<u64>> {
    alloc::with_capacity(len, "the lengths").map_err(|error| core_error(py, error))
}

/// A list's items as non-negative values, or `None` if any is not one.
fn list_values(list: &Bound<'_, PyList>) -> PyResult<Option<Vec<u64>>> {
    let py = list.py();
    let len = list.len();
    let mut values = value_buffer(py, len)?;
    for position in 0..len {
        poll_signals(py, position)?;
        // SAFETY: `list` is a live list and the GIL is held. `PyList_GetItem` returns a borrowed
        // reference (or NULL with IndexError if the list shrank, which is cleared and sends the
        // input to the careful path). The borrowed item is only used while no Python code can
        // run: `PyLong_CheckExact` and `PyLong_AsLongLong` on an exact int call nothing back
        // into Python. Non-exact items go through pyo3's owned, checked access instead.
        let fast = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), position as ffi::Py_ssize_t);
            if item.is_null() {
                ffi::PyErr_Clear();
                return Ok(None);
            }
            if ffi::PyLong_CheckExact(item) != 0 {
                let value = ffi::PyLong_AsLongLong(item);
                if value == -1 && !ffi::PyErr_Occurred().is_null() {
                    ffi::PyErr_Clear(); // above i64: the careful path reports it
                    return Ok(None);
                }
                Some(value)
            } else {
                None
            }
        };
        let value = match fast {
            Some(value) => u64::try_from(value).ok(),
            None => list.get_item(position).ok().and_then(|item| item_value(&item)),
        };
        let Some(value) = value else { return Ok(None) };
        values.push(value);
    }
    Ok(Some(values))
}

/// An integer array's values as `u64`; `Err(position)` names the first that is negative or
/// above `i64::MAX`. The one reader of integer arrays: the fast path below, and the int64
/// arrays of refinement, packing and the planner ([`unsigned_array`]).
fn read_unsigned<T: Copy + TryInto<i64>>(
    py: Python<'_>,
    view: numpy::ndarray::ArrayView1<'_, T>,
) -> PyResult<Result<Vec<u64>, usize>> {
    let mut values = value_buffer(py, view.len())?;
    for (position, &v) in view.iter().enumerate() {
        poll_signals(py, position)?;
        let Some(v) = v.try_into().ok().and_then(|v: i64| u64::try_from(v).ok()) else {
            return Ok(Err(position));
        };
        values.push(v);
    }
    Ok(Ok(values))
}

/// An integer array's values as `u64`, or `None` if any is negative or above `i64::MAX`.
fn array_values<T: Copy + TryInto<i64>>(
    py: Python<'_>,
    view: numpy::ndarray::ArrayView1<'_, T>,
) -> PyResult<Option<Vec<u64>>> {
    Ok(read_unsigned(py, view)?.ok())
}

/// The values of an int64 array as `u64`, or `ValueError("{name}[i] must be >= 0, got v")`.
pub fn unsigned_array(
    py: Python<'_>,
    view: numpy::ndarray::ArrayView1<'_, i64>,
    name: &str,
) -> PyResult<Vec<u64>> {
    let values =
        read_unsigned(py, view)?.map_err(|position| item_too_small(py, name, position, view[position], 0))?;
    count_read();
    Ok(values)
}

/// `repr(object)` cut to 60 characters, with its type: how error messages show a bad value
/// (as `seqbalance._inputs` does).
pub fn describe(object: &Bound<'_, PyAny>) -> String {
    let text = object.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".to_owned());
    let text =
        if text.chars().count() > 60 { text.chars().take(57).collect::<String>() + "..." } else { text };
    let kind = object.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    format!("{text} ({kind})")
}

// Only exact, aligned ndarrays: subclasses (a masked array's data includes its masked values),
// unaligned views (which Rust may not read through references) and arrays of more items than
// any call takes (an expanded, stride-0 view; `_arrays` refuses it by size) take the careful path.
macro_rules! array_fast_path {
    ($obj:expr, $($integer:ty),*) => {
        match $obj.cast::<PyUntypedArray>() {
            Ok(array) if $obj.is_exact_instance_of::<PyUntypedArray>() && array.is_aligned() && array.len() <= MAX_ITEMS => {}
            _ => return Ok(None),
        }
        $(
            if let Ok(array) = $obj.cast::<PyArray1<$integer>>() {
                let Ok(view) = array.try_readonly() else { return Ok(None) };
                return array_values($obj.py(), view.as_array());
            }
        )*
    };
}

/// Float weights the fast path may take as they are: finite, `>= 0`, and a total clearly below
/// half the largest finite value (near that limit, `_inputs` decides on the exact total).
fn floats_certainly_valid<F: Float>(values: &[F], largest: f64) -> bool {
    let mut total = 0.0f64;
    for &v in values {
        if !(v.is_finite() && v >= F::ZERO) {
            return false;
        }
        total += v.to_f64();
    }
    total <= largest / 2.0 * (1.0 - 1.0 / 1_048_576.0)
}

/// A list of exact Python floats as doubles, or `None` if any item is something else.
///
/// The loop has `list_values`'s shape, written out again on purpose: a generic loop over a
/// per-item closure shared by the two cost `list_values` 5 more instructions an item (32 against
/// 27, callgrind), on the path every list of lengths takes.
fn list_floats(list: &Bound<'_, PyList>) -> PyResult<Option<Vec<f64>>> {
    let py = list.py();
    let len = list.len();
    let mut values = alloc::with_capacity(len, "the weights").map_err(|error| core_error(py, error))?;
    for position in 0..len {
        poll_signals(py, position)?;
        // SAFETY: as in `list_values`: a borrowed item of a live list, used only through
        // `PyFloat_CheckExact` and `PyFloat_AsDouble` (which cannot fail on an exact float), which call nothing back into Python.
        let value = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), position as ffi::Py_ssize_t);
            if item.is_null() {
                ffi::PyErr_Clear();
                return Ok(None);
            }
            if ffi::PyFloat_CheckExact(item) == 0 {
                return Ok(None);
            }
            ffi::PyFloat_AsDouble(item)
        };
        values.push(value);
    }
    Ok(floats_certainly_valid(&values, f64::MAX).then_some(values))
}

/// An exact, aligned float64 or float32 ndarray's values (`check`: only if certainly valid).
fn float_array(obj: &Bound<'_, PyAny>, check: bool) -> PyResult<Option<Weights>> {
    let py = obj.py();
    match obj.cast::<PyUntypedArray>() {
        Ok(array)
            if obj.is_exact_instance_of::<PyUntypedArray>()
                && array.is_aligned()
                && array.len() <= MAX_ITEMS => {}
        _ => return Ok(None),
    }
    fn copy<T: Copy>(py: Python<'_>, view: numpy::ndarray::ArrayView1<'_, T>) -> PyResult<Vec<T>> {
        alloc::collect(view.iter().copied(), "the weights").map_err(|error| core_error(py, error))
    }
    if let Ok(array) = obj.cast::<PyArray1<f64>>() {
        let Ok(view) = array.try_readonly() else { return Ok(None) };
        let values: Vec<f64> = copy(py, view.as_array())?;
        return Ok((!check || floats_certainly_valid(&values, f64::MAX)).then_some(Weights::Double(values)));
    }
    if let Ok(array) = obj.cast::<PyArray1<f32>>() {
        let Ok(view) = array.try_readonly() else { return Ok(None) };
        let values: Vec<f32> = copy(py, view.as_array())?;
        return Ok(
            (!check || floats_certainly_valid(&values, f32::MAX as f64)).then_some(Weights::Single(values))
        );
    }
    Ok(None)
}

/// Weights of input that is certainly valid, without a Python object per array item; `None`
/// sends the input through the full normalisation (which raises the precise error).
pub fn fast_weights(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Option<Weights>> {
    let weights = if let Ok(list) = obj.cast::<PyList>() {
        match list_values(list)? {
            Some(values) => Some(Weights::Exact(values)),
            None => list_floats(list)?.map(Weights::Double),
        }
    } else if let Some(values) = fast_values(py, obj)? {
        Some(Weights::Exact(values))
    } else {
        float_array(obj, true)?
    };
    if weights.is_some() {
        count_read();
    }
    Ok(weights)
}

/// The weights in an array that `seqbalance._inputs.normalize_weights` returned (valid already).
pub fn normalised_weights(py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<Option<Weights>> {
    let weights = match fast_values(py, array)? {
        Some(values) => Some(Weights::Exact(values)),
        None => float_array(array, false)?,
    };
    if weights.is_some() {
        count_read();
    }
    Ok(weights)
}

/// Values of input that is certainly valid, without a Python object per array item; `None`
/// sends the input through the full normalisation (which raises the precise error). Errors:
/// `MemoryError` for an input too large to copy, or what a signal handler raised.
pub fn fast_values(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u64>>> {
    if let Ok(list) = obj.cast::<PyList>() {
        return list_values(list);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        let mut values = value_buffer(py, tuple.len())?;
        for (position, item) in tuple.iter().enumerate() {
            poll_signals(py, position)?;
            let Some(value) = item_value(&item) else { return Ok(None) };
            values.push(value);
        }
        return Ok(Some(values));
    }
    array_fast_path!(obj, i64, i32, i16, i8, u64, u32, u16, u8);
    Ok(None)
}
