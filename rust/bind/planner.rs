//! Python binding of the micro-batch planner core (`planner/`): private functions that
//! `seqbalance.micro_batches` calls after validating and normalising the arguments.
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use seqbalance_core::alloc;
use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::planner::{
    order_parts, plan_best, plan_ids, Order, PlanCost, PlanOptions, Problem, Shape, ShapeRule,
};
use seqbalance_core::refine::{refine_if_moved, RefineError};
use seqbalance_core::request::Weights;

use crate::convert::{index_lists, normalised_weights, unsigned_array};
use crate::errors::{core_error, core_result, guard, interruptible};

/// Check what the core relies on: one token and cost per item, every item within the cap, and
/// a cap below 2**63 (so a part's fill plus an item never wraps around).
fn check(n_tokens: usize, n_costs: usize, tokens: &[u64], cap: u64, multiple: usize) -> PyResult<()> {
    if n_costs != n_tokens {
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

/// What `_plan_ranks` and `_own_count` plan besides the items and candidates: one dict from
/// Python, its keys the field names (`seqbalance.planning.micro_batches` builds it).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct PlanRequest {
    n_ranks: usize,
    cap: u64,
    multiple: usize,
    minimum: usize,
    /// `"none"`, `"bubble"` or `"largest_first"`.
    order: String,
    /// The plan as `(rank_ids, micro_batch_ids)` int64 arrays per sample instead of lists.
    as_ids: bool,
    /// The most samples a micro-batch may hold, or `None`.
    max_sequences: Option<u64>,
    /// Charge a micro-batch `samples * longest` against the cap.
    padded: bool,
}

impl PlanRequest {
    /// The shape limits, or `None` when there are none to keep (no key numbers either).
    fn shape(&self, keyed: bool) -> PyResult<Option<ShapeRule>> {
        if self.max_sequences == Some(0) {
            return Err(PyValueError::new_err("max_sequences must be >= 1"));
        }
        let limited = self.max_sequences.is_some() || self.padded || keyed;
        Ok(limited.then(|| ShapeRule {
            max_sequences: self.max_sequences.unwrap_or(u64::MAX),
            padded: self.padded,
        }))
    }
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

/// The items' longest samples and key numbers, when given: one per item, each item fitting a
/// micro-batch of its own.
struct ShapeItems {
    longest: Option<Vec<u64>>,
    keys: Option<Vec<u32>>,
}

fn shape_items(
    py: Python<'_>,
    longest: Option<PyReadonlyArray1<'_, i64>>,
    keys: Option<PyReadonlyArray1<'_, i64>>,
    n_items: usize,
) -> PyResult<ShapeItems> {
    let longest = longest.map(|longest| unsigned_array(py, longest.as_array(), "longest")).transpose()?;
    let keys = match keys {
        Some(keys) => {
            let keys = unsigned_array(py, keys.as_array(), "keys")?;
            if let Some(i) = keys.iter().position(|&k| k > u32::MAX as u64) {
                return Err(PyValueError::new_err(format!("keys[{i}] is not below 2**32")));
            }
            Some(
                alloc::collect(keys.iter().map(|&k| k as u32), "the key numbers")
                    .map_err(|e| core_error(py, e))?,
            )
        }
        None => None,
    };
    let lengths = [longest.as_ref().map(Vec::len), keys.as_ref().map(Vec::len)];
    if lengths.iter().flatten().any(|&len| len != n_items) {
        return Err(PyValueError::new_err("longest and keys must hold one value per item"));
    }
    Ok(ShapeItems { longest, keys })
}

/// The costs as the planner balances them: integers, or floats (validated by the caller) with
/// `-0.0` read as `0.0`.
fn plan_costs(py: Python<'_>, costs: &Bound<'_, PyAny>) -> PyResult<Weights> {
    match normalised_weights(py, costs)? {
        Some(Weights::Double(mut values)) => {
            values.iter_mut().for_each(|v| *v += 0.0);
            Ok(Weights::Double(values))
        }
        Some(Weights::Single(mut values)) => {
            values.iter_mut().for_each(|v| *v += 0.0);
            Ok(Weights::Single(values))
        }
        Some(weights) => Ok(weights),
        None => Err(PyTypeError::new_err("costs must be a 1-D int64, float64 or float32 array")),
    }
}

/// Per rank, the sample indexes of every micro-batch.
pub type Plan = Vec<Vec<Vec<u32>>>;

/// `(candidate kept, count, plan)`: the plan as `[rank][micro_batch] -> samples` lists, or as
/// `(rank_ids, micro_batch_ids)` arrays.
type RanksPlan<'py> = (usize, usize, Bound<'py, PyAny>);

/// The micro-batch count the planner settles on for these items on its own (what
/// `min_num_micro_batches_for` returns): `sizes` are the items' sample counts (for the shape
/// limits of `request`; `None`: one each).
#[pyfunction]
#[pyo3(name = "_own_count", signature = (tokens, costs, request, sizes=None, longest=None, keys=None))]
fn own_count_py(
    py: Python<'_>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: &Bound<'_, PyAny>,
    request: PlanRequest,
    sizes: Option<PyReadonlyArray1<'_, i64>>,
    longest: Option<PyReadonlyArray1<'_, i64>>,
    keys: Option<PyReadonlyArray1<'_, i64>>,
) -> PyResult<usize> {
    guard("_own_count", || {
        let tokens = unsigned_array(py, tokens.as_array(), "tokens")?;
        let costs = plan_costs(py, costs)?;
        check(tokens.len(), costs.len(), &tokens, request.cap, request.multiple)?;
        let sizes = match sizes {
            Some(sizes) => unsigned_array(py, sizes.as_array(), "sizes")?,
            None => alloc::filled(tokens.len(), 1u64, "the sample counts").map_err(|e| core_error(py, e))?,
        };
        let items = shape_items(py, longest, keys, tokens.len())?;
        let rule = request.shape(items.keys.is_some())?;
        let shape = rule.map(|rule| Shape {
            rule,
            samples: &sizes,
            longest: items.longest.as_deref().unwrap_or(&tokens),
            keys: items.keys.as_deref(),
        });
        let (cap, multiple) = (request.cap, request.multiple);
        fn count<C: PlanCost>(problem: Problem<'_, C>, interrupt: &Interrupt) -> Result<usize, CoreError> {
            problem.own_count(interrupt)
        }
        core_result(
            py,
            interruptible(py, true, |interrupt| match &costs {
                Weights::Exact(costs) => {
                    count(Problem { tokens: &tokens, costs, cap, multiple, shape }, interrupt)
                }
                Weights::Double(costs) => {
                    count(Problem { tokens: &tokens, costs, cap, multiple, shape }, interrupt)
                }
                Weights::Single(costs) => {
                    count(Problem { tokens: &tokens, costs, cap, multiple, shape }, interrupt)
                }
            }),
        )
    })
}

/// The arguments of a DP-wide plan, read and checked once: the items' columns, the candidate
/// rank splits and what to plan (`_plan_ranks` and `_plan_step` take the same).
pub struct RanksInput {
    pub tokens: Vec<u64>,
    pub costs: Weights,
    pub starts: Vec<u64>,
    pub sizes: Vec<u64>,
    pub assignments: Vec<Vec<usize>>,
    pub options: PlanOptions,
    pub as_ids: bool,
    pub n_samples: usize,
    pub longest: Option<Vec<u64>>,
    pub keys: Option<Vec<u32>>,
}

impl RanksInput {
    #[allow(clippy::too_many_arguments)] // the items' arrays, each one a column of the same table
    pub fn read(
        py: Python<'_>,
        tokens: PyReadonlyArray1<'_, i64>,
        costs: &Bound<'_, PyAny>,
        starts: PyReadonlyArray1<'_, i64>,
        sizes: PyReadonlyArray1<'_, i64>,
        candidates: Vec<PyReadonlyArray1<'_, i64>>,
        request: PlanRequest,
        longest: Option<PyReadonlyArray1<'_, i64>>,
        keys: Option<PyReadonlyArray1<'_, i64>>,
    ) -> PyResult<Self> {
        let order = order_of(&request.order)?;
        let n_ranks = request.n_ranks;
        let tokens = unsigned_array(py, tokens.as_array(), "tokens")?;
        let costs = plan_costs(py, costs)?;
        let (starts, sizes) = (
            unsigned_array(py, starts.as_array(), "starts")?,
            unsigned_array(py, sizes.as_array(), "sizes")?,
        );
        check(tokens.len(), costs.len(), &tokens, request.cap, request.multiple)?;
        if let Weights::Exact(costs) = &costs {
            if costs.iter().try_fold(0u64, |total, &c| total.checked_add(c)).is_none() {
                return Err(PyValueError::new_err("costs sum above 2**64 - 1"));
            }
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
        let items = shape_items(py, longest, keys, tokens.len())?;
        let shape = request.shape(items.keys.is_some())?;
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
        let options = PlanOptions {
            n_ranks,
            cap: request.cap,
            multiple: request.multiple,
            minimum: request.minimum,
            order,
            shape,
        };
        Ok(RanksInput {
            tokens,
            costs,
            starts,
            sizes,
            assignments,
            options,
            as_ids: request.as_ids,
            n_samples,
            longest: items.longest,
            keys: items.keys,
        })
    }

    /// A plan of this input as Python wants it: `[rank][micro_batch] -> samples` lists, or with
    /// `as_ids` the `(rank_ids, micro_batch_ids)` int64 arrays.
    pub fn answer<'py>(&self, py: Python<'py>, plan: Plan) -> PyResult<Bound<'py, PyAny>> {
        if self.as_ids {
            let (rank_ids, micro_batch_ids) =
                plan_ids(&plan, self.n_samples).map_err(|e| core_error(py, e))?;
            drop(plan);
            return Ok((rank_ids.into_pyarray(py), micro_batch_ids.into_pyarray(py))
                .into_pyobject(py)?
                .into_any());
        }
        let ranks = PyList::empty(py);
        for rank in &plan {
            ranks.append(index_lists(py, self.n_samples, rank.iter())?)?;
        }
        Ok(ranks.into_any())
    }
}

