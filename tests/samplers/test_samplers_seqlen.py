"""SeqlenBalancedSampler on its own: the spec's behaviour, the policies, and every error path."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import GRPOGroupNSampler, SeqlenBalancedSampler, get_seqlen_balanced_partitions
from seqbalance.samplers.seqlen_balanced import equal_split, split_groups

LOGGER = "seqbalance.samplers.seqlen_balanced"


class Partition:
    """The part of TransferQueue's partition object a sampler uses."""

    def __init__(self, meta):
        self.meta = meta
        self.calls = 0

    def get_custom_meta(self, indexes):
        self.calls += 1
        return {i: self.meta[i] for i in indexes if i in self.meta}


def lengths_partition(lengths):
    return Partition({i: {"total_lengths": value} for i, value in enumerate(lengths)})


def call(sampler, ready, batch_size, rank, batch=0, partition=None, task="t", pid="p"):
    return sampler(
        ready,
        batch_size,
        task_name=task,
        partition_id=pid,
        dp_rank=rank,
        batch_index=batch,
        partition=partition,
    )


# ---------------------------------------------------------------- constructor


def test_is_a_grpo_sampler_with_defaults():
    sampler = SeqlenBalancedSampler()
    assert isinstance(sampler, GRPOGroupNSampler)
    assert sampler.n_samples_per_prompt == 1 and sampler.dp_size == 1


@pytest.mark.parametrize("bad", [0, -4])
def test_dp_size_must_be_at_least_one(bad):
    # TransferQueue's wording: its own test_initialization_invalid_dp_size checks the words.
    with pytest.raises(ValueError, match=f"^dp_size must be positive, got {bad}$"):
        SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=bad)


def test_n_is_checked_before_dp_size():
    with pytest.raises(ValueError, match="n_samples_per_prompt must be positive, got 0"):
        SeqlenBalancedSampler(n_samples_per_prompt=0, dp_size=0)


def test_dp_size_must_be_int():
    with pytest.raises(TypeError, match="dp_size must be an int"):
        SeqlenBalancedSampler(1, dp_size="2")


# ---------------------------------------------------------------- the balanced split


def test_golden_split_matches_partitioner_on_group_weights():
    lengths = [10, 20, 30, 40, 50, 60, 70, 80]
    part = lengths_partition(lengths)
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    # group weights 30, 70, 110, 150 -> [[0, 3], [1, 2]]
    assert call(sampler, list(range(8)), 4, 0, partition=part) == ([0, 1, 6, 7], [0, 1, 6, 7])
    assert call(sampler, [2, 3, 4, 5], 4, 1, partition=part) == ([2, 3, 4, 5], [2, 3, 4, 5])


def test_heaviest_share_goes_to_rank_zero_and_matches_partitioner():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 4000, size=64).tolist()
    part = lengths_partition(lengths)
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=4)
    shares = [call(sampler, list(range(64)), 16, r, partition=part)[0] for r in range(4)]
    weights = [sum(lengths[4 * g : 4 * g + 4]) for g in range(16)]
    expected = get_seqlen_balanced_partitions(weights, 4, equal_size=True)
    assert shares == [[4 * g + s for g in groups for s in range(4)] for groups in expected]
    sums = [sum(lengths[i] for i in share) for share in shares]
    assert sums[0] == max(sums)


def test_fills_states_for_every_rank_and_cache_ignores_ready():
    part = lengths_partition([5] * 12)
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=1, dp_size=3)
    mine = call(sampler, list(range(12)), 4, 1, batch=7, partition=part)
    states = sampler.save_checkpoint()["_states"]["p"]["t"]
    assert sorted(states) == [0, 1, 2]
    assert all(7 in states[r] for r in range(3))
    assert states[1][7] == tuple(mine)
    for r in range(3):
        assert sampler.has_cached_result("p", "t", {"dp_rank": r, "batch_index": 7})
        sampled, consumed = states[r][7]
        assert sampled == consumed and sampled is not consumed
    # later calls ignore ready_indexes entirely, and do not ask the partition again
    calls = part.calls
    assert call(sampler, [], 4, 1, batch=7, partition=part) == mine
    assert part.calls == calls
    states = sampler.save_checkpoint()["_states"]["p"]["t"]
    assert sorted(i for r in range(3) for i in states[r][7][0]) == list(range(12))


