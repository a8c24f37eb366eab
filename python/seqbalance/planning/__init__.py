"""The planning toolkit: how a step is split, given what each sample costs.

How uneven a split is (metrics), groups kept whole, micro-batches under a token cap, one plan
for all data-parallel ranks, the step a plan makes (lockstep ranks, 1F1B pipelines), packing
(offline and over a stream), and context parallelism planned per sequence. Every planner takes
a ``cost=`` from `seqbalance.costs`; this package imports that one, never the reverse.

Everything here is re-exported from the package top level (``from seqbalance import
plan_micro_batches``); import from there.
"""

from __future__ import annotations

from .context_parallel import plan_context_parallel
from .cp_layouts import cp_rank_plans, cp_sample_id_groups
from .dp_plan import DpIds, plan_dp_ids, plan_dp_micro_batches
from .groups import group_balanced_partitions
from .metrics import BalanceReport, LoadStats, balance_report, log_seqlen_unbalance
from .micro_batches import min_num_micro_batches_for, plan_micro_batches
from .packing import pack_ids, pack_sequences, plan_packed_steps
from .step import StepTime, simulate_step
from .stream import StreamPacker

__all__ = [
    "BalanceReport",
    "DpIds",
    "LoadStats",
    "StepTime",
    "StreamPacker",
    "balance_report",
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
    "simulate_step",
]
