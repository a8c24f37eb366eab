//! Python binding of the step planner and the 1F1B simulator (`planner::step` in the core):
//! private functions that `seqbalance.planning.step` calls after validating the arguments.
use std::cell::Cell;
use std::time::{Duration, Instant};

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use seqbalance_core::alloc;
use seqbalance_core::error::CoreError;
use seqbalance_core::planner::{plan_step, step_time, EqualCounts, StepError, StepOptions, Sync};

use crate::errors::{core_error, guard, interruptible};
use crate::planner::{with_items, PlanRequest, RanksInput};

/// What `_plan_step` plans for besides today's plan: one dict from Python, its keys the field
/// names (`seqbalance.planning.step` builds it).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct StepRequest {
    /// `"step"` or `"micro_batch"`.
    sync: String,
    stages: usize,
    forward_share: f64,
    micro_batch_time: f64,
    max_count: Option<usize>,
    /// `"free"`, `"equal"` or `"nearly"`.
    equal_counts: String,
    n_samples: usize,
    /// Seconds after which the search reports its progress (logger `seqbalance.plan`), and
    /// between two reports.
    progress_after: f64,
    /// Who reports (`seqbalance.plan_dp_micro_batches`).
    progress_label: String,
}

impl StepRequest {
    fn options(&self) -> PyResult<StepOptions> {
        let sync = match self.sync.as_str() {
            "step" => Sync::Step,
            "micro_batch" => Sync::MicroBatch,
            other => {
                return Err(PyValueError::new_err(format!(
                    "sync must be 'step' or 'micro_batch', got {other:?}"
                )))
            }
        };
        let equal_counts = match self.equal_counts.as_str() {
            "free" => EqualCounts::Free,
            "equal" => EqualCounts::Equal,
            "nearly" => EqualCounts::Nearly,
            other => return Err(PyValueError::new_err(format!("unknown equal_counts {other:?}"))),
        };
        let share = self.forward_share;
        let priced = self.micro_batch_time.is_finite() && self.micro_batch_time >= 0.0;
        if self.stages == 0 || !(share > 0.0 && share < 1.0) || !priced {
            return Err(PyValueError::new_err("stages >= 1, forward_share in (0, 1), micro_batch_time >= 0"));
        }
        Ok(StepOptions {
            sync,
            stages: self.stages,
            forward_share: share,
            micro_batch_time: self.micro_batch_time,
            max_count: self.max_count,
            equal_counts,
            n_samples: self.n_samples,
        })
    }
}

/// `(count, plan, step, today_count, today_step, today_plan)`: the plan the step planner chose
/// (lists or ids, as `request` asks), its step in the model, and today's plan's count, step and
/// micro-batches (`None` when the answer is today's plan).
type StepAnswer<'py> = (usize, Bound<'py, PyAny>, f64, usize, f64, Option<Bound<'py, PyAny>>);

/// Plan for the step the trainer runs (see `seqbalance_core::planner::plan_step`): today's
/// plan of the candidates first, then the search of `step`; the answer never has a longer step
/// in the model than today's.
#[pyfunction]
#[pyo3(name = "_plan_step", signature = (tokens, costs, starts, sizes, candidates, request, step, longest=None, keys=None))]
#[allow(clippy::too_many_arguments)] // the items' arrays, each one a column of the same table
fn plan_step_py<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'_, i64>,
    costs: &Bound<'_, PyAny>,
    starts: PyReadonlyArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    candidates: Vec<PyReadonlyArray1<'_, i64>>,
    request: PlanRequest,
    step: StepRequest,
    longest: Option<PyReadonlyArray1<'_, i64>>,
    keys: Option<PyReadonlyArray1<'_, i64>>,
) -> PyResult<StepAnswer<'py>> {
    guard("_plan_step", || {
        let options = step.options()?;
        let input = RanksInput::read(py, tokens, costs, starts, sizes, candidates, request, longest, keys)?;
        let every = Duration::from_secs_f64(step.progress_after.clamp(0.0, 1e6));
        let label = step.progress_label.as_str();
        let (result, raised) = interruptible(py, true, |interrupt| {
            let started = Instant::now();
            let last = Cell::new(started);
            let progress = |tried: usize, best: f64| {
                let now = Instant::now();
                if now.duration_since(started) >= every && now.duration_since(last.get()) >= every {
                    last.set(now);
                    report(&format!(
                        "{label}: step search: {tried} micro-batch counts tried, best step {best:.6e} so far"
                    ));
                }
            };
            with_items!(input, |items| plan_step(
                items,
                &input.assignments,
                &input.options,
                &options,
                interrupt,
                &progress
            ))
        });
        let planned = result.map_err(|error| match (error, raised) {
            (StepError::Core(CoreError::Interrupted), Some(raised)) => raised,
            (StepError::Core(error), _) => core_error(py, error),
            (StepError::MaxBelowToday { max, today }, _) => PyValueError::new_err(format!(
                "max_num_micro_batches = {max} is below the {today} micro-batches today's plan needs; \
                 pass at least {today}, or None"
            )),
        })?;
        let today = match planned.today {
            Some(plan) => Some(input.answer(py, plan)?),
            None => None,
        };
        Ok((
            planned.count,
            input.answer(py, planned.plan)?,
            planned.step,
            planned.today_count,
            planned.today_step,
            today,
        ))
    })
}

