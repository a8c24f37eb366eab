"""plan_micro_batches and min_num_micro_batches_for: the hard cap and every count guarantee."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    _native,
    calculate_workload,
    get_seqlen_balanced_partitions,
    min_num_micro_batches_for,
    plan_micro_batches,
)
from seqbalance.planning import micro_batches as mb_module
from tests.planning import plan_oracle as _plan_reference


@st.composite
def micro_batch_cases(draw):
    group_size = draw(st.integers(1, 3))
    n_groups = draw(st.integers(0, 16))
    cap = draw(st.integers(1, 400))
    per_sample = max(cap // group_size, 0)
    lengths = draw(
        st.lists(
            st.integers(0, per_sample),
            min_size=n_groups * group_size,
            max_size=n_groups * group_size,
        )
    )
    minimum = draw(st.none() | st.integers(0, 20))
    multiple = draw(st.none() | st.integers(1, 4))
    cost = draw(st.sampled_from(["tokens", "workload"]))
    order = draw(st.sampled_from(["bubble", "largest_first", "none"]))
    return (
        lengths,
        cap,
        dict(
            min_num_micro_batches=minimum,
            num_micro_batches_multiple=multiple,
            group_size=group_size,
            cost=cost,
            order=order,
        ),
    )


@settings(max_examples=200, deadline=None)
@given(micro_batch_cases())
def test_every_guarantee(case):
    lengths, cap, options = case
    plan = plan_micro_batches(lengths, cap, **options)
    group_size = options["group_size"]
    multiple = options["num_micro_batches_multiple"] or 1
    minimum = options["min_num_micro_batches"] or 0
    n_groups = len(lengths) // group_size
    # The hard cap.
    assert all(sum(lengths[i] for i in batch) <= cap for batch in plan)
    # Every index exactly once, ascending inside a micro-batch.
    assert sorted(i for batch in plan for i in batch) == list(range(len(lengths)))
    assert all(batch == sorted(batch) for batch in plan)
    # Count: at least the minimum, a multiple, at least the token lower bound.
    assert len(plan) >= minimum and len(plan) % multiple == 0
    if lengths:
        assert len(plan) >= math.ceil(sum(lengths) / cap)
    # Forced groups stay whole.
    owner = {i: b for b, batch in enumerate(plan) for i in batch}
    for start in range(0, len(lengths), group_size):
        assert len({owner[i] for i in range(start, start + group_size)}) == 1
    # Empty micro-batches only when the count exceeds the number of groups.
    assert sum(1 for batch in plan if batch) == min(len(plan), n_groups)


@settings(max_examples=150, deadline=None)
@given(micro_batch_cases())
def test_own_count_is_what_the_planner_chooses(case):
    lengths, cap, options = case
    options = {**options, "min_num_micro_batches": None}
    plan = plan_micro_batches(lengths, cap, **options)
    count = min_num_micro_batches_for(
        lengths,
        cap,
        group_size=options["group_size"],
        num_micro_batches_multiple=options["num_micro_batches_multiple"],
        cost=options["cost"],
    )
    assert len(plan) == count


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 400).flatmap(
        lambda cap: st.tuples(
            st.just(cap),
            st.lists(st.lists(st.integers(0, cap), max_size=12), min_size=1, max_size=4),
            st.none() | st.integers(1, 3),
        )
    )
)
def test_two_step_agreement_gives_every_rank_the_same_count(case):
    cap, ranks, multiple = case
    local = [min_num_micro_batches_for(r, cap, num_micro_batches_multiple=multiple) for r in ranks]
    agreed = max(local)
    plans = [
        plan_micro_batches(
            r, cap, min_num_micro_batches=agreed, num_micro_batches_multiple=multiple
        )
        for r in ranks
    ]
    assert {len(plan) for plan in plans} == {agreed}
    for plan, lengths in zip(plans, ranks, strict=True):
        assert all(sum(lengths[i] for i in batch) <= cap for batch in plan)


def bubble(batches: list[list[int]], costs: list[int]) -> list[list[int]]:
    """The spec's ordering, written out independently: empty micro-batches last."""
    keyed = sorted(
        (b for b in batches if b),
        key=lambda b: (sum(costs[i] for i in b), b[0]),
        reverse=True,
    )
    return keyed[::2][::-1] + keyed[1::2] + [b for b in batches if not b]


