"""Counts for issue 42's closing note, over the public ``__all__``s (the frozen surface and the
TransferQueue samplers left out):

- retired spellings in public signatures (api-spec, "One vocabulary": parameters named
  ``seqlen_list``, ``pack_max_length``, ``max_tokens_per_rank``, ``force_group_size``,
  ``balance_workload``, ``as_ids``; ``values`` in ``balance_report``; ``refine`` in
  ``refine_partitions``);
- parameters with a default that are not keyword-only (value-type constructors, the packer's
  ``add``/``add_many`` and ``install`` exempt, as the spec says), and of those the ones whose
  positional use warns already (registered ``"positional"`` deprecations: keyword-only from 1.0).

Run: ``PYTHONPATH=python python tests/deprecation/count_surface.py``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

RETIRED = {
    "seqlen_list",
    "pack_max_length",
    "max_tokens_per_rank",
    "force_group_size",
    "balance_workload",
    "as_ids",
}
FROZEN = {"karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"}
FROZEN |= {"log_seqlen_unbalance"}
EXEMPT = {"TransformerCost.__init__", "ModelCost.__init__", "StreamPacker.add"}
EXEMPT |= {"StepTime.__init__"}  # a value type, as the spec exempts them
EXEMPT |= {"StreamPacker.add_many"}
MODULES = ["seqbalance", "seqbalance.planning", "seqbalance.costs", "seqbalance.integrations"]


def callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    seen: set[str] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if obj is None or name in FROZEN or "Sampler" in name or name in seen:
                continue
            seen.add(name)
            if inspect.isclass(obj):
                for attribute in ["__init__", *(a for a in vars(obj) if not a.startswith("_"))]:
                    member = getattr(obj, attribute, None)
                    if callable(member) and not isinstance(member, type):
                        yield f"{name}.{attribute}", member
            elif callable(obj):
                yield name, obj


def _warned_positionals() -> set[tuple[str, str]]:
    """(function's name, parameter) of every positional use that warns (keyword-only from 1.0)."""
    from seqbalance._deprecation import REGISTRY

    return {(e.where.rsplit(".", 1)[-1], e.parameter) for e in REGISTRY if e.kind == "positional"}


def main() -> None:
    retired: list[str] = []
    positional: list[str] = []
    warned: list[str] = []
    for qualname, function in callables():
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            continue
        for p in parameters.values():
            if p.name in RETIRED or (
                (qualname, p.name)
                in {("balance_report", "values"), ("refine_partitions", "refine")}
            ):
                retired.append(f"{qualname}({p.name}=)")
            if (
                qualname not in EXEMPT
                and p.kind is p.POSITIONAL_OR_KEYWORD
                and p.default is not p.empty
            ):
                positional.append(f"{qualname}({p.name}=)")
                if (qualname.rsplit(".", 1)[-1], p.name) in _warned_positionals():
                    warned.append(f"{qualname}({p.name}=)")
    for title, found in (
        ("retired spellings in public signatures", retired),
        ("positional parameters with a default", positional),
        ("  of which positional use warns (keyword-only from 1.0)", warned),
    ):
        print(f"{title}: {len(found)}", *found, sep="\n  ")


if __name__ == "__main__":
    main()
