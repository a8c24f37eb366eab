"""group_balanced_partitions: whole groups, equal group counts, verl's weights, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    PartitionError,
    get_seqlen_balanced_partitions,
    group_balanced_partitions,
    karmarkar_karp,
)
from seqbalance.planning.groups import uid_runs


def test_golden_example():
    lengths = [5, 5, 1, 1, 9, 9, 2, 2]
    uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    # Group workloads: c > a > d > b; the two heavy groups go to different partitions.
    assert group_balanced_partitions(lengths, uids, 2, cost="workload") == [
        [2, 3, 4, 5],
        [0, 1, 6, 7],
    ]


def test_groups_are_contiguous_runs_not_equal_ids():
    # "a" appears in two separate runs: they are two groups.
    assert uid_runs(["a", "a", "b", "a"]) == [(0, 2), (2, 3), (3, 4)]
    assert uid_runs(np.array([7, 7, 7])) == [(0, 3)]
    assert uid_runs([]) == []
    result = group_balanced_partitions([1, 1, 100, 1], ["a", "a", "b", "a"], 3)
    assert sorted(map(tuple, result)) == [(0, 1), (2,), (3,)]


def test_weights_are_workloads_not_tokens():
    # Groups: [100000], [1, 60000], [2], [50000, 50000]. By tokens the best equal-count split is
    # {0, 1} / {2, 3} (160001 vs 100002); by workload (the square term dominates) the single
    # 100000 weighs about as much as 60000 + 2 * 50000, so {0, 2} / {1, 3} balances.
    lengths = [100000, 1, 60000, 2, 50000, 50000]
    uids = [0, 1, 1, 2, 3, 3]
    assert group_balanced_partitions(lengths, uids, 2, cost="workload") == [[1, 2, 4, 5], [0, 3]]


@st.composite
def grouped_batches(draw):
    k = draw(st.integers(1, 4))
    groups_per_partition = draw(st.integers(1, 4))
    n_groups = k * groups_per_partition
    sizes = draw(st.lists(st.integers(1, 4), min_size=n_groups, max_size=n_groups))
    lengths = draw(st.lists(st.integers(0, 5000), min_size=sum(sizes), max_size=sum(sizes)))
    uids = [group for group, size in enumerate(sizes) for _ in range(size)]
    return lengths, uids, k


@settings(max_examples=100, deadline=None)
@given(grouped_batches())
def test_group_guarantees(case):
    lengths, uids, k = case
    partitions = group_balanced_partitions(
        np.asarray(lengths), np.asarray(uids), k, cost="workload"
    )
    assert len(partitions) == k
    assert sorted(i for p in partitions for i in p) == list(range(len(lengths)))
    assert all(p == sorted(p) for p in partitions)
    owner = {i: p for p, part in enumerate(partitions) for i in part}
    runs = uid_runs(uids)
    for start, stop in runs:
        assert len({owner[i] for i in range(start, stop)}) == 1, "a group was split"
    groups_each = [len({uids[i] for i in part}) for part in partitions]
    assert len(set(groups_each)) == 1, "partitions hold different numbers of groups"


@settings(max_examples=60, deadline=None)
@given(grouped_batches())
def test_matches_balancing_the_group_workloads(case):
    lengths, uids, k = case
    runs = uid_runs(uids)
    weights = [sum(24576 * s + s * s for s in lengths[a:b]) for a, b in runs]
    expected = [
        sorted(i for g in part for i in range(*runs[g]))
        for part in karmarkar_karp(weights, k, True)
    ]
    assert group_balanced_partitions(lengths, uids, k, cost="workload") == expected


def test_errors_say_which_condition():
    with pytest.raises(
        PartitionError,
        match=r"number of groups \(2\) is smaller than "
        r"k_partitions \(3\)",
    ):
        group_balanced_partitions([1, 1, 1], ["a", "b", "b"], 3)
    with pytest.raises(
        PartitionError,
        match=r"number of groups \(3\) is not divisible by "
        r"k_partitions \(2\)",
    ):
        group_balanced_partitions([1, 1, 1], ["a", "b", "c"], 2)
    with pytest.raises(ValueError, match=r"uid_list has 2 entries but lengths has 3"):
        group_balanced_partitions([1, 1, 1], ["a", "b"], 1)
    with pytest.raises(TypeError, match="uid_list must be a sequence or 1-D array of ids"):
        group_balanced_partitions([1], 5, 1)
    with pytest.raises(ValueError, match="k_partitions must be >= 1, got 0"):
        group_balanced_partitions([1], ["a"], 0)
    with pytest.raises(ValueError, match=r"lengths\[0\] must be >= 0"):
        group_balanced_partitions([-1], ["a"], 1)
    with pytest.raises(OverflowError, match=r"workload of lengths\[0\] = 1099511627776"):
        group_balanced_partitions([2**40, 2**40], ["a", "a"], 1, cost="workload")
    with pytest.raises(OverflowError, match=r"the cost of all samples sums to"):
        group_balanced_partitions([1, 1], ["a", "a"], 1, cost=[2**62, 2**62])
    # PartitionError is still an AssertionError for code written against verl's asserts.
    with pytest.raises(AssertionError):
        group_balanced_partitions([], [], 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=8, max_size=8), st.sampled_from(["tokens", "w"]))
def test_cost_weighs_each_group_by_its_members(lengths, which):
    uids = [i // 2 for i in range(8)]
    sample_costs = lengths if which == "tokens" else [7 * s + 1 for s in lengths]
    cost = "tokens" if which == "tokens" else (lambda s: 7 * s + 1)
    groups = [sample_costs[i] + sample_costs[i + 1] for i in range(0, 8, 2)]
    expected = [
        sorted(i for g in part for i in (2 * g, 2 * g + 1))
        for part in get_seqlen_balanced_partitions(groups, 2, True)
    ]
    assert group_balanced_partitions(lengths, uids, 2, cost=cost) == expected
    assert group_balanced_partitions(lengths, uids, 2, cost=sample_costs) == expected


@st.composite
def uneven_batches(draw):
    """Any number of groups >= k, of different sizes (some prompts' responses were filtered)."""
    k = draw(st.integers(1, 5))
    n_groups = draw(st.integers(k, 4 * k + 3))
    sizes = draw(st.lists(st.integers(1, 5), min_size=n_groups, max_size=n_groups))
    lengths = draw(st.lists(st.integers(0, 5000), min_size=sum(sizes), max_size=sum(sizes)))
    uids = [group for group, size in enumerate(sizes) for _ in range(size)]
    return lengths, uids, k


@settings(max_examples=150, deadline=None)
@given(uneven_batches(), st.sampled_from([True, "nearly", False]), st.booleans())
def test_equal_size_modes_keep_groups_whole_and_counts_as_asked(case, equal_size, refine):
    lengths, uids, k = case
    runs = uid_runs(uids)
    if equal_size is True and len(runs) % k:
        with pytest.raises(PartitionError, match=r"equal_size='nearly' allows group counts"):
            group_balanced_partitions(lengths, uids, k, equal_size=equal_size, cost="workload")
        return
    partitions = group_balanced_partitions(
        lengths, uids, k, equal_size=equal_size, refine=refine, cost="workload"
    )
    assert len(partitions) == k
    assert sorted(i for p in partitions for i in p) == list(range(len(lengths)))
    assert all(p == sorted(p) for p in partitions)
    owner = {i: p for p, part in enumerate(partitions) for i in part}
    group_counts = [0] * k
    for start, stop in runs:
        ranks = {owner[i] for i in range(start, stop)}
        assert len(ranks) == 1, "a group was split"
        group_counts[ranks.pop()] += 1
    assert all(group_counts), "a partition got no group"
    if equal_size == "nearly":
        assert max(group_counts) - min(group_counts) <= 1
    elif equal_size is True:
        assert len(set(group_counts)) == 1
    if not refine:
        # Exactly the partitioner's answer on the group workloads.
        weights = [sum(24576 * s + s * s for s in lengths[a:b]) for a, b in runs]
        expected = [
            sorted(i for g in part for i in range(*runs[g]))
            for part in get_seqlen_balanced_partitions(weights, k, equal_size)
        ]
        assert partitions == expected


def test_nearly_balances_six_groups_over_four_ranks():
    # The case: 6 prompt groups over 4 ranks was a PartitionError with equal_size=True.
    lengths = [100, 100, 90, 80, 70, 60, 50, 40, 30, 20, 10, 5]
    uids = [g for g in range(6) for _ in range(2)]
    with pytest.raises(PartitionError, match=r"not divisible"):
        group_balanced_partitions(lengths, uids, 4)
    parts = group_balanced_partitions(lengths, uids, 4, equal_size="nearly", cost="tokens")
    assert sorted(len(p) // 2 for p in parts) == [1, 1, 2, 2]


def test_equal_size_is_strict():
    with pytest.raises(TypeError, match=r"^equal_size must be True, False or 'nearly', got 'no'"):
        group_balanced_partitions([1, 2], ["a", "b"], 1, equal_size="no")
