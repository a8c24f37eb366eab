"""The documented golden values, for the native functions and the reference alike."""

from __future__ import annotations

import pytest

import seqbalance
from seqbalance import PartitionError, reference

IMPLEMENTATIONS = [
    pytest.param(seqbalance, id="native"),
    pytest.param(reference, id="reference"),
]

# (values, k, equal_size, karmarkar_karp, get_seqlen_balanced_partitions); None = not documented.
GOLDEN = [
    ([10, 20, 30, 40], 2, True, [[3, 0], [2, 1]], [[0, 3], [1, 2]]),
    ([100, 90, 50, 10, 5, 1], 2, True, [[2, 1, 5], [3, 0, 4]], [[1, 2, 5], [0, 3, 4]]),
    ([100, 10, 10, 10, 10], 2, False, [[0], [4, 3, 2, 1]], [[0], [1, 2, 3, 4]]),
    ([100, 80, 60, 40, 20, 10], 3, True, [[0, 5], [2, 3], [1, 4]], [[0, 5], [2, 3], [1, 4]]),
    ([50, 50, 50, 50], 2, True, [[3, 0], [2, 1]], [[0, 3], [1, 2]]),
    ([1, 2, 3, 4, 5, 6, 7, 8], 3, False, None, [[1, 4, 5], [0, 3, 6], [2, 7]]),
    ([5, 5, 5, 5, 5, 5], 3, False, None, [[0, 5], [1, 4], [2, 3]]),
]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("values, k, equal_size, expected_kk, expected_balanced", GOLDEN)
def test_golden(impl, values, k, equal_size, expected_kk, expected_balanced):
    if expected_kk is not None:
        assert impl.karmarkar_karp(values, k, equal_size) == expected_kk
    assert impl.get_seqlen_balanced_partitions(values, k, equal_size) == expected_balanced


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    "function", ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"]
)
def test_more_partitions_than_items(impl, function):
    with pytest.raises(
        PartitionError, match=r"number of items \(3\) is smaller than k_partitions \(5\)"
    ):
        getattr(impl, function)([1, 2, 3], 5, False)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_greedy_examples(impl):
    assert impl.greedy_partition([5, 1, 1, 4, 2], 2, False) == [[0, 4], [1, 2, 3]]
    assert impl.greedy_partition([9, 1, 1, 1], 2, True) == [[0, 3], [1, 2]]


def test_keyword_and_positional_calls_agree():
    values = [7, 3, 9, 1, 4, 4]
    by_position = seqbalance.karmarkar_karp(values, 3, True)
    by_keyword = seqbalance.karmarkar_karp(seqlen_list=values, k_partitions=3, equal_size=True)
    assert by_position == by_keyword == reference.karmarkar_karp(values, 3, True)
    assert seqbalance.get_seqlen_balanced_partitions(
        seqlen_list=values, k_partitions=2, equal_size=False
    ) == reference.get_seqlen_balanced_partitions(values, 2, False)


def test_partition_ids_number_parts_like_balanced_partitions():
    values = [100, 90, 50, 10, 5, 1]
    ids = seqbalance.partition_ids(values, 2, equal_size=True)
    assert ids.dtype.name == "int64"
    assert ids.tolist() == [1, 0, 0, 1, 1, 0]


def test_version_is_exposed():
    assert isinstance(seqbalance.__version__, str) and seqbalance.__version__.count(".") >= 1


def test_partition_error_is_both_value_and_assertion_error():
    assert issubclass(PartitionError, ValueError)
    assert issubclass(PartitionError, AssertionError)
