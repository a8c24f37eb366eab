"""What the balanced sampler weighs and how it splits: group weights from ``custom_meta``, the
uneven-groups policy and the equal split used without a partition object.

See `.seqlen_balanced` for the policies in full; this module holds the parts that do not
touch the sampler's cache or reservations.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE, EqualSize, _describe
from ..costs.workload import COST_NAMES, group_sums, sample_costs, saved_cost_hint
from ..partition import get_seqlen_balanced_partitions
from ..planning.metrics import naive_split

__all__ = [
    "UNEVEN_GROUPS",
    "check_partition",
    "check_sampler_cost",
    "check_uneven_groups",
    "equal_split",
    "group_weights",
    "split_groups",
]

logger = logging.getLogger("seqbalance.samplers.seqlen_balanced")

SplitKey = tuple[Hashable, Hashable, Hashable]

#: The accepted values of ``uneven_groups``.
UNEVEN_GROUPS = ("free", "nearly")

_MISSING = object()


def check_uneven_groups(uneven_groups: Any) -> str:
    """``uneven_groups`` as ``"free"`` or ``"nearly"``; another string is a ``ValueError``, any
    other type a ``TypeError``, both naming the argument and the value."""
    if isinstance(uneven_groups, str):
        if uneven_groups in UNEVEN_GROUPS:
            return uneven_groups
        raise ValueError(f"uneven_groups must be 'free' or 'nearly', got {uneven_groups!r}")
    raise TypeError(f"uneven_groups must be 'free' or 'nearly', got {_describe(uneven_groups)}")


def check_partition(partition: Any) -> Any:
    """``partition`` unchanged when it is ``None`` (the equal-split fallback) or has a callable
    ``get_custom_meta``; anything else is a ``TypeError`` naming the argument.

    Example:
        >>> check_partition(None) is None
        True
        >>> check_partition("p0")
        Traceback (most recent call last):
        ...
        TypeError: partition must be None or have a get_custom_meta(indexes) method, got 'p0' (str)
    """
    if partition is None or callable(getattr(partition, "get_custom_meta", None)):
        return partition
    raise TypeError(
        "partition must be None or have a get_custom_meta(indexes) method, got "
        f"{_describe(partition)}"
    )


def split_groups(
    group_weights: list[Any],
    dp_size: int,
    refine: bool | str = False,
    uneven_groups: str = "free",
) -> list[list[int]]:
    """Assign groups (by position) to ``dp_size`` ranks so token sums are balanced.

    Args:
        group_weights: weight of each group (token count, or a cost), >= 0.
        dp_size: number of ranks, >= 1.
        refine: passed to ``get_seqlen_balanced_partitions``.
        uneven_groups: when the group count exceeds ``dp_size`` but is not a multiple of it,
            ``"free"`` balances the weights with free counts, ``"nearly"`` keeps the group
            counts within one of each other.

    Returns:
        ``dp_size`` ascending lists of group positions; rank 0 holds the heaviest share. Every
        position appears exactly once.

    Example:
        >>> split_groups([10, 20, 30, 40], 2)
        [[0, 3], [1, 2]]
        >>> split_groups([5, 9], 3)
        [[1], [0], []]
        >>> split_groups([9, 1, 1, 1, 1], 2), split_groups([9, 1, 1, 1, 1], 2, uneven_groups="nearly")
        ([[0], [1, 2, 3, 4]], [[0, 2], [1, 3, 4]])
    """
    count = len(group_weights)
    if count == 0:
        return [[] for _ in range(dp_size)]
    if count < dp_size:
        heaviest_first = sorted(range(count), key=lambda g: (-group_weights[g], g))
        return [[g] for g in heaviest_first] + [[] for _ in range(dp_size - count)]
    equal_size: EqualSize = True
    if count % dp_size:
        equal_size = "nearly" if uneven_groups == "nearly" else False
    return get_seqlen_balanced_partitions(
        group_weights, dp_size, equal_size=equal_size, refine=refine
    )


def equal_split(group_count: int, dp_size: int) -> list[list[int]]:
    """Contiguous runs of groups, rank r before rank r+1; earlier ranks take the extra groups.

    Example:
        >>> equal_split(5, 2)
        [[0, 1, 2], [3, 4]]
    """
    return naive_split(group_count, dp_size)


def check_sampler_cost(cost: Any, cost_field: Any) -> tuple[Any, str | None]:
    """The sampler's cost options: a cost name or callable, or a custom-meta field name."""
    if cost_field is not None:
        if not isinstance(cost_field, str):
            raise TypeError(f"cost_field must be a str, got {_describe(cost_field)}")
        if not (isinstance(cost, str) and cost == "tokens"):
            raise TypeError("pass either cost= or cost_field=, not both")
        return "tokens", cost_field
    if isinstance(cost, str):
        if cost not in COST_NAMES:
            raise ValueError(f"cost must be 'tokens', 'workload' or a callable, got {cost!r}")
        return cost, None
    if not callable(cost):
        raise TypeError(
            "cost must be 'tokens', 'workload' or a callable on the lengths (per-sample "
            f"weights: pass cost_field= naming a custom_meta field), got {_describe(cost)}"
            f"{saved_cost_hint(cost)}"
        )
    return cost, None


