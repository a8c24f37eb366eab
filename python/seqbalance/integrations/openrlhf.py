"""Run OpenRLHF's sequence balancing on seqbalance, without editing OpenRLHF: call `install`.

OpenRLHF carries its own copy of verl's partitioner in ``openrlhf.utils.seqlen_balancing``, and
its trainer modules import ``get_seqlen_balanced_partitions`` from there by name. `install` replaces ``karmarkar_karp``, ``greedy_partition`` and
``get_seqlen_balanced_partitions`` in that module and rebinds every already-imported
``openrlhf.*`` module holding one of the originals; `uninstall` restores them everywhere in
``openrlhf.*``. Answers are OpenRLHF's, except that more parts than items raises
`seqbalance.PartitionError` (an ``AssertionError``) instead of returning empty parts, and a
negative value raises ``ValueError``. An input seqbalance refuses by its type (``TypeError``) is
handed to OpenRLHF's own function, with one WARNING per function.

``install(cost=...)`` (a `seqbalance.TimeCost`, a `seqbalance.ModelCost`, or the path of a saved
`TimeCost`, read again whenever the file changes; without it, the path in the environment
variable ``SEQBALANCE_COST``) makes ``get_seqlen_balanced_partitions``, which OpenRLHF hands
sequence lengths (its dynamic micro-batching in the replay buffer and the experience maker),
partition each sample's cost instead: predicted seconds of a `TimeCost`, training FLOPs of a
`ModelCost`. The micro-batch count still comes from OpenRLHF's token cap, and the split keeps
it: no micro-batch holds more tokens than the heaviest of OpenRLHF's own token split (see
`seqbalance.integrations._capped`), so the cap holds wherever OpenRLHF's split keeps it.

OpenRLHF runs its actors under Ray, so patch the workers as they start:

    ray.init(runtime_env={"worker_process_setup_hook": "seqbalance.integrations.openrlhf.install"})

(with ``"env_vars": {"SEQBALANCE_COST": "/shared/run/time-cost.json"}`` in the same runtime env
to balance by a saved cost), and make seqbalance importable on every node, as for verl (see
`seqbalance.integrations.verl`: the wheel in the image, or in the runtime env's
``py_modules`` or ``pip``).

Importing this module imports nothing of OpenRLHF; `install` imports the module.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from .. import partition as _partition
from .._deprecation import keyword_only_from
from .._inputs import check_refine
from ..costs import ModelCost, TimeCost
from . import _learn_openrlhf, _openrlhf_step
from ._capped import CappedByTokens
from ._costs import CostSource, call_agreed
from ._learn_source import resolve_learning
from ._patching import IntegrationError, ModulePatch
from ._verl_step import step_wanted

__all__ = ["IntegrationError", "install", "is_installed", "uninstall"]

logger = logging.getLogger(__name__)

#: OpenRLHF's partitioner under a cost: its token split's heaviest micro-batch is the bound.
_CAPPED = CappedByTokens()

_PATCH = ModulePatch(
    target="openrlhf.utils.seqlen_balancing",
    package="openrlhf",
    # Each runs seqbalance's native function under OpenRLHF's exact signature, or OpenRLHF's own
    # for an input seqbalance refuses by type.
    partitioners={
        "karmarkar_karp": _partition.karmarkar_karp,
        "greedy_partition": _partition.greedy_partition,
        "get_seqlen_balanced_partitions": _CAPPED,
    },
    trainer="OpenRLHF",
    owner=__name__,
    install_hint=(
        "Install OpenRLHF in this environment (pip install openrlhf, which brings the "
        "dependencies its utils package imports). On a Ray cluster every node needs it, and "
        "seqbalance."
    ),
    logger=logger,
)


def get_minimum_num_micro_batch_size(
    total_lengths: Any, max_tokens_per_gpu: Any, ring_attn_size: Any, ds_tensor_parallel_size: Any
) -> Any:
    """OpenRLHF's own micro-batch count (first fit under its token cap), and the cap told to
    the cost's split of the same lengths that follows (installed by ``install(cost=...)``)."""
    count = _COUNT.originals["get_minimum_num_micro_batch_size"](
        total_lengths, max_tokens_per_gpu, ring_attn_size, ds_tensor_parallel_size
    )
    try:
        cap = max_tokens_per_gpu * ring_attn_size * ds_tensor_parallel_size  # as OpenRLHF's
    except TypeError:
        return count
    _CAPPED.remember(total_lengths, cap)
    return count


