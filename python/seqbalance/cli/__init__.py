"""The ``seqbalance`` command line: ``partition`` (the main job), ``plan``, ``calibrate`` and
``bench``.

``main`` is the entry point of the ``seqbalance`` console script and of ``python -m seqbalance``.
The modules: ``main`` (the parser, its shared flags and the failure policy), ``partition``,
``plan`` (micro-batches under a token cap, also behind ``partition --max-token-len``),
``calibrate`` (fit a time cost; ``--time-cost`` on ``partition`` and ``plan``), ``bench``,
``readers`` (streamed input files) and ``_messages`` (library messages in the shell's words).
"""

from __future__ import annotations

from ._common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE
from .main import build_parser, main

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USAGE", "build_parser", "main"]
