//! Python binding of the micro-batch planner core (`planner.rs`): private functions that
//! `seqbalance.micro_batches` calls after validating and normalising the arguments.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use seqbalance_core::planner::{plan_ranks, Problem};

use crate::errors::guard;

/// The values of a non-negative int64 array, or a `ValueError` naming `name`.
fn unsigned(values: &PyReadonlyArray1<'_, i64>, name: &str) -> PyResult<Vec<u64>> {
    values
        .as_array()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u64::try_from(v).map_err(|_| PyValueError::new_err(format!("{name}[{i}] must be >= 0, got {v}")))
        })
        .collect()
}

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

/// `(count, heaviest micro-batch cost, heaviest rank cost, [rank][micro_batch] -> samples)`.
type RanksPlan = (usize, u64, u64, Vec<Vec<Vec<u32>>>);

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
        let (tokens, costs) = (unsigned(&tokens, "tokens")?, unsigned(&costs, "costs")?);
        check(&tokens, &costs, cap, multiple)?;
        Ok(py.detach(|| Problem { tokens: &tokens, costs: &costs, cap, multiple }.own_plan().0))
    })
}

/// Plan every rank with one common count: `(count, heaviest micro-batch cost, heaviest rank
/// cost, plan)`, the plan indexed `[rank][micro_batch] -> sample indexes`. The costs must sum
/// to at most 2**63 - 1 (the caller checks).
#[pyfunction]
#[pyo3(
    name = "_plan_ranks",
    signature = (tokens, costs, starts, sizes, rank_of_item, n_ranks, cap, multiple, minimum, bubble)
)]
#[allow(clippy::too_many_arguments)]
fn plan_ranks_py(
    py: Python<'_>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: PyReadonlyArray1<'_, i64>,
    starts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    rank_of_item: PyReadonlyArray1<'_, i64>,
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    bubble: bool,
) -> PyResult<RanksPlan> {
    guard("_plan_ranks", || {
        let (tokens, costs) = (unsigned(&tokens, "tokens")?, unsigned(&costs, "costs")?);
        let (starts, sizes) = (unsigned(&starts, "starts")?, unsigned(&sizes, "sizes")?);
        let rank_of_item = unsigned(&rank_of_item, "rank_of_item")?;
        check(&tokens, &costs, cap, multiple)?;
        if costs.iter().try_fold(0u64, |total, &c| total.checked_add(c)).is_none() {
            return Err(PyValueError::new_err("costs sum above 2**64 - 1"));
        }
        if [starts.len(), sizes.len(), rank_of_item.len()].iter().any(|&len| len != tokens.len()) {
            return Err(PyValueError::new_err("tokens, starts, sizes and rank_of_item differ in length"));
        }
        if starts.iter().zip(&sizes).any(|(&s, &z)| s.checked_add(z).is_none_or(|end| end > u32::MAX as u64))
        {
            return Err(PyValueError::new_err("sample indexes must be below 2**32"));
        }
        let rank_of_item: Vec<usize> = rank_of_item
            .iter()
            .enumerate()
            .map(|(item, &rank)| {
                usize::try_from(rank).ok().filter(|&r| r < n_ranks).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "rank_of_item[{item}] = {rank} is not below n_ranks ({n_ranks})"
                    ))
                })
            })
            .collect::<PyResult<_>>()?;
        Ok(py.detach(|| {
            plan_ranks(
                &tokens,
                &costs,
                &starts,
                &sizes,
                &rank_of_item,
                n_ranks,
                cap,
                multiple,
                minimum,
                bubble,
            )
        }))
    })
}

/// Add the planner functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(own_count_py, m)?)?;
    m.add_function(wrap_pyfunction!(plan_ranks_py, m)?)?;
    Ok(())
}
