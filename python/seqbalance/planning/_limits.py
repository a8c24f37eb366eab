"""Shape limits of a micro-batch beyond the token cap, as the micro-batch planners take them.

``max_sequences`` (samples per micro-batch), ``footprint`` (``"sum"`` or ``"padded"``: a
micro-batch charged ``samples * longest``) and ``keys`` (samples of different keys never share
one), read per group of samples kept together. The native planner keeps them; this module
validates them and names the group that cannot meet them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._inputs import check_choice, check_max_sequences
from .packing import FOOTPRINTS, _key_numbers

__all__ = ["Limits", "group_limits", "keeps_limits"]


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
