"""plan_context_parallel fails like a library inside a training job (docs/reliability.md): Ctrl-C
stops a long plan promptly, too little memory is a MemoryError and the next call works. Each in a
child process, since what it rules out (a hang, an abort) would take the runner down with it."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from tests import helpers

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux features"
)

PRELUDE = helpers.CHILD_MEMORY + textwrap.dedent(
    """
    import resource, signal, time
    import numpy as np
    import seqbalance
    from seqbalance import _native

    signal.signal(signal.SIGINT, signal.default_int_handler)
    """
)


@pytest.mark.parametrize("delay", [0.3, 2.0])
def test_ctrl_c_stops_a_long_plan_promptly(delay):
    # 3,000,000 sequences over 8 ranks: over a hundred thousand steps per trial of the search and
    # per greedy reading (about 30 s in all on a quick build).
    latency, _, rest = helpers.interrupt_child(
        PRELUDE
        + textwrap.dedent(
            """
            rng = np.random.default_rng(0)
            lengths = np.clip(rng.lognormal(8.5, 1.2, 3_000_000).astype(np.int64), 16, 8 * 32768)
            print("started", flush=True)
            try:
                seqbalance.plan_context_parallel(lengths, 8, 32768, comm=0.05)
                print("finished", flush=True)
            except KeyboardInterrupt:
                print("interrupted", time.monotonic(), flush=True)
            print(seqbalance.plan_context_parallel([40, 3], 4, 10, cp_sizes=[4]), flush=True)
            """
        ),
        delay=delay,
        timeout=120,
    )
    # The promise is ~100 ms; 2 s of the child's own CPU time (whatever the load) leaves room
    # for a slow machine.
    helpers.assert_prompt(latency, 2.0)
    assert rest == ["[[(4, [0, 1, 2, 3], [0])], [(4, [0, 1, 2, 3], [1])]]"]


def test_ctrl_c_stops_a_plan_over_a_million_ranks_promptly():
    # 600,000 one-token sequences over 2**20 ranks: a step holds 600,000 groups, which the
    # greedy's widening passes over and the search's use of idle ranks splits or widens one by
    # one (about 12 s in all on a quick build).
    latency, _, rest = helpers.interrupt_child(
        PRELUDE
        + textwrap.dedent(
            """
            lengths = np.ones(600_000, dtype=np.int64)
            print("started", flush=True)
            try:
                seqbalance.plan_context_parallel(lengths, 2**20, 64, comm=0.01)
                print("finished", flush=True)
            except KeyboardInterrupt:
                print("interrupted", time.monotonic(), flush=True)
            print(seqbalance.plan_context_parallel([40, 3], 4, 10, cp_sizes=[4]), flush=True)
            """
        ),
        delay=0.5,
        timeout=120,
    )
    helpers.assert_prompt(latency, 2.0)
    assert rest == ["[[(4, [0, 1, 2, 3], [0])], [(4, [0, 1, 2, 3], [1])]]"]


def test_too_little_memory_is_a_memory_error_and_the_next_call_works():
    child = helpers.run_child(
        """
        n = 40_000_000
        lengths = np.full(n, 7, dtype=np.int64)
        costs = np.ones(n)
        comm = np.zeros(n)
        _native._plan_context_parallel(np.array([3]), np.ones(1), np.zeros(1), np.array([1]), 1, 8)
        limit = address_space() + 200 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        try:
            _native._plan_context_parallel(lengths, costs, comm, np.array([1]), 1, 8)
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        del lengths, costs, comm
        print(seqbalance.plan_context_parallel([5, 9], 2, 8))
        """,
        prelude=PRELUDE,
    )
    assert child.returncode == 0, child.stderr
    first, second = child.stdout.splitlines()
    assert re.match(
        r"MemoryError: seqbalance ran out of memory: could not allocate \d+ bytes", first
    )
    assert second == "[[(2, [0, 1], [1])], [(2, [0, 1], [0])]]"
    assert "PanicException" not in child.stderr


def test_an_answer_too_large_for_memory_is_a_memory_error_and_the_next_call_works():
    # Ten one-token sequences on 2**24 ranks: ten steps over every rank, 1.3 GB of list slots. The
    # answer's lists were built with pyo3 calls that panic on a null object: under an address-
    # space limit that surfaced as "RuntimeError: seqbalance internal error ... PyObject pointer
    # is null".
    child = helpers.run_child(
        """
        limit_memory(800)
        try:
            seqbalance.plan_context_parallel([1] * 10, 2**24, 1)
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        print(seqbalance.plan_context_parallel([5, 9], 2, 8))
        print(len(seqbalance.plan_context_parallel([1] * 3, 2**20, 1)))
        """,
        prelude=PRELUDE,
    )
    assert child.returncode == 0, child.stderr
    first, second, third = child.stdout.splitlines()
    assert re.match(
        r"MemoryError: seqbalance ran out of memory: could not allocate \d+ bytes for the plan's "
        r"lists",
        first,
    ), first
    assert second == "[[(2, [0, 1], [1])], [(2, [0, 1], [0])]]"
    assert third == "3"
    assert "internal error" not in child.stderr and "PanicException" not in child.stderr
