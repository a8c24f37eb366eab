"""The cost that ``install(cost=...)`` makes a trainer balance by.

A cost is a `seqbalance.TimeCost`, a `seqbalance.ModelCost`, or the path of a saved
`TimeCost` (``TimeCost.to_dict()`` as JSON); without one, the environment variable
`ENVIRONMENT` names the path (Ray's ``worker_process_setup_hook`` takes no arguments, its
runtime env's ``env_vars`` set the variable). A cost given by path is read again when the file
changes (its modification time, size or inode, checked with one ``os.stat`` per use), so a
trainer whose rank 0 saves its `seqbalance.StepTimer`'s cost every few steps feeds every
process that balances: replace the file in one step (write a temporary file beside it, then
``os.replace``). The path is made absolute when it is installed (a process that changes
directory later, as Hydra does, still follows it). A file that cannot be read as a cost (half
written by a writer that does not replace it in one step, or nested too deeply) leaves the last
cost in use, with one WARNING per version of the file; one that stays missing for
`MISSING_GRACE` seconds is warned of once. A poor fit (`seqbalance.TimeCostWarning`) is warned of when the cost is first read, and
after that only when a reload turns it poor, not at every save.

Every rank one version: where a trainer forms micro-batches on its workers (verl's
``rearrange_micro_batches``, OpenRLHF's ``setup_dynamic_batch``), `call_agreed` runs that
formation on global rank 0's version of a followed file, agreed by one all-gather on the
default group, so the ranks of one replica never form them from two versions of the file.

Nothing here imports torch: a tensor comes from a trainer that imported it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._inputs import _describe
from ..costs import ModelCost, TimeCost, TimeCostWarning
from ..costs._time_trust import outside_stacklevel, poor_fit
from ..costs.workload import nanoseconds

__all__ = ["ENVIRONMENT", "CostSource", "agreed_cost", "call_agreed", "resolve"]

#: The environment variable naming a saved `TimeCost` when ``install()`` is given no cost.
ENVIRONMENT = "SEQBALANCE_COST"

logger = logging.getLogger("seqbalance.integrations")


def load_time_cost(path: str, name: str, *, quiet: bool = False) -> TimeCost:
    """The `TimeCost` saved at ``path``; errors name ``name`` (the argument or variable).
    ``quiet``: without `TimeCost.from_dict`'s warning of a poor fit (the caller says it)."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} = {path!r}: no such file (a saved TimeCost)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{name} = {path!r} cannot be read as a saved TimeCost: {exc}") from None
    except RecursionError:
        # A nested JSON bomb: Python's decoder recurses once per level.
        raise ValueError(
            f"{name} = {path!r} cannot be read as a saved TimeCost: JSON nested too deeply"
        ) from None
    try:
        return TimeCost._load(data) if quiet else TimeCost.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} = {path!r} is not a saved TimeCost: {exc}") from None
    except RecursionError:
        raise ValueError(
            f"{name} = {path!r} is not a saved TimeCost: a field nested too deeply"
        ) from None


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size, status.st_ino)


#: Seconds a followed cost file may stay missing before it is warned of (a writer that removes
#: the file before writing the next one leaves it missing for a moment).
MISSING_GRACE = 30.0

#: The clock of `MISSING_GRACE` (a test sets its own).
_clock = time.monotonic


