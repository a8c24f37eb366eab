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

import logging
from typing import Any

import numpy as np

from .. import partition as _partition
from ..planning import groups as _groups
from ._patching import IntegrationError, ModulePatch

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
    torch call per sample. Other lengths (floats, tensors) go to verl's original, whose workloads
    are computed in torch's arithmetic for the tensor's dtype.
    """
    if not _integer_lengths(seqlen_list):
        original = _PATCH.originals.get("get_group_balanced_partitions")
        if original is not None:
            return original(seqlen_list, uid_list, k_partitions)
    return _groups.group_balanced_partitions(
        seqlen_list, uid_list, k_partitions, refine=_PATCH.refine
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

# Module-level, as install() puts them into the trainer's module (their __module__ is this one).
karmarkar_karp = _PATCH.replacements["karmarkar_karp"]
greedy_partition = _PATCH.replacements["greedy_partition"]
get_seqlen_balanced_partitions = _PATCH.replacements["get_seqlen_balanced_partitions"]


def install(refine: bool | str = False) -> list[str]:
    """Run verl's partitioners on seqbalance in this process; return the names replaced.

    Replaces the functions in ``verl.utils.seqlen_balancing`` and rebinds every imported
    ``verl.*`` module that imported one of them by name. Idempotent: a second call changes
    nothing (it only rebinds a module that still holds an original) and returns the same names.
    Logs one INFO line saying what was replaced.

    With the default ``refine=False`` every replaced function returns exactly what verl's does.
    ``refine=True`` (or ``"exact"``) makes ``get_seqlen_balanced_partitions`` and
    ``get_group_balanced_partitions`` refine their split (`seqbalance.refine_partitions`):
    the heaviest rank is never heavier than verl's and often lighter -- on a GRPO batch of 512
    prompts x 16 responses over 8 ranks with equal group counts, max/mean 1.0952 -> 1.0000
    (``seqbalance partition -k 8 --group-size 16 --equal-size`` shows it on that batch). The
    answers then differ from verl's; ``karmarkar_karp`` and ``greedy_partition`` stay exact.

    Raises:
        TypeError, ValueError: ``refine`` is not ``False``, ``True`` or ``"exact"``.
        ImportError: ``verl.utils.seqlen_balancing`` cannot be imported (verl or one of its
            import-time dependencies is missing); the message says which.
        IntegrationError: one of the functions is missing, or its parameters differ from the
            ones seqbalance replaces (a verl release seqbalance does not know); nothing is
            patched then.

    >>> import seqbalance.integrations.verl as sb_verl
    >>> sb_verl.install()  # doctest: +SKIP
    ['karmarkar_karp', 'greedy_partition', 'get_seqlen_balanced_partitions', 'get_group_balanced_partitions']
    """
    return _PATCH.install(refine)


def uninstall() -> list[str]:
    """Put verl's original functions back in every ``verl.*`` module; return the names restored.

    Also reverts modules imported after `install` that picked up a replacement by name.
    Without a prior `install` it does nothing and returns ``[]``.
    """
    return _PATCH.uninstall()


def is_installed() -> bool:
    """Whether `install` is in effect in this process.

    True when `install` ran, `uninstall` has not run since, and
    ``verl.utils.seqlen_balancing`` as imported now still holds seqbalance's functions. Reloading
    that module (``importlib.reload``), or importing it afresh after it left ``sys.modules``,
    puts verl's originals back: ``False`` then, and `install` patches again.

    >>> import seqbalance.integrations.verl as sb_verl
    >>> sb_verl.is_installed()
    False
    """
    return _PATCH.is_installed()
