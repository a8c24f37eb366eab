"""TimeCost: the fit recovers a known model, stays non-negative and monotone, updates equal one
fit on everything, refuses bad observations without changing, and saves and loads."""

from __future__ import annotations

import json
import math
import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import ModelCost, TimeCost, TimeCostWarning

# A small decoder with a sliding-window layer and a MoE layer: the FLOPs features carry both.
MODEL = ModelCost(
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    intermediate_size=512,
    vocab_size=1000,
    layer_types=["full_attention", "sliding_attention"],
    sliding_window=1024,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
)


def pairs(length: int) -> float:
    return length * (length + 1) / 2


def true_time(batch, coefficients, model=None):
    """The spec's model of one micro-batch, written out per document (the oracle)."""
    c_mb, c_doc, first, second = coefficients
    total = c_mb
    for length in batch:
        if model is None:
            total += c_doc + first * length + second * pairs(length)
        else:
            linear = model.per_token(length)["linear"] * length
            attention = model.per_token(length)["attention"] * length
            total += c_doc + first * linear + second * attention
    return total


def design(rng, count, longest=200_000):
    """Micro-batches of 1..8 documents, lengths log-uniform up to ``longest``."""
    batches = []
    for _ in range(count):
        docs = int(rng.integers(1, 9))
        lengths = np.exp(rng.uniform(math.log(16), math.log(longest), size=docs)).astype(int)
        batches.append([max(1, int(v)) for v in lengths])
    return batches


coefficient_sets = st.tuples(
    st.floats(1e-4, 1e-2),  # per micro-batch
    st.floats(1e-6, 1e-4),  # per document
    st.floats(1e-10, 1e-8),  # per token
    st.floats(1e-15, 1e-12),  # per causal pair
)


# -- recovery --------------------------------------------------------------------------------


@given(coefficients=coefficient_sets, seed=st.integers(0, 2**32 - 1))
def test_a_fit_to_exact_data_recovers_the_model(coefficients, seed):
    rng = np.random.default_rng(seed)
    batches = design(rng, 40)
    seconds = [true_time(b, coefficients) for b in batches]
    cost = TimeCost.fit(batches, seconds)
    fitted = cost.coefficients
    for name, expected in zip(fitted, coefficients, strict=True):
        assert fitted[name] == pytest.approx(expected, rel=1e-5), name
    assert cost.fit_error["max"] < 1e-9


@given(
    coefficients=coefficient_sets,
    seed=st.integers(0, 2**32 - 1),
    noise=st.floats(0.001, 0.02),
)
def test_a_fit_to_noisy_data_predicts_new_micro_batches(coefficients, seed, noise):
    rng = np.random.default_rng(seed)
    batches = design(rng, 120)
    seconds = [true_time(b, coefficients) * (1 + rng.uniform(-noise, noise)) for b in batches]
    cost = TimeCost.fit(batches, seconds)
    fresh = design(rng, 200)
    truth = np.array([true_time(b, coefficients) for b in fresh])
    errors = np.abs(cost.predict(fresh) / truth - 1)
    # The estimate averages the noise out: its error stays well inside the noise itself.
    assert np.median(errors) <= noise
    assert errors.max() <= 1.5 * noise
    # The fit's own error is the noise it saw.
    assert cost.fit_error["max"] <= 1.5 * noise


@given(seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.01))
def test_a_fit_with_a_model_recovers_the_two_efficiencies(seed, noise):
    rng = np.random.default_rng(seed)
    # Seconds per training FLOP: ~400 TFLOP/s for the GEMMs, 2.4x slower for attention.
    coefficients = (2e-3, 3e-5, 1 / 400e12, 2.4 / 400e12)
    # A small model's linear FLOPs are a small part of each time, so its efficiency is the
    # least determined coefficient: 200 observations pin it down (60 left a held-out error of
    # 1.56x the noise for seed 919).
    batches = design(rng, 200, longest=64_000)
    seconds = [
        true_time(b, coefficients, MODEL) * (1 + rng.uniform(-noise, noise)) for b in batches
    ]
    cost = TimeCost.fit(batches, seconds, model=MODEL)
    assert set(cost.coefficients) == {"micro_batch", "document", "linear", "attention"}
    fresh = design(rng, 100, longest=64_000)
    truth = np.array([true_time(b, coefficients, MODEL) for b in fresh])
    errors = np.abs(cost.predict(fresh) / truth - 1)
    assert np.median(errors) <= noise + 1e-9
    assert errors.max() <= 1.5 * noise + 1e-9
    if noise == 0:
        assert cost.coefficients["attention"] == pytest.approx(coefficients[3], rel=1e-6)


