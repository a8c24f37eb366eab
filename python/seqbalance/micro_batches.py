"""Micro-batches under a hard token cap, balanced by cost, in a pipeline-friendly order.

Also the data-parallel-wide plan: which rank trains which samples in which micro-batches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import PartitionError
from ._inputs import MAX_VALUE, _describe, check_equal_size, check_k_partitions
from ._lengths import as_int64_array
from .costs import (
    check_pad_to_multiple_of,
    group_sums,
    pad_lengths,
    resolve_cost,
    sample_costs,
)
from .groups import uid_runs
from .partition import get_seqlen_balanced_partitions, partition_ids
from .refine import check_refine

__all__ = [
    "MAX_MICRO_BATCHES",
    "min_num_micro_batches_for",
    "plan_dp_micro_batches",
    "plan_micro_batches",
]

logger = logging.getLogger(__name__)

_ORDERS = ("bubble", "none")

#: The largest micro-batch count (and ``num_micro_batches_multiple``) the planners accept.
MAX_MICRO_BATCHES = 2**24


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


def _check_count(value: Any, name: str) -> int:
    count = check_k_partitions(value, name)
    if count > MAX_MICRO_BATCHES:
        raise ValueError(f"{name} must be <= 2**24 (MAX_MICRO_BATCHES), got {count}")
    return count


def _check_multiple(num_micro_batches_multiple: Any) -> int:
    if num_micro_batches_multiple is None:
        return 1
    return _check_count(num_micro_batches_multiple, "num_micro_batches_multiple")


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
    multiple = _check_multiple(num_micro_batches_multiple)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    starts = _group_bounds(values.size, force_group_size, uid_list)
    sizes = np.diff(np.append(starts, values.size))
    padded = pad_lengths(values, pad)
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
    weights = group_sums(sample_weights, starts)
    return _Problem(starts, sizes, tokens, weights, sample_weights, cap, multiple, refine)


def _balanced_split(problem: _Problem, count: int) -> np.ndarray:
    """The part of every group in a balanced split into ``count`` parts (an int64 array).

    Parts are numbered as :func:`get_seqlen_balanced_partitions` orders them (heaviest first);
    with fewer groups than ``count`` the parts from ``n_groups`` on stay empty.
    """
    filled = min(count, problem.n_groups)
    if not filled:
        return np.zeros(0, dtype=np.int64)
    return partition_ids(problem.weights, filled, equal_size=False, refine=problem.refine)


def _part_sums(values: np.ndarray, ids: np.ndarray, count: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per part (no part's sum passes the checked total)."""
    sums = np.zeros(count, dtype=np.int64)
    np.add.at(sums, ids, values)
    return sums


def _fits(problem: _Problem, ids: np.ndarray) -> bool:
    if ids.size == 0:
        return True
    return bool(_part_sums(problem.tokens, ids, int(ids.max()) + 1).max() <= problem.cap)


# The Fekete-Schepers bounds below use u_k for k = 2.._DFF_MAX: enough for items down to
# cap / (_DFF_MAX + 1); the scan's step budget covers what the bounds miss.
_DFF_MAX = 16

# Counts tried one by one above the lower bound before the search gallops: each try is a full
# partition, and the first fitting count is usually within a few steps of the bound.
_SCAN_STEPS = 32


def _bin_lower_bound(tokens: Any, cap: int) -> int:
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


def _own_plan(problem: _Problem) -> tuple[int, np.ndarray]:
    """The first count from the lower bound, in steps of the multiple, whose split fits.

    Returns the count and the part of every group. The scan starts from
    :func:`_bin_lower_bound`, rounded up to the multiple: no smaller count can fit, so this is
    the first fitting count from ``ceil(total / cap)``. After ``_SCAN_STEPS`` failed counts it
    gallops (doubling the step) to a fitting count and bisects back to one whose predecessor
    fails, so the work stays O(log n) partitions; in that rare case the count can be above the
    first fitting one (it still fits the cap).
    """
    if not problem.n_groups:
        return 0, np.zeros(0, dtype=np.int64)
    multiple = problem.multiple
    count = _round_up(_bin_lower_bound(problem.tokens, problem.cap), multiple)
    # Each group in a part of its own always fits (no group is above the cap).
    ceiling = _round_up(problem.n_groups, multiple)
    for _ in range(_SCAN_STEPS):
        ids = _balanced_split(problem, count)
        if _fits(problem, ids):
            return count, ids
        logger.debug("%d micro-batches exceed the token cap %d; trying more", count, problem.cap)
        count += multiple
    failed, jump = count - multiple, multiple
    while True:
        jump *= 2
        count = min(failed + jump, ceiling)
        ids = _balanced_split(problem, count)
        if _fits(problem, ids):
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
        middle_ids = _balanced_split(problem, middle)
        if _fits(problem, middle_ids):
            count, ids = middle, middle_ids
        else:
            failed = middle
    return count, ids


