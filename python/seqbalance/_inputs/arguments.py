"""Every check of a scalar argument (counts, k, ``equal_size``, ``refine``, choices) and its wording.

Each condition has one message, whichever function it is raised from: a count above ``2**24`` reads
the same from ``plan_micro_batches`` as from ``partition_ids``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence, Set
from typing import Any, Literal, Protocol, SupportsIndex

import numpy as np
import numpy.typing as npt

from ..errors import PartitionError, argument_error

#: Largest accepted count that sizes an allocation without being bounded by the input (micro-batch
#: counts and multiples, optimizer steps, data-parallel sizes). A count above the number of items
#: is valid (the extra parts are empty), so without this bound a typo such as ``10**12`` would
#: allocate ``10**12`` empty lists before anything else could go wrong.
MAX_COUNT = 2**24

#: The ``equal_size`` value asking for counts within one of each other.
NEARLY = "nearly"


class SupportsDLPack(Protocol):
    """A tensor that exports itself through DLPack (torch, JAX, CuPy, ...)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


class SupportsArray(Protocol):
    """An object NumPy reads through ``__array__``."""

    def __array__(self, *args: Any, **kwargs: Any) -> Any: ...


#: What the partitioners take as lengths or weights, for type checkers: a sequence of ints
#: (``SupportsIndex``: Python and NumPy ints, 0-d integer tensors) or of floats, a NumPy array,
#: or a tensor (``__array__`` or ``__dlpack__``). A ``str`` is none of these.
Lengths = (
    Sequence[SupportsIndex] | Sequence[float] | npt.NDArray[Any] | SupportsArray | SupportsDLPack
)

#: What ``equal_size`` may be once checked: equal counts, free counts, or counts within one.
EqualSize = bool | Literal["nearly"]


