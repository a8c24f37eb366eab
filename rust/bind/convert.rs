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
use numpy::{PyArray1, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple};
use pyo3::{ffi, IntoPyObjectExt};

use seqbalance_core::float::Float;
use seqbalance_core::parts::Partition;

/// How many index objects are shared: 2**16 ints take ~2 MB and about a millisecond to create.
const SHARED_INDEXES: usize = 1 << 16;

static INDEXES: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();

/// Create the shared index objects (at import, so no partitioning call pays for it).
pub fn init_shared_indexes(py: Python<'_>) -> PyResult<()> {
    INDEXES.get_or_try_init(py, || (0..SHARED_INDEXES).map(|i| i.into_py_any(py)).collect())?;
    Ok(())
}

/// `k` lists of ints, one per partition.
pub fn nested_lists<'py>(py: Python<'py>, partition: &Partition) -> PyResult<Bound<'py, PyList>> {
    match INDEXES.get(py) {
        // Every index is below n, so one check covers the whole partition.
        Some(shared) if partition.order.len() <= shared.len() => {
            let lists = partition
                .parts()
                .map(|part| PyList::new(py, part.iter().map(|&index| &shared[index as usize])))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, lists)
        }
        _ => PyList::new(py, partition.parts()),
    }
}

fn item_value(item: &Bound<'_, PyAny>) -> Option<u64> {
    let value: i64 = item.extract().ok()?;
    u64::try_from(value).ok()
}

/// A list's items as non-negative values, or `None` if any is not one.
fn list_values(list: &Bound<'_, PyList>) -> Option<Vec<u64>> {
    let len = list.len();
    let mut values = Vec::with_capacity(len);
    for position in 0..len {
        // SAFETY: `list` is a live list and the GIL is held. `PyList_GetItem` returns a borrowed
        // reference (or NULL with IndexError if the list shrank, which is cleared and sends the
        // input to the careful path). The borrowed item is only used while no Python code can
        // run: `PyLong_CheckExact` and `PyLong_AsLongLong` on an exact int call nothing back
        // into Python. Non-exact items go through pyo3's owned, checked access instead.
        let fast = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), position as ffi::Py_ssize_t);
            if item.is_null() {
                ffi::PyErr_Clear();
                return None;
            }
            if ffi::PyLong_CheckExact(item) != 0 {
                let value = ffi::PyLong_AsLongLong(item);
                if value == -1 && !ffi::PyErr_Occurred().is_null() {
                    ffi::PyErr_Clear(); // above i64: the careful path reports it
                    return None;
                }
                Some(value)
            } else {
                None
            }
        };
        let value = match fast {
            Some(value) => u64::try_from(value).ok()?,
            None => item_value(&list.get_item(position).ok()?)?,
        };
        values.push(value);
    }
    Some(values)
}

// Only exact, aligned ndarrays: subclasses (a masked array's data includes its masked values)
// and unaligned views (which Rust may not read through references) take the careful path.
macro_rules! array_fast_path {
    ($obj:expr, $($signed:ty),* ; $($unsigned:ty),*) => {
        match $obj.cast::<PyUntypedArray>() {
            Ok(array) if $obj.is_exact_instance_of::<PyUntypedArray>() && array.is_aligned() => {}
            _ => return None,
        }
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

/// Weights in the precision the partitioners compute in (see `seqbalance._inputs.Weights`).
pub enum Weights {
    Exact(Vec<u64>),
    Double(Vec<f64>),
    Single(Vec<f32>),
}

impl Weights {
    pub fn len(&self) -> usize {
        match self {
            Weights::Exact(v) => v.len(),
            Weights::Double(v) => v.len(),
            Weights::Single(v) => v.len(),
        }
    }
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
fn list_floats(list: &Bound<'_, PyList>) -> Option<Vec<f64>> {
    let len = list.len();
    let mut values = Vec::with_capacity(len);
    for position in 0..len {
        // SAFETY: as in `list_values`: a borrowed item of a live list, used only through
        // `PyFloat_CheckExact` and `PyFloat_AsDouble` (which cannot fail on an exact float), which call nothing back into Python.
        let value = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), position as ffi::Py_ssize_t);
            if item.is_null() {
                ffi::PyErr_Clear();
                return None;
            }
            if ffi::PyFloat_CheckExact(item) == 0 {
                return None;
            }
            ffi::PyFloat_AsDouble(item)
        };
        values.push(value);
    }
    floats_certainly_valid(&values, f64::MAX).then_some(values)
}

/// An exact, aligned float64 or float32 ndarray's values (`check`: only if certainly valid).
fn float_array(obj: &Bound<'_, PyAny>, check: bool) -> Option<Weights> {
    match obj.cast::<PyUntypedArray>() {
        Ok(array) if obj.is_exact_instance_of::<PyUntypedArray>() && array.is_aligned() => {}
        _ => return None,
    }
    if let Ok(array) = obj.cast::<PyArray1<f64>>() {
        let values = array.try_readonly().ok()?.as_array().to_vec();
        return (!check || floats_certainly_valid(&values, f64::MAX)).then_some(Weights::Double(values));
    }
    if let Ok(array) = obj.cast::<PyArray1<f32>>() {
        let values = array.try_readonly().ok()?.as_array().to_vec();
        return (!check || floats_certainly_valid(&values, f32::MAX as f64))
            .then_some(Weights::Single(values));
    }
    None
}

/// Weights of input that is certainly valid, without a Python object per array item; `None`
/// sends the input through the full normalisation (which raises the precise error).
pub fn fast_weights(obj: &Bound<'_, PyAny>) -> Option<Weights> {
    if let Ok(list) = obj.cast::<PyList>() {
        return match list_values(list) {
            Some(values) => Some(Weights::Exact(values)),
            None => list_floats(list).map(Weights::Double),
        };
    }
    if let Some(values) = fast_values(obj) {
        return Some(Weights::Exact(values));
    }
    float_array(obj, true)
}

/// The weights in an array that `seqbalance._inputs.normalize_weights` returned (valid already).
pub fn normalised_weights(array: &Bound<'_, PyAny>) -> Option<Weights> {
    fast_values(array).map(Weights::Exact).or_else(|| float_array(array, false))
}

/// Values of input that is certainly valid, without a Python object per array item; `None`
/// sends the input through the full normalisation (which raises the precise error).
pub fn fast_values(obj: &Bound<'_, PyAny>) -> Option<Vec<u64>> {
    if let Ok(list) = obj.cast::<PyList>() {
        return list_values(list);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        // Collecting into `Option<Vec<_>>` would not know the length and regrow the vector.
        let mut values = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            values.push(item_value(&item)?);
        }
        return Some(values);
    }
    array_fast_path!(obj, i64, i32, i16, i8; u64, u32, u16, u8);
    None
}
