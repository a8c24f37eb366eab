"""What a user's type checker sees (issue 20): checked by mypy in ``make lint``, not run by pytest.

Each line marked ``# type: ignore[...]`` must be an error: mypy runs this module with
``warn_unused_ignores``, so an ignore that is no longer needed (a public signature that went back
to ``Any``) fails the lint. The other lines must type-check as they are.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from seqbalance import (
    DpIds,
    TimeCost,
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    pack_ids,
    partition_ids,
    plan_context_parallel,
    plan_dp_ids,
    plan_dp_micro_batches,
    plan_micro_batches,
    profile,
)


def accepted() -> None:
    parts: list[list[int]] = get_seqlen_balanced_partitions([10, 20, 30, 40], 2, True)
    parts = karmarkar_karp([1.5, 2.0, 3.25], 1, False)
    parts = greedy_partition(np.array([3, 1, 2]), 3, False)
    parts = get_seqlen_balanced_partitions((np.int64(3), np.int64(4)), 2, "nearly")
    ids: npt.NDArray[np.int64] = partition_ids(np.arange(8), 2, equal_size=True)
    assert parts and ids.size
    micro_batches: list[list[int]] = plan_micro_batches(
        [3, 4, 5], 8, max_sequences=2, footprint="padded", keys=["a", "b", "a"]
    )
    plan: list[list[list[int]]] = plan_dp_micro_batches([3, 4, 5, 6], 2, 8, max_sequences=2)
    dp_ids: DpIds = plan_dp_ids([3, 4, 5, 6], 2, 8)
    ranks, batches, count = dp_ids
    packs: npt.NDArray[np.int64] = pack_ids([3, 4, 5], 8)
    assert micro_batches and plan and ranks.size and batches.size and count and packs.size
    cost: TimeCost = TimeCost.fit([[1], [2], [3], [4], [5], [6, 7]], [1.0] * 6, half_life=8)
    coefficients: dict[str, float] = cost.coefficients
    timed: list[list[int]] = plan_micro_batches([3, 4, 5], 8, cost=cost)
    profiled: TimeCost = profile(lambda lengths: None, max_length=64, timer=lambda: 0.0)
    assert coefficients and timed and profiled.update([3, 4], 0.5) is profiled
    steps: list[list[tuple[int, list[int], list[int]]]] = plan_context_parallel(
        np.array([9, 40]), 4, 16, cost=lambda v: v * 1.5, comm=lambda L, c: 0.1 * L, cp_sizes=[1, 4]
    )
    single = plan_context_parallel([9, 40], 6, 16, cp_sizes=[3, 6], one_cp_size_per_step=True)
    assert steps and single


def refused() -> None:
    get_seqlen_balanced_partitions("abcd", 2, True)  # type: ignore[arg-type]
    karmarkar_karp(["1", "2"], 1, False)  # type: ignore[arg-type]
    partition_ids(None, 2)  # type: ignore[arg-type]
    get_seqlen_balanced_partitions([1, 2], 2, "yes")  # type: ignore[arg-type]
    ids: npt.NDArray[np.float64] = partition_ids([1, 2], 2)  # type: ignore[assignment]
    assert ids is not None
    lists: list[list[int]] = pack_ids([3, 4], 8)  # type: ignore[assignment]
    assert lists is not None
    plan_context_parallel([3, 4], 8, 16, comm="ring")  # type: ignore[arg-type]
    plan_context_parallel([3, 4], 8, 16, one_cp_size_per_step="yes")  # type: ignore[arg-type]