def test_dp_rank_and_batch_index_default_to_zero():
    sampler = SeqlenBalancedSampler(1, 2)
    part = lengths_partition([1, 2, 3, 4])
    first = sampler(list(range(4)), 2, partition=part)
    assert sampler.save_checkpoint()["_balanced_cache"].keys() == {("", "", 0)}
    assert first == tuple(sampler.save_checkpoint()["_states"][""][""][0][0])


def test_rank_beyond_dp_size_gets_nothing_and_computes_nothing():
    sampler = SeqlenBalancedSampler(1, 2)
    assert call(sampler, list(range(4)), 2, 2, partition=lengths_partition([1] * 4)) == ([], [])
    state = sampler.save_checkpoint()
    assert state["_balanced_cache"] == {} and state["_states"] == {}


def test_too_few_groups_returns_empty_and_caches_nothing():
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    assert call(sampler, [0, 1, 3, 5, 7], 2, 0, partition=lengths_partition([1] * 8)) == ([], [])
    state = sampler.save_checkpoint()
    assert state["_states"] == {} and state["_balanced_cache"] == {}


def test_returned_lists_do_not_alias_the_cache():
    sampler = SeqlenBalancedSampler(1, 2)
    part = lengths_partition([1, 2, 3, 4])
    sampled, consumed = call(sampler, list(range(4)), 2, 0, partition=part)
    sampled.append(100)
    consumed.clear()
    assert call(sampler, [], 2, 0, partition=part)[0] != sampled
    assert len(call(sampler, [], 2, 0, partition=part)[1]) == 2


# ---------------------------------------------------------------- policy: uneven groups


def test_groups_not_multiple_of_dp_size_balance_without_equal_counts():
    # per-rank 3 samples, n=2, dp=2 -> 6 samples = 3 groups over 2 ranks (upstream: AssertionError)
    lengths = [50, 50, 10, 10, 30, 30]
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    part = lengths_partition(lengths)
    shares = [call(sampler, list(range(6)), 3, r, partition=part)[0] for r in range(2)]
    assert sorted(i for s in shares for i in s) == list(range(6))
    assert all(s for s in shares)
    expected = get_seqlen_balanced_partitions([100, 20, 60], 2, equal_size=False)
    assert shares == [sorted(2 * g + k for g in groups for k in range(2)) for groups in expected]
    assert shares[0] == [0, 1]  # the 100-token group alone outweighs the other two