def test_lengths_up_to_a_million_and_milliseconds_to_seconds_fit_accurately():
    rng = np.random.default_rng(7)
    coefficients = (1e-3, 2e-5, 2e-9, 2e-11)
    batches = design(rng, 50, longest=1_000_000) + [[1], [2, 3], [1_000_000]]
    seconds = [true_time(b, coefficients) for b in batches]
    assert min(seconds) < 2e-3 and max(seconds) > 3
    cost = TimeCost.fit(batches, seconds)
    assert cost.fit_error["max"] < 1e-9
    for name, expected in zip(cost.coefficients, coefficients, strict=True):
        assert cost.coefficients[name] == pytest.approx(expected, rel=1e-7)


def test_coefficients_stay_non_negative_when_the_best_unconstrained_fit_is_not():
    # Times that fall with the length: least squares wants a negative per-token cost.
    batches = [[100], [200], [400], [800], [1600], [3200], [100, 100]]
    seconds = [0.010, 0.009, 0.008, 0.007, 0.006, 0.005, 0.012]
    cost = TimeCost.fit(batches, seconds)
    assert all(value >= 0 for value in cost.coefficients.values())
    assert cost.coefficients["per_token"] == 0 and cost.coefficients["per_pair"] == 0
    # The best non-negative fit: a constant per micro-batch and per document.
    unconstrained = np.linalg.lstsq(
        np.array([[1, len(b)] for b in batches]) / np.array(seconds)[:, None],
        np.ones(len(batches)),
        rcond=None,
    )[0]
    assert [cost.coefficients["micro_batch"], cost.coefficients["document"]] == pytest.approx(
        np.maximum(unconstrained, 0), rel=1e-9, abs=1e-12
    )


# -- predictions -------------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32 - 1),
    times=st.lists(st.floats(1e-3, 10.0), min_size=6, max_size=30),
    probe=st.lists(st.integers(0, 10**7), min_size=1, max_size=50),
    with_model=st.booleans(),
)
def test_predictions_are_non_negative_and_monotone_in_length(seed, times, probe, with_model):
    # Any measurements at all, even ones no model explains.
    rng = np.random.default_rng(seed)
    batches = design(rng, len(times))
    cost = TimeCost.fit(batches, times, model=MODEL if with_model else None)
    assert all(value >= 0 and math.isfinite(value) for value in cost.coefficients.values())
    ordered = np.sort(np.array(probe, dtype=np.int64))
    seconds = cost(ordered)
    assert seconds.dtype == np.float64 and (seconds >= 0).all()
    assert (np.diff(seconds) >= 0).all()
    assert (cost.predict(batches) >= 0).all()


def test_call_and_predict_follow_the_formula():
    rng = np.random.default_rng(3)
    batches = design(rng, 30)
    cost = TimeCost.fit(batches, [0.01 * len(b) + 1e-7 * sum(b) for b in batches])
    c = cost.coefficients
    lengths = [0, 1, 5000, 123_456]
    expected = [0.0] + [
        c["document"] + c["per_token"] * L + c["per_pair"] * pairs(L) for L in lengths[1:]
    ]
    assert cost(lengths).tolist() == pytest.approx(expected, rel=1e-12)
    assert cost.predict([[1, 5000], [123_456]]).tolist() == pytest.approx(
        [c["micro_batch"] + expected[1] + expected[2], c["micro_batch"] + expected[3]], rel=1e-12
    )


def test_predict_refuses_an_empty_micro_batch_by_position():
    rng = np.random.default_rng(3)
    batches = design(rng, 8)
    cost = TimeCost.fit(batches, [0.01 * len(b) for b in batches])
    with pytest.raises(ValueError, match=r"micro_batches\[1\] is empty"):
        cost.predict([[5], []])
    assert cost.predict([]).shape == (0,)