@settings(max_examples=100, deadline=None)
@given(micro_batch_cases())
def test_bubble_order_is_the_documented_permutation(case):
    lengths, cap, options = case
    unordered = plan_micro_batches(lengths, cap, **{**options, "order": "none"})
    ordered = plan_micro_batches(lengths, cap, **{**options, "order": "bubble"})
    costs = lengths if options["cost"] == "tokens" else calculate_workload(lengths)
    assert ordered == bubble(unordered, costs)


def largest_first(batches: list[list[int]], costs: list[int]) -> list[list[int]]:
    """``order="largest_first"`` written out: by (cost, first index) descending, empty last."""
    keyed = sorted(
        (b for b in batches if b),
        key=lambda b: (sum(costs[i] for i in b), b[0]),
        reverse=True,
    )
    return keyed + [b for b in batches if not b]


@settings(max_examples=100, deadline=None)
@given(micro_batch_cases(), st.sampled_from([False, True, "exact"]))
def test_every_order_is_its_documented_permutation_refined_or_not(case, refine):
    # With refine the native order runs on the refined micro-batches (no Python bubble).
    lengths, cap, options = case
    options = {**options, "refine": refine}
    unordered = plan_micro_batches(lengths, cap, **{**options, "order": "none"})
    costs = lengths if options["cost"] == "tokens" else calculate_workload(lengths)
    model = {"bubble": bubble, "largest_first": largest_first}
    for order, rule in model.items():
        assert plan_micro_batches(lengths, cap, **{**options, "order": order}) == rule(
            unordered, costs
        )


def test_golden_largest_first():
    lengths = [100, 200, 300, 400, 500]
    plan = plan_micro_batches(
        lengths, 500, min_num_micro_batches=6, cost="tokens", order="largest_first"
    )
    assert plan == [[4], [3], [2], [1], [0], []]


@settings(max_examples=150, deadline=None)
@given(micro_batch_cases())
def test_empty_micro_batches_come_last(case):
    lengths, cap, options = case
    plan = plan_micro_batches(lengths, cap, **options)
    filled = sum(1 for batch in plan if batch)
    assert all(plan[:filled]) and not any(plan[filled:])


def test_golden_empty_micro_batches_last_in_bubble_order():
    # The example: the bubble order used to scatter them ([[], [], [1], [0], []]).
    plan = plan_micro_batches([5, 6], 10, min_num_micro_batches=5, cost="tokens")
    assert plan == [[1], [0], [], [], []]


def test_golden_bubble_order_puts_small_batches_at_both_ends():
    lengths = [100, 200, 300, 400, 500]
    plan = plan_micro_batches(lengths, 500, min_num_micro_batches=5, cost="tokens")
    # One sample each; by workload descending 4, 3, 2, 1, 0 -> [0, 2, 4][::-1] + [3, 1].
    assert plan == [[0], [2], [4], [3], [1]]
    assert plan_micro_batches(lengths, 500, min_num_micro_batches=5, order="none") == [
        [4],
        [3],
        [2],
        [1],
        [0],
    ]


def test_golden_cap_is_hard_where_the_lower_bound_does_not_fit():
    # ceil(92 / 27) = 4 micro-batches cannot hold these lengths under the cap: 5 are needed,
    # where a ceil(total / cap) count (verl) would overflow a micro-batch.
    lengths = [6, 15, 17, 16, 18, 20]
    parts = get_seqlen_balanced_partitions(lengths, 4, False)
    assert max(sum(lengths[i] for i in p) for p in parts) > 27
    plan = plan_micro_batches(lengths, 27, cost="tokens")
    assert len(plan) == 5
    assert max(sum(lengths[i] for i in b) for b in plan) <= 27


def test_golden_docstring_example_and_padding():
    assert plan_micro_batches([300, 200, 100, 400], 500, cost="tokens") == [[2, 3], [0, 1]]
    # More micro-batches than samples: the extra ones are empty, for the caller to pad.
    assert plan_micro_batches([5, 7], 10, min_num_micro_batches=4, order="none") == [
        [1],
        [0],
        [],
        [],
    ]
    assert plan_micro_batches([], 10) == []
    assert plan_micro_batches([], 10, min_num_micro_batches=2) == [[], []]
    assert min_num_micro_batches_for([], 10) == 0
    assert min_num_micro_batches_for([300, 200, 100, 400], 500, num_micro_batches_multiple=4) == 4


def test_numpy_input():
    lengths = np.array([30, 20, 10, 40], dtype=np.int32)
    assert plan_micro_batches(lengths, 50) == plan_micro_batches(lengths.tolist(), 50)