def _parts(ids: np.ndarray, count: int) -> list[list[int]]:
    """Group indexes per part, ascending, from the part of every group."""
    if not count:
        return []
    order = np.argsort(ids, kind="stable")
    bounds = np.cumsum(np.bincount(ids, minlength=count))[:-1]
    return [part.tolist() for part in np.split(order, bounds)]


def _split_further(problem: _Problem, parts: list[list[int]], count: int) -> list[list[int]]:
    """Grow a fitting split to ``count`` parts by halving the heaviest divisible part.

    Halving never adds tokens to a part, so the cap still holds: this is what makes a count
    agreed across ranks (at least each rank's own count) always achievable. Empty parts last.
    """
    weights = problem.weights.tolist()
    filled = [part for part in parts if part]
    target = min(count, problem.n_groups)
    while len(filled) < target:
        candidates = [p for p, part in enumerate(filled) if len(part) >= 2]
        heaviest = max(candidates, key=lambda p: (sum(weights[g] for g in filled[p]), -p))
        part = filled[heaviest]
        halves = get_seqlen_balanced_partitions([weights[g] for g in part], 2, False)
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
    return _check_count(min_num_micro_batches, "min_num_micro_batches")


def _check_order(order: Any) -> str:
    if not isinstance(order, str) or order not in _ORDERS:
        raise ValueError(f"order must be 'bubble' or 'none', got {order!r}")
    return order


def _plan_parts(problem: _Problem, minimum: int) -> list[list[int]]:
    """Group indexes per micro-batch: the own plan, grown to ``minimum`` parts if that is more."""
    own_count, own_ids = _own_plan(problem)
    if minimum <= own_count:
        return _parts(own_ids, own_count)
    ids = _balanced_split(problem, minimum)
    if _fits(problem, ids):
        return _parts(ids, minimum)
    return _split_further(problem, _parts(own_ids, own_count), minimum)


def _micro_batches(problem: _Problem, parts: list[list[int]], order: str) -> list[list[int]]:
    """Sample indexes per micro-batch (ascending), ordered; empty micro-batches last."""
    starts, sizes, weights = problem.starts, problem.sizes, problem.weights
    filled = [np.asarray(part, dtype=np.int64) for part in parts if part]
    empty = len(parts) - len(filled)
    if order == "bubble":
        # By (cost, first index) descending, then the smaller ones to both ends.
        keys = [(int(weights[part].sum()), int(starts[part].min())) for part in filled]
        ranked = sorted(range(len(filled)), key=keys.__getitem__, reverse=True)
        ranked = ranked[::2][::-1] + ranked[1::2]
        filled = [filled[p] for p in ranked]
    batches = []
    for part in filled:
        groups = np.sort(starts[part]) if part.size > 1 else starts[part]
        if sizes[part].max() == 1:
            batches.append(groups.tolist())
        else:
            group_sizes = sizes[part][np.argsort(starts[part])]
            offsets = np.arange(int(group_sizes.sum())) - np.repeat(
                np.cumsum(group_sizes) - group_sizes, group_sizes
            )
            batches.append((np.repeat(groups, group_sizes) + offsets).tolist())
    return batches + [[] for _ in range(empty)]


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
        refine: as in :func:`seqbalance.get_seqlen_balanced_partitions`: refine each balanced
            split, which never raises its heaviest micro-batch by the balancing weight (with
            ``cost="tokens"``, by tokens, so a count can only fit sooner).
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
    order = _check_order(order)
    problem = _prepare(
        lengths,
        max_token_len,
        force_group_size,
        num_micro_batches_multiple,
        resolve_cost(cost, balance_workload, "workload"),
        pad_to_multiple_of,
        refine,
    )
    minimum = _round_up(_check_min_count(min_num_micro_batches), problem.multiple)
    return _micro_batches(problem, _plan_parts(problem, minimum), order)


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
    return _own_plan(problem)[0]