def test_uneven_groups_nearly_keeps_group_counts_within_one():
    # 5 groups of 2 over 2 ranks (per-rank 5 samples). One heavy group: "free" gives it a rank
    # of its own (1 group against 4); "nearly" gives the ranks 3 and 2 groups.
    lengths = [100, 100, 1, 1, 2, 2, 3, 3, 4, 4]
    part = lengths_partition(lengths)
    free = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    nearly = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2, uneven_groups="nearly")
    free_shares = [call(free, list(range(10)), 5, r, partition=part)[0] for r in range(2)]
    nearly_shares = [call(nearly, list(range(10)), 5, r, partition=part)[0] for r in range(2)]
    assert sorted(len(s) // 2 for s in free_shares) == [1, 4]
    assert sorted(len(s) // 2 for s in nearly_shares) == [2, 3]
    expected = get_seqlen_balanced_partitions([200, 2, 4, 6, 8], 2, equal_size="nearly")
    assert nearly_shares == [
        sorted(2 * g + k for g in groups for k in range(2)) for groups in expected
    ]
    assert "uneven_groups='nearly'" in repr(nearly)


@pytest.mark.parametrize(
    "bad, error", [("even", ValueError), ("Nearly", ValueError), (None, TypeError), (1, TypeError)]
)
def test_uneven_groups_is_checked(bad, error):
    with pytest.raises(error, match=r"^uneven_groups must be 'free' or 'nearly', got"):
        SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2, uneven_groups=bad)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=0, max_size=30),
    st.integers(1, 8),
    st.sampled_from(["free", "nearly"]),
)
def test_split_groups_policy_for_every_group_count(weights, dp_size, uneven_groups):
    split = split_groups(weights, dp_size, uneven_groups=uneven_groups)
    count = len(weights)
    assert len(split) == dp_size
    assert sorted(g for share in split for g in share) == list(range(count))
    sizes = [len(share) for share in split]
    if count < dp_size:
        # One group per rank while they last, heaviest first (unchanged by uneven_groups).
        assert sizes == [1] * count + [0] * (dp_size - count)
    elif count % dp_size == 0:
        assert split == get_seqlen_balanced_partitions(weights, dp_size, True)
    elif uneven_groups == "nearly":
        assert max(sizes) - min(sizes) <= 1
        assert split == get_seqlen_balanced_partitions(weights, dp_size, "nearly")
    else:
        assert min(sizes) >= 1
        assert split == get_seqlen_balanced_partitions(weights, dp_size, False)


def test_fewer_groups_than_ranks_rounds_up_to_one_group_per_rank(caplog):
    # n=4, dp=4, per-rank 2 -> 8 samples would be 2 groups for 4 ranks (upstream: AssertionError);
    # instead every rank gets one whole group.
    lengths = [1] * 4 + [9] * 4 + [5] * 4 + [7] * 4 + [100] * 4
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=4)
    part = lengths_partition(lengths)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shares = [call(sampler, list(range(20)), 2, r, partition=part)[0] for r in range(4)]
        call(
            sampler,
            [16, 17, 18, 19] + list(range(20, 32)),
            2,
            0,
            batch=1,
            partition=lengths_partition([1] * 32),
        )
    assert shares == [[4, 5, 6, 7], [12, 13, 14, 15], [8, 9, 10, 11], [0, 1, 2, 3]]
    assert sampler.save_checkpoint()["_uncollected"][("p", "t", 0)] == set()
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "SeqlenBalancedSampler: batch_size 2 is smaller than n_samples_per_prompt 4; each rank gets one "
        "whole group (4 samples) per batch instead"
    ]


def test_fewer_groups_than_ranks_waits_for_one_group_per_rank():
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=4)
    part = lengths_partition([1] * 16)
    assert call(sampler, list(range(12)), 2, 0, partition=part) == ([], [])
    assert sampler.save_checkpoint()["_states"] == {}
    shares = [call(sampler, list(range(16)), 2, r, partition=part)[0] for r in range(4)]
    assert sorted(shares) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_split_groups_policy_examples():
    assert split_groups([10, 20, 30, 40], 2) == [[0, 3], [1, 2]]
    assert split_groups([5, 9], 3) == [[1], [0], []]
    assert split_groups([4, 4], 3) == [[0], [1], []]
    assert split_groups([], 2) == [[], []]
    assert split_groups([100, 10, 10, 10, 10], 2) == [[0], [1, 2, 3, 4]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1000), max_size=30), st.integers(1, 9))
def test_split_groups_property_every_group_once(weights, dp_size):
    split = split_groups(weights, dp_size)
    assert len(split) == dp_size
    flat = sorted(g for share in split for g in share)
    assert flat == list(range(len(weights)))
    assert all(share == sorted(share) for share in split)
    if len(weights) >= dp_size:
        assert all(share for share in split)
    if weights and len(weights) % dp_size == 0:
        assert len({len(share) for share in split}) == 1
    if len(weights) < dp_size:
        assert all(len(share) <= 1 for share in split)
    sums = [sum(weights[g] for g in share) for share in split]
    assert sums[0] == max(sums)


# ---------------------------------------------------------------- no partition: equal split


