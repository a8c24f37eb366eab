"""Micro-batches under a hard token cap, balanced by cost, in a pipeline-friendly order."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native
from .._inputs import (
    MAX_COUNT,
    _describe,
    as_int64_array,
    check_choice,
    check_k_partitions,
    check_min_count,
    check_optional_count,
    check_pad_to_multiple_of,
    check_refine,
)
from ..refine import refine_partitions
from .costs import (
    check_total,
    group_sums,
    pad_lengths,
    resolve_cost,
    sample_costs,
)
from .groups import uid_runs

__all__ = [
    "MAX_MICRO_BATCHES",
    "min_num_micro_batches_for",
    "plan_micro_batches",
]

logger = logging.getLogger(__name__)

_ORDERS = ("bubble", "none")

#: The most micro-batches (or the largest multiple) a plan may ask for: ``2**24``, as every
#: count that sizes an allocation.
MAX_MICRO_BATCHES = MAX_COUNT


@dataclass(frozen=True)
class _Problem:
    """The validated request, at the level of groups (runs of consecutive samples kept whole)."""

    starts: np.ndarray  # group -> first sample (int64, ascending, starts[0] == 0)
    sizes: np.ndarray  # group -> number of samples
    tokens: np.ndarray  # group -> padded token sum (int64)
    weights: np.ndarray  # group -> balancing weight: the sum of its members' costs (int64)
    sample_weights: np.ndarray  # sample -> cost (int64), for the bubble order
    cap: int
    multiple: int
    refine: bool | str

    @property
    def n_groups(self) -> int:
        return int(self.tokens.size)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _group_bounds(n: int, force_group_size: Any, uid_list: Any = None) -> np.ndarray:
    """The first sample of every group: runs of ``force_group_size`` samples or of equal uids."""
    group_size = check_k_partitions(force_group_size, "force_group_size")
    if uid_list is not None:
        if group_size != 1:
            raise TypeError("pass either uid_list or force_group_size, not both")
        if isinstance(uid_list, (str, bytes)) or not hasattr(uid_list, "__len__"):
            raise TypeError(f"uid_list must be a sequence of ids, got {_describe(uid_list)}")
        if len(uid_list) != n:
            raise ValueError(f"uid_list has {len(uid_list)} entries but lengths has {n}")
        return np.asarray([start for start, _ in uid_runs(uid_list)], dtype=np.int64)
    if n % group_size:
        raise ValueError(
            f"number of samples ({n}) is not divisible by force_group_size ({group_size})"
        )
    return np.arange(0, n, group_size, dtype=np.int64)


def _prepare(
    lengths: Any,
    max_token_len: Any,
    force_group_size: Any = 1,
    num_micro_batches_multiple: Any = None,
    cost: Any = "workload",
    pad_to_multiple_of: Any = 1,
    refine: Any = False,
    uid_list: Any = None,
) -> _Problem:
    refine = check_refine(refine)
    values = as_int64_array(lengths, "lengths")
    cap = check_k_partitions(max_token_len, "max_token_len")
    multiple = check_optional_count(num_micro_batches_multiple, "num_micro_batches_multiple", 1)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    starts = _group_bounds(values.size, force_group_size, uid_list)
    padded = pad_lengths(values, pad)
    # Groups of one sample (the common case) need no sums: reduceat and diff over 2^20 samples
    # were a tenth of plan_dp_micro_batches' time.
    single = starts.size == values.size
    if single:
        sizes = np.ones(values.size, dtype=np.int64)
        check_total(padded, "lengths")
        tokens = padded
    else:
        sizes = np.diff(np.append(starts, values.size))
        tokens = group_sums(padded, starts, "lengths")
    too_long = np.flatnonzero(tokens > cap)
    if too_long.size:
        group = int(too_long[0])
        start, stop = int(starts[group]), int(starts[group] + sizes[group])
        padding = f" (padded to a multiple of {pad})" if pad > 1 else ""
        if stop - start == 1:
            raise ValueError(
                f"lengths[{start}] = {int(tokens[group])}{padding} is longer than "
                f"max_token_len ({cap})"
            )
        raise ValueError(
            f"group {group} (lengths[{start}:{stop}]) holds {int(tokens[group])} tokens"
            f"{padding}, more than max_token_len ({cap})"
        )
    sample_weights = sample_costs(cost, padded)
    if single:
        check_total(sample_weights)
        weights = sample_weights
    else:
        weights = group_sums(sample_weights, starts)
    return _Problem(starts, sizes, tokens, weights, sample_weights, cap, multiple, refine)


def _core_cap(problem: _Problem) -> int:
    """The cap as the core takes it: a cap above the total token count acts as that total.

    Both hold every group in one micro-batch, so the plan is the same; the core needs a cap
    below 2**63.
    """
    return max(1, min(problem.cap, int(problem.tokens.sum())))


def _plan_ranks(
    problem: _Problem, candidates: list[np.ndarray], n_ranks: int, minimum: int, bubble: bool
) -> tuple[int, int, list[list[list[int]]]]:
    """The native planner: ``(candidate kept, count, plan)``.

    Each candidate gives every group its rank. Every rank gets the same count: the largest of
    the ranks' own counts and ``minimum``. A later candidate replaces the kept one when it is no
    worse on the heaviest rank and on the count, and better on (heaviest rank, count, heaviest
    micro-batch); only the kept plan is built as lists.
    """
    kept, count, _, _, plan = _native._plan_ranks(
        problem.tokens,
        problem.weights,
        problem.starts,
        problem.sizes,
        [np.ascontiguousarray(ranks, dtype=np.int64) for ranks in candidates],
        n_ranks,
        _core_cap(problem),
        problem.multiple,
        minimum,
        bubble,
    )
    return kept, count, plan


def bubble(parts: list[list[int]], costs: Any, starts: Any) -> list[list[int]]:
    """Pipeline order: by (cost, first sample) descending, the smaller ones to both ends; empty
    parts last. ``parts`` hold group numbers, ``costs[g]`` and ``starts[g]`` are group g's cost and
    first sample.
    """
    filled = [part for part in parts if part]
    filled.sort(key=lambda p: (sum(costs[g] for g in p), min(starts[g] for g in p)), reverse=True)
    return filled[::2][::-1] + filled[1::2] + [part for part in parts if not part]


def _refined_micro_batches(
    problem: _Problem, batches: list[list[int]], order: str
) -> list[list[int]]:
    """``refine=True``/``"exact"``: refine the micro-batches' split by cost, kept if it fits.

    :func:`refine_partitions` never makes the heaviest micro-batch heavier by cost; the refined
    split replaces the planner's only when every micro-batch still fits the cap.
    """
    group_of_sample = np.repeat(np.arange(problem.n_groups, dtype=np.int64), problem.sizes)
    parts = [np.unique(group_of_sample[batch]).tolist() for batch in batches if batch]
    empty = len(batches) - len(parts)
    if parts:
        refined = refine_partitions(problem.weights, parts, refine=problem.refine)
        if all(int(problem.tokens[part].sum()) <= problem.cap for part in refined):
            parts = refined
    weights, starts = problem.weights.tolist(), problem.starts.tolist()
    if order == "bubble":
        parts = bubble(parts, weights, starts)
    sizes = problem.sizes.tolist()
    return [
        [i for g in sorted(part) for i in range(starts[g], starts[g] + sizes[g])] for part in parts
    ] + [[] for _ in range(empty)]


def plan_micro_batches(
    lengths: Any,
    max_token_len: int,
    *,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
    cost: Any = None,
    pad_to_multiple_of: int = 1,
    order: str = "bubble",
    refine: bool | str = False,
    balance_workload: bool | None = None,
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

    Data-parallel ranks must run the same number of micro-batches. Use two steps::

        local = min_num_micro_batches_for(lengths, cap)        # this rank's own count
        agreed = all_reduce_max(local)                         # e.g. dist.all_reduce(op=MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=agreed)

    Pass the same keywords (``force_group_size``, ``num_micro_batches_multiple``, ``cost``,
    ``pad_to_multiple_of``, ``refine``) to both calls. Every rank then gets exactly ``agreed``
    (rounded up to the multiple) micro-batches: a count at least a rank's own is always
    reachable under the cap. A single controller holding every rank's samples can call
    :func:`plan_dp_micro_batches` instead.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        max_token_len: token cap per micro-batch, an int >= 1.
        min_num_micro_batches: lower bound on the count (an int >= 0), or None.
        num_micro_batches_multiple: the count is a multiple of this (pipeline stages), or None.
        force_group_size: this many consecutive samples always share a micro-batch; the sample
            count must be divisible by it.
        cost: what balancing weighs (default ``"workload"``): ``"tokens"``, ``"workload"``,
            per-sample integer weights, or a callable on the (padded) lengths; see
            :mod:`seqbalance.costs`. The cap always counts tokens.
        pad_to_multiple_of: count every length rounded up to a multiple of this (tensor or
            context parallelism pads sequences), against the cap and in the cost, so the plan
            still fits after padding.
        order: ``"bubble"`` sorts micro-batches by (cost, first index) descending and puts the
            smaller ones at both ends (``mb[::2][::-1] + mb[1::2]``) to shrink pipeline warm-up
            and cool-down bubbles; ``"none"`` keeps the partitioner's order. Empty micro-batches
            always come last.
        refine: ``True`` or ``"exact"`` refines the final split by cost
            (:func:`seqbalance.refine_partitions`, which never makes the heaviest micro-batch
            heavier) and keeps the refined split when every micro-batch still fits the cap; the
            count is the unrefined one.
        balance_workload: deprecated alias of ``cost`` (``True`` = ``"workload"``, ``False`` =
            ``"tokens"``); a ``DeprecationWarning``, and a ``TypeError`` beside ``cost``.

    Returns:
        A list of micro-batches, each an ascending list of sample indexes; every index appears
        exactly once. Micro-batches are empty only when the count constraints ask for more
        micro-batches than there are samples (groups); they come last, for the caller to pad.

    Raises:
        ValueError: a sample or forced group longer than the cap, a sample count not divisible
            by ``force_group_size``, an unknown ``order`` or cost name, an argument < 1, a
            count or multiple above ``MAX_MICRO_BATCHES`` (``2**24``).
        TypeError: a non-integer argument, float cost weights (not supported yet).
        OverflowError: costs summing above 2**63 - 1.

    Example:
        >>> plan_micro_batches([300, 200, 100, 400], 500, cost="tokens")
        [[2, 3], [0, 1]]
    """
    order = check_choice(order, "order", _ORDERS)
    problem = _prepare(
        lengths,
        max_token_len,
        force_group_size,
        num_micro_batches_multiple,
        resolve_cost(cost, balance_workload, "workload"),
        pad_to_multiple_of,
        refine,
    )
    minimum = _round_up(check_min_count(min_num_micro_batches), problem.multiple)
    one_rank = np.zeros(problem.n_groups, dtype=np.int64)
    if problem.refine is False:
        return _plan_ranks(problem, [one_rank], 1, minimum, order == "bubble")[2][0]
    batches = _plan_ranks(problem, [one_rank], 1, minimum, False)[2][0]
    return _refined_micro_batches(problem, batches, order)


