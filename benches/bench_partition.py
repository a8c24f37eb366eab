"""Native partitioners against the pure-Python reference on the same inputs.

Run: pytest benches/bench_partition.py --benchmark-enable  (benchmarks are disabled by default,
so the test suite only checks that native and reference agree here).
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import functools

import pytest

import seqbalance
from seqbalance import reference
from workloads import lengths, reference_is_affordable

GRID = [
    (n, k, equal_size)
    for n in (64, 1024, 8192, 32768)
    for k in (8, 64, 256)
    for equal_size in (False, True)
    if k <= n
]


def _case_id(case):
    n, k, equal_size = case
    return f"n={n}-k={k}-{'equal' if equal_size else 'free'}"


@functools.cache
def _reference_answer(n, k, equal_size):
    return reference.karmarkar_karp(lengths(n).tolist(), k, equal_size)


@pytest.mark.parametrize("case", GRID, ids=_case_id)
def test_native(benchmark, case):
    n, k, equal_size = case
    values = lengths(n).tolist()
    benchmark.group = _case_id(case)
    if reference_is_affordable(n, k, equal_size) and (n * k <= 300_000 or benchmark.enabled):
        assert seqbalance.karmarkar_karp(values, k, equal_size) == _reference_answer(
            n, k, equal_size
        )
    result = benchmark(seqbalance.karmarkar_karp, values, k, equal_size)
    # Where the reference is too slow to compare, at least the partition's invariants hold.
    assert len(result) == k and all(result)
    assert sorted(i for part in result for i in part) == list(range(n))
    if equal_size:
        assert {len(part) for part in result} == {n // k}


@pytest.mark.parametrize("case", GRID, ids=_case_id)
def test_reference(benchmark, case):
    n, k, equal_size = case
    if not reference_is_affordable(n, k, equal_size):
        pytest.skip(f"one reference call at n={n}, k={k} would take more than ~10 s")
    if not benchmark.enabled and n * k > 300_000:
        pytest.skip("large reference calls run only when benchmarks are enabled")
    values = lengths(n).tolist()
    benchmark.group = _case_id(case)
    rounds = 3 if n * k > 100_000 else 10
    result = benchmark.pedantic(
        reference.karmarkar_karp, args=(values, k, equal_size), rounds=rounds
    )
    assert result == seqbalance.karmarkar_karp(values, k, equal_size)