def test_equal_split_examples():
    assert equal_split(4, 2) == [[0, 1], [2, 3]]
    assert equal_split(5, 2) == [[0, 1, 2], [3, 4]]
    assert equal_split(2, 3) == [[0], [1], []]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(1, 9))
def test_equal_split_property(groups, dp_size):
    split = equal_split(groups, dp_size)
    assert [g for share in split for g in share] == list(range(groups))
    sizes = [len(share) for share in split]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def test_no_partition_falls_back_to_equal_split_with_one_warning(caplog):
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        # 3 groups over 2 ranks: rank 0 takes the extra group
        shares = [call(sampler, list(range(6)), 3, r, batch=0)[0] for r in range(2)]
        assert shares == [[0, 1, 2, 3], [4, 5]]
        second = [call(sampler, list(range(6, 14)), 4, r, batch=1)[0] for r in range(2)]
        assert second == [[6, 7, 8, 9], [10, 11, 12, 13]]
    warnings = [r for r in caplog.records if "no partition object" in r.getMessage()]
    assert len(warnings) == 1


# ---------------------------------------------------------------- input checks


def test_negative_dp_rank_is_refused_not_wrapped():
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(ValueError, match="dp_rank -1 must be greater than or equal to 0"):
        call(sampler, [0, 1], 1, -1, partition=lengths_partition([1, 1]))
    call(sampler, [0, 1], 1, 0, partition=lengths_partition([1, 1]))
    with pytest.raises(ValueError, match="dp_rank -1 must be greater than or equal to 0"):
        call(sampler, [], 1, -1)


@pytest.mark.parametrize("bad", [None, "0", 0.0, True])
def test_non_int_dp_rank(bad):
    with pytest.raises(TypeError, match="dp_rank must be an int"):
        call(SeqlenBalancedSampler(1, 2), [0, 1], 1, bad)


def test_numpy_dp_rank_is_fine():
    sampler = SeqlenBalancedSampler(1, 2)
    part = lengths_partition([1, 2])
    assert call(sampler, [0, 1], 1, np.int64(1), partition=part) == call(
        sampler, [], 1, 1, partition=part
    )


def test_global_size_must_be_multiple_of_n():
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=3)
    with pytest.raises(
        ValueError,
        match=r"batch_size \(3\) \* dp_size \(3\) = 9 must be a multiple of n_samples_per_prompt \(4\)",
    ):
        call(sampler, list(range(40)), 3, 0)


def test_per_rank_size_need_not_be_multiple_of_n():
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=4, dp_size=2)
    sampled, _ = call(sampler, list(range(8)), 2, 0, partition=lengths_partition([1] * 8))
    assert sampled in ([0, 1, 2, 3], [4, 5, 6, 7])


def test_negative_batch_size():
    with pytest.raises(ValueError, match="batch_size must be >= 0, got -1"):
        call(SeqlenBalancedSampler(1, 2), [0, 1], -1, 0)


def test_zero_batch_size_returns_empty():
    sampler = SeqlenBalancedSampler(1, 2)
    assert call(sampler, [0, 1], 0, 0) == ([], [])
    assert sampler.save_checkpoint()["_states"] == {}


@pytest.mark.parametrize(
    "value, shown",
    [(-5, "-5"), (2.5, "2.5"), ("7", "'7'"), (None, "None"), (True, "True"), ([3], r"\[3\]")],
)
def test_bad_total_lengths_names_the_index(value, shown):
    meta = {i: {"total_lengths": 3} for i in range(4)}
    meta[2] = {"total_lengths": value}
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(
        ValueError, match=f"total_lengths of index 2 must be a non-negative integer, got {shown}"
    ):
        call(sampler, list(range(4)), 2, 0, partition=Partition(meta))
    # nothing half-cached: a corrected partition works afterwards
    meta[2] = {"total_lengths": 3}
    assert call(sampler, list(range(4)), 2, 0, partition=Partition(meta))[0]


