"""Where ``install(learn=path)`` reads the clock: verl's FSDP engines (OpenRLHF's actor:
`seqbalance.integrations._learn_openrlhf`).

**verl** (``verl.workers.engine.fsdp.transformer_impl``): ``FSDPEngine.forward_backward_batch``
(every subclass that supplies ``forward_step`` and inherits it) marks a training pass
(``forward_only`` passes are not observed); ``FSDPEngine._gradient_sync_context``, which that
loop enters around exactly one micro-batch's forward and backward on training passes only, is
the timed block; ``prepare_micro_batches`` as that module calls it gives each micro-batch's
document lengths (a nested ``input_ids``' offsets, else the attention mask's row sums). When
the pass returns, the mini-batch ends: one gather on the engine's data-parallel group. A value
head's engine (``FSDPEngineWithValueHead``, the critic) is not learnt from: the cost is the
actor's, the model the driver plans. ``MegatronEngine.forward_backward_batch`` is wrapped to say,
once and by name, that nothing is learnt there.

`uninstall` puts every method back.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from ._learn import Learner, LearnSettings
from ._patching import IntegrationError
from ._verl_common import _verl_trainer_plan
from ._verl_worker import _row_lengths

__all__ = ["VERL", "Patches"]

logger = logging.getLogger("seqbalance.integrations")

_LOCAL = threading.local()


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


class Patches:
    """One trainer's learn patches: what they replace, and the learner while installed."""

    def __init__(self, trainer: str, targets: Callable[[], list[tuple[Any, str, Any, list[str]]]]):
        self.trainer = trainer
        self._targets = targets
        self.lock = threading.Lock()
        self.learner: Learner | None = None
        self.source: Any = None
        #: (owner, attribute) -> the original
        self.originals: dict[tuple[Any, str], Any] = {}
        self.said: set[str] = set()

    def once(self, key: str, level: int, message: str, *args: Any) -> None:
        if key not in self.said:
            self.said.add(key)
            logger.log(level, message, *args)

    def original(self, owner: Any, attribute: str) -> Any:
        return self.originals[(owner, attribute)]

    def check(self) -> list[tuple[Any, str, Any]]:
        """The (owner, attribute, replacement) to patch; raises `IntegrationError` naming a
        method whose parameters differ from the release seqbalance knows, changing nothing."""
        checked = []
        for owner, attribute, replacement, expected in self._targets():
            current = _current(owner, attribute)
            if current is not replacement and (current is None or _parameters(current) != expected):
                raise IntegrationError(
                    f"seqbalance.integrations.{self.trainer.lower()}.install(learn=...) refused "
                    f"to patch: {getattr(owner, '__qualname__', owner)}.{attribute} has "
                    f"parameters {None if current is None else _parameters(current)}, not "
                    f"{expected}; nothing was patched"
                )
            checked.append((owner, attribute, replacement))
        return checked

    def install(self, settings: LearnSettings, source: Any) -> list[str]:
        with self.lock:
            targets = self.check()
            names = []
            for owner, attribute, replacement in targets:
                if _current(owner, attribute) is not replacement:
                    self.originals[(owner, attribute)] = _current(owner, attribute)
                    setattr(owner, attribute, replacement)
                names.append(f"{_name(owner)}.{attribute}")
            if self.learner is None or self.learner.path != settings.path:
                self.learner = Learner(settings, self.trainer)
            else:  # install again with the same path: the learning goes on
                self.learner.every = settings.every
            self.source = source
            self.said.clear()
            logger.info(
                "seqbalance: learn=%s: %s learns its cost (saved every %d mini-batches); "
                "replaced %s",
                settings.path,
                self.trainer,
                settings.every,
                ", ".join(names),
            )
            return names

    def uninstall(self) -> list[str]:
        with self.lock:
            names = []
            for (owner, attribute), original in list(self.originals.items()):
                if _current(owner, attribute) is not original:
                    setattr(owner, attribute, original)
                names.append(f"{_name(owner)}.{attribute}")
            self.originals.clear()
            self.learner = None
            self.source = None
            return names


def _current(owner: Any, attribute: str) -> Any:
    if isinstance(owner, type):
        return owner.__dict__.get(attribute)
    return getattr(owner, attribute, None)


def _name(owner: Any) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return str(getattr(owner, "__name__", owner))


# -- verl ------------------------------------------------------------------------------------

_FSDP = "verl.workers.engine.fsdp.transformer_impl"
_MEGATRON = "verl.workers.engine.megatron.transformer_impl"
_PASS = ["self", "data", "loss_function", "forward_only"]
_SYNC = ["self", "is_last_micro_batch"]
_PREPARE = [
    "data",
    "dp_group",
    "num_batches_divided_by",
    "same_micro_num_in_dp",
    "min_num_micro_batch",
    "use_dynamic_bsz_balance",
]


class _Pass:
    """One training pass of one engine on this thread: its micro-batches' lengths, the next."""

    def __init__(self, engine: Any, learner: Learner) -> None:
        self.engine = engine
        self.learner = learner
        self.lengths: list[list[int] | None] | None = None
        self.index = 0

    def next_lengths(self) -> list[int] | None:
        lengths = self.lengths
        index, self.index = self.index, self.index + 1
        if lengths is None or index >= len(lengths):
            return None
        return lengths[index]


