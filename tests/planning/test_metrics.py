"""calculate_workload, log_seqlen_unbalance and balance_report."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    BalanceReport,
    PartitionError,
    balance_report,
    calculate_workload,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
)
from seqbalance.planning.metrics import balance_report_from_ids

# ---------------------------------------------------------------- calculate_workload


def test_workload_golden_values_use_verls_constant():
    assert calculate_workload([0, 1, 100, 4096]) == [0, 24577, 2467600, 24576 * 4096 + 4096**2]
    assert calculate_workload([10], hidden_size=1) == [6 * 10 + 100]


@given(st.lists(st.integers(0, 2**40), max_size=20), st.integers(1, 2**14))
def test_workload_of_a_list_is_exact_python_ints(lengths, hidden_size):
    result = calculate_workload(lengths, hidden_size=hidden_size)
    assert result == [6 * hidden_size * s + s * s for s in lengths]
    assert all(type(value) is int for value in result)


@given(st.lists(st.integers(0, 2**20), max_size=20))
def test_workload_of_an_array_is_int64_and_equal_to_the_list_result(lengths):
    for dtype in (np.int32, np.uint16, np.int64):
        array = np.asarray(lengths, dtype=np.int64).astype(dtype)
        result = calculate_workload(array)
        assert isinstance(result, np.ndarray) and result.dtype == np.int64
        assert result.tolist() == calculate_workload(array.tolist())


def test_workload_of_an_array_raises_instead_of_wrapping():
    fits = 3_000_000_000  # 24576 * s + s**2 is about 9.0e18 < 2**63 - 1
    assert calculate_workload(np.array([fits]))[0] == 24576 * fits + fits**2
    with pytest.raises(OverflowError, match=r"workload of lengths\[1\] = 3100000000 .* int64"):
        calculate_workload(np.array([1, 3_100_000_000, 5]))
    # The list path stays exact where int64 would overflow.
    assert calculate_workload([3_100_000_000]) == [24576 * 3_100_000_000 + 3_100_000_000**2]


def test_workload_of_an_array_names_a_hidden_size_too_big_for_int64():
    largest = (2**63 - 1) // 6  # 6 * hidden_size still fits in int64
    assert calculate_workload(np.array([0]), hidden_size=largest).tolist() == [0]
    for hidden_size in (largest + 1, 2**62, 2**100):
        for array in (np.array([0]), np.array([3, 1]), np.array([], dtype=np.int64)):
            with pytest.raises(
                OverflowError,
                match=rf"6 \* hidden_size = {6 * hidden_size} \(hidden_size={hidden_size}\)",
            ):
                calculate_workload(array, hidden_size=hidden_size)
        # The list path has no such limit: exact Python ints.
        assert calculate_workload([0, 2], hidden_size=hidden_size) == [0, 12 * hidden_size + 4]


def test_workload_errors():
    with pytest.raises(ValueError, match=r"lengths\[1\] must be >= 0, got -5"):
        calculate_workload([1, -5])
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an integer"):
        calculate_workload(["7"])
    with pytest.raises(ValueError, match="hidden_size must be >= 1, got 0"):
        calculate_workload([1], hidden_size=0)
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        calculate_workload([1], hidden_size=4096.0)


# ---------------------------------------------------------------- log_seqlen_unbalance


def test_unbalance_golden_even_split():
    metrics = log_seqlen_unbalance([1, 2, 3, 4], [[0, 3], [1, 2]], "seqlen")
    assert metrics == {
        "seqlen/min": 3,
        "seqlen/max": 7,
        "seqlen/minmax_diff": 4,
        "seqlen/balanced_min": 5,
        "seqlen/balanced_max": 5,
        "seqlen/mean": 5.0,
    }


def test_unbalance_counts_the_short_remainder_chunk_as_verl_does():
    # 5 items, k = 2: chunks of 2 items -> [1, 2], [3, 4], [5].
    metrics = log_seqlen_unbalance([1, 2, 3, 4, 5], [[0, 1, 4], [2, 3]], "p")
    assert metrics["p/min"] == 3
    assert metrics["p/max"] == 7
    assert metrics["p/minmax_diff"] == 4
    assert metrics["p/balanced_min"] == 7
    assert metrics["p/balanced_max"] == 8
    assert metrics["p/mean"] == 7.5


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda k: st.tuples(st.just(k), st.lists(st.integers(0, 1000), min_size=k, max_size=40))
    )
)
def test_unbalance_properties(case):
    k, lengths = case
    partitions = get_seqlen_balanced_partitions(lengths, k, False)
    metrics = log_seqlen_unbalance(np.asarray(lengths), partitions, "x")
    assert set(metrics) == {
        f"x/{key}" for key in ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")
    }
    assert metrics["x/minmax_diff"] == metrics["x/max"] - metrics["x/min"]
    assert metrics["x/mean"] == sum(lengths) / k
    assert metrics["x/balanced_min"] <= metrics["x/mean"] <= metrics["x/balanced_max"]
    if len(lengths) % k == 0:
        assert metrics["x/min"] <= metrics["x/mean"] <= metrics["x/max"]


def test_unbalance_errors():
    with pytest.raises(
        PartitionError,
        match=r"number of items \(2\) is smaller than the number "
        r"of partitions \(3\)",
    ):
        log_seqlen_unbalance([1, 2], [[0], [1], []], "p")
    with pytest.raises(ValueError, match="partitions must hold at least one partition"):
        log_seqlen_unbalance([1, 2], [], "p")
    with pytest.raises(
        ValueError, match=r"partitions\[1\]\[0\] is 5, not an index of the 2 values"
    ):
        log_seqlen_unbalance([1, 2], [[0], [5]], "p")
    with pytest.raises(TypeError, match=r"partitions\[0\] holds a non-integer index '0'"):
        log_seqlen_unbalance([1, 2], [["0"], [1]], "p")
    with pytest.raises(TypeError, match=r"partitions\[0\] must be a list of indexes"):
        log_seqlen_unbalance([1, 2], [0, 1], "p")
    with pytest.raises(TypeError, match="partitions must be a list of lists"):
        log_seqlen_unbalance([1, 2], "01", "p")


def test_unbalance_refuses_an_index_twice_or_missing():
    # verl's version sums whatever it is given: a sample counted twice, or never, goes unnoticed.
    with pytest.raises(ValueError, match=r"index 0 appears twice \(again in partitions\[1\]\)"):
        log_seqlen_unbalance([1, 2, 3, 4], [[0, 1], [0, 3]], "p")
    with pytest.raises(ValueError, match="index 2 is in no partition"):
        log_seqlen_unbalance([1, 2, 3, 4], [[0, 1], [3]], "p")
    with pytest.raises(ValueError, match="index 1 appears twice"):
        log_seqlen_unbalance(np.array([1, 2]), [np.array([0, 1]), np.array([1])], "p")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=2, max_size=30),
    st.data(),
)
def test_unbalance_accepts_exactly_the_partitions_that_hold_every_index_once(lengths, data):
    n = len(lengths)
    parts = data.draw(st.lists(st.lists(st.integers(0, n - 1), max_size=n), min_size=1, max_size=4))
    flat = sorted(index for part in parts for index in part)
    if flat == list(range(n)) and n >= len(parts):
        log_seqlen_unbalance(lengths, parts, "p")
    else:
        with pytest.raises(ValueError):
            log_seqlen_unbalance(lengths, parts, "p")


# ---------------------------------------------------------------- balance_report


def test_report_golden_values():
    report = balance_report([1, 2, 3, 4], [[0, 3], [1, 2]])
    assert report.balanced.sums == (5, 5)
    assert report.balanced.counts == (2, 2)
    assert report.balanced.imbalance == 1.0
    assert report.balanced.spread == 0
    assert report.balanced.cv == 0.0
    assert report.naive.sums == (3, 7)
    assert report.naive.imbalance == pytest.approx(1.4)
    assert report.naive.spread == 4
    assert report.naive.cv == pytest.approx(2 / 5)
    assert report.naive.mean == 5.0
    assert (report.n_items, report.total, report.k_partitions) == (4, 10, 2)


def test_naive_split_puts_the_remainder_first():
    report = balance_report([1] * 7, [[0, 1, 2], [3, 4], [5, 6]])
    assert report.naive.counts == (3, 2, 2)


def test_report_is_frozen_and_serialisable():
    report = balance_report([3, 1, 2], [[0], [1, 2]])
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.total = 0  # type: ignore[misc]
    data = report.to_dict()
    assert data["balanced"]["sums"] == [3, 3]
    assert data["naive"]["counts"] == [2, 1]
    assert isinstance(report, BalanceReport)


def test_report_text_has_one_line_per_partition_with_bars():
    report = balance_report([10, 20, 30, 40], [[0, 3], [1, 2]])
    text = str(report)
    lines = text.splitlines()
    partition_lines = [line for line in lines if line.lstrip()[:1].isdigit()]
    assert len(partition_lines) == 2
    assert all("█" in line for line in partition_lines)
    assert "naive" in text and "balanced" in text and "max/mean 1.4000" in text
    # The largest load (naive 70) draws the full-width bar; the balanced 50s draw shorter ones.
    assert "█" * 24 in partition_lines[1]
    assert "█" * 24 not in partition_lines[0]


def test_report_of_all_zero_loads_is_perfectly_balanced():
    report = balance_report([0, 0, 0], [[0, 1], [2]])
    assert report.balanced.imbalance == 1.0 and report.balanced.cv == 0.0
    assert "max/mean 1.0000" in str(report)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda k: st.tuples(st.just(k), st.lists(st.integers(0, 10**6), min_size=k, max_size=40))
    )
)
def test_report_properties(case):
    k, values = case
    partitions = get_seqlen_balanced_partitions(values, k, False)
    report = balance_report(values, partitions)
    for stats in (report.balanced, report.naive):
        assert sum(stats.sums) == sum(values) == report.total
        assert sum(stats.counts) == len(values)
        assert stats.max == max(stats.sums) and stats.min == min(stats.sums)
        assert stats.spread == stats.max - stats.min
        assert stats.imbalance >= 1.0 - 1e-12
        if report.total:
            assert math.isclose(stats.mean, report.total / k)
            expected_cv = float(np.std(np.asarray(stats.sums, dtype=float))) / stats.mean
            assert math.isclose(stats.cv, expected_cv, rel_tol=1e-9, abs_tol=1e-12)
    assert len(str(report).splitlines()) == k + 4


def test_report_errors():
    with pytest.raises(ValueError, match=r"index 1 appears twice \(again in partitions\[1\]\)"):
        balance_report([1, 2], [[0, 1], [1]])
    with pytest.raises(ValueError, match="index 2 is in no partition"):
        balance_report([1, 2, 3], [[0], [1]])
    with pytest.raises(ValueError, match=r"weights\[0\] must be >= 0, got -1"):
        balance_report([-1], [[0]])
    with pytest.raises(
        ValueError, match=r"partitions\[0\]\[0\] is 1, not an index of the 1 values"
    ):
        balance_report([1], [[1]])


# ---------------------------------------------------------------- balance_report_from_ids


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.lists(
                st.tuples(st.integers(0, 2**40), st.integers(0, k - 1)), min_size=0, max_size=40
            ),
        )
    ),
    st.booleans(),
)
def test_report_from_ids_is_the_report_of_the_same_split(case, huge):
    k, items = case
    values = [value + (2**62 if huge else 0) for value, _ in items]
    ids = np.array([part for _, part in items], dtype=np.int64)
    parts = [[i for i, (_, part) in enumerate(items) if part == p] for p in range(k)]
    # huge values take the exact Python-int path, small ones the int64 one: the same answer
    assert balance_report_from_ids(values, ids, k) == balance_report(values, parts)
    assert balance_report_from_ids(np.asarray(values, dtype=np.int64), ids, k) == balance_report(
        values, parts
    )


def test_report_from_ids_errors():
    with pytest.raises(ValueError, match="ids has 1 entries but weights has 2"):
        balance_report_from_ids([1, 2], [0], 1)
    with pytest.raises(ValueError, match=r"ids\[1\] is 2, not a partition in 0..1"):
        balance_report_from_ids([1, 2], [0, 2], 2)
    with pytest.raises(TypeError, match="ids must be a 1-D integer array"):
        balance_report_from_ids([1, 2], [0.0, 1.0], 2)


# ---------------------------------------------------------------- naive split of whole groups


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@given(data=st.data())
def test_the_naive_split_with_groups_keeps_each_group_in_one_chunk(k, data):
    sizes = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=20))
    uids = [g for g, size in enumerate(sizes) for _ in range(size)]
    values = data.draw(st.lists(st.integers(0, 100), min_size=len(uids), max_size=len(uids)))
    parts = [list(range(len(values)))] + [[] for _ in range(k - 1)]
    report = balance_report(values, parts, uid_list=uids)
    # The model: k chunks of whole groups, group counts within one, the first ones longer.
    base, extra = divmod(len(sizes), k)
    counts = [base + (p < extra) for p in range(k)]
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    starts = [sum(sizes[:g]) for g in range(len(sizes) + 1)]
    chunks = [range(starts[bounds[p]], starts[bounds[p + 1]]) for p in range(k)]
    assert report.naive.counts == tuple(len(c) for c in chunks)
    assert report.naive.sums == tuple(sum(values[i] for i in c) for c in chunks)
    ids = np.zeros(len(values), dtype=np.int64)
    assert balance_report_from_ids(values, ids, k, uid_list=uids) == report


def test_group_size_equals_the_uid_runs_it_describes():
    values = list(range(12))
    parts = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    by_size = balance_report(values, parts, group_size=3)
    by_uid = balance_report(values, parts, uid_list=[i // 3 for i in range(12)])
    assert by_size == by_uid and by_size.naive.counts == (6, 6)
    # Without groups the chunks may cut one: 12 items over 5 -> 3, 3, 2, 2, 2.
    assert balance_report(values, parts + [[], [], []]).naive.counts == (3, 3, 2, 2, 2)
    assert balance_report(values, parts + [[], [], []], group_size=3).naive.counts == (
        3,
        3,
        3,
        3,
        0,
    )


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        (
            {"group_size": 5},
            ValueError,
            "number of weights (12) is not divisible by group_size (5)",
        ),
        ({"group_size": 0}, ValueError, "group_size must be >= 1, got 0"),
        ({"uid_list": [1, 2]}, ValueError, "uid_list has 2 entries but weights has 12"),
        ({"uid_list": "ab"}, TypeError, "uid_list must be a sequence or 1-D array of ids"),
        ({"group_size": 2, "uid_list": [0] * 12}, TypeError, "pass either group_size or uid_list"),
    ],
)
def test_bad_groups_are_named(keywords, error, message):
    with pytest.raises(error) as info:
        balance_report(list(range(12)), [list(range(12))], **keywords)
    assert message in str(info.value)