def test_fit_error_is_the_relative_error_of_the_fit():
    rng = np.random.default_rng(11)
    batches = design(rng, 50)
    seconds = [
        true_time(b, (1e-3, 1e-5, 1e-9, 1e-14)) * (1 + rng.uniform(-0.05, 0.05)) for b in batches
    ]
    cost = TimeCost.fit(batches, seconds)
    errors = np.abs(cost.predict(batches) / np.array(seconds) - 1)
    error = cost.fit_error
    assert set(error) == {"median", "p90", "max", "rms"}
    assert error["median"] == pytest.approx(np.median(errors), rel=1e-9)
    assert error["p90"] == pytest.approx(np.percentile(errors, 90), rel=1e-9)
    assert error["max"] == pytest.approx(errors.max(), rel=1e-9)
    assert error["rms"] == pytest.approx(math.sqrt(np.mean(errors**2)), rel=1e-6)


def test_describe_names_the_crossover_and_the_flops_crossover():
    rng = np.random.default_rng(5)
    batches = design(rng, 30)
    # a = 2.000025e-9 s/token, b = 1e-13 s/pair: b * (L + 1) / 2 >= a from L + 1 >= 2a/b =
    # 40,000.5, so from L = 40,000. The true crossover sits half a token from either integer
    # boundary: a fitted b/a off by less than 1.25e-5 (0.5 / 40,000.5) relative still gives
    # 40,000, and a fit to exact times is within 1e-9 (held below), whatever the CPU's
    # BLAS rounds. (2e-9 put it on the boundary: 39,999 or 40,000 by the last bits.)
    a, b = 2.000025e-9, 1e-13
    cost = TimeCost.fit(batches, [true_time(x, (1e-3, 1e-5, a, b)) for x in batches])
    fitted = cost.coefficients
    assert fitted["per_pair"] / fitted["per_token"] == pytest.approx(b / a, rel=1e-9)
    assert cost.crossover_length() == 40_000
    assert "from 40,000 tokens" in cost.describe()
    with_model = TimeCost.fit(
        batches, [true_time(x, (1e-3, 1e-5, 1e-15, 1e-15), MODEL) for x in batches], model=MODEL
    )
    # Equal seconds per FLOP: the time crossover is the FLOPs crossover. It is not on a
    # boundary either: attention / linear FLOPs per token is 1 + 5.6e-5 at MODEL's crossover
    # (2,249) and 1 - 2.6e-4 one token below, so a fitted attention / linear coefficient
    # within 1e-5 of 1 keeps it; the fit is within 1e-9.
    crossing = MODEL.crossover_length()
    for length, side in ((crossing, 1), (crossing - 1, -1)):
        flops = MODEL.per_token(length)
        assert side * (flops["attention"] / flops["linear"] - 1) > 1e-5, length
    fitted = with_model.coefficients
    assert fitted["attention"] / fitted["linear"] == pytest.approx(1.0, rel=1e-9)
    assert with_model.crossover_length() == crossing
    assert f"by FLOPs (ModelCost): from {crossing:,} tokens" in with_model.describe()


# -- online updates ----------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32 - 1),
    split=st.integers(6, 40),
    half_life=st.one_of(st.none(), st.floats(1.0, 100.0)),
    one_by_one=st.booleans(),
)
def test_fit_then_update_equals_one_fit_on_everything(seed, split, half_life, one_by_one):
    rng = np.random.default_rng(seed)
    batches = design(rng, 40)
    seconds = [
        true_time(b, (1e-3, 1e-5, 1e-9, 1e-14)) * (1 + rng.uniform(-0.03, 0.03)) for b in batches
    ]
    whole = TimeCost.fit(batches, seconds, half_life=half_life)
    online = TimeCost.fit(batches[:split], seconds[:split], half_life=half_life)
    if one_by_one:
        for batch, time in zip(batches[split:], seconds[split:], strict=True):
            online.update(batch, time)
    else:
        online.update_many(batches[split:], seconds[split:])
    assert online.observations == whole.observations == 40
    probe = [1, 100, 10_000, 1_000_000]
    assert online(probe) == pytest.approx(whole(probe), rel=1e-7)
    assert online.fit_error["rms"] == pytest.approx(whole.fit_error["rms"], rel=1e-6, abs=1e-12)