def test_custom_meta_entry_must_be_a_dict():
    meta = {0: {"total_lengths": 1}, 1: 17}
    with pytest.raises(ValueError, match="custom_meta of index 1 must be a dict, got 17"):
        call(SeqlenBalancedSampler(1, 2), [0, 1], 1, 0, partition=Partition(meta))


def test_total_lengths_above_int64_names_the_sample_index():
    meta = {i: {"total_lengths": 3} for i in range(4)}
    meta[2] = {"total_lengths": 2**63}
    with pytest.raises(
        OverflowError,
        match=r"total_lengths of index 2 must be <= 2\*\*63 - 1, got 9223372036854775808",
    ):
        call(SeqlenBalancedSampler(1, 2), list(range(4)), 2, 0, partition=Partition(meta))


def test_largest_int64_total_length_is_accepted():
    meta = {0: {"total_lengths": 2**63 - 1}, 1: {"total_lengths": 5}}
    sampler = SeqlenBalancedSampler(1, 2)
    assert call(sampler, [0, 1], 1, 0, partition=Partition(meta))[0] == [0]
    assert call(sampler, [], 1, 1, partition=Partition(meta))[0] == [1]


def test_group_sum_above_int64_names_the_group_indexes():
    meta = {i: {"total_lengths": 2**62} for i in range(4, 8)}
    sampler = SeqlenBalancedSampler(2, 1)
    with pytest.raises(
        OverflowError,
        match=r"total_lengths of the group at indexes \[4, 5\] sum to 9223372036854775808, "
        r"above 2\*\*63 - 1",
    ):
        call(sampler, [4, 5, 6, 7], 4, 0, partition=Partition(meta))
    state = sampler.save_checkpoint()
    assert state["_balanced_cache"] == {} and state["_states"] == {}


class _MetaReturns:
    def __init__(self, value):
        self.value = value

    def get_custom_meta(self, indexes):
        return self.value


@pytest.mark.parametrize(
    "returned, shown",
    [
        (None, r"None \(NoneType\)"),
        ([{"total_lengths": 1}], r"\[\{'total_lengths': 1\}\] \(list\)"),
    ],
)
def test_get_custom_meta_must_return_a_mapping(returned, shown):
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(
        TypeError,
        match=r"partition.get_custom_meta\(indexes\) must return a mapping \{index: dict\}, got "
        + shown,
    ):
        call(sampler, [0, 1], 1, 0, partition=_MetaReturns(returned))
    assert sampler.save_checkpoint()["_balanced_cache"] == {}


def test_numpy_total_lengths_are_accepted():
    meta = {i: {"total_lengths": np.int32(v)} for i, v in enumerate([5, 1, 1, 5])}
    sampler = SeqlenBalancedSampler(1, 2)
    shares = [call(sampler, list(range(4)), 2, r, partition=Partition(meta))[0] for r in range(2)]
    assert sorted(sum([5, 1, 1, 5][i] for i in s) for s in shares) == [6, 6]


