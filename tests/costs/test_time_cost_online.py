"""TimeCost online: what `update` accepts a fit could fit, recency weighting never splits by a
guess, attention-free models fit their one length term, `fit_error["recent"]`, and the saved
format (version 2 and later; version 1 still read)."""

from __future__ import annotations

import json
import logging
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seqbalance import ModelCost, TimeCost
from seqbalance.costs import _time_online
from seqbalance.costs._time_online import OUT_OF_PROPORTION

DATA = Path(__file__).parent / "data"
TRUTH = (2e-3, 3e-5, 1e-8, 5e-13)  # per micro-batch, per document, per token, per pair


def took(batch, coefficients=TRUTH):
    c_mb, c_doc, per_token, per_pair = coefficients
    return c_mb + sum(c_doc + per_token * L + per_pair * L * (L + 1) / 2 for L in batch)


def design(rng, count, longest=30_000):
    return [
        [int(v) for v in rng.integers(100, longest, int(rng.integers(1, 9)))] for _ in range(count)
    ]


def packing(rng, count, total=32_768):
    """Micro-batches of 1..8 documents that each pack exactly ``total`` tokens."""
    batches = []
    for _ in range(count):
        parts = int(rng.integers(1, 9))
        cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False))
        batches.append(np.diff(np.concatenate([[0], cuts, [total]])).tolist())
    return batches


def noisy(rng, batches, noise=0.01):
    return [took(b) * (1 + rng.uniform(-noise, noise)) for b in batches]


# -- recency weighting that forgets what separated the coefficients -----------------------------


def test_single_documents_under_a_half_life_keep_the_per_document_split(caplog):
    # Adversarial finding: 100,000 single-document updates with half_life=500 drifted
    # micro_batch and document to 1.01 ms each (truth 2 ms and 30 us), so a packed
    # micro-batch of 8 documents was predicted 4x too long, while rms read 1 %.
    rng = np.random.default_rng(0)
    first = design(rng, 24)
    cost = TimeCost.fit(first, [took(b) for b in first], half_life=500)
    singles = [[int(v)] for v in rng.integers(100, 30_000, 100_000)]
    with caplog.at_level(logging.WARNING, logger="seqbalance.costs.time_cost"):
        cost.update_many(singles, noisy(rng, singles))
    packed = [[1000] * 8, [250] * 16, [4000, 4000]]
    predicted = cost.predict(packed)
    truth = np.array([took(b) for b in packed])
    assert np.abs(predicted / truth - 1).max() < 0.01
    assert cost.coefficients["document"] == pytest.approx(3e-5, rel=0.05)
    # It says so: the property, the log (once), describe().
    assert cost.undetermined == ("micro_batch", "document")
    warned = [
        r for r in caplog.records if "no longer tell apart micro_batch, document" in r.message
    ]
    assert len(warned) == 1
    assert "undetermined: the recent observations" in cost.describe()
    # What the observations still determine keeps following them: a slower kernel is learnt.
    slower = (TRUTH[0], TRUTH[1], 2 * TRUTH[2], TRUTH[3])
    cost.update_many(singles[:5000], [took(b, slower) for b in singles[:5000]])
    assert cost.coefficients["per_token"] == pytest.approx(2 * TRUTH[2], rel=0.01)


def test_micro_batches_all_packing_the_same_tokens_keep_the_per_token_split():
    # Adversarial finding: half_life=20 and every micro-batch packing 32,768 tokens tripled
    # per_token (per micro-batch and per token are one column of such data).
    rng = np.random.default_rng(1)
    first = design(rng, 24)
    cost = TimeCost.fit(first, [took(b) for b in first], half_life=20)
    for _ in range(25):
        batches = packing(rng, 200)
        cost.update_many(batches, [took(b) for b in batches])
    assert cost.coefficients["per_token"] == pytest.approx(TRUTH[2], rel=0.01)
    other = [[1000], [60_000], [500] * 4]
    assert cost.predict(other) == pytest.approx([took(b) for b in other], rel=0.01)
    assert set(cost.undetermined) == {"micro_batch", "per_token"}


def test_a_determined_cost_says_nothing_is_undetermined():
    rng = np.random.default_rng(2)
    batches = design(rng, 40)
    cost = TimeCost.fit(batches, noisy(rng, batches), half_life=10)
    cost.update_many(design(rng, 50), noisy(rng, design(rng, 50)))
    assert cost.undetermined == ()
    assert "undetermined" not in cost.describe()


