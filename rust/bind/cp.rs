//! Python binding of the context-parallel planner core (`cp/`): one private function that
//! `seqbalance.planning.context_parallel` calls with validated arrays.
use std::borrow::Cow;

use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use seqbalance_core::alloc;
use seqbalance_core::cp::{layout, plan, CpError, Layout, Method, Problem, Reading, Workload};

use crate::convert::{new_list, poll_signals, set_new_item, shared_int, unsigned_array};
use crate::errors::{core_error, guard, interruptible, out_of_memory, DETACH_THRESHOLD};

/// A float64 array's values: the array's own memory when it is contiguous (the communication
/// table holds `n · degrees` of them, as large as anything the planner allocates), else a copy
/// (strided views included).
fn floats<'a>(
    py: Python<'_>,
    array: &'a PyReadonlyArray1<'_, f64>,
    what: &'static str,
) -> PyResult<Cow<'a, [f64]>> {
    if let Ok(slice) = array.as_slice() {
        return Ok(Cow::Borrowed(slice));
    }
    let view = array.as_array();
    alloc::collect(view.iter().copied(), what).map(Cow::Owned).map_err(|e| core_error(py, e))
}

/// Plan context-parallel steps: `(steps, time, method)`, `steps` a list of lists of
/// `(cp_size, ranks, indexes)`. `comm` holds, for each sequence in turn, its communication at
/// every degree of `degrees` (ascending, each at most `world_size`). `method`: `"best"` (the
/// search against the six floors), `"one_size"` (one degree per step, against one fixed degree),
/// one greedy reading (`"1a"` ... `"2b"`), or one reading of Megatron-LM's scheduler
/// (`"megatron"`, `"megatron-judged"`).
///
/// Private: `plan_context_parallel` validates the arguments and words the errors; this still
/// refuses inconsistent arrays with `ValueError` rather than trusting its caller.
#[pyfunction]
#[pyo3(
    name = "_plan_context_parallel",
    signature = (lengths, costs, comm, degrees, world_size, cap, method = "best")
)]
#[allow(clippy::too_many_arguments)]
fn plan_context_parallel_py<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, i64>,
    costs: PyReadonlyArray1<'py, f64>,
    comm: PyReadonlyArray1<'py, f64>,
    degrees: PyReadonlyArray1<'py, i64>,
    world_size: u32,
    cap: u64,
    method: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    guard("_plan_context_parallel", || {
        let method = match method {
            "best" => Method::Best,
            "one_size" => Method::OneSizePerStep,
            name => match (Reading::from_name(name), Workload::from_name(name)) {
                (Some(reading), _) => Method::Greedy(reading),
                (None, Some(workload)) => Method::Megatron(workload),
                (None, None) => {
                    return Err(PyValueError::new_err(format!(
                        "method must be 'best', 'one_size', '1a', '1b', '2a', '2b', 'megatron' or \
                         'megatron-judged', got {name:?}"
                    )))
                }
            },
        };
        let lengths = unsigned_array(py, lengths.as_array(), "lengths")?;
        // The costs may be the caller's own array: a copy, which no other thread can write while
        // the plan runs without the GIL. The communication table is the one
        // `plan_context_parallel` builds for this call and hands to no one else: read in place.
        let costs =
            alloc::collect(costs.as_array().iter().copied(), "the costs").map_err(|e| core_error(py, e))?;
        let comm = floats(py, &comm, "the communication costs")?;
        let degrees: Vec<u32> = unsigned_array(py, degrees.as_array(), "degrees")?
            .into_iter()
            .map(|c| {
                u32::try_from(c).map_err(|_| PyValueError::new_err(format!("degree {c} is above 2**32")))
            })
            .collect::<PyResult<_>>()?;
        let problem =
            Problem { lengths: &lengths, costs: &costs, comm: &comm, degrees: &degrees, world_size, cap };
        let (result, raised) = interruptible(py, lengths.len() >= DETACH_THRESHOLD / 8, |interrupt| {
            let planned = plan(&problem, method, interrupt)?;
            let laid = layout(&problem, &planned.steps)?;
            Ok((laid, planned.time, planned.method))
        });
        let (laid, time, name) = result.map_err(|error| match (error, raised) {
            (CpError::Core(seqbalance_core::error::CoreError::Interrupted), Some(raised)) => raised,
            (CpError::Core(error), _) => core_error(py, error),
            (error, _) => PyValueError::new_err(error.to_string()),
        })?;
        let steps = answer(py, &laid, world_size).map_err(|error| {
            if error.is_instance_of::<PyMemoryError>(py) {
                // Python's own MemoryError says nothing; name what was being built.
                out_of_memory("the plan's lists", answer_bytes(&laid))
            } else {
                error
            }
        })?;
        PyTuple::new(
            py,
            [steps.into_any(), time.into_pyobject(py)?.into_any(), name.into_pyobject(py)?.into_any()],
        )
    })
}

