"""install(step=True)'s core (seqbalance.integrations._step): the guarantees of the planned step
for any batch, rank count, cap and groups, and "never above the trainer's own" in the step model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import simulate_step
from seqbalance.integrations import _own_plans, _slots, _step
from tests.planning.step_oracle import spec_time_cost

WORKLOAD = _step.StepMode()


def verl_weights(lengths):
    return _step.trainer_weights(None, lengths, "workload")


@st.composite
def problems(draw, pipeline=False):
    dp = draw(st.integers(1, 4))
    group = draw(st.sampled_from([1, 1, 2]))
    per_rank = draw(st.integers(1, 6)) * group
    cap = draw(st.integers(8, 200))
    lengths = np.array(
        draw(st.lists(st.integers(1, cap), min_size=dp * per_rank, max_size=dp * per_rank)),
        dtype=np.int64,
    )
    if pipeline:
        mode = _step.StepMode("step", draw(st.sampled_from([2, 4])))
    else:
        mode = draw(st.sampled_from([_step.StepMode(), _step.StepMode("step", 1)]))
    minimum = draw(st.sampled_from([None, 1, 2]))
    multiple = draw(st.sampled_from([None, 1, 2]))
    return dp, group, per_rank, cap, lengths, mode, minimum, multiple


def check_guarantees(plan, lengths, cap, group, minimum, multiple, rank_sizes=None):
    counts = {len(rank) for rank in plan}
    assert len(counts) == 1, "the same count on every rank"
    count = counts.pop()
    assert count >= (minimum or 1)
    if multiple:
        assert count % multiple == 0
    seen = []
    for r, rank in enumerate(plan):
        for part in rank:
            assert part, "no empty micro-batch"
            assert int(lengths[np.asarray(part)].sum()) <= cap, "the cap"
            if group > 1:
                heads = {i // group for i in part}
                assert len(heads) * group == len(part), "groups whole"
            seen.extend(part)
        if rank_sizes is not None:
            assert sum(map(len, rank)) == rank_sizes[r]
    assert sorted(seen) == list(range(len(lengths))), "every index once"


def trainer_fixed(chunks, cap, group, minimum, multiple):
    try:
        return _own_plans.verl_micro_batches(
            chunks,
            cap,
            weights=verl_weights,
            min_num_micro_batch=minimum,
            num_batches_divided_by=multiple,
            force_group_size=group,
        )
    except _step.UnmetConstraint:
        return None


def _global(plan, per_rank):
    """Rank ``r``'s own indexes (its chunk of ``per_rank`` samples) as indexes of all samples."""
    return [[[i + r * per_rank for i in part] for part in rank] for r, rank in enumerate(plan)]


def steps(plan, lengths, mode):
    return simulate_step(
        plan, lengths, cost="workload", sync=mode.sync, pipeline_stages=mode.pipeline_stages
    ).makespan


@settings(max_examples=150)
@given(problems())
def test_fixed_ranks_guarantees_and_never_above_the_trainer(problem):
    dp, group, per_rank, cap, lengths, mode, minimum, multiple = problem
    chunks = [lengths[r * per_rank : (r + 1) * per_rank] for r in range(dp)]
    trainer = trainer_fixed(chunks, cap, group, minimum, multiple)
    try:
        planned = _step.plan_fixed(
            chunks,
            cap,
            cost="workload",
            mode=mode,
            trainer=trainer,
            min_num_micro_batches=minimum,
            num_micro_batches_multiple=multiple,
            force_group_size=group,
        )
    except _step.UnmetConstraint:
        # Only where the trainer's own code cannot plan either.
        assert trainer is None
        return
    flat = _global(planned.plan, per_rank)
    check_guarantees(flat, lengths, cap, group, minimum, multiple, [per_rank] * dp)
    assert steps(flat, lengths, mode) == pytest.approx(planned.seconds, rel=1e-12)
    if trainer is not None:
        tflat = _global(trainer, per_rank)
        assert planned.seconds <= steps(tflat, lengths, mode) * (1 + 1e-9)
        assert planned.trainer_seconds == pytest.approx(steps(tflat, lengths, mode), rel=1e-12)


