"""Nothing handed out twice when ranks drift apart, peers repeat and consumption is recorded late.

samplers-spec item 5 (issue 23): batch b is evicted only when a request for batch
b + max_cached_batches arrives; a handed-out index stays reserved until a later ready_indexes
omits it; past 2 * max_cached_batches * dp_size * batch_size live reservations the sampler
raises RuntimeError rather than drop one; a peer repeating a request at once is served.

Everything here goes through the public API (calls, ``has_cached_result``, ``save_checkpoint``
and the ``_states`` layout that TransferQueue reads).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import seqbalance
from seqbalance import SeqlenBalancedSampler


class Lengths:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": 10 + (i * 7919) % 97} for i in indexes}


P = Lengths()


def call(sampler, ready, rank, batch, per_rank=1):
    return sampler(
        ready,
        per_rank,
        task_name="t",
        partition_id="p",
        dp_rank=rank,
        batch_index=batch,
        partition=P,
    )


def test_the_issue_repro_hands_nothing_out_twice():
    # ready lists as a controller passes them before it has seen rank 1's consumption
    s = seqbalance.SeqlenBalancedSampler(1, 2, max_cached_batches=2)
    given = {}
    for b in range(3):
        given[(0, b)] = s(list(range(100)), 1, dp_rank=0, batch_index=b, partition=P)[0]
    stale = [i for i in range(100) if i not in (1, 3, 5)]
    given[(1, 0)] = s(stale, 1, dp_rank=1, batch_index=0, partition=P)[0]
    given[(0, 3)] = s(stale, 1, dp_rank=0, batch_index=3, partition=P)[0]
    given[(1, 3)] = s([], 1, dp_rank=1, batch_index=3, partition=P)[0]
    handed = [i for share in given.values() for i in share]
    assert len(handed) == len(set(handed)) == 6, given


def test_a_peer_repeating_at_once_is_served_not_told_evicted():
    s = SeqlenBalancedSampler(1, 2, max_cached_batches=2)
    ready = list(range(100))
    for b in range(3):
        call(s, ready, 0, b)
    first = call(s, ready, 1, 0)  # the last share of batch 0, two newer batches cached
    assert call(s, ready, 1, 0) == first  # its tensor-parallel peer, at once
    assert call(s, ready, 1, 1) and call(s, ready, 1, 0) == first  # still within the bound
    # a request for batch 0 + 2 arrives: the peer now lags that far, and is told so
    call(s, ready, 0, 2)
    with pytest.raises(ValueError, match=r"batch_index 0 .*evicted.*max_cached_batches=2"):
        call(s, ready, 1, 0)


def test_a_handed_out_index_stays_reserved_after_eviction_until_a_ready_list_omits_it():
    s = SeqlenBalancedSampler(1, 1, max_cached_batches=2)
    ready = list(range(10))
    assert call(s, ready, 0, 0)[0] == [0]
    assert call(s, ready, 0, 1)[0] == [1]
    # the caller has not recorded index 0 yet: evicted from the cache, still reserved
    assert call(s, ready, 0, 2)[0] == [2]
    assert not s.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})
    assert call(s, ready, 0, 3)[0] == [3]
    assert s.save_checkpoint()["_handed_out"] == {("p", "t"): [0, 1, 2, 3]}
    # a list without 0 and 2 (their consumption recorded) releases them, and only them
    assert call(s, [1, 3, 4, 5], 0, 4)[0] == [4]
    assert s.save_checkpoint()["_handed_out"] == {("p", "t"): [1, 3, 4]}


def test_a_ready_list_read_before_a_consumption_was_recorded_never_hands_it_out_again():
    # a thread reads its list, is descheduled; meanwhile index 0 is handed out, recorded, and a
    # fresher list omits it (releasing the live reservation); then the stale list arrives
    s = SeqlenBalancedSampler(1, 1, max_cached_batches=2)
    stale = list(range(10))
    assert call(s, stale, 0, 0)[0] == [0]
    assert call(s, list(range(1, 10)), 0, 1)[0] == [1]
    assert s.save_checkpoint()["_handed_out"] == {("p", "t"): [1]}
    assert call(s, stale, 0, 2)[0] == [2]
    # the history of handed-out indexes survives a checkpoint
    state = s.save_checkpoint()
    assert state["_handed_history"] == {("p", "t"): [(0, 3)]}
    restored = SeqlenBalancedSampler(1, 1, max_cached_batches=2)
    restored.load_checkpoint(state)
    assert call(restored, stale, 0, 3)[0] == call(s, stale, 0, 3)[0] == [3]


def test_history_checkpoints_are_checked_before_use():
    s = SeqlenBalancedSampler(1, 1)
    for bad, error in [
        ({("p", "t"): [(3, 2)]}, ValueError),
        ({("p", "t"): [(0, 4), (2, 6)]}, ValueError),
        ({("p", "t"): [(0, 1)] * 5000}, ValueError),
        ({("p", "t"): range(10**12)}, TypeError),
        ({("p", "t"): [(0, "x")]}, TypeError),
    ]:
        with pytest.raises(error, match="_handed_history"):
            s.load_checkpoint({"_states": {}, "_handed_history": bad})
    assert s.save_checkpoint()["_handed_history"] == {}


def test_past_the_bound_of_live_reservations_the_sampler_raises_and_drops_nothing():
    s = SeqlenBalancedSampler(1, 2, max_cached_batches=2)  # bound: 2 * 2 * 2 * 1 = 8
    ready = list(range(100))  # a caller that never records consumption
    for b in range(4):
        assert call(s, ready, 0, b)[0] and call(s, ready, 1, b)[0]
    before = s.save_checkpoint()
    with pytest.raises(RuntimeError, match=r"8 reserved indexes.*bound of 2 \* max_cached_batches"):
        call(s, ready, 0, 4)
    assert not s.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 4})
    assert s.save_checkpoint()["_handed_out"] == before["_handed_out"]
    # once the caller's ready list shows the consumption, it goes on
    handed = set(before["_handed_out"][("p", "t")])
    assert len(handed) == 8
    fresh = [i for i in ready if i not in handed]
    assert not set(call(s, fresh, 0, 4)[0]) & handed


def test_a_pending_share_is_never_dropped_by_the_bound():
    s = SeqlenBalancedSampler(1, 2, max_cached_batches=1)  # bound: 2 * 1 * 2 * 1 = 4
    ready = list(range(100))
    call(s, ready, 0, 0)
    call(s, ready, 0, 1)  # rank 1 owes batches 0 and 1
    with pytest.raises(RuntimeError, match="2 in shares not yet collected"):
        call(s, [i for i in ready if i > 1], 0, 2)
    late = [call(s, [], 1, b)[0] for b in (0, 1)]
    assert all(late) and not set(late[0]) & set(late[1])


def test_unbounded_sampler_never_raises_for_reservations():
    s = SeqlenBalancedSampler(1, 2, max_cached_batches=None)
    ready = list(range(1000))
    for b in range(200):
        call(s, ready, 0, b)  # rank 1 never collects; nothing is ever evicted
    assert len(s.save_checkpoint()["_states"]["p"]["t"][1]) == 200


@pytest.mark.parametrize("skipped", [False, True])
def test_reservations_and_cache_stay_flat_over_many_steps(monkeypatch, skipped):
    """The bookkeeping of a long run does not grow with the number of steps.

    ``skipped``: the producer makes twice what is consumed and old samples drop out of the
    ready window unused, so the handed-out history has a hole per step; it stays capped.
    """
    monkeypatch.setattr(seqbalance.samplers.reservations, "HISTORY_INTERVALS", 16)
    s = SeqlenBalancedSampler(2, 2, max_cached_batches=4)
    consumed: set[int] = set()
    produced = 0
    sizes = []
    for step in range(3000):
        produced = (8 if skipped else 4) * (step + 2)
        for rank in (1, 0) if step % 3 else (0, 1):
            ready = [i for i in range(max(0, produced - 64), produced) if i not in consumed]
            share = call(s, ready, rank, step, per_rank=2)[0]
            assert share
            consumed.update(share)
        if step % 500 == 499:
            state = s.save_checkpoint()
            sizes.append(
                (
                    len(state["_handed_out"].get(("p", "t"), [])),
                    len(state["_balanced_cache"]),
                    len(state["_batch_order"][("p", "t")]),
                    len(state["_evicted"][("p", "t")]),
                    len(state["_handed_history"][("p", "t")]),
                )
            )
        consumed = {i for i in consumed if i >= produced - 64}
    assert all(handed <= 4 and cached <= 4 and order <= 4 for handed, cached, order, *_ in sizes)
    assert sizes[-1][3] <= seqbalance.samplers.cache.EVICTED_RECORD_SIZE
    assert all(intervals <= (16 if skipped else 1) for *_, intervals in sizes), sizes


# ---------------------------------------------------------------- threads: the README loop


def run_readme_loop(dp_size, steps, bound, peers=1, seed=0):
    """The README's next_batch loop, one thread per (dp_rank, peer); returns every answer."""
    sampler = SeqlenBalancedSampler(
        n_samples_per_prompt=2, dp_size=dp_size, max_cached_batches=bound
    )
    lock = threading.Lock()
    produced = set(range(2 * 2 * dp_size * steps + 64))
    consumed: set[int] = set()
    answers: list[tuple[int, int, tuple[int, ...]]] = []
    retries = [0]
    lagging = [0]
    errors: list[BaseException] = []

    def next_batch(dp_rank, step):
        while True:
            with lock:
                ready = sorted(produced - consumed)
            try:
                sampled, to_consume = sampler(
                    ready,
                    2,
                    task_name="actor",
                    partition_id="epoch_0",
                    dp_rank=dp_rank,
                    batch_index=step,
                    partition=P,
                )
            except RuntimeError:
                # too far ahead of a slow rank: wait for it, as a caller must
                retries[0] += 1
                time.sleep(0.0005)
                continue
            with lock:
                consumed.update(to_consume)
            return sampled

    def worker(dp_rank, peer):
        rng = random.Random(seed * 1000 + dp_rank * 10 + peer)
        try:
            for step in range(steps):
                try:
                    sampled = next_batch(dp_rank, step)
                except ValueError as exc:
                    # a peer this far behind is told so (and would stop); it gets nothing
                    assert peers > 1 and "evicted" in str(exc), exc
                    lagging[0] += 1
                    continue
                with lock:
                    answers.append((dp_rank, step, tuple(sampled)))
                if rng.random() < 0.05:
                    time.sleep(0.001 * rng.randrange(4))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(rank, peer))
        for rank in range(dp_size)
        for peer in range(peers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return answers


def duplicates(answers):
    owner: dict[int, tuple[int, int]] = {}
    twice = []
    for rank, step, share in answers:
        for index in share:
            if owner.setdefault(index, (rank, step)) != (rank, step):
                twice.append(index)
    return twice


def test_four_threads_of_the_readme_loop_hand_nothing_out_twice():
    answers = run_readme_loop(dp_size=4, steps=300, bound=8)
    assert duplicates(answers) == []
    by_key = {}
    for rank, step, share in answers:
        assert share, f"rank {rank} step {step} got an empty share"
        assert by_key.setdefault((rank, step), share) == share


def test_two_ranks_with_two_peers_each_hand_nothing_out_twice():
    answers = run_readme_loop(dp_size=2, steps=200, bound=4, peers=2, seed=1)
    assert duplicates(answers) == []
    by_key = {}
    for rank, step, share in answers:
        assert by_key.setdefault((rank, step), share) == share


# ---------------------------------------------------------------- the state machine


class Controller(RuleBasedStateMachine):
    """Several ranks, their tensor-parallel peers, stale ready lists and late consumption.

    A rank reads its ready list (``read``), possibly long before it calls the sampler
    (``fetch``); the controller applies consumption records only when ``apply`` runs, oldest
    first, so the sampler sees lists from before and after any consumption. All samples are
    produced up front (the README's loop).
    """

    def __init__(self):
        super().__init__()
        self.sampler = None

    @precondition(lambda self: self.sampler is None)
    @rule(
        n=st.integers(1, 2),
        dp_size=st.integers(1, 3),
        groups=st.integers(1, 2),
        bound=st.integers(1, 3),
    )
    def start(self, n, dp_size, groups, bound):
        self.n, self.dp_size, self.bound = n, dp_size, bound
        self.per_rank = groups * n
        self.sampler = SeqlenBalancedSampler(n, dp_size, max_cached_batches=bound)
        self.produced = list(range(n * 400))
        self.consumed: set[int] = set()
        self.queue: deque[list[int]] = deque()  # consumption not yet applied
        self.snapshots: dict[int, list[int]] = {}
        self.next_batch = [0] * dp_size
        self.answers: dict[tuple[int, int], list[int]] = {}
        self.owner: dict[int, tuple[int, int]] = {}
        self.newest = -1  # the largest batch index any call asked for

    def ready_now(self):
        return [i for i in self.produced if i not in self.consumed]

    @precondition(lambda self: self.sampler is not None)
    @rule(rank=st.integers(0, 2))
    def read(self, rank):
        self.snapshots[rank % self.dp_size] = self.ready_now()

    @precondition(lambda self: self.sampler is not None)
    @rule(count=st.integers(1, 3))
    def apply(self, count):
        for _ in range(min(count, len(self.queue))):
            self.consumed.update(self.queue.popleft())

    def _call(self, rank, batch, ready):
        was_cached = self.sampler.has_cached_result(
            "p", "t", {"dp_rank": rank, "batch_index": batch}
        )
        self.newest = max(self.newest, batch)
        try:
            sampled, consumed = call(self.sampler, ready, rank, batch, self.per_rank)
        except RuntimeError as exc:
            assert "would pass the bound" in str(exc) and not was_cached
            assert not self.sampler.has_cached_result(
                "p", "t", {"dp_rank": rank, "batch_index": batch}
            )
            return None
        assert sampled == consumed
        if not sampled:
            assert not was_cached, "a cached share is never empty"
            return None
        if (rank, batch) in self.answers:
            assert sampled == self.answers[(rank, batch)]
        self.answers[(rank, batch)] = sampled
        for index in sampled:
            assert self.owner.setdefault(index, (rank, batch)) == (rank, batch), (
                f"index {index} handed to {self.owner[index]} and to {(rank, batch)}"
            )
        self.queue.append(list(consumed))
        return sampled

    @precondition(lambda self: self.sampler is not None)
    @rule(rank=st.integers(0, 2), stale=st.booleans())
    def fetch(self, rank, stale):
        rank %= self.dp_size
        batch = self.next_batch[rank]
        ready = self.snapshots.pop(rank, None) if stale else None
        if self._call(rank, batch, self.ready_now() if ready is None else ready) is not None:
            self.next_batch[rank] += 1

    @precondition(lambda self: self.sampler is not None)
    @rule(rank=st.integers(0, 2), back=st.integers(1, 4))
    def peer_repeats(self, rank, back):
        rank %= self.dp_size
        batch = self.next_batch[rank] - back
        if batch < 0:
            return
        lagging = batch + self.bound <= self.newest
        try:
            self._call(rank, batch, [])
        except ValueError as exc:
            assert "evicted" in str(exc)
            assert lagging, f"batch {batch} refused with the newest request at {self.newest}"

    @invariant()
    def nothing_lost(self):
        if self.sampler is None:
            return
        # a share computed for a rank and not collected yet can still be collected
        batches = {batch for (_, batch) in self.answers}
        for batch in batches:
            for rank in range(self.dp_size):
                if (rank, batch) not in self.answers:
                    assert self.sampler.has_cached_result(
                        "p", "t", {"dp_rank": rank, "batch_index": batch}
                    ), f"rank {rank}'s share of batch {batch} was lost"


Controller.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestController = Controller.TestCase