# -- a time out of all proportion ----------------------------------------------------------------


@pytest.mark.parametrize("absurd", [1e-20, 1e-80, 1e-300])
@pytest.mark.parametrize("half_life", [None, 50.0])
def test_update_refuses_a_time_fit_refuses(absurd, half_life):
    # Adversarial finding: fit refused seconds[i] = 1e-20 beside milliseconds, update accepted
    # it and every coefficient collapsed to 1e-21.
    rng = np.random.default_rng(3)
    batches = design(rng, 20)
    seconds = noisy(rng, batches)
    with pytest.raises(ValueError, match=r"out of all proportion"):
        TimeCost.fit([*batches, [1000]], [*seconds, absurd], half_life=half_life)
    cost = TimeCost.fit(batches, seconds, half_life=half_life)
    before = cost.to_dict()
    # Refused as out of proportion, or (1e-300) as beyond float64 once divided by it.
    with pytest.raises(ValueError, match=rf"seconds = {absurd!r}"):
        cost.update([1000], absurd)
    assert cost.to_dict() == before
    more = design(rng, 5)
    times = [*noisy(rng, more[:3]), absurd, took(more[4])]
    with pytest.raises(ValueError, match=rf"seconds\[3\] = {absurd!r}"):
        cost.update_many(more, times)
    assert cost.to_dict() == before


def test_a_time_near_its_prediction_is_never_refused_as_out_of_proportion():
    # Adversarial finding (40 runs of 400 noisy updates, half-lives 1 to 500): a cost whose
    # factor the next observation leaves barely undetermined (half_life=1, single documents)
    # refused a time 0.72x its prediction as "out of all proportion ... weigh it about 1e0
    # times as much": rounding at the threshold decided, and StepTimer's step raised with it.
    saved = json.loads((DATA / "time_cost_near_undetermined.json").read_text())
    cost = TimeCost.from_dict(saved["cost"])
    assert cost.predict([saved["lengths"]])[0] == pytest.approx(0.003216, rel=1e-3)
    cost.update(saved["lengths"], saved["seconds"])
    assert cost.observations == saved["cost"]["observations"] + 1
    # Far out of proportion, the same micro-batch is refused, and nothing changes.
    again = TimeCost.from_dict(saved["cost"])
    with pytest.raises(ValueError, match=r"out of all proportion"):
        again.update(saved["lengths"], saved["seconds"] * 1e-6)
    assert again.to_dict() == saved["cost"]


@given(
    seed=st.integers(0, 2**32 - 1),
    half_life=st.sampled_from([1.0, 2.0, 5.0]),
    off=st.lists(st.floats(1 / OUT_OF_PROPORTION, 1.0), min_size=1, max_size=60),
)
# Found by this property: a time exactly 100x shorter than predicted, refused by rounding.
@example(seed=0, half_life=1.0, off=[1.0] * 6 + [0.125, 0.015625, 0.01])
def test_times_within_proportion_of_the_prediction_are_accepted(seed, half_life, off):
    rng = np.random.default_rng(seed)
    batches = design(rng, 12)
    cost = TimeCost.fit(batches, noisy(rng, batches), half_life=half_life)
    for factor in off:
        single = [int(rng.integers(100, 30_000))]
        cost.update(single, float(cost.predict([single])[0]) * factor)  # never refused


@pytest.mark.parametrize("factor", [0.5, 1e-3, 1e-6])
def test_update_accepts_a_time_fit_accepts_and_equals_the_fit(factor):
    rng = np.random.default_rng(4)
    batches = design(rng, 20)
    seconds = noisy(rng, batches)
    odd = took([1000]) * factor
    whole = TimeCost.fit([*batches, [1000]], [*seconds, odd])
    online = TimeCost.fit(batches, seconds).update([1000], odd)
    assert online([1, 1000, 30_000]) == pytest.approx(whole([1, 1000, 30_000]), rel=1e-6)


# -- attention-free models: one length term --------------------------------------------------

