"""plan_micro_batches and min_num_micro_batches_for: the hard cap and every count guarantee."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    min_num_micro_batches_for,
    plan_micro_batches,
)
from seqbalance import micro_batches as mb_module


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
    order = draw(st.sampled_from(["bubble", "none"]))
    return (
        lengths,
        cap,
        dict(
            min_num_micro_batches=minimum,
            num_micro_batches_multiple=multiple,
            force_group_size=group_size,
            cost=cost,
            order=order,
        ),
    )


@settings(max_examples=200, deadline=None)
@given(micro_batch_cases())
def test_every_guarantee(case):
    lengths, cap, options = case
    plan = plan_micro_batches(lengths, cap, **options)
    group_size = options["force_group_size"]
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
        force_group_size=options["force_group_size"],
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


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 300).flatmap(
        lambda cap: st.tuples(st.just(cap), st.lists(st.integers(0, cap), min_size=1, max_size=20))
    )
)
def test_count_is_the_first_from_the_lower_bound_whose_balanced_split_fits(case):
    cap, lengths = case
    count = min_num_micro_batches_for(lengths, cap, cost="tokens")
    lower_bound = max(1, math.ceil(sum(lengths) / cap))

    def fits(k: int) -> bool:
        k = min(k, len(lengths))
        parts = get_seqlen_balanced_partitions(lengths, k, False)
        return all(sum(lengths[i] for i in part) <= cap for part in parts)

    assert count >= lower_bound
    assert fits(count)
    assert not any(fits(k) for k in range(lower_bound, count))
    # With tokens as weights and no reordering, the plan is the partitioner's split.
    plan = plan_micro_batches(lengths, cap, cost="tokens", order="none")
    if count <= len(lengths):
        assert plan == get_seqlen_balanced_partitions(lengths, count, False)


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


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda target: st.tuples(
            st.just(target),
            st.lists(st.integers(0, 50), min_size=target, max_size=target + 10),
        )
    )
)
def test_splitting_a_fitting_plan_further_keeps_the_cap(case):
    # The fallback behind the agreement guarantee, exercised directly: it is only reached when
    # the partitioner's split at the agreed count would break the cap.
    target, lengths = case
    problem = mb_module._prepare(lengths, 60, 1, None, "workload")
    own_count, own_ids = mb_module._own_plan(problem)
    own_parts = mb_module._parts(own_ids, own_count)
    parts = mb_module._split_further(problem, own_parts, max(target, own_count))
    assert len(parts) == max(target, own_count)
    assert sorted(g for part in parts for g in part) == list(range(len(lengths)))
    assert all(part for part in parts)
    assert all(sum(lengths[g] for g in part) <= 60 for part in parts)


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
        plan_micro_batches([1, 1, 300, 300], 500, force_group_size=2)
    with pytest.raises(
        ValueError,
        match=r"number of samples \(3\) is not divisible by "
        r"force_group_size \(2\)",
    ):
        plan_micro_batches([1, 1, 1], 500, force_group_size=2)
    with pytest.raises(ValueError, match="order must be 'bubble' or 'none', got 'random'"):
        plan_micro_batches([1], 500, order="random")
    with pytest.raises(ValueError, match="max_token_len must be >= 1, got 0"):
        plan_micro_batches([1], 0)
    with pytest.raises(ValueError, match="min_num_micro_batches must be >= 0, got -1"):
        plan_micro_batches([1], 5, min_num_micro_batches=-1)
    with pytest.raises(TypeError, match="min_num_micro_batches must be an int"):
        plan_micro_batches([1], 5, min_num_micro_batches=2.0)
    with pytest.raises(ValueError, match="num_micro_batches_multiple must be >= 1, got 0"):
        plan_micro_batches([1], 5, num_micro_batches_multiple=0)
    with pytest.raises(ValueError, match="force_group_size must be >= 1, got 0"):
        min_num_micro_batches_for([1], 5, force_group_size=0)
    with pytest.raises(ValueError, match=r"lengths\[0\] must be >= 0, got -1"):
        min_num_micro_batches_for([-1], 5)
    with pytest.raises(OverflowError, match="lengths\\[0\\] = 4294967296"):
        plan_micro_batches([2**32], 2**40)
    # Balancing by tokens has no workload to overflow.
    assert plan_micro_batches([2**32], 2**40, cost="tokens") == [[0]]


# ------------------------------------------------- the count search: bound, scan, gallop


def linear_scan_count(lengths, cap, group_size, multiple, cost) -> int:
    """The search as it was before the lower bound: every count from ceil(total / cap)."""
    problem = mb_module._prepare(lengths, cap, group_size, multiple, cost)
    if not problem.n_groups:
        return 0
    multiple = multiple or 1
    count = -(-max(1, math.ceil(int(problem.tokens.sum()) / cap)) // multiple) * multiple
    while not mb_module._fits(problem, mb_module._balanced_split(problem, count)):
        count += multiple
    return count


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
    bound = mb_module._bin_lower_bound(sizes, cap)
    assert math.ceil(sum(sizes) / cap) <= bound <= optimal_bin_count(sizes, cap)


def test_the_lower_bound_with_python_ints_above_int64():
    cap = 2**70
    assert mb_module._bin_lower_bound([cap // 2 + 1] * 5, cap) == 5
    assert mb_module._bin_lower_bound([cap // 3 + 1] * 5, cap) == 3
    assert mb_module._bin_lower_bound([cap, 1, 1], cap) == 2


@st.composite
def count_search_cases(draw):
    group_size = draw(st.integers(1, 2))
    cap = draw(st.integers(2, 500))
    n_groups = draw(st.integers(0, 24))
    # One group holds group_size samples; keep it under the cap with sizes near cap / k.
    per_sample = cap // group_size
    lengths = draw(
        st.lists(
            near_fractions(per_sample),
            min_size=n_groups * group_size,
            max_size=n_groups * group_size,
        )
    )
    multiple = draw(st.none() | st.integers(1, 3))
    return lengths, cap, group_size, multiple, draw(st.sampled_from(["tokens", "workload"]))


@settings(max_examples=250, deadline=None)
@given(count_search_cases())
def test_the_count_is_the_one_the_linear_scan_finds(case):
    lengths, cap, group_size, multiple, cost = case
    options = dict(
        force_group_size=group_size,
        num_micro_batches_multiple=multiple,
        cost=cost,
    )
    expected = linear_scan_count(lengths, cap, group_size, multiple, cost)
    assert min_num_micro_batches_for(lengths, cap, **options) == expected
    assert len(plan_micro_batches(lengths, cap, **options)) == expected


def count_partitions(monkeypatch) -> list[int]:
    """Record the count of every balanced split the search makes."""
    counts: list[int] = []
    real = mb_module._balanced_split

    def spy(problem, count):
        counts.append(count)
        return real(problem, count)

    monkeypatch.setattr(mb_module, "_balanced_split", spy)
    return counts


@pytest.mark.parametrize(("length", "per_bin"), [(501, 1), (1000, 1), (334, 2), (251, 3), (201, 4)])
def test_samples_just_over_a_fraction_of_the_cap_take_one_partition(monkeypatch, length, per_bin):
    # Review item 1: [cap // 2 + 1] * n made the scan try about n / 2 counts.
    counts = count_partitions(monkeypatch)
    n = 600
    assert min_num_micro_batches_for([length] * n, 1000, cost="tokens") == n // per_bin
    assert counts == [n // per_bin]


@pytest.mark.parametrize("steps", [0, 1, 3])
@settings(max_examples=60, deadline=None)
@given(case=count_search_cases())
def test_past_the_step_budget_the_search_gallops_to_a_fitting_count(steps, case):
    lengths, cap, group_size, multiple, cost = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mb_module, "_SCAN_STEPS", steps)
        counts = count_partitions(patch)
        count = min_num_micro_batches_for(
            lengths,
            cap,
            force_group_size=group_size,
            num_micro_batches_multiple=multiple,
            cost=cost,
        )
    assert count >= linear_scan_count(lengths, cap, group_size, multiple, cost)
    problem = mb_module._prepare(lengths, cap, group_size, multiple, cost)
    if lengths:
        assert split_fits(problem, count)
        # Locally first: the count before it fails, or is below the bound the search starts at.
        start = mb_module._round_up(
            mb_module._bin_lower_bound(problem.tokens, cap), problem.multiple
        )
        assert count == start or not split_fits(problem, count - problem.multiple)
    assert len(counts) <= steps + 2 * max(1, len(problem.tokens)).bit_length() + 2


def split_fits(problem, count: int) -> bool:
    return mb_module._fits(problem, mb_module._balanced_split(problem, count))


def test_a_search_past_the_budget_stays_logarithmic(monkeypatch):
    # Balancing by workload, uniform lengths fit about 10% above the bound: > _SCAN_STEPS tries.
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 16_385, 1_000).tolist()
    counts = count_partitions(monkeypatch)
    count = min_num_micro_batches_for(lengths, 16_384)
    assert counts[mb_module._SCAN_STEPS - 1] == counts[0] + mb_module._SCAN_STEPS - 1
    assert len(counts) > mb_module._SCAN_STEPS  # the case does reach the gallop
    assert len(counts) <= mb_module._SCAN_STEPS + 2 * (1_000).bit_length() + 2
    plan = plan_micro_batches(lengths, 16_384, order="none")
    assert len(plan) == count
    assert all(sum(lengths[i] for i in batch) <= 16_384 for batch in plan)
    assert not split_fits(mb_module._prepare(lengths, 16_384, 1, None, "workload"), count - 1)


# ------------------------------------------------------------------ alignment


@settings(max_examples=150, deadline=None)
@given(micro_batch_cases(), st.integers(1, 16))
def test_padding_plans_as_the_padded_lengths_and_fits_after_padding(case, multiple):
    lengths, cap, options = case
    padded = [-(-s // multiple) * multiple for s in lengths]
    group_size = options["force_group_size"]
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
