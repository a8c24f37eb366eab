"""BaseSampler, SequentialSampler, GRPOGroupNSampler and RankAwareSampler: contract and errors."""

from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import (
    BaseSampler,
    GRPOGroupNSampler,
    RankAwareSampler,
    SeqlenBalancedSampler,
    SequentialSampler,
)
from seqbalance.samplers import DEFAULT_MAX_CACHED_BATCHES
from seqbalance.samplers.grpo import select_groups


def test_exported_from_package_top_level():
    for name in [
        "BaseSampler",
        "SequentialSampler",
        "GRPOGroupNSampler",
        "RankAwareSampler",
        "SeqlenBalancedSampler",
    ]:
        assert name in seqbalance.__all__
        assert getattr(seqbalance, name) is getattr(seqbalance.samplers, name)


# ---------------------------------------------------------------- BaseSampler


def test_samplers_reuse_the_input_module_error_wording():
    # docs/errors.md: a message names the argument and the value. The samplers' argument checks,
    # checkpoint checks and weight checks show a value as the partitioners do: its repr (cut to
    # 60 characters) and its type.
    value = b"x" * 100
    shown = re.escape(f"got {repr(value)[:57]}... (bytes)")
    with pytest.raises(TypeError, match=f"k_partitions must be an int, {shown}$"):
        seqbalance.get_seqlen_balanced_partitions([1, 2], value, equal_size=False)
    with pytest.raises(TypeError, match=f"dp_rank must be an int, {shown}$"):
        RankAwareSampler()([1, 2], 1, value, 0, "t", "p")
    with pytest.raises(TypeError, match=f"must be a list of indexes, {shown}$"):
        RankAwareSampler().load_checkpoint({"_states": {"p": {"t": {0: {0: value}}}}})
    with pytest.raises(TypeError, match=f"uneven_groups must be 'free' or 'nearly', {shown}$"):
        SeqlenBalancedSampler(2, 2, uneven_groups=value)


def test_base_sampler_is_abstract():
    with pytest.raises(TypeError):
        BaseSampler()


class _Echo(BaseSampler):
    def sample(self, ready_indexes, batch_size, *args, **kwargs):
        return list(ready_indexes), [batch_size, args, kwargs]


def test_call_forwards_to_sample_with_all_arguments():
    sampler = _Echo()
    assert sampler([1, 2], 5, "x", dp_rank=3) == ([1, 2], [5, ("x",), {"dp_rank": 3}])
    assert sampler.save_checkpoint()["_states"] == {}


def test_has_cached_result_needs_dp_rank_and_matching_batch():
    sampler = _Echo()
    sampler.load_checkpoint({"_states": {"p": {"t": {0: {7: ([1], [1])}}}}})
    assert sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 7})
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 8})
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 1, "batch_index": 7})
    assert not sampler.has_cached_result("p", "t", {"batch_index": 7})
    assert not sampler.has_cached_result("p", "t", None)
    assert not sampler.has_cached_result("q", "t", {"dp_rank": 0, "batch_index": 7})
    assert not sampler.has_cached_result("p", "u", {"dp_rank": 0, "batch_index": 7})


def test_has_cached_result_missing_batch_index_means_none_key():
    sampler = _Echo()
    sampler.load_checkpoint({"_states": {"p": {"t": {0: {None: ([1], [1])}}}}})
    assert sampler.has_cached_result("p", "t", {"dp_rank": 0})


def test_clear_cache_forgets_one_partition_and_ignores_unknown():
    sampler = GRPOGroupNSampler(1)
    sampler([0, 1], 1, "t", "p", dp_rank=0, batch_index=0)
    sampler([0, 1], 1, "t", "q", dp_rank=0, batch_index=0)
    sampler.clear_cache("unknown")
    assert set(sampler.save_checkpoint()["_states"]) == {"p", "q"}
    sampler.clear_cache("p")
    assert set(sampler.save_checkpoint()["_states"]) == {"q"}
    assert sampler([5], 1, "t", "p", dp_rank=0, batch_index=0) == ([5], [5])


