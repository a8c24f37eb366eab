"""Context parallelism planned per sequence: which sequences run together, split over how many ranks.

A long sequence split over ``c`` ranks (ring attention or Ulysses) puts ``ceil(L / c)`` tokens on
each; a fixed degree for every sequence wastes ranks on the short ones. `plan_context_parallel`
chooses a degree per sequence and groups sequences into steps, in a time model of compute over the
degree plus the communication that splitting exposes, and is never slower in that model than the
published greedy (Megatron-LM's dynamic-CP scheduler, as the time-cost spec defines it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _native
from .._inputs import Lengths, _describe, as_int64_array, check_count, check_k_partitions
from ..costs.workload import sample_costs

__all__ = [
    "CommCost",
    "CpPlan",
    "comm_costs",
    "cp_degrees",
    "cp_rank_plans",
    "cp_sample_id_groups",
    "plan_context_parallel",
]

#: ``comm=``: ``None`` (no communication), a coefficient ``κ`` (``κ · L · (c - 1) / c``), or a
#: callable ``(L, c) -> cost`` in the cost's own units.
CommCost = float | Callable[[int, int], float] | None

#: ``max_tokens_per_rank`` above this reads as this (the native planner counts tokens in u64).
MAX_CAP = 2**64 - 1

#: One step: a list of groups ``(cp_size, ranks, indexes)``.
CpStep = list[tuple[int, list[int], list[int]]]

#: Steps in order.
CpPlan = list[CpStep]


def cp_degrees(world_size: int, cp_sizes: Any = None) -> list[int]:
    """The allowed CP degrees, ascending: every power of two dividing ``world_size``, or the
    ``cp_sizes`` given (each a power of two dividing ``world_size``; repeats are ignored).

    Raises:
        TypeError: ``cp_sizes`` not a sequence of ints.
        ValueError: an empty ``cp_sizes``, or a size that is not a power of two dividing
            ``world_size`` (the message names it).

    Example:
        >>> cp_degrees(24), cp_degrees(8, cp_sizes=[8, 2])
        ([1, 2, 4, 8], [2, 8])
    """
    if cp_sizes is None:
        return [1 << p for p in range(world_size.bit_length()) if world_size % (1 << p) == 0]
    if isinstance(cp_sizes, (str, bytes)) or not isinstance(cp_sizes, (Sequence, np.ndarray)):
        raise TypeError(f"cp_sizes must be a sequence of ints, got {_describe(cp_sizes)}")
    if len(cp_sizes) == 0:
        raise ValueError("cp_sizes must name at least one CP degree, got an empty sequence")
    degrees = set()
    for position, size in enumerate(cp_sizes):
        value = check_k_partitions(size, f"cp_sizes[{position}]")
        if value & (value - 1) or world_size % value:
            raise ValueError(
                f"cp_sizes[{position}] must be a power of two dividing world_size={world_size}, "
                f"got {value}"
            )
        degrees.add(value)
    return sorted(degrees)


#: Real numbers only: a complex value would lose its imaginary part, a bool is not a cost.
_REAL = (int, float, np.integer, np.floating)


def _as_float(value: Any, name: str) -> float:
    """``value`` (a real number, not a bool) as a finite float >= 0, or a named error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _REAL):
        raise TypeError(f"{name} must be a number (int or float), got {_describe(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {_describe(value)}")
    return number


