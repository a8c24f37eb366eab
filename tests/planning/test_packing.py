"""pack_sequences and plan_packed_steps: guarantees, oracle agreement, golden examples, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import (
    PartitionError,
    calculate_workload,
    pack_ids,
    pack_sequences,
    plan_packed_steps,
)
from seqbalance.planning.packing import ALGORITHMS


def slow_pack(lengths: list[int], cap: int, algorithm: str) -> list[list[int]]:
    """Quadratic textbook packers written from the rules in the spec, as the oracle."""
    order = list(range(len(lengths)))
    if algorithm in ("ffd", "bfd"):
        order.sort(key=lambda i: (-lengths[i], i))
    packs: list[list[int]] = []
    rooms: list[int] = []
    for i in order:
        length = lengths[i]
        fitting = [p for p, room in enumerate(rooms) if room >= length]
        if algorithm == "next_fit":
            fitting = [p for p in fitting if p == len(rooms) - 1]
        if algorithm == "bfd" and fitting:
            fitting = [min(fitting, key=lambda p: (rooms[p], p))]
        if fitting:
            packs[fitting[0]].append(i)
            rooms[fitting[0]] -= length
        else:
            packs.append([i])
            rooms.append(cap - length)
    return packs


@st.composite
def lengths_and_cap(draw, max_size: int = 60):
    cap = draw(st.integers(1, 100))
    lengths = draw(st.lists(st.integers(0, cap), max_size=max_size))
    return lengths, cap


def assert_valid_packs(packs: list[list[int]], lengths: list[int], cap: int) -> None:
    assert all(packs), "a pack is empty"
    assert all(sum(lengths[i] for i in pack) <= cap for pack in packs)
    flat = sorted(i for pack in packs for i in pack)
    assert flat == list(range(len(lengths)))


@settings(max_examples=150, deadline=None)
@given(lengths_and_cap(), st.sampled_from(ALGORITHMS))
def test_packs_match_the_oracle_and_respect_the_cap(case, algorithm):
    lengths, cap = case
    packs = pack_sequences(lengths, cap, algorithm=algorithm)
    assert_valid_packs(packs, lengths, cap)
    assert packs == slow_pack(lengths, cap, algorithm)


@st.composite
def batches(draw):
    """Past 64 items, with many ties: the counting sort and the per-room buckets of the core."""
    cap = draw(st.integers(1, 400))
    common = draw(st.lists(st.integers(0, cap), min_size=1, max_size=6))
    lengths = draw(
        st.lists(st.one_of(st.sampled_from(common), st.integers(0, cap)), min_size=64, max_size=400)
    )
    return lengths, cap


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from(ALGORITHMS))
def test_large_batches_match_the_oracle(case, algorithm):
    lengths, cap = case
    packs = pack_sequences(lengths, cap, algorithm=algorithm)
    assert_valid_packs(packs, lengths, cap)
    assert packs == slow_pack(lengths, cap, algorithm)


@settings(max_examples=100, deadline=None)
@given(st.one_of(lengths_and_cap(), batches()), st.sampled_from(ALGORITHMS), st.integers(1, 4))
def test_ids_number_the_packs_of_the_list_answer(case, algorithm, multiple):
    lengths, cap = case
    cap *= multiple
    packs = pack_sequences(lengths, cap, algorithm=algorithm, pad_to_multiple_of=multiple)
    ids = pack_ids(lengths, cap, algorithm=algorithm, pad_to_multiple_of=multiple)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.shape == (len(lengths),)
    expected = np.empty(len(lengths), dtype=np.int64)
    for number, pack in enumerate(packs):
        expected[pack] = number
    assert ids.tolist() == expected.tolist()


def test_ids_golden_and_errors():
    assert pack_ids([5, 4, 3, 3, 2, 6], 8, algorithm="ffd").tolist() == [
        1,
        2,
        1,
        2,
        0,
        0,
    ]
    assert pack_ids([], 8).tolist() == []
    # The deprecated as_ids= (tests/deprecation) still reads its flag strictly.
    with pytest.warns(DeprecationWarning):
        assert pack_sequences([1, 2], 8, as_ids=np.bool_(False)) == [[1, 0]]
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(TypeError, match=r"as_ids must be True or False, got 1 \(int\)"),
    ):
        pack_sequences([1], 8, as_ids=1)
    with pytest.raises(ValueError, match=r"lengths\[0\] = 9 is longer"):
        pack_ids([9], 8)


@settings(max_examples=50, deadline=None)
@given(lengths_and_cap())
def test_numpy_input_of_any_integer_dtype_and_stride_gives_the_same_packs(case):
    lengths, cap = case
    expected = pack_sequences(lengths, cap)
    assert pack_sequences(np.asarray(lengths, dtype=np.uint8), cap) == expected
    strided = np.repeat(np.asarray(lengths, dtype=np.int32), 2)[::2]
    assert pack_sequences(strided, cap) == expected
    assert pack_sequences(tuple(lengths), cap) == expected


def test_golden_examples():
    lengths = [5, 4, 3, 3, 2, 6]
    assert pack_sequences(lengths, 8, algorithm="next_fit") == [[0], [1, 2], [3, 4], [5]]
    assert pack_sequences(lengths, 8, algorithm="first_fit") == [[0, 2], [1, 3], [4, 5]]
    assert pack_sequences(lengths, 8, algorithm="ffd") == [[5, 4], [0, 2], [1, 3]]
    # Best fit takes the tighter pack (room 2) where first fit in input order takes room 3.
    assert pack_sequences([5, 6, 2], 8, algorithm="bfd") == [[1, 2], [0]]
    assert pack_sequences([5, 6, 2], 8, algorithm="first_fit") == [[0, 2], [1]]
    assert pack_sequences([], 8) == []


def test_bfd_and_ffd_differ_where_best_fit_matters():
    # 5 -> pack 0 (room 2); 3, 3 -> pack 1 (room 1). The 1 goes to the earliest pack under ffd
    # and to the tightest one under bfd.
    assert pack_sequences([5, 3, 3, 1], 7, algorithm="ffd") == [[0, 3], [1, 2]]
    assert pack_sequences([5, 3, 3, 1], 7, algorithm="bfd") == [[0], [1, 2, 3]]


def test_ties_go_to_the_earliest_pack_and_lower_index():
    # Equal lengths are taken by index ascending; equal rooms resolve to the earliest pack.
    assert pack_sequences([2, 3, 3, 2], 5, algorithm="bfd") == [[1, 0], [2, 3]]
    assert pack_sequences([4, 4, 1], 5, algorithm="bfd") == [[0, 2], [1]]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_length_above_the_cap_names_its_index(algorithm):
    with pytest.raises(ValueError, match=r"lengths\[2\] = 9 is longer than max_token_len \(8\)"):
        pack_sequences([1, 8, 9, 10], 8, algorithm=algorithm)


def test_argument_errors():
    with pytest.raises(ValueError, match="algorithm must be one of .*got 'best'"):
        pack_sequences([1], 8, algorithm="best")
    with pytest.raises(ValueError, match="max_token_len must be >= 1, got 0"):
        pack_sequences([1], 0)
    with pytest.raises(TypeError, match="max_token_len must be an int"):
        pack_sequences([1], 8.0)
    with pytest.raises(ValueError, match=r"lengths\[1\] must be >= 0, got -1"):
        pack_sequences([1, -1], 8)
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an integer"):
        pack_sequences([1.5], 8)
    with pytest.raises(OverflowError, match=r"lengths\[0\] must be <= 2\*\*63 - 1"):
        pack_sequences([2**63], 8)
    with pytest.raises(ValueError, match="must be 1-D"):
        pack_sequences(np.ones((2, 2), dtype=np.int64), 8)


def test_native_binding_rejects_what_the_wrapper_would():
    from seqbalance import _native

    with pytest.raises(ValueError, match=r"lengths\[1\] must be >= 0, got -3"):
        _native._pack(np.array([1, -3], dtype=np.int64), 8, "bfd")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        _native._pack(np.array([1], dtype=np.int64), 8, "worst_fit")
    with pytest.raises(ValueError, match=r"lengths\[0\] = 9 is longer"):
        _native._pack(np.array([9], dtype=np.int64), 8, "bfd")


def test_large_values_are_exact():
    big = 2**63 - 1
    assert pack_sequences([big, 1, big - 1], big) == [[0], [2, 1]]


@settings(max_examples=60, deadline=None)
@given(
    lengths_and_cap(),
    st.sampled_from(ALGORITHMS),
    st.integers(2**64 - 1, 2**70) | st.sampled_from([2**64, 2**200]),
)
def test_a_cap_of_2_64_or_more_is_no_cap(case, algorithm, cap):
    lengths, _ = case
    packs = pack_sequences(lengths, cap, algorithm=algorithm)
    assert packs == slow_pack(lengths, cap, algorithm)
    assert len(packs) == (1 if lengths else 0)


def test_a_huge_cap_with_lengths_near_2_63():
    big = 2**63 - 1
    # They sum to 2**64 - 2: one pack under any cap of at least that.
    assert pack_sequences([big, big], 2**64) == [[0, 1]]
    assert pack_sequences(np.array([big, 1, big]), 2**80, algorithm="next_fit") == [[0, 1, 2]]


def test_a_huge_cap_with_a_sum_above_2_64_names_pack_max_length():
    big = 2**63 - 1
    for cap, call in (
        (2**64, lambda cap: pack_sequences([big, big, 2], cap)),
        (2**65, lambda cap: plan_packed_steps([big, big, 2], 1, 1, cap)),
    ):
        with pytest.raises(
            ValueError,
            match=rf"max_token_len \({cap}\) is above 2\*\*64 - 1 and the lengths sum to "
            rf"{2 * big + 2}",
        ):
            call(cap)


# ---------------------------------------------------------------- plan_packed_steps


@st.composite
def packed_step_cases(draw):
    dp_size = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 3))
    cap = draw(st.integers(1, 60))
    n = draw(st.integers(dp_size * steps, dp_size * steps + 30))
    lengths = draw(st.lists(st.integers(0, cap), min_size=n, max_size=n))
    return lengths, dp_size, steps, cap


@settings(max_examples=80, deadline=None)
@given(packed_step_cases())
def test_packed_steps_guarantees(case):
    lengths, dp_size, steps, cap = case
    plan = plan_packed_steps(lengths, dp_size, steps, cap)
    assert len(plan) == dp_size
    assert all(len(rank) == steps for rank in plan)
    for step in range(steps):
        assert len({len(rank[step]) for rank in plan}) == 1, "pack counts differ across ranks"
    packs = [pack for rank in plan for step in rank for pack in step]
    assert all(sum(lengths[i] for i in pack) <= cap for pack in packs)
    assert sorted(i for pack in packs for i in pack) == list(range(len(lengths)))


@settings(max_examples=40, deadline=None)
@given(packed_step_cases())
def test_packed_steps_follow_the_documented_plan(case):
    lengths, dp_size, steps, cap = case
    plan = plan_packed_steps(lengths, dp_size, steps, cap)
    ranks = seqbalance.get_seqlen_balanced_partitions(lengths, dp_size, False)
    for rank_plan, rank_samples in zip(plan, ranks, strict=True):
        assert sorted(i for step in rank_plan for pack in step for i in pack) == rank_samples
        for step in rank_plan:
            bucket = sorted(i for pack in step for i in pack)
            real_packs = [pack for pack in step if pack]
            expected = slow_pack([lengths[i] for i in bucket], cap, "bfd")
            assert real_packs == [[bucket[j] for j in pack] for pack in expected]


def test_packed_steps_golden_with_padding():
    plan = plan_packed_steps([4, 4, 3, 3, 2, 2, 1, 1, 1], 2, 2, 5)
    assert plan == [[[[0, 6], [7]], [[2, 4]]], [[[3, 5], []], [[1, 8]]]]


def test_rank_with_fewer_samples_than_steps_gets_padded_steps():
    # The 100 takes a rank alone, so that rank has one sample for two steps.
    plan = plan_packed_steps([100, 1, 1, 1], 2, 2, 100)
    heavy = next(rank for rank in plan if [0] in rank[0])
    assert heavy[1] == [[]] * len(heavy[1]) and len(heavy[1]) >= 1
    assert all(len(plan[0][s]) == len(plan[1][s]) for s in range(2))


@settings(max_examples=40, deadline=None)
@given(packed_step_cases(), st.integers(2**64, 2**70))
def test_packed_steps_with_a_cap_of_2_64_or_more_put_each_bucket_in_one_pack(case, cap):
    lengths, dp_size, steps, _ = case
    plan = plan_packed_steps(lengths, dp_size, steps, cap)
    # Packing does not change the balancing, and any cap >= the total holds a bucket whole.
    assert plan == plan_packed_steps(lengths, dp_size, steps, max(1, sum(lengths)))
    assert all(len(step) <= 1 for rank in plan for step in rank)


def test_packed_steps_errors():
    with pytest.raises(
        PartitionError,
        match=r"number of samples \(5\) is smaller than "
        r"dp_size \* optimizer_steps \(2 \* 3 = 6\)",
    ):
        plan_packed_steps([1] * 5, 2, 3, 8)
    with pytest.raises(ValueError, match=r"lengths\[3\] = 9 is longer than max_token_len \(8\)"):
        plan_packed_steps([1, 1, 1, 9], 2, 1, 8)
    with pytest.raises(ValueError, match="dp_size must be >= 1, got 0"):
        plan_packed_steps([1], 0, 1, 8)
    with pytest.raises(ValueError, match="optimizer_steps must be >= 1, got 0"):
        plan_packed_steps([1], 1, 0, 8)
    with pytest.raises(TypeError, match="max_token_len must be an int"):
        plan_packed_steps([1], 1, 1, "8")


def test_native_binding_reads_strided_int64_views():
    from seqbalance import _native

    base = np.array([5, 99, 6, 99, 2, 99], dtype=np.int64)
    assert _native._pack(base[::2], 8, "bfd") == _native._pack(base[::2].copy(), 8, "bfd")
    assert pack_sequences(base[::2], 8) == [[1, 2], [0]]


# ------------------------------------------------------------ alignment and cost


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 300), max_size=40),
    st.integers(1, 16),
    st.sampled_from(["next_fit", "first_fit", "ffd", "bfd"]),
)
def test_padding_packs_the_padded_lengths(lengths, multiple, algorithm):
    cap = 320
    padded = [-(-s // multiple) * multiple for s in lengths]
    if any(p > cap for p in padded):
        with pytest.raises(ValueError, match="padded to a multiple of"):
            pack_sequences(lengths, cap, algorithm=algorithm, pad_to_multiple_of=multiple)
        return
    packs = pack_sequences(lengths, cap, algorithm=algorithm, pad_to_multiple_of=multiple)
    assert packs == pack_sequences(padded, cap, algorithm=algorithm)
    assert all(sum(padded[i] for i in pack) <= cap for pack in packs)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=4, max_size=40), st.integers(1, 8))
def test_packed_steps_padding_and_cost(lengths, multiple):
    padded = [-(-s // multiple) * multiple for s in lengths]
    cap = max(512, max(padded))
    plan = plan_packed_steps(lengths, 2, 2, cap, pad_to_multiple_of=multiple, cost="workload")
    assert plan == plan_packed_steps(padded, 2, 2, cap, cost=calculate_workload(padded))
    assert all(
        sum(padded[i] for i in pack) <= cap for rank in plan for step in rank for pack in step
    )
    seen = sorted(i for rank in plan for step in rank for pack in step for i in pack)
    assert seen == list(range(len(lengths)))
    # The default balances tokens, as before.
    assert plan_packed_steps(padded, 2, 2, cap) == plan_packed_steps(padded, 2, 2, cap, cost=padded)


# ------------------------------------------------------------ shapes (planning spec)


def slow_shaped_pack(
    lengths: list[int],
    cap: int,
    algorithm: str,
    max_sequences: int | None,
    footprint: str,
    keys: list,
) -> list[list[int]]:
    """The rules with "fits" extended, literally: footprint within the cap, room for one more
    sequence, the same key; bfd by least room left after placing (in the footprint)."""
    order = list(range(len(lengths)))
    if algorithm in ("ffd", "bfd"):
        order.sort(key=lambda i: (-lengths[i], i))

    def charge(pack: list[int]) -> int:
        if footprint == "padded":
            return len(pack) * max(lengths[i] for i in pack)
        return sum(lengths[i] for i in pack)

    packs: list[list[int]] = []
    for i in order:

        def fits(pack: list[int], i: int = i) -> bool:
            return (
                (max_sequences is None or len(pack) < max_sequences)
                and keys[pack[0]] == keys[i]
                and charge([*pack, i]) <= cap
            )

        candidates = [p for p, pack in enumerate(packs) if fits(pack)]
        if algorithm == "next_fit":
            candidates = [p for p in candidates if p == len(packs) - 1]
        if algorithm == "bfd" and candidates:
            candidates = [min(candidates, key=lambda p: (cap - charge([*packs[p], i]), p))]
        if candidates:
            packs[candidates[0]].append(i)
        else:
            packs.append([i])
    return packs


@st.composite
def shaped_cases(draw):
    lengths, cap = draw(st.one_of(lengths_and_cap(), batches()))
    max_sequences = draw(st.one_of(st.none(), st.integers(1, 6)))
    footprint = draw(st.sampled_from(["sum", "padded"]))
    keys = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.sampled_from(["text", "image", 7, (1, 2)]),
                min_size=len(lengths),
                max_size=len(lengths),
            ),
        )
    )
    return lengths, cap, max_sequences, footprint, keys


@settings(max_examples=200, deadline=None)
@given(shaped_cases(), st.sampled_from(ALGORITHMS))
def test_shape_constraints_follow_the_extended_rules(case, algorithm):
    lengths, cap, max_sequences, footprint, keys = case
    packs = pack_sequences(
        lengths,
        cap,
        algorithm=algorithm,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
    )
    key_list = keys if keys is not None else [0] * len(lengths)
    assert packs == slow_shaped_pack(lengths, cap, algorithm, max_sequences, footprint, key_list)
    # Every constraint holds on the answer.
    assert sorted(i for pack in packs for i in pack) == list(range(len(lengths)))
    for pack in packs:
        assert pack and len({key_list[i] for i in pack}) == 1
        assert max_sequences is None or len(pack) <= max_sequences
        longest = max(lengths[i] for i in pack)
        charged = len(pack) * longest if footprint == "padded" else sum(lengths[i] for i in pack)
        assert charged <= cap
    ids = pack_ids(
        lengths,
        cap,
        algorithm=algorithm,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
    )
    assert [[i for i in range(len(lengths)) if ids[i] == p] for p in range(len(packs))] == [
        sorted(pack) for pack in packs
    ]


@settings(max_examples=60, deadline=None)
@given(st.one_of(lengths_and_cap(), batches()), st.sampled_from(ALGORITHMS))
def test_shape_options_that_bind_nothing_give_the_plain_packs(case, algorithm):
    lengths, cap = case
    plain = pack_sequences(lengths, cap, algorithm=algorithm)
    unbound = pack_sequences(
        lengths,
        cap,
        algorithm=algorithm,
        max_sequences=len(lengths) + 1,
        keys=np.zeros(len(lengths), dtype=np.int64),
    )
    assert unbound == plain


def test_shape_golden_examples_and_errors():
    lengths = [5, 6, 2, 1, 1, 1]
    assert pack_sequences(lengths, 8, max_sequences=2) == [[1, 2], [0, 3], [4, 5]]
    assert pack_sequences(lengths, 12, footprint="padded") == [[1, 0], [2, 3, 4, 5]]
    assert pack_sequences([5, 6, 2], 8, keys=["a", "b", "a"]) == [[1], [0, 2]]
    assert pack_sequences([5, 6, 2], 8, keys=np.array(["a", "b", "a"])) == [[1], [0, 2]]
    # Next fit closes its pack on a new key, as on any misfit.
    assert pack_sequences([1, 1, 1], 8, algorithm="next_fit", keys=[0, 1, 0]) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="max_sequences must be >= 1, got 0"):
        pack_sequences([1], 8, max_sequences=0)
    with pytest.raises(TypeError, match="max_sequences must be an int"):
        pack_sequences([1], 8, max_sequences=1.5)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="footprint must be 'sum' or 'padded', got 'max'"):
        pack_sequences([1], 8, footprint="max")
    with pytest.raises(ValueError, match="keys must have one entry per length: got 1 for 2"):
        pack_sequences([1, 2], 8, keys=["a"])
    with pytest.raises(TypeError, match=r"keys\[1\] must be hashable"):
        pack_sequences([1, 2], 8, keys=["a", ["b"]])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 9 is longer"):
        pack_sequences([9], 8, footprint="padded")
    # A cap of 2**64 or more, with a padded footprint past 2**64 - 1: refused, not clamped.
    big = 2**63 - 1
    assert pack_sequences([big, big], 2**64, footprint="padded") == [[0, 1]]
    with pytest.raises(ValueError, match="count times the longest"):
        pack_sequences([big, big, big], 2**70, footprint="padded")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=4, max_size=60),
    st.one_of(st.none(), st.integers(1, 4)),
    st.sampled_from(["sum", "padded"]),
)
def test_packed_steps_respect_the_shapes(lengths, max_sequences, footprint):
    cap = 400
    plan = plan_packed_steps(lengths, 2, 2, cap, max_sequences=max_sequences, footprint=footprint)
    seen = sorted(i for rank in plan for step in rank for pack in step for i in pack)
    assert seen == list(range(len(lengths)))
    for rank in plan:
        for step in rank:
            for pack in step:
                if not pack:
                    continue
                assert max_sequences is None or len(pack) <= max_sequences
                charged = (
                    len(pack) * max(lengths[i] for i in pack)
                    if footprint == "padded"
                    else sum(lengths[i] for i in pack)
                )
                assert charged <= cap
    if max_sequences is None and footprint == "sum":
        assert plan == plan_packed_steps(lengths, 2, 2, cap)