H, V = 256, 1000
ATTENTION_FREE = {
    "mamba": {
        "model_type": "mamba", "hidden_size": H, "vocab_size": V, "num_hidden_layers": 2,
        "intermediate_size": 512, "state_size": 16, "conv_kernel": 4, "time_step_rank": 16,
    },
    "mamba2": {
        "model_type": "mamba2", "hidden_size": H, "vocab_size": V, "num_hidden_layers": 2,
        "num_heads": 8, "head_dim": 64, "n_groups": 1, "state_size": 16, "conv_kernel": 4,
        "expand": 2,
    },
    "falcon_mamba": {
        "model_type": "falcon_mamba", "hidden_size": H, "vocab_size": V,
        "num_hidden_layers": 2, "intermediate_size": 512, "state_size": 16, "conv_kernel": 4,
        "time_step_rank": 16,
    },
    "bamba": {
        "model_type": "bamba", "hidden_size": H, "vocab_size": V, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 512, "attn_layer_indices": [],
        "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 16,
        "mamba_d_conv": 4, "mamba_expand": 2,
    },
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(ATTENTION_FREE))
def test_an_attention_free_model_fits_its_one_length_term(family):
    # Adversarial finding: every fit with such a model= was refused with advice that cannot
    # help ("measure micro-batches that differ"): its scan is proportional to its projections.
    model = ModelCost.from_config(ATTENTION_FREE[family])
    assert model.per_token(1)["attention"] > 0  # scans and convolutions: not zero, but linear
    rng = np.random.default_rng(5)
    batches = design(rng, 30)
    efficiency = 1 / 300e12  # seconds per training FLOP

    def seconds(batch):
        return 2e-3 + sum(3e-5 + efficiency * f for f in model.flops(batch))

    cost = TimeCost.fit(batches, [seconds(b) for b in batches], model=model)
    c = cost.coefficients
    assert c["linear"] == c["attention"] == pytest.approx(efficiency, rel=1e-6)
    assert c["micro_batch"] == pytest.approx(2e-3, rel=1e-6)
    probe = [[50], [70_000, 3], [1000] * 8]
    assert cost.predict(probe) == pytest.approx([seconds(b) for b in probe], rel=1e-9)
    assert cost.crossover_length() is None
    text = cost.describe()
    assert "attention-free" in text and "per training FLOP" in text and "300 TFLOP/s" in text
    for copy in (
        TimeCost.from_dict(json.loads(json.dumps(cost.to_dict()))),
        pickle.loads(pickle.dumps(cost)),
    ):
        assert copy.coefficients == cost.coefficients
        assert copy.update([10, 20], seconds([10, 20])).coefficients == pytest.approx(
            TimeCost.from_dict(cost.to_dict()).update([10, 20], seconds([10, 20])).coefficients
        )
    # What it still refuses, it refuses by the coefficients the data cannot separate.
    singles = [[100 * (i + 1)] for i in range(10)]
    with pytest.raises(
        ValueError, match=r"cannot tell apart the coefficients micro_batch, document:"
    ):
        TimeCost.fit(singles, [seconds(b) for b in singles], model=model)


def test_an_attention_free_cost_refuses_a_saved_attention_of_its_own():
    model = ModelCost.from_config(ATTENTION_FREE["mamba"])
    rng = np.random.default_rng(6)
    batches = design(rng, 12)
    data = TimeCost.fit(
        batches, [1e-3 + 1e-12 * sum(model.flops(b)) for b in batches], model=model
    ).to_dict()
    data["coefficients"]["attention"] *= 2
    with pytest.raises(ValueError, match=r"'linear' and 'attention' are equal"):
        TimeCost.from_dict(data)


# -- fit_error["recent"] ---------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 250),
    half_life=st.sampled_from([None, 30.0]),
)
def test_recent_is_the_median_error_of_the_last_100_predictions_before_their_update(
    seed, count, half_life
):
    rng = np.random.default_rng(seed)
    first = design(rng, 12)
    more = design(rng, count)
    times = noisy(rng, more, 0.05)
    one_by_one = TimeCost.fit(first, noisy(rng, first, 0.05), half_life=half_life)
    at_once = pickle.loads(pickle.dumps(one_by_one))
    assert "recent" not in one_by_one.fit_error
    errors = []
    for batch, time in zip(more, times, strict=True):
        errors.append(abs(one_by_one.predict([batch])[0] / time - 1))
        one_by_one.update(batch, time)
    at_once.update_many(more, times)
    expected = float(np.median(errors[-100:]))
    assert one_by_one.fit_error["recent"] == pytest.approx(expected, rel=1e-12)
    # update_many predicts each as a loop of update would, and keeps only the last 100.
    assert at_once.fit_error["recent"] == pytest.approx(expected, rel=1e-9)
    assert at_once.coefficients == pytest.approx(one_by_one.coefficients, rel=1e-9, abs=0)
    saved = TimeCost.from_dict(json.loads(json.dumps(at_once.to_dict())))
    assert saved.fit_error == at_once.fit_error
    assert len(saved.to_dict()["recent_errors"]) == min(count, 100)
    assert f"recent: median error {expected:.2%} of the last {min(count, 100)}" in saved.describe()


