"""The native partitioners return exactly what the pure-Python reference returns, for all inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import reference

MAX = 2**63 - 1
FUNCTIONS = ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"]

# Ties, zeros and duplicates are where the tie rules matter; values near 2**63 are where a sum
# outside 128 bits (or a wrapped 64-bit one) would show.
value_lists = st.one_of(
    st.lists(st.integers(0, 4), min_size=1, max_size=120),
    st.lists(st.integers(0, 1_000), min_size=1, max_size=120),
    st.lists(st.integers(0, MAX), min_size=1, max_size=60),
    st.lists(st.sampled_from([0, 1, 2, MAX, MAX - 1, 2**62, 2**32]), min_size=1, max_size=60),
    st.lists(st.integers(0, 32_768), min_size=100, max_size=600),
)


def _k_and_values(draw, values, equal_size, max_cost):
    n = len(values)
    # The reference costs O(n * k) objects without equal_size; keep its side of the test quick.
    k_max = n if equal_size else max(1, min(n, max_cost // n))
    k = draw(st.integers(1, k_max))
    if equal_size:
        values = values[: n - n % k]
        assume(values)
    return k, values


@st.composite
def requests(draw, max_cost=6_000):
    values = draw(value_lists)
    equal_size = draw(st.booleans())
    k, values = _k_and_values(draw, values, equal_size, max_cost)
    return values, k, equal_size


def check_invariants(partitions, n, k, equal_size, allow_empty=False):
    assert len(partitions) == k
    flat = sorted(i for part in partitions for i in part)
    assert flat == list(range(n))
    # greedy_partition (like verl's) may leave a part empty when values are zero.
    assert allow_empty or all(partitions)
    if equal_size:
        assert {len(part) for part in partitions} == {n // k}


@given(requests())
def test_native_equals_reference(request):
    values, k, equal_size = request
    for name in FUNCTIONS:
        native = getattr(seqbalance, name)(values, k, equal_size)
        assert native == getattr(reference, name)(values, k, equal_size), name
        check_invariants(native, len(values), k, equal_size, allow_empty=name == "greedy_partition")


@given(requests())
def test_balanced_parts_are_sorted_karmarkar_karp_parts(request):
    values, k, equal_size = request
    kk = seqbalance.karmarkar_karp(values, k, equal_size)
    balanced = seqbalance.get_seqlen_balanced_partitions(values, k, equal_size)
    assert balanced == [sorted(part) for part in kk]


@given(requests())
def test_partition_ids_match_balanced_partitions(request):
    values, k, equal_size = request
    ids = seqbalance.partition_ids(values, k, equal_size=equal_size)
    expected = np.empty(len(values), dtype=np.int64)
    for number, part in enumerate(reference.get_seqlen_balanced_partitions(values, k, equal_size)):
        expected[part] = number
    assert ids.dtype == np.int64 and ids.shape == (len(values),)
    np.testing.assert_array_equal(ids, expected)


@given(st.lists(st.integers(0, 50_000), min_size=1_000, max_size=3_000), st.data())
def test_large_n_equal_size(values, data):
    k = data.draw(st.sampled_from([1, 2, 3, 8, 16, 64, 100, 256]))
    values = values[: len(values) - len(values) % k]
    assert seqbalance.karmarkar_karp(values, k, True) == reference.karmarkar_karp(values, k, True)


@given(st.lists(st.integers(0, 50_000), min_size=1_000, max_size=3_000), st.integers(1, 6))
def test_large_n_free_size(values, k):
    assert seqbalance.karmarkar_karp(values, k, False) == reference.karmarkar_karp(values, k, False)


@given(
    st.integers(1, 8), st.integers(0, 3), st.integers(1, 200), st.integers(1, 3_000), st.booleans()
)
def test_one_huge_value_among_small_ones(k, small, count, huge, equal_size):
    # Full states keep absorbing one item here: the heap-of-sets path of the core.
    values = [small] * count + [huge * 1_000] + [small + 1] * count
    if equal_size:
        values = values[: len(values) - len(values) % k]
    assume(len(values) >= k)
    for name in FUNCTIONS:
        assert getattr(seqbalance, name)(values, k, equal_size) == getattr(reference, name)(
            values, k, equal_size
        )


INTEGER_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_every_integer_dtype_and_stride(dtype, data):
    top = min(np.iinfo(dtype).max, MAX)
    values = data.draw(st.lists(st.integers(0, top), min_size=1, max_size=80))
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
    equal_size = data.draw(st.booleans())
    # Build an array whose view with `step` holds exactly `values`.
    backing = np.zeros(len(values) * abs(step), dtype=dtype)
    view = backing[::step]
    view[:] = values
    assert view.tolist() == values
    k, _ = _k_and_values(data.draw, values, equal_size, 6_000)
    values_eq = values[: len(values) - len(values) % k] if equal_size else values
    view = view[: len(values_eq)]
    assert seqbalance.karmarkar_karp(view, k, equal_size) == reference.karmarkar_karp(
        values_eq, k, equal_size
    )
    assert seqbalance.greedy_partition(view, k, equal_size) == reference.greedy_partition(
        values_eq, k, equal_size
    )


class TensorLike:
    """Stands in for a CPU torch tensor: only ``__array__``, no sequence protocol."""

    def __init__(self, values):
        self._values = np.asarray(values, dtype=np.int64)

    def __array__(self, dtype=None, copy=None):
        return self._values if dtype is None else self._values.astype(dtype)


@given(requests(max_cost=2_000))
def test_array_likes_tuples_and_numpy_scalars(request):
    values, k, equal_size = request
    expected = reference.get_seqlen_balanced_partitions(values, k, equal_size)
    as_objects = [np.uint64(v) if v % 2 else np.int64(v) for v in values]
    for variant in (tuple(values), TensorLike(values), as_objects, np.array(values, dtype=object)):
        assert seqbalance.get_seqlen_balanced_partitions(variant, k, equal_size) == expected
    assert seqbalance.get_seqlen_balanced_partitions(values, np.int64(k), equal_size) == expected


def test_bools_count_as_zero_and_one():
    values = [True, False, 3, True]
    assert seqbalance.karmarkar_karp(values, 2, True) == reference.karmarkar_karp(
        [1, 0, 3, 1], 2, True
    )
    as_array = np.array([True, False, True, True])
    assert seqbalance.karmarkar_karp(as_array, 2, False) == reference.karmarkar_karp(
        [1, 0, 1, 1], 2, False
    )


@pytest.mark.parametrize(
    "given_value, meaning", [(1, True), (0, False), (np.bool_(True), True), (np.int8(0), False)]
)
def test_equal_size_takes_bools_and_the_ints_zero_and_one(given_value, meaning):
    values = [4, 1, 3, 3, 2, 9]
    for impl in (seqbalance, reference):
        assert impl.karmarkar_karp(values, 2, given_value) == reference.karmarkar_karp(
            values, 2, meaning
        )


@pytest.mark.parametrize("dtype", [np.int64, np.uint16, np.int32])
def test_unaligned_arrays_are_read_correctly(dtype):
    values = list(range(40, 0, -1)) + [7, 7, 0, 3]
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(len(values) * itemsize + 1, dtype=np.uint8)
    view = np.ndarray(len(values), dtype=dtype, buffer=raw, offset=1)
    view[:] = values
    assert not view.flags.aligned and view.tolist() == values
    for k, equal_size in [(4, True), (5, False)]:
        assert seqbalance.karmarkar_karp(view, k, equal_size) == reference.karmarkar_karp(
            values, k, equal_size
        )


@settings(max_examples=60)
@given(st.data())
def test_k_near_half_of_n(data):
    # Full states then keep absorbing partial states of a few sets: the core's heap path for
    # merges of a full state with a partial one.
    n = data.draw(st.integers(8, 240))
    k = data.draw(st.integers(max(2, n // 4), n // 2 + 3))
    values = data.draw(
        st.lists(st.one_of(st.integers(0, 6), st.integers(0, 40_000)), min_size=n, max_size=n)
    )
    assert seqbalance.karmarkar_karp(values, k, False) == reference.karmarkar_karp(values, k, False)