def test_errors():
    with pytest.raises(
        ValueError, match=r"lengths\[1\] = 600 is longer than max_token_len \(500\)"
    ):
        plan_micro_batches([1, 600], 500)
    with pytest.raises(
        ValueError,
        match=r"group 1 \(lengths\[2:4\]\) holds 600 tokens, more "
        r"than max_token_len \(500\)",
    ):
        plan_micro_batches([1, 1, 300, 300], 500, group_size=2)
    with pytest.raises(
        ValueError,
        match=r"number of samples \(3\) is not divisible by "
        r"group_size \(2\)",
    ):
        plan_micro_batches([1, 1, 1], 500, group_size=2)
    with pytest.raises(
        ValueError, match="order must be one of 'bubble', 'largest_first', 'none', got 'random'"
    ):
        plan_micro_batches([1], 500, order="random")
    with pytest.raises(ValueError, match="max_token_len must be >= 1, got 0"):
        plan_micro_batches([1], 0)
    with pytest.raises(ValueError, match="min_num_micro_batches must be >= 0, got -1"):
        plan_micro_batches([1], 5, min_num_micro_batches=-1)
    with pytest.raises(TypeError, match="min_num_micro_batches must be an int"):
        plan_micro_batches([1], 5, min_num_micro_batches=2.0)
    with pytest.raises(ValueError, match="num_micro_batches_multiple must be >= 1, got 0"):
        plan_micro_batches([1], 5, num_micro_batches_multiple=0)
    with pytest.raises(ValueError, match="group_size must be >= 1, got 0"):
        min_num_micro_batches_for([1], 5, group_size=0)
    with pytest.raises(ValueError, match=r"lengths\[0\] must be >= 0, got -1"):
        min_num_micro_batches_for([-1], 5)
    with pytest.raises(OverflowError, match="lengths\\[0\\] = 4294967296"):
        plan_micro_batches([2**32], 2**40, cost="workload")
    # Balancing by tokens has no workload to overflow.
    assert plan_micro_batches([2**32], 2**40, cost="tokens") == [[0]]


# ------------------------------------------------- the count search: bound, scan, gallop


def optimal_bin_count(sizes: list[int], cap: int) -> int:
    """The fewest bins of ``cap`` holding ``sizes``, by trying every subset (small inputs only)."""
    n = len(sizes)
    fits = [sum(sizes[i] for i in range(n) if mask >> i & 1) <= cap for mask in range(1 << n)]
    best = [0] + [n + 1] * ((1 << n) - 1)
    for mask in range(1, 1 << n):
        low = mask & -mask  # the lowest item opens the bin, so each bin is counted once
        sub = mask
        while sub:
            if sub & low and fits[sub]:
                best[mask] = min(best[mask], best[mask ^ sub] + 1)
            sub = (sub - 1) & mask
    return best[-1]


def near_fractions(cap: int):
    """Sizes just around cap / k, where the bounds differ most; and anything up to the cap."""
    return st.integers(1, 6).flatmap(
        lambda k: st.integers(max(0, cap // k - 2), min(cap, cap // k + 2))
    ) | st.integers(0, cap)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda cap: st.tuples(st.just(cap), st.lists(near_fractions(cap), min_size=1, max_size=8))
    )
)
def test_the_lower_bound_never_exceeds_the_optimal_bin_count(case):
    cap, sizes = case
    bound = _plan_reference.bin_lower_bound(sizes, cap)
    assert math.ceil(sum(sizes) / cap) <= bound <= optimal_bin_count(sizes, cap)


