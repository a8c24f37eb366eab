"""plan_packed_steps is one native request that answers what its pieces, called one by one, answer.

The oracle composes the public partitioner and packer exactly as the planning spec describes the
plan (balance the ranks, then each rank's steps, then best fit decreasing per bucket, then empty
packs so every rank has as many per step); the planner runs all of it in one call to the extension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance import _native, get_seqlen_balanced_partitions, pack_sequences, plan_packed_steps
from seqbalance.costs.workload import sample_costs


def composed(
    lengths: list[int],
    dp_size: int,
    steps: int,
    cap: int,
    cost: Any,
    refine: bool | str,
    max_sequences: int | None,
    footprint: str,
) -> list[list[list[list[int]]]]:
    values = np.asarray(lengths, dtype=np.int64)
    weights = sample_costs(cost, values)
    plan: list[list[list[list[int]]]] = []
    for rank_part in get_seqlen_balanced_partitions(weights, dp_size, False, refine=refine):
        samples = np.asarray(rank_part, dtype=np.int64)
        filled = min(steps, samples.size)
        rank_plan: list[list[list[int]]] = []
        for part in get_seqlen_balanced_partitions(weights[samples], filled, False, refine=refine):
            bucket = samples[np.asarray(part, dtype=np.int64)]
            packs = pack_sequences(
                values[bucket].tolist(),
                cap,
                algorithm="bfd",
                max_sequences=max_sequences,
                footprint=footprint,
            )
            rank_plan.append([bucket[pack].tolist() for pack in packs])
        rank_plan.extend([] for _ in range(steps - filled))
        plan.append(rank_plan)
    for step in range(steps):
        width = max(len(rank_plan[step]) for rank_plan in plan)
        for rank_plan in plan:
            rank_plan[step].extend([] for _ in range(width - len(rank_plan[step])))
    return plan


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=120),
    dp_size=st.integers(1, 5),
    steps=st.integers(1, 4),
    slack=st.integers(0, 400),
    cost=st.sampled_from(["tokens", "workload", "float32", "float64"]),
    refine=st.sampled_from([False, True, "exact"]),
    max_sequences=st.one_of(st.none(), st.integers(1, 6)),
    footprint=st.sampled_from(["sum", "padded"]),
)
def test_one_request_answers_the_composed_plan(
    lengths: list[int],
    dp_size: int,
    steps: int,
    slack: int,
    cost: str,
    refine: bool | str,
    max_sequences: int | None,
    footprint: str,
) -> None:
    if len(lengths) < dp_size * steps:
        lengths = lengths * (dp_size * steps // len(lengths) + 1)
    cap = max(lengths) + slack
    weights: Any = cost
    if cost.startswith("float"):
        # Float costs as trainers pass them: per-sample FLOPs-like values in their own precision.
        weights = (np.asarray(lengths, dtype=np.float64) ** 1.5 / 7.0).astype(cost)
    plan = plan_packed_steps(
        lengths,
        dp_size,
        steps,
        cap,
        cost=weights,
        refine=refine,
        max_sequences=max_sequences,
        footprint=footprint,
    )
    assert plan == composed(lengths, dp_size, steps, cap, weights, refine, max_sequences, footprint)


def test_a_plan_is_one_call_into_the_extension(monkeypatch: Any) -> None:
    calls: list[str] = []
    for name in dir(_native):
        value = getattr(_native, name)
        if callable(value) and not isinstance(value, type) and not name.startswith("__"):

            def counted(*args: Any, _name: str = name, _value: Any = value, **kwargs: Any) -> Any:
                calls.append(_name)
                return _value(*args, **kwargs)

            monkeypatch.setattr(_native, name, counted)
    rng = np.random.default_rng(3)
    lengths = rng.integers(16, 4096, size=1000).tolist()
    plan = seqbalance.plan_packed_steps(lengths, 8, 4, 16384)
    assert calls == ["_plan_packed_steps"]
    assert sorted(i for rank in plan for step in rank for pack in step for i in pack) == list(
        range(1000)
    )
