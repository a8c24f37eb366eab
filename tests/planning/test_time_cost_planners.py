"""A TimeCost is a ``cost=`` everywhere: every planner and sampler balances by its seconds,
weighed as int64 nanoseconds (API spec: one weight, as the command line and ``install()``).

Each planner's answer with ``cost=time_cost`` must equal its answer with the per-sample
nanoseconds passed as explicit weights (the cost is called once on the lengths), and the seconds
must change the answer where tokens would balance differently.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from seqbalance import (
    SeqlenBalancedSampler,
    TimeCost,
    get_seqlen_balanced_partitions,
    group_balanced_partitions,
    min_num_micro_batches_for,
    plan_dp_micro_batches,
    plan_micro_batches,
    plan_packed_steps,
)
from seqbalance.costs.workload import nanoseconds


def fitted(per_pair: float = 4e-13) -> TimeCost:
    """A TimeCost fitted to exact times of ``1e-3 + sum(2e-5 + 1e-8 L + per_pair pairs(L))``."""
    rng = np.random.default_rng(0)
    batches = [rng.integers(64, 40_000, size=int(rng.integers(1, 6))).tolist() for _ in range(30)]
    seconds = [
        1e-3 + sum(2e-5 + 1e-8 * L + per_pair * L * (L + 1) / 2 for L in batch) for batch in batches
    ]
    return TimeCost.fit(batches, seconds)


COST = fitted()
lengths_strategy = st.lists(st.integers(1, 30_000), min_size=8, max_size=64)


@given(lengths=lengths_strategy, k=st.integers(1, 4))
def test_partitioners_take_its_seconds(lengths, k):
    seconds = COST(lengths)
    assert seconds.dtype == np.float64
    parts = get_seqlen_balanced_partitions(seconds, k, equal_size=False)
    assert sorted(i for part in parts for i in part) == list(range(len(lengths)))


@given(lengths=lengths_strategy, multiple=st.sampled_from([1, 2]), pad=st.sampled_from([1, 64]))
@example(lengths=[1] * 8, multiple=1, pad=64)
def test_micro_batch_planners_balance_by_it(lengths, multiple, pad):
    keywords = dict(num_micro_batches_multiple=multiple, pad_to_multiple_of=pad)
    padded = -(-np.array(lengths) // pad) * pad
    cap = int(padded.max()) * 2  # the padded lengths must fit (eight 1s padded to 64: cap 128)
    explicit = nanoseconds(COST, padded)
    with_cost = plan_micro_batches(lengths, cap, cost=COST, **keywords)
    assert with_cost == plan_micro_batches(lengths, cap, cost=explicit, **keywords)
    assert min_num_micro_batches_for(lengths, cap, cost=COST, **keywords) == (
        min_num_micro_batches_for(lengths, cap, cost=explicit, **keywords)
    )


@given(lengths=lengths_strategy, dp=st.integers(1, 4))
def test_the_dp_plan_balances_by_it(lengths, dp):
    cap = max(lengths) * 2
    with_cost = plan_dp_micro_batches(lengths, dp, cap, cost=COST)
    assert with_cost == plan_dp_micro_batches(
        lengths, dp, cap, cost=nanoseconds(COST, np.asarray(lengths))
    )


@given(lengths=lengths_strategy, dp=st.integers(1, 3))
def test_packed_steps_balance_by_it(lengths, dp):
    cap = max(lengths) * 2
    with_cost = plan_packed_steps(lengths, dp, 1, cap, cost=COST)
    assert with_cost == plan_packed_steps(
        lengths, dp, 1, cap, cost=nanoseconds(COST, np.asarray(lengths))
    )


def test_groups_balance_by_it():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 30_000, size=48).tolist()
    uids = [i // 4 for i in range(48)]
    with_cost = group_balanced_partitions(lengths, uids, 4, cost=COST)
    assert with_cost == group_balanced_partitions(
        lengths, uids, 4, cost=nanoseconds(COST, np.asarray(lengths))
    )


def test_the_seconds_change_the_split_where_tokens_would_not():
    # One long document against many short ones: equal tokens, but the long one's attention
    # makes it slower; balancing by time gives it fewer tokens.
    cost = fitted(per_pair=4e-12)
    lengths = [32_000] + [1_000] * 64
    by_tokens = get_seqlen_balanced_partitions(lengths, 2, equal_size=False)
    by_time = get_seqlen_balanced_partitions(cost(lengths), 2, equal_size=False)

    def worst(parts, weights):
        return max(sum(weights[i] for i in part) for part in parts)

    seconds = cost(lengths).tolist()
    assert worst(by_time, seconds) < worst(by_tokens, seconds)


class Partition:
    """The part of TransferQueue's partition object a sampler uses."""

    def __init__(self, lengths):
        self.meta = {i: {"total_lengths": value} for i, value in enumerate(lengths)}

    def get_custom_meta(self, indexes):
        return {i: self.meta[i] for i in indexes if i in self.meta}


@pytest.mark.parametrize("n_samples_per_prompt", [1, 4])
def test_the_seqlen_balanced_sampler_balances_by_it(n_samples_per_prompt):
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 30_000, size=32).tolist()
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=n_samples_per_prompt, dp_size=4, cost=COST)
    shares = [
        sampler(
            list(range(32)),
            32 // 4,
            task_name="t",
            partition_id="p",
            dp_rank=rank,
            batch_index=0,
            partition=Partition(lengths),
        )[0]
        for rank in range(4)
    ]
    weighed = nanoseconds(COST, np.asarray(lengths))
    group = n_samples_per_prompt
    weights = [int(weighed[g : g + group].sum()) for g in range(0, 32, group)]
    expected = get_seqlen_balanced_partitions(weights, 4, equal_size=True)
    assert shares == [[g * group + s for g in part for s in range(group)] for part in expected]


def test_a_sampler_holding_it_pickles_deep_copies_and_checkpoints():
    """Ray ships a sampler by pickling it: the TimeCost inside travels, and the copy serves the
    other ranks the split the original made (and keeps following the same cost)."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 30_000, size=32).tolist()
    cost = fitted()
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=4, cost=cost)

    def share(of, rank):
        return of(
            list(range(32)),
            8,
            task_name="t",
            partition_id="p",
            dp_rank=rank,
            batch_index=0,
            partition=Partition(lengths),
        )[0]

    first = share(sampler, 0)
    for copied in (pickle.loads(pickle.dumps(sampler)), copy.deepcopy(sampler)):
        held = [value for value in vars(copied).values() if isinstance(value, TimeCost)]
        assert len(held) == 1 and held[0] is not cost
        assert held[0].to_dict() == cost.to_dict()
        assert [share(copied, rank) for rank in range(1, 4)] == [
            share(sampler, rank) for rank in range(1, 4)
        ]
    # A checkpoint (the cost is configuration, not state) restores into a sampler built with a
    # loaded copy of the cost, which then serves the same shares.
    checkpoint = pickle.loads(pickle.dumps(sampler.save_checkpoint()))
    restored = SeqlenBalancedSampler(
        n_samples_per_prompt=2, dp_size=4, cost=TimeCost.from_dict(cost.to_dict())
    )
    restored.load_checkpoint(checkpoint)
    shares = [share(sampler, rank) for rank in range(4)]
    assert sorted(i for part in shares for i in part) == list(range(32))
    assert [share(restored, rank) for rank in range(4)] == shares
    # A fresh sampler from the copy balances exactly as one from the original cost.
    again = SeqlenBalancedSampler(
        n_samples_per_prompt=2, dp_size=4, cost=pickle.loads(pickle.dumps(cost))
    )
    assert share(again, 0) == first
