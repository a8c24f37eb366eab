"""seqbalance: sequence-length balancing across data-parallel ranks, with a native core.

The partitioners return exactly what the pure-Python Karmarkar–Karp functions in RL trainers
(verl, TransferQueue, OpenRLHF, ...) return, computed in Rust:

    >>> from seqbalance import get_seqlen_balanced_partitions
    >>> get_seqlen_balanced_partitions([10, 20, 30, 40], k_partitions=2, equal_size=True)
    [[0, 3], [1, 2]]

`seqbalance.reference` holds the plain pure-Python implementation of the same rules.
"""

from __future__ import annotations

from . import _headroom  # noqa: F401  (_headroom checks the room to load _native)
from ._native import __version__
from .costs import (
    ModelCost,
    StepTimer,
    TimeCost,
    TimeCostWarning,
    TransformerCost,
    calculate_workload,
    profile,
)
from .errors import ArgumentError, PartitionError
from .partition import (
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    partition_ids,
)
from .planning import (
    BalanceReport,
    DpIds,
    LoadStats,
    StepTime,
    StreamPacker,
    balance_report,
    cp_rank_plans,
    cp_sample_id_groups,
    group_balanced_partitions,
    log_seqlen_unbalance,
    min_num_micro_batches_for,
    pack_ids,
    pack_sequences,
    plan_context_parallel,
    plan_dp_ids,
    plan_dp_micro_batches,
    plan_micro_batches,
    plan_packed_steps,
    simulate_step,
)
from .refine import refine_partitions
from .samplers import (
    BaseSampler,
    GRPOGroupNSampler,
    RankAwareSampler,
    SeqlenBalancedSampler,
    SequentialSampler,
)

__all__ = [
    "BaseSampler",
    "GRPOGroupNSampler",
    "ArgumentError",
    "PartitionError",
    "RankAwareSampler",
    "SeqlenBalancedSampler",
    "SequentialSampler",
    "__version__",
    "get_seqlen_balanced_partitions",
    "greedy_partition",
    "karmarkar_karp",
    "partition_ids",
    # planning toolkit
    "BalanceReport",
    "DpIds",
    "ModelCost",
    "TransformerCost",
    "TimeCost",
    "TimeCostWarning",
    "LoadStats",
    "balance_report",
    "calculate_workload",
    "cp_rank_plans",
    "cp_sample_id_groups",
    "group_balanced_partitions",
    "log_seqlen_unbalance",
    "min_num_micro_batches_for",
    "pack_ids",
    "pack_sequences",
    "plan_context_parallel",
    "plan_dp_ids",
    "plan_dp_micro_batches",
    "plan_micro_batches",
    "plan_packed_steps",
    "profile",
    "simulate_step",
    "StepTime",
    "StepTimer",
    "StreamPacker",
    "refine_partitions",
]
