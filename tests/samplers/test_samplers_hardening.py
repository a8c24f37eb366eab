"""Hostile input to the caching samplers: duplicate and malformed ready indexes, bad checkpoints.

The promises (samplers-spec "Hardening" 7, 8, 10): no index is handed out twice or lost, whatever
the ready lists and call order; a refused call or checkpoint leaves the sampler exactly as it was;
checkpoints from elsewhere load when they are consistent and are refused, naming both values,
when they conflict with the sampler; a lagging peer is announced before it fails.
"""

from __future__ import annotations

import copy
import logging
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import GRPOGroupNSampler, RankAwareSampler, SeqlenBalancedSampler
from seqbalance.samplers._checks import check_ready_indexes
from seqbalance.samplers.checkpoint import CHECKPOINT_FORMAT


class Partition:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": 1 + (i * 7919) % 101} for i in indexes}


def snapshot(sampler):
    """Everything a sampler holds, compared by value."""
    # __dict__ on purpose: stricter than save_checkpoint(), which omits e.g. the warned-once flag.
    return copy.deepcopy({k: v for k, v in sampler.__dict__.items() if k != "_lock"})


def balanced_call(sampler, ready, per_rank, rank, batch):
    return sampler(
        ready,
        per_rank,
        task_name="t",
        partition_id="p",
        dp_rank=rank,
        batch_index=batch,
        partition=Partition(),
    )


CALLERS = {
    "grpo": (
        lambda: GRPOGroupNSampler(2),
        lambda s, ready: s(ready, 4, "t", "p", dp_rank=0, batch_index=0),
    ),
    "rank_aware": (
        lambda: RankAwareSampler(),
        lambda s, ready: s(ready, 4, 0, 0, "t", "p"),
    ),
    "balanced": (
        lambda: SeqlenBalancedSampler(2, 2),
        lambda s, ready: balanced_call(s, ready, 2, 0, 0),
    ),
}


# ---------------------------------------------------------------- ready indexes


@pytest.mark.parametrize("kind", sorted(CALLERS))
def test_a_duplicated_ready_index_is_refused_and_changes_nothing(kind):
    make, call = CALLERS[kind]
    sampler = make()
    before = snapshot(sampler)
    with pytest.raises(ValueError, match="ready_indexes lists index 1 more than once"):
        call(sampler, [0, 1, 1, 0, 2, 3, 4, 5])
    assert snapshot(sampler) == before
    # the same call with a clean list works, and nothing is handed out twice
    sampled, _ = call(sampler, [0, 1, 2, 3, 4, 5])
    assert sampled and len(sampled) == len(set(sampled))


@pytest.mark.parametrize("kind", sorted(CALLERS))
@pytest.mark.parametrize(
    ("ready", "error", "message"),
    [
        ([0, 1, -2, 3], ValueError, r"ready_indexes\[2\] must be a non-negative index, got -2"),
        ([0, 1, 2.0, 3], TypeError, r"ready_indexes\[2\] must be an int, got 2.0 \(float\)"),
        ([0, True, 2, 3], TypeError, r"ready_indexes\[1\] must be an int, got True \(bool\)"),
        ([0, 1, None, 3], TypeError, r"ready_indexes\[2\] must be an int, got None"),
        ([0, 1, "2", 3], TypeError, r"ready_indexes\[2\] must be an int, got '2' \(str\)"),
        (
            {0, 1, 2, 3},
            TypeError,
            r"ready_indexes must be a list of int, got \{0, 1, 2, 3\} \(set\)",
        ),
        (iter([0, 1, 2, 3]), TypeError, "ready_indexes must be a list of int, got <list_iterator"),
        ("0123", TypeError, "ready_indexes must be a list of int, got '0123'"),
        (np.array([[0, 1], [2, 3]]), TypeError, "ready_indexes must be a 1-D integer array"),
        (np.array([0.0, 1.0, 2.0, 3.0]), TypeError, "ready_indexes must be a 1-D integer array"),
        (np.array([0, 1, 1, 2, 3]), ValueError, "lists index 1 more than once"),
    ],
)
def test_malformed_ready_indexes_are_refused_and_change_nothing(kind, ready, error, message):
    make, call = CALLERS[kind]
    sampler = make()
    before = snapshot(sampler)
    with pytest.raises(error, match=message):
        call(sampler, ready)
    assert snapshot(sampler) == before