def test_half_life_follows_a_run_that_changes():
    rng = np.random.default_rng(2)
    batches = design(rng, 400)
    before, after = (1e-3, 1e-5, 1e-9, 1e-14), (1e-3, 1e-5, 2e-9, 2e-14)
    cost = TimeCost.fit(batches[:20], [true_time(b, before) for b in batches[:20]], half_life=10)
    cost.update_many(batches[20:], [true_time(b, after) for b in batches[20:]])
    # After 380 observations the first 20 weigh 2**-38 of the latest: the new kernel's times.
    assert cost.coefficients["per_token"] == pytest.approx(2e-9, rel=1e-6)
    steady = TimeCost.fit(batches[:20], [true_time(b, before) for b in batches[:20]])
    steady.update_many(batches[20:], [true_time(b, after) for b in batches[20:]])
    assert steady.fit_error["rms"] > 1e-3  # without recency weighting it averages the two


BAD_UPDATES = [
    ([], 0.1, ValueError, r"micro_batch is empty"),
    ([10, 0], 0.1, ValueError, r"micro_batch\[1\] = 0"),
    ([10, -3], 0.1, ValueError, r"micro_batch\[1\] must be >= 0"),
    ([10.5], 0.1, TypeError, r"micro_batch\[0\] must be an integer"),
    ([10], 0.0, ValueError, r"seconds = 0.0: a time must be positive and finite"),
    ([10], -1.0, ValueError, r"seconds = -1.0"),
    ([10], float("nan"), ValueError, r"seconds = nan"),
    ([10], float("inf"), ValueError, r"seconds = inf"),
    ([10], "1", TypeError, r"seconds must be a number"),
    (5, 0.1, TypeError, r"micro_batch must be a sequence"),
    ([2**62], 1e-300, ValueError, r"too far in scale"),
]


@pytest.mark.parametrize(("batch", "seconds", "error", "message"), BAD_UPDATES)
def test_a_refused_update_changes_nothing(batch, seconds, error, message):
    rng = np.random.default_rng(1)
    batches = design(rng, 12)
    cost = TimeCost.fit(batches, [0.01 + 1e-7 * sum(b) for b in batches], half_life=5)
    before = cost.to_dict()
    with pytest.raises(error, match=message):
        cost.update(batch, seconds)
    assert cost.to_dict() == before


@given(bad_at=st.integers(0, 4), kind=st.sampled_from(["empty", "zero", "time", "short"]))
def test_a_refused_update_many_changes_nothing(bad_at, kind):
    rng = np.random.default_rng(4)
    batches = design(rng, 12)
    cost = TimeCost.fit(batches, [0.01 + 1e-7 * sum(b) for b in batches])
    before = cost.to_dict()
    more, seconds = design(rng, 5), [0.02] * 5
    if kind == "empty":
        more[bad_at] = []
    elif kind == "zero":
        more[bad_at] = [*more[bad_at], 0]
    elif kind == "time":
        seconds[bad_at] = -0.5
    else:
        seconds = seconds[:bad_at]
    with pytest.raises(ValueError, match=r"micro_batches|seconds"):
        cost.update_many(more, seconds)
    assert cost.to_dict() == before


def test_update_many_refuses_times_that_are_not_numbers():
    rng = np.random.default_rng(4)
    batches = design(rng, 12)
    cost = TimeCost.fit(batches, [0.01 + 1e-7 * sum(b) for b in batches])
    before = cost.to_dict()
    with pytest.raises(TypeError, match=r"seconds\[1\] must be a number, got '0.02'"):
        cost.update_many(design(rng, 2), [0.02, "0.02"])
    assert cost.to_dict() == before


