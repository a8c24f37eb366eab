"""0.1's module ``seqbalance.metrics``, moved in 0.2: see ``seqbalance.planning.metrics`` and ``seqbalance.costs.workload``.

Importing it warns with a ``DeprecationWarning`` and gives the public names of the new place;
the old path is removed in `REMOVED_IN`. Every name is also importable from ``seqbalance``
itself, the stable way to import it.
"""

from __future__ import annotations

import warnings

# A name both modules define is planning.metrics' one (imported last).
from .costs.workload import *  # noqa: F403
from .costs.workload import calculate_workload
from .planning.metrics import *  # noqa: F403
from .planning.metrics import BalanceReport, LoadStats, balance_report, log_seqlen_unbalance

#: The version that removes this module path.
REMOVED_IN = "0.3"
#: The modules whose public names this one re-exports (the first is the new place).
MOVED_TO = ("seqbalance.planning.metrics", "seqbalance.costs.workload")

__all__ = [
    "BalanceReport",
    "LoadStats",
    "balance_report",
    "calculate_workload",
    "log_seqlen_unbalance",
]

warnings.warn(
    f"{__name__} moved in seqbalance 0.2: import from {MOVED_TO[0]} or from seqbalance itself; "
    f"the old path goes in {REMOVED_IN}",
    DeprecationWarning,
    # The import machinery's frames are skipped by warnings: 2 is the importing line.
    stacklevel=2,
)
