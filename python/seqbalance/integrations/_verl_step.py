"""``seqbalance.integrations.verl.install(step=True)``: verl runs seqbalance's planned step.
The drivers' ``_balance_batch`` (here), the workers' ``rearrange_micro_batches``
(`seqbalance.integrations._verl_worker`), and installing both; see
`seqbalance.integrations._verl_common` for what each does."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

from ._costs import CostSource
from ._patching import IntegrationError
from ._slots import SLOT_FIELD, describe_step, plan_driver
from ._step import StepMode
from ._verl_common import (
    _DRIVER_PARAMETERS,
    _DRIVERS,
    _ENGINE_UTILS,
    _STATE,
    _WORKER_PARAMETERS,
    ENVIRONMENT,
    _current_cost,
    _parameter_names,
    _planner_cost,
    _verl_trainer_plan,
    logger,
    step_wanted,
)
from ._verl_worker import rearrange_micro_batches

__all__ = ["ENVIRONMENT", "check", "install", "rearrange_micro_batches", "step_wanted", "uninstall"]


# -- the driver ------------------------------------------------------------------------------


def _get(config: Any, *path: str, default: Any = None) -> Any:
    value = config
    for name in path:
        if value is None:
            return default
        getter = getattr(value, "get", None)
        value = getter(name, None) if callable(getter) else getattr(value, name, None)
    return default if value is None else value


def _driver_settings(config: Any) -> tuple[dict[str, Any] | None, str]:
    """What the driver plans for, from verl's config: the cap, the engine's step, the
    mini-batch size; None and why where it plans nothing (dynamic batching off)."""
    actor = _get(config, "actor_rollout_ref", "actor")
    if not _get(actor, "use_dynamic_bsz", default=False):
        return None, "the actor's use_dynamic_bsz is off (verl forms fixed-size micro-batches)"
    cap = _get(actor, "ppo_max_token_len_per_gpu")
    if cap is None:
        return None, "the actor's config has no ppo_max_token_len_per_gpu"
    strategy = str(_get(actor, "strategy", default="fsdp"))
    multiple = None
    if strategy == "megatron":
        stages = int(_get(actor, "megatron", "pipeline_model_parallel_size", default=1))
        mode = StepMode("step", stages)
        if _get(actor, "megatron", "virtual_pipeline_model_parallel_size") is not None:
            # Megatron's microbatch_group_size_per_vp_stage defaults to the pipeline size.
            multiple = stages
        sequence_parallel = 1
    else:
        mode = StepMode("micro_batch")
        sequence_parallel = int(_get(actor, "ulysses_sequence_parallel_size", default=1))
    mini = _get(actor, "ppo_mini_batch_size")
    responses = int(_get(config, "actor_rollout_ref", "rollout", "n", default=1))
    return {
        "cap": int(cap) * sequence_parallel,
        "mode": mode,
        "multiple": multiple,
        "mini_batch": None if mini is None else int(mini) * responses,
    }, ""


def _plan_batch(lengths: np.ndarray, dp_size: int, settings: dict[str, Any]) -> tuple[Any, Any]:
    cost = _current_cost()  # one version for the whole batch
    mini = settings["mini_batch"]
    rows = mini // dp_size if mini and mini % dp_size == 0 else None
    planned = plan_driver(
        lengths,
        dp_size,
        settings["cap"],
        mini_batch_rows=rows,
        cost=_planner_cost(cost),
        mode=settings["mode"],
        trainer=_verl_trainer_plan(settings["cap"], cost, multiple=settings["multiple"]),
        num_micro_batches_multiple=settings["multiple"],
    )
    return planned, cost


def _say(planned: Any, cost: Any, settings: dict[str, Any], dp_size: int) -> None:
    logger.info(
        "seqbalance: planned step (%s, %d ranks, %d mini-batches, up to %d micro-batches a "
        "rank; the trainer's own plan kept in %d): %s",
        settings["mode"].describe(),
        dp_size,
        planned.mini_batches,
        planned.count,
        planned.kept_trainer,
        describe_step(planned.seconds, planned.trainer_seconds, cost),
    )


def _verl_balance_then_settings(
    version: str, self: Any, batch: Any, metrics: Any, logging_prefix: Any, keep_minibatch: Any
) -> tuple[Any, dict[str, Any] | None]:
    """verl's own ``_balance_batch`` of driver ``version`` ("V0" or "V1"), then the settings
    to plan with: ``(verl's answer, None)`` (said once why) where the driver keeps verl's
    layout: seqbalance off, verl's prefix grouper on (V0), or `_driver_settings` refusing."""
    original = _STATE.originals[(_driver_class(version), "_balance_batch")]
    answer = original(self, batch, metrics, logging_prefix, keep_minibatch)
    tag = version.lower() + ":"
    if not _STATE.on:
        return answer, None
    if version == "V0" and getattr(self, "use_prefix_grouper", False):
        _STATE.once(tag + "prefix", "seqbalance: verl's prefix grouper keeps its own layout")
        return answer, None
    settings, why = _driver_settings(self.config)
    if settings is None:
        _STATE.once(tag + why, "seqbalance: the driver keeps verl's layout: %s", why)
    return answer, settings


def _balance_batch_v0(
    self: Any,
    batch: Any,
    metrics: Any,
    logging_prefix: Any = "global_seqlen",
    keep_minibatch: Any = False,
) -> Any:
    answer, settings = _verl_balance_then_settings(
        "V0", self, batch, metrics, logging_prefix, keep_minibatch
    )
    if settings is None:
        return answer
    mask = batch.batch["attention_mask"]
    torch = sys.modules.get("torch") if hasattr(mask, "detach") else None
    if torch is not None:
        lengths = mask.reshape(mask.shape[0], -1).sum(-1).detach().cpu().numpy()
    else:
        lengths = np.asarray(mask).reshape(len(mask), -1).sum(-1)
    lengths = lengths.astype(np.int64)
    dp_size = int(self._get_dp_size(self.actor_rollout_wg, "actor"))
    planned, cost = _plan_batch(lengths, dp_size, settings)
    if torch is not None:
        batch.reorder(torch.as_tensor(planned.order, dtype=torch.int64))
        batch.batch[SLOT_FIELD] = torch.as_tensor(planned.codes, dtype=torch.int64)
    else:
        batch.reorder(planned.order)
        batch.batch[SLOT_FIELD] = planned.codes
    _update_metrics(metrics, lengths[planned.order], planned.partitions, logging_prefix)
    _say(planned, cost, settings, dp_size)
    return answer


def _balance_batch_v1(
    self: Any,
    batch: Any,
    metrics: Any,
    logging_prefix: Any = "global_seqlen",
    keep_minibatch: Any = False,
) -> Any:
    batch, settings = _verl_balance_then_settings(
        "V1", self, batch, metrics, logging_prefix, keep_minibatch
    )
    if settings is None:
        return batch
    lengths = np.array([int(tag["seq_len"]) for tag in batch.tags], dtype=np.int64)
    mapping = self.actor_rollout_wg._dispatch_info["actor"]
    dp_size = int(max(mapping)) + 1
    planned, cost = _plan_batch(lengths, dp_size, settings)
    batch.reorder([int(i) for i in planned.order])
    module = sys.modules[_DRIVERS["V1"][0]]
    torch = sys.modules["torch"]
    tensordict = importlib.import_module("tensordict")
    field = tensordict.TensorDict(
        {SLOT_FIELD: torch.as_tensor(planned.codes, dtype=torch.int64)}, batch_size=[lengths.size]
    )
    put = module.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=field)
    if put is not None and hasattr(put, "keys"):
        batch = put
    fields = getattr(batch, "fields", None)
    if isinstance(fields, list) and SLOT_FIELD not in fields:
        fields.append(SLOT_FIELD)
    _update_metrics(metrics, lengths[planned.order], planned.partitions, logging_prefix)
    _say(planned, cost, settings, dp_size)
    return batch


