"""The planners against the floor: numpy.sort of the same lengths, timed in the same run.

Workload (planning spec, "Speed of the planners"): int64 lengths
``min(int(lognormal(mean=7, sigma=1)) + 1, 32768)``; ``plan_micro_batches`` at n = 2^17 with caps
of 32,768 and 262,144 tokens (target: within 25x numpy.sort), ``plan_dp_micro_batches`` at
n = 2^20, dp = 64, cap 65,536 (target: within 40x; with ``plan_dp_ids``, the array answer, within
25x: issue 22). ``numpy.argsort(kind="stable")`` is timed
beside them for context.

Run the ratios on a release build: ``python benches/bench_planners.py [--cpu-time] [--rounds 5]``
(best of the rounds each, one process; ``--cpu-time`` times process CPU, steadier on a shared
machine). The last row is the native planner against its pure-Python oracle
(``tests/planning/plan_oracle.py``, the rules the native core implements) at a size the oracle
finishes in (``--reference-n``). ``--huge N`` instead times ``min_num_micro_batches_for`` on N
uniform lengths in [1, 32768) with cap 65,536 (issue 30: 4*10^7 of them took 75 s) against
numpy.sort of them, one call each. pytest-benchmark: ``pytest benches/bench_planners.py
--benchmark-enable``. With benchmarks disabled (the default in the test suite) each case runs
once and checks its plan.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import seqbalance
from seqbalance import _native, calculate_workload

# The pure-Python oracle lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.planning import plan_oracle as _plan_reference  # noqa: E402

N_PLAN, N_DP, DP, DP_CAP = 2**17, 2**20, 64, 65_536
PLAN_CAPS = (32_768, 262_144)


def workload(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(mean=7.0, sigma=1.0, size=n)
    return np.minimum(raw.astype(np.int64) + 1, 32_768)


@pytest.fixture(scope="module")
def plan_lengths():
    return workload(N_PLAN)


@pytest.fixture(scope="module")
def dp_lengths():
    return workload(N_DP)


def check_plan(plan: list[list[int]], lengths: np.ndarray, cap: int) -> None:
    flat = np.concatenate([np.asarray(mb, dtype=np.int64) for mb in plan])
    assert np.array_equal(np.sort(flat), np.arange(lengths.size))
    assert max(int(lengths[mb].sum()) for mb in plan) <= cap


@pytest.mark.parametrize("cap", PLAN_CAPS)
def test_plan_micro_batches(benchmark, plan_lengths, cap):
    benchmark.group = f"plan_micro_batches 2^17, cap {cap}"
    check_plan(seqbalance.plan_micro_batches(plan_lengths, cap), plan_lengths, cap)
    benchmark.pedantic(seqbalance.plan_micro_batches, args=(plan_lengths, cap), rounds=3)


@pytest.mark.parametrize("cap", PLAN_CAPS)
def test_plan_floor_numpy_sort(benchmark, plan_lengths, cap):
    benchmark.group = f"plan_micro_batches 2^17, cap {cap}"
    benchmark(np.sort, plan_lengths)


def test_plan_dp_micro_batches(benchmark, dp_lengths):
    benchmark.group = "plan_dp_micro_batches 2^20, dp 64, cap 65536"
    plan = seqbalance.plan_dp_micro_batches(dp_lengths, DP, DP_CAP)
    assert len(plan) == DP and len({len(rank) for rank in plan}) == 1
    check_plan([mb for rank in plan for mb in rank], dp_lengths, DP_CAP)
    benchmark.pedantic(seqbalance.plan_dp_micro_batches, args=(dp_lengths, DP, DP_CAP), rounds=1)


def test_plan_dp_micro_batches_as_ids(benchmark, dp_lengths):
    benchmark.group = "plan_dp_micro_batches 2^20, dp 64, cap 65536"
    rank_ids, micro_batch_ids, count = seqbalance.plan_dp_ids(dp_lengths, DP, DP_CAP)
    assert int(micro_batch_ids.max()) < count and sorted(set(rank_ids.tolist())) == list(range(DP))
    benchmark.pedantic(
        seqbalance.plan_dp_ids,
        args=(dp_lengths, DP, DP_CAP),
        rounds=1,
    )


def test_dp_floor_numpy_sort(benchmark, dp_lengths):
    benchmark.group = "plan_dp_micro_batches 2^20, dp 64, cap 65536"
    benchmark(np.sort, dp_lengths)


def _best(function: Callable[[], Any], repeat: int, clock=time.perf_counter) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        function()
        best = min(best, clock() - start)
    return best


def reference_plan(lengths: np.ndarray, cap: int) -> list[list[int]]:
    """plan_micro_batches(lengths, cap) by the pure-Python oracle of the native planner."""
    tokens = lengths.tolist()
    costs = calculate_workload(tokens)
    bound = _plan_reference.bin_lower_bound(tokens, cap)
    n = len(tokens)
    plan = _plan_reference.plan_ranks(
        tokens, costs, list(range(n)), [1] * n, [list(range(n))], cap, 1, 0, True, [bound]
    )[3][0]
    return plan


def report(repeat: int = 5, cpu_time: bool = False, reference_n: int = 2**13) -> None:
    """Print each planner's time as a ratio of numpy.sort of the same lengths (same run)."""
    clock = time.process_time if cpu_time else time.perf_counter
    rows = []
    small = workload(N_PLAN)
    sort = _best(lambda: np.sort(small), repeat, clock)
    argsort = _best(lambda: np.argsort(small, kind="stable"), repeat, clock)
    for cap in PLAN_CAPS:
        seconds = _best(lambda cap=cap: seqbalance.plan_micro_batches(small, cap), repeat, clock)
        rows.append((f"plan_micro_batches n=2^17 cap={cap}", seconds, sort, argsort, "25x"))
    large = workload(N_DP)
    sort = _best(lambda: np.sort(large), repeat, clock)
    argsort = _best(lambda: np.argsort(large, kind="stable"), repeat, clock)
    seconds = _best(lambda: seqbalance.plan_dp_micro_batches(large, DP, DP_CAP), repeat, clock)
    rows.append(
        (f"plan_dp_micro_batches n=2^20 dp={DP} cap={DP_CAP}", seconds, sort, argsort, "40x")
    )
    seconds = _best(lambda: seqbalance.plan_dp_ids(large, DP, DP_CAP), repeat, clock)
    rows.append(("  the same, plan_dp_ids", seconds, sort, argsort, "25x"))
    # The refined candidate of plan_dp_micro_batches (issue 22): the local search with its early
    # exit when it moves nothing, beside _refine_ids, which reads the renumbered split out.
    weights = np.asarray(calculate_workload(large), dtype=np.int64)
    recipe = seqbalance.partition_ids(weights, DP, equal_size=False)
    seconds = _best(lambda: _native._refine_candidate(weights, recipe, DP, False), repeat, clock)
    rows.append((f"  refined candidate n=2^20 k={DP}", seconds, sort, argsort, "-"))
    seconds = _best(
        lambda: _native._refine_ids(weights, recipe, DP, False, False, True), repeat, clock
    )
    rows.append((f"  _refine_ids n=2^20 k={DP} (the same search)", seconds, sort, argsort, "-"))
    kind = "process CPU time" if cpu_time else "wall time"
    print(f"best of {repeat} ({kind})")
    print(f"{'case':<50} {'time':>10} {'x numpy.sort':>13} {'x argsort':>10} {'target':>7}")
    for name, seconds, sort, argsort, target in rows:
        print(
            f"{name:<50} {seconds * 1e3:>8.1f}ms {seconds / sort:>12.1f}x "
            f"{seconds / argsort:>9.1f}x {target:>7}"
        )
    few = workload(reference_n)
    cap = PLAN_CAPS[0]
    assert seqbalance.plan_micro_batches(few, cap) == reference_plan(few, cap)
    native = _best(lambda: seqbalance.plan_micro_batches(few, cap), repeat, clock)
    oracle = _best(lambda: reference_plan(few, cap), min(repeat, 2), clock)
    print(
        f"plan_micro_batches n={reference_n} cap={cap}: native {native * 1e3:.2f}ms, pure-Python "
        f"oracle {oracle * 1e3:.1f}ms ({oracle / native:.0f}x the native time)"
    )


def huge(n: int, cpu_time: bool) -> None:
    """``min_num_micro_batches_for`` on ``n`` uniform lengths, cap 65,536, against numpy.sort."""
    clock = time.process_time if cpu_time else time.perf_counter
    lengths = np.random.default_rng(0).integers(1, 32_768, size=n, dtype=np.int64)
    sort = _best(lambda: np.sort(lengths), 3, clock)
    start = clock()
    count = seqbalance.min_num_micro_batches_for(lengths, 65_536)
    seconds = clock() - start
    print(
        f"min_num_micro_batches_for, n = {n:,}, cap 65,536: {count:,} micro-batches, "
        f"{seconds:.1f} s, {seconds / sort:.1f}x numpy.sort ({sort:.2f} s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-time", action="store_true", help="time process CPU, not wall")
    parser.add_argument("--reference-n", type=int, default=2**13)
    parser.add_argument("--huge", type=float, default=0, help="min_num_micro_batches_for on N")
    args = parser.parse_args()
    if args.huge:
        huge(int(args.huge), args.cpu_time)
    else:
        report(args.rounds, args.cpu_time, args.reference_n)