def test_missing_lengths_weigh_one_and_are_logged_once_per_batch(caplog):
    # index 0 has 1000 tokens, the rest have no total_lengths: weighted 1 each.
    meta = {0: {"total_lengths": 1000}, 1: {}, 2: {"other": 1}}
    sampler = SeqlenBalancedSampler(1, 2)
    part = Partition(meta)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shares = [call(sampler, [0, 1, 2, 3], 2, r, partition=part)[0] for r in range(2)]
        call(sampler, [], 2, 1, partition=part)
    assert shares == [[0, 1], [2, 3]]  # equal counts; heaviest with the lightest
    messages = [r.getMessage() for r in caplog.records if "no total_lengths" in r.getMessage()]
    assert messages == [
        "SeqlenBalancedSampler: 3 of 4 samples in batch 0 (partition 'p', task 't') have no "
        "total_lengths in custom_meta; weighting each of them 1"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        call(sampler, [4, 5], 1, 0, batch=1, partition=part)
    assert ["2 of 2 samples in batch 1" in r.getMessage() for r in caplog.records] == [True]


def test_all_lengths_present_logs_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        call(SeqlenBalancedSampler(1, 2), [0, 1], 1, 0, partition=lengths_partition([3, 4]))
    assert caplog.records == []


# ---------------------------------------------------------------- no double assignment (unit level)


def test_fast_rank_never_gets_an_uncollected_index():
    part = lengths_partition(list(range(1, 17)))
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
    ready = list(range(16))
    rank0_b0, _ = call(sampler, ready, 4, 0, batch=0, partition=part)
    ready = [i for i in ready if i not in rank0_b0]  # controller consumed rank 0's share
    # rank 0 runs ahead: batch 1 while rank 1 has not collected batch 0
    rank0_b1, _ = call(sampler, ready, 4, 0, batch=1, partition=part)
    rank1_b0 = sampler.save_checkpoint()["_balanced_cache"][("p", "t", 0)][1]
    assert not set(rank0_b1) & set(rank1_b0)
    assert call(sampler, ready, 4, 1, batch=0, partition=part)[0] == rank1_b0


def test_reservations_are_per_task_and_partition():
    part = lengths_partition([1] * 8)
    sampler = SeqlenBalancedSampler(1, 2)
    a = call(sampler, list(range(4)), 2, 0, task="actor", partition=part)[0]
    b = call(sampler, list(range(4)), 2, 0, task="critic", partition=part)[0]
    assert a == b  # another task consumes the same data independently
    c = call(sampler, list(range(4)), 2, 0, pid="other", partition=part)[0]
    assert c == a


def test_ahead_rank_gets_nothing_when_only_reserved_samples_are_ready():
    part = lengths_partition([1] * 8)
    sampler = SeqlenBalancedSampler(1, 2)
    call(sampler, list(range(4)), 2, 0, batch=0, partition=part)
    # ranks' shares of batch 0 are reserved; only those are "ready" -> nothing for batch 1
    assert call(sampler, list(range(4)), 2, 0, batch=1, partition=part) == ([], [])
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 1})


# ---------------------------------------------------------------- bounded cache


def _run_batches(sampler, part, batches, collect_ranks, start=0, per_rank=1):
    dp = sampler.dp_size
    for b in range(start, start + batches):
        base = b * per_rank * dp
        ready = list(range(base, base + per_rank * dp))
        for r in collect_ranks:
            call(sampler, ready, per_rank, r, batch=b, partition=part)


def test_cache_keeps_last_n_batches_when_all_collected():
    part = lengths_partition([1] * 200)
    sampler = SeqlenBalancedSampler(1, 2, max_cached_batches=4)
    _run_batches(sampler, part, 10, collect_ranks=[0, 1])
    # batch b goes when a request for batch b + 4 arrives
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [6, 7, 8, 9]
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][1]) == [6, 7, 8, 9]
    # each ready list omitted the batches before it, so only the last one stays reserved
    assert sampler.save_checkpoint()["_handed_out"] == {("p", "t"): [18, 19]}


def test_cache_never_evicts_a_batch_with_an_uncollected_share():
    part = lengths_partition([1] * 200)
    sampler = SeqlenBalancedSampler(1, 2, max_cached_batches=2)
    _run_batches(sampler, part, 1, collect_ranks=[0])  # batch 0: rank 1 never collects
    _run_batches(sampler, part, 5, collect_ranks=[0, 1], start=1)
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][1]) == [0, 4, 5]
    assert sampler.has_cached_result("p", "t", {"dp_rank": 1, "batch_index": 0})
    rank1_share = sampler.save_checkpoint()["_states"]["p"]["t"][1][0][0]
    # now rank 1 collects; a peer repeating at once is still served from the cache
    assert call(sampler, [], 1, 1, batch=0, partition=part)[0] == rank1_share
    assert call(sampler, [], 1, 1, batch=0, partition=part)[0] == rank1_share
    # the next request for a batch >= 0 + 2 evicts it
    call(sampler, [], 1, 0, batch=5, partition=part)
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][1]) == [4, 5]


