"""Repeat requests for batches evicted from a bounded cache are refused, never answered afresh.

A tensor- or pipeline-parallel peer of a data-parallel rank asks for the same batch as the rank
that asked first; if the batch has been evicted meanwhile, a new answer would hand it different
samples from its peers (and, for the balanced sampler, reserve a second split nobody collects).
"""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import GRPOGroupNSampler, RankAwareSampler, SeqlenBalancedSampler
from seqbalance.samplers import cache

EVICTED = r"evicted from the cache \(max_cached_batches=1: .*raise max_cached_batches"


class Partition:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": 10 + i} for i in indexes}


class Loop:
    """A controller loop over one balanced sampler: consumed indexes are never offered again."""

    def __init__(self, sampler, pid="p", task="t"):
        self.sampler = sampler
        self.pid = pid
        self.task = task
        self.consumed: set[int] = set()

    def fetch(self, rank, batch, per_rank=2):
        ready = [i for i in range(400) if i not in self.consumed]
        sampled, consumed = self.sampler(
            ready,
            per_rank,
            task_name=self.task,
            partition_id=self.pid,
            dp_rank=rank,
            batch_index=batch,
            partition=Partition(),
        )
        self.consumed.update(consumed)
        return sampled


def _evicted_batch_zero(bound=1):
    """Batch 0 fully collected, then pushed out of a cache of ``bound`` batches."""
    loop = Loop(SeqlenBalancedSampler(1, 2, max_cached_batches=bound))
    first = [loop.fetch(0, 0), loop.fetch(1, 0)]
    for batch in range(1, bound + 1):
        loop.fetch(0, batch)
        loop.fetch(1, batch)
    return loop, first


# ---------------------------------------------------------------- SeqlenBalancedSampler


@pytest.mark.parametrize("rank", [0, 1])
def test_balanced_repeat_after_eviction_raises_and_builds_no_split(rank):
    loop, _ = _evicted_batch_zero()
    sampler = loop.sampler
    assert not sampler.has_cached_result("p", "t", {"dp_rank": rank, "batch_index": 0})
    before = sampler.save_checkpoint()
    with pytest.raises(ValueError, match=EVICTED) as info:
        loop.fetch(rank, 0)
    message = str(info.value)
    assert "batch_index 0 of partition_id 'p', task_name 't'" in message
    assert f"dp_rank {rank}" in message
    # nothing new was computed, reserved or cached for the refused request
    assert sampler.save_checkpoint() == before
    assert not sampler.has_cached_result("p", "t", {"dp_rank": rank, "batch_index": 0})


def test_balanced_cache_stays_bounded_after_a_refused_repeat():
    loop, _ = _evicted_batch_zero()
    with pytest.raises(ValueError):
        loop.fetch(0, 0)
    for batch in range(2, 8):
        assert loop.fetch(0, batch) and loop.fetch(1, batch)
    assert sorted(loop.sampler.save_checkpoint()["_states"]["p"]["t"][0]) == [7]
    assert not any(loop.sampler.save_checkpoint()["_uncollected"].values())


def test_balanced_repeat_within_the_bound_gets_the_same_share():
    loop = Loop(SeqlenBalancedSampler(1, 2, max_cached_batches=2))
    first = loop.fetch(0, 0)
    loop.fetch(1, 0)
    loop.fetch(0, 1)
    loop.fetch(1, 1)
    assert loop.fetch(0, 0) == first


def test_balanced_new_batches_are_still_served_after_evictions():
    loop, _ = _evicted_batch_zero()
    assert loop.fetch(0, 5) and loop.fetch(1, 5)
    assert loop.fetch(1, "warm-up") and loop.fetch(0, "warm-up")


def test_balanced_other_task_and_partition_are_not_refused():
    loop, first = _evicted_batch_zero()
    other_task = Loop(loop.sampler, task="u")
    other_pid = Loop(loop.sampler, pid="q")
    assert other_task.fetch(0, 0) and other_pid.fetch(0, 0)


def test_clear_cache_forgets_the_eviction_record():
    loop, _ = _evicted_batch_zero()
    loop.sampler.clear_cache("p")
    assert ("p", "t") not in loop.sampler.save_checkpoint()["_evicted"]
    assert loop.fetch(0, 0)  # batch 0 of a cleared partition may be computed afresh


