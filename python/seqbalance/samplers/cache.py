"""The bounded result cache of the caching samplers: what is kept, what is evicted, and when.

Samplers that remember their answers keep them in
``_states[partition_id][task_name][dp_rank][batch_index]`` (the layout TransferQueue's controller
reads). :class:`BatchCache` adds the bookkeeping that keeps that cache bounded over a months-long
run: the order in which batch indexes were first cached, a record of evicted batches (so a repeat
request is refused rather than answered with different indexes), and the lagging-peer warning.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from numbers import Integral
from typing import Any

__all__ = [
    "DEFAULT_MAX_CACHED_BATCHES",
    "EVICTED_RECORD_SIZE",
    "BatchCache",
    "BatchKey",
    "EvictedRanks",
]

logger = logging.getLogger(__name__)

#: Default for ``max_cached_batches``: how many batch indexes a caching sampler remembers per
#: ``(partition_id, task_name)``. Ranks rarely run more than a few batches apart, and 64 batches of
#: cached index lists stay small even for large global batches.
DEFAULT_MAX_CACHED_BATCHES = 64

#: How many evicted batch indexes a caching sampler remembers exactly, per
#: ``(partition_id, task_name)``, so that a repeat request for one of them is refused rather than
#: answered with new indexes. Older int batch indexes are still refused through a per-rank
#: high-water mark; see :class:`seqbalance.samplers.BaseSampler`.
EVICTED_RECORD_SIZE = 1024

BatchKey = tuple[Hashable, Hashable]

# Ranks that held a result for an evicted batch; None stands for "every rank" (the balanced sampler
# caches a share for each rank). The usual case, ranks 0..k-1, is kept as range(k): a set of all
# ranks for each of EVICTED_RECORD_SIZE batches would cost far more than the cache itself.
EvictedRanks = frozenset[int] | range | None


class BatchCache:
    """Mixin: the cache of results and its bound. The sampler holds ``self._lock`` around every call.

    ``_batch_order[(partition_id, task_name)]`` maps each cached batch index, oldest first, to a
    sequence number (its position in first-cached order), so how far a request lags behind the
    newest batch is one subtraction, whatever the bound.
    """

    _states: dict[Any, Any]
    max_cached_batches: int | None
    _batch_order: dict[BatchKey, dict[Hashable, int]]
    _next_sequence: dict[BatchKey, int]
    _evicted: dict[BatchKey, dict[Hashable, EvictedRanks]]
    _evicted_floor: dict[BatchKey, dict[int | None, int]]
    _warned_lagging: bool

    def _init_cache(self, max_cached_batches: int | None) -> None:
        self._states = {}
        self.max_cached_batches = max_cached_batches
        # Insertion-ordered: (partition_id, task_name) -> {batch_index: sequence number}.
        self._batch_order = {}
        self._next_sequence = {}
        # Insertion-ordered: (partition_id, task_name) -> {evicted batch_index: ranks}, oldest
        # first, at most EVICTED_RECORD_SIZE entries each.
        self._evicted = {}
        # (partition_id, task_name) -> {rank (None: every rank): largest int batch_index pushed
        # out of _evicted}. Bounded by the number of ranks, so the record stays small forever.
        self._evicted_floor = {}
        self._warned_lagging = False

    def _forget_partition(self, partition_id: Hashable) -> None:
        self._states.pop(partition_id, None)
        tables: tuple[dict[Any, Any], ...] = (
            self._batch_order,
            self._next_sequence,
            self._evicted,
            self._evicted_floor,
        )
        for table in tables:
            for key in [key for key in table if key[0] == partition_id]:
                del table[key]

    def _set_batch_order(self, order: dict[BatchKey, list[Hashable]]) -> None:
        """Replace the order record (after a checkpoint is loaded): sequence numbers from 0."""
        self._batch_order = {
            key: {batch: position for position, batch in enumerate(batches)}
            for key, batches in order.items()
        }
        self._next_sequence = {key: len(batches) for key, batches in order.items()}

    def _lookup(
        self, partition_id: Hashable, task_name: Hashable, dp_rank: int, batch_index: Hashable
    ) -> tuple[bool, Any]:
        per_rank = self._states.get(partition_id, {}).get(task_name, {})
        batches = per_rank.get(dp_rank)
        if batches is None or batch_index not in batches:
            return False, None
        return True, batches[batch_index]

    def _store(
        self,
        partition_id: Hashable,
        task_name: Hashable,
        dp_rank: int,
        batch_index: Hashable,
        result: Any,
    ) -> None:
        tasks = self._states.setdefault(partition_id, {})
        tasks.setdefault(task_name, {}).setdefault(dp_rank, {})[batch_index] = result

    def _remember_batch(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> None:
        """Record ``batch_index`` as cached, then evict old batches beyond the bound."""
        key = (partition_id, task_name)
        order = self._batch_order.setdefault(key, {})
        if batch_index not in order:
            sequence = self._next_sequence.get(key, 0)
            order[batch_index] = sequence
            self._next_sequence[key] = sequence + 1
        self._evict(partition_id, task_name)

    def _warn_if_lagging(
        self, partition_id: Hashable, task_name: Hashable, dp_rank: int, batch_index: Hashable
    ) -> None:
        """Log once per sampler when a cache hit comes within one batch of being evicted.

        A batch is kept while fewer than ``max_cached_batches`` newer ones are cached; a request
        for one with ``max_cached_batches - 1`` newer ones is served, but the next new batch may
        evict it, and a peer asking after that gets a ``ValueError``.
        """
        bound = self.max_cached_batches
        if bound is None or self._warned_lagging:
            return
        key = (partition_id, task_name)
        order = self._batch_order.get(key)
        if not order or batch_index not in order:
            return
        newer = self._next_sequence[key] - 1 - order[batch_index]
        if newer >= bound - 1:
            self._warned_lagging = True
            logger.warning(
                "%s: dp_rank %d asked for batch_index %r of partition_id %r, task_name %r with "
                "%d newer batches cached; max_cached_batches=%d, so the next new batch may evict "
                "it and a peer of this rank asking later gets a ValueError. Raise "
                "max_cached_batches if peers of one dp_rank run this far apart (logged once)",
                type(self).__name__,
                dp_rank,
                batch_index,
                partition_id,
                task_name,
                newer,
                bound,
            )

    def _evict(self, partition_id: Hashable, task_name: Hashable) -> None:
        bound = self.max_cached_batches
        order = self._batch_order.get((partition_id, task_name))
        if bound is None or order is None or len(order) <= bound:
            return
        # The newest `bound` batches always stay; older ones go once nobody is owed a share.
        for batch_index in list(order)[: len(order) - bound]:
            if self._may_evict(partition_id, task_name, batch_index):
                del order[batch_index]
                ranks = self._ranks_holding(partition_id, task_name, batch_index)
                self._drop_batch(partition_id, task_name, batch_index)
                self._record_eviction(partition_id, task_name, batch_index, ranks)

    def _ranks_holding(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> EvictedRanks:
        """The ranks with a cached result for ``batch_index`` (None: every rank)."""
        per_rank = self._states.get(partition_id, {}).get(task_name, {})
        return compact_ranks(
            frozenset(rank for rank, batches in per_rank.items() if batch_index in batches)
        )

    def _record_eviction(
        self,
        partition_id: Hashable,
        task_name: Hashable,
        batch_index: Hashable,
        ranks: EvictedRanks,
    ) -> None:
        key = (partition_id, task_name)
        record = self._evicted.setdefault(key, {})
        if batch_index in record:
            # Evicted before, then cached again for other ranks: both sets of ranks are owed
            # their old answer. Re-inserting moves the entry to the newest end.
            earlier = record.pop(batch_index)
            if earlier is None or ranks is None:
                ranks = None
            else:
                ranks = compact_ranks(frozenset(earlier) | frozenset(ranks))
        record[batch_index] = ranks
        while len(record) > EVICTED_RECORD_SIZE:
            oldest = next(iter(record))
            oldest_ranks = record.pop(oldest)
            position = int_index(oldest)
            if position is not None:
                floors = self._evicted_floor.setdefault(key, {})
                for rank in (None,) if oldest_ranks is None else oldest_ranks:
                    floors[rank] = max(floors.get(rank, position), position)

    def _was_evicted(
        self, partition_id: Hashable, task_name: Hashable, dp_rank: int, batch_index: Hashable
    ) -> bool:
        """Whether ``dp_rank`` already got a result for ``batch_index`` that has been evicted."""
        key = (partition_id, task_name)
        record = self._evicted.get(key)
        if record and batch_index in record:
            ranks = record[batch_index]
            if ranks is None or dp_rank in ranks:
                return True
        floors = self._evicted_floor.get(key)
        position = int_index(batch_index)
        if floors and position is not None:
            for rank in (None, dp_rank):
                if rank in floors and position <= floors[rank]:
                    return True
        return False

    def _refuse_if_evicted(
        self, partition_id: Hashable, task_name: Hashable, dp_rank: int, batch_index: Hashable
    ) -> None:
        """Raise ``ValueError`` when ``dp_rank`` repeats a request for an evicted batch."""
        if self._was_evicted(partition_id, task_name, dp_rank, batch_index):
            raise ValueError(
                f"batch_index {batch_index!r} of partition_id {partition_id!r}, task_name "
                f"{task_name!r} was already served to dp_rank {dp_rank} and has been evicted from "
                f"the cache (max_cached_batches={self.max_cached_batches}); answering again would "
                "hand this caller different indexes from its peers. A peer of this dp_rank lags "
                "more than max_cached_batches batches behind: raise max_cached_batches (or pass "
                "None to keep every batch)"
            )

    def _may_evict(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> bool:
        return True

    def _drop_batch(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> None:
        per_rank = self._states.get(partition_id, {}).get(task_name, {})
        for batches in per_rank.values():
            batches.pop(batch_index, None)


def compact_ranks(ranks: frozenset[int]) -> frozenset[int] | range:
    """``ranks`` as ``range(k)`` when it is exactly ``{0, ..., k-1}``, else unchanged."""
    if ranks and min(ranks) == 0 and max(ranks) == len(ranks) - 1:
        return range(len(ranks))
    return ranks


def int_index(batch_index: Hashable) -> int | None:
    """``batch_index`` as an int when it is an integer (NumPy ones too), else None."""
    # A bool is a flag, not a position.
    if isinstance(batch_index, Integral) and not isinstance(batch_index, bool):
        return int(batch_index)
    return None
