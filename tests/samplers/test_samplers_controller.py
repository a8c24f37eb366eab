"""Drive the samplers the way a controller does: ready = produced - consumed, mark what is consumed.

Several ranks and batches, in order, out of order (ranks running ahead), and from many threads.
Invariants checked on every run:
* every index is handed out at most once over all (rank, batch) pairs, and exactly once when all
  ranks have collected all batches;
* groups stay whole (producers write groups at aligned consecutive indexes);
* each batch's split is the partitioner's balanced split of that batch's groups;
* repeated calls for one (rank, batch) return the same answer.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import GRPOGroupNSampler, RankAwareSampler, SeqlenBalancedSampler
from seqbalance.samplers.seqlen_balanced import split_groups


class Partition:
    def __init__(self, lengths):
        self.meta = {i: {"total_lengths": length} for i, length in enumerate(lengths)}
        self.lookups = 0
        self._lock = threading.Lock()

    def get_custom_meta(self, indexes):
        with self._lock:
            self.lookups += 1
        return {i: self.meta[i] for i in indexes if i in self.meta}


class MiniController:
    """Keeps production and consumption like TransferQueue's controller, for one task.

    The ready list is read outside any lock shared with the sampler, so under threads a call may
    see indexes another rank is consuming at that moment: the sampler must cope.
    """

    def __init__(self, sampler, lengths, task="train", partition_id="p0"):
        self.sampler = sampler
        self.partition = Partition(lengths)
        self.task = task
        self.partition_id = partition_id
        self.produced: set[int] = set()
        self.consumed: set[int] = set()
        self.lock = threading.Lock()
        self.answers: dict[tuple[int, int], list[tuple[int, ...]]] = defaultdict(list)

    def produce(self, indexes):
        with self.lock:
            self.produced.update(indexes)

    def fetch(self, rank, batch, batch_size):
        """One rank's request; returns its indexes, or None when it must retry later."""
        config = {
            "dp_rank": rank,
            "batch_index": batch,
            "task_name": self.task,
            "partition_id": self.partition_id,
        }
        with self.lock:
            ready = sorted(self.produced - self.consumed)
        cached = self.sampler.has_cached_result(self.partition_id, self.task, config)
        if len(ready) < batch_size and not cached:
            return None
        sampled, consumed = self.sampler(ready, batch_size, partition=self.partition, **config)
        assert sampled == consumed
        # An empty answer is a real (empty) share only if the split already existed; otherwise
        # the sampler found too few free groups and the rank must retry.
        if not sampled and not cached:
            return None
        with self.lock:
            self.consumed.update(consumed)
            self.answers[(rank, batch)].append(tuple(sampled))
        return sampled


def check_invariants(ctrl, lengths, n, dp_size, complete_batches=None):
    # cached answers are stable
    for key, answers in ctrl.answers.items():
        assert len(set(answers)) == 1, f"{key} got different answers {answers}"
    first = {key: answers[0] for key, answers in ctrl.answers.items()}
    # handed out at most once
    seen: dict[int, tuple[int, int]] = {}
    for key, share in first.items():
        for index in share:
            assert index not in seen, f"index {index} given to {seen[index]} and to {key}"
            seen[index] = key
        # groups whole and on one rank
        for index in share:
            start = index - index % n
            assert set(range(start, start + n)) <= set(share), (
                f"group of {index} split in {key}: {share}"
            )
    # each fully collected batch is the balanced split of its groups
    batches = defaultdict(dict)
    for (rank, batch), share in first.items():
        batches[batch][rank] = share
    for by_rank in batches.values():
        if len(by_rank) < dp_size:
            continue
        selected = sorted(i for share in by_rank.values() for i in share)
        groups = [selected[g : g + n] for g in range(0, len(selected), n)]
        expected_groups = split_groups([sum(lengths[i] for i in g) for g in groups], dp_size)
        expected = [sorted(i for g in part for i in groups[g]) for part in expected_groups]
        assert [list(by_rank[r]) for r in range(dp_size)] == expected
    if complete_batches is not None:
        for batch in range(complete_batches):
            assert sorted(batches[batch]) == list(range(dp_size))
            assert sum(len(s) for s in batches[batch].values()) > 0
    return first


def global_size(n, dp_size, per_rank):
    """Samples per batch: batch_size * dp_size, rounded up to one whole group per rank."""
    return max(per_rank * dp_size, n * dp_size)


def make_lengths(count, seed):
    rng = random.Random(seed)
    return [rng.randint(1, 5000) for _ in range(count)]


# ---------------------------------------------------------------- in order