class _Timed:
    """The engine's own per-micro-batch context, with the clock read inside it."""

    def __init__(self, inner: Any, block: Any) -> None:
        self.inner = inner
        self.block = block

    def __enter__(self) -> Any:
        value = self.inner.__enter__()
        self.block.__enter__()
        return value

    def __exit__(self, kind: Any, value: Any, trace: Any) -> Any:
        try:
            self.block.__exit__(kind, value, trace)
        finally:
            suppressed = self.inner.__exit__(kind, value, trace)
        return suppressed


def _value_head(engine: Any) -> bool:
    return any(cls.__name__.endswith("WithValueHead") for cls in type(engine).__mro__)


def _fsdp_forward_backward_batch(
    self: Any, data: Any, loss_function: Any, forward_only: Any = False
) -> Any:
    module = sys.modules[_FSDP]
    original = VERL.original(module.FSDPEngine, "forward_backward_batch")
    learner = VERL.learner
    if learner is None or forward_only or getattr(_LOCAL, "verl", None) is not None:
        return original(self, data, loss_function, forward_only)
    if _value_head(self):
        VERL.once(
            "value-head",
            logging.INFO,
            "seqbalance: learn=: %s (a value head: the critic) is not learnt from; the cost is "
            "the actor's (said once)",
            type(self).__name__,
        )
        return original(self, data, loss_function, forward_only)
    current = _Pass(self, learner)
    _LOCAL.verl = current
    try:
        answer = original(self, data, loss_function, forward_only)
    finally:
        _LOCAL.verl = None
    learner.end_mini_batch(self.get_data_parallel_group(), _verl_own_plan(data))
    return answer


def _fsdp_gradient_sync_context(self: Any, *, is_last_micro_batch: Any) -> Any:
    module = sys.modules[_FSDP]
    inner = VERL.original(module.FSDPEngine, "_gradient_sync_context")(
        self, is_last_micro_batch=is_last_micro_batch
    )
    current = getattr(_LOCAL, "verl", None)
    if current is None or current.engine is not self:
        return inner
    return _Timed(inner, current.learner.block(current.next_lengths()))


def _fsdp_prepare_micro_batches(
    data: Any,
    dp_group: Any = None,
    num_batches_divided_by: Any = None,
    same_micro_num_in_dp: Any = True,
    min_num_micro_batch: Any = None,
    use_dynamic_bsz_balance: Any = True,
) -> Any:
    module = sys.modules[_FSDP]
    answer = VERL.original(module, "prepare_micro_batches")(
        data,
        dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by,
        same_micro_num_in_dp=same_micro_num_in_dp,
        min_num_micro_batch=min_num_micro_batch,
        use_dynamic_bsz_balance=use_dynamic_bsz_balance,
    )
    current = getattr(_LOCAL, "verl", None)
    if current is not None and current.lengths is None:
        lengths = []
        for micro_batch in answer[0]:
            values = _row_lengths(micro_batch)
            lengths.append(None if values is None else values.tolist())
        current.lengths = lengths
    return answer


def _megatron_forward_backward_batch(
    self: Any, data: Any, loss_function: Any, forward_only: Any = False
) -> Any:
    module = sys.modules[_MEGATRON]
    original = VERL.original(module.MegatronEngine, "forward_backward_batch")
    if VERL.learner is not None and not forward_only:
        VERL.once(
            "megatron",
            logging.WARNING,
            "seqbalance: learn= learns nothing under verl's Megatron engine (%s): its 1F1B "
            "pipeline schedule runs the micro-batches, and a rank cannot see each one's time. "
            "Fit a cost with seqbalance.profile and pass it as cost= (said once)",
            type(self).__name__,
        )
    return original(self, data, loss_function, forward_only)


def _verl_own_plan(data: Any) -> Any:
    """verl's own micro-batching of every rank's lengths (`_verl_trainer_plan`), where the
    pass's data says it was dynamic; None otherwise."""
    try:
        tu = sys.modules["verl.utils.tensordict_utils"]
        if not tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True):
            return None
        sp_size = int(tu.get_non_tensor_data(data=data, key="sp_size", default=1))
        group = int(tu.get_non_tensor_data(data=data, key="force_group_size", default=1))
        cap = int(data["max_token_len_per_gpu"]) * sp_size
    except Exception:
        return None
    source = VERL.source
    cost = None if source is None else source.current()
    return _verl_trainer_plan(cap, cost, group_size=group)


def _verl_targets() -> list[tuple[Any, str, Any, list[str]]]:
    try:
        module = importlib.import_module(_FSDP)
    except ImportError as exc:
        raise ImportError(
            f"seqbalance.integrations.verl.install(learn=...) could not import {_FSDP} ({exc}): "
            "learning the cost needs verl's FSDP engine (verl >= 0.9)"
        ) from exc
    engine = module.FSDPEngine
    targets = [
        (engine, "forward_backward_batch", _fsdp_forward_backward_batch, _PASS),
        (engine, "_gradient_sync_context", _fsdp_gradient_sync_context, _SYNC),
        (module, "prepare_micro_batches", _fsdp_prepare_micro_batches, _PREPARE),
    ]
    try:
        megatron = importlib.import_module(_MEGATRON)
    except Exception as exc:  # Megatron-LM is not installed: no Megatron engine runs here
        logger.debug("seqbalance: learn=: verl's Megatron engine is not importable (%s)", exc)
    else:
        targets.append(
            (
                megatron.MegatronEngine,
                "forward_backward_batch",
                _megatron_forward_backward_batch,
                _PASS,
            )
        )
    return targets


VERL = Patches("verl", _verl_targets)