@pytest.mark.parametrize("bad", [0, -3])
def test_cache_bound_must_be_at_least_one(bad):
    with pytest.raises(ValueError, match=f"max_cached_batches must be >= 1, got {bad}"):
        GRPOGroupNSampler(1, max_cached_batches=bad)


@pytest.mark.parametrize("bad", [1.5, "4", True])
def test_cache_bound_must_be_int(bad):
    with pytest.raises(TypeError, match="max_cached_batches must be an int"):
        RankAwareSampler(max_cached_batches=bad)


def test_default_cache_bound_is_documented_value():
    assert DEFAULT_MAX_CACHED_BATCHES == 64
    assert GRPOGroupNSampler().max_cached_batches == 64
    assert RankAwareSampler(max_cached_batches=None).max_cached_batches is None


def test_load_checkpoint_rejects_bad_state():
    sampler = RankAwareSampler()
    with pytest.raises(TypeError, match="state must be a dict"):
        sampler.load_checkpoint([1, 2])
    with pytest.raises(ValueError, match="state must contain '_states'"):
        sampler.load_checkpoint({"other": 1})


def test_sampler_objects_survive_pickle_with_their_cache():
    sampler = RankAwareSampler()
    sampler([1, 2, 3], 2, 0, 0, "t", "p")
    clone = pickle.loads(pickle.dumps(sampler))
    assert clone([], 2, 0, 0, "t", "p") == ([1, 2], [1, 2])
    # The clone got a working lock of its own.
    assert clone([7, 8], 2, 1, 0, "t", "p") == ([7, 8], [7, 8])


# ---------------------------------------------------------------- SequentialSampler


def test_sequential_is_a_plain_slice():
    sampler = SequentialSampler()
    assert sampler([9, 3, 3, 1], 3) == ([9, 3, 3], [9, 3, 3])
    assert sampler([4, 5], 5) == ([4, 5], [4, 5])
    assert sampler([], 2) == ([], [])
    assert sampler.save_checkpoint()["_states"] == {}


def test_sequential_returns_independent_lists():
    ready = [1, 2, 3]
    sampled, consumed = SequentialSampler()(ready, 2, task_name="t", dp_rank=0)
    sampled.append(99)
    assert consumed == [1, 2] and ready == [1, 2, 3]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=20), st.integers(0, 25))
def test_sequential_property_matches_slice(ready, size):
    assert SequentialSampler()(ready, size) == (ready[:size], ready[:size])


# ---------------------------------------------------------------- GRPOGroupNSampler


def test_grpo_documented_examples():
    sampler = GRPOGroupNSampler(n_samples_per_prompt=3)
    assert sampler([0, 1, 3, 4, 6, 7], 6) == ([], [])
    assert sampler([0, 1, 3, 4, 5, 6, 7, 9, 10, 11], 6) == (
        [3, 4, 5, 9, 10, 11],
        [3, 4, 5, 9, 10, 11],
    )


def test_grpo_runs_need_not_be_aligned_and_input_is_sorted():
    sampler = GRPOGroupNSampler(n_samples_per_prompt=2)
    assert sampler([6, 5, 1, 2], 4) == ([1, 2, 5, 6], [1, 2, 5, 6])


def test_grpo_scan_jumps_past_a_taken_run():
    # [0,1] is taken, the scan jumps to 2; [2,3] is a run again.
    assert select_groups([0, 1, 2, 3, 4], 2, 2) == [[0, 1], [2, 3]]
    # duplicates break a run
    assert select_groups([0, 0, 1], 2, 1) == [[0, 1]]
    assert select_groups([0, 0, 2], 2, 1) is None


@pytest.mark.parametrize("bad", [0, -1])
def test_grpo_rejects_non_positive_group_size(bad):
    with pytest.raises(ValueError, match=f"n_samples_per_prompt must be positive, got {bad}"):
        GRPOGroupNSampler(n_samples_per_prompt=bad)


def test_grpo_rejects_non_int_group_size():
    with pytest.raises(TypeError, match="n_samples_per_prompt must be an int, got 2.0"):
        GRPOGroupNSampler(n_samples_per_prompt=2.0)


def test_grpo_batch_size_must_be_multiple():
    sampler = GRPOGroupNSampler(n_samples_per_prompt=4)
    with pytest.raises(
        ValueError, match=r"batch_size \(6\) must be a multiple of n_samples_per_prompt \(4\)"
    ):
        sampler(list(range(16)), 6)