@pytest.mark.parametrize("kind", sorted(CALLERS))
def test_numpy_and_tuple_ready_indexes_are_fine(kind):
    make, call = CALLERS[kind]
    for ready in (np.arange(6, dtype=np.uint32), tuple(range(6)), range(6)):
        sampled, consumed = call(make(), ready)
        assert sampled == consumed and sampled and len(sampled) == len(set(sampled))
        assert all(type(index) is int for index in sampled)


@pytest.mark.parametrize("kind", sorted(CALLERS))
def test_a_cache_hit_ignores_the_ready_list(kind):
    make, call = CALLERS[kind]
    sampler = make()
    first = call(sampler, [0, 1, 2, 3, 4, 5])
    assert call(sampler, [7, 7, -1, "x"]) == first


def test_balanced_sampler_refuses_duplicates_of_a_later_batch_without_losing_reservations():
    sampler = SeqlenBalancedSampler(1, 2)
    balanced_call(sampler, list(range(8)), 2, 0, 0)
    before = snapshot(sampler)
    with pytest.raises(ValueError, match="index 5 more than once"):
        balanced_call(sampler, [4, 5, 5, 6, 7], 2, 0, 1)
    assert snapshot(sampler) == before
    assert (
        balanced_call(sampler, [], 2, 1, 0)[0]
        == sampler.save_checkpoint()["_states"]["p"]["t"][1][0][0]
    )


def test_sequential_sampler_stays_a_plain_slice():
    from seqbalance import SequentialSampler

    assert SequentialSampler()([3, 3, 1], 2) == ([3, 3], [3, 3])


def test_check_ready_indexes_copies_the_list():
    ready = [2, 0, 1]
    checked = check_ready_indexes(ready)
    assert checked == ready and checked is not ready


# One step of a controller: which rank asks for which batch, and how the ready list is spoilt.
STEP = st.tuples(
    st.integers(0, 3),  # dp_rank
    st.integers(0, 5),  # batch_index
    st.sampled_from(["clean", "duplicate", "shuffled", "negative"]),
    st.integers(0, 10**6),  # which index to spoil
)


@settings(max_examples=150)
@given(
    n=st.integers(1, 3),
    dp_size=st.integers(1, 4),
    groups_per_rank=st.integers(1, 3),
    bound=st.sampled_from([None, 1, 2, 4]),
    steps=st.lists(STEP, min_size=1, max_size=40),
)
def test_property_balanced_sampler_hands_nothing_out_twice_and_loses_nothing(
    n, dp_size, groups_per_rank, bound, steps
):
    """Any call sequence, any spoilt ready lists: every index to at most one (rank, batch)."""
    per_rank = n * groups_per_rank
    sampler = SeqlenBalancedSampler(n, dp_size, max_cached_batches=bound)
    produced = list(range(n * dp_size * 12))
    consumed: set[int] = set()
    owner: dict[int, tuple[int, int]] = {}
    answers: dict[tuple[int, int], list[int]] = {}
    for rank, batch, spoil, which in steps:
        rank %= dp_size
        ready = [i for i in produced if i not in consumed]
        if ready and spoil == "duplicate":
            ready.insert(which % len(ready), ready[which % len(ready)])
        elif ready and spoil == "negative":
            ready[which % len(ready)] = -1 - which
        elif spoil == "shuffled":
            ready = ready[which % (len(ready) or 1) :] + ready[: which % (len(ready) or 1)]
        cached = sampler.has_cached_result("p", "t", {"dp_rank": rank, "batch_index": batch})
        before = snapshot(sampler)
        try:
            sampled, consumed_now = balanced_call(sampler, ready, per_rank, rank, batch)
        except ValueError as exc:
            # a refused call (spoilt list on a first call, or a repeat of an evicted batch)
            # changes nothing at all
            assert "ready_indexes" in str(exc) or "evicted" in str(exc)
            assert not cached or "evicted" in str(exc)
            assert snapshot(sampler) == before
            continue
        except RuntimeError as exc:
            # too many shares outstanding (a rank far ahead): refused, nothing cached or dropped
            assert "would pass the bound" in str(exc) and not cached
            assert not sampler.has_cached_result("p", "t", {"dp_rank": rank, "batch_index": batch})
            for key, ranks in before["_uncollected"].items():
                assert not ranks or key in sampler.save_checkpoint()["_balanced_cache"]
            continue
        assert sampled == consumed_now and len(sampled) == len(set(sampled))
        if (rank, batch) in answers:
            assert sampled == answers[(rank, batch)]
        elif sampled:
            answers[(rank, batch)] = sampled
        for index in sampled:
            assert owner.setdefault(index, (rank, batch)) == (rank, batch), (
                f"index {index} handed to {owner[index]} and to {(rank, batch)}"
            )
        consumed.update(consumed_now)
        # nothing lost: a cached split's shares are disjoint whole groups, and its ranks' answers
        for (_, _, cached_batch), shares in sampler.save_checkpoint()["_balanced_cache"].items():
            everything = [index for share in shares for index in share]
            assert len(everything) == len(set(everything))
            assert all(len(share) % n == 0 for share in shares)
            for r, share in enumerate(shares):
                if (r, cached_batch) in answers:
                    assert answers[(r, cached_batch)] == share