@settings(max_examples=150)
@given(st.one_of(problems(), problems(pipeline=True)))
def test_free_ranks_guarantees_and_never_above_the_trainer(problem):
    dp, group, per_rank, cap, lengths, mode, minimum, multiple = problem
    chunks = [lengths[r * per_rank : (r + 1) * per_rank] for r in range(dp)]
    trainer = trainer_fixed(chunks, cap, group, minimum, multiple)
    if trainer is not None:
        trainer = _global(trainer, per_rank)
    try:
        planned = _step.plan_free(
            lengths,
            dp,
            cap,
            cost="workload",
            mode=mode,
            trainer=trainer,
            min_num_micro_batches=minimum,
            num_micro_batches_multiple=multiple,
            force_group_size=group,
        )
    except _step.UnmetConstraint:
        # A group over the cap, or too few groups for the count on a rank: the trainer's own
        # split of these samples cannot plan either.
        assert trainer is None
        return
    check_guarantees(planned.plan, lengths, cap, group, minimum, multiple, [per_rank] * dp)
    if trainer is not None:
        assert planned.seconds <= steps(trainer, lengths, mode) * (1 + 1e-9)


def test_the_trainer_plan_over_the_cap_is_never_kept():
    lengths = np.array([60, 60, 10, 10], dtype=np.int64)
    over = [[[0, 1]], [[2, 3]]]  # rank 0's only micro-batch holds 120 tokens: over 100
    planned = _step.plan_free(lengths, 2, 100, cost="tokens", mode=WORKLOAD, trainer=over)
    assert planned.kept == "seqbalance"
    assert planned.trainer_seconds is None
    check_guarantees(planned.plan, lengths, 100, 1, None, None)


def test_a_better_trainer_plan_is_kept():
    # A trainer plan with more micro-batches than seqbalance's minimum is below it in a pipeline
    # whose cost does not price a micro-batch: kept.
    lengths = np.full(16, 10, dtype=np.int64)
    trainer = [[[i] for i in range(8)], [[i] for i in range(8, 16)]]
    planned = _step.plan_fixed(
        [lengths[:8], lengths[8:]],
        80,
        cost="tokens",
        mode=_step.StepMode("step", 4),
        trainer=[[[i] for i in range(8)], [[i] for i in range(8)]],
    )
    assert planned.count == 8
    assert planned.seconds <= simulate_step(
        trainer, lengths, cost="tokens", pipeline_stages=4
    ).makespan * (1 + 1e-12)


def test_unmet_constraints_name_what():
    lengths = np.array([10, 300, 5, 5], dtype=np.int64)
    with pytest.raises(_step.UnmetConstraint, match="max_token_len|cap|300"):
        _step.plan_free(lengths, 2, 100, cost="tokens", mode=WORKLOAD, trainer=None)
    with pytest.raises(_step.UnmetConstraint, match="over max_token_len"):
        _own_plans.verl_micro_batches([lengths[:2], lengths[2:]], 100, weights=verl_weights)
    with pytest.raises(_step.UnmetConstraint, match="dp_size"):
        _step.plan_free(lengths[:3], 2, 400, cost="tokens", mode=WORKLOAD, trainer=None)


def test_verl_model_counts_and_layout():
    # The count is raised until every rank keeps the cap; micro-batches small at both ends.
    chunks = [np.array([50, 50, 50, 50, 10, 10], dtype=np.int64), np.array([5] * 6)]
    plan = _own_plans.verl_micro_batches(chunks, 100, weights=verl_weights)
    assert len(plan[0]) == len(plan[1]) == 3
    loads = [int(chunks[0][part].sum()) for part in plan[0]]
    assert max(loads) <= 100


