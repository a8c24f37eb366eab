"""Context parallelism planned per sequence: which sequences run together, split over how many ranks.

A long sequence split over ``c`` ranks (ring attention or Ulysses) puts ``ceil(L / c)`` tokens on
each; a fixed degree for every sequence wastes ranks on the short ones. `plan_context_parallel`
chooses a degree per sequence and groups sequences into steps, in a time model of compute over the
degree plus the communication that splitting exposes, and is never slower in that model than the
published greedy (Megatron-LM's first dynamic-CP scheduler, as the time-cost spec defines it) or
the scheduler Megatron-LM ships now (``next_hdp_group_packing_aware``, in two readings). The
layouts trainers read (`cp_sample_id_groups`, `cp_rank_plans`) live in ``cp_layouts``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _native
from .._deprecation import renamed_params
from .._inputs import (
    Lengths,
    _describe,
    as_float,
    as_int64_array,
    check_count,
    check_k_partitions,
    show_number,
)
from ..costs.workload import sample_costs, unit_scale

__all__ = [
    "CommCost",
    "CpPlan",
    "comm_costs",
    "cp_degrees",
    "plan_context_parallel",
]

#: ``comm=``: ``None`` (no communication), a coefficient ``κ`` (``κ · L · (c - 1) / c``), or a
#: callable ``(L, c) -> cost`` in the cost's own units.
CommCost = float | Callable[[int, int], float] | None

#: ``max_token_len`` above this reads as this (the native planner counts tokens in u64).
MAX_CAP = 2**64 - 1

#: One step: a list of groups ``(cp_size, ranks, indexes)``.
CpStep = list[tuple[int, list[int], list[int]]]

#: Steps in order.
CpPlan = list[CpStep]


def cp_degrees(world_size: int, cp_sizes: Any = None) -> list[int]:
    """The allowed CP degrees, ascending: every power of two dividing ``world_size``, or the
    ``cp_sizes`` given (each an int in ``1..world_size``; repeats are ignored).

    Sizes that are not powers of two (Megatron-LM #6801's arbitrary CP sizes) are allowed when
    given: the planner treats every allowed size alike (a sequence's share is ``ceil(L / c)``,
    a group widens to the next allowed size), and the layouts put a group of such a size on
    consecutive ranks after the power-of-two groups, which stay aligned to their sizes. A size
    need not divide ``world_size``: ranks a step cannot fill stay idle.

    Args:
        world_size: ranks per step (an int >= 1).
        cp_sizes: ``None`` or a sequence (list, tuple, 1-D array) of ints.

    Returns:
        The degrees, ascending, without repeats.

    Raises:
        TypeError: ``cp_sizes`` not a sequence of ints (a NumPy scalar or 0-d array included).
        ValueError: an empty ``cp_sizes``, or a size outside ``1..world_size`` (the message
            names it).

    Example:
        >>> cp_degrees(24), cp_degrees(8, cp_sizes=[8, 2]), cp_degrees(8, cp_sizes=[3, 5])
        ([1, 2, 4, 8], [2, 8], [3, 5])
    """
    if cp_sizes is None:
        return [1 << p for p in range(world_size.bit_length()) if world_size % (1 << p) == 0]
    if (
        isinstance(cp_sizes, (str, bytes))
        or not isinstance(cp_sizes, (Sequence, np.ndarray))
        or (isinstance(cp_sizes, np.ndarray) and cp_sizes.ndim != 1)
    ):
        raise TypeError(f"cp_sizes must be a sequence of ints, got {_describe(cp_sizes)}")
    if len(cp_sizes) == 0:
        raise ValueError("cp_sizes must name at least one CP degree, got an empty sequence")
    degrees = set()
    for position, size in enumerate(cp_sizes):
        value = check_k_partitions(size, f"cp_sizes[{position}]")
        if value > world_size:
            raise ValueError(
                f"cp_sizes[{position}] must be in 1..world_size={world_size}, got {show_number(value)}"
            )
        degrees.add(value)
    return sorted(degrees)


#: Real numbers only: a complex value would lose its imaginary part, a bool is not a cost.
_REAL = (int, float, np.integer, np.floating)


def _as_float(value: Any, name: str) -> float:
    """``value`` (a real number, not a bool) as a finite float >= 0, or a named error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _REAL):
        raise TypeError(f"{name} must be a number (int or float), got {_describe(value)}")
    number = as_float(value)
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
            f"comm={show_number(comm)} gives comm(L, c) past the largest float64 for "
            f"lengths[{position}] = {int(lengths[position])}; scale the cost and comm down"
        )
    return table