@settings(max_examples=100)
@given(
    kind=st.sampled_from(["grpo", "rank_aware"]),
    steps=st.lists(STEP, min_size=1, max_size=30),
)
def test_property_per_rank_samplers_never_repeat_an_index_within_an_answer(kind, steps):
    sampler = GRPOGroupNSampler(2, max_cached_batches=2) if kind == "grpo" else RankAwareSampler()
    answers: dict[tuple[int, int], list[int]] = {}
    consumed: set[int] = set()
    for rank, batch, spoil, which in steps:
        ready = [i for i in range(40) if i not in consumed]
        if ready and spoil == "duplicate":
            ready.insert(which % len(ready), ready[which % len(ready)])
        before = snapshot(sampler)
        try:
            if kind == "grpo":
                sampled, _ = sampler(ready, 4, "t", "p", dp_rank=rank, batch_index=batch)
            else:
                sampled, _ = sampler(ready, 4, rank, batch, "t", "p")
        except ValueError:
            assert snapshot(sampler) == before
            continue
        assert len(sampled) == len(set(sampled))
        assert answers.setdefault((rank, batch), sampled) == sampled
        consumed.update(sampled)


# ---------------------------------------------------------------- checkpoints


def busy_balanced_sampler(dp_size=2):
    sampler = SeqlenBalancedSampler(1, dp_size, max_cached_batches=4)
    balanced_call(sampler, list(range(20)), 2, 0, 0)
    balanced_call(sampler, list(range(20)), 2, 0, 1)
    return sampler


def test_save_checkpoint_records_format_kind_and_sizes():
    state = busy_balanced_sampler().save_checkpoint()
    assert state["format_version"] == CHECKPOINT_FORMAT
    assert state["sampler"] == "SeqlenBalancedSampler"
    assert state["n_samples_per_prompt"] == 1 and state["dp_size"] == 2
    assert RankAwareSampler().save_checkpoint()["sampler"] == "RankAwareSampler"
    assert "dp_size" not in GRPOGroupNSampler(3).save_checkpoint()
    assert GRPOGroupNSampler(3).save_checkpoint()["n_samples_per_prompt"] == 3


def test_checkpoint_from_another_dp_size_is_refused_naming_both():
    state = busy_balanced_sampler(dp_size=4).save_checkpoint()
    sampler = busy_balanced_sampler(dp_size=2)
    before = snapshot(sampler)
    with pytest.raises(ValueError, match="saved with dp_size=4; this sampler has dp_size=2"):
        sampler.load_checkpoint(state)
    assert snapshot(sampler) == before


