"""When a `TimeCost` should not be believed, it says so (issue 37, items 1 to 3): attention that
spans the packed documents is refused, a poor fit warns, and predictions past the measured
lengths warn that they extrapolate."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seqbalance import (
    ModelCost,
    SeqlenBalancedSampler,
    TimeCost,
    TimeCostWarning,
    group_balanced_partitions,
    karmarkar_karp,
    plan_context_parallel,
    plan_dp_micro_batches,
    plan_micro_batches,
    plan_packed_steps,
    profile,
    simulate_step,
)
from seqbalance.costs._time_trust import POOR_MEDIAN, POOR_P90, poor_fit
from seqbalance.costs.profiling import default_grid

GRID = default_grid(8192)


def per_document(batch, c=2e-3, d=3e-5, a=2e-7, b=4e-11):
    """Documents kept apart: each document pays its own attention."""
    return c + sum(d + a * n + b * n * (n + 1) / 2 for n in batch)


def spanning(batch, c=2e-3, d=3e-5, a=2e-7, b=4e-11):
    """Attention across the packed documents: the micro-batch costs one document of its total."""
    total = sum(batch)
    return c + len(batch) * d + a * total + b * total * (total + 1) / 2


def test_fit_refuses_times_where_attention_spans_the_documents():
    with pytest.raises(ValueError, match="attention spans the packed documents") as caught:
        TimeCost.fit(GRID, [spanning(b) for b in GRID])
    message = str(caught.value)
    assert message.startswith("micro_batches: ")
    assert "flash_attention_2" in message and "one document per micro-batch" in message


def test_fit_accepts_documents_kept_apart():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = TimeCost.fit(GRID, [per_document(b) for b in GRID])
    assert cost.coefficients["per_pair"] == pytest.approx(4e-11, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    per_token=st.floats(1e-8, 1e-6),
    crossover=st.integers(300, 6000),
    per_micro_batch=st.floats(1e-4, 1e-2),
    noise=st.floats(0.0, 0.01),
    seed=st.integers(0, 2**16),
)
def test_the_rule_tells_the_two_apart_for_any_material_attention(
    per_token, crossover, per_micro_batch, noise, seed
):
    # Attention takes as long as the linear part at `crossover` tokens (below the grid's
    # 8,192): material in the longest single document, whichever way it was run.
    per_pair = 2 * per_token / crossover
    longest = 8192 * (8192 + 1) / 2 * per_pair
    # Material: attention a good share of the longest document's time (the rule asks 10 %).
    assume(longest >= 0.15 * (per_micro_batch + 1e-6 + 8192 * per_token + longest))
    rng = np.random.default_rng(seed)
    jitter = 1 + rng.uniform(-noise, noise, len(GRID))
    terms = dict(c=per_micro_batch, d=1e-6, a=per_token, b=per_pair)
    apart = [per_document(b, **terms) * j for b, j in zip(GRID, jitter, strict=True)]
    across = [spanning(b, **terms) * j for b, j in zip(GRID, jitter, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimeCostWarning)
        TimeCost.fit(GRID, apart)
        with pytest.raises(ValueError, match="attention spans the packed documents"):
            TimeCost.fit(GRID, across)


def test_attention_that_is_not_material_is_not_refused():
    # Attention 1 % of the longest document's time: the two fits differ by noise only.
    terms = dict(a=2e-7, b=2 * 2e-7 / 2_000_000)
    rng = np.random.default_rng(1)
    times = [spanning(b, **terms) * rng.uniform(0.99, 1.01) for b in GRID]
    TimeCost.fit(GRID, times)


def test_packed_micro_batches_alone_are_not_judged():
    # Without single documents to compare with, nothing shows attention crossing documents
    # (single documents alone cannot separate the coefficients at all: refused as before).
    packed = [b for b in GRID if len(b) > 1]
    cost = TimeCost.fit(packed, [spanning(b) for b in packed])
    assert cost.observations == len(packed)


def test_an_attention_free_model_is_exempt():
    mamba = ModelCost.from_config(
        {"model_type": "mamba", "hidden_size": 64, "vocab_size": 1000, "num_hidden_layers": 2,
         "intermediate_size": 128, "state_size": 16, "conv_kernel": 4, "time_step_rank": 4}
    )  # fmt: skip
    # Its time grows like the total either way: nothing to tell apart, nothing refused.
    times = [1e-3 + 1e-13 * mamba.flops([sum(b)])[0] for b in GRID]
    cost = TimeCost.fit(GRID, times, model=mamba)
    assert cost.coefficients["linear"] == cost.coefficients["attention"] > 0


def test_profile_refuses_a_run_whose_attention_spans_the_documents():
    clock = [0.0]

    def run(lengths):
        clock[0] += spanning(lengths)

    with pytest.raises(ValueError, match="attention spans the packed documents"):
        profile(run, max_length=8192, timer=lambda: clock[0])


def test_calibrate_refuses_such_a_log_in_one_line(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"lengths": b, "seconds": spanning(b)}) + "\n" for b in GRID))
    done = subprocess.run(
        [sys.executable, "-m", "seqbalance", "calibrate", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "attention spans the packed documents" in lines[0]
    assert "Traceback" not in done.stderr


# -- a poor fit ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "poor"),
    [
        ({"median": POOR_MEDIAN, "p90": POOR_P90, "max": 1.0}, False),
        ({"median": 0.1001, "p90": 0.2, "max": 0.3}, True),
        ({"median": 0.05, "p90": 0.2501, "max": 0.3}, True),
        ({"median": 0.01, "p90": 0.02, "max": 5.0}, False),  # one bad micro-batch: not a poor fit
        ({"median": 0.01, "p90": 0.02, "max": 0.03, "recent": 0.11}, True),
        ({"median": 0.01, "p90": 0.02, "max": 0.03, "recent": 0.09}, False),
    ],
)
def test_the_thresholds(error, poor):
    assert (poor_fit(error) is not None) is poor


def _noisy(sigma: float, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [per_document(b) * float(np.exp(rng.normal(0, sigma))) for b in GRID]


def test_a_poor_fit_warns_and_says_so_everywhere(tmp_path):
    with pytest.warns(TimeCostWarning, match="a poor fit: median relative error"):
        cost = TimeCost.fit(GRID, _noisy(0.5))
    assert cost.fit_error["median"] > POOR_MEDIAN
    assert "warning: a poor fit" in cost.describe()
    # Saved, reloaded: it says so again, where it is planned with.
    data = json.loads(json.dumps(cost.to_dict()))
    with pytest.warns(TimeCostWarning, match="a poor fit"):
        TimeCost.from_dict(data)
    saved = tmp_path / "poor.json"
    saved.write_text(json.dumps(data))
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{n}\n" for n in [100, 900, 3000, 4000, 20, 700]))
    done = subprocess.run(
        [sys.executable, "-m", "seqbalance", "plan", str(lengths), "--max-token-len", "8192"]
        + ["--time-cost", str(saved), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # stdout stays one JSON document
    assert any(
        line.startswith("warning: ") and "a poor fit" in line for line in done.stderr.splitlines()
    )


def test_a_good_fit_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = TimeCost.fit(GRID, _noisy(0.01))
        TimeCost.from_dict(cost.to_dict())
    assert "warning" not in cost.describe()


def test_fit_synchronized_warns_of_a_poor_fit():
    rng = np.random.default_rng(4)
    units = [[b, []] for b in GRID]
    times = [per_document(b) * float(np.exp(rng.normal(0, 0.6))) for b in GRID]
    with pytest.warns(TimeCostWarning, match="a poor fit"):
        TimeCost.fit_synchronized(units, times)


def test_profile_warns_without_printing_and_calibrate_prints_a_warning_line(tmp_path, capsys):
    rng = np.random.default_rng(2)
    clock = [0.0]

    def run(lengths):
        clock[0] += per_document(lengths) * float(np.exp(rng.normal(0, 0.5)))

    with pytest.warns(TimeCostWarning, match="a poor fit"):
        profile(run, max_length=8192, timer=lambda: clock[0], repeats=1, warmup=0)
    # The library says it through warnings only (issue 42: no stderr from the library).
    assert capsys.readouterr().err == ""
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps({"lengths": b, "seconds": t}) + "\n"
            for b, t in zip(GRID, _noisy(0.5), strict=True)
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "seqbalance", "calibrate", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fit_error"]["median"] > POOR_MEDIAN
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"warning: {log}: a poor fit")


# -- past the measured range --------------------------------------------------------------------


def _fitted() -> TimeCost:
    return TimeCost.fit(default_grid(4096), [per_document(b) for b in default_grid(4096)])


def test_the_measured_range_is_what_the_fit_and_its_updates_saw():
    cost = _fitted()
    assert cost.measured_range == {"longest_document": 4096, "longest_micro_batch": 4096}
    cost.update([5000, 100], per_document([5000, 100]))
    assert cost.measured_range == {"longest_document": 5000, "longest_micro_batch": 5100}
    cost.update_synchronized([[200, 200], [6000]], per_document([6000]))
    assert cost.measured_range == {"longest_document": 6000, "longest_micro_batch": 6000}
    again = TimeCost.from_dict(json.loads(json.dumps(cost.to_dict())))
    assert again.measured_range == cost.measured_range
    assert "documents of up to 6,000 tokens and micro-batches of up to 6,000" in again.describe()


@settings(max_examples=30, deadline=None)
@given(
    more=st.lists(st.lists(st.integers(1, 20_000), min_size=1, max_size=4), max_size=6),
)
def test_the_range_is_the_largest_of_everything_observed(more):
    cost = _fitted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimeCostWarning)
        if more:
            cost.update_many(more, [per_document(b) for b in more])
    seen = default_grid(4096) + more
    assert cost.measured_range == {
        "longest_document": max(max(b) for b in seen),
        "longest_micro_batch": max(sum(b) for b in seen),
    }


def test_predicting_past_the_range_warns_and_within_it_does_not():
    cost = _fitted()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost([1, 4096])
        cost.predict([[2048, 2048]])
    with pytest.warns(TimeCostWarning, match=r"documents longer than .* \(4,096 tokens\)"):
        cost([100, 16_384])
    with pytest.warns(TimeCostWarning, match=r"micro-batches fuller than .* \(4,096 tokens\)"):
        cost.predict([[4096, 4096]])
    # One text per measured range: a loop predicting past it is warned once, not every step.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for length in range(5000, 5100):
            cost([length])
    assert len(caught) == 1


def test_planning_micro_batches_past_the_range_warns():
    cost = _fitted()
    lengths = [1000] * 40
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan_micro_batches(lengths, 4096, cost=cost)
    with pytest.warns(TimeCostWarning, match=r"micro-batches fuller than the fullest"):
        plan_micro_batches(lengths, 16_384, cost=cost)


def test_the_command_line_says_it_extrapolates_on_stderr(tmp_path):
    saved = tmp_path / "time-cost.json"
    saved.write_text(json.dumps(_fitted().to_dict()))
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{n}\n" for n in [100, 9000, 3000, 4000, 20, 700] * 4))
    for verb in (["plan", "--max-token-len", "16384", "--dp", "2"], ["partition", "-k", "2"]):
        done = subprocess.run(
            [sys.executable, "-m", "seqbalance", *verb, str(lengths)]
            + ["--time-cost", str(saved), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)
        (line,) = [x for x in done.stderr.splitlines() if x.startswith("warning: ")]
        assert "extrapolates" in line and "(here: documents of up to 9,000 tokens" in line
        assert ("micro-batches fuller than" in line) is (verb[0] == "plan")
        assert (", micro-batches of up to " in line) is (verb[0] == "plan")


def test_a_saved_range_is_checked_by_name():
    data = json.loads(json.dumps(_fitted().to_dict()))
    for bad, words in [
        ({"longest_document": 0, "longest_micro_batch": 5}, "'longest_document'] must be"),
        ({"longest_document": 9, "longest_micro_batch": 5}, "longer than the longest micro-batch"),
        ({"longest_document": 5}, "must be null or map exactly"),
        ({"longest_document": 5, "longest_micro_batch": 10**400}, "below 2**63"),
    ]:
        with pytest.raises(ValueError, match=r"data\['measured_range'\]") as caught:
            TimeCost.from_dict({**data, "measured_range": bad})
        assert words in str(caught.value)


def test_a_cost_saved_before_the_range_was_recorded_loads_without_one():
    saved = json.loads((Path(__file__).parent / "data" / "time_cost_v2.json").read_text())
    data = saved["plain_half_life_40"]
    assert data["version"] == 2 and "measured_range" not in data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = TimeCost.from_dict(data)
        assert cost(saved["probe"]).tolist() == saved["seconds"]["plain_half_life_40"]
    assert cost.measured_range is None and cost.extrapolation(longest_document=10**9) is None
    assert cost.fit_error["recent"] == saved["recent"]
    assert "measured range: not recorded" in cost.describe()
    assert cost.to_dict()["version"] == 3 and cost.to_dict()["measured_range"] is None


# -- every warning points at the caller's line ---------------------------------------------------

#: Lengths past the 4,096-token range of `_fitted()`, planned under a cap past it too.
PAST = [9000, 1000, 3000, 700, 5000, 200, 16_000, 2500]


def _poor() -> TimeCost:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimeCostWarning)
        return TimeCost.fit(GRID, _noisy(0.5))


def _profile_poorly() -> TimeCost:
    rng = np.random.default_rng(2)
    clock = [0.0]

    def run(lengths):
        clock[0] += per_document(lengths) * float(np.exp(rng.normal(0, 0.5)))

    return profile(run, max_length=8192, timer=lambda: clock[0], repeats=1, warmup=0)


def _cost_source(tmp_path):
    # What install(cost=path) holds: a good cost first, then the file turns into a poor fit.
    from seqbalance.integrations._costs import CostSource  # noqa: PLC0415  (the test's subject)

    path = tmp_path / "time-cost.json"
    path.write_text(json.dumps(_fitted().to_dict()))
    source = CostSource(path=str(path))
    path.write_text(json.dumps(_poor().to_dict()) + " " * 64)  # another size: a new file
    return source


class _Meta:
    """The piece of a partition the seqlen-balanced sampler reads: each sample's length."""

    def __init__(self, lengths):
        self.meta = {i: {"total_lengths": value} for i, value in enumerate(lengths)}

    def get_custom_meta(self, indexes):
        return {i: self.meta[i] for i in indexes if i in self.meta}