@renamed_params(max_tokens_per_rank="max_token_len")
def plan_context_parallel(
    lengths: Lengths,
    world_size: int,
    max_token_len: int,
    *,
    cost: Any = "tokens",
    comm: CommCost = None,
    cp_sizes: Sequence[int] | None = None,
    one_cp_size_per_step: bool = False,
) -> CpPlan:
    """Plan context-parallel steps: a CP degree per sequence and the sequences of every step.

    Each step is a list of groups ``(cp_size, ranks, indexes)``: the ``cp_size`` ranks (distinct
    within the step, each in ``range(world_size)``, one block of consecutive ranks) hold the
    sequences ``indexes`` (positions in ``lengths``), each split over all of them. Groups whose
    size is a power of two come first, widest first, so each starts at a multiple of its size
    (the blocks Megatron-LM creates its dynamic-CP process groups on); groups of other sizes
    (allowed through ``cp_sizes``) follow on the next consecutive ranks. Every index is in
    exactly one group; ``cp_size`` is an allowed degree; every rank holds at most
    ``max_token_len`` tokens per step, a sequence adding ``ceil(L / cp_size)``.

    The time model: a group takes ``sum(cost(L) / cp_size + comm(L, cp_size))`` on each of its
    ranks, a step its slowest group's time, a plan the sum over steps. The plan minimises that
    time and is never slower than six floors given the same cost and comm: the published greedy
    in its four readings, and the scheduler Megatron-LM ships now (``next_hdp_group_packing_aware``)
    balancing its own ``L² / c`` and balancing this cost and comm; the fastest floor's plan is
    returned when the search does not beat it. Nor is it slower than its own
    ``one_cp_size_per_step=True`` plan, a candidate kept when strictly faster (its search
    widens a whole step at once, a move the free search does not make; planning takes about
    twice as long for it). With ``one_cp_size_per_step=True`` every step's
    groups share one degree (chosen per step), for trainers that split a micro-batch with one
    CP size (verl's ``dynamic_cp_split_batch``); the floor is then one fixed degree for every
    sequence (the smallest that fits them all) placed by the published greedy. The answer is
    deterministic.

    Planning takes time near ``n log n`` for any cost, a cost that does not grow with the length
    included (the step loops skip the sequences a step cannot take; ``benches/
    bench_context_parallel.py --scaling``), and, beside the answer, memory for the
    communication table and a few arrays per allowed degree (about ``40 · degrees + 130`` bytes a
    sequence). The answer holds a list slot (8 bytes) for every rank of every group of every
    step, a tuple and two lists per group (about 200 bytes) and an int per index (32 bytes);
    rank numbers are int objects shared by every group that names them (32 bytes per rank, once).
    A plan over many ranks costs about ``8 · world_size`` bytes a step: ten one-token sequences
    on ``2**22`` ranks (ten steps over every rank) take 0.45 GB, 5,000 on 16,384 ranks 0.66 GB,
    and the call's peak stays within 11 % of that (``benches/bench_context_parallel.py
    --memory``).

    Args:
        lengths: token count of each sequence (list/array of ints >= 0); never modified.
        world_size: ranks per step (an int in ``1..2**24``).
        max_token_len: the most tokens a rank holds in one step (an int >= 1; above
            ``2**64 - 1`` it reads as ``2**64 - 1``).
        cost: what a whole sequence costs: ``"tokens"`` (default), ``"workload"``, per-sequence
            weights, or a callable on the ``int64`` lengths returning weights (`ModelCost`, a
            fitted time model such as ``TimeCost``); used as float64 (a `TimeCost` as its
            int64 nanoseconds, as every planner weighs it, and ``comm`` with it).
        comm: exposed communication of splitting, in the cost's units: ``None`` (none, so the
            largest degree always wins), ``κ`` (``κ · L · (c - 1) / c``), or a callable
            ``(L, c) -> cost`` called once per distinct ``(L, c)`` with ``c > 1`` (0 at ``c = 1``).
        cp_sizes: the allowed degrees, any ints in ``1..world_size`` (see `cp_degrees`); default
            the powers of two dividing ``world_size``.
        one_cp_size_per_step: keyword-only; one degree for all the groups of a step.

    Returns:
        The steps in order, each a list of ``(cp_size, ranks, indexes)`` tuples.

    Raises:
        TypeError, ValueError, OverflowError: a bad argument, named with its value; a
            ``ValueError`` naming the index and length of a sequence that fits no allowed degree.
        MemoryError, KeyboardInterrupt: out of memory (the plan's lists included; the next call
            works), or Ctrl-C during the plan.

    Example:
        >>> plan_context_parallel([100, 30, 20, 10], 4, 64, comm=0.1)
        [[(4, [0, 1, 2, 3], [0])], [(2, [0, 1], [1]), (2, [2, 3], [2, 3])]]
        >>> plan_context_parallel([30, 60, 30, 90], 4, 32, comm=0.1)
        [[(4, [0, 1, 2, 3], [3])], [(2, [0, 1], [1]), (1, [2], [0]), (1, [3], [2])]]
        >>> plan_context_parallel([30, 60, 30, 90], 4, 32, comm=0.1, one_cp_size_per_step=True)
        [[(2, [0, 1], [1]), (2, [2, 3], [0, 2])], [(4, [0, 1, 2, 3], [3])]]
        >>> plan_context_parallel([100, 30, 20, 10], 8, 40, comm=0.1, cp_sizes=[3, 5])
        [[(5, [0, 1, 2, 3, 4], [0]), (3, [5, 6, 7], [1, 2, 3])]]
    """
    if not isinstance(one_cp_size_per_step, (bool, np.bool_)):
        raise TypeError(
            f"one_cp_size_per_step must be True or False, got {_describe(one_cp_size_per_step)}"
        )
    values = as_int64_array(lengths, "lengths")
    world = check_count(world_size, "world_size")
    # A budget past 2**64 - 1 holds what 2**64 - 1 holds for any lengths up to 2**63 - 1.
    cap = min(check_k_partitions(max_token_len, "max_token_len"), MAX_CAP)
    degrees = cp_degrees(world, cp_sizes)
    widest = degrees[-1]
    unfit = np.flatnonzero(-(-values // widest) > cap)
    if unfit.size:
        index = int(unfit[0])
        raise ValueError(
            f"lengths[{index}] = {int(values[index])} fits no allowed CP degree: "
            f"ceil(L / {widest}) is above max_token_len={cap} (degrees {degrees})"
        )
    weights = np.asarray(sample_costs(cost, values.copy(), name="cost"), dtype=np.float64)
    if weights.size and not np.isfinite(weights).all():
        position = int(np.flatnonzero(~np.isfinite(weights))[0])
        raise ValueError(f"cost of lengths[{position}] is not finite as float64")
    # comm is in the cost's units: a TimeCost's seconds, weighed (as the cost) in nanoseconds.
    table = comm_costs(values, degrees, comm) * unit_scale(cost)
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
        "one_size" if one_cp_size_per_step else "best",
    )
    return steps
