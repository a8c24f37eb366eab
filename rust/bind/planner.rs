//! Python binding of the micro-batch planner core (`planner/`): private functions that
//! `seqbalance.micro_batches` calls after validating and normalising the arguments.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use seqbalance_core::alloc;
use seqbalance_core::planner::{order_parts, plan_best, plan_ids, Items, Order, PlanOptions, Problem};
use seqbalance_core::refine::{refine_if_moved, RefineError};

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

/// What `_plan_ranks` plans besides the items and candidates: one dict from Python, its keys
/// the field names (`seqbalance.planning.micro_batches._plan_ranks` builds it).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct PlanRequest {
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    /// `"none"`, `"bubble"` or `"largest_first"`.
    order: String,
    /// The plan as `(rank_ids, micro_batch_ids)` int64 arrays per sample instead of lists.
    as_ids: bool,
}

fn order_of(name: &str) -> PyResult<Order> {
    match name {
        "none" => Ok(Order::None),
        "bubble" => Ok(Order::Bubble),
        "largest_first" => Ok(Order::LargestFirst),
        other => Err(PyValueError::new_err(format!(
            "order must be 'bubble', 'largest_first' or 'none', got {other:?}"
        ))),
    }
}

/// `(candidate kept, count, heaviest micro-batch cost, heaviest rank cost, plan)`: the plan as
/// `[rank][micro_batch] -> samples` lists, or as `(rank_ids, micro_batch_ids)` arrays.
type RanksPlan<'py> = (usize, usize, u64, u64, Bound<'py, PyAny>);

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
/// indexes`, or with `as_ids` the rank and the micro-batch of every sample (int64 arrays). The
/// costs must sum to at most 2**63 - 1 (the caller checks).
#[pyfunction]
#[pyo3(name = "_plan_ranks", signature = (tokens, costs, starts, sizes, candidates, request))]
fn plan_ranks_py<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: PyReadonlyArray1<'_, i64>,
    starts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    candidates: Vec<PyReadonlyArray1<'_, i64>>,
    request: PlanRequest,
) -> PyResult<RanksPlan<'py>> {
    guard("_plan_ranks", || {
        let PlanRequest { n_ranks, cap, multiple, minimum, ref order, as_ids } = request;
        let order = order_of(order)?;
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
        let items = Items { tokens: &tokens, costs: &costs, starts: &starts, sizes: &sizes };
        let options = PlanOptions { n_ranks, cap, multiple, minimum, order };
        let (kept, count, heaviest_micro_batch, heaviest_rank, plan, ids) = core_result(
            py,
            interruptible(py, true, |interrupt| {
                let (kept, count, heaviest_micro_batch, heaviest_rank, plan) =
                    plan_best(&items, &assignments, &options, interrupt)?;
                let ids = if as_ids { Some(plan_ids(&plan, n_samples)?) } else { None };
                Ok((kept, count, heaviest_micro_batch, heaviest_rank, plan, ids))
            }),
        )?;
        let answer = match ids {
            Some((rank_ids, micro_batch_ids)) => {
                drop(plan);
                (rank_ids.into_pyarray(py), micro_batch_ids.into_pyarray(py)).into_pyobject(py)?.into_any()
            }
            None => {
                let ranks = PyList::empty(py);
                for rank in &plan {
                    ranks.append(index_lists(py, n_samples, rank.iter())?)?;
                }
                ranks.into_any()
            }
        };
        Ok((kept, count, heaviest_micro_batch, heaviest_rank, answer))
    })
}

