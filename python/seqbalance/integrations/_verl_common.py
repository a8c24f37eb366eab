"""``seqbalance.integrations.verl.install(step=True)``: verl runs seqbalance's planned step.

Three functions are replaced (each only where its module imports; `install` refuses one whose
parameters differ from verl 0.9.1's, naming it):

- ``RayPPOTrainer._balance_batch`` (V0, ``verl.trainer.ppo.ray_trainer``) and
  ``PPOTrainer._balance_batch`` (V1, ``verl.trainer.ppo.v1.trainer_base``): verl's own
  balancing runs first (its layout decides which samples form each mini-batch), then every
  mini-batch is planned with `plan_driver` for the engine's step, laid out for dispatch's equal
  contiguous chunks, and each sample's slot sent with it (V0: the tensor column
  ``seqbalance_slot`` of the batch; V1: the TransferQueue field of that name). The metrics keep
  verl's names, computed on the new layout.
- ``rearrange_micro_batches`` as ``verl.workers.engine.utils`` calls it (every engine): the
  driver's micro-batches where every rank's rows carry a valid slot field (one all-reduce on
  the default group decides it for all); otherwise a joint plan from an all-gather of every
  data-parallel rank's lengths on the default group, with global rank 0's cost version; where it
  cannot plan (no process group, no ``dp_group``, counts not kept equal, lengths it cannot
  read) verl's own function, said once in a log line.

The engine's step: verl's Megatron engine (the caller's engine class is defined in
``verl.workers.engine.megatron``) runs 1F1B at its parallel state's pipeline-parallel size, the
count a multiple of ``num_batches_divided_by``; every other engine runs in lockstep.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ._costs import CostSource
from ._own_plans import verl_micro_batches
from ._patching import SaysOnce
from ._step import UnmetConstraint, trainer_weights

__all__ = ["ENVIRONMENT", "step_wanted"]

logger = logging.getLogger("seqbalance.integrations.verl")

#: The environment variable that turns the planned step on for Ray's argument-less setup hook.
ENVIRONMENT = "SEQBALANCE_STEP"

_ENGINE_UTILS = "verl.workers.engine.utils"
_DRIVERS = {
    "V0": ("verl.trainer.ppo.ray_trainer", "RayPPOTrainer"),
    "V1": ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer"),
}
_WORKER_PARAMETERS = [
    "batch",
    "max_token_len",
    "dp_group",
    "num_batches_divided_by",
    "same_micro_num_in_dp",
    "min_num_micro_batch",
    "use_dynamic_bsz_balance",
    "force_group_size",
]
_DRIVER_PARAMETERS = ["self", "batch", "metrics", "logging_prefix", "keep_minibatch"]


def step_wanted(step: Any) -> bool:
    """``install``'s ``step``: True/False as given; None: `ENVIRONMENT` (unset or empty: off)."""
    if step is None:
        value = os.environ.get(ENVIRONMENT, "").strip().lower()
        if value in ("", "0", "false", "no", "off"):
            return False
        if value in ("1", "true", "yes", "on"):
            return True
        raise ValueError(
            f"{ENVIRONMENT} = {os.environ[ENVIRONMENT]!r}: expected 1 or 0 (true/false, on/off)"
        )
    if step is True or step is False:
        return step
    raise TypeError(f"step must be True, False or None, got {type(step).__name__} {step!r}")


class _State(SaysOnce):
    def __init__(self) -> None:
        super().__init__(logger)
        self.lock = threading.Lock()
        self.on = False
        self.source: CostSource | None = None
        #: (module or class, attribute) -> the original
        self.originals: dict[tuple[Any, str], Any] = {}
        self.worker_original: Callable[..., Any] | None = None


_STATE = _State()


def _parameter_names(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def _current_cost() -> Any:
    """One version of the installed cost (None: verl's workload)."""
    source = _STATE.source
    return None if source is None else source.current()


def _planner_cost(cost: Any) -> Any:
    return "workload" if cost is None else cost


def _verl_trainer_plan(
    cap: int,
    cost: Any,
    *,
    min_count: int | None = None,
    multiple: int | None = None,
    group_size: int = 1,
    balance: bool = True,
) -> Callable[[list[np.ndarray]], Any]:
    def own(rank_lengths: list[np.ndarray]) -> Any:
        try:
            return verl_micro_batches(
                rank_lengths,
                cap,
                weights=lambda lengths: trainer_weights(cost, lengths, "workload"),
                min_num_micro_batch=min_count,
                num_batches_divided_by=multiple,
                force_group_size=group_size,
                use_dynamic_bsz_balance=balance,
            )
        except UnmetConstraint:
            return None

    return own