/// One progress record, `INFO` on the logger `seqbalance.plan` (never stderr itself: whoever
/// wants it attaches a handler, as the command line does); a failing handler is not an error
/// of the plan.
fn report(line: &str) {
    Python::attach(|py| {
        let log = || -> PyResult<()> {
            let logger = py.import("logging")?.call_method1("getLogger", ("seqbalance.plan",))?;
            logger.call_method1("info", (line,))?;
            Ok(())
        };
        let _ = log();
    });
}

/// `seqbalance.simulate_step`'s step in the planners' own step model
/// ([`seqbalance_core::planner::step_time`]): `times` holds each rank's micro-batch times in
/// order, rank after rank, `counts` how many each rank has; `sync` is `"step"` or
/// `"micro_batch"` (then every count is equal), `stages >= 1` (more than 1 only with
/// `"step"`), `forward_share` in (0, 1) (the caller checks). Answers the step and each rank's
/// busy time (its times summed in order, as the model sums them).
#[pyfunction]
#[pyo3(name = "_step_time", signature = (times, counts, sync, stages, forward_share))]
fn step_time_py<'py>(
    py: Python<'py>,
    times: PyReadonlyArray1<'_, f64>,
    counts: PyReadonlyArray1<'_, i64>,
    sync: &str,
    stages: usize,
    forward_share: f64,
) -> PyResult<(f64, Bound<'py, PyArray1<f64>>)> {
    guard("_step_time", || {
        let sync = match sync {
            "step" => Sync::Step,
            "micro_batch" => Sync::MicroBatch,
            other => {
                return Err(PyValueError::new_err(format!(
                    "sync must be 'step' or 'micro_batch', got {other:?}"
                )))
            }
        };
        if stages == 0 || !(forward_share > 0.0 && forward_share < 1.0) || (stages > 1 && sync != Sync::Step)
        {
            return Err(PyValueError::new_err(
                "stages must be >= 1 (1 under micro_batch) and forward_share in (0, 1)",
            ));
        }
        let view = times.as_array();
        let counts = counts.as_array();
        if counts.iter().any(|&c| c < 0) {
            return Err(PyValueError::new_err("counts must be >= 0"));
        }
        if counts.iter().try_fold(0usize, |total, &c| total.checked_add(c as usize)) != Some(view.len()) {
            return Err(PyValueError::new_err("counts must sum to the number of times"));
        }
        if sync == Sync::MicroBatch && counts.iter().any(|&c| c != counts[0]) {
            return Err(PyValueError::new_err("under micro_batch every rank has the same count"));
        }
        if view.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(PyValueError::new_err("times must be finite and >= 0"));
        }
        let mut ranks: Vec<Vec<f64>> =
            alloc::with_capacity(counts.len(), "the ranks' times").map_err(|e| core_error(py, e))?;
        let mut start = 0usize;
        for &count in counts.iter() {
            let count = count as usize;
            ranks.push(
                alloc::collect(
                    view.slice(numpy::ndarray::s![start..start + count]).iter().copied(),
                    "the micro-batch times",
                )
                .map_err(|e| core_error(py, e))?,
            );
            start += count;
        }
        let work = view.len().saturating_mul(stages);
        let (result, raised) = interruptible(py, work >= 1 << 14, |interrupt| {
            let step = step_time(&ranks, sync, stages, forward_share, interrupt)?;
            let busy = alloc::collect(ranks.iter().map(|rank| rank.iter().sum::<f64>()), "the busy times")?;
            Ok::<_, CoreError>((step, busy))
        });
        let (step, busy) = result.map_err(|error| match (error, raised) {
            (CoreError::Interrupted, Some(raised)) => raised,
            (error, _) => core_error(py, error),
        })?;
        Ok((step, busy.into_pyarray(py)))
    })
}

/// Add the step functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(plan_step_py, m)?)?;
    m.add_function(wrap_pyfunction!(step_time_py, m)?)?;
    Ok(())
}