# -- errors of fit -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batches", "seconds", "keywords", "error", "message"),
    [
        ([[1]] * 5, [1.0] * 5, {}, ValueError, r"has 5 measured micro-batches; .* at least 6"),
        ([[1]] * 6, [1.0] * 5, {}, ValueError, r"seconds has 5 times but micro_batches has 6"),
        ([[1], [2], [], [3], [4], [5]], [1.0] * 6, {}, ValueError, r"micro_batches\[2\] is empty"),
        ([[1], [2, 0]] + [[3]] * 4, [1.0] * 6, {}, ValueError, r"micro_batches\[1\]\[1\] = 0"),
        ([[1]] * 6, [1, 1, 1, 1, float("nan"), 1], {}, ValueError, r"seconds\[4\] = nan"),
        ([[1]] * 6, [1, 1, 1, 0, 1, 1], {}, ValueError, r"seconds\[3\] = 0.0"),
        ([[1]] * 6, [[1.0]] * 6, {}, ValueError, r"seconds must be one number per micro-batch"),
        ([[1]] * 6, [1.0] * 6, {"half_life": 0}, ValueError, r"half_life must be positive"),
        ([[1]] * 6, [1.0] * 6, {"half_life": True}, TypeError, r"half_life must be None or a"),
        ([[1]] * 6, [1.0] * 6, {"half_life": 10**400}, ValueError, r"half_life must be positive"),
        ([[1]] * 6, [1.0] * 6, {"model": "llama"}, TypeError, r"model must be None or a ModelCost"),
        ("abc", [1.0] * 3, {}, TypeError, r"micro_batches must be a sequence"),
        # Iterated in an order of its own: the times would pair with the wrong micro-batches.
        ({(i,) for i in range(1, 7)}, [1.0] * 6, {}, TypeError, r"micro_batches must be a seq"),
        # NumPy would read these as 1.0 and 0.5 seconds; update() refuses them, so does fit.
        ([[1]] * 6, [True] + [1.0] * 5, {}, TypeError, r"seconds\[0\] must be a number"),
        ([[1]] * 6, [1.0] * 5 + ["0.5"], {}, TypeError, r"seconds\[5\] must be a number"),
        ([[1]] * 6, np.ones(6, dtype=bool), {}, TypeError, r"seconds\[0\] must be a number"),
    ],
)
def test_fit_refuses_bad_input_by_name(batches, seconds, keywords, error, message):
    with pytest.raises(error, match=message):
        TimeCost.fit(batches, seconds, **keywords)


ALL_SLIDING = ModelCost(
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=8,
    intermediate_size=512,
    vocab_size=1000,
    layer_types=["sliding_attention"] * 2,
    sliding_window=64,
)


@pytest.mark.parametrize(
    ("batches", "keywords", "tied"),
    [
        # Nothing tells any coefficient from another: every micro-batch is the same.
        ([[1000]] * 10, {}, "micro_batch, document, per_token, per_pair"),
        ([[1]] * 5 + [[10**6]] * 5, {}, "micro_batch, document, per_token, per_pair"),
        # One document per micro-batch: its cost and the micro-batch's are one column.
        ([[2**i] for i in range(4, 16)], {}, "micro_batch, document"),
        # Every micro-batch packs the same tokens: per micro-batch and per token are one column.
        (
            [[4096], [2048] * 2, [1024] * 4, [3000, 1096], [4000, 96], [2000, 1000, 1096]],
            {},
            "micro_batch, per_token",
        ),
        # Beyond an all-sliding model's window, attention FLOPs are affine in the length.
        (
            [[100 * i] * j for i in range(2, 6) for j in (1, 2)],
            {"model": ALL_SLIDING},
            "document, linear, attention",
        ),
    ],
)
def test_fit_refuses_data_that_cannot_tell_the_coefficients_apart(batches, keywords, tied):
    seconds = [true_time(b, (1e-3, 1e-5, 1e-9, 1e-13), keywords.get("model")) for b in batches]
    with pytest.raises(
        ValueError, match=rf"micro_batches cannot tell apart the coefficients {tied}:"
    ):
        TimeCost.fit(batches, seconds, **keywords)


def test_fit_says_when_the_half_life_or_one_time_is_what_cannot_be_fitted():
    batches = design(np.random.default_rng(3), 12, longest=100_000)
    seconds = [true_time(b, (1e-3, 1e-5, 1e-9, 1e-13)) for b in batches]
    # So short that only the last observation weighs.
    with pytest.raises(ValueError, match=r"weighed by half_life cannot tell apart .* longer half"):
        TimeCost.fit(batches, seconds, half_life=1e-3)
    # One time absurdly small: divided by it, its row drowns every other (and once overflowed
    # the column norms into a wrong verdict on the micro-batches).
    for absurd in (1e-20, 1e-150, 1e-300):
        wrong = [*seconds[:3], absurd, *seconds[4:]]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match=r"seconds\[3\] = 1e-\d+ is out of all proportion"):
                TimeCost.fit(batches, wrong)
    # A time a million times too small is still an observation the fit can weigh.
    assert TimeCost.fit(batches, [*seconds[:3], seconds[3] * 1e-6, *seconds[4:]]).observations == 12


