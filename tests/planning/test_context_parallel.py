"""plan_context_parallel: every constraint on every answer, the greedy oracle, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import (
    ModelCost,
    TimeCost,
    _native,
    cp_rank_plans,
    cp_sample_id_groups,
    plan_context_parallel,
)
from seqbalance.planning.context_parallel import comm_costs, cp_degrees

from . import cp_oracle as oracle


def quadratic(lengths: np.ndarray) -> np.ndarray:
    """A time-like cost: linear plus attention, as floats."""
    values = lengths.astype(np.float64)
    return 3.0 * values + values * values / 50.0


def ring(length: int, degree: int) -> float:
    return 0.2 * length * (degree - 1) / degree + 1.5


def scrambled(lengths: np.ndarray) -> np.ndarray:
    """A cost that does not grow with the length."""
    return (lengths * 7919 % 97).astype(np.float64)


COSTS = ("tokens", quadratic, scrambled)
COMMS = (None, 0, 0.0, 0.5, 2, ring)


@st.composite
def problems(draw):
    world_size = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]))
    allowed = cp_degrees(world_size)
    cp_sizes = None
    choice = draw(st.sampled_from(["default", "powers of two", "any sizes"]))
    if choice == "powers of two":
        cp_sizes = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3))
    elif choice == "any sizes":
        # Sizes that are not powers of two, or do not divide the world (Megatron-LM #6801).
        cp_sizes = draw(st.lists(st.integers(1, world_size), min_size=1, max_size=3))
    widest = max(cp_sizes or allowed)
    cap = draw(st.integers(1, 300))
    lengths = draw(st.lists(st.integers(0, widest * cap), max_size=40))
    cost = draw(st.sampled_from(COSTS))
    comm = draw(st.sampled_from(COMMS))
    return lengths, world_size, cap, cost, comm, cp_sizes


def laid_out_order(group):
    """Where the binding puts a group within its step: power-of-two sizes first, widest first."""
    cp_size = group[0]
    return (cp_size & (cp_size - 1) != 0, -cp_size)


def model(lengths, world_size, cost, comm, cp_sizes):
    """The oracle's view of a problem: weights, comm(i, c) and the degrees."""
    values = np.asarray(lengths, dtype=np.int64)
    degrees = cp_degrees(world_size, cp_sizes)
    weights = (values if cost == "tokens" else cost(values)).astype(np.float64).tolist()
    table = comm_costs(values, degrees, comm)
    return weights, (lambda i, c: float(table[i, degrees.index(c)])), degrees


@given(problems())
def test_every_answer_keeps_every_constraint_and_beats_the_greedy(problem):
    lengths, world_size, cap, cost, comm, cp_sizes = problem
    kept = list(lengths)
    plan = plan_context_parallel(lengths, world_size, cap, cost=cost, comm=comm, cp_sizes=cp_sizes)
    assert lengths == kept
    weights, comm_of, degrees = model(lengths, world_size, cost, comm, cp_sizes)
    oracle.check_plan(plan, lengths, world_size, cap, degrees)
    for step in plan:
        for cp_size, ranks, _ in step:
            # Blocks of consecutive ranks, a power-of-two size's aligned to it (as Megatron-LM
            # lays out its dynamic-CP process groups).
            assert ranks == list(range(ranks[0], ranks[0] + cp_size))
            assert cp_size & (cp_size - 1) or ranks[0] % cp_size == 0
    time = oracle.plan_time(plan, weights, comm_of)
    if lengths:
        _, _, floor = oracle.best_greedy(lengths, weights, comm_of, world_size, cap, degrees)
        assert time <= floor
        bound = oracle.lower_bound(lengths, weights, comm_of, world_size, cap, degrees)
        assert time >= bound * (1 - 1e-12)
    again = plan_context_parallel(
        np.asarray(lengths, dtype=np.int64),
        world_size,
        cap,
        cost=cost,
        comm=comm,
        cp_sizes=cp_sizes,
    )
    assert again == plan


