"""``cost=`` on the drop-in partitioners: the answer of the same call on the weights the cost gives.

For every cost a planner takes (names, per-item weights, callables, `ModelCost`, `TimeCost`,
`TransformerCost`), ``f(lengths, ..., cost=c)`` equals ``f(sample_costs(c, lengths), ...)``,
errors included; with no cost the functions keep the reference's signature and answers.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import ModelCost, TimeCost, TransformerCost, reference
from seqbalance.costs import sample_costs

MODEL = ModelCost(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=256,
    vocab_size=1000,
)
TIME = TimeCost.fit(
    [[100], [200], [300], [400], [100, 100], [500, 50]],
    [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265],
)
TIME_WITH_MODEL = TimeCost.fit(
    [[100], [2000], [300], [4000], [100, 1000], [500, 50], [60, 60, 60]],
    [0.0011, 0.0231, 0.0032, 0.0502, 0.0123, 0.0064, 0.0025],
    model=MODEL,
)


def _squares(lengths: np.ndarray) -> np.ndarray:
    return lengths * lengths


def _halves(lengths: np.ndarray) -> list[float]:
    return [0.5 * length + 0.25 for length in lengths.tolist()]


NAMED_COSTS = [
    "tokens",
    "workload",
    MODEL,
    TIME,
    TIME_WITH_MODEL,
    TransformerCost(hidden_size=256, num_layers=2),
    _squares,
    _halves,
]


@st.composite
def costs(draw, n: int):
    """One cost of any kind a planner takes, for ``n`` lengths."""
    kind = draw(st.sampled_from(["named", "int weights", "float weights", "float32 weights"]))
    if kind == "named":
        return draw(st.sampled_from(NAMED_COSTS))
    if kind == "int weights":
        return draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    values = draw(st.lists(st.floats(0, 1e6), min_size=n, max_size=n))
    return np.asarray(values, dtype=np.float32 if kind == "float32 weights" else np.float64)


@st.composite
def calls(draw):
    lengths = draw(st.lists(st.integers(0, 40_000), min_size=1, max_size=60))
    as_array = draw(st.booleans())
    k = draw(st.integers(1, len(lengths) + 1))  # k > n: the same PartitionError on both sides
    equal_size = draw(st.sampled_from([False, True, "nearly"]))
    cost = draw(costs(len(lengths)))
    return (np.asarray(lengths, dtype=np.int64) if as_array else lengths), k, equal_size, cost


def _outcome(function, *args, **kwargs):
    """What a call returns, or its error's type and message (the two sides must agree on both)."""
    try:
        answer = function(*args, **kwargs)
    except (ValueError, TypeError, OverflowError) as exc:
        return type(exc), str(exc)
    return answer.tolist() if isinstance(answer, np.ndarray) else answer


def _variants():
    """Each drop-in with the keywords it takes besides ``cost``."""
    return [
        (seqbalance.karmarkar_karp, {}),
        (seqbalance.get_seqlen_balanced_partitions, {}),
        (seqbalance.get_seqlen_balanced_partitions, {"refine": True}),
        (seqbalance.greedy_partition, {}),
        (seqbalance.partition_ids, {}),
        (seqbalance.partition_ids, {"refine": True}),
    ]


@given(calls())
def test_a_cost_gives_the_answer_of_the_same_call_on_its_weights(call):
    lengths, k, equal_size, cost = call
    weights = sample_costs(cost, np.asarray(lengths, dtype=np.int64))
    for function, options in _variants():
        if function is seqbalance.partition_ids:
            args, keywords = (k,), {"equal_size": equal_size, **options}
        else:
            args, keywords = (k, equal_size), options
        with_cost = _outcome(function, lengths, *args, cost=cost, **keywords)
        on_weights = _outcome(function, weights, *args, **keywords)
        assert with_cost == on_weights, (function.__name__, options)


@pytest.mark.parametrize("cost", NAMED_COSTS, ids=repr)
def test_each_kind_of_cost_changes_what_is_balanced(cost):
    # Not a vacuous equality: on lengths where tokens and the cost disagree, each cost's answer
    # is that of its weights, and the weights are the cost's, not the lengths.
    lengths = [4000, 100, 100, 100, 100, 3000, 900, 700]
    weights = sample_costs(cost, np.asarray(lengths, dtype=np.int64))
    answer = seqbalance.get_seqlen_balanced_partitions(lengths, 2, False, cost=cost)
    assert answer == seqbalance.get_seqlen_balanced_partitions(weights, 2, False)
    if cost != "tokens":
        assert not np.array_equal(weights, lengths)


def test_the_documented_example_differs_from_tokens():
    lengths = [1000, 4000, 3000, 1000]
    by_tokens = seqbalance.get_seqlen_balanced_partitions(lengths, 2, False)
    by_workload = seqbalance.get_seqlen_balanced_partitions(lengths, 2, False, cost="workload")
    assert by_tokens == [[0, 1], [2, 3]] and by_workload == [[0, 2, 3], [1]]
    workload = seqbalance.calculate_workload(lengths)
    heaviest = [
        max(sum(workload[i] for i in part) for part in parts) for parts in (by_tokens, by_workload)
    ]
    assert heaviest == [139_880_000, 133_880_000]  # the figures docs/partitioning.md quotes


@pytest.mark.parametrize(
    "name",
    ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition", "partition_ids"],
)
def test_cost_is_keyword_only_and_the_reference_parameters_are_unchanged(name):
    parameters = inspect.signature(getattr(seqbalance, name)).parameters
    cost = parameters["cost"]
    assert cost.kind is inspect.Parameter.KEYWORD_ONLY and cost.default is None
    first = list(parameters)[:2] if name == "partition_ids" else list(parameters)[:3]
    # partition_ids is no drop-in: its lengths go by the one name (seqlen_list= a deprecated alias)
    lengths = "lengths" if name == "partition_ids" else "seqlen_list"
    assert first == [lengths, "k_partitions", "equal_size"][: len(first)]
    for parameter in list(parameters.values())[: len(first)]:
        assert parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    with pytest.raises(TypeError):
        getattr(seqbalance, name)([1, 2, 3, 4], 2, True, "tokens")


@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=40), st.booleans())
def test_no_cost_is_the_reference_answer(lengths, equal_size):
    k = 2
    lengths = lengths[: len(lengths) - len(lengths) % k] if equal_size else lengths
    for name in ("karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"):
        expected = getattr(reference, name)(lengths, k, equal_size)
        assert getattr(seqbalance, name)(lengths, k, equal_size) == expected
        assert getattr(seqbalance, name)(lengths, k, equal_size, cost=None) == expected


@pytest.mark.parametrize(
    "lengths, cost, error, words",
    [
        ([1.5, 2.0], "tokens", TypeError, "seqlen_list[0]"),
        ([-1, 2], "workload", ValueError, "seqlen_list[0]"),
        ([1, 2, 3], [1, 2], ValueError, "cost has 2 weights but there are 3 samples"),
        ([1, 2, 3], "flops", ValueError, "cost must be 'tokens', 'workload'"),
        ([1, 2, 3], lambda lengths: [1.0, float("nan"), 2.0], ValueError, "cost(lengths)[1]"),
    ],
)
def test_with_a_cost_the_lengths_and_the_cost_are_checked_by_name(lengths, cost, error, words):
    with pytest.raises(error) as raised:
        seqbalance.get_seqlen_balanced_partitions(lengths, 2, False, cost=cost)
    assert words in str(raised.value)