def test_recent_shows_a_cost_that_stops_matching_the_run():
    rng = np.random.default_rng(7)
    batches = design(rng, 40)
    cost = TimeCost.fit(batches, [took(b) for b in batches], half_life=200)
    cost.update_many(batches, [took(b) for b in batches])
    assert cost.fit_error["recent"] < 1e-9
    slower = (TRUTH[0], TRUTH[1], 1.5 * TRUTH[2], TRUTH[3])
    more = design(rng, 60)
    cost.update_many(more, [took(b, slower) for b in more])
    # Most of the last 100 predictions were made before the cost caught up with the change.
    assert cost.fit_error["recent"] > 0.01


# -- refusals change nothing -----------------------------------------------------------------

bad_times = st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e-300, 5e-324])


@given(
    seed=st.integers(0, 2**16),
    where=st.integers(0, 3),
    kind=st.sampled_from(["time", "empty", "zero"]),
    form=st.sampled_from(
        ["update", "update_many", "update_synchronized", "update_synchronized_many"]
    ),
    bad=bad_times,
    half_life=st.sampled_from([None, 5.0]),
)
def test_a_refused_observation_changes_nothing(seed, where, kind, form, bad, half_life):
    rng = np.random.default_rng(seed)
    first = design(rng, 10)
    cost = TimeCost.fit(first, noisy(rng, first), half_life=half_life)
    cost.update(first[0], took(first[0]))  # some recent errors to keep
    before = json.dumps(cost.to_dict())
    batches = design(rng, 4)
    times = noisy(rng, batches)
    if kind == "time":
        times[where] = bad
    elif kind == "empty":
        batches[where] = []
    else:
        batches[where] = [*batches[where], 0]
    units = [[batch, [], batches[0]] if kind == "time" else [batch] for batch in batches]
    with pytest.raises(ValueError):
        if form == "update":
            cost.update(batches[where], times[where])
        elif form == "update_many":
            cost.update_many(batches, times)
        elif form == "update_synchronized":
            cost.update_synchronized(units[where], times[where])
        else:
            cost.update_synchronized_many(units, times)
    assert json.dumps(cost.to_dict()) == before


# -- the saved format ------------------------------------------------------------------------

V1 = json.loads((Path(__file__).parent / "data" / "time_cost_v1.json").read_text())


@pytest.mark.parametrize("name", ["plain_half_life_50", "model"])
def test_a_cost_saved_by_version_1_loads_and_predicts_as_it_did(name):
    data = V1[name]
    assert data["version"] == 1 and "recent_errors" not in data
    cost = TimeCost.from_dict(data)
    assert cost(V1["probe"]).tolist() == V1["seconds"][name]
    assert "recent" not in cost.fit_error and cost.undetermined == ()
    again = cost.to_dict()
    assert again["version"] == 3 and again["recent_errors"] == []
    assert again["measured_range"] is None  # version 1 did not record it
    cost.update([500, 500], 0.01)
    assert TimeCost.from_dict(json.loads(json.dumps(cost.to_dict()))).fit_error == cost.fit_error


