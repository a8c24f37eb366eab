"""The state a `seqbalance.TimeCost` holds, and what adding observations to it does.

A `FitState` is the accumulated fit (the triangular factor of ``_time_fit``, its total weight
and count), its solution, and the relative errors of the last `RECENT` predictions made before
their observation was added. Adding observations returns a new state and leaves the old one as
it was, so a refused observation, or one refused among many, changes nothing. Several
observations are added as one at a time would add them, whatever their number: each is judged
and held against the state just before it (`FitState.add`).

What an addition accepts, a fit on the same observations accepts, with one difference the
recency weighting forces. A time out of all proportion (``1e-20`` s beside milliseconds)
drowns every other row of a relative-error fit, so `TimeCost.fit` refuses it; `FitState.add`
refuses it too, telling it from recency by what the same micro-batch would do at the time the
cost predicts for it, and only when it is more than `OUT_OF_PROPORTION` times shorter than
that. When the weighted observations themselves no longer tell coefficients apart (a
half-life that forgot the micro-batches which did), the state keeps, along each combination
they no longer see, the value its last solution had (``_time_solve.hold``: what they still
determine is fitted first, then the nearest to the last solution), and says which coefficients
(`FitState.undetermined`): a fit on those observations alone would refuse them, but a trainer's
cost cannot stop learning what the observations still determine.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NoReturn

import numpy as np

from ._time_fit import (
    Features,
    add_rows,
    add_rows_each,
    check_separated,
    decay_of,
    factor_rows,
    weighted_rms,
)
from ._time_solve import (
    Analysis,
    analyse,
    analyse_many,
    solve_nonnegative,
    surely_determined,
    unseparated,
)
from ._time_trust import Reach

#: How many of the latest predictions ``fit_error["recent"]`` takes the median of.
RECENT = 100
#: A time is out of all proportion only more than this many times shorter than the cost predicts (its
#: row then weighs at least the square of it, 10**4, more in the relative-error fit). Nearer,
#: whether the factor it leaves counts as undetermined is decided by rounding at the
#: threshold (``_time_solve.SEPARATED``): a time 0.72x its prediction was refused so under half_life=1.
OUT_OF_PROPORTION = 100.0
#: Observations added per pass of `FitState.add`: the factors after each are held at once.
CHUNK = 1024


class FitState:
    """One accumulated fit; immutable once built, except for the solution cached on first use.

    Args:
        features: the micro-batch features (with or without a model).
        decay: the weight factor per later observation (1 without a half-life).
        factor: the ``(N_COEF + 1) x (N_COEF + 1)`` triangular factor.
        weight_sum: the total weight of the observations.
        observations: how many there were.
        recent: the relative errors of the latest predictions (at most `RECENT`, oldest first).
        solution: the solution, when known, in `Features.fit_rows` coordinates: a loaded
            cost's saved coefficients, or what an addition that left combinations undetermined
            held them at (without one, the factor's best non-negative fit, which then
            determines every coefficient).
        reach: the longest document and micro-batch the observations hold (``None``: not
            known, a cost saved before it was recorded).
    """

    __slots__ = (
        "_analysis",
        "_solution",
        "_undetermined",
        "decay",
        "factor",
        "features",
        "observations",
        "reach",
        "recent",
        "weight_sum",
    )

    def __init__(
        self,
        features: Features,
        decay: float,
        factor: np.ndarray,
        weight_sum: float,
        observations: int,
        recent: tuple[float, ...] = (),
        solution: np.ndarray | None = None,
        analysis: Analysis | None = None,
        reach: Reach | None = None,
    ) -> None:
        self.features = features
        self.decay = decay
        self.factor = factor
        self.weight_sum = weight_sum
        self.observations = observations
        self.recent = recent[-RECENT:]
        self._solution = solution
        self._analysis = analysis
        self._undetermined: tuple[str, ...] | None = None
        self.reach = reach

    def reaching(self, reach: Reach | None) -> FitState:
        """This state, knowing that its observations also reach ``reach`` (the same object
        when that changes nothing; an unknown reach stays unknown)."""
        if self.reach is None or reach is None:
            return self
        widened = self.reach.widened(reach)
        if widened == self.reach:
            return self
        grown = FitState(
            self.features,
            self.decay,
            self.factor,
            self.weight_sum,
            self.observations,
            self.recent,
            self._solution,
            self._analysis,
            widened,
        )
        grown._undetermined = self._undetermined
        return grown

    def analysis(self) -> Analysis:
        """The factor's `Analysis` (cached)."""
        if self._analysis is None:
            self._analysis = analyse(self.factor, self.features.active)
        return self._analysis

    def solution(self) -> np.ndarray:
        """The fitted coefficients in the fit's own coordinates (cached)."""
        if self._solution is None:
            self._solution = solve_nonnegative(
                self.factor, self.features.active, analysis=self.analysis()
            )
        return self._solution

    def coefficients(self) -> np.ndarray:
        """The coefficients of `Features.rows`: ``micro_batch, document`` and the two length
        terms (an attention-free model's one efficiency for both FLOPs parts)."""
        return self.features.expand(self.solution())

    def undetermined(self) -> tuple[str, ...]:
        """The coefficients in a combination the weighted observations no longer determine
        (held at the value the solution had when they last did); ``()`` when they determine
        every one."""
        if self._undetermined is None:
            features = self.features
            self._undetermined = tuple(
                unseparated(self.factor, features.names, features.active, self.analysis())
            )
        return self._undetermined

    def rms(self) -> float:
        """The weighted root mean square relative error over every observation."""
        return weighted_rms(self.factor, self.solution(), self.weight_sum)

    def recent_error(self) -> float | None:
        """The median of `recent`, or ``None`` before the first prediction."""
        return float(np.median(self.recent)) if self.recent else None

    def _grown(self, factor: np.ndarray, row: np.ndarray, time: float) -> np.ndarray | None:
        """``factor`` with the relative-error row of ``row`` at ``time`` added, or ``None`` when
        it is beyond float64."""
        try:
            augmented = [[value / time for value in row.tolist()] + [1.0]]
            if not all(math.isfinite(value) for value in augmented[0]):
                return None
            grown = add_rows(factor, augmented, self.decay)
        except OverflowError:
            return None
        return grown if np.isfinite(grown).all() else None

    def _factors(
        self, factor: np.ndarray, rows: np.ndarray, times: np.ndarray
    ) -> np.ndarray | None:
        """The factor after each of ``rows`` at ``times`` is added to ``factor`` (a stack), or
        ``None`` when they are beyond float64."""
        try:
            # Plain floats: a handful of rows is faster so than through NumPy calls.
            augmented = [
                [value / time for value in row] + [1.0]
                for row, time in zip(rows.tolist(), times.tolist(), strict=True)
            ]
            if not all(math.isfinite(value) for row in augmented for value in row):
                return None
            factors = add_rows_each(factor, augmented, self.decay)
        except OverflowError:
            return None
        return factors if np.isfinite(factors).all() else None

    def add(
        self,
        rows: np.ndarray,
        times: np.ndarray,
        name: str,
        label: Callable[[int], str],
        errors: tuple[float, ...] = (),
    ) -> FitState:
        """A new state with the micro-batches of ``rows`` (`Features.rows`) measured at
        ``times`` added in order; ``errors`` are the relative errors of their predictions.

        Each is added as on its own: after one that leaves combinations undetermined, they are
        held at the solution just before it, and such an observation is judged for proportion
        against the state just before it, so adding several at once and one at a time give
        the same state. Raises ``ValueError`` naming ``name`` (the micro-batches' argument)
        when float64 cannot hold them, or ``label(i)`` for the time ``i`` that is out of all
        proportion (see the module docstring); then nothing was added.
        """
        features, active = self.features, self.features.active
        fit = features.fit_rows(rows)
        factor, solution, analysis = self.factor, self._solution, self._analysis
        before: FitState | None = self
        for start in range(0, len(times), CHUNK):
            stop = min(start + CHUNK, len(times))
            factors = self._factors(factor, fit[start:stop], times[start:stop])
            if factors is None:
                self._refuse_beyond_float64(fit, times, name, label)
            sure = surely_determined(factors, active)
            unsure = np.flatnonzero(~sure)
            found = dict(zip(unsure.tolist(), analyse_many(factors[unsure], active), strict=True))
            for i in range(stop - start):
                after = found.get(i)
                if after is None or not len(after.null):
                    # Determined: the factor alone gives the solution, when it is asked for.
                    factor, solution, analysis = factors[i], None, after
                    before = None
                    continue
                if solution is None:
                    if before is not None:
                        solution = before.solution()
                    else:
                        solution = solve_nonnegative(factor, active, analysis=analysis)
                at = start + i
                self._refuse_out_of_proportion(
                    factor, solution, fit[at], float(times[at]), after, factors[i], label(at)
                )
                solution = solve_nonnegative(factors[i], active, solution, after)
                factor, analysis, before = factors[i], after, None
        # One observation at a time, as on its own: the same rounding however they come.
        weight_sum, decay = self.weight_sum, self.decay
        for _ in range(len(times)):
            weight_sum = weight_sum * decay + 1.0
        return FitState(
            features,
            decay,
            factor,
            weight_sum,
            self.observations + len(times),
            self.recent + tuple(errors),
            solution=solution,
            analysis=analysis,
            reach=self.reach,
        )

    def _refuse_beyond_float64(
        self, fit: np.ndarray, times: np.ndarray, name: str, label: Callable[[int], str]
    ) -> NoReturn:
        # The row largest in the fit, compared as powers of ten (quotients overflow).
        with np.errstate(divide="ignore"):
            size = np.log10(np.abs(fit).max(axis=1)) - np.log10(times)
        worst = int(np.argmax(size))
        raise ValueError(
            f"{name} is too far in scale from the fit to add in float64 (lengths near "
            f"2**63 or times near 0: {label(worst)} = {float(times[worst])!r}); nothing "
            "was changed"
        )

    def _refuse_out_of_proportion(
        self,
        factor: np.ndarray,
        solution: np.ndarray,
        row: np.ndarray,
        time: float,
        analysis: Analysis,
        grown: np.ndarray,
        label: str,
    ) -> None:
        """Refuse adding ``row`` at ``time`` to ``factor`` (whose solution is ``solution``; the
        result ``grown`` leaves ``analysis.null`` undetermined) when the same micro-batch, at
        the time that solution predicts for it, would leave fewer combinations undetermined:
        then it is a time that drowns the others, not the recency weighting, that cannot be
        told apart."""
        predicted = float(row @ solution)
        if not (math.isfinite(predicted) and predicted > 0):
            return
        ratio = predicted / time
        # A time exactly OUT_OF_PROPORTION times shorter is within it: the prediction here and
        # the one a caller scaled may differ in the last bits, so the bound has a hair of room.
        if not ratio > OUT_OF_PROPORTION * (1 + 1e-9):
            return  # within proportion: the recency weighting, held as undetermined
        fair = self._grown(factor, row, predicted)
        if fair is None or len(analyse(fair, self.features.active).null) >= len(analysis.null):
            return
        features = self.features
        tied = ", ".join(unseparated(grown, features.names, features.active, analysis))
        raise ValueError(
            f"{label} = {time!r} is out of all proportion to the times "
            f"this cost has seen: it predicts {predicted:.4g} s for that "
            "micro-batch, the relative-error fit would weigh it about "
            f"1e{2 * math.log10(max(ratio, 1.0)):.0f} times as much, and beside it "
            f"the others cannot tell apart {tied} (TimeCost.fit refuses it too). Nothing was "
            "changed; check that measurement"
        )