def test_the_lower_bound_with_python_ints_above_int64():
    cap = 2**70
    assert _plan_reference.bin_lower_bound([cap // 2 + 1] * 5, cap) == 5
    assert _plan_reference.bin_lower_bound([cap // 3 + 1] * 5, cap) == 3
    assert _plan_reference.bin_lower_bound([cap, 1, 1], cap) == 2


# ------------------------------------------- the native planner against its Python oracle


@st.composite
def oracle_cases(draw):
    group_size = draw(st.integers(1, 2))
    cap = draw(st.integers(2, 500))
    n_groups = draw(st.integers(0, 40))
    per_sample = cap // group_size
    lengths = draw(
        st.lists(
            near_fractions(per_sample),
            min_size=n_groups * group_size,
            max_size=n_groups * group_size,
        )
    )
    return (
        lengths,
        cap,
        dict(
            group_size=group_size,
            num_micro_batches_multiple=draw(st.none() | st.integers(1, 3)),
            cost=draw(st.sampled_from(["tokens", "workload"])),
            min_num_micro_batches=draw(st.none() | st.integers(0, 50)),
            order=draw(st.sampled_from(["bubble", "none"])),
        ),
    )


def oracle_plan(lengths, cap, options):
    """plan_micro_batches by the pure-Python oracle of the native planner."""
    g = options["group_size"]
    multiple = options["num_micro_batches_multiple"] or 1
    costs = lengths if options["cost"] == "tokens" else calculate_workload(lengths)
    tokens = [sum(lengths[i : i + g]) for i in range(0, len(lengths), g)]
    weights = [sum(costs[i : i + g]) for i in range(0, len(lengths), g)]
    starts = list(range(0, len(lengths), g))
    core_cap = max(1, min(cap, sum(tokens)))
    bound = _plan_reference.bin_lower_bound(tokens, core_cap) if tokens else 0
    minimum = -(-(options["min_num_micro_batches"] or 0) // multiple) * multiple
    count, _, _, plan = _plan_reference.plan_ranks(
        tokens,
        weights,
        starts,
        [g] * len(tokens),
        [list(range(len(tokens)))],
        core_cap,
        multiple,
        minimum,
        options["order"] == "bubble",
        [bound],
    )
    return count, plan[0]


@settings(max_examples=400, deadline=None)
@given(oracle_cases())
def test_native_planner_is_the_python_oracle(case):
    lengths, cap, options = case
    count, plan = oracle_plan(lengths, cap, options)
    assert plan_micro_batches(lengths, cap, **options) == plan
    own = {k: v for k, v in options.items() if k not in ("order", "min_num_micro_batches")}
    own_count, _ = oracle_plan(lengths, cap, {**options, "min_num_micro_batches": None})
    assert min_num_micro_batches_for(lengths, cap, **own) == own_count


@settings(max_examples=200, deadline=None)
@given(oracle_cases())
def test_the_count_search_settles_where_the_count_before_fails(case):
    # The search gallops from the lower bound and bisects back: the count it returns fits and
    # the count one multiple below does not (or is below the bound it starts from).
    lengths, cap, options = case
    g = options["group_size"]
    multiple = options["num_micro_batches_multiple"] or 1
    costs = lengths if options["cost"] == "tokens" else calculate_workload(lengths)
    tokens = [sum(lengths[i : i + g]) for i in range(0, len(lengths), g)]
    weights = [sum(costs[i : i + g]) for i in range(0, len(lengths), g)]
    own = {k: v for k, v in options.items() if k not in ("order", "min_num_micro_batches")}
    count = min_num_micro_batches_for(lengths, cap, **own)
    if not tokens:
        assert count == 0
        return
    start = mb_module._round_up(_plan_reference.bin_lower_bound(tokens, cap), multiple)
    assert count >= start and count % multiple == 0
    assert _plan_reference.split(tokens, weights, cap, count) is not None
    if count > start:
        assert _plan_reference.split(tokens, weights, cap, count - multiple) is None


@st.composite
def rank_cases(draw):
    n_ranks = draw(st.integers(1, 4))
    cap = draw(st.integers(1, 300))
    n = draw(st.integers(0, 30))
    sizes = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    tokens = draw(st.lists(near_fractions(cap), min_size=n, max_size=n))
    costs = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    first = draw(st.lists(st.integers(0, n_ranks - 1), min_size=n, max_size=n))
    candidates = [first]
    for _ in range(draw(st.integers(0, 2))):
        # Later candidates move a few items (as the refined split does), so some ranks hold the
        # same items as in an earlier candidate and the native planner reuses their plans.
        moved = list(candidates[-1])
        for _ in range(draw(st.integers(0, 3)) if n else 0):
            moved[draw(st.integers(0, n - 1))] = draw(st.integers(0, n_ranks - 1))
        # ... and may number the ranks differently.
        renumber = draw(st.permutations(range(n_ranks)))
        candidates.append([renumber[r] for r in moved])
    multiple = draw(st.integers(1, 3))
    minimum = draw(st.integers(0, 12)) * multiple
    return tokens, costs, sizes, candidates, n_ranks, cap, multiple, minimum


@settings(max_examples=300, deadline=None)
@given(rank_cases(), st.booleans())
def test_native_rank_plans_are_the_python_oracle(case, bubble):
    # Several ranks with one common count (the plan_dp_micro_batches path), items of any sizes,
    # several candidate rank splits of which the native planner keeps one by the stated rule.
    tokens, costs, sizes, candidates, n_ranks, cap, multiple, minimum = case
    starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))[:-1].tolist()
    expected = []
    for rank_of_item in candidates:
        ranks = [[g for g, r in enumerate(rank_of_item) if r == rank] for rank in range(n_ranks)]
        bounds = [
            _plan_reference.bin_lower_bound([tokens[g] for g in rank], cap) if rank else 0
            for rank in ranks
        ]
        expected.append(
            _plan_reference.plan_ranks(
                tokens, costs, starts, sizes, ranks, cap, multiple, minimum, bubble, bounds
            )
        )
    kept = 0
    for index, (count, heaviest_micro_batch, heaviest, _) in enumerate(expected):
        best_count, best_micro_batch, best_heaviest, _ = expected[kept]
        if (
            heaviest <= best_heaviest
            and count <= best_count
            and (heaviest, count, heaviest_micro_batch)
            < (best_heaviest, best_count, best_micro_batch)
        ):
            kept = index
    arrays = [np.asarray(v, dtype=np.int64) for v in (tokens, costs, starts, sizes)]
    ranks_arrays = [np.asarray(c, dtype=np.int64) for c in candidates]
    request = {
        "n_ranks": n_ranks,
        "cap": cap,
        "multiple": multiple,
        "minimum": minimum,
        "order": "bubble" if bubble else "none",
        "as_ids": False,
        "max_sequences": None,
        "padded": False,
    }
    got = _native._plan_ranks(*arrays, ranks_arrays, request)
    assert got == (kept, expected[kept][0], expected[kept][3])


def test_the_split_prefers_the_cheapest_part_with_room():
    # Costs decide the order and the part; tokens only rule parts out.
    assert _plan_reference.split([5, 5, 5], [3, 2, 1], 10, 2) == [0, 1, 1]
    assert _plan_reference.split([9, 5, 5], [3, 2, 1], 10, 2) == [0, 1, 1]
    assert _plan_reference.split([6, 6, 6], [3, 2, 1], 10, 2) is None


# ------------------------------------------------------------------ alignment


@settings(max_examples=150, deadline=None)
@given(micro_batch_cases(), st.integers(1, 16))
def test_padding_plans_as_the_padded_lengths_and_fits_after_padding(case, multiple):
    lengths, cap, options = case
    padded = [-(-s // multiple) * multiple for s in lengths]
    group_size = options["group_size"]
    groups = [sum(padded[i : i + group_size]) for i in range(0, len(padded), group_size)]
    if groups and max(groups) > cap:
        with pytest.raises(ValueError, match="padded to a multiple of"):
            plan_micro_batches(lengths, cap, pad_to_multiple_of=multiple, **options)
        return
    plan = plan_micro_batches(lengths, cap, pad_to_multiple_of=multiple, **options)
    assert plan == plan_micro_batches(padded, cap, **options)
    assert all(sum(padded[i] for i in batch) <= cap for batch in plan)
    own = {k: v for k, v in options.items() if k not in ("order", "min_num_micro_batches")}
    assert min_num_micro_batches_for(lengths, cap, pad_to_multiple_of=multiple, **own) == len(
        plan_micro_batches(lengths, cap, pad_to_multiple_of=multiple, **own)
    )


def test_golden_padding_needs_one_more_micro_batch():
    # 3 + 3 + 3 tokens fit 9; padded to a multiple of 4 they are 12 and need two micro-batches.
    assert plan_micro_batches([3, 3, 3], 9, cost="tokens") == [[0, 1, 2]]
    assert len(plan_micro_batches([3, 3, 3], 9, cost="tokens", pad_to_multiple_of=4)) == 2
    with pytest.raises(ValueError, match=r"lengths\[0\] = 12 \(padded to a multiple of 4\)"):
        plan_micro_batches([9], 9, pad_to_multiple_of=4)
    with pytest.raises(ValueError, match="pad_to_multiple_of must be >= 1, got 0"):
        plan_micro_batches([9], 9, pad_to_multiple_of=0)


def test_counts_above_the_documented_maximum_are_refused():
    assert mb_module.MAX_MICRO_BATCHES == 2**24
    with pytest.raises(ValueError, match=r"min_num_micro_batches must be <= 2\*\*24"):
        plan_micro_batches([1], 5, min_num_micro_batches=2**24 + 1)
    with pytest.raises(ValueError, match=r"num_micro_batches_multiple must be <= 2\*\*24"):
        min_num_micro_batches_for([1], 5, num_micro_batches_multiple=2**40)
