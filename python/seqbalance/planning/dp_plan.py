"""One plan for all data-parallel ranks: which rank trains which samples, in which micro-batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native
from .._deprecation import renamed_params, retired_flag
from .._inputs import (
    EqualSize,
    check_choice,
    check_equal_size,
    check_flag,
    check_k_partitions,
    check_min_count,
    check_optional_count,
    check_step_model,
)
from ..errors import PartitionError
from ..partition import partition_ids
from .micro_batches import (
    _ORDERS,
    _plan_ranks,
    _prepare,
    _Problem,
    _round_up,
    logger,
)
from .step import DpIds, DpPlan, plan_step

__all__ = ["DpIds", "DpPlan", "plan_dp_ids", "plan_dp_micro_batches", "plan_dp_with_today"]


def _fill_empty_ranks(problem: _Problem, rank_of_group: np.ndarray, n_ranks: int) -> np.ndarray:
    """Give every empty rank one group: the lightest group of the rank holding the most.

    Only zero-cost groups can leave a rank empty in a balanced split, and moving a group to an
    empty rank never makes the heaviest rank heavier.
    """
    counts = np.bincount(rank_of_group, minlength=n_ranks)
    if problem.n_groups < n_ranks or counts.min() > 0:
        return rank_of_group
    rank_of_group = rank_of_group.copy()
    for rank in np.flatnonzero(counts == 0).tolist():
        donor = int(np.argmax(counts))
        members = np.flatnonzero(rank_of_group == donor)
        lightest = int(members[np.argmin(problem.weights[members])])
        rank_of_group[lightest] = rank
        counts[donor] -= 1
        counts[rank] += 1
    return rank_of_group


def _heaviest_at_bound(weights: np.ndarray, rank_of_group: np.ndarray, n_ranks: int) -> bool:
    """Whether the heaviest rank weighs ``ceil(total / n_ranks)``, which no split goes below.

    Then refining the split cannot lighten the heaviest rank, and planning a refined candidate
    (a third of plan_dp_micro_batches' time at 2^20 samples) is skipped. Exact: int64 sums, the
    total being at most ``2**63 - 1``.
    """
    sums = np.zeros(n_ranks, dtype=np.int64)
    np.add.at(sums, rank_of_group, weights)
    return int(sums.max()) == -(-int(sums.sum()) // n_ranks)


def plan_dp_ids(
    lengths: Any,
    dp_size: int,
    max_token_len: int,
    *,
    cost: Any = "tokens",
    equal_size: EqualSize = False,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    group_size: int = 1,
    uid_list: Any = None,
    pad_to_multiple_of: int = 1,
    order: str | None = None,
    refine: bool | str = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
    sync: str = "step",
    pipeline_stages: int = 1,
    forward_share: float = 1 / 3,
    max_num_micro_batches: int | None = None,
) -> DpIds:
    """The plan of `plan_dp_micro_batches` as ``DpIds(rank_ids, micro_batch_ids,
    num_micro_batches)``: the rank and the micro-batch (its place in the rank's order) of every
    sample as int64 arrays, and the common count, so empty micro-batches survive (as
    `partition_ids` is to `karmarkar_karp`). Cheaper at large n: no Python list per sample.
    Arguments and errors as `plan_dp_micro_batches`.

    Example:
        >>> ids = plan_dp_ids([300, 200, 100, 400, 50, 250], 2, 500, cost="tokens")
        >>> ids.rank_ids.tolist(), ids.micro_batch_ids.tolist(), ids.num_micro_batches
        ([1, 0, 1, 0, 0, 1], [1, 1, 0, 0, 1, 0], 2)
    """
    rank_ids, micro_batch_ids, count = _plan_dp(
        lengths,
        dp_size,
        max_token_len,
        cost=cost,
        equal_size=equal_size,
        min_num_micro_batches=min_num_micro_batches,
        num_micro_batches_multiple=num_micro_batches_multiple,
        group_size=group_size,
        uid_list=uid_list,
        pad_to_multiple_of=pad_to_multiple_of,
        order=order,
        refine=refine,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
        sync=sync,
        pipeline_stages=pipeline_stages,
        forward_share=forward_share,
        max_num_micro_batches=max_num_micro_batches,
        as_ids=True,
    )
    return DpIds(rank_ids, micro_batch_ids, count)


@renamed_params(force_group_size="group_size")
@retired_flag("as_ids", plan_dp_ids)
def plan_dp_micro_batches(
    lengths: Any,
    dp_size: int,
    max_token_len: int,
    *,
    cost: Any = "tokens",
    equal_size: EqualSize = False,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    group_size: int = 1,
    uid_list: Any = None,
    pad_to_multiple_of: int = 1,
    order: str | None = None,
    refine: bool | str = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
    sync: str = "step",
    pipeline_stages: int = 1,
    forward_share: float = 1 / 3,
    max_num_micro_batches: int | None = None,
) -> list[list[list[int]]]:
    """One plan for every data-parallel rank: ``plan[rank][micro_batch] -> sample indexes``.

    For a single controller that holds the whole step (verl's driver, slime's, NeMo-RL's):
    which rank trains which samples, and in which micro-batches, in one call.

    Guarantees: every micro-batch's token sum is at most ``max_token_len`` (lengths padded to
    ``pad_to_multiple_of``); every index appears exactly once; **every rank has the same number
    of micro-batches**, at least ``min_num_micro_batches`` and a multiple of
    ``num_micro_batches_multiple`` (a rank with fewer samples gets empty micro-batches, last);
    groups stay whole (``group_size`` consecutive samples, or runs of equal
    ``uid_list`` entries, of any size); no rank is without samples; ``equal_size`` constrains
    the number of groups per rank (``True``: equal, ``"nearly"``: within one, ``False``: free),
    which is the number of samples when groups are single samples or all of one size.

    Objective: the lightest heaviest rank by ``cost`` (gradient sync waits for it), then the
    fewest micro-batches, then balanced micro-batches within each rank. The result is never
    worse on the first two than the two-step recipe built from this library's functions:

        ranks = get_seqlen_balanced_partitions(group_costs, dp_size, equal_size)
        count = max(min_num_micro_batches_for(rank's lengths, cap, ...) for each rank)
        plan[r] = plan_micro_batches(rank's lengths, cap, min_num_micro_batches=count, ...)

    How it does better: it plans that recipe and a second candidate whose rank split is refined
    (the local search of ``refine=True``, which never makes the heaviest rank heavier and
    usually makes it lighter), plans the micro-batches of both knowing the cap, and keeps the
    refined one when it is at least as good on both the heaviest rank and the count (then on
    the heaviest micro-batch). The refined candidate is skipped when the recipe's heaviest rank
    already weighs ``ceil(total cost / dp_size)``, the least any split can reach, and for float
    costs (the refinement of the rank split weighs integers). Every rank is planned with the
    common count directly, so no all-reduce round trip is needed.

    Shape limits (``max_sequences``, ``footprint="padded"``, ``keys``): the plan made without
    them is returned when every micro-batch keeps them; otherwise each rank of each candidate is
    planned under them as `plan_micro_batches` does, so the common count is at most the
    largest of the ranks' first-fit-decreasing counts under the limits (raised to
    ``min_num_micro_batches``, rounded up to the multiple).

    The step the trainer runs (``sync``, ``pipeline_stages``; see `simulate_step` for the
    model): with the defaults the plan is the one above, answer for answer. Under
    ``sync="micro_batch"`` (FSDP, FSDP2, ZeRO-3: ranks wait for each other at every
    micro-batch) the plan minimises the lockstep step ``Σ_k max_r t(r, k)``: the whole batch
    split into ``dp_size × count`` parts whose slots weigh alike, dealt slot by slot. With
    ``pipeline_stages=P > 1`` (1F1B pipelines, ranks meeting once a step) it keeps the rank
    split above and chooses each rank's micro-batches and their order for the simulated
    makespan: small micro-batches where the pipeline fills and drains. In both, the count runs
    from the one above up to ``max_num_micro_batches`` (``None``: 4× it, rounded down to the
    multiple, never above the number of samples) when the cost prices a micro-batch (a
    `TimeCost` with a positive ``micro_batch`` term); with any other cost more micro-batches
    look free, so the count stays the one above unless ``max_num_micro_batches`` is given.
    Today's plan is always a candidate: the answer's step is never above it in the model (a new
    plan is kept only when it is below by more than float rounding, ``1e-8`` relative), the
    model of padded lengths when ``pad_to_multiple_of > 1`` (`simulate_step` given the same
    ``pad_to_multiple_of`` prices a plan as the planner did). Every
    guarantee above holds in every mode; in these modes the plan chooses the order itself (an
    explicit ``order`` is refused), lockstep slots come heaviest first, pipeline micro-batches
    in the searched order, empty micro-batches last.

    Args:
        lengths: per-sample token counts (ints or a 1-D integer array).
        dp_size: number of data-parallel ranks, an int >= 1.
        max_token_len: token cap per micro-batch, an int >= 1.
        cost: what balancing weighs, as in `plan_micro_batches` (default ``"tokens"``).
        equal_size: ``False``, ``True`` or ``"nearly"`` (see above); ``True`` and ``"nearly"``
            need groups of one size.
        min_num_micro_batches: as in `plan_micro_batches`.
        num_micro_batches_multiple: as in `plan_micro_batches`.
        group_size: as in `plan_micro_batches`.
        pad_to_multiple_of: as in `plan_micro_batches`.
        order: as in `plan_micro_batches` (None: ``"bubble"``); refused in the step modes,
            which choose the order themselves.
        refine: as in `plan_micro_batches`.
        uid_list: per-sample group ids (consecutive equal ids form a group), an alternative to
            ``group_size``.
        max_sequences: the most samples a micro-batch may hold, as in
            `plan_micro_batches`.
        footprint: ``"sum"`` or ``"padded"``, as in `plan_micro_batches`.
        keys: one hashable per sample, as in `plan_micro_batches`; the rank split ignores
            them, micro-batches never mix them.
        sync: ``"step"`` (ranks meet once a step: DDP with ``no_sync``, Megatron's DDP) or
            ``"micro_batch"`` (at every micro-batch: FSDP, ZeRO-3).
        pipeline_stages: ``P``, an int >= 1: each rank a 1F1B pipeline of ``P`` stages
            (only with ``sync="step"``).
        forward_share: the forward's share of a micro-batch's time in a pipeline, in (0, 1).
        max_num_micro_batches: the largest count the step modes may choose, or None; in
            every mode at least the count the default plan needs (the default mode plans
            exactly that count, and refuses a maximum below it).

    Returns:
        ``dp_size`` ranks, heaviest first; each a list of the same number of micro-batches,
        each an ascending list of sample indexes. `plan_dp_ids` gives the same plan as arrays.

    Raises:
        ValueError: a sample or group over the cap, fewer groups than ranks (a
            `PartitionError`), a group count ``equal_size=True`` cannot split
            evenly, groups of different sizes with ``equal_size``, an argument < 1, a count
            above ``MAX_MICRO_BATCHES``; ``sync`` other than ``"step"`` or
            ``"micro_batch"``, ``pipeline_stages`` not an int >= 1, ``forward_share`` not in
            (0, 1), a pipeline with ``sync="micro_batch"``, an explicit ``order`` in the step
            modes, ``max_num_micro_batches`` below the count the default plan needs.
        TypeError: non-integer arguments, non-numeric costs, unhashable keys, both
            ``uid_list`` and ``group_size``.

    Example:
        >>> plan_dp_micro_batches([300, 200, 100, 400, 50, 250], 2, 500, cost="tokens")
        [[[3], [1, 4]], [[2, 5], [0]]]
        >>> plan_dp_micro_batches(
        ...     [300, 200, 100, 400, 50, 250], 2, 500, cost="tokens", sync="micro_batch"
        ... )
        [[[0, 2], [1, 4]], [[3], [5]]]
    """
    plan: list[list[list[int]]] = _plan_dp(
        lengths,
        dp_size,
        max_token_len,
        cost=cost,
        equal_size=equal_size,
        min_num_micro_batches=min_num_micro_batches,
        num_micro_batches_multiple=num_micro_batches_multiple,
        group_size=group_size,
        uid_list=uid_list,
        pad_to_multiple_of=pad_to_multiple_of,
        order=order,
        refine=refine,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
        sync=sync,
        pipeline_stages=pipeline_stages,
        forward_share=forward_share,
        max_num_micro_batches=max_num_micro_batches,
        as_ids=False,
    )
    return plan


def _plan_dp(*args: Any, **options: Any) -> Any:
    """`plan_dp_with_today`'s plan alone: its lists, or with ``as_ids=True`` the triple
    ``(rank_ids, micro_batch_ids, num_micro_batches)`` (the public functions' forms)."""
    planned = plan_dp_with_today(*args, **options)
    if options["as_ids"]:
        rank_ids, micro_batch_ids = planned.plan
        return rank_ids, micro_batch_ids, planned.count
    return planned.plan


def plan_dp_with_today(
    lengths: Any,
    dp_size: int,
    max_token_len: int,
    *,
    cost: Any = "tokens",
    equal_size: EqualSize = False,
    min_num_micro_batches: int | None = None,
    num_micro_batches_multiple: int | None = None,
    group_size: int = 1,
    uid_list: Any = None,
    pad_to_multiple_of: int = 1,
    order: str | None = None,
    refine: bool | str = False,
    as_ids: bool = False,
    max_sequences: int | None = None,
    footprint: str = "sum",
    keys: Any = None,
    sync: str = "step",
    pipeline_stages: int = 1,
    forward_share: float = 1 / 3,
    max_num_micro_batches: int | None = None,
) -> DpPlan:
    """`plan_dp_micro_batches` with today's plan beside the answer (for the command line's
    report, which shows both steps). Same arguments, same checks."""
    ranks_count = check_k_partitions(dp_size, "dp_size")
    as_ids = check_flag(as_ids, "as_ids")
    sync, stages, share = check_step_model(sync, pipeline_stages, forward_share)
    stepped = sync == "micro_batch" or stages > 1
    if order is not None and stepped:
        raise ValueError(
            f"order={order!r} with sync={sync!r}, pipeline_stages={stages}: in these modes the "
            "plan chooses the order itself; leave order out"
        )
    order = check_choice("bubble" if order is None else order, "order", _ORDERS)
    largest = check_optional_count(max_num_micro_batches, "max_num_micro_batches", 0) or None
    equal = check_equal_size(equal_size)
    problem = _prepare(
        lengths,
        max_token_len,
        group_size,
        num_micro_batches_multiple,
        cost,
        pad_to_multiple_of,
        refine,
        uid_list,
        max_sequences=max_sequences,
        footprint=footprint,
        keys=keys,
    )
    minimum = _round_up(check_min_count(min_num_micro_batches), problem.multiple)
    if problem.n_groups < ranks_count:
        raise PartitionError(
            f"number of groups ({problem.n_groups}) is smaller than dp_size ({ranks_count})"
        )
    if equal and problem.n_groups and int(problem.sizes.min()) != int(problem.sizes.max()):
        raise ValueError(
            f"equal_size={equal!r} counts samples per rank, but the groups differ in size "
            f"({int(problem.sizes.min())} to {int(problem.sizes.max())} samples); "
            "pass equal_size=False"
        )
    if equal is True and problem.n_groups % ranks_count:
        raise PartitionError(
            f"number of groups ({problem.n_groups}) is not divisible by dp_size ({ranks_count}) "
            "with equal_size=True; pass equal_size='nearly' for counts within one"
        )
    # With a divisible count "nearly" is exactly True.
    partition_equal: Any = equal if problem.n_groups % ranks_count else bool(equal)
    recipe_ids = partition_ids(
        problem.weights, ranks_count, equal_size=partition_equal, refine=problem.refine
    )
    candidates = [recipe_ids]
    if (
        problem.refine is False
        and ranks_count > 1
        and problem.weights.dtype.kind != "f"
        and not _heaviest_at_bound(problem.weights, recipe_ids, ranks_count)
    ):
        # The local search of refine=True, started from the recipe's own split; None when it
        # moves nothing (the refinement would only renumber the ranks, which plans the same).
        refined_ids = _native._refine_candidate(
            problem.weights, recipe_ids, ranks_count, bool(partition_equal)
        )
        if refined_ids is not None:
            candidates.append(refined_ids)
    filled = [_fill_empty_ranks(problem, ids, ranks_count) for ids in candidates]
    if stepped:
        return plan_step(
            problem,
            filled,
            ranks_count,
            minimum,
            as_ids,
            largest,
            partition_equal,
            (sync, stages, share, cost),
        )
    kept, count, plan = _plan_ranks(problem, filled, ranks_count, minimum, order, as_ids)
    if largest is not None and largest < count:
        # The step planner's refusal, in its words: this mode plans exactly today's count.
        raise ValueError(
            f"max_num_micro_batches = {largest} is below the {count} micro-batches today's plan "
            f"needs; pass at least {count}, or None"
        )
    logger.debug(
        "planned %d groups over %d ranks x %d micro-batches (%s rank split)",
        problem.n_groups,
        ranks_count,
        count,
        "refined" if kept else "recipe's",
    )
    return DpPlan(plan, count, None, None, count, None)
