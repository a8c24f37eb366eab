"""The native partitioners: drop-in replacements for the pure-Python ones in RL trainers.

Each function validates its arguments exactly as `seqbalance.reference` does, then runs the
Rust core with the GIL released. Results are identical to the reference's: the same partitions,
in the same order, with the same indexes inside.

One native call per operation: the extension reads arguments that are certainly valid (a list of
non-negative ints or of finite floats, a 1-D numeric NumPy array, a bool ``equal_size``, ...)
itself and runs the whole request, refinement included, in one core call. Anything else it hands,
inside the same call, to `seqbalance._inputs.request`, which raises the documented error or
normalises the arguments for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native
from ._deprecation import renamed_params
from ._inputs import EqualSize, Lengths, as_int64_array
from .costs.workload import Cost, sample_costs

#: What ``equal_size`` takes: ``False`` (free counts), ``True`` (equal counts) or ``"nearly"``.

__all__ = [
    "karmarkar_karp",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "partition_ids",
]


def karmarkar_karp(
    seqlen_list: Lengths, k_partitions: int, equal_size: EqualSize, *, cost: Cost | None = None
) -> list[list[int]]:
    """Split items into ``k_partitions`` parts of nearly equal sums (largest differencing method).

    Args:
        seqlen_list: non-negative weights: a list or tuple of ints or floats, a 1-D integer or
            float NumPy array of any width and stride, or an array-like such as a CPU torch
            tensor. Ints are summed exactly; floats as the reference sums them: Python floats and
            float64 in double precision, float32 arrays and lists of ``np.float32`` scalars in
            single precision (float16 widened to float32), each set's sum item by item in
            insertion order.
        k_partitions: number of parts, ``1 <= k_partitions <= len(seqlen_list)``.
        equal_size: ``True`` seeds with sorted chunks of ``k_partitions`` so every part gets
            ``n / k_partitions`` items (requires ``n % k_partitions == 0``); ``"nearly"`` gives
            every part ``n // k_partitions`` or one more item, for any ``n``: the equal-size
            rules run with ``(-n) % k_partitions`` placeholders of value 0 (indexes below every
            real one), which are then dropped, nothing re-ordered; it is identical to ``True``
            when ``k_partitions`` divides ``n``. ``False`` leaves counts free. Python or NumPy
            bools and the ints 0/1 are accepted; anything else is a ``TypeError``.
        cost: ``None`` (default): the values are the weights, the reference's behaviour. Else
            ``seqlen_list`` holds token lengths (non-negative ints) and each item weighs what
            ``cost`` gives its length, as every planner's ``cost=`` does: ``"tokens"``,
            ``"workload"``, per-item weights, a callable on the lengths such as `ModelCost`,
            `TimeCost` or `TransformerCost` (called once, on an ``int64`` array). The answer is
            exactly that of the same call on those weights
            (``seqbalance.costs.sample_costs(cost, lengths)``).

    Returns:
        ``k_partitions`` lists of item indexes, heaviest part first; inside a part, indexes are in
        the order the algorithm merged them (use `get_seqlen_balanced_partitions` for
        sorted ones).

    Raises:
        PartitionError: fewer items than parts, or ``equal_size`` with ``n % k != 0``.
        ValueError: ``k_partitions < 1``, a negative, NaN or infinite value, ints summing past
            ``2**53`` beside floats, or an array that is not 1-D; with ``cost``, an unknown cost
            name or a cost giving another number of weights than there are lengths.
        TypeError: a non-integer ``k_partitions``, an item that is not a number, float32
            items mixed with other numbers (no reference precision), or an ``equal_size`` other
            than the above (``None``, the string ``"False"``, ``2``).
        OverflowError: an int above ``2**63 - 1``, or floats totalling more than half the
            largest finite value of their precision.

    >>> karmarkar_karp([10, 20, 30, 40], 2, True)
    [[3, 0], [2, 1]]
    >>> karmarkar_karp([10, 20, 30, 40, 50], 2, "nearly")
    [[0, 3, 2], [4, 1]]
    >>> karmarkar_karp([1000, 4000, 3000, 1000], 2, False, cost="workload")
    [[0, 2, 3], [1]]
    """
    if cost is not None:
        seqlen_list = _weights(seqlen_list, cost)
    return _native.karmarkar_karp(seqlen_list, k_partitions, equal_size)


def _weights(seqlen_list: Any, cost: Any, name: str = "seqlen_list") -> np.ndarray:
    """What each length weighs under ``cost``: the planners' `sample_costs` on the lengths read
    as ``int64``. Computed first, so errors come in the order of the same call on the weights."""
    return sample_costs(cost, as_int64_array(seqlen_list, name))


def get_seqlen_balanced_partitions(
    seqlen_list: Lengths,
    k_partitions: int,
    equal_size: EqualSize,
    *,
    refine: bool | str = False,
    cost: Cost | None = None,
) -> list[list[int]]:
    """Balanced partition of item indexes, each part sorted ascending, heaviest part first.

    verl's and TransferQueue's entry point: the same parts as `karmarkar_karp`, in the same
    order (samplers hand part ``r`` to data-parallel rank ``r``), with each part's indexes sorted.
    Arguments (``cost`` included) and errors as in `karmarkar_karp`.

    Args:
        refine: ``False`` (default) returns exactly the reference's answer. ``True`` improves it
            by a bounded local search (item exchanges between parts, keeping every part's count
            under ``equal_size=True`` or ``"nearly"``), so the heaviest part is never heavier
            and usually lighter;
            ``"exact"`` adds a complete search for small inputs (at most 32 items). Refined parts
            still come heaviest first, indexes ascending inside. See
            `seqbalance.refine_partitions`.

    >>> get_seqlen_balanced_partitions([10, 20, 30, 40], 2, True)
    [[0, 3], [1, 2]]
    >>> get_seqlen_balanced_partitions([1000, 4000, 3000, 1000], 2, False, cost="workload")
    [[0, 2, 3], [1]]
    """
    if cost is not None:
        seqlen_list = _weights(seqlen_list, cost)
    return _native.get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size, refine)


def greedy_partition(
    seqlen_list: Lengths, k_partitions: int, equal_size: bool, *, cost: Cost | None = None
) -> list[list[int]]:
    """verl's greedy helper: each item, in input order, onto the part with the smallest sum.

    Ties go to the lowest part number. With ``equal_size`` each value is compared with
    ``sum(values) + 1`` added, which keeps the counts equal. Indexes inside a part are ascending.
    Arguments (``cost`` included) and errors as in `karmarkar_karp`; float weights replay the
    reference's arithmetic, and where its rounding breaks the equal counts ``PartitionError`` is
    raised.
    ``equal_size="nearly"`` is a ``ValueError`` (not supported here).

    >>> greedy_partition([5, 1, 1, 4, 2], 2, False)
    [[0, 4], [1, 2, 3]]
    """
    if cost is not None:
        seqlen_list = _weights(seqlen_list, cost)
    return _native.greedy_partition(seqlen_list, k_partitions, equal_size)


@renamed_params(seqlen_list="lengths")
def partition_ids(
    lengths: Lengths,
    k_partitions: int,
    *,
    equal_size: EqualSize = False,
    refine: bool | str = False,
    cost: Cost | None = None,
) -> npt.NDArray[np.int64]:
    """For every item, the number of its part, numbered as `get_seqlen_balanced_partitions`.

    The fast path for large inputs and for indexing tensors: no Python object per item.
    Arguments (``cost`` included) and errors as in `karmarkar_karp`; ``refine`` as in
    `get_seqlen_balanced_partitions` (the refined parts, numbered heaviest first).

    Returns:
        A 1-D ``int64`` array of length ``len(lengths)`` with values in ``[0, k_partitions)``.

    >>> partition_ids([10, 20, 30, 40], 2, equal_size=True).tolist()
    [0, 1, 1, 0]
    """
    if cost is not None:
        lengths = _weights(lengths, cost, "lengths")
    return _native.partition_ids(lengths, k_partitions, equal_size, refine)
