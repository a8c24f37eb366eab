"""Saving and loading `seqbalance.TimeCost` as JSON-ready dicts: the model's config, and the
checks a loaded dict passes before it becomes a cost.

The format is versioned. `saved_dict` writes the current `VERSION`; `read_saved` reads it and
every older one: an older dict is first brought up to date, one version at a time, by
`UPGRADES` (each fills in what its version lacked, with the value a cost of that version
meant), so the field readers below only ever see the current layout. To add a field: bump
`VERSION`, write the field in `saved_dict`, read and check it in `read_saved` (a malformed
value is a ``ValueError`` naming ``data[field]``), and add ``UPGRADES[old version]`` that gives
older dicts its default.

Versions: 1 (seqbalance 0.2 before synchronised updates); 2 adds ``recent_errors`` (the
relative errors behind ``fit_error["recent"]``, oldest first) and ``undetermined`` (the
coefficients the weighted observations no longer tell apart, whose ``coefficients`` then hold
the values the cost kept; a ``factor`` that leaves others undetermined is refused); 3 adds
``measured_range`` (the longest document and micro-batch observed, in tokens; ``null`` for a
cost upgraded from an older version, which did not record them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .._inputs import _describe, as_float, show_number
from ..errors import argument_error
from ._time_fit import Features, check_half_life, decay_of
from ._time_online import RECENT, FitState
from ._time_solve import N_COEF, analyse, column_norms, solve_nonnegative, unseparated
from ._time_trust import Reach
from .config import _FLAGS
from .model import ModelCost

#: The ``kind`` field of a saved `TimeCost`, and its format version.
KIND, VERSION = "seqbalance.TimeCost", 3
#: Lengths at which a saved model's FLOPs are recorded (inside and beyond usual windows).
MODEL_PROBE = (1, 1000, 100_000, 1 << 22)
#: Relative agreement required between the saved fields that restate each other (rounding
#: over a long run of updates stays far below it).
TOLERANCE = 1e-6


class Saved(NamedTuple):
    """What a saved `TimeCost` holds, checked."""

    state: FitState
    half_life: float | None
    #: The last fit's ``median``, ``p90`` and ``max`` errors.
    last_fit: dict[str, float]


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
        raise argument_error(
            "missing_field", ("data", key), data, field=key, what="a saved TimeCost"
        )
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise argument_error("wrong_field_type", ("data", key), value, shown=_describe(value))
    return value


def _floats(value: Any, key: str, names: tuple[str, ...]) -> np.ndarray:
    """The numbers of a saved mapping ``{name: number}``, finite and >= 0, in ``names`` order."""
    if not isinstance(value, Mapping) or set(value) != set(names):
        raise ValueError(f"data[{key!r}] must map exactly {', '.join(names)} to numbers")
    numbers = []
    for name in names:
        item = value[name]
        loc = ("data", key, name)
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise argument_error(
                "not_allowed", loc, item, expected="a number", shown=_describe(item)
            )
        number = as_float(item)
        if not (math.isfinite(number) and number >= 0):
            raise argument_error("not_finite_or_negative", loc, item, shown=show_number(item))
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


def _check_coefficients(factor: np.ndarray, coefficients: np.ndarray, features: Features) -> None:
    """The saved coefficients are the factor's solution, along every combination the factor
    still determines (compared by how much each moves the predictions, so a coefficient of
    1e-13 and one of 1e-3 weigh alike); along the others they are what the cost kept."""
    solved = solve_nonnegative(factor, features.active, anchor=coefficients)
    norms = column_norms(factor[:N_COEF, :N_COEF])
    with np.errstate(over="ignore"):  # a huge coefficient makes the gap inf: refused below
        gap = float(np.abs(norms * (coefficients - solved)).sum())
    if gap > TOLERANCE * max(float(np.abs(norms * solved).sum()), 1e-300):
        raise ValueError(
            "data['coefficients'] are not the fit that data['factor'] holds (edited, or from "
            "another file): remove them to use the factor's, or fit again"
        )


def _recent(data: Mapping[str, Any], observations: int) -> tuple[float, ...]:
    """``data['recent_errors']``: at most `RECENT` finite non-negative numbers."""
    values = _field(data, "recent_errors", list)
    if len(values) > min(RECENT, observations):
        raise ValueError(
            f"data['recent_errors'] holds {len(values)} errors; a cost keeps at most {RECENT} "
            "(and no more than its observations)"
        )
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"data['recent_errors'][{i}] must be a number, got {_describe(value)}")
        # as_float: an int beyond float64 reads as an infinity, refused here by name.
        if not (math.isfinite(as_float(value)) and value >= 0):
            raise ValueError(
                f"data['recent_errors'][{i}] must be finite and >= 0, got {show_number(value)}"
            )
    return tuple(float(value) for value in values)


#: Version 1 did not record what its factor left undetermined: take the factor's word.
_FROM_FACTOR = object()


def _from_version_1(data: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 had no predictions to remember (no recent errors) and did not say what its
    factor no longer determined."""
    return {**data, "version": 2, "recent_errors": [], "undetermined": _FROM_FACTOR}


def _from_version_2(data: Mapping[str, Any]) -> dict[str, Any]:
    """Version 2 did not record the lengths it was measured on: not known."""
    return {**data, "version": 3, "measured_range": None}


#: ``UPGRADES[v]`` turns a saved dict of version ``v`` into one of version ``v + 1``.
UPGRADES = {1: _from_version_1, 2: _from_version_2}


#: The fields of ``data['measured_range']``.
RANGE_FIELDS = ("longest_document", "longest_micro_batch")


