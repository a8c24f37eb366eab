"""The settings and the cost source of ``install(..., learn=path)``.

`learn_settings` checks ``learn`` and ``learn_every`` (``learn=None``: the environment variable
`ENVIRONMENT`, for Ray's argument-less setup hook) before anything is patched; `LearntSource` is
the cost every balancing call reads while a trainer learns: the saved file once a learner has
written it (read again when it changes, as ``install(cost=path)`` reads a path), the starting
cost until then, or none (the trainer's own balancing). A file already at the path when
`install` runs is a previous run's: it is used only once replaced, unless it is also the
starting cost.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from .._inputs import _describe
from ..costs import ModelCost, TimeCost
from ._costs import CostSource, _signature, resolve

__all__ = ["ENVIRONMENT", "LearnSettings", "LearntSource", "learn_settings", "resolve_learning"]

logger = logging.getLogger("seqbalance.integrations")

#: The environment variable naming ``learn``'s path for Ray's argument-less setup hook.
ENVIRONMENT = "SEQBALANCE_LEARN"


class LearnSettings:
    """What ``install(learn=..., learn_every=..., cost=...)`` asked for, checked."""

    def __init__(self, path: str, every: int, start: TimeCost | None, model: ModelCost | None):
        self.path = path
        self.every = every
        self.start = start
        self.model = model


def learn_settings(learn: Any, learn_every: Any, cost: CostSource | None) -> LearnSettings | None:
    """``install``'s ``learn`` (``None``: `ENVIRONMENT`, unset or empty meaning off) and
    ``learn_every`` checked, with the starting cost taken from ``cost`` (a `TimeCost`: updated;
    a `ModelCost`: the model a fit from nothing fits seconds per FLOP of). Raises before
    anything is patched."""
    if type(learn_every) is not int:
        raise TypeError(f"learn_every must be an int >= 1, got {_describe(learn_every)}")
    if learn_every < 1:
        raise ValueError(f"learn_every = {learn_every}: it must be >= 1 (mini-batches a save)")
    name = "learn"
    if learn is None:
        learn = os.environ.get(ENVIRONMENT, "")
        if not learn:
            return None
        name = ENVIRONMENT
    elif isinstance(learn, (str, os.PathLike)):
        learn = os.fspath(learn)
        if not isinstance(learn, str):
            raise TypeError(f"learn must be a path (str or os.PathLike), got {_describe(learn)}")
        if not learn:
            raise ValueError("learn = '': it must name the file the learnt cost is saved to")
    else:
        raise TypeError(
            f"learn must be a path (str or os.PathLike) or None, got {_describe(learn)}"
        )
    path = os.path.abspath(learn)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ValueError(
            f"{name} = {learn!r}: its folder {folder!r} does not exist (the learnt cost is saved "
            "there)"
        )
    if os.path.isdir(path):
        raise ValueError(f"{name} = {learn!r} is a folder: it must name a file")
    start = model = None
    if cost is not None:
        current = cost.current()
        if isinstance(current, TimeCost):
            start = TimeCost._load(current.to_dict())  # a copy: the learner updates it
        else:
            model = current
    return LearnSettings(path, learn_every, start, model)


class LearntSource:
    """The cost every balancing call reads under ``learn=``: the saved file once written, else
    the starting cost, else ``None`` (the trainer's own balancing). The interface of
    `CostSource` (``current``, ``weights``, ``nanoseconds``, ``path``)."""

    def __init__(self, path: str, start: CostSource | None) -> None:
        self.path = path
        self._start = start
        self._file: CostSource | None = None
        # A previous run's file is not this run's cost, unless it is the starting cost too.
        same = start is not None and start.path is not None and _same_file(start.path, path)
        self._stale = None if same else _signature(path)
        self._warned: tuple[int, int, int] | None = None
        if self._stale is not None:
            logger.info(
                "seqbalance: %s holds a cost from before this run: it is replaced at the first "
                "save and not used until then (to start from it, pass cost=%r as well)",
                path,
                path,
            )

    def current(self) -> TimeCost | ModelCost | None:
        """The cost to balance by now (``None``: the trainer's own)."""
        if self._file is None:
            seen = _signature(self.path)
            if seen is not None and seen != self._stale:
                try:
                    self._file = CostSource(path=self.path)
                except (OSError, ValueError) as exc:
                    if self._warned != seen:
                        self._warned = seen
                        logger.warning("seqbalance: the learnt cost is not in use yet: %s", exc)
        if self._file is not None:
            return self._file.current()
        return None if self._start is None else self._start.current()

    def weights(self, lengths: Any) -> np.ndarray:
        """Each sample's weight: the cost's, or its length while there is none."""
        source = self._in_use()
        return np.asarray(lengths, dtype=np.int64) if source is None else source.weights(lengths)

    def nanoseconds(self, lengths: Any) -> np.ndarray:
        """As `CostSource.nanoseconds`; verl's workload ``24576 L + L**2`` while there is none."""
        source = self._in_use()
        if source is None:
            values = np.asarray(lengths, dtype=np.int64)
            return 24576 * values + values * values
        return source.nanoseconds(lengths)

    def _in_use(self) -> CostSource | None:
        if self.current() is None:
            return None
        return self._file if self._file is not None else self._start


def _same_file(first: str, second: str) -> bool:
    return os.path.abspath(first) == os.path.abspath(second)


def resolve_learning(
    learn: Any, learn_every: Any, cost: Any
) -> tuple[CostSource | None, LearnSettings | None, Any]:
    """``install``'s cost, learn and learn_every resolved: the starting cost's source, the
    learn settings (None: off), and the source the balancing reads (a `LearntSource` when
    learning)."""
    start = resolve(cost)
    settings = learn_settings(learn, learn_every, start)
    if settings is None:
        return start, None, start
    return start, settings, LearntSource(settings.path, start)
