"""The planning toolkit: what a sample costs, how uneven a split is, groups kept whole,
micro-batches under a token cap, one plan for all data-parallel ranks, packing (offline
and over a stream), and context parallelism planned per sequence.

Everything here is re-exported from the package top level (``from seqbalance import
plan_micro_batches``); import from there.
"""

from __future__ import annotations

from .context_parallel import cp_rank_plans, cp_sample_id_groups, plan_context_parallel
from .costs import TransformerCost, calculate_workload
from .dp_plan import plan_dp_micro_batches
from .groups import group_balanced_partitions
from .metrics import BalanceReport, LoadStats, balance_report, log_seqlen_unbalance
from .micro_batches import min_num_micro_batches_for, plan_micro_batches
from .model_cost import ModelCost
from .packing import pack_sequences, plan_packed_steps
from .profiling import profile
from .stream import StreamPacker
from .time_cost import TimeCost

__all__ = [
    "BalanceReport",
    "LoadStats",
    "ModelCost",
    "StreamPacker",
    "TimeCost",
    "TransformerCost",
    "balance_report",
    "calculate_workload",
    "cp_rank_plans",
    "cp_sample_id_groups",
    "group_balanced_partitions",
    "log_seqlen_unbalance",
    "min_num_micro_batches_for",
    "pack_sequences",
    "plan_context_parallel",
    "plan_dp_micro_batches",
    "plan_micro_batches",
    "plan_packed_steps",
    "profile",
]