_COUNT = ModulePatch(
    target="openrlhf.utils.seqlen_balancing",
    package="openrlhf",
    replacements={"get_minimum_num_micro_batch_size": get_minimum_num_micro_batch_size},
    optional=("get_minimum_num_micro_batch_size",),
    what="OpenRLHF's count, telling the cost's split its cap (install(cost=...))",
    owner=__name__,
    install_hint=_PATCH.install_hint,
    logger=logger,
)

_BUFFER = ("openrlhf.trainer.ppo_utils.replay_buffer", "NaiveReplayBuffer")

#: install(cost=path) without the planned step: the source followed and OpenRLHF's own
#: ``NaiveReplayBuffer.setup_dynamic_batch`` (None: not replaced).
_PINNED: dict[str, Any] = {"source": None, "original": None}


def setup_dynamic_batch(self: Any, strategy: Any) -> Any:
    """OpenRLHF's own ``NaiveReplayBuffer.setup_dynamic_batch``, its partitions weighed by one
    version of the cost file: global rank 0's, agreed by one all-gather on the default group
    when ``torch.distributed`` is initialised (installed by ``install(cost=path)`` without the
    planned step)."""
    original = _PINNED["original"]
    assert original is not None
    return call_agreed(_PINNED["source"], original, self, strategy)


def _buffer_class() -> Any:
    """OpenRLHF's replay buffer class, or None where this OpenRLHF has none to pin."""
    try:
        module = importlib.import_module(_BUFFER[0])
    except ImportError:
        return None
    cls = getattr(module, _BUFFER[1], None)
    return cls if cls is not None and "setup_dynamic_batch" in vars(cls) else None


def _pin(source: CostSource) -> list[str]:
    cls = _buffer_class()
    if cls is None:
        return []
    if vars(cls)["setup_dynamic_batch"] is not setup_dynamic_batch:
        _PINNED["original"] = vars(cls)["setup_dynamic_batch"]
        cls.setup_dynamic_batch = setup_dynamic_batch
    _PINNED["source"] = source
    return ["NaiveReplayBuffer.setup_dynamic_batch"]


def _unpin() -> list[str]:
    module = sys.modules.get(_BUFFER[0])
    cls = None if module is None else getattr(module, _BUFFER[1], None)
    _PINNED["source"] = None
    if cls is None or vars(cls).get("setup_dynamic_batch") is not setup_dynamic_batch:
        return []
    cls.setup_dynamic_batch = _PINNED["original"]
    return ["NaiveReplayBuffer.setup_dynamic_batch"]


# Module-level, as install() puts them into the trainer's module (their __module__ is this one).
karmarkar_karp = _PATCH.replacements["karmarkar_karp"]
greedy_partition = _PATCH.replacements["greedy_partition"]
get_seqlen_balanced_partitions = _PATCH.replacements["get_seqlen_balanced_partitions"]


