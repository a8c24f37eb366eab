"""equal_size="nearly" (issue 11): counts within one, exactly the partition spec's construction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import PartitionError, reference

IMPLEMENTATIONS = [
    pytest.param(seqbalance, id="native"),
    pytest.param(reference, id="reference"),
]

MAX = 2**63 - 1

# The partition spec's table: (values, k, karmarkar_karp, get_seqlen_balanced_partitions).
GOLDEN_NEARLY = [
    ([10, 20, 30, 40, 50], 2, [[0, 3, 2], [4, 1]], [[0, 2, 3], [1, 4]]),
    ([5, 0, 0, 3, 1, 0, 2], 3, [[0, 2], [6, 4], [3, 5, 1]], [[0, 2], [4, 6], [1, 3, 5]]),
    ([7, 7, 7, 7, 7, 7, 7], 4, [[2, 3], [1, 4], [0, 5], [6]], [[2, 3], [1, 4], [0, 5], [6]]),
    ([1, 2, 3, 4, 5, 6, 7, 8], 3, [[1, 5, 4], [0, 6, 3], [7, 2]], [[1, 4, 5], [0, 3, 6], [2, 7]]),
]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("values, k, expected_kk, expected_balanced", GOLDEN_NEARLY)
def test_golden(impl, values, k, expected_kk, expected_balanced):
    assert impl.karmarkar_karp(values, k, "nearly") == expected_kk
    assert impl.get_seqlen_balanced_partitions(values, k, "nearly") == expected_balanced


@pytest.mark.parametrize("values, k, expected_kk, expected_balanced", GOLDEN_NEARLY)
def test_golden_partition_ids(values, k, expected_kk, expected_balanced):
    ids = seqbalance.partition_ids(values, k, equal_size="nearly")
    for number, part in enumerate(expected_balanced):
        assert ids[part].tolist() == [number] * len(part)


value_lists = st.one_of(
    st.lists(st.integers(0, 4), min_size=1, max_size=120),
    st.lists(st.integers(0, 1_000), min_size=1, max_size=120),
    st.lists(st.integers(0, MAX), min_size=1, max_size=60),
    st.lists(st.sampled_from([0, 1, 2, MAX, 2**62, 2**32]), min_size=1, max_size=60),
    st.lists(st.integers(0, 32_768), min_size=100, max_size=600),
)


@st.composite
def requests(draw):
    values = draw(value_lists)
    return values, draw(st.integers(1, len(values)))


def model(values, k):
    """The spec's construction written out once more, on top of the reference's equal-size rules.

    Placeholders of value 0 with indexes -p..-1 are modelled by shifting every real index up by p
    (the order of all indexes is what the rules look at); they are then dropped.
    """
    p = (-len(values)) % k
    padded = [0] * p + list(values)
    return [[i - p for i in part if i >= p] for part in reference.karmarkar_karp(padded, k, True)]


@given(requests())
def test_native_equals_reference_equals_the_spec(request):
    values, k = request
    expected = reference.karmarkar_karp(values, k, "nearly")
    assert expected == model(values, k)
    assert seqbalance.karmarkar_karp(values, k, "nearly") == expected
    balanced = seqbalance.get_seqlen_balanced_partitions(values, k, "nearly")
    assert balanced == reference.get_seqlen_balanced_partitions(values, k, "nearly")
    assert balanced == [sorted(part) for part in expected]
    ids = seqbalance.partition_ids(np.asarray(values, dtype=np.uint64), k, equal_size="nearly")
    for number, part in enumerate(balanced):
        assert ids[part].tolist() == [number] * len(part)


@given(requests())
def test_counts_within_one_every_index_once_none_empty(request):
    values, k = request
    n = len(values)
    parts = seqbalance.get_seqlen_balanced_partitions(values, k, "nearly")
    assert len(parts) == k
    assert sorted(i for part in parts for i in part) == list(range(n))
    assert {len(part) for part in parts} <= {n // k, n // k + 1}
    # Exactly n % k parts take the extra item.
    assert sum(len(part) == n // k + 1 for part in parts) == n % k or n % k == 0


@given(requests())
def test_identical_to_equal_size_when_k_divides_n(request):
    values, k = request
    values = values[: len(values) - len(values) % k]
    for impl in (seqbalance, reference):
        assert impl.karmarkar_karp(values, k, "nearly") == impl.karmarkar_karp(values, k, True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 50_000), min_size=1_000, max_size=3_000), st.data())
def test_large_n(values, data):
    k = data.draw(st.sampled_from([2, 3, 7, 8, 64, 100, 257]))
    assert seqbalance.karmarkar_karp(values, k, "nearly") == reference.karmarkar_karp(
        values, k, "nearly"
    )


@settings(max_examples=150, deadline=None)
@given(requests(), st.sampled_from([True, "exact"]))
def test_refine_keeps_the_multiset_of_counts_and_is_never_heavier(request, refine):
    values, k = request
    start = seqbalance.get_seqlen_balanced_partitions(values, k, "nearly")
    refined = seqbalance.get_seqlen_balanced_partitions(values, k, "nearly", refine=refine)
    assert sorted(map(len, refined)) == sorted(map(len, start))
    assert sorted(i for part in refined for i in part) == list(range(len(values)))

    def heaviest(parts):
        return max(sum(values[i] for i in part) for part in parts)

    assert heaviest(refined) <= heaviest(start)
    ids = seqbalance.partition_ids(values, k, equal_size="nearly", refine=refine)
    for number, part in enumerate(refined):
        assert ids[part].tolist() == [number] * len(part)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_fewer_items_than_parts_is_a_partition_error(impl):
    with pytest.raises(PartitionError, match=r"number of items \(3\) is smaller"):
        impl.karmarkar_karp([1, 2, 3], 5, "nearly")
    with pytest.raises(PartitionError):
        impl.get_seqlen_balanced_partitions([], 1, "nearly")


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_greedy_refuses_nearly(impl):
    with pytest.raises(ValueError, match=r"greedy_partition does not support equal_size='nearly'"):
        impl.greedy_partition([1, 2, 3], 2, "nearly")


def test_refine_partitions_takes_nearly_and_is_strict():
    values = [9, 1, 5, 4, 4]
    start = seqbalance.get_seqlen_balanced_partitions(values, 2, "nearly")
    refined = seqbalance.refine_partitions(values, start, equal_size="nearly")
    assert sorted(map(len, refined)) == sorted(map(len, start))
    with pytest.raises(
        TypeError, match=r"^equal_size must be True, False or 'nearly', got 'False'"
    ):
        seqbalance.refine_partitions(values, start, equal_size="False")


float_lists = st.lists(
    st.one_of(st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0, 1e-300])),
    min_size=1,
    max_size=80,
)


@given(float_lists, st.data(), st.booleans())
def test_float_weights_native_equals_reference(values, data, single):
    k = data.draw(st.integers(1, len(values)))
    if single:
        values = np.asarray(values, dtype=np.float32)
    expected = reference.karmarkar_karp(values, k, "nearly")
    assert seqbalance.karmarkar_karp(values, k, "nearly") == expected
    assert {len(part) for part in expected} <= {len(values) // k, len(values) // k + 1}
