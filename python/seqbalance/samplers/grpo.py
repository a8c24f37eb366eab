"""Group-aware samplers: whole prompt groups (GRPO) and per-rank replication (rank-aware)."""

from __future__ import annotations

from collections.abc import Container, Hashable
from typing import Any

from ._checks import (
    check_batch_index,
    check_batch_size,
    check_dp_rank,
    check_hashable,
    check_positive,
    check_ready_indexes,
)
from .base import BaseSampler
from .cache import DEFAULT_MAX_CACHED_BATCHES
from .checkpoint import Expected

__all__ = ["GRPOGroupNSampler", "RankAwareSampler", "select_groups"]


def select_groups(
    ready_indexes: list[int],
    group_size: int,
    groups_needed: int,
    exclude: Container[int] | None = None,
) -> list[list[int]] | None:
    """Find ``groups_needed`` runs of ``group_size`` consecutive integers among ``ready_indexes``.

    The ready indexes (minus ``exclude``) are sorted; the scan starts at the smallest. Where the
    next ``group_size`` values are consecutive integers they form one group and the scan jumps past
    them; otherwise the scan moves on by one. A group need not start at a multiple of
    ``group_size``.

    Args:
        ready_indexes: the candidate indexes (any order; duplicates break runs).
        group_size: samples per prompt, >= 1.
        groups_needed: how many groups to find, >= 0.
        exclude: indexes to treat as not ready (reserved for other batches).

    Returns:
        The first ``groups_needed`` groups found, each an ascending list, or ``None`` when there
        are fewer.

    Example:
        >>> select_groups([0, 1, 3, 4, 5, 6, 7, 9, 10, 11], 3, 2)
        [[3, 4, 5], [9, 10, 11]]
    """
    groups: list[list[int]] = []
    if groups_needed <= 0:
        return groups
    # One pass that stops as soon as enough groups are found: `run` is the consecutive stretch
    # since the last break or the last group taken, and the first time it reaches group_size it
    # is exactly the window the step-by-one scan would take. Stopping early matters: controllers
    # pass every ready index, often far more than one batch needs.
    run: list[int] = []
    for index in sorted(ready_indexes):
        if exclude and index in exclude:
            continue
        if run and index == run[-1] + 1:
            run.append(index)
        else:
            run = [index]
        if len(run) == group_size:
            groups.append(run)
            run = []
            if len(groups) == groups_needed:
                return groups
    return None


class GRPOGroupNSampler(BaseSampler):
    """Sample whole prompt groups: runs of ``n_samples_per_prompt`` consecutive global indexes.

    Producers store the ``n`` responses of one prompt at consecutive indexes; a group is only
    handed out once all of its members are ready. When ``dp_rank`` is given the result is cached
    per ``(partition_id, task_name, dp_rank, batch_index)``, so every caller of one data-parallel
    rank (for example its tensor-parallel ranks) gets the same indexes.

    Ready indexes are checked on every first call for a batch (a cache miss): an index listed
    twice, a negative one, or a non-integer is refused (``ValueError``/``TypeError`` naming it)
    before anything is cached, so no index is ever handed out twice.

    Args:
        n_samples_per_prompt: group size ``n``, > 0.
        max_cached_batches: keyword-only cache bound, see `BaseSampler`.

    Raises:
        ValueError: ``n_samples_per_prompt <= 0``.
        TypeError: ``n_samples_per_prompt`` is not an int.

    Example:
        >>> sampler = GRPOGroupNSampler(n_samples_per_prompt=3)
        >>> sampler([0, 1, 3, 4, 5, 6, 7, 9, 10, 11], 6)
        ([3, 4, 5, 9, 10, 11], [3, 4, 5, 9, 10, 11])
    """

    checkpoint_kind = "GRPOGroupNSampler"

    def __init__(
        self,
        n_samples_per_prompt: int = 1,
        *,
        max_cached_batches: int | None = DEFAULT_MAX_CACHED_BATCHES,
    ) -> None:
        super().__init__(max_cached_batches=max_cached_batches)
        self.n_samples_per_prompt = check_positive(n_samples_per_prompt, "n_samples_per_prompt")

    def _repr_settings(self) -> list[tuple[str, Any]]:
        return [("n_samples_per_prompt", self.n_samples_per_prompt)]

    def _expected_checkpoint(self) -> Expected:
        return Expected(
            kind=self.checkpoint_kind,
            pair_results=True,
            n_samples_per_prompt=self.n_samples_per_prompt,
        )

    def _check_multiple(self, size: int, description: str) -> None:
        n = self.n_samples_per_prompt
        if size % n != 0:
            raise ValueError(f"{description} must be a multiple of n_samples_per_prompt ({n})")

    def sample(
        self,
        ready_indexes: list[int],
        batch_size: int,
        task_name: Hashable = "",
        partition_id: Hashable = "",
        *args: Any,
        **kwargs: Any,
    ) -> tuple[list[int], list[int]]:
        """Pick ``batch_size / n`` whole groups from ``ready_indexes``.

        Args:
            ready_indexes: ready global indexes.
            batch_size: number of samples, a multiple of ``n_samples_per_prompt``.
            task_name: the consuming task (cache key).
            partition_id: the partition (cache key).
            **kwargs: ``dp_rank`` (int >= 0 or None: no caching) and ``batch_index``.

        Returns:
            ``(sampled, consumed)``, equal lists in ascending order; ``([], [])`` when fewer
            complete groups are ready (nothing is cached then). A cached result is returned as
            is, whatever ``ready_indexes`` holds.

        Raises:
            ValueError: ``batch_size`` is negative or not a multiple of ``n_samples_per_prompt``;
                ``dp_rank`` is negative; on a first call, ``ready_indexes`` lists an index twice
                or a negative one; this ``dp_rank`` already got ``batch_index`` and the result
                has been evicted (a peer lagging more than ``max_cached_batches`` batches, see
                `BaseSampler`).
            TypeError: ``batch_size`` or ``dp_rank`` is not an int; on a first call,
                ``ready_indexes`` is not a sequence of ints.
        """
        dp_rank = kwargs.get("dp_rank")
        batch_index = kwargs.get("batch_index")
        if dp_rank is not None:
            dp_rank = check_dp_rank(dp_rank)
            batch_index = check_batch_index(batch_index)
            task_name = check_hashable(task_name, "task_name")
            partition_id = check_hashable(partition_id, "partition_id")
        with self._lock:
            if dp_rank is not None:
                found, result = self._lookup(partition_id, task_name, dp_rank, batch_index)
                if found:
                    self._advance(partition_id, task_name, batch_index)
                    self._warn_if_lagging(partition_id, task_name, dp_rank, batch_index)
                    return list(result[0]), list(result[1])
                self._refuse_if_evicted(partition_id, task_name, dp_rank, batch_index)
            size = check_batch_size(batch_size)
            self._check_multiple(size, f"batch_size ({size})")
            ready = check_ready_indexes(ready_indexes)
            if dp_rank is not None:
                self._advance(partition_id, task_name, batch_index)
            groups = select_groups(
                ready, self.n_samples_per_prompt, size // self.n_samples_per_prompt
            )
            if not groups:
                return [], []
            sampled = [index for group in groups for index in group]
            if dp_rank is not None:
                self._store(partition_id, task_name, dp_rank, batch_index, (sampled, list(sampled)))
                self._remember_batch(partition_id, task_name, batch_index)
            return list(sampled), list(sampled)


