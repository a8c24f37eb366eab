"""The sequence-length balanced sampler: whole prompt groups, split across ranks by token count.

Policies (documented for users in the class docstring and the README):

* **Uneven groups.** ``G = batch_size * dp_size / n`` groups over ``dp_size`` ranks. ``G`` a
  multiple of ``dp_size``: equal group counts, balanced tokens (``equal_size=True``). ``G > dp_size``
  otherwise, by ``uneven_groups``: ``"free"`` (default) balances tokens without the equal-count
  constraint (``equal_size=False``), every rank gets at least one group and counts may differ;
  ``"nearly"`` keeps group counts within one of each other (``equal_size="nearly"``), for ranks
  bound by memory rather than time. ``G < dp_size`` (``batch_size < n``): the selection
  is rounded up to ``dp_size`` groups, one whole group per rank, so each rank gets ``n`` samples.
  An empty share is never produced: a controller cannot tell an empty answer from "not ready yet"
  and would retry it forever. Groups are never split; each selected index goes to exactly one
  rank.
* **Reservations** (`.reservations`). An index of a share not yet collected is reserved
  until its rank collects it; a collected (handed-out) index stays reserved until a ``ready_indexes``
  passed on a later first call omits it, however late the caller records the consumption. Past
  ``2 * max_cached_batches`` global batches of live reservations the sampler raises
  ``RuntimeError`` rather than drop one.
* **Eviction** (`.cache`). Batch ``b`` leaves the cache only when a request for batch
  ``b + max_cached_batches`` or later arrives and every rank has collected its share; a repeat
  request for an evicted batch (a peer lagging that far) raises ``ValueError`` instead of building
  a second split of different samples. Eviction never drops a reservation.
* **Duplicate ready indexes.** On a first call for a batch the ready list is checked: an index
  listed twice, a negative one or a non-integer raises before anything is reserved or cached.
* **Missing lengths.** A sample without ``total_lengths`` weighs 1 (as upstream); one warning per
  batch gives the count.
* **Bad metadata.** ``get_custom_meta`` must return a mapping; anything else (``None`` included)
  is a bug in the partition object and raises ``TypeError`` rather than passing for "no lengths".
  A ``total_lengths`` or a group sum above ``2**63 - 1`` raises ``OverflowError`` naming the sample
  index or the group's indexes.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .._inputs import check_refine
from ._checks import (
    check_batch_index,
    check_batch_size,
    check_count,
    check_dp_rank,
    check_hashable,
    check_positive,
    check_ready_indexes,
)
from .cache import DEFAULT_MAX_CACHED_BATCHES, EvictedRanks
from .checkpoint import Expected, Restored
from .grpo import GRPOGroupNSampler, select_groups
from .reservations import IndexHistory, TaskReservations, check_capacity, rebuild_reservations
from .weights import (
    check_partition,
    check_sampler_cost,
    check_uneven_groups,
    equal_split,
    group_weights,
    logger,
    split_groups,
)

__all__ = ["SeqlenBalancedSampler", "equal_split", "split_groups"]

SplitKey = tuple[Hashable, Hashable, Hashable]
TaskKey = tuple[Hashable, Hashable]


class SeqlenBalancedSampler(GRPOGroupNSampler):
    """Select whole prompt groups for the global batch and split them so ranks get equal tokens.

    Each data-parallel rank calls `sample` with its own ``dp_rank``. The first call for a
    ``(partition_id, task_name, batch_index)`` selects ``batch_size * dp_size`` samples as whole
    groups (the `GRPOGroupNSampler` rule), weighs each group by the sum of its samples'
    ``total_lengths`` (from ``partition.get_custom_meta``), and balances the groups across ranks
    with ``get_seqlen_balanced_partitions``; rank r gets share r (rank 0 the heaviest). The split
    is cached for every rank, so the other ranks get their shares without looking at
    ``ready_indexes``, and TransferQueue's polling check sees them.

    Policies:
        * Uneven groups: a group count that is a multiple of ``dp_size`` gives equal counts per
          rank; any other count of at least ``dp_size`` follows ``uneven_groups``: ``"free"``
          balances tokens without the equal-count constraint (every rank gets at least one
          group), ``"nearly"`` keeps group counts within one of each other. When ``batch_size * dp_size`` covers
          fewer groups than ranks (``batch_size < n``), the selection is rounded up to
          ``dp_size`` groups: one whole group, ``n`` samples, per rank. No rank ever gets an empty
          share, and groups are never split.
        * No double assignment: an index of a share not yet collected is reserved until its rank
          collects it; a collected index stays reserved until a ``ready_indexes`` passed on a
          later first call omits it (the caller's consumption is visible then), however late
          that is. Reserved indexes are never selected for another batch. More than
          ``2 * max_cached_batches * dp_size * batch_size`` live reservations (a caller that
          never records consumption) raise ``RuntimeError`` rather than drop one.
        * Missing ``total_lengths`` weigh 1, with one warning per batch giving the count; a
          negative or non-integer value raises ``ValueError`` naming the index, a value above
          ``2**63 - 1`` ``OverflowError`` naming the index, and a group whose lengths sum above
          ``2**63 - 1`` ``OverflowError`` naming the group's indexes. ``get_custom_meta``
          returning anything but a mapping (``None`` included) raises ``TypeError``.
        * No ``partition`` object: a warning (once per sampler) and an equal split in order:
          contiguous runs of whole groups, counts differing by at most one group, earlier ranks
          taking the extra groups.
        * Cache bound: batch ``b`` of a ``(partition_id, task_name)`` is evicted when a request
          for batch ``b + max_cached_batches`` or later arrives (default 64, ``None`` keeps
          every batch), and only once every rank has collected its share. Eviction never drops
          a reservation.
        * Evicted batches: a repeat request for an evicted batch (a tensor- or pipeline-parallel
          peer lagging ``max_cached_batches`` batches or more) raises ``ValueError`` naming the
          batch and the bound; it never builds a second split. A peer repeating a request
          before any rank has moved that far ahead is always served from the cache.

    Thread safety: one lock per sampler; concurrent first calls for one batch compute one split.

    Args:
        n_samples_per_prompt: group size ``n``, > 0.
        dp_size: number of data-parallel ranks, > 0.
        max_cached_batches: keyword-only cache bound, see `BaseSampler`.
        refine: keyword-only; ``True`` or ``"exact"`` refines each split (see
            `seqbalance.get_seqlen_balanced_partitions`), so the heaviest rank's share is
            never heavier and usually lighter. Default ``False``: upstream's split exactly.
            Measured on GRPO-shaped batches (512 prompts x 16 responses of the CLI's built-in
            heavy-tailed generator, 20 seeds, equal group counts), the heaviest rank's tokens
            over the mean, mean of the 20 batches, without -> with ``refine=True``: 4 ranks
            1.0030 -> 1.0000, 8 ranks 1.0217 -> 1.0000, 16 ranks 1.0898 -> 1.0000, 32 ranks
            1.2714 -> 1.0000, 64 ranks 1.7078 -> 1.3138 (8 prompts a rank: one long prompt
            sets the floor). The step waits for the heaviest rank, so this is the step time
            the split costs; refining a split of a few hundred groups takes well under a
            millisecond.
        cost: keyword-only; what a group weighs: ``"tokens"`` (default, as upstream: the sum of
            its ``total_lengths``), ``"workload"`` (`seqbalance.calculate_workload` of
            each ``total_lengths``), or a callable on the lengths (a 1-D int64 array) returning
            one non-negative integer weight per sample (see `seqbalance.costs`).
        cost_field: keyword-only; instead of ``cost``, the name of a ``custom_meta`` field that
            holds each sample's weight (e.g. ``"flops"``); a sample without it is a
            ``ValueError`` naming the index. Float weights are a ``TypeError`` for now.
        uneven_groups: keyword-only; ``"free"`` (default) or ``"nearly"``, the policy for a
            group count above ``dp_size`` that is not a multiple of it (see Policies).

    Raises:
        ValueError: ``n_samples_per_prompt <= 0`` or ``dp_size <= 0`` (checked in that order), or
            ``dp_size`` above ``2**24``; an ``uneven_groups`` other than ``"free"`` or
            ``"nearly"`` (``TypeError`` when it is not a string).

    Example:
        >>> class Partition:
        ...     def get_custom_meta(self, indexes):
        ...         return {i: {"total_lengths": 10 * (i + 1)} for i in indexes}
        >>> sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2)
        >>> sampler(list(range(8)), 4, dp_rank=0, batch_index=0, partition=Partition())
        ([0, 1, 6, 7], [0, 1, 6, 7])
        >>> sampler([], 4, dp_rank=1, batch_index=0, partition=Partition())
        ([2, 3, 4, 5], [2, 3, 4, 5])
    """

    def __init__(
        self,
        n_samples_per_prompt: int = 1,
        dp_size: int = 1,
        *,
        max_cached_batches: int | None = DEFAULT_MAX_CACHED_BATCHES,
        refine: bool | str = False,
        cost: Any = "tokens",
        cost_field: str | None = None,
        uneven_groups: str = "free",
    ) -> None:
        super().__init__(n_samples_per_prompt, max_cached_batches=max_cached_batches)
        # TransferQueue's wording for a count below 1 ("dp_size must be positive, got 0", which
        # its own tests check), then this project's bound on what sizes per-rank tables.
        self.dp_size = check_count(check_positive(dp_size, "dp_size"), "dp_size")
        # Passed to get_seqlen_balanced_partitions: True or "exact" lowers the heaviest share.
        self.refine = check_refine(refine)
        self.cost, self.cost_field = check_sampler_cost(cost, cost_field)
        self.uneven_groups = check_uneven_groups(uneven_groups)
        # (partition_id, task_name, batch_index) -> one ascending index list per rank.
        self._balanced_cache: dict[SplitKey, list[list[int]]] = {}
        # Same key -> ranks that have not collected their share yet.
        self._uncollected: dict[SplitKey, set[int]] = {}
        # (partition_id, task_name) -> indexes no new batch may take (see .reservations).
        self._reservations: dict[TaskKey, TaskReservations] = {}
        self._warned_no_partition = False
        self._warned_round_up = False

    checkpoint_kind = "SeqlenBalancedSampler"

    def _repr_settings(self) -> list[tuple[str, Any]]:
        settings = [*super()._repr_settings(), ("dp_size", self.dp_size), ("refine", self.refine)]
        if self.cost_field is not None:
            settings.append(("cost_field", self.cost_field))
        else:
            settings.append(("cost", self.cost))
        return [*settings, ("uneven_groups", self.uneven_groups)]

    def _eviction_rule(self) -> str:
        return (
            ", and only once every dp_rank has collected its share; a handed-out index stays "
            "reserved until a later ready_indexes omits it"
        )

    def _expected_checkpoint(self) -> Expected:
        return Expected(
            kind=self.checkpoint_kind,
            pair_results=True,
            n_samples_per_prompt=self.n_samples_per_prompt,
            dp_size=self.dp_size,
            balanced=True,
        )

    def sample(
        self,
        ready_indexes: list[int],
        batch_size: int,
        task_name: Hashable = "",
        partition_id: Hashable = "",
        *args: Any,
        **kwargs: Any,
    ) -> tuple[list[int], list[int]]:
        """Return this rank's share of the batch.

        Args:
            ready_indexes: ready global indexes (ignored once the batch's split is cached).
            batch_size: **per-rank** size; ``batch_size * dp_size`` must be a multiple of
                ``n_samples_per_prompt``.
            task_name: the consuming task.
            partition_id: the partition.
            **kwargs: ``dp_rank`` (default 0), ``batch_index`` (default 0; an int, or another
                hashable non-number such as a str), ``partition`` (``None``, or an object with
                ``get_custom_meta(indexes) -> {index: dict}``).

        Returns:
            ``(sampled, consumed)``, equal ascending lists. ``([], [])`` when ``dp_rank >=
            dp_size``, or when too few whole groups are ready outside other batches'
            reservations (nothing is cached then).

        Raises:
            ValueError: negative ``dp_rank`` or ``batch_size``; a global size that is not a
                multiple of ``n_samples_per_prompt``; on a first call for the batch,
                ``ready_indexes`` listing an index twice or a negative one; a negative or non-integer
                ``total_lengths``; a repeat request for a batch already evicted from the cache
                (raise ``max_cached_batches``).
            OverflowError: a ``total_lengths``, or the sum over one group, above ``2**63 - 1``.
            TypeError: ``dp_rank`` or ``batch_size`` is not an int; ``batch_index`` is a float,
                a bool or unhashable; ``partition`` has no ``get_custom_meta``; it did not return
                a mapping; on a first call, ``ready_indexes`` is not a sequence of ints.
            RuntimeError: a new split would pass the bound on live reservations (see
                `seqbalance.samplers.reservations`); nothing is dropped or cached.
        """
        dp_rank = check_dp_rank(kwargs.get("dp_rank", 0))
        batch_index = check_batch_index(kwargs.get("batch_index", 0))
        task_name = check_hashable(task_name, "task_name")
        partition_id = check_hashable(partition_id, "partition_id")
        partition = check_partition(kwargs.get("partition"))
        key = (partition_id, task_name, batch_index)
        with self._lock:
            if dp_rank >= self.dp_size:
                return [], []
            shares = self._balanced_cache.get(key)
            if shares is None:
                self._refuse_if_evicted(partition_id, task_name, dp_rank, batch_index)
                shares = self._compute_split(ready_indexes, batch_size, key, partition)
                if shares is None:
                    return [], []
            else:
                self._advance(partition_id, task_name, batch_index)
                self._warn_if_lagging(partition_id, task_name, dp_rank, batch_index)
            self._collect(key, dp_rank)
            share = shares[dp_rank]
            return list(share), list(share)

    def _compute_split(
        self, ready_indexes: list[int], batch_size: int, key: SplitKey, partition: Any
    ) -> list[list[int]] | None:
        partition_id, task_name, batch_index = key
        size = check_batch_size(batch_size)
        global_size = size * self.dp_size
        self._check_multiple(
            global_size, f"batch_size ({size}) * dp_size ({self.dp_size}) = {global_size}"
        )
        if global_size == 0:
            return None
        ready = check_ready_indexes(ready_indexes)
        # The request has passed every check: it counts for eviction, and its ready list shows
        # which handed-out indexes the caller has consumed meanwhile.
        self._advance(partition_id, task_name, batch_index)
        task_key = (partition_id, task_name)
        reservations = self._reservations.setdefault(task_key, TaskReservations())
        reservations.release_consumed(set(ready))
        # At least one group per rank: an empty share would look like "not ready" to the caller.
        groups_needed = global_size // self.n_samples_per_prompt
        if groups_needed < self.dp_size:
            groups_needed = self.dp_size
            if not self._warned_round_up:
                self._warned_round_up = True
                logger.warning(
                    "SeqlenBalancedSampler: batch_size %d is smaller than n_samples_per_prompt %d; each rank "
                    "gets one whole group (%d samples) per batch instead",
                    size,
                    self.n_samples_per_prompt,
                    self.n_samples_per_prompt,
                )
        selection = groups_needed * self.n_samples_per_prompt
        check_capacity(reservations, selection, self.max_cached_batches, task_key)
        groups = select_groups(
            ready, self.n_samples_per_prompt, groups_needed, exclude=reservations
        )
        if groups is None:
            return None

        if partition is None:
            if not self._warned_no_partition:
                self._warned_no_partition = True
                logger.warning(
                    "SeqlenBalancedSampler: no partition object given, so no total_lengths to balance; "
                    "splitting each batch into equal runs of whole groups instead"
                )
            group_split = equal_split(len(groups), self.dp_size)
        else:
            weights = group_weights(groups, partition, key, self.cost, self.cost_field)
            group_split = split_groups(weights, self.dp_size, self.refine, self.uneven_groups)

        shares = [
            sorted(index for g in group_positions for index in groups[g])
            for group_positions in group_split
        ]
        self._balanced_cache[key] = shares
        reservations.reserve(index for group in groups for index in group)
        self._uncollected[key] = set(range(self.dp_size))
        for rank, share in enumerate(shares):
            self._store(partition_id, task_name, rank, batch_index, (share, list(share)))
        self._remember_batch(partition_id, task_name, batch_index)
        return shares

    def _collect(self, key: SplitKey, dp_rank: int) -> None:
        pending = self._uncollected.get(key)
        if pending and dp_rank in pending:
            pending.discard(dp_rank)
            task_key = (key[0], key[1])
            self._reservations.setdefault(task_key, TaskReservations()).hand_out(
                self._balanced_cache[key][dp_rank]
            )
            if not pending:
                # Every share collected: the batch may go once a request far enough ahead comes.
                self._release_held(key[0], key[1], key[2])

    # ------------------------------------------------------------------ cache plumbing

    def _may_evict(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> bool:
        return not self._uncollected.get((partition_id, task_name, batch_index))

    def _ranks_holding(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> EvictedRanks:
        # Every rank got a share of a balanced split, so "every rank" is exact and costs nothing.
        return None

    def _drop_batch(
        self, partition_id: Hashable, task_name: Hashable, batch_index: Hashable
    ) -> None:
        # Only fully collected batches are dropped; their indexes stay reserved as handed out
        # until the caller's ready lists omit them.
        super()._drop_batch(partition_id, task_name, batch_index)
        key = (partition_id, task_name, batch_index)
        self._balanced_cache.pop(key, None)
        self._uncollected.pop(key, None)

    def clear_cache(self, partition_id: Hashable) -> None:
        """Forget ``partition_id``: its cached results, its balanced splits and its reservations."""
        with self._lock:
            super().clear_cache(partition_id)
            for split_key in [key for key in self._balanced_cache if key[0] == partition_id]:
                del self._balanced_cache[split_key]
                self._uncollected.pop(split_key, None)
            for task_key in [key for key in self._reservations if key[0] == partition_id]:
                del self._reservations[task_key]

    def _checkpoint_fields(self) -> dict[str, Any]:
        fields = super()._checkpoint_fields()
        fields["_balanced_cache"] = self._balanced_cache
        fields["_uncollected"] = self._uncollected
        fields["_handed_out"] = {
            key: sorted(reserved.handed_out)
            for key, reserved in self._reservations.items()
            if reserved.handed_out
        }
        fields["_handed_history"] = {
            key: reserved.history.intervals()
            for key, reserved in self._reservations.items()
            if len(reserved.history)
        }
        return fields

    def _restore_fields(self, restored: Restored) -> None:
        super()._restore_fields(restored)
        self._balanced_cache = restored.balanced_cache
        # Without collection records (an upstream checkpoint) nobody is known to owe anything.
        self._uncollected = restored.uncollected
        self._reservations = rebuild_reservations(
            self._balanced_cache, self._uncollected, restored.handed_out
        )
        for key, intervals in (restored.handed_history or {}).items():
            reserved = self._reservations.setdefault(key, TaskReservations())
            history = IndexHistory(intervals)
            history.update(reserved.handed_out)
            reserved.history = history

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        old_reserved = state.pop("_reserved", None)
        super().__setstate__(state)
        if old_reserved is not None:
            # Pickled by a seqbalance with one reserved set per task: what is not pending in a
            # cached split was handed out.
            handed = {key: set(indexes) for key, indexes in old_reserved.items()}
            self._reservations = rebuild_reservations(self._balanced_cache, self._uncollected, None)
            for key, indexes in handed.items():
                reserved = self._reservations.setdefault(key, TaskReservations())
                reserved.handed_out |= indexes - reserved.pending
