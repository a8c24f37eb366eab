"""Plain pure-Python implementation of the partitioning contract: the oracle and the baseline.

This module mirrors the rules of the partitioning contract one to one, written for clarity rather
than speed: a *set* is a list of ``(index, value)`` items with a running sum, a *state* is a list of
exactly ``k`` sets kept in descending set order, and states wait in a ``heapq`` priority queue.
The differential tests hold the native core to these functions on every input they try, and the
benchmarks time the native core against them.

Float weights are computed as the pure-Python partitioners compute them: Python floats in double
precision, NumPy float32 scalars in single precision (NumPy 2 keeps ``0 + np.float32(x)`` in
float32), each set's sum advanced item by item in insertion order, and greedy's bias a plain left
fold in input order.

It accepts and rejects exactly what the native functions accept and reject (both call
`seqbalance._inputs`), with the same messages, but raises them as the upstream functions do: as
the plain built-in (``ValueError``, ``TypeError``, ``OverflowError``) an `ArgumentError` of the
package also is. Its cost is what the pure-Python partitioners in RL trainers pay:
``O(n * k)`` Python objects when ``equal_size=False``, so keep ``n * k`` modest.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ._inputs import (
    NEARLY,
    EqualSize,
    check_equal_size,
    check_greedy_equal_size,
    check_k_partitions,
    check_shape,
    normalize_weights,
)
from .errors import ArgumentError, PartitionError

__all__ = ["karmarkar_karp", "get_seqlen_balanced_partitions", "greedy_partition"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The built-ins an `ArgumentError` is raised as here, the first that applies.
_BUILTINS = (ValueError, TypeError, OverflowError)


def _plain_errors(func: _F) -> _F:
    """``func`` raising each `ArgumentError` as the plain built-in it also is, as upstream."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ArgumentError as error:
            builtin = next(b for b in type(error).__mro__ if b in _BUILTINS)
            raise builtin(str(error)) from None

    return wrapper  # type: ignore[return-value]


class _Set:
    """Items in insertion order with their running sum (rule 3 defines the order between sets).

    The sum starts at the int 0 and adds each item in insertion order, in the values' own
    arithmetic: exact for ints, double for Python floats, single for NumPy float32 scalars
    (``0 + np.float32(x)`` stays float32 under NumPy 2).
    """

    __slots__ = ("items", "sum")

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []
        self.sum: Any = 0

    def add(self, index: int, value: Any) -> None:
        self.items.append((index, value))
        self.sum += value

    def absorb(self, other: _Set) -> None:
        if isinstance(other.sum, int):
            # Exact sums: adding the total is adding the items.
            self.sum += other.sum
        else:
            # Float sums round after every addition, so the order is part of the answer: the
            # other set's items, one at a time, in their insertion order.
            for _, value in other.items:
                self.sum += value
        self.items.extend(other.items)

    def order_key(self) -> tuple[Any, int, list[tuple[int, Any]]]:
        # Larger key = larger set: sum, then count, then the items compared lexicographically.
        return (self.sum, len(self.items), self.items)

    def __lt__(self, other: _Set) -> bool:
        return self.order_key() < other.order_key()


class _State:
    """k sets in descending set order; rule 4 decides which state leaves the queue first."""

    __slots__ = ("sets",)

    def __init__(self, sets: list[_Set]) -> None:
        self.sets = sets
        self._reorder()

    def _reorder(self) -> None:
        # sorted() is stable, so equal (i.e. empty) sets keep their relative order.
        self.sets = sorted(self.sets, reverse=True)

    @property
    def spread(self) -> Any:
        return self.sets[0].sum - self.sets[-1].sum

    def absorb(self, other: _State) -> None:
        k = len(self.sets)
        for i in range(k):
            self.sets[i].absorb(other.sets[k - 1 - i])
        self._reorder()

    def __lt__(self, other: _State) -> bool:
        # heapq pops the smallest element, so "comes first" is written as "less than".
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.sets[0] > other.sets[0]