class RankAwareSampler(BaseSampler):
    """The first ``batch_size`` ready indexes, remembered per data-parallel rank and batch.

    The first call for ``(partition_id, task_name, dp_rank, batch_index)`` takes
    ``ready_indexes[:batch_size]`` and caches it; later calls for the same key return the cached
    list, so all ranks of one data-replica group (same ``dp_rank``) get identical indexes. On a
    first call the whole ready list is checked: an index listed twice, a negative one or a
    non-integer is refused before anything is cached.

    Args:
        max_cached_batches: keyword-only cache bound, see `BaseSampler`.

    Example:
        >>> sampler = RankAwareSampler()
        >>> sampler([3, 4, 5], 2, dp_rank=0, batch_index=0, task_name="t", partition_id="p")
        ([3, 4], [3, 4])
        >>> sampler([5], 2, dp_rank=0, batch_index=0, task_name="t", partition_id="p")
        ([3, 4], [3, 4])
    """

    checkpoint_kind = "RankAwareSampler"

    def __init__(self, *, max_cached_batches: int | None = DEFAULT_MAX_CACHED_BATCHES) -> None:
        super().__init__(max_cached_batches=max_cached_batches)

    def _expected_checkpoint(self) -> Expected:
        return Expected(kind=self.checkpoint_kind, pair_results=False)

    def sample(
        self,
        ready_indexes: list[int],
        batch_size: int,
        dp_rank: int,
        batch_index: Hashable,
        task_name: Hashable,
        partition_id: Hashable,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[list[int], list[int]]:
        """Return this rank's indexes for the batch (``sampled`` and ``consumed`` are equal).

        Returns:
            ``([], [])`` when fewer than ``batch_size`` indexes are ready on a first call
            (nothing cached).

        Raises:
            ValueError: ``dp_rank`` is negative, or ``batch_size`` is negative; on a first call,
                ``ready_indexes`` lists an index twice or a negative one; this ``dp_rank``
                already got ``batch_index`` and the list has been evicted (a peer lagging more
                than ``max_cached_batches`` batches, see `BaseSampler`).
            TypeError: ``dp_rank`` or ``batch_size`` is not an int; on a first call,
                ``ready_indexes`` is not a sequence of ints.
        """
        dp_rank = check_dp_rank(dp_rank)
        batch_index = check_batch_index(batch_index)
        task_name = check_hashable(task_name, "task_name")
        partition_id = check_hashable(partition_id, "partition_id")
        with self._lock:
            found, cached = self._lookup(partition_id, task_name, dp_rank, batch_index)
            if found:
                self._advance(partition_id, task_name, batch_index)
                self._warn_if_lagging(partition_id, task_name, dp_rank, batch_index)
                return list(cached), list(cached)
            self._refuse_if_evicted(partition_id, task_name, dp_rank, batch_index)
            size = check_batch_size(batch_size)
            sampled = check_ready_indexes(ready_indexes)[:size]
            self._advance(partition_id, task_name, batch_index)
            if len(sampled) < size or not sampled:
                return [], []
            self._store(partition_id, task_name, dp_rank, batch_index, sampled)
            self._remember_batch(partition_id, task_name, batch_index)
            return list(sampled), list(sampled)
