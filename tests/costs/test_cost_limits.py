"""Cost errors that name the right argument and give the right advice (issue 23, low)."""

from __future__ import annotations

import numpy as np
import pytest

import seqbalance
from seqbalance.costs.workload import TransformerCost

MAX = 2**63 - 1


@pytest.mark.parametrize("lengths", [[], [5], np.zeros(0, dtype=np.int64)])
def test_a_hidden_size_beyond_int64_is_named_at_construction(lengths):
    with pytest.raises(ValueError, match=rf"hidden_size must be <= {MAX // 12} .*got {2**100}"):
        TransformerCost(hidden_size=2**100)(lengths)


def test_the_largest_sizes_accepted_work_on_empty_and_short_lengths():
    cost = TransformerCost(hidden_size=MAX // 12)
    assert cost([]).tolist() == [] and cost([1]).tolist() == [12 * (MAX // 12) + 1]
    with pytest.raises(ValueError, match=r"ffn_hidden_size must be <= .* with hidden_size=1 "):
        TransformerCost(hidden_size=1, ffn_hidden_size=2**62)
    with pytest.raises(ValueError, match=r"hidden_size must be <= .*got 4611686018427387904"):
        TransformerCost(hidden_size=2**62, ffn_hidden_size=1)
    assert TransformerCost(hidden_size=1, ffn_hidden_size=(MAX - 4) // 2)([]).tolist() == []


def test_lengths_that_overflow_are_not_told_to_pass_the_cost_in_use():
    with pytest.raises(OverflowError) as info:
        seqbalance.plan_micro_batches([MAX] * 2, MAX, cost="tokens")
    message = str(info.value)
    assert "the lengths of all samples sums to 18446744073709551614, above 2**63 - 1" in message
    assert "cost='tokens'" not in message and "smaller batches" in message


def test_a_cost_that_overflows_is_still_told_to_fall_back_to_tokens():
    with pytest.raises(OverflowError, match="pass cost='tokens' or smaller weights"):
        seqbalance.plan_micro_batches([3, 3], 10, cost=lambda lengths: lengths * 0 + MAX)
