"""Saving and loading `seqbalance.TimeCost` as JSON-ready dicts: the model's config, and the
checks a loaded dict passes before it becomes a cost."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .._inputs import _describe, as_float, show_number
from ._time_fit import (
    MODEL_NAMES,
    N_COEF,
    PLAIN_NAMES,
    check_half_life,
    column_norms,
    decay_of,
    solve_nonnegative,
)
from .config import _FLAGS
from .model import ModelCost

#: The ``kind`` field of a saved `TimeCost`, and its format version.
KIND, VERSION = "seqbalance.TimeCost", 1
#: Lengths at which a saved model's FLOPs are recorded (inside and beyond usual windows).
MODEL_PROBE = (1, 1000, 100_000, 1 << 22)
#: Relative agreement required between the saved fields that restate each other (rounding
#: over a long run of updates stays far below it).
TOLERANCE = 1e-6


class Saved(NamedTuple):
    """What a saved `TimeCost` holds, checked."""

    model: ModelCost | None
    half_life: float | None
    factor: np.ndarray
    weight_sum: float
    observations: int
    last_fit: dict[str, float]
    #: The saved coefficients, or None to solve them again from the factor.
    coefficients: np.ndarray | None


def model_config(model: ModelCost) -> dict[str, Any]:
    """Every field ``model`` was built from, and the flags that differ from the defaults:
    ``ModelCost(**model_config(model))`` rebuilds it."""
    config = {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in model._fields.items()
    }
    for name, default in _FLAGS.items():
        if getattr(model, name) != default:
            config[name] = getattr(model, name)
    return config


def model_flops(model: ModelCost) -> list[int]:
    """The model's training FLOPs at `MODEL_PROBE`: saved beside its config, so a config that
    was changed (and would give the fitted efficiencies other FLOPs to multiply) is refused."""
    return model.flops(list(MODEL_PROBE))


def _check_model_flops(data: Mapping[str, Any], model: ModelCost) -> None:
    saved = _field(data, "model_flops", list)
    if saved != model_flops(model) or any(isinstance(value, bool) for value in saved):
        raise ValueError(
            "data['model'] does not give the FLOPs the fit was measured with "
            "(data['model_flops']): a changed model needs a new fit"
        )


def _field(data: Mapping[str, Any], key: str, kind: Any) -> Any:
    if key not in data:
        raise ValueError(f"data has no {key!r} (a saved TimeCost has one)")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"data[{key!r}] has the wrong type: {_describe(value)}")
    return value


def _floats(value: Any, key: str, names: tuple[str, ...]) -> np.ndarray:
    """The numbers of a saved mapping ``{name: number}``, finite and >= 0, in ``names`` order."""
    if not isinstance(value, Mapping) or set(value) != set(names):
        raise ValueError(f"data[{key!r}] must map exactly {', '.join(names)} to numbers")
    numbers = []
    for name in names:
        item = value[name]
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ValueError(f"data[{key!r}][{name!r}] must be a number, got {_describe(item)}")
        number = as_float(item)
        if not (math.isfinite(number) and number >= 0):
            raise ValueError(
                f"data[{key!r}][{name!r}] must be finite and >= 0, got {show_number(item)}"
            )
        numbers.append(number)
    return np.array(numbers, dtype=np.float64)


def _factor(rows: list[Any]) -> np.ndarray:
    """``data['factor']``: a square list of lists of finite numbers, upper-triangular part kept."""
    size = N_COEF + 1
    shape = f"data['factor'] must be a {size} x {size} list of lists of finite numbers"
    if len(rows) != size or not all(isinstance(row, list) and len(row) == size for row in rows):
        raise ValueError(shape)
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{shape}; [{i}][{j}] is {_describe(value)}")
            if not math.isfinite(as_float(value)):
                raise ValueError(f"{shape}; [{i}][{j}] is {show_number(value)}")
    return np.triu(np.array(rows, dtype=np.float64))


def _check_weights(
    factor: np.ndarray, weight_sum: float, observations: int, half_life: float | None
) -> None:
    """The weights agree with each other: ``weight_sum`` is what ``observations`` weigh under
    ``half_life``, and the factor's target column holds that sum of weights (its squared norm
    is the weighted count of targets of 1). A factor that is not what a fit accumulated (zeros,
    another run's, edited) fails here instead of predicting as if it were."""
    decay = decay_of(half_life)
    if decay == 1.0:
        expected = float(observations)
    elif decay == 0.0:  # a half-life so short that only the latest observation weighs
        expected = 1.0
    else:
        # Each observation weighs 1 when added and ``decay`` times as much per later one.
        expected = -math.expm1(observations * math.log(decay)) / -math.expm1(math.log(decay))
    if not math.isclose(weight_sum, expected, rel_tol=TOLERANCE):
        raise ValueError(
            f"data['weight_sum'] = {weight_sum!r} is not what {observations} observations weigh "
            f"with half_life {half_life!r} ({expected!r})"
        )
    held = float(np.square(factor[:, N_COEF]).sum())
    if not math.isclose(held, weight_sum, rel_tol=TOLERANCE):
        raise ValueError(
            f"data['factor'] holds the weight of {held!r} observations, not data['weight_sum'] = "
            f"{weight_sum!r}: it is not the factor this fit accumulated"
        )


def _check_coefficients(factor: np.ndarray, coefficients: np.ndarray) -> None:
    """The saved coefficients are the factor's solution (compared by how much each moves the
    predictions, so a coefficient of 1e-13 and one of 1e-3 weigh alike)."""
    solved = solve_nonnegative(factor)
    norms = column_norms(factor[:N_COEF, :N_COEF])
    with np.errstate(over="ignore"):  # a huge coefficient makes the gap inf: refused below
        gap = float(np.abs(norms * (coefficients - solved)).sum())
    if gap > TOLERANCE * max(float(np.abs(norms * solved).sum()), 1e-300):
        raise ValueError(
            "data['coefficients'] are not the fit that data['factor'] holds (edited, or from "
            "another file): remove them to use the factor's, or fit again"
        )


def read_saved(data: Any) -> Saved:
    """``data`` (what `TimeCost.to_dict` returned, e.g. through JSON) checked field by field.

    Raises ``TypeError`` when ``data`` is not a mapping and ``ValueError`` naming the field
    that is missing or malformed.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping (from TimeCost.to_dict), got {_describe(data)}")
    version = data.get("version")
    if data.get("kind") != KIND or type(version) is not int or version != VERSION:
        raise ValueError(
            f"data is not a saved TimeCost: expected kind {KIND!r} version {VERSION}, "
            f"got kind {data.get('kind')!r} version {version!r}"
        )
    model = None
    if data.get("model") is not None:
        config = data["model"]
        if not isinstance(config, Mapping):
            raise ValueError(
                f"data['model'] must be a mapping of config fields or null, got {_describe(config)}"
            )
        try:
            model = ModelCost(**config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data['model']: {exc}") from None
        _check_model_flops(data, model)
    try:
        half_life = check_half_life(data.get("half_life"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"data['half_life']: {exc}") from None
    factor = _factor(_field(data, "factor", list))
    weight_sum = _field(data, "weight_sum", (int, float))
    observations = _field(data, "observations", int)
    if not (isinstance(weight_sum, float) or abs(weight_sum) < 2**63):
        raise ValueError(
            f"data['weight_sum'] must be finite and >= 0, got {show_number(weight_sum)}"
        )
    weight_sum = float(weight_sum)
    if not (math.isfinite(weight_sum) and weight_sum >= 0):
        raise ValueError(f"data['weight_sum'] must be finite and >= 0, got {weight_sum!r}")
    if not N_COEF + 2 <= observations < 2**63:
        raise ValueError(
            f"data['observations'] must be >= {N_COEF + 2} (a fit needs that many) and below "
            f"2**63, got {show_number(observations)}"
        )
    _check_weights(factor, weight_sum, observations, half_life)
    # The last fit's errors cannot be recomputed from the factor (rms can, and is).
    error = _field(data, "fit_error", Mapping)
    keys = ("median", "p90", "max")
    shown = {key: error.get(key) for key in keys}
    last = dict(zip(keys, _floats(shown, "fit_error", keys).tolist(), strict=True))
    names = PLAIN_NAMES if model is None else MODEL_NAMES
    saved = data.get("coefficients")
    coefficients = None if saved is None else _floats(saved, "coefficients", names)
    if coefficients is not None:
        _check_coefficients(factor, coefficients)
    return Saved(model, half_life, np.triu(factor), weight_sum, observations, last, coefficients)