@given(problems(), st.sampled_from(oracle.READINGS))
def test_the_native_greedy_is_the_oracle(problem, reading):
    lengths, world_size, cap, cost, comm, cp_sizes = problem
    weights, comm_of, degrees = model(lengths, world_size, cost, comm, cp_sizes)
    values = np.asarray(lengths, dtype=np.int64)
    table = comm_costs(values, degrees, comm)
    steps, time, method = _native._plan_context_parallel(
        values,
        np.asarray(weights, dtype=np.float64),
        table.reshape(-1),
        np.asarray(degrees, dtype=np.int64),
        world_size,
        cap,
        reading,
    )
    expected = oracle.greedy(lengths, weights, comm_of, world_size, cap, degrees, reading)
    # The binding lays groups out power-of-two sizes first, widest first (stable); the oracle
    # keeps opening order.
    widest_first = [sorted(step, key=laid_out_order) for step in expected]
    assert [[(c, i) for c, _, i in s] for s in steps] == [
        [(c, i) for c, _, i in s] for s in widest_first
    ]
    assert method == reading
    assert time == oracle.plan_time(expected, weights, comm_of)


def test_the_search_beats_the_greedy_on_a_long_tail():
    rng = np.random.default_rng(3)
    cap, world_size = 4096, 16
    lengths = np.clip(rng.lognormal(np.log(cap / 6), 1.2, 300).astype(np.int64), 1, 16 * cap)
    plan = plan_context_parallel(lengths, world_size, cap, cost=quadratic, comm=0.3)
    weights, comm_of, degrees = model(lengths, world_size, quadratic, 0.3, None)
    oracle.check_plan(plan, lengths.tolist(), world_size, cap, degrees)
    time = oracle.plan_time(plan, weights, comm_of)
    _, _, floor = oracle.best_greedy(lengths.tolist(), weights, comm_of, world_size, cap, degrees)
    assert time < floor


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([8, 16, 32]),
    st.sampled_from([512, 4096]),
    st.sampled_from([0.0, 0.05, 0.5]),
)
def test_long_tails_keep_every_constraint_where_the_search_plans(seed, world_size, cap, kappa):
    # Batches like the benchmark's, where the search (not the greedy) usually makes the plan.
    rng = np.random.default_rng(seed)
    lengths = np.clip(
        rng.lognormal(np.log(cap / 6), 1.2, 200).astype(np.int64), 1, world_size * cap
    )
    plan = plan_context_parallel(lengths, world_size, cap, cost=quadratic, comm=kappa)
    weights, comm_of, degrees = model(lengths, world_size, quadratic, kappa, None)
    oracle.check_plan(plan, lengths.tolist(), world_size, cap, degrees)
    _, _, floor = oracle.best_greedy(lengths.tolist(), weights, comm_of, world_size, cap, degrees)
    assert oracle.plan_time(plan, weights, comm_of) <= floor


def test_without_communication_the_cost_alone_decides():
    # No comm: one long sequence over every rank is as fast as it gets.
    assert plan_context_parallel([64], 4, 64) == [[(4, [0, 1, 2, 3], [0])]]
    assert plan_context_parallel([64], 4, 64, comm=0) == plan_context_parallel([64], 4, 64)
    # Heavy comm keeps it on one rank.
    assert plan_context_parallel([64], 4, 64, comm=100.0) == [[(1, [0], [0])]]


def test_model_cost_and_callables_are_costs():
    cost = ModelCost(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=100,
    )
    lengths = [900, 40, 300, 12, 600]
    plan = plan_context_parallel(lengths, 4, 512, cost=cost, comm=1e3)
    oracle.check_plan(plan, lengths, 4, 512, [1, 2, 4])
    seconds = plan_context_parallel(
        lengths, 4, 512, cost=lambda v: v * 1e-6, comm=lambda L, c: 1e-4
    )
    oracle.check_plan(seconds, lengths, 4, 512, [1, 2, 4])


