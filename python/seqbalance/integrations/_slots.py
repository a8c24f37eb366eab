"""The driver's side of the planned step: each mini-batch planned for dispatch's equal
contiguous chunks, and the slot field that carries each sample's micro-batch to the workers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..costs import TimeCost
from ._step import Plan, StepMode, UnmetConstraint, plan_free

__all__ = [
    "SLOT_FIELD",
    "DriverPlan",
    "decode_slots",
    "describe_step",
    "encode_slots",
    "plan_driver",
]


#: The field that carries each sample's planned micro-batch from the driver to the workers.
SLOT_FIELD = "seqbalance_slot"

# A slot code packs four numbers into one int64: the mini-batch (15 bits), the micro-batch
# count (16), the sample's position in its rank's part of the mini-batch (16) and its slot (16).
_BITS = 16
_MASK = (1 << _BITS) - 1
LIMIT = 1 << _BITS


def encode_slots(mini_batch: int, count: int, slots: Sequence[int]) -> np.ndarray:
    """The slot codes of one rank's part of one mini-batch, its samples in run order."""
    if not (0 <= mini_batch < (1 << 15) and 0 < count < LIMIT and len(slots) < LIMIT):
        raise UnmetConstraint(
            f"mini-batch {mini_batch}, {count} micro-batches, {len(slots)} samples a rank: past "
            "what the slot field carries"
        )
    positions = np.arange(len(slots), dtype=np.int64)
    return (
        (np.int64(mini_batch) << (3 * _BITS))
        | (np.int64(count) << (2 * _BITS))
        | (positions << _BITS)
        | np.asarray(slots, dtype=np.int64)
    )


def decode_slots(
    codes: np.ndarray,
    lengths: np.ndarray,
    max_token_len: int,
    *,
    min_count: int | None = None,
    multiple: int | None = None,
    group_size: int = 1,
) -> list[list[int]] | None:
    """The micro-batches (indexes into this rank's rows, in slot order) the driver planned for
    these rows, or None where the rows are not one planned mini-batch as the driver laid it
    out (another cut, a shuffle, the whole chunk at once) or the plan breaks this call's
    constraints (its cap, its counts, its groups)."""
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    n = codes.size
    if n == 0 or n != lengths.size or (codes < 0).any():
        return None
    mini_batches = codes >> (3 * _BITS)
    counts = (codes >> (2 * _BITS)) & _MASK
    positions = (codes >> _BITS) & _MASK
    slots = codes & _MASK
    count = int(counts[0])
    if (
        (mini_batches != mini_batches[0]).any()
        or (counts != count).any()
        or not np.array_equal(positions, np.arange(n))
        or count < 1
        or (slots >= count).any()
        or (min_count is not None and count < min_count)
        or (multiple is not None and count % multiple)
    ):
        return None
    parts = [np.flatnonzero(slots == k) for k in range(count)]
    if any(part.size == 0 or int(lengths[part].sum()) > max_token_len for part in parts):
        return None
    if group_size > 1:
        if n % group_size:
            return None
        grouped = slots.reshape(-1, group_size)
        if (grouped != grouped[:, :1]).any():
            return None
    return [part.tolist() for part in parts]


@dataclass(frozen=True)
class DriverPlan:
    """A driver's layout of one batch for dispatch's equal contiguous chunks (rank ``r`` gets
    rows ``[r * chunk, (r + 1) * chunk)`` of the new order; its mini-batch ``i`` is rows
    ``[i * m, (i + 1) * m)`` of its chunk).

    Attributes:
        order: the new order, as indexes into the batch given.
        codes: each row's slot code (`encode_slots`), in the new order.
        partitions: each rank's rows of the new order (for the trainer's balance metrics).
        seconds: the update's predicted step, summed over its mini-batches.
        trainer_seconds: the same for the trainer's own plan (None where it had none).
        mini_batches: how many mini-batches were planned.
        kept_trainer: how many of them kept the trainer's plan.
        count: micro-batches per rank, the most of any mini-batch.
    """

    order: np.ndarray
    codes: np.ndarray
    partitions: list[list[int]]
    seconds: float
    trainer_seconds: float | None
    mini_batches: int
    kept_trainer: int
    count: int


