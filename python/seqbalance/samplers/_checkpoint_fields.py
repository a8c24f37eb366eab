"""The fields every sampler checkpoint shares, and the checks each field gets: ranks sized against
``dp_size`` before they are read, index lists, group sizes, keys (see `.checkpoint` for the rules).

The lower layer of the checkpoint checks: `.checkpoint` (every sampler's fields) and
`._balanced_checkpoint` (the balanced sampler's splits and reservations) both build on it.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._inputs import MAX_COUNT, _describe
from .cache import BatchKey, EvictedRanks, compact_ranks

__all__ = ["Expected", "Restored", "SplitKey"]

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
    # (partition_id, task_name) -> handed-out indexes still reserved; None: not recorded.
    handed_out: dict[BatchKey, list[int]] | None = None
    # (partition_id, task_name) -> intervals of every index handed out; None: not recorded.
    handed_history: dict[BatchKey, list[tuple[int, int]]] | None = None


def _rank_cap(dp_size: int | None) -> int:
    return MAX_COUNT if dp_size is None else dp_size


def _check_size(value: Any, where: str, cap: int, what: str) -> None:
    """Refuse a collection of more than ``cap`` items before a single one is read."""
    size = len(value)
    if size > cap:
        raise _fail(where, f"holds {size} {what}, more than the {cap} this sampler can have")


def _check_rank_count(value: Any, where: str, dp_size: int | None) -> None:
    """Refuse more ranks than ``dp_size`` (or ``2**24``) before a single one is read."""
    size = len(value)
    if dp_size is not None and size > dp_size:
        raise _fail(
            where,
            f"holds {size} ranks, so it was saved with dp_size >= {size}; this sampler has "
            f"dp_size={dp_size}",
        )
    _check_size(value, where, MAX_COUNT, "ranks")


def _ranks(value: Any, where: str, dp_size: int | None) -> frozenset[int] | range:
    """A collection of ranks, its size checked against ``dp_size`` before it is read."""
    if isinstance(value, range):
        if value.start == 0 and value.step == 1:
            # What save_checkpoint writes for ranks 0..k-1: kept as is, never walked.
            _check_rank_count(value, where, dp_size)
            return value if value.stop > 0 else frozenset()
    elif not isinstance(value, (set, frozenset, list, tuple)):
        raise TypeError(f"checkpoint {where} must be a set of ranks, got {_describe(value)}")
    _check_rank_count(value, where, dp_size)
    return compact_ranks(frozenset(_rank(rank, where, dp_size) for rank in value))


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
    # Only containers that hold their items: a lazy sequence could claim any length.
    if not isinstance(value, (list, tuple)):
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


def _task_key(value: Any, where: str, width: int) -> tuple[Hashable, ...]:
    if not isinstance(value, tuple) or len(value) != width:
        raise TypeError(f"checkpoint {where} keys must be {width}-tuples, got {_describe(value)}")
    return tuple(_hashable(part, where) for part in value)
