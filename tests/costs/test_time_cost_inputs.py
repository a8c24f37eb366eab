"""Numbers a time cost cannot read are refused by name, and a saved cost points to its loader.

Python ints have no bound: ``float(10**400)`` raises a bare ``OverflowError`` ("int too large to
convert to float") that names nothing. Every place that reads a measured time or a saved number
(``TimeCost.fit``'s ``seconds``, ``update``, ``update_many``, ``TimeCost.from_dict``'s fields,
``profile``'s ``timer``) names the argument, the position or the field instead, as it names a
NaN or a negative value.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import TimeCost, profile
from seqbalance._inputs import as_float, show_number

BATCHES = [[100], [200], [300], [400], [100, 100], [500, 50]]
SECONDS = [0.011051, 0.021201, 0.031452, 0.041802, 0.021101, 0.057265]
#: Ints beyond float64 (its largest finite value is just below 2**1024), of either sign.
HUGE = st.integers(min_value=2**1024, max_value=10**1000) | st.integers(
    min_value=-(10**1000), max_value=-(2**1024)
)


def fitted() -> TimeCost:
    return TimeCost.fit(BATCHES, SECONDS)


@given(HUGE, st.integers(0, len(SECONDS) - 1))
def test_fit_names_a_time_beyond_float64(huge, position):
    seconds = list(SECONDS)
    seconds[position] = huge
    with pytest.raises(ValueError) as raised:
        TimeCost.fit(BATCHES, seconds)
    message = str(raised.value)
    assert message.startswith(f"seconds[{position}] = ")
    assert "beyond float64" in message and "a time must be positive and finite" in message


@given(HUGE)
def test_update_and_update_many_name_a_time_beyond_float64(huge):
    cost = fitted()
    before = cost.to_dict()
    with pytest.raises(ValueError, match=r"^seconds = .* \(beyond float64\): a time must be"):
        cost.update([250, 250], huge)
    with pytest.raises(ValueError, match=r"^seconds\[1\] = .* \(beyond float64\)"):
        cost.update_many([[10], [20]], [0.01, huge])
    assert cost.to_dict() == before  # nothing was added


def test_the_message_shows_the_size_not_the_digits():
    with pytest.raises(ValueError) as raised:
        TimeCost.fit(BATCHES, [10**400, *SECONDS[1:]])
    assert str(raised.value) == (
        "seconds[0] = an integer of 401 digits (beyond float64): a time must be positive and finite"
    )
    # Past Python's limit for printing an int, still a message (not str()'s ValueError).
    assert show_number(10**5000).startswith("an integer of more than ")
    assert show_number(-(10**400)) == "a negative integer of 401 digits (beyond float64)"


def test_finite_and_nan_times_read_as_before():
    with pytest.raises(ValueError, match=r"seconds\[3\] = 0\.0: a time"):
        TimeCost.fit(BATCHES, [1, 1, 1, 0, 1, 1])
    with pytest.raises(ValueError, match=r"seconds = nan: a time"):
        fitted().update([1], float("nan"))
    assert as_float(10**400) == math.inf and as_float(-(10**400)) == -math.inf
    assert as_float(2**1023) == float(2**1023)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("coefficients", "per_token"), "data['coefficients']['per_token']"),
        (("coefficients", "micro_batch"), "data['coefficients']['micro_batch']"),
        (("fit_error", "p90"), "data['fit_error']['p90']"),
        (
            ("factor", 1, 2),
            "data['factor'] must be a 5 x 5 list of lists of finite numbers; [1][2]",
        ),
        (("weight_sum",), "data['weight_sum'] must be finite and >= 0"),
        (("observations",), "data['observations'] must be >= 6"),
        (("half_life",), "data['half_life']: half_life must be positive and finite"),
    ],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_a_saved_number_beyond_float64_is_named_by_its_field(path, field, sign):
    data = json.loads(json.dumps(fitted().to_dict()))
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = sign * 10**400
    with pytest.raises(ValueError) as raised:
        TimeCost.from_dict(data)
    message = str(raised.value)
    assert message.startswith(field), message
    assert "digits (beyond float64)" in message and len(message) < 200, message


@pytest.mark.parametrize("reading", [10**400, -(10**400), float("inf")])
def test_profile_names_a_timer_reading_beyond_float64(reading):
    with pytest.raises(ValueError, match=r"^timer returned .*: it must read finite seconds$"):
        profile(lambda lengths: None, max_length=2048, timer=lambda: reading)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_saved_time_cost_passed_as_a_cost_names_from_dict(as_json):
    saved = fitted().to_dict()
    if as_json:
        saved = json.loads(json.dumps(saved))
    calls = [
        lambda: seqbalance.plan_micro_batches([100, 200, 300], 1000, cost=saved),
        lambda: seqbalance.get_seqlen_balanced_partitions([100, 200, 300], 2, False, cost=saved),
        lambda: seqbalance.plan_context_parallel([100, 200, 300], 2, 1000, cost=saved),
        lambda: seqbalance.SeqlenBalancedSampler(cost=saved),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"seqbalance\.TimeCost\.from_dict"):
            call()
    loaded = TimeCost.from_dict(saved)
    assert seqbalance.plan_micro_batches([100, 200, 300], 1000, cost=loaded)


def test_a_config_passed_as_a_cost_names_from_config_and_other_mappings_nothing():
    with pytest.raises(TypeError, match=r"seqbalance\.ModelCost\.from_config"):
        seqbalance.plan_micro_batches([1, 2], 10, cost={"model_type": "llama", "hidden_size": 8})
    with pytest.raises(TypeError) as raised:
        seqbalance.plan_micro_batches([1, 2], 10, cost={"a": 1})
    assert "from_dict" not in str(raised.value) and "from_config" not in str(raised.value)


def test_numpy_times_beyond_float64_cannot_occur_but_object_arrays_are_read():
    # An object array holds Python ints as they are; it is read like the list.
    seconds = np.array([10**400, *SECONDS[1:]], dtype=object)
    with pytest.raises(ValueError, match=r"seconds\[0\] = an integer of 401 digits"):
        TimeCost.fit(BATCHES, seconds)


def test_a_micro_batch_of_more_tokens_than_int64_holds_is_refused_by_name():
    # Adversarial finding: the measured range summed a micro-batch in int64, so four documents
    # of 2**61 tokens wrapped around: longest_micro_batch read 550 (the others'), the warning
    # past the range was silent, and the saved cost would not load ("the longest document is
    # longer than the longest micro-batch that held it").
    batches = [[100], [200], [300], [400], [100, 100], [500, 50]]
    seconds = [1e-3 + 1e-5 * sum(b) + 1e-12 * sum(n * n for n in b) for b in batches]
    cost = TimeCost.fit(batches, seconds)
    before = cost.to_dict()
    wide = [2**61] * 4  # 2**63 tokens
    message = r"\[6\] holds 9,223,372,036,854,775,808 tokens: more than one micro-batch can \("
    with pytest.raises(ValueError, match="micro_batches" + message):
        TimeCost.fit([*batches, wide], [*seconds, 1.0])
    with pytest.raises(ValueError, match=r"micro_batch holds 9,223,372,036,854,775,808 tokens"):
        cost.update(wide, 1.0)
    with pytest.raises(ValueError, match=r"micro_batches\[1\] holds 9,223,"):
        cost.update_many([[5], wide], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"micro_batches\[0\] holds 9,223,"):
        cost.predict([wide])
    with pytest.raises(ValueError, match=r"units\[0\]\[1\] holds 9,223,"):
        cost.update_synchronized_many([[[5], wide]], [1.0])
    assert cost.to_dict() == before
    # One token fewer is a micro-batch (however absurd), and its cost saves and loads.
    cost.update([2**61] * 3 + [2**61 - 1], 1e-3 + 1e-5 * 2**63 + 1e-12 * 2**124)
    assert cost.measured_range == {"longest_document": 2**61, "longest_micro_batch": 2**63 - 1}
    assert TimeCost.from_dict(json.loads(json.dumps(cost.to_dict()))).measured_range == (
        cost.measured_range
    )
