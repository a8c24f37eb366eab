"""pack_sequences(algorithm="bfd") on 100,000 lengths, against a plain-Python best-fit packer;
the shape options (max_sequences, a padded footprint, keys) beside numpy.sort;
and the micro-batch count search where every sample is just over half the cap.

Run with ``pytest benches/bench_packing.py --benchmark-enable``. Each benchmark asserts its
result first; speed is reported by pytest-benchmark, never asserted.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import bisect

import numpy as np
import pytest

from seqbalance import min_num_micro_batches_for, pack_ids, pack_sequences, plan_micro_batches

N = 100_000
PACK_MAX_LENGTH = 16_384


@pytest.fixture(scope="module")
def lengths() -> np.ndarray:
    # Heavy-tailed like RL responses: most short, some near the pack length.
    rng = np.random.default_rng(7)
    return np.clip(rng.lognormal(6.5, 1.0, N), 1, PACK_MAX_LENGTH).astype(np.int64)


def python_bfd(lengths: list[int], cap: int) -> list[list[int]]:
    """A plain-Python best fit decreasing, as trainers write it (a sorted list of rooms)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rooms: list[tuple[int, int]] = []  # sorted (room left, pack number)
    packs: list[list[int]] = []
    for i in order:
        length = lengths[i]
        position = bisect.bisect_left(rooms, (length, -1))
        if position < len(rooms):
            room, pack = rooms.pop(position)
            bisect.insort(rooms, (room - length, pack))
            packs[pack].append(i)
        else:
            bisect.insort(rooms, (cap - length, len(packs)))
            packs.append([i])
    return packs


def check(packs: list[list[int]], lengths: np.ndarray) -> None:
    assert all(int(lengths[pack].sum()) <= PACK_MAX_LENGTH for pack in map(np.asarray, packs))
    flat = np.sort(np.concatenate([np.asarray(pack) for pack in packs]))
    assert np.array_equal(flat, np.arange(len(lengths)))


def test_bfd_100k_native(benchmark, lengths):
    expected = python_bfd(lengths.tolist(), PACK_MAX_LENGTH)
    packs = pack_sequences(lengths, PACK_MAX_LENGTH, algorithm="bfd")
    check(packs, lengths)
    assert packs == expected
    benchmark(pack_sequences, lengths, PACK_MAX_LENGTH, algorithm="bfd")


def test_bfd_100k_native_from_a_list(benchmark, lengths):
    as_list = lengths.tolist()
    packs = pack_sequences(as_list, PACK_MAX_LENGTH, algorithm="bfd")
    check(packs, lengths)
    benchmark(pack_sequences, as_list, PACK_MAX_LENGTH, algorithm="bfd")


def test_bfd_100k_plain_python(benchmark, lengths):
    as_list = lengths.tolist()
    check(python_bfd(as_list, PACK_MAX_LENGTH), lengths)
    benchmark.pedantic(python_bfd, args=(as_list, PACK_MAX_LENGTH), rounds=1, iterations=1)


@pytest.mark.parametrize("cost", ["tokens", "workload"])
def test_micro_batch_count_with_every_sample_just_over_half_the_cap(benchmark, cost):
    # No two samples share a micro-batch, but ceil(total / cap) is about n / 2: a scan from
    # there made about n / 2 partition calls (review item 1); the bin-packing bound makes one.
    n, cap = 20_000, 1_000
    lengths = [cap // 2 + 1] * n
    plan = plan_micro_batches(lengths, cap, cost=cost)
    assert sorted(len(batch) for batch in plan) == [1] * n
    assert min_num_micro_batches_for(lengths, cap, cost=cost) == n
    benchmark(min_num_micro_batches_for, lengths, cap, cost=cost)


SHAPES = {
    "plain": {},
    "max_sequences=16": {"max_sequences": 16},
    "padded": {"footprint": "padded"},
    "4 keys": {"keys": "four"},
}


@pytest.mark.parametrize("algorithm", ["ffd", "bfd"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_shaped_packing_ids(benchmark, lengths, algorithm, shape):
    """The shape options of the planning spec (pack_ids answers), beside numpy.sort below."""
    options = dict(SHAPES[shape])
    keys = np.arange(N) % 4 if options.get("keys") == "four" else None
    if keys is not None:
        options["keys"] = keys
    ids = pack_ids(lengths, PACK_MAX_LENGTH, algorithm=algorithm, **options)
    packs = [np.flatnonzero(ids == p) for p in range(int(ids.max()) + 1)]
    for pack in packs[:: max(1, len(packs) // 200)]:
        charged = (
            pack.size * lengths[pack].max()
            if options.get("footprint") == "padded"
            else lengths[pack].sum()
        )
        assert 0 < pack.size <= options.get("max_sequences", N) and charged <= PACK_MAX_LENGTH
        assert keys is None or np.unique(keys[pack]).size == 1
    benchmark.group = f"packing shapes, n={N}"
    benchmark(pack_ids, lengths, PACK_MAX_LENGTH, algorithm=algorithm, **options)


def test_numpy_sort_floor(benchmark, lengths):
    benchmark.group = f"packing shapes, n={N}"
    benchmark(np.sort, lengths)
