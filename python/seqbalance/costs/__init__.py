"""What a sample costs, and how that is measured.

Every balancing planner and sampler takes ``cost=``; this package holds what it can be:

- ``"tokens"``, ``"workload"`` (verl's ``24576 * s + s**2``), per-sample weights and callables,
  and `TransformerCost` (`seqbalance.costs.workload`, which also turns any ``cost=`` into
  per-sample weights);
- `ModelCost`: training FLOPs from a model's shape and its Hugging Face config
  (`seqbalance.costs.model`, with the config readers in ``config``, ``families`` and
  ``layers``);
- `TimeCost`: seconds from a time model fitted to measured micro-batches, updated online and
  saved as JSON (`seqbalance.costs.time_cost`); `profile`, which measures them offline, and
  `StepTimer`, which measures them inside the trainer's loop (`seqbalance.costs.step_timer`).

The planners (`seqbalance.planning`) and the samplers import this package; it imports neither.
Every public name is also importable from ``seqbalance`` itself.

``seqbalance.costs`` was a module in seqbalance 0.1; every name it exported is still served
here (``COST_NAMES``, ``Cost``, ``TransformerCost``, ``check_pad_to_multiple_of``,
``check_total``, ``group_sums``, ``pad_lengths``, ``resolve_cost``, ``sample_costs``).
"""

from __future__ import annotations

from .._inputs import check_pad_to_multiple_of
from .model import ModelCost
from .profiling import profile
from .step_timer import StepTimer, StepTimes
from .time_cost import TimeCost, TimeCostWarning
from .workload import (
    COST_NAMES,
    Cost,
    TransformerCost,
    calculate_workload,
    check_total,
    group_sums,
    pad_lengths,
    resolve_cost,
    sample_costs,
)

__all__ = [
    "COST_NAMES",
    "Cost",
    "ModelCost",
    "StepTimer",
    "StepTimes",
    "TimeCost",
    "TimeCostWarning",
    "TransformerCost",
    "calculate_workload",
    "check_pad_to_multiple_of",
    "check_total",
    "group_sums",
    "pad_lengths",
    "profile",
    "resolve_cost",
    "sample_costs",
]