def test_a_cost_holding_an_undetermined_split_saves_and_updates_exactly():
    rng = np.random.default_rng(8)
    first = design(rng, 24)
    cost = TimeCost.fit(first, [took(b) for b in first], half_life=3)
    singles = [[int(v)] for v in rng.integers(100, 30_000, 400)]
    cost.update_many(singles, noisy(rng, singles))
    assert cost.undetermined == ("micro_batch", "document")
    data = json.loads(json.dumps(cost.to_dict()))
    assert data["undetermined"] == ["micro_batch", "document"]
    copy = TimeCost.from_dict(data)
    assert copy.coefficients == cost.coefficients and copy.undetermined == cost.undetermined
    more = [[int(v)] for v in rng.integers(100, 30_000, 30)]
    times = noisy(rng, more)
    assert copy.update_many(more, times).coefficients == cost.update_many(more, times).coefficients
    # A saved file that hides what its factor no longer determines, or claims it, is refused.
    hidden = {**data, "undetermined": []}
    with pytest.raises(ValueError, match=r"data\['factor'\] leaves undetermined"):
        TimeCost.from_dict(hidden)
    fitted = json.loads(json.dumps(TimeCost.fit(first, [took(b) for b in first]).to_dict()))
    with pytest.raises(ValueError, match=r"data\['undetermined'\] = \['document'\]"):
        TimeCost.from_dict({**fitted, "undetermined": ["document"]})
    # Without its coefficients the kept split is lost: refused, not guessed.
    with pytest.raises(ValueError, match=r"data has no 'coefficients', and data\['factor'\]"):
        TimeCost.from_dict({k: v for k, v in data.items() if k != "coefficients"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=4), r"expected kind .* version 3 \(or an older one: 1, 2\)"),
        (lambda d: d.update(version=0), r"not a saved TimeCost"),
        (lambda d: d.pop("recent_errors"), r"data has no 'recent_errors'"),
        (lambda d: d.update(recent_errors=[0.1] * 101), r"holds 101 errors; .* at most 100"),
        (
            lambda d: d.update(recent_errors=[-0.5]),
            r"recent_errors'\]\[0\] must be finite and >= 0",
        ),
        (lambda d: d.update(recent_errors=["x"]), r"recent_errors'\]\[0\] must be a number"),
        (  # an int beyond float64 was a bare OverflowError
            lambda d: d.update(recent_errors=[10**400]),
            r"recent_errors'\]\[0\] must be finite and >= 0, got an integer of 401 digits",
        ),
        (
            lambda d: d.update(recent_errors=[-(10**400)]),
            r"recent_errors'\]\[0\] must be finite and >= 0, got a negative integer of 401",
        ),
        (lambda d: d.update(undetermined=[1]), r"undetermined'\] must list coefficient names"),
        (lambda d: d.pop("undetermined"), r"data has no 'undetermined'"),
    ],
)
def test_version_2_fields_are_checked_by_name(change, message):
    rng = np.random.default_rng(9)
    batches = design(rng, 12)
    cost = TimeCost.fit(batches, noisy(rng, batches))
    cost.update(batches[0], took(batches[0]))
    data = json.loads(json.dumps(cost.to_dict()))
    change(data)
    with pytest.raises(ValueError, match=message):
        TimeCost.from_dict(data)


# -- no accepted sequence of updates leaves a coefficient to a guess --------------------------

phases = st.lists(
    st.tuples(st.sampled_from(["diverse", "singles", "packed", "one_length"]), st.integers(1, 120)),
    min_size=1,
    max_size=4,
)


def phase_batches(rng, kind, count):
    if kind == "diverse":
        return design(rng, count)
    if kind == "singles":
        return [[int(v)] for v in rng.integers(100, 30_000, count)]
    if kind == "packed":
        return packing(rng, count)
    length = int(rng.integers(100, 30_000))  # every document of one length, counts differ
    return [[length] * int(rng.integers(1, 9)) for _ in range(count)]


@given(
    seed=st.integers(0, 2**32 - 1),
    plan=phases,
    half_life=st.sampled_from([None, 0.5, 2.0, 20.0]),
    coefficients=st.tuples(
        st.floats(1e-4, 1e-2),
        st.floats(1e-6, 1e-4),
        st.floats(1e-10, 1e-8),
        st.floats(1e-15, 1e-12),
    ),
)
def test_no_sequence_of_accepted_updates_leaves_a_coefficient_to_a_guess(
    seed, plan, half_life, coefficients
):
    """Exact times from a known model: whatever the recent observations stop telling apart,
    every coefficient is one they determine or one kept from when they did, so micro-batches
    unlike the recent ones are still predicted right (a split by a guess is off by up to the
    whole of the undetermined combination)."""
    rng = np.random.default_rng(seed)
    first = design(rng, 24)
    cost = TimeCost.fit(first, [took(b, coefficients) for b in first], half_life=half_life)
    for kind, count in plan:
        batches = phase_batches(rng, kind, count)
        cost.update_many(batches, [took(b, coefficients) for b in batches])
        assert set(cost.undetermined) <= set(cost.coefficients)
    probe = [[1], [100, 100], [5000] * 8, [30_000], [64_000, 1, 3], [700] * 40]
    assert cost.predict(probe) == pytest.approx([took(b, coefficients) for b in probe], rel=1e-4)
    assert ("undetermined" in cost.describe()) == bool(cost.undetermined)


