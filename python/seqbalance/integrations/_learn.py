"""``install(..., learn=path)``: the trainer learns its own `seqbalance.TimeCost` from the
micro-batches it runs, and the driver plans from what it learnt.

Three parts, none importing torch (a trainer that runs has imported it):

- `Learner`: one process's clock and fit. `Learner.block` times one training micro-batch
  (CUDA synchronised before each reading where torch has initialised it);
  `Learner.end_mini_batch` gathers every data-parallel rank's micro-batches and times (one
  ``all_gather_object`` on the group) and applies them as `seqbalance.StepTimer` applies a step
  under ``sync="micro_batch"``: one synchronised observation per slot, the slot's time the
  longest any rank measured, in slot order. From nothing, `TimeCost.fit_synchronized` once the
  slots seen determine the cost (the fit's own rule: it answers instead of refusing), updates
  after; a starting cost is updated instead. Every rank applies the same records in the same
  order from the same start (global rank 0's, sent with the first gather), so every rank holds
  the same coefficients. The first global rank writes the cost to the path every
  ``learn_every`` mini-batches, atomically (a temporary file beside it, then ``os.replace``).
- `LearntSource` (in `seqbalance.integrations._learn_source`, with the settings): the cost the
  balancing reads: the file once a learner has written it, the starting cost until then, or
  none (the trainer's own balancing).
- The trainers' patches: `seqbalance.integrations._learn_patches` (verl) and
  `seqbalance.integrations._learn_openrlhf`.

Nothing here stops a run: a clock that fails, a measurement the cost refuses, ranks that ran
different counts or a write that fails are logged and the step (or the save) is dropped, on
every rank alike (the write: retried at the next interval).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..costs import TimeCost, TimeCostWarning
from ..costs._time_trust import poor_fit
from ..costs.profiling import _reading, _synchronize
from ._learn_source import ENVIRONMENT, LearnSettings, LearntSource, resolve_learning

__all__ = [
    "ENVIRONMENT",
    "LearnSettings",
    "Learner",
    "LearntSource",
    "resolve_learning",
]

#: The fewest synchronised slots a fit from nothing is tried on (the fit's own minimum:
#: four coefficients + 2).
FIRST_FIT = 6
#: Slots a cost learnt from nothing is refitted on, whole, before it is updated online. A
#: synchronised slot is attributed to the member the cost predicts slowest, so a first fit on a
#: handful of slots that misjudges the members misattributes every later slot and never
#: recovers (the stand-in's SFT batches at 4 ranks: a fit on the first 9 slots left the
#: per-document coefficient 98x the truth after 60 mini-batches); refitted from all slots each
#: mini-batch until 32 are in, the attribution converges to the truth's.
WARM_UP = 32
#: Slots kept while they do not yet determine a fit (the most recent; bounded memory).
KEEP_PENDING = 4096

logger = logging.getLogger("seqbalance.integrations")

Gather = Callable[[dict[str, Any], Any], list[dict[str, Any]]]
OwnPlan = Callable[[list[np.ndarray]], "list[list[list[int]]] | None"]


def torch_gather(record: dict[str, Any], group: Any) -> list[dict[str, Any]]:
    """Every rank's record in rank order: ``all_gather_object`` on ``group`` where
    torch.distributed is initialised, else this process's alone."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return [record]
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, record, group=group)
    return gathered