def test_grpo_rejects_negative_and_non_int_batch_size():
    sampler = GRPOGroupNSampler(2)
    with pytest.raises(ValueError, match="batch_size must be >= 0, got -2"):
        sampler([0, 1], -2)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        sampler([0, 1], 2.0)


def test_grpo_zero_batch_returns_empty_and_caches_nothing():
    sampler = GRPOGroupNSampler(2)
    assert sampler([0, 1], 0, dp_rank=0, batch_index=0) == ([], [])
    assert sampler.save_checkpoint()["_states"] == {}


def test_grpo_negative_dp_rank_is_refused():
    with pytest.raises(ValueError, match="dp_rank -1 must be greater than or equal to 0"):
        GRPOGroupNSampler(1)([0], 1, dp_rank=-1, batch_index=0)


def test_grpo_caches_per_rank_and_batch_when_dp_rank_given():
    sampler = GRPOGroupNSampler(2)
    first = sampler([0, 1, 2, 3], 2, "t", "p", dp_rank=0, batch_index=0)
    assert first == ([0, 1], [0, 1])
    assert sampler.save_checkpoint()["_states"] == {"p": {"t": {0: {0: ([0, 1], [0, 1])}}}}
    # cached: ready_indexes ignored, even the multiple check is skipped
    assert sampler([], 3, "t", "p", dp_rank=0, batch_index=0) == first
    assert sampler([2, 3], 2, "t", "p", dp_rank=1, batch_index=0) == ([2, 3], [2, 3])
    assert sampler.has_cached_result("p", "t", {"dp_rank": 1, "batch_index": 0})


def test_grpo_without_dp_rank_caches_nothing():
    sampler = GRPOGroupNSampler(2)
    sampler([0, 1], 2, "t", "p")
    assert sampler.save_checkpoint()["_states"] == {}


def test_grpo_short_result_is_not_cached():
    sampler = GRPOGroupNSampler(2)
    assert sampler([0, 2], 2, "t", "p", dp_rank=0, batch_index=0) == ([], [])
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})


def test_grpo_cached_answer_cannot_be_corrupted_by_caller():
    sampler = GRPOGroupNSampler(1)
    sampled, consumed = sampler([0, 1], 2, dp_rank=0, batch_index=0)
    sampled.clear()
    consumed.append(9)
    assert sampler([], 2, dp_rank=0, batch_index=0) == ([0, 1], [0, 1])


def _reference_groups(ready, n, needed):
    """The scan rule spelled out step by step, as the spec words it."""
    ordered = sorted(ready)
    found, i = [], 0
    while i <= len(ordered) - n and len(found) < needed:
        window = ordered[i : i + n]
        if all(window[j + 1] - window[j] == 1 for j in range(n - 1)):
            found.append(window)
            i += n
        else:
            i += 1
    return found if len(found) == needed else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=40), st.integers(1, 5), st.integers(0, 6))
def test_select_groups_property_matches_scan_rule(ready, n, needed):
    groups = select_groups(ready, n, needed)
    assert groups == _reference_groups(ready, n, needed)
    if groups is not None and len(set(ready)) == len(ready):
        for group in groups:
            assert group == list(range(group[0], group[0] + n))
        flat = [i for g in groups for i in g]
        assert len(flat) == len(set(flat)) == needed * n


def test_grpo_bounded_cache_keeps_last_n_batches():
    sampler = GRPOGroupNSampler(1, max_cached_batches=3)
    for batch in range(5):
        sampler([batch], 1, "t", "p", dp_rank=0, batch_index=batch)
        sampler([batch + 100], 1, "t", "p", dp_rank=1, batch_index=batch)
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [2, 3, 4]
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][1]) == [2, 3, 4]
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 1})
    # bound is per (partition, task)
    sampler([7], 1, "u", "p", dp_rank=0, batch_index=0)
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [2, 3, 4]


