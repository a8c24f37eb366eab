"""`profile`: time the user's own forward + backward over a grid of packed micro-batches and fit
a `seqbalance.TimeCost` to what it measured."""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE, _describe, as_float, show_number
from ._time_fit import N_COEF, Features, check_micro_batches, factor_rows, unseparated
from ._time_trust import outside_stacklevel, poor_fit
from .model import ModelCost
from .time_cost import TimeCost, TimeCostWarning

__all__ = ["PROGRESS_LOGGER", "default_grid", "profile"]

#: The logger `profile` reports its progress to, one ``INFO`` record per micro-batch timed.
PROGRESS_LOGGER = "seqbalance.profile"

logger = logging.getLogger(PROGRESS_LOGGER)

#: The shortest single document of the default grid, when ``max_length`` allows it.
SHORTEST = 512
#: The smallest ``max_length`` the default grid can be built for.
MIN_MAX_LENGTH = 16


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {_describe(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > MAX_VALUE:
        raise ValueError(f"{name} must be <= 2**63 - 1, got {value}")
    return int(value)


def _split(total: int, parts: int) -> list[int]:
    """``total`` tokens in ``parts`` documents as equal as possible (the longest first)."""
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def default_grid(max_length: int) -> list[list[int]]:
    """The micro-batches `profile` times when given no ``lengths``.

    Single documents from 512 tokens (or ``max_length / 8`` when that is shorter) doubling up
    to ``max_length``; at each of those totals, the same tokens packed as 2, 4, 8 and 16 equal
    documents, and a mix of halves (``T/2, T/4, T/8, ...``). Every micro-batch holds at most
    ``max_length`` tokens; a grid with packed documents of the same total separates the cost per
    micro-batch from the cost per document, and the lengths spread separates the linear from the
    attention term.

    Example:
        >>> default_grid(2048)[:4]
        [[256], [512], [1024], [2048]]
    """
    max_length = _count(max_length, "max_length", MIN_MAX_LENGTH)
    totals = [max_length]
    while totals[-1] // 2 >= SHORTEST or len(totals) < 4:
        totals.append(totals[-1] // 2)
    totals.reverse()
    grid = [[total] for total in totals]
    for total in totals:
        for parts in (2, 4, 8, 16):
            if total // parts >= 1:
                grid.append(_split(total, parts))
        halves: list[int] = []
        left = total
        while left > 1 and len(halves) < 6:
            halves.append(left // 2)
            left -= left // 2
        grid.append([*halves, left])
    return grid


def _synchronize() -> None:
    """Wait for queued CUDA work when torch is imported and has initialised CUDA.

    torch is never imported here: a program that has not imported it has no CUDA work queued.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        cuda.synchronize()


def profile(
    run: Callable[[list[int]], Any],
    *,
    max_length: int,
    lengths: Any = None,
    repeats: int = 3,
    warmup: int = 1,
    timer: Callable[[], float] | None = None,
    model: ModelCost | None = None,
    progress: Callable[[int, int, list[int], float], Any] | None = None,
) -> TimeCost:
    """Time ``run`` over packed micro-batches and fit a `TimeCost` to the measurements.

    ``run(document_lengths)`` must run one forward + backward of a packed micro-batch of
    documents of those lengths, however the trainer builds it (for a Hugging Face model:
    ``position_ids`` restarting at 0 for every document, or ``cu_seqlens`` for a varlen
    attention kernel; see the docs page "Balance by measured time"). Each micro-batch is run
    ``warmup`` times untimed, then ``repeats`` times timed; its time is the least of those.
    When torch is imported and has initialised CUDA, CUDA is synchronised before each reading
    of the clock, so the time is the GPU's, not the launch's.

    Progress is reported, never printed: after each micro-batch is timed, one ``INFO`` record
    goes to the logger ``"seqbalance.profile"`` (`PROGRESS_LOGGER`; attach a handler, or call
    ``logging.basicConfig(level=logging.INFO)``, to see it) and ``progress``, if given, is
    called. A poor fit is said by a `TimeCostWarning` (``warnings``). Nothing is written to
    stderr.

    Args:
        run: the callable to time; its return value is ignored.
        max_length: the most tokens a micro-batch may hold (an int >= 16): the default grid
            goes up to it.
        lengths: the micro-batches to time instead of `default_grid` (each a non-empty list
            of positive document lengths; at least 6).
        repeats: timed runs of each micro-batch (>= 1).
        warmup: untimed runs of each micro-batch first (>= 0).
        timer: a zero-argument clock in seconds (default `time.perf_counter`), read before and
            after each call.
        model: fit with `ModelCost` features (see `TimeCost.fit`).
        progress: called as ``progress(done, total, document_lengths, seconds)`` after each
            micro-batch is timed (``done`` of ``total``; ``seconds``, its least time); what
            it returns is ignored and what it raises stops the profile.

    Returns:
        The fitted `TimeCost`.

    Raises:
        RuntimeError: ``run`` raised; the message names the lengths it was given and the
            original exception is chained (``__cause__``).
        ValueError: a bad argument, a micro-batch of ``lengths`` above ``max_length`` tokens,
            ``lengths`` that could not tell the coefficients apart (checked before anything
            runs), a timer reading that is not finite, or one that did not advance over a call.
        TypeError: ``run``, ``timer`` or ``progress`` is not callable, a timer reading that is not a number,
            or an argument of the wrong type (``model`` is checked before anything runs).

    Example:
        >>> clock = [0.0]
        >>> def run(lengths):  # stands for a model's forward + backward
        ...     clock[0] += 1e-3 + sum(1e-6 * L + 1e-10 * L * (L + 1) / 2 for L in lengths)
        >>> cost = profile(run, max_length=8192, timer=lambda: clock[0])
        >>> round(cost.coefficients["per_token"] * 1e6, 9)
        1.0
    """
    if not callable(run):
        raise TypeError(f"run must be callable, got {_describe(run)}")
    clock = time.perf_counter if timer is None else timer
    if not callable(clock):
        raise TypeError(f"timer must be a zero-argument callable, got {_describe(timer)}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable, got {_describe(progress)}")
    if model is not None and not isinstance(model, ModelCost):
        # Checked before the grid runs: a typo must not cost the whole profile.
        raise TypeError(f"model must be None or a ModelCost, got {_describe(model)}")
    max_length = _count(max_length, "max_length", MIN_MAX_LENGTH)
    repeats = _count(repeats, "repeats", 1)
    warmup = _count(warmup, "warmup", 0)
    if lengths is None:
        grid = default_grid(max_length)
        _check_separates(grid, model, "the default grid (pass lengths=)")
    else:
        grid = [batch.tolist() for batch in check_micro_batches(lengths, "lengths")]
        if len(grid) < N_COEF + 2:
            raise ValueError(
                f"lengths has {len(grid)} micro-batches; the fit needs at least {N_COEF + 2}"
            )
        for position, batch in enumerate(grid):
            if sum(batch) > max_length:
                raise ValueError(
                    f"lengths[{position}] holds {sum(batch):,} tokens, above max_length "
                    f"({max_length:,})"
                )
        _check_separates(grid, model, "lengths")
    seconds = []
    for position, batch in enumerate(grid):
        seconds.append(_time_one(run, batch, repeats, warmup, clock))
        _progress(position + 1, len(grid), batch, seconds[-1])
        if progress is not None:
            progress(position + 1, len(grid), list(batch), seconds[-1])
    with warnings.catch_warnings():
        # Said once below, as a warning from this call (not from inside the fit).
        warnings.simplefilter("ignore", TimeCostWarning)
        cost = TimeCost.fit(grid, seconds, model=model)
    poor = poor_fit(cost.fit_error)
    if poor is not None:
        warnings.warn(poor, TimeCostWarning, stacklevel=outside_stacklevel())
    return cost


def _check_separates(grid: list[list[int]], model: ModelCost | None, name: str) -> None:
    """Refuse, before anything runs, a grid whose times could not tell the coefficients apart
    whatever they are (dividing a row by its time never makes dependent columns independent)."""
    features = Features(model)
    arrays = [np.array(batch, dtype=np.int64) for batch in grid]
    ones = np.ones(len(grid))
    # The rows and columns the fit solves (an attention-free model's one length term).
    rows = features.fit_rows(features.rows(arrays))
    tied = unseparated(factor_rows(rows, ones, ones), features.names, features.active)
    if tied:
        raise ValueError(
            f"{name} cannot tell apart the coefficients {', '.join(tied)}: time micro-batches "
            "that differ in their number of documents and in lengths (with a sliding-window "
            "model, some shorter than its window)"
        )


def _reading(clock: Callable[[], float]) -> float:
    """One reading of the clock, refused unless it is a finite number of seconds."""
    value = clock()
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"timer must return seconds as a number, got {_describe(value)}")
    seconds = as_float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"timer returned {show_number(value)}: it must read finite seconds")
    return seconds


def _time_one(
    run: Callable[[list[int]], Any],
    batch: list[int],
    repeats: int,
    warmup: int,
    clock: Callable[[], float],
) -> float:
    """The least of ``repeats`` timed calls of ``run(batch)``, after ``warmup`` untimed ones."""
    best = float("inf")
    for attempt in range(warmup + repeats):
        _synchronize()
        start = _reading(clock)
        try:
            run(list(batch))
        except Exception as exc:
            raise RuntimeError(
                f"profile: run(document_lengths={_shown(batch)}) raised {type(exc).__name__}: {exc}"
            ) from exc
        _synchronize()
        elapsed = _reading(clock) - start
        if attempt < warmup:
            continue
        if not (elapsed > 0 and math.isfinite(elapsed)):
            raise ValueError(
                f"the timer measured {elapsed!r} s for run(document_lengths={_shown(batch)}); "
                "it must advance over a call (timer= reads seconds, like time.perf_counter)"
            )
        best = min(best, elapsed)
    return best


def _shown(batch: list[int]) -> str:
    text = repr(batch)
    return text if len(text) <= 80 else f"{text[:70]}... ({len(batch)} documents)"


def _progress(done: int, total: int, batch: list[int], seconds: float) -> None:
    """One ``INFO`` record on the progress logger (built only when someone listens)."""
    if logger.isEnabledFor(logging.INFO):
        documents = f"{len(batch)} document{'s' if len(batch) > 1 else ''}"
        logger.info(
            "%d/%d micro-batches timed (%s tokens in %s: %.3f ms)",
            done,
            total,
            f"{sum(batch):,}",
            documents,
            seconds * 1e3,
        )
