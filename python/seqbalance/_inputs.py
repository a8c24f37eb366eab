"""The one normalisation step in front of the native core and the pure-Python reference.

Everything that decides whether an input is acceptable, and the wording of every error, lives here.
The native binding only has fast paths for input that is certainly valid (a list of non-negative
ints, a 1-D integer NumPy array without negatives); anything else is handed to these functions,
which either raise the documented error or return a clean value. The reference calls the same
functions, so the two implementations differ only in how they compute.
"""

from __future__ import annotations

import operator
from typing import Any, Literal, NamedTuple

import numpy as np

from ._errors import PartitionError

__all__ = [
    "MAX_COUNT",
    "MAX_VALUE",
    "check_count_bound",
    "Weights",
    "as_array",
    "check_k_partitions",
    "check_shape",
    "normalize_lengths",
    "normalize_weights",
    "lengths_as_list",
]

#: How a partitioner adds weights: ``"exact"`` (integers, exact sums), ``"double"`` (float64)
#: or ``"single"`` (float32), each exactly as the reference computes with such values.
Precision = Literal["exact", "double", "single"]


class Weights(NamedTuple):
    """Validated weights: what the normalisation step hands to every partitioner.

    ``values`` is a 1-D, aligned NumPy array whose dtype matches ``precision``: ``int64`` for
    ``"exact"``, ``float64`` for ``"double"``, ``float32`` for ``"single"``. Refinement and the
    planners take a ``Weights`` as it is and never validate the original argument again.
    """

    values: np.ndarray
    precision: Precision


#: Largest accepted value: lengths are non-negative 64-bit signed integers.
MAX_VALUE = 2**63 - 1

