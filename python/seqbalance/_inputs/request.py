"""The partitioners' arguments, checked when the extension's own reading is unsure.

The native partitioners read certainly valid input themselves (a list of non-negative ints or of
finite floats, a 1-D numeric NumPy array, an exact int ``k_partitions``, a bool ``equal_size``).
For anything else the extension calls `partition_request` itself, inside the same call: it
raises the documented error in the reference's order, or returns the arguments normalised, which
the extension then reads without a second look. A public partitioner makes one native call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import weights
from .arguments import (
    EqualSize,
    check_equal_size,
    check_greedy_equal_size,
    check_k_partitions,
    check_refine,
    check_shape,
)


def partition_request(
    values: Any, k_partitions: Any, equal_size: Any, refine: Any, name: str, greedy: bool
) -> tuple[np.ndarray, int, EqualSize, bool | str]:
    """``(weights, k, equal_size, refine)`` checked and normalised, or the reference's error.

    The order is the reference's: ``refine``, ``k_partitions``, ``equal_size`` (greedy's own
    rule when ``greedy``), the values (``name`` their parameter), then the shape.

    >>> partition_request((3, 1.5), 1, 0, False, "seqlen_list", False)
    (array([3. , 1.5]), 1, False, False)
    """
    mode = check_refine(refine)
    k = check_k_partitions(k_partitions)
    equal: EqualSize = (
        check_greedy_equal_size(equal_size) if greedy else check_equal_size(equal_size)
    )
    # Looked up on the module at each call, so a test can watch how often it runs.
    normalised = weights.normalize_weights(values, name)
    check_shape(len(normalised.values), k, equal)
    return normalised.values, k, equal, mode
