"""Micro-batches under a hard token cap, balanced by cost, in a pipeline-friendly order."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native
from .._deprecation import WORKLOAD_NOTE, renamed_params, workload_flag
from .._inputs import (
    MAX_COUNT,
    as_int64_array,
    check_choice,
    check_k_partitions,
    check_min_count,
    check_optional_count,
    check_pad_to_multiple_of,
    check_per_item,
    check_refine,
)
from ..costs._time_trust import outside_stacklevel
from ..costs.time_cost import TimeCost, TimeCostWarning
from ..costs.workload import (
    check_total,
    group_sums,
    pad_lengths,
    resolve_cost,
    sample_costs,
)
from ..errors import argument_error
from ..refine import refine_partitions
from .groups import uid_runs
from .packing import Limits, group_limits, keeps_limits

__all__ = [
    "MAX_MICRO_BATCHES",
    "min_num_micro_batches_for",
    "plan_micro_batches",
]

logger = logging.getLogger(__name__)

_ORDERS = ("bubble", "largest_first", "none")

#: The most micro-batches (or the largest multiple) a plan may ask for: ``2**24``, as every
#: count that sizes an allocation.
MAX_MICRO_BATCHES = MAX_COUNT


@dataclass(frozen=True)
class _Problem:
    """The validated request, at the level of groups (runs of consecutive samples kept whole)."""

    starts: np.ndarray  # group -> first sample (int64, ascending, starts[0] == 0)
    sizes: np.ndarray  # group -> number of samples
    tokens: np.ndarray  # group -> padded token sum (int64)
    weights: np.ndarray  # group -> balancing weight: the sum of its members' costs (int64 or float)
    sample_weights: np.ndarray  # sample -> cost (int64, float64 or float32)
    cap: int
    multiple: int
    refine: bool | str
    limits: Limits

    @property
    def n_groups(self) -> int:
        return int(self.tokens.size)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _group_bounds(n: int, group_size: Any, uid_list: Any = None) -> np.ndarray:
    """The first sample of every group: runs of ``group_size`` samples or of equal uids."""
    group_size = check_k_partitions(group_size, "group_size")
    if uid_list is not None:
        if group_size != 1:
            raise TypeError("pass either uid_list or group_size, not both")
        check_per_item(uid_list, "uid_list", "ids")
        if len(uid_list) != n:
            raise ValueError(f"uid_list has {len(uid_list)} entries but lengths has {n}")
        return np.asarray([start for start, _ in uid_runs(uid_list)], dtype=np.int64)
    if n % group_size:
        raise ValueError(f"number of samples ({n}) is not divisible by group_size ({group_size})")
    return np.arange(0, n, group_size, dtype=np.int64)


def _prepare(
    lengths: Any,
    max_token_len: Any,
    group_size: Any = 1,
    num_micro_batches_multiple: Any = None,
    cost: Any = "tokens",
    pad_to_multiple_of: Any = 1,
    refine: Any = False,
    uid_list: Any = None,
    max_sequences: Any = None,
    footprint: Any = "sum",
    keys: Any = None,
) -> _Problem:
    refine = check_refine(refine)
    values = as_int64_array(lengths, "lengths")
    cap = check_k_partitions(max_token_len, "max_token_len")
    multiple = check_optional_count(num_micro_batches_multiple, "num_micro_batches_multiple", 1)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    starts = _group_bounds(values.size, group_size, uid_list)
    padded = pad_lengths(values, pad)
    # Groups of one sample (the common case) need no sums: reduceat and diff over 2^20 samples
    # were a tenth of plan_dp_micro_batches' time.
    single = starts.size == values.size
    if single:
        sizes = np.ones(values.size, dtype=np.int64)
        check_total(padded, name="lengths")
        tokens = padded
    else:
        sizes = np.diff(np.append(starts, values.size))
        tokens = group_sums(padded, starts, name="lengths")
    too_long = np.flatnonzero(tokens > cap)
    if too_long.size:
        group = int(too_long[0])
        start, stop = int(starts[group]), int(starts[group] + sizes[group])
        padding = f" (padded to a multiple of {pad})" if pad > 1 else ""
        over = dict(
            shown=int(tokens[group]), padding=padding, cap_argument="max_token_len", cap=cap
        )
        if stop - start == 1:
            raise argument_error("longer_than_cap", ("lengths", start), int(values[start]), **over)
        run = ("lengths", slice(start, stop))
        raise argument_error(
            "group_over_cap", run, values[start:stop].tolist(), group=group, **over
        )
    limits = group_limits(max_sequences, footprint, keys, padded, starts, sizes, cap)
    if isinstance(cost, TimeCost):
        # The plan's micro-batches may hold up to this many tokens: past what the cost was
        # measured on, its predictions of them extrapolate.
        largest = min(cap, int(tokens.sum(dtype=np.float64)))
        message = cost.extrapolation(micro_batch_tokens=largest)
        if message is not None:
            warnings.warn(message, TimeCostWarning, stacklevel=outside_stacklevel())
    sample_weights = sample_costs(cost, padded)
    if single:
        if sample_weights.dtype.kind != "f":
            check_total(sample_weights)
        weights = sample_weights
    else:
        weights = group_sums(sample_weights, starts)
    return _Problem(starts, sizes, tokens, weights, sample_weights, cap, multiple, refine, limits)


def _core_cap(problem: _Problem) -> int:
    """The cap as the core takes it: a cap above the largest footprint any micro-batch can
    have (the token total; with a padded footprint, every sample padded to the longest) acts as
    that footprint.

    Both hold every group in one micro-batch, so the plan is the same; the core needs a cap
    below 2**63.
    """
    largest = int(problem.tokens.sum())
    if problem.limits.longest is not None:
        # A padded footprint can pass the token total: the largest is every sample padded to
        # the longest.
        largest = max(largest, int(problem.sizes.sum()) * int(problem.limits.longest.max()))
    return max(1, min(problem.cap, largest))


def _plan_ranks(
    problem: _Problem,
    candidates: list[np.ndarray],
    n_ranks: int,
    minimum: int,
    order: str,
    as_ids: bool = False,
) -> tuple[int, int, Any]:
    """The native planner, one call with one request: ``(candidate kept, count, plan)``.

    Each candidate gives every group its rank. Every rank gets the same count: the largest of
    the ranks' own counts and ``minimum``. A later candidate replaces the kept one when it is no
    worse on the heaviest rank and on the count, and better on (heaviest rank, count, heaviest
    micro-batch); only the kept plan is built, as lists ``[rank][micro_batch] -> samples`` or,
    with ``as_ids``, as ``(rank_ids, micro_batch_ids)`` int64 arrays per sample.
    """
    kept, count, plan = _native._plan_ranks(
        problem.tokens,
        problem.weights,
        problem.starts,
        problem.sizes,
        [np.ascontiguousarray(ranks, dtype=np.int64) for ranks in candidates],
        _request(problem, n_ranks, minimum, order, as_ids),
        problem.limits.longest,
        problem.limits.keys,
    )
    return kept, count, plan


def _request(
    problem: _Problem, n_ranks: int, minimum: int, order: str, as_ids: bool
) -> _native._PlanRequest:
    return {
        "n_ranks": n_ranks,
        "cap": _core_cap(problem),
        "multiple": problem.multiple,
        "minimum": minimum,
        "order": order,
        "as_ids": as_ids,
        "max_sequences": problem.limits.max_sequences,
        "padded": problem.limits.padded,
    }


def _part_cost(weights: np.ndarray, part: list[int]) -> Any:
    """A part's cost: the sum of its members' weights; for floats the left fold in placement
    order (weight descending, ties by group number), in the weights' precision."""
    if not part:
        return weights.dtype.type(0)
    members = np.asarray(part, dtype=np.int64)
    if weights.dtype.kind != "f":
        return int(weights[members].sum())
    placed = members[np.lexsort((members, -weights[members]))]
    return np.add.accumulate(weights[placed])[-1]


