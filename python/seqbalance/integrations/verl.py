"""Run verl's sequence balancing on seqbalance, without editing verl: call `install`.

    import seqbalance.integrations.verl
    seqbalance.integrations.verl.install()   # before building the trainer

`install` replaces ``karmarkar_karp``, ``greedy_partition``, ``get_seqlen_balanced_partitions``
and (where the installed verl has it) ``get_group_balanced_partitions`` in
``verl.utils.seqlen_balancing``. Everything in verl that calls them through that module then runs
natively: ``rearrange_micro_batches`` and ``prepare_dynamic_batch`` (dynamic micro-batching),
``get_group_balanced_partitions``, and the trainer's batch balancing. verl's trainer imports the
partitioner by name (``from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions``),
so `install` also rebinds every already-imported ``verl.*`` module that holds one of the
originals; modules imported afterwards pick up the replacements by themselves. `uninstall`
puts verl's functions back everywhere in ``verl.*``.

Answers are verl's, index for index and in the same order (the exactness contract of
seqbalance's partitioners), except where verl's would not be a valid partition: ``k_partitions``
greater than the number of items (verl's ``karmarkar_karp`` and ``greedy_partition`` return empty
parts; seqbalance raises `seqbalance.PartitionError`, an ``AssertionError`` like verl's own
check in ``get_seqlen_balanced_partitions``), negative values (``ValueError``), and NumPy arrays of
a dtype narrower than 64 bits whose sums overflow it (verl adds in the array's dtype and wraps
around; seqbalance adds exactly). An input that seqbalance refuses by its type (``TypeError``:
values it cannot compute exactly as verl does) is handed to verl's own function, which answers as
it always did; a WARNING says so once per function.
``get_group_balanced_partitions`` runs natively on integer lengths (what verl's trainer passes:
``attention_mask.sum(-1).tolist()``); on any other lengths it calls verl's original, whose workload
arithmetic in torch the native path does not reproduce. A ``uid_list`` of another length than
``seqlen_list`` raises ``ValueError`` instead of verl's ``AssertionError``.

**Balancing by a cost.** ``install(cost=...)`` also replaces verl's ``calculate_workload``
(``24576 * L + L**2``, "calibrated for 7B") in ``verl.utils.seqlen_balancing`` and in every
``verl.*`` module that imported it by name (in 0.9.1 ``verl.trainer.ppo.ray_trainer``,
``verl.trainer.ppo.v1.trainer_base`` and ``verl.trainer.sft_trainer_ray``): with a
`seqbalance.TimeCost` each sample weighs its predicted seconds in int64 nanoseconds,
``rint(cost(lengths) * 1e9)`` (no per-micro-batch term); with a `seqbalance.ModelCost` its
training FLOPs, as int64. The answer is a tensor on the input's device; verl passes int64 and
float32 tensors (lengths in float32 must be whole numbers). Dynamic micro-batching, the driver's
batch balancing, the group balancing and the SFT trainer then balance by the cost. ``cost`` may
be the path of a saved `TimeCost`, read again whenever the file changes (so a trainer whose rank
0 saves its `seqbalance.StepTimer`'s cost every few steps, replacing the file in one step with
``os.replace``, feeds the driver); without ``cost``, the environment variable
``SEQBALANCE_COST`` names that path, which is how Ray's argument-less setup hook gets it:

    ray.init(runtime_env={
        "worker_process_setup_hook": "seqbalance.integrations.verl.install",
        "env_vars": {"SEQBALANCE_COST": "/shared/run/time-cost.json"},
    })

**Ray workers.** verl runs its trainer and workers as Ray actors in other processes, so calling
`install` in the launch script patches only the driver. Have Ray call it in every worker
process as it starts, before any actor code runs:

    ray.init(runtime_env={"worker_process_setup_hook": "seqbalance.integrations.verl.install"})

or, with verl's own launcher (it merges ``ray_kwargs.ray_init.runtime_env`` into ``ray.init``):

    python -m verl.trainer.main_ppo ... \\
        +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=seqbalance.integrations.verl.install

Every worker must be able to import seqbalance. Build the wheel once (``make wheel``, see the
README's "Wheels for a cluster") and either install it on every node next to verl (in the image),
or add it to the same runtime env: ``"py_modules": ["dist/seqbalance-<version>-cp310-abi3-...whl"]``
(Ray uploads it with the job and installs it on each worker) or, from a file system every node
mounts, ``"pip": ["/shared/wheels/seqbalance-...whl"]``. A worker that cannot import verl fails at
start with the `install` error below, which names what is missing.

Importing this module imports neither torch nor verl; `install` imports
``verl.utils.seqlen_balancing`` (which needs torch, transformers, tensordict, ray and omegaconf).
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any

import numpy as np

from .. import partition as _partition
from .._deprecation import keyword_only_from
from .._inputs import as_int64_array, check_refine
from ..costs import ModelCost, TimeCost
from ..planning import groups as _groups
from . import _learn_patches, _verl_step
from ._costs import CostSource, as_trainer_tensor, call_agreed, lengths_of
from ._learn_source import LearntSource, resolve_learning
from ._patching import IntegrationError, ModulePatch
from ._verl_step import step_wanted

__all__ = ["IntegrationError", "install", "is_installed", "uninstall"]

logger = logging.getLogger(__name__)


def _integer_lengths(seqlen_list: Any) -> bool:
    """True for the inputs on which verl's group workloads are plain integer arithmetic."""
    if isinstance(seqlen_list, np.ndarray):
        return seqlen_list.dtype.kind in "iu"
    if isinstance(seqlen_list, (list, tuple)):
        return all((type(item) is int) or isinstance(item, np.integer) for item in seqlen_list)
    return False


