"""The sampler interface shared by every seqbalance sampler, plus the stateless sequential sampler.

A controller (TransferQueue's, or a user's own loop) owns the data and asks a sampler which of the
ready global indexes one data-parallel rank should consume next. Samplers that remember their
answers keep them in ``_states[partition_id][task_name][dp_rank][batch_index]``; TransferQueue's
controller and its users read that layout, so it is kept as is.

Everything here is guarded by one re-entrant lock per sampler: TransferQueue's controller and
user loops call one sampler from many threads, and a half-updated cache must never be visible.
"""

from __future__ import annotations

import copy
import operator
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from numbers import Integral
from typing import Any

from .._inputs import _describe

__all__ = [
    "DEFAULT_MAX_CACHED_BATCHES",
    "EVICTED_RECORD_SIZE",
    "BaseSampler",
    "SequentialSampler",
]

#: Default for ``max_cached_batches``: how many batch indexes a caching sampler remembers per
#: ``(partition_id, task_name)``. Ranks rarely run more than a few batches apart, and 64 batches of
#: cached index lists stay small even for large global batches.
DEFAULT_MAX_CACHED_BATCHES = 64

#: How many evicted batch indexes a caching sampler remembers exactly, per
#: ``(partition_id, task_name)``, so that a repeat request for one of them is refused rather than
#: answered with new indexes. Older int batch indexes are still refused through a per-rank
#: high-water mark; see :class:`BaseSampler`.
EVICTED_RECORD_SIZE = 1024

BatchKey = tuple[Hashable, Hashable]

# Ranks that held a result for an evicted batch; None stands for "every rank" (the balanced sampler
# caches a share for each rank). The usual case, ranks 0..k-1, is kept as range(k): a set of all
# ranks for each of EVICTED_RECORD_SIZE batches would cost far more than the cache itself.
EvictedRanks = frozenset[int] | range | None


def _as_int(value: Any, name: str) -> int:
    """Return ``value`` as a Python int; ``bool``, floats, strings and ``None`` raise ``TypeError``."""
    if isinstance(value, bool) or value is None or isinstance(value, (float, str, bytes)):
        raise TypeError(f"{name} must be an int, got {_describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {_describe(value)}") from None


