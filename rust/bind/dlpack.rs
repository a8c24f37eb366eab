//! bfloat16 tensors read from a DLPack capsule: the one dtype NumPy has no type for.
//!
//! `seqbalance._arrays` hands every DLPack producer to `np.from_dlpack` first; only a capsule
//! NumPy refuses comes here. A bfloat16 value is the top half of a float32, so widening is exact:
//! shift the 16 bits up. The capsule is read, never consumed (its name stays "dltensor"), so the
//! producer's capsule destructor still frees the tensor when Python drops the capsule.
//!
//! The shape is checked before anything is allocated or read (at most [`MAX_ITEMS`] elements, a
//! span of strides inside the address space), the float32 copy is allocated fallibly, and the
//! read lets Python handle signals every 65536 elements, so an expanded (stride-0) tensor of
//! billions of elements is a `ValueError`, a `MemoryError` or a prompt `KeyboardInterrupt`,
//! never an abort or a minute-long stall.
use std::ffi::{c_void, CStr};

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

use seqbalance_core::alloc;

use crate::errors::{core_error, guard};

// The DLPack ABI (dlpack.h), as far as this reader needs it.
#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *const c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
/// kDLCPU, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged: memory the CPU can read.
const HOST_DEVICES: [i32; 4] = [1, 3, 11, 13];
const KDL_BFLOAT: u8 = 4;
/// More dimensions than any tensor library allows: a corrupt capsule, not a tensor.
const MAX_NDIM: i32 = 64;

/// The tensor a live, unconsumed capsule describes, or `None` when `capsule` is not one.
///
/// SAFETY (caller): the GIL is held and `capsule` stays alive while the result is used.
unsafe fn tensor_of(capsule: &Bound<'_, PyAny>) -> Option<*const DLTensor> {
    let ptr = capsule.as_ptr();
    if ffi::PyCapsule_IsValid(ptr, LEGACY.as_ptr()) == 1 {
        // A legacy DLManagedTensor starts with its DLTensor.
        return Some(ffi::PyCapsule_GetPointer(ptr, LEGACY.as_ptr()) as *const DLTensor);
    }
    if ffi::PyCapsule_IsValid(ptr, VERSIONED.as_ptr()) == 1 {
        let managed = ffi::PyCapsule_GetPointer(ptr, VERSIONED.as_ptr()) as *const DLManagedTensorVersioned;
        return Some(&raw const (*managed).dl_tensor);
    }
    None
}

/// Float32 values in row-major order, and the tensor's shape.
type Widened<'py> = (Bound<'py, PyArray1<f32>>, Vec<i64>);

/// The most items any seqbalance function takes: the core stores item positions as `u32` and
/// refuses `u32::MAX` items or more (`CoreError::TooManyItems`). `seqbalance._arrays` refuses
/// larger arrays of every dtype with the same bound, before reading them.
pub const MAX_ITEMS: usize = u32::MAX as usize - 1;

/// Offsets (in elements) a tensor may span: far inside `isize` in bytes, so that no address
/// computed from a checked shape and strides can wrap.
const MAX_SPAN: i128 = (i64::MAX / 8) as i128;

/// Elements widened between two looks at pending signals (Ctrl-C): well under a millisecond.
const SIGNAL_EVERY: usize = 1 << 16;

/// The tensor's element count, or the `ValueError` for a shape no seqbalance call can take.
fn element_count(shape: &[i64]) -> PyResult<usize> {
    if let Some(&extent) = shape.iter().find(|&&extent| extent < 0) {
        return Err(PyValueError::new_err(format!(
            "DLPack tensor has a negative extent ({extent}) in its shape {shape:?}"
        )));
    }
    if shape.contains(&0) {
        return Ok(0);
    }
    // Every extent is >= 1 here, so the product only grows: stop at the first overflow.
    let total = shape.iter().try_fold(1u128, |total, &extent| {
        let total = total * extent as u128;
        (total <= MAX_ITEMS as u128).then_some(total)
    });
    match total {
        Some(total) => Ok(total as usize),
        None => {
            let exact = shape.iter().try_fold(1u128, |total, &extent| total.checked_mul(extent as u128));
            let count = exact.map_or_else(|| "more than 2**127".to_owned(), |count| count.to_string());
            Err(PyValueError::new_err(format!(
                "DLPack tensor of shape {shape:?} has {count} elements, more than the {MAX_ITEMS} \
                 items seqbalance takes"
            )))
        }
    }
}

