"""Balancing whole groups (e.g. the responses to one prompt) across data-parallel ranks."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .._deprecation import renamed_params
from .._inputs import (
    EqualSize,
    as_int64_array,
    check_equal_size,
    check_k_partitions,
    check_key,
    check_per_item,
    check_refine,
)
from ..costs.workload import group_sums, sample_costs
from ..errors import PartitionError
from ..partition import get_seqlen_balanced_partitions

__all__ = ["group_balanced_partitions", "uid_runs"]

logger = logging.getLogger(__name__)


def uid_runs(uid_list: Any) -> list[tuple[int, int]]:
    """``(start, stop)`` of every maximal run of equal consecutive uids, in order.

    ``uid_list`` must be a sized, ordered sequence or an array (a generator, possibly endless,
    or a set is a ``TypeError``).
    """
    check_per_item(uid_list, "uid_list", "ids")
    uids = uid_list.tolist() if isinstance(uid_list, np.ndarray) else list(uid_list)
    runs = []
    start = 0
    for position in range(1, len(uids) + 1):
        if position == len(uids) or uids[position] != uids[start]:
            check_key(uids[start], f"uid_list[{start}]")
            runs.append((start, position))
            start = position
    return runs if uids else []


@renamed_params(seqlen_list="lengths")
def group_balanced_partitions(
    lengths: Any,
    uid_list: Any,
    k_partitions: int,
    *,
    equal_size: EqualSize = True,
    cost: Any = "tokens",
    refine: bool | str = False,
) -> list[list[int]]:
    """Balance groups of samples over ``k_partitions`` ranks, each group kept whole.

    A group is a maximal run of consecutive samples with equal uid (GRPO-style: the responses to
    one prompt); groups may differ in size (a prompt whose responses were filtered). A group
    weighs the sum of its members' costs (by default their tokens; ``cost="workload"`` is
    `seqbalance.calculate_workload`, as in verl), and the groups are balanced with ``get_seqlen_balanced_partitions(weights,
    k_partitions, equal_size)``: by default every partition gets the same number of groups.

    Args:
        lengths: per-sample lengths (ints or a 1-D integer array).
        uid_list: per-sample group ids, same length; any values comparable with ``==``.
        k_partitions: number of partitions (ranks), an int >= 1.
        equal_size: ``True`` (default): equal group counts, which needs a group count divisible
            by ``k_partitions``; ``"nearly"``: group counts differ by at most one, for any group
            count; ``False``: counts free, only the weights balanced. Strict as in the
            partitioners (bools, 0/1 or ``"nearly"``; anything else is a ``TypeError``).
        cost: what a sample weighs: ``"tokens"`` (default), ``"workload"``, per-sample integer
            or float weights or a callable on the lengths (see `seqbalance.costs`); float
            weights are balanced in their precision, as the partitioners compute.
        refine: as in `seqbalance.get_seqlen_balanced_partitions`; under ``True`` or
            ``"nearly"`` every partition keeps its group count.

    Returns:
        ``k_partitions`` lists of sample indexes, each ascending, heaviest partition first.

    Raises:
        PartitionError: fewer groups than ``k_partitions``, or, with ``equal_size=True``, a
            group count not divisible by it (the message suggests ``"nearly"``).
        ValueError: ``uid_list`` and ``lengths`` differ in length; the errors of the length
            and ``k_partitions`` checks.

    Example:
        >>> uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
        >>> group_balanced_partitions([5, 5, 1, 1, 9, 9, 2, 2], uids, 2)
        [[2, 3, 4, 5], [0, 1, 6, 7]]
        >>> group_balanced_partitions([5, 5, 1, 1, 9, 9, 2], uids[:7], 2, equal_size="nearly")
        [[2, 3, 4, 5], [0, 1, 6]]
    """
    return balanced_groups(lengths, uid_list, k_partitions, equal_size, cost, refine, "lengths")


def balanced_groups(
    lengths: Any,
    uid_list: Any,
    k_partitions: Any,
    equal_size: Any,
    cost: Any,
    refine: Any,
    name: str,
) -> list[list[int]]:
    """`group_balanced_partitions`, its errors naming the lengths ``name`` (verl's drop-in keeps
    the name ``seqlen_list`` its messages always had)."""
    k = check_k_partitions(k_partitions)
    equal = check_equal_size(equal_size)
    refine = check_refine(refine)
    lengths = as_int64_array(lengths, name)
    check_per_item(uid_list, "uid_list", "ids")
    if len(uid_list) != len(lengths):
        raise ValueError(f"uid_list has {len(uid_list)} entries but {name} has {len(lengths)}")
    runs = uid_runs(uid_list)
    if len(runs) < k:
        raise PartitionError(f"number of groups ({len(runs)}) is smaller than k_partitions ({k})")
    if equal is True and len(runs) % k != 0:
        raise PartitionError(
            f"number of groups ({len(runs)}) is not divisible by k_partitions ({k}); "
            "every partition must get the same number of groups with equal_size=True "
            "(equal_size='nearly' allows group counts that differ by one)"
        )
    starts = np.asarray([start for start, _ in runs], dtype=np.int64)
    weights = group_sums(sample_costs(cost, lengths), starts)
    group_parts = get_seqlen_balanced_partitions(weights, k, equal, refine=refine)
    logger.debug("balanced %d groups of %d samples over %d partitions", len(runs), len(lengths), k)
    return [
        [index for group in sorted(part) for index in range(*runs[group])] for part in group_parts
    ]
