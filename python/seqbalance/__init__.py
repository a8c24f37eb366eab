"""seqbalance: sequence-length balancing across data-parallel ranks, with a native core.

The partitioners return exactly what the pure-Python Karmarkar–Karp functions in RL trainers
(verl, TransferQueue, OpenRLHF, ...) return, computed in Rust::

    >>> from seqbalance import get_seqlen_balanced_partitions
    >>> get_seqlen_balanced_partitions([10, 20, 30, 40], k_partitions=2, equal_size=True)
    [[0, 3], [1, 2]]

:mod:`seqbalance.reference` holds the plain pure-Python implementation of the same rules.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._errors import PartitionError
from .partition import (
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    partition_ids,
)
from .refine import refine_partitions

try:
    __version__ = version("seqbalance")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "PartitionError",
    "__version__",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "partition_ids",
    "refine_partitions",
]
