"""TimeCost.from_dict on hostile dicts: any field (or an item inside one) replaced by any JSON
value is refused with a ValueError or TypeError that names the data, or loads a TimeCost that
predicts exactly as the saved one did: never another model, never another exception."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import ModelCost, TimeCost

MODEL = ModelCost(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    vocab_size=100,
)


def saved(model, half_life):
    rng = np.random.default_rng(9)
    batches = [rng.integers(1, 5000, int(rng.integers(1, 5))).tolist() for _ in range(12)]
    seconds = [1e-3 + sum(1e-5 + 1e-9 * L + 1e-13 * L * L for L in b) for b in batches]
    return TimeCost.fit(batches, seconds, model=model, half_life=half_life).to_dict()


SAVED = {False: saved(None, None), True: saved(MODEL, 7.5)}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


# Plausible numbers half the time: the damage a type check alone lets through.
values = st.floats(0, 1e6) | st.integers(0, 10**6) | json_values


@given(with_model=st.booleans(), where=st.integers(0, 99), value=values, inside=st.booleans())
def test_a_hostile_field_is_refused_by_name_or_changes_nothing(with_model, where, value, inside):
    data = json.loads(json.dumps(SAVED[with_model]))
    key = sorted(data)[where % len(data)]
    if inside and isinstance(data[key], dict) and data[key]:
        data[key][sorted(data[key])[where % len(data[key])]] = value
    elif inside and isinstance(data[key], list) and not data[key]:
        data[key].append(value)  # recent_errors, undetermined: an item where none was
    elif inside and isinstance(data[key], list):
        items = data[key]
        if isinstance(items[0], list):  # the factor
            items = items[where % len(items)]
        items[where // 5 % len(items)] = value
    else:
        data[key] = value
    try:
        loaded = TimeCost.from_dict(data)
    except (ValueError, TypeError) as exc:
        assert "data" in str(exc)
        return
    probe = [1, 100, 4000, 100_000]
    assert loaded(probe).tolist() == TimeCost.from_dict(SAVED[with_model])(probe).tolist()
