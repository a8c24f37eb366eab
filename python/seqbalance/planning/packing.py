"""Packing sequences into fixed-length packs, and the ranks x steps x packs plan built on it."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .. import _native
from .._errors import PartitionError
from .._inputs import (
    as_int64_array,
    check_choice,
    check_k_partitions,
    check_pad_to_multiple_of,
    check_refine,
)
from ..partition import get_seqlen_balanced_partitions
from .costs import check_total, pad_lengths, sample_costs

__all__ = ["ALGORITHMS", "pack_sequences", "plan_packed_steps"]

logger = logging.getLogger(__name__)

#: The packing rules :func:`pack_sequences` accepts.
ALGORITHMS = ("next_fit", "first_fit", "ffd", "bfd")


# The native packer takes the cap as an unsigned 64-bit integer.
_NATIVE_CAP_MAX = 2**64 - 1


def _native_cap(lengths: np.ndarray, cap: int) -> int:
    """``cap`` as the native packer takes it: a cap of 2**64 or more is clamped to 2**64 - 1.

    Clamping changes nothing while the lengths sum to at most 2**64 - 1: both caps hold every
    length in one pack. Above that (several lengths near 2**63) the clamp could split a pack
    the real cap holds, so that case raises instead of answering differently.
    """
    if cap <= _NATIVE_CAP_MAX:
        return cap
    total = sum(lengths.tolist())
    if total > _NATIVE_CAP_MAX:
        raise ValueError(
            f"pack_max_length ({cap}) is above 2**64 - 1 and the lengths sum to {total}, "
            "also above it; the packer needs one of the two below 2**64"
        )
    return _NATIVE_CAP_MAX


def _check_cap(lengths: np.ndarray, cap: int, pad: int = 1) -> None:
    too_long = np.flatnonzero(lengths > cap)
    if too_long.size:
        first = int(too_long[0])
        padding = f" (padded to a multiple of {pad})" if pad > 1 else ""
        raise ValueError(
            f"lengths[{first}] = {int(lengths[first])}{padding} is longer than "
            f"pack_max_length ({cap})"
        )


def pack_sequences(
    lengths: Any, pack_max_length: int, *, algorithm: str = "bfd", pad_to_multiple_of: int = 1
) -> list[list[int]]:
    """Pack sequences into packs whose total length is at most ``pack_max_length``.

    Algorithms (all deterministic):

    - ``"next_fit"``: input order; close the pack when the next item does not fit.
    - ``"first_fit"``: input order; the earliest opened pack the item fits in.
    - ``"ffd"``: first fit over the items by length descending, ties by index ascending.
    - ``"bfd"``: same order; the fitting pack with the least room left, ties to the earliest.

    All run natively; first fit and the decreasing ones in O(n log n).

    Args:
        lengths: sequence lengths (ints or a 1-D integer array).
        pack_max_length: the cap on a pack's total length, an int >= 1; a cap of 2**64 or
            more acts as no cap at all (every length fits in one pack).
        algorithm: one of ``"next_fit"``, ``"first_fit"``, ``"ffd"``, ``"bfd"``.
        pad_to_multiple_of: pack every length rounded up to a multiple of this (tensor or
            context parallelism pads sequences), so the packs still fit after padding.

    Returns:
        Packs in the order they were opened, each a list of indexes in the order they were
        placed; every index appears exactly once and no pack is empty.

    Raises:
        ValueError: a length above ``pack_max_length`` (naming its index), an unknown
            algorithm, ``pack_max_length < 1``, ``pack_max_length`` and the lengths' sum both
            above 2**64 - 1; the errors of the length normalisation.

    Example:
        >>> pack_sequences([5, 6, 2], 8)
        [[1, 2], [0]]
    """
    cap = check_k_partitions(pack_max_length, "pack_max_length")
    algorithm = check_choice(algorithm, "algorithm", ALGORITHMS)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    values = pad_lengths(as_int64_array(lengths), pad)
    _check_cap(values, cap, pad)
    return _native._pack(values, _native_cap(values, cap), algorithm)


def plan_packed_steps(
    lengths: Any,
    dp_size: int,
    optimizer_steps: int,
    pack_max_length: int,
    *,
    cost: Any = "tokens",
    pad_to_multiple_of: int = 1,
    refine: bool | str = False,
) -> list[list[list[list[int]]]]:
    """Plan ranks x optimizer steps x packs: ``plan[rank][step][pack] -> sample indexes``.

    1. Balance the samples across ``dp_size`` ranks by ``cost`` (tokens by default), then each
       rank's samples across ``optimizer_steps`` steps (both with
       ``get_seqlen_balanced_partitions``).
    2. Pack each (rank, step) bucket with best fit decreasing into packs of at most
       ``pack_max_length`` tokens.
    3. Pad with empty packs so every rank has the same number of packs in each step (the caller
       fills them with padding tokens), so gradient-accumulation collectives line up.

    A rank that receives fewer samples than ``optimizer_steps`` (one very long sample can take a
    whole rank's share) gets empty buckets for its last steps, padded like any other.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        dp_size: number of data-parallel ranks, an int >= 1.
        optimizer_steps: number of optimizer steps, an int >= 1.
        pack_max_length: the cap on a pack's total length, an int >= 1 (as in
            :func:`pack_sequences`, 2**64 or more is no cap).
        cost: what balancing weighs: ``"tokens"`` (default), ``"workload"``, per-sample integer
            weights or a callable on the (padded) lengths (see :mod:`seqbalance.costs`); packing
            always counts tokens.
        pad_to_multiple_of: count every length rounded up to a multiple of this, in the packs
            (and in the cost), so they still fit after padding.
        refine: as in :func:`seqbalance.get_seqlen_balanced_partitions`, for both balancing steps.

    Returns:
        Nested lists ``[rank][step][pack]`` of sample indexes; no pack exceeds the cap, every
        index appears exactly once, and ``len(plan[r][s])`` is the same for every rank ``r``.

    Raises:
        ValueError: fewer samples than ``dp_size * optimizer_steps`` (a
            :class:`~seqbalance.PartitionError`), a sample above ``pack_max_length``, an argument
            < 1, ``pack_max_length`` and the lengths' sum both above 2**64 - 1; TypeError for
            non-integer arguments.

    Example:
        >>> plan_packed_steps([4, 4, 3, 3, 2, 2, 1, 1, 1], 2, 2, 5)
        [[[[0, 6], [7]], [[2, 4]]], [[[3, 5], []], [[1, 8]]]]
    """
    ranks = check_k_partitions(dp_size, "dp_size")
    steps = check_k_partitions(optimizer_steps, "optimizer_steps")
    cap = check_k_partitions(pack_max_length, "pack_max_length")
    refine = check_refine(refine)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    values = pad_lengths(as_int64_array(lengths), pad)
    if values.size < ranks * steps:
        raise PartitionError(
            f"number of samples ({values.size}) is smaller than dp_size * optimizer_steps "
            f"({ranks} * {steps} = {ranks * steps})"
        )
    # Checked up front so the error names the index in ``lengths``, not in a bucket.
    _check_cap(values, cap, pad)
    # Every bucket sums to at most the total, so one check covers all of them.
    cap = _native_cap(values, cap)
    weights = sample_costs(cost, values)
    if weights is not values:
        check_total(weights)
    plan: list[list[list[list[int]]]] = []
    for rank_part in get_seqlen_balanced_partitions(weights, ranks, False, refine=refine):
        rank_samples = np.asarray(rank_part, dtype=np.int64)
        filled = min(steps, rank_samples.size)
        step_parts = get_seqlen_balanced_partitions(
            weights[rank_samples], filled, False, refine=refine
        )
        rank_plan: list[list[list[int]]] = []
        for part in step_parts:
            bucket = rank_samples[np.asarray(part, dtype=np.int64)]
            packs = _native._pack(values[bucket], cap, "bfd")
            rank_plan.append([bucket[pack].tolist() for pack in packs])
        rank_plan.extend([] for _ in range(steps - filled))
        plan.append(rank_plan)
    for step in range(steps):
        width = max(len(rank_plan[step]) for rank_plan in plan)
        for rank_plan in plan:
            rank_plan[step].extend([] for _ in range(width - len(rank_plan[step])))
    logger.debug("planned %d samples over %d ranks x %d steps", values.size, ranks, steps)
    return plan