def _describe(value: Any) -> str:
    """``value`` for an error message: its ``repr`` cut to 60 characters and its type. An int
    beyond float64 is shown by its size (`show_number`: ``repr`` refuses ints past 4,300
    digits), and a value whose ``repr`` fails by its type alone."""
    try:
        text = show_number(value) if isinstance(value, int) else repr(value)
    except Exception:  # a repr that raises (a huge int inside a container, a broken __repr__)
        text = "a value that cannot be shown"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def as_float(value: Any) -> float:
    """``float(value)``, or ``inf`` (``-inf``) for an int beyond float64's range.

    Python ints have no bound, and ``float(10**400)`` raises a bare ``OverflowError``; as an
    infinity the caller's own "positive and finite" check refuses it by name, as it refuses
    ``float("inf")``. Show such a value with `show_number`, not as the infinity.

    Examples:
        >>> as_float(3), as_float(10**400), as_float(-(10**400))
        (3.0, inf, -inf)
    """
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def show_number(value: Any) -> str:
    """A number as an error message shows it: ``repr``, except an int beyond float64, shown by
    its size (its digits would fill the message, and ``str`` refuses ints past 4,300 digits).

    Examples:
        >>> show_number(0.5), show_number(np.int64(-3))
        ('0.5', '-3')
        >>> show_number(10**400)
        'an integer of 401 digits (beyond float64)'
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not math.isfinite(as_float(value)):
        try:
            digits = f"{len(str(abs(value)))} digits"
        except ValueError:  # past the interpreter's int-to-str digit limit
            digits = f"more than {sys.get_int_max_str_digits():,} digits"
        sign = "a negative integer" if value < 0 else "an integer"
        return f"{sign} of {digits} (beyond float64)"
    return repr(value)


def check_per_item(values: Any, name: str, what: str) -> None:
    """Raise unless ``values`` can hold one entry per item, in order.

    That is a sized, ordered collection: a list, tuple, range, array or tensor. Refused: strings
    and bytes (their characters are not ids), mappings and sets (no order, or not the items), and
    anything without a length, such as an iterator or a generator (possibly endless: reading it
    to count its entries could exhaust memory). The one check of every per-item argument that is
    not a length or a weight (``keys=``, ``uid_list=``), with one wording. An array (not of
    objects) must be 1-D and hold no NaN or NaT (see `check_key`).

    Raises:
        TypeError: not a sized, ordered collection (``what`` names its entries).
        ValueError: an array of more than one dimension, or one holding a NaN or NaT.

    Example:
        >>> check_per_item(iter("ab"), "keys", "hashables")
        Traceback (most recent call last):
        ...
        seqbalance.errors.ArgumentTypeError: keys must be a sequence or 1-D array of hashables, got <str_ascii_iterator ...
    """
    if (
        values is None
        or isinstance(values, (str, bytes, bytearray, memoryview, Mapping, Set))
        or not hasattr(values, "__len__")
    ):
        expected = f"a sequence or 1-D array of {what}"
        raise argument_error("wrong_type", name, values, expected=expected, shown=_describe(values))
    if isinstance(values, np.ndarray) and values.dtype != object:
        if values.ndim != 1:
            raise argument_error("not_one_dimensional", name, values, shown=f"shape {values.shape}")
        # Read as NumPy holds them (`tolist` would turn NaT into None, a key like any other).
        not_self_equal = np.flatnonzero(values != values)
        if not_self_equal.size:
            first = int(not_self_equal[0])
            check_key(values[first], (name, first))


def check_key(key: Any, name: str | tuple[Any, ...]) -> None:
    """Raise ``ValueError`` for a key or group id that does not equal itself (a NaN).

    Keys and ids are compared as dict keys are: equal values are one key whatever their type
    (``1``, ``1.0`` and ``True`` are one key). A NaN equals nothing, itself included, so a
    list of NaNs would be one key per object and an array of them one key in all; either
    answer would be a guess, so a NaN (or anything else that does not equal itself) is refused.

    Raises:
        ValueError: ``key`` does not equal itself (``name``, a parameter's name or the path to
            an item, ``("keys", 3)``, says where it is).

    Example:
        >>> check_key(float("nan"), ("keys", 3))
        Traceback (most recent call last):
        ...
        seqbalance.errors.ArgumentValueError: keys[3] is nan (float), which does not equal itself (a NaN): it cannot be matched with any other key or id
    """
    try:
        equal = bool(key == key)
    except (TypeError, ValueError):  # pandas.NA and the like: not even a truth value
        equal = False
    if not equal:
        raise argument_error("not_self_equal", name, key, shown=_describe(key))


def check_k_partitions(k_partitions: Any, name: str = "k_partitions") -> int:
    """Return ``k_partitions`` as an int >= 1, or raise ``TypeError``/``ValueError``."""
    if isinstance(k_partitions, (bool, np.bool_)) or not isinstance(
        k_partitions, (int, np.integer)
    ):
        raise argument_error(
            "wrong_type", name, k_partitions, expected="an int", shown=_describe(k_partitions)
        )
    k = int(k_partitions)
    if k < 1:
        raise argument_error("too_small", name, k_partitions, minimum=1, shown=show_number(k))
    return k


#: ``max_sequences`` above this reads as this: no input has as many items, so neither limit binds.
MAX_SEQUENCES_READ = 2**63 - 1


def check_max_sequences(max_sequences: Any) -> int | None:
    """Return ``max_sequences`` as an int >= 1 (``None`` stays None: no limit), or raise.

    Any int >= 1 is a valid limit. One at or above the number of items never binds, so it
    plans exactly as no limit would; a value above ``2**63 - 1`` (``2**64``, a ``--max-sequences
    99999999999999999999``) is read as ``2**63 - 1``, which the native code takes and which is
    as unbounded for every input.

    Raises:
        TypeError: not an int (a bool, a float, a string).
        ValueError: below 1.

    Example:
        >>> check_max_sequences(2**64) == 2**63 - 1, check_max_sequences(8)
        (True, 8)
    """
    if max_sequences is None:
        return None
    return min(check_k_partitions(max_sequences, "max_sequences"), MAX_SEQUENCES_READ)


def check_count_bound(count: int, name: str) -> int:
    """Return ``count`` (an already-checked int), or raise ``ValueError`` when above ``2**24``."""
    if count > MAX_COUNT:
        raise argument_error(
            "too_large", name, count, maximum=f"2**24 ({MAX_COUNT})", shown=show_number(count)
        )
    return count


def check_equal_size(equal_size: Any, name: str = "equal_size") -> EqualSize:
    """Return ``equal_size`` as ``True``, ``False`` or ``"nearly"``, or raise ``TypeError``.

    Accepted: Python and NumPy bools, the ints 0 and 1 (Python or NumPy integers; some callers
    pass them), and the string ``"nearly"``. Anything else -- ``None``, the string ``"False"``,
    ``2`` -- is a ``TypeError`` naming the argument and the value: the pure-Python partitioners
    took its truthiness, so ``"False"`` silently meant ``True``.

    >>> check_equal_size(1), check_equal_size("nearly")
    (True, 'nearly')
    """
    if isinstance(equal_size, (bool, np.bool_)):
        return bool(equal_size)
    if isinstance(equal_size, (int, np.integer)) and int(equal_size) in (0, 1):
        return bool(equal_size)
    if isinstance(equal_size, str) and equal_size == NEARLY:
        return "nearly"
    raise argument_error(
        "wrong_type",
        name,
        equal_size,
        expected="True, False or 'nearly'",
        shown=_describe(equal_size),
    )


def check_greedy_equal_size(equal_size: Any) -> bool:
    """`check_equal_size` for the greedy partitioner, which refuses ``"nearly"``.

    >>> check_greedy_equal_size(0)
    False
    """
    checked = check_equal_size(equal_size)
    if checked == NEARLY:
        raise argument_error(
            "unsupported", "equal_size", equal_size, function="greedy_partition", shown="'nearly'"
        )
    return checked is True


def check_shape(n_items: int, k_partitions: int, equal_size: EqualSize) -> None:
    """Raise `PartitionError` when ``n_items`` items cannot go into ``k_partitions`` parts.

    ``equal_size`` is a value `check_equal_size` returned: ``True`` needs ``n_items`` to
    be a multiple of ``k_partitions``; ``"nearly"`` and ``False`` only need ``n_items >= k``.
    """
    if n_items < k_partitions:
        raise PartitionError(
            f"number of items ({n_items}) is smaller than k_partitions ({k_partitions})"
        )
    if equal_size is True and n_items % k_partitions != 0:
        raise PartitionError(
            f"number of items ({n_items}) is not divisible by k_partitions ({k_partitions}) "
            "with equal_size=True (equal_size='nearly' allows counts that differ by one)"
        )


#: The accepted values of the ``refine`` keyword.
REFINE_CHOICES = (False, True, "exact")
_REFINE = "False, True or 'exact'"


def check_refine(refine: Any) -> bool | str:
    """Return ``refine`` as ``False``, ``True`` or ``"exact"``, or raise.

    ``bool`` and NumPy bools are accepted as themselves; the string ``"exact"`` selects the exact
    mode. Any other string raises ``ValueError``, any other type ``TypeError``; both messages name
    ``refine`` and the value.

    >>> check_refine("exact")
    'exact'
    """
    if isinstance(refine, (bool, np.bool_)):
        return bool(refine)
    if isinstance(refine, str):
        if refine == "exact":
            return "exact"
        raise argument_error("not_allowed", "refine", refine, expected=_REFINE, shown=repr(refine))
    shown = f"{refine!r} ({type(refine).__name__})"
    raise argument_error("wrong_type", "refine", refine, expected=_REFINE, shown=shown)


def check_count(value: Any, name: str) -> int:
    """A count that sizes an allocation (micro-batches, multiples, steps): an int in ``1..2**24``."""
    return check_count_bound(check_k_partitions(value, name), name)


def check_optional_count(value: Any, name: str, default: int) -> int:
    """``value`` checked by `check_count`, or ``default`` when it is ``None``."""
    return default if value is None else check_count(value, name)


def check_min_count(min_num_micro_batches: Any) -> int:
    """``min_num_micro_batches``: ``None`` or ``0`` (what an all-reduce of empty ranks gives) is 0,
    else a count as `check_count` checks it.
    """
    if min_num_micro_batches is None:
        return 0
    if (
        isinstance(min_num_micro_batches, (int, np.integer))
        and not isinstance(min_num_micro_batches, (bool, np.bool_))
        and min_num_micro_batches < 1
    ):
        if min_num_micro_batches == 0:
            return 0
        shown = show_number(int(min_num_micro_batches))
        raise argument_error(
            "too_small", "min_num_micro_batches", min_num_micro_batches, minimum=0, shown=shown
        )
    return check_count(min_num_micro_batches, "min_num_micro_batches")


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``choices``, else a ``ValueError`` listing them."""
    if isinstance(value, str) and value in choices:
        return value
    quoted = [repr(choice) for choice in choices]
    allowed = f"{quoted[0]} or {quoted[1]}" if len(quoted) == 2 else "one of " + ", ".join(quoted)
    raise argument_error("not_allowed", name, value, expected=allowed, shown=repr(value))