def plan_driver(
    lengths: np.ndarray,
    dp_size: int,
    max_token_len: int,
    *,
    mini_batch_rows: int | None,
    cost: Any,
    mode: StepMode,
    trainer: Callable[[list[np.ndarray]], Plan | None],
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
) -> DriverPlan:
    """Plan every mini-batch of a batch laid out as the trainer's own balancing left it.

    The mini-batches keep the trainer's membership (mini-batch ``i`` is the ``i``-th window of
    ``mini_batch_rows`` rows of every rank's chunk; the whole chunk when the windows do not
    divide it): `plan_free` moves samples between ranks and micro-batches within a
    mini-batch only, so the update trains on the same samples in the same mini-batches.
    ``trainer(rank_lengths)`` is the trainer's own micro-batching of one window (each rank's
    lengths), None where it would raise.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = lengths.size
    if n % dp_size:
        raise UnmetConstraint(f"{n} samples do not split into dp_size = {dp_size} equal chunks")
    chunk = n // dp_size
    rows = mini_batch_rows if mini_batch_rows and chunk % mini_batch_rows == 0 else chunk
    order = np.empty(n, dtype=np.int64)
    codes = np.empty(n, dtype=np.int64)
    seconds, trainer_total, kept, most = 0.0, 0.0, 0, 0
    trainer_complete = True
    for window in range(chunk // rows):
        members = np.concatenate(
            [np.arange(rows, dtype=np.int64) + r * chunk + window * rows for r in range(dp_size)]
        )
        window_lengths = lengths[members]
        own = trainer([window_lengths[r * rows : (r + 1) * rows] for r in range(dp_size)])
        own_global = (
            None
            if own is None
            else [[[i + r * rows for i in part] for part in rank] for r, rank in enumerate(own)]
        )
        planned = plan_free(
            window_lengths,
            dp_size,
            max_token_len,
            cost=cost,
            mode=mode,
            trainer=own_global,
            min_num_micro_batches=min_num_micro_batches,
            num_micro_batches_multiple=num_micro_batches_multiple,
            force_group_size=force_group_size,
        )
        seconds += planned.seconds
        if planned.trainer_seconds is None:
            trainer_complete = False
        else:
            trainer_total += planned.trainer_seconds
        kept += planned.kept == "trainer"
        most = max(most, planned.count)
        for r, rank in enumerate(planned.plan):
            start = r * chunk + window * rows
            run = [i for part in rank for i in part]
            order[start : start + rows] = members[run]
            codes[start : start + rows] = encode_slots(
                window, planned.count, [k for k, part in enumerate(rank) for _ in part]
            )
    partitions = [list(range(r * chunk, (r + 1) * chunk)) for r in range(dp_size)]
    return DriverPlan(
        order,
        codes,
        partitions,
        seconds,
        trainer_total if trainer_complete else None,
        chunk // rows,
        kept,
        most,
    )


def describe_step(seconds: float, trainer_seconds: float | None, cost: Any) -> str:
    """``predicted step 1.23 s, the trainer's own plan 1.30 s (-5.4 %)`` (cost units but for a
    `TimeCost`)."""
    unit = " s" if isinstance(cost, TimeCost) else " (cost units)"
    text = f"predicted step {seconds:.6g}{unit}"
    if trainer_seconds is None:
        return text + ", the trainer's own plan: none (it would not keep its constraints)"
    change = (seconds / trainer_seconds - 1) if trainer_seconds > 0 else 0.0
    return text + f", the trainer's own plan {trainer_seconds:.6g}{unit} ({change:+.1%})"
