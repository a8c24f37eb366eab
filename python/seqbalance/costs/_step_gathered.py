"""The records `seqbalance.StepTimer` gathers, laid end to end for one NumPy pass (`Gathered`),
and the checked path item by item that a step the bulk path cannot take goes through (its
refusals are the cost's own: `apply_lockstep_items`, `apply_per_rank_items`, which return
the step's measured and predicted seconds and its observations)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._time_trust import Reach
from .time_cost import TimeCost

#: Micro-batches whose float64 token sum reaches this take the checked path item by item
#: (`check_tokens` redoes such sums exactly).
EXACT_SUMS = 2.0**62


def reach_of(flat: np.ndarray, sizes: np.ndarray) -> Reach | None:
    """`Reach.of` the micro-batches laid end to end in ``flat`` (``sizes`` positive)."""
    if not sizes.size:
        return None
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return Reach(int(flat.max()), int(np.add.reduceat(flat, starts).max()))


class Gathered:
    """Every rank's record of a step, laid end to end: the lengths of every micro-batch of
    rank 0, then rank 1, ...; ``sizes``, ``seconds``, ``rank`` and ``slot`` per micro-batch."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        lengths, sizes, seconds = [], [], []
        for rank, item in enumerate(records):
            flat = np.asarray(item["lengths"])
            size = np.asarray(item["sizes"])
            took = np.asarray(item["seconds"])
            if (
                flat.ndim != 1
                or size.ndim != 1
                or took.shape != size.shape
                or flat.dtype.kind not in "iu"
                or size.dtype.kind not in "iu"
                or took.dtype.kind != "f"
                or int(size.sum()) != flat.size
                or (size.size and int(size.min()) < 0)
            ):
                raise ValueError(
                    f"StepTimer.end_step: rank {rank}'s record is not one this StepTimer "
                    "makes (every rank must run the same seqbalance); nothing was applied"
                )
            lengths.append(flat.astype(np.int64, copy=False))
            sizes.append(size.astype(np.int64, copy=False))
            seconds.append(took.astype(np.float64, copy=False))
        self.flat = np.concatenate(lengths)
        self.sizes = np.concatenate(sizes)
        self.seconds = np.concatenate(seconds)
        self.counts = np.array([size.size for size in sizes], dtype=np.int64)
        self.rank = np.repeat(np.arange(len(records)), self.counts)
        firsts = np.concatenate(([0], np.cumsum(self.counts)[:-1])).astype(np.int64)
        self.slot = np.arange(self.sizes.size) - np.repeat(firsts, self.counts)
        self.last = self.slot == np.repeat(self.counts - 1, self.counts)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        full = self.sizes > 0
        with np.errstate(over="ignore"):
            totals = np.add.reduceat(self.flat.astype(np.float64), self.offsets[full])
        #: Whether the bulk path gives what the checked path would: lengths positive, times
        #: positive and finite, token sums far from int64's end. Otherwise `items`.
        self.clean = bool(
            (not self.flat.size or int(self.flat.min()) > 0)
            and np.isfinite(self.seconds).all()
            and (self.seconds > 0).all()
            and (not totals.size or float(totals.max()) < EXACT_SUMS)
        )

    def segments(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The micro-batches ``chosen`` (positions in rank order, each non-empty) laid end to
        end in that order, and their sizes."""
        sizes = self.sizes[chosen]
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        shift = np.repeat(self.offsets[chosen] - starts, sizes)
        return self.flat[np.arange(int(sizes.sum())) + shift], sizes

    def largest_rank_sum(self, values: np.ndarray) -> float:
        """The largest over ranks of the sum of a rank's ``values`` (one per micro-batch),
        summed in slot order as Python's ``sum`` does; 0 without micro-batches."""
        if not values.size:
            return 0.0
        table = np.zeros((self.counts.size, int(self.counts.max())), dtype=np.float64)
        table[self.rank, self.slot] = values
        return float(np.cumsum(table, axis=1)[:, -1].max())

    def items(self) -> list[dict[str, Any]]:
        """The records as lists (micro-batches of lengths, times), for the checked path."""
        batches = np.split(self.flat, np.cumsum(self.sizes)[:-1]) if self.sizes.size else []
        records = []
        for rank in range(self.counts.size):
            mine = np.flatnonzero(self.rank == rank)
            records.append(
                {
                    "lengths": [batches[i].tolist() for i in mine.tolist()],
                    "seconds": self.seconds[mine].tolist(),
                }
            )
        return records


def item_predictions(cost: TimeCost, records: list[dict[str, Any]]) -> list[list[float]]:
    """The cost's seconds for every rank's every micro-batch (0 for an empty one)."""
    batches = [lengths for item in records for lengths in item["lengths"] if lengths]
    seconds = iter(cost.predict(batches).tolist())
    return [[next(seconds) if lengths else 0.0 for lengths in item["lengths"]] for item in records]


def apply_lockstep_items(cost: TimeCost, records: list[dict[str, Any]]) -> tuple[float, float, int]:
    """`StepTimer`'s lockstep step item by item, through the cost's checks (a step the bulk
    path cannot take as it is: its refusals are the cost's own)."""
    predicted = np.array(item_predictions(cost, records)).reshape(len(records), -1)
    times = np.array([item["seconds"] for item in records]).reshape(len(records), -1)
    slot_times = times.max(axis=0)
    units, seconds = [], []
    for slot, time_taken in enumerate(slot_times.tolist()):
        unit = [item["lengths"][slot] for item in records]
        if any(unit):
            units.append(unit)
            seconds.append(time_taken)
    cost.update_synchronized_many(units, seconds)
    return float(slot_times.sum()), float(predicted.max(axis=0).sum()), len(units)


def apply_per_rank_items(cost: TimeCost, records: list[dict[str, Any]]) -> tuple[float, float, int]:
    """`StepTimer`'s per-rank step item by item, through the cost's checks."""
    predicted = item_predictions(cost, records)
    batches, seconds = [], []
    for slot in range(max((len(item["seconds"]) for item in records), default=0)):
        for item in records:
            if slot < len(item["seconds"]) - 1 and item["lengths"][slot]:
                batches.append(item["lengths"][slot])
                seconds.append(item["seconds"][slot])
    cost.update_many(batches, seconds)
    return (
        max((sum(item["seconds"]) for item in records), default=0.0),
        max((sum(rank) for rank in predicted), default=0.0),
        len(batches),
    )
