"""Sampler checkpoints: what ``save_checkpoint`` writes, and the checks ``load_checkpoint`` makes.

A checkpoint is a plain dict. seqbalance writes ``format_version``, ``sampler`` (the kind),
``n_samples_per_prompt`` and ``dp_size`` (where the sampler has them) beside ``_states`` and its
cache bookkeeping. Loading checks every field into fresh objects before the sampler is touched, so
a refused checkpoint leaves the sampler exactly as it was. Fields that are missing are inferred:
an upstream-style ``{"_states": ...}`` dict (TransferQueue's samplers write that) still loads, and
a balanced sampler's splits are rebuilt from the shares in ``_states``. Fields that conflict with
the sampler (another ``dp_size``, another kind) are a ``ValueError`` naming both values.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._inputs import _describe
from .cache import BatchKey, EvictedRanks, compact_ranks

__all__ = ["CHECKPOINT_FORMAT", "Expected", "Restored", "validate_checkpoint"]

#: The version written by ``save_checkpoint``. Version 1 (no ``format_version`` key) is what
#: seqbalance wrote before, and what upstream-style checkpoints look like.
CHECKPOINT_FORMAT = 2

SplitKey = tuple[Hashable, Hashable, Hashable]


@dataclass(frozen=True)
class Expected:
    """What the loading sampler is: its kind and sizes, and the shape of one cached result."""

    kind: str
    pair_results: bool  # (sampled, consumed) tuples; False: a plain sampled list
    n_samples_per_prompt: int | None = None
    dp_size: int | None = None
    balanced: bool = False


@dataclass
class Restored:
    """Checked, freshly built state, ready to be assigned to the sampler in one step."""

    states: dict[Any, Any]
    batch_order: dict[BatchKey, list[Hashable]]
    evicted: dict[BatchKey, dict[Hashable, EvictedRanks]]
    evicted_floor: dict[BatchKey, dict[int | None, int]]
    balanced_cache: dict[SplitKey, list[list[int]]] = field(default_factory=dict)
    uncollected: dict[SplitKey, set[int]] = field(default_factory=dict)


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"checkpoint {where}: {message}")


def _mapping(value: Any, where: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"checkpoint {where} must be a dict, got {_describe(value)}")
    return value


def _hashable(value: Any, where: str) -> Hashable:
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"checkpoint {where} must be hashable, got {_describe(value)}") from None
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"checkpoint {where} must be an int, got {_describe(value)}")
    return operator.index(value)


def _rank(value: Any, where: str, dp_size: int | None) -> int:
    rank = _int(value, where)
    if rank < 0:
        raise _fail(where, f"dp_rank must be >= 0, got {rank}")
    if dp_size is not None and rank >= dp_size:
        raise _fail(
            where,
            f"holds dp_rank {rank}, so it was saved with dp_size > {rank}; this sampler has "
            f"dp_size={dp_size}",
        )
    return rank


def _index_list(value: Any, where: str) -> list[int]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"checkpoint {where} must be a list of indexes, got {_describe(value)}")
    indexes = []
    for position, item in enumerate(value):
        index = _int(item, f"{where}[{position}]")
        if index < 0:
            raise _fail(f"{where}[{position}]", f"an index must be >= 0, got {index}")
        indexes.append(index)
    if len(set(indexes)) != len(indexes):
        raise _fail(where, "lists an index more than once")
    return indexes


def _check_groups(indexes: list[int], where: str, n: int | None) -> None:
    if n is not None and len(indexes) % n:
        raise _fail(
            where,
            f"holds {len(indexes)} indexes, not whole groups of n_samples_per_prompt={n} (saved "
            "with another n_samples_per_prompt?)",
        )


def _result(value: Any, where: str, expected: Expected) -> Any:
    if not expected.pair_results:
        return _index_list(value, where)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(
            f"checkpoint {where} must be a (sampled, consumed) pair, got {_describe(value)}"
        )
    if len(value) != 2:
        raise _fail(where, f"must be a (sampled, consumed) pair, got {len(value)} items")
    sampled = _index_list(value[0], f"{where}[0]")
    consumed = _index_list(value[1], f"{where}[1]")
    _check_groups(sampled, f"{where}[0]", expected.n_samples_per_prompt)
    return sampled, consumed


def _check_header(state: Mapping[str, Any], expected: Expected) -> None:
    version = state.get("format_version", 1)
    if version not in (1, CHECKPOINT_FORMAT) or isinstance(version, bool):
        raise _fail(
            "format_version",
            f"unknown version {version!r}; this seqbalance reads 1 and {CHECKPOINT_FORMAT}",
        )
    kind = state.get("sampler", expected.kind)
    if kind != expected.kind:
        raise _fail("sampler", f"saved by a {kind!r}, cannot load into a {expected.kind!r}")
    for name in ("n_samples_per_prompt", "dp_size"):
        ours = getattr(expected, name)
        if name not in state or state[name] is None:
            continue
        theirs = _int(state[name], name)
        if ours is not None and theirs != ours:
            raise _fail(name, f"saved with {name}={theirs}; this sampler has {name}={ours}")


def _check_states(raw: Any, expected: Expected) -> dict[Any, Any]:
    states: dict[Any, Any] = {}
    for partition_id, tasks in _mapping(raw, "_states").items():
        where = f"_states[{partition_id!r}]"
        per_task = states.setdefault(_hashable(partition_id, where), {})
        for task_name, ranks in _mapping(tasks, where).items():
            task_where = f"{where}[{task_name!r}]"
            per_rank = per_task.setdefault(_hashable(task_name, task_where), {})
            for dp_rank, batches in _mapping(ranks, task_where).items():
                rank = _rank(dp_rank, f"{task_where}[{dp_rank!r}]", expected.dp_size)
                rank_where = f"{task_where}[{rank}]"
                if rank in per_rank:
                    raise _fail(rank_where, "dp_rank listed twice")
                per_rank[rank] = {
                    _hashable(batch_index, f"{rank_where}[{batch_index!r}]"): _result(
                        result, f"{rank_where}[{batch_index!r}]", expected
                    )
                    for batch_index, result in _mapping(batches, rank_where).items()
                }
    return states


def _task_key(value: Any, where: str, width: int) -> tuple[Hashable, ...]:
    if not isinstance(value, tuple) or len(value) != width:
        raise TypeError(f"checkpoint {where} keys must be {width}-tuples, got {_describe(value)}")
    return tuple(_hashable(part, where) for part in value)


def _check_order(raw: Any, states: dict[Any, Any]) -> dict[BatchKey, list[Hashable]]:
    order: dict[BatchKey, list[Hashable]] = {}
    for key, batches in _mapping(raw if raw is not None else {}, "_batch_order").items():
        task_key = _task_key(key, "_batch_order", 2)
        where = f"_batch_order[{key!r}]"
        if isinstance(batches, (str, bytes, Mapping)) or not isinstance(batches, Sequence):
            raise TypeError(f"checkpoint {where} must be a list, got {_describe(batches)}")
        seen = order.setdefault((task_key[0], task_key[1]), [])
        for batch in batches:
            if _hashable(batch, where) not in seen:
                seen.append(batch)
    # Batches cached but missing from the record (an upstream checkpoint has no record at all)
    # join it, oldest rank first, so the bound applies to them too.
    for partition_id, tasks in states.items():
        for task_name, ranks in tasks.items():
            seen = order.setdefault((partition_id, task_name), [])
            known = set(seen)
            for batches in ranks.values():
                for batch in batches:
                    if batch not in known:
                        known.add(batch)
                        seen.append(batch)
    return order


def _check_evicted(raw: Any) -> dict[BatchKey, dict[Hashable, EvictedRanks]]:
    evicted: dict[BatchKey, dict[Hashable, EvictedRanks]] = {}
    for key, record in _mapping(raw if raw is not None else {}, "_evicted").items():
        task_key = _task_key(key, "_evicted", 2)
        where = f"_evicted[{key!r}]"
        entries: dict[Hashable, EvictedRanks] = {}
        for batch, ranks in _mapping(record, where).items():
            entry_where = f"{where}[{_hashable(batch, where)!r}]"
            if ranks is None:
                entries[batch] = None
            elif isinstance(ranks, (range, set, frozenset, list, tuple)):
                entries[batch] = compact_ranks(
                    frozenset(_rank(rank, entry_where, None) for rank in ranks)
                )
            else:
                raise TypeError(
                    f"checkpoint {entry_where} must be None or a set of ranks, got "
                    f"{_describe(ranks)}"
                )
        evicted[(task_key[0], task_key[1])] = entries
    return evicted


def _check_floor(raw: Any) -> dict[BatchKey, dict[int | None, int]]:
    floors: dict[BatchKey, dict[int | None, int]] = {}
    for key, record in _mapping(raw if raw is not None else {}, "_evicted_floor").items():
        task_key = _task_key(key, "_evicted_floor", 2)
        where = f"_evicted_floor[{key!r}]"
        floors[(task_key[0], task_key[1])] = {
            (None if rank is None else _rank(rank, where, None)): _int(value, f"{where}[{rank!r}]")
            for rank, value in _mapping(record, where).items()
        }
    return floors


def _check_split(key: SplitKey, shares: Any, expected: Expected) -> list[list[int]]:
    where = f"_balanced_cache[{key!r}]"
    if isinstance(shares, (str, bytes, Mapping)) or not isinstance(shares, Sequence):
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


def _check_balanced(state: Mapping[str, Any], restored: Restored, expected: Expected) -> None:
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
        if not isinstance(ranks, (set, frozenset, list, tuple, range)):
            raise TypeError(f"checkpoint {where} must be a set of ranks, got {_describe(ranks)}")
        uncollected[typed_key] = {_rank(rank, where, dp_size) for rank in ranks}
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


def validate_checkpoint(state: Any, expected: Expected) -> Restored:
    """Check ``state`` against the loading sampler and return it as fresh objects, or raise.

    Raises:
        TypeError: ``state`` or one of its fields has the wrong type.
        ValueError: a missing ``_states``, an unknown format version, another sampler kind, a
            size that conflicts with the sampler's (``dp_size``, ``n_samples_per_prompt``,
            recorded or inferred from the cached shares), an index listed twice.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict from save_checkpoint(), got {_describe(state)}")
    if "_states" not in state:
        raise ValueError("state must contain '_states' (a dict from save_checkpoint())")
    _check_header(state, expected)
    states = _check_states(state["_states"], expected)
    restored = Restored(
        states=states,
        batch_order=_check_order(state.get("_batch_order"), states),
        evicted=_check_evicted(state.get("_evicted")),
        evicted_floor=_check_floor(state.get("_evicted_floor")),
    )
    if expected.balanced:
        _check_balanced(state, restored, expected)
    return restored
