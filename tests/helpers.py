"""What several test modules need: loads of a split, the observable outcome of a call, and a
Python child process (for promises a crash would break: memory limits, signals, aborts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np


def loads(values: Sequence[Any], partitions: Sequence[Sequence[int]]) -> list[int]:
    """Each partition's load: the exact (Python int) sum of its items' values."""
    return [sum(int(values[i]) for i in part) for part in partitions]


#: The built-ins an `ArgumentError` also is (`seqbalance.errors`).
BUILTINS = (ValueError, TypeError, OverflowError)


def plain(kind: type[BaseException]) -> type[BaseException]:
    """``kind``, or for an `ArgumentError` class the built-in it also is (``ArgumentValueError``
    is ``ValueError``): what `seqbalance.reference`, as upstream, raises for the same refusal."""
    from seqbalance.errors import ArgumentError

    if not issubclass(kind, ArgumentError):
        return kind
    return next(base for base in kind.__mro__ if base in BUILTINS)


def outcome(
    function: Callable[..., Any],
    *args: Any,
    expected: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    **kwargs: Any,
) -> tuple[Any, ...]:
    """What a caller observes: ``("returned", result)`` or ``("raised", type, message)``.

    Only ``expected`` exceptions count as an outcome; any other propagates and fails the test.
    Arrays come back as lists, so two outcomes compare with ``==``. An `ArgumentError` counts as
    the built-in it also is (`plain`), what the reference raises for it.
    """
    try:
        result = function(*args, **kwargs)
    except expected as exc:
        return ("raised", plain(type(exc)), str(exc))
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


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system, all threads) process ``pid`` has used so far, from
    /proc/PID/stat (10 ms ticks); ``None`` where /proc does not say (off Linux, or gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            # The command name (field 2) may hold spaces: fields 14 and 15 follow its ")".
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Latency(NamedTuple):
    """How late a child answered SIGINT: in wall-clock seconds, and in the CPU seconds it worked
    meanwhile (``None`` where /proc does not say)."""

    wall: float
    cpu: float | None


#: Wall-clock seconds any answer to SIGINT must come within, whatever the load: a hang bound.
#: A child on 2 cores shared by a load average of 8 gets about a fifth of one core, so a bound
#: on promptness in wall-clock time fails there; the promise is about work (a check every
#: ~50 ms of it, reliability.md), which the child's CPU time measures under any load.
WALL_BOUND = 60.0


def assert_prompt(latency: Latency, cpu_bound: float) -> None:
    """The child answered SIGINT within ``cpu_bound`` CPU seconds of its own work (within
    ``cpu_bound`` wall-clock seconds where /proc cannot say), and within `WALL_BOUND`."""
    said = f"KeyboardInterrupt came {latency.wall:.3f} s after SIGINT"
    if latency.cpu is None:
        assert latency.wall < cpu_bound, said
        return
    said += f", {latency.cpu:.3f} s of the child's CPU time"
    # 10 ms ticks: a reading may be one tick late at either end.
    assert latency.cpu < cpu_bound + 0.02, said
    assert latency.wall < WALL_BOUND, said


def interrupt_child(
    code: str, *, delay: float, timeout: float = 120
) -> tuple[Latency, list[str], list[str]]:
    """Run ``code`` in a child, send it SIGINT ``delay`` seconds after it prints ``started``.

    ``code`` prints ``started``, runs the long call, and on ``KeyboardInterrupt`` prints
    ``interrupted <time.monotonic()> [more words]``, then whatever the test checks next (that the
    process still works). Returns the latency from the signal to that line (`Latency`: wall
    clock, and the CPU time the child spent until this process read the line, an upper bound
    of its work before it answered), its other words and the lines after it. The child exiting
    with an error fails the test.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    # The child is killed past ``timeout`` (its lines then end early and the test fails).
    deadline = threading.Timer(timeout, child.kill)
    deadline.start()
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        time.sleep(delay)
        worked = cpu_seconds(child.pid)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        first = child.stdout.readline()
        # Not reaped yet (a zombie keeps its /proc entry): the reading stands even if it exited.
        after = cpu_seconds(child.pid)
        # Through the same buffered reader (communicate would skip what it already holds); the
        # children write little to stderr, so reading it second cannot block them.
        out = child.stdout.read()
        assert child.stderr is not None
        err = child.stderr.read()
        child.wait(timeout=timeout)
    finally:
        deadline.cancel()
        child.kill()
        child.wait()
    assert child.returncode == 0, err
    assert first.startswith("interrupted "), first + out
    _, when, *words = first.split()
    cpu = None if worked is None or after is None else after - worked
    return Latency(float(when) - sent, cpu), words, out.splitlines()
