//! Python binding of the micro-batch planner core (`planner.rs`): private functions that
//! `seqbalance.micro_batches` calls after validating and normalising the arguments.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use seqbalance_core::alloc;
use seqbalance_core::planner::{plan_best, Problem};

use crate::convert::{index_lists, unsigned_array};
use crate::errors::{core_error, core_result, guard, interruptible};

/// Check what the core relies on: one token and cost per item, every item within the cap, and
/// a cap below 2**63 (so a part's fill plus an item never wraps around).
fn check(tokens: &[u64], costs: &[u64], cap: u64, multiple: usize) -> PyResult<()> {
    if costs.len() != tokens.len() {
        return Err(PyValueError::new_err("tokens and costs differ in length"));
    }
    if cap == 0 || cap > i64::MAX as u64 {
        return Err(PyValueError::new_err(format!("cap must be in [1, 2**63 - 1], got {cap}")));
    }
    if multiple == 0 {
        return Err(PyValueError::new_err("multiple must be >= 1"));
    }
    if let Some(i) = tokens.iter().position(|&t| t > cap) {
        return Err(PyValueError::new_err(format!("tokens[{i}] = {} is above the cap {cap}", tokens[i])));
    }
    Ok(())
}

/// `(candidate kept, count, heaviest micro-batch cost, heaviest rank cost, [rank][micro_batch]
/// -> samples)`.
type RanksPlan<'py> = (usize, usize, u64, u64, Bound<'py, PyList>);

/// The micro-batch count the planner settles on for these items on its own.
#[pyfunction]
#[pyo3(name = "_own_count", signature = (tokens, costs, cap, multiple))]
fn own_count_py(
    py: Python<'_>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: PyReadonlyArray1<'_, i64>,
    cap: u64,
    multiple: usize,
) -> PyResult<usize> {
    guard("_own_count", || {
        let (tokens, costs) = (
            unsigned_array(py, tokens.as_array(), "tokens")?,
            unsigned_array(py, costs.as_array(), "costs")?,
        );
        check(&tokens, &costs, cap, multiple)?;
        let problem = Problem { tokens: &tokens, costs: &costs, cap, multiple };
        let own = core_result(py, interruptible(py, true, |interrupt| problem.own_plan(interrupt)))?;
        Ok(own.0)
    })
}

/// Plan every rank with one common count, for each candidate assignment of items to ranks, and
/// keep the best (see `seqbalance_core::planner::plan_best`): `(candidate kept, count, heaviest
/// micro-batch cost, heaviest rank cost, plan)`, the plan indexed `[rank][micro_batch] -> sample
/// indexes`. The costs must sum to at most 2**63 - 1 (the caller checks).
#[pyfunction]
#[pyo3(
    name = "_plan_ranks",
    signature = (tokens, costs, starts, sizes, candidates, n_ranks, cap, multiple, minimum, bubble)
)]
#[allow(clippy::too_many_arguments)]
fn plan_ranks_py<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: PyReadonlyArray1<'_, i64>,
    starts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    candidates: Vec<PyReadonlyArray1<'_, i64>>,
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
) -> PyResult<RanksPlan<'py>> {
    guard("_plan_ranks", || {
        let (tokens, costs) = (
            unsigned_array(py, tokens.as_array(), "tokens")?,
            unsigned_array(py, costs.as_array(), "costs")?,
        );
        let (starts, sizes) = (
            unsigned_array(py, starts.as_array(), "starts")?,
            unsigned_array(py, sizes.as_array(), "sizes")?,
        );
        check(&tokens, &costs, cap, multiple)?;
        if costs.iter().try_fold(0u64, |total, &c| total.checked_add(c)).is_none() {
            return Err(PyValueError::new_err("costs sum above 2**64 - 1"));
        }
        if candidates.is_empty() {
            return Err(PyValueError::new_err("candidates must not be empty"));
        }
        if [starts.len(), sizes.len()].iter().any(|&len| len != tokens.len()) {
            return Err(PyValueError::new_err("tokens, starts and sizes differ in length"));
        }
        if starts.iter().zip(&sizes).any(|(&s, &z)| s.checked_add(z).is_none_or(|end| end > u32::MAX as u64))
        {
            return Err(PyValueError::new_err("sample indexes must be below 2**32"));
        }
        let n_samples = starts.iter().zip(&sizes).map(|(&s, &z)| (s + z) as usize).max().unwrap_or(0);
        let mut assignments = Vec::with_capacity(candidates.len());
        for (c, candidate) in candidates.iter().enumerate() {
            let ranks = unsigned_array(py, candidate.as_array(), "rank_of_item")?;
            if ranks.len() != tokens.len() {
                return Err(PyValueError::new_err(format!(
                    "candidates[{c}] has a rank for other than every item"
                )));
            }
            if let Some(item) = ranks.iter().position(|&r| r >= n_ranks as u64) {
                return Err(PyValueError::new_err(format!(
                    "candidates[{c}][{item}] = {} is not below n_ranks ({n_ranks})",
                    ranks[item]
                )));
            }
            let ranks = alloc::collect(ranks.iter().map(|&r| r as usize), "the planner's input")
                .map_err(|e| core_error(py, e))?;
            assignments.push(ranks);
        }
        let (kept, count, heaviest_micro_batch, heaviest_rank, plan) = core_result(
            py,
            interruptible(py, true, |interrupt| {
                plan_best(
                    &tokens,
                    &costs,
                    &starts,
                    &sizes,
                    &assignments,
                    n_ranks,
                    cap,
                    multiple,
                    minimum,
                    bubble,
                    interrupt,
                )
            }),
        )?;
        let ranks = PyList::empty(py);
        for rank in &plan {
            ranks.append(index_lists(py, n_samples, rank.iter())?)?;
        }
        Ok((kept, count, heaviest_micro_batch, heaviest_rank, ranks))
    })
}

/// Add the planner functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(own_count_py, m)?)?;
    m.add_function(wrap_pyfunction!(plan_ranks_py, m)?)?;
    Ok(())
}