def get_group_balanced_partitions(
    seqlen_list: Any, uid_list: Any, k_partitions: Any
) -> list[list[int]]:
    """verl's ``get_group_balanced_partitions`` on seqbalance (installed by `install`).

    Integer lengths go to `seqbalance.group_balanced_partitions`: verl's answer, without a
    torch call per sample; with ``install(cost=...)`` each sample weighs what the installed
    ``calculate_workload`` gives it (the cost's int64 nanoseconds or FLOPs), as verl's own
    function would. Other lengths (floats, tensors) go to verl's original, whose workloads
    are computed in torch's arithmetic for the tensor's dtype (through the installed
    ``calculate_workload`` when there is a cost).
    """
    if not _integer_lengths(seqlen_list):
        original = _PATCH.originals.get("get_group_balanced_partitions")
        if original is not None:
            return original(seqlen_list, uid_list, k_partitions)
    source = _SOURCE[0]
    weights: Any = "workload"
    if source is not None:
        weights = source.nanoseconds(as_int64_array(seqlen_list, "seqlen_list"))
    return _groups.balanced_groups(
        seqlen_list, uid_list, k_partitions, True, weights, _PATCH.refine, "seqlen_list"
    )


_PATCH = ModulePatch(
    target="verl.utils.seqlen_balancing",
    package="verl",
    # Each runs seqbalance's native function under verl's exact signature, or verl's own for an
    # input seqbalance refuses by type.
    partitioners={
        "karmarkar_karp": _partition.karmarkar_karp,
        "greedy_partition": _partition.greedy_partition,
        "get_seqlen_balanced_partitions": _partition.get_seqlen_balanced_partitions,
    },
    trainer="verl",
    replacements={
        "get_group_balanced_partitions": get_group_balanced_partitions,
    },
    # Newer than the other three: older verl releases do not have it.
    optional=("get_group_balanced_partitions",),
    owner=__name__,
    install_hint=(
        "Install verl in this environment (pip install verl); importing "
        "verl.utils.seqlen_balancing also needs torch, transformers, tensordict, ray and "
        "omegaconf. On a Ray cluster every node needs them, and seqbalance."
    ),
    logger=logger,
)

#: The cost ``install(cost=...)`` balances by (None: verl's own workload); under ``learn=``
#: the learnt cost, whose ``current()`` is None until one is saved.
_SOURCE: list[CostSource | LearntSource | None] = [None]


def calculate_workload(seqlen_list: Any) -> Any:
    """verl's ``calculate_workload`` by the cost given to `install`: int64 nanoseconds of a
    `TimeCost` (``rint(cost(lengths) * 1e9)``) or FLOPs of a `ModelCost`, shaped as the input,
    a tensor on its device (installed by ``install(cost=...)``)."""
    source = _SOURCE[0]
    # Uninstalled yet still referenced somewhere, or nothing learnt yet: verl's own.
    if source is None or source.current() is None:
        return _WORKLOAD.originals["calculate_workload"](seqlen_list)
    lengths, device = lengths_of(seqlen_list)
    return as_trainer_tensor(source.nanoseconds(lengths.reshape(-1)), lengths.shape, device)


_WORKLOAD = ModulePatch(
    target="verl.utils.seqlen_balancing",
    package="verl",
    replacements={"calculate_workload": calculate_workload},
    what="seqbalance's cost (install(cost=...))",
    owner=__name__,
    install_hint=_PATCH.install_hint,
    logger=logger,
)