/// The rank split of `ids` (a rank below `k` per item, every rank used) refined by the local
/// search of `refine=True` (`seqbalance_core::refine::refine_if_moved`), as a rank per item, or
/// `None` when the search moves nothing (the refinement would only renumber the ranks).
#[pyfunction]
#[pyo3(name = "_refine_candidate", signature = (weights, ids, k, equal_size))]
fn refine_candidate_py<'py>(
    py: Python<'py>,
    weights: PyReadonlyArray1<'_, i64>,
    ids: PyReadonlyArray1<'_, i64>,
    k: usize,
    equal_size: bool,
) -> PyResult<Option<Bound<'py, PyArray1<i64>>>> {
    guard("_refine_candidate", || {
        let weights = unsigned_array(py, weights.as_array(), "weights")?;
        let ids = ids.as_array();
        if ids.len() != weights.len() || u32::try_from(weights.len()).is_err() {
            return Err(PyValueError::new_err(
                "weights and ids differ in length, or hold 2**32 items or more",
            ));
        }
        let mut parts: Vec<Vec<u32>> =
            alloc::filled(k, Vec::new(), "the ranks").map_err(|e| core_error(py, e))?;
        for (index, &id) in ids.iter().enumerate() {
            let part = usize::try_from(id).ok().and_then(|id| parts.get_mut(id)).ok_or_else(|| {
                PyValueError::new_err(format!("ids[{index}] is {id}, not a rank below {k}"))
            })?;
            alloc::push(part, index as u32, "a rank").map_err(|e| core_error(py, e))?;
        }
        let detach = weights.len() >= 1 << 14;
        let (refined, raised) =
            interruptible(py, detach, |interrupt| refine_if_moved(&weights, parts, equal_size, interrupt));
        let refined = refined.map_err(|error| match (error, raised) {
            (RefineError::Core(_), Some(raised)) => raised,
            (RefineError::Core(error), None) => core_error(py, error),
            (error, _) => PyValueError::new_err(error.to_string()),
        })?;
        let Some(refined) = refined else {
            return Ok(None);
        };
        let mut numbers =
            alloc::filled(weights.len(), 0i64, "rank numbers").map_err(|e| core_error(py, e))?;
        for (number, part) in refined.iter().enumerate() {
            for &index in part {
                numbers[index as usize] = number as i64;
            }
        }
        Ok(Some(numbers.into_pyarray(py)))
    })
}

/// The order of micro-batches by `order` (`"none"`, `"bubble"`, `"largest_first"`), each given
/// by its cost, its first sample and its sample count (0: empty): the micro-batch numbers in
/// their new order, the empty ones last (in their own order).
#[pyfunction]
#[pyo3(name = "_order_micro_batches", signature = (costs, firsts, sizes, order))]
fn order_micro_batches_py(
    py: Python<'_>,
    costs: PyReadonlyArray1<'_, i64>,
    firsts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    order: &str,
) -> PyResult<Vec<usize>> {
    guard("_order_micro_batches", || {
        let order = order_of(order)?;
        let costs = unsigned_array(py, costs.as_array(), "costs")?;
        let (firsts, sizes) = (
            unsigned_array(py, firsts.as_array(), "firsts")?,
            unsigned_array(py, sizes.as_array(), "sizes")?,
        );
        if firsts.len() != costs.len() || sizes.len() != costs.len() {
            return Err(PyValueError::new_err("costs, firsts and sizes differ in length"));
        }
        let keyed = (0..costs.len()).map(|m| {
            let payload = if sizes[m] > 0 { vec![m] } else { Vec::new() };
            ((costs[m], firsts[m]), payload)
        });
        let keyed = alloc::collect(keyed, "the micro-batch order").map_err(|e| core_error(py, e))?;
        let ordered = order_parts(keyed, order).map_err(|e| core_error(py, e))?;
        let mut numbers: Vec<usize> = ordered.into_iter().flatten().collect();
        numbers.extend((0..costs.len()).filter(|&m| sizes[m] == 0));
        Ok(numbers)
    })
}

/// Add the planner functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(own_count_py, m)?)?;
    m.add_function(wrap_pyfunction!(plan_ranks_py, m)?)?;
    m.add_function(wrap_pyfunction!(refine_candidate_py, m)?)?;
    m.add_function(wrap_pyfunction!(order_micro_batches_py, m)?)?;
    Ok(())
}
