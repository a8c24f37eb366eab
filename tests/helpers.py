"""What several test modules need: loads of a split, the observable outcome of a call, and a
Python child process (for promises a crash would break: memory limits, signals, aborts)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def loads(values: Sequence[Any], partitions: Sequence[Sequence[int]]) -> list[int]:
    """Each partition's load: the exact (Python int) sum of its items' values."""
    return [sum(int(values[i]) for i in part) for part in partitions]


def outcome(
    function: Callable[..., Any],
    *args: Any,
    expected: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    **kwargs: Any,
) -> tuple[Any, ...]:
    """What a caller observes: ``("returned", result)`` or ``("raised", type, message)``.

    Only ``expected`` exceptions count as an outcome; any other propagates and fails the test.
    Arrays come back as lists, so two outcomes compare with ``==``.
    """
    try:
        result = function(*args, **kwargs)
    except expected as exc:
        return ("raised", type(exc), str(exc))
    return ("returned", result.tolist() if isinstance(result, np.ndarray) else result)


def run_child(
    code: str, *, prelude: str = "", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -c PRELUDE + CODE`` (both dedented) in a child process, text output captured."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        check=False,
    )