# ------------------------------------------------------------ one plan for all ranks


def _subproblem(problem: _Problem, groups: np.ndarray) -> _Problem:
    """The problem restricted to some groups (ascending), as one rank sees it."""
    return _Problem(
        problem.starts[groups],
        problem.sizes[groups],
        problem.tokens[groups],
        problem.weights[groups],
        problem.sample_weights[:0],
        problem.cap,
        problem.multiple,
        problem.refine,
    )


@dataclass(frozen=True)
class _DpPlan:
    ranks: list[np.ndarray]  # rank -> group indexes, ascending
    parts: list[list[list[int]]]  # rank -> micro-batch -> positions in the rank's groups
    heaviest: int  # the heaviest rank's cost
    count: int  # micro-batches per rank
    heaviest_micro_batch: int  # the heaviest micro-batch's cost

    def score(self) -> tuple[int, int, int]:
        return self.heaviest, self.count, self.heaviest_micro_batch


def _fill_empty_ranks(problem: _Problem, ranks: list[np.ndarray]) -> list[np.ndarray]:
    """Give every empty rank one group: the lightest group of a rank holding several.

    Only zero-cost groups can leave a rank empty in a balanced split, and moving a group to an
    empty rank never makes the heaviest rank heavier.
    """
    ranks = [np.asarray(rank, dtype=np.int64) for rank in ranks]
    for r in range(len(ranks)):
        if ranks[r].size:
            continue
        donor = max(
            (d for d in range(len(ranks)) if ranks[d].size >= 2),
            key=lambda d: (ranks[d].size, -d),
        )
        lightest = int(np.argmin(problem.weights[ranks[donor]]))
        ranks[r] = ranks[donor][lightest : lightest + 1]
        ranks[donor] = np.delete(ranks[donor], lightest)
    return ranks


def _dp_plan(problem: _Problem, ranks: Sequence[Any], minimum: int) -> _DpPlan:
    """Micro-batches for a given rank split: the common count is the largest own count."""
    ranks = _fill_empty_ranks(problem, [np.sort(np.asarray(r, dtype=np.int64)) for r in ranks])
    subproblems = [_subproblem(problem, rank) for rank in ranks]
    count = max([minimum] + [_own_plan(sub)[0] for sub in subproblems])
    parts = [_plan_parts(sub, count) for sub in subproblems]
    heaviest_micro_batch = max(
        (
            int(sub.weights[part].sum())
            for sub, rank in zip(subproblems, parts, strict=True)
            for part in rank
        ),
        default=0,
    )
    heaviest = max((int(sub.weights.sum()) for sub in subproblems), default=0)
    return _DpPlan(ranks, parts, heaviest, count, heaviest_micro_batch)


