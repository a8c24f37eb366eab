"""The one normalisation step in front of the native core and the pure-Python reference.

Everything that decides whether an input is acceptable, and the wording of every error, lives here.
The native binding only has fast paths for input that is certainly valid (a list of non-negative
ints, a 1-D integer NumPy array without negatives); anything else is handed to these functions,
which either raise the documented error or return a clean value. The reference calls the same
functions, so the two implementations differ only in how they compute.
"""

from __future__ import annotations

import array as array_module
import math
import operator
from typing import Any, Literal, NamedTuple

import numpy as np

from .._arrays import host_array, item_scalar
from ..errors import argument_error, where
from .arguments import _describe, show_number

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


def read_length(item: Any, label: str | tuple[Any, ...]) -> int:
    """One length as every length reader reads it: an int from 0 to ``2**63 - 1``.

    ``bool`` counts as 0/1 (as Python's ``sum`` counts it); NumPy integer scalars, 0-d integer
    arrays and tensors, and objects with ``__index__`` are read by value. ``label`` names the
    value in the errors: a parameter's name (``"length"``) or the path to an item
    (``("lengths", 3)``, shown as ``lengths[3]``), the error's ``loc``.

    Raises:
        TypeError: not an integer (a float, a string, None, ...).
        ValueError: a negative value.
        OverflowError: a value above ``2**63 - 1``.

    Example:
        >>> read_length(True, "length"), read_length(7, "length")
        (1, 7)
    """
    if type(item) is not int:
        # A 0-d array or tensor reads as the NumPy scalar of its value and dtype.
        item = item_scalar(item, label if isinstance(label, str) else where(label))
    if isinstance(item, (str, bytes, float, complex)) or item is None:
        raise _not_an_integer(label, item)
    try:
        value = operator.index(item)
    except TypeError:
        raise _not_an_integer(label, item) from None
    if value < 0:
        raise argument_error("too_small", label, item, minimum=0, shown=show_number(value))
    if value > MAX_VALUE:
        raise argument_error("overflow", label, item, maximum="2**63 - 1", shown=show_number(value))
    return value


def _not_an_integer(label: str | tuple[Any, ...], item: Any) -> Exception:
    return argument_error("wrong_type", label, item, expected="an integer", shown=_describe(item))


def _check_item(position: int, item: Any, name: str) -> int:
    return read_length(item, (name, position))


def _not_1d(name: str, array: Any) -> Exception:
    shown = f"an array of shape {array.shape}"
    return argument_error("not_one_dimensional", name, array, shown=shown)


def _check_array(array: np.ndarray, name: str) -> np.ndarray:
    if array.ndim != 1:
        raise _not_1d(name, array)
    kind = array.dtype.kind
    if kind == "b":
        return array.astype(np.int64)
    if kind not in "iu":
        raise argument_error(
            "wrong_dtype", name, array, expected="integers", dtype=str(array.dtype)
        )
    if kind == "i":
        negative = np.flatnonzero(array < 0)
        if negative.size:
            position = int(negative[0])
            value = int(array[position])
            raise argument_error("too_small", (name, position), value, minimum=0, shown=str(value))
    elif array.dtype.itemsize == 8:
        too_big = np.flatnonzero(array > np.uint64(MAX_VALUE))
        if too_big.size:
            position = int(too_big[0])
            value = int(array[position])
            raise argument_error(
                "overflow", (name, position), value, maximum="2**63 - 1", shown=str(value)
            )
    return array.astype(np.int64, copy=False)


def _not_a_sequence(name: str, value: Any) -> Exception:
    expected = "a sequence or 1-D array of integers"
    return argument_error("wrong_type", name, value, expected=expected, shown=_describe(value))


def as_array(seqlen_list: Any, name: str = "seqlen_list") -> np.ndarray | list[Any]:
    """The array behind ``seqlen_list``, or its items when it is a sequence of Python objects.

    The one place where array-likes are accepted: anything that is not a list or tuple is read
    by `seqbalance._arrays.host_array` (NumPy arrays of any stride, subclasses and
    ``np.memmap`` as plain arrays; ``__dlpack__`` and ``__array__`` producers such as torch
    tensors, never importing their library; an accelerator array copied to host memory once),
    and a list, tuple or 1-D object array comes back as a list of its items. Refuses strings, mappings,
    sets, masked arrays and scalars with ``TypeError``; the caller checks dtype and dimensions.
    """
    if isinstance(seqlen_list, (list, tuple)):
        return list(seqlen_list)
    if isinstance(seqlen_list, np.ma.MaskedArray):
        raise argument_error("masked_array", name, seqlen_list)
    if (
        isinstance(seqlen_list, (str, bytes, bytearray, memoryview, dict, set, frozenset))
        or seqlen_list is None
    ):
        raise _not_a_sequence(name, seqlen_list)
    array = host_array(seqlen_list, name)
    if array.ndim == 0 and not isinstance(seqlen_list, np.ndarray):
        raise _not_a_sequence(name, seqlen_list)
    seqlen_list = array
    if seqlen_list.dtype == object:
        if seqlen_list.ndim != 1:
            raise _not_1d(name, seqlen_list)
        return seqlen_list.tolist()
    return seqlen_list


