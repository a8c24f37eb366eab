"""The numerics behind `seqbalance.TimeCost`: checked observations, their features and the
accumulated least-squares state (solved in ``_time_solve``).

The fit minimises the relative error of every micro-batch: the row of an observation is its
features divided by its measured time, its target 1, its weight 1 (times the recency decay).
What is accumulated is the upper-triangular factor ``R`` of the weighted rows augmented with
the target (``R.T @ R`` is the weighted normal matrix with its right-hand side and the sum of
squared targets): a fixed ``(p + 1) x (p + 1)`` array whatever the number of observations. A
batch fit builds it with one QR factorisation, an update adds a row with ``p + 1`` Givens
rotations (O(p**2)), so a fit followed by updates and one fit on everything give the same
factor up to rounding. Solving from ``R`` rather than from the normal matrix itself keeps the
condition number of the features, not its square.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from typing import Any, cast

import numpy as np

from .._inputs import MAX_VALUE, _describe, as_float, as_int64_array, show_number
from ._time_solve import ALL_ACTIVE, N_COEF, column_norms, unseparated
from .model import ModelCost

#: Lengths searched for the crossover with a model before saying attention never catches up.
LONGEST_SEARCHED = 1 << 62
#: The active columns of an attention-free model: its one length term is column 2.
ONE_LENGTH_TERM = (0, 1, 2)
#: Coefficient names without and with a model (the order of the features).
PLAIN_NAMES = ("micro_batch", "document", "per_token", "per_pair")
MODEL_NAMES = ("micro_batch", "document", "linear", "attention")


def check_model(model: Any) -> None:
    """``model`` is ``None`` or a `ModelCost`."""
    if model is not None and not isinstance(model, ModelCost):
        raise TypeError(f"model must be None or a ModelCost, got {_describe(model)}")


def check_half_life(half_life: Any) -> float | None:
    """``None`` or a positive finite number of observations, as a float."""
    if half_life is None:
        return None
    if isinstance(half_life, (bool, np.bool_)) or not isinstance(
        half_life, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"half_life must be None or a number, got {_describe(half_life)}")
    try:
        value = float(half_life)
    except OverflowError:  # an int beyond float64
        value = math.inf
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"half_life must be positive and finite, got {show_number(half_life)}")
    return value


def decay_of(half_life: float | None) -> float:
    """The factor an observation's weight is multiplied by per later observation."""
    return 1.0 if half_life is None else 0.5 ** (1.0 / half_life)


def check_enough(count: int, name: str, what: str) -> None:
    """At least ``N_COEF + 2`` measured ``what`` in ``name`` for a fit."""
    if count < N_COEF + 2:
        raise ValueError(
            f"{name} has {count} measured {what}; fitting {N_COEF} coefficients needs at least "
            f"{N_COEF + 2}"
        )


def check_lengths(values: Any, name: str) -> np.ndarray:
    """One micro-batch's document lengths: a non-empty 1-D int64 array of positive values."""
    if isinstance(values, (str, bytes, int, float, np.number, np.bool_)) or values is None:
        raise TypeError(f"{name} must be a sequence of document lengths, got {_describe(values)}")
    lengths = as_int64_array(values, name)
    if lengths.size == 0:
        raise ValueError(f"{name} is empty: a micro-batch holds at least one document")
    if not lengths.all():
        position = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"{name}[{position}] = 0: a document length must be positive")
    check_tokens(lengths, name)
    return lengths


def check_tokens(lengths: np.ndarray, name: str) -> None:
    """A micro-batch's tokens fit in int64, as its measured range (`Reach`) and every sum of
    its lengths are held."""
    # A float64 sum errs by far less than its margin below 2**62; only then is it redone exactly.
    if lengths.size > 1 and float(lengths.sum(dtype=np.float64)) >= 2.0**62:
        total = sum(lengths.tolist())
        if total > MAX_VALUE:
            raise ValueError(
                f"{name} holds {total:,} tokens: more than one micro-batch can (2**63 - 1)"
            )


