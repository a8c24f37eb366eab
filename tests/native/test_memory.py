"""Peak memory per item, measured in a fresh child process (``ru_maxrss`` is a per-process peak).

Bounds, not timings: memory per item is a property of the data structures, the same on any
machine, so these fail when a change makes the structures larger again, not when the machine is
busy. Measured when the bounds were set (2 * 10**6 uniform lengths, bytes an item above the input,
result included): 55.6 (free, k = 8), 47.2 (free, k = 64), 38.8 (equal), 46.1 (nearly); before
the set keys were narrowed to 8-byte alignment and the binding's copy of the input was dropped
after sorting: 83.9, 65.0, 52.5 and 64.0. The bounds leave about 12 % for allocator variation.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ru_maxrss in kilobytes and /proc are Linux's"
)

N = 2_000_000

_PEAK_PER_ITEM = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import seqbalance
    n, k, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    lengths = np.random.default_rng(0).integers(1, 16385, size=n, dtype=np.int64)
    equal_size = {"free": False, "equal": True, "nearly": "nearly"}[mode]
    seqbalance.partition_ids(lengths[:4096], k, equal_size=equal_size)  # load everything first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ids = seqbalance.partition_ids(lengths, k, equal_size=equal_size)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert ids.shape == (n,)
    print((after - before) * 1024 / n)
    """
)


def _peak_bytes_per_item(*args: object) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_PER_ITEM, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@pytest.mark.parametrize(
    ("k", "mode", "bound"),
    [(8, "free", 62), (64, "free", 53), (8, "equal", 44), (8, "nearly", 52)],
)
def test_partition_ids_peak_memory_per_item(k, mode, bound):
    per_item = _peak_bytes_per_item(N + (k - 1 if mode == "nearly" else 0), k, mode)
    assert per_item <= bound, f"{per_item:.1f} bytes an item above the input (bound {bound})"


_READ_GROWTH = textwrap.dedent(
    """
    import sys
    from seqbalance.cli import readers as _cli_io
    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    before = resident()
    lengths = _cli_io.read_lengths(sys.argv[1])
    print((resident() - before) / lengths.nbytes)
    """
)


def test_the_cli_reader_keeps_little_more_than_its_result_resident(tmp_path):
    # Chunk-sized arrays freed during the read stay in glibc's heap unless trimmed (measured:
    # 1.9x the result's bytes without the trim, 1.0x with it, at 4 * 10**6 lines).
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{(i * 7919) % 16384 + 1}\n" for i in range(4_000_000)))
    done = subprocess.run(
        [sys.executable, "-c", _READ_GROWTH, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) <= 1.4


_RESIDENT_AFTER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import seqbalance
    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    n = int(sys.argv[1])
    lengths = np.random.default_rng(0).integers(1, 16385, size=n, dtype=np.int64)
    seqbalance.partition_ids(lengths[:4096], 8)  # load everything first
    before = resident()
    ids = seqbalance.partition_ids(lengths, 8)
    print((resident() - before - ids.nbytes) / n)
    """
)


def test_a_large_call_gives_its_working_memory_back():
    # About 56 bytes an item are in use during the call; afterwards only the answer should stay
    # (measured: 0.2 bytes an item besides it; 52.5 when mimalloc kept every page for reuse).
    n = 1 << 22
    done = subprocess.run(
        [sys.executable, "-c", _RESIDENT_AFTER, str(n)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) <= 4, f"{float(done.stdout):.1f} bytes an item still resident"
