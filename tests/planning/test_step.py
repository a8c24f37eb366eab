"""simulate_step: the step spec's model, held to an event-queue simulation of its own
(tests/planning/step_oracle.py), and every refusal by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import StepTime, plan_dp_ids, plan_dp_micro_batches, simulate_step
from tests.planning import step_oracle

TIME_COST = step_oracle.spec_time_cost()


@st.composite
def plans(draw, lockstep=False):
    """A list plan of 1-4 ranks (equal counts under lockstep), each index at most once, with
    lengths (zeros included: no document) and the arguments of the model."""
    n = draw(st.integers(0, 30))
    lengths = draw(st.lists(st.integers(0, 40_000), min_size=n, max_size=n))
    indexes = draw(st.permutations(range(n)))
    kept = indexes[: draw(st.integers(0, n))]
    ranks = draw(st.integers(1, 4))
    counts = (
        [draw(st.integers(0, 7))] * ranks
        if lockstep
        else draw(st.lists(st.integers(0, 7), min_size=ranks, max_size=ranks))
    )
    cells = sum(counts)
    plan = [[[] for _ in range(count)] for count in counts]
    flat = [mb for rank in plan for mb in rank]
    for i in kept:
        if flat:
            flat[draw(st.integers(0, cells - 1))].append(i)
    return plan, lengths


COSTS = st.sampled_from(["tokens", "workload", TIME_COST])


@settings(max_examples=300, deadline=None)
@given(plans(), COSTS, st.integers(1, 9), st.floats(0.05, 0.95))
def test_pipelines_and_once_a_step_agree_with_the_event_queue(case, cost, stages, share):
    plan, lengths = case
    got = simulate_step(plan, lengths, cost=cost, pipeline_stages=stages, forward_share=share)
    want = step_oracle.step_of(plan, lengths, cost, "step", stages, share)
    check(got, want, len(plan), documents_of(plan, lengths, cost))
    assert got.sync == "step" and got.pipeline_stages == stages


@settings(max_examples=200, deadline=None)
@given(plans(lockstep=True), COSTS)
def test_lockstep_agrees_with_the_slowest_of_every_slot(case, cost):
    plan, lengths = case
    got = simulate_step(plan, lengths, cost=cost, sync="micro_batch")
    want = step_oracle.step_of(plan, lengths, cost, "micro_batch", 1, 0.5)
    check(got, want, len(plan), documents_of(plan, lengths, cost))


@settings(max_examples=200, deadline=None)
@given(
    plans(),
    COSTS,
    st.sampled_from([1, 2, 8, 128, 1000]),
    st.sampled_from([{}, {"pipeline_stages": 3}, {"sync": "micro_batch"}]),
)
def test_padding_prices_every_length_rounded_up_as_the_planners_round_it(case, cost, pad, model):
    plan, lengths = case
    if model.get("sync") == "micro_batch" and len({len(rank) for rank in plan}) > 1:
        plan = [rank[: min(len(r) for r in plan)] for rank in plan]
    padded = [-(-s // pad) * pad for s in lengths]
    got = simulate_step(plan, lengths, cost=cost, pad_to_multiple_of=pad, **model)
    want = step_oracle.step_of(
        plan,
        padded,
        cost,
        model.get("sync", "step"),
        model.get("pipeline_stages", 1),
        1 / 3,
    )
    check(got, want, len(plan), documents_of(plan, padded, cost))
    # Explicit weights are used as given, as the planners use them: padding changes nothing.
    weights = [float(s % 7) for s in lengths]
    assert (
        simulate_step(plan, lengths, cost=weights, pad_to_multiple_of=pad, **model).makespan
        == simulate_step(plan, lengths, cost=weights, **model).makespan
    )


@pytest.mark.parametrize(
    ("pad", "error", "words"),
    [
        (0, ValueError, "pad_to_multiple_of must be >= 1, got 0"),
        (2.0, TypeError, "pad_to_multiple_of must be an int"),
        (True, TypeError, "pad_to_multiple_of must be an int"),
        (2**63, OverflowError, "lengths[0] = 5 padded to a multiple of 9223372036854775808"),
    ],
)
def test_a_bad_padding_is_refused_by_name(pad, error, words):
    with pytest.raises(error) as caught:
        simulate_step([[[0]]], [5], pad_to_multiple_of=pad)
    assert words in str(caught.value)


def check(got: StepTime, want: dict, ranks: int, documents: int = 0) -> None:
    # The library sums a micro-batch's documents as the planners weigh a TimeCost, each
    # document's TimeCost.__call__ rounded to whole nanoseconds; the oracle asks
    # TimeCost.predict: the same model, off by at most half a nanosecond per document.
    slack = 1e-12 + 0.5e-9 * documents
    assert got.makespan == pytest.approx(want["seconds"], rel=1e-12, abs=slack)
    assert got.busy.shape == (ranks,)
    np.testing.assert_allclose(got.busy, want["busy"], rtol=1e-12, atol=slack)
    np.testing.assert_allclose(got.waiting, want["waiting"], rtol=1e-9, atol=1e-9 + 2 * slack)
    scale = max(want["seconds"], 1e-300)
    assert got.bubble == pytest.approx(want["bubble"], rel=1e-9, abs=1e-9 + 2 * slack / scale)
    assert got.lower_bound == pytest.approx(want["lower_bound"], rel=1e-12, abs=slack)
    assert got.lower_bound <= got.makespan * (1 + 1e-12)
    for mine, theirs in zip(got.times, want["times"], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=slack)


def documents_of(plan: list, lengths: list, cost: object) -> int:
    """How many documents a TimeCost prices (0 for another cost: no rounding)."""
    if not isinstance(cost, type(TIME_COST)):
        return 0
    return sum(1 for rank in plan for mb in rank for i in mb if lengths[i] > 0)


def test_equal_micro_batches_take_m_plus_p_minus_one_slots():
    # 6 micro-batches of 12 tokens, 4 stages: (6 + 4 - 1) * 12 / 4.
    plan = [[[2 * k, 2 * k + 1] for k in range(6)]]
    step = simulate_step(plan, [6] * 12, pipeline_stages=4, forward_share=0.25)
    assert step.makespan == 27.0
    assert step.busy.tolist() == [72.0]
    assert step.waiting.tolist() == [27.0 - 18.0]
    assert step.bubble == pytest.approx(1 - 72 / (4 * 27))
    assert step.lower_bound == 18.0


def test_golden_docstring_example_and_the_three_syncs():
    plan, lengths = [[[0], [1, 2]], [[3], [4]]], [300, 100, 200, 250, 200]
    once = simulate_step(plan, lengths)
    assert (once.makespan, once.busy.tolist()) == (600.0, [600.0, 450.0])
    assert once.waiting.tolist() == [0.0, 150.0]
    lockstep = simulate_step(plan, lengths, sync="micro_batch")
    assert lockstep.makespan == 300.0 + 300.0
    assert lockstep.lower_bound == 525.0 and lockstep.bubble == pytest.approx(0.125)
    assert "ranks in lockstep" in str(lockstep) and "bubble 12.50%" in str(lockstep)
    pipe = simulate_step(plan, lengths, pipeline_stages=2, forward_share=0.5)
    assert pipe.makespan == step_oracle.pipeline_makespan([300.0, 300.0], 2, 0.5)
    assert "1F1B pipelines of 2 stages" in str(pipe)


def test_a_time_cost_adds_its_micro_batch_term_once_per_micro_batch_with_a_document():
    plan = [[[0, 1], [2], []]]
    lengths = [1000, 3000, 0]
    step = simulate_step(plan, lengths, cost=TIME_COST)
    first = step_oracle.spec_seconds([1000, 3000])
    # Each document's seconds are rounded to the nanoseconds the planners weigh.
    assert step.times[0].tolist() == pytest.approx([first, 0.0, 0.0], rel=1e-12, abs=1e-9)
    assert step.makespan == pytest.approx(first, rel=1e-12, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=4, max_size=40), st.integers(1, 4))
def test_the_ids_triple_is_the_list_plan(lengths, ranks):
    plan = plan_dp_micro_batches(lengths, ranks, 300, cost="tokens")
    ids = plan_dp_ids(lengths, ranks, 300, cost="tokens")
    for model in ({}, {"sync": "micro_batch"}, {"pipeline_stages": 3}):
        a, b = simulate_step(plan, lengths, **model), simulate_step(ids, lengths, **model)
        assert a.makespan == b.makespan and a.busy.tolist() == b.busy.tolist()
        assert [t.tolist() for t in a.times] == [t.tolist() for t in b.times]


def test_samples_left_out_of_a_plan_cost_nothing():
    assert simulate_step([[[1]]], [500, 7]).makespan == 7.0
    ids = (np.array([-1, 0]), np.array([-1, 0]), 1)
    assert simulate_step(ids, [500, 7]).makespan == 7.0


def test_an_empty_step_has_no_bubble():
    step = simulate_step([[[], []], [[], []]], [], sync="micro_batch")
    assert (step.makespan, step.bubble, step.lower_bound) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"sync": "fsdp"}, "sync must be 'step' or 'micro_batch'"),
        ({"sync": None}, "sync must be"),
        ({"pipeline_stages": 0}, "pipeline_stages must be an int in 1..2**24, got 0"),
        ({"pipeline_stages": 2**24 + 1}, "pipeline_stages must be an int in 1..2**24"),
        ({"pipeline_stages": 2.0}, "pipeline_stages must be an int >= 1"),
        ({"pipeline_stages": True}, "pipeline_stages must be an int >= 1"),
        ({"pipeline_stages": "4"}, "pipeline_stages must be an int >= 1"),
        ({"forward_share": 0}, "forward_share must be a finite number in (0, 1), got 0"),
        ({"forward_share": 1.0}, "forward_share must be a finite number in (0, 1)"),
        ({"forward_share": math.nan}, "forward_share must be a finite number in (0, 1)"),
        ({"forward_share": math.inf}, "forward_share must be a finite number in (0, 1)"),
        ({"forward_share": "1/3"}, "forward_share must be a number in (0, 1)"),
        ({"forward_share": False}, "forward_share must be a number in (0, 1)"),
        (
            {"sync": "micro_batch", "pipeline_stages": 4},
            "pipeline_stages=4 with sync='micro_batch'",
        ),
    ],
)
def test_the_model_refuses_by_name(model, words):
    with pytest.raises(ValueError) as error:
        simulate_step([[[0]]], [5], **model)
    assert words in str(error.value)


@pytest.mark.parametrize(
    ("plan", "kind", "words"),
    [
        ([], ValueError, "plan has no rank"),
        ([[[0, 0]]], ValueError, "plan holds sample 0 more than once"),
        ([[[0]], [[0]]], ValueError, "more than once"),
        ([[[0], [3]]], ValueError, "plan[0][1] holds 3, not an index of lengths (3 samples)"),
        ([[[0]], [[1], [-1]]], ValueError, "plan[1][1] holds -1"),
        ([[[0.5]]], TypeError, "plan must hold integer sample indexes"),
        ([[[True]]], TypeError, "plan must hold integer sample indexes"),
        ("plan", TypeError, "plan must be plan[rank][micro_batch] -> indexes"),
        ([[7]], TypeError, "plan[0][0] must be a list of sample indexes"),
        ([5], TypeError, "plan[0] must be a list of micro-batches"),
        ((np.array([0, 0, 0]), np.array([0, 1, 0]), 1), ValueError, "not below the count (1)"),
        ((np.array([0, 0]), np.array([0, 0, 0]), 1), ValueError, "one id per sample (3)"),
        ((np.array([0, -1, 0]), np.array([0, 0, 0]), 1), ValueError, "a rank id but no"),
        ((np.array([-1, -1, -1]),) * 2 + (2,), ValueError, "every rank id is -1"),
        ((np.array([0, 0, 0]), np.array([0, 0, 0]), -1), ValueError, "must be >= 0, got -1"),
        ((np.array([0, -2, 0]), np.array([0, -2, 0]), 1), ValueError, "ids must be >= 0"),
    ],
)
def test_bad_plans_are_refused_by_name(plan, kind, words):
    with pytest.raises(kind) as error:
        simulate_step(plan, [1, 2, 3])
    assert words in str(error.value)


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        # The count and the ranks size the step's arrays: bounded before anything is allocated
        # (they were a bare OverflowError and a 7 TiB allocation).
        ((np.array([0, 0]), np.array([0, 1]), 2**70), "plan[2] (the micro-batch count) must be"),
        ((np.array([0, 0]), np.array([0, 1]), 10**12), "<= 2**24 (16777216), got 1000000000000"),
        ((np.array([0, 0]), np.array([0, 1]), np.uint64(2**63)), "got 9223372036854775808"),
        ((np.array([0, 10**12]), np.array([0, 1]), 2), "plan[0] (rank_ids) holds rank 10000000"),
        ((np.array([0, 2**24]), np.array([0, 1]), 2), "at most 2**24 ranks"),
    ],
)
def test_an_ids_triple_too_large_to_simulate_is_refused_by_name(plan, words):
    with pytest.raises(ValueError) as error:
        simulate_step(plan, [1, 2])
    assert words in str(error.value)
    # At the bounds themselves it is simulated (empty ranks and micro-batches take 0).
    assert simulate_step((np.array([0, 0]), np.array([0, 1]), 2**10), [1, 2]).makespan == 3.0


def test_lockstep_needs_the_same_count_on_every_rank():
    with pytest.raises(ValueError, match=r"rank 1 has 1, rank 0 has 2"):
        simulate_step([[[0], [1]], [[2]]], [1, 2, 3], sync="micro_batch")
    # Once a step or in pipelines, ranks may differ.
    assert simulate_step([[[0], [1]], [[2]]], [1, 2, 3], pipeline_stages=2).makespan > 0


def test_bad_lengths_and_costs_are_refused_as_the_planners_refuse_them():
    with pytest.raises(ValueError, match="lengths"):
        simulate_step([[[0]]], [-1])
    with pytest.raises(ValueError, match="cost must be 'tokens', 'workload'"):
        simulate_step([[[0]]], [1], cost="flops")
    with pytest.raises(ValueError, match="weights but there are 1 samples"):
        simulate_step([[[0]]], [1], cost=[1.0, 2.0])
