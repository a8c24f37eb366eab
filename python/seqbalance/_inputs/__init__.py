"""The one place that validates what callers pass, and the wording of every error.

``arguments`` checks scalar arguments (k, counts, ``equal_size``, ``refine``, choices);
``weights`` turns lengths and weights (lists, arrays, tensors, floats) into clean values. The
native binding's fast paths only take input that is certainly valid and hand everything else
here, so the native code and the pure-Python reference raise the same errors.
"""

from __future__ import annotations

from .arguments import (
    MAX_COUNT,
    NEARLY,
    REFINE_CHOICES,
    EqualSize,
    Lengths,
    SupportsArray,
    SupportsDLPack,
    _describe,
    as_float,
    check_choice,
    check_count,
    check_count_bound,
    check_equal_size,
    check_flag,
    check_greedy_equal_size,
    check_k_partitions,
    check_key,
    check_max_sequences,
    check_min_count,
    check_optional_count,
    check_pad_to_multiple_of,
    check_partition_index,
    check_per_item,
    check_refine,
    check_shape,
    show_number,
)
from .weights import (
    MAX_INT_SUM_WITH_FLOATS,
    MAX_VALUE,
    Weights,
    as_array,
    as_int64_array,
    lengths_as_list,
    normalize_lengths,
    normalize_weights,
    plain_int64_array,
    read_length,
)

__all__ = [
    "MAX_COUNT",
    "MAX_INT_SUM_WITH_FLOATS",
    "MAX_VALUE",
    "NEARLY",
    "REFINE_CHOICES",
    "EqualSize",
    "Lengths",
    "SupportsArray",
    "SupportsDLPack",
    "Weights",
    "_describe",
    "as_float",
    "as_array",
    "as_int64_array",
    "check_choice",
    "check_count",
    "check_count_bound",
    "check_equal_size",
    "check_greedy_equal_size",
    "check_flag",
    "check_k_partitions",
    "check_key",
    "check_max_sequences",
    "check_min_count",
    "check_optional_count",
    "check_pad_to_multiple_of",
    "check_partition_index",
    "check_per_item",
    "check_refine",
    "check_shape",
    "lengths_as_list",
    "normalize_lengths",
    "normalize_weights",
    "plain_int64_array",
    "read_length",
    "show_number",
]
