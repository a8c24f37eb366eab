"""The sampler interface shared by every seqbalance sampler, plus the stateless sequential sampler.

A controller (TransferQueue's, or a user's own loop) owns the data and asks a sampler which of the
ready global indexes one data-parallel rank should consume next. Samplers that remember their
answers keep them in ``_states[partition_id][task_name][dp_rank][batch_index]``; TransferQueue's
controller and its users read that layout, so it is kept as is. The cache's bound and eviction
live in `.cache`, the checkpoint checks in `.checkpoint`, the argument checks in
`._checks`.

Everything here is guarded by one re-entrant lock per sampler: TransferQueue's controller and
user loops call one sampler from many threads, and a half-updated cache must never be visible.
"""

from __future__ import annotations

import copy
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from typing import Any

from ._checks import check_cache_bound
from .cache import DEFAULT_MAX_CACHED_BATCHES, EVICTED_RECORD_SIZE, BatchCache
from .checkpoint import CHECKPOINT_FORMAT, Expected, Restored, validate_checkpoint

__all__ = [
    "DEFAULT_MAX_CACHED_BATCHES",
    "EVICTED_RECORD_SIZE",
    "BaseSampler",
    "SequentialSampler",
]


class BaseSampler(BatchCache, ABC):
    """Abstract base of all seqbalance samplers (the TransferQueue sampler interface).

    Subclasses implement `sample`; calling the sampler forwards to it. Caching samplers store
    results in ``self._states[partition_id][task_name][dp_rank][batch_index]``.

    Args:
        max_cached_batches: keyword-only. Batch ``b`` of a ``(partition_id, task_name)`` is
            evicted when a request for batch ``b + max_cached_batches`` or later arrives (int
            batch indexes; other batch indexes count in the order they are first cached), and
            only once no rank is still owed a share of it. ``None`` keeps everything, as
            upstream does. Default `DEFAULT_MAX_CACHED_BATCHES` (64).

    Evicted batches: a caller that repeats a request for a batch after it was evicted (typically
    a tensor- or pipeline-parallel peer of a ``dp_rank`` lagging ``max_cached_batches`` batches
    or more behind the newest request) gets a ``ValueError`` from `sample`, never a
    fresh selection: fresh indexes would differ from the ones its peers got. A peer repeating a
    request before that is always served from the cache. Raise the bound (or pass ``None``) if
    peers lag further. To recognise such requests the sampler keeps, per
    ``(partition_id, task_name)``, the last `EVICTED_RECORD_SIZE` (1024) evicted batch
    indexes with the ranks that held them, and, for int batch indexes pushed out of that record,
    a high-water mark per rank. Batch indexes are therefore expected to grow and must not be
    reused for new data within one ``(partition_id, task_name)``; `clear_cache` forgets the
    record along with the cache. The first time a request is served for a batch ``b`` after a
    request for ``b + max_cached_batches - 1`` (the next batch may evict it), a WARNING is
    logged once per sampler, so an operator sees a lagging peer coming; ``repr`` shows the bound
    and the eviction rule. Batch indexes are ints or other hashable non-numbers (a float such as
    ``nan`` is a ``TypeError``).

    Raises:
        TypeError: instantiating ``BaseSampler`` itself (it is abstract), or a non-int bound.
        ValueError: ``max_cached_batches <= 0``.
    """

    #: The kind recorded in checkpoints; a checkpoint of another kind is refused.
    checkpoint_kind = "BaseSampler"

    def __init__(self, *, max_cached_batches: int | None = DEFAULT_MAX_CACHED_BATCHES) -> None:
        # Cooperative: with the TransferQueue integration, the next class in the MRO is
        # TransferQueue's own BaseSampler, whose __init__ must run too (it may set _states).
        super().__init__()
        self._init_cache(check_cache_bound(max_cached_batches))
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
            self._forget_partition(partition_id)

    def __repr__(self) -> str:
        bound = self.max_cached_batches
        cache = (
            "max_cached_batches=None (every batch kept)"
            if bound is None
            else f"max_cached_batches={bound} (batch b of a (partition_id, task_name) is evicted "
            f"when a request for batch b + {bound} or later arrives{self._eviction_rule()})"
        )
        settings = "".join(f"{name}={value!r}, " for name, value in self._repr_settings())
        return f"{type(self).__name__}({settings}{cache})"

    def _repr_settings(self) -> list[tuple[str, Any]]:
        return []

    def _eviction_rule(self) -> str:
        return ""

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> dict[str, Any]:
        """Return a snapshot of the sampler's state (plain dicts/lists/sets, safe to pickle).

        The snapshot is a deep copy: later calls on the sampler do not change it. Beside
        ``_states`` it records ``format_version``, the ``sampler`` kind and, where the sampler
        has them, ``n_samples_per_prompt`` and ``dp_size``, which `load_checkpoint` checks.

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
        expected = self._expected_checkpoint()
        header: dict[str, Any] = {"format_version": CHECKPOINT_FORMAT, "sampler": expected.kind}
        for name in ("n_samples_per_prompt", "dp_size"):
            if getattr(expected, name) is not None:
                header[name] = getattr(expected, name)
        with self._lock:
            return {**header, **copy.deepcopy(self._checkpoint_fields())}

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Restore a snapshot made by `save_checkpoint`, or an upstream ``{"_states": ...}``.

        All or nothing: every field is checked before anything changes, and a refused checkpoint
        leaves the sampler exactly as it was. Missing fields are inferred from ``_states``.

        Raises:
            TypeError: ``state`` is not a mapping, or a field has the wrong type.
            ValueError: ``state`` has no ``"_states"`` entry; it was saved by another kind of
                sampler, with another ``dp_size`` or ``n_samples_per_prompt`` (recorded, or
                inferred from the cached shares: the message gives both values), by a newer
                format; it lists an index twice, or holds a negative one.
        """
        restored = validate_checkpoint(state, self._expected_checkpoint())
        with self._lock:
            self._restore_fields(restored)

    def _expected_checkpoint(self) -> Expected:
        return Expected(kind=self.checkpoint_kind, pair_results=True)

    def _checkpoint_fields(self) -> dict[str, Any]:
        return {
            "_states": self._states,
            "_batch_order": self._batch_order(),
            "_evicted": self._evicted,
            "_evicted_floor": self._evicted_floor,
        }

    def _restore_fields(self, restored: Restored) -> None:
        # Only assignments of already-checked objects: nothing here can fail half-way.
        self._states = restored.states
        self._set_batch_order(restored.batch_order)
        self._evicted = restored.evicted
        self._evicted_floor = restored.evicted_floor

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        # Ray ships the sampler to the controller actor by pickling it; a lock cannot travel.
        # The copy is deep and made under the lock: pickle and copy.deepcopy walk the returned
        # state after this returns, while other threads may be sampling.
        with self._lock:
            return copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "_lock"})

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        old_order = state.pop("_batch_order", None)
        self.__dict__.update(state)
        self._lock = threading.RLock()
        if "_positions" not in state:
            # Pickled by a seqbalance that kept the first-cached order instead of positions.
            self._set_batch_order({key: list(order) for key, order in (old_order or {}).items()})
            self._warned_lagging = getattr(self, "_warned_lagging", False)


class SequentialSampler(BaseSampler):
    """The first ``batch_size`` ready indexes, in the order given (stateless).

    Plain slice semantics: no sorting, no de-duplication (a duplicated ready index is handed on as
    given: this sampler keeps no state, so the controller's own bookkeeping decides), and a partial
    batch when fewer are ready.

    Example:
        >>> SequentialSampler()([7, 3, 9], 2)
        ([7, 3], [7, 3])
    """

    checkpoint_kind = "SequentialSampler"

    def __init__(self) -> None:
        super().__init__()

    def sample(
        self, ready_indexes: list[int], batch_size: int, *args: Any, **kwargs: Any
    ) -> tuple[list[int], list[int]]:
        """Return ``(ready_indexes[:batch_size], ready_indexes[:batch_size])`` as two new lists."""
        chosen = list(ready_indexes[:batch_size])
        return chosen, list(chosen)