def check_pad_to_multiple_of(value: Any) -> int:
    """``pad_to_multiple_of`` as an int >= 1, or the ``TypeError``/``ValueError`` naming it."""
    return check_k_partitions(value, "pad_to_multiple_of")


def check_partition_index(index: int, p: int, j: int, n_values: int) -> int:
    """Return ``index`` (item ``j`` of ``partitions[p]``) when it indexes ``n_values`` values.

    One rule and one message for every function that takes explicit partitions
    (``refine_partitions`` in the native binding, ``balance_report``, ``log_seqlen_unbalance``):
    an index outside ``0..n_values - 1`` is a ``ValueError`` saying which item holds it. An int
    beyond int64 is shown with its type, as the binding shows it.

    Example:
        >>> check_partition_index(5, 0, 1, 4)
        Traceback (most recent call last):
        ...
        seqbalance.errors.ArgumentValueError: partitions[0][1] is 5, not an index of the 4 values
    """
    if 0 <= index < n_values:
        return index
    shown = str(index) if -(2**63) <= index < 2**63 else _describe(int(index))
    loc = ("partitions", p, j)
    raise argument_error("not_an_index", loc, index, shown=shown, n_values=n_values)


def check_flag(value: Any, name: str) -> bool:
    """A yes/no switch (``as_ids``, ...): ``bool`` or a NumPy bool, else a ``TypeError`` naming it.

    >>> check_flag(True, "as_ids")
    True
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise argument_error(
        "wrong_type", name, value, expected="True or False", shown=_describe(value)
    )


#: Where data-parallel ranks wait for each other: once a step, or at every micro-batch.
SYNCS = ("step", "micro_batch")


def check_step_model(sync: Any, pipeline_stages: Any, forward_share: Any) -> tuple[str, int, float]:
    """The step model's arguments (``sync``, ``pipeline_stages``, ``forward_share``), checked as
    `seqbalance.simulate_step` and `seqbalance.plan_dp_micro_batches` take them.

    Every refusal is a ``ValueError`` naming the argument (the step spec's rule, whatever the
    value's type): ``sync`` not ``"step"`` or ``"micro_batch"``; ``pipeline_stages`` not an int
    in ``1..2**24``; ``forward_share`` not a finite number in (0, 1); a pipeline with
    ``sync="micro_batch"`` (FSDP inside a pipeline is not modelled), naming both.

    Example:
        >>> check_step_model("step", 4, 0.25)
        ('step', 4, 0.25)
        >>> check_step_model("micro_batch", 2, 0.5)
        Traceback (most recent call last):
        ...
        seqbalance.errors.ArgumentValueError: pipeline_stages=2 with sync='micro_batch': a pipeline's ranks meet once a step; FSDP inside a pipeline is not modelled
    """
    if not (isinstance(sync, str) and sync in SYNCS):
        expected = "'step' or 'micro_batch'"
        raise argument_error("not_allowed", "sync", sync, expected=expected, shown=_describe(sync))
    if isinstance(pipeline_stages, (bool, np.bool_)) or not isinstance(
        pipeline_stages, (int, np.integer)
    ):
        shown = _describe(pipeline_stages)
        raise argument_error(
            "not_allowed", "pipeline_stages", pipeline_stages, expected="an int >= 1", shown=shown
        )
    stages = int(pipeline_stages)
    if not 1 <= stages <= MAX_COUNT:
        expected, shown = "an int in 1..2**24", show_number(stages)
        raise argument_error(
            "not_allowed", "pipeline_stages", pipeline_stages, expected=expected, shown=shown
        )
    share = _finite_share(forward_share)
    if stages > 1 and sync == "micro_batch":
        reason = "a pipeline's ranks meet once a step; FSDP inside a pipeline is not modelled"
        raise argument_error(
            "conflict",
            "pipeline_stages",
            pipeline_stages,
            shown=stages,
            other_argument="sync",
            other_value="micro_batch",
            reason=reason,
        )
    return sync, stages, share


def _finite_share(forward_share: Any) -> float:
    """``forward_share`` as a float strictly between 0 and 1."""
    if isinstance(forward_share, (bool, np.bool_)) or not isinstance(
        forward_share, (int, float, np.integer, np.floating)
    ):
        shown = _describe(forward_share)
        raise argument_error(
            "not_allowed",
            "forward_share",
            forward_share,
            expected="a number in (0, 1)",
            shown=shown,
        )
    # as_float: an int beyond float64 reads as an infinity, refused below by name (float()
    # would raise a bare OverflowError).
    share = as_float(forward_share)
    if not (0.0 < share < 1.0):
        expected, shown = "a finite number in (0, 1)", show_number(forward_share)
        raise argument_error(
            "not_allowed", "forward_share", forward_share, expected=expected, shown=shown
        )
    return share