def _ordered(parts: list[list[int]], problem: _Problem, order: str) -> list[list[int]]:
    """``parts`` (group numbers) in ``order`` (the native rule of the planner: by cost, then
    first sample, descending; ``"bubble"`` then puts the smaller ones at both ends); empty parts
    last.
    """
    weights, starts = problem.weights, problem.starts
    costs = np.array([_part_cost(weights, part) for part in parts], dtype=weights.dtype)
    firsts = np.array([int(starts[min(part)]) if part else 0 for part in parts], dtype=np.int64)
    sizes = np.array([len(part) for part in parts], dtype=np.int64)
    return [parts[m] for m in _native._order_micro_batches(costs, firsts, sizes, order)]


def _refined_micro_batches(
    problem: _Problem, batches: list[list[int]], order: str
) -> list[list[int]]:
    """``refine=True``/``"exact"``: refine the micro-batches' split by cost, kept if it fits.

    `refine_partitions` never makes the heaviest micro-batch heavier by cost; the refined
    split replaces the planner's only when every micro-batch still fits the cap and the shape
    limits.
    """
    group_of_sample = np.repeat(np.arange(problem.n_groups, dtype=np.int64), problem.sizes)
    parts = [np.unique(group_of_sample[batch]).tolist() for batch in batches if batch]
    empty = len(batches) - len(parts)
    if parts:
        refined = refine_partitions(
            problem.weights, parts, search="exact" if problem.refine == "exact" else "local"
        )
        if keeps_limits(problem.limits, problem.tokens, problem.sizes, refined, problem.cap):
            parts = refined
    parts = _ordered(parts, problem, order)
    starts, sizes = problem.starts.tolist(), problem.sizes.tolist()
    return [
        [i for g in sorted(part) for i in range(starts[g], starts[g] + sizes[g])] for part in parts
    ] + [[] for _ in range(empty)]


