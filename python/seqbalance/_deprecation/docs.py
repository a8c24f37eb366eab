"""The docs' deprecations page (``docs/deprecations.md``), generated from
`seqbalance._deprecation.REGISTRY`, and the version comparison of the removal test.

After registering a deprecation, write `render_markdown()` (with the whole package imported, so
every decorator has registered) to ``docs/deprecations.md``; ``tests/deprecation`` says how.
"""

from __future__ import annotations

import importlib

from .registry import REGISTRY, Deprecation

#: Public modules ``import seqbalance`` does not import, whose decorators register too.
_ALSO_REGISTERING = ("seqbalance.integrations.verl", "seqbalance.integrations.openrlhf")

__all__ = ["reached", "render_markdown"]

_TITLES: dict[str, str] = {
    "parameter": "Renamed parameters",
    "function": "Renamed functions",
    "attribute": "Renamed result attributes",
    "module": "Moved modules",
    "default": "Changed defaults",
    "positional": "Parameters becoming keyword-only",
}


def _spelled(kind: str, text: str) -> str:
    plain = kind == "parameter" and not text.endswith(")") and "=" not in text
    return text + "=" if plain else text


def render_markdown(entries: list[Deprecation] | None = None) -> str:
    """The docs' deprecations page (``docs/deprecations.md``), generated from the registry."""
    if entries is None:
        for module in _ALSO_REGISTERING:
            importlib.import_module(module)
    rows = REGISTRY if entries is None else entries
    lines = [
        "# Deprecations",
        "",
        "<!-- Generated from seqbalance._deprecation.REGISTRY by render_markdown(); do not edit. -->",
        "",
        "Every retired spelling keeps working until the version that removes it and warns once "
        "per call site (a `DeprecationWarning` naming the old spelling, the new one and that "
        "version); passing both spellings is a `TypeError`. A default that changes after a "
        "release warns a `FutureWarning` when the argument is omitted. See the changelog's "
        "version policy.",
    ]
    for kind, title in _TITLES.items():
        # Sorted, so the page does not depend on which module happened to be imported first.
        chosen = sorted((e for e in rows if e.kind == kind), key=lambda e: (e.where, e.old))
        lines += ["", f"## {title}", ""]
        if not chosen:
            lines.append("None.")
            continue
        if kind == "default":
            lines += [
                "| where | parameter | old default | new default | since | flips in |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| `{e.where}` | `{e.parameter}` | `{e.old}` | `{e.new}` | {e.since} | {e.removed_in} |"
                for e in chosen
            ]
            continue

        lines += [
            "| where | old | new | since | removed in | note |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| `{e.where}` | `{_spelled(kind, e.old)}` | `{_spelled(kind, e.new)}` | {e.since} | {e.removed_in} "
            f"| {e.note} |"
            for e in chosen
        ]
    return "\n".join(lines) + "\n"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def reached(version: str, removed_in: str) -> bool:
    """Whether ``version`` (the package's) has reached ``removed_in``."""
    return _version(version) >= _version(removed_in)