def test_a_time_cost_is_a_cost_in_seconds():
    # Measured micro-batches of a layer whose attention dominates past ~20k tokens.
    rng = np.random.default_rng(5)
    batches = [rng.integers(512, 65_536, size=int(rng.integers(1, 5))).tolist() for _ in range(40)]
    seconds = [2e-3 + sum(3e-5 + 1e-7 * L + 1e-11 * L * (L + 1) / 2 for L in b) for b in batches]
    timed = TimeCost.fit(batches, seconds)
    lengths = rng.integers(1_000, 120_000, size=60)
    # Ring attention over a link: seconds per token that crosses it.
    plan = plan_context_parallel(lengths, 8, 32_768, cost=timed, comm=2e-8)
    oracle.check_plan(plan, lengths.tolist(), 8, 32_768, [1, 2, 4, 8])
    assert plan == plan_context_parallel(lengths, 8, 32_768, cost=lambda v: timed(v), comm=2e-8)
    weights, comm_of, degrees = model(lengths.tolist(), 8, timed, 2e-8, None)
    _, _, floor = oracle.best_greedy(lengths.tolist(), weights, comm_of, 8, 32_768, degrees)
    time = oracle.plan_time(plan, weights, comm_of)
    assert time <= floor
    assert time >= oracle.lower_bound(lengths.tolist(), weights, comm_of, 8, 32_768, degrees) * (
        1 - 1e-12
    )


def test_edge_cases():
    assert plan_context_parallel([], 8, 10) == []
    oracle.check_plan(plan_context_parallel([0, 0, 1], 2, 1), [0, 0, 1], 2, 1, [1, 2])
    plan = plan_context_parallel([5, 5, 5], 1, 5)
    assert sorted(i for step in plan for _, _, group in step for i in group) == [0, 1, 2]
    assert all(c == 1 and len(g) == 1 for step in plan for c, _, g in step)
    assert plan_context_parallel([36, 3], 4, 10, cp_sizes=[4]) == [[(4, [0, 1, 2, 3], [0, 1])]]
    # Two groups of four ranks beat one group of both sequences on eight ranks.
    assert plan_context_parallel([36, 3], 8, 10, cp_sizes=[4]) == [
        [(4, [0, 1, 2, 3], [0]), (4, [4, 5, 6, 7], [1])]
    ]


