"""cost= on the planners: names, per-sample weights, callables, TransformerCost, the alias."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    SeqlenBalancedSampler,
    TransformerCost,
    calculate_workload,
    get_seqlen_balanced_partitions,
    min_num_micro_batches_for,
    plan_micro_batches,
)

CASES = st.integers(1, 300).flatmap(
    lambda cap: st.tuples(st.just(cap), st.lists(st.integers(0, cap), max_size=24))
)


@settings(max_examples=100, deadline=None)
@given(CASES, st.sampled_from(["tokens", "workload"]), st.booleans())
def test_weights_callable_and_name_give_the_same_plan(case, name, as_array):
    cap, lengths = case
    weights = lengths if name == "tokens" else calculate_workload(lengths)
    given_weights = np.asarray(weights, dtype=np.int64) if as_array else list(weights)
    by_name = plan_micro_batches(lengths, cap, cost=name)
    assert plan_micro_batches(lengths, cap, cost=given_weights) == by_name
    assert plan_micro_batches(lengths, cap, cost=lambda s: np.asarray(weights)) == by_name
    assert min_num_micro_batches_for(lengths, cap, cost=given_weights) == len(by_name)


@settings(max_examples=100, deadline=None)
@given(CASES, st.booleans())
def test_balance_workload_is_a_deprecated_alias(case, balance_workload):
    cap, lengths = case
    with pytest.warns(
        DeprecationWarning,
        match=r"^balance_workload= is deprecated since 0\.3 and is removed in 1\.0; pass cost=$",
    ):
        old = plan_micro_batches(lengths, cap, balance_workload=balance_workload)
    with pytest.warns(DeprecationWarning):
        count = min_num_micro_batches_for(lengths, cap, balance_workload=balance_workload)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = plan_micro_batches(lengths, cap, cost="workload" if balance_workload else "tokens")
    assert old == new and count == len(new)


def test_the_default_cost_is_the_tokens_and_warns_nothing():
    # Flipped in 0.3 from "workload" (the API spec's one default for cost).
    lengths = [4000, 3900, 2500, 1200, 800, 700, 300, 100]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan_micro_batches(lengths, 4096) == plan_micro_batches(lengths, 4096, cost="tokens")
        assert min_num_micro_batches_for(lengths, 4096) == min_num_micro_batches_for(
            lengths, 4096, cost="tokens"
        )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 5_000), max_size=30),
    st.integers(1, 2**16),
    st.integers(1, 8),
    st.booleans(),
)
def test_transformer_cost_formula(lengths, hidden, layers, causal):
    cost = TransformerCost(hidden_size=hidden, num_layers=layers, causal=causal)
    f = 4 * hidden
    c = 1 if causal else 2
    weights = cost(lengths).tolist()
    assert weights == [(4 * hidden + 2 * f) * s + c * s * s for s in lengths]
    assert cost.flops(lengths) == [6 * layers * hidden * w for w in weights]
    if not causal:
        # Twice verl's proxy at the same hidden size: the same plans.
        assert weights == [2 * w for w in calculate_workload(lengths, hidden_size=hidden)]


@settings(max_examples=60, deadline=None)
@given(CASES)
def test_non_causal_transformer_cost_plans_as_the_workload(case):
    cap, lengths = case
    cost = TransformerCost(hidden_size=4096, causal=False)
    assert plan_micro_batches(lengths, cap, cost=cost) == plan_micro_batches(
        lengths, cap, cost="workload"
    )


def test_transformer_cost_ffn_size_and_errors():
    cost = TransformerCost(hidden_size=8, ffn_hidden_size=10)
    assert cost([3]).tolist() == [(32 + 20) * 3 + 9]
    assert "ffn_hidden_size=10" in repr(cost)
    with pytest.raises(ValueError, match="hidden_size must be >= 1, got 0"):
        TransformerCost(0)
    with pytest.raises(TypeError, match="causal must be True or False"):
        TransformerCost(8, causal="yes")
    with pytest.raises(OverflowError, match="does not fit in int64"):
        TransformerCost(2**20)([2**32])


def test_callable_sees_the_padded_lengths_once():
    seen = []

    def cost(lengths):
        seen.append(lengths.tolist())
        return lengths

    plan_micro_batches([1, 9, 17], 64, cost=cost, pad_to_multiple_of=8)
    assert seen == [[8, 16, 24]]


def test_explicit_weights_are_used_as_given_under_padding():
    # Weights that disagree with the lengths decide the split: [0, 1] weigh 10, [2] weighs 10.
    plan = plan_micro_batches([1, 1, 1], 2, cost=[5, 5, 10], pad_to_multiple_of=1, order="none")
    assert sorted(plan) == [[0, 1], [2]]


def test_cost_errors():
    with pytest.raises(
        TypeError, match=r"both cost= and its deprecated spelling balance_workload="
    ):
        plan_micro_batches([1, 2], 5, cost="tokens", balance_workload=True)
    with pytest.raises(ValueError, match="cost must be 'tokens', 'workload'.*got 'flops'"):
        plan_micro_batches([1, 2], 5, cost="flops")
    with pytest.raises(TypeError, match="cost must be 'tokens', 'workload'"):
        plan_micro_batches([1, 2], 5, cost=3)
    with pytest.raises(ValueError, match="cost has 1 weights but there are 2 samples"):
        plan_micro_batches([1, 2], 5, cost=[1])
    with pytest.raises(ValueError, match=r"cost\[1\] must be >= 0, got -1"):
        plan_micro_batches([1, 2], 5, cost=[1, -1])
    with pytest.raises(ValueError, match=r"cost\(lengths\) has 3 weights"):
        plan_micro_batches([1, 2], 5, cost=lambda s: [1, 2, 3])
    with pytest.raises(OverflowError, match="sums to .* above 2\\*\\*63 - 1"):
        plan_micro_batches([1, 2], 5, cost=[2**62, 2**62])


@pytest.mark.parametrize(
    "weights",
    [
        [1.0, 2.0],
        [1, 2.5],
        np.array([1.0, 2.0]),
        np.array([1.5, 2.0], dtype=np.float32),
        [np.float32(1), np.float32(2)],
    ],
)
def test_float_weights_are_planned_in_their_precision_never_rounded(weights):
    # Float costs are planned as given: integral ones exactly as the same ints would be.
    plan = plan_micro_batches([1, 2], 5, cost=weights)
    assert plan == plan_micro_batches([1, 2], 5, cost=lambda s: weights)
    assert sorted(i for mb in plan for i in mb) == [0, 1]


class _Meta:
    def __init__(self, meta):
        self.meta = meta

    def get_custom_meta(self, indexes):
        return {i: self.meta[i] for i in indexes}


def _shares(sampler, meta, n):
    partition = _Meta(meta)
    return [
        sampler(list(range(n)), n // sampler.dp_size, dp_rank=r, partition=partition)[0]
        for r in range(sampler.dp_size)
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=8, max_size=8))
def test_sampler_costs_weigh_groups_as_the_partitioner_would(lengths):
    meta = [{"total_lengths": s, "flops": 3 * s + 1} for s in lengths]

    def expected(sample_weights):
        groups = [sample_weights[i] + sample_weights[i + 1] for i in range(0, 8, 2)]
        parts = get_seqlen_balanced_partitions(groups, 2, True)
        return [sorted(i for g in part for i in (2 * g, 2 * g + 1)) for part in parts]

    workload = calculate_workload(lengths)
    for sampler, weights in [
        (SeqlenBalancedSampler(2, 2), lengths),
        (SeqlenBalancedSampler(2, 2, cost="workload"), workload),
        (SeqlenBalancedSampler(2, 2, cost=lambda s: 3 * s + 1), [3 * s + 1 for s in lengths]),
        (SeqlenBalancedSampler(2, 2, cost_field="flops"), [3 * s + 1 for s in lengths]),
    ]:
        assert _shares(sampler, meta, 8) == expected(weights)


def test_sampler_cost_errors():
    with pytest.raises(ValueError, match="cost must be 'tokens', 'workload' or a callable"):
        SeqlenBalancedSampler(2, 2, cost="flops")
    with pytest.raises(TypeError, match="pass cost_field= naming a custom_meta field"):
        SeqlenBalancedSampler(2, 2, cost=[1, 2])
    with pytest.raises(TypeError, match="pass either cost= or cost_field="):
        SeqlenBalancedSampler(2, 2, cost="workload", cost_field="flops")
    sampler = SeqlenBalancedSampler(1, 2, cost_field="flops")
    with pytest.raises(ValueError, match="custom_meta of index 1 has no 'flops'"):
        _shares(sampler, [{"flops": 1}, {"total_lengths": 3}], 2)
    sampler = SeqlenBalancedSampler(1, 2, cost_field="flops")
    with pytest.raises(ValueError, match=r"^flops\[1\] must be finite and >= 0, got -2\.0$"):
        _shares(sampler, [{"flops": 1.5}, {"flops": -2.0}], 2)
    assert "cost_field='flops'" in repr(sampler)
