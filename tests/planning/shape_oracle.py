"""Pure-Python model of the micro-batch planner under shape limits (rust/core/src/planner/shape.rs).

One rank, one sample per item: the plain plan when it keeps the limits, else the shaped own
plan (the greedy with "fits" extended, searched between a lower bound and first-fit
decreasing's count) and the growth to ``minimum``. Costs may be ints or floats (Python floats or
``np.float32`` scalars, summed in their own precision, each part's in placement order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .plan_oracle import _parts, _round_up, bin_lower_bound, own_plan
from .plan_oracle import plan as plain_plan

__all__ = ["first_fit_decreasing", "fits", "shaped_plan", "shaped_split"]


def fits(members: Sequence[int], item: int, lengths, keys, max_sequences, padded, cap) -> bool:
    """Whether ``item`` joins ``members`` within the cap and the limits."""
    if not members:
        return True
    group = [*members, item]
    if keys is not None and keys[item] != keys[members[0]]:
        return False
    if max_sequences is not None and len(group) > max_sequences:
        return False
    if padded:
        return len(group) * max(lengths[i] for i in group) <= cap
    return sum(lengths[i] for i in group) <= cap


def keeps(parts, lengths, keys, max_sequences, padded, cap) -> bool:
    def ok(part):
        return all(
            fits(part[:j], part[j], lengths, keys, max_sequences, padded, cap)
            for j in range(len(part))
        )

    return all(ok(part) for part in parts)


def _fold(costs: Sequence[Any], members: Sequence[int]) -> Any:
    total = type(costs[0])(0) if costs else 0
    for i in sorted(members, key=lambda i: (-costs[i], i)):
        total = total + costs[i]
    return total


def shaped_split(lengths, costs, keys, max_sequences, padded, cap, count) -> list[int] | None:
    """The part of every item, or None: items by cost descending (ties by index), each into the
    fitting part of least (load, non-empty, number)."""
    order = sorted(range(len(lengths)), key=lambda i: (-costs[i], i))
    members: list[list[int]] = [[] for _ in range(count)]
    loads: list[Any] = [type(costs[0])(0) if costs else 0] * count
    part = [0] * len(lengths)
    for item in order:
        candidates = [
            (loads[p], bool(members[p]), p)
            for p in range(count)
            if fits(members[p], item, lengths, keys, max_sequences, padded, cap)
        ]
        if not candidates:
            return None
        _, _, p = min(candidates)
        members[p].append(item)
        loads[p] = loads[p] + costs[item]
        part[item] = p
    return part


def first_fit_decreasing(lengths, keys, max_sequences, padded, cap) -> list[list[int]]:
    parts: list[list[int]] = []
    for item in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for members in parts:
            if fits(members, item, lengths, keys, max_sequences, padded, cap):
                members.append(item)
                break
        else:
            parts.append([item])
    return [sorted(p) for p in parts]


def _lower_bound(lengths, keys, max_sequences, cap) -> int:
    by_key: dict[Any, list[int]] = {}
    for i, length in enumerate(lengths):
        by_key.setdefault(0 if keys is None else keys[i], []).append(length)
    bound = 0
    for values in by_key.values():
        by_samples = -(-len(values) // max_sequences) if max_sequences else 1
        bound += max(bin_lower_bound(values, cap), by_samples)
    return max(bound, 1)


def _halve(parts, costs, wanted):
    parts = [p for p in parts if p]
    while len(parts) < wanted:
        heaviest = max(
            (p for p in range(len(parts)) if len(parts[p]) >= 2),
            key=lambda p: (_fold(costs, parts[p]), -p),
        )
        members = parts[heaviest]
        sub = shaped_split([0] * len(members), [costs[i] for i in members], None, None, False, 1, 2)
        assert sub is not None
        first, second = ([members[i] for i in half] for half in _parts(sub, 2))
        parts[heaviest : heaviest + 1] = [first, second]
    return parts


def _shaped_own(lengths, costs, keys, max_sequences, padded, cap, multiple, unshaped):
    n = len(lengths)
    ffd = first_fit_decreasing(lengths, keys, max_sequences, padded, cap)
    ceiling = _round_up(len(ffd), multiple)
    if len(unshaped) <= ceiling and keeps(unshaped, lengths, keys, max_sequences, padded, cap):
        return unshaped
    start = min(_round_up(_lower_bound(lengths, keys, max_sequences, cap), multiple), ceiling)

    def try_split(count):
        return shaped_split(lengths, costs, keys, max_sequences, padded, cap, count)

    part = try_split(start)
    if part is not None:
        return _parts(part, start)
    failed, step, found = start, multiple, None
    while failed < ceiling:
        count = min(failed + step, ceiling)
        part = try_split(count)
        if part is not None:
            found = (count, part)
            break
        failed, step = count, step * 2
    if found is None:
        parts = _halve(ffd, costs, min(ceiling, n))
        return parts + [[] for _ in range(ceiling - len(parts))]
    count, part = found
    while count - failed > multiple:
        middle = failed + (count - failed) // multiple // 2 * multiple
        middle_part = try_split(middle)
        if middle_part is None:
            failed = middle
        else:
            count, part = middle, middle_part
    return _parts(part, count)


def shaped_plan(lengths, costs, keys, max_sequences, padded, cap, multiple, minimum):
    """Item positions per micro-batch (in the planner's order, before any ordering rule)."""
    limits = (keys, max_sequences, padded, cap)
    bound = bin_lower_bound(lengths, cap)
    plain = plain_plan(lengths, costs, cap, multiple, minimum, bound)
    if keeps(plain, lengths, *limits):
        return plain
    own_count, own_part = own_plan(lengths, costs, cap, multiple, bound)
    shaped = _shaped_own(
        lengths, costs, keys, max_sequences, padded, cap, multiple, _parts(own_part, own_count)
    )
    count = max(len(shaped), minimum)
    if own_count <= count:
        again = plain_plan(lengths, costs, cap, multiple, count, bound)
        if keeps(again, lengths, *limits):
            return again
    if count <= len(shaped):
        return shaped
    filled = min(count, len(lengths))
    part = shaped_split(lengths, costs, keys, max_sequences, padded, cap, filled)
    parts = _parts(part, filled) if part is not None else _halve(shaped, costs, filled)
    return parts + [[] for _ in range(count - len(parts))]
