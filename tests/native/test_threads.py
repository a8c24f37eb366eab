"""The core runs with the GIL released; concurrent calls must not disturb each other."""

from __future__ import annotations

import threading

import numpy as np

import seqbalance
from seqbalance import reference


def _inputs(count, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 32_768, size=n) for _ in range(count)]


def _run_concurrently(jobs):
    results = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def work(slot, job):
        barrier.wait()
        results[slot] = job()

    threads = [threading.Thread(target=work, args=(slot, job)) for slot, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_threads_get_the_answers_of_serial_calls():
    arrays = _inputs(2, 200_000, seed=1)
    expected = [seqbalance.karmarkar_karp(a, 256, False) for a in arrays]
    for _ in range(3):
        got = _run_concurrently(
            [lambda a=a: seqbalance.karmarkar_karp(a, 256, False) for a in arrays]
        )
        assert got == expected


def test_many_threads_match_the_reference():
    arrays = _inputs(8, 2_048, seed=2)
    jobs = []
    for i, a in enumerate(arrays):
        k, equal_size = (2 ** (i + 2), i % 2 == 0)
        jobs.append(
            lambda a=a, k=k, e=equal_size: seqbalance.get_seqlen_balanced_partitions(a, k, e)
        )
    got = _run_concurrently(jobs)
    for i, a in enumerate(arrays):
        k, equal_size = (2 ** (i + 2), i % 2 == 0)
        if equal_size or k <= 32:
            assert got[i] == reference.get_seqlen_balanced_partitions(a, k, equal_size)
        else:
            assert got[i] == seqbalance.get_seqlen_balanced_partitions(a, k, equal_size)
            assert sorted(x for part in got[i] for x in part) == list(range(len(a)))


def test_threads_sharing_one_input_array():
    (array,) = _inputs(1, 2**17, seed=3)
    expected = seqbalance.partition_ids(array, 64, equal_size=True)
    got = _run_concurrently([lambda: seqbalance.partition_ids(array, 64, equal_size=True)] * 4)
    for ids in got:
        np.testing.assert_array_equal(ids, expected)