def _sample_past_the_range():
    sampler = SeqlenBalancedSampler(n_samples_per_prompt=1, dp_size=2, cost=_fitted())
    return sampler(
        list(range(len(PAST))),
        len(PAST) // 2,
        task_name="t",
        partition_id="p",
        dp_rank=0,
        batch_index=0,
        partition=_Meta(PAST),
    )


CALLS = {
    "SeqlenBalancedSampler": lambda tmp_path: _sample_past_the_range(),
    "calling the cost": lambda tmp_path: _fitted()(PAST),
    "predict": lambda tmp_path: _fitted().predict([PAST[:3]]),
    "fit": lambda tmp_path: TimeCost.fit(GRID, _noisy(0.5)),
    "fit_synchronized": lambda tmp_path: TimeCost.fit_synchronized(
        [[b, []] for b in GRID], _noisy(0.6, seed=4)
    ),
    "from_dict": lambda tmp_path: TimeCost.from_dict(_poor().to_dict()),
    "pickle": lambda tmp_path: pickle.loads(pickle.dumps(_poor())),
    "profile": lambda tmp_path: _profile_poorly(),
    "plan_micro_batches": lambda tmp_path: plan_micro_batches(PAST, 32_768, cost=_fitted()),
    "plan_dp_micro_batches": lambda tmp_path: plan_dp_micro_batches(
        PAST, 2, 32_768, cost=_fitted()
    ),
    "plan_dp_micro_batches, micro_batch sync": lambda tmp_path: plan_dp_micro_batches(
        PAST, 2, 32_768, cost=_fitted(), sync="micro_batch"
    ),
    "plan_packed_steps": lambda tmp_path: plan_packed_steps(PAST, 2, 1, 32_768, cost=_fitted()),
    "plan_context_parallel": lambda tmp_path: plan_context_parallel(
        PAST, 4, 32_768, cost=_fitted()
    ),
    "simulate_step": lambda tmp_path: simulate_step(
        [[[0, 1, 2, 3]], [[4, 5, 6, 7]]], PAST, cost=_fitted()
    ),
    "karmarkar_karp": lambda tmp_path: karmarkar_karp(PAST, 2, False, cost=_fitted()),
    "group_balanced_partitions": lambda tmp_path: group_balanced_partitions(
        PAST, [0, 0, 1, 1, 2, 2, 3, 3], 2, cost=_fitted()
    ),
    "install(cost=path), reloaded": lambda tmp_path: _cost_source(tmp_path).current(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_time_cost_warning_points_at_the_callers_line(name, tmp_path):
    # Adversarial finding: a planner given a TimeCost warned with a line inside the library
    # (seqbalance/planning/micro_batches.py), not the caller's.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CALLS[name](tmp_path)
    ours = [w for w in caught if issubclass(w.category, TimeCostWarning)]
    assert ours, f"{name} did not warn"
    assert {w.filename for w in ours} == {__file__}, [(w.filename, w.lineno) for w in ours]