def test_the_constructor_points_at_fit():
    with pytest.raises(TypeError, match=r"TimeCost.fit"):
        TimeCost()


# -- saving ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [None, MODEL])
@pytest.mark.parametrize("half_life", [None, 7.5])
def test_json_and_pickle_round_trips_keep_predictions_and_updates(model, half_life):
    rng = np.random.default_rng(9)
    batches = design(rng, 30, longest=50_000)
    seconds = [
        true_time(b, (1e-3, 1e-5, 1e-15, 3e-15), MODEL) * (1 + rng.uniform(-0.02, 0.02))
        for b in batches
    ]
    cost = TimeCost.fit(batches, seconds, model=model, half_life=half_life)
    text = json.dumps(cost.to_dict())
    copies = [TimeCost.from_dict(json.loads(text)), pickle.loads(pickle.dumps(cost))]
    probe = [1, 77, 4096, 50_000]
    for copy in copies:
        assert copy.coefficients == cost.coefficients
        assert copy.fit_error == cost.fit_error
        assert copy.describe() == cost.describe()
        assert copy(probe).tolist() == cost(probe).tolist()
        assert (copy.model is None) == (model is None)
        if model is not None:
            assert copy.model.flops(probe) == model.flops(probe)
    more = design(rng, 5, longest=50_000)
    for copy in [cost, *copies]:
        copy.update_many(more, [0.05] * 5)
    assert copies[0].coefficients == cost.coefficients == copies[1].coefficients


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda d: d.update(kind="other"), ValueError, r"not a saved TimeCost"),
        (lambda d: d.pop("factor"), ValueError, r"data has no 'factor'"),
        (lambda d: d.update(factor=[[1.0]]), ValueError, r"data\['factor'\] must be a 5 x 5"),
        (lambda d: d["coefficients"].update(per_token=-1.0), ValueError, r"per_token'\] must be"),
        (lambda d: d["coefficients"].pop("per_pair"), ValueError, r"data\['coefficients'\] must"),
        (lambda d: d.update(model={"hidden_size": 0}), ValueError, r"data\['model'\]: hidden_size"),
        (lambda d: d.update(half_life=-2), ValueError, r"data\['half_life'\]"),
        # 0.5 ** (1 / 1e-300) is 0: no log of it (was a bare 'math domain error').
        (lambda d: d.update(half_life=1e-300), ValueError, r"weight_sum'\] = 8.0 is not what"),
        (lambda d: d.update(observations=-1), ValueError, r"observations'\] must be >= 6"),
        (lambda d: d.update(observations=0, weight_sum=0), ValueError, r"observations'\] must be"),
        (lambda d: d.update(observations=10**400), ValueError, r"observations'\] must be"),
        (lambda d: d.update(weight_sum=10**400), ValueError, r"weight_sum'\] must be finite"),
        (lambda d: d.update(weight_sum=3.0), ValueError, r"weight_sum'\] = 3.0 is not what 8"),
        (lambda d: d.update(version=True), ValueError, r"not a saved TimeCost"),
        # fit_error always holds the last fit's median, p90 and max (the spec's keys).
        (lambda d: d.pop("fit_error"), ValueError, r"data has no 'fit_error'"),
        (lambda d: d.update(fit_error=None), ValueError, r"data\['fit_error'\] has the wrong"),
        (lambda d: d.update(fit_error={"rms": 0.1}), ValueError, r"fit_error'\]\['median'\]"),
        # Coefficients that are not the factor's solution would predict until the first update.
        (lambda d: d["coefficients"].update(per_token=1.0), ValueError, r"are not the fit"),
        (lambda d: d["coefficients"].update(per_pair=1e300), ValueError, r"are not the fit"),
        # A factor of zeros (or bools, or strings NumPy would parse) is not what a fit holds.
        (lambda d: d.update(factor=[[0.0] * 5] * 5), ValueError, r"holds the weight of 0.0"),
        (lambda d: d.update(factor=[[True] * 5] * 5), ValueError, r"\[0\]\[0\] is True"),
        (lambda d: d["factor"][1].__setitem__(2, "7"), ValueError, r"\[1\]\[2\] is '7'"),
        (lambda d: d["factor"][4].__setitem__(4, 1e30), ValueError, r"holds the weight of"),
    ],
)
def test_from_dict_refuses_a_damaged_dict_by_field(change, error, message):
    rng = np.random.default_rng(9)
    batches = design(rng, 8)
    data = TimeCost.fit(batches, [0.01 * len(b) for b in batches]).to_dict()
    change(data)
    with pytest.raises(error, match=message):
        TimeCost.from_dict(data)
    with pytest.raises(TypeError, match=r"data must be a mapping"):
        TimeCost.from_dict([1, 2])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # The efficiencies were measured against this model's FLOPs: another model is refused.
        (lambda d: d["model"].update(vocab_size=1), r"does not give the FLOPs"),
        (lambda d: d["model"].update(recompute=True), r"does not give the FLOPs"),
        (lambda d: d["model"].update(sliding_window=512), r"does not give the FLOPs"),
        (lambda d: d.pop("model_flops"), r"data has no 'model_flops'"),
        (lambda d: d.update(model_flops=None), r"data\['model_flops'\] has the wrong type"),
        (lambda d: d["model_flops"].__setitem__(0, True), r"does not give the FLOPs"),
    ],
)
def test_from_dict_refuses_a_changed_model(change, message):
    rng = np.random.default_rng(9)
    batches = design(rng, 12, longest=50_000)
    seconds = [true_time(b, (1e-3, 1e-5, 1e-15, 3e-15), MODEL) for b in batches]
    data = json.loads(json.dumps(TimeCost.fit(batches, seconds, model=MODEL).to_dict()))
    assert TimeCost.from_dict(data).model.flops([5]) == MODEL.flops([5])
    change(data)
    with pytest.raises(ValueError, match=message):
        TimeCost.from_dict(data)


