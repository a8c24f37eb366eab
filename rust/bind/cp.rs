//! Python binding of the context-parallel planner core (`cp/`): one private function that
//! `seqbalance.planning.context_parallel` calls with validated arrays.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use seqbalance_core::alloc;
use seqbalance_core::cp::{layout, plan, CpError, Method, Problem, Reading};

use crate::convert::unsigned_array;
use crate::errors::{core_error, guard, interruptible, DETACH_THRESHOLD};

/// A float64 array as a vector (strided views included).
fn floats(py: Python<'_>, array: &PyReadonlyArray1<'_, f64>, what: &'static str) -> PyResult<Vec<f64>> {
    let view = array.as_array();
    alloc::collect(view.iter().copied(), what).map_err(|e| core_error(py, e))
}

/// Plan context-parallel steps: `(steps, time, method)`, `steps` a list of lists of
/// `(cp_size, ranks, indexes)`. `comm` holds, for each sequence in turn, its communication at
/// every degree of `degrees` (ascending powers of two dividing `world_size`). `method`:
/// `"best"` (the search against the four greedy readings) or one reading (`"1a"` ... `"2b"`).
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
            name => Method::Greedy(Reading::from_name(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "method must be 'best', '1a', '1b', '2a' or '2b', got {name:?}"
                ))
            })?),
        };
        let lengths = unsigned_array(py, lengths.as_array(), "lengths")?;
        let costs = floats(py, &costs, "the costs")?;
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
        let steps = PyList::empty(py);
        let mut start = 0usize;
        let mut current: Option<(u64, Bound<'py, PyList>)> = None;
        for &[step, cp_size, first_rank, end] in &laid.groups {
            if current.as_ref().is_none_or(|(s, _)| *s != step) {
                let list = PyList::empty(py);
                steps.append(&list)?;
                current = Some((step, list));
            }
            let end = end as usize;
            let ranks = PyList::new(py, first_rank..first_rank + cp_size)?;
            let indexes = PyList::new(py, &laid.members[start..end])?;
            start = end;
            let group = PyTuple::new(
                py,
                [cp_size.into_pyobject(py)?.into_any(), ranks.into_any(), indexes.into_any()],
            )?;
            if let Some((_, list)) = &current {
                list.append(group)?;
            }
        }
        PyTuple::new(
            py,
            [steps.into_any(), time.into_pyobject(py)?.into_any(), name.into_pyobject(py)?.into_any()],
        )
    })
}

/// Add the planner to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(plan_context_parallel_py, m)?)?;
    Ok(())
}
