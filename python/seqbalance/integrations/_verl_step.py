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

import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ._costs import CostSource
from ._patching import IntegrationError
from ._step import (
    SLOT_FIELD,
    StepMode,
    UnmetConstraint,
    decode_slots,
    describe_step,
    plan_driver,
    plan_fixed,
    trainer_weights,
    verl_micro_batches,
)

__all__ = ["ENVIRONMENT", "install", "step_wanted", "uninstall"]

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


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.source: CostSource | None = None
        #: (module or class, attribute) -> the original
        self.originals: dict[tuple[Any, str], Any] = {}
        self.worker_original: Callable[..., Any] | None = None
        self.said: set[str] = set()

    def once(self, key: str, message: str, *args: Any) -> None:
        if key not in self.said:
            self.said.add(key)
            logger.info(message, *args)


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


# -- the worker ------------------------------------------------------------------------------


def _row_lengths(batch: Any) -> np.ndarray | None:
    """Each row's tokens, as verl's ``rearrange_micro_batches`` reads them (a nested
    ``input_ids``' offsets, else the attention mask's row sums), or None where unreadable."""
    try:
        input_ids = batch["input_ids"]
        if getattr(input_ids, "is_nested", False):
            values = input_ids.offsets().diff()
        else:
            mask = batch["attention_mask"]
            values = mask.sum(-1) if hasattr(mask, "sum") else np.asarray(mask).sum(-1)
        if hasattr(values, "detach"):
            values = values.detach().cpu().numpy()
        array = np.asarray(values)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            return None
        return array.astype(np.int64)
    except (KeyError, TypeError, AttributeError, RuntimeError, ValueError):
        return None


def _slot_codes(batch: Any, n: int) -> np.ndarray | None:
    try:
        keys = batch.keys()
        if SLOT_FIELD not in keys:
            return None
        codes = batch[SLOT_FIELD]
        if hasattr(codes, "detach"):
            codes = codes.detach().cpu().numpy()
        codes = np.asarray(codes)
    except (KeyError, TypeError, AttributeError, RuntimeError):
        return None
    if codes.shape != (n,) or codes.dtype.kind not in "iu":
        return None
    return codes.astype(np.int64)