#: Ints in a double-precision list are exact while their sum is: the reference sums ints exactly
#: until a float joins a set, so it agrees with double arithmetic only up to here.
MAX_INT_SUM_WITH_FLOATS = 2**53

_PRECISION_OF_DTYPE: dict[np.dtype[Any], Precision] = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "single",
    # Half precision is widened exactly to single (the reference would add in half precision).
    np.dtype(np.float16): "single",
}
_DTYPE_OF_PRECISION = {"double": np.float64, "single": np.float32}


def _float_value(position: int, value: float, name: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise argument_error("not_finite_or_negative", (name, position), value, shown=repr(value))


def _check_float_total(values: np.ndarray, name: str) -> None:
    """``OverflowError`` when the total exceeds half the largest finite value of the dtype.

    Below that, every rounded sum of the values stays finite (a rounded sum of non-negative
    values is at most twice the exact one), so the state order stays total.
    """
    limit = float(np.finfo(values.dtype).max) / 2
    with np.errstate(over="ignore"):
        rough = float(np.sum(values, dtype=np.float64))
    if rough <= limit * (1 - 2**-20):
        return
    try:
        total = math.fsum(values.tolist())  # exact, for totals near the limit
    except OverflowError:
        total = math.inf
    if total > limit:
        amount = f"to {total:.6g}" if math.isfinite(total) else f"past {2 * limit:.6g}"
        raise argument_error(
            "sum_overflow",
            name,
            total,
            amount=amount,
            dtype=str(values.dtype),
            limit=f"{limit:.6g}",
        )


def _weight_kind(position: int, item: Any, name: str) -> tuple[str, Any]:
    """Classify one list item as ``("exact", int)``, ``("double", float)`` or ``("single", f32)``."""
    if type(item) is not int and type(item) is not float:
        # A 0-d tensor (any producer, any device) reads as the NumPy scalar of its dtype.
        item = item_scalar(item, f"{name}[{position}]")
    if isinstance(item, np.floating) or (
        not isinstance(item, (int, float, np.integer)) and hasattr(item, "__array__")
    ):
        # NumPy float scalars, and 0-d arrays or tensors, by their dtype.
        try:
            array = np.asarray(item)
        except (TypeError, ValueError):
            array = None
        if array is not None and array.ndim == 0 and array.dtype.kind == "f":
            precision = _PRECISION_OF_DTYPE.get(array.dtype)
            if precision is None or array.dtype == np.float16:
                raise argument_error(
                    "scalar_in_list", (name, position), item, dtype=str(array.dtype)
                )
            value = array[()]
            _float_value(position, float(value), name)
            return precision, value
    if isinstance(item, float):
        _float_value(position, item, name)
        return "double", float(item)
    if isinstance(item, (str, bytes, complex)) or item is None:
        raise _not_a_number((name, position), item)
    try:
        number = operator.index(item)
    except TypeError:
        raise _not_a_number((name, position), item) from None
    if number < 0:
        raise argument_error(
            "too_small", (name, position), item, minimum=0, shown=show_number(number)
        )
    if number > MAX_VALUE:
        raise argument_error(
            "overflow", (name, position), item, maximum="2**63 - 1", shown=show_number(number)
        )
    return "exact", number


def _not_a_number(loc: tuple[Any, ...], item: Any) -> Exception:
    expected = "an int or a float"
    return argument_error("wrong_type", loc, item, expected=expected, shown=_describe(item))


def _weights_of_items(items: list[Any], name: str) -> Weights:
    """A list's items: ints exactly, Python floats in double, NumPy float32 scalars in single."""
    values = []
    first_at: dict[str, int] = {}
    for position, item in enumerate(items):
        kind, value = _weight_kind(position, item, name)
        first_at.setdefault(kind, position)
        values.append(value)
    if set(first_at) <= {"exact"}:
        return Weights(np.array(values, dtype=np.int64).reshape(-1), "exact")
    if "single" in first_at and len(first_at) > 1:
        single = first_at["single"]
        other = min(
            first_at["exact"] if "exact" in first_at else len(items),
            first_at.get("double", len(items)),
        )
        raise argument_error(
            "mixed_precision",
            name,
            items[other],
            first=f"{name}[{single}] is {_describe(items[single])}",
            second=f"{name}[{other}] is {_describe(items[other])}",
        )
    if "exact" in first_at:
        int_total = sum(v for v in values if isinstance(v, int))
        if int_total > MAX_INT_SUM_WITH_FLOATS:
            raise argument_error("inexact_sum", name, int_total, total=int_total)
    precision: Precision = "single" if "single" in first_at else "double"
    array = np.array(values, dtype=_DTYPE_OF_PRECISION[precision])
    _check_float_total(array, name)
    return Weights(array, precision)


def _weights_of_array(array: np.ndarray, name: str) -> Weights:
    if array.ndim != 1:
        raise _not_1d(name, array)
    if array.dtype.kind != "f":
        if array.dtype.kind not in "biu":
            raise argument_error(
                "wrong_dtype", name, array, expected="integers or floats", dtype=str(array.dtype)
            )
        checked = _check_array(array, name)
        return Weights(checked if checked.flags.aligned else checked.copy(), "exact")
    precision = _PRECISION_OF_DTYPE.get(array.dtype)
    if precision is None:
        raise argument_error("unsupported_dtype", name, array, dtype=str(array.dtype))
    bad = np.flatnonzero(~(np.isfinite(array) & (array >= 0)))
    if bad.size:
        position = int(bad[0])
        _float_value(position, float(array[position]), name)
    values = np.asarray(array, dtype=_DTYPE_OF_PRECISION[precision])
    _check_float_total(values, name)
    return Weights(values if values.flags.aligned else values.copy(), precision)


def plain_int64_array(values: Any) -> np.ndarray | None:
    """The fast path for a list: the 1-D ``int64`` array NumPy reads it as, or ``None``.

    A list that NumPy turns into non-negative 1-D ``int64`` in one go is certainly valid lengths
    or exact weights. Anything else (not a list; bools, floats, huge ints, strings, objects)
    gives ``None`` and takes the item-by-item checks, which name the offending item.
    """
    if not isinstance(values, list):
        return None
    try:
        # array('q') reads each int's own value (PyLong_AsLongLong), as the native list fast path
        # and operator.index do; NumPy's list conversion would call an int subclass's __int__,
        # so the reference and the planners could see another number than the partitioner.
        array = np.frombuffer(array_module.array("q", values), dtype=np.int64)
    except Exception:  # floats, strings, huge ints, objects: the item-by-item checks name them
        return None
    if array.size == 0 or int(array.min()) >= 0:
        return array
    return None


def normalize_weights(seqlen_list: Any, name: str = "seqlen_list") -> Weights:
    """The normalisation step at every public entry: validate ``seqlen_list`` once.

    Returns `Weights`: a 1-D aligned array and the precision the partitioners compute in,
    decided by the input's kind as the reference's own arithmetic would be (NumPy >= 2):

    * ``"exact"``: ints (``bool`` as 0/1, NumPy integer scalars, integer arrays);
    * ``"double"``: Python floats or NumPy float64 (scalars or arrays), optionally beside ints
      whose sum is at most ``2**53``;
    * ``"single"``: a float32 array, or a list whose items are all NumPy float32 scalars (or 0-d
      float32 arrays); float16 arrays are widened exactly to float32.

    Raises ``TypeError`` for non-numbers and for mixes without a defined precision (float32
    items beside other numbers, float16 scalars in a list); ``ValueError`` for NaN, infinities,
    negative values, a wrong number of dimensions, or ints past ``2**53`` beside floats;
    ``OverflowError`` for ints above ``2**63 - 1`` and float totals above half the largest
    finite value. Each message names the position and value.
    """
    array = plain_int64_array(seqlen_list)
    if array is not None:
        return Weights(array, "exact")
    items = as_array(seqlen_list, name)
    if isinstance(items, list):
        return _weights_of_items(items, name)
    return _weights_of_array(items, name)


def normalize_lengths(seqlen_list: Any, name: str = "seqlen_list") -> list[int] | np.ndarray:
    """Validate integer ``seqlen_list`` and return it as a list of ints or a 1-D ``int64`` array.

    Accepts a list or tuple of ints (``bool`` counts as 0/1, NumPy integer scalars are fine), a 1-D
    NumPy array of any integer dtype and stride, or any array-like or tensor (see `as_array`).
    Raises ``TypeError`` for
    non-integers, ``ValueError`` for negative values or a wrong number of dimensions, and
    ``OverflowError`` for values above ``2**63 - 1``; each message names the position and value.
    """
    items = as_array(seqlen_list, name)
    if isinstance(items, list):
        return [_check_item(i, item, name) for i, item in enumerate(items)]
    checked = _check_array(items, name)
    return checked if checked.flags.aligned else checked.copy()


def lengths_as_list(seqlen_list: Any, name: str = "seqlen_list") -> list[int]:
    """`normalize_lengths`, always as a list of Python ints (what the reference wants)."""
    values = normalize_lengths(seqlen_list, name)
    if isinstance(values, np.ndarray):
        return values.tolist()
    return values


def as_int64_array(values: Any, name: str = "lengths") -> np.ndarray:
    """Return ``values`` validated as a 1-D ``int64`` array of non-negative integers.

    Raises the ``TypeError``/``ValueError``/``OverflowError`` of ``normalize_lengths``.
    """
    array = plain_int64_array(values)
    if array is not None:
        return array
    normalized = normalize_lengths(values, name)
    return np.asarray(normalized, dtype=np.int64).reshape(-1)
