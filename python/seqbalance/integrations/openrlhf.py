"""Run OpenRLHF's sequence balancing on seqbalance, without editing OpenRLHF: call :func:`install`.

OpenRLHF carries its own copy of verl's partitioner in ``openrlhf.utils.seqlen_balancing``, and
its trainer modules import ``get_seqlen_balanced_partitions`` from there by name. :func:`install` replaces ``karmarkar_karp``, ``greedy_partition`` and
``get_seqlen_balanced_partitions`` in that module and rebinds every already-imported
``openrlhf.*`` module holding one of the originals; :func:`uninstall` restores them everywhere in
``openrlhf.*``. Answers are OpenRLHF's, except that more parts than items raises
:class:`seqbalance.PartitionError` (an ``AssertionError``) instead of returning empty parts, and a
negative value raises ``ValueError``. An input seqbalance refuses by its type (``TypeError``) is
handed to OpenRLHF's own function, with one WARNING per function.

OpenRLHF runs its actors under Ray, so patch the workers as they start::

    ray.init(runtime_env={"worker_process_setup_hook": "seqbalance.integrations.openrlhf.install"})

and make seqbalance importable on every node, as for verl (see
:mod:`seqbalance.integrations.verl`: the wheel in the image, or in the runtime env's
``py_modules`` or ``pip``).

Importing this module imports nothing of OpenRLHF; :func:`install` imports the module.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import partition as _partition
from ._patching import IntegrationError, ModulePatch

__all__ = ["IntegrationError", "install", "is_installed", "uninstall"]

logger = logging.getLogger(__name__)


# OpenRLHF's partitioners, under OpenRLHF's exact signature (install() compares the two parameter by
# parameter): seqbalance's native function, or OpenRLHF's own for an input seqbalance refuses by type.


def karmarkar_karp(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]:
    """:func:`seqbalance.karmarkar_karp` in OpenRLHF's place (installed by :func:`install`)."""
    return _PATCH.call(
        "karmarkar_karp", _partition.karmarkar_karp, seqlen_list, k_partitions, equal_size
    )


def greedy_partition(seqlen_list: Any, k_partitions: Any, equal_size: Any) -> list[list[int]]:
    """:func:`seqbalance.greedy_partition` in OpenRLHF's place (installed by :func:`install`)."""
    return _PATCH.call(
        "greedy_partition", _partition.greedy_partition, seqlen_list, k_partitions, equal_size
    )


def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: Any, equal_size: Any
) -> list[list[int]]:
    """:func:`seqbalance.get_seqlen_balanced_partitions` in OpenRLHF's place (see :func:`install`)."""
    return _PATCH.call(
        "get_seqlen_balanced_partitions",
        _partition.get_seqlen_balanced_partitions,
        seqlen_list,
        k_partitions,
        equal_size,
    )


_PATCH = ModulePatch(
    target="openrlhf.utils.seqlen_balancing",
    package="openrlhf",
    replacements={
        "karmarkar_karp": karmarkar_karp,
        "greedy_partition": greedy_partition,
        "get_seqlen_balanced_partitions": get_seqlen_balanced_partitions,
    },
    owner=__name__,
    install_hint=(
        "Install OpenRLHF in this environment (pip install openrlhf, which brings the "
        "dependencies its utils package imports). On a Ray cluster every node needs it, and "
        "seqbalance."
    ),
    logger=logger,
)


def install() -> list[str]:
    """Run OpenRLHF's partitioners on seqbalance in this process; return the names replaced.

    Idempotent; logs one INFO line. Raises ``ImportError`` when
    ``openrlhf.utils.seqlen_balancing`` cannot be imported, and
    :class:`IntegrationError` (patching nothing) when a function is missing or its parameters
    differ from ``(seqlen_list, k_partitions, equal_size)``.
    """
    return _PATCH.install()


def uninstall() -> list[str]:
    """Put OpenRLHF's original functions back in every ``openrlhf.*`` module; return their names."""
    return _PATCH.uninstall()


def is_installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _PATCH.is_installed()
