"""Fast conversion of already-valid lengths to an int64 array, for the planners.

The planners work on NumPy arrays. :func:`seqbalance._inputs.normalize_lengths` checks a Python
list item by item, which costs more than packing 100,000 lengths natively, so a list that NumPy
turns into a non-negative 1-D int64 array in one go is taken as is (``plain_int64_array``, the
fast path ``normalize_weights`` takes too); anything else goes through ``normalize_lengths``,
which raises the documented error with its wording.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import normalize_lengths, plain_int64_array

__all__ = ["as_int64_array"]


def as_int64_array(values: Any, name: str = "lengths") -> np.ndarray:
    """Return ``values`` validated as a 1-D ``int64`` array of non-negative integers.

    Raises the ``TypeError``/``ValueError``/``OverflowError`` of ``normalize_lengths``.
    """
    array = plain_int64_array(values)
    if array is not None:
        return array
    normalized = normalize_lengths(values, name)
    return np.asarray(normalized, dtype=np.int64).reshape(-1)
