//! bfloat16 tensors read from a DLPack capsule: the one dtype NumPy has no type for.
//!
//! `seqbalance._arrays` hands every DLPack producer to `np.from_dlpack` first; only a capsule
//! NumPy refuses comes here. A bfloat16 value is the top half of a float32, so widening is exact:
//! shift the 16 bits up. The capsule is read, never consumed (its name stays "dltensor"), so the
//! producer's capsule destructor still frees the tensor when Python drops the capsule.
use std::ffi::{c_void, CStr};

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

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

/// Read a bfloat16 DLPack capsule as float32 values, widened exactly.
///
/// Returns `None` when the capsule holds another dtype (the caller then reports NumPy's own
/// error), else the values in row-major order and the shape. Raises `ValueError` for an object
/// that is not an unconsumed DLPack capsule, or a tensor outside host memory.
#[pyfunction]
#[pyo3(name = "_dlpack_bfloat16")]
fn dlpack_bfloat16<'py>(py: Python<'py>, capsule: &Bound<'py, PyAny>) -> PyResult<Option<Widened<'py>>> {
    // SAFETY: the GIL is held and `capsule` is borrowed for this whole call. The DLTensor and
    // the memory it points to belong to the producer until the capsule's destructor runs, which
    // cannot happen before this function returns. Shape and strides are the producer's promise
    // (as for every DLPack consumer); sizes are checked for overflow before any read.
    unsafe {
        let tensor = tensor_of(capsule)
            .ok_or_else(|| PyValueError::new_err("expected an unconsumed DLPack capsule"))?;
        let tensor = &*tensor;
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
        if !(0..=MAX_NDIM).contains(&tensor.ndim) {
            return Err(PyValueError::new_err(format!("DLPack tensor has ndim {}", tensor.ndim)));
        }
        let ndim = tensor.ndim as usize;
        let shape: Vec<i64> =
            if ndim == 0 { Vec::new() } else { std::slice::from_raw_parts(tensor.shape, ndim).to_vec() };
        let mut total: usize = 1;
        for &extent in &shape {
            let extent = usize::try_from(extent)
                .map_err(|_| PyValueError::new_err(format!("DLPack tensor has shape {shape:?}")))?;
            total = total
                .checked_mul(extent)
                .ok_or_else(|| PyValueError::new_err(format!("DLPack tensor has shape {shape:?}")))?;
        }
        // Strides are in elements; a null pointer means compact row-major.
        let strides: Vec<i64> = if tensor.strides.is_null() || ndim == 0 {
            let mut compact = vec![1i64; ndim];
            for d in (0..ndim.saturating_sub(1)).rev() {
                compact[d] = compact[d + 1] * shape[d + 1];
            }
            compact
        } else {
            std::slice::from_raw_parts(tensor.strides, ndim).to_vec()
        };
        let mut values = Vec::with_capacity(total);
        if total > 0 {
            if tensor.data.is_null() {
                return Err(PyValueError::new_err("DLPack tensor has no data"));
            }
            let base = (tensor.data as *const u8).add(tensor.byte_offset as usize);
            let mut index = vec![0i64; ndim];
            for _ in 0..total {
                let offset: i64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
                let half = (base.offset(offset as isize * 2) as *const u16).read_unaligned();
                values.push(f32::from_bits(u32::from(half) << 16));
                // Advance the row-major multi-index.
                for d in (0..ndim).rev() {
                    index[d] += 1;
                    if index[d] < shape[d] {
                        break;
                    }
                    index[d] = 0;
                }
            }
        }
        Ok(Some((values.into_pyarray(py), shape)))
    }
}

// The ABI layout this file assumes (dlpack.h on a 64-bit platform).
const _: () = assert!(std::mem::size_of::<DLTensor>() == 48 || std::mem::size_of::<usize>() != 8);

/// Add the DLPack reader to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dlpack_bfloat16, m)?)?;
    Ok(())
}