def test_grpo_unbounded_cache_keeps_everything():
    sampler = GRPOGroupNSampler(1, max_cached_batches=None)
    for batch in range(100):
        sampler([batch], 1, "t", "p", dp_rank=0, batch_index=batch)
    assert len(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == 100


def test_grpo_checkpoint_round_trip_through_pickle():
    sampler = GRPOGroupNSampler(2, max_cached_batches=2)
    sampler([0, 1, 2, 3], 2, "t", "p", dp_rank=0, batch_index=0)
    sampler([2, 3], 2, "t", "p", dp_rank=0, batch_index=1)
    state = pickle.loads(pickle.dumps(sampler.save_checkpoint()))
    assert state["_states"] == {"p": {"t": {0: {0: ([0, 1], [0, 1]), 1: ([2, 3], [2, 3])}}}}
    restored = GRPOGroupNSampler(2, max_cached_batches=2)
    restored.load_checkpoint(state)
    assert restored([], 2, "t", "p", dp_rank=0, batch_index=1) == ([2, 3], [2, 3])
    # eviction order survives too: batch 0 is the oldest, so it goes first in both
    for s in (sampler, restored):
        s([8, 9], 2, "t", "p", dp_rank=0, batch_index=2)
        assert sorted(s.save_checkpoint()["_states"]["p"]["t"][0]) == [1, 2]


def test_checkpoint_is_a_snapshot():
    sampler = GRPOGroupNSampler(1)
    state = sampler.save_checkpoint()
    sampler([0], 1, "t", "p", dp_rank=0, batch_index=0)
    assert state["_states"] == {}


def test_load_upstream_style_checkpoint_rebuilds_eviction_order():
    sampler = GRPOGroupNSampler(1, max_cached_batches=2)
    sampler.load_checkpoint({"_states": {"p": {"t": {0: {0: ([0], [0]), 1: ([1], [1])}}}}})
    assert sampler([], 1, "t", "p", dp_rank=0, batch_index=0) == ([0], [0])
    sampler([5], 1, "t", "p", dp_rank=0, batch_index=2)
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [1, 2]


# ---------------------------------------------------------------- RankAwareSampler


def test_rank_aware_first_call_caches_plain_list():
    sampler = RankAwareSampler()
    assert sampler([5, 6, 7], 2, 0, 0, "t", "p") == ([5, 6], [5, 6])
    assert sampler.save_checkpoint()["_states"] == {"p": {"t": {0: {0: [5, 6]}}}}
    assert sampler([9, 10], 2, dp_rank=0, batch_index=0, task_name="t", partition_id="p") == (
        [5, 6],
        [5, 6],
    )
    assert sampler([9, 10], 2, 1, 0, "t", "p") == ([9, 10], [9, 10])


def test_rank_aware_short_batch_not_cached():
    sampler = RankAwareSampler()
    assert sampler([5], 2, 0, 0, "t", "p") == ([], [])
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})


def test_rank_aware_arguments_are_required():
    with pytest.raises(TypeError):
        RankAwareSampler()([1, 2], 1, dp_rank=0)


def test_rank_aware_negative_dp_rank():
    with pytest.raises(ValueError, match="dp_rank -2 must be greater than or equal to 0"):
        RankAwareSampler()([1, 2], 1, -2, 0, "t", "p")


def test_rank_aware_non_int_dp_rank():
    with pytest.raises(TypeError, match="dp_rank must be an int, got None"):
        RankAwareSampler()([1, 2], 1, None, 0, "t", "p")


def test_rank_aware_bounded_and_checkpointed():
    sampler = RankAwareSampler(max_cached_batches=2)
    for batch in range(4):
        sampler([batch * 10, batch * 10 + 1], 2, 0, batch, "t", "p")
    assert sorted(sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [2, 3]
    restored = RankAwareSampler()
    restored.load_checkpoint(pickle.loads(pickle.dumps(sampler.save_checkpoint())))
    assert restored([], 2, 0, 3, "t", "p") == ([30, 31], [30, 31])


@pytest.mark.parametrize(
    "module_name",
    [
        "seqbalance.samplers.base",
        "seqbalance.samplers._checks",
        "seqbalance.samplers.grpo",
        "seqbalance.samplers.seqlen_balanced",
    ],
)
def test_documented_examples(module_name):
    import doctest
    import importlib

    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
