"""Numbers on a line of a text file: integers (lengths) or, for ``partition``, float costs."""

from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ._paths import InputError

__all__ = ["float_token", "not_an_integer", "values_array"]


def not_an_integer(token: str, where: str) -> NoReturn:
    """Refuse a line that is not a whole number where lengths are read (planning)."""
    raise InputError(f"{where}: expected one integer per line, got {token[:40]!r}")


def float_token(token: str, where: str) -> float:
    """A cost written as a decimal number (``12.5``, ``1e3``): finite, or the line's error."""
    try:
        value = float(token)
    except ValueError:
        raise InputError(f"{where}: expected one number per line, got {token[:40]!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: costs must be finite, got {token[:40]!r}")
    return value


def values_array(values: list[int | float]) -> np.ndarray:
    """int64 for whole numbers; float64 as soon as one value is a float (a cost)."""
    if any(isinstance(value, float) for value in values):
        return np.array(values, dtype=np.float64)
    return np.array(values, dtype=np.int64)