def test_eviction_record_survives_checkpoints_and_pickling():
    loop, _ = _evicted_batch_zero()
    state = pickle.loads(pickle.dumps(loop.sampler.save_checkpoint()))
    assert state["_evicted"] == {("p", "t"): {0: None}}
    restored = SeqlenBalancedSampler(1, 2, max_cached_batches=1)
    restored.load_checkpoint(state)
    for sampler in (restored, pickle.loads(pickle.dumps(loop.sampler))):
        with pytest.raises(ValueError, match=EVICTED):
            Loop(sampler).fetch(1, 0)


def test_eviction_record_is_bounded_and_old_int_batches_stay_refused(monkeypatch):
    monkeypatch.setattr(cache, "EVICTED_RECORD_SIZE", 3)
    loop = Loop(SeqlenBalancedSampler(1, 2, max_cached_batches=1))
    for batch in range(10):
        loop.fetch(0, batch)
        loop.fetch(1, batch)
    state = loop.sampler.save_checkpoint()
    assert list(state["_evicted"][("p", "t")]) == [6, 7, 8]
    assert state["_evicted_floor"][("p", "t")] == {None: 5}
    for batch in (0, 5, 8):
        with pytest.raises(ValueError, match=f"batch_index {batch} of"):
            loop.fetch(1, batch)
    assert loop.fetch(0, 10)  # a new, higher batch index is fine


def test_eviction_record_of_non_int_batch_indexes_is_bounded(monkeypatch):
    monkeypatch.setattr(cache, "EVICTED_RECORD_SIZE", 2)
    loop = Loop(SeqlenBalancedSampler(1, 2, max_cached_batches=1))
    names = [f"b{i}" for i in range(6)]
    for name in names:
        loop.fetch(0, name)
        loop.fetch(1, name)
    state = loop.sampler.save_checkpoint()
    assert list(state["_evicted"][("p", "t")]) == ["b3", "b4"]
    assert ("p", "t") not in state["_evicted_floor"]
    with pytest.raises(ValueError, match="batch_index 'b4' of"):
        loop.fetch(0, "b4")


def test_a_batch_held_back_by_an_uncollected_share_is_never_refused():
    # Rank 1 is slow on batch 0: the batch stays cached, so its late request is served.
    loop = Loop(SeqlenBalancedSampler(1, 2, max_cached_batches=1))
    loop.fetch(0, 0)
    for batch in range(1, 5):
        loop.fetch(0, batch)
        loop.fetch(1, batch)
    share = loop.sampler.save_checkpoint()["_states"]["p"]["t"][1][0][0]
    assert loop.fetch(1, 0) == share
    # collected now, so the next batch evicts it, and a repeat is refused
    loop.fetch(0, 5)
    loop.fetch(1, 5)
    with pytest.raises(ValueError, match=EVICTED):
        loop.fetch(1, 0)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    bound=st.integers(1, 3),
    dp_size=st.integers(1, 3),
    n=st.integers(1, 2),
)
def test_property_a_repeat_gets_the_same_share_or_an_error(seed, bound, dp_size, n):
    """Whatever the interleaving of ranks and their peers, no (rank, batch) gets two answers."""
    rng = random.Random(seed)
    sampler = SeqlenBalancedSampler(n, dp_size, max_cached_batches=bound)
    loop = Loop(sampler)
    answers: dict[tuple[int, int], list[int]] = {}
    owner: dict[int, tuple[int, int]] = {}
    progress = [0] * dp_size
    newest = -1
    for _ in range(80):
        rank = rng.randrange(dp_size)
        if rng.random() < 0.4 and progress[rank] > 0:
            batch = rng.randrange(progress[rank])  # a peer repeating an earlier request
        else:
            batch = progress[rank]
            progress[rank] += 1
        before = sampler.save_checkpoint()
        try:
            share = loop.fetch(rank, batch, per_rank=n)
        except ValueError as exc:
            assert (rank, batch) in answers, f"first request refused: {exc}"
            assert "evicted" in str(exc)
            assert batch + bound <= newest  # only a peer lagging that far is told so
            continue
        except RuntimeError as exc:
            # a rank far ahead of a lagging one: too many shares outstanding; nothing dropped
            assert "would pass the bound" in str(exc) and (rank, batch) not in answers
            assert not sampler.has_cached_result("p", "t", {"dp_rank": rank, "batch_index": batch})
            for key, ranks in before["_uncollected"].items():
                assert not ranks or key in sampler.save_checkpoint()["_balanced_cache"]
            progress[rank] -= 1
            continue
        newest = max(newest, batch)
        assert share, "enough samples are always ready"
        if (rank, batch) in answers:
            assert share == answers[(rank, batch)]
        answers[(rank, batch)] = share
        for index in share:
            assert owner.setdefault(index, (rank, batch)) == (rank, batch)
    # batch b stays cached only while a rank still owes its share, or until a request for
    # b + bound or later arrives after its last share was collected (a repeat of the newest)
    if newest >= 0:
        loop.fetch(next(r for r in range(dp_size) if (r, newest) in answers), newest, per_rank=n)
    for cached in sampler.save_checkpoint()["_states"]["p"]["t"].get(0, {}):
        owed = any((rank, cached) not in answers for rank in range(dp_size))
        assert owed or cached + bound > newest