/// About what the answer's lists take: per group a tuple and two lists (~200 bytes), per rank
/// of a group a list slot (8), per index a slot and an int (40), per rank of the world an int
/// (32, shared by every group on it).
pub fn answer_bytes(laid: &Layout) -> usize {
    let slots: u64 = laid.groups.iter().map(|g| g[1]).sum();
    let bytes = laid.groups.len() as u64 * 200 + slots * 8 + laid.members.len() as u64 * 40;
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The int objects of rank numbers (and CP sizes) at or above the shared ones, made once per
/// call and shared by every group that names them: a plan over many ranks repeats each rank in
/// every step, and a list slot (8 bytes) is all a repeat then costs instead of a new int (32).
struct RankInts<'py> {
    py: Python<'py>,
    /// Per rank, its int object (a new reference this holds) or 0 until first asked for.
    objects: Vec<usize>,
}

impl<'py> RankInts<'py> {
    fn new(py: Python<'py>, world_size: u32) -> PyResult<RankInts<'py>> {
        // Zeroed memory from the system: ranks never named cost nothing.
        let objects = alloc::zeroed::<usize>(world_size as usize + 1, "the plan's rank numbers")
            .map_err(|error| core_error(py, error))?;
        Ok(RankInts { py, objects })
    }

    /// A new reference to the int `value` (at most `world_size`), or NULL with MemoryError set.
    fn get(&mut self, value: u64) -> *mut ffi::PyObject {
        if let Some(shared) = shared_int(self.py, value) {
            return shared;
        }
        let slot = &mut self.objects[value as usize];
        if *slot == 0 {
            // SAFETY: the GIL is held; NULL (with MemoryError set) goes back to the caller.
            let object = unsafe { ffi::PyLong_FromUnsignedLongLong(value) };
            if object.is_null() {
                return object;
            }
            *slot = object as usize;
        }
        // SAFETY: the slot holds a live int this struct owns a reference to; the new reference
        // goes to the caller.
        unsafe {
            ffi::Py_IncRef(*slot as *mut ffi::PyObject);
        }
        *slot as *mut ffi::PyObject
    }
}

impl Drop for RankInts<'_> {
    fn drop(&mut self) {
        for &object in &self.objects {
            if object != 0 {
                // SAFETY: the GIL is held (`py` lives as long as this); the reference is ours.
                unsafe { ffi::Py_DecRef(object as *mut ffi::PyObject) };
            }
        }
    }
}

/// The steps as Python lists of `(cp_size, ranks, indexes)` tuples, every allocation checked
/// (a plan too large for memory is a `MemoryError`, and the next call works).
fn answer<'py>(py: Python<'py>, laid: &Layout, world_size: u32) -> PyResult<Bound<'py, PyList>> {
    let n_steps = laid.groups.last().map_or(0, |g| g[0] as usize + 1);
    let steps = new_list(py, n_steps)?;
    let mut ranks = RankInts::new(py, world_size)?;
    let (mut start, mut at, mut converted) = (0usize, 0usize, 0usize);
    for s in 0..n_steps {
        let count = laid.groups[at..].iter().take_while(|g| g[0] as usize == s).count();
        let step = new_list(py, count)?;
        for (position, &[_, cp_size, first_rank, end]) in laid.groups[at..at + count].iter().enumerate() {
            let end = end as usize;
            let rank_list = new_list(py, cp_size as usize)?;
            for (slot, rank) in (first_rank..first_rank + cp_size).enumerate() {
                converted += 1;
                poll_signals(py, converted)?;
                set_new_item(py, &rank_list, slot, ranks.get(rank))?;
            }
            let index_list = new_list(py, end - start)?;
            for (slot, &index) in laid.members[start..end].iter().enumerate() {
                converted += 1;
                poll_signals(py, converted)?;
                let item = shared_int(py, index as u64).unwrap_or_else(|| {
                    // SAFETY: the GIL is held; NULL (with MemoryError set) is handled below.
                    unsafe { ffi::PyLong_FromUnsignedLongLong(index as u64) }
                });
                set_new_item(py, &index_list, slot, item)?;
            }
            start = end;
            let group = new_tuple(py, [ranks.get(cp_size), rank_list.into_ptr(), index_list.into_ptr()])?;
            set_new_item(py, &step, position, group.into_ptr())?;
        }
        at += count;
        set_new_item(py, &steps, s, step.into_ptr())?;
    }
    Ok(steps)
}

/// A tuple of three new references (any of them NULL with a Python error set: the others are
/// released and the error comes back).
fn new_tuple<'py>(py: Python<'py>, items: [*mut ffi::PyObject; 3]) -> PyResult<Bound<'py, PyTuple>> {
    let owned: Vec<Option<Bound<'py, PyAny>>> =
        // SAFETY: each non-null item is a new reference, owned from here on.
        items.iter().map(|&item| unsafe { Bound::from_owned_ptr_or_opt(py, item) }).collect();
    if owned.iter().any(Option::is_none) {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: the GIL is held; NULL comes with MemoryError set, which is fetched.
    let tuple = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyTuple_New(3))? };
    for (position, item) in owned.into_iter().flatten().enumerate() {
        // SAFETY: `tuple` is a new 3-tuple; SetItem steals the reference.
        if unsafe { ffi::PyTuple_SetItem(tuple.as_ptr(), position as ffi::Py_ssize_t, item.into_ptr()) } != 0
        {
            return Err(PyErr::fetch(py));
        }
    }
    // SAFETY: made by PyTuple_New above.
    Ok(unsafe { tuple.cast_into_unchecked() })
}

/// Add the planner to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(plan_context_parallel_py, m)?)?;
    Ok(())
}