def _engine_mode(num_batches_divided_by: Any) -> tuple[StepMode, str]:
    """The step the calling engine runs: Megatron's 1F1B at its pipeline size, else lockstep."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        engine = frame.f_locals.get("self")
        if engine is not None and hasattr(engine, "forward_backward_batch"):
            for cls in type(engine).__mro__:
                module_name = getattr(cls, "__module__", "") or ""
                if module_name.startswith("verl.workers.engine.megatron"):
                    module = sys.modules.get(module_name)
                    parallel_state = getattr(module, "mpu", None)
                    stages = 1
                    if parallel_state is not None:
                        stages = int(parallel_state.get_pipeline_model_parallel_world_size())
                    return StepMode("step", max(stages, 1)), type(engine).__name__
            return StepMode("micro_batch"), type(engine).__name__
        frame = frame.f_back
    return StepMode("micro_batch"), "an unnamed engine"


def _collective_device(dist: Any) -> str:
    if dist.get_backend() == "gloo":
        return "cpu"
    device = sys.modules.get("verl.utils.device")
    return device.get_device_name() if device is not None else "cuda"


def _select(batch: Any, parts: list[list[int]]) -> list[Any]:
    tensordict_utils = sys.modules.get("verl.utils.tensordict_utils")
    if tensordict_utils is None:
        tensordict_utils = importlib.import_module("verl.utils.tensordict_utils")
    return [tensordict_utils.index_select_tensor_dict(batch, part) for part in parts]


def rearrange_micro_batches(
    batch: Any,
    max_token_len: Any,
    dp_group: Any = None,
    num_batches_divided_by: Any = None,
    same_micro_num_in_dp: Any = True,
    min_num_micro_batch: Any = None,
    use_dynamic_bsz_balance: Any = True,
    force_group_size: Any = 1,
) -> tuple[list[Any], list[list[int]]]:
    """verl's ``rearrange_micro_batches`` forming seqbalance's planned step (installed in
    ``verl.workers.engine.utils`` by ``install(step=True)``)."""
    original = _STATE.worker_original
    arguments = (
        batch,
        max_token_len,
        dp_group,
        num_batches_divided_by,
        same_micro_num_in_dp,
        min_num_micro_batch,
        use_dynamic_bsz_balance,
        force_group_size,
    )
    assert original is not None
    if not _STATE.on:
        return original(*arguments)
    lengths = _row_lengths(batch)
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    initialized = dist is not None and dist.is_available() and dist.is_initialized()
    reason = None
    if lengths is None:
        reason = "its batch has no integer attention_mask or nested input_ids to read lengths from"
    elif not same_micro_num_in_dp:
        reason = "same_micro_num_in_dp=False (counts not kept equal across ranks)"
    elif not initialized or dp_group is None:
        reason = "there is no process group to plan every data-parallel rank with"
    cap, group = int(max_token_len), int(force_group_size or 1)
    multiple = None if num_batches_divided_by is None else int(num_batches_divided_by)
    minimum = None if min_num_micro_batch is None else int(min_num_micro_batch)
    codes = None if lengths is None else _slot_codes(batch, lengths.size)
    parts = (
        None
        if codes is None or lengths is None
        else decode_slots(
            codes, lengths, cap, min_count=minimum, multiple=multiple, group_size=group
        )
    )
    if reason is not None:
        if parts is not None and not initialized:
            return _select(batch, parts), parts  # one process: the driver's plan as it is
        _STATE.once(
            "worker:" + reason,
            "seqbalance: verl's own rearrange_micro_batches formed the micro-batches: %s "
            "(said once)",
            reason,
        )
        return original(*arguments)
    assert lengths is not None and dist is not None
    device = _collective_device(dist)
    agreed = torch.tensor([int(parts is not None)], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if int(agreed.item()) == 1 and parts is not None:
        return _select(batch, parts), parts
    # Joint plan: every rank's lengths and global rank 0's cost, in one all-gather on the
    # default group (every rank of every replica enters it; dp_group alone cannot reach a
    # replica's other ranks).
    rank = dist.get_rank(group=dp_group)
    size = dist.get_world_size(group=dp_group)
    mine = (rank, size, lengths.tolist(), _current_cost() if dist.get_rank() == 0 else None)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    cost = gathered[0][3]
    by_rank: dict[int, np.ndarray] = {}
    for dp_rank, _, values, _ in gathered:
        by_rank.setdefault(int(dp_rank), np.asarray(values, dtype=np.int64))
    if sorted(by_rank) != list(range(size)):
        raise RuntimeError(
            f"seqbalance: the default group holds data-parallel ranks {sorted(by_rank)}, not "
            f"0..{size - 1}: the planned step needs every rank of dp_group in the default group"
        )
    rank_lengths = [by_rank[r] for r in range(size)]
    mode, engine = _engine_mode(num_batches_divided_by)
    own = _verl_trainer_plan(
        cap,
        cost,
        min_count=minimum,
        multiple=multiple,
        group_size=group,
        balance=bool(use_dynamic_bsz_balance),
    )(rank_lengths)
    planned = plan_fixed(
        rank_lengths,
        cap,
        cost=_planner_cost(cost),
        mode=mode,
        trainer=own,
        min_num_micro_batches=minimum,
        num_micro_batches_multiple=multiple,
        force_group_size=group,
    )
    if dist.get_rank() == 0:
        logger.debug(
            "seqbalance: %s planned its micro-batches (%s, %d ranks x %d): %s",
            engine,
            mode.describe(),
            size,
            planned.count,
            describe_step(planned.seconds, planned.trainer_seconds, cost),
        )
    local = planned.plan[rank]
    return _select(batch, local), local


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


def _balance_batch_v0(
    self: Any,
    batch: Any,
    metrics: Any,
    logging_prefix: Any = "global_seqlen",
    keep_minibatch: Any = False,
) -> Any:
    original = _STATE.originals[(_driver_class("V0"), "_balance_batch")]
    answer = original(self, batch, metrics, logging_prefix, keep_minibatch)
    if not _STATE.on:
        return answer
    if getattr(self, "use_prefix_grouper", False):
        _STATE.once("v0:prefix", "seqbalance: verl's prefix grouper keeps its own layout")
        return answer
    settings, why = _driver_settings(self.config)
    if settings is None:
        _STATE.once("v0:" + why, "seqbalance: the driver keeps verl's layout: %s", why)
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
    original = _STATE.originals[(_driver_class("V1"), "_balance_batch")]
    batch = original(self, batch, metrics, logging_prefix, keep_minibatch)
    if not _STATE.on:
        return batch
    settings, why = _driver_settings(self.config)
    if settings is None:
        _STATE.once("v1:" + why, "seqbalance: the driver keeps verl's layout: %s", why)
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
