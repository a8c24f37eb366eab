"""Float weights (partition spec, "Float weights"): bit for bit the reference in its own arithmetic.

Double precision for Python floats and float64 arrays, single precision for float32 arrays and
lists of NumPy float32 scalars, float16 widened to float32; every error path of the rules.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import PartitionError, reference
from seqbalance._inputs import normalize_weights
from seqbalance.reference import _largest_differencing
from tests.helpers import outcome as shared_outcome

FUNCTIONS = ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"]

# Values that make float rounding decide the answer: decimal fractions whose sums tie or round
# apart (0.1 + 0.2 != 0.3), zeros of both signs, denormals, 2**24 and 2**53 beside small ones
# (where an added 1 vanishes), huge and tiny magnitudes.
SPECIAL = [
    0.0,
    -0.0,
    5e-324,
    2.2250738585072014e-308,
    1e-45,
    1.0,
    2.0,
    16777216.0,
    16777218.0,
    9007199254740992.0,
    1e-300,
    1e30,
    1e300,
]
decimals = st.integers(0, 12).map(lambda v: v / 10)
doubles = st.one_of(
    decimals,
    st.sampled_from(SPECIAL),
    st.floats(0, 1e6, allow_subnormal=True),
    st.floats(0, 1e300),
)
singles = st.one_of(
    decimals,
    st.sampled_from([v for v in SPECIAL if v < 1e38]),
    st.floats(0, 1e6, width=32),
    st.floats(0, 9.999999616903162e35, width=32),
).map(np.float32)


def shaped(draw, values):
    equal_size = draw(st.booleans())
    k = draw(st.integers(1, min(len(values), 8)))
    if equal_size:
        values = values[: len(values) - len(values) % k]
    return values, k, equal_size


@st.composite
def double_requests(draw):
    values = draw(st.lists(doubles, min_size=1, max_size=40))
    return shaped(draw, values)


@st.composite
def mixed_requests(draw):
    """Python ints beside floats, ints summing to at most 2**53."""
    values = draw(st.lists(st.one_of(doubles, st.integers(0, 2**48)), min_size=1, max_size=30))
    values.append(draw(doubles))
    if sum(v for v in values if isinstance(v, int)) > 2**53:
        values = [float(v) for v in values]
    return shaped(draw, values)


@st.composite
def single_requests(draw):
    values = draw(st.lists(singles, min_size=1, max_size=40))
    if sum(float(v) for v in values) > float(np.finfo(np.float32).max) / 2:
        values = values[:1]
    return shaped(draw, values)


def outcome(function, *args):
    """The answer, or the PartitionError's message; any other error fails the test."""
    return shared_outcome(function, *args, expected=PartitionError)


def assert_same(values, k, equal_size):
    for name in FUNCTIONS:
        expected = outcome(getattr(reference, name), values, k, equal_size)
        assert outcome(getattr(seqbalance, name), values, k, equal_size) == expected, name
    expected = outcome(reference.get_seqlen_balanced_partitions, values, k, equal_size)
    if expected[0] == "returned":
        ids = seqbalance.partition_ids(values, k, equal_size=equal_size)
        assert [np.flatnonzero(ids == p).tolist() for p in range(k)] == expected[1]


@settings(max_examples=300, deadline=None)
@given(double_requests())
def test_python_floats_match_the_reference(request):
    values, k, equal_size = request
    assert_same(values, k, equal_size)
    assert_same(np.array(values, dtype=np.float64), k, equal_size)


@settings(max_examples=300, deadline=None)
@given(single_requests())
def test_float32_matches_the_reference_in_single_precision(request):
    values, k, equal_size = request
    assert_same(values, k, equal_size)  # a list of np.float32 scalars
    assert_same(np.array(values, dtype=np.float32), k, equal_size)


@settings(max_examples=200, deadline=None)
@given(mixed_requests())
def test_ints_beside_floats_agree_with_exact_int_sums(request):
    """The reference sums ints exactly until a float joins a set; up to 2**53 that is double."""
    values, k, equal_size = request
    assert_same(values, k, equal_size)
    if len(values) >= k:
        # The original reference on the raw list (ints stay Python ints, summed exactly).
        raw = _largest_differencing(list(values), k, equal_size)
        assert seqbalance.karmarkar_karp(values, k, equal_size) == raw


