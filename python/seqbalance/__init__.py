"""seqbalance: sequence-length balancing across data-parallel ranks, with a native core."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._errors import PartitionError
# Temporary: the public partitioners are the reference until the native core lands.
from .reference import get_seqlen_balanced_partitions, greedy_partition, karmarkar_karp
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
    "refine_partitions",
]
