"""The ``seqbalance`` command line: ``partition`` (the main job) and ``bench``.

``main`` is the entry point of the ``seqbalance`` console script and of ``python -m seqbalance``.
The modules: ``main`` (the parser and the failure policy), ``partition``, ``plan`` (the
micro-batch summaries of ``partition --max-token-len``), ``bench`` and ``readers`` (streamed
input files).
"""

from __future__ import annotations

from ._common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE
from .main import build_parser, main

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USAGE", "build_parser", "main"]
