"""The step a plan makes: `simulate_step` evaluates the step model of the step spec.

Ranks wait for each other where their collectives meet: once a step (DDP under ``no_sync``,
Megatron's DDP: the step is ``max_r Σ_k t(r, k)``), at every micro-batch (FSDP, FSDP2, ZeRO-3:
``Σ_k max_r t(r, k)``), or stage to stage in a pipeline (1F1B: the pipeline's makespan). A
micro-batch's time ``t`` is what the cost says of it: with a `TimeCost` its predicted seconds,
per-micro-batch term included; with any other cost the sum of its samples' costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .. import _native
from .._deprecation import renamed_attribute
from .._inputs import (
    MAX_COUNT,
    _describe,
    as_int64_array,
    check_pad_to_multiple_of,
    check_step_model,
)
from ..costs.time_cost import TimeCost
from ..costs.workload import pad_lengths, sample_costs, unit_scale
from .micro_batches import _Problem, _request, logger

__all__ = [
    "PROGRESS_AFTER",
    "DpIds",
    "DpPlan",
    "StepTime",
    "micro_batch_term",
    "plan_step",
    "simulate_step",
]

#: Seconds after which the step planner's search reports its progress on stderr (and between
#: two reports).
PROGRESS_AFTER = 3.0


class DpIds(NamedTuple):
    """`plan_dp_ids`' answer: the plan of `plan_dp_micro_batches` as arrays.

    Attributes:
        rank_ids: the rank of every sample (int64, ranks numbered heaviest first).
        micro_batch_ids: the micro-batch of every sample (int64: its place in the rank's order).
        num_micro_batches: the count every rank runs (empty micro-batches survive in it).
    """

    rank_ids: npt.NDArray[np.int64]
    micro_batch_ids: npt.NDArray[np.int64]
    num_micro_batches: int


@dataclass(frozen=True, eq=False)
class StepTime:
    """What `simulate_step` found: the step and how each rank spent it.

    Attributes:
        makespan: the step, in the cost's units (seconds with a `TimeCost`); ``seconds`` is the
            same number, a deprecated alias except under a `TimeCost` (whose unit is seconds).
        busy: each rank's ``Σ_k t(r, k)`` (float64 array, one per rank): its predicted time,
            summed over its micro-batches.
        waiting: each rank's step minus its busy time per stage (``seconds - busy / P``):
            waiting for other ranks, pipeline bubbles included.
        bubble: ``1 - mean(busy) / (P * seconds)``, the share of the step's rank-stage time
            spent waiting (0 for a step of 0).
        lower_bound: ``Σ busy / (ranks * P)``: every stage of every rank busy to the end.
        times: each rank's micro-batch times, in plan order (a tuple of float64 arrays).
        sync: ``"step"`` or ``"micro_batch"``.
        pipeline_stages: ``P``.
        unit: ``"seconds"`` under a `TimeCost`, else the cost's name (``"tokens"``,
            ``"workload"``) or ``"cost"`` for any other cost.
    """

    makespan: float
    busy: npt.NDArray[np.float64]
    waiting: npt.NDArray[np.float64]
    bubble: float
    lower_bound: float
    times: tuple[npt.NDArray[np.float64], ...]
    sync: str
    pipeline_stages: int
    unit: str = "cost"

    def __str__(self) -> str:
        where = (
            f"1F1B pipelines of {self.pipeline_stages} stages"
            if self.pipeline_stages > 1
            else {"step": "ranks meeting once a step", "micro_batch": "ranks in lockstep"}[
                self.sync
            ]
        )
        return (
            f"step {self.makespan:.6g} ({where}, {len(self.busy)} ranks): bubble "
            f"{self.bubble:.2%}, lower bound {self.lower_bound:.6g}"
        )


def micro_batch_term(cost: Any) -> float:
    """What a micro-batch costs beside its samples under ``cost``: a `TimeCost`'s
    ``micro_batch`` coefficient (seconds), 0 for every other cost (none prices a micro-batch).

    Example:
        >>> micro_batch_term("tokens")
        0.0
    """
    if isinstance(cost, TimeCost):
        return float(cost.coefficients["micro_batch"])
    return 0.0


def simulate_step(
    plan: Any,
    lengths: Any,
    *,
    cost: Any = "tokens",
    sync: str = "step",
    pipeline_stages: int = 1,
    forward_share: float = 1 / 3,
    pad_to_multiple_of: int = 1,
) -> StepTime:
    """The step a plan makes in the step model: where ranks wait, and for how long.

    A micro-batch's time ``t``: with a `TimeCost`, what `TimeCost.predict` gives it (its
    ``micro_batch`` term plus its documents' ``cost(lengths)``; a sample of length 0 is no
    document, and a micro-batch of none takes 0), in seconds, each document's seconds rounded
    to the whole nanoseconds every planner weighs it by (so a plan is priced as its planner
    priced it); with any other cost (``"tokens"``,
    ``"workload"``, weights, a callable, a `ModelCost`), the sum of its samples' costs. An empty
    micro-batch takes 0. With ``pad_to_multiple_of=m`` every length is first rounded up to a
    multiple of ``m``, as the planners round it (``"tokens"``, ``"workload"``, a callable and a
    `TimeCost` see the padded lengths; explicit per-sample weights are used as given), so a plan
    of ``plan_dp_micro_batches(..., pad_to_multiple_of=m)`` is priced as its planner priced it.

    - ``sync="step"`` (DDP with ``no_sync``, Megatron's DDP): step = ``max_r Σ_k t(r, k)``.
    - ``sync="micro_batch"`` (FSDP, FSDP2, ZeRO-3): step = ``Σ_k max_r t(r, k)``; every rank
      must run the same number of micro-batches.
    - ``pipeline_stages=P > 1`` (with ``sync="step"``): each rank is a pipeline of ``P`` stages
      running its micro-batches in plan order with the non-interleaved 1F1B schedule; every
      stage runs ``1/P`` of every micro-batch, a forward ``forward_share · t / P`` and a
      backward ``(1 − forward_share) · t / P``; stage ``s`` runs ``min(P − s − 1, m)``
      forwards, then one forward and one backward while forwards remain, then the remaining
      backwards. A forward waits for the same micro-batch's forward on the stage before, a
      backward for its backward on the stage after (on the last stage, its own forward); no
      transfer time. The step is the slowest rank's pipeline.

    Args:
        plan: ``plan[rank][micro_batch] -> sample indexes`` (the list answer of
            `plan_dp_micro_batches`), or `plan_dp_ids`' ``DpIds`` triple ``(rank_ids,
            micro_batch_ids, count)`` (a sample whose ids are -1 is in no micro-batch; the
            ranks are ``0 .. max(rank_ids)``). Each index at most once.
        lengths: every sample's length (non-negative ints), as given to the planner.
        cost: what a micro-batch's time is made of (default ``"tokens"``).
        sync: ``"step"`` or ``"micro_batch"``.
        pipeline_stages: ``P``, an int >= 1 (more than 1 only with ``sync="step"``).
        forward_share: the forward's share of a micro-batch's time, in (0, 1).
        pad_to_multiple_of: round every length up to a multiple of this (an int >= 1) before
            pricing it, as the planner given the same value does.

    Returns:
        A `StepTime`: ``makespan``, ``busy``, ``waiting``, ``bubble``, ``lower_bound`` and
        each rank's micro-batch ``times``.

    Raises:
        ValueError: a bad ``sync``, ``pipeline_stages``, ``forward_share`` or
            ``pad_to_multiple_of`` (named), a
            pipeline with ``sync="micro_batch"`` (naming both), a plan with no rank, an
            index outside ``lengths`` or given twice, ranks with different numbers of
            micro-batches under ``sync="micro_batch"``, a ``DpIds`` triple whose count or
            highest rank id is above ``2**24``.
        TypeError: a plan that is neither lists of lists of ints nor the ids triple; bad
            lengths or cost (as the planners raise).

    Example:
        >>> plan = [[[0], [1, 2]], [[3], [4]]]
        >>> simulate_step(plan, [300, 100, 200, 250, 200]).makespan
        600.0
        >>> step = simulate_step(plan, [300, 100, 200, 250, 200], sync="micro_batch")
        >>> step.makespan, step.busy.tolist(), round(step.bubble, 4)
        (600.0, [600.0, 450.0], 0.125)
        >>> simulate_step(plan, [300, 100, 200, 250, 200], pad_to_multiple_of=128).makespan
        768.0
    """
    sync, stages, share = check_step_model(sync, pipeline_stages, forward_share)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    # The planners' padding rule (and its OverflowError naming a length past 2**63 - 1).
    values = pad_lengths(as_int64_array(lengths, "lengths"), pad)
    samples, cells, counts = _cells(plan, values.size)
    if sync == "micro_batch" and counts.size and counts.min() != counts.max():
        raise ValueError(
            f"plan: under sync='micro_batch' every rank runs the same number of micro-batches; "
            f"rank {int(np.argmin(counts))} has {int(counts.min())}, rank "
            f"{int(np.argmax(counts))} has {int(counts.max())}"
        )
    flat = _cell_times(values, samples, cells, int(counts.sum()), cost)
    splits = np.cumsum(counts)[:-1]
    times = tuple(np.split(flat, splits))
    # The planners' own step model (one piece of code): the step and each rank's busy time.
    seconds, busy = _native._step_time(flat, counts, sync, stages, share)
    waiting = seconds - busy / stages
    bubble = 1.0 - float(busy.mean()) / (stages * seconds) if seconds > 0 else 0.0
    lower_bound = float(busy.sum()) / (busy.size * stages)
    return StepTime(seconds, busy, waiting, bubble, lower_bound, times, sync, stages, _unit(cost))


def _unit(cost: Any) -> str:
    """`StepTime.unit` for ``cost``."""
    if isinstance(cost, TimeCost):
        return "seconds"
    return cost if isinstance(cost, str) and cost in ("tokens", "workload") else "cost"


renamed_attribute(
    StepTime,
    "seconds",
    "makespan",
    note="valid without a warning under a `TimeCost` (its unit is seconds)",
    warns_unless=lambda step: step.unit == "seconds",
)


def _cells(plan: Any, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``plan`` as arrays: the samples in it, the cell (rank's micro-batch, numbered rank by
    rank) of each, and each rank's micro-batch count. Every index checked against ``n`` and for
    repeats."""
    if _is_ids(plan):
        return _id_cells(plan, n)
    if isinstance(plan, (str, bytes)) or not hasattr(plan, "__len__"):
        raise TypeError(
            "plan must be plan[rank][micro_batch] -> indexes (lists) or the as_ids triple "
            f"(rank_ids, micro_batch_ids, count), got {_describe(plan)}"
        )
    if len(plan) == 0:
        raise ValueError("plan has no rank")
    counts, sizes, flat = [], [], []
    for r, rank in enumerate(plan):
        if isinstance(rank, (str, bytes)) or not hasattr(rank, "__len__"):
            raise TypeError(f"plan[{r}] must be a list of micro-batches, got {_describe(rank)}")
        counts.append(len(rank))
        for k, batch in enumerate(rank):
            if isinstance(batch, (str, bytes)) or not hasattr(batch, "__len__"):
                raise TypeError(
                    f"plan[{r}][{k}] must be a list of sample indexes, got {_describe(batch)}"
                )
            sizes.append(len(batch))
            flat.extend(batch)
    samples = _indexes(flat, "plan")
    cells = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    bad = np.flatnonzero((samples < 0) | (samples >= n))
    if bad.size:
        cell = int(cells[bad[0]])
        rank = int(np.searchsorted(np.cumsum(counts), cell, side="right"))
        raise ValueError(
            f"plan[{rank}][{cell - sum(counts[:rank])}] holds {int(samples[bad[0]])}, not an "
            f"index of lengths ({n} samples)"
        )
    _no_repeats(samples)
    return samples, cells, np.asarray(counts, dtype=np.int64)