@pytest.mark.parametrize(
    "n, dp_size, per_rank",
    [(4, 4, 8), (2, 3, 4), (3, 2, 3), (4, 4, 2), (1, 8, 5)],
    ids=["even", "uneven-groups", "odd-per-rank", "fewer-groups-than-ranks", "n1"],
)
def test_in_order_all_ranks_all_batches(n, dp_size, per_rank):
    batches = 6
    lengths = make_lengths(global_size(n, dp_size, per_rank) * batches, seed=n * 100 + dp_size)
    ctrl = MiniController(SeqlenBalancedSampler(n, dp_size), lengths)
    ctrl.produce(range(len(lengths)))
    for batch in range(batches):
        for rank in range(dp_size):
            assert ctrl.fetch(rank, batch, per_rank) is not None
            ctrl.fetch(rank, batch, per_rank)  # a retry returns the cached share
    first = check_invariants(ctrl, lengths, n, dp_size, complete_batches=batches)
    handed = sorted(i for share in first.values() for i in share)
    assert handed == list(range(len(lengths)))  # everything produced went out exactly once
    assert ctrl.consumed == set(range(len(lengths)))


def test_in_order_token_sums_are_close():
    # 64 groups of 4 over 8 ranks: the balanced split is far tighter than the in-order split.
    n, dp_size, per_rank = 4, 8, 32
    lengths = make_lengths(per_rank * dp_size, seed=11)
    ctrl = MiniController(SeqlenBalancedSampler(n, dp_size), lengths)
    ctrl.produce(range(len(lengths)))
    shares = [ctrl.fetch(rank, 0, per_rank) for rank in range(dp_size)]
    sums = [sum(lengths[i] for i in share) for share in shares]
    naive = [sum(lengths[r * per_rank : (r + 1) * per_rank]) for r in range(dp_size)]
    largest_group = max(sum(lengths[g : g + n]) for g in range(0, len(lengths), n))
    assert max(sums) - min(sums) <= largest_group
    assert max(sums) - min(sums) < max(naive) - min(naive)


# ---------------------------------------------------------------- out of order


def test_fast_rank_runs_ahead_before_others_collect():
    n, dp_size, per_rank, batches = 2, 4, 4, 5
    lengths = make_lengths(per_rank * dp_size * batches, seed=5)
    ctrl = MiniController(SeqlenBalancedSampler(n, dp_size), lengths)
    ctrl.produce(range(len(lengths)))
    # rank 0 takes every batch before anybody else collects anything
    for batch in range(batches):
        assert ctrl.fetch(0, batch, per_rank) is not None
    for rank in (3, 1, 2):
        for batch in reversed(range(batches)):
            assert ctrl.fetch(rank, batch, per_rank) is not None
    first = check_invariants(ctrl, lengths, n, dp_size, complete_batches=batches)
    assert sorted(i for s in first.values() for i in s) == list(range(len(lengths)))


def test_without_reservations_the_fast_rank_would_collide():
    """Guards the test itself: this schedule really does offer uncollected indexes as ready."""
    n, dp_size, per_rank = 1, 2, 2
    lengths = make_lengths(8, seed=1)
    ctrl = MiniController(SeqlenBalancedSampler(n, dp_size), lengths)
    ctrl.produce(range(8))
    ctrl.fetch(0, 0, per_rank)
    rank1_share = set(ctrl.sampler._balanced_cache[("p0", "train", 0)][1])
    with ctrl.lock:
        ready = set(ctrl.produced - ctrl.consumed)
    assert rank1_share <= ready  # still "ready" for the controller
    assert not rank1_share & set(ctrl.fetch(0, 1, per_rank))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 4),
    dp_size=st.integers(1, 5),
    per_rank=st.integers(1, 6),
    batches=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    produce_step=st.integers(1, 12),
)
def test_any_interleaving_keeps_invariants(n, dp_size, per_rank, batches, seed, produce_step):
    if (per_rank * dp_size) % n:
        per_rank *= n  # keep the global size a multiple of n
    total = global_size(n, dp_size, per_rank) * batches
    lengths = make_lengths(total, seed)
    ctrl = MiniController(SeqlenBalancedSampler(n, dp_size, max_cached_batches=2), lengths)
    rng = random.Random(seed)
    next_batch = [0] * dp_size
    produced = 0
    # Producers write whole groups, a few at a time; ranks ask in a random order.
    while min(next_batch) < batches:
        if produced < total and rng.random() < 0.4:
            step = min(total - produced, produce_step * n)
            ctrl.produce(range(produced, produced + step))
            produced += step
            continue
        rank = rng.choice([r for r in range(dp_size) if next_batch[r] < batches])
        if ctrl.fetch(rank, next_batch[rank], per_rank) is not None:
            next_batch[rank] += 1
        elif produced == total and all(
            not ctrl.sampler.has_cached_result(
                "p0", "train", {"dp_rank": r, "batch_index": next_batch[r]}
            )
            for r in range(dp_size)
            if next_batch[r] < batches
        ):
            # Everything is produced and no rank is owed a cached share, so the waiting rank must
            # be able to start its batch: only possible if enough unreserved data is left.
            pytest.fail(f"rank {rank} stuck at batch {next_batch[rank]} with all data produced")
    first = check_invariants(ctrl, lengths, n, dp_size, complete_batches=batches)
    assert sorted(i for s in first.values() for i in s) == list(range(total))