def log_undetermined(
    logger: logging.Logger, held: tuple[str, ...], now: tuple[str, ...], half_life: float | None
) -> None:
    """Log once, when it starts, that the observations no longer tell ``now`` apart."""
    if now and not held:
        logger.warning(
            "seqbalance.TimeCost: the observations, weighed with half_life %g, no longer tell "
            "apart %s; their split is kept from when they last did (see TimeCost.undetermined)",
            half_life,
            ", ".join(now),
        )


def constant(text: str) -> Callable[[int], str]:
    """A ``label`` for `FitState.add` that names its one observation ``text``."""

    def label(_: int) -> str:
        return text

    return label


def relative_error(predicted: float, measured: float) -> float:
    """``|predicted / measured - 1|``, capped at 1e300 so that it stays a JSON number."""
    with np.errstate(over="ignore"):
        error = abs(predicted / measured - 1.0)
    return min(error, 1e300)


def add_in_order(
    state: FitState, rows: np.ndarray, times: np.ndarray, name: str, label: str = "seconds"
) -> FitState:
    """``state`` with measured micro-batches (their `Features.rows`) added in order, each
    predicted by the state just before it is added; ``label.format(i)`` names time ``i``.

    Only the last `RECENT` predictions are kept, so the others go in through one
    `FitState.add`, unpredicted: the same state as one at a time, in bounded time.
    """
    head = max(len(times) - RECENT, 0)
    if head:
        state = state.add(rows[:head], times[:head], name, label.format)
    for i in range(head, len(times)):
        error = relative_error(float(rows[i] @ state.coefficients()), float(times[i]))
        state = state.add(
            rows[i : i + 1], times[i : i + 1], name, constant(label.format(i)), (error,)
        )
    return state


def fit_state(
    features: Features,
    rows: np.ndarray,
    times: np.ndarray,
    half: float | None,
    name: str,
    reach: Reach | None,
) -> tuple[FitState, dict[str, float]]:
    """The state of a fit to checked micro-batches (their `Features.rows`, reaching ``reach``)
    measured at ``times``, and its errors (``median``, ``p90``, ``max``); refused as
    `TimeCost.fit` refuses, naming ``name`` for the micro-batches."""
    fit_rows = features.fit_rows(rows)
    weights = decay_of(half) ** np.arange(len(times) - 1, -1, -1, dtype=np.float64)
    factor = factor_rows(fit_rows, times, weights)
    if not np.isfinite(factor).all():
        raise ValueError(
            f"{name} and seconds are too far apart in scale to fit in float64 "
            "(lengths near 2**63 or times near 0)"
        )
    check_separated(fit_rows, times, factor, features, name)
    state = FitState(
        features, decay_of(half), factor, float(weights.sum()), len(times), reach=reach
    )
    errors = np.abs(rows @ state.coefficients() / times - 1.0)
    last_fit = {
        "median": float(np.median(errors)),
        "p90": float(np.percentile(errors, 90)),
        "max": float(errors.max()),
    }
    return state, last_fit
