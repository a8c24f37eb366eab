"""The planned step a trainer runs (``install(step=True)``): one mini-batch's plan, kept only
where it is not worse than the trainer's own.

Everything here is a pure function of what every rank shares -- the mini-batch's lengths (every
data-parallel rank's), the trainer's arguments and one cost version -- so every rank that calls
it with the same inputs gets the same answer, or the same exception. Two entry points:

- `plan_free`: a driver that holds the whole mini-batch and chooses each sample's rank and
  micro-batch slot (verl's and OpenRLHF's driver balancing);
- `plan_fixed`: workers whose samples are already on their ranks, planning every rank's
  micro-batches jointly (from an all-gather of the ranks' lengths).

Both also take the trainer's own plan of the same samples (or None where the trainer's code
would have raised), simulate both in the step model (`seqbalance.simulate_step`) and keep the
trainer's where seqbalance's is above it or breaks one of the trainer's constraints: the cap,
the counts, whole groups, no empty micro-batch. The trainer's cap wins over "never worse": a
trainer plan over the cap is never kept.

The trainers' own plans are in `seqbalance.integrations._own_plans`; the driver's layout and
the slot field that carries it to the workers in `seqbalance.integrations._slots`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..costs import ModelCost, TimeCost
from ..costs.workload import nanoseconds, sample_costs
from ..planning.dp_plan import plan_dp_micro_batches
from ..planning.micro_batches import min_num_micro_batches_for
from ..planning.step import micro_batch_term, simulate_step

__all__ = [
    "StepMode",
    "StepPlan",
    "UnmetConstraint",
    "plan_fixed",
    "plan_free",
    "trainer_weights",
]

Plan = list[list[list[int]]]


class UnmetConstraint(ValueError):
    """A constraint of the trainer's no plan can meet (a sample or group over the cap, a rank
    with fewer groups than micro-batches). Raised identically on every rank that planned from
    the same inputs."""


@dataclass(frozen=True)
class StepMode:
    """The step the engine runs: ``sync`` and ``pipeline_stages`` of `simulate_step`."""

    sync: str = "micro_batch"
    pipeline_stages: int = 1

    def __post_init__(self) -> None:
        if self.sync not in ("step", "micro_batch"):
            raise ValueError(f"sync = {self.sync!r}: expected 'step' or 'micro_batch'")
        if type(self.pipeline_stages) is not int or self.pipeline_stages < 1:
            raise ValueError(f"pipeline_stages = {self.pipeline_stages!r}: expected an int >= 1")
        if self.pipeline_stages > 1 and self.sync != "step":
            raise ValueError("pipeline_stages > 1 needs sync='step' (1F1B ranks meet once a step)")

    def describe(self) -> str:
        if self.pipeline_stages > 1:
            return f"1F1B, {self.pipeline_stages} stages"
        return "lockstep" if self.sync == "micro_batch" else "ranks meeting once a step"


@dataclass(frozen=True)
class StepPlan:
    """A mini-batch's plan: ``plan[rank][slot] -> indexes``, its predicted step, the trainer's.

    Attributes:
        plan: every rank's micro-batches in run order (the same count on every rank, none
            empty), each an ascending list of indexes into the lengths planned.
        seconds: the step of ``plan`` in the step model (the cost's units).
        trainer_seconds: the step of the trainer's own plan, or None where it had none.
        kept: ``"seqbalance"`` or ``"trainer"`` (the trainer's plan was not worse).
    """

    plan: Plan
    seconds: float
    trainer_seconds: float | None
    kept: str

    @property
    def count(self) -> int:
        return len(self.plan[0]) if self.plan else 0


def trainer_weights(cost: Any, lengths: np.ndarray, default: str) -> np.ndarray:
    """What the trainer's own balancing weighs each sample by (int64): the installed cost as
    ``install(cost=...)`` hands it to the trainer (a `TimeCost`'s nanoseconds, a `ModelCost`'s
    FLOPs), else the trainer's default (``"workload"``: verl's ``24576 L + L**2``; ``"tokens"``)."""
    if isinstance(cost, TimeCost):
        return nanoseconds(cost, lengths)
    if isinstance(cost, ModelCost):
        return np.array(cost.flops(lengths), dtype=np.int64)
    return np.asarray(sample_costs(default, lengths), dtype=np.int64)


def _groups_of(n: int, group_size: int) -> int:
    if group_size < 1 or n % group_size:
        raise UnmetConstraint(
            f"force_group_size = {group_size}: {n} samples are not whole groups of it"
        )
    return n // group_size


def _simulate(plan: Plan, lengths: np.ndarray, cost: Any, mode: StepMode) -> float:
    return float(
        simulate_step(
            plan, lengths, cost=cost, sync=mode.sync, pipeline_stages=mode.pipeline_stages
        ).makespan
    )


def _violation(
    plan: Plan,
    lengths: np.ndarray,
    max_token_len: int,
    n: int,
    group_size: int,
    min_count: int | None,
    multiple: int | None,
    rank_sizes: Sequence[int] | None = None,
) -> str | None:
    """What ``plan`` breaks of the trainer's constraints, or None."""
    counts = {len(rank) for rank in plan}
    if len(counts) != 1:
        return "ranks with different micro-batch counts"
    count = counts.pop()
    if count == 0 or (min_count is not None and count < min_count):
        return f"{count} micro-batches, fewer than {min_count or 1}"
    if multiple is not None and count % multiple:
        return f"{count} micro-batches, not a multiple of {multiple}"
    seen = np.zeros(n, dtype=np.int64)
    for r, rank in enumerate(plan):
        for part in rank:
            if not part:
                return "an empty micro-batch"
            members = np.asarray(part, dtype=np.int64)
            if int(lengths[members].sum()) > max_token_len:
                return f"a micro-batch over max_token_len = {max_token_len}"
            if group_size > 1:
                heads = np.unique(members // group_size)
                if heads.size * group_size != members.size:
                    return "a group split across micro-batches"
            seen[members] += 1
        if rank_sizes is not None and sum(len(p) for p in rank) != rank_sizes[r]:
            return "samples moved between ranks"
    if not (seen == 1).all():
        return "an index not exactly once"
    return None


def _fill_empty(rank: list[list[int]], weights: np.ndarray, group_size: int) -> bool:
    """Give each empty micro-batch the lightest group of the micro-batch holding the most
    groups (two at least): the cap still holds (a group alone fits; the donor only loses).
    False where a rank has fewer groups than micro-batches."""
    for slot, part in enumerate(rank):
        if part:
            continue
        donor = max(range(len(rank)), key=lambda k: (len(rank[k]), -k))
        if len(rank[donor]) < 2 * group_size:
            return False
        heads = sorted({i // group_size for i in rank[donor]})
        lightest = min(
            heads, key=lambda h: (int(weights[h * group_size : (h + 1) * group_size].sum()), h)
        )
        moved = set(range(lightest * group_size, (lightest + 1) * group_size))
        rank[donor] = [i for i in rank[donor] if i not in moved]
        rank[slot] = sorted(moved)
    return True


def _choose(
    candidates: list[Plan],
    trainer: Plan | None,
    lengths: np.ndarray,
    cost: Any,
    mode: StepMode,
    check: Callable[[Plan], str | None],
) -> StepPlan:
    """The best valid candidate in the step model (seqbalance's first on ties), the trainer's
    plan where it is below every one of them.

    In a pipeline whose cost does not price a micro-batch, a candidate with fewer micro-batches
    than the trainer's valid plan is not one: fewer micro-batches would look cheaper than they
    are to a model that does not see their cost (a cost model never guesses).
    """
    trainer_valid = trainer is not None and check(trainer) is None
    fewest = (
        len(trainer[0])
        if trainer_valid and trainer and mode.pipeline_stages > 1 and micro_batch_term(cost) == 0
        else 0
    )
    best: tuple[float, Plan] | None = None
    for plan in candidates:
        if check(plan) is not None or len(plan[0]) < fewest:
            continue
        seconds = _simulate(plan, lengths, cost, mode)
        if best is None or seconds < best[0]:
            best = (seconds, plan)
    trainer_seconds = None
    if trainer is not None and trainer_valid:
        trainer_seconds = _simulate(trainer, lengths, cost, mode)
        # Kept only when strictly below, past float rounding (as plan_dp_micro_batches keeps a
        # new plan).
        if best is None or trainer_seconds < best[0] * (1 - 1e-12):
            return StepPlan(trainer, trainer_seconds, trainer_seconds, "trainer")
    if best is None:
        problems = {check(plan) for plan in candidates} - {None}
        raise UnmetConstraint(
            "no plan keeps the trainer's constraints: " + "; ".join(sorted(map(str, problems)))
        )
    return StepPlan(best[1], best[0], trainer_seconds, "seqbalance")


def _sorted_heaviest_first(rank: list[list[int]], weights: np.ndarray) -> list[list[int]]:
    return sorted(rank, key=lambda part: (-float(weights[part].sum()), part[0] if part else 0))


def plan_fixed(
    rank_lengths: Sequence[np.ndarray],
    max_token_len: int,
    *,
    cost: Any,
    mode: StepMode,
    trainer: Plan | None,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
) -> StepPlan:
    """Every rank's micro-batches, its samples staying on it (``plan[rank][slot]`` holds
    indexes into that rank's own lengths).

    Each rank is split into the common count (the largest any rank needs, at least the
    minimum, a multiple of the multiple) of balanced micro-batches: in lockstep each rank's
    slots come heaviest first, so slot ``k`` pairs like with like across ranks; in a pipeline
    each rank's order is searched for the makespan (`plan_dp_micro_batches` with
    ``pipeline_stages``), at the trainer's count too where the trainer's is larger.
    ``trainer`` (the trainer's own plan of the same samples) is kept where it is not worse.
    """
    arrays = [np.asarray(lengths, dtype=np.int64).reshape(-1) for lengths in rank_lengths]
    offsets = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int64)
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    weights = np.asarray(sample_costs(cost, flat), dtype=np.float64)
    for lengths in arrays:
        _groups_of(lengths.size, force_group_size)
    try:
        needed = max(
            min_num_micro_batches_for(
                lengths,
                max_token_len,
                num_micro_batches_multiple=num_micro_batches_multiple,
                group_size=force_group_size,
            )
            for lengths in arrays
        )
    except ValueError as exc:
        raise UnmetConstraint(str(exc)) from None
    needed = max(needed, min_num_micro_batches or 1)
    if num_micro_batches_multiple:
        needed = -(-needed // num_micro_batches_multiple) * num_micro_batches_multiple
    counts = [needed]
    if trainer is not None and trainer and len(trainer[0]) > needed:
        counts.append(len(trainer[0]))

    def global_plan(plan: Plan) -> Plan:
        return [
            [[int(i) + int(offsets[r]) for i in part] for part in rank]
            for r, rank in enumerate(plan)
        ]

    candidates: list[Plan] = []
    for count in counts:
        plan: Plan = []
        for r, lengths in enumerate(arrays):
            rank = plan_dp_micro_batches(
                lengths,
                1,
                max_token_len,
                cost=cost,
                min_num_micro_batches=count,
                num_micro_batches_multiple=num_micro_batches_multiple,
                group_size=force_group_size,
                sync="step",
                pipeline_stages=mode.pipeline_stages,
                max_num_micro_batches=count,
            )[0]
            rank = [list(part) for part in rank]
            local = weights[offsets[r] : offsets[r + 1]]
            _fill_empty(rank, local, force_group_size)
            if mode.sync == "micro_batch":
                rank = _sorted_heaviest_first(rank, local)
            plan.append(rank)
        candidates.append(global_plan(plan))
    if trainer is not None and mode.sync == "micro_batch":
        # The trainer's own micro-batches, each rank's heaviest first: in lockstep no alignment
        # of the same micro-batches has a lower sum of slot maxima, so this candidate alone
        # keeps the plan from being above the trainer's.
        candidates.append(
            global_plan(
                [
                    _sorted_heaviest_first(
                        [list(part) for part in rank], weights[offsets[r] : offsets[r + 1]]
                    )
                    for r, rank in enumerate(trainer)
                ]
            )
        )
    sizes = [a.size for a in arrays]

    def check(plan: Plan) -> str | None:
        problem = _violation(
            plan,
            flat,
            max_token_len,
            flat.size,
            force_group_size,
            min_num_micro_batches,
            num_micro_batches_multiple,
            sizes,
        )
        if problem is None:
            for r, rank in enumerate(plan):
                if any(i < offsets[r] or i >= offsets[r + 1] for part in rank for i in part):
                    return "samples moved between ranks"
        return problem

    chosen = _choose(
        candidates,
        None if trainer is None else global_plan(trainer),
        flat,
        cost,
        mode,
        check,
    )
    local_plan = [
        [[i - int(offsets[r]) for i in part] for part in rank] for r, rank in enumerate(chosen.plan)
    ]
    return StepPlan(local_plan, chosen.seconds, chosen.trainer_seconds, chosen.kept)


def plan_free(
    lengths: np.ndarray,
    dp_size: int,
    max_token_len: int,
    *,
    cost: Any,
    mode: StepMode,
    trainer: Plan | None,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    force_group_size: int = 1,
) -> StepPlan:
    """One mini-batch's plan over ``dp_size`` ranks with equal sample counts (what dispatch's
    equal contiguous chunks need): `plan_dp_micro_batches` for the engine's step, empty
    micro-batches filled, at the trainer's count too where the trainer's is larger in a
    pipeline; ``trainer`` (its own plan of the same samples) kept where it is not worse."""
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    groups = _groups_of(lengths.size, force_group_size)
    if groups % dp_size:
        raise UnmetConstraint(
            f"{groups} groups of the mini-batch do not split evenly over dp_size = {dp_size}"
        )
    weights = np.asarray(sample_costs(cost, lengths), dtype=np.float64)
    options = {
        "cost": cost,
        "equal_size": True,
        "num_micro_batches_multiple": num_micro_batches_multiple,
        "group_size": force_group_size,
        "sync": mode.sync,
        "pipeline_stages": mode.pipeline_stages,
    }
    try:
        first = plan_dp_micro_batches(
            lengths, dp_size, max_token_len, min_num_micro_batches=min_num_micro_batches, **options
        )
    except ValueError as exc:
        raise UnmetConstraint(str(exc)) from None
    candidates = [first]
    if trainer is not None and trainer and len(trainer[0]) > len(first[0]):
        count = len(trainer[0])
        candidates.append(
            plan_dp_micro_batches(
                lengths,
                dp_size,
                max_token_len,
                min_num_micro_batches=count,
                max_num_micro_batches=count,
                **options,
            )
        )
    for plan in candidates:
        for rank in plan:
            _fill_empty(rank, weights, force_group_size)
    equal = [lengths.size // dp_size] * dp_size

    def check(plan: Plan) -> str | None:
        problem = _violation(
            plan,
            lengths,
            max_token_len,
            lengths.size,
            force_group_size,
            min_num_micro_batches,
            num_micro_batches_multiple,
        )
        if problem is None and sorted(sum(len(p) for p in rank) for rank in plan) != equal:
            return "unequal sample counts per rank"
        return problem

    return _choose(candidates, trainer, lengths, cost, mode, check)
