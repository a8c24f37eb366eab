"""A TimeCost is weighed one way everywhere: the library, the command line and ``install()``
give the same plan for the same cost and batch (API spec, "One vocabulary": int64 nanoseconds).

The command line runs in this process (`seqbalance.cli.main.main`) on a saved cost file; the
``install()`` side is what its replacement of verl's ``calculate_workload`` hands the trainer
(`CostSource.nanoseconds`) and what the planned step weighs the trainer's plan by
(`trainer_weights`).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqbalance import (
    TimeCost,
    TimeCostWarning,
    get_seqlen_balanced_partitions,
    karmarkar_karp,
    plan_dp_micro_batches,
    plan_micro_batches,
    simulate_step,
)
from seqbalance.cli.main import main
from seqbalance.costs.workload import nanoseconds
from seqbalance.integrations._costs import CostSource
from seqbalance.integrations._step import trainer_weights


def fitted(seed: int) -> TimeCost:
    """A TimeCost fitted to exact times of random coefficients (micro-batch, document, token
    and causal-pair terms over four orders of magnitude)."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-1.5, 1.5, size=4)
    true = np.array([1e-3, 2e-5, 1e-8, 4e-13]) * scale
    batches = [rng.integers(64, 40_000, size=int(rng.integers(1, 6))).tolist() for _ in range(30)]
    seconds = [
        true[0] + sum(true[1] + true[2] * L + true[3] * L * (L + 1) / 2 for L in batch)
        for batch in batches
    ]
    return TimeCost.fit(batches, seconds)


@st.composite
def cases(draw):
    cost = fitted(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(8, 96))
    seed = draw(st.integers(0, 2**32 - 1))
    lengths = np.random.default_rng(seed).integers(1, 30_000, size=n)
    dp = draw(st.integers(2, 4))
    return cost, lengths, dp


def cli_json(capsys, tmp_path, cost, lengths, *args):
    """``seqbalance ARGS FILE --time-cost COST --json`` in this process, parsed."""
    batch, saved = tmp_path / "lengths.txt", tmp_path / "cost.json"
    batch.write_text("".join(f"{length}\n" for length in lengths.tolist()))
    saved.write_text(json.dumps(cost.to_dict()))
    capsys.readouterr()
    status = main([*args, str(batch), "--time-cost", str(saved), "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


ONE_WEIGHT = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@ONE_WEIGHT
@given(cases())
def test_the_dp_plan_is_the_command_lines(capsys, tmp_path, case):
    cost, lengths, dp = case
    cap = int(lengths.max()) * 2
    payload = cli_json(
        capsys, tmp_path, cost, lengths, "plan", "--dp", str(dp), "--max-token-len", str(cap)
    )
    assert payload["plan"] == plan_dp_micro_batches(lengths, dp, cap, cost=cost)
    # The step it predicts is in seconds: simulate_step of that plan under the TimeCost, which
    # is TimeCost.predict of its micro-batches to the nanosecond per document.
    step = simulate_step(payload["plan"], lengths, cost=cost)
    assert payload["predicted_step"]["makespan"] == step.makespan
    predicted = max(
        sum(float(cost.predict([lengths[mb].tolist()])[0]) for mb in rank if mb)
        for rank in payload["plan"]
    )
    assert abs(step.seconds - predicted) <= 0.5e-9 * lengths.size + 1e-12 * predicted


@ONE_WEIGHT
@given(cases())
def test_the_lockstep_plan_is_the_command_lines(capsys, tmp_path, case):
    cost, lengths, dp = case
    cap = int(lengths.max()) * 2
    payload = cli_json(
        capsys,
        tmp_path,
        cost,
        lengths,
        "plan",
        "--dp",
        str(dp),
        "--max-token-len",
        str(cap),
        "--sync",
        "micro_batch",
    )
    assert payload["plan"] == plan_dp_micro_batches(lengths, dp, cap, cost=cost, sync="micro_batch")


@ONE_WEIGHT
@given(cases())
def test_the_partition_is_the_command_lines_and_installs(capsys, tmp_path, case):
    cost, lengths, dp = case
    payload = cli_json(capsys, tmp_path, cost, lengths, "partition", "-k", str(dp))
    mine = get_seqlen_balanced_partitions(lengths, dp, False, cost=cost)
    assert payload["partitions"] == mine
    # install(cost=...): verl's calculate_workload gives each sample these weights, and its
    # get_seqlen_balanced_partitions (seqbalance's, installed) balances them.
    installed = CostSource(cost).nanoseconds(lengths)
    assert get_seqlen_balanced_partitions(installed, dp, False) == mine
    assert trainer_weights(cost, lengths, "workload").tolist() == installed.tolist()
    assert karmarkar_karp(lengths, dp, False, cost=cost) == karmarkar_karp(installed, dp, False)


@ONE_WEIGHT
@given(cases())
def test_micro_batches_weigh_the_installed_nanoseconds(capsys, tmp_path, case):
    cost, lengths, _ = case
    cap = int(lengths.max()) * 2
    installed = CostSource(cost).nanoseconds(lengths)
    assert plan_micro_batches(lengths, cap, cost=cost) == plan_micro_batches(
        lengths, cap, cost=installed
    )
    assert plan_dp_micro_batches(lengths, 2, cap, cost=cost) == plan_dp_micro_batches(
        lengths, 2, cap, cost=installed
    )


def test_one_conversion_rounds_to_the_nearest_nanosecond_and_refuses_292_years():
    cost = fitted(0)
    lengths = np.array([0, 1, 1000, 29_999])
    assert (
        nanoseconds(cost, lengths).tolist()
        == np.rint(cost(lengths) * 1e9).astype(np.int64).tolist()
    )
    with (
        pytest.warns(TimeCostWarning),
        pytest.raises(OverflowError, match=r"lengths\[1\] = 1125899906842624 is predicted"),
    ):
        nanoseconds(cost, np.array([10, 2**50]))
