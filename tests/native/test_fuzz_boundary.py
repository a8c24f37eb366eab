"""Fuzz the Python boundary: arbitrary objects into every public function.

The promise (reliability policy): bad input is a ``TypeError``, ``ValueError`` (``PartitionError``
included) or ``OverflowError`` with a message, never another exception type (an ``IndexError``,
``AttributeError``, ``KeyError``, ``SystemError`` or a Rust panic), a crash or a hang; and what is
returned for input that is accepted keeps every index exactly once.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    GRPOGroupNSampler,
    RankAwareSampler,
    SeqlenBalancedSampler,
    balance_report,
    calculate_workload,
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    log_seqlen_unbalance,
    pack_sequences,
    partition_ids,
    plan_micro_batches,
    refine_partitions,
)

DOCUMENTED = (TypeError, ValueError, OverflowError)

SCALARS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(0, 50),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(float("nan")),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.complex_numbers(allow_nan=True),
    st.sampled_from([np.int64(3), np.uint64(2**64 - 1), np.float32("nan"), np.bool_(True)]),
)

OBJECTS = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.tuples(children, children),
        st.dictionaries(st.integers(0, 5), children, max_size=3),
        st.sets(st.integers(0, 9), max_size=4),
    ),
    max_leaves=20,
)

ARRAYS = st.one_of(
    st.lists(st.integers(0, 100), max_size=12).map(np.array),
    st.lists(st.integers(-5, 2**64 - 1), max_size=6).map(lambda v: np.array(v, dtype=object)),
    st.lists(st.floats(allow_nan=True), max_size=6).map(np.array),
    st.lists(st.integers(0, 9), min_size=1, max_size=8).map(lambda v: np.array(v, dtype=np.uint64)),
    st.lists(st.integers(0, 9), min_size=2, max_size=4).map(
        lambda v: np.array(v * 2).reshape(2, -1)
    ),
)

INPUTS = st.one_of(OBJECTS, ARRAYS, st.lists(st.integers(0, 2**63 + 5), max_size=12))
COUNTS = st.one_of(st.integers(-2, 6), SCALARS)


def exactly_once(parts, n):
    flat = sorted(int(i) for part in parts for i in part)
    assert flat == list(range(n))


def call(function, *args, **kwargs):
    """The result, or None when a documented exception was raised."""
    try:
        return function(*args, **kwargs)
    except DOCUMENTED as exc:
        assert str(exc), f"{type(exc).__name__} without a message"
        return None


@settings(max_examples=300, deadline=None)
@given(INPUTS, COUNTS, st.one_of(st.booleans(), SCALARS))
def test_fuzz_partitioners(values, k, equal_size):
    for function in (karmarkar_karp, get_seqlen_balanced_partitions, greedy_partition):
        parts = call(function, values, k, equal_size)
        if parts is not None:
            exactly_once(parts, len(values))
    ids = call(partition_ids, values, k, equal_size=equal_size)
    if ids is not None:
        assert ids.dtype == np.int64 and len(ids) == len(values)


@settings(max_examples=200, deadline=None)
@given(INPUTS, st.one_of(OBJECTS, st.lists(st.lists(st.integers(-1, 12), max_size=5), max_size=4)))
def test_fuzz_refine_and_metrics(values, partitions):
    refined = call(refine_partitions, values, partitions)
    if refined is not None:
        exactly_once(refined, len(values))
    for function in (balance_report, log_seqlen_unbalance):
        args = (values, partitions) if function is balance_report else (values, partitions, "x")
        try:
            function(*args)
        except (*DOCUMENTED, IndexError):  # IndexError: an index outside the items (documented)
            pass


@settings(max_examples=200, deadline=None)
@given(INPUTS, COUNTS)
def test_fuzz_planners(values, cap):
    workloads = call(calculate_workload, values)
    if workloads is not None:
        assert len(workloads) == len(values)
    packs = call(pack_sequences, values, cap)
    if packs is not None:
        exactly_once(packs, len(values))
    plan = call(plan_micro_batches, values, cap)
    if plan is not None:
        exactly_once(plan, len(values))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(OBJECTS, ARRAYS, st.lists(st.integers(-3, 40), max_size=30)),
    st.one_of(st.integers(-1, 8), SCALARS),
    st.one_of(st.integers(-1, 3), SCALARS),
    st.one_of(st.integers(0, 3), SCALARS),
)
def test_fuzz_samplers(ready, batch_size, dp_rank, batch_index):
    if not isinstance(batch_index, (int, str, type(None))) or isinstance(batch_index, float):
        batch_index = repr(batch_index)  # batch indexes are keys: any hashable
    for sampler, sample in (
        (
            GRPOGroupNSampler(2),
            lambda s: s(ready, batch_size, dp_rank=dp_rank, batch_index=batch_index),
        ),
        (RankAwareSampler(), lambda s: s(ready, batch_size, dp_rank, batch_index, "t", "p")),
        (
            SeqlenBalancedSampler(2, 2),
            lambda s: s(ready, batch_size, dp_rank=dp_rank, batch_index=batch_index),
        ),
    ):
        result = call(sample, sampler)
        if result is not None:
            sampled, consumed = result
            assert len(sampled) == len(set(sampled)) and sampled == consumed
            assert all(type(i) is int and i >= 0 for i in sampled)


@settings(max_examples=100, deadline=None)
@given(OBJECTS)
def test_fuzz_checkpoints(state):
    for make in (
        lambda: GRPOGroupNSampler(2),
        RankAwareSampler,
        lambda: SeqlenBalancedSampler(1, 2),
    ):
        sampler = make()
        call(sampler.load_checkpoint, state)
        call(sampler.load_checkpoint, {"_states": state})


def test_nan_payloads_and_huge_ints_name_the_position():
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] must be finite and >= 0, got nan"):
        get_seqlen_balanced_partitions([1, math.nan, 3], 2, False)
    with pytest.raises(OverflowError, match=r"seqlen_list\[0\] must be <= 2\*\*63 - 1"):
        get_seqlen_balanced_partitions([2**100, 1], 2, False)
    with pytest.raises(ValueError, match="nan"):
        partition_ids(np.array([1.0, np.nan]), 1)
    with pytest.raises(TypeError, match=r"seqlen_list\[0\]"):
        get_seqlen_balanced_partitions([1 + 2j, 1], 2, False)
