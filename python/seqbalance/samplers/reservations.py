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

Releasing on omission is what keeps the reservations bounded without a clock: the caller's own
ready lists report what has been consumed. A caller that never records consumption makes the
reservations grow; past ``2 * max_cached_batches`` global batches of live reservations the
sampler raises ``RuntimeError`` rather than drop one (dropping could hand an index out twice).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ["TaskReservations", "check_capacity"]


class TaskReservations:
    """Pending and handed-out indexes of one ``(partition_id, task_name)``.

    ``index in reservations`` tells whether it is reserved either way; ``len`` counts both.
    """

    __slots__ = ("handed_out", "pending")

    def __init__(self, pending: Iterable[int] = (), handed_out: Iterable[int] = ()) -> None:
        self.pending: set[int] = set(pending)
        self.handed_out: set[int] = set(handed_out)

    def __contains__(self, index: object) -> bool:
        return index in self.pending or index in self.handed_out

    def __len__(self) -> int:
        return len(self.pending) + len(self.handed_out)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskReservations):
            return NotImplemented
        return self.pending == other.pending and self.handed_out == other.handed_out

    def __repr__(self) -> str:
        return f"TaskReservations(pending={len(self.pending)}, handed_out={len(self.handed_out)})"

    # A mutable container: equality by content, so no hash.
    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple[set[int], set[int]]:
        return self.pending, self.handed_out

    def __setstate__(self, state: tuple[set[int], set[int]]) -> None:
        self.pending, self.handed_out = state

    def reserve(self, indexes: Iterable[int]) -> None:
        """Reserve the indexes of a new split as pending."""
        self.pending.update(indexes)

    def hand_out(self, share: Iterable[int]) -> None:
        """A rank collected ``share``: its indexes move from pending to handed out."""
        share = list(share)
        self.pending.difference_update(share)
        self.handed_out.update(share)

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
