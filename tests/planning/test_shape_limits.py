"""Micro-batch planners under shape limits and float costs (planning spec, "Shapes trainers must
respect"): every limit holds on every answer, the plain plan is kept when it already keeps them,
the count never passes first-fit decreasing's, and the native planner equals the pure-Python
model in tests/planning/shape_oracle.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance as sb

from .shape_oracle import first_fit_decreasing, keeps, shaped_plan


@st.composite
def problems(draw, max_n=12):
    n = draw(st.integers(1, max_n))
    lengths = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    cap = draw(st.integers(max(lengths), 60))
    max_sequences = draw(st.one_of(st.none(), st.integers(1, 4)))
    padded = draw(st.booleans())
    keys = draw(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    multiple = draw(st.integers(1, 3))
    minimum = draw(st.one_of(st.none(), st.integers(0, 8)))
    kind = draw(st.sampled_from(["tokens", "ints", "floats", "float32"]))
    if kind == "tokens":
        costs = list(lengths)
    elif kind == "ints":
        costs = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    else:
        values = draw(
            st.lists(
                st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=n, max_size=n
            )
        )
        costs = values if kind == "floats" else [np.float32(v) for v in values]
    return lengths, cap, max_sequences, padded, keys, multiple, minimum, costs


def _limits(max_sequences, padded, keys):
    return {
        "max_sequences": max_sequences,
        "footprint": "padded" if padded else "sum",
        "keys": keys,
    }


def _cost_argument(costs):
    if costs and isinstance(costs[0], np.float32):
        return np.asarray(costs, dtype=np.float32)
    return costs


@settings(max_examples=300, deadline=None)
@given(problems())
def test_the_planner_equals_the_model_and_keeps_every_limit(problem):
    lengths, cap, max_sequences, padded, keys, multiple, minimum, costs = problem
    plan = sb.plan_micro_batches(
        lengths,
        cap,
        cost=_cost_argument(costs),
        order="none",
        min_num_micro_batches=minimum,
        num_micro_batches_multiple=multiple,
        **_limits(max_sequences, padded, keys),
    )
    rounded = -(-(minimum or 0) // multiple) * multiple
    expected = shaped_plan(lengths, costs, keys, max_sequences, padded, cap, multiple, rounded)
    expected = sorted(expected, key=lambda part: not part)
    assert plan == expected
    assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
    assert keeps(plan, lengths, keys, max_sequences, padded, cap)
    assert len(plan) % multiple == 0 and len(plan) >= (minimum or 0)
    count = sb.min_num_micro_batches_for(
        lengths,
        cap,
        cost=_cost_argument(costs),
        num_micro_batches_multiple=multiple,
        **_limits(max_sequences, padded, keys),
    )
    alone = sb.plan_micro_batches(
        lengths,
        cap,
        cost=_cost_argument(costs),
        num_micro_batches_multiple=multiple,
        **_limits(max_sequences, padded, keys),
    )
    assert count == len(alone)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_a_plan_that_breaks_a_limit_is_replaced_by_one_no_longer_than_first_fit(problem):
    lengths, cap, max_sequences, padded, keys, multiple, _, costs = problem
    limits = _limits(max_sequences, padded, keys)
    plain = sb.plan_micro_batches(lengths, cap, cost=_cost_argument(costs))
    shaped = sb.plan_micro_batches(lengths, cap, cost=_cost_argument(costs), **limits)
    if keeps(plain, lengths, keys, max_sequences, padded, cap):
        assert shaped == plain
    else:
        ffd = first_fit_decreasing(lengths, keys, max_sequences, padded, cap)
        assert len(shaped) <= len(ffd)


@settings(max_examples=100, deadline=None)
@given(problems(), st.integers(1, 4))
def test_ranks_that_agree_on_a_count_each_run_exactly_that_count(problem, n_ranks):
    lengths, cap, max_sequences, padded, keys, multiple, _, costs = problem
    limits = _limits(max_sequences, padded, keys)
    chunks = [list(range(r, len(lengths), n_ranks)) for r in range(n_ranks)]
    chunks = [c for c in chunks if c]

    def rank(c, name):
        return [name[i] for i in c] if name is not None else None

    common = {"cost": "tokens", "num_micro_batches_multiple": multiple}
    counts = [
        sb.min_num_micro_batches_for(
            rank(c, lengths),
            cap,
            **common,
            **{**limits, "keys": rank(c, keys)},
        )
        for c in chunks
    ]
    agreed = max(counts)
    for c in chunks:
        plan = sb.plan_micro_batches(
            rank(c, lengths),
            cap,
            min_num_micro_batches=agreed,
            **common,
            **{**limits, "keys": rank(c, keys)},
        )
        assert len(plan) == agreed
        assert keeps(plan, rank(c, lengths), rank(c, keys), max_sequences, padded, cap)


def grouped(problem, dp_size, group):
    """A drawn problem cut to whole groups of `group` (keys shared within a group), or None
    where no plan can exist: too few groups for the ranks, a group over `max_sequences` or,
    whole, over the cap."""
    lengths, cap, max_sequences, padded, keys, multiple, minimum, costs = problem
    n = len(lengths) - len(lengths) % group
    if n < dp_size * group or (max_sequences is not None and max_sequences < group):
        return None
    lengths, costs = lengths[:n], costs[:n]
    if keys is not None:
        keys = [keys[i - i % group] for i in range(n)]
    if padded and group * max(lengths) > cap:
        return None
    if not padded and max(sum(lengths[i : i + group]) for i in range(0, n, group)) > cap:
        return None
    return lengths, cap, max_sequences, padded, keys, multiple, minimum, costs


@settings(max_examples=150, deadline=None)
@given(problems(max_n=16), st.integers(1, 3), st.sampled_from([1, 2]))
def test_the_dp_plan_keeps_every_limit_on_every_rank(problem, dp_size, group):
    cut = grouped(problem, dp_size, group)
    if cut is None:
        return
    lengths, cap, max_sequences, padded, keys, multiple, minimum, costs = cut
    n = len(lengths)
    limits = _limits(max_sequences, padded, keys)
    arguments = {
        "cost": _cost_argument(costs),
        "min_num_micro_batches": minimum,
        "num_micro_batches_multiple": multiple,
        "group_size": group,
        **limits,
    }
    plan = sb.plan_dp_micro_batches(lengths, dp_size, cap, **arguments)
    assert sorted(i for rank in plan for mb in rank for i in mb) == list(range(n))
    assert len({len(rank) for rank in plan}) == 1
    count = len(plan[0])
    assert count % multiple == 0 and count >= (minimum or 0)
    for rank in plan:
        assert keeps(rank, lengths, keys, max_sequences, padded, cap)
        for mb in rank:
            assert all(i - i % group in mb for i in mb)
    ranks, micro_batches, ids_count = sb.plan_dp_ids(lengths, dp_size, cap, **arguments)
    assert ids_count == count
    for r, rank in enumerate(plan):
        for m, mb in enumerate(rank):
            assert all(ranks[i] == r and micro_batches[i] == m for i in mb)


def test_with_the_limits_at_their_defaults_the_plan_is_unchanged():
    rng = np.random.default_rng(7)
    lengths = np.minimum(rng.lognormal(7, 1, 3000).astype(np.int64) + 1, 8192)
    plain = sb.plan_micro_batches(lengths, 8192)
    assert sb.plan_micro_batches(lengths, 8192, max_sequences=None, footprint="sum") == plain
    assert sb.plan_micro_batches(lengths, 8192, keys=[0] * lengths.size) == plain


def test_a_lognormal_batch_under_each_limit():
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(7, 1, 4096).astype(np.int64) + 1, 16384)
    keys = rng.integers(0, 3, lengths.size)
    cases = {"max_sequences": 8}, {"footprint": "padded"}, {"keys": keys}
    for limits in cases:
        plan = sb.plan_micro_batches(lengths, 16384, **limits)
        assert keeps(
            plan,
            lengths.tolist(),
            keys.tolist() if "keys" in limits else None,
            limits.get("max_sequences"),
            limits.get("footprint") == "padded",
            16384,
        )
        assert sorted(i for mb in plan for i in mb) == list(range(lengths.size))


def test_float_costs_balance_and_match_integral_ones():
    lengths = [300, 200, 100, 400, 250, 50]
    as_ints = sb.plan_micro_batches(lengths, 500, cost=[3, 2, 1, 4, 5, 6])
    as_floats = sb.plan_micro_batches(lengths, 500, cost=[3.0, 2.0, 1.0, 4.0, 5.0, 6.0])
    assert as_floats == as_ints
    as_f32 = sb.plan_micro_batches(lengths, 500, cost=np.array([3, 2, 1, 4, 5, 6], np.float32))
    assert as_f32 == as_ints
    assert sb.min_num_micro_batches_for(lengths, 500, cost=[0.5] * 6) == 3
    steps = sb.plan_packed_steps(lengths, 2, 1, 500, cost=[0.5, 1.5, 2.5, 0.25, 1.0, 2.0])
    assert sorted(i for rank in steps for step in rank for pack in step for i in pack) == list(
        range(6)
    )


def test_float_group_weights_are_summed_left_to_right():
    # Pairwise summation (np.add.reduceat on long groups) rounds these differently.
    rng = np.random.default_rng(11)
    values = rng.lognormal(0, 3, 4 * 80)
    starts = np.arange(0, values.size, 80)
    from seqbalance.costs.workload import group_sums

    sums = group_sums(values, starts)
    for g, start in enumerate(starts.tolist()):
        total = 0.0
        for v in values[start : start + 80].tolist():
            total += v
        assert sums[g] == total
    single = values.astype(np.float32)
    sums32 = group_sums(single, starts)
    assert sums32.dtype == np.float32
    for g, start in enumerate(starts.tolist()):
        total32 = np.float32(0)
        for v in single[start : start + 80]:
            total32 = np.float32(total32 + v)
        assert sums32[g] == total32


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_sequences": 1, "group_size": 2}, "holds 2 samples, more than max_sequences"),
        ({"footprint": "padded", "group_size": 2}, "padded to its longest"),
        ({"keys": ["a", "b", "a", "a"], "group_size": 2}, "mixes keys"),
        ({"footprint": "dense"}, "footprint"),
        ({"max_sequences": 0}, "max_sequences"),
        ({"keys": ["a"]}, "one entry per length"),
    ],
)
def test_limits_that_cannot_be_met_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        sb.plan_micro_batches([300, 200, 100, 400], 500, **arguments)


def test_unhashable_keys_and_a_bool_max_sequences_are_type_errors():
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        sb.plan_micro_batches([1, 2], 5, keys=["a", ["b"]])
    with pytest.raises(TypeError, match="max_sequences"):
        sb.plan_micro_batches([1, 2], 5, max_sequences=1.5)