def test_unbounded_cache():
    part = lengths_partition([1] * 400)
    sampler = SeqlenBalancedSampler(1, 2, max_cached_batches=None)
    _run_batches(sampler, part, 100, collect_ranks=[0, 1])
    assert len(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == 100


# ---------------------------------------------------------------- clear_cache and checkpoints


def test_clear_cache_drops_split_states_and_reservations():
    part = lengths_partition([1] * 8)
    sampler = SeqlenBalancedSampler(1, 2)
    call(sampler, list(range(4)), 2, 0, pid="p", partition=part)
    call(sampler, list(range(4)), 2, 0, pid="q", partition=part)
    sampler.clear_cache("p")
    assert set(sampler.save_checkpoint()["_states"]) == {"q"}
    assert ("p", "t") not in sampler.save_checkpoint()["_handed_out"]
    # batch 0 of "p" is computed afresh from what is ready now
    assert call(sampler, [4, 5, 6, 7], 2, 1, pid="p", partition=part)[0] in (
        [4, 5],
        [6, 7],
        [4, 6],
        [5, 7],
        [4, 7],
        [5, 6],
    )
    sampler.clear_cache("never-seen")


def test_checkpoint_round_trip_answers_like_the_original():
    lengths = np.random.default_rng(0).integers(1, 100, size=64).tolist()
    part = lengths_partition(lengths)
    original = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=4, max_cached_batches=8)
    call(original, list(range(64)), 4, 0, batch=0, partition=part)
    call(original, list(range(64)), 4, 2, batch=0, partition=part)
    state = pickle.loads(pickle.dumps(original.save_checkpoint()))
    assert set(state) >= {"_states", "_balanced_cache", "_uncollected", "_batch_order"}
    restored = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=4, max_cached_batches=8)
    restored.load_checkpoint(state)
    for rank in range(4):
        assert call(restored, [], 4, rank, batch=0, partition=part) == call(
            original, [], 4, rank, batch=0, partition=part
        )
    # reservations survive: the next batch avoids batch 0's indexes in both
    nxt_o = call(original, list(range(64)), 4, 0, batch=1, partition=part)
    nxt_r = call(restored, list(range(64)), 4, 0, batch=1, partition=part)
    assert nxt_o == nxt_r
    batch0 = {
        i for share in original.save_checkpoint()["_balanced_cache"][("p", "t", 0)] for i in share
    }
    assert not set(nxt_o[0]) & batch0


def test_whole_sampler_pickles_mid_run():
    part = lengths_partition([1] * 8)
    sampler = SeqlenBalancedSampler(1, 2)
    call(sampler, list(range(4)), 2, 0, partition=part)
    clone = pickle.loads(pickle.dumps(sampler))
    assert call(clone, [], 2, 1, partition=part) == call(sampler, [], 2, 1, partition=part)


def test_loads_an_upstream_format_checkpoint():
    # Upstream saves {"_states": ..., "_balanced_cache": {(partition, task, batch): shares}}.
    shares = [[0, 1], [2, 3]]
    state = {
        "_states": {"p": {"t": {r: {0: (share, list(share))} for r, share in enumerate(shares)}}},
        "_balanced_cache": {("p", "t", 0): shares},
    }
    sampler = SeqlenBalancedSampler(1, 2)
    sampler.load_checkpoint(pickle.loads(pickle.dumps(state)))
    part = lengths_partition([1] * 8)
    assert call(sampler, [], 2, 1, partition=part) == ([2, 3], [2, 3])
    # batch 0's indexes stay reserved for it
    assert call(sampler, list(range(8)), 2, 0, batch=1, partition=part)[0] in (
        [4, 5],
        [6, 7],
        [4, 7],
        [5, 6],
    )
    assert not set(sampler.save_checkpoint()["_balanced_cache"][("p", "t", 1)][1]) & {0, 1, 2, 3}
