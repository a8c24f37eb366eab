"""Run slime's data-parallel schedule as seqbalance's planned step: call `install`.

    import seqbalance.integrations.slime
    seqbalance.integrations.slime.install(step=True)   # before slime builds its rollout manager

slime's ``build_dp_schedule(args, train_parallel_config, total_lengths, *, global_batch_size)``
(``slime.utils.dp_schedule``, imported by name into ``slime.ray.rollout``) already returns a
global plan: ``(partitions, micro_batch_indices, num_microbatches)``, each rank's samples in
micro-batch order, each micro-batch a contiguous range of them, and every step's count. `install`
rebinds every imported ``slime.*`` module holding it to `build_dp_schedule` below, which plans
every step with `seqbalance.plan_dp_micro_batches` for slime's Megatron step (1F1B at
``args.pipeline_model_parallel_size`` stages; the count a multiple of
``microbatch_group_size_per_vp_stage`` under virtual pipelines, planned as non-interleaved),
keeps slime's own plan of a step where it is not worse in the step model, and answers in
slime's form. slime is not on the package registry: this is tested against a stand-in of the
function's signature. `uninstall` puts slime's function back.

What stays slime's: the static path (``use_dynamic_batch_size`` off) and any step with a sample
over ``max_tokens_per_gpu * cp_size`` (slime runs it alone in its own micro-batch; seqbalance
never plans over the cap) are slime's own answers; the cost is tokens unless ``cost=`` is given.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import threading
from typing import Any

import numpy as np

from ..costs import ModelCost, TimeCost
from ._costs import CostSource, resolve
from ._patching import IntegrationError
from ._slots import describe_step
from ._step import StepMode, UnmetConstraint, plan_free
from ._verl_step import step_wanted

__all__ = ["IntegrationError", "build_dp_schedule", "install", "is_installed", "uninstall"]

logger = logging.getLogger(__name__)

_TARGET = "slime.utils.dp_schedule"
_PARAMETERS = ["args", "train_parallel_config", "total_lengths", "global_batch_size"]

_STATE: dict[str, Any] = {"original": None, "source": None, "rebound": [], "said": set()}
_LOCK = threading.Lock()


def _once(key: str, message: str, *args: Any) -> None:
    if key not in _STATE["said"]:
        _STATE["said"].add(key)
        logger.info(message, *args)


def _own_plan(answer: Any, dp_size: int) -> list[list[list[int]]]:
    partitions, micro_batch_indices, _ = answer
    return [
        [[partitions[r][i] for i in mb] for mb in micro_batch_indices[r]] for r in range(dp_size)
    ]


def build_dp_schedule(
    args: Any, train_parallel_config: Any, total_lengths: Any, *, global_batch_size: Any
) -> tuple[list[list[int]], list[list[list[int]]], list[int]]:
    """slime's ``build_dp_schedule`` planning every step as seqbalance's planned step
    (installed by ``install(step=True)``); slime's answer form and guarantees."""
    original = _STATE["original"]
    assert original is not None
    if not getattr(args, "use_dynamic_batch_size", False):
        return original(
            args, train_parallel_config, total_lengths, global_batch_size=global_batch_size
        )
    dp_size = int(train_parallel_config["dp_size"])
    cap = int(args.max_tokens_per_gpu) * int(train_parallel_config["cp_size"])
    virtual = int(train_parallel_config.get("vpp_size") or 1)
    multiple = (
        int(train_parallel_config["microbatch_group_size_per_vp_stage"]) if virtual > 1 else None
    )
    stages = int(getattr(args, "pipeline_model_parallel_size", 1) or 1)
    mode = StepMode("step", max(stages, 1))
    source: CostSource | None = _STATE["source"]
    cost = "tokens" if source is None else source.current()  # one version for the call
    lengths = np.asarray(list(total_lengths), dtype=np.int64)
    size = int(global_batch_size)
    partitions: list[list[int]] = [[] for _ in range(dp_size)]
    micro_batch_indices: list[list[list[int]]] = [[] for _ in range(dp_size)]
    counts: list[int] = []
    total, own_total = 0.0, 0.0
    for start in range(0, (lengths.size // size) * size, size):
        step = lengths[start : start + size]
        own = original(args, train_parallel_config, step.tolist(), global_batch_size=size)
        own_plan = _own_plan(own, dp_size)
        try:
            planned = plan_free(
                step,
                dp_size,
                cap,
                cost=cost,
                mode=mode,
                trainer=own_plan,
                num_micro_batches_multiple=multiple,
            )
            plan = planned.plan
            total += planned.seconds
            own_total += (
                planned.seconds if planned.trainer_seconds is None else planned.trainer_seconds
            )
        except UnmetConstraint as exc:
            _once("over", "seqbalance: slime's own schedule kept for a step: %s (said once)", exc)
            plan = own_plan
        counts.append(len(plan[0]))
        for r, rank in enumerate(plan):
            for micro_batch in rank:
                first = len(partitions[r])
                partitions[r].extend(start + int(i) for i in micro_batch)
                micro_batch_indices[r].append(list(range(first, first + len(micro_batch))))
    logger.info(
        "seqbalance: planned step (1F1B, %d stages, %d ranks, %d steps): %s",
        mode.pipeline_stages,
        dp_size,
        len(counts),
        describe_step(total, own_total, cost),
    )
    return partitions, micro_batch_indices, counts


def install(
    *, step: bool | None = None, cost: TimeCost | ModelCost | str | os.PathLike[str] | None = None
) -> list[str]:
    """Rebind slime's ``build_dp_schedule`` to `build_dp_schedule` in every imported
    ``slime.*`` module (``step=True``; ``None``: ``SEQBALANCE_STEP``); return the modules
    rebound. ``step=False`` restores slime's. Raises ``ImportError`` without slime and
    `IntegrationError` (patching nothing) where its parameters are not slime's."""
    wanted = step_wanted(step)
    source = resolve(cost)
    with _LOCK:
        if not wanted:
            _restore()
            return []
        try:
            module = importlib.import_module(_TARGET)
        except ImportError as exc:
            raise ImportError(
                f"seqbalance.integrations.slime.install() could not import {_TARGET} ({exc}): "
                "install slime (from its repository; it is not on the package registry)"
            ) from exc
        current = getattr(module, "build_dp_schedule", None)
        if current is not build_dp_schedule:
            if current is None or list(inspect.signature(current).parameters) != _PARAMETERS:
                raise IntegrationError(
                    f"seqbalance.integrations.slime.install() refused to patch: "
                    f"{_TARGET}.build_dp_schedule does not have the parameters {_PARAMETERS}; "
                    "nothing was patched"
                )
            _STATE["original"] = current
        _STATE["source"] = source
        rebound = []
        for name, loaded in list(sys.modules.items()):
            if loaded is None or not (name == "slime" or name.startswith("slime.")):
                continue
            for attribute, value in list(vars(loaded).items()):
                if value is _STATE["original"]:
                    setattr(loaded, attribute, build_dp_schedule)
                    _STATE["rebound"].append((loaded, attribute))
                    rebound.append(f"{name}.{attribute}")
        _STATE["said"].clear()
        logger.info("seqbalance: replaced slime's build_dp_schedule in %s", ", ".join(rebound))
        return rebound


def _restore() -> None:
    for loaded, attribute in _STATE["rebound"]:
        if getattr(loaded, attribute, None) is build_dp_schedule:
            setattr(loaded, attribute, _STATE["original"])
    _STATE["rebound"] = []
    _STATE["source"] = None


def uninstall() -> None:
    """Put slime's ``build_dp_schedule`` back wherever `install` rebound it."""
    with _LOCK:
        _restore()


def is_installed() -> bool:
    """Whether `install(step=True)` is in effect in this process."""
    module = sys.modules.get(_TARGET)
    return module is not None and getattr(module, "build_dp_schedule", None) is build_dp_schedule
