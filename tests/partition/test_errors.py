"""Every error in the partitioning contract: its type, its message, and the same for both paths."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import PartitionError, reference
from tests.helpers import plain

FUNCTIONS = ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"]

# (seqlen_list, k_partitions, equal_size, exception type, message pattern)
CASES = [
    # k_partitions
    ([1, 2], 0, False, ValueError, r"^k_partitions must be >= 1, got 0$"),
    ([1, 2], -3, False, ValueError, r"^k_partitions must be >= 1, got -3$"),
    ([1, 2], True, False, TypeError, r"^k_partitions must be an int, got True \(bool\)$"),
    ([1, 2], np.bool_(True), False, TypeError, r"^k_partitions must be an int, got .*bool"),
    ([1, 2], 2.0, False, TypeError, r"^k_partitions must be an int, got 2\.0 \(float\)$"),
    ([1, 2], "2", False, TypeError, r"^k_partitions must be an int, got '2' \(str\)$"),
    ([1, 2], None, False, TypeError, r"^k_partitions must be an int, got None \(NoneType\)$"),
    # shape
    ([], 1, False, PartitionError, r"^number of items \(0\) is smaller than k_partitions \(1\)$"),
    (
        [1, 2, 3],
        5,
        True,
        PartitionError,
        r"^number of items \(3\) is smaller than k_partitions \(5\)$",
    ),
    (
        [1, 2, 3],
        10**30,
        False,
        PartitionError,
        r"smaller than k_partitions \(1000000000000000000000000000000\)$",
    ),
    (
        [1, 2, 3],
        2,
        True,
        PartitionError,
        r"^number of items \(3\) is not divisible by k_partitions \(2\) with equal_size=True "
        r"\(equal_size='nearly' allows counts that differ by one\)$",
    ),
    # equal_size: strict, checked after k and before the values
    (
        [1, 2],
        1,
        None,
        TypeError,
        r"^equal_size must be True, False or 'nearly', got None \(NoneType\)$",
    ),
    (
        [1, 2],
        1,
        "False",
        TypeError,
        r"^equal_size must be True, False or 'nearly', got 'False' \(str\)$",
    ),
    ([1, 2], 1, 2, TypeError, r"^equal_size must be True, False or 'nearly', got 2 \(int\)$"),
    (
        [1, 2],
        1,
        1.0,
        TypeError,
        r"^equal_size must be True, False or 'nearly', got 1\.0 \(float\)$",
    ),
    (
        [1, 2],
        1,
        [0],
        TypeError,
        r"^equal_size must be True, False or 'nearly', got \[0\] \(list\)$",
    ),
    (
        [1, 2],
        1,
        np.int64(-1),
        TypeError,
        r"^equal_size must be True, False or 'nearly', got .*int64",
    ),
    ([1, 2], 0, None, ValueError, r"^k_partitions must be >= 1, got 0$"),
    ([-1], 1, "Nearly", TypeError, r"^equal_size must be True, False or 'nearly', got 'Nearly'"),
    # values in a list
    ([1, -2, 3], 1, False, ValueError, r"^seqlen_list\[1\] must be >= 0, got -2$"),
    (
        [-(2**70)],
        1,
        False,
        ValueError,
        r"^seqlen_list\[0\] must be >= 0, got -1180591620717411303424$",
    ),
    (
        [1, 2**63],
        1,
        False,
        OverflowError,
        r"^seqlen_list\[1\] must be <= 2\*\*63 - 1, got 9223372036854775808$",
    ),
    (["3"], 1, False, TypeError, r"^seqlen_list\[0\] must be an int or a float, got '3' \(str\)$"),
    (
        [None],
        1,
        False,
        TypeError,
        r"^seqlen_list\[0\] must be an int or a float, got None \(NoneType\)$",
    ),
    (
        [1j],
        1,
        False,
        TypeError,
        r"^seqlen_list\[0\] must be an int or a float, got 1j \(complex\)$",
    ),
    # floats (partition spec, "Float weights")
    (
        [1, float("nan")],
        1,
        False,
        ValueError,
        r"^seqlen_list\[1\] must be finite and >= 0, got nan$",
    ),
    (
        [1.0, 2.0, -0.5],
        1,
        False,
        ValueError,
        r"^seqlen_list\[2\] must be finite and >= 0, got -0\.5$",
    ),
    ([float("inf")], 1, False, ValueError, r"^seqlen_list\[0\] must be finite and >= 0, got inf$"),
    (
        np.array([0.0, -np.inf], dtype=np.float32),
        1,
        False,
        ValueError,
        r"^seqlen_list\[1\] must be finite and >= 0, got -inf$",
    ),
    (
        [np.float32(1), np.float32("nan")],
        1,
        False,
        ValueError,
        r"^seqlen_list\[1\] must be finite and >= 0, got nan$",
    ),
    (
        [np.float32(1), 2.0],
        1,
        False,
        TypeError,
        r"^seqlen_list mixes float32 items \(seqlen_list\[0\] is np\.float32\(1\.0\) \(float32\)\) "
        r"with other numbers \(seqlen_list\[1\] is 2\.0 \(float\)\); .*dtype=np\.float32\)$",
    ),
    (
        [3, np.float32(1)],
        1,
        False,
        TypeError,
        r"^seqlen_list mixes float32 items .*\[1\].*\[0\] is 3",
    ),
    (
        [np.float16(1), 2.0],
        1,
        False,
        TypeError,
        r"^seqlen_list\[0\] is a float16 scalar, which has no reference precision in a list",
    ),
    (
        [2**53, 1, 0.5],
        1,
        False,
        ValueError,
        r"^seqlen_list mixes floats with ints that sum to 9007199254740993, above 2\*\*53",
    ),
    (
        [1e308, 1e308],
        1,
        False,
        OverflowError,
        r"^seqlen_list sums past 1\.79769e\+308, above half the largest float64 \(8\.98847e\+307\)",
    ),
    (
        np.array([2e38, 0.0], dtype=np.float32),
        1,
        False,
        OverflowError,
        r"^seqlen_list sums to 2e\+38, above half the largest float32 \(1\.70141e\+38\)",
    ),
    (
        np.array([1.0], dtype=np.longdouble),
        1,
        False,
        TypeError,
        r"^seqlen_list has dtype float128, which the partitioners do not compute in",
    ),
    ((4, -1), 1, False, ValueError, r"^seqlen_list\[1\] must be >= 0, got -1$"),
    # arrays
    (
        np.array([1, -5, -6], dtype=np.int8),
        1,
        False,
        ValueError,
        r"^seqlen_list\[1\] must be >= 0, got -5$",
    ),
    (
        np.array([2**63], dtype=np.uint64),
        1,
        False,
        OverflowError,
        r"^seqlen_list\[0\] must be <= 2\*\*63 - 1",
    ),
    (np.array([1 + 0j]), 1, False, TypeError, r"dtype complex128$"),
    (
        np.array(["a"]),
        1,
        False,
        TypeError,
        r"must hold integers or floats, got an array of dtype <U1$",
    ),
    (
        np.array([[1, 2], [3, 4]]),
        1,
        False,
        ValueError,
        r"^seqlen_list must be 1-D, got an array of shape \(2, 2\)$",
    ),
    (np.array(5), 1, False, ValueError, r"^seqlen_list must be 1-D, got an array of shape \(\)$"),
    (
        np.array([1, "2.5"], dtype=object),
        1,
        False,
        TypeError,
        r"^seqlen_list\[1\] must be an int or a float",
    ),
    # not a sequence at all
    (
        "123",
        1,
        False,
        TypeError,
        r"^seqlen_list must be a sequence or 1-D array of integers, got '123' \(str\)$",
    ),
    (
        None,
        1,
        False,
        TypeError,
        r"^seqlen_list must be a sequence or 1-D array of integers, got None",
    ),
    (
        7,
        1,
        False,
        TypeError,
        r"^seqlen_list must be a sequence or 1-D array of integers, got 7 \(int\)$",
    ),
    ({1: 2}, 1, False, TypeError, r"^seqlen_list must be a sequence or 1-D array of integers"),
    (
        np.ma.array([1, 1000, 2], mask=[0, 1, 0]),
        1,
        False,
        TypeError,
        r"^seqlen_list is a masked array; pass seqlen_list\.compressed\(\)",
    ),
    (
        bytearray(b"\x05\x01"),
        1,
        False,
        TypeError,
        r"^seqlen_list must be a sequence or 1-D array of integers, got bytearray",
    ),
    (
        memoryview(b"\x05\x01"),
        1,
        False,
        TypeError,
        r"^seqlen_list must be a sequence or 1-D array of integers, got <memory",
    ),
    # k is checked before the values, the values before the shape (as the reference does)
    ([-1], 0, False, ValueError, r"^k_partitions must be >= 1, got 0$"),
    ([-1], 5, False, ValueError, r"^seqlen_list\[0\] must be >= 0, got -1$"),
]


@pytest.mark.parametrize("impl", [seqbalance, reference], ids=["native", "reference"])
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("values, k, equal_size, error, pattern", CASES)
def test_error(impl, function, values, k, equal_size, error, pattern):
    with pytest.raises(error, match=pattern) as raised:
        getattr(impl, function)(values, k, equal_size)
    # Code written against the reference catches AssertionError; new code catches ValueError.
    if error is PartitionError:
        assert isinstance(raised.value, AssertionError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize("values, k, equal_size, error, pattern", CASES)
def test_partition_ids_raises_the_same(values, k, equal_size, error, pattern):
    # partition_ids names its values lengths (0.3), as its signature does.
    with pytest.raises(error, match=pattern.replace("seqlen_list", "lengths")):
        seqbalance.partition_ids(values, k, equal_size=equal_size)


def test_native_and_reference_messages_are_identical():
    for values, k, equal_size, _, _ in CASES:
        for function in FUNCTIONS:
            with pytest.raises(Exception) as native:
                getattr(seqbalance, function)(values, k, equal_size)
            with pytest.raises(Exception) as ref:
                getattr(reference, function)(values, k, equal_size)
            # The reference raises the plain built-in (as upstream), the library an
            # ArgumentError that also is that built-in.
            assert plain(type(native.value)) is type(ref.value)
            assert str(native.value) == str(ref.value)


def test_long_values_are_shortened_in_messages():
    with pytest.raises(TypeError) as raised:
        seqbalance.karmarkar_karp(["x" * 500], 1, False)
    assert len(str(raised.value)) < 150
    assert re.search(r"\.\.\.", str(raised.value))


def test_argument_names_are_the_reference_names():
    with pytest.raises(TypeError, match="k_partitions"):
        seqbalance.get_seqlen_balanced_partitions(seqlen_list=[1, 2], equal_size=False)


junk_items = st.one_of(
    st.integers(-(2**80), 2**80),
    st.integers(0, 50),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.complex_numbers(allow_nan=False),
)
junk_k = st.one_of(
    st.integers(-3, 12), st.booleans(), st.floats(0, 5), st.none(), st.integers(2**62, 2**70)
)


junk_equal_size = st.one_of(
    st.booleans(), st.sampled_from(["nearly", "False", None, 0, 1, 2, np.bool_(True), 0.0])
)


@given(st.lists(junk_items, max_size=12), junk_k, junk_equal_size)
def test_any_input_behaves_like_the_reference(values, k, equal_size):
    """Whatever goes in, native and reference either agree on the answer or raise the same error."""
    for function in FUNCTIONS:
        outcomes = []
        for impl in (seqbalance, reference):
            try:
                outcomes.append(("ok", getattr(impl, function)(values, k, equal_size)))
            except (TypeError, ValueError, OverflowError) as exc:
                outcomes.append((plain(type(exc)), str(exc)))
        assert outcomes[0] == outcomes[1], function


class _ClearsItsList:
    """An integer-like item whose ``__index__`` empties the list being read."""

    def __init__(self, owner):
        self.owner = owner

    def __index__(self):
        self.owner.clear()
        return 3


def test_a_list_mutated_while_it_is_read_is_handled_safely():
    values = [5, 6, 7, 8]
    values.insert(1, _ClearsItsList(values))
    # The native reader must notice the list shrank (no crash, no stale read); the careful path
    # then sees what is left, an empty list.
    with pytest.raises(PartitionError, match=r"number of items \(0\)"):
        seqbalance.karmarkar_karp(values, 2, False)
