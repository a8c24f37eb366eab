"""Peak memory per item of one partitioning call, each measured in a fresh child process.

Run: PYTHONPATH=python python3 benches/bench_memory.py [--n 10000000] [--k 8 1000]
(on a release build: ``pip install .``, or ``cargo build --release --lib`` copied over
``python/seqbalance/_native.abi3.so``).

Each child creates ``n`` int64 lengths, makes one small call of the same function (imports,
first-call costs), reads its peak resident memory, makes the measured call and reads it again:
the difference divided by ``n`` is the extra peak per item (the median of ``--repeat`` children,
as the allocators make it vary by a few bytes), the answer included (``partition_ids``:
an int64 array, 8 bytes an item; ``karmarkar_karp``: lists of Python ints, about 40). Two readings
of the peak are printed: ``ru_maxrss`` and ``VmHWM``. ``ru_maxrss`` carries over the resident size
of the process that forked the child (Linux keeps it across exec), so the children are started
from this small script, never from a large one; ``VmHWM`` starts afresh at exec. The floor is the
input array itself, 8 bytes an item: figures are also given as a ratio to it.

Under pytest (benchmarks disabled, the default) one small case runs and checks its figures.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread in the children, before NumPy loads)

# isort: split
import argparse
import json
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import seqbalance
    from seqbalance import _native

    function, mode, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    equal_size = {"equal": True, "free": False}[mode]

    def peaks():
        with open("/proc/self/status") as status:
            hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, hwm * 1024

    def call(values):
        if function == "partition_ids":
            return seqbalance.partition_ids(values, k, equal_size=equal_size)
        return seqbalance.karmarkar_karp(values, k, equal_size)

    values = np.random.default_rng(1).integers(1, 32_768, size=n, dtype=np.int64)
    call(values[: 64 * k])
    maxrss_before, hwm_before = peaks()
    result = call(values)
    maxrss_after, hwm_after = peaks()
    assert len(result) == (n if function == "partition_ids" else k)
    print(json.dumps({
        "maxrss": (maxrss_after - maxrss_before) / n,
        "hwm": (hwm_after - hwm_before) / n,
        "profile": _native.build_profile(),
    }))
    """
)

FUNCTIONS = ("partition_ids", "karmarkar_karp")
MODES = ("equal", "free")


def measure(function: str, mode: str, n: int, k: int) -> dict:
    """Extra peak bytes per item of one call, in a fresh child process."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, function, mode, str(n), str(k)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_small_case_reports_figures():
    # 2^16 items: too few for a meaningful figure, enough to check the child runs and reports.
    for function in FUNCTIONS:
        figures = measure(function, "equal", 2**16, 8)
        assert figures["maxrss"] >= 0 and figures["hwm"] >= 0
        assert isinstance(figures["profile"], str)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**7, help="items (default 10**7)")
    parser.add_argument("--k", type=int, nargs="+", default=[8, 1000], help="partition counts")
    parser.add_argument("--repeat", type=int, default=3, help="children per case (median kept)")
    args = parser.parse_args(argv)
    print(f"n = {args.n:,}; extra peak bytes per item (ratio to the 8-byte input), answer included")
    for k in args.k:
        for function in FUNCTIONS:
            for mode in MODES:
                if mode == "equal" and args.n % k:
                    print(f"  k={k:<5} {function:15} {mode:5}: skipped, n is not a multiple of k")
                    continue
                runs = [measure(function, mode, args.n, k) for _ in range(args.repeat)]
                figures = {
                    key: statistics.median(run[key] for run in runs) for key in ("maxrss", "hwm")
                }
                figures["profile"] = runs[0]["profile"]
                print(
                    f"  k={k:<5} {function:15} {mode:5}: ru_maxrss {figures['maxrss']:6.1f} B "
                    f"({figures['maxrss'] / 8:.2f}x), VmHWM {figures['hwm']:6.1f} B "
                    f"({figures['hwm'] / 8:.2f}x)  [{figures['profile']}]",
                    flush=True,
                )


if __name__ == "__main__":
    main()