/// Plan every rank with one common count, for each candidate assignment of items to ranks, and
/// keep the best (see `seqbalance_core::planner::plan_best`): `(candidate kept, count, plan)`,
/// the plan indexed `[rank][micro_batch] -> sample indexes`, or with `as_ids` the rank and the
/// micro-batch of every sample (int64 arrays). Integer costs must sum to at most 2**63 - 1 (the
/// caller checks). `longest` and `keys` (one per item) serve the shape limits of `request`.
#[pyfunction]
#[pyo3(name = "_plan_ranks", signature = (tokens, costs, starts, sizes, candidates, request, longest=None, keys=None))]
#[allow(clippy::too_many_arguments)] // the items' arrays, each one a column of the same table
fn plan_ranks_py<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: &Bound<'_, PyAny>,
    starts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    candidates: Vec<PyReadonlyArray1<'_, i64>>,
    request: PlanRequest,
    longest: Option<PyReadonlyArray1<'_, i64>>,
    keys: Option<PyReadonlyArray1<'_, i64>>,
) -> PyResult<RanksPlan<'py>> {
    guard("_plan_ranks", || {
        let input = RanksInput::read(py, tokens, costs, starts, sizes, candidates, request, longest, keys)?;
        let (kept, count, plan) = core_result(
            py,
            interruptible(py, true, |interrupt| {
                with_items!(input, |items| plan_best(items, &input.assignments, &input.options, interrupt))
            }),
        )?;
        Ok((kept, count, input.answer(py, plan)?))
    })
}