class CostSource:
    """The cost in use: a fixed one, or the one saved at a path, read again when it changes.

    A path is made absolute when the source is made, so that a process that changes directory
    later (Hydra's job directory) follows the same file."""

    def __init__(self, cost: TimeCost | ModelCost | None = None, path: str | None = None) -> None:
        self.path = None if path is None else os.path.abspath(path)
        path = self.path
        self._lock = threading.Lock()
        self._warned: tuple[int, int, int] | None = None
        #: When the followed file was first seen missing (None: it is there), and whether
        #: that absence was warned of.
        self._missing_since: float | None = None
        self._missing_warned = False
        #: The version `pinned` holds for this thread's calls (a rank's formation of its
        #: micro-batches, `call_agreed`).
        self._pin = threading.local()
        if path is None:
            assert cost is not None
            self._cost: TimeCost | ModelCost = cost
            self._seen = None
        else:
            self._seen = _signature(path)
            self._cost = load_time_cost(path, "cost")
        #: Whether the cost in use is a poor fit: a reload warns only when it turns poor.
        self._poor = isinstance(self._cost, TimeCost) and poor_fit(self._cost.fit_error) is not None

    def current(self) -> TimeCost | ModelCost:
        """The cost to use now: the version `pinned` in this thread, else the file's (a
        changed file is read first)."""
        pinned = getattr(self._pin, "cost", None)
        if pinned is not None:
            return pinned
        if self.path is None:
            return self._cost
        seen = _signature(self.path)
        if seen is None:
            self._gone()
            return self._cost  # gone for a moment: keep the last one
        self._missing_since, self._missing_warned = None, False
        if seen == self._seen:
            return self._cost  # unchanged
        with self._lock:
            if seen != self._seen:
                try:
                    cost = load_time_cost(self.path, "cost", quiet=True)
                except (OSError, ValueError) as exc:
                    if self._warned != seen:
                        self._warned = seen
                        logger.warning("seqbalance: kept the last cost in use: %s", exc)
                    return self._cost
                self._cost, self._seen = cost, seen
                # A trainer saves every few steps, and a poor fit's words (its recent error)
                # change with each save: said when it turns poor, not at every reload.
                poor = poor_fit(cost.fit_error)
                if poor is not None and not self._poor:
                    warnings.warn(
                        f"cost = {self.path!r}: {poor}",
                        TimeCostWarning,
                        stacklevel=outside_stacklevel(),
                    )
                self._poor = poor is not None
        return self._cost

    @contextlib.contextmanager
    def pinned(self, cost: TimeCost | ModelCost) -> Iterator[None]:
        """Within: `current` in this thread is ``cost``, whatever the file holds."""
        before = getattr(self._pin, "cost", None)
        self._pin.cost = cost
        try:
            yield
        finally:
            self._pin.cost = before

    def _gone(self) -> None:
        """The followed file is missing: warned of once, when it stays missing past
        `MISSING_GRACE` seconds (and again only after it came back and went again)."""
        now = _clock()
        if self._missing_since is None:
            self._missing_since = now
        elif not self._missing_warned and now - self._missing_since >= MISSING_GRACE:
            self._missing_warned = True
            logger.warning(
                "seqbalance: the cost file %r has been missing for %.0f s; the last cost read "
                "stays in use until it is there again",
                self.path,
                now - self._missing_since,
            )

    def weights(self, lengths: Any) -> np.ndarray:
        """Each sample's cost: predicted seconds (float64) of a `TimeCost`, training FLOPs
        (int64) of a `ModelCost`."""
        cost = self.current()
        if isinstance(cost, ModelCost):
            return _flops(cost, lengths)
        return cost(lengths)

    def nanoseconds(self, lengths: Any) -> np.ndarray:
        """Each sample's cost as int64: a `TimeCost`'s predicted seconds in nanoseconds
        (rounded to nearest), a `ModelCost`'s training FLOPs."""
        cost = self.current()
        if isinstance(cost, ModelCost):
            return _flops(cost, lengths)
        try:
            return nanoseconds(cost, lengths)
        except OverflowError:
            raise ValueError(
                "a sample's predicted time is beyond int64 nanoseconds (292 years): the cost "
                "or the lengths are not what a trainer measures"
            ) from None


def _flops(cost: ModelCost, lengths: Any) -> np.ndarray:
    values = cost.flops(lengths)
    if values and max(values) >= 2**63:
        raise ValueError("a sample's FLOPs are beyond int64: lengths far above any model's")
    return np.array(values, dtype=np.int64)


