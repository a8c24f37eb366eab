"""What one call costs besides the algorithm: the small call and the refine path (issue 19).

Run: PYTHONPATH=python python3 benches/bench_one_call.py (on a release build: ``cargo build
--release --lib`` copied over ``python/seqbalance/_native.abi3.so``).

* ``karmarkar_karp`` on 64 items, k = 8, equal sizes: microseconds per call (best of several
  rounds of many calls) and the ratio of the pure-Python reference's time to it, timed in the
  same run; beside it the floor of such a call: a PyO3 call that does nothing
  (``_native.build_profile``), the native entry point without the Python wrapper, and building
  the answer's 8 lists of 8 ints in Python from tuples.
* The refine path at n = 2^20, k = 64, equal sizes, on an int64 array:
  ``get_seqlen_balanced_partitions(..., refine=True)`` and ``partition_ids(..., refine=True)``,
  each as a ratio to ``numpy.sort`` of the same array (best of a few rounds), and the extra peak
  memory of one call in a fresh child process (``VmHWM`` after minus before, per item and as a
  ratio to the input's 8 bytes an item; see ``bench_memory.py`` for why a child).

Under pytest (benchmarks disabled, the default) one tiny case runs and checks its figures.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import json
import subprocess
import sys
import textwrap
import timeit

import numpy as np

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import seqbalance

    function, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def hwm():
        with open("/proc/self/status") as status:
            return 1024 * next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

    def call(values):
        if function == "partition_ids":
            return seqbalance.partition_ids(values, k, equal_size=True, refine=True)
        return seqbalance.get_seqlen_balanced_partitions(values, k, True, refine=True)

    values = np.random.default_rng(1).integers(1, 32_768, size=n, dtype=np.int64)
    call(values[: 64 * k])
    before = hwm()
    result = call(values)
    print(json.dumps({"bytes_per_item": (hwm() - before) / n, "k": len(result)}))
    """
)


def small_call(rounds: int = 7, number: int = 2000) -> dict:
    """``karmarkar_karp`` on 64 items, k = 8, equal sizes: native and reference, per call."""
    import seqbalance
    from seqbalance import reference

    values = np.random.default_rng(0).integers(1, 4096, size=64).tolist()
    native = min(
        timeit.repeat(
            lambda: seqbalance.karmarkar_karp(values, 8, True), number=number, repeat=rounds
        )
    )
    slow = min(
        timeit.repeat(
            lambda: reference.karmarkar_karp(values, 8, True), number=number // 20, repeat=rounds
        )
    )
    native_us = native / number * 1e6
    reference_us = slow / (number // 20) * 1e6
    return {"native_us": native_us, "reference_us": reference_us, "ratio": reference_us / native_us}


def small_call_floor(rounds: int = 7, number: int = 2000) -> dict:
    """What the small call costs besides its algorithm, in microseconds per call."""
    import seqbalance
    from seqbalance import _native

    values = np.random.default_rng(0).integers(1, 4096, size=64).tolist()
    rows = [tuple(range(8 * p, 8 * p + 8)) for p in range(8)]

    def per_call(function) -> float:
        return min(timeit.repeat(function, number=number, repeat=rounds)) / number * 1e6

    return {
        "no_op_pyo3_us": per_call(_native.build_profile),
        "eight_lists_us": per_call(lambda: [list(row) for row in rows]),
        "native_entry_us": per_call(lambda: _native.karmarkar_karp(values, 8, True)),
        "public_us": per_call(lambda: seqbalance.karmarkar_karp(values, 8, True)),
    }


def refine_path(n: int, k: int, rounds: int = 5) -> dict:
    """The refine path's time as a ratio to ``numpy.sort`` of the same array."""
    import seqbalance

    values = np.random.default_rng(1).integers(1, 32_768, size=n, dtype=np.int64)
    floor = min(timeit.repeat(lambda: np.sort(values), number=1, repeat=rounds))
    lists = min(
        timeit.repeat(
            lambda: seqbalance.get_seqlen_balanced_partitions(values, k, True, refine=True),
            number=1,
            repeat=rounds,
        )
    )
    ids = min(
        timeit.repeat(
            lambda: seqbalance.partition_ids(values, k, equal_size=True, refine=True),
            number=1,
            repeat=rounds,
        )
    )
    return {"sort_ms": floor * 1e3, "lists_x_sort": lists / floor, "ids_x_sort": ids / floor}


def peak(function: str, n: int, k: int) -> dict:
    """Extra peak bytes per item of one refine-path call, in a fresh child process."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, function, str(n), str(k)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_tiny_case_reports_figures():
    figures = small_call(rounds=1, number=40)
    assert figures["native_us"] > 0 and figures["ratio"] > 0
    floor = small_call_floor(rounds=1, number=40)
    assert 0 < floor["no_op_pyo3_us"] < floor["native_entry_us"]
    timing = refine_path(1 << 12, 8, rounds=1)
    assert timing["lists_x_sort"] > 0 and timing["ids_x_sort"] > 0
    for function in ("partition_ids", "get_seqlen_balanced_partitions"):
        figures = peak(function, 1 << 12, 8)
        assert figures["k"] in (8, 1 << 12)


def main() -> None:
    from seqbalance import _native

    n, k = 1 << 20, 64
    print("profile:", _native.build_profile())
    small = small_call()
    print(
        f"karmarkar_karp n=64 k=8 equal: {small['native_us']:.2f} us, "
        f"reference {small['reference_us']:.1f} us, reference/native {small['ratio']:.1f}x"
    )
    floor = small_call_floor()
    print(
        f"  floor: a no-op PyO3 call {floor['no_op_pyo3_us']:.3f} us, the native entry "
        f"{floor['native_entry_us']:.2f} us, the public function {floor['public_us']:.2f} us, "
        f"8 lists of 8 ints built in Python {floor['eight_lists_us']:.2f} us"
    )
    timing = refine_path(n, k)
    print(
        f"refine path n=2^20 k={k}: numpy.sort {timing['sort_ms']:.1f} ms; "
        f"get_seqlen_balanced_partitions {timing['lists_x_sort']:.2f}x sort, "
        f"partition_ids {timing['ids_x_sort']:.2f}x sort"
    )
    for function in ("get_seqlen_balanced_partitions", "partition_ids"):
        figures = peak(function, n, k)
        per_item = figures["bytes_per_item"]
        print(
            f"peak {function}(refine=True): {per_item:.1f} bytes/item "
            f"({per_item / 8:.1f}x the input)"
        )


if __name__ == "__main__":
    main()
