"""Argument checks shared by the samplers: ranks, sizes, bounds and the ready indexes themselves.

Every check raises before a sampler touches its state, with a message naming the argument and the
value, so a refused call leaves the sampler exactly as it was.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Sequence
from numbers import Integral, Number
from typing import Any

import numpy as np

from .._inputs import _describe, check_k_partitions
from .._inputs import check_count as check_allocating_count

__all__ = [
    "as_int",
    "check_batch_index",
    "check_hashable",
    "check_batch_size",
    "check_cache_bound",
    "check_count",
    "check_dp_rank",
    "check_positive",
    "check_ready_indexes",
]


def as_int(value: Any, name: str) -> int:
    """Return ``value`` as a Python int; ``bool``, floats, strings and ``None`` raise ``TypeError``."""
    if (
        isinstance(value, (bool, np.bool_))
        or value is None
        or isinstance(value, (float, str, bytes))
    ):
        raise TypeError(f"{name} must be an int, got {_describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {_describe(value)}") from None


def check_positive(value: Any, name: str) -> int:
    """Return ``value`` as an int > 0, else ``TypeError``/``ValueError("<name> must be positive, got …")``.

    TransferQueue's own wording, kept for the arguments its samplers take
    (``n_samples_per_prompt``, ``dp_size``) so that the drop-in samplers refuse them as the
    originals do (TransferQueue's tests check the words); the arguments seqbalance adds go
    through `seqbalance._inputs` (``must be >= 1``).
    """
    number = as_int(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {number}")
    return number


def check_count(value: Any, name: str) -> int:
    """An int from 1 to ``2**24`` (the value sizes per-rank tables), in the wording of
    `seqbalance._inputs.check_count`; any integer type `as_int` takes is accepted."""
    return check_allocating_count(as_int(value, name), name)


def check_dp_rank(dp_rank: Any) -> int:
    """Return ``dp_rank`` as an int >= 0.

    A negative rank is refused rather than used as a list index, which would silently hand the
    caller the last rank's share.
    """
    rank = as_int(dp_rank, "dp_rank")
    if rank < 0:
        raise ValueError(f"dp_rank {rank} must be greater than or equal to 0")
    return rank


def check_batch_size(batch_size: Any) -> int:
    """Return ``batch_size`` as an int >= 0, else ``TypeError``/``ValueError``."""
    size = as_int(batch_size, "batch_size")
    if size < 0:
        raise ValueError(f"batch_size must be >= 0, got {size}")
    return size


def check_cache_bound(max_cached_batches: Any) -> int | None:
    """``None`` (unbounded) or an int >= 1 (worded as `seqbalance._inputs` words it)."""
    if max_cached_batches is None:
        return None
    return check_k_partitions(
        as_int(max_cached_batches, "max_cached_batches"), "max_cached_batches"
    )


def _bad_index(position: int, item: Any) -> TypeError | ValueError:
    if isinstance(item, (bool, np.bool_)) or not hasattr(item, "__index__"):
        return TypeError(f"ready_indexes[{position}] must be an int, got {_describe(item)}")
    return ValueError(
        f"ready_indexes[{position}] must be a non-negative index, got {operator.index(item)}"
    )


def check_ready_indexes(ready_indexes: Any) -> list[int]:
    """Return ``ready_indexes`` as a list of distinct non-negative Python ints, or raise.

    A controller bug or a retried put can list an index twice; handing that list on would give one
    sample to two ranks, or twice to one. So a duplicate is a ``ValueError`` naming the index, and
    so is a negative index; a non-integer (``bool`` included) is a ``TypeError`` naming its
    position. Accepts a list, tuple, range or other sequence, or a 1-D integer NumPy array; any
    other object (a set, a generator, a string) is a ``TypeError``: its order or its end is
    unknown.

    Example:
        >>> check_ready_indexes([3, 1, 2])
        [3, 1, 2]
        >>> check_ready_indexes([3, 1, 3])
        Traceback (most recent call last):
        ...
        ValueError: ready_indexes lists index 3 more than once (positions 0 and 2)
    """
    if isinstance(ready_indexes, np.ndarray):
        if ready_indexes.ndim != 1 or ready_indexes.dtype.kind not in "iu":
            raise TypeError(
                "ready_indexes must be a 1-D integer array, got an array of dtype "
                f"{ready_indexes.dtype} and shape {ready_indexes.shape}"
            )
        values = ready_indexes.tolist()
    elif isinstance(ready_indexes, list):
        values = ready_indexes
    elif isinstance(ready_indexes, Sequence) and not isinstance(
        ready_indexes, (str, bytes, bytearray)
    ):
        values = list(ready_indexes)
    else:
        raise TypeError(f"ready_indexes must be a list of int, got {_describe(ready_indexes)}")
    # The common case, a list of Python ints, is checked in bulk; anything else item by item.
    if not all(type(item) is int for item in values):
        converted = []
        for position, item in enumerate(values):
            if isinstance(item, (bool, np.bool_)) or not hasattr(item, "__index__"):
                raise _bad_index(position, item)
            converted.append(operator.index(item))
        values = converted
    if values and min(values) < 0:
        position = next(p for p, item in enumerate(values) if item < 0)
        raise _bad_index(position, values[position])
    if len(set(values)) != len(values):
        first_seen: dict[int, int] = {}
        for position, index in enumerate(values):
            if index in first_seen:
                raise ValueError(
                    f"ready_indexes lists index {index} more than once "
                    f"(positions {first_seen[index]} and {position})"
                )
            first_seen[index] = position
    return values if values is not ready_indexes else list(values)


def check_batch_index(batch_index: Any) -> Hashable:
    """Return ``batch_index`` as a cache key: an int (NumPy ints become Python ints), or any other
    hashable value that is not a number (a str, bytes, None, a tuple).

    A float is refused even when it holds a whole number: ``nan`` never equals itself, so every
    call would miss the cache and reserve a new split, and ``1.0`` would share a cache entry with
    ``1`` while ranking apart from it for eviction. A bool is a flag, not a position.

    Raises:
        TypeError: a bool, a float or another non-integer number, or an unhashable value.

    Example:
        >>> check_batch_index(3), check_batch_index("warm-up")
        (3, 'warm-up')
        >>> check_batch_index(float("nan"))
        Traceback (most recent call last):
        ...
        TypeError: batch_index must be an int, a str or None, got nan (float)
    """
    if isinstance(batch_index, (bool, np.bool_)) or (
        isinstance(batch_index, Number) and not isinstance(batch_index, Integral)
    ):
        raise TypeError(f"batch_index must be an int, a str or None, got {_describe(batch_index)}")
    if isinstance(batch_index, Integral):
        return operator.index(batch_index)
    return check_hashable(batch_index, "batch_index")


def check_hashable(value: Any, name: str) -> Hashable:
    """Return ``value`` when it can be a cache key, else ``TypeError`` naming ``name``."""
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{name} must be hashable (a cache key), got {_describe(value)}") from None
    return value