# -- every state saves, loads and updates as it ran; update_many is the loop of update ---------


def segment(rng, kind, count):
    """``count`` micro-batches of one kind: single documents (micro_batch and document are one
    column), documents of one length (the length terms follow the count), one total (micro_batch
    and per_token), or a mixed design that determines every coefficient."""
    if kind == "singles":
        return [[int(v)] for v in rng.integers(100, 30_000, count)]
    if kind == "one length":
        length = int(rng.integers(100, 5_000))
        return [[length] * int(rng.integers(1, 9)) for _ in range(count)]
    if kind == "one total":
        return packing(rng, count)
    return design(rng, count)


def same_cost(copy, cost):
    assert copy.coefficients == cost.coefficients
    assert copy.undetermined == cost.undetermined
    probe = [[1000] * 8, [30_000], [250] * 16, [4000, 12_000]]
    assert copy.predict(probe).tolist() == cost.predict(probe).tolist()


@given(
    seed=st.integers(0, 2**32 - 1),
    half_life=st.sampled_from([2.0, 3.0]),
    zero=st.sampled_from([None, 0, 1, 2, 3]),
    plan=st.lists(
        st.tuples(
            st.sampled_from(["singles", "one length", "one total", "design"]),
            st.integers(1, 160),
        ),
        min_size=1,
        max_size=3,
    ),
)
@example(seed=1, half_life=2.0, zero=1, plan=[("singles", 160), ("design", 3), ("singles", 160)])
@settings(max_examples=40)
def test_every_state_round_trips_and_update_many_is_the_loop_of_update(seed, half_life, zero, plan):
    # Adversarial findings: a cost holding an undetermined split with a coefficient at 0 saved
    # but was refused by from_dict and pickle (its re-solve moved what the data determine), and
    # update_many kept other values than a loop of update for what the data no longer determine
    # (up to 92 % apart, 4.7 % in predictions).
    rng = np.random.default_rng(seed)
    truth = list(TRUTH)
    if zero is not None:
        truth[zero] = 0.0
    first = design(rng, 24)
    looped = TimeCost.fit(first, noisy(rng, first, 0.05), half_life=half_life)
    at_once = pickle.loads(pickle.dumps(looped))
    for kind, count in plan:
        batches = segment(rng, kind, count)
        times = [took(b, truth) * (1 + rng.uniform(-0.05, 0.05)) for b in batches]
        for batch, time in zip(batches, times, strict=True):
            looped.update(batch, time)
        at_once.update_many(batches, times)
        same_cost(at_once, looped)
        assert at_once.fit_error == looped.fit_error
        loaded = TimeCost.from_dict(json.loads(json.dumps(looped.to_dict())))
        unpickled = pickle.loads(pickle.dumps(looped))
        same_cost(loaded, looped)
        same_cost(unpickled, looped)
        # A loaded cost goes on as the live one does.
        more = segment(rng, kind, 30)
        more_times = [took(b, truth) for b in more]
        loaded.update_many(more, more_times)
        reference = pickle.loads(pickle.dumps(looped)).update_many(more, more_times)
        same_cost(loaded, reference)


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize("zero", [None, 1])
def test_update_many_of_more_than_100_holds_what_a_loop_of_update_holds(zero, chunk, monkeypatch):
    # Adversarial finding: update_many took the micro-batches before its last 100 in one
    # addition, held against the cost before all of them, so it kept other values than a loop
    # of update for a combination the data stopped determining partway through. (chunk=7: the
    # state carried from one pass of FitState.add to the next, every few observations.)
    if chunk is not None:
        monkeypatch.setattr(_time_online, "CHUNK", chunk)
    rng = np.random.default_rng(11)
    truth = list(TRUTH)
    if zero is not None:
        truth[zero] = 0.0
    first = design(rng, 24)
    looped = TimeCost.fit(first, noisy(rng, first, 0.05), half_life=2)
    at_once = pickle.loads(pickle.dumps(looped))
    singles = [*segment(rng, "singles", 300), *design(rng, 3), *segment(rng, "singles", 300)]
    times = [took(b, truth) * (1 + rng.uniform(-0.05, 0.05)) for b in singles]
    for batch, time in zip(singles, times, strict=True):
        looped.update(batch, time)
    at_once.update_many(singles, times)
    assert looped.undetermined == ("micro_batch", "document")
    same_cost(at_once, looped)
