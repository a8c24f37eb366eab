"""Where ``install(learn=path)`` reads the clock in OpenRLHF (``openrlhf.trainer.ray.ppo_actor``).

``ActorPPOTrainer.training_step`` (one micro-batch: forward, loss, backward, then the
optimizer's step) is the timed block, closed when the step calls
``DeepspeedStrategy.optimizer_step`` (the optimizer's work is not a micro-batch's); the
mini-batch ends after the micro-batch that steps the optimizer
(``replay_buffer.dynamic_optimizer_step`` under dynamic batching, else every
``strategy.accumulated_gradient`` micro-batches), with one gather on the strategy's ``dp`` mesh
group; ``ActorPPOTrainer.ppo_train`` closes what is left when it returns. `uninstall` puts every
method back.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

from ._learn_patches import _LOCAL, Patches

__all__ = ["OPENRLHF"]

_ACTOR = "openrlhf.trainer.ray.ppo_actor"
_STEP = ["self", "experience", "kl_ctl", "step", "loss_batch_info"]
_TRAIN = ["self", "kl_ctl"]
_OPTIMIZER = ["self", "_optimizer", "model", "_scheduler", "name", "kwargs"]


class _Open:
    """The actor's micro-batch block on this thread, open until the optimizer steps."""

    def __init__(self, block: Any) -> None:
        self.block = block
        self.open = True
        block.__enter__()

    def close(self, kind: Any = None, value: Any = None, trace: Any = None) -> None:
        if self.open:
            self.open = False
            self.block.__exit__(kind, value, trace)


def _experience_lengths(experience: Any) -> list[int] | None:
    try:
        mask = experience.attention_mask
        values = mask.reshape(mask.shape[0], -1).sum(-1)
        array = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values)
        if array.ndim != 1 or array.dtype.kind not in "iub":
            return None
        return [int(value) for value in array.tolist()]
    except Exception:
        return None


def _actor_group(trainer: Any) -> Any:
    try:
        return trainer.strategy.ds_device_mesh["dp"].get_group()
    except Exception:
        return None


def _optimizer_boundary(trainer: Any, step: Any) -> bool:
    try:
        if trainer.args.train.dynamic_batch_enable:
            return bool(trainer.replay_buffer.dynamic_optimizer_step[step])
        return (int(step) + 1) % int(trainer.strategy.accumulated_gradient) == 0
    except Exception:
        return True  # each micro-batch its own gather: slots are observations alike


def _actor_training_step(
    self: Any, experience: Any, kl_ctl: Any, step: Any, loss_batch_info: Any = None
) -> Any:
    module = sys.modules[_ACTOR]
    original = OPENRLHF.original(module.ActorPPOTrainer, "training_step")
    learner = OPENRLHF.learner
    if learner is None or getattr(_LOCAL, "actor", None) is not None:
        return original(self, experience, kl_ctl, step, loss_batch_info)
    current = _Open(learner.block(_experience_lengths(experience)))
    _LOCAL.actor = current
    try:
        answer = original(self, experience, kl_ctl, step, loss_batch_info)
    except BaseException:
        current.close(*sys.exc_info())
        raise
    finally:
        _LOCAL.actor = None
    current.close()
    if _optimizer_boundary(self, step):
        learner.end_mini_batch(_actor_group(self))
    return answer


def _actor_ppo_train(self: Any, kl_ctl: Any) -> Any:
    module = sys.modules[_ACTOR]
    answer = OPENRLHF.original(module.ActorPPOTrainer, "ppo_train")(self, kl_ctl)
    learner = OPENRLHF.learner
    if learner is not None and learner.open_micro_batches:
        learner.end_mini_batch(_actor_group(self))
    return answer


def _strategy_optimizer_step(
    self: Any, _optimizer: Any, model: Any, _scheduler: Any, name: Any = "model", **kwargs: Any
) -> Any:
    current = getattr(_LOCAL, "actor", None)
    if current is not None:
        current.close()
    module = sys.modules[_ACTOR]
    original = OPENRLHF.original(module.DeepspeedStrategy, "optimizer_step")
    return original(self, _optimizer, model, _scheduler, name, **kwargs)


def _openrlhf_targets() -> list[tuple[Any, str, Any, list[str]]]:
    try:
        module = importlib.import_module(_ACTOR)
    except ImportError as exc:
        raise ImportError(
            f"seqbalance.integrations.openrlhf.install(learn=...) could not import {_ACTOR} "
            f"({exc}): learning the cost needs OpenRLHF's Ray PPO actor (and what it imports: "
            "deepspeed, vllm)"
        ) from exc
    actor = module.ActorPPOTrainer
    return [
        (actor, "training_step", _actor_training_step, _STEP),
        (actor, "ppo_train", _actor_ppo_train, _TRAIN),
        (module.DeepspeedStrategy, "optimizer_step", _strategy_optimizer_step, _OPTIMIZER),
    ]


OPENRLHF = Patches("OpenRLHF", _openrlhf_targets)