@renamed_params(
    force_group_size="group_size",
    balance_workload="cost",
    convert={"balance_workload": workload_flag},
    notes={"balance_workload": WORKLOAD_NOTE},
)
def plan_micro_batches(
    lengths: Any,
    max_token_len: int,
    *,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    group_size: int = 1,
    cost: Any = "tokens",
    pad_to_multiple_of: int = 1,
    order: str | None = None,
    refine: bool | str = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
) -> list[list[int]]:
    """Split one rank's samples into micro-batches of at most ``max_token_len`` tokens each.

    The cap is a hard guarantee. The split into a given count is a cap-aware greedy in the
    native core: groups by cost descending (ties by index), each into the micro-batch of least
    cost among those with room for its tokens (ties to an empty one, then the lowest number);
    it fails when a group fits nowhere. The count starts from bin-packing lower bounds
    (``ceil(total / cap)``, and stronger ones: samples just over half the cap need one
    micro-batch each), rounded up to ``num_micro_batches_multiple``, gallops up (1, 2, 4, ...
    multiples) to a count whose split fits and bisects back, so the count before it does not
    fit; it is then raised to ``min_num_micro_batches`` (rounded up to the multiple) if that is
    larger, splitting the heaviest micro-batches further when the split at that count would not
    fit. ``tests/planning/plan_oracle.py`` holds the same rules in pure Python.

    Data-parallel ranks must run the same number of micro-batches. Use two steps:

        local = min_num_micro_batches_for(lengths, cap)        # this rank's own count
        agreed = all_reduce_max(local)                         # e.g. dist.all_reduce(op=MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=agreed)

    Pass the same keywords (``group_size``, ``num_micro_batches_multiple``, ``cost``,
    ``pad_to_multiple_of``, ``refine``, ``max_sequences``, ``footprint``, ``keys``) to both
    calls. Every rank then gets exactly ``agreed``
    (rounded up to the multiple) micro-batches: a count at least a rank's own is always
    reachable under the cap. A single controller holding every rank's samples can call
    `plan_dp_micro_batches` instead.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        max_token_len: token cap per micro-batch, an int >= 1.
        min_num_micro_batches: lower bound on the count (an int >= 0), or None.
        num_micro_batches_multiple: the count is a multiple of this (pipeline stages), or None.
        group_size: this many consecutive samples always share a micro-batch; the sample
            count must be divisible by it.
        cost: what balancing weighs (default ``"tokens"``): ``"tokens"``, ``"workload"``,
            per-sample integer or float weights, or a callable on the (padded) lengths; see
            `seqbalance.costs` (a `TimeCost` weighs its predicted seconds as int64
            nanoseconds). The cap always counts tokens. Float weights are
            summed in their own precision: a forced group's weight left to right, a
            micro-batch's cost as the fold of its members' in placement order (cost
            descending, ties by index).
        pad_to_multiple_of: count every length rounded up to a multiple of this (tensor or
            context parallelism pads sequences), against the cap and in the cost, so the plan
            still fits after padding.
        order: ``"bubble"`` sorts micro-batches by (cost, first index) descending and puts the
            smaller ones at both ends (``mb[::2][::-1] + mb[1::2]``) to shrink pipeline warm-up
            and cool-down bubbles; ``"largest_first"`` sorts them by (cost, first index)
            descending (NeMo-RL's order against memory fragmentation); ``"none"`` keeps the
            partitioner's order. Empty micro-batches always come last. ``None`` (the default,
            as in `plan_dp_micro_batches`) is ``"bubble"``.
        refine: ``True`` or ``"exact"`` refines the final split by cost
            (`seqbalance.refine_partitions`, which never makes the heaviest micro-batch
            heavier) and keeps the refined split when every micro-batch still fits the cap; the
            count is the unrefined one.
        max_sequences: the most samples a micro-batch may hold (static shapes, CUDA graphs),
            or None for no limit.
        footprint: what a micro-batch is charged against the cap: ``"sum"`` (its tokens) or
            ``"padded"`` (its sample count times its longest sample, as non-varlen attention
            pads them); the cost balanced is unchanged.
        keys: one hashable per sample (a modality, a policy version): samples of different
            keys never share a micro-batch; a forced group must not mix keys.

    Shape limits (``max_sequences``, ``footprint="padded"``, ``keys``): when the plan made
    without them already keeps them, it is returned exactly; otherwise the count is searched
    again with "fits" extended by them, and is never above the count of first-fit decreasing
    (by padded tokens, ties by index) under the same limits, raised to
    ``min_num_micro_batches`` and rounded up to the multiple. With every limit at its default
    the plan is the same as without them.

    Returns:
        A list of micro-batches, each an ascending list of sample indexes; every index appears
        exactly once. Micro-batches are empty only when the count constraints ask for more
        micro-batches than there are samples (groups); they come last, for the caller to pad.

    Raises:
        ValueError: a sample or forced group longer than the cap (padded to its longest sample
            with ``footprint="padded"``), a forced group of more than ``max_sequences`` samples
            or of mixed keys, a sample count not divisible by ``group_size``, an unknown
            ``order``, ``footprint`` or cost name, an argument < 1, a count or multiple above
            ``MAX_MICRO_BATCHES`` (``2**24``).
        TypeError: a non-integer argument, non-numeric costs, unhashable keys.
        OverflowError: integer costs summing above 2**63 - 1.

    Example:
        >>> plan_micro_batches([300, 200, 100, 400], 500, cost="tokens")
        [[2, 3], [0, 1]]
    """
    order = check_choice("bubble" if order is None else order, "order", _ORDERS)
    problem = _prepare(
        lengths,
        max_token_len,
        group_size,
        num_micro_batches_multiple,
        resolve_cost(cost, default="tokens"),
        pad_to_multiple_of,
        refine,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
    )
    minimum = _round_up(check_min_count(min_num_micro_batches), problem.multiple)
    one_rank = np.zeros(problem.n_groups, dtype=np.int64)
    if problem.refine is False:
        return _plan_ranks(problem, [one_rank], 1, minimum, order)[2][0]
    batches = _plan_ranks(problem, [one_rank], 1, minimum, "none")[2][0]
    return _refined_micro_batches(problem, batches, order)