def min_num_micro_batches_for(
    lengths: Any,
    max_token_len: int,
    *,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
    cost: Any = None,
    pad_to_multiple_of: int = 1,
    refine: bool | str = False,
    balance_workload: bool | None = None,
) -> int:
    """The micro-batch count :func:`plan_micro_batches` would choose on its own for this rank.

    All-reduce the MAX of it across data-parallel ranks and pass the result back as
    ``min_num_micro_batches``, so every rank runs the same count::

        local = min_num_micro_batches_for(lengths, cap)
        t = torch.tensor([local]); dist.all_reduce(t, op=dist.ReduceOp.MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=int(t))

    Takes the keywords of :func:`plan_micro_batches` except ``order`` and
    ``min_num_micro_batches``; pass the same ones to both calls. Errors as there.
    Returns 0 for no samples.

    Example:
        >>> min_num_micro_batches_for([300, 200, 100, 400], 500, num_micro_batches_multiple=4)
        4
    """
    problem = _prepare(
        lengths,
        max_token_len,
        force_group_size,
        num_micro_batches_multiple,
        resolve_cost(cost, balance_workload, "workload"),
        pad_to_multiple_of,
        refine,
    )
    if not problem.n_groups:
        return 0
    return int(
        _native._own_count(problem.tokens, problem.weights, _core_cap(problem), problem.multiple)
    )