def _total_length(index: int, entry: Any) -> int | None:
    """The validated ``total_lengths`` of one sample, or ``None`` when it has none."""
    if entry is None:
        return None
    # Runs once per selected sample: plain dicts and ints take the exact-type fast path, because
    # the generic Mapping/__index__ checks cost more than the balancing itself at batch sizes of
    # a few thousand.
    if type(entry) is not dict and not isinstance(entry, Mapping):
        raise ValueError(f"custom_meta of index {index} must be a dict, got {_describe(entry)}")
    value = entry.get("total_lengths", _MISSING)
    if value is _MISSING:
        return None
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise ValueError(
                f"total_lengths of index {index} must be a non-negative integer, got {_describe(value)}"
            )
        value = value.__index__()
    if value < 0:
        raise ValueError(
            f"total_lengths of index {index} must be a non-negative integer, got {value}"
        )
    if value > MAX_VALUE:
        raise OverflowError(f"total_lengths of index {index} must be <= 2**63 - 1, got {value}")
    return value


def group_weights(
    groups: list[list[int]], partition: Any, key: SplitKey, cost: Any, cost_field: str | None
) -> list[Any]:
    """Each group's weight, read from ``partition.get_custom_meta`` of the selected indexes."""
    selected = [index for group in groups for index in group]
    custom_meta = partition.get_custom_meta(selected)
    if not isinstance(custom_meta, Mapping):
        # Treating this as "no lengths" would hide a broken partition object behind a
        # warning and an unbalanced split.
        raise TypeError(
            "partition.get_custom_meta(indexes) must return a mapping {index: dict}, got "
            f"{_describe(custom_meta)}"
        )
    if cost_field is not None or cost != "tokens":
        return _group_costs(groups, custom_meta, key, cost, cost_field)
    missing = 0
    weights = []
    for group in groups:
        weight = 0
        for index in group:
            length = _total_length(index, custom_meta.get(index))
            if length is None:
                missing += 1
                length = 1
            weight += length
        if weight > MAX_VALUE:
            raise OverflowError(
                f"total_lengths of the group at indexes {group} sum to {weight}, above "
                "2**63 - 1 (the largest weight the partitioner accepts)"
            )
        weights.append(weight)
    _warn_missing(missing, len(selected), key)
    return weights


def _warn_missing(missing: int, selected: int, key: SplitKey) -> None:
    if missing:
        partition_id, task_name, batch_index = key
        logger.warning(
            "SeqlenBalancedSampler: %d of %d samples in batch %r (partition %r, task %r) have no "
            "total_lengths in custom_meta; weighting each of them 1",
            missing,
            selected,
            batch_index,
            partition_id,
            task_name,
        )


def _group_costs(
    groups: list[list[int]],
    custom_meta: Mapping[Any, Any],
    key: SplitKey,
    cost: Any,
    cost_field: str | None,
) -> list[Any]:
    """Group weights under ``cost="workload"``, a callable, or ``cost_field`` (ints, or floats
    in their precision)."""
    selected = [index for group in groups for index in group]
    starts = np.cumsum([0] + [len(group) for group in groups[:-1]], dtype=np.int64)
    if cost_field is not None:
        values = []
        for index in selected:
            entry = custom_meta.get(index)
            if not isinstance(entry, Mapping) or cost_field not in entry:
                raise ValueError(
                    f"custom_meta of index {index} has no {cost_field!r} (cost_field={cost_field!r})"
                )
            values.append(entry[cost_field])
        costs = sample_costs(values, np.zeros(len(values), dtype=np.int64), name=cost_field)
    else:
        missing = 0
        lengths = []
        for index in selected:
            length = _total_length(index, custom_meta.get(index))
            if length is None:
                missing += 1
                length = 1
            lengths.append(length)
        _warn_missing(missing, len(selected), key)
        costs = sample_costs(cost, np.asarray(lengths, dtype=np.int64))
    sums = group_sums(costs, starts)
    # float32 weights stay np.float32 scalars, which the partitioners add in single precision.
    return list(sums) if sums.dtype == np.float32 else sums.tolist()