def plan_dp_micro_batches(
    lengths: Any,
    dp_size: int,
    max_token_len: int,
    *,
    cost: Any = "workload",
    equal_size: bool | str = False,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
    uid_list: Any = None,
    pad_to_multiple_of: int = 1,
    order: str = "bubble",
    refine: bool | str = False,
) -> list[list[list[int]]]:
    """One plan for every data-parallel rank: ``plan[rank][micro_batch] -> sample indexes``.

    For a single controller that holds the whole step (verl's driver, slime's, NeMo-RL's):
    which rank trains which samples, and in which micro-batches, in one call.

    Guarantees: every micro-batch's token sum is at most ``max_token_len`` (lengths padded to
    ``pad_to_multiple_of``); every index appears exactly once; **every rank has the same number
    of micro-batches**, at least ``min_num_micro_batches`` and a multiple of
    ``num_micro_batches_multiple`` (a rank with fewer samples gets empty micro-batches, last);
    groups stay whole (``force_group_size`` consecutive samples, or runs of equal
    ``uid_list`` entries, of any size); no rank is without samples; ``equal_size`` constrains
    the number of groups per rank (``True``: equal, ``"nearly"``: within one, ``False``: free),
    which is the number of samples when groups are single samples or all of one size.

    Objective: the lightest heaviest rank by ``cost`` (gradient sync waits for it), then the
    fewest micro-batches, then balanced micro-batches within each rank. The result is never
    worse on the first two than the two-step recipe built from this library's functions::

        ranks = get_seqlen_balanced_partitions(group_costs, dp_size, equal_size)
        count = max(min_num_micro_batches_for(rank's lengths, cap, ...) for each rank)
        plan[r] = plan_micro_batches(rank's lengths, cap, min_num_micro_batches=count, ...)

    How it does better: it plans that recipe and a second candidate whose rank split is refined
    (the local search of ``refine=True``, which never makes the heaviest rank heavier and
    usually makes it lighter), plans the micro-batches of both knowing the cap, and keeps the
    refined one when it is at least as good on both the heaviest rank and the count (then on
    the heaviest micro-batch). Every rank is planned with the common count directly, so no
    all-reduce round trip is needed.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        dp_size: number of data-parallel ranks, an int >= 1.
        max_token_len: token cap per micro-batch, an int >= 1.
        cost: what balancing weighs, as in :func:`plan_micro_batches` (default ``"workload"``).
        equal_size: ``False``, ``True`` or ``"nearly"`` (see above); ``True`` and ``"nearly"``
            need groups of one size.
        min_num_micro_batches, num_micro_batches_multiple, force_group_size,
            pad_to_multiple_of, order, refine: as in :func:`plan_micro_batches`.
        uid_list: per-sample group ids (consecutive equal ids form a group), an alternative to
            ``force_group_size``.

    Returns:
        ``dp_size`` ranks, heaviest first; each a list of the same number of micro-batches,
        each an ascending list of sample indexes.

    Raises:
        ValueError: a sample or group over the cap, fewer groups than ranks (a
            :class:`~seqbalance.PartitionError`), a group count ``equal_size=True`` cannot split
            evenly, groups of different sizes with ``equal_size``, an argument < 1, a count
            above ``MAX_MICRO_BATCHES``.
        TypeError: non-integer arguments, float cost weights, both ``uid_list`` and
            ``force_group_size``.

    Example:
        >>> plan_dp_micro_batches([300, 200, 100, 400, 50, 250], 2, 500, cost="tokens")
        [[[3], [1, 4]], [[2, 5], [0]]]
    """
    ranks_count = check_k_partitions(dp_size, "dp_size")
    order = _check_order(order)
    equal = check_equal_size(equal_size)
    problem = _prepare(
        lengths,
        max_token_len,
        force_group_size,
        num_micro_batches_multiple,
        cost,
        pad_to_multiple_of,
        refine,
        uid_list,
    )
    minimum = _round_up(_check_min_count(min_num_micro_batches), problem.multiple)
    if problem.n_groups < ranks_count:
        raise PartitionError(
            f"number of groups ({problem.n_groups}) is smaller than dp_size ({ranks_count})"
        )
    if equal and problem.n_groups and int(problem.sizes.min()) != int(problem.sizes.max()):
        raise ValueError(
            f"equal_size={equal!r} counts samples per rank, but the groups differ in size "
            f"({int(problem.sizes.min())} to {int(problem.sizes.max())} samples); "
            "pass equal_size=False"
        )
    if equal is True and problem.n_groups % ranks_count:
        raise PartitionError(
            f"number of groups ({problem.n_groups}) is not divisible by dp_size ({ranks_count}) "
            "with equal_size=True; pass equal_size='nearly' for counts within one"
        )
    # With a divisible count "nearly" is exactly True.
    partition_equal: Any = equal if problem.n_groups % ranks_count else bool(equal)
    recipe = _dp_plan(
        problem,
        get_seqlen_balanced_partitions(
            problem.weights, ranks_count, partition_equal, refine=problem.refine
        ),
        minimum,
    )
    best = recipe
    if problem.refine is False and ranks_count > 1:
        refined = _dp_plan(
            problem,
            get_seqlen_balanced_partitions(
                problem.weights, ranks_count, partition_equal, refine=True
            ),
            minimum,
        )
        if (
            refined.heaviest <= recipe.heaviest
            and refined.count <= recipe.count
            and refined.score() < recipe.score()
        ):
            best = refined
    logger.debug(
        "planned %d groups over %d ranks x %d micro-batches",
        problem.n_groups,
        ranks_count,
        best.count,
    )
    plan = []
    for rank, parts in zip(best.ranks, best.parts, strict=True):
        sub = _subproblem(problem, rank)
        plan.append(_micro_batches(sub, parts, order))
    return plan