@given(
    row=st.integers(0, 4),
    column=st.integers(0, 4),
    scale=st.floats(0.0, 10.0).filter(lambda v: abs(v - 1.0) > 1e-3),
    half_life=st.sampled_from([None, 7.5]),
)
def test_a_changed_factor_is_refused_or_changes_nothing(row, column, scale, half_life):
    """from_dict never turns a damaged factor into another model: it refuses it, or (an entry
    below the diagonal, which the fit never uses) predicts exactly as before."""
    rng = np.random.default_rng(9)
    batches = design(rng, 12)
    cost = TimeCost.fit(
        batches, [true_time(b, (1e-3, 1e-5, 1e-9, 1e-13)) for b in batches], half_life=half_life
    )
    data = json.loads(json.dumps(cost.to_dict()))
    data["factor"][row][column] *= scale
    probe = [1, 100, 10_000, 200_000]
    try:
        loaded = TimeCost.from_dict(data)
    except ValueError as exc:
        assert "data['" in str(exc)
        return
    assert loaded(probe).tolist() == cost(probe).tolist()
    assert loaded.update([5, 6], 0.01).coefficients == cost.update([5, 6], 0.01).coefficients


BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 100,
}
CONFIGS = {
    "sliding": {"sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"] * 2},
    "qwen2-off": {"sliding_window": 64, "use_sliding_window": False, "max_window_layers": 2},
    "mla": {
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
    },
    "moe": {
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
    },
    "linear": {
        "layer_types": ["linear_attention", "full_attention"] * 2,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 16,
    },
}
OVERRIDES = [
    {},
    {"recompute": True},
    {"include_head": False},
    {"gated_mlp": False},
    {"causal": False},
]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("overrides", OVERRIDES, ids=lambda o: ",".join(o) or "defaults")
def test_the_model_travels_whole_through_json_and_pickle(name, overrides):
    """A model built from a config with overrides comes back identical: the same FLOPs at
    every length (inside and beyond a window), the same repr, the same seconds and updates."""
    try:
        model = ModelCost.from_config({**BASE, **CONFIGS[name]}, **overrides)
    except ValueError:
        assert name == "sliding" and overrides == {"causal": False}  # refused by ModelCost
        return
    rng = np.random.default_rng(11)
    batches = design(rng, 20, longest=5_000)
    seconds = [true_time(b, (1e-3, 1e-5, 1e-12, 3e-12), model) for b in batches]
    cost = TimeCost.fit(batches, seconds, model=model)
    probe = [1, 63, 64, 65, 1000, 100_000]
    for copy in (
        TimeCost.from_dict(json.loads(json.dumps(cost.to_dict()))),
        pickle.loads(pickle.dumps(cost)),
    ):
        assert repr(copy.model) == repr(model)
        assert copy.model.flops(probe) == model.flops(probe)
        assert [copy.model.per_token(n) for n in probe] == [model.per_token(n) for n in probe]
        assert copy(probe).tolist() == cost(probe).tolist()
        assert copy.update([70, 700], 0.05).coefficients == (
            pickle.loads(pickle.dumps(cost)).update([70, 700], 0.05).coefficients
        )


