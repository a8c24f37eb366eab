"""Absurd counts and endless iterables are refused up front, never met by a MemoryError or a hang.

Without the bounds these calls allocate for minutes and die (or take the machine's memory with
them), so each runs in a child process under an address-space limit and a timeout: the child must
end at once with the documented exception and the interpreter must still work afterwards.
"""

from __future__ import annotations

import functools
import itertools
import sys

import pytest

from seqbalance import min_num_micro_batches_for, plan_micro_batches, refine_partitions
from tests import helpers

# 3 GiB of address space: far more than the calls need once refused, far less than the
# allocations they would make otherwise.
LIMIT_BYTES = 3 << 30


#: Every child runs under the address-space limit, so a bound that failed would be a MemoryError
#: (or worse) there instead of the ValueError the tests expect.
PRELUDE = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_BYTES}, {LIMIT_BYTES}))
import itertools
import seqbalance
"""
run_child = functools.partial(helpers.run_child, prelude=PRELUDE, timeout=60)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "seqbalance.plan_micro_batches([1, 2, 3], 10, min_num_micro_batches=10**12)",
            "min_num_micro_batches must be <= 2**24 (16777216), got 1000000000000",
        ),
        (
            "seqbalance.plan_micro_batches([1, 2, 3], 10, num_micro_batches_multiple=10**12)",
            "num_micro_batches_multiple must be <= 2**24 (16777216), got 1000000000000",
        ),
        (
            "seqbalance.min_num_micro_batches_for([1], 10, num_micro_batches_multiple=2**24 + 1)",
            "num_micro_batches_multiple must be <= 2**24 (16777216), got 16777217",
        ),
        (
            "seqbalance.refine_partitions([1, 2, 3], itertools.repeat([0]))",
            "partitions yields more than 3 items",
        ),
        (
            "seqbalance.refine_partitions([1, 2, 3], [[0], itertools.count()])",
            "partitions[1] yields more than 3 items",
        ),
        (
            "seqbalance.SeqlenBalancedSampler(1, 10**12)",
            "dp_size must be <= 2**24 (16777216), got 1000000000000",
        ),
    ],
)
def test_absurd_requests_are_refused_at_once_in_a_child(call, message):
    result = run_child(
        f"""
        try:
            {call}
        except ValueError as exc:
            print("ValueError:", exc)
        # the interpreter is fine afterwards
        print(seqbalance.get_seqlen_balanced_partitions([3, 1, 2], 2, False))
        """
    )
    assert result.returncode == 0, result.stderr
    assert f"ValueError: {message}" in result.stdout
    assert "[[1, 2], [0]]" in result.stdout


def test_a_count_above_the_sample_count_stays_valid():
    plan = plan_micro_batches([5, 7], 10, min_num_micro_batches=6, order="none")
    assert len(plan) == 6 and sorted(i for mb in plan for i in mb) == [0, 1]
    assert len(plan_micro_batches([5], 10, num_micro_batches_multiple=4)) == 4
    assert min_num_micro_batches_for([5], 10, num_micro_batches_multiple=2**24) == 2**24


def test_bounded_partitions_read_generators_that_end():
    def parts():
        yield iter([0, 2])
        yield (i for i in (1, 3))

    assert refine_partitions([10, 9, 1, 2], parts(), equal_size=True) == [[0, 2], [1, 3]]
    assert refine_partitions([10, 9, 1, 2], [range(2), range(2, 4)], equal_size=True) == [
        [0, 2],
        [1, 3],
    ]
    with pytest.raises(ValueError, match=r"partitions\[0\] yields more than 4 items"):
        refine_partitions([10, 9, 1, 2], [itertools.cycle([0, 1])])
