"""The ``refine`` keyword wherever a balanced split is made: partitioners, sampler, planners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance
from seqbalance import (
    SeqlenBalancedSampler,
    calculate_workload,
    get_seqlen_balanced_partitions,
    group_balanced_partitions,
    partition_ids,
    plan_micro_batches,
    plan_packed_steps,
    reference,
)
from tests.helpers import loads


@st.composite
def requests(draw):
    values = draw(st.lists(st.integers(0, 40_000), min_size=1, max_size=80))
    equal_size = draw(st.booleans())
    k = draw(st.integers(1, min(len(values), 12)))
    if equal_size:
        values = values[: len(values) - len(values) % k]
    return values, k, equal_size


@given(requests(), st.sampled_from([True, "exact"]))
def test_refined_partitions_keep_every_guarantee(request, mode):
    values, k, equal_size = request
    plain = get_seqlen_balanced_partitions(values, k, equal_size)
    refined = get_seqlen_balanced_partitions(values, k, equal_size, refine=mode)
    assert len(refined) == k and all(refined)
    assert sorted(i for part in refined for i in part) == list(range(len(values)))
    assert all(part == sorted(part) for part in refined)
    sums = loads(values, refined)
    assert sums == sorted(sums, reverse=True)
    assert max(sums) <= max(loads(values, plain))
    if equal_size:
        assert {len(part) for part in refined} == {len(values) // k}
    # partition_ids numbers the same refined parts.
    ids = partition_ids(values, k, equal_size=equal_size, refine=mode)
    for number, part in enumerate(refined):
        assert (ids[part] == number).all()


@given(requests())
def test_refine_false_is_the_reference(request):
    values, k, equal_size = request
    expected = reference.get_seqlen_balanced_partitions(values, k, equal_size)
    assert get_seqlen_balanced_partitions(values, k, equal_size, refine=False) == expected
    assert get_seqlen_balanced_partitions(values, k, equal_size, refine=np.bool_(False)) == expected


def test_refine_accepts_arrays_and_tuples():
    values = [9, 8, 7, 6, 5, 4, 3, 2]
    expected = get_seqlen_balanced_partitions(values, 4, True, refine=True)
    for variant in (tuple(values), np.array(values, dtype=np.uint16), np.array(values)[::1]):
        assert get_seqlen_balanced_partitions(variant, 4, True, refine=True) == expected


BAD_REFINE = [
    ("yes", ValueError),
    ("EXACT", ValueError),
    (1, TypeError),
    (None, TypeError),
    (0.5, TypeError),
]


@pytest.mark.parametrize("bad, error", BAD_REFINE)
def test_bad_refine_is_rejected_everywhere(bad, error):
    values = [5, 4, 3, 2]
    pattern = r"refine must be False, True or 'exact'"
    with pytest.raises(error, match=pattern):
        get_seqlen_balanced_partitions(values, 2, True, refine=bad)
    with pytest.raises(error, match=pattern):
        partition_ids(values, 2, equal_size=True, refine=bad)
    with pytest.raises(error, match=pattern):
        SeqlenBalancedSampler(2, 2, refine=bad)
    with pytest.raises(error, match=pattern):
        group_balanced_partitions(values, [0, 0, 1, 1], 2, refine=bad)
    with pytest.raises(error, match=pattern):
        plan_micro_batches(values, 100, refine=bad)
    with pytest.raises(error, match=pattern):
        plan_packed_steps(values, 2, 1, 100, refine=bad)


def test_refine_is_keyword_only():
    with pytest.raises(TypeError):
        get_seqlen_balanced_partitions([1, 2], 2, False, True)  # type: ignore[misc]


class Meta:
    def __init__(self, lengths):
        self.lengths = lengths

    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": self.lengths[i]} for i in indexes}


@given(st.lists(st.integers(1, 30_000), min_size=32, max_size=32), st.sampled_from([2, 4]))
def test_sampler_refine_never_raises_the_heaviest_share(lengths, dp_size):
    meta = Meta(lengths)
    shares = {}
    for refine in (False, True):
        sampler = SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=dp_size, refine=refine)
        per_rank = 32 // dp_size
        shares[refine] = [
            sampler(list(range(32)), per_rank, dp_rank=r, batch_index=0, partition=meta)[0]
            for r in range(dp_size)
        ]
    for split in shares.values():
        assert sorted(i for share in split for i in share) == list(range(32))
        for share in split:  # whole groups of two
            assert all(share[j] // 2 == share[j + 1] // 2 for j in range(0, len(share), 2))
    heaviest = {refine: max(loads(lengths, split)) for refine, split in shares.items()}
    assert heaviest[True] <= heaviest[False]


@given(st.lists(st.integers(1, 5_000), min_size=24, max_size=24))
def test_group_balancing_refine_keeps_equal_group_counts(lengths):
    uids = [i // 3 for i in range(24)]  # 8 groups of 3
    plain = group_balanced_partitions(lengths, uids, 4)
    refined = group_balanced_partitions(lengths, uids, 4, refine=True)
    assert [len(part) for part in refined] == [6, 6, 6, 6]
    assert sorted(i for part in refined for i in part) == list(range(24))
    work = calculate_workload(lengths)
    assert max(loads(work, refined)) <= max(loads(work, plain))


@given(st.lists(st.integers(1, 4_000), min_size=1, max_size=60), st.integers(4_000, 20_000))
def test_micro_batches_refine_keeps_the_cap_and_never_needs_more(lengths, cap):
    for cost in ("workload", "tokens"):
        refined = plan_micro_batches(lengths, cap, refine=True, cost=cost)
        assert all(sum(lengths[i] for i in mb) <= cap for mb in refined)
        assert sorted(i for mb in refined for i in mb) == list(range(len(lengths)))
        assert seqbalance.min_num_micro_batches_for(lengths, cap, refine=True, cost=cost) == len(
            refined
        )
    # Balancing tokens, refinement lowers the heaviest micro-batch, so a count fits no later.
    plain = plan_micro_batches(lengths, cap, cost="tokens")
    refined = plan_micro_batches(lengths, cap, refine=True, cost="tokens")
    assert len(refined) <= len(plain)


@given(st.lists(st.integers(1, 1_000), min_size=8, max_size=60))
def test_packed_steps_refine_keeps_its_guarantees(lengths):
    plan = plan_packed_steps(lengths, 2, 2, 1_000, refine=True)
    seen = sorted(i for rank in plan for step in rank for pack in step for i in pack)
    assert seen == list(range(len(lengths)))
    for step in range(2):
        assert len({len(plan[rank][step]) for rank in range(2)}) == 1
    assert all(
        sum(lengths[i] for i in pack) <= 1_000 for rank in plan for step in rank for pack in step
    )