#: Largest accepted count that sizes an allocation without being bounded by the input (micro-batch
#: counts and multiples, optimizer steps, data-parallel sizes). A count above the number of items
#: is valid (the extra parts are empty), so without this bound a typo such as ``10**12`` would
#: allocate ``10**12`` empty lists before anything else could go wrong.
MAX_COUNT = 2**24


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_k_partitions(k_partitions: Any, name: str = "k_partitions") -> int:
    """Return ``k_partitions`` as an int >= 1, or raise ``TypeError``/``ValueError``."""
    if isinstance(k_partitions, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {_describe(k_partitions)}")
    if isinstance(k_partitions, (int, np.integer)):
        k = int(k_partitions)
    else:
        raise TypeError(f"{name} must be an int, got {_describe(k_partitions)}")
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    return k


def check_count_bound(count: int, name: str) -> int:
    """Return ``count`` (an already-checked int), or raise ``ValueError`` when above ``2**24``."""
    if count > MAX_COUNT:
        raise ValueError(f"{name} must be <= 2**24 ({MAX_COUNT}), got {count}")
    return count


def check_shape(n_items: int, k_partitions: int, equal_size: bool) -> None:
    """Raise :class:`PartitionError` when ``n_items`` items cannot go into ``k_partitions`` parts."""
    if n_items < k_partitions:
        raise PartitionError(
            f"number of items ({n_items}) is smaller than k_partitions ({k_partitions})"
        )
    if equal_size and n_items % k_partitions != 0:
        raise PartitionError(
            f"number of items ({n_items}) is not divisible by k_partitions ({k_partitions}) "
            "with equal_size=True"
        )


def _check_item(position: int, item: Any, name: str) -> int:
    if isinstance(item, (str, bytes, float, complex)) or item is None:
        raise TypeError(f"{name}[{position}] must be an integer, got {_describe(item)}")
    try:
        value = operator.index(item)
    except TypeError:
        raise TypeError(f"{name}[{position}] must be an integer, got {_describe(item)}") from None
    if value < 0:
        raise ValueError(f"{name}[{position}] must be >= 0, got {value}")
    if value > MAX_VALUE:
        raise OverflowError(f"{name}[{position}] must be <= 2**63 - 1, got {value}")
    return value


def _check_array(array: np.ndarray, name: str) -> np.ndarray:
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {array.shape}")
    kind = array.dtype.kind
    if kind == "b":
        return array.astype(np.int64)
    if kind not in "iu":
        raise TypeError(f"{name} must hold integers, got an array of dtype {array.dtype}")
    if kind == "i":
        negative = np.flatnonzero(array < 0)
        if negative.size:
            position = int(negative[0])
            raise ValueError(f"{name}[{position}] must be >= 0, got {int(array[position])}")
    elif array.dtype.itemsize == 8:
        too_big = np.flatnonzero(array > np.uint64(MAX_VALUE))
        if too_big.size:
            position = int(too_big[0])
            raise OverflowError(
                f"{name}[{position}] must be <= 2**63 - 1, got {int(array[position])}"
            )
    return array.astype(np.int64, copy=False)


def as_array(seqlen_list: Any, name: str = "seqlen_list") -> np.ndarray | list[Any]:
    """The array behind ``seqlen_list``, or its items when it is a sequence of Python objects.

    The one place where array-likes are accepted: a NumPy array is returned as it is, anything
    NumPy can view as an array (``__array__``; torch is never imported) is converted, and a
    list, tuple or 1-D object array comes back as a list of its items. Refuses strings, mappings,
    sets, masked arrays and scalars with ``TypeError``; the caller checks dtype and dimensions.
    """
    if isinstance(seqlen_list, (list, tuple)):
        return list(seqlen_list)
    if isinstance(seqlen_list, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array; pass {name}.compressed() or {name}.filled(0) instead"
        )
    if (
        isinstance(seqlen_list, (str, bytes, bytearray, memoryview, dict, set, frozenset))
        or seqlen_list is None
    ):
        raise TypeError(
            f"{name} must be a sequence or 1-D array of integers, got {_describe(seqlen_list)}"
        )
    if not isinstance(seqlen_list, np.ndarray):
        try:
            converted = np.asarray(seqlen_list)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(
                f"{name} must be a sequence or 1-D array of integers, got {_describe(seqlen_list)}"
            ) from exc
        if converted.ndim == 0:
            raise TypeError(
                f"{name} must be a sequence or 1-D array of integers, got {_describe(seqlen_list)}"
            )
        seqlen_list = converted
    if seqlen_list.dtype == object:
        if seqlen_list.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {seqlen_list.shape}")
        return seqlen_list.tolist()
    return seqlen_list


def normalize_weights(seqlen_list: Any, name: str = "seqlen_list") -> Weights:
    """The normalisation step at every public entry: validate ``seqlen_list`` once.

    Returns :class:`Weights`: a 1-D aligned array and the precision the partitioners compute in.
    Raises the documented ``TypeError``/``ValueError``/``OverflowError``, each naming the
    position and value.
    """
    if isinstance(seqlen_list, list):
        # Fast path: a list NumPy reads as non-negative int64 in one go is certainly valid
        # (bools, floats, huge ints, strings and objects take the item-by-item path below).
        try:
            array = np.asarray(seqlen_list)
        except (TypeError, ValueError, OverflowError):
            array = None
        if (
            array is not None
            and array.dtype == np.int64
            and array.ndim == 1
            and (array.size == 0 or int(array.min()) >= 0)
        ):
            return Weights(array, "exact")
    items = as_array(seqlen_list, name)
    if isinstance(items, list):
        values = np.array([_check_item(i, item, name) for i, item in enumerate(items)], np.int64)
        return Weights(values.reshape(-1), "exact")
    checked = _check_array(items, name)
    # The native core reads aligned memory only; an unaligned view is copied once here.
    return Weights(checked if checked.flags.aligned else checked.copy(), "exact")


def normalize_lengths(seqlen_list: Any, name: str = "seqlen_list") -> list[int] | np.ndarray:
    """Validate integer ``seqlen_list`` and return it as a list of ints or a 1-D ``int64`` array.

    Accepts a list or tuple of ints (``bool`` counts as 0/1, NumPy integer scalars are fine), a 1-D
    NumPy array of any integer dtype and stride, or anything NumPy can view as one (for example a
    CPU torch tensor, through ``__array__``; torch is never imported). Raises ``TypeError`` for
    non-integers, ``ValueError`` for negative values or a wrong number of dimensions, and
    ``OverflowError`` for values above ``2**63 - 1``; each message names the position and value.
    """
    items = as_array(seqlen_list, name)
    if isinstance(items, list):
        return [_check_item(i, item, name) for i, item in enumerate(items)]
    checked = _check_array(items, name)
    return checked if checked.flags.aligned else checked.copy()


def lengths_as_list(seqlen_list: Any, name: str = "seqlen_list") -> list[int]:
    """:func:`normalize_lengths`, always as a list of Python ints (what the reference wants)."""
    values = normalize_lengths(seqlen_list, name)
    if isinstance(values, np.ndarray):
        return values.tolist()
    return values