# ---------------------------------------------------------------- threads


@pytest.fixture
def busy_switching():
    # Switch threads far more often than the default 5 ms, so interleavings actually vary.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("busy_switching")
def test_sixteen_ranks_ask_for_the_same_batch_at_the_same_moment():
    dp_size, n, per_rank, batches = 16, 2, 4, 3
    for repetition in range(25):
        lengths = make_lengths(dp_size * per_rank * batches, seed=repetition)
        # Bound 1: every batch is evicted once all ranks collected it (they all have, and their
        # consumption is recorded, when they pass the barrier), so eviction runs under threads too.
        sampler = SeqlenBalancedSampler(n, dp_size, max_cached_batches=1)
        ctrl = MiniController(sampler, lengths)
        ctrl.produce(range(len(lengths)))
        barrier = threading.Barrier(dp_size)
        errors = []

        def rank_loop(rank, ctrl=ctrl, barrier=barrier, errors=errors):
            try:
                for batch in range(batches):
                    barrier.wait()
                    assert ctrl.fetch(rank, batch, per_rank) is not None
            except Exception as exc:  # surfaced below; a thread cannot fail the test itself
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(dp_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        first = check_invariants(ctrl, lengths, n, dp_size, complete_batches=batches)
        assert sorted(i for s in first.values() for i in s) == list(range(len(lengths)))
        assert ctrl.partition.lookups == batches  # one split computed per batch
        assert len(sampler._balanced_cache) == 1


@pytest.mark.usefixtures("busy_switching")
def test_sixteen_free_running_ranks_with_a_producer():
    dp_size, n, per_rank, batches = 16, 4, 4, 4
    for repetition in range(10):
        total = dp_size * per_rank * batches
        lengths = make_lengths(total, seed=1000 + repetition)
        # The default cache bound covers every batch here: while a batch is cached, its indexes
        # stay reserved even if a rank read its ready list before another rank's consumption was
        # recorded (this controller does not make read-sample-mark atomic).
        ctrl = MiniController(SeqlenBalancedSampler(n, dp_size), lengths)
        errors = []

        def producer(ctrl=ctrl, total=total):
            for start in range(0, total, 8):
                ctrl.produce(range(start, start + 8))

        def rank_loop(rank, ctrl=ctrl, errors=errors):
            try:
                batch = 0
                # A generous wall-clock bound (the machine may be busy): progress, not speed,
                # is what this test checks; a rank that fails to fetch yields to the producer.
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    if batch == batches:
                        return
                    if ctrl.fetch(rank, batch, per_rank) is not None:
                        batch += 1
                    else:
                        time.sleep(0.0002)
                raise AssertionError(f"rank {rank} never finished")
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(dp_size)]
        threads.append(threading.Thread(target=producer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        first = check_invariants(ctrl, lengths, n, dp_size, complete_batches=batches)
        assert sorted(i for s in first.values() for i in s) == list(range(total))


@pytest.mark.usefixtures("busy_switching")
@pytest.mark.parametrize(
    "make", [lambda: GRPOGroupNSampler(2), lambda: RankAwareSampler()], ids=["grpo", "rank-aware"]
)
def test_replicas_of_one_rank_agree_under_threads(make):
    for repetition in range(20):
        sampler = make()
        ready = list(range(repetition, repetition + 40))
        barrier = threading.Barrier(16)
        results = [None] * 16

        def replica(
            i, sampler=sampler, ready=ready, barrier=barrier, results=results, batch=repetition
        ):
            barrier.wait()
            results[i] = sampler(
                ready, 8, dp_rank=3, batch_index=batch, task_name="t", partition_id="p"
            )

        threads = [threading.Thread(target=replica, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r == results[0] for r in results)
        assert len(results[0][0]) == 8
