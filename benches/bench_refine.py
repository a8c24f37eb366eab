"""Refinement benchmarks: the partition alone, and the refinement on top of it, on RL-like batches.

    python -m pytest benches/bench_refine.py --benchmark-enable

Every benchmark first checks the answer it is about to time. ``test_refine_meets_the_target``
checks the quality promise of issue 6 (no timing): with equal counts and at most 16 items, the
refined answer's mean excess over the optimum is at most a tenth of the reference answer's.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from refine_report import max_load, optimum, rl_batch  # noqa: E402
from seqbalance import get_seqlen_balanced_partitions, refine_partitions  # noqa: E402

#: (items per rank, ranks, equal_size)
SHAPES = [(4, 8, True), (12, 16, True), (8, 16, False), (32, 64, True), (16384, 64, True)]


def case(per_rank: int, ranks: int, equal_size: bool):
    values = rl_batch(np.random.default_rng(per_rank * 131 + ranks), per_rank * ranks)
    return values, get_seqlen_balanced_partitions(values, ranks, equal_size)


def check(values, start, refined, equal_size):
    assert sorted(i for part in refined for i in part) == list(range(len(values)))
    assert all(part and part == sorted(part) for part in refined)
    assert max_load(values, refined) <= max_load(values, start)
    if equal_size:
        assert sorted(map(len, refined)) == sorted(map(len, start))


@pytest.mark.parametrize(("per_rank", "ranks", "equal_size"), SHAPES)
def test_partition_alone(benchmark, per_rank, ranks, equal_size):
    values, start = case(per_rank, ranks, equal_size)
    benchmark.group = f"refine {per_rank}x{ranks} equal_size={equal_size}"
    result = benchmark(get_seqlen_balanced_partitions, values, ranks, equal_size)
    assert result == start


@pytest.mark.parametrize("mode", ["local", "exact"])
@pytest.mark.parametrize(("per_rank", "ranks", "equal_size"), SHAPES)
def test_refine_on_top(benchmark, per_rank, ranks, equal_size, mode):
    values, start = case(per_rank, ranks, equal_size)
    refined = refine_partitions(values, start, equal_size=equal_size, search=mode)
    check(values, start, refined, equal_size)
    benchmark.group = f"refine {per_rank}x{ranks} equal_size={equal_size}"
    again = benchmark(refine_partitions, values, start, equal_size=equal_size, search=mode)
    assert again == refined


@pytest.mark.parametrize(("per_rank", "ranks", "equal_size"), SHAPES)
def test_partition_with_refine(benchmark, per_rank, ranks, equal_size):
    """What callers pay: one ``get_seqlen_balanced_partitions(..., refine=True)`` call."""
    values, start = case(per_rank, ranks, equal_size)
    expected = refine_partitions(values, start, equal_size=equal_size)
    benchmark.group = f"refine {per_rank}x{ranks} equal_size={equal_size}"
    result = benchmark(get_seqlen_balanced_partitions, values, ranks, equal_size, refine=True)
    assert result == expected


def test_refine_meets_the_target():
    excess = {"reference": [], "refine": []}
    rng = np.random.default_rng(6)
    for per_rank, ranks in [(3, 4), (4, 3), (4, 4), (8, 2)]:
        for _ in range(25):
            values = rl_batch(rng, per_rank * ranks)
            start = get_seqlen_balanced_partitions(values, ranks, True)
            refined = refine_partitions(values, start, equal_size=True)
            check(values, start, refined, True)
            before, after = max_load(values, start), max_load(values, refined)
            best = optimum(values.tolist(), ranks, True, after + 1)
            excess["reference"].append(before / best - 1)
            excess["refine"].append(after / best - 1)
    reference, refine = np.mean(excess["reference"]), np.mean(excess["refine"])
    assert reference > 0.01, "the inputs should leave the reference room to improve"
    assert refine <= reference / 10, f"refine excess {refine:.5f} vs reference {reference:.5f}"