def rearrange_micro_batches(*args: Any, **kwargs: Any) -> Any:
    """verl's own ``rearrange_micro_batches``, its ``calculate_workload`` calls on one version of
    the cost file: global rank 0's, agreed by one all-gather on the default group when
    ``torch.distributed`` is initialised (installed by ``install(cost=path)`` without the planned
    step; verl's parameters, whatever they are, and verl's answers)."""
    return call_agreed(_SOURCE[0], _PIN.originals["rearrange_micro_batches"], *args, **kwargs)


_PIN = ModulePatch(
    target="verl.utils.seqlen_balancing",
    package="verl",
    replacements={"rearrange_micro_batches": rearrange_micro_batches},
    optional=("rearrange_micro_batches",),
    what="verl's own, on one cost version every rank agrees (install(cost=path))",
    owner=__name__,
    install_hint=_PATCH.install_hint,
    logger=logger,
)


def _pin_check() -> None:
    """`_PIN.check` for verl's ``rearrange_micro_batches`` as it is: the pass-through takes
    its parameters (it forwards them all), so it is checked under verl's own signature."""
    module = _PIN._import_target()
    current = getattr(module, "rearrange_micro_batches", None)
    if callable(current) and current is not rearrange_micro_batches:
        # Python reads a function's __signature__; typeshed's function type does not declare it.
        rearrange_micro_batches.__signature__ = inspect.signature(current)  # type: ignore[attr-defined]
    _PIN.check()


# Module-level, as install() puts them into the trainer's module (their __module__ is this one).
karmarkar_karp = _PATCH.replacements["karmarkar_karp"]
greedy_partition = _PATCH.replacements["greedy_partition"]
get_seqlen_balanced_partitions = _PATCH.replacements["get_seqlen_balanced_partitions"]


