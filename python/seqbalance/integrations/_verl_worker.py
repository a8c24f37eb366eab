"""The worker's side of verl's planned step: ``rearrange_micro_batches`` as
``verl.workers.engine.utils`` calls it (installed by `seqbalance.integrations._verl_step`)."""

from __future__ import annotations

import importlib
import sys
from types import FrameType
from typing import Any

import numpy as np

from . import _verl_common as common
from ._slots import SLOT_FIELD, decode_slots, describe_step
from ._step import StepMode, plan_fixed

__all__ = ["rearrange_micro_batches"]

logger = common.logger
_STATE = common._STATE


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
    frame: FrameType | None = sys._getframe(2)
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
    # import_module, not sys.modules: a module another rank's thread is still importing is in
    # sys.modules half initialised; import_module waits on its import lock.
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
    assert lengths is not None and torch is not None and dist is not None
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
    mine = (rank, size, lengths.tolist(), common._current_cost() if dist.get_rank() == 0 else None)
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
    own = common._verl_trainer_plan(
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
        cost=common._planner_cost(cost),
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
