"""``seqbalance.integrations.openrlhf.install(step=True)``: OpenRLHF runs the planned step.

- ``balance_experiences`` (``openrlhf.trainer.ppo_utils.experience``, and every ``openrlhf.*``
  module that imported it by name, ``openrlhf.trainer.ppo_trainer`` among them): OpenRLHF's own
  balancing runs first (its layout decides which samples each rank's optimizer steps hold), then
  every step's samples are planned over the ranks in lockstep (`plan_driver`), each rank's
  experience rebuilt in run order, and each sample's slot carried in its ``info`` under
  ``seqbalance_slot``.
- ``NaiveReplayBuffer.setup_dynamic_batch``: the driver's micro-batches where every rank's
  items carry valid slots (one all-reduce on the default group decides it for all), else a
  joint plan from an all-gather of every data-parallel rank's lengths on the default group with
  global rank 0's cost version. OpenRLHF's own method then fills its five ``dynamic_*`` lists
  around those micro-batches (its counts and partitions answered from the plan), so the loss
  scales, token counts and optimizer steps are computed by OpenRLHF's code. Where it cannot plan
  (no process group) OpenRLHF's own, said once.

OpenRLHF reduces gradients after every micro-batch under dynamic batching, at every ZeRO stage:
its step is lockstep. The cost is the installed one, else tokens (what OpenRLHF balances); the
cap is ``max_tokens_per_gpu`` times the ring-attention and tensor-parallel sizes, as OpenRLHF
counts it. OpenRLHF's own split does not check the cap; where it breaks it, it is never kept.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import partition as _partition
from ._costs import CostSource
from ._patching import IntegrationError, SaysOnce
from ._slots import decode_slots, describe_step, plan_driver
from ._step import StepMode, UnmetConstraint, plan_fixed, trainer_weights

__all__ = ["install", "uninstall"]

logger = logging.getLogger("seqbalance.integrations.openrlhf")

SLOT_KEY = "seqbalance_slot"
_EXPERIENCE = "openrlhf.trainer.ppo_utils.experience"
_BUFFER = ("openrlhf.trainer.ppo_utils.replay_buffer", "NaiveReplayBuffer")
LOCKSTEP = StepMode("micro_batch")


class _State(SaysOnce):
    def __init__(self) -> None:
        super().__init__(logger)
        self.lock = threading.Lock()
        self.on = False
        self.source: CostSource | None = None
        self.weigh: Callable[[Any], Any] | None = None
        self.balance_original: Callable[..., Any] | None = None
        self.setup_original: Callable[..., Any] | None = None
        self.rebound: list[tuple[Any, str]] = []


_STATE = _State()


def _current_cost() -> Any:
    return None if _STATE.source is None else _STATE.source.current()


def _planner_cost(cost: Any) -> Any:
    return "tokens" if cost is None else cost


def _cap(args: Any) -> int:
    return (
        int(args.train.max_tokens_per_gpu)
        * int(args.ds.ring_attn_size)
        * int(args.ds.tensor_parallel_size)
    )


def _openrlhf_plan(cap: int, cost: Any) -> Callable[[list[np.ndarray]], Any]:
    """OpenRLHF's own micro-batching of one step on every rank: the most first-fit count of any
    rank (all-reduced, max), each rank's lengths (its costs under ``install(cost=...)``) split
    into that many by largest differencing; its cap unchecked."""

    def own(rank_lengths: list[np.ndarray]) -> Any:
        counts = []
        for lengths in rank_lengths:
            bins: list[int] = []
            for length in lengths.tolist():
                for i, load in enumerate(bins):
                    if load + length <= cap:
                        bins[i] += length
                        break
                else:
                    bins.append(length)
            counts.append(len(bins))
        count = max(counts)
        if count < 1 or any(len(lengths) < count for lengths in rank_lengths):
            return None
        plan = []
        for lengths in rank_lengths:
            values = lengths.tolist() if cost is None else _weights(cost, lengths).tolist()
            plan.append(_partition.get_seqlen_balanced_partitions(values, count, False))
        return plan

    return own


def _weights(cost: Any, lengths: np.ndarray) -> np.ndarray:
    weights = trainer_weights(cost, lengths, "tokens")
    return weights


# -- the driver ------------------------------------------------------------------------------


def balance_experiences(experiences: Any, args: Any) -> Any:
    """OpenRLHF's ``balance_experiences``, each rank's experience then laid out as seqbalance's
    planned step (installed by ``install(step=True)``)."""
    original = _STATE.balance_original
    assert original is not None
    balanced = original(experiences, args)
    if not _STATE.on:
        return balanced
    module = sys.modules[_EXPERIENCE]
    ranks = len(balanced)
    items = [module.split_experience_batch(experience) for experience in balanced]
    counts = {len(rank) for rank in items}
    local = int(args.train.batch_size) // max(ranks, 1)
    if len(counts) != 1 or ranks < 1:
        _STATE.once(
            "driver:counts",
            "seqbalance: OpenRLHF's layout kept: its ranks hold %s samples (unequal)",
            sorted(counts),
        )
        return balanced
    flat = [item for rank in items for item in rank]
    lengths = np.array([int(item.total_length) for item in flat], dtype=np.int64)
    cap = _cap(args)
    cost = _current_cost()
    try:
        planned = plan_driver(
            lengths,
            ranks,
            cap,
            mini_batch_rows=local if local > 0 else None,
            cost=_planner_cost(cost),
            mode=LOCKSTEP,
            trainer=_openrlhf_plan(cap, cost),
        )
    except UnmetConstraint as exc:
        # The driver is one process: raising here stops the run before any worker waits.
        raise ValueError(
            f"seqbalance: the planned step cannot keep OpenRLHF's cap: {exc}"
        ) from None
    chunk = lengths.size // ranks
    rebuilt = []
    for r in range(ranks):
        rank_items = []
        for position in range(r * chunk, (r + 1) * chunk):
            item = flat[int(planned.order[position])]
            item.info[SLOT_KEY] = int(planned.codes[position])
            rank_items.append(item)
        rebuilt.append(module.make_experience_batch(rank_items))
    logger.info(
        "seqbalance: planned step (lockstep, %d ranks, %d optimizer steps, up to %d micro-batches "
        "a rank; OpenRLHF's own plan kept in %d): %s",
        ranks,
        planned.mini_batches,
        planned.count,
        planned.kept_trainer,
        describe_step(planned.seconds, planned.trainer_seconds, cost),
    )
    return rebuilt


# -- the worker ------------------------------------------------------------------------------


def _slot_of(item: Any) -> int | None:
    value = getattr(item, "info", {}).get(SLOT_KEY)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _plans(buffer: Any, strategy: Any, torch: Any, dist: Any) -> list[list[list[int]]] | None:
    """Each optimizer step's micro-batches on this rank (indexes within the step), or None
    where OpenRLHF's own method plans alone."""
    args = strategy.args
    lengths = np.array([int(item.total_length) for item in buffer.items], dtype=np.int64)
    dp_group = strategy.ds_device_mesh["dp"].get_group()
    dp_size = dist.get_world_size(group=dp_group)
    local = int(args.train.batch_size) // dp_size
    expected = (
        int(args.rollout.batch_size)
        * int(args.rollout.n_samples_per_prompt)
        // int(args.train.batch_size)
    )
    cap = _cap(args)
    device = "cpu" if dist.get_backend() == "gloo" else torch.cuda.current_device()
    steps = torch.tensor(
        min(expected, lengths.size // max(local, 1)), dtype=torch.int64, device=device
    )
    dist.all_reduce(steps, op=dist.ReduceOp.MIN, group=dp_group)
    steps = int(steps.item())
    if steps == 0 or local == 0:
        return None
    windows = [lengths[i * local : (i + 1) * local] for i in range(steps)]
    slots = [_slot_of(item) for item in buffer.items[: steps * local]]
    parts = None
    if all(s is not None for s in slots):
        codes = np.array(slots, dtype=np.int64)
        parts = [
            decode_slots(codes[i * local : (i + 1) * local], windows[i], cap) for i in range(steps)
        ]
        if any(p is None for p in parts):
            parts = None
    agreed = torch.tensor([int(parts is not None)], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if int(agreed.item()) == 1 and parts is not None:
        return parts  # type: ignore[return-value]
    rank = dist.get_rank(group=dp_group)
    mine = (rank, [w.tolist() for w in windows], _current_cost() if dist.get_rank() == 0 else None)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    cost = gathered[0][2]
    by_rank: dict[int, list[list[int]]] = {}
    for dp_rank, values, _ in gathered:
        by_rank.setdefault(int(dp_rank), values)
    plans = []
    for step in range(steps):
        rank_lengths = [np.asarray(by_rank[r][step], dtype=np.int64) for r in range(dp_size)]
        planned = plan_fixed(
            rank_lengths,
            cap,
            cost=_planner_cost(cost),
            mode=LOCKSTEP,
            trainer=_openrlhf_plan(cap, cost)(rank_lengths),
        )
        plans.append(planned.plan[rank])
    return plans


def setup_dynamic_batch(self: Any, strategy: Any) -> Any:
    """OpenRLHF's ``NaiveReplayBuffer.setup_dynamic_batch`` on seqbalance's planned
    micro-batches (installed by ``install(step=True)``)."""
    original = _STATE.setup_original
    assert original is not None
    if not _STATE.on:
        return original(self, strategy)
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_initialized():
        _STATE.once(
            "worker:group",
            "seqbalance: OpenRLHF's own setup_dynamic_batch formed the micro-batches: there is "
            "no process group to plan every data-parallel rank with (said once)",
        )
        return original(self, strategy)
    plans = _plans(self, strategy, torch, dist)
    if plans is None:
        return original(self, strategy)
    # OpenRLHF's replay-buffer module, imported at install: its functions are looked up by name.
    module: Any = sys.modules[_BUFFER[0]]
    counts = iter([len(plan) for plan in plans])
    partitions = iter(plans)
    saved = (module.get_minimum_num_micro_batch_size, module.get_seqlen_balanced_partitions)

    def count_of(*_: Any, **__: Any) -> int:
        return next(counts)

    def partition_of(*_: Any, **__: Any) -> list[list[int]]:
        return [list(part) for part in next(partitions)]

    # OpenRLHF's own method fills its five lists around the planned micro-batches: its counts
    # and partitions are answered from the plan, step by step, for this call only.
    module.get_minimum_num_micro_batch_size = count_of
    module.get_seqlen_balanced_partitions = partition_of
    try:
        return original(self, strategy)
    finally:
        module.get_minimum_num_micro_batch_size, module.get_seqlen_balanced_partitions = saved


# -- install ---------------------------------------------------------------------------------


def _names(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def check() -> tuple[Any, Any, Any]:
    try:
        experience = importlib.import_module(_EXPERIENCE)
        buffer_module = importlib.import_module(_BUFFER[0])
    except ImportError as exc:
        raise ImportError(
            f"seqbalance.integrations.openrlhf.install(step=True) could not import OpenRLHF's "
            f"trainer ({exc}): pip install openrlhf"
        ) from exc
    balance = getattr(experience, "balance_experiences", None)
    if balance is not balance_experiences and (
        balance is None or _names(balance) != ["experiences", "args"]
    ):
        raise IntegrationError(
            f"seqbalance.integrations.openrlhf.install(step=True) refused to patch: "
            f"{_EXPERIENCE}.balance_experiences is not (experiences, args); nothing was patched"
        )
    cls = getattr(buffer_module, _BUFFER[1], None)
    setup = None if cls is None else cls.__dict__.get("setup_dynamic_batch")
    if setup is not setup_dynamic_batch and (
        setup is None or _names(setup) != ["self", "strategy"]
    ):
        raise IntegrationError(
            f"seqbalance.integrations.openrlhf.install(step=True) refused to patch: "
            f"{_BUFFER[0]}.{_BUFFER[1]}.setup_dynamic_batch is not (self, strategy); nothing was "
            "patched"
        )
    return experience, balance, cls


def install(source: CostSource | None) -> list[str]:
    with _STATE.lock:
        experience, balance, cls = check()
        if balance is not balance_experiences:
            _STATE.balance_original = balance
        if cls.__dict__["setup_dynamic_batch"] is not setup_dynamic_batch:
            _STATE.setup_original = cls.__dict__["setup_dynamic_batch"]
            cls.setup_dynamic_batch = setup_dynamic_batch
        # balance_experiences is imported by name (openrlhf.trainer.ppo_trainer and the
        # ppo_utils package): every openrlhf module holding the original is rebound.
        for name, module in list(sys.modules.items()):
            if module is None or not (name == "openrlhf" or name.startswith("openrlhf.")):
                continue
            for attribute, value in list(vars(module).items()):
                if value is _STATE.balance_original:
                    setattr(module, attribute, balance_experiences)
                    _STATE.rebound.append((module, attribute))
        _STATE.source = source
        _STATE.on = True
        _STATE.said.clear()
        names = ["balance_experiences", "NaiveReplayBuffer.setup_dynamic_batch"]
        logger.info("seqbalance: the planned step replaced %s", ", ".join(names))
        return names


def uninstall() -> list[str]:
    with _STATE.lock:
        if not _STATE.on and not _STATE.rebound:
            return []
        for module, attribute in _STATE.rebound:
            if getattr(module, attribute, None) is balance_experiences:
                setattr(module, attribute, _STATE.balance_original)
        _STATE.rebound.clear()
        buffer_module = sys.modules.get(_BUFFER[0])
        cls = None if buffer_module is None else getattr(buffer_module, _BUFFER[1], None)
        if cls is not None and cls.__dict__.get("setup_dynamic_batch") is setup_dynamic_batch:
            cls.setup_dynamic_batch = _STATE.setup_original
        _STATE.on = False
        _STATE.source = None
        return ["balance_experiences", "NaiveReplayBuffer.setup_dynamic_batch"]
