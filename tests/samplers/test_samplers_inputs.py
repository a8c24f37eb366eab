"""Sampler arguments that used to slip through (issue 23, low): cache keys, partition objects,
copies taken while another thread samples, and checkpoints that claim absurd sizes."""

from __future__ import annotations

import contextlib
import copy
import pickle
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from seqbalance import GRPOGroupNSampler, RankAwareSampler, SeqlenBalancedSampler


class Lengths:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": 1 + i % 7} for i in indexes}


def balanced(sampler, ready, rank, batch, partition=None):
    return sampler(
        ready,
        2,
        task_name="t",
        partition_id="p",
        dp_rank=rank,
        batch_index=batch,
        partition=Lengths() if partition is None else partition,
    )


CALLERS = {
    "balanced": (
        lambda: SeqlenBalancedSampler(1, 2),
        lambda s, b: balanced(s, list(range(8)), 0, b),
    ),
    "grpo": (
        lambda: GRPOGroupNSampler(1),
        lambda s, b: s(list(range(8)), 2, "t", "p", dp_rank=0, batch_index=b),
    ),
    "rank_aware": (lambda: RankAwareSampler(), lambda s, b: s(list(range(8)), 2, 0, b, "t", "p")),
}


def everything(sampler):
    """All the sampler saves, _states (its cache) included, compared by value."""
    return pickle.dumps(sampler.save_checkpoint())


# ---------------------------------------------------------------- batch_index


@pytest.mark.parametrize("kind", sorted(CALLERS))
@pytest.mark.parametrize(
    ("batch", "error", "words"),
    [
        (float("nan"), TypeError, r"batch_index must be an int, a str or None, got nan \(float\)"),
        (1.0, TypeError, r"batch_index must be an int, a str or None, got 1.0 \(float\)"),
        (np.float64("inf"), TypeError, "batch_index must be an int"),
        (True, TypeError, r"got True \(bool\)"),
        ([1], TypeError, r"batch_index must be hashable \(a cache key\), got \[1\] \(list\)"),
        ({"b": 1}, TypeError, "batch_index must be hashable"),
    ],
)
def test_a_bad_batch_index_is_refused_naming_it_and_changes_nothing(kind, batch, error, words):
    make, call = CALLERS[kind]
    sampler = make()
    call(sampler, 0)
    before = everything(sampler)
    for _ in range(3):  # nan used to give every call a new split and leak its reservations
        with pytest.raises(error, match=words):
            call(sampler, batch)
    assert everything(sampler) == before


@pytest.mark.parametrize("kind", sorted(CALLERS))
def test_numpy_int_batch_indexes_are_the_same_key_as_ints(kind):
    make, call = CALLERS[kind]
    sampler = make()
    first = call(sampler, np.int64(3))
    assert call(sampler, 3) == first
    cached = sampler.save_checkpoint()["_states"]["p"]["t"][0]
    assert list(cached) == [3]
    assert type(next(iter(cached))) is int


def test_unhashable_task_and_partition_ids_are_named():
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(TypeError, match=r"task_name must be hashable .*\['t'\] \(list\)"):
        sampler(list(range(4)), 2, task_name=["t"], dp_rank=0, batch_index=0)
    with pytest.raises(TypeError, match=r"partition_id must be hashable"):
        RankAwareSampler()(list(range(4)), 2, 0, 0, "t", {"p": 1})
    assert sampler.save_checkpoint()["_states"] == {}


# ---------------------------------------------------------------- partition


@pytest.mark.parametrize(
    "partition", [object(), "p0", 5, type("NoCall", (), {"get_custom_meta": 3})()]
)
def test_a_partition_without_get_custom_meta_is_a_type_error_naming_it(partition):
    sampler = SeqlenBalancedSampler(1, 2)
    with pytest.raises(TypeError, match=r"partition must be None or have a get_custom_meta"):
        balanced(sampler, list(range(8)), 0, 0, partition=partition)
    state = sampler.save_checkpoint()
    assert state["_states"] == {} and state["_handed_out"] == {}


def test_no_partition_falls_back_to_the_equal_split():
    sampler = SeqlenBalancedSampler(1, 2)
    got = sampler(list(range(8)), 2, task_name="t", partition_id="p", dp_rank=1, batch_index=0)
    assert got == ([2, 3], [2, 3])


