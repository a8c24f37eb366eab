"""The extension's allocator keeps freed pages for back-to-back calls (rust/bind/lib.rs): a
second large call reuses the first one's memory instead of faulting fresh zeroed pages in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import resource, time
    import numpy as np
    from seqbalance import _native

    values = np.random.default_rng(0).integers(1, 32768, 2**20)
    faults = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        _native.partition_ids(values, 64, False)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        time.sleep(0.05)  # longer than mimalloc's own 10 ms purge delay
    print(_native._purge_delay(), *faults)
    """
)


def _child(**environment: str) -> list[int]:
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    env.update(environment)
    result = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [int(word) for word in result.stdout.split()]


def test_back_to_back_calls_reuse_the_freed_pages():
    delay, first, *later = _child()
    assert delay == 1000
    # The first call maps its memory; the later ones find it still with mimalloc (with its
    # default 10 ms delay each call faulted thousands of pages in again).
    assert max(later) < 500, (first, later)


def test_a_users_own_purge_delay_wins():
    delay, _, *later = _child(MIMALLOC_PURGE_DELAY="0")
    assert delay == 0
    # Purging at once: the pages go back after every call and come back as faults.
    assert min(later) > 1000, later
