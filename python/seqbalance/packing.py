"""0.1's module ``seqbalance.packing``, moved in 0.2: see ``seqbalance.planning.packing``.

Importing it warns with a ``DeprecationWarning`` and gives the public names of the new place;
the old path is removed in `REMOVED_IN`. Every name is also importable from ``seqbalance``
itself, the stable way to import it.
"""

from __future__ import annotations

import warnings

from .planning import packing as _packing
from .planning.packing import *  # noqa: F403

#: The version that removes this module path.
REMOVED_IN = "0.3"
#: The modules whose public names this one re-exports (the first is the new place).
MOVED_TO = ("seqbalance.planning.packing",)

__all__ = list(_packing.__all__)

warnings.warn(
    f"{__name__} moved in seqbalance 0.2: import from {MOVED_TO[0]} or from seqbalance itself; "
    f"the old path goes in {REMOVED_IN}",
    DeprecationWarning,
    # The import machinery's frames are skipped by warnings: 2 is the importing line.
    stacklevel=2,
)