def test_a_sequence_that_fits_no_degree_is_named():
    with pytest.raises(ValueError, match=r"lengths\[2\] = 81 fits no allowed CP degree"):
        plan_context_parallel([5, 80, 81], 8, 10)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 41 fits no allowed CP degree"):
        plan_context_parallel([5, 41], 8, 10, cp_sizes=[1, 4])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"world_size": 0}, ValueError, "world_size must be >= 1, got 0"),
        ({"world_size": "8"}, TypeError, "world_size must be an int, got '8'"),
        ({"world_size": 2**25}, ValueError, "world_size must be <= 2"),
        ({"max_token_len": 0}, ValueError, "max_token_len must be >= 1, got 0"),
        ({"max_token_len": 2.5}, TypeError, "max_token_len must be an int"),
        ({"cp_sizes": [0]}, ValueError, r"cp_sizes\[0\] must be >= 1, got 0"),
        ({"cp_sizes": [2, 16]}, ValueError, r"cp_sizes\[1\] must be in 1..world_size=8, got 16"),
        ({"cp_sizes": []}, ValueError, "cp_sizes must name at least one"),
        ({"cp_sizes": 4}, TypeError, "cp_sizes must be a sequence of ints, got 4"),
        # A 0-d array once met len() of an unsized object.
        ({"cp_sizes": np.array(2)}, TypeError, "cp_sizes must be a sequence of ints, got "),
        ({"cp_sizes": np.array([[2]])}, TypeError, "cp_sizes must be a sequence of ints"),
        ({"cp_sizes": [2.0]}, TypeError, r"cp_sizes\[0\] must be an int"),
        ({"one_cp_size_per_step": 1}, TypeError, "one_cp_size_per_step must be True or False"),
        ({"one_cp_size_per_step": None}, TypeError, "one_cp_size_per_step must be True or False"),
        ({"comm": -1.0}, ValueError, "comm must be finite and >= 0, got -1.0"),
        ({"comm": float("nan")}, ValueError, "comm must be finite and >= 0, got nan"),
        ({"comm": "ring"}, TypeError, "comm must be None, a number .* got 'ring'"),
        ({"comm": True}, TypeError, "comm must be None, a number"),
        ({"comm": lambda L, c: -1.0}, ValueError, r"comm\(\d+, 2\) must be finite and >= 0"),
        ({"comm": lambda L, c: "x"}, TypeError, r"comm\(\d+, 2\) must be a number .*, got 'x'"),
        ({"comm": lambda L, c: np.complex128(1)}, TypeError, r"comm\(\d+, 2\) must be a number"),
        ({"comm": lambda L, c: 10**400}, ValueError, r"comm\(\d+, 2\) must be finite and >= 0"),
        ({"comm": 10**400}, ValueError, "comm must be finite and >= 0"),
        ({"comm": 1e308}, OverflowError, r"comm=1e\+308 .* lengths\[0\] = 5"),
        ({"comm": lambda L, c: 1e308}, OverflowError, "cost and comm of the lengths sum to inf"),
        ({"cost": "bogus"}, ValueError, "cost must be 'tokens'"),
        ({"cost": lambda v: -v}, ValueError, "cost"),
        ({"lengths": [1, -2]}, ValueError, r"lengths\[1\] must be >= 0, got -2"),
        ({"lengths": [1.5]}, TypeError, r"lengths\[0\] must be an integer"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    arguments = {"lengths": [5, 12, 3], "world_size": 8, "max_token_len": 10, **kwargs}
    with pytest.raises(error, match=match):
        plan_context_parallel(**arguments)


def test_the_input_array_is_never_changed():
    lengths = np.array([30, 5, 17, 2], dtype=np.int64)
    seen = []

    def cost(values):
        seen.append(values)
        values *= 2  # a careless cost that writes to what it is given
        return values.astype(np.float64)

    plan_context_parallel(lengths, 4, 16, cost=cost)
    assert lengths.tolist() == [30, 5, 17, 2]
    assert seen and seen[0] is not lengths


def test_exported():
    assert "plan_context_parallel" in seqbalance.__all__
    assert seqbalance.plan_context_parallel is plan_context_parallel


def megatron_partner_cp_size(sample_id_groups, step, sample_id):
    """How Megatron-LM's dynamic-CP path reads a sample's CP size from the schedule: the number
    of DP×CP ranks whose list holds it (the stand-in of its receiving side)."""
    return len([True for ids in sample_id_groups[step] if sample_id in ids])


@given(problems(), st.booleans())
def test_the_megatron_layout_carries_the_plan(problem, widen_idle):
    lengths, world_size, cap, cost, comm, cp_sizes = problem
    plan = plan_context_parallel(lengths, world_size, cap, cost=cost, comm=comm, cp_sizes=cp_sizes)
    try:
        layout = cp_sample_id_groups(plan, world_size, widen_idle=widen_idle, cp_sizes=cp_sizes)
    except ValueError as error:
        # Only idle ranks no group can widen into: world sizes that are not powers of two, or
        # allowed sizes that leave no room to move up into.
        assert widen_idle and "idle" in str(error)
        assert world_size & (world_size - 1) or cp_sizes is not None
        return
    assert len(layout) == len(plan)
    seen = []
    for position, (ranks, step) in enumerate(zip(layout, plan, strict=True)):
        assert len(ranks) == world_size
        if widen_idle:
            assert all(ranks)
        by_sample = {}
        for rank, ids in enumerate(ranks):
            for sample_id in ids:
                by_sample.setdefault(sample_id, []).append(rank)
        for sample_id, holders in by_sample.items():
            size = megatron_partner_cp_size(layout, position, sample_id)
            # One block of consecutive ranks, aligned to its size where that is a power of two.
            assert holders == list(range(holders[0], holders[0] + size))
            assert size & (size - 1) or holders[0] % size == 0
            assert -(-lengths[sample_id] // size) <= cap
            planned = next(c for c, _, ids in step if sample_id in ids)
            assert size == planned or (widen_idle and size >= planned)
            assert size in cp_degrees(world_size, cp_sizes)
        for rank_ids in ranks:
            share = 0
            for sample_id in rank_ids:
                share += -(
                    -lengths[sample_id] // megatron_partner_cp_size(layout, position, sample_id)
                )
            assert share <= cap
        seen.extend(by_sample)
    assert sorted(seen) == list(range(len(lengths)))
    per_rank = cp_rank_plans(plan, world_size)
    for rank in range(world_size):
        for position, held in enumerate(per_rank[rank]):
            if held is None:
                assert all(rank not in ranks for _, ranks, _ in plan[position])
                continue
            cp_size, cp_rank, ids = held
            group = next(g for g in plan[position] if rank in g[1])
            assert (cp_size, group[1][cp_rank], ids) == (group[0], rank, group[2])


def test_the_layouts_refuse_what_they_cannot_carry():
    with pytest.raises(ValueError, match=r"step 0 leaves 4 of 12 ranks idle"):
        cp_sample_id_groups([[(8, list(range(8)), [0])]], 12, widen_idle=True)
    with pytest.raises(
        ValueError, match=r"rank 8 of ranks \[8, 9\] is outside range\(world_size=8\)"
    ):
        cp_sample_id_groups([[(2, [8, 9], [0])]], 8)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        cp_rank_plans([], 0)


@pytest.mark.parametrize("cap", [np.uint64(2**64 - 1), 2**64 - 1, 2**64, 2**70])
def test_a_budget_near_or_past_u64_holds_every_rank_within_it(cap):
    # Two sequences of 2**63 - 1 tokens fill 2**64 - 1 on one rank; a third once wrapped the
    # native running total past zero and joined them.
    lengths = [2**63 - 1] * 3
    plan = plan_context_parallel(lengths, 1, cap)
    oracle.check_plan(plan, lengths, 1, min(int(cap), 2**64 - 1), [1])
    assert sorted(len(group) for step in plan for _, _, group in step) == [1, 2]


def test_widening_keeps_to_the_allowed_sizes():
    plan = [[(2, [0, 1], [0]), (1, [2], [1])]]
    # All sizes allowed: the narrowest doubles, then the next narrowest, up to 8 ranks.
    assert cp_sample_id_groups(plan, 8, widen_idle=True) == [[[0]] * 4 + [[1]] * 4]
    # Sizes 1 and 4 only: each group moves up to 4, never to 2 or 8.
    assert cp_sample_id_groups([[(1, [0], [0])]], 4, widen_idle=True, cp_sizes=[1, 4]) == [
        [[0]] * 4
    ]
    assert cp_sample_id_groups(
        [[(1, [0], [0]), (1, [1], [1])]], 8, widen_idle=True, cp_sizes=[1, 4]
    ) == [[[0]] * 4 + [[1]] * 4]
    with pytest.raises(ValueError, match=r"step 0 leaves 4 of 8 ranks idle .* cp_sizes \[1, 2\]"):
        cp_sample_id_groups(plan, 8, widen_idle=True, cp_sizes=[1, 2])
    with pytest.raises(
        ValueError, match=r"step 0, group 0 has cp_size 2, not in cp_sizes \[1, 4\]"
    ):
        cp_sample_id_groups(plan, 8, cp_sizes=[1, 4])
    with pytest.raises(ValueError, match=r"cp_sizes\[0\] must be in 1..world_size=8, got 9"):
        cp_sample_id_groups(plan, 8, cp_sizes=[9])


def test_widening_an_empty_step_is_refused_by_name():
    with pytest.raises(ValueError, match="step 0 has no group to widen into its 4 idle ranks"):
        cp_sample_id_groups([[]], 4, widen_idle=True)
    assert cp_sample_id_groups([[]], 4) == [[[], [], [], []]]
