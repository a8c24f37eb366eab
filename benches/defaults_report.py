"""Defaults per shared name: how many distinct defaults each parameter name has across the
public surface.

    python benches/defaults_report.py               # every name shared by two callables
    python benches/defaults_report.py cost sync     # just these names

The public surface is every callable in the ``__all__`` of ``seqbalance`` and of its public
modules (`PUBLIC_MODULES`), classes included (their constructor and public methods). A
parameter without a default counts as ``<required>``, which is no default: the count is of the
distinct defaults among the callables that have one. ``--exempt`` leaves out ``cost=None``,
which the API spec keeps where it means "the values themselves" or "none installed".
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import importlib
import inspect
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

#: The modules whose ``__all__`` is the public surface (the frozen ``seqbalance.reference`` is
#: upstream's, not seqbalance's vocabulary).
PUBLIC_MODULES = (
    "seqbalance",
    "seqbalance.integrations.verl",
    "seqbalance.integrations.openrlhf",
    "seqbalance.integrations.slime",
    "seqbalance.integrations.transfer_queue",
)

REQUIRED = "<required>"


def _callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if id(value) in seen or not callable(value):
                continue
            seen.add(id(value))
            if inspect.isclass(value):
                yield name, value
                for attribute, member in vars(value).items():
                    if attribute.startswith("_"):
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        yield f"{name}.{attribute}", member
            else:
                yield name, value


def defaults_by_name() -> dict[str, dict[str, list[str]]]:
    """``{parameter: {repr(default) or REQUIRED: [callables]}}`` over the public surface."""
    table: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for label, function in _callables():
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            continue
        for parameter in signature.parameters.values():
            if parameter.name in ("self", "cls") or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                continue
            default = parameter.default
            key = REQUIRED if default is parameter.empty else repr(default)
            table[parameter.name][key].append(label)
    return table


def count_defaults(table: dict[str, dict[str, list[str]]], name: str, exempt: bool) -> int:
    """The distinct defaults of ``name`` (required and, with ``exempt``, ``cost=None`` left
    out)."""
    keys = set(table.get(name, {})) - {REQUIRED}
    if exempt and name == "cost":
        keys -= {"None"}
    return len(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="parameter names (default: every shared one)")
    parser.add_argument("--exempt", action="store_true", help="leave cost=None out")
    args = parser.parse_args(argv)
    table = defaults_by_name()
    names = args.names or sorted(
        name for name, defaults in table.items() if sum(map(len, defaults.values())) > 1
    )
    for name in names:
        count = count_defaults(table, name, args.exempt)
        print(f"{name}: {count} default{'s' if count != 1 else ''}")
        for default, where in sorted(table.get(name, {}).items()):
            print(f"    {default}: {', '.join(sorted(where))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
