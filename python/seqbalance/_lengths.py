"""Fast conversion of already-valid lengths to an int64 array, for the planners.

The planners work on NumPy arrays. :func:`seqbalance._inputs.normalize_lengths` checks a Python
list item by item, which costs more than packing 100,000 lengths natively, so a list that NumPy
turns into a non-negative 1-D int64 array in one go is taken as is; anything else goes through
``normalize_lengths``, which raises the documented error with its wording.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import normalize_lengths

__all__ = ["as_int64_array"]


def as_int64_array(values: Any, name: str = "lengths") -> np.ndarray:
    """Return ``values`` validated as a 1-D ``int64`` array of non-negative integers.

    Raises the ``TypeError``/``ValueError``/``OverflowError`` of ``normalize_lengths``.
    """
    if isinstance(values, list):
        try:
            array = np.asarray(values)
        except (TypeError, ValueError, OverflowError):
            array = None
        # Only a plain int64 result is certainly valid; bools, floats, huge ints, strings and
        # objects take the slow path, which names the offending item.
        if (
            array is not None
            and array.dtype == np.int64
            and array.ndim == 1
            and (array.size == 0 or int(array.min()) >= 0)
        ):
            return array
    normalized = normalize_lengths(values, name)
    return np.asarray(normalized, dtype=np.int64).reshape(-1)