def test_unlabelled_checkpoint_from_another_dp_size_is_refused_by_its_shares():
    state = busy_balanced_sampler(dp_size=4).save_checkpoint()
    for key in ("format_version", "sampler", "dp_size", "n_samples_per_prompt"):
        del state[key]
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(ValueError, match=r"4 ranks, so it was saved with dp_size >= 4.*dp_size=2"):
        sampler.load_checkpoint(state)
    ranks = state["_states"]["p"]["t"]
    kept = ranks.pop(1), ranks.pop(3)
    with pytest.raises(ValueError, match=r"dp_rank 2, so it was saved with dp_size > 2.*dp_size=2"):
        sampler.load_checkpoint(state)
    ranks[1], ranks[3] = kept
    del state["_states"]["p"]["t"][2], state["_states"]["p"]["t"][3]
    with pytest.raises(ValueError, match="has 4 shares, so it was saved with dp_size=4.*dp_size=2"):
        sampler.load_checkpoint(state)
    unchanged = sampler.save_checkpoint()
    assert unchanged["_states"] == {} and unchanged["_balanced_cache"] == {}
    # the other way round: shares for 2 ranks into a sampler of 4 cannot rebuild the split
    small = busy_balanced_sampler(dp_size=2).save_checkpoint()
    upstream = {"_states": small["_states"]}
    with pytest.raises(
        ValueError, match=r"shares for dp_ranks \[0, 1\], not for each of the dp_size=4"
    ):
        SeqlenBalancedSampler(1, 4).load_checkpoint(upstream)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        (
            {"_states": [[1, 2, 3]]},
            TypeError,
            r"checkpoint _states must be a dict, got \[\[1, 2, 3\]\]",
        ),
        ({"_states": {"p": [1]}}, TypeError, r"_states\['p'\] must be a dict"),
        ({"_states": {"p": {"t": {-1: {}}}}}, ValueError, "dp_rank must be >= 0, got -1"),
        ({"_states": {"p": {"t": {"0": {}}}}}, TypeError, "must be an int, got '0'"),
        ({"_states": {"p": {"t": {0: {0: [1, 2, 3]}}}}}, ValueError, r"\(sampled, consumed\) pair"),
        ({"_states": {"p": {"t": {0: {0: [1, 2]}}}}}, TypeError, "list of indexes, got 1"),
        ({"_states": {"p": {"t": {0: {0: ([1, -2], [1])}}}}}, ValueError, "must be >= 0, got -2"),
        ({"_states": {"p": {"t": {0: {0: ([1, 1], [1])}}}}}, ValueError, "more than once"),
        (
            {"_states": {"p": {"t": {0: {0: ([1, "x"], [1])}}}}},
            TypeError,
            "must be an int, got 'x'",
        ),
        ({"_states": {}, "format_version": 99}, ValueError, "unknown version 99"),
        (
            {"_states": {}, "sampler": "RankAwareSampler"},
            ValueError,
            "saved by a 'RankAwareSampler'",
        ),
        ({"_states": {}, "n_samples_per_prompt": 4}, ValueError, "n_samples_per_prompt=4; this"),
        ({"_states": {}, "_evicted": {"p": {}}}, TypeError, "_evicted keys must be 2-tuples"),
        (
            {"_states": {}, "_evicted": {("p", "t"): {0: "all"}}},
            TypeError,
            "must be a set of ranks",
        ),
        ({"_states": {}, "_evicted_floor": {("p", "t"): {0: 1.5}}}, TypeError, "must be an int"),
        ({"_states": {}, "_batch_order": {("p", "t"): 3}}, TypeError, "must be a list"),
        ({"_states": {}, "_uncollected": {("p", "t", 0): {0}}}, ValueError, "no cached split"),
        (
            {"_states": {}, "_balanced_cache": {("p", "t", 0): [[0, 1], [1, 2]]}},
            ValueError,
            "index 1",
        ),
        (
            {
                "_states": {},
                "_balanced_cache": {("p", "t", 0): [[0], [1]], ("p", "t", 1): [[2], [0]]},
            },
            ValueError,
            "index 0 of partition_id 'p', task_name 't' is in the splits of batch_index 0 and 1",
        ),
        ([("_states", {})], TypeError, "state must be a dict"),
    ],
)
def test_malformed_checkpoints_are_refused_and_change_nothing(state, error, message):
    sampler = busy_balanced_sampler()
    before = snapshot(sampler)
    with pytest.raises(error, match=message):
        sampler.load_checkpoint(state)
    assert snapshot(sampler) == before


def test_rank_aware_checkpoint_holds_plain_lists():
    with pytest.raises(TypeError, match="must be a list of indexes, got 5"):
        RankAwareSampler().load_checkpoint({"_states": {"p": {"t": {0: {0: 5}}}}})
    with pytest.raises(ValueError, match="not whole groups of n_samples_per_prompt=2"):
        GRPOGroupNSampler(2).load_checkpoint({"_states": {"p": {"t": {0: {0: ([1, 2, 3], [1])}}}}})


def test_upstream_style_balanced_checkpoint_rebuilds_splits_and_reservations():
    original = busy_balanced_sampler()
    upstream = {"_states": pickle.loads(pickle.dumps(original.save_checkpoint()["_states"]))}
    restored = SeqlenBalancedSampler(1, 2, max_cached_batches=4)
    restored.load_checkpoint(upstream)
    saved, loaded = original.save_checkpoint(), restored.save_checkpoint()
    assert loaded["_balanced_cache"] == saved["_balanced_cache"]
    # only rank 0 collected; an upstream checkpoint cannot tell, so every cached index stays
    # reserved as handed out until a ready list omits it
    rank0 = sorted(i for batch in (0, 1) for i in saved["_states"]["p"]["t"][0][batch][0])
    assert saved["_handed_out"] == {("p", "t"): rank0}
    assert loaded["_handed_out"] == {("p", "t"): list(range(8))}
    # a later batch never reuses the restored batches' indexes
    fresh = balanced_call(restored, list(range(20)), 2, 1, 2)[0]
    taken = {i for shares in saved["_balanced_cache"].values() for share in shares for i in share}
    assert fresh and not set(fresh) & taken
    assert balanced_call(restored, [], 2, 1, 0) == balanced_call(original, [], 2, 1, 0)