def _seed_states(pairs: list[tuple[Any, int]], k: int, equal_size: bool) -> list[_State]:
    states = []
    if equal_size:
        for start in range(0, len(pairs), k):
            sets = [_Set() for _ in range(k)]
            for position, (value, index) in enumerate(pairs[start : start + k]):
                sets[position].add(index, value)
            states.append(_State(sets))
    else:
        for value, index in pairs:
            sets = [_Set() for _ in range(k)]
            sets[0].add(index, value)
            states.append(_State(sets))
    return states


def _values(seqlen_list: Any) -> list[Any]:
    """The validated values as the reference computes with them: Python ints, Python floats
    (double precision) or NumPy float32 scalars (single precision)."""
    weights = normalize_weights(seqlen_list)
    if weights.precision == "single":
        return list(weights.values)
    return weights.values.tolist()


def _largest_differencing(values: list[Any], k: int, equal_size: EqualSize) -> list[list[int]]:
    pairs = [(value, index) for index, value in enumerate(values)]
    if equal_size == NEARLY:
        # Placeholders of value 0 with indexes -p..-1: they sort before every real item, so the
        # first chunk holds all of them, one per set, and they count in every rule.
        placeholders = (-len(values)) % k
        pairs += [(0, -index) for index in range(1, placeholders + 1)]
    queue = _seed_states(sorted(pairs), k, bool(equal_size))
    heapq.heapify(queue)
    while len(queue) > 1:
        first = heapq.heappop(queue)
        second = heapq.heappop(queue)
        first.absorb(second)
        heapq.heappush(queue, first)
    final = queue[0]
    # Dropping the placeholders re-orders nothing.
    return [[index for index, _ in s.items if index >= 0] for s in final.sets]


@_plain_errors
def karmarkar_karp(seqlen_list: Any, k_partitions: int, equal_size: EqualSize) -> list[list[int]]:
    """Largest differencing method: ``k_partitions`` lists of indexes, heaviest partition first.

    Indexes inside a partition are in the order they were merged. ``equal_size="nearly"`` runs the
    equal-size rules with ``(-n) % k`` placeholders of value 0 and indexes ``-p..-1`` and drops
    them from the final sets. Same contract, validation and errors as
    `seqbalance.karmarkar_karp`.
    """
    k = check_k_partitions(k_partitions)
    mode = check_equal_size(equal_size)
    values = _values(seqlen_list)
    check_shape(len(values), k, mode)
    return _largest_differencing(values, k, mode)


@_plain_errors
def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: int, equal_size: EqualSize
) -> list[list[int]]:
    """`karmarkar_karp` with each partition's indexes sorted ascending (partition order kept)."""
    partitions = karmarkar_karp(seqlen_list, k_partitions, equal_size)
    seen: set[int] = set()
    for partition in partitions:
        assert partition, "a partition is empty"
        seen.update(partition)
    assert len(partitions) == k_partitions and len(seen) == sum(map(len, partitions))
    return [sorted(partition) for partition in partitions]


@_plain_errors
def greedy_partition(seqlen_list: Any, k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Items in input order, each onto the partition with the smallest running sum (lowest on ties).

    With ``equal_size`` every value is compared with ``sum(values) + 1`` added, which keeps the
    counts equal.
    """
    k = check_k_partitions(k_partitions)
    mode = check_greedy_equal_size(equal_size)
    values = _values(seqlen_list)
    check_shape(len(values), k, mode)
    bias: Any = 0
    if mode:
        # A plain left fold in input order (builtin sum() compensates float rounding on 3.12+).
        for value in values:
            bias += value
        bias += 1
    partitions: list[list[int]] = [[] for _ in range(k)]
    sums: list[Any] = [0] * k
    # float32 sums may overflow to inf here (as the replayed reference's do); NumPy would warn.
    with np.errstate(over="ignore"):
        for index, value in enumerate(values):
            target = min(range(k), key=lambda p: (sums[p], p))
            partitions[target].append(index)
            sums[target] += value + bias
    counts = sorted(len(p) for p in partitions)
    if mode and counts[0] != counts[-1]:
        # Only float rounding can do this (the bias outweighs every difference of exact sums).
        raise PartitionError(
            f"greedy_partition with equal_size=True lost equal counts (parts of {counts[0]} to "
            f"{counts[-1]} items): float rounding of the biased sums; pass integer or smaller "
            "weights"
        )
    return partitions
