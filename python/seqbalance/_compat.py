"""The module paths of seqbalance 0.1, kept importable for one release.

0.2 grouped the planning toolkit under `seqbalance.planning` and the command line under
`seqbalance.cli`; 0.1's module ``seqbalance.costs`` is the package of that name now, serving every
name it served, so it needs no alias. ``import seqbalance.micro_batches`` (and the other old paths below) still
works: it warns with a ``DeprecationWarning`` and gives a module that re-exports the public names
of the new place. Every public name is importable from ``seqbalance`` itself, which is the
stable way to import them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["MOVED_MODULES", "install"]

#: Old module path -> the modules whose public names it re-exports (first wins on a clash).
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "seqbalance.groups": ("seqbalance.planning.groups",),
    "seqbalance.metrics": ("seqbalance.planning.metrics", "seqbalance.costs.workload"),
    "seqbalance.micro_batches": (
        "seqbalance.planning.micro_batches",
        "seqbalance.planning.dp_plan",
    ),
    "seqbalance.packing": ("seqbalance.planning.packing",),
}

#: Names the old modules exported (their ``__all__`` in 0.1), for ``from old import *``.
_OLD_ALL: dict[str, tuple[str, ...]] = {
    "seqbalance.metrics": (
        "BalanceReport",
        "LoadStats",
        "balance_report",
        "calculate_workload",
        "log_seqlen_unbalance",
    ),
}


class _MovedModuleLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name
        targets = MOVED_MODULES[name]
        warnings.warn(
            f"{name} moved in seqbalance 0.2: import from {targets[0]} or from seqbalance itself; "
            f"the old path goes in 0.3",
            DeprecationWarning,
            # importlib's own frames are skipped by warnings: 2 is the importing line.
            stacklevel=2,
        )
        module = types.ModuleType(name, f"Deprecated alias of {', '.join(targets)}.")
        exported: list[str] = []
        for target in reversed(targets):
            new = importlib.import_module(target)
            names = getattr(new, "__all__", [n for n in vars(new) if not n.startswith("_")])
            for attribute in names:
                setattr(module, attribute, getattr(new, attribute))
            exported.extend(n for n in names if n not in exported)
        module.__all__ = list(_OLD_ALL.get(name, exported))  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader())


def install() -> None:
    """Put the finder for the old paths on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
