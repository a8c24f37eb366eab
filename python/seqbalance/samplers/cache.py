"""The bounded result cache of the caching samplers: what is kept, what is evicted, and when.

Samplers that remember their answers keep them in
``_states[partition_id][task_name][dp_rank][batch_index]`` (the layout TransferQueue's controller
reads). `BatchCache` adds the bookkeeping that keeps that cache bounded over a months-long
run, at a per-call cost that does not grow with the number of steps:

* **Positions.** An int batch index is its own position; any other batch index (a string, None)
  is numbered in the order such indexes are first cached, on a clock of its own.
* **Eviction rule.** Batch ``b`` is evicted only when a call for a batch at position
  ``>= b + max_cached_batches`` arrives (for non-int indexes: when such a newer one is first
  cached), and only once the sampler allows it (the balanced sampler: every share collected).
  Cached batches wait in a min-heap by position, so a call pops exactly the batches it evicts.
* **Evicted record.** Evicted batches are remembered (the last `EVICTED_RECORD_SIZE`
  exactly, older int ones through a per-rank high-water mark), so a repeat request from a peer
  lagging that far is refused rather than answered with different indexes.
"""

from __future__ import annotations

import heapq
import itertools
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

#: Default for ``max_cached_batches``: how far (in batch indexes) a cached batch may fall behind
#: the newest request of its ``(partition_id, task_name)`` before it is evicted. Ranks rarely run
#: more than a few batches apart, and 64 batches of cached index lists stay small.
DEFAULT_MAX_CACHED_BATCHES = 64

#: How many evicted batch indexes a caching sampler remembers exactly, per
#: ``(partition_id, task_name)``, so that a repeat request for one of them is refused rather than
#: answered with new indexes. Older int batch indexes are still refused through a per-rank
#: high-water mark; see `seqbalance.samplers.BaseSampler`.
EVICTED_RECORD_SIZE = 1024

BatchKey = tuple[Hashable, Hashable]

# Ranks that held a result for an evicted batch; None stands for "every rank" (the balanced sampler
# caches a share for each rank). The usual case, ranks 0..k-1, is kept as range(k): a set of all
# ranks for each of EVICTED_RECORD_SIZE batches would cost far more than the cache itself.
EvictedRanks = frozenset[int] | range | None

# Heap entry: (position, tie-break, batch_index). The tie-break keeps batch indexes of other
# types from ever being compared.
_Entry = tuple[int, int, Hashable]