@renamed_params(
    force_group_size="group_size",
    balance_workload="cost",
    convert={"balance_workload": workload_flag},
    notes={"balance_workload": WORKLOAD_NOTE},
)
def min_num_micro_batches_for(
    lengths: Any,
    max_token_len: int,
    *,
    num_micro_batches_multiple: int | None = None,
    group_size: int = 1,
    cost: Any = "tokens",
    pad_to_multiple_of: int = 1,
    refine: bool | str = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
) -> int:
    """The micro-batch count `plan_micro_batches` would choose on its own for this rank.

    All-reduce the MAX of it across data-parallel ranks and pass the result back as
    ``min_num_micro_batches``, so every rank runs the same count:

        local = min_num_micro_batches_for(lengths, cap)
        t = torch.tensor([local]); dist.all_reduce(t, op=dist.ReduceOp.MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=int(t))

    Takes the keywords of `plan_micro_batches` except ``order`` and
    ``min_num_micro_batches``; pass the same ones to both calls. Errors as there.
    Returns 0 for no samples.

    Example:
        >>> min_num_micro_batches_for([300, 200, 100, 400], 500, num_micro_batches_multiple=4)
        4
    """
    problem = _prepare(
        lengths,
        max_token_len,
        group_size,
        num_micro_batches_multiple,
        resolve_cost(cost, default="tokens"),
        pad_to_multiple_of,
        refine,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
    )
    if not problem.n_groups:
        return 0
    return int(
        _native._own_count(
            problem.tokens,
            problem.weights,
            _request(problem, 1, 0, "none", False),
            problem.sizes,
            problem.limits.longest,
            problem.limits.keys,
        )
    )
