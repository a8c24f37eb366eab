"""The balanced sampler's reservations: the indexes of one ``(partition_id, task_name)`` that must
not be selected for a new batch.

An index is reserved in one of two states:

* **pending**: it is in a cached share that its rank has not collected yet. The controller still
  lists it as ready (nobody consumed it), so it must be kept out of every other batch. A pending
  reservation is never dropped: not by eviction, not by the bound below.
* **handed out**: its share was collected. The caller records the consumption after the call
  returns, possibly several calls later (the README's loop reads its ready list, samples, then
  records; a controller may apply consumption late), so until then other callers still see the
  index as ready. It stays reserved until a ``ready_indexes`` passed on a later first call for a
  batch omits it: the consumption is visible then, and the controller will not offer it again.

Releasing on omission is what keeps the live reservations bounded without a clock: the caller's
own ready lists report what has been consumed. A caller that never records consumption makes
them grow; past ``2 * max_cached_batches`` global batches of live reservations the sampler raises
``RuntimeError`` rather than drop one (dropping could hand an index out twice).

One more guard covers a ready list read *before* a consumption was recorded but passed *after*
another list showed it (a thread of the README's loop descheduled between reading its list and
calling the sampler): every index ever handed out is also kept in `IndexHistory`, a set of
disjoint intervals, and never selected again. Selection takes the smallest free groups, so what
has been handed out is a prefix with few holes and the history stays a handful of intervals;
past `HISTORY_INTERVALS` intervals the lowest (oldest) are forgotten, leaving the omission
rule alone to protect those indexes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable

__all__ = [
    "HISTORY_INTERVALS",
    "IndexHistory",
    "TaskReservations",
    "check_capacity",
    "rebuild_reservations",
]

#: How many disjoint intervals of handed-out indexes one ``(partition_id, task_name)`` keeps.
HISTORY_INTERVALS = 4096


class IndexHistory:
    """Indexes handed out so far, as sorted disjoint half-open intervals ``[start, end)``.

    Membership and insertion cost ``O(log k)`` plus a list shift, for ``k`` intervals; ``k`` is
    capped at `HISTORY_INTERVALS` by forgetting the lowest intervals.

    Example:
        >>> history = IndexHistory()
        >>> history.update([3, 1, 2, 7])
        >>> history.intervals(), 2 in history, 5 in history
        ([(1, 4), (7, 8)], True, False)
    """

    __slots__ = ("ends", "starts")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for start, end in intervals:
            self.starts.append(start)
            self.ends.append(end)

    def __contains__(self, index: object) -> bool:
        position = bisect_right(self.starts, index) - 1  # type: ignore[call-overload]
        return position >= 0 and index < self.ends[position]  # type: ignore[operator]

    def __len__(self) -> int:
        return len(self.starts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexHistory):
            return NotImplemented
        return self.starts == other.starts and self.ends == other.ends

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple[list[int], list[int]]:
        return self.starts, self.ends

    def __setstate__(self, state: tuple[list[int], list[int]]) -> None:
        self.starts, self.ends = state

    def intervals(self) -> list[tuple[int, int]]:
        """The intervals, ascending."""
        return list(zip(self.starts, self.ends, strict=True))

    def add(self, index: int) -> None:
        starts, ends = self.starts, self.ends
        position = bisect_right(starts, index) - 1
        if position >= 0 and index < ends[position]:
            return
        joins_left = position >= 0 and ends[position] == index
        joins_right = position + 1 < len(starts) and starts[position + 1] == index + 1
        if joins_left and joins_right:
            ends[position] = ends[position + 1]
            del starts[position + 1], ends[position + 1]
        elif joins_left:
            ends[position] = index + 1
        elif joins_right:
            starts[position + 1] = index
        else:
            starts.insert(position + 1, index)
            ends.insert(position + 1, index + 1)

    def update(self, indexes: Iterable[int]) -> None:
        for index in sorted(indexes):
            self.add(index)
        excess = len(self.starts) - HISTORY_INTERVALS
        if excess > 0:
            del self.starts[:excess], self.ends[:excess]


class TaskReservations:
    """Pending and handed-out indexes of one ``(partition_id, task_name)``.

    ``index in reservations`` tells whether it is reserved either way; ``len`` counts both.
    """

    __slots__ = ("handed_out", "history", "pending")

    def __init__(
        self,
        pending: Iterable[int] = (),
        handed_out: Iterable[int] = (),
        history: IndexHistory | None = None,
    ) -> None:
        self.pending: set[int] = set(pending)
        self.handed_out: set[int] = set(handed_out)
        self.history = IndexHistory() if history is None else history
        self.history.update(self.handed_out)

    def __contains__(self, index: object) -> bool:
        return index in self.pending or index in self.handed_out or index in self.history

    def __len__(self) -> int:
        return len(self.pending) + len(self.handed_out)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskReservations):
            return NotImplemented
        return (
            self.pending == other.pending
            and self.handed_out == other.handed_out
            and self.history == other.history
        )

    def __repr__(self) -> str:
        return f"TaskReservations(pending={len(self.pending)}, handed_out={len(self.handed_out)})"

    # A mutable container: equality by content, so no hash.
    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple[set[int], set[int], IndexHistory]:
        return self.pending, self.handed_out, self.history

    def __setstate__(self, state: tuple[set[int], set[int], IndexHistory]) -> None:
        self.pending, self.handed_out, self.history = state

    def reserve(self, indexes: Iterable[int]) -> None:
        """Reserve the indexes of a new split as pending."""
        self.pending.update(indexes)

    def hand_out(self, share: Iterable[int]) -> None:
        """A rank collected ``share``: its indexes move from pending to handed out."""
        share = list(share)
        self.pending.difference_update(share)
        self.handed_out.update(share)
        self.history.update(share)

    def release_consumed(self, ready: set[int]) -> None:
        """Release every handed-out index that ``ready`` (a later ready list) omits.

        Costs the smaller of the two sizes: the reservations never grow with the number of
        steps, only with the indexes still in flight.
        """
        if self.handed_out:
            self.handed_out.intersection_update(ready)


def check_capacity(
    reservations: TaskReservations,
    selection: int,
    max_cached_batches: int | None,
    key: tuple[Hashable, Hashable],
) -> None:
    """Raise ``RuntimeError`` when reserving ``selection`` more indexes would pass the bound.

    The bound is ``2 * max_cached_batches * selection`` live reservations, where ``selection``
    is the global batch (``dp_size * batch_size``, or ``dp_size`` whole groups when a rank's
    ``batch_size`` is below the group size); ``None`` means no bound.
    """
    if max_cached_batches is None:
        return
    limit = 2 * max_cached_batches * selection
    live = len(reservations)
    if live + selection > limit:
        partition_id, task_name = key
        raise RuntimeError(
            f"SeqlenBalancedSampler: partition_id {partition_id!r}, task_name {task_name!r} holds "
            f"{live} reserved indexes ({len(reservations.pending)} in shares not yet collected, "
            f"{len(reservations.handed_out)} handed out but still listed in ready_indexes); "
            f"another global batch of {selection} would pass the bound of "
            f"2 * max_cached_batches ({max_cached_batches}) * {selection} = {limit}. A handed-out "
            "index stays reserved until a later ready_indexes omits it: record consumption (mark "
            "the returned indexes consumed) before asking for more batches, or raise "
            "max_cached_batches if ranks lag this far. Nothing was dropped or cached."
        )


def rebuild_reservations(
    cache: dict[tuple[Hashable, Hashable, Hashable], list[list[int]]],
    uncollected: dict[tuple[Hashable, Hashable, Hashable], set[int]],
    handed_out: dict[tuple[Hashable, Hashable], list[int]] | None,
) -> dict[tuple[Hashable, Hashable], TaskReservations]:
    """Reservations from cached splits: uncollected shares are pending; the rest of the cached
    indexes are handed out, unless ``handed_out`` (a checkpoint's record) says which are."""
    reservations: dict[tuple[Hashable, Hashable], TaskReservations] = {}
    for (partition_id, task_name, batch), shares in cache.items():
        reserved = reservations.setdefault((partition_id, task_name), TaskReservations())
        pending = uncollected.get((partition_id, task_name, batch), set())
        for rank, share in enumerate(shares):
            if rank in pending:
                reserved.pending.update(share)
            elif handed_out is None:
                reserved.handed_out.update(share)
    for key, indexes in (handed_out or {}).items():
        reservations.setdefault(key, TaskReservations()).handed_out.update(indexes)
    for reserved in reservations.values():
        reserved.history.update(reserved.handed_out)
    return reservations