@keyword_only_from("refine", where="seqbalance.integrations.verl.install")
def install(
    refine: bool | str = False,
    *,
    cost: TimeCost | ModelCost | str | os.PathLike[str] | None = None,
    step: bool | None = None,
    learn: str | os.PathLike[str] | None = None,
    learn_every: int = 10,
) -> list[str]:
    """Run verl's partitioners on seqbalance in this process, and balance by ``cost`` when
    one is given; return the names replaced.

    Replaces the functions in ``verl.utils.seqlen_balancing`` and rebinds every imported
    ``verl.*`` module that imported one of them by name. Idempotent: a second call changes
    nothing (it only rebinds a module that still holds an original) and returns the same names;
    its arguments are what holds from then on. Logs one INFO line saying what was replaced.

    With the default ``refine=False`` every replaced function returns exactly what verl's does.
    ``refine=True`` (or ``"exact"``) makes ``get_seqlen_balanced_partitions`` and
    ``get_group_balanced_partitions`` refine their split (`seqbalance.refine_partitions`):
    the heaviest rank is never heavier than verl's and often lighter -- on a GRPO batch of 512
    prompts x 16 responses over 8 ranks with equal group counts, max/mean 1.0952 -> 1.0000
    (``seqbalance partition -k 8 --group-size 16 --equal-size`` shows it on that batch). The
    answers then differ from verl's; ``karmarkar_karp`` and ``greedy_partition`` stay exact.

    ``cost`` (a `seqbalance.TimeCost`, a `seqbalance.ModelCost`, or the path of a saved
    `TimeCost`; without it, the path in the environment variable ``SEQBALANCE_COST`` when set)
    also replaces verl's ``calculate_workload`` everywhere verl holds it: each sample then
    weighs ``rint(cost(lengths) * 1e9)`` int64 nanoseconds of a `TimeCost` (the FLOPs of a
    `ModelCost`), and a cost given by path is read again whenever its file changes. Without a
    cost (and without the variable), verl's ``calculate_workload`` is verl's, restored if an
    earlier call replaced it. With a path (and without ``step=True``), ``rearrange_micro_batches``
    is replaced by a pass-through to verl's: where ``torch.distributed`` is initialised, each
    call forms its micro-batches from global rank 0's version of the file (one all-gather on the
    default group), so the ranks of one replica never form them from two versions.

    ``step=True`` (``None``: the environment variable ``SEQBALANCE_STEP``, unset meaning off)
    makes verl run seqbalance's planned step (`seqbalance.plan_dp_micro_batches` for the step
    its engine runs): the V0 and V1 drivers' ``_balance_batch`` plan every mini-batch and send
    each sample's micro-batch slot with it, and ``rearrange_micro_batches`` as
    ``verl.workers.engine.utils`` calls it forms those micro-batches (or plans every
    data-parallel rank's jointly, from one cost version); see the trainers page. The names
    it replaced follow the others in the answer. ``step=False`` is the behaviour without it,
    answer for answer, and puts back what an earlier ``step=True`` replaced.

    ``learn=path`` (``None``: the environment variable ``SEQBALANCE_LEARN`` when set) makes
    verl's FSDP engines learn the cost from the micro-batches they train: each training
    micro-batch of ``FSDPEngine.forward_backward_batch`` is timed, every mini-batch's times are
    gathered once on the data-parallel group and fitted (`seqbalance.TimeCost.fit_synchronized`
    from nothing, updated after; a `TimeCost` given as ``cost`` is updated instead, a
    `ModelCost` is the model fitted), and global rank 0 saves the cost to ``path`` every
    ``learn_every`` mini-batches; the balancing reads it from there (verl's own until the
    first save). ``learn`` turns the planned step on unless ``step=False`` or
    ``SEQBALANCE_STEP`` says otherwise, so the driver reads each version once, at its plan.
    verl's Megatron engine learns nothing (a warning says so once). See "Balance by measured
    time" in the docs.

    Raises:
        TypeError, ValueError: ``refine`` is not ``False``, ``True`` or ``"exact"``; ``cost``
            is none of the above, or its file (or ``SEQBALANCE_COST``'s) is not a saved
            `TimeCost` (``FileNotFoundError`` when missing); ``learn`` is not a path whose
            folder exists, or ``learn_every`` not an int >= 1; named in the message.
        ImportError: ``verl.utils.seqlen_balancing`` cannot be imported (verl or one of its
            import-time dependencies is missing); the message says which.
        IntegrationError: one of the functions is missing, or its parameters differ from the
            ones seqbalance replaces (a verl release seqbalance does not know); nothing is
            patched then.

    >>> import seqbalance.integrations.verl as sb_verl
    >>> sb_verl.install()  # doctest: +SKIP
    ['karmarkar_karp', 'greedy_partition', 'get_seqlen_balanced_partitions', 'get_group_balanced_partitions']
    >>> sb_verl.install(cost="time-cost.json")  # doctest: +SKIP
    ['karmarkar_karp', 'greedy_partition', 'get_seqlen_balanced_partitions', 'get_group_balanced_partitions', 'calculate_workload', 'rearrange_micro_batches']
    """
    check_refine(refine)
    planned = step_wanted(step)
    _, learning, source = resolve_learning(learn, learn_every, cost)
    if learning is not None and step is None and not os.environ.get(_verl_step.ENVIRONMENT):
        planned = True  # the driver reads the learnt cost once per plan
    # All checked before any patches: all or nothing.
    _PATCH.check()
    # A followed file, re-planned on the workers by verl's own code: one version per formation.
    pinning = isinstance(source, CostSource) and source.path is not None and not planned
    if source is not None:
        _WORKLOAD.check()
    if pinning:
        _pin_check()
    if planned:
        _verl_step.check()
    if learning is not None:
        _learn_patches.VERL.check()
    names = _PATCH.install(refine)
    _SOURCE[0] = source
    if source is None:
        _WORKLOAD.uninstall()
    else:
        names += _WORKLOAD.install()
    if not planned:
        _verl_step.uninstall()  # first: it puts back what _PIN then wraps
    if pinning:
        names += _PIN.install()
    else:
        _PIN.uninstall()
    if planned:
        names += _verl_step.install(source)
    if learning is None:
        _learn_patches.VERL.uninstall()
        return names
    return names + _learn_patches.VERL.install(learning, source)


def uninstall() -> list[str]:
    """Put verl's original functions back in every ``verl.*`` module; return the names restored.

    Also reverts modules imported after `install` that picked up a replacement by name, and
    puts verl's ``calculate_workload`` back where ``install(cost=...)`` replaced it. Without a
    prior `install` it does nothing and returns ``[]``.
    """
    names = (
        _PATCH.uninstall()
        + _WORKLOAD.uninstall()
        + _PIN.uninstall()
        + _verl_step.uninstall()
        + _learn_patches.VERL.uninstall()
    )
    _SOURCE[0] = None
    return names


def is_installed() -> bool:
    """Whether `install` is in effect in this process.

    True when `install` ran, `uninstall` has not run since, and
    ``verl.utils.seqlen_balancing`` as imported now still holds seqbalance's functions (with a
    cost, its ``calculate_workload`` too). Reloading
    that module (``importlib.reload``), or importing it afresh after it left ``sys.modules``,
    puts verl's originals back: ``False`` then, and `install` patches again.

    >>> import seqbalance.integrations.verl as sb_verl
    >>> sb_verl.is_installed()
    False
    """
    return _PATCH.is_installed() and (_SOURCE[0] is None or _WORKLOAD.is_installed())
