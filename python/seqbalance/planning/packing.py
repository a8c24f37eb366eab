"""Packing sequences into fixed-length packs, the ranks x steps x packs plan built on it, and the
shape limits of a pack or micro-batch beyond the token cap.

Shape limits: ``max_sequences`` (samples per pack or micro-batch), ``footprint`` (``"sum"`` or
``"padded"``: charged ``samples * longest``) and ``keys`` (samples of different keys never share
one). The micro-batch planners read them per group of samples kept together (`group_limits`);
the native planner keeps them, and `group_limits` names the group that cannot meet them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _native
from .._deprecation import renamed_params, retired_flag
from .._inputs import (
    _describe,
    as_int64_array,
    check_choice,
    check_k_partitions,
    check_key,
    check_max_sequences,
    check_pad_to_multiple_of,
    check_per_item,
    check_refine,
    normalize_weights,
)
from ..costs.workload import check_total, pad_lengths, sample_costs
from ..errors import PartitionError, argument_error

__all__ = [
    "ALGORITHMS",
    "FOOTPRINTS",
    "Limits",
    "group_limits",
    "keeps_limits",
    "pack_ids",
    "pack_sequences",
    "plan_packed_steps",
]

logger = logging.getLogger(__name__)

#: The packing rules `pack_sequences` accepts.
ALGORITHMS = ("next_fit", "first_fit", "ffd", "bfd")


# The native packer takes the cap as an unsigned 64-bit integer.
_NATIVE_CAP_MAX = 2**64 - 1


#: What ``footprint=`` may be: a pack charged the sum of its lengths, or count times longest.
FOOTPRINTS = ("sum", "padded")


def _native_cap(lengths: np.ndarray, cap: int, footprint: str = "sum") -> int:
    """``cap`` as the native packer takes it: a cap of 2**64 or more is clamped to 2**64 - 1.

    Clamping changes nothing while the largest footprint any pack could have (the lengths' sum,
    or with ``footprint="padded"`` their count times the longest) is at most 2**64 - 1: both caps
    then hold every pack. Above that (several lengths near 2**63) the clamp could split a pack
    the real cap holds, so that case raises instead of answering differently.
    """
    if cap <= _NATIVE_CAP_MAX:
        return cap
    if footprint == "padded":
        total = len(lengths) * int(lengths.max(initial=0))
        what = "their count times the longest is"
    else:
        total = sum(lengths.tolist())
        what = "the lengths sum to"
    if total > _NATIVE_CAP_MAX:
        raise ValueError(
            f"max_token_len ({cap}) is above 2**64 - 1 and {what} {total}, "
            "also above it; the packer needs one of the two below 2**64"
        )
    return _NATIVE_CAP_MAX


def _check_max_sequences(max_sequences: Any) -> int | None:
    return check_max_sequences(max_sequences)


def _key_numbers(keys: Any, n: int) -> np.ndarray | None:
    """One number per distinct key (equal keys, equal numbers), or ``None`` for no keys."""
    if keys is None:
        return None
    check_per_item(keys, "keys", "hashables")
    if len(keys) != n:
        raise ValueError(f"keys must have one entry per length: got {len(keys)} for {n} lengths")
    if isinstance(keys, np.ndarray) and keys.dtype != object:
        return np.unique(keys, return_inverse=True)[1].astype(np.int64).reshape(-1)
    items = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
    numbers: dict[Any, int] = {}
    out = np.empty(n, dtype=np.int64)
    for position, key in enumerate(items):
        try:
            number = numbers.get(key)
        except TypeError:
            raise TypeError(f"keys[{position}] must be hashable, got {_describe(key)}") from None
        if number is None:
            check_key(key, ("keys", position))
            number = numbers[key] = len(numbers)
        out[position] = number
    return out


def _check_cap(lengths: np.ndarray, cap: int, pad: int = 1) -> None:
    too_long = np.flatnonzero(lengths > cap)
    if too_long.size:
        first = int(too_long[0])
        padding = f" (padded to a multiple of {pad})" if pad > 1 else ""
        shown = int(lengths[first])
        over = dict(shown=shown, padding=padding, cap_argument="max_token_len", cap=cap)
        raise argument_error("longer_than_cap", ("lengths", first), shown, **over)


def pack_ids(
    lengths: Any,
    max_token_len: int,
    *,
    algorithm: str = "bfd",
    pad_to_multiple_of: int = 1,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
) -> npt.NDArray[np.int64]:
    """The packs of `pack_sequences` as the pack of each item: an int64 array ``ids`` with
    ``ids[i]`` the pack (numbered in opening order) of item ``i``, without building a Python list
    per pack. Arguments and errors as `pack_sequences`.

    Example:
        >>> pack_ids([5, 6, 2], 8).tolist()
        [1, 0, 0]
    """
    ids: npt.NDArray[np.int64] = _pack(
        lengths, max_token_len, algorithm, pad_to_multiple_of, True, max_sequences, footprint, keys
    )
    return ids


@renamed_params(pack_max_length="max_token_len")
@retired_flag("as_ids", pack_ids)
def pack_sequences(
    lengths: Any,
    max_token_len: int,
    *,
    algorithm: str = "bfd",
    pad_to_multiple_of: int = 1,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
) -> list[list[int]]:
    """Pack sequences into packs whose total length is at most ``max_token_len``.

    Algorithms (all deterministic):

    - ``"next_fit"``: input order; close the pack when the next item does not fit.
    - ``"first_fit"``: input order; the earliest opened pack the item fits in.
    - ``"ffd"``: first fit over the items by length descending, ties by index ascending.
    - ``"bfd"``: same order; the fitting pack with the least room left, ties to the earliest.

    All run natively: first fit and ffd in O(n log n), bfd in about O(n) for lengths up to a
    cap of a few times ``len(lengths)`` (O(n log n) beyond).

    Shapes (planning spec): ``max_sequences``, ``footprint`` and ``keys`` extend what "fits"
    means -- the pack's footprint with the item within the cap, fewer than ``max_sequences``
    items in it, the same key -- and each rule keeps its definition (bfd: least room left after
    placing, room measured in the footprint, ties to the earliest opened). Next fit closes its
    pack on a different key as on any misfit. With every one at its default, the packs are the
    plain rules'. These run in O(n log n) too, on a slower path than the defaults.

    Args:
        lengths: sequence lengths (ints or a 1-D integer array).
        max_token_len: the cap on a pack's total length, an int >= 1; a cap of 2**64 or
            more acts as no cap at all (every length fits in one pack).
        algorithm: one of ``"next_fit"``, ``"first_fit"``, ``"ffd"``, ``"bfd"``.
        pad_to_multiple_of: pack every length rounded up to a multiple of this (tensor or
            context parallelism pads sequences), so the packs still fit after padding.
        max_sequences: the most items a pack may hold, an int >= 1 (``None``: no limit).
        footprint: ``"sum"`` (default) charges a pack the sum of its lengths; ``"padded"``
            charges its count times its longest length (every sequence padded to the longest,
            as non-varlen attention does), after ``pad_to_multiple_of``.
        keys: one hashable per length (modality, policy version...): items with different
            keys never share a pack.

    Returns:
        Packs in the order they were opened, each a list of indexes in the order they were
        placed; every index appears exactly once and no pack is empty. `pack_ids` gives the
        same packs as the pack of each item.

    Raises:
        ValueError: a length above ``max_token_len`` (naming its index), an unknown
            algorithm, ``max_token_len < 1``, ``max_token_len`` and the lengths' sum both
            above 2**64 - 1; the errors of the length normalisation.
        ValueError: also ``max_sequences < 1``, an unknown ``footprint``, ``keys`` of another
            length than ``lengths``.
        TypeError: ``max_sequences`` not an int, a key not hashable.

    Example:
        >>> pack_sequences([5, 6, 2], 8)
        [[1, 2], [0]]
        >>> pack_sequences([5, 6, 2], 8, keys=["a", "b", "a"])
        [[1], [0, 2]]
    """
    packs: list[list[int]] = _pack(
        lengths, max_token_len, algorithm, pad_to_multiple_of, False, max_sequences, footprint, keys
    )
    return packs


def _pack(
    lengths: Any,
    max_token_len: Any,
    algorithm: Any,
    pad_to_multiple_of: Any,
    as_ids: bool,
    max_sequences: Any,
    footprint: Any,
    keys: Any,
) -> Any:
    cap = check_k_partitions(max_token_len, "max_token_len")
    algorithm = check_choice(algorithm, "algorithm", ALGORITHMS)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    limit = _check_max_sequences(max_sequences)
    footprint = check_choice(footprint, "footprint", FOOTPRINTS)
    values = pad_lengths(as_int64_array(lengths), pad)
    key_numbers = _key_numbers(keys, values.size)
    _check_cap(values, cap, pad)
    native_cap = _native_cap(values, cap, footprint)
    if limit is None and footprint == "sum" and key_numbers is None:
        return _native._pack(values, native_cap, algorithm, as_ids)
    return _native._pack(
        values, native_cap, algorithm, as_ids, limit, footprint == "padded", key_numbers
    )


@renamed_params(pack_max_length="max_token_len")
def plan_packed_steps(
    lengths: Any,
    dp_size: int,
    optimizer_steps: int,
    max_token_len: int,
    *,
    cost: Any = "tokens",
    pad_to_multiple_of: int = 1,
    refine: bool | str = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
) -> list[list[list[list[int]]]]:
    """Plan ranks x optimizer steps x packs: ``plan[rank][step][pack] -> sample indexes``.

    1. Balance the samples across ``dp_size`` ranks by ``cost`` (tokens by default), then each
       rank's samples across ``optimizer_steps`` steps (both with
       ``get_seqlen_balanced_partitions``).
    2. Pack each (rank, step) bucket with best fit decreasing into packs of at most
       ``max_token_len`` tokens.
    3. Pad with empty packs so every rank has the same number of packs in each step (the caller
       fills them with padding tokens), so gradient-accumulation collectives line up.

    A rank that receives fewer samples than ``optimizer_steps`` (one very long sample can take a
    whole rank's share) gets empty buckets for its last steps, padded like any other.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        dp_size: number of data-parallel ranks, an int >= 1.
        optimizer_steps: number of optimizer steps, an int >= 1.
        max_token_len: the cap on a pack's total length, an int >= 1 (as in
            `pack_sequences`, 2**64 or more is no cap).
        cost: what balancing weighs: ``"tokens"`` (default), ``"workload"``, per-sample integer
            or float weights (in their own precision, as the partitioners take them) or a
            callable on the (padded) lengths (see `seqbalance.costs`); packing
            always counts tokens.
        pad_to_multiple_of: count every length rounded up to a multiple of this, in the packs
            (and in the cost), so they still fit after padding.
        refine: as in `seqbalance.get_seqlen_balanced_partitions`, for both balancing steps.
        max_sequences: the most samples a pack may hold (as in `pack_sequences`).
        footprint: what a pack is charged against the cap, ``"sum"`` or ``"padded"`` (as in
            `pack_sequences`); the balancing still weighs ``cost``.

    Returns:
        Nested lists ``[rank][step][pack]`` of sample indexes; no pack exceeds the cap, every
        index appears exactly once, and ``len(plan[r][s])`` is the same for every rank ``r``.

    Raises:
        ValueError: fewer samples than ``dp_size * optimizer_steps`` (a
            `PartitionError`), a sample above ``max_token_len``, an argument
            < 1, ``max_token_len`` and the lengths' sum both above 2**64 - 1; TypeError for
            non-integer arguments.

    Example:
        >>> plan_packed_steps([4, 4, 3, 3, 2, 2, 1, 1, 1], 2, 2, 5)
        [[[[0, 6], [7]], [[2, 4]]], [[[3, 5], []], [[1, 8]]]]
    """
    ranks = check_k_partitions(dp_size, "dp_size")
    steps = check_k_partitions(optimizer_steps, "optimizer_steps")
    cap = check_k_partitions(max_token_len, "max_token_len")
    refine = check_refine(refine)
    pad = check_pad_to_multiple_of(pad_to_multiple_of)
    limit = _check_max_sequences(max_sequences)
    padded = check_choice(footprint, "footprint", FOOTPRINTS) == "padded"
    values = pad_lengths(as_int64_array(lengths), pad)
    if values.size < ranks * steps:
        raise PartitionError(
            f"number of samples ({values.size}) is smaller than dp_size * optimizer_steps "
            f"({ranks} * {steps} = {ranks * steps})"
        )
    # Checked up front so the error names the index in ``lengths``, not in a bucket.
    _check_cap(values, cap, pad)
    # Every bucket's largest footprint is at most the whole batch's, so one check covers all.
    cap = _native_cap(values, cap, "padded" if padded else "sum")
    weights = sample_costs(cost, values)
    if weights is not values and weights.dtype.kind != "f":
        check_total(weights)
    # One native request: both balancing steps, every bucket's packing and the padding.
    mode = "exact" if refine == "exact" else ("local" if refine else "no")
    plan: list[list[list[list[int]]]] = _native._plan_packed_steps(
        values, normalize_weights(weights).values, ranks, steps, cap, mode, limit, padded
    )
    logger.debug("planned %d samples over %d ranks x %d steps", values.size, ranks, steps)
    return plan


@dataclass(frozen=True)
class Limits:
    """The limits of one plan, per group (``None`` where the limit is not asked for)."""

    max_sequences: int | None
    padded: bool
    longest: np.ndarray | None  # group -> its longest padded sample (int64), with ``padded``
    keys: np.ndarray | None  # group -> its key number (int64), with ``keys``

    @property
    def active(self) -> bool:
        return self.max_sequences is not None or self.padded or self.keys is not None


def _where(starts: np.ndarray, sizes: np.ndarray, group: int) -> str:
    start, stop = int(starts[group]), int(starts[group] + sizes[group])
    if stop - start == 1:
        return f"lengths[{start}]"
    return f"group {group} (lengths[{start}:{stop}])"


def group_limits(
    max_sequences: Any,
    footprint: Any,
    keys: Any,
    padded_lengths: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    cap: int,
) -> Limits:
    """Validate the limits and read them per group; a group that cannot meet them alone (more
    samples than ``max_sequences``, ``samples * longest`` over the cap, mixed keys) is a
    ``ValueError`` naming it."""
    limit = check_max_sequences(max_sequences)
    padded = check_choice(footprint, "footprint", FOOTPRINTS) == "padded"
    numbers = _key_numbers(keys, padded_lengths.size)
    if limit is not None and sizes.size and int(sizes.max()) > limit:
        group = int(np.argmax(sizes > limit))
        raise ValueError(
            f"{_where(starts, sizes, group)} holds {int(sizes[group])} samples, more than "
            f"max_sequences ({limit})"
        )
    longest = None
    if padded and padded_lengths.size:
        longest = np.maximum.reduceat(padded_lengths, starts)
        footprints = sizes.astype(object) * longest.astype(object)
        over = np.flatnonzero(footprints > cap)
        if over.size:
            group = int(over[0])
            raise ValueError(
                f"{_where(starts, sizes, group)} needs {int(sizes[group])} x "
                f"{int(longest[group])} = {footprints[group]} tokens padded to its longest "
                f"sample, more than max_token_len ({cap})"
            )
    group_keys = None
    if numbers is not None and numbers.size:
        group_keys = numbers[starts]
        ends = starts + sizes
        mixed = np.flatnonzero(
            np.maximum.reduceat(numbers, starts) != np.minimum.reduceat(numbers, starts)
        )
        if mixed.size:
            group = int(mixed[0])
            raise ValueError(
                f"{_where(starts, sizes, group)} mixes keys; a group's samples must share one "
                f"key (samples {int(starts[group])} to {int(ends[group]) - 1})"
            )
    return Limits(limit, padded, longest, group_keys)


def keeps_limits(
    limits: Limits, tokens: np.ndarray, sizes: np.ndarray, parts: list[list[int]], cap: int
) -> bool:
    """Whether every part (group numbers) keeps the cap and the limits."""
    for part in parts:
        if not part:
            continue
        members = np.asarray(part, dtype=np.int64)
        samples = int(sizes[members].sum())
        if int(tokens[members].sum()) > cap:
            return False
        if limits.max_sequences is not None and samples > limits.max_sequences:
            return False
        if limits.longest is not None and samples * int(limits.longest[members].max()) > cap:
            return False
        if limits.keys is not None and np.unique(limits.keys[members]).size > 1:
            return False
    return True
