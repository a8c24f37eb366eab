"""The registry of every retired spelling, and where a deprecation warning points.

A `Deprecation` is one retired spelling; the decorators of `seqbalance._deprecation.decorators`
register theirs in `REGISTRY` as they wrap, and `warn` says it at the first line outside
seqbalance.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from types import FrameType
from typing import Literal

__all__ = [
    "REGISTRY",
    "REMOVED_IN",
    "SINCE",
    "Deprecation",
    "moved_module",
    "outside_stacklevel",
    "register",
    "warn",
]

Kind = Literal["parameter", "function", "attribute", "module", "default", "positional"]

#: The version the current spellings were retired in (the next release).
SINCE = "0.3"
#: The version that removes them.
REMOVED_IN = "1.0"


@dataclass(frozen=True)
class Deprecation:
    """One retired spelling.

    Attributes:
        kind: ``"parameter"``, ``"function"``, ``"attribute"``, ``"module"``, ``"default"`` or
            ``"positional"`` (a parameter that becomes keyword-only).
        where: the public callable, class or package it belongs to (``"seqbalance.pack_sequences"``).
        old: the retired spelling (for a default: the old default, as its ``repr``).
        new: what replaces it (for a default: the new default, as its ``repr``).
        since: the version that deprecated it.
        removed_in: the version that removes it (for a default: the version of the flip).
        parameter: for a default, the parameter's name.
        note: what else to know (how a value translates), for the docs page.
    """

    kind: Kind
    where: str
    old: str
    new: str
    since: str
    removed_in: str
    parameter: str = ""
    note: str = ""

    @property
    def message(self) -> str:
        """The warning's text."""
        head = f"is deprecated since {self.since} and is removed in {self.removed_in}"
        if self.kind == "parameter" and "=" in self.old:
            return f"{self.old} {head}; pass {self.new}"
        if self.kind == "parameter" and self.new.endswith(")"):
            return f"{self.old}= {head}; call {self.new}"
        if self.kind == "parameter":
            return f"{self.old}= {head}; pass {self.new}="
        if self.kind == "function":
            return f"{self.old}() {head}; call {self.new}()"
        if self.kind == "attribute":
            return f"{self.old} {head}; use {self.new}"
        if self.kind == "module":
            return f"{self.old} {head}; import from {self.new}"
        if self.kind == "positional":
            return (
                f"passing {self.parameter}= by position is deprecated since {self.since}; it is "
                f"keyword-only from {self.removed_in}: pass {self.parameter}="
            )
        return (
            f"the default of {self.parameter}= changes from {self.old} to {self.new} in "
            f"{self.removed_in}; pass {self.parameter}= to choose"
        )


#: Every deprecation, in registration order.
REGISTRY: list[Deprecation] = []


def register(entry: Deprecation) -> Deprecation:
    """Add ``entry`` to `REGISTRY` (once) and return it."""
    if entry not in REGISTRY:
        REGISTRY.append(entry)
    return entry


# Where the library's own code lives (as imported, and absolute): a frame there is not the
# caller's line a warning should point at.
_PACKAGE = os.path.dirname(os.path.dirname(__file__))
_INSIDE = tuple(sorted({os.path.join(_PACKAGE, ""), os.path.join(os.path.abspath(_PACKAGE), "")}))


def outside_stacklevel() -> int:
    """The ``stacklevel`` at which a `warnings.warn` made in the calling frame names the first
    frame outside the seqbalance package: the user's line, however deep inside the library
    (a planner calling the cost, a loader calling `TimeCost.from_dict`) the warning arose.
    Frames of the import system are not counted, as `warnings.warn` does not count them."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INSIDE):
        frame = frame.f_back
        while frame is not None and _importing(frame.f_code.co_filename):
            frame = frame.f_back
        level += 1
    return level


def _importing(filename: str) -> bool:
    return "importlib" in filename and "_bootstrap" in filename


def warn(entry: Deprecation) -> None:
    """Warn ``entry``'s message at the caller's line (``FutureWarning`` for a default)."""
    category = FutureWarning if entry.kind == "default" else DeprecationWarning
    warnings.warn(entry.message, category, stacklevel=outside_stacklevel())


def moved_module(
    old: str, new: str, *, since: str = "0.2", removed_in: str = SINCE, note: str = ""
) -> Deprecation:
    """Register a module that moved (its stub module warns itself)."""
    return register(Deprecation("module", old, old, new, since, removed_in, note=note))


# 0.1's module paths, moved in 0.2 (their stub modules serve them until 0.3).
moved_module("seqbalance.groups", "seqbalance.planning.groups")
moved_module("seqbalance.metrics", "seqbalance.planning.metrics")
moved_module("seqbalance.micro_batches", "seqbalance.planning.micro_batches")
moved_module("seqbalance.packing", "seqbalance.planning.packing")