def comm_costs(lengths: np.ndarray, degrees: Sequence[int], comm: Any) -> np.ndarray:
    """The communication of every sequence at every degree: a ``float64`` array of shape
    ``(len(lengths), len(degrees))``, 0 at degree 1.

    ``comm=None`` is 0; a number ``κ`` gives ``κ · L · (c - 1) / c`` (evaluated left to right in
    float64); a callable is called once per distinct ``(L, c)`` with ``c > 1``, as Python ints.

    Raises:
        TypeError: ``comm`` of another type, or a callable returning a non-number (a complex
            or a bool included).
        ValueError: a negative or non-finite ``κ`` or returned value (naming ``comm(L, c)``).
        OverflowError: ``κ · L`` past the largest float64 (naming the length).

    Example:
        >>> comm_costs(np.array([8]), [1, 2, 4], 0.5).tolist()
        [[0.0, 2.0, 3.0]]
    """
    table = np.zeros((lengths.size, len(degrees)), dtype=np.float64)
    if comm is None:
        return table
    if callable(comm):
        distinct, inverse = np.unique(lengths, return_inverse=True)
        for j, degree in enumerate(degrees):
            if degree == 1:
                continue
            values = np.array(
                [
                    _as_float(comm(length, degree), f"comm({length}, {degree})")
                    for length in distinct.tolist()
                ],
                dtype=np.float64,
            )
            table[:, j] = values[inverse.reshape(-1)]
        return table
    if isinstance(comm, (bool, np.bool_)) or not isinstance(comm, _REAL):
        raise TypeError(
            f"comm must be None, a number (cost per token) or a callable (L, c) -> cost, "
            f"got {_describe(comm)}"
        )
    kappa = _as_float(comm, "comm")
    tokens = lengths.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for j, degree in enumerate(degrees):
            table[:, j] = kappa * tokens * (degree - 1) / degree
    if not np.isfinite(table).all():
        position = int(np.flatnonzero(~np.isfinite(table).all(axis=1))[0])
        raise OverflowError(
            f"comm={comm!r} gives comm(L, c) past the largest float64 for "
            f"lengths[{position}] = {int(lengths[position])}; scale the cost and comm down"
        )
    return table