def first_global_rank() -> bool:
    """Whether this process writes: global rank 0, or a process without torch.distributed."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return True
    return int(dist.get_rank()) == 0


class Learner:
    """One process's measurements and learnt cost (see the module docstring).

    Args:
        settings: the path, the interval and the starting cost or model.
        trainer: named in log lines (``"verl"``, ``"OpenRLHF"``).
        clock: seconds, like `time.perf_counter` (the default).
        gather: ``gather(record, group)`` -> every rank's record in rank order (default: torch).
        writer: ``writer()`` -> whether this process saves (default: global rank 0).
    """

    def __init__(
        self,
        settings: LearnSettings,
        trainer: str,
        *,
        clock: Callable[[], float] | None = None,
        gather: Gather | None = None,
        writer: Callable[[], bool] | None = None,
    ) -> None:
        self.path = settings.path
        self.every = settings.every
        self.trainer = trainer
        self.model = settings.model
        self._start = settings.start
        self.cost: TimeCost | None = None
        self.clock = time.perf_counter if clock is None else clock
        self.gather = torch_gather if gather is None else gather
        self.writer = first_global_rank if writer is None else writer
        self.mini_batches = 0
        self._agreed = False
        self._warming = True
        self._next_try = FIRST_FIT
        self._units: list[list[list[int]]] = []
        self._unit_seconds: list[float] = []
        self._lengths: list[list[int]] = []
        self._seconds: list[float] = []
        self._failed = False
        self._inside = False
        self._poor = False
        self._said: set[str] = set()

    # -- the clock ------------------------------------------------------------------------------

    def _once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            logger.warning(message, *args)

    def _read(self) -> float | None:
        """The clock after a CUDA synchronise, or None (the step marked) where either fails."""
        try:
            _synchronize()
            return _reading(self.clock)
        except Exception as exc:  # the run goes on; this step is not learnt from
            self._failed = True
            self._once(
                "clock",
                "seqbalance: learn=: reading the clock failed (%s); steps it fails in "
                "are dropped (said once)",
                exc,
            )
            return None

    @contextmanager
    def block(self, lengths: Sequence[int] | None) -> Iterator[None]:
        """Time one training micro-batch of documents of ``lengths`` on this rank (``None``:
        not readable, so the step is dropped). A block that raises marks the step (every rank
        drops it) and its exception goes on; a clock that fails marks it and is logged."""
        if self._inside:  # a nested pass (a trainer calling itself): the outer one times it
            yield
            return
        self._inside = True
        start = self._read()
        try:
            yield
        except BaseException:
            self._failed = True
            raise
        finally:
            self._inside = False
        end = None if start is None else self._read()
        if start is None or end is None:
            return
        if lengths is None or not len(lengths):
            self._failed = True
            self._once(
                "lengths",
                "seqbalance: learn=: a micro-batch's document lengths could not be "
                "read; steps holding one are dropped (said once)",
            )
            return
        if not end > start:
            self._failed = True
            self._once(
                "advance", "seqbalance: learn=: the clock did not advance over a micro-batch"
            )
            return
        self._lengths.append([int(value) for value in lengths])
        self._seconds.append(end - start)

    @property
    def open_micro_batches(self) -> int:
        """Micro-batches timed (or marked) since the last `end_mini_batch`."""
        return len(self._seconds) + int(self._failed)

    # -- the step -------------------------------------------------------------------------------

    def end_mini_batch(self, group: Any = None, own_plan: OwnPlan | None = None) -> None:
        """Close the mini-batch on every rank of ``group`` (each calls it once per mini-batch):
        one gather, the slots applied in order, and every ``every``-th mini-batch the save."""
        record: dict[str, Any] = {
            "lengths": self._lengths,
            "seconds": self._seconds,
            "failed": self._failed,
        }
        if not self._agreed:
            record["start"] = None if self._start is None else self._start.to_dict()
        self._lengths, self._seconds, self._failed = [], [], False
        records = self.gather(record, group)
        if not self._agreed:
            self._agreed = True
            start = records[0].get("start")
            self.cost = None if start is None else TimeCost._load(start)
            self._warming = self.cost is None
        self.mini_batches += 1
        units, seconds = self._slots(records)
        predicted = None
        if units:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TimeCostWarning)
                predicted = self._apply(units, seconds, records, own_plan)
        if self.mini_batches % self.every == 0 and self.writer():
            self._save(predicted)

    def _slots(self, records: list[dict[str, Any]]) -> tuple[list[Any], list[float]]:
        failed = [rank for rank, item in enumerate(records) if item["failed"]]
        if failed:
            logger.warning(
                "seqbalance: learn=: a micro-batch block raised, or its clock or lengths failed, "
                "on rank(s) %s; mini-batch %d was dropped on every rank",
                ", ".join(map(str, failed)),
                self.mini_batches,
            )
            return [], []
        counts = [len(item["seconds"]) for item in records]
        if len(set(counts)) > 1:
            self._once(
                "counts",
                "seqbalance: learn=: the ranks ran different numbers of micro-batches "
                "(%s); a lockstep engine runs the same number on every rank, so such mini-batches "
                "are dropped (said once)",
                ", ".join(map(str, counts)),
            )
            return [], []
        units, seconds = [], []
        for slot in range(counts[0] if counts else 0):
            units.append([item["lengths"][slot] for item in records])
            seconds.append(max(float(item["seconds"][slot]) for item in records))
        return units, seconds

    def _apply(
        self,
        units: list[Any],
        seconds: list[float],
        records: list[dict[str, Any]],
        own_plan: OwnPlan | None,
    ) -> tuple[float, float | None] | None:
        """Add the slots (the same on every rank); the mini-batch's predicted step as it ran and
        as the trainer's own plan would run it, by the cost before the slots were added."""
        try:
            if self._warming:
                self._units.extend(units)
                self._unit_seconds.extend(seconds)
                if len(self._units) < self._next_try:
                    return None
                try:
                    self.cost = TimeCost.fit_synchronized(
                        self._units, self._unit_seconds, model=self.model
                    )
                except ValueError:  # not determined yet: more slots next time
                    # Every mini-batch while warming up; past that, when the slots kept have
                    # doubled (a run of alike micro-batches never determines it: the fit's
                    # cost stays a bounded share of the run's).
                    kept = len(self._units)
                    self._next_try = kept + 1 if kept < WARM_UP else min(2 * kept, KEEP_PENDING)
                    if kept >= KEEP_PENDING:
                        self._next_try = KEEP_PENDING  # the oldest quarter goes
                        del self._units[: KEEP_PENDING // 4]
                        del self._unit_seconds[: KEEP_PENDING // 4]
                    return None
                if len(self._units) >= WARM_UP:
                    self._warming = False
                    logger.info(
                        "seqbalance: learn=: %s's cost fitted from %d synchronised slots; "
                        "updated from every mini-batch from now on",
                        self.trainer,
                        len(self._units),
                    )
                    self._units, self._unit_seconds = [], []
                return None
            cost = self.cost
            assert cost is not None  # warmed up: fitted
            saving = self.mini_batches % self.every == 0 and self.writer()
            step = _predicted(cost, records, own_plan) if saving else None
            cost.update_synchronized_many(units, seconds)
            return step
        except (TypeError, ValueError) as exc:
            logger.warning(
                "seqbalance: learn=: mini-batch %d was dropped on every rank: %s",
                self.mini_batches,
                exc,
            )
            return None

    # -- the save -------------------------------------------------------------------------------

    def _save(self, predicted: tuple[float, float | None] | None) -> None:
        cost = self.cost
        if cost is None:
            logger.info(
                "seqbalance: learn=: %d synchronised slots seen, not yet enough to determine "
                "the cost; %s balances as without learn=",
                len(self._units),
                self.trainer,
            )
            return
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as file:
                json.dump(cost.to_dict(), file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except OSError as exc:
            logger.warning(
                "seqbalance: learn=: saving the learnt cost to %s failed (%s); retried in %d "
                "mini-batches, the run goes on",
                self.path,
                exc,
                self.every,
            )
            try:
                os.remove(temporary)
            except OSError:
                pass
            return
        error = cost.fit_error
        recent = error.get("recent")
        logger.info(
            "seqbalance: learn=: saved %s's cost to %s after %d mini-batches: %d slots learnt "
            "from, recent median error %s; %s",
            self.trainer,
            self.path,
            self.mini_batches,
            cost.observations,
            "none yet" if recent is None else f"{recent:.1%}",
            _shown_step(predicted),
        )
        poor = poor_fit(error)
        if poor is not None and not self._poor:
            logger.warning("seqbalance: learn=: the learnt cost is %s", poor)
        self._poor = poor is not None


def _step_of(cost: TimeCost, micro_batches: list[list[list[int]]]) -> float:
    """Lockstep seconds: the sum over slots of the slowest rank's prediction (0 when empty)."""
    slots = max((len(rank) for rank in micro_batches), default=0)
    total = 0.0
    for slot in range(slots):
        members = [rank[slot] for rank in micro_batches if slot < len(rank) and rank[slot]]
        if members:
            total += float(cost.predict(members).max())
    return total


def _predicted(
    cost: TimeCost, records: list[dict[str, Any]], own_plan: OwnPlan | None
) -> tuple[float, float | None]:
    ran = [item["lengths"] for item in records]
    mine = None
    if own_plan is not None:
        rank_lengths = [
            np.array([value for batch in rank for value in batch], dtype=np.int64) for rank in ran
        ]
        try:
            plan = own_plan(rank_lengths)
        except Exception:  # the line says it does not know
            plan = None
        if plan is not None:
            formed = [
                [[int(lengths[i]) for i in part] for part in rank]
                for lengths, rank in zip(rank_lengths, plan, strict=True)
            ]
            mine = _step_of(cost, formed)
    return _step_of(cost, ran), mine


def _shown_step(predicted: tuple[float, float | None] | None) -> str:
    if predicted is None:
        return "no predicted step yet"
    seconds, own = predicted
    text = f"the last mini-batch's predicted step {seconds:.6g} s"
    if own is None:
        return text + " (the trainer's own plan of it: not modelled here)"
    change = seconds / own - 1 if own > 0 else 0.0
    return text + f", the trainer's own plan of it {own:.6g} s ({change:+.1%})"
