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

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from .._inputs import _describe
from ._time_sync import check_member
from .profiling import _reading, _synchronize
from .time_cost import TimeCost

__all__ = ["StepTimer", "StepTimes"]

logger = logging.getLogger(__name__)

#: The ``sync`` modes: where the engine's ranks wait for each other.
SYNC_MODES = ("micro_batch", "step")


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


class StepTimer:
    """Time each micro-batch inside the trainer's loop and refit a `TimeCost` once per step
    from every rank's measurements.

    Args:
        cost: the `TimeCost` to refit (in place; every rank should start from the same one,
            e.g. loaded from the same file).
        sync: where the engine's ranks wait for each other. ``"micro_batch"`` (FSDP, FSDP2,
            ZeRO-3: collectives in every forward and backward): each slot's time is the longest
            any rank measured, attributed with `TimeCost.update_synchronized`. ``"step"``
            (DDP with ``no_sync``, ZeRO-1/2, Megatron's DDP: gradients reduced once, after the
            last micro-batch): each micro-batch is its rank's own observation, except each
            rank's last of the step, which holds the wait for the others.
        group: the ``torch.distributed`` process group to gather over (``None``: the default
            group, when torch.distributed is initialised; without it, this rank alone).
        timer: a zero-argument clock in seconds (default `time.perf_counter`).

    Raises:
        TypeError: ``cost`` is not a `TimeCost`, or ``timer`` is not callable.
        ValueError: ``sync`` is not ``"micro_batch"`` or ``"step"``.

    Example:
        >>> import seqbalance
        >>> batches = [[100], [200], [300], [400], [100, 100], [500, 50]]
        >>> cost = seqbalance.TimeCost.fit(batches, [1e-3 + 1e-5 * sum(b) for b in batches])
        >>> timer = seqbalance.StepTimer(cost)
        >>> for lengths in ([120, 80], [300]):
        ...     with timer.micro_batch(lengths):
        ...         pass  # forward and backward of these documents, packed
        >>> step = timer.end_step()
        >>> step.observations, cost.observations
        (2, 8)
    """

    def __init__(
        self,
        cost: TimeCost,
        *,
        sync: str = "micro_batch",
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
        self._lengths: list[list[int]] = []
        self._seconds: list[float] = []
        self._failed = False
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
        initialised it. A block that raises, or a clock that fails around it, marks the step:
        `end_step` then drops it on every rank.

        Raises:
            TypeError, ValueError: ``lengths`` that are not positive integers (named).
            RuntimeError: a block opened inside another.
            ValueError: the clock did not advance over the block.
        """
        checked = check_member(lengths, "lengths").tolist()
        if self._inside:
            raise RuntimeError("StepTimer.micro_batch: blocks do not nest (one micro-batch each)")
        self._inside = True
        try:
            _synchronize()
            start = _reading(self._clock)
            yield
            _synchronize()
            seconds = _reading(self._clock) - start
        except BaseException:
            # The block, the clock or CUDA failed: this micro-batch has no time, so the step
            # cannot be applied whole. Marked, so that every rank drops it.
            self._failed = True
            raise
        finally:
            self._inside = False
        if not seconds > 0:
            self._failed = True
            raise ValueError(
                f"the timer measured {seconds!r} s for a micro-batch of {len(checked)} "
                "documents; it must advance over one (timer= reads seconds, like "
                "time.perf_counter). The step will be dropped"
            )
        self._lengths.append(checked)
        self._seconds.append(seconds)

    def end_step(self) -> StepTimes | None:
        """Close the step: gather every rank's micro-batches and times (one
        ``all_gather_object``), apply them to the cost in one order (slot, then rank), and
        return the step's measured and predicted seconds. Every rank calls it, once a step.

        Every rank that started from the same cost ends the step holding the same
        coefficients. A step in which any rank's block raised is dropped on every rank (nothing
        applied): it returns ``None``.

        Raises:
            ValueError: under ``sync="micro_batch"``, ranks that ran different numbers of
                micro-batches (named, with their counts); or measurements the cost refuses
                (`TimeCost.update`). Nothing is applied, on any rank.
            RuntimeError: called inside a `micro_batch` block.
        """
        if self._inside:
            raise RuntimeError("StepTimer.end_step: called inside a micro_batch block")
        record = {"lengths": self._lengths, "seconds": self._seconds, "failed": self._failed}
        self._lengths, self._seconds, self._failed = [], [], False
        records = self._gather(record)
        if any(item["failed"] for item in records):
            failed = [rank for rank, item in enumerate(records) if item["failed"]]
            logger.warning(
                "seqbalance.StepTimer: a micro-batch block raised on rank(s) %s; the step was "
                "dropped on every rank",
                ", ".join(map(str, failed)),
            )
            return None
        if self._sync == "micro_batch":
            return self._apply_lockstep(records)
        return self._apply_per_rank(records)

    def _gather(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's record, in rank order (this rank's alone without torch.distributed)."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return [record]
        gathered: list[Any] = [None] * dist.get_world_size(self._group)
        dist.all_gather_object(gathered, record, group=self._group)
        return gathered

    def _predictions(self, records: list[dict[str, Any]]) -> list[list[float]]:
        """The cost's seconds for every rank's every micro-batch (0 for an empty one)."""
        batches = [lengths for item in records for lengths in item["lengths"] if lengths]
        seconds = iter(self._cost.predict(batches).tolist())
        return [
            [next(seconds) if lengths else 0.0 for lengths in item["lengths"]] for item in records
        ]

    def _apply_lockstep(self, records: list[dict[str, Any]]) -> StepTimes:
        counts = [len(item["seconds"]) for item in records]
        if len(set(counts)) > 1:
            shown = ", ".join(f"rank {rank}: {count}" for rank, count in enumerate(counts))
            raise ValueError(
                "StepTimer(sync='micro_batch'): the ranks ran different numbers of "
                f"micro-batches this step ({shown}); a lockstep engine (FSDP, ZeRO-3) runs "
                "the same number on every rank. For an engine whose ranks wait once per step "
                "use sync='step'. Nothing was applied"
            )
        predicted = np.array(self._predictions(records)).reshape(len(records), -1)
        times = np.array([item["seconds"] for item in records]).reshape(len(records), -1)
        slot_times = times.max(axis=0)
        units, seconds = [], []
        for slot, time_taken in enumerate(slot_times.tolist()):
            unit = [item["lengths"][slot] for item in records]
            if any(unit):  # a slot every rank sat out says nothing about documents
                units.append(unit)
                seconds.append(time_taken)
        self._cost.update_synchronized_many(units, seconds)
        return StepTimes(float(slot_times.sum()), float(predicted.max(axis=0).sum()), len(units))

    def _apply_per_rank(self, records: list[dict[str, Any]]) -> StepTimes:
        predicted = self._predictions(records)
        batches, seconds = [], []
        for slot in range(max((len(item["seconds"]) for item in records), default=0)):
            for item in records:
                # A rank's last micro-batch holds its wait for the others: no observation.
                if slot < len(item["seconds"]) - 1 and item["lengths"][slot]:
                    batches.append(item["lengths"][slot])
                    seconds.append(item["seconds"][slot])
        self._cost.update_many(batches, seconds)
        return StepTimes(
            max((sum(item["seconds"]) for item in records), default=0.0),
            max((sum(rank) for rank in predicted), default=0.0),
            len(batches),
        )