def agreed_cost(source: Any) -> TimeCost | ModelCost | None:
    """Global rank 0's version of the cost file ``source`` follows, sent to every rank by one
    ``all_gather_object`` on the default group (every rank of every replica enters it, as each
    enters the trainer's formation of its micro-batches); ``None`` where there is nothing to
    agree: no followed file (a fixed cost is the same everywhere), or no ``torch.distributed``
    initialised (one process)."""
    if not isinstance(source, CostSource) or source.path is None:
        return None
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    mine = source.current() if dist.get_rank() == 0 else None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    agreed = gathered[0]
    if not isinstance(agreed, (TimeCost, ModelCost)):
        raise RuntimeError(
            f"seqbalance: global rank 0 sent {_describe(agreed)} as its cost version, not a "
            "TimeCost: every rank must install the same cost"
        )
    return agreed


def call_agreed(source: Any, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` with ``source`` pinned to `agreed_cost`'s version for its
    calls in this thread (as it is, where there is nothing to agree)."""
    cost = agreed_cost(source)
    if cost is None:
        return function(*args, **kwargs)
    with source.pinned(cost):
        return function(*args, **kwargs)


def resolve(cost: Any) -> CostSource | None:
    """The `CostSource` of ``install``'s ``cost`` argument, or of `ENVIRONMENT` when ``cost``
    is ``None`` (``None`` when neither names one). Raises before anything is patched."""
    if cost is None:
        path = os.environ.get(ENVIRONMENT, "")
        if not path:
            return None
        try:
            return CostSource(path=path)
        except (OSError, ValueError) as exc:
            message = str(exc).replace("cost = ", f"{ENVIRONMENT} = ", 1)
            raise type(exc)(message) from None
    if isinstance(cost, (TimeCost, ModelCost)):
        return CostSource(cost)
    if isinstance(cost, (str, os.PathLike)):
        return CostSource(path=os.fspath(cost))
    raise TypeError(
        "cost must be a TimeCost, a ModelCost or the path of a saved TimeCost, got "
        f"{_describe(cost)}"
    )


def lengths_of(seqlen_list: Any, name: str = "seqlen_list") -> tuple[np.ndarray, Any]:
    """The lengths a trainer passes (a torch tensor of int64 or float32, a NumPy array, a
    list), as int64, and the torch device to give the answer back on (``None``: no tensor)."""
    device = None
    values = seqlen_list
    if type(seqlen_list).__module__.startswith("torch") and hasattr(seqlen_list, "device"):
        device = seqlen_list.device
        tensor = seqlen_list.detach().cpu()
        # float16 and bfloat16 have no NumPy twin; every float reads exactly in float64.
        values = (tensor.double() if tensor.is_floating_point() else tensor).numpy()
    array = np.asarray(values)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all() or (array != np.rint(array)).any():
            position = int(np.flatnonzero(~finite | (array != np.rint(array)))[0])
            raise ValueError(
                f"{name}[{position}] = {float(array.flat[position])!r}: a sequence length must be a "
                "whole number"
            )
        if array.size and (array.max() >= 2.0**63 or array.min() < 0):
            position = int(np.argmax((array >= 2.0**63) | (array < 0)))
            raise ValueError(
                f"{name}[{position}] = {float(array.flat[position])!r}: a sequence length must be "
                "non-negative and below 2**63"
            )
        array = array.astype(np.int64)
    return array, device


def as_trainer_tensor(values: np.ndarray, shape: tuple[int, ...], device: Any) -> Any:
    """``values`` shaped ``shape``, as a torch tensor on ``device`` when torch is imported
    (the trainer's), else as a NumPy array."""
    torch = sys.modules.get("torch")
    result = values.reshape(shape)
    if torch is None:
        return result
    # ascontiguousarray makes a 0-d array 1-d: shaped again.
    tensor = torch.from_numpy(np.ascontiguousarray(result).reshape(shape))
    return tensor if device is None else tensor.to(device)