def check_positive(value: Any, name: str) -> int:
    """Return ``value`` as an int > 0, else ``TypeError``/``ValueError("<name> must be positive, got …")``."""
    number = _as_int(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {number}")
    return number


def check_dp_rank(dp_rank: Any) -> int:
    """Return ``dp_rank`` as an int >= 0.

    A negative rank is refused rather than used as a list index, which would silently hand the
    caller the last rank's share.
    """
    rank = _as_int(dp_rank, "dp_rank")
    if rank < 0:
        raise ValueError(f"dp_rank {rank} must be greater than or equal to 0")
    return rank


def check_batch_size(batch_size: Any) -> int:
    """Return ``batch_size`` as an int >= 0, else ``TypeError``/``ValueError``."""
    size = _as_int(batch_size, "batch_size")
    if size < 0:
        raise ValueError(f"batch_size must be >= 0, got {size}")
    return size


def _check_cache_bound(max_cached_batches: Any) -> int | None:
    if max_cached_batches is None:
        return None
    return check_positive(max_cached_batches, "max_cached_batches")


class BaseSampler(ABC):
    """Abstract base of all seqbalance samplers (the TransferQueue sampler interface).

    Subclasses implement :meth:`sample`; calling the sampler forwards to it. Caching samplers store
    results in ``self._states[partition_id][task_name][dp_rank][batch_index]``.

    Args:
        max_cached_batches: keyword-only. The newest ``max_cached_batches`` batch indexes per
            ``(partition_id, task_name)`` (in the order they were first cached) are always kept;
            older ones are forgotten, but only once no rank is still owed a share of them, so the
            cache can exceed the bound while shares are outstanding. ``None`` keeps everything,
            as upstream does. Default :data:`DEFAULT_MAX_CACHED_BATCHES` (64).

    Evicted batches: a caller that repeats a request for a batch after it was evicted (typically
    a tensor- or pipeline-parallel peer of a ``dp_rank`` lagging more than
    ``max_cached_batches`` batches behind) gets a ``ValueError`` from :meth:`sample`, never a
    fresh selection: fresh indexes would differ from the ones its peers got. So peers of one
    ``dp_rank`` must not lag by more than ``max_cached_batches`` batches; raise the bound (or
    pass ``None``) if they do. To recognise such requests the sampler keeps, per
    ``(partition_id, task_name)``, the last :data:`EVICTED_RECORD_SIZE` (1024) evicted batch
    indexes with the ranks that held them, and, for int batch indexes pushed out of that record,
    a high-water mark per rank. Batch indexes are therefore expected to grow and must not be
    reused for new data within one ``(partition_id, task_name)``; :meth:`clear_cache` forgets the
    record along with the cache.

    Raises:
        TypeError: instantiating ``BaseSampler`` itself (it is abstract), or a non-int bound.
        ValueError: ``max_cached_batches <= 0``.
    """

    def __init__(self, *, max_cached_batches: int | None = DEFAULT_MAX_CACHED_BATCHES) -> None:
        # Cooperative: with the TransferQueue integration, the next class in the MRO is
        # TransferQueue's own BaseSampler, whose __init__ must run too.
        super().__init__()
        self._states: dict[Any, Any] = {}
        self.max_cached_batches = _check_cache_bound(max_cached_batches)
        # Insertion-ordered: (partition_id, task_name) -> {batch_index: None}, oldest first.
        self._batch_order: dict[BatchKey, dict[Hashable, None]] = {}
        # Insertion-ordered: (partition_id, task_name) -> {evicted batch_index: ranks}, oldest
        # first, at most EVICTED_RECORD_SIZE entries each.
        self._evicted: dict[BatchKey, dict[Hashable, EvictedRanks]] = {}
        # (partition_id, task_name) -> {rank (None: every rank): largest int batch_index pushed
        # out of _evicted}. Bounded by the number of ranks, so the record stays small forever.
        self._evicted_floor: dict[BatchKey, dict[int | None, int]] = {}
        self._lock = threading.RLock()

    @abstractmethod
    def sample(
        self, ready_indexes: list[int], batch_size: int, *args: Any, **kwargs: Any
    ) -> tuple[list[int], list[int]]:
        """Choose indexes from ``ready_indexes``.

        Returns:
            ``(sampled, consumed)``: the indexes handed to the caller, and the indexes the
            controller must mark as consumed for the task.
        """

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[list[int], list[int]]:
        return self.sample(*args, **kwargs)

    # ------------------------------------------------------------------ cache queries

    def has_cached_result(
        self,
        partition_id: Hashable,
        task_name: Hashable,
        sampling_config: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether a result is cached for ``sampling_config``'s ``dp_rank`` and ``batch_index``.

        TransferQueue's controller asks this in polling mode before calling the sampler with
        fewer ready samples than ``batch_size``, so a late rank can collect its share.

        Args:
            partition_id: the partition.
            task_name: the consuming task.
            sampling_config: mapping that may hold ``dp_rank`` and ``batch_index``.

        Returns:
            False when ``dp_rank`` is missing; otherwise whether
            ``_states[partition_id][task_name][dp_rank]`` has the ``batch_index`` key.

        Example:
            >>> SequentialSampler().has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})
            False
        """
        config = sampling_config or {}
        dp_rank = config.get("dp_rank")
        if dp_rank is None:
            return False
        batch_index = config.get("batch_index")
        with self._lock:
            per_rank = self._states.get(partition_id, {}).get(task_name, {})
            return dp_rank in per_rank and batch_index in per_rank[dp_rank]

    def clear_cache(self, partition_id: Hashable) -> None:
        """Forget everything cached for ``partition_id``; an unknown partition is a no-op."""
        with self._lock:
            self._states.pop(partition_id, None)
            for table in (self._batch_order, self._evicted, self._evicted_floor):
                for key in [key for key in table if key[0] == partition_id]:
                    del table[key]

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> dict[str, Any]:
        """Return a snapshot of the sampler's state (plain dicts/lists/sets, safe to pickle).

        The snapshot is a deep copy: later calls on the sampler do not change it.

        Example:
            >>> import pickle
            >>> from seqbalance import RankAwareSampler
            >>> sampler = RankAwareSampler()
            >>> sampler.sample([4, 5, 6], 2, 0, 0, "train", "p0")
            ([4, 5], [4, 5])
            >>> restored = RankAwareSampler()
            >>> restored.load_checkpoint(pickle.loads(pickle.dumps(sampler.save_checkpoint())))
            >>> restored.sample([9], 2, 0, 0, "train", "p0")
            ([4, 5], [4, 5])
        """
        with self._lock:
            return copy.deepcopy(self._checkpoint_fields())

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Restore a snapshot made by :meth:`save_checkpoint` (or any ``{"_states": ...}`` dict).

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: ``state`` has no ``"_states"`` entry.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from save_checkpoint(), got {_describe(state)}")
        if "_states" not in state:
            raise ValueError("state must contain '_states' (a dict from save_checkpoint())")
        restored = copy.deepcopy(dict(state))
        with self._lock:
            self._restore_fields(restored)

    def _checkpoint_fields(self) -> dict[str, Any]:
        return {
            "_states": self._states,
            "_batch_order": {key: list(order) for key, order in self._batch_order.items()},
            "_evicted": self._evicted,
            "_evicted_floor": self._evicted_floor,
        }

    def _restore_fields(self, state: dict[str, Any]) -> None:
        self._states = state["_states"]
        order = state.get("_batch_order")
        if order is None:
            # A checkpoint from another implementation: recover an order from the cache itself.
            order = {}
            for partition_id, tasks in self._states.items():
                for task_name, ranks in tasks.items():
                    seen = order.setdefault((partition_id, task_name), [])
                    for batches in ranks.values():
                        seen.extend(b for b in batches if b not in seen)
        self._batch_order = {key: dict.fromkeys(batches) for key, batches in order.items()}
        # Checkpoints from upstream or from older seqbalance versions have no eviction record.
        self._evicted = state.get("_evicted", {})
        self._evicted_floor = state.get("_evicted_floor", {})

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        # Ray ships the sampler to the controller actor by pickling it; a lock cannot travel.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ helpers for subclasses
    # All of these expect the caller to hold self._lock.

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
        order = self._batch_order.setdefault((partition_id, task_name), {})
        order.setdefault(batch_index, None)
        self._evict(partition_id, task_name)

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
        return _compact_ranks(
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
                ranks = _compact_ranks(frozenset(earlier) | frozenset(ranks))
        record[batch_index] = ranks
        while len(record) > EVICTED_RECORD_SIZE:
            oldest = next(iter(record))
            oldest_ranks = record.pop(oldest)
            position = _int_index(oldest)
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
        position = _int_index(batch_index)
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


def _compact_ranks(ranks: frozenset[int]) -> frozenset[int] | range:
    """``ranks`` as ``range(k)`` when it is exactly ``{0, ..., k-1}``, else unchanged."""
    if ranks and min(ranks) == 0 and max(ranks) == len(ranks) - 1:
        return range(len(ranks))
    return ranks


def _int_index(batch_index: Hashable) -> int | None:
    """``batch_index`` as an int when it is an integer (NumPy ones too), else None."""
    # A bool is a flag, not a position.
    if isinstance(batch_index, Integral) and not isinstance(batch_index, bool):
        return int(batch_index)
    return None


class SequentialSampler(BaseSampler):
    """The first ``batch_size`` ready indexes, in the order given (stateless).

    Plain slice semantics: no sorting, no de-duplication, and a partial batch when fewer are ready.

    Example:
        >>> SequentialSampler()([7, 3, 9], 2)
        ([7, 3], [7, 3])
    """

    def __init__(self) -> None:
        super().__init__()

    def sample(
        self, ready_indexes: list[int], batch_size: int, *args: Any, **kwargs: Any
    ) -> tuple[list[int], list[int]]:
        """Return ``(ready_indexes[:batch_size], ready_indexes[:batch_size])`` as two new lists."""
        chosen = list(ready_indexes[:batch_size])
        return chosen, list(chosen)