# ---------------------------------------------------------------- GRPOGroupNSampler / RankAwareSampler


def _grpo(sampler, rank, batch, ready):
    return sampler(ready, 2, "t", "p", dp_rank=rank, batch_index=batch)


def _rank_aware(sampler, rank, batch, ready):
    return sampler(ready, 2, rank, batch, "t", "p")


@pytest.mark.parametrize(
    "make, fetch",
    [
        (lambda: GRPOGroupNSampler(2, max_cached_batches=1), _grpo),
        (lambda: RankAwareSampler(max_cached_batches=1), _rank_aware),
    ],
    ids=["grpo", "rank_aware"],
)
def test_per_rank_samplers_refuse_a_repeat_after_eviction(make, fetch):
    sampler = make()
    assert fetch(sampler, 0, 0, [0, 1, 2, 3]) == ([0, 1], [0, 1])
    assert fetch(sampler, 0, 1, [2, 3]) == ([2, 3], [2, 3])  # evicts batch 0
    assert not sampler.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})
    with pytest.raises(ValueError, match=EVICTED) as info:
        fetch(sampler, 0, 0, [4, 5])
    assert "batch_index 0 of partition_id 'p', task_name 't'" in str(info.value)
    assert "dp_rank 0" in str(info.value)
    # another rank that never had batch 0 makes its own first request as before
    assert fetch(sampler, 1, 0, [4, 5]) == ([4, 5], [4, 5])
    # once that is evicted too, both ranks are refused
    fetch(sampler, 1, 1, [6, 7])
    for rank in (0, 1):
        with pytest.raises(ValueError, match=f"dp_rank {rank} "):
            fetch(sampler, rank, 0, [8, 9])
    # ranks 0..k-1 are recorded compactly as range(k)
    assert sampler.save_checkpoint()["_evicted"][("p", "t")][0] == range(2)
    state = pickle.loads(pickle.dumps(sampler.save_checkpoint()))
    restored = make()
    restored.load_checkpoint(state)
    with pytest.raises(ValueError, match="dp_rank 1 "):
        fetch(restored, 1, 0, [8, 9])


def test_only_the_ranks_that_held_an_evicted_batch_are_refused():
    sampler = GRPOGroupNSampler(1, max_cached_batches=1)
    sampler([0], 1, "t", "p", dp_rank=2, batch_index=0)
    sampler([1], 1, "t", "p", dp_rank=2, batch_index=1)
    assert sampler.save_checkpoint()["_evicted"][("p", "t")] == {0: frozenset({2})}
    with pytest.raises(ValueError, match="dp_rank 2 "):
        sampler([5], 1, "t", "p", dp_rank=2, batch_index=0)
    for rank in (0, 1, 3):
        assert sampler([5 + rank], 1, "t", "p", dp_rank=rank, batch_index=0) == ([5 + rank],) * 2


def test_grpo_without_dp_rank_is_never_refused():
    sampler = GRPOGroupNSampler(1, max_cached_batches=1)
    sampler([0], 1, "t", "p", dp_rank=0, batch_index=0)
    sampler([1], 1, "t", "p", dp_rank=0, batch_index=1)
    # uncached requests never repeat anything, so they are answered
    assert sampler([5], 1, "t", "p", batch_index=0) == ([5], [5])


def test_per_rank_high_water_marks_only_refuse_the_rank_that_was_served(monkeypatch):
    monkeypatch.setattr(cache, "EVICTED_RECORD_SIZE", 2)
    sampler = GRPOGroupNSampler(1, max_cached_batches=1)
    for batch in range(6):
        sampler([batch], 1, "t", "p", dp_rank=0, batch_index=batch)
    assert sampler.save_checkpoint()["_evicted_floor"][("p", "t")] == {0: 2}
    with pytest.raises(ValueError, match="batch_index 1 of"):
        sampler([9], 1, "t", "p", dp_rank=0, batch_index=1)
    # rank 1 lags far behind but asks for batch 1 for the first time: served
    assert sampler([9], 1, "t", "p", dp_rank=1, batch_index=1) == ([9], [9])
