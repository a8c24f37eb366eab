"""The step model of the step spec, computed another way: for `seqbalance.simulate_step`'s tests.

The library simulates 1F1B by advancing each stage as far as its inputs allow (a work list of
stages, end times in rings). This oracle runs a discrete-event simulation instead: a queue of
operation completions in time order; when an operation ends, its stage starts its next
operation if that one's input has ended, and the neighbour waiting for this one starts too. A
micro-batch's time comes from the cost as the spec defines it (``TimeCost.predict`` over its
documents), not from the library's own sums.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from seqbalance import TimeCost, calculate_workload


def schedule(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s operations: ``min(P - s - 1, m)`` forwards, then one forward and one
    backward while forwards remain, then the remaining backwards."""
    warmup = min(stages - stage - 1, m)
    ops = [("F", k) for k in range(warmup)]
    forward, backward = warmup, 0
    while forward < m:
        ops += [("F", forward), ("B", backward)]
        forward += 1
        backward += 1
    ops += [("B", k) for k in range(backward, m)]
    return ops


def pipeline_makespan(times: list[float], stages: int, forward_share: float) -> float:
    """When the last operation of one 1F1B pipeline ends, by an event queue."""
    m = len(times)
    if m == 0:
        return 0.0
    ops = [schedule(s, stages, m) for s in range(stages)]
    position = [0] * stages
    free = [0.0] * stages
    busy = [False] * stages
    ended: dict[tuple[str, int, int], float] = {}
    events: list[tuple[float, int, int]] = []  # (end time, sequence, stage)
    sequence = 0

    def input_of(s: int, kind: str, k: int) -> tuple[str, int, int] | None:
        if kind == "F":
            return None if s == 0 else ("F", s - 1, k)
        return ("F", s, k) if s == stages - 1 else ("B", s + 1, k)

    def try_start(s: int) -> None:
        nonlocal sequence
        if busy[s] or position[s] == len(ops[s]):
            return
        kind, k = ops[s][position[s]]
        needed = input_of(s, kind, k)
        if needed is not None and needed not in ended:
            return  # woken when that operation ends
        ready = 0.0 if needed is None else ended[needed]
        share = forward_share if kind == "F" else 1.0 - forward_share
        end = max(free[s], ready) + share * times[k] / stages
        busy[s] = True
        sequence += 1
        heapq.heappush(events, (end, sequence, s))

    for s in range(stages):
        try_start(s)
    last = 0.0
    while events:
        end, _, s = heapq.heappop(events)
        kind, k = ops[s][position[s]]
        ended[(kind, s, k)] = end
        free[s], busy[s] = end, False
        position[s] += 1
        last = max(last, end)
        try_start(s)
        for neighbour in (s - 1, s + 1):
            if 0 <= neighbour < stages:
                try_start(neighbour)
    assert all(p == len(o) for p, o in zip(position, ops, strict=True)), "the schedule deadlocked"
    return last


def micro_batch_time(lengths: list[int], cost: Any) -> float:
    """A micro-batch's time as the spec defines it: ``cost.predict`` of its documents (positive
    lengths; none: 0) for a `TimeCost`, else the sum of its samples' costs."""
    if isinstance(cost, TimeCost):
        documents = [length for length in lengths if length > 0]
        return float(cost.predict([documents])[0]) if documents else 0.0
    if cost == "tokens":
        return float(sum(lengths))
    if cost == "workload":
        return float(sum(calculate_workload([int(x) for x in lengths])))
    raise ValueError(f"the oracle knows no cost {cost!r}")


def step_of(
    plan: list[list[list[int]]],
    lengths: list[int],
    cost: Any,
    sync: str,
    stages: int,
    forward_share: float,
) -> dict[str, Any]:
    """The step model's figures for a list plan."""
    times = [[micro_batch_time([lengths[i] for i in mb], cost) for mb in rank] for rank in plan]
    busy = np.array([sum(rank) for rank in times], dtype=np.float64)
    if sync == "micro_batch":
        seconds = sum(max(rank[k] for rank in times) for k in range(len(times[0])))
    elif stages == 1:
        seconds = max(sum(rank) for rank in times)
    else:
        seconds = max(pipeline_makespan(rank, stages, forward_share) for rank in times)
    return {
        "seconds": float(seconds),
        "busy": busy,
        "waiting": seconds - busy / stages,
        "bubble": 1.0 - busy.mean() / (stages * seconds) if seconds > 0 else 0.0,
        "lower_bound": busy.sum() / (len(plan) * stages),
        "times": times,
    }


# ------------------------------------------------------------------ the step spec's time model

#: Seconds per micro-batch, per document, per token and per causal pair: the H100 layer fit of
#: the time-cost spec scaled to a whole 8B model (step spec, "The step" figures).
SPEC_MODEL = (5e-3, 2e-4, 6.4e-5, 5.8e-9)


def spec_seconds(documents: list[int]) -> float:
    """One micro-batch's time in the step spec's model."""
    per_micro_batch, per_document, per_token, per_pair = SPEC_MODEL
    return per_micro_batch + sum(
        per_document + per_token * length + per_pair * length * (length + 1) / 2
        for length in documents
    )


def spec_time_cost() -> TimeCost:
    """A `TimeCost` fitted to exact times of the spec's model (its coefficients to rounding)."""
    rng = np.random.default_rng(123)
    batches = [rng.integers(1, 70_000, size=rng.integers(1, 6)).tolist() for _ in range(60)]
    return TimeCost.fit(batches, [spec_seconds(batch) for batch in batches])


def sft_batch(seed: int) -> np.ndarray:
    """The spec's SFT batch: 256 documents of ``min(int(lognormal(9, 1)) + 1, 65536)``."""
    raw = np.random.default_rng(seed).lognormal(9.0, 1.0, 256)
    return np.minimum(raw.astype(np.int64) + 1, 65_536)


def rl_batch(seed: int) -> np.ndarray:
    """The spec's RL batch: 512 responses of ``min(int(lognormal(8.5, 1.2)) + 1, 32768)``."""
    raw = np.random.default_rng(seed).lognormal(8.5, 1.2, 512)
    return np.minimum(raw.astype(np.int64) + 1, 32_768)
