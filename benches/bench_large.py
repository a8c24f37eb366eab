"""A million sequences, and two threads at once: the native core against the floor, sorting.

Run: pytest benches/bench_large.py --benchmark-enable. With benchmarks disabled (the default in
the test suite) each case still runs once and checks its answer.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import threading

import numpy as np
import pytest

import seqbalance

N_LARGE, K_LARGE = 2**20, 1024
N_THREADS, K_THREADS = 2**18, 256


@pytest.fixture(scope="module")
def large_lengths():
    return np.random.default_rng(1).integers(1, 32_768, size=N_LARGE, dtype=np.int64)


def check_lists(parts, n, k, equal_size):
    assert len(parts) == k and all(parts)
    flat = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    assert flat.size == n and np.array_equal(np.sort(flat), np.arange(n))
    if equal_size:
        assert {len(p) for p in parts} == {n // k}


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
def test_lists(benchmark, large_lengths, equal_size):
    benchmark.group = f"2^20 items, k=1024, {'equal' if equal_size else 'free'}"
    parts = seqbalance.karmarkar_karp(large_lengths, K_LARGE, equal_size)
    check_lists(parts, N_LARGE, K_LARGE, equal_size)
    benchmark.pedantic(
        seqbalance.karmarkar_karp, args=(large_lengths, K_LARGE, equal_size), rounds=3
    )


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
def test_ids(benchmark, large_lengths, equal_size):
    benchmark.group = f"2^20 items, k=1024, {'equal' if equal_size else 'free'}"
    ids = seqbalance.partition_ids(large_lengths, K_LARGE, equal_size=equal_size)
    parts = seqbalance.get_seqlen_balanced_partitions(large_lengths, K_LARGE, equal_size)
    for number in (0, K_LARGE // 2, K_LARGE - 1):
        assert np.array_equal(np.flatnonzero(ids == number), parts[number])
    benchmark.pedantic(
        seqbalance.partition_ids,
        args=(large_lengths, K_LARGE),
        kwargs={"equal_size": equal_size},
        rounds=3,
    )


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
def test_numpy_sort_floor(benchmark, large_lengths, equal_size):
    benchmark.group = f"2^20 items, k=1024, {'equal' if equal_size else 'free'}"
    result = benchmark.pedantic(np.sort, args=(large_lengths,), rounds=3)
    assert np.all(result[1:] >= result[:-1])


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
def test_numpy_argsort_beside(benchmark, large_lengths, equal_size):
    # Not a floor the targets use: ids beat it only if the core costs less than an argsort.
    benchmark.group = f"2^20 items, k=1024, {'equal' if equal_size else 'free'}"
    order = benchmark.pedantic(
        np.argsort, args=(large_lengths,), kwargs={"kind": "stable"}, rounds=3
    )
    assert np.all(np.diff(large_lengths[order]) >= 0)


@pytest.mark.parametrize("equal_size", [True, False], ids=["equal", "free"])
def test_numpy_sort_tolist_floor(benchmark, large_lengths, equal_size):
    benchmark.group = f"2^20 items, k=1024, {'equal' if equal_size else 'free'}"
    result = benchmark.pedantic(lambda: np.sort(large_lengths).tolist(), rounds=3)
    assert len(result) == N_LARGE


@pytest.fixture(scope="module")
def thread_inputs():
    rng = np.random.default_rng(2)
    arrays = [rng.integers(1, 32_768, size=N_THREADS, dtype=np.int64) for _ in range(2)]
    expected = [seqbalance.karmarkar_karp(a, K_THREADS, False) for a in arrays]
    return arrays, expected


def _together(arrays):
    results = [None, None]

    def work(slot):
        results[slot] = seqbalance.karmarkar_karp(arrays[slot], K_THREADS, False)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _one_after_the_other(arrays):
    return [seqbalance.karmarkar_karp(a, K_THREADS, False) for a in arrays]


@pytest.mark.parametrize("how", [_one_after_the_other, _together], ids=["serial", "two-threads"])
def test_two_threads(benchmark, thread_inputs, how):
    benchmark.group = "two inputs of 2^18 items, k=256, free"
    arrays, expected = thread_inputs
    assert how(arrays) == expected
    benchmark.pedantic(how, args=(arrays,), rounds=5)
