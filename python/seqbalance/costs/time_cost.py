"""`TimeCost`: a ``cost=`` in seconds, fitted to what the GPU measured.

The step waits for its slowest rank's time, and neither tokens nor FLOPs are time: attention
runs at a lower throughput than the GEMMs, and every micro-batch and document carries fixed
costs. A `TimeCost` is fitted to measured micro-batch times (offline with
`seqbalance.profile`, or online from the trainer's own steps with `TimeCost.update`) and then
balances like any other cost.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._inputs import _describe, as_int64_array
from ._time_fit import (
    N_COEF,
    Features,
    add_rows,
    check_half_life,
    check_lengths,
    check_micro_batches,
    check_second,
    check_seconds,
    check_separated,
    crossover,
    decay_of,
    factor_rows,
    solve_nonnegative,
    weighted_rms,
)
from ._time_saved import KIND, VERSION, model_config, model_flops, read_saved
from .model import ModelCost

__all__ = ["TimeCost"]


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
    rest)`` to rounding.

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

    _features: Features
    _half_life: float | None
    _decay: float
    _factor: np.ndarray
    _weight_sum: float
    _observations: int
    _last_fit: dict[str, float]
    _solution: np.ndarray | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "build a TimeCost with TimeCost.fit(micro_batches, seconds), "
            "TimeCost.from_dict(data) or seqbalance.profile(run, max_length=...)"
        )

    @classmethod
    def _new(
        cls,
        model: ModelCost | None,
        half_life: float | None,
        factor: np.ndarray,
        weight_sum: float,
        observations: int,
        last_fit: dict[str, float],
    ) -> TimeCost:
        self = object.__new__(cls)
        self._features = Features(model)
        self._half_life = half_life
        self._decay = decay_of(half_life)
        self._factor = factor
        self._weight_sum = weight_sum
        self._observations = observations
        self._last_fit = last_fit
        self._solution = None
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
        if model is not None and not isinstance(model, ModelCost):
            raise TypeError(f"model must be None or a ModelCost, got {_describe(model)}")
        half = check_half_life(half_life)
        batches = check_micro_batches(micro_batches)
        times = check_seconds(seconds, len(batches))
        if len(batches) < N_COEF + 2:
            raise ValueError(
                f"micro_batches has {len(batches)} measured micro-batches; fitting {N_COEF} "
                f"coefficients needs at least {N_COEF + 2}"
            )
        features = Features(model)
        rows = features.rows(batches)
        weights = decay_of(half) ** np.arange(len(batches) - 1, -1, -1, dtype=np.float64)
        factor = factor_rows(rows, times, weights)
        if not np.isfinite(factor).all():
            raise ValueError(
                "micro_batches and seconds are too far apart in scale to fit in float64 "
                "(lengths near 2**63 or times near 0)"
            )
        check_separated(rows, times, factor, features.names)
        result = cls._new(model, half, factor, float(weights.sum()), len(batches), {})
        errors = np.abs(rows @ result._coefficients() / times - 1.0)
        result._last_fit = {
            "median": float(np.median(errors)),
            "p90": float(np.percentile(errors, 90)),
            "max": float(errors.max()),
        }
        return result

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
        self._commit(self._features.row(batch)[None, :], np.array([time]), "micro_batch")
        return self

    def update_many(self, micro_batches: Any, seconds: Any) -> TimeCost:
        """`update` with several measured micro-batches, in order; returns ``self``.

        All are checked before any is added: one bad observation refuses them all.
        """
        batches = check_micro_batches(micro_batches)
        times = check_seconds(seconds, len(batches))
        if batches:
            self._commit(self._features.rows(batches), times, "micro_batches")
        return self

    def _commit(self, rows: np.ndarray, times: np.ndarray, name: str) -> None:
        factor = None
        try:
            # Plain floats: a handful of rows is faster so than through NumPy calls.
            augmented = [
                [value / time for value in row] + [1.0]
                for row, time in zip(rows.tolist(), times.tolist(), strict=True)
            ]
            if all(math.isfinite(value) for row in augmented for value in row):
                factor = add_rows(self._factor, augmented, self._decay)
        except OverflowError:  # beyond float64: refused below
            factor = None
        if factor is None or not np.isfinite(factor).all():
            raise ValueError(
                f"{name} is too far in scale from the fit to add in float64 "
                "(lengths near 2**63 or times near 0); nothing was changed"
            )
        count = len(times)
        self._factor = factor
        decay = self._decay
        added = float(count) if decay == 1.0 else sum(decay**i for i in range(count))
        self._weight_sum = self._weight_sum * decay**count + added
        self._observations += count
        self._solution = None

    # -- use --------------------------------------------------------------------------------

    def _coefficients(self) -> np.ndarray:
        if self._solution is None:
            self._solution = solve_nonnegative(self._factor)
        return self._solution

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
        _, document, first, second = self._coefficients().tolist()
        term1, term2 = self._features.length_terms(values)
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
        return self._features.rows(batches) @ self._coefficients()

    @property
    def coefficients(self) -> dict[str, float]:
        """The fitted coefficients, each >= 0: ``micro_batch`` and ``document`` (seconds each),
        then ``per_token`` and ``per_pair`` (seconds per token and per causal query-key pair),
        or with a model ``linear`` and ``attention`` (seconds per training FLOP of each part)."""
        values = self._coefficients().tolist()
        return dict(zip(self._features.names, values, strict=True))

    @property
    def fit_error(self) -> dict[str, float]:
        """Relative errors ``|predicted / measured - 1|``: ``median``, ``p90`` and ``max`` over
        the micro-batches of the last `fit`, ``rms`` over every observation so far (updates
        included), weighted as the fit weighs them."""
        rms = weighted_rms(self._factor, self._coefficients(), self._weight_sum)
        return {**self._last_fit, "rms": rms}

    @property
    def model(self) -> ModelCost | None:
        """The `ModelCost` whose FLOPs are the features, or ``None``."""
        return self._features.model

    @property
    def half_life(self) -> float | None:
        """The recency half-life in observations, or ``None``."""
        return self._half_life

    @property
    def observations(self) -> int:
        """How many micro-batches the fit and its updates have seen."""
        return self._observations

    def crossover_length(self) -> int | None:
        """The smallest length at which a document's attention term takes at least as long as
        its linear term (``b * pairs(L) >= a * L``, or ``beta * attention_flops >= alpha *
        linear_flops``); ``None`` when it never does (no attention coefficient, or a model
        whose attention per token is bounded below that)."""
        _, _, first, second = self._coefficients().tolist()
        return crossover(self._features, first, second)

    def describe(self) -> str:
        """A few readable lines: the coefficients, the fit error, where attention dominates."""
        c = self.coefficients
        error = self.fit_error
        model = self.model
        half = "" if self._half_life is None else f", half-life {self._half_life:g} observations"
        lines = [f"TimeCost: fitted to {self._observations:,} measured micro-batches{half}"]
        if model is None:
            lines.append(
                f"seconds = {c['micro_batch']:.4g} per micro-batch + {c['document']:.4g} per "
                f"document + {c['per_token']:.4g} per token + {c['per_pair']:.4g} per causal pair"
            )
        else:
            lines.append(
                f"seconds = {c['micro_batch']:.4g} per micro-batch + {c['document']:.4g} per "
                f"document + {c['linear']:.4g} per linear FLOP + {c['attention']:.4g} per "
                "attention FLOP (training FLOPs of the ModelCost)"
            )
            if c["linear"] > 0 and c["attention"] > 0:
                lines.append(
                    f"effective: {1e-12 / c['linear']:.4g} TFLOP/s linear, "
                    f"{1e-12 / c['attention']:.4g} TFLOP/s attention "
                    f"(attention {c['attention'] / c['linear']:.3g}x the time per FLOP)"
                )
        lines.append(
            f"relative error: median {error['median']:.2%}, p90 {error['p90']:.2%}, max "
            f"{error['max']:.2%} over the last fit; rms {error['rms']:.2%} over every observation"
        )
        crossover = self.crossover_length()
        measured = (
            "attention never takes as long as the linear part"
            if crossover is None
            else f"attention takes as long as the linear part from {crossover:,} tokens"
        )
        if model is not None:
            flops = model.crossover_length()
            measured += "; by FLOPs (ModelCost): " + (
                "never" if flops is None else f"from {flops:,} tokens"
            )
        lines.append(measured)
        return "\n".join(lines)

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
        config = None if self.model is None else model_config(self.model)
        return {
            "kind": KIND,
            "version": VERSION,
            "coefficients": self.coefficients,
            "fit_error": self.fit_error,
            "model": config,
            "model_flops": None if self.model is None else model_flops(self.model),
            "half_life": self._half_life,
            "observations": self._observations,
            "weight_sum": self._weight_sum,
            "factor": self._factor.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> TimeCost:
        """The `TimeCost` that `to_dict` saved.

        Raises:
            ValueError: a missing or malformed field, named in the message (``model``'s own
                errors name the model field), or fields that disagree with each other
                (``coefficients`` that are not the solution of ``factor``; a ``factor`` or
                ``weight_sum`` that ``observations`` under ``half_life`` do not give; a
                ``model`` whose FLOPs are not the saved ``model_flops``).
            TypeError: ``data`` is not a mapping.
        """
        saved = read_saved(data)
        result = cls._new(
            saved.model,
            saved.half_life,
            saved.factor,
            saved.weight_sum,
            saved.observations,
            saved.last_fit,
        )
        result._solution = saved.coefficients
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimeCost.from_dict, (self.to_dict(),))
