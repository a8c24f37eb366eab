"""Checkpoint checks of the balanced sampler: its cached splits, who still owes a share, and the
reservations of handed-out indexes (see `.checkpoint` for the rules every field follows).

Built on `._checkpoint_fields` only; `.checkpoint` calls it for a balanced sampler."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from .._inputs import _describe
from ._checkpoint_fields import (
    Expected,
    Restored,
    SplitKey,
    _check_groups,
    _check_size,
    _fail,
    _index_list,
    _int,
    _mapping,
    _ranks,
    _task_key,
)
from .cache import BatchKey
from .reservations import HISTORY_INTERVALS

__all__ = ["check_balanced"]


def _check_split(key: SplitKey, shares: Any, expected: Expected) -> list[list[int]]:
    where = f"_balanced_cache[{key!r}]"
    if not isinstance(shares, (list, tuple)):
        raise TypeError(f"checkpoint {where} must be a list of shares, got {_describe(shares)}")
    if len(shares) != expected.dp_size:
        raise _fail(
            where,
            f"has {len(shares)} shares, so it was saved with dp_size={len(shares)}; this sampler "
            f"has dp_size={expected.dp_size}",
        )
    checked = []
    for rank, share in enumerate(shares):
        indexes = _index_list(share, f"{where}[{rank}]")
        _check_groups(indexes, f"{where}[{rank}]", expected.n_samples_per_prompt)
        checked.append(indexes)
    return checked


def check_balanced(state: Mapping[str, Any], restored: Restored, expected: Expected) -> None:
    dp_size = expected.dp_size
    assert dp_size is not None
    raw = state.get("_balanced_cache")
    cache: dict[SplitKey, list[list[int]]] = {}
    if raw is not None:
        for key, shares in _mapping(raw, "_balanced_cache").items():
            split_key = _task_key(key, "_balanced_cache", 3)
            typed_key = (split_key[0], split_key[1], split_key[2])
            cache[typed_key] = _check_split(typed_key, shares, expected)
    # Shares in _states without a split (an upstream checkpoint) rebuild it; every rank must
    # have its share, or the indexes of a missing one would be lost.
    for partition_id, tasks in restored.states.items():
        for task_name, ranks in tasks.items():
            batches = {batch for per_batch in ranks.values() for batch in per_batch}
            for batch in batches:
                key = (partition_id, task_name, batch)
                holders = sorted(rank for rank, per_batch in ranks.items() if batch in per_batch)
                if key in cache:
                    for rank in holders:
                        if list(ranks[rank][batch][0]) != cache[key][rank]:
                            raise _fail(
                                f"_states[{partition_id!r}][{task_name!r}][{rank}][{batch!r}]",
                                "differs from dp_rank's share in _balanced_cache",
                            )
                    continue
                if holders != list(range(dp_size)):
                    raise _fail(
                        f"_states[{partition_id!r}][{task_name!r}]",
                        f"batch_index {batch!r} has shares for dp_ranks {holders}, not for each "
                        f"of the dp_size={dp_size} ranks; the split cannot be rebuilt",
                    )
                cache[key] = [list(ranks[rank][batch][0]) for rank in range(dp_size)]
    # Every cached split's indexes are reserved for it: no index may be in two places at once.
    owner: dict[tuple[Hashable, Hashable, int], Hashable] = {}
    for (partition_id, task_name, batch), shares in cache.items():
        for share in shares:
            for index in share:
                slot = (partition_id, task_name, index)
                if slot in owner:
                    raise _fail(
                        "_balanced_cache",
                        f"index {index} of partition_id {partition_id!r}, task_name {task_name!r} "
                        f"is in the splits of batch_index {owner[slot]!r} and {batch!r}",
                    )
                owner[slot] = batch
    uncollected: dict[SplitKey, set[int]] = {}
    raw_pending = state.get("_uncollected")
    for key, ranks in _mapping(
        raw_pending if raw_pending is not None else {}, "_uncollected"
    ).items():
        split_key = _task_key(key, "_uncollected", 3)
        typed_key = (split_key[0], split_key[1], split_key[2])
        where = f"_uncollected[{key!r}]"
        if typed_key not in cache:
            raise _fail(where, "names a batch with no cached split")
        uncollected[typed_key] = set(_ranks(ranks, where, dp_size))
    for (partition_id, task_name, batch), shares in cache.items():
        # A split rebuilt or loaded must answer every rank through _states too.
        per_rank = restored.states.setdefault(partition_id, {}).setdefault(task_name, {})
        for rank, share in enumerate(shares):
            per_rank.setdefault(rank, {})[batch] = (list(share), list(share))
        order = restored.batch_order.setdefault((partition_id, task_name), [])
        if batch not in order:
            order.append(batch)
    restored.balanced_cache = cache
    restored.uncollected = uncollected
    restored.handed_out = _check_handed_out(state.get("_handed_out"), cache, uncollected)
    restored.handed_history = _check_history(state.get("_handed_history"))


def _check_history(raw: Any) -> dict[BatchKey, list[tuple[int, int]]] | None:
    if raw is None:
        return None
    history: dict[BatchKey, list[tuple[int, int]]] = {}
    for key, intervals in _mapping(raw, "_handed_history").items():
        task_key = _task_key(key, "_handed_history", 2)
        where = f"_handed_history[{key!r}]"
        if not isinstance(intervals, (list, tuple)):
            raise TypeError(f"checkpoint {where} must be a list of (start, end) pairs")
        _check_size(intervals, where, HISTORY_INTERVALS, "intervals")
        checked: list[tuple[int, int]] = []
        for position, pair in enumerate(intervals):
            pair_where = f"{where}[{position}]"
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise TypeError(f"checkpoint {pair_where} must be a (start, end) pair")
            start, end = _int(pair[0], pair_where), _int(pair[1], pair_where)
            previous = checked[-1][1] if checked else 0
            if not previous <= start < end:
                raise _fail(pair_where, "intervals must be ascending, disjoint and non-empty")
            checked.append((start, end))
        history[(task_key[0], task_key[1])] = checked
    return history


def _check_handed_out(
    raw: Any, cache: dict[SplitKey, list[list[int]]], uncollected: dict[SplitKey, set[int]]
) -> dict[BatchKey, list[int]] | None:
    if raw is None:
        return None
    pending: dict[BatchKey, set[int]] = {}
    for (partition_id, task_name, batch), ranks in uncollected.items():
        for rank in ranks:
            pending.setdefault((partition_id, task_name), set()).update(
                cache[(partition_id, task_name, batch)][rank]
            )
    handed_out: dict[BatchKey, list[int]] = {}
    for key, indexes in _mapping(raw, "_handed_out").items():
        task_key = _task_key(key, "_handed_out", 2)
        where = f"_handed_out[{key!r}]"
        checked = _index_list(indexes, where)
        clash = pending.get((task_key[0], task_key[1]), set()).intersection(checked)
        if clash:
            raise _fail(where, f"index {min(clash)} is also in a share not yet collected")
        handed_out[(task_key[0], task_key[1])] = checked
    return handed_out