/// Element strides (a null pointer means compact row-major), checked so that every offset the
/// shape reaches stays within [`MAX_SPAN`] of the data pointer. `shape` has no zero extent and
/// at most [`MAX_ITEMS`] elements.
///
/// SAFETY (caller): `tensor.strides` is null or points at `shape.len()` strides.
unsafe fn checked_strides(tensor: &DLTensor, shape: &[i64]) -> PyResult<Vec<i64>> {
    let ndim = shape.len();
    let strides: Vec<i64> = if tensor.strides.is_null() {
        // Row-major: each stride the product of the extents after it (at most MAX_ITEMS).
        let mut compact = vec![1i64; ndim];
        for d in (0..ndim.saturating_sub(1)).rev() {
            compact[d] = compact[d + 1] * shape[d + 1];
        }
        compact
    } else {
        std::slice::from_raw_parts(tensor.strides, ndim).to_vec()
    };
    // At most 64 terms of (extent < 2**32) * (|stride| <= 2**63): no overflow in i128.
    let span: i128 = shape
        .iter()
        .zip(&strides)
        .map(|(&extent, &stride)| (extent as i128 - 1) * (stride as i128).abs())
        .sum();
    if span > MAX_SPAN || i128::from(tensor.byte_offset) > MAX_SPAN {
        return Err(PyValueError::new_err(format!(
            "DLPack tensor has strides {strides:?} (byte offset {}) for shape {shape:?}: \
             offsets beyond any addressable memory",
            tensor.byte_offset
        )));
    }
    Ok(strides)
}

