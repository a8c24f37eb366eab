"""cp_sample_id_groups and cp_rank_plans: a malformed plan is refused by step, group and field
(never a sample dropped or misplaced, never Python's unnamed errors), and sizes that are not
powers of two are laid out on consecutive ranks."""

from __future__ import annotations

import numpy as np
import pytest

from seqbalance import cp_rank_plans, cp_sample_id_groups, plan_context_parallel

LAYOUTS = {
    "megatron": lambda plan: cp_sample_id_groups(plan, 4),
    "megatron widened": lambda plan: cp_sample_id_groups(plan, 4, widen_idle=True),
    "per rank": lambda plan: cp_rank_plans(plan, 4),
}


@pytest.mark.parametrize(
    ("plan", "error", "match"),
    [
        # Two groups on rank 1: the second once overwrote the first's samples in the layout.
        (
            [[(2, [0, 1], [0]), (2, [1, 2], [1])]],
            ValueError,
            r"step 0, group 1: rank 1 is also in group 0: step 0 puts two groups on rank 1",
        ),
        # A negative rank once wrote the last rank's entry in cp_rank_plans.
        ([[(1, [-1], [0])]], ValueError, r"step 0, group 0: rank -1 of ranks \[-1\] is outside"),
        ([[(2, [0], [0])]], ValueError, r"step 0, group 0: cp_size 2 on 1 ranks \[0\]"),
        ([[(2, [0.0, 1], [0])]], TypeError, r"step 0, group 0: ranks\[0\] must be an int, got 0.0"),
        ([[(2.0, [0, 1], [0])]], TypeError, r"step 0, group 0: cp_size must be an int, got 2.0"),
        ([[(True, [0], [0])]], TypeError, r"step 0, group 0: cp_size must be an int, got True"),
        # cp_size 0 on no ranks once dropped its sample (and widening divided by zero).
        (
            [[(1, [0], [1]), (0, [], [0])]],
            ValueError,
            r"step 0, group 1: cp_size must be >= 1, got 0",
        ),
        # Ranks that are not one block were accepted though the docstring promised blocks.
        (
            [[(2, [0, 3], [0])]],
            ValueError,
            r"step 0, group 0: ranks \[0, 3\] are not one block of consecutive ranks",
        ),
        ([[(2, [1, 0], [0])]], ValueError, r"ranks \[1, 0\] are not one block"),
        (
            [[(2, [1, 2], [0])]],
            ValueError,
            r"step 0, group 0: ranks \[1, 2\] start at 1, not a multiple of cp_size 2",
        ),
        # A 2-tuple, ranks=None and indexes=None met Python's unpacking and iteration errors.
        (
            [[(2, [0, 1])]],
            ValueError,
            r"step 0, group 0 must be a \(cp_size, ranks, indexes\) tuple, got 2 items",
        ),
        ([[(2, None, [0])]], TypeError, r"step 0, group 0: ranks must be a list of ints, got None"),
        (
            [[(2, [0, 1], None)]],
            TypeError,
            r"step 0, group 0: indexes must be a list of ints, got None",
        ),
        ([[(1, [0], ["a"])]], TypeError, r"step 0, group 0: indexes\[0\] must be an int, got 'a'"),
        ([[(1, [0], [-3])]], ValueError, r"step 0, group 0: indexes\[0\] must be >= 0, got -3"),
        (
            [[(1, [0], [0])], [(1, [0], [5, 0])]],
            ValueError,
            r"step 1, group 0: index 0 is also in step 0, group 0",
        ),
        ([[7]], TypeError, r"step 0, group 0 must be a \(cp_size, ranks, indexes\) tuple, got 7"),
        ([None], TypeError, r"step 0 must be a list of groups, got None"),
        (None, TypeError, r"plan must be a list of steps, got None"),
    ],
)
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_malformed_plan_is_refused_by_step_group_and_field(plan, error, match, layout):
    with pytest.raises(error, match=match):
        layout(plan)


def test_numpy_ranks_and_indexes_are_read():
    plan = [[(2, np.arange(2), np.array([1])), (np.int64(1), (2,), range(0, 1))]]
    assert cp_sample_id_groups(plan, 3) == [[[1], [1], [0]]]
    assert cp_rank_plans(plan, 3) == [[(2, 0, [1])], [(2, 1, [1])], [(1, 0, [0])]]


def test_sizes_that_are_not_powers_of_two_take_consecutive_ranks():
    # Megatron-LM #6801's example: CP5 on ranks 0-4, CP3 on 5-7.
    plan = [[(5, [0, 1, 2, 3, 4], [0]), (3, [5, 6, 7], [1, 2])]]
    assert cp_sample_id_groups(plan, 8) == [[[0]] * 5 + [[1, 2]] * 3]
    assert cp_rank_plans(plan, 8)[6] == [(3, 1, [1, 2])]
    # A size-3 block may start anywhere; a power-of-two block at a multiple of its size.
    assert cp_sample_id_groups([[(2, [0, 1], [0]), (3, [2, 3, 4], [1])]], 5) == [
        [[0], [0], [1], [1], [1]]
    ]
    # Widened into idle ranks, each to the next allowed size, the step is laid out again:
    # power-of-two sizes first (aligned), then the others.
    step = [(3, [0, 1, 2], [0]), (1, [3], [1])]
    assert cp_sample_id_groups([step], 6, widen_idle=True, cp_sizes=[1, 2, 3]) == [
        [[0], [0], [0], [1], [1], [1]]
    ]
    assert cp_sample_id_groups([step], 5, widen_idle=True, cp_sizes=[1, 2, 3]) == [
        [[1], [1], [0], [0], [0]]
    ]
    with pytest.raises(ValueError, match=r"step 0 leaves 1 of 7 ranks idle .* cp_sizes \[1, 3\]"):
        cp_sample_id_groups([step], 7, widen_idle=True, cp_sizes=[1, 3])


def test_the_planner_lays_out_mixed_sizes_as_the_layouts_read_them():
    for cp_sizes in ([3, 5], [1, 3, 5], [2, 3], [1, 2, 4, 6]):
        lengths = [100, 30, 20, 10, 70, 55, 8, 3]
        plan = plan_context_parallel(lengths, 8, 40, comm=0.1, cp_sizes=cp_sizes)
        layout = cp_sample_id_groups(plan, 8, cp_sizes=cp_sizes)
        for step, ranks in zip(plan, layout, strict=True):
            for cp_size, members, indexes in step:
                assert all(ranks[r] == indexes for r in members)
                assert cp_size in cp_sizes