def test_a_time_cost_plans_and_weighs_in_nanoseconds():
    cost = spec_time_cost()
    lengths = np.array([1000, 2000, 3000, 500], dtype=np.int64)
    weights = _step.trainer_weights(cost, lengths, "workload")
    assert weights.dtype == np.int64
    assert weights.tolist() == np.rint(cost(lengths) * 1e9).astype(np.int64).tolist()
    planned = _step.plan_free(lengths, 2, 4000, cost=cost, mode=WORKLOAD, trainer=None)
    check_guarantees(planned.plan, lengths, 4000, 1, None, None)


def test_never_above_the_trainer_where_the_planner_alone_would_be():
    # An SFT batch of the step spec (seed 0) on 8 ranks, 32 documents each, cap 131,072: each
    # rank's own balanced split, slots heaviest first, is above verl's lockstep step here; the
    # trainer's micro-batches realigned (or kept) are not.
    lengths = np.minimum(np.random.default_rng(0).lognormal(9, 1, 256).astype(np.int64) + 1, 65_536)
    chunks = [lengths[r * 32 : (r + 1) * 32] for r in range(8)]
    trainer = trainer_fixed(chunks, 131_072, 1, None, None)
    planned = _step.plan_fixed(chunks, 131_072, cost="workload", mode=WORKLOAD, trainer=trainer)
    own = [[[i + 32 * r for i in part] for part in rank] for r, rank in enumerate(trainer)]
    assert planned.seconds <= steps(own, lengths, WORKLOAD)


def test_in_a_pipeline_never_fewer_micro_batches_than_the_trainer_unless_priced():
    # verl's workload prices no micro-batch, so a plan of fewer micro-batches than verl's would
    # look cheaper than it is: here the planner alone would run 6 where verl runs 7.
    lengths = np.array(
        [288, 301, 25, 285, 331, 92, 60, 28, 281, 333, 212, 216, 277, 1, 294, 320], dtype=np.int64
    )
    own = _own_plans.verl_micro_batches([lengths[:8], lengths[8:]], 352, weights=verl_weights)
    trainer = [[[i + 8 * r for i in mb] for mb in rank] for r, rank in enumerate(own)]
    planned = _step.plan_free(
        lengths, 2, 352, cost="workload", mode=_step.StepMode("step", 4), trainer=trainer
    )
    assert len(own[0]) == 7 and planned.count >= 7


@settings(max_examples=100)
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(20, 200),
    st.sampled_from([_step.StepMode(), _step.StepMode("step", 4)]),
    st.data(),
)
def test_the_driver_layout_decodes_to_every_guarantee_never_above_the_trainer(
    dp, windows, rows, cap, mode, data
):
    n = dp * windows * rows
    lengths = np.array(data.draw(st.lists(st.integers(1, cap), min_size=n, max_size=n)))

    def own(rank_lengths):
        try:
            return _own_plans.verl_micro_batches(rank_lengths, cap, weights=verl_weights)
        except _step.UnmetConstraint:
            return None

    planned = _slots.plan_driver(
        lengths, dp, cap, mini_batch_rows=rows, cost="workload", mode=mode, trainer=own
    )
    assert sorted(planned.order.tolist()) == list(range(n))
    laid = lengths[planned.order]
    chunk = n // dp
    total = 0.0
    for window in range(windows):
        plan = []
        for r in range(dp):
            start = r * chunk + window * rows
            part = slice(start, start + rows)
            parts = _slots.decode_slots(planned.codes[part], laid[part], cap)
            assert parts is not None  # what every worker forms
            plan.append([[start + i for i in mb] for mb in parts])
        rows_of = sorted(i for rank in plan for mb in rank for i in mb)
        check_guarantees(plan_in(plan), laid[rows_of], cap, 1, None, None)
        total += steps(plan, laid, mode)
    assert total == pytest.approx(planned.seconds, rel=1e-9)
    if planned.trainer_seconds is not None:
        assert planned.seconds <= planned.trainer_seconds * (1 + 1e-9)


def plan_in(plan):
    """The plan over just its own rows, renumbered from 0 (for check_guarantees)."""
    rows = sorted(i for rank in plan for mb in rank for i in mb)
    index = {row: k for k, row in enumerate(rows)}
    return [[[index[i] for i in mb] for mb in rank] for rank in plan]
