"""Micro-batches under a hard token cap, balanced by workload, in a pipeline-friendly order."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._inputs import MAX_VALUE, check_k_partitions, lengths_as_list
from .metrics import calculate_workload
from .partition import get_seqlen_balanced_partitions
from .refine import check_refine

__all__ = ["min_num_micro_batches_for", "plan_micro_batches"]

logger = logging.getLogger(__name__)

_ORDERS = ("bubble", "none")


@dataclass(frozen=True)
class _Problem:
    """The validated request, at the level of groups (a group is ``force_group_size`` samples)."""

    runs: list[tuple[int, int]]  # group -> (start, stop) sample range
    tokens: list[int]  # group -> token sum
    weights: list[int]  # group -> balancing weight (workload or tokens)
    sample_workloads: list[int] | np.ndarray
    cap: int
    multiple: int
    refine: bool | str


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _prepare(
    lengths: Any,
    max_token_len: Any,
    force_group_size: Any,
    num_micro_batches_multiple: Any,
    balance_workload: bool,
    refine: Any = False,
) -> _Problem:
    refine = check_refine(refine)
    values = lengths_as_list(lengths, "lengths")
    cap = check_k_partitions(max_token_len, "max_token_len")
    group_size = check_k_partitions(force_group_size, "force_group_size")
    multiple = (
        1
        if num_micro_batches_multiple is None
        else check_k_partitions(num_micro_batches_multiple, "num_micro_batches_multiple")
    )
    if len(values) % group_size:
        raise ValueError(
            f"number of samples ({len(values)}) is not divisible by force_group_size ({group_size})"
        )
    runs = [(start, start + group_size) for start in range(0, len(values), group_size)]
    tokens = [sum(values[start:stop]) for start, stop in runs]
    for group, total in enumerate(tokens):
        if total > cap:
            start, stop = runs[group]
            if group_size == 1:
                raise ValueError(f"lengths[{start}] = {total} is longer than max_token_len ({cap})")
            raise ValueError(
                f"group {group} (lengths[{start}:{stop}]) holds {total} tokens, "
                f"more than max_token_len ({cap})"
            )
    workloads = calculate_workload(values)
    if balance_workload:
        weights = [sum(workloads[start:stop]) for start, stop in runs]
        for group, weight in enumerate(weights):
            if weight > MAX_VALUE:
                raise OverflowError(
                    f"workload of group {group} is {weight}, above 2**63 - 1; "
                    "pass balance_workload=False to balance by tokens"
                )
    else:
        weights = tokens
    return _Problem(runs, tokens, weights, workloads, cap, multiple, refine)


def _balanced_split(problem: _Problem, count: int) -> list[list[int]]:
    """``count`` lists of group indexes; extra lists are empty when there are fewer groups."""

    filled = min(count, len(problem.weights))
    parts = (
        get_seqlen_balanced_partitions(problem.weights, filled, False, refine=problem.refine)
        if filled
        else []
    )
    return parts + [[] for _ in range(count - filled)]


def _fits(problem: _Problem, parts: list[list[int]]) -> bool:
    return all(sum(problem.tokens[g] for g in part) <= problem.cap for part in parts)


# The Fekete-Schepers bounds below use u_k for k = 2.._DFF_MAX: enough for items down to
# cap / (_DFF_MAX + 1); the scan's step budget covers what the bounds miss.
_DFF_MAX = 16

# Counts tried one by one above the lower bound before the search gallops: each try is a full
# partition, and the first fitting count is usually within a few steps of the bound.
_SCAN_STEPS = 32


def _bin_lower_bound(tokens: list[int], cap: int) -> int:
    """A count below which no split of ``tokens`` into parts of at most ``cap`` exists.

    Any fitting split is a bin packing, so every bin-packing lower bound holds for it; the
    largest of these three is returned (each O(n) after one sort):

    - ``ceil(total / cap)``;
    - Martello-Toth L2: for a threshold ``a <= cap / 2``, items above ``cap - a`` and items in
      ``(cap / 2, cap - a]`` each need a bin of their own (the latter share it only with
      items below ``a``), and items in ``[a, cap / 2]`` fill the room those leave or open
      new bins;
    - Fekete-Schepers dual-feasible functions ``u_k``: an item ``s`` counts as ``s / cap`` of
      a bin when ``(k + 1) * s`` is a multiple of ``cap``, else as ``floor((k + 1) * s / cap) / k``;
      a bin's counts never add to more than one, so their ceiled sum is a bound (for k = 2:
      no bin holds three items above ``cap / 3``).

    Example: 10 items of 501 under a cap of 1000 need 10 bins, not ``ceil(5010 / 1000) = 6``.
    """
    n = len(tokens)
    # Exact int64 arithmetic while no intermediate can pass 2**63 - 1; Python ints otherwise.
    dtype: Any = np.int64 if (_DFF_MAX + 2) * max(n, 1) * cap <= MAX_VALUE else object
    sizes = np.sort(np.asarray(tokens, dtype=dtype))
    prefix = np.concatenate((np.zeros(1, dtype=dtype), np.cumsum(sizes, dtype=dtype)))
    total = prefix[-1]
    bound = max(1, -(-int(total) // cap))

    half = int(np.searchsorted(sizes, cap // 2, side="right"))  # sizes[:half] have 2 * s <= cap
    thresholds = np.concatenate((np.zeros(1, dtype=dtype), np.unique(sizes[:half])))
    above = np.searchsorted(sizes, cap - thresholds, side="right")  # J1 = sizes[above:]
    small = np.searchsorted(sizes, thresholds, side="left")  # J3 = sizes[small:half]
    big_count = (above - half).astype(dtype)  # J2 = sizes[half:above]
    room = big_count * cap - (prefix[above] - prefix[half])
    overflow = prefix[half] - prefix[small] - room
    l2 = (n - half) + np.maximum(0, -(-overflow // cap))
    bound = max(bound, int(l2.max()))

    for k in range(2, _DFF_MAX + 1):
        scaled = (k + 1) * sizes
        counts = np.where(scaled % cap == 0, k * sizes, (scaled // cap) * cap)
        bound = max(bound, -(-int(counts.sum()) // (k * cap)))
    return bound


def _own_plan(problem: _Problem) -> tuple[int, list[list[int]]]:
    """The first count from the lower bound, in steps of the multiple, whose split fits.

    The scan starts from :func:`_bin_lower_bound`, rounded up to the multiple: no smaller count
    can fit, so this is the first fitting count from ``ceil(total / cap)``. After
    ``_SCAN_STEPS`` failed counts it gallops (doubling the step) to a fitting count and
    bisects back to one whose predecessor fails, so the work stays O(log n) partitions; in
    that rare case the count can be above the first fitting one (it still fits the cap).
    """
    if not problem.tokens:
        return 0, []
    multiple = problem.multiple
    count = _round_up(_bin_lower_bound(problem.tokens, problem.cap), multiple)
    # Each group in a part of its own always fits (no group is above the cap).
    ceiling = _round_up(len(problem.tokens), multiple)
    for _ in range(_SCAN_STEPS):
        parts = _balanced_split(problem, count)
        if _fits(problem, parts):
            return count, parts
        logger.debug("%d micro-batches exceed the token cap %d; trying more", count, problem.cap)
        count += multiple
    failed, jump = count - multiple, multiple
    while True:
        jump *= 2
        count = min(failed + jump, ceiling)
        parts = _balanced_split(problem, count)
        if _fits(problem, parts):
            break
        failed = count
    logger.debug(
        "no fitting count within %d steps of the bound; bisecting in (%d, %d]",
        _SCAN_STEPS,
        failed,
        count,
    )
    while count - failed > multiple:
        middle = failed + (count - failed) // multiple // 2 * multiple
        middle_parts = _balanced_split(problem, middle)
        if _fits(problem, middle_parts):
            count, parts = middle, middle_parts
        else:
            failed = middle
    return count, parts


def _split_further(problem: _Problem, parts: list[list[int]], count: int) -> list[list[int]]:
    """Grow a fitting split to ``count`` parts by halving the heaviest divisible part.

    Halving never adds tokens to a part, so the cap still holds: this is what makes a count
    agreed across ranks (at least each rank's own count) always achievable.
    """
    filled = [part for part in parts if part]
    target = min(count, len(problem.weights))
    while len(filled) < target:
        candidates = [p for p, part in enumerate(filled) if len(part) >= 2]
        heaviest = max(candidates, key=lambda p: (sum(problem.weights[g] for g in filled[p]), -p))
        part = filled[heaviest]
        halves = get_seqlen_balanced_partitions([problem.weights[g] for g in part], 2, False)
        filled[heaviest : heaviest + 1] = [[part[i] for i in half] for half in halves]
    return filled + [[] for _ in range(count - len(filled))]


def _check_min_count(min_num_micro_batches: Any) -> int:
    if min_num_micro_batches is None:
        return 0
    # 0 is allowed: it is what the all-reduce gives when every rank has no samples.
    if (
        isinstance(min_num_micro_batches, (int, np.integer))
        and not isinstance(min_num_micro_batches, (bool, np.bool_))
        and min_num_micro_batches < 1
    ):
        if min_num_micro_batches == 0:
            return 0
        raise ValueError(f"min_num_micro_batches must be >= 0, got {int(min_num_micro_batches)}")
    return check_k_partitions(min_num_micro_batches, "min_num_micro_batches")


def plan_micro_batches(
    lengths: Any,
    max_token_len: int,
    *,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
    balance_workload: bool = True,
    order: str = "bubble",
    refine: bool | str = False,
) -> list[list[int]]:
    """Split one rank's samples into micro-batches of at most ``max_token_len`` tokens each.

    The cap is a hard guarantee. The count is the first one from the lower bound
    ``ceil(total / cap)``, in steps of ``num_micro_batches_multiple``, whose balanced split
    fits; it is then raised to ``min_num_micro_batches`` (rounded up to the multiple) if that
    is larger. The search skips the counts that bin-packing lower bounds rule out (samples
    just over half the cap need one micro-batch each), so it usually costs a few partitions.
    After 32 failed counts it gallops and bisects instead (O(log n) more partitions), and may
    then settle a little above the first fitting count; the two-step pattern below is
    unaffected, since both functions search the same way.

    Data-parallel ranks must run the same number of micro-batches. Use two steps::

        local = min_num_micro_batches_for(lengths, cap)        # this rank's own count
        agreed = all_reduce_max(local)                         # e.g. dist.all_reduce(op=MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=agreed)

    Pass the same ``force_group_size``, ``num_micro_batches_multiple`` and ``balance_workload`` to
    both calls. Every rank then gets exactly ``agreed`` (rounded up to the multiple)
    micro-batches: a count at least a rank's own is always reachable under the cap.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        max_token_len: token cap per micro-batch, an int >= 1.
        min_num_micro_batches: lower bound on the count (an int >= 0), or None.
        num_micro_batches_multiple: the count is a multiple of this (pipeline stages), or None.
        force_group_size: this many consecutive samples always share a micro-batch; the sample
            count must be divisible by it.
        balance_workload: balance by :func:`calculate_workload` (True) or by raw tokens (False).
        order: ``"bubble"`` sorts micro-batches by (workload, first index) descending and puts the
            smaller ones at both ends (``mb[::2][::-1] + mb[1::2]``) to shrink pipeline warm-up
            and cool-down bubbles; ``"none"`` keeps the partitioner's order.
        refine: as in :func:`seqbalance.get_seqlen_balanced_partitions`: refine each balanced
            split, which never raises its heaviest micro-batch by the balancing weight (with
            ``balance_workload=False``, by tokens, so a count can only fit sooner).

    Returns:
        A list of micro-batches, each an ascending list of sample indexes; every index appears
        exactly once. Micro-batches are empty only when the count constraints ask for more
        micro-batches than there are samples (groups); the caller pads those.

    Raises:
        ValueError: a sample or forced group longer than the cap, a sample count not divisible
            by ``force_group_size``, an unknown ``order``, an argument < 1.
        TypeError: a non-integer argument. OverflowError: a workload above 2**63 - 1.

    Example:
        >>> plan_micro_batches([300, 200, 100, 400], 500, balance_workload=False)
        [[2, 3], [0, 1]]
    """
    if order not in _ORDERS:
        raise ValueError(f"order must be 'bubble' or 'none', got {order!r}")
    problem = _prepare(
        lengths,
        max_token_len,
        force_group_size,
        num_micro_batches_multiple,
        balance_workload,
        refine,
    )
    minimum = _round_up(_check_min_count(min_num_micro_batches), problem.multiple)
    own_count, own_parts = _own_plan(problem)
    parts = own_parts
    if minimum > own_count:
        parts = _balanced_split(problem, minimum)
        if not _fits(problem, parts):
            parts = _split_further(problem, own_parts, minimum)
    micro_batches = [
        sorted(index for g in part for index in range(*problem.runs[g])) for part in parts
    ]
    if order == "bubble":

        def key(micro_batch: list[int]) -> tuple[int, int]:
            workload = sum(problem.sample_workloads[i] for i in micro_batch)
            return workload, (micro_batch[0] if micro_batch else -1)

        micro_batches.sort(key=key, reverse=True)
        micro_batches = micro_batches[::2][::-1] + micro_batches[1::2]
    return micro_batches


def min_num_micro_batches_for(
    lengths: Any,
    max_token_len: int,
    *,
    force_group_size: int = 1,
    num_micro_batches_multiple: int | None = None,
    balance_workload: bool = True,
    refine: bool | str = False,
) -> int:
    """The micro-batch count :func:`plan_micro_batches` would choose on its own for this rank.

    All-reduce the MAX of it across data-parallel ranks and pass the result back as
    ``min_num_micro_batches``, so every rank runs the same count::

        local = min_num_micro_batches_for(lengths, cap)
        t = torch.tensor([local]); dist.all_reduce(t, op=dist.ReduceOp.MAX)
        micro_batches = plan_micro_batches(lengths, cap, min_num_micro_batches=int(t))

    Args and errors are those of :func:`plan_micro_batches` (pass the same ``refine`` to both).
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
        balance_workload,
        refine,
    )
    return _own_plan(problem)[0]
