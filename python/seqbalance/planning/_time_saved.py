"""Saving and loading `seqbalance.TimeCost` as JSON-ready dicts: the model's config, and the
checks a loaded dict passes before it becomes a cost."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .._inputs import _describe
from ._time_fit import MODEL_NAMES, N_COEF, PLAIN_NAMES, check_half_life
from .model_config import _FLAGS
from .model_cost import ModelCost

#: The ``kind`` field of a saved `TimeCost`, and its format version.
KIND, VERSION = "seqbalance.TimeCost", 1


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
        if not (math.isfinite(item) and item >= 0):
            raise ValueError(f"data[{key!r}][{name!r}] must be finite and >= 0, got {item!r}")
        numbers.append(float(item))
    return np.array(numbers, dtype=np.float64)


def read_saved(data: Any) -> Saved:
    """``data`` (what `TimeCost.to_dict` returned, e.g. through JSON) checked field by field.

    Raises ``TypeError`` when ``data`` is not a mapping and ``ValueError`` naming the field
    that is missing or malformed.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping (from TimeCost.to_dict), got {_describe(data)}")
    if data.get("kind") != KIND or data.get("version") != VERSION:
        raise ValueError(
            f"data is not a saved TimeCost: expected kind {KIND!r} version {VERSION}, "
            f"got kind {data.get('kind')!r} version {data.get('version')!r}"
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
    try:
        half_life = check_half_life(data.get("half_life"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"data['half_life']: {exc}") from None
    try:
        factor = np.asarray(_field(data, "factor", list), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"data['factor'] must be a square list of numbers ({exc})") from None
    if factor.shape != (N_COEF + 1, N_COEF + 1) or not np.isfinite(factor).all():
        raise ValueError(
            f"data['factor'] must be a {N_COEF + 1} x {N_COEF + 1} array of finite numbers"
        )
    weight_sum = float(_field(data, "weight_sum", (int, float)))
    observations = _field(data, "observations", int)
    if not (math.isfinite(weight_sum) and weight_sum >= 0):
        raise ValueError(f"data['weight_sum'] must be finite and >= 0, got {weight_sum!r}")
    if observations < 0:
        raise ValueError(f"data['observations'] must be >= 0, got {observations}")
    error = data.get("fit_error")
    keys = ("median", "p90", "max")
    last: dict[str, float] = {}
    if error is not None and not isinstance(error, Mapping):
        raise ValueError(f"data['fit_error'] must be a mapping or null, got {_describe(error)}")
    if error is not None and any(key in error for key in keys):
        shown = {key: error.get(key) for key in keys}
        last = dict(zip(keys, _floats(shown, "fit_error", keys).tolist(), strict=True))
    names = PLAIN_NAMES if model is None else MODEL_NAMES
    saved = data.get("coefficients")
    coefficients = None if saved is None else _floats(saved, "coefficients", names)
    return Saved(model, half_life, np.triu(factor), weight_sum, observations, last, coefficients)