def check_micro_batches(micro_batches: Any, name: str = "micro_batches") -> list[np.ndarray]:
    """Every micro-batch checked by `check_lengths`, named by its position."""
    # A set has no order to pair its micro-batches with the times (nor a recency to weigh).
    if isinstance(micro_batches, (str, bytes, Mapping, Set)) or not hasattr(
        micro_batches, "__iter__"
    ):
        raise TypeError(
            f"{name} must be a sequence of micro-batches (each a sequence of document "
            f"lengths), got {_describe(micro_batches)}"
        )
    if not isinstance(micro_batches, (Sequence, np.ndarray)):
        micro_batches = list(micro_batches)
    return [check_lengths(batch, f"{name}[{i}]") for i, batch in enumerate(micro_batches)]


def check_seconds(
    seconds: Any, count: int, name: str = "seconds", of: str = "micro_batches"
) -> np.ndarray:
    """Measured times: one positive finite float per micro-batch (or per unit of ``of``)."""
    if isinstance(seconds, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of numbers, got {_describe(seconds)}")
    try:
        raw = np.asarray(seconds)
        try:
            values = raw.astype(np.float64)
        except OverflowError:
            # Python ints beyond float64 (NumPy holds them as objects): as infinities, refused
            # below by position, and shown as the ints they are.
            values = np.array([as_float(value) for value in raw.reshape(-1).tolist()])
            values = values.reshape(raw.shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {_describe(seconds)}") from None
    if values.ndim != 1:
        raise ValueError(
            f"{name} must be one number per micro-batch (1-D), got shape {values.shape}"
        )
    if raw.dtype.kind not in "iuf" or not isinstance(seconds, np.ndarray):
        # NumPy reads "0.5" and True as times; every item must be a number, as in `update`.
        for position, value in enumerate(seconds):
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)
            ):
                raise TypeError(f"{name}[{position}] must be a number, got {_describe(value)}")
    if values.size != count:
        raise ValueError(
            f"{name} has {values.size} times but {of} has {count} "
            f"{'micro-batches' if of == 'micro_batches' else 'units'}"
        )
    bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
    if bad.size:
        position = int(bad[0])
        # Times are shown as read (0.0, nan), an int beyond float64 as the int it is.
        shown = show_number(raw[position]) if raw.dtype == object else repr(float(values[position]))
        raise ValueError(f"{name}[{position}] = {shown}: a time must be positive and finite")
    return values


def check_second(seconds: Any, name: str = "seconds") -> float:
    """One measured time, a positive finite number."""
    if isinstance(seconds, (bool, np.bool_)) or not isinstance(
        seconds, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{name} must be a number, got {_describe(seconds)}")
    value = as_float(seconds)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} = {show_number(seconds)}: a time must be positive and finite")
    return value


def attention_free(model: ModelCost) -> bool:
    """Whether ``model``'s attention FLOPs per token are the same at every length: no full or
    sliding attention (Mamba, Mamba-2, Falcon-Mamba, an all-Mamba Bamba, linear attention
    alone), so its scans and convolutions grow with the length exactly as its projections do.
    The attention part per token never decreases with the length, so two lengths decide."""
    return model.per_token(1)["attention"] == model.per_token(LONGEST_SEARCHED)["attention"]