/// `$body` with `$items` bound to the input's items (`&Items<'_, C>`), whatever their costs'
/// type: the body is compiled once per type (a closure cannot be generic).
macro_rules! with_items {
    ($input:expr, |$items:ident| $body:expr) => {{
        let input = &$input;
        let (starts, sizes) = (&input.starts[..], &input.sizes[..]);
        let (longest, keys) = (input.longest.as_deref(), input.keys.as_deref());
        let tokens = &input.tokens[..];
        match &input.costs {
            seqbalance_core::request::Weights::Exact(costs) => {
                let $items = &seqbalance_core::planner::Items { tokens, costs, starts, sizes, longest, keys };
                $body
            }
            seqbalance_core::request::Weights::Double(costs) => {
                let $items = &seqbalance_core::planner::Items { tokens, costs, starts, sizes, longest, keys };
                $body
            }
            seqbalance_core::request::Weights::Single(costs) => {
                let $items = &seqbalance_core::planner::Items { tokens, costs, starts, sizes, longest, keys };
                $body
            }
        }
    }};
}
pub(crate) use with_items;

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
            // Tens of millions of items take a second or more here, before the GIL is released.
            if index % (1 << 16) == (1 << 16) - 1 {
                py.check_signals()?;
            }
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
/// by its cost (int64, float64 or float32), its first sample and its sample count (0: empty): the micro-batch numbers in
/// their new order, the empty ones last (in their own order).
#[pyfunction]
#[pyo3(name = "_order_micro_batches", signature = (costs, firsts, sizes, order))]
fn order_micro_batches_py(
    py: Python<'_>,
    costs: &Bound<'_, PyAny>,
    firsts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    order: &str,
) -> PyResult<Vec<usize>> {
    guard("_order_micro_batches", || {
        let order = order_of(order)?;
        let costs: Vec<u64> = match plan_costs(py, costs)? {
            Weights::Exact(costs) => costs,
            Weights::Double(costs) => costs.iter().map(|c| c.bits()).collect(),
            Weights::Single(costs) => costs.iter().map(|c| c.bits()).collect(),
        };
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
