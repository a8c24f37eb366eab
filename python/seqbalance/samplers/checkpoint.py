"""Sampler checkpoints: what ``save_checkpoint`` writes, and the checks ``load_checkpoint`` makes.

A checkpoint is a plain dict. seqbalance writes ``format_version``, ``sampler`` (the kind),
``n_samples_per_prompt`` and ``dp_size`` (where the sampler has them) beside ``_states`` and its
cache bookkeeping. Loading checks every field into fresh objects before the sampler is touched, so
a refused checkpoint leaves the sampler exactly as it was. Fields that are missing are inferred:
an upstream-style ``{"_states": ...}`` dict (TransferQueue's samplers write that) still loads, and
a balanced sampler's splits are rebuilt from the shares in ``_states``. Fields that conflict with
the sampler (another ``dp_size``, another kind) are a ``ValueError`` naming both values.

Sizes are checked before anything is iterated: a collection of ranks holds at most ``dp_size``
(or, for samplers without one, ``2**24``) entries, an eviction record at most
``EVICTED_RECORD_SIZE`` batches, and index lists must be real lists, tuples or arrays (a lazy
``range(10**12)`` is refused, not walked). A hostile checkpoint costs time in proportion to the
memory it already occupies, never more.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from .._inputs import _describe
from ._balanced_checkpoint import check_balanced
from ._checkpoint_fields import (
    Expected,
    Restored,
    _check_groups,
    _check_rank_count,
    _check_size,
    _fail,
    _hashable,
    _index_list,
    _int,
    _mapping,
    _rank,
    _rank_cap,
    _ranks,
    _task_key,
)
from .cache import EVICTED_RECORD_SIZE, BatchKey, EvictedRanks

__all__ = ["CHECKPOINT_FORMAT", "Expected", "Restored", "validate_checkpoint"]

#: The version written by ``save_checkpoint``. Version 1 (no ``format_version`` key) is what
#: seqbalance wrote before, and what upstream-style checkpoints look like.
CHECKPOINT_FORMAT = 2


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
            ranks = _mapping(ranks, task_where)
            _check_rank_count(ranks, task_where, expected.dp_size)
            for dp_rank, batches in ranks.items():
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


def _check_order(raw: Any, states: dict[Any, Any]) -> dict[BatchKey, list[Hashable]]:
    order: dict[BatchKey, dict[Hashable, None]] = {}
    for key, batches in _mapping(raw if raw is not None else {}, "_batch_order").items():
        task_key = _task_key(key, "_batch_order", 2)
        where = f"_batch_order[{key!r}]"
        if not isinstance(batches, (list, tuple)):
            raise TypeError(f"checkpoint {where} must be a list, got {_describe(batches)}")
        seen = order.setdefault((task_key[0], task_key[1]), {})
        for batch in batches:
            seen.setdefault(_hashable(batch, where), None)
    # Batches cached but missing from the record (an upstream checkpoint has no record at all)
    # join it, oldest rank first, so the bound applies to them too.
    for partition_id, tasks in states.items():
        for task_name, ranks in tasks.items():
            seen = order.setdefault((partition_id, task_name), {})
            for batches in ranks.values():
                for batch in batches:
                    seen.setdefault(batch, None)
    return {key: list(batches) for key, batches in order.items()}


def _check_evicted(raw: Any, dp_size: int | None) -> dict[BatchKey, dict[Hashable, EvictedRanks]]:
    evicted: dict[BatchKey, dict[Hashable, EvictedRanks]] = {}
    for key, record in _mapping(raw if raw is not None else {}, "_evicted").items():
        task_key = _task_key(key, "_evicted", 2)
        where = f"_evicted[{key!r}]"
        record = _mapping(record, where)
        _check_size(record, where, EVICTED_RECORD_SIZE, "evicted batches")
        entries: dict[Hashable, EvictedRanks] = {}
        for batch, ranks in record.items():
            entry_where = f"{where}[{_hashable(batch, where)!r}]"
            entries[batch] = None if ranks is None else _ranks(ranks, entry_where, dp_size)
        evicted[(task_key[0], task_key[1])] = entries
    return evicted


def _check_floor(raw: Any, dp_size: int | None) -> dict[BatchKey, dict[int | None, int]]:
    floors: dict[BatchKey, dict[int | None, int]] = {}
    for key, record in _mapping(raw if raw is not None else {}, "_evicted_floor").items():
        task_key = _task_key(key, "_evicted_floor", 2)
        where = f"_evicted_floor[{key!r}]"
        record = _mapping(record, where)
        _check_size(record, where, _rank_cap(dp_size) + 1, "ranks")
        floors[(task_key[0], task_key[1])] = {
            (None if rank is None else _rank(rank, where, dp_size)): _int(
                value, f"{where}[{rank!r}]"
            )
            for rank, value in record.items()
        }
    return floors


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
        evicted=_check_evicted(state.get("_evicted"), expected.dp_size),
        evicted_floor=_check_floor(state.get("_evicted_floor"), expected.dp_size),
    )
    if expected.balanced:
        check_balanced(state, restored, expected)
    return restored
