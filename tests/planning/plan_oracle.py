"""Pure-Python oracle of the native micro-batch planner (rust/core/src/planner/).

The same rules, written plainly for the differential tests: the cap-aware greedy split, the
counting search from the bin-packing lower bound, the growth to an agreed count, the bubble
order and the expansion of groups to sample indexes. Slow (heaps of Python tuples); of it the
public functions use only ``bubble`` (after ``refine=True``, on a handful of micro-batches).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqbalance._inputs import MAX_VALUE

__all__ = ["bin_lower_bound", "own_plan", "plan_ranks", "split"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# The Fekete-Schepers bounds below use u_k for k = 2.._DFF_MAX: enough for items down to
# cap / (_DFF_MAX + 1); the counting search gallops past what the bounds miss.
_DFF_MAX = 16


def bin_lower_bound(tokens: Any, cap: int) -> int:
    """A count below which no split of ``tokens`` into parts of at most ``cap`` exists.

    Any fitting split is a bin packing, so every bin-packing lower bound holds for it; the
    largest of these three is returned (each O(n) after one sort):

    - ``ceil(total / cap)``;
    - Martello-Toth L2: for a threshold ``a <= cap / 2``, items above ``cap - a`` and items in
      ``(cap / 2, cap - a]`` each need a bin of their own (the latter share it only with
      items below ``a``), and items in ``[a, cap / 2]`` fill the room those leave or open
      new bins;
    - Fekete-Schepers dual-feasible functions ``u_k``: an item ``s`` counts as ``s / cap`` of
      a bin when ``(k + 1) * s`` is a multiple of ``cap``, else as ``floor((k + 1) * s / cap) / k``;
      a bin's counts never add to more than one, so their ceiled sum is a bound (for k = 2:
      no bin holds three items above ``cap / 3``).

    Example: 10 items of 501 under a cap of 1000 need 10 bins, not ``ceil(5010 / 1000) = 6``.
    """
    n = len(tokens)
    # Exact int64 arithmetic while no intermediate can pass 2**63 - 1; Python ints otherwise.
    dtype: Any = np.int64 if (_DFF_MAX + 2) * max(n, 1) * cap <= MAX_VALUE else object
    sizes = np.sort(np.asarray(tokens, dtype=dtype))
    prefix = np.concatenate((np.zeros(1, dtype=dtype), np.cumsum(sizes, dtype=dtype)))
    total = prefix[-1]
    bound = max(1, -(-int(total) // cap))

    half = int(np.searchsorted(sizes, cap // 2, side="right"))  # sizes[:half] have 2 * s <= cap
    thresholds = np.concatenate((np.zeros(1, dtype=dtype), np.unique(sizes[:half])))
    above = np.searchsorted(sizes, cap - thresholds, side="right")  # J1 = sizes[above:]
    small = np.searchsorted(sizes, thresholds, side="left")  # J3 = sizes[small:half]
    big_count = (above - half).astype(dtype)  # J2 = sizes[half:above]
    room = big_count * cap - (prefix[above] - prefix[half])
    overflow = prefix[half] - prefix[small] - room
    l2 = (n - half) + np.maximum(0, -(-overflow // cap))
    bound = max(bound, int(l2.max()))

    for k in range(2, _DFF_MAX + 1):
        scaled = (k + 1) * sizes
        counts = np.where(scaled % cap == 0, k * sizes, (scaled // cap) * cap)
        bound = max(bound, -(-int(counts.sum()) // (k * cap)))
    return bound


def _order(costs: Sequence[int]) -> list[int]:
    return sorted(range(len(costs)), key=lambda i: (-costs[i], i))


def split(tokens: Sequence[int], costs: Sequence[int], cap: int, count: int) -> list[int] | None:
    """The part of every item in the cap-aware greedy split, or None when an item fits nowhere.

    Items by cost descending (ties by position), each into the part of least cost, then empty
    before non-empty, then the lowest number, among the parts with room for its tokens.
    """
    part = [0] * len(tokens)
    filled = [0] * count
    heap = [(0, False, p) for p in range(count)]
    heapq.heapify(heap)
    for item in _order(costs):
        skipped = []
        while True:
            if not heap:
                return None
            load, nonempty, p = heapq.heappop(heap)
            if filled[p] + tokens[item] <= cap:
                break
            skipped.append((load, nonempty, p))
        for entry in skipped:
            heapq.heappush(heap, entry)
        filled[p] += tokens[item]
        part[item] = p
        heapq.heappush(heap, (load + costs[item], True, p))
    return part


def own_plan(
    tokens: Sequence[int], costs: Sequence[int], cap: int, multiple: int, bound: int
) -> tuple[int, list[int]]:
    """The counting search: from ``bound`` (rounded up), gallop to a fitting count, bisect back."""
    n = len(tokens)
    if n == 0:
        return 0, []
    start = _round_up(bound, multiple)
    part = split(tokens, costs, cap, start)
    if part is not None:
        return start, part
    ceiling = _round_up(n, multiple)
    failed, step = start, multiple
    while True:
        count = min(failed + step, ceiling)
        part = split(tokens, costs, cap, count)
        if part is not None:
            break
        failed = count
        step *= 2
    while count - failed > multiple:
        middle = failed + (count - failed) // multiple // 2 * multiple
        middle_part = split(tokens, costs, cap, middle)
        if middle_part is None:
            failed = middle
        else:
            count, part = middle, middle_part
    return count, part


def _parts(part: Sequence[int], count: int) -> list[list[int]]:
    parts: list[list[int]] = [[] for _ in range(count)]
    for item, p in enumerate(part):
        parts[p].append(item)
    return parts


def plan(
    tokens: Sequence[int],
    costs: Sequence[int],
    cap: int,
    multiple: int,
    minimum: int,
    bound: int,
) -> list[list[int]]:
    """Item positions per micro-batch: the own plan, or ``minimum`` parts when that is more."""
    own_count, own_part = own_plan(tokens, costs, cap, multiple, bound)
    if minimum <= own_count:
        return _parts(own_part, own_count)
    filled = min(minimum, len(tokens))
    if filled:
        part = split(tokens, costs, cap, filled)
        if part is not None:
            return _parts(part, filled) + [[] for _ in range(minimum - filled)]
    parts = [p for p in _parts(own_part, own_count) if p]
    while len(parts) < filled:
        heaviest = max(
            (p for p in range(len(parts)) if len(parts[p]) >= 2),
            key=lambda p: (sum(costs[i] for i in parts[p]), -p),
        )
        members = parts[heaviest]
        sub = split([tokens[i] for i in members], [costs[i] for i in members], 2**64, 2)
        assert sub is not None
        first, second = ([members[i] for i in half] for half in _parts(sub, 2))
        parts[heaviest : heaviest + 1] = [first, second]
    return parts + [[] for _ in range(minimum - len(parts))]


def bubble(parts: list[list[int]], costs: Sequence[int], starts: Sequence[int]) -> list[list[int]]:
    """By (cost, first sample) descending, smaller ones to both ends; empty parts last."""
    filled = [p for p in parts if p]
    filled.sort(key=lambda p: (sum(costs[i] for i in p), min(starts[i] for i in p)), reverse=True)
    return filled[::2][::-1] + filled[1::2] + [p for p in parts if not p]


def plan_ranks(
    tokens: Sequence[int],
    costs: Sequence[int],
    starts: Sequence[int],
    sizes: Sequence[int],
    ranks: Sequence[Sequence[int]],
    cap: int,
    multiple: int,
    minimum: int,
    order_bubble: bool,
    bounds: Sequence[int],
) -> tuple[int, int, int, list[list[list[int]]]]:
    """What ``_native._plan_ranks`` returns for one candidate, after the kept index; ``bounds[r]``
    is rank r's lower bound.
    """
    subs = [
        ([tokens[g] for g in rank], [costs[g] for g in rank], [starts[g] for g in rank])
        for rank in ranks
    ]
    count = max(
        [minimum]
        + [
            own_plan(t, c, cap, multiple, bound)[0]
            for (t, c, _), bound in zip(subs, bounds, strict=True)
        ]
    )
    heaviest = 0
    result = []
    for rank, (t, c, s), bound in zip(ranks, subs, bounds, strict=True):
        parts = plan(t, c, cap, multiple, count, bound)
        heaviest = max([heaviest] + [sum(c[i] for i in p) for p in parts])
        if order_bubble:
            parts = bubble(parts, c, s)
        result.append(
            [
                [
                    index
                    for i in sorted(p, key=lambda i: s[i])
                    for index in range(s[i], s[i] + sizes[rank[i]])
                ]
                for p in parts
            ]
        )
    heaviest_rank = max((sum(c) for _, c, _ in subs), default=0)
    return count, heaviest, heaviest_rank, result
