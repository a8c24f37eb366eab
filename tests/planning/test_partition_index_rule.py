"""One rule for an index outside the values, whichever function takes explicit partitions.

``refine_partitions`` (native), ``balance_report`` and ``log_seqlen_unbalance`` all raise the same
``ValueError`` with the same message (issue 23: the metrics raised ``IndexError`` before).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import balance_report, log_seqlen_unbalance, refine_partitions
from seqbalance.errors import ArgumentValueError

FUNCTIONS = {
    "refine_partitions": lambda values, parts: refine_partitions(values, parts),
    "balance_report": balance_report,
    "log_seqlen_unbalance": lambda values, parts: log_seqlen_unbalance(values, parts, "p"),
}


def message(function, values, parts):
    with pytest.raises(ValueError) as info:
        function(values, parts)
    # One class whichever function (native or Python) raised it.
    assert type(info.value) is ArgumentValueError
    return str(info.value)


@given(
    n=st.integers(2, 12),
    bad=st.one_of(st.integers(-(2**80), -1), st.integers(12, 2**80)),
    where=st.integers(0, 100),
    as_numpy=st.booleans(),
)
def test_an_out_of_range_index_is_one_value_error_with_one_message(n, bad, where, as_numpy):
    values = list(range(1, n + 1))
    parts = [list(range(0, n, 2)), list(range(1, n, 2))]
    p = where % 2
    j = where % len(parts[p])
    if as_numpy and -(2**63) <= bad < 2**63:
        bad = np.int64(bad)
    parts[p][j] = bad
    messages = {name: message(f, values, parts) for name, f in FUNCTIONS.items()}
    assert len(set(messages.values())) == 1, messages
    assert messages["balance_report"].startswith(f"partitions[{p}][{j}] is ")
    assert messages["balance_report"].endswith(f"not an index of the {n} values")