def _is_ids(plan: Any) -> bool:
    """Whether ``plan`` is the ``as_ids`` triple: a tuple whose third item is an int."""
    return (
        isinstance(plan, tuple)
        and len(plan) == 3
        and isinstance(plan[2], (int, np.integer))
        and not isinstance(plan[2], (bool, np.bool_))
    )


def _id_cells(plan: tuple[Any, Any, Any], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rank_ids = _indexes(plan[0], "plan[0] (rank_ids)")
    micro_batch_ids = _indexes(plan[1], "plan[1] (micro_batch_ids)")
    count = int(plan[2])
    if rank_ids.size != n or micro_batch_ids.size != n:
        raise ValueError(
            f"plan: rank_ids and micro_batch_ids must hold one id per sample ({n}), got "
            f"{rank_ids.size} and {micro_batch_ids.size}"
        )
    if count < 0:
        raise ValueError(f"plan[2] (the micro-batch count) must be >= 0, got {count}")
    # The count and the ranks size the step's arrays (ranks x count cells): bounded up front.
    if count > MAX_COUNT:
        raise ValueError(
            f"plan[2] (the micro-batch count) must be <= 2**24 ({MAX_COUNT}), got {count}"
        )
    placed = rank_ids >= 0
    if not np.array_equal(placed, micro_batch_ids >= 0):
        raise ValueError("plan: a sample has a rank id but no micro-batch id, or the reverse")
    if (rank_ids < -1).any() or (micro_batch_ids < -1).any():
        raise ValueError("plan: ids must be >= 0 (or -1 for a sample in no micro-batch)")
    if (micro_batch_ids >= count).any():
        position = int(np.flatnonzero(micro_batch_ids >= count)[0])
        raise ValueError(
            f"plan: sample {position} is in micro-batch {int(micro_batch_ids[position])}, "
            f"not below the count ({count})"
        )
    if not placed.any():
        raise ValueError("plan has no rank: every rank id is -1")
    ranks = int(rank_ids.max()) + 1
    if ranks > MAX_COUNT:
        raise ValueError(
            f"plan[0] (rank_ids) holds rank {ranks - 1}: a plan has at most 2**24 ranks "
            f"({MAX_COUNT})"
        )
    samples = np.flatnonzero(placed)
    cells = rank_ids[samples] * count + micro_batch_ids[samples]
    return samples, cells, np.full(ranks, count, dtype=np.int64)


def _indexes(values: Any, name: str) -> np.ndarray:
    """Indexes as an int64 array (negative ones kept, for the callers' range checks)."""
    array = np.asarray(values)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise TypeError(f"{name} must hold integer sample indexes, got {_describe(values)}")
    if array.dtype.kind == "u" and array.size and int(array.max()) >= 2**63:
        raise ValueError(f"{name} holds an index above 2**63 - 1")
    return array.astype(np.int64, copy=False)


def _no_repeats(samples: np.ndarray) -> None:
    if samples.size < 2:
        return
    ordered = np.sort(samples)
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeated.size:
        raise ValueError(f"plan holds sample {int(ordered[repeated[0]])} more than once")


def _cell_times(
    lengths: np.ndarray, samples: np.ndarray, cells: np.ndarray, n_cells: int, cost: Any
) -> np.ndarray:
    """Every cell's time: its samples' costs summed in float64 (in sample order), plus the
    per-micro-batch term for a cell holding a document (a positive length). A `TimeCost` is
    summed in the planners' weights, its int64 nanoseconds, and given back in seconds."""
    costs = sample_costs(cost, lengths)
    times: np.ndarray = np.bincount(
        cells, weights=costs[samples].astype(np.float64), minlength=n_cells
    )
    scale = unit_scale(cost)
    term = micro_batch_term(cost)
    if term:
        documents = np.bincount(cells, weights=lengths[samples] > 0, minlength=n_cells)
        times = times + term * scale * (documents > 0)
    if scale != 1.0:
        times = times / scale
    return times.astype(np.float64, copy=False)


@dataclass(frozen=True)
class DpPlan:
    """`plan_dp_with_today`'s answer: the plan (lists, or ``(rank_ids, micro_batch_ids)``), its
    count and its step in the planner's model (``None`` in the default mode), and today's plan
    (the default mode's) in the same form when the answer is another plan (else ``None``)."""

    plan: Any
    count: int
    step: float | None
    today: Any
    today_count: int
    today_step: float | None


def plan_step(
    problem: _Problem,
    candidates: list[np.ndarray],
    n_ranks: int,
    minimum: int,
    as_ids: bool,
    largest: int | None,
    partition_equal: Any,
    model: tuple[str, int, float, Any],
) -> DpPlan:
    """The step planner (one native call): today's plan of the candidates, then the search for
    ``model`` = ``(sync, pipeline_stages, forward_share, cost)``."""
    sync, stages, share, cost = model
    scale = unit_scale(cost)
    counts = {True: "equal", "nearly": "nearly"}.get(partition_equal, "free")
    step: _native._StepRequest = {
        "sync": sync,
        "stages": stages,
        "forward_share": share,
        # In the weights' units: a TimeCost's nanoseconds.
        "micro_batch_time": max(micro_batch_term(cost), 0.0) * scale,
        "max_count": largest,
        "equal_counts": counts,
        "n_samples": int(problem.sizes.sum()),
        "progress_after": PROGRESS_AFTER,
        "progress_label": "seqbalance.plan_dp_micro_batches",
    }
    count, plan, step_time, today_count, today_time, today = _native._plan_step(
        problem.tokens,
        problem.weights,
        problem.starts,
        problem.sizes,
        [np.ascontiguousarray(ranks, dtype=np.int64) for ranks in candidates],
        _request(problem, n_ranks, minimum, "bubble", as_ids),
        step,
        problem.limits.longest,
        problem.limits.keys,
    )
    # Back in the cost's units (a TimeCost's seconds).
    seconds, today_seconds = step_time / scale, today_time / scale
    logger.debug(
        "step planner (%s, %d stages): %d micro-batches, step %.6g (today: %d, %.6g)",
        sync,
        stages,
        count,
        seconds,
        today_count,
        today_seconds,
    )
    return DpPlan(plan, count, seconds, today, today_count, today_seconds)
