"""`StepTimer`: the clock inside a trainer's loop, feeding a `seqbalance.TimeCost` what the
step really measured.

Where ranks wait for each other decides what each rank's clock sees. Under FSDP, FSDP2 and
DeepSpeed ZeRO-3 the collectives inside every forward and backward wait for the slowest rank,
so every rank reads the same time for micro-batch ``k``: the slowest's. Timing each rank's own
micro-batches and calling `TimeCost.update` with its own lengths then teaches the cost a wrong
model (in the step model of 8 ranks, a per-token coefficient 40 % high and a per-pair one 16 %
low). `StepTimer` gathers every rank's lengths and times once per step and applies them the
same way on every rank: per lockstep slot (``sync="micro_batch"``, `TimeCost.update_synchronized`)
or per rank (``sync="step"``, for engines that wait once per step, whose last micro-batch holds
the wait).

Nothing here imports torch: when torch has been imported by the trainer, ``torch.distributed``
(if initialised) gathers the records and CUDA is synchronised before each reading of the clock.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .._inputs import _describe
from ._step_gathered import Gathered, apply_lockstep_items, apply_per_rank_items, reach_of
from ._time_online import add_in_order
from ._time_sync import Members, add_synchronized, check_member
from ._time_trust import beyond, warn
from .profiling import _reading, _synchronize
from .time_cost import TimeCost

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["StepTimer", "StepTimes"]

logger = logging.getLogger(__name__)

#: The ``sync`` modes: where the engine's ranks wait for each other.
SYNC_MODES = ("micro_batch", "step")

#: A record's ``failed`` when a block (or CUDA around it) raised; a clock's failure is its words.
RAISED = "raised"


class StepTimes(NamedTuple):
    """What `StepTimer.end_step` measured and applied."""

    #: The step's measured seconds: ``sum over slots of the slowest rank's time`` under
    #: ``sync="micro_batch"``, ``the slowest rank's sum of its times`` under ``"step"``.
    measured: float
    #: The same, from the cost's predictions before this step's measurements were added
    #: (an empty micro-batch takes 0).
    predicted: float
    #: How many observations the cost took in (slots with a document, or micro-batches that
    #: were not a rank's last).
    observations: int


#: What `StepTimer` says when ``sync`` is omitted.
SYNC_REQUIRED = (
    "StepTimer() needs sync=: 'micro_batch' when the engine's ranks wait for each other in every "
    "micro-batch (FSDP, FSDP2, ZeRO-3) or 'step' when they meet once a step (DDP with no_sync, "
    "ZeRO-1/2, Megatron's DDP)"
)


def _sync_required(init: _F) -> _F:
    """``StepTimer.__init__`` with a ``TypeError`` naming ``sync`` and its choices when it is
    omitted (Python's own message names neither the choices nor what they mean)."""

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        if "sync" not in kwargs:
            raise TypeError(SYNC_REQUIRED)
        init(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


class StepTimer:
    """Time each micro-batch inside the trainer's loop and refit a `TimeCost` once per step
    from every rank's measurements.

    Args:
        cost: the `TimeCost` to refit (in place; every rank should start from the same one,
            e.g. loaded from the same file).
        sync: required (a wrong default would learn a wrong cost silently): where the engine's
            ranks wait for each other. ``"micro_batch"`` (FSDP, FSDP2,
            ZeRO-3: collectives in every forward and backward): each slot's time is the longest
            any rank measured, attributed with `TimeCost.update_synchronized`. ``"step"``
            (DDP with ``no_sync``, ZeRO-1/2, Megatron's DDP: gradients reduced once, after the
            last micro-batch): each micro-batch is its rank's own observation, except each
            rank's last of the step, which holds the wait for the others.
        group: the ``torch.distributed`` process group to gather over (``None``: the default
            group, when torch.distributed is initialised; without it, this rank alone).
        timer: a zero-argument clock in seconds (default `time.perf_counter`).

    Raises:
        TypeError: ``cost`` is not a `TimeCost`, ``sync`` is omitted (naming its choices), or
            ``timer`` is not callable.
        ValueError: ``sync`` is not ``"micro_batch"`` or ``"step"``.

    Example:
        >>> import seqbalance
        >>> batches = [[100], [200], [300], [400], [100, 100], [500, 50]]
        >>> cost = seqbalance.TimeCost.fit(batches, [1e-3 + 1e-5 * sum(b) for b in batches])
        >>> timer = seqbalance.StepTimer(cost, sync="micro_batch")
        >>> for lengths in ([120, 80], [300]):
        ...     with timer.micro_batch(lengths):
        ...         pass  # forward and backward of these documents, packed
        >>> step = timer.end_step()
        >>> step.observations, cost.observations
        (2, 8)
    """

    @_sync_required
    def __init__(
        self,
        cost: TimeCost,
        *,
        sync: str,
        group: Any = None,
        timer: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(cost, TimeCost):
            raise TypeError(f"cost must be a TimeCost, got {_describe(cost)}")
        if not isinstance(sync, str) or sync not in SYNC_MODES:
            raise ValueError(f"sync must be 'micro_batch' or 'step', got {sync!r}")
        clock = time.perf_counter if timer is None else timer
        if not callable(clock):
            raise TypeError(f"timer must be a zero-argument callable, got {_describe(timer)}")
        self._cost = cost
        self._sync = sync
        self._group = group
        self._clock = clock
        self._lengths: list[np.ndarray] = []
        self._seconds: list[float] = []
        #: Why this step cannot be applied: ``None``, ``RAISED``, or the clock's failure.
        self._failed: str | None = None
        self._inside = False

    @property
    def cost(self) -> TimeCost:
        """The `TimeCost` this timer refits."""
        return self._cost

    @property
    def sync(self) -> str:
        """``"micro_batch"`` or ``"step"``."""
        return self._sync

    @contextmanager
    def micro_batch(self, lengths: Any) -> Iterator[None]:
        """Time the block: one micro-batch's forward and backward on this rank.

        ``lengths`` are the document lengths packed in it (an empty sequence: this rank ran
        none this slot). CUDA is synchronised before each reading of the clock when torch has
        initialised it. A block that raises marks the step, and so does a clock that fails
        around it (raises, reads no finite number, or does not advance): `end_step` then drops
        the step on every rank. The block's exception goes on to the caller; a clock's failure
        does not (it is logged once a step), so this rank goes on into the collectives its
        peers wait in, and leaves the step as they do.

        Raises:
            TypeError, ValueError: ``lengths`` that are not positive integers (named).
            RuntimeError: a block opened inside another.
        """
        checked = check_member(lengths, "lengths")
        if self._inside:
            raise RuntimeError("StepTimer.micro_batch: blocks do not nest (one micro-batch each)")
        self._inside = True
        clock_failed: str | None = None
        seconds = 0.0
        try:
            _synchronize()
            start, clock_failed = self._read()
            yield
            _synchronize()
            if clock_failed is None:
                end, clock_failed = self._read()
                seconds = end - start
        except BaseException:
            # The block or CUDA failed: this micro-batch has no time, so the step cannot be
            # applied whole. Marked, so that every rank drops it.
            self._failed = RAISED
            raise
        finally:
            self._inside = False
        if clock_failed is None and not seconds > 0:
            clock_failed = (
                f"the timer measured {seconds!r} s for a micro-batch of {checked.size} "
                "documents; it must advance over one (timer= reads seconds, like "
                "time.perf_counter)"
            )
        if clock_failed is not None:
            if self._failed is None:
                logger.warning(
                    "seqbalance.StepTimer: %s; this step will be dropped on every rank",
                    clock_failed,
                )
                self._failed = clock_failed
            return
        self._lengths.append(checked)
        self._seconds.append(seconds)

    def _read(self) -> tuple[float, str | None]:
        """One reading of the clock, or the words of its failure (an interrupt goes on)."""
        try:
            return _reading(self._clock), None
        except Exception as exc:  # noqa: BLE001 - a broken clock must not leave the step
            return 0.0, f"the timer failed: {type(exc).__name__}: {exc}"

    def end_step(self) -> StepTimes | None:
        """Close the step: gather every rank's micro-batches and times (one
        ``all_gather_object``), apply them to the cost in one order (slot, then rank), and
        return the step's measured and predicted seconds. Every rank calls it, once a step.

        Every rank that started from the same cost ends the step holding the same
        coefficients. A step in which any rank's block raised, or its clock failed, is dropped
        on every rank (nothing applied): it returns ``None``. The gathered lengths are checked
        and priced in bulk (NumPy over all of them at once, no Python per micro-batch).

        Raises:
            ValueError: under ``sync="micro_batch"``, ranks that ran different numbers of
                micro-batches (named, with their counts); or measurements the cost refuses
                (`TimeCost.update`). Nothing is applied, on any rank.
            RuntimeError: called inside a `micro_batch` block.
        """
        if self._inside:
            raise RuntimeError("StepTimer.end_step: called inside a micro_batch block")
        record = {
            "lengths": (
                np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
            ),
            "sizes": np.array([batch.size for batch in self._lengths], dtype=np.int64),
            "seconds": np.array(self._seconds, dtype=np.float64),
            "failed": self._failed,
        }
        self._lengths, self._seconds, self._failed = [], [], None
        records = self._gather(record)
        if any(item["failed"] for item in records):
            self._log_dropped(records)
            return None
        step = Gathered(records)
        if self._sync == "micro_batch":
            return self._apply_lockstep(step)
        return self._apply_per_rank(step)

    @staticmethod
    def _log_dropped(records: list[dict[str, Any]]) -> None:
        raised = [rank for rank, item in enumerate(records) if item["failed"] == RAISED]
        clocks = [
            (rank, item["failed"])
            for rank, item in enumerate(records)
            if item["failed"] and item["failed"] != RAISED
        ]
        if raised:
            logger.warning(
                "seqbalance.StepTimer: a micro-batch block raised on rank(s) %s; the step was "
                "dropped on every rank",
                ", ".join(map(str, raised)),
            )
        if clocks:
            logger.warning(
                "seqbalance.StepTimer: the clock failed on rank(s) %s (rank %d: %s); the step "
                "was dropped on every rank",
                ", ".join(str(rank) for rank, _ in clocks),
                *clocks[0],
            )

    def _gather(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's record, in rank order (this rank's alone without torch.distributed)."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return [record]
        gathered: list[Any] = [None] * dist.get_world_size(self._group)
        dist.all_gather_object(gathered, record, group=self._group)
        return gathered

    def _apply_lockstep(self, step: Gathered) -> StepTimes:
        counts = step.counts.tolist()
        if len(set(counts)) > 1:
            shown = ", ".join(f"rank {rank}: {count}" for rank, count in enumerate(counts))
            raise ValueError(
                "StepTimer(sync='micro_batch'): the ranks ran different numbers of "
                f"micro-batches this step ({shown}); a lockstep engine (FSDP, ZeRO-3) runs "
                "the same number on every rank. For an engine whose ranks wait once per step "
                "use sync='step'. Nothing was applied"
            )
        if not step.clean:
            return StepTimes(*apply_lockstep_items(self._cost, step.items()))
        ranks = len(counts)
        predicted = self._predictions(step).reshape(ranks, -1)
        times = step.seconds.reshape(ranks, -1)
        slot_times = times.max(axis=0)
        # Units in slot order, members in rank order; a slot every rank sat out says nothing.
        full = (step.sizes > 0).reshape(ranks, -1)
        order = np.flatnonzero(full.T)  # slot * ranks + rank, of each non-empty member
        member_rank, slot = order % ranks, order // ranks
        members = step.segments(member_rank * full.shape[1] + slot)
        per_slot = full.sum(axis=0)
        used = per_slot > 0
        if used.any():
            state = self._cost._state
            rows = state.features.rows_of_flat(*members)
            unit_times = slot_times[used]
            state = add_synchronized(
                state,
                Members.of_rows(rows, member_rank, per_slot[used]),
                unit_times,
                "units[{}]",
                "seconds[{}]",
            )
            self._cost._set(state.reaching(reach_of(*members)))
        return StepTimes(
            float(slot_times.sum()), float(predicted.max(axis=0).sum()), int(used.sum())
        )

    def _apply_per_rank(self, step: Gathered) -> StepTimes:
        if not step.clean:
            return StepTimes(*apply_per_rank_items(self._cost, step.items()))
        predicted = self._predictions(step)
        # A rank's last micro-batch holds its wait for the others: no observation. The others
        # in slot order, then rank order.
        observed = np.flatnonzero(~step.last & (step.sizes > 0))
        observed = observed[np.lexsort((step.rank[observed], step.slot[observed]))]
        if observed.size:
            state = self._cost._state
            batches = step.segments(observed)
            rows = state.features.rows_of_flat(*batches)
            state = add_in_order(
                state, rows, step.seconds[observed], "micro_batches", "seconds[{}]"
            )
            self._cost._set(state.reaching(reach_of(*batches)))
        return StepTimes(
            step.largest_rank_sum(step.seconds),
            step.largest_rank_sum(predicted),
            int(observed.size),
        )

    def _predictions(self, step: Gathered) -> np.ndarray:
        """The cost's seconds for every rank's every micro-batch (0 for an empty one), in rank
        order then slot order, as `TimeCost.predict` gives them."""
        full = step.sizes > 0
        predicted = np.zeros(full.size, dtype=np.float64)
        if full.any():
            state = self._cost._state
            batches = step.segments(np.flatnonzero(full))
            reach = reach_of(*batches)
            assert reach is not None
            warn(beyond(state.reach, reach.document, reach.micro_batch))
            predicted[full] = state.features.rows_of_flat(*batches) @ state.coefficients()
        return predicted
