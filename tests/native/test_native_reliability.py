"""The native module fails like a library inside a long training job (docs/reliability.md).

Each promise is checked in a child process, because what it rules out (an abort, a hang, Ctrl-C
ignored for seconds) would take the test runner down with it:

* memory: under an address-space limit (``RLIMIT_AS``) a call too large for memory raises
  ``MemoryError`` naming what was being allocated, and the interpreter goes on working;
* interrupts: SIGINT during a long native call raises ``KeyboardInterrupt`` promptly;
* panics: a Rust panic reaches Python as ``RuntimeError`` saying "internal error" and the
  function's name, whether or not the GIL was released.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests import helpers

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux features"
)

N_LARGE = 40_000_000

# What every child runs first: 4*10**7 lengths as an int64 array, one small call (so that the
# module, numpy and the allocator are loaded) and the address space in use at that point.
PRELUDE = helpers.CHILD_MEMORY + textwrap.dedent(
    f"""
    import resource, signal, sys, time
    import numpy as np
    from seqbalance import _native

    # A job started in the background (`cmd &`, nohup, some CI runners) inherits SIGINT ignored,
    # and Python then leaves it ignored: the tests send SIGINT as a terminal would.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    values = np.random.default_rng(0).integers(1, 32768, {N_LARGE}, dtype=np.int64)
    _native.partition_ids([3, 2, 1], 2, False, False)
    REQUEST = dict(n_ranks=1, cap=65536, multiple=1, minimum=0, order="none", as_ids=False,
                   max_sequences=None, padded=False)
    """
)


run_child = functools.partial(helpers.run_child, prelude=PRELUDE)


OOM_MESSAGE = re.compile(
    r"MemoryError: seqbalance ran out of memory: could not allocate \d+ bytes for \w"
)


@pytest.mark.parametrize(
    "function",
    ["partition_ids", "karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"],
)
def test_too_little_memory_is_a_memory_error_and_the_next_call_works(function):
    refine = ", False" if function in ("partition_ids", "get_seqlen_balanced_partitions") else ""
    child = run_child(
        f"""
        limit_memory(200)
        try:
            _native.{function}(values, 8, False{refine})
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        del values
        print(_native.get_seqlen_balanced_partitions([5, 4, 3, 2], 2, True, False))
        print(_native.partition_ids(np.arange(1000), 4, True, False).sum())
        """
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert OOM_MESSAGE.match(lines[0]), child.stdout
    assert len(lines) == 3 and lines[2] == str(sum(range(4)) * 250)
    assert lines[1] == "[[1, 2], [0, 3]]"


@pytest.mark.parametrize(
    "call",
    [
        # Not integral, so the float path runs (no integer image).
        "_native.partition_ids(fvalues, 8, False, False)",
        # The placeholders of 'nearly' (n + p values), on both value kinds.
        "_native.karmarkar_karp(values, 7, 'nearly')",
        "_native.partition_ids(fvalues, 7, 'nearly', False)",
    ],
)
def test_float_weights_and_placeholders_too_large_for_memory_are_a_memory_error(call):
    # 50 MB more address space, not 200: once the float path stopped allocating an integer image
    # it then discarded, and reused the sort's buffer for the sorted values, the 'nearly' float
    # call fitted in 200 MB more (the allocator's reserved arenas count as address space).
    child = run_child(
        f"""
        fvalues = values * 0.1
        limit_memory(50)
        try:
            {call}
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        del values, fvalues
        print(_native.partition_ids(np.arange(1000) * 0.5, 3, "nearly", False).tolist()[:4])
        """
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert OOM_MESSAGE.match(lines[0]), child.stdout
    assert len(lines) == 2 and lines[1].startswith("["), child.stdout
    assert "PanicException" not in child.stderr


def test_result_lists_too_large_for_memory_are_a_memory_error():
    # The greedy core needs about 16 bytes per item; the result lists about 40 (a list slot and
    # an int object per index): with a gigabyte to spare the core fits and the lists do not.
    child = run_child(
        """
        limit_memory(1000)
        try:
            _native.greedy_partition(values, 8, False)
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        del values
        print(_native.greedy_partition([5, 4, 3, 2], 2, True))
        """
    )
    assert child.returncode == 0, child.stderr
    assert OOM_MESSAGE.match(child.stdout), child.stdout
    assert "PanicException" not in child.stderr


@pytest.mark.parametrize("algorithm", ["ffd", "bfd"])
def test_the_constrained_packer_out_of_memory_is_a_memory_error(algorithm):
    # At most 8 per pack, the padded footprint and keys: the packer's own buffers (about 30 bytes
    # an item beyond the input) do not fit in what is left after the input.
    child = run_child(
        f"""
        keys = values % 1000
        limit_memory(500)
        try:
            _native._pack(values, 65536, {algorithm!r}, True, 8, True, keys)
        except MemoryError as error:
            print("MemoryError:", error)
        else:
            print("no error")
        del values, keys
        print(_native._pack(np.array([5, 6, 2]), 8, {algorithm!r}, False, 2, True, np.array([0, 1, 0])))
        """
    )
    assert child.returncode == 0, child.stderr
    first, second = child.stdout.splitlines()
    assert OOM_MESSAGE.match(first), child.stdout
    assert second == "[[1], [0], [2]]"  # 2 * 5 > 8: padded, 5 and 2 do not share a pack
    assert "PanicException" not in child.stderr


@pytest.mark.parametrize(
    ("call", "delay"),
    [
        ("_native.partition_ids(values, 8, False, False)", 0.3),
        ("_native.partition_ids(values, 8, False, False)", 3.0),
        ("_native.karmarkar_karp(values, 8, True)", 1.5),
        ("_native.greedy_partition(values, 3, False)", 1.0),
        # Float weights (not integral, so the float path runs) with the placeholders of 'nearly'.
        ("_native.partition_ids(fvalues, 7, 'nearly', False)", 1.5),
        ("_native.greedy_partition(fvalues, 3, False)", 1.0),
        # The micro-batch planner: its sort, then the splits of the counting search.
        ("_native._own_count(values, values, REQUEST)", 0.5),
        ("_native._own_count(values, values, REQUEST)", 3.0),
        # Under shape limits: the plain plan, then the shaped search.
        ("_native._own_count(values, values, dict(REQUEST, max_sequences=3))", 2.0),
    ],
)
def test_ctrl_c_interrupts_a_long_native_call_promptly(call, delay):
    _assert_ctrl_c_stops(call, delay, setup="fvalues = values * 0.1")


# What the constrained packer takes (pack_sequences with max_sequences=8, footprint="padded"
# and keys hands it this: the keys numbered from 0), and the rank split plan_dp_micro_batches'
# refine=True hands _refine_candidate. Each call takes seconds at this size.
CONSTRAINED_AND_REFINED = "keys = values % 1000; ids = np.arange(values.size) % 8"


@pytest.mark.parametrize(
    ("call", "delay"),
    [
        ("_native._pack(values, 65536, 'ffd', True, 8, True, keys)", 0.5),
        ("_native._pack(values, 65536, 'ffd', True, 8, True, keys)", 3.0),
        # Best fit's ordered set of packs; first fit's tree, with a list per pack to build.
        ("_native._pack(values, 65536, 'bfd', True, 8, True, keys)", 2.0),
        ("_native._pack(values, 65536, 'first_fit', False, 8, True, keys)", 2.0),
        # The binding reading the ranks (holding the GIL, polling for signals), its sorts of the
        # ranks, then exchanges that each scan two ranks of millions of items.
        ("_native._refine_candidate(values, ids, 8, False)", 0.3),
        ("_native._refine_candidate(values, ids, 8, False)", 2.5),
        ("_native._refine_candidate(values, ids, 8, False)", 3.5),
    ],
)
def test_ctrl_c_interrupts_the_constrained_packer_and_refinement_promptly(call, delay):
    _assert_ctrl_c_stops(call, delay, setup=CONSTRAINED_AND_REFINED)


def _assert_ctrl_c_stops(call: str, delay: float, setup: str) -> None:
    """SIGINT ``delay`` s into repeated ``call``s (after ``setup``) ends them promptly with
    ``KeyboardInterrupt``, and the module still works."""
    latency, _, rest = helpers.interrupt_child(
        PRELUDE
        + textwrap.dedent(
            f"""
                {setup}
                print("started", flush=True)
                try:
                    for _ in range(20):
                        {call}
                    print("finished", flush=True)
                except KeyboardInterrupt:
                    print("interrupted", time.monotonic(), flush=True)
                print(_native.partition_ids([5, 4, 3, 2], 2, True, False).tolist(), flush=True)
                """
        ),
        delay=delay,
        timeout=60,
    )
    (second,) = rest
    # The promise is ~100 ms (measured on an idle machine); 2 s of the child's own CPU time
    # (a machine's load stretches only the wall-clock time) leaves room for a slow machine, and
    # still fails a call that ignores Ctrl-C to the end (several seconds at this size).
    helpers.assert_prompt(latency, 2.0)
    assert second == "[1, 0, 0, 1]"


@pytest.mark.parametrize("detached", [False, True])
def test_a_panic_is_an_internal_error_naming_the_function(detached):
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                from seqbalance import _native
                try:
                    _native._internal_error_check({detached})
                except RuntimeError as error:
                    print(type(error).__name__, error)
                print(_native.karmarkar_karp([3, 2, 1], 2, False))
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert child.returncode == 0, child.stderr
    first, second = child.stdout.splitlines()
    assert first.startswith(
        "RuntimeError seqbalance internal error in _internal_error_check: deliberate"
    )
    assert second == "[[1, 2], [0]]"