@keyword_only_from("refine", where="seqbalance.integrations.openrlhf.install")
def install(
    refine: bool | str = False,
    *,
    cost: TimeCost | ModelCost | str | os.PathLike[str] | None = None,
    step: bool | None = None,
    learn: str | os.PathLike[str] | None = None,
    learn_every: int = 10,
) -> list[str]:
    """Run OpenRLHF's partitioners on seqbalance in this process; return the names replaced.

    ``refine=True`` (or ``"exact"``) makes ``get_seqlen_balanced_partitions`` refine its split: a
    heaviest rank never heavier than OpenRLHF's, often lighter, and answers that then differ from
    OpenRLHF's; the default ``False`` keeps every answer exactly OpenRLHF's.

    ``cost`` (a `seqbalance.TimeCost`, a `seqbalance.ModelCost`, or the path of a saved
    `TimeCost`, read again whenever its file changes; without it, the path in the environment
    variable ``SEQBALANCE_COST`` when set) makes ``get_seqlen_balanced_partitions`` partition
    ``cost(lengths)`` -- float seconds, or FLOPs -- instead of the lengths, with no part holding
    more tokens than the heaviest part of OpenRLHF's token split (``equal_size=False``, as its
    dynamic batching calls it): the token cap is learnt from OpenRLHF's
    ``get_minimum_num_micro_batch_size``, replaced too (its answers unchanged), which counts the
    same lengths first. A later ``install`` without one partitions the lengths again. With a
    path (and without ``step=True``), ``NaiveReplayBuffer.setup_dynamic_batch`` is OpenRLHF's
    own on one version of the file: where ``torch.distributed`` is initialised, global rank 0's
    (one all-gather on the default group), so the ranks of one replica never form their
    micro-batches from two versions.

    ``step=True`` (``None``: the environment variable ``SEQBALANCE_STEP``) makes OpenRLHF run
    seqbalance's planned lockstep step: ``balance_experiences`` plans every optimizer step's
    micro-batches over the ranks and ``NaiveReplayBuffer.setup_dynamic_batch`` forms them (see
    the trainers page); ``step=False`` is the behaviour without it.

    ``learn=path`` (``None``: the environment variable ``SEQBALANCE_LEARN`` when set) makes the
    PPO actor learn the cost from its own micro-batches: each ``ActorPPOTrainer.training_step``
    is timed up to its optimizer step, every mini-batch's times are gathered once on the
    strategy's data-parallel group and fitted (from nothing, or updating a `TimeCost` given as
    ``cost``), and global rank 0 saves it to ``path`` every ``learn_every`` mini-batches; the
    balancing reads it from there (the lengths until the first save). ``learn`` turns the
    planned step on unless ``step=False`` or ``SEQBALANCE_STEP`` says otherwise, so the driver
    reads each version once, at its plan.

    Idempotent; logs one INFO line. Raises ``TypeError``/``ValueError`` for a bad ``refine``,
    ``cost``, ``learn`` or ``learn_every`` (``FileNotFoundError`` for a missing file),
    ``ImportError`` when ``openrlhf.utils.seqlen_balancing`` (with ``learn``,
    ``openrlhf.trainer.ray.ppo_actor``) cannot be imported, and `IntegrationError` (patching
    nothing) when a function is missing or its parameters differ from the ones seqbalance
    replaces (``(seqlen_list, k_partitions, equal_size)`` for the partitioner).
    """
    check_refine(refine)
    planned = step_wanted(step)
    _, learning, source = resolve_learning(learn, learn_every, cost)
    if learning is not None and step is None and not os.environ.get("SEQBALANCE_STEP"):
        planned = True  # the driver reads the learnt cost once per plan
    # All checked before any patches: all or nothing.
    _PATCH.check()
    if source is not None:
        _COUNT.check()
    if planned:
        _openrlhf_step.check()
    if learning is not None:
        _learn_openrlhf.OPENRLHF.check()
    names = _PATCH.install(refine)
    _CAPPED.weigh = None if source is None else source.weights
    if source is None:
        _COUNT.uninstall()
    else:
        names = names + _COUNT.install()
    if planned:
        _unpin()
        names += _openrlhf_step.install(source)
    else:
        _openrlhf_step.uninstall()
        if isinstance(source, CostSource) and source.path is not None:
            names += _pin(source)
        else:
            _unpin()
    if learning is None:
        _learn_openrlhf.OPENRLHF.uninstall()
        return names
    return names + _learn_openrlhf.OPENRLHF.install(learning, source)


def uninstall() -> list[str]:
    """Put OpenRLHF's original functions back in every ``openrlhf.*`` module; return their names."""
    _CAPPED.weigh = None
    return (
        _PATCH.uninstall()
        + _COUNT.uninstall()
        + _unpin()
        + _openrlhf_step.uninstall()
        + _learn_openrlhf.OPENRLHF.uninstall()
    )


def is_installed() -> bool:
    """Whether `install` is in effect in this process: False again once
    ``openrlhf.utils.seqlen_balancing`` is reloaded or imported afresh (its originals are back)."""
    return _PATCH.is_installed()