def test_float16_is_widened_to_float32():
    values = np.array([0.1, 0.2, 0.3, 0.7, 1.5, 0.1], dtype=np.float16)
    widened = values.astype(np.float32)
    for name in FUNCTIONS:
        got = getattr(seqbalance, name)(values, 3, True)
        assert got == getattr(reference, name)(widened, 3, True)


# Found by a search over small inputs: adding an absorbed set's total instead of its items, one
# at a time, gives a different answer on these.
GOLDEN = [
    ([0.6, 0.7, 1.0, 0.3, 0.0, 0.5, 0.2, 0.5], np.float64, 2, True, [[0, 4, 2, 3], [7, 6, 1, 5]]),
    ([2.0, 16777218.0, 1.0, 16777216.0, 2.0], np.float32, 2, False, [[0, 1], [2, 3, 4]]),
    ([10.5, 20.25, 30.0, 40.125], np.float64, 2, True, [[3, 0], [2, 1]]),
    ([-0.0, 0.0, 1.0, -0.0], np.float64, 2, False, [[2], [3, 1, 0]]),
]


@pytest.mark.parametrize("values, dtype, k, equal_size, expected", GOLDEN)
def test_golden(values, dtype, k, equal_size, expected):
    array = np.array(values, dtype=dtype)
    as_list = array.tolist() if dtype is np.float64 else list(array)
    for given_values in (array, as_list):
        assert seqbalance.karmarkar_karp(given_values, k, equal_size) == expected
        assert reference.karmarkar_karp(given_values, k, equal_size) == expected
        sorted_parts = [sorted(p) for p in expected]
        assert (
            seqbalance.get_seqlen_balanced_partitions(given_values, k, equal_size) == sorted_parts
        )


def test_single_precision_is_not_double():
    """The same values answer differently in single and double precision: the precision matters."""
    values = [3.0, 16777218.0, 2.0, 2.0, 0.0, 16777216.0]
    assert seqbalance.karmarkar_karp(values, 2, False) == [[0, 5, 2], [1, 3, 4]]
    single = np.array(values, dtype=np.float32)
    assert seqbalance.karmarkar_karp(single, 2, False) == [[2, 0, 5], [1, 3, 4]]
    assert seqbalance.karmarkar_karp(list(single), 2, False) == [[2, 0, 5], [1, 3, 4]]


def test_greedy_refuses_counts_broken_by_rounding():
    m = float(np.finfo(np.float32).max) / 16
    values = np.array([1.0, 3.0, 1.0, m, m, m, 4 * m, 33554432.0], dtype=np.float32)
    for impl in (seqbalance, reference):
        with pytest.raises(PartitionError, match=r"^greedy_partition with equal_size=True lost"):
            impl.greedy_partition(values, 2, True)
    # Without equal_size nothing is promised about counts, and both agree.
    assert seqbalance.greedy_partition(values, 2, False) == reference.greedy_partition(
        values, 2, False
    )


def test_the_seam_reports_the_precision():
    assert normalize_weights([1, 2]).precision == "exact"
    assert normalize_weights([1, 2.5]).values.dtype == np.float64
    assert normalize_weights((np.float32(1), np.float32(2))).precision == "single"
    assert normalize_weights(np.zeros(3, np.float16)).values.dtype == np.float32
    assert normalize_weights([True, 0.5]).precision == "double"
    assert normalize_weights(np.array([1.0, 2.0], dtype=object)).precision == "double"


def test_ints_up_to_2_53_beside_floats_are_accepted():
    values = [2**52, 2**52, 0.5]
    assert seqbalance.karmarkar_karp(values, 2, False) == reference.karmarkar_karp(values, 2, False)
    with pytest.raises(ValueError, match=r"above 2\*\*53"):
        seqbalance.karmarkar_karp([2**52, 2**52, 1, 0.5], 2, False)


def test_totals_up_to_half_the_largest_float_are_accepted():
    half = float(np.finfo(np.float64).max) / 2
    values = [half / 2, half / 4, half / 4]
    assert seqbalance.karmarkar_karp(values, 2, False) == reference.karmarkar_karp(values, 2, False)
    with pytest.raises(OverflowError):
        seqbalance.karmarkar_karp([half, math.ulp(half)], 2, False)


def exact_loads(values, parts):
    return [sum(Fraction(float(values[i])) for i in part) for part in parts]


