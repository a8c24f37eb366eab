"""The package's exceptions: `PartitionError`, `ArgumentError` and the public table of kinds.

The classes are defined by the extension when it initialises, so an error raised in native code
and one raised here are of one class. An `ArgumentError` carries where it arose:

* ``argument``: the parameter's name (``"lengths"``);
* ``loc``: the path to the refused value, ``("lengths", 7)`` for item 7 of ``lengths``,
  ``("max_token_len",)`` for a scalar, ``("partitions", 2, 0)`` for an item of a nested list;
* ``kind``: a key of `KINDS`, whose template gave the message;
* ``input``: the refused value; ``ctx``: the template's other values (a field ending in
  ``_argument`` names another parameter, ``cap_argument="max_token_len"``).

Each concrete class also subclasses the built-in the same refusal raised before:
`ArgumentValueError` is a `ValueError`, `ArgumentTypeError` a `TypeError`, `ArgumentOverflowError`
an `OverflowError`, so every ``except`` written against those keeps working. The messages are the
ones seqbalance raised before; a program that wants to say them in its own words (the command line
names flags, not parameters) formats ``KINDS[error.kind].template`` with its own ``where``
(docs/errors.md shows one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ._native import (
    ArgumentError,
    ArgumentOverflowError,
    ArgumentTypeError,
    ArgumentValueError,
    PartitionError,
)

__all__ = [
    "KINDS",
    "ArgumentError",
    "ArgumentOverflowError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "Kind",
    "PartitionError",
    "argument_error",
    "where",
]


@dataclass(frozen=True)
class Kind:
    """One kind of refusal: the class raised and the message's template.

    The template's ``{where}`` is the located argument (`where` of ``loc``: ``"lengths[7]"``); its
    other fields are the error's ``ctx`` (``shown`` is how the message shows the refused value).
    """

    error: type[ArgumentError]
    template: str
    doc: str


def _kind(error: type[ArgumentError], template: str, doc: str) -> Kind:
    return Kind(error, template, doc)


_V, _T, _O = ArgumentValueError, ArgumentTypeError, ArgumentOverflowError

#: Every kind of `ArgumentError`, by its stable name.
KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        "wrong_type": _kind(_T, "{where} must be {expected}, got {shown}", "not of a type taken"),
        "not_allowed": _kind(
            _V, "{where} must be {expected}, got {shown}", "not one of the values taken"
        ),
        "too_small": _kind(_V, "{where} must be >= {minimum}, got {shown}", "below the minimum"),
        "too_large": _kind(_V, "{where} must be <= {maximum}, got {shown}", "above the maximum"),
        "overflow": _kind(
            _O, "{where} must be <= {maximum}, got {shown}", "beyond what the native code holds"
        ),
        "not_finite_or_negative": _kind(
            _V, "{where} must be finite and >= 0, got {shown}", "a NaN, an infinity or below 0"
        ),
        "not_one_dimensional": _kind(_V, "{where} must be 1-D, got {shown}", "not 1-D"),
        "wrong_dtype": _kind(
            _T, "{where} must hold {expected}, got an array of dtype {dtype}", "an array's dtype"
        ),
        "unsupported_dtype": _kind(
            _T,
            "{where} has dtype {dtype}, which the partitioners do not compute in; pass float64 or "
            "float32",
            "a float dtype the partitioners do not compute in",
        ),
        "masked_array": _kind(
            _T,
            "{where} is a masked array; pass {where}.compressed() or {where}.filled(0) instead",
            "a masked array (its masked values would be read)",
        ),
        "not_self_equal": _kind(
            _V,
            "{where} is {shown}, which does not equal itself (a NaN): it cannot be matched with "
            "any other key or id",
            "a key or id that equals nothing",
        ),
        "not_an_index": _kind(
            _V, "{where} is {shown}, not an index of the {n_values} values", "an index out of range"
        ),
        "unsupported": _kind(
            _V, "{function} does not support {where}={shown}", "a value this function refuses"
        ),
        "conflict": _kind(
            _V,
            "{where}={shown} with {other_argument}='{other_value}': {reason}",
            "two arguments that do not go together",
        ),
        "mixed_precision": _kind(
            _T,
            "{where} mixes float32 items ({first}) with other numbers ({second}); the reference's "
            "precision would then depend on its order of additions, so pass one dtype, e.g. "
            "np.asarray({where}, dtype=np.float32)",
            "float32 items mixed with other numbers",
        ),
        "scalar_in_list": _kind(
            _T,
            "{where} is a {dtype} scalar, which has no reference precision in a list; pass an "
            "array (np.asarray({argument}, dtype=np.float32))",
            "a float32 scalar inside a list",
        ),
        "inexact_sum": _kind(
            _V,
            "{where} mixes floats with ints that sum to {total}, above 2**53, where double "
            "precision stops adding ints exactly; convert the ints to float first",
            "ints too large to add exactly among floats",
        ),
        "longer_than_cap": _kind(
            _V,
            "{where} = {shown}{padding} is longer than {cap_argument} ({cap})",
            "a sample that fits no micro-batch under the cap",
        ),
        "group_over_cap": _kind(
            _V,
            "group {group} ({where}) holds {shown} tokens{padding}, more than {cap_argument} "
            "({cap})",
            "a group kept together that fits no micro-batch under the cap",
        ),
        "missing_field": _kind(
            _V,
            "{argument} has no {field!r} ({what} has one)",
            "a field a saved document must hold (its loc names the field)",
        ),
        "wrong_field_type": _kind(
            _V, "{where} has the wrong type: {shown}", "a saved document's field of another type"
        ),
        "sum_overflow": _kind(
            _O,
            "{where} sums {amount}, above half the largest {dtype} ({limit}); scale the weights "
            "down",
            "a total the float arithmetic cannot hold",
        ),
    }
)


def where(loc: Sequence[Any]) -> str:
    """``loc`` as the messages spell it: ``("lengths", 7)`` is ``lengths[7]``, a string step
    a key (``("data", "coefficients")`` is ``data['coefficients']``), a slice a run of items
    (``("lengths", slice(4, 6))`` is ``lengths[4:6]``).

    >>> where(("partitions", 2, 0)), where(("data", "per_token")), where(("lengths", slice(4, 6)))
    ('partitions[2][0]', "data['per_token']", 'lengths[4:6]')
    """
    head, *steps = loc
    return str(head) + "".join(
        f"[{step.start}:{step.stop}]" if isinstance(step, slice) else f"[{step!r}]"
        for step in steps
    )


def argument_error(kind: str, loc: str | Sequence[Any], input: Any, **ctx: Any) -> ArgumentError:
    """The `ArgumentError` of ``kind`` refusing ``input`` at ``loc`` (a parameter's name, or a
    path whose first entry is one), its message ``KINDS[kind].template`` filled with ``ctx``.

    >>> error = argument_error("too_small", ("lengths", 3), -1, minimum=0, shown="-1")
    >>> str(error), error.argument, isinstance(error, ValueError)
    ('lengths[3] must be >= 0, got -1', 'lengths', True)
    """
    path = (loc,) if isinstance(loc, str) else tuple(loc)
    entry = KINDS[kind]
    error = entry.error(entry.template.format(where=where(path), argument=path[0], **ctx))
    error.argument, error.loc, error.kind, error.input, error.ctx = path[0], path, kind, input, ctx
    return error
