"""Float weights beside integer weights: what the float path costs, as a ratio in the same run.

    python benches/bench_floats.py [--cpu-time]   # the ratio table (release build; a minute)
    pytest benches/bench_floats.py --benchmark-enable

The float path walks an absorbed set's items to add them in the reference's order, where the
integer path adds two sums; everything else (sorting, queues, merges) is shared. The inputs are
2^20 items into k = 1024 parts: the integer lengths of ``bench_large``, the same values as
float64 and float32 arrays, real-valued costs (lognormal, as FLOPs estimates are), and inputs
chosen to make merges walk long sets (one huge value among small ones, all values equal).
With benchmarks disabled (the default in the test suite) each case runs once, on a smaller size,
and checks its answer.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import time

import numpy as np
import pytest

import seqbalance
from seqbalance import _native, reference
from workloads import best_of

N, K = 2**20, 1024


def inputs(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 32_768, size=n, dtype=np.int64)
    costs = rng.lognormal(mean=np.log(1e12), sigma=1.0, size=n)
    one_huge = np.ones(n)
    one_huge[0] = float(n) * 1024
    return {
        "int64 lengths": lengths,
        "float64, same values": lengths.astype(np.float64),
        "float32, same values": lengths.astype(np.float32),
        "float64 costs": costs,
        "float32 costs": costs.astype(np.float32),
        "float64 one huge among ones": one_huge,
        "float64 all equal": np.full(n, 0.1),
    }


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
@pytest.mark.parametrize("name", list(inputs(8)))
def test_float_path(benchmark, name, equal_size):
    enabled = not benchmark.disabled
    n, k = (N, K) if enabled else (2**12, 16)
    values = inputs(n)[name]
    benchmark.group = f"floats: 2^{n.bit_length() - 1} items, k={k}, equal_size={equal_size}"
    ids = seqbalance.partition_ids(values, k, equal_size=equal_size)
    assert ids.shape == (n,) and set(np.unique(ids).tolist()) == set(range(k))
    if not enabled and values.dtype.kind == "f" and n * k <= 2**16:
        expected = reference.get_seqlen_balanced_partitions(values, k, equal_size)
        assert [np.flatnonzero(ids == p).tolist() for p in range(k)] == expected
    benchmark.pedantic(
        seqbalance.partition_ids, args=(values, k), kwargs={"equal_size": equal_size}, rounds=3
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--k", type=int, default=K)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time process CPU time instead of wall time (steadier on a shared machine)",
    )
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if _native.build_profile() != "release":
        raise SystemExit("seqbalance was built in debug mode; time a release build")
    cases = inputs(args.n)
    kind = "CPU time" if args.cpu_time else "wall time"
    print(f"partition_ids, {args.n} items, k = {args.k}; best of {args.rounds} ({kind})")
    for equal_size in (False, True):
        base = None
        print(f"\nequal_size={equal_size}")
        for name, values in cases.items():
            seconds = best_of(
                lambda values=values, equal_size=equal_size: seqbalance.partition_ids(
                    values, args.k, equal_size=equal_size
                ),
                args.rounds,
                clock,
            )
            base = base or seconds
            print(f"  {name:30s} {seconds * 1e3:9.1f} ms   x{seconds / base:5.2f}")
        floor = best_of(lambda: np.sort(cases["float64 costs"]), args.rounds, clock)
        print(f"  {'np.sort(float64 costs)':30s} {floor * 1e3:9.1f} ms   x{floor / base:5.2f}")


if __name__ == "__main__":
    main()
