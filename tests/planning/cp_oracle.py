"""Test oracle for `seqbalance.plan_context_parallel`: the published greedy, the time model and the
lower bound, written from the time-cost spec ("Context parallelism planned per sequence") in plain
Python, independent of the package's implementation.

Every function takes the per-sequence costs ``weights`` (floats, the cost of each whole sequence)
and ``comm(i, c)``: the communication, in the cost's units, of sequence ``i`` split over ``c`` ranks
(0 for ``c == 1``). A plan is a list of steps, a step a list of ``(cp_size, ranks, indexes)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

READINGS = ("1a", "1b", "2a", "2b")

Comm = Callable[[int, int], float]
Plan = list[list[tuple[int, list[int], list[int]]]]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def allowed_degrees(world_size: int, cp_sizes: Sequence[int] | None = None) -> list[int]:
    """The powers of two dividing ``world_size`` (or ``cp_sizes``, any sizes), ascending."""
    if cp_sizes is not None:
        return sorted(set(cp_sizes))
    degrees, c = [], 1
    while world_size % c == 0 and c <= world_size:
        degrees.append(c)
        c *= 2
    return degrees


def group_time(cp_size: int, indexes: Sequence[int], weights: Sequence[float], comm: Comm) -> float:
    """The time of one group on each of its ranks: ``sum(cost / c + comm(L, c))``."""
    total = 0.0
    for i in indexes:
        total += weights[i] / cp_size + comm(i, cp_size)
    return total


def plan_time(plan: Plan, weights: Sequence[float], comm: Comm) -> float:
    """Sum over steps of the slowest group's time."""
    total = 0.0
    for step in plan:
        total += max(group_time(c, indexes, weights, comm) for c, _, indexes in step)
    return total


def lower_bound(
    lengths: Sequence[int],
    weights: Sequence[float],
    comm: Comm,
    world_size: int,
    cap: int,
    degrees: Sequence[int],
) -> float:
    """``max(sum_i min_c (cost_i + c * comm_i(c)) / W, max_i min_c (cost_i / c + comm_i(c)))``."""
    spread, longest = 0.0, 0.0
    for i, length in enumerate(lengths):
        fitting = [c for c in degrees if ceil_div(length, c) <= cap]
        spread += min(weights[i] + c * comm(i, c) for c in fitting)
        longest = max(longest, min(weights[i] / c + comm(i, c) for c in fitting))
    return max(spread / world_size, longest)


def check_plan(
    plan: Plan, lengths: Sequence[int], world_size: int, cap: int, degrees: Sequence[int]
) -> None:
    """Assert every constraint of the spec on ``plan``."""
    seen: list[int] = []
    for step in plan:
        assert step, "an empty step"
        used: list[int] = []
        for cp_size, ranks, indexes in step:
            assert cp_size in degrees and 1 <= cp_size <= world_size, (cp_size, degrees)
            assert len(ranks) == cp_size and all(0 <= r < world_size for r in ranks), ranks
            assert indexes, "an empty group"
            used.extend(ranks)
            tokens = sum(ceil_div(lengths[i], cp_size) for i in indexes)
            assert tokens <= cap, (tokens, cap)
            seen.extend(indexes)
        assert len(used) == len(set(used)), f"ranks used twice in a step: {used}"
    assert sorted(seen) == list(range(len(lengths))), "every index in exactly one group"


def greedy(
    lengths: Sequence[int],
    weights: Sequence[float],
    comm: Comm,
    world_size: int,
    cap: int,
    degrees: Sequence[int],
    reading: str,
) -> Plan:
    """The published greedy in one of its four readings (``"1a"``, ``"1b"``, ``"2a"``, ``"2b"``).

    Each sequence takes the smallest allowed degree whose share ``ceil(L / c)`` fits the cap;
    sequences go longest first (ties by index); within a step a sequence opens a new group of its
    degree while that many ranks are free, else joins the lowest-loaded group of its degree with
    room for its tokens; one that fits nowhere closes the step (1) or waits for the next step (2);
    after a step is formed, nothing (a) or, while ranks are free, the first group of the smallest
    degree moves up to the next allowed degree (b).
    """
    assert reading in READINGS
    degrees = sorted(degrees)
    degree = []
    for length in lengths:
        fitting = [c for c in degrees if ceil_div(length, c) <= cap]
        assert fitting, f"length {length} fits no degree"
        degree.append(fitting[0])
    pending = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    plan: Plan = []
    while pending:
        free = world_size
        groups: list[list] = []  # [cp_size, tokens per rank, load, indexes]
        waiting: list[int] = []
        closed = False
        for i in pending:
            if closed:
                waiting.append(i)
                continue
            c = degree[i]
            share = ceil_div(lengths[i], c)
            load = weights[i] / c + comm(i, c)
            if free >= c:
                groups.append([c, share, load, [i]])
                free -= c
                continue
            best = None
            for group in groups:
                if group[0] == c and group[1] + share <= cap:
                    if best is None or group[2] < best[2]:
                        best = group
            if best is not None:
                best[1] += share
                best[2] += load
                best[3].append(i)
                continue
            waiting.append(i)
            if reading[0] == "1":
                closed = True
        if reading[1] == "b":
            while free > 0:
                smallest = min(g[0] for g in groups)
                group = next(g for g in groups if g[0] == smallest)
                larger = [c for c in degrees if c > smallest]
                if not larger or larger[0] - smallest > free:
                    break
                free -= larger[0] - smallest
                group[0] = larger[0]
        step = []
        rank = 0
        for c, _, _, indexes in groups:
            step.append((c, list(range(rank, rank + c)), indexes))
            rank += c
        plan.append(step)
        pending = waiting
    return plan


def best_greedy(
    lengths: Sequence[int],
    weights: Sequence[float],
    comm: Comm,
    world_size: int,
    cap: int,
    degrees: Sequence[int],
) -> tuple[str, Plan, float]:
    """The fastest reading (the floor): ``(reading, plan, time)``; ties go to the first."""
    best: tuple[str, Plan, float] | None = None
    for reading in READINGS:
        plan = greedy(lengths, weights, comm, world_size, cap, degrees, reading)
        time = plan_time(plan, weights, comm)
        if best is None or time < best[2]:
            best = (reading, plan, time)
    assert best is not None
    return best