def plan_context_parallel(
    lengths: Lengths,
    world_size: int,
    max_tokens_per_rank: int,
    *,
    cost: Any = "tokens",
    comm: CommCost = None,
    cp_sizes: Sequence[int] | None = None,
) -> CpPlan:
    """Plan context-parallel steps: a CP degree per sequence and the sequences of every step.

    Each step is a list of groups ``(cp_size, ranks, indexes)``: the ``cp_size`` ranks (distinct
    within the step, each in ``range(world_size)``; a block of consecutive ranks aligned to its
    size) hold the sequences ``indexes`` (positions in ``lengths``), each split over all of them.
    Every index is in exactly one group; ``cp_size`` is an allowed degree; every rank holds at most
    ``max_tokens_per_rank`` tokens per step, a sequence adding ``ceil(L / cp_size)``.

    The time model: a group takes ``sum(cost(L) / cp_size + comm(L, cp_size))`` on each of its
    ranks, a step its slowest group's time, a plan the sum over steps. The plan minimises that
    time and is never slower than the published greedy (the fastest of its four readings, given
    the same cost and comm; that plan is returned when the search does not beat it). The answer
    is deterministic.

    Args:
        lengths: token count of each sequence (list/array of ints >= 0); never modified.
        world_size: ranks per step (an int in ``1..2**24``).
        max_tokens_per_rank: the most tokens a rank holds in one step (an int >= 1; above
            ``2**64 - 1`` it reads as ``2**64 - 1``).
        cost: what a whole sequence costs: ``"tokens"`` (default), ``"workload"``, per-sequence
            weights, or a callable on the ``int64`` lengths returning weights (`ModelCost`, a
            fitted time model such as ``TimeCost``); used as float64.
        comm: exposed communication of splitting, in the cost's units: ``None`` (none, so the
            largest degree always wins), ``κ`` (``κ · L · (c - 1) / c``), or a callable
            ``(L, c) -> cost`` called once per distinct ``(L, c)`` with ``c > 1`` (0 at ``c = 1``).
        cp_sizes: the allowed degrees (powers of two dividing ``world_size``); default all of
            them.

    Returns:
        The steps in order, each a list of ``(cp_size, ranks, indexes)`` tuples.

    Raises:
        TypeError, ValueError, OverflowError: a bad argument, named with its value; a
            ``ValueError`` naming the index and length of a sequence that fits no allowed degree.
        MemoryError, KeyboardInterrupt: out of memory, or Ctrl-C during the plan.

    Example:
        >>> plan_context_parallel([100, 30, 20, 10], 4, 64, comm=0.1)
        [[(4, [0, 1, 2, 3], [0])], [(2, [0, 1], [1]), (2, [2, 3], [2, 3])]]
    """
    values = as_int64_array(lengths, "lengths")
    world = check_count(world_size, "world_size")
    # A budget past 2**64 - 1 holds what 2**64 - 1 holds for any lengths up to 2**63 - 1.
    cap = min(check_k_partitions(max_tokens_per_rank, "max_tokens_per_rank"), MAX_CAP)
    degrees = cp_degrees(world, cp_sizes)
    widest = degrees[-1]
    unfit = np.flatnonzero(-(-values // widest) > cap)
    if unfit.size:
        index = int(unfit[0])
        raise ValueError(
            f"lengths[{index}] = {int(values[index])} fits no allowed CP degree: "
            f"ceil(L / {widest}) is above max_tokens_per_rank={cap} (degrees {degrees})"
        )
    weights = np.asarray(sample_costs(cost, values.copy(), "cost"), dtype=np.float64)
    if weights.size and not np.isfinite(weights).all():
        position = int(np.flatnonzero(~np.isfinite(weights))[0])
        raise ValueError(f"cost of lengths[{position}] is not finite as float64")
    table = comm_costs(values, degrees, comm)
    # Every time the model adds up (a group, a step, the plan) is at most the sum over sequences
    # of their cost plus their largest comm: keep it finite, so no comparison sees an infinity.
    if values.size:
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.sum(weights + table.max(axis=1)))
        if not total <= np.finfo(np.float64).max / 2:
            raise OverflowError(
                f"cost and comm of the lengths sum to {total:g}, past half the largest float64; "
                "scale them down"
            )
    steps, _, _ = _native._plan_context_parallel(
        values,
        weights,
        table.reshape(-1),
        np.asarray(degrees, dtype=np.int64),
        world,
        cap,
    )
    return steps


def _check_step(step: CpStep, world_size: int, position: int) -> None:
    """Raise unless every group of ``step`` holds ``cp_size`` ranks in ``range(world_size)``, no
    rank in two groups: a layout built from anything else would drop or misplace samples."""
    used: set[int] = set()
    for cp_size, ranks, _ in step:
        for value in (cp_size, *ranks):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(
                    f"step {position} has a group (cp_size {cp_size!r}, ranks {ranks!r}) "
                    f"with {_describe(value)} where an int belongs"
                )
        if len(ranks) != cp_size:
            raise ValueError(
                f"step {position} has a group of cp_size {cp_size} on {len(ranks)} ranks {ranks}"
            )
        for rank in ranks:
            if not 0 <= rank < world_size:
                raise ValueError(
                    f"step {position} puts a group of cp_size {cp_size} on rank {rank}, "
                    f"outside range(world_size={world_size})"
                )
            if rank in used:
                raise ValueError(f"step {position} puts two groups on rank {rank}")
            used.add(rank)


def _laid_out(step: CpStep) -> CpStep:
    """The step's groups widest first, each on the next block of consecutive ranks."""
    laid: CpStep = []
    rank = 0
    for cp_size, _, indexes in sorted(step, key=lambda group: -group[0]):
        laid.append((cp_size, list(range(rank, rank + cp_size)), list(indexes)))
        rank += cp_size
    return laid


def _widened(step: CpStep, world_size: int, position: int, degrees: Sequence[int] | None) -> CpStep:
    """``step`` with its idle ranks given to its narrowest groups, laid out again: each in turn
    doubles (as Megatron-LM's scheduler fills empty ranks), or with ``degrees`` (the allowed CP
    sizes) moves up to the next allowed size."""
    sizes = [cp_size for cp_size, _, _ in step]
    idle = world_size - sum(sizes)
    if not sizes:
        raise ValueError(f"step {position} has no group to widen into its {idle} idle ranks")
    while idle > 0:
        narrowest = sizes.index(min(sizes))
        size = sizes[narrowest]
        if degrees is None:
            wider = 2 * size if world_size % (2 * size) == 0 else None
            remedy = "plan with cp_sizes whose sizes tile world_size"
        else:
            wider = next((c for c in degrees if c > size), None)
            remedy = f"no larger size in cp_sizes {list(degrees)} fits them"
        if wider is None or wider - size > idle:
            raise ValueError(
                f"step {position} leaves {idle} of {world_size} ranks idle and its narrowest "
                f"group (cp_size {size}) cannot widen into them; {remedy}"
            )
        sizes[narrowest] = wider
        idle -= wider - size
    return _laid_out(
        [(size, [], indexes) for size, (_, _, indexes) in zip(sizes, step, strict=True)]
    )


def cp_sample_id_groups(
    plan: CpPlan,
    world_size: int,
    *,
    widen_idle: bool = False,
    cp_sizes: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """A plan in Megatron-LM's dynamic-CP layout: per step, per DP×CP rank, the sample indexes it
    holds.

    This is what Megatron-LM's packing schedulers return from ``get_groups_and_subsamples``
    (``sample_id_groups[micro_batch][dp_cp_rank]``): a sequence split over a group appears in the
    list of each of its ranks, and a rank's ``local_cp_size`` is the number of ranks whose list
    holds its samples. Groups take consecutive ranks, widest first, so each is a block aligned
    to its size (how dynamic CP process groups are laid out). A rank the plan leaves idle gets an
    empty list; with ``widen_idle=True`` the step's narrowest groups double into the idle ranks
    instead (fewer tokens per rank, more communication), since some trainers need every rank to
    hold a sample. Given ``cp_sizes`` (the sizes the plan was made with), every group's size must
    be one of them and a widened group moves up to the next of them, never to another size.

    Raises:
        ValueError: a group whose ranks leave ``range(world_size)``, are not ``cp_size`` of
            them, or overlap another group's in the step; a group size not in ``cp_sizes``; or
            idle ranks that no group can widen into (``widen_idle=True``).
        TypeError: ``cp_sizes`` not a sequence of ints.

    Example:
        >>> plan = [[(2, [0, 1], [0]), (1, [2], [1, 2])]]
        >>> cp_sample_id_groups(plan, 4)
        [[[0], [0], [1, 2], []]]
        >>> cp_sample_id_groups(plan, 4, widen_idle=True)
        [[[0], [0], [1, 2], [1, 2]]]
        >>> cp_sample_id_groups([[(1, [0], [0])]], 4, widen_idle=True, cp_sizes=[1, 4])
        [[[0], [0], [0], [0]]]
    """
    world = check_count(world_size, "world_size")
    degrees = None if cp_sizes is None else cp_degrees(world, cp_sizes)
    layout = []
    for position, step in enumerate(plan):
        _check_step(step, world, position)
        if degrees is not None:
            for cp_size, _, _ in step:
                if cp_size not in degrees:
                    raise ValueError(
                        f"step {position} has a group of cp_size {cp_size}, not in "
                        f"cp_sizes {degrees}"
                    )
        groups = _widened(step, world, position, degrees) if widen_idle else step
        ranks: list[list[int]] = [[] for _ in range(world)]
        for _, members, indexes in groups:
            for rank in members:
                ranks[rank] = list(indexes)
        layout.append(ranks)
    return layout


def cp_rank_plans(plan: CpPlan, world_size: int) -> list[list[tuple[int, int, list[int]] | None]]:
    """A plan split per rank: for each rank, for each step, ``(local_cp_size, cp_rank, indexes)``
    (its group's size, its position in the group, the samples it holds a share of), or ``None``
    when the rank is idle in that step. This is what a driver sends each worker when it, not the
    workers, schedules (NeMo-RL's Ray driver): every worker resolves its CP group from the size
    and its block of ranks.

    Raises:
        ValueError: ``world_size`` not an int in ``1..2**24``, or a group whose ranks leave
            ``range(world_size)``, are not ``cp_size`` of them, or overlap another group's.

    Example:
        >>> cp_rank_plans([[(2, [0, 1], [0]), (1, [2], [1, 2])]], 3)
        [[(2, 0, [0])], [(2, 1, [0])], [(1, 0, [1, 2])]]
    """
    world = check_count(world_size, "world_size")
    per_rank: list[list[tuple[int, int, list[int]] | None]] = [[] for _ in range(world)]
    for position, step in enumerate(plan):
        _check_step(step, world, position)
        held: list[tuple[int, int, list[int]] | None] = [None] * world
        for cp_size, members, indexes in step:
            for cp_rank, rank in enumerate(members):
                held[rank] = (cp_size, cp_rank, list(indexes))
        for rank in range(world):
            per_rank[rank].append(held[rank])
    return per_rank
