"""`TimeCost`: a ``cost=`` in seconds, fitted to what the GPU measured.

The step waits for its slowest rank's time, and neither tokens nor FLOPs are time: attention
runs at a lower throughput than the GEMMs, and every micro-batch and document carries fixed
costs. A `TimeCost` is fitted to measured micro-batch times (offline with
`seqbalance.profile`, or online from the trainer's own steps with `TimeCost.update`) and then
balances like any other cost.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .._inputs import as_int64_array
from ._time_fit import (
    Features,
    check_enough,
    check_half_life,
    check_lengths,
    check_micro_batches,
    check_model,
    check_second,
    check_seconds,
    crossover,
)
from ._time_online import FitState, add_in_order, fit_state, log_undetermined
from ._time_saved import read_saved, saved_dict
from ._time_sync import Members, add_synchronized, attribute_and_fit, check_unit, check_units
from ._time_text import describe
from ._time_trust import Reach, TimeCostWarning, beyond, check_attention_apart, poor_fit, warn
from .model import ModelCost

__all__ = ["TimeCost", "TimeCostWarning"]

logger = logging.getLogger(__name__)


class TimeCost:
    """Seconds per document, fitted to measured micro-batch times: a ``cost=`` for the planners.

    A micro-batch of documents of lengths ``L_1..L_n`` run packed together is modelled as:

        t = c_mb + sum over documents (c_doc + f(L))
        f(L) = a * L + b * pairs(L)                            (no model; pairs(L) = L*(L+1)/2)
        f(L) = alpha * linear_flops(L) + beta * attention_flops(L)        (model=ModelCost)

    With a `ModelCost`, the two FLOPs parts are its training FLOPs split as
    `ModelCost.per_token` splits them, so sliding windows, multi-latent and linear attention
    and MoE carry through; ``alpha`` and ``beta`` are the measured seconds per FLOP of each.
    Every coefficient is non-negative, and the fit minimises the relative error (each
    micro-batch's error divided by its time), so short and long micro-batches count alike.

    Build one with `fit` (or `from_dict`, or `seqbalance.profile`); ``cost(lengths)`` then
    gives float64 seconds per document, ``c_doc + f(L)`` (0 for a length of 0), and
    `predict` the seconds of whole micro-batches. `update` refits from one more
    measurement in constant memory and time (the fit is held as the triangular factor of its
    weighted normal equations), so ``fit(first).update_many(rest)`` equals ``fit(first +
    rest)`` to rounding. `update_synchronized` and `fit_synchronized` take micro-batches that
    ran in lockstep on several ranks and were timed together (FSDP, ZeRO-3; see
    `seqbalance.StepTimer`).

    Example:
        >>> batches = [[1024], [2048], [4096], [512, 512], [1024, 3072], [8192], [256] * 8]
        >>> seconds = [0.001 + sum(2e-7 * L + 1e-11 * L * (L + 1) / 2 for L in b)
        ...            for b in batches]
        >>> cost = TimeCost.fit(batches, seconds)
        >>> round(cost.coefficients["per_token"] * 1e7, 6)
        2.0
        >>> cost.predict([[1024, 1024]]).round(6).tolist()
        [0.00142]
    """

    _state: FitState
    _half_life: float | None
    _last_fit: dict[str, float]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "build a TimeCost with TimeCost.fit(micro_batches, seconds), "
            "TimeCost.from_dict(data) or seqbalance.profile(run, max_length=...)"
        )

    @classmethod
    def _new(cls, state: FitState, last_fit: dict[str, float], half_life: float | None) -> TimeCost:
        self = object.__new__(cls)
        self._state = state
        self._half_life = half_life
        self._last_fit = last_fit
        return self

    # -- fitting --------------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        micro_batches: Any,
        seconds: Any,
        *,
        model: ModelCost | None = None,
        half_life: float | None = None,
    ) -> TimeCost:
        """Fit the coefficients to measured micro-batches.

        Args:
            micro_batches: a sequence of micro-batches, each a non-empty sequence of the
                positive document lengths that ran packed together.
            seconds: the measured time of each micro-batch (positive, finite).
            model: a `ModelCost`: fit seconds per linear and per attention FLOP instead of
                per token and per causal pair.
            half_life: ``None`` (every observation weighs alike) or ``n``: an observation's
                weight halves every ``n`` later observations (here and in later updates).

        Returns:
            The fitted `TimeCost`.

        Raises:
            ValueError: fewer micro-batches than coefficients + 2 (6), an empty micro-batch,
                a length that is not positive, a time that is not positive and finite,
                ``seconds`` of another size, or a bad ``half_life``; the message names the
                argument and the position.
            TypeError: non-integer lengths, non-numeric times, or a ``model`` that is not a
                `ModelCost`.

        Example:
            >>> cost = TimeCost.fit([[100], [200], [300], [400], [100, 100], [500, 50]],
            ...                     [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265])
            >>> round(float(cost([1000])[0]), 4)
            0.105
        """
        check_model(model)
        half = check_half_life(half_life)
        batches = check_micro_batches(micro_batches)
        times = check_seconds(seconds, len(batches))
        check_enough(len(batches), "micro_batches", "micro-batches")
        features = Features(model)
        rows, reach = features.rows(batches), Reach.of(batches)
        cost = cls._new(*fit_state(features, rows, times, half, "micro_batches", reach), half)
        check_attention_apart(features, batches, times, cost._state.coefficients(), "micro_batches")
        warn(poor_fit(cost.fit_error))
        return cost

    @classmethod
    def fit_synchronized(
        cls,
        units: Any,
        seconds: Any,
        *,
        model: ModelCost | None = None,
        half_life: float | None = None,
    ) -> TimeCost:
        """Fit to synchronised measurements: micro-batches that ran in lockstep on several
        ranks and were timed together, so each time is the slowest member's (FSDP, ZeRO-3).

        Each time goes to one member of its unit: the one with the most tokens (or pairs, or
        documents: three starts), refitted, the one predicted slowest (ties: the lowest rank),
        until that repeats; the fit nearest the times, bettered by one-unit moves, is the answer.

        Args:
            units: a sequence of units, each a sequence over ranks of the document lengths that
                rank ran in that slot (an empty one: the rank was idle; not every one empty).
            seconds: the measured time of each unit (positive, finite).
            model: as `fit`.
            half_life: as `fit`.

        Returns:
            The fitted `TimeCost`.

        Raises:
            ValueError, TypeError: what `fit` refuses (naming ``units`` and ``seconds``; in
                every start), a unit with no document on any rank, or a length not positive.

        Example:
            >>> def took(batch):  # 1 ms a micro-batch, 10 us a document, 1 us a token
            ...     return 1e-3 + sum(1e-5 + 1e-6 * L for L in batch) if batch else 0.0
            >>> units = [[[100 * i] * (i % 3 + 1), [], [40 * i, 40]] for i in range(1, 9)]
            >>> cost = TimeCost.fit_synchronized(units, [max(map(took, u)) for u in units])
            >>> round(cost.coefficients["per_token"] * 1e6, 6)
            1.0
        """
        check_model(model)
        half = check_half_life(half_life)
        checked = check_units(units)
        times = check_seconds(seconds, len(checked), of="units")
        check_enough(len(checked), "units", "units")
        features = Features(model)
        reach = Reach.of(member for unit in checked for member in unit)

        def fit(rows: np.ndarray) -> tuple[TimeCost, np.ndarray]:
            fitted = fit_state(features, rows, times, half, "units (as attributed)", reach)
            cost = cls._new(*fitted, half)
            return cost, cost._state.coefficients()

        cost: TimeCost = attribute_and_fit(Members(checked, features), fit, times, half)
        warn(poor_fit(cost.fit_error))
        return cost

    def update(self, micro_batch: Any, seconds: Any) -> TimeCost:
        """Refit with one more measured micro-batch; returns ``self``.

        O(coefficients**2) time and constant memory, whatever the number of updates. With a
        ``half_life``, every earlier observation's weight is multiplied by ``0.5 **
        (1 / half_life)`` first. A bad observation is refused and changes nothing.

        Raises:
            ValueError, TypeError: as `fit` for one micro-batch (``micro_batch`` empty or with
                a length that is not positive; ``seconds`` not positive and finite).

        Example:
            >>> cost = TimeCost.fit([[100], [200], [300], [400], [100, 100], [500, 50]],
            ...                     [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265])
            >>> cost.update([250, 250], 0.0516).fit_error["rms"] < 0.01
            True
        """
        batch = check_lengths(micro_batch, "micro_batch")
        time = check_second(seconds)
        row = self._state.features.row(batch)[None, :]
        state = add_in_order(self._state, row, np.array([time]), "micro_batch")
        self._set(state.reaching(Reach.of([batch])))
        return self

    def update_many(self, micro_batches: Any, seconds: Any) -> TimeCost:
        """`update` with several measured micro-batches, in order; returns ``self``.

        All are checked before any is added: one bad observation refuses them all. Otherwise it
        leaves the cost exactly as a loop of `update` would, in every state (each predicted for
        ``fit_error["recent"]``, judged and held by the cost as it stood just before it).
        """
        batches = check_micro_batches(micro_batches)
        times = check_seconds(seconds, len(batches))
        if batches:
            rows = self._state.features.rows(batches)
            state = add_in_order(self._state, rows, times, "micro_batches", "seconds[{}]")
            self._set(state.reaching(Reach.of(batches)))
        return self

    def update_synchronized(self, micro_batches: Any, seconds: Any) -> TimeCost:
        """Refit with one synchronised measurement; returns ``self``.

        ``micro_batches``: one micro-batch per rank (empty: that rank was idle) that ran in
        lockstep; ``seconds``: the time they took together, the slowest member's, attributed to
        the member the cost predicts slowest (ties: the lowest rank) and added as `update` adds
        one. A bad measurement is refused and changes nothing.

        Raises:
            ValueError, TypeError: as `update`, or every member empty (naming
                ``micro_batches``).

        Example:
            >>> cost = TimeCost.fit([[100], [200], [300], [400], [100, 100], [500, 50]],
            ...                     [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265])
            >>> cost.update_synchronized([[250, 250], [], [100]], 0.0516).observations
            7
        """
        unit = check_unit(micro_batches, "micro_batches")
        time = check_second(seconds)
        state = add_synchronized(self._state, [unit], np.array([time]), "micro_batches{}")
        self._set(state.reaching(Reach.of(unit)))
        return self

    def update_synchronized_many(self, units: Any, seconds: Any) -> TimeCost:
        """`update_synchronized` with several units (each a micro-batch per rank) and their
        times, in order; returns ``self``. All are checked before any is added: one bad unit
        refuses them all."""
        checked = check_units(units)
        times = check_seconds(seconds, len(checked), of="units")
        if checked:
            state = add_synchronized(self._state, checked, times, "units[{}]", "seconds[{}]")
            self._set(state.reaching(Reach.of(member for unit in checked for member in unit)))
        return self

    def _set(self, state: FitState) -> None:
        held, self._state = self._state.undetermined(), state
        log_undetermined(logger, held, state.undetermined(), self._half_life)

    # -- use --------------------------------------------------------------------------------

    def __call__(self, lengths: Any) -> np.ndarray:
        """Seconds of each document on its own, ``c_doc + f(L)``, as float64 (a ``cost=``).

        Args:
            lengths: non-negative integer lengths, a sequence or 1-D array; a length of 0 (no
                document) costs 0.

        Raises:
            TypeError, ValueError, OverflowError: lengths that are not non-negative integers
                below ``2**63`` (the message names the position).
        """
        values = as_int64_array(lengths, "lengths")
        if values.size:
            warn(beyond(self._state.reach, document=int(values.max())))
        _, document, first, second = self._state.coefficients().tolist()
        term1, term2 = self._state.features.length_terms(values)
        seconds = term1 * first
        seconds += term2 * second
        seconds += document
        if not values.all():
            seconds[values == 0] = 0.0
        return seconds

    def predict(self, micro_batches: Any) -> np.ndarray:
        """Seconds of each micro-batch, ``c_mb + sum of its documents' costs``, as float64.

        Raises:
            ValueError, TypeError: as `fit` for ``micro_batches`` (each non-empty, positive
                lengths), naming the position.

        Example:
            >>> cost = TimeCost.fit([[100], [200], [300], [400], [100, 100], [500, 50]],
            ...                     [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265])
            >>> cost.predict([[100, 100]]).round(4).tolist()
            [0.0211]
        """
        batches = check_micro_batches(micro_batches)
        if not batches:
            return np.zeros(0, dtype=np.float64)
        reach = Reach.of(batches)
        if reach is not None:
            warn(beyond(self._state.reach, reach.document, reach.micro_batch))
        return self._state.features.rows(batches) @ self._state.coefficients()

    @property
    def coefficients(self) -> dict[str, float]:
        """The fitted coefficients, each >= 0: ``micro_batch`` and ``document`` (seconds each),
        then ``per_token`` and ``per_pair`` (seconds per token and per causal query-key pair),
        or with a model ``linear`` and ``attention`` (seconds per training FLOP of each part;
        with an attention-free model, Mamba say, the same number: one efficiency for every
        FLOP, since its scans grow with the length as its projections do)."""
        values = self._state.coefficients().tolist()
        return dict(zip(self._state.features.names, values, strict=True))

    @property
    def fit_error(self) -> dict[str, float]:
        """Relative errors ``|predicted / measured - 1|``: ``median``, ``p90`` and ``max`` over
        the micro-batches of the last `fit`, ``rms`` over every observation so far, weighted as
        the fit weighs them, and, once an update has added one, ``recent``: the median over the
        last 100 predictions made before their observation was added (by `update`,
        `update_many` or the synchronised forms), so a cost that stops matching the run shows it."""
        error = {**self._last_fit, "rms": self._state.rms()}
        recent = self._state.recent_error()
        if recent is not None:
            error["recent"] = recent
        return error

    @property
    def undetermined(self) -> tuple[str, ...]:
        """The coefficients the observations, as the half-life weighs them, no longer tell apart
        (``()`` after any fit): when recency forgot the micro-batches that did (every recent one
        a single document, say), their combination stays what it was then, never split by a
        guess, and what they still see keeps following them. Logged once, when it starts."""
        return self._state.undetermined()

    @property
    def measured_range(self) -> dict[str, int] | None:
        """``longest_document``, ``longest_micro_batch``: the most tokens observed in one, past
        which predictions extrapolate (`extrapolation`); ``None`` if saved without them."""
        reach = self._state.reach
        if reach is None:
            return None
        return {"longest_document": reach.document, "longest_micro_batch": reach.micro_batch}

    def extrapolation(
        self, *, longest_document: int = 0, micro_batch_tokens: int = 0
    ) -> str | None:
        """What predicting a document of ``longest_document`` tokens, or micro-batches of up
        to ``micro_batch_tokens``, takes past `measured_range`, in words; ``None`` when both are
        within it (or the range is not known). Calling the cost, `predict` and the micro-batch
        planners warn with these words (`seqbalance.TimeCostWarning`)."""
        return beyond(self._state.reach, longest_document, micro_batch_tokens)

    @property
    def model(self) -> ModelCost | None:
        """The `ModelCost` whose FLOPs are the features, or ``None``."""
        return self._state.features.model

    @property
    def half_life(self) -> float | None:
        """The recency half-life in observations, or ``None``."""
        return self._half_life

    @property
    def observations(self) -> int:
        """How many micro-batches the fit and its updates have seen."""
        return self._state.observations

    def crossover_length(self) -> int | None:
        """The smallest length at which a document's attention term takes at least as long as
        its linear term (``b * pairs(L) >= a * L``, or ``beta * attention_flops >= alpha *
        linear_flops``); ``None`` when it never does (no attention coefficient, a model
        whose attention per token is bounded below that, or an attention-free model)."""
        if self._state.features.single:
            return None
        _, _, first, second = self._state.coefficients().tolist()
        return crossover(self._state.features, first, second)

    def describe(self) -> str:
        """A few readable lines: the coefficients, the fit error (``recent`` once updates
        predicted some), what the recent observations no longer determine, and where
        attention dominates."""
        return describe(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value:.4g}" for name, value in self.coefficients.items())
        model = "" if self.model is None else f", model={self.model!r}"
        return f"TimeCost({shown}{model})"

    # -- saving -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the coefficients, the fit error, the model's config (or
        ``None``) and the accumulated state, so `from_dict` gives a `TimeCost` that predicts
        and updates exactly as this one.

        Example:
            >>> import json
            >>> cost = TimeCost.fit([[100], [200], [300], [400], [100, 100], [500, 50]],
            ...                     [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265])
            >>> again = TimeCost.from_dict(json.loads(json.dumps(cost.to_dict())))
            >>> again.coefficients == cost.coefficients
            True
        """
        return saved_dict(self._state, self._half_life, self.fit_error)

    @classmethod
    def from_dict(cls, data: Any) -> TimeCost:
        """The `TimeCost` that `to_dict` saved (this release's format, or an older one); a
        poor fit warns (`TimeCostWarning`), as `fit` does.

        Raises:
            ValueError: a missing or malformed field, named in the message (``model``'s own
                errors name the model field), or fields that disagree with each other
                (``coefficients`` that are not the solution of ``factor``; a ``factor`` or
                ``weight_sum`` that ``observations`` under ``half_life`` do not give; a
                ``model`` whose FLOPs are not the saved ``model_flops``).
            TypeError: ``data`` is not a mapping.
        """
        cost = cls._load(data)
        warn(poor_fit(cost.fit_error))
        return cost

    @classmethod
    def _load(cls, data: Any) -> TimeCost:
        """`from_dict` without its warning of a poor fit, for a caller that says it once."""
        saved = read_saved(data)
        return cls._new(saved.state, saved.last_fit, saved.half_life)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimeCost.from_dict, (self.to_dict(),))