def test_checkpoint_round_trip_is_exact():
    sampler = busy_balanced_sampler()
    clone = SeqlenBalancedSampler(1, 2, max_cached_batches=4)
    clone.load_checkpoint(pickle.loads(pickle.dumps(sampler.save_checkpoint())))
    for s in (sampler, clone):
        balanced_call(s, [], 2, 1, 0)
        balanced_call(s, list(range(20)), 2, 0, 5)
    assert clone.save_checkpoint() == sampler.save_checkpoint()


# ---------------------------------------------------------------- counts, repr, lagging peers


def test_dp_size_above_two_to_the_24_is_refused():
    with pytest.raises(
        ValueError, match=r"dp_size must be <= 2\*\*24 \(16777216\), got 1000000000000"
    ):
        SeqlenBalancedSampler(1, 10**12)
    assert SeqlenBalancedSampler(1, 2**24).dp_size == 2**24


def test_repr_shows_the_bound_its_unit_and_the_eviction_rule():
    text = repr(SeqlenBalancedSampler(2, 4, max_cached_batches=8))
    assert text.startswith("SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=4, ")
    assert "max_cached_batches=8 (batch b of a (partition_id, task_name) is evicted when a " in text
    assert "request for batch b + 8 or later arrives" in text
    assert "only once every dp_rank has collected its share" in text
    assert "a handed-out index stays reserved until a later ready_indexes omits it" in text
    assert "max_cached_batches=None (every batch kept)" in repr(
        RankAwareSampler(max_cached_batches=None)
    )


def test_a_peer_lagging_within_one_batch_of_the_bound_is_logged_once(caplog):
    sampler = GRPOGroupNSampler(1, max_cached_batches=3)
    for batch in range(3):
        sampler([batch], 1, "t", "p", dp_rank=0, batch_index=batch)
    with caplog.at_level(logging.WARNING, logger="seqbalance.samplers.cache"):
        sampler([], 1, "t", "p", dp_rank=0, batch_index=1)  # one newer batch: fine
        assert caplog.records == []
        sampler([], 1, "t", "p", dp_rank=0, batch_index=0)  # two newer: next one evicts it
        sampler([], 1, "t", "p", dp_rank=0, batch_index=0)
    assert len(caplog.records) == 1
    assert "batch_index 0" in caplog.text and "max_cached_batches=3" in caplog.text
    # and the warning was right: one more batch, and a peer's repeat is refused
    sampler([3], 1, "t", "p", dp_rank=0, batch_index=3)
    with pytest.raises(ValueError, match="evicted"):
        sampler([], 1, "t", "p", dp_rank=0, batch_index=0)


def test_lagging_warning_survives_a_checkpoint_and_old_pickles():
    sampler = GRPOGroupNSampler(1, max_cached_batches=2)
    for batch in range(2):
        sampler([batch], 1, "t", "p", dp_rank=0, batch_index=batch)
    restored = GRPOGroupNSampler(1, max_cached_batches=2)
    restored.load_checkpoint(sampler.save_checkpoint())
    assert restored.save_checkpoint() == sampler.save_checkpoint()
    # a sampler pickled before positions existed: its first-cached order, nothing else
    state = sampler.__getstate__()
    state["_batch_order"] = {
        key: dict.fromkeys(order)
        for key, order in sampler.save_checkpoint()["_batch_order"].items()
    }
    for name in ("_positions", "_queue", "_held", "_horizon", "_next_sequence", "_warned_lagging"):
        del state[name]
    old = GRPOGroupNSampler.__new__(GRPOGroupNSampler)
    old.__setstate__(state)
    assert old.save_checkpoint() == sampler.save_checkpoint()
    # and it evicts by the same rule: batch 0 goes when batch 2 is asked for
    for s in (sampler, restored, old):
        s([2], 1, "t", "p", dp_rank=0, batch_index=2)
        with pytest.raises(ValueError, match="evicted"):
            s([], 1, "t", "p", dp_rank=0, batch_index=0)