@settings(max_examples=150, deadline=None)
@given(st.one_of(double_requests(), single_requests()), st.sampled_from([True, "exact"]))
def test_refine_never_makes_the_heaviest_heavier_on_exact_loads(request, mode):
    values, k, equal_size = request
    plain = seqbalance.get_seqlen_balanced_partitions(values, k, equal_size)
    refined = seqbalance.get_seqlen_balanced_partitions(values, k, equal_size, refine=mode)
    assert sorted(i for part in refined for i in part) == list(range(len(values)))
    assert all(part and part == sorted(part) for part in refined)
    loads = exact_loads(values, refined)
    assert max(loads) <= max(exact_loads(values, plain))
    # Heaviest first by exact load; equal loads by smallest index.
    keys = [(-load, part[0]) for load, part in zip(loads, refined, strict=True)]
    assert keys == sorted(keys)
    if equal_size:
        assert {len(part) for part in refined} == {len(values) // k}
    ids = seqbalance.partition_ids(values, k, equal_size=equal_size, refine=mode)
    assert [np.flatnonzero(ids == p).tolist() for p in range(k)] == refined


def test_refine_spans_wider_than_the_integer_image():
    values = [1e300, 1e300, 1e-300, 3e299, 5e299, 2e299, 1e-310, 7.0]
    start = [[0, 2], [1, 3, 4, 5, 6, 7]]
    refined = seqbalance.refine_partitions(values, start)
    assert max(exact_loads(values, refined)) <= max(exact_loads(values, start))
    assert sorted(i for part in refined for i in part) == list(range(len(values)))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(doubles, st.integers(0, 2**40)), min_size=8, max_size=8),
    st.booleans(),
)
def test_planners_balance_float_costs_as_the_partitioner(costs, single):
    """Groups and the sampler weigh a group by its members' float costs, in their precision."""
    dtype = np.float32 if single else np.float64
    assume(sum(map(float, costs)) <= float(np.finfo(dtype).max) / 4)
    array = np.array(costs, dtype=dtype)
    uids = [0, 0, 1, 1, 2, 2, 3, 3]
    group_costs = np.add.reduceat(array, [0, 2, 4, 6])
    expected_groups = seqbalance.get_seqlen_balanced_partitions(group_costs, 2, True)
    expected = [sorted(i for g in part for i in (2 * g, 2 * g + 1)) for part in expected_groups]
    lengths = [1] * 8
    assert seqbalance.group_balanced_partitions(lengths, uids, 2, cost=array) == expected
    assert seqbalance.group_balanced_partitions(lengths, uids, 2, cost=lambda s: array) == expected

    class Meta:
        def get_custom_meta(self, indexes):
            return {i: {"total_lengths": 1, "flops": array[i]} for i in indexes}

    sampler = seqbalance.SeqlenBalancedSampler(2, 2, cost_field="flops")
    shares = [sampler(list(range(8)), 4, dp_rank=r, partition=Meta())[0] for r in range(2)]
    assert shares == expected


def test_planner_float_cost_errors_name_the_cost():
    uids = [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"^cost\[1\] must be finite and >= 0, got nan$"):
        seqbalance.group_balanced_partitions([1] * 4, uids, 2, cost=[1.0, math.nan, 2.0, 3.0])
    with pytest.raises(TypeError, match=r"^cost mixes float32 items"):
        seqbalance.group_balanced_partitions([1] * 4, uids, 2, cost=[np.float32(1), 1.0, 2, 3])
    # The micro-batch planners take floats too, with the same errors.
    with pytest.raises(ValueError, match=r"^cost\[1\] must be finite and >= 0, got nan$"):
        seqbalance.plan_micro_batches([1, 2], 5, cost=[1.5, math.nan])


def test_lists_of_zero_d_arrays_count_by_their_dtype():
    """0-d arrays (and 0-d tensors, through ``__array__``) in a list weigh as their scalars."""
    values = [3.0, 16777218.0, 2.0, 2.0, 0.0, 16777216.0]
    singles = [np.asarray(v, dtype=np.float32) for v in values]
    assert normalize_weights(singles).precision == "single"
    assert seqbalance.karmarkar_karp(singles, 2, False) == [[2, 0, 5], [1, 3, 4]]
    doubles = [np.asarray(v) for v in values]
    assert normalize_weights(doubles).precision == "double"
    assert seqbalance.karmarkar_karp(doubles, 2, False) == [[0, 5, 2], [1, 3, 4]]
    with pytest.raises(TypeError, match=r"^seqlen_list mixes float32 items"):
        seqbalance.karmarkar_karp([singles[0], 1.0], 1, False)