/// Widen a bfloat16 tensor of `total` elements (within [`MAX_ITEMS`]) into float32, row-major.
///
/// Reads one row (the last dimension) at a time, `SIGNAL_EVERY` elements between two looks at
/// pending signals; a row with stride 0 (an expanded tensor) is one value repeated, written
/// without reading it again. The buffer is allocated fallibly (`MemoryError`).
///
/// SAFETY (caller): `base` is the tensor's first element (data + byte offset) and every offset
/// `sum(index[d] * strides[d])` for indexes within `shape` addresses a readable bfloat16 (the
/// producer's promise; the span was checked by [`checked_strides`]).
unsafe fn widen(
    py: Python<'_>,
    base: *const u8,
    shape: &[i64],
    strides: &[i64],
    total: usize,
) -> PyResult<Vec<f32>> {
    let mut values: Vec<f32> = alloc::with_capacity(total, "the bfloat16 values widened to float32")
        .map_err(|e| core_error(py, e))?;
    if total == 0 {
        return Ok(values);
    }
    let read = |offset: i64| -> f32 {
        let half = (base.offset(offset as isize * 2) as *const u16).read_unaligned();
        f32::from_bits(u32::from(half) << 16)
    };
    // A 0-d tensor is one row of one element.
    let (outer, (row_len, row_stride)) = match shape.split_last() {
        Some((&len, outer)) => (outer, (len as usize, strides[shape.len() - 1])),
        None => (&[][..], (1, 0)),
    };
    let mut index = vec![0i64; outer.len()];
    let mut since_check = 0usize;
    while values.len() < total {
        let start: i64 = index.iter().zip(strides).map(|(&i, &stride)| i * stride).sum();
        let mut done = 0usize;
        while done < row_len {
            let chunk = (row_len - done).min(SIGNAL_EVERY - since_check);
            if row_stride == 0 {
                let value = read(start);
                values.resize(values.len() + chunk, value);
            } else {
                let first = start + done as i64 * row_stride;
                values.extend((0..chunk as i64).map(|j| read(first + j * row_stride)));
            }
            done += chunk;
            since_check += chunk;
            if since_check == SIGNAL_EVERY {
                since_check = 0;
                py.check_signals()?;
            }
        }
        // The next row: advance the outer multi-index, last dimension fastest.
        for d in (0..outer.len()).rev() {
            index[d] += 1;
            if index[d] < outer[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(values)
}

/// Read a bfloat16 DLPack capsule as float32 values, widened exactly.
///
/// Returns `None` when the capsule holds another dtype (the caller then reports NumPy's own
/// error), else the values in row-major order and the shape. Raises `ValueError` for an object
/// that is not an unconsumed DLPack capsule, a corrupt shape or more than [`MAX_ITEMS`]
/// elements (whatever the dtype), and for a bfloat16 tensor outside host memory or with
/// corrupt strides (all checked before anything is read or allocated); `MemoryError` when the float32 copy does not fit; `KeyboardInterrupt` (or what
/// a signal handler raised) during a long read.
#[pyfunction]
#[pyo3(name = "_dlpack_bfloat16")]
fn dlpack_bfloat16<'py>(py: Python<'py>, capsule: &Bound<'py, PyAny>) -> PyResult<Option<Widened<'py>>> {
    guard("_dlpack_bfloat16", || {
        // SAFETY: the GIL is held and `capsule` is borrowed for this whole call. The DLTensor
        // and the memory it points to belong to the producer until the capsule's destructor
        // runs, which cannot happen before this function returns. Shape and strides are the
        // producer's promise (as for every DLPack consumer); the element count, the span of the
        // strides and the byte offset are checked before any read.
        unsafe {
            let tensor = tensor_of(capsule)
                .ok_or_else(|| PyValueError::new_err("expected an unconsumed DLPack capsule"))?;
            let tensor = &*tensor;
            // The shape first, whatever the dtype: NumPy refuses some absurd shapes with its own
            // words ("array is too big"), and the caller then asks this reader what is wrong.
            if !(0..=MAX_NDIM).contains(&tensor.ndim) {
                return Err(PyValueError::new_err(format!("DLPack tensor has ndim {}", tensor.ndim)));
            }
            let ndim = tensor.ndim as usize;
            if ndim > 0 && tensor.shape.is_null() {
                return Err(PyValueError::new_err("DLPack tensor has no shape"));
            }
            let shape: Vec<i64> =
                if ndim == 0 { Vec::new() } else { std::slice::from_raw_parts(tensor.shape, ndim).to_vec() };
            let total = element_count(&shape)?;
            let DLDataType { code, bits, lanes } = tensor.dtype;
            if (code, bits, lanes) != (KDL_BFLOAT, 16, 1) {
                return Ok(None);
            }
            if !HOST_DEVICES.contains(&tensor.device.device_type) {
                return Err(PyValueError::new_err(format!(
                    "DLPack tensor is on device type {}, not in host memory",
                    tensor.device.device_type
                )));
            }
            if total == 0 {
                return Ok(Some((Vec::<f32>::new().into_pyarray(py), shape)));
            }
            let strides = checked_strides(tensor, &shape)?;
            if tensor.data.is_null() {
                return Err(PyValueError::new_err("DLPack tensor has no data"));
            }
            let base = (tensor.data as *const u8).wrapping_add(tensor.byte_offset as usize);
            let values = widen(py, base, &shape, &strides, total)?;
            Ok(Some((values.into_pyarray(py), shape)))
        }
    })
}

// The ABI layout this file assumes (dlpack.h on a 64-bit platform).
const _: () = assert!(std::mem::size_of::<DLTensor>() == 48 || std::mem::size_of::<usize>() != 8);

/// Add the DLPack reader to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dlpack_bfloat16, m)?)?;
    m.add("MAX_ITEMS", MAX_ITEMS)?;
    Ok(())
}
