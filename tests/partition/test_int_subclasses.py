"""An int subclass is read as its own value (what ``operator.index`` gives), everywhere.

Issue 23: ``class I(int)`` with its own ``__int__`` made the native partitioner (which reads the
int's value) and the reference (which read ``__int__`` through NumPy's list conversion) answer
differently. One reading now: the int's value, in the native code, the reference, the planners'
normalisation and the micro-batch planner alike.
"""

from __future__ import annotations

import operator

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import reference
from seqbalance._inputs import lengths_as_list, normalize_weights


class Liar(int):
    """An int whose conversions claim another number."""

    def __int__(self):
        return 99

    def __float__(self):
        return 99.0


class LyingIndex(int):
    def __index__(self):
        return 77

    def __int__(self):
        return 55


def test_the_issue_example():
    values = [Liar(3), 1, 2, 4]
    expected = seqbalance.get_seqlen_balanced_partitions([3, 1, 2, 4], 2, True)
    assert seqbalance.get_seqlen_balanced_partitions(values, 2, True) == expected
    assert reference.get_seqlen_balanced_partitions(values, 2, True) == expected
    assert normalize_weights(values).values.tolist() == [3, 1, 2, 4]


ITEM = st.tuples(st.integers(0, 10**6), st.sampled_from(["int", "liar", "lying_index", "bool"]))


def build(spec):
    made = []
    for value, kind in spec:
        if kind == "liar":
            made.append(Liar(value))
        elif kind == "lying_index":
            made.append(LyingIndex(value))
        elif kind == "bool":
            made.append(bool(value % 2))
        else:
            made.append(value)
    return made


@given(
    spec=st.lists(ITEM, min_size=1, max_size=40),
    k=st.integers(1, 6),
    mode=st.sampled_from([True, False, "nearly"]),
)
def test_native_and_reference_read_the_ints_value(spec, k, mode):
    values = build(spec)
    plain = [operator.index(v) for v in values]
    assert lengths_as_list(values) == plain
    assert normalize_weights(values).values.tolist() == plain
    if len(values) < k or (mode is True and len(values) % k):
        return
    expected = reference.karmarkar_karp(plain, k, mode)
    assert reference.karmarkar_karp(values, k, mode) == expected
    assert seqbalance.karmarkar_karp(values, k, mode) == expected
    assert seqbalance.get_seqlen_balanced_partitions(values, k, mode) == (
        reference.get_seqlen_balanced_partitions(plain, k, mode)
    )
    assert np.array_equal(
        seqbalance.partition_ids(values, k, equal_size=mode),
        seqbalance.partition_ids(plain, k, equal_size=mode),
    )
