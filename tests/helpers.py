"""What several test modules need: loads of a split, the observable outcome of a call, and a
Python child process (for promises a crash would break: memory limits, signals, aborts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
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


#: Source for a child process's prelude: ``address_space()`` (the bytes of address space the
#: process holds now, from /proc) and ``limit_memory(extra_mb)`` (an ``RLIMIT_AS`` that leaves
#: ``extra_mb`` MiB above it), for the tests that hold a call to a memory limit. Linux only.
CHILD_MEMORY = textwrap.dedent(
    """
    import resource


    def address_space():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmSize")


    def limit_memory(extra_mb):
        limit = address_space() + extra_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    """
)


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


def interrupt_child(
    code: str, *, delay: float, timeout: float = 120
) -> tuple[float, list[str], list[str]]:
    """Run ``code`` in a child, send it SIGINT ``delay`` seconds after it prints ``started``.

    ``code`` prints ``started``, runs the long call, and on ``KeyboardInterrupt`` prints
    ``interrupted <time.monotonic()> [more words]``, then whatever the test checks next (that the
    process still works). Returns the latency from the signal to that line, its other words and
    the lines after it. The child exiting with an error fails the test.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        time.sleep(delay)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=timeout)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err
    first, *rest = out.splitlines()
    word, when, *words = first.split()
    assert word == "interrupted", out
    return float(when) - sent, words, rest