def _reach(data: Mapping[str, Any]) -> Reach | None:
    """``data['measured_range']``: ``null``, or positive int token counts below 2**63, the
    longest document no longer than the longest micro-batch."""
    if "measured_range" not in data:
        raise ValueError("data has no 'measured_range' (a saved TimeCost has one; null if unknown)")
    value = data["measured_range"]
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != set(RANGE_FIELDS):
        raise ValueError(
            f"data['measured_range'] must be null or map exactly {', '.join(RANGE_FIELDS)} to "
            f"token counts, got {_describe(value)}"
        )
    for field in RANGE_FIELDS:
        count = value[field]
        if type(count) is not int or not 0 < count < 2**63:
            raise ValueError(
                f"data['measured_range'][{field!r}] must be a positive int below 2**63, got "
                f"{show_number(count) if isinstance(count, int) else _describe(count)}"
            )
    if value["longest_document"] > value["longest_micro_batch"]:
        raise ValueError(
            "data['measured_range']: the longest document is longer than the longest "
            "micro-batch that held it"
        )
    return Reach(value["longest_document"], value["longest_micro_batch"])


def saved_dict(
    state: FitState, half_life: float | None, fit_error: dict[str, float]
) -> dict[str, Any]:
    """The current version's JSON-ready dict of a cost's state (`TimeCost.to_dict`)."""
    features = state.features
    model = features.model
    return {
        "kind": KIND,
        "version": VERSION,
        "coefficients": dict(zip(features.names, state.coefficients().tolist(), strict=True)),
        "fit_error": fit_error,
        "model": None if model is None else model_config(model),
        "model_flops": None if model is None else model_flops(model),
        "half_life": half_life,
        "observations": state.observations,
        "weight_sum": state.weight_sum,
        "factor": state.factor.tolist(),
        "recent_errors": list(state.recent),
        "undetermined": list(state.undetermined()),
        "measured_range": None
        if state.reach is None
        else dict(zip(RANGE_FIELDS, (state.reach.document, state.reach.micro_batch), strict=True)),
    }


def _current(data: Any) -> Mapping[str, Any]:
    """``data`` in the current layout: checked for its kind and version, older ones upgraded."""
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping (from TimeCost.to_dict), got {_describe(data)}")
    version = data.get("version")
    if (
        data.get("kind") != KIND
        or type(version) is not int
        or not (version == VERSION or version in UPGRADES)
    ):
        raise ValueError(
            f"data is not a saved TimeCost: expected kind {KIND!r} version {VERSION} (or an "
            f"older one: {', '.join(map(str, sorted(UPGRADES)))}), got kind "
            f"{data.get('kind')!r} version {version!r}"
        )
    while version != VERSION:
        data = UPGRADES[version](data)
        version += 1
    return data


def _model(data: Mapping[str, Any]) -> ModelCost | None:
    if data.get("model") is None:
        return None
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
    return model


def _check_undetermined(data: Mapping[str, Any], factor: np.ndarray, features: Features) -> None:
    """``data['undetermined']`` names what the factor leaves undetermined, no more, no less:
    a factor edited into one that determines less is refused rather than loaded."""
    if data.get("undetermined") is _FROM_FACTOR:
        return
    names = _field(data, "undetermined", list)
    if not all(isinstance(name, str) for name in names):
        raise ValueError(f"data['undetermined'] must list coefficient names, got {names!r}")
    held = unseparated(factor, features.names, features.active)
    if sorted(names) != sorted(held):
        raise ValueError(
            f"data['factor'] leaves undetermined {held or 'nothing'}, but "
            f"data['undetermined'] = {names!r}: it is not the factor this cost accumulated"
        )


def _solution(data: Mapping[str, Any], factor: np.ndarray, features: Features) -> Any:
    """The saved coefficients in the fit's coordinates, checked against the factor; ``None``
    (solve the factor) when there are none and the factor determines every coefficient."""
    saved = data.get("coefficients")
    if saved is None:
        if analyse(factor, features.active).null.size:
            raise ValueError(
                "data has no 'coefficients', and data['factor'] no longer determines "
                "every coefficient: the saved coefficients hold the values it kept"
            )
        return None
    coefficients = _floats(saved, "coefficients", features.names)
    solution = coefficients.copy()
    if features.single:
        # One efficiency for both FLOPs parts: the fit solves it in column 2 alone.
        if coefficients[3] != coefficients[2]:
            raise ValueError(
                "data['coefficients'] are not the fit that data['factor'] holds: an "
                "attention-free model has one efficiency, so 'linear' and 'attention' are equal"
            )
        solution[3] = 0.0
    _check_coefficients(factor, solution, features)
    return solution


def read_saved(data: Any) -> Saved:
    """``data`` (what `TimeCost.to_dict` returned, e.g. through JSON; this version or an older
    one) checked field by field.

    Raises ``TypeError`` when ``data`` is not a mapping and ``ValueError`` naming the field
    that is missing or malformed.
    """
    data = _current(data)
    model = _model(data)
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
    recent = _recent(data, observations)
    features = Features(model)
    if features.single and factor[:, 3].any():
        raise ValueError(
            "data['factor'] is not what a fit with this model accumulates: an attention-free "
            "model's fit holds nothing in column 3"
        )
    _check_undetermined(data, factor, features)
    solution = _solution(data, factor, features)
    state = FitState(
        features,
        decay_of(half_life),
        factor,
        weight_sum,
        observations,
        recent,
        solution=solution,
        reach=_reach(data),
    )
    return Saved(state, half_life, last)