class BatchCache:
    """Mixin: the cache of results and its bound. The sampler holds ``self._lock`` around every call.

    Per ``(partition_id, task_name)``: ``_positions`` maps each cached batch index (insertion
    order: first cached first) to its position; ``_queue`` holds the int and the non-int batches
    in two min-heaps by position; ``_held`` the batches past the bound that the sampler may not
    evict yet; ``_horizon`` the largest int batch index of any call and ``_next_sequence`` the
    clock of non-int ones.
    """

    _states: dict[Any, Any]
    max_cached_batches: int | None
    _positions: dict[BatchKey, dict[Hashable, int]]
    _queue: dict[BatchKey, tuple[list[_Entry], list[_Entry]]]
    _held: dict[BatchKey, set[Hashable]]
    _horizon: dict[BatchKey, int]
    _next_sequence: dict[BatchKey, int]
    _evicted: dict[BatchKey, dict[Hashable, EvictedRanks]]
    _evicted_floor: dict[BatchKey, dict[int | None, int]]
    _warned_lagging: bool

    def _init_cache(self, max_cached_batches: int | None) -> None:
        self._states = {}
        self.max_cached_batches = max_cached_batches
        self._positions = {}
        self._queue = {}
        self._held = {}
        self._horizon = {}
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
            self._positions,
            self._queue,
            self._held,
            self._horizon,
            self._next_sequence,
            self._evicted,
            self._evicted_floor,
        )
        for table in tables:
            for key in [key for key in table if key[0] == partition_id]:
                del table[key]

    def _batch_order(self) -> dict[BatchKey, list[Hashable]]:
        """The cached batch indexes per ``(partition_id, task_name)``, first cached first."""
        return {key: list(positions) for key, positions in self._positions.items()}

    def _set_batch_order(self, order: dict[BatchKey, list[Hashable]]) -> None:
        """Rebuild positions and queues from cached batch indexes, first cached first (after a
        checkpoint is loaded, or from an older pickle). Batches the sampler may not evict yet
        are found held again when their turn comes."""
        self._positions, self._queue, self._held = {}, {}, {}
        self._horizon, self._next_sequence = {}, {}
        for key, batches in order.items():
            for batch_index in batches:
                if batch_index in self._positions.get(key, {}):
                    continue
                self._enqueue(key, batch_index)
                position = int_index(batch_index)
                if position is not None:
                    self._horizon[key] = max(self._horizon.get(key, position), position)

    def _enqueue(self, key: BatchKey, batch_index: Hashable) -> int:
        positions = self._positions.setdefault(key, {})
        position = int_index(batch_index)
        if position is None:
            position = self._next_sequence.get(key, 0)
            self._next_sequence[key] = position + 1
            heap = self._queue.setdefault(key, ([], []))[1]
        else:
            heap = self._queue.setdefault(key, ([], []))[0]
        positions[batch_index] = position
        heapq.heappush(heap, (position, next(_TIE_BREAK), batch_index))
        return position

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
        """Record ``batch_index`` as cached; a new non-int batch advances the non-int clock."""
        key = (partition_id, task_name)
        if batch_index in self._positions.get(key, {}):
            return
        position = self._enqueue(key, batch_index)
        if int_index(batch_index) is None:
            self._evict_up_to(partition_id, task_name, position, ints=False)

    def _advance(self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable) -> None:
        """A call for ``batch_index`` arrived: evict the int batches it puts past the bound."""
        position = int_index(batch_index)
        if position is None:
            return
        key = (partition_id, task_name)
        if position > self._horizon.get(key, position - 1):
            self._horizon[key] = position
        self._evict_up_to(partition_id, task_name, position, ints=True)

    def _evict_up_to(
        self, partition_id: Hashable, task_name: Hashable, position: int, ints: bool
    ) -> None:
        bound = self.max_cached_batches
        key = (partition_id, task_name)
        queues = self._queue.get(key)
        if bound is None or queues is None:
            return
        heap = queues[0] if ints else queues[1]
        limit = position - bound
        while heap and heap[0][0] <= limit:
            _, _, batch_index = heapq.heappop(heap)
            if self._may_evict(partition_id, task_name, batch_index):
                self._evict_batch(key, batch_index)
            else:
                self._held.setdefault(key, set()).add(batch_index)

    def _release_held(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> None:
        """The sampler now allows evicting ``batch_index``: queue it again if it was held."""
        key = (partition_id, task_name)
        held = self._held.get(key)
        if held and batch_index in held:
            held.discard(batch_index)
            position = self._positions[key][batch_index]
            heap = self._queue[key][0 if int_index(batch_index) is not None else 1]
            heapq.heappush(heap, (position, next(_TIE_BREAK), batch_index))

    def _evict_batch(self, key: BatchKey, batch_index: Hashable) -> None:
        partition_id, task_name = key
        del self._positions[key][batch_index]
        ranks = self._ranks_holding(partition_id, task_name, batch_index)
        self._drop_batch(partition_id, task_name, batch_index)
        self._record_eviction(partition_id, task_name, batch_index, ranks)

    def _warn_if_lagging(
        self, partition_id: Hashable, task_name: Hashable, dp_rank: int, batch_index: Hashable
    ) -> None:
        """Log once per sampler when a cache hit comes within one batch of the bound.

        Batch ``b`` is evicted by a call for ``b + max_cached_batches``; a hit for ``b`` while a
        call for ``b + max_cached_batches - 1`` has arrived is served, but a peer asking after the
        next batch starts gets a ``ValueError``.
        """
        bound = self.max_cached_batches
        if bound is None or self._warned_lagging:
            return
        key = (partition_id, task_name)
        position = self._positions.get(key, {}).get(batch_index)
        if position is None:
            return
        if int_index(batch_index) is not None:
            newest = self._horizon.get(key, position)
        else:
            newest = self._next_sequence.get(key, position + 1) - 1
        if newest - position >= bound - 1:
            self._warned_lagging = True
            logger.warning(
                "%s: dp_rank %d asked for batch_index %r of partition_id %r, task_name %r while "
                "a request %d batches ahead has arrived; max_cached_batches=%d, so the next batch "
                "may evict it and a peer of this rank asking later gets a ValueError. Raise "
                "max_cached_batches if peers of one dp_rank run this far apart (logged once)",
                type(self).__name__,
                dp_rank,
                batch_index,
                partition_id,
                task_name,
                newest - position,
                bound,
            )

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
                f"the cache (max_cached_batches={self.max_cached_batches}: a request "
                f"max_cached_batches or more batches ahead has arrived); answering again would "
                "hand this caller different indexes from its peers. A peer of this dp_rank lags "
                "max_cached_batches batches or more behind: raise max_cached_batches (or pass "
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


_TIE_BREAK = itertools.count()


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
