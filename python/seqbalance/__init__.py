"""seqbalance: sequence-length balancing across data-parallel ranks, with a native core."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._errors import PartitionError
# Temporary: the public partitioners are the reference until the native core lands.
from .reference import get_seqlen_balanced_partitions, greedy_partition, karmarkar_karp
# Planning toolkit (after the partitioners: these modules look them up in the package top level).
from .groups import group_balanced_partitions
from .metrics import (
    BalanceReport,
    LoadStats,
    balance_report,
    calculate_workload,
    log_seqlen_unbalance,
)
from .micro_batches import min_num_micro_batches_for, plan_micro_batches
from .packing import pack_sequences, plan_packed_steps

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
    # planning toolkit
    "BalanceReport",
    "LoadStats",
    "balance_report",
    "calculate_workload",
    "group_balanced_partitions",
    "log_seqlen_unbalance",
    "min_num_micro_batches_for",
    "pack_sequences",
    "plan_micro_batches",
    "plan_packed_steps",
]