class Features:
    """Per-document features: ``[1, L, pairs(L)]``, or with a model ``[1, linear FLOPs,
    attention FLOPs]`` (training FLOPs of `ModelCost`, split as its `per_token` splits them).

    An attention-free model (`attention_free`) has one length term: both FLOPs parts grow like
    the length, so no measurement can tell their efficiencies apart. Its rows in the fit (`fit_rows`)
    hold all its FLOPs in column 2 and nothing in column 3 (inactive, `active`), and `expand`
    gives both parts the one fitted efficiency: seconds per FLOP of every FLOP."""

    def __init__(self, model: ModelCost | None) -> None:
        self.model = model
        self.names = PLAIN_NAMES if model is None else MODEL_NAMES
        # Training FLOPs per token of the linear part: a constant of the model.
        self._linear = 0.0 if model is None else model.per_token(1)["linear"]
        self.single = model is not None and attention_free(model)
        #: The columns the fit solves for (the others are 0 in every fit row).
        self.active = ONE_LENGTH_TERM if self.single else ALL_ACTIVE

    def fit_rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows the fit accumulates for `rows`' micro-batches (the same rows, except for an
        attention-free model: its FLOPs summed in column 2, column 3 zero)."""
        if not self.single:
            return rows
        merged = rows.copy()
        merged[:, 2] += merged[:, 3]
        merged[:, 3] = 0.0
        return merged

    def expand(self, solution: np.ndarray) -> np.ndarray:
        """The coefficients of `rows` from a solution of `fit_rows` (an attention-free model's
        one efficiency for both FLOPs parts)."""
        if not self.single:
            return solution
        coefficients = solution.copy()
        coefficients[3] = coefficients[2]
        return coefficients

    def length_terms(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two length-dependent features of each document, as float64."""
        values = lengths.astype(np.float64)
        if self.model is None:
            return values, values * (values + 1.0) * 0.5
        linear = self._linear * values
        # The model's exact FLOPs rounded once; attention is the rest (never below 0).
        attention = np.maximum(self.model(lengths) - linear, 0.0)
        return linear, attention

    def row(self, lengths: np.ndarray) -> np.ndarray:
        """The row of one micro-batch (`rows` for one, without the batching overhead)."""
        first, second = self.length_terms(lengths)
        return np.array([1.0, float(lengths.size), first.sum(), second.sum()])

    def rows(self, batches: list[np.ndarray]) -> np.ndarray:
        """One row per micro-batch: ``[1, documents, sum of term 1, sum of term 2]``."""
        sizes = np.array([batch.size for batch in batches], dtype=np.int64)
        flat = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
        return self.rows_of_flat(flat, sizes)

    def rows_of_flat(self, flat: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """`rows` of the micro-batches laid end to end in ``flat`` (int64), ``sizes[i]``
        documents each (every size positive): the same rows, with no Python per micro-batch."""
        first, second = self.length_terms(flat)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        rows = np.empty((len(sizes), N_COEF), dtype=np.float64)
        rows[:, 0] = 1.0
        rows[:, 1] = sizes
        if len(sizes):
            rows[:, 2] = np.add.reduceat(first, starts)
            rows[:, 3] = np.add.reduceat(second, starts)
        return rows


def factor_rows(rows: np.ndarray, seconds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The ``(p + 1) x (p + 1)`` triangular factor of the weighted relative-error rows."""
    augmented = np.empty((rows.shape[0], N_COEF + 1), dtype=np.float64)
    # Values beyond float64 become inf here; the caller refuses a factor that is not finite.
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.sqrt(weights) / seconds
        augmented[:, :N_COEF] = rows * scale[:, None]
        augmented[:, N_COEF] = np.sqrt(weights)
        if not np.isfinite(augmented).all():
            return np.full((N_COEF + 1, N_COEF + 1), np.inf)
        # mode="r" returns the triangular factor alone (numpy's stubs say a QRResult).
        factor = cast(np.ndarray, np.linalg.qr(augmented, mode="r"))
    square = np.zeros((N_COEF + 1, N_COEF + 1), dtype=np.float64)
    square[: factor.shape[0]] = factor
    return square


def check_separated(
    rows: np.ndarray,
    seconds: np.ndarray,
    factor: np.ndarray,
    features: Features,
    name: str = "micro_batches",
) -> None:
    """Refuse a fit whose ``factor`` cannot tell the coefficients apart (`unseparated`), saying
    why: the micro-batches themselves, a half-life that leaves too few of them weighing, or one
    time so far out of proportion that its row drowns every other in the relative-error fit.
    ``rows`` are the fit's rows (`Features.fit_rows`); ``name`` is what they were measured on."""
    names, active = features.names, features.active
    tied = unseparated(factor, names, active)
    if not tied:
        return
    ones = np.ones(len(rows))
    named = f"cannot tell apart the coefficients {', '.join(tied)}"
    if unseparated(factor_rows(rows, ones, ones), names, active):
        raise ValueError(
            f"{name} {named}: the fit would split the time between them by a guess. "
            "Measure micro-batches that differ in their number of documents and in lengths "
            "(seqbalance.profile's default grid does)"
        )
    if not unseparated(factor_rows(rows, seconds, ones), names, active):
        raise ValueError(
            f"{name} weighed by half_life {named}: too few of them keep a weight; "
            "pass a longer half_life (or measure more micro-batches)"
        )
    # Each row's size in the fit, as a power of ten (a quotient could overflow float64).
    size = np.log10(np.sqrt(np.square(rows / column_norms(rows)).sum(axis=1))) - np.log10(seconds)
    worst = int(np.argmax(size))
    raise ValueError(
        f"seconds[{worst}] = {float(seconds[worst])!r} is out of all proportion to the other "
        f"times: the relative-error fit weighs its micro-batch about 1e{size[worst] - np.median(size):.0f} "
        f"times the median one, and beside it the others {named}; check that measurement"
    )


def add_rows(factor: np.ndarray, rows: list[list[float]], decay: float) -> np.ndarray:
    """``factor`` with more rows (weight 1 each), every earlier weight times ``decay`` as each
    row comes; a new array (the last of `add_rows_each`)."""
    if not rows:
        return factor.copy()
    return add_rows_each(factor, rows, decay)[-1]


def add_rows_each(factor: np.ndarray, rows: list[list[float]], decay: float) -> np.ndarray:
    """The factors that adding ``rows`` passes through (weight 1 each, every earlier weight
    times ``decay`` as each row comes): ``result[i]`` is ``factor`` with ``rows[: i + 1]`` added.

    One Givens rotation per column and row: O(p**2) arithmetic per row on plain floats (a 5 x 5
    factor is faster as Python lists than through NumPy calls), no allocation that grows.
    """
    size = N_COEF + 1
    shrink = math.sqrt(decay)
    result = factor.tolist()
    factors = np.empty((len(rows), size, size), dtype=np.float64)
    for index, row in enumerate(rows):
        if decay != 1.0:
            result = [[value * shrink for value in line] for line in result]
        extra = list(row)
        for j in range(size):
            b = extra[j]
            if b == 0.0:
                continue
            pivot = result[j]
            a = pivot[j]
            radius = math.hypot(a, b)
            c, s = a / radius, b / radius
            for i in range(j, size):
                top, bottom = pivot[i], extra[i]
                pivot[i] = c * top + s * bottom
                extra[i] = c * bottom - s * top
        factors[index] = result
    return factors


def weighted_rms(factor: np.ndarray, coefficients: np.ndarray, weight_sum: float) -> float:
    """The root mean square relative error of ``coefficients`` over what ``factor`` holds."""
    if weight_sum <= 0:
        return 0.0
    residual = factor[:N_COEF, :N_COEF] @ coefficients - factor[:N_COEF, N_COEF]
    squared = float(residual @ residual) + float(factor[N_COEF, N_COEF]) ** 2
    return math.sqrt(max(squared, 0.0) / weight_sum)


def crossover(features: Features, first: float, second: float) -> int | None:
    """The smallest length whose second (attention) term times ``second`` reaches its first
    (linear) term times ``first``; ``None`` when none up to 2**62 does. The attention term per
    token never decreases with the length, so a doubling search and a bisection find it."""
    if second == 0.0:
        return None
    if first == 0.0:
        return 1

    def dominates(length: int) -> bool:
        term1, term2 = features.length_terms(np.array([length], dtype=np.int64))
        return bool(term2[0] * second >= term1[0] * first)

    high = 1
    while not dominates(high):
        if high >= LONGEST_SEARCHED:
            return None
        high *= 2
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if dominates(middle):
            high = middle
        else:
            low = middle
    return high