# ---------------------------------------------------------------- copies while sampling


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))])
def test_copies_taken_while_another_thread_samples_are_consistent(copier):
    sampler = SeqlenBalancedSampler(1, 2, max_cached_batches=4)
    stop = threading.Event()
    failures: list[BaseException] = []

    def sample_forever():
        batch = 0
        consumed: set[int] = set()
        try:
            while not stop.is_set():
                ready = [i for i in range(4 * batch, 4 * batch + 40) if i not in consumed]
                for rank in (0, 1):
                    consumed.update(balanced(sampler, ready, rank, batch)[0])
                batch += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    worker = threading.Thread(target=sample_forever)
    worker.start()
    try:
        for _ in range(300):
            clone = copier(sampler)
            # a copy is a working sampler holding a consistent snapshot
            state = clone.save_checkpoint()
            assert set(state["_balanced_cache"]) == {
                ("p", "t", batch) for batch in state["_states"].get("p", {}).get("t", {}).get(0, {})
            }
    finally:
        stop.set()
        worker.join()
    assert not failures, failures


# ---------------------------------------------------------------- checkpoints of absurd sizes


def test_a_checkpoint_claiming_a_trillion_ranks_is_refused_at_once():
    """Used to walk range(10**12) for more than 300 s; a child process, so a hang fails."""
    script = (
        "from seqbalance import SeqlenBalancedSampler, GRPOGroupNSampler\n"
        "for sampler in (SeqlenBalancedSampler(1, 2), GRPOGroupNSampler(1)):\n"
        "    try:\n"
        "        sampler.load_checkpoint({'_states': {}, '_evicted': {('p', 't'): {0: range(10**12)}}})\n"
        "    except ValueError as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done
    assert "holds 1000000000000 ranks, so it was saved with dp_size >= 1000000000000" in lines[0]
    assert "dp_size=2" in lines[0]
    assert "holds 1000000000000 ranks, more than the 16777216" in lines[1]


@pytest.mark.parametrize(
    ("state", "error", "words"),
    [
        ({"_evicted": {("p", "t"): {0: range(1, 10**12)}}}, ValueError, "999999999999 ranks"),
        ({"_evicted": {("p", "t"): {0: range(5)}}}, ValueError, "5 ranks, so it was saved"),
        ({"_evicted": {("p", "t"): dict.fromkeys(range(2000))}}, ValueError, "2000 evicted"),
        ({"_evicted_floor": {("p", "t"): dict.fromkeys(range(9), 0)}}, ValueError, "9 ranks"),
        ({"_batch_order": {("p", "t"): range(10**12)}}, TypeError, "must be a list"),
        ({"_states": {"p": {"t": {0: {0: (range(10**12), [])}}}}}, TypeError, "list of indexes"),
        ({"_states": {"p": {"t": dict.fromkeys(range(3), {})}}}, ValueError, "3 ranks"),
        ({"_handed_out": {("p", "t"): range(10**12)}}, TypeError, "list of indexes"),
    ],
)
def test_checkpoint_sizes_are_bounded_before_they_are_read(state, error, words):
    sampler = SeqlenBalancedSampler(1, 2)
    balanced(sampler, list(range(8)), 0, 0)
    before = everything(sampler)
    with within_seconds(20), pytest.raises(error, match=words):
        sampler.load_checkpoint({"_states": {}, **state})
    assert everything(sampler) == before


@contextlib.contextmanager
def within_seconds(seconds):
    """Fail (rather than hang) when the body walks a lazy range of 10**12 items."""

    def too_slow(signum, frame):
        raise AssertionError(f"still running after {seconds} s: the size was not checked first")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_uncollected_ranks_are_bounded_before_they_are_read():
    sampler = SeqlenBalancedSampler(1, 2)
    state = {
        "_states": {},
        "_balanced_cache": {("p", "t", 0): [[0], [1]]},
        "_uncollected": {("p", "t", 0): range(10**12)},
    }
    with within_seconds(20), pytest.raises(ValueError, match="1000000000000 ranks"):
        sampler.load_checkpoint(state)
