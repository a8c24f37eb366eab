"""The native partitioners: drop-in replacements for the pure-Python ones in RL trainers.

Each function validates its arguments exactly as :mod:`seqbalance.reference` does, then runs the
Rust core with the GIL released. Results are identical to the reference's: the same partitions,
in the same order, with the same indexes inside.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from . import _native
from ._inputs import (
    EqualSize,
    check_equal_size,
    check_k_partitions,
    check_refine,
    normalize_weights,
)
from .refine import apply_refine_ids

#: What ``equal_size`` takes: ``False`` (free counts), ``True`` (equal counts) or ``"nearly"``.

__all__ = [
    "karmarkar_karp",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "partition_ids",
]


def karmarkar_karp(seqlen_list: Any, k_partitions: int, equal_size: EqualSize) -> list[list[int]]:
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

    Returns:
        ``k_partitions`` lists of item indexes, heaviest part first; inside a part, indexes are in
        the order the algorithm merged them (use :func:`get_seqlen_balanced_partitions` for
        sorted ones).

    Raises:
        PartitionError: fewer items than parts, or ``equal_size`` with ``n % k != 0``.
        ValueError: ``k_partitions < 1``, a negative, NaN or infinite value, ints summing past
            ``2**53`` beside floats, or an array that is not 1-D.
        TypeError: a non-integer ``k_partitions``, an item that is not a number, float32
            items mixed with other numbers (no reference precision), or an ``equal_size`` other
            than the above (``None``, the string ``"False"``, ``2``).
        OverflowError: an int above ``2**63 - 1``, or floats totalling more than half the
            largest finite value of their precision.

    >>> karmarkar_karp([10, 20, 30, 40], 2, True)
    [[3, 0], [2, 1]]
    >>> karmarkar_karp([10, 20, 30, 40, 50], 2, "nearly")
    [[0, 3, 2], [4, 1]]
    """
    return _native.karmarkar_karp(seqlen_list, k_partitions, equal_size)


def _refined(
    seqlen_list: Any, k_partitions: Any, equal_size: Any, mode: bool | str, *, as_ids: bool
) -> list[list[int]] | np.ndarray:
    """The refined partition: lists as ``get_seqlen_balanced_partitions``, or ``partition_ids``."""
    # Validate once (in the reference's order: k, then the values) and hand the same array to the
    # partitioner and the refinement; the start goes over as one array of ids, not as lists.
    # True and "nearly" both keep every part's count (so "nearly" keeps the multiset of counts).
    k = check_k_partitions(k_partitions)
    keep_counts = check_equal_size(equal_size) is not False
    weights = normalize_weights(seqlen_list)
    ids = _native.partition_ids(weights.values, k, equal_size)
    return apply_refine_ids(weights, ids, k, keep_counts, mode, as_ids=as_ids)


def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: int, equal_size: EqualSize, *, refine: bool | str = False
) -> list[list[int]]:
    """Balanced partition of item indexes, each part sorted ascending, heaviest part first.

    verl's and TransferQueue's entry point: the same parts as :func:`karmarkar_karp`, in the same
    order (samplers hand part ``r`` to data-parallel rank ``r``), with each part's indexes sorted.
    Arguments and errors as in :func:`karmarkar_karp`.

    Args:
        refine: ``False`` (default) returns exactly the reference's answer. ``True`` improves it
            by a bounded local search (item exchanges between parts, keeping every part's count
            under ``equal_size=True`` or ``"nearly"``), so the heaviest part is never heavier
            and usually lighter;
            ``"exact"`` adds a complete search for small inputs (at most 32 items). Refined parts
            still come heaviest first, indexes ascending inside. See
            :func:`seqbalance.refine_partitions`.

    >>> get_seqlen_balanced_partitions([10, 20, 30, 40], 2, True)
    [[0, 3], [1, 2]]
    """
    if refine is False:
        return _native.get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size)
    mode = check_refine(refine)
    if not mode:
        return _native.get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size)
    return cast(
        "list[list[int]]", _refined(seqlen_list, k_partitions, equal_size, mode, as_ids=False)
    )


def greedy_partition(seqlen_list: Any, k_partitions: int, equal_size: bool) -> list[list[int]]:
    """verl's greedy helper: each item, in input order, onto the part with the smallest sum.

    Ties go to the lowest part number. With ``equal_size`` each value is compared with
    ``sum(values) + 1`` added, which keeps the counts equal. Indexes inside a part are ascending.
    Arguments and errors as in :func:`karmarkar_karp`; float weights replay the reference's
    arithmetic, and where its rounding breaks the equal counts ``PartitionError`` is raised.
    ``equal_size="nearly"`` is a ``ValueError`` (not supported here).

    >>> greedy_partition([5, 1, 1, 4, 2], 2, False)
    [[0, 4], [1, 2, 3]]
    """
    return _native.greedy_partition(seqlen_list, k_partitions, equal_size)


def partition_ids(
    seqlen_list: Any,
    k_partitions: int,
    *,
    equal_size: EqualSize = False,
    refine: bool | str = False,
) -> np.ndarray:
    """For every item, the number of its part, numbered as :func:`get_seqlen_balanced_partitions`.

    The fast path for large inputs and for indexing tensors: no Python object per item.
    Arguments and errors as in :func:`karmarkar_karp`; ``refine`` as in
    :func:`get_seqlen_balanced_partitions` (the refined parts, numbered heaviest first).

    Returns:
        A 1-D ``int64`` array of length ``len(seqlen_list)`` with values in ``[0, k_partitions)``.

    >>> partition_ids([10, 20, 30, 40], 2, equal_size=True).tolist()
    [0, 1, 1, 0]
    """
    if refine is False:
        return _native.partition_ids(seqlen_list, k_partitions, equal_size)
    mode = check_refine(refine)
    if not mode:
        return _native.partition_ids(seqlen_list, k_partitions, equal_size)
    return cast(np.ndarray, _refined(seqlen_list, k_partitions, equal_size, mode, as_ids=True))