@pytest.mark.parametrize("half_life", [None, 50.0])
def test_updates_hold_constant_memory(half_life):
    """Whatever the number of updates, the state is the same few numbers: what it pickles to
    does not grow, nor does the memory held after thousands of updates."""
    rng = np.random.default_rng(12)
    batches = design(rng, 12, longest=20_000)
    cost = TimeCost.fit(
        batches, [true_time(b, (1e-3, 1e-5, 1e-9, 1e-13)) for b in batches], half_life=half_life
    )
    more = design(rng, 200, longest=20_000)
    seconds = [true_time(b, (1e-3, 1e-5, 1e-9, 1e-13)) * 1.01 for b in more]
    for batch, time in zip(more[:100], seconds[:100], strict=True):
        cost.update(batch, time)
    size = len(pickle.dumps(cost))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(20):
            for batch, time in zip(more, seconds, strict=True):
                cost.update(batch, time)
            cost.update_many(more[:10], seconds[:10])
        assert cost.coefficients["per_token"] > 0  # solved, cached
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 16_384
    assert len(pickle.dumps(cost)) <= size + 8  # only the observation count grows, by digits
    assert cost.observations == 12 + 100 + 20 * 210


any_length = st.integers(1, 10**6) | st.integers(1, 2**62) | st.sampled_from([1, 2, 10**6])
any_time = st.floats(1e-300, 1e300) | st.floats(1e-6, 1e4) | st.sampled_from([1e-6, 1e4, 5e-324])


@given(
    batches=st.lists(st.lists(any_length, min_size=1, max_size=5), min_size=6, max_size=12),
    data=st.data(),
    half_life=st.sampled_from([None, 0.5, 3.0]),
)
def test_any_measurements_fit_soundly_or_are_refused_by_name(batches, data, half_life):
    """Lengths from 1 to 2**62, times from 5e-324 to 1e300, in any mix: fit refuses by naming
    micro_batches or seconds, or gives finite non-negative coefficients whose predictions are
    non-negative and monotone and which save and load unchanged; never a NumPy warning."""
    times = data.draw(st.lists(any_time, min_size=len(batches), max_size=len(batches)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # What the cost itself warns of (a poor fit, lengths past the measured ones) is not a
        # NumPy warning: its tests are in test_time_cost_trust.py.
        warnings.simplefilter("ignore", TimeCostWarning)
        try:
            cost = TimeCost.fit(batches, times, half_life=half_life)
        except ValueError as exc:
            assert "micro_batches" in str(exc) or "seconds" in str(exc)
            return
        values = np.array(list(cost.coefficients.values()))
        assert np.isfinite(values).all() and (values >= 0).all()
        probe = np.array([0, 1, 2, 100, 10**4, 10**6, 2**40, 2**62])
        predicted = cost(probe)
        assert (predicted >= 0).all() and (np.diff(predicted) >= 0).all()
        assert all(math.isfinite(v) and v >= 0 for v in cost.fit_error.values())
        assert TimeCost.from_dict(cost.to_dict())(probe).tolist() == predicted.tolist()
