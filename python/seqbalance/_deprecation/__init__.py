"""One deprecation mechanism: decorators and the registry of every retired spelling.

Every deprecation the package makes is a `Deprecation` in `REGISTRY` (`registry`), registered by
the decorator that implements it (`decorators`); a moved module registers with `moved_module`
(its stub module warns itself). Each warning points at the first line outside seqbalance
(`outside_stacklevel`), so Python's warning filters show it once per call site. The frozen
surface (the upstream drop-ins, `seqbalance.reference`, the TransferQueue samplers and every
function ``install()`` patches in) is never wrapped. `docs.render_markdown` writes the docs'
deprecations page (``docs/deprecations.md``) from the registry; a test keeps the page and the
registry equal, and another fails once a registered removal version is reached.
"""

from __future__ import annotations

from .decorators import (
    WORKLOAD_NOTE,
    changed_default,
    keyword_only_from,
    renamed_attribute,
    renamed_function,
    renamed_params,
    retired_flag,
    retired_value,
    workload_flag,
)
from .registry import REGISTRY, Deprecation, moved_module, outside_stacklevel

__all__ = [
    "REGISTRY",
    "WORKLOAD_NOTE",
    "Deprecation",
    "changed_default",
    "keyword_only_from",
    "moved_module",
    "outside_stacklevel",
    "renamed_attribute",
    "renamed_function",
    "renamed_params",
    "retired_flag",
    "retired_value",
    "workload_flag",
]