def _update_metrics(metrics: Any, lengths: np.ndarray, partitions: Any, prefix: Any) -> None:
    module = sys.modules.get("verl.utils.seqlen_balancing")
    report = getattr(module, "log_seqlen_unbalance", None)
    if report is not None:
        metrics.update(report(seqlen_list=lengths.tolist(), partitions=partitions, prefix=prefix))


_DRIVER_WRAPPERS = {"V0": _balance_batch_v0, "V1": _balance_batch_v1}


def _driver_class(version: str) -> Any:
    module_name, class_name = _DRIVERS[version]
    module = sys.modules.get(module_name)
    return None if module is None else getattr(module, class_name, None)


# -- install ---------------------------------------------------------------------------------


def _targets() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for everything the step replaces; raises
    `IntegrationError` (naming the function) before anything is changed."""
    try:
        engine_utils = importlib.import_module(_ENGINE_UTILS)
    except ImportError as exc:
        raise ImportError(
            f"seqbalance.integrations.verl.install(step=True) could not import {_ENGINE_UTILS} "
            f"({exc}): the planned step needs verl's engine workers (verl >= 0.9)"
        ) from exc
    targets: list[tuple[Any, str, Any]] = []
    current = getattr(engine_utils, "rearrange_micro_batches", None)
    if current is not rearrange_micro_batches:
        if current is None or _parameter_names(current) != _WORKER_PARAMETERS:
            raise IntegrationError(
                f"seqbalance.integrations.verl.install(step=True) refused to patch: "
                f"{_ENGINE_UTILS}.rearrange_micro_batches has parameters "
                f"{None if current is None else _parameter_names(current)}, not "
                f"{_WORKER_PARAMETERS}; nothing was patched"
            )
    targets.append((engine_utils, "rearrange_micro_batches", rearrange_micro_batches))
    for version, (module_name, class_name) in _DRIVERS.items():
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a driver module that cannot import is simply not patched
            _STATE.once(
                "import:" + version,
                "seqbalance: verl's %s driver (%s) is not patched: importing it failed (%s)",
                version,
                module_name,
                exc,
            )
            continue
        cls = getattr(module, class_name, None)
        method = None if cls is None else cls.__dict__.get("_balance_batch")
        wrapper = _DRIVER_WRAPPERS[version]
        if method is wrapper:
            targets.append((cls, "_balance_batch", wrapper))
            continue
        if method is None or _parameter_names(method) != _DRIVER_PARAMETERS:
            raise IntegrationError(
                f"seqbalance.integrations.verl.install(step=True) refused to patch: "
                f"{module_name}.{class_name}._balance_batch has parameters "
                f"{None if method is None else _parameter_names(method)}, not "
                f"{_DRIVER_PARAMETERS}; nothing was patched"
            )
        targets.append((cls, "_balance_batch", wrapper))
    return targets


def check() -> None:
    """Raise what `install` raises, changing nothing."""
    with _STATE.lock:
        _targets()


def install(source: CostSource | None) -> list[str]:
    """Turn the planned step on (the cost ``source``: install's); return what was replaced."""
    with _STATE.lock:
        targets = _targets()
        names = []
        for owner, attribute, replacement in targets:
            current = (
                owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
            )
            if current is not replacement:
                _STATE.originals[(owner, attribute)] = current
                if attribute == "rearrange_micro_batches":
                    _STATE.worker_original = current
                setattr(owner, attribute, replacement)
            names.append(f"{getattr(owner, '__name__', owner)}.{attribute}")
        _STATE.source = source
        _STATE.on = True
        _STATE.said.clear()
        logger.info("seqbalance: the planned step replaced %s", ", ".join(names))
        return names


def uninstall() -> list[str]:
    """Put every function `install` replaced back; return their names (``[]``: nothing was)."""
    with _STATE.lock:
        names = []
        for (owner, attribute), original in list(_STATE.originals.items()):
            current = (
                owner.__dict__.get(attribute)
                if isinstance(owner, type)
                else getattr(owner, attribute, None)
            )
            if current is not original:
                setattr(owner, attribute, original)
            names.append(f"{getattr(owner, '__name__', owner)}.{attribute}")
        _STATE.originals.clear()
        _STATE.on = False
        _STATE.source = None
        return names


def is_on() -> bool:
    return _STATE.on
