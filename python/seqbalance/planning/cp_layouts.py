"""A context-parallel plan laid out for a trainer: per DP×CP rank as Megatron-LM's dynamic-CP
schedulers return it, or per rank as a driver sends it to each worker.

Both take any plan of steps of ``(cp_size, ranks, indexes)`` groups (one from
`plan_context_parallel`, or a plan of your own) and check it first, since a layout built from a
malformed group would drop or misplace samples: every step, group and field is named in the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._inputs import _describe, check_count
from .context_parallel import CpPlan, CpStep, cp_degrees

__all__ = ["cp_rank_plans", "cp_sample_id_groups"]

#: What a list of ints may come as (a NumPy array of ints included).
_LISTS = (list, tuple, range, np.ndarray)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _ints(values: Any, where: str, field: str) -> list[int]:
    """``values`` (a list of ints) as Python ints, or a named error."""
    if not isinstance(values, _LISTS) or (isinstance(values, np.ndarray) and values.ndim != 1):
        raise TypeError(f"{where}: {field} must be a list of ints, got {_describe(values)}")
    out = []
    for position, value in enumerate(values):
        if not _is_int(value):
            raise TypeError(f"{where}: {field}[{position}] must be an int, got {_describe(value)}")
        out.append(int(value))
    return out


def _checked(plan: Any, world_size: int) -> list[list[tuple[int, list[int], list[int]]]]:
    """``plan`` with every group read and checked: ``cp_size`` an int >= 1, ``ranks`` that many
    distinct ranks in ``range(world_size)`` forming one block of consecutive ranks (for a
    power-of-two size, starting at a multiple of it), no rank in two groups of a step,
    ``indexes`` ints >= 0, no index in two groups of the plan."""
    if not isinstance(plan, (list, tuple)):
        raise TypeError(f"plan must be a list of steps, got {_describe(plan)}")
    seen: dict[int, tuple[int, int]] = {}
    steps = []
    for s, step in enumerate(plan):
        if not isinstance(step, (list, tuple)):
            raise TypeError(f"step {s} must be a list of groups, got {_describe(step)}")
        used: dict[int, int] = {}
        groups = []
        for g, group in enumerate(step):
            where = f"step {s}, group {g}"
            if not isinstance(group, (list, tuple)):
                raise TypeError(
                    f"{where} must be a (cp_size, ranks, indexes) tuple, got {_describe(group)}"
                )
            if len(group) != 3:
                raise ValueError(
                    f"{where} must be a (cp_size, ranks, indexes) tuple, got {len(group)} items"
                )
            cp_size, ranks, indexes = group
            if not _is_int(cp_size):
                raise TypeError(f"{where}: cp_size must be an int, got {_describe(cp_size)}")
            cp_size = int(cp_size)
            if cp_size < 1:
                raise ValueError(f"{where}: cp_size must be >= 1, got {cp_size}")
            ranks = _ints(ranks, where, "ranks")
            indexes = _ints(indexes, where, "indexes")
            if len(ranks) != cp_size:
                raise ValueError(
                    f"{where}: cp_size {cp_size} on {len(ranks)} ranks {ranks} "
                    f"(ranks must hold cp_size ranks)"
                )
            for rank in ranks:
                if not 0 <= rank < world_size:
                    raise ValueError(
                        f"{where}: rank {rank} of ranks {ranks} is outside "
                        f"range(world_size={world_size})"
                    )
                if rank in used:
                    raise ValueError(
                        f"{where}: rank {rank} is also in group {used[rank]}: step {s} puts "
                        f"two groups on rank {rank}"
                    )
                used[rank] = g
            if ranks != list(range(ranks[0], ranks[0] + cp_size)):
                raise ValueError(
                    f"{where}: ranks {ranks} are not one block of consecutive ranks in order"
                )
            if cp_size & (cp_size - 1) == 0 and ranks[0] % cp_size:
                raise ValueError(
                    f"{where}: ranks {ranks} start at {ranks[0]}, not a multiple of cp_size "
                    f"{cp_size} (a power-of-two group is a block aligned to its size)"
                )
            for position, index in enumerate(indexes):
                if index < 0:
                    raise ValueError(f"{where}: indexes[{position}] must be >= 0, got {index}")
                if index in seen:
                    first_step, first_group = seen[index]
                    raise ValueError(
                        f"{where}: index {index} is also in step {first_step}, group "
                        f"{first_group}: a sample in two groups would run twice"
                    )
                seen[index] = (s, g)
            groups.append((cp_size, ranks, indexes))
        steps.append(groups)
    return steps


def _laid_out(step: CpStep) -> CpStep:
    """The step's groups on consecutive ranks from 0: power-of-two sizes first, widest first (so
    each starts at a multiple of its size), then the others, widest first."""
    laid: CpStep = []
    rank = 0
    for cp_size, _, indexes in sorted(step, key=lambda g: (g[0] & (g[0] - 1) != 0, -g[0])):
        laid.append((cp_size, list(range(rank, rank + cp_size)), list(indexes)))
        rank += cp_size
    return laid


def _widened(step: CpStep, world_size: int, position: int, degrees: Sequence[int] | None) -> CpStep:
    """``step`` with its idle ranks given to its narrowest groups, laid out again: each in turn
    doubles (as Megatron-LM's scheduler fills empty ranks), or with ``degrees`` (the allowed CP
    sizes) moves up to the next allowed size."""
    sizes = [cp_size for cp_size, _, _ in step]
    idle = world_size - sum(sizes)
    if not sizes:
        raise ValueError(f"step {position} has no group to widen into its {idle} idle ranks")
    while idle > 0:
        narrowest = sizes.index(min(sizes))
        size = sizes[narrowest]
        if degrees is None:
            wider = 2 * size if world_size % (2 * size) == 0 else None
            remedy = "plan with cp_sizes whose sizes tile world_size"
        else:
            wider = next((c for c in degrees if c > size), None)
            remedy = f"no larger size in cp_sizes {list(degrees)} fits them"
        if wider is None or wider - size > idle:
            raise ValueError(
                f"step {position} leaves {idle} of {world_size} ranks idle and its narrowest "
                f"group (cp_size {size}) cannot widen into them; {remedy}"
            )
        sizes[narrowest] = wider
        idle -= wider - size
    return _laid_out(
        [(size, [], indexes) for size, (_, _, indexes) in zip(sizes, step, strict=True)]
    )


def cp_sample_id_groups(
    plan: CpPlan,
    world_size: int,
    *,
    widen_idle: bool = False,
    cp_sizes: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """A plan in Megatron-LM's dynamic-CP layout: per step, per DP×CP rank, the sample indexes it
    holds.

    This is what Megatron-LM's packing schedulers return from ``get_groups_and_subsamples``
    (``sample_id_groups[micro_batch][dp_cp_rank]``): a sequence split over a group appears in the
    list of each of its ranks, and a rank's ``local_cp_size`` is the number of ranks whose list
    holds its samples. Every group must be one block of consecutive ranks, and a group whose size
    is a power of two must start at a multiple of it (how Megatron-LM creates its dynamic-CP
    process groups); a size that is not a power of two (Megatron-LM #6801's arbitrary sizes,
    logical groups over any interval of consecutive ranks) only needs consecutive ranks. Plans from
    `plan_context_parallel` are laid out so. A rank the plan leaves idle gets an empty list; with
    ``widen_idle=True`` the step's narrowest groups double into the idle ranks instead (fewer
    tokens per rank, more communication), since some trainers need every rank to hold a sample,
    and the step is laid out again (power-of-two sizes first, widest first, then the others).
    Given ``cp_sizes`` (the sizes the plan was made with), every group's size must be one of them
    and a widened group moves up to the next of them, never to another size.

    Args:
        plan: steps of ``(cp_size, ranks, indexes)`` groups (the answer of
            `plan_context_parallel`).
        world_size: DP×CP ranks (an int in ``1..2**24``).
        widen_idle: give idle ranks to the narrowest groups.
        cp_sizes: the allowed sizes the plan was made with (see `cp_degrees`).

    Returns:
        ``layout[step][rank]``: the indexes rank ``rank`` holds in step ``step``.

    Raises:
        TypeError: a plan, step, group or field of the wrong type (``cp_size`` not an int,
            ``ranks`` or ``indexes`` not a list of ints), named by step, group and field.
        ValueError: a group that is not a 3-tuple; a ``cp_size`` below 1; ranks that leave
            ``range(world_size)``, are not ``cp_size`` of them, are not one block of consecutive
            ranks (aligned to the size when it is a power of two), or overlap another group's in
            the step; an index below 0 or in two groups; a group size not in ``cp_sizes``; or
            idle ranks that no group can widen into (``widen_idle=True``).

    Example:
        >>> plan = [[(2, [0, 1], [0]), (1, [2], [1, 2])]]
        >>> cp_sample_id_groups(plan, 4)
        [[[0], [0], [1, 2], []]]
        >>> cp_sample_id_groups(plan, 4, widen_idle=True)
        [[[0], [0], [1, 2], [1, 2]]]
        >>> cp_sample_id_groups([[(1, [0], [0])]], 4, widen_idle=True, cp_sizes=[1, 4])
        [[[0], [0], [0], [0]]]
        >>> cp_sample_id_groups([[(2, [0, 1], [1]), (3, [2, 3, 4], [0])]], 5)
        [[[1], [1], [0], [0], [0]]]
    """
    world = check_count(world_size, "world_size")
    degrees = None if cp_sizes is None else cp_degrees(world, cp_sizes)
    layout = []
    for position, step in enumerate(_checked(plan, world)):
        if degrees is not None:
            for g, (cp_size, _, _) in enumerate(step):
                if cp_size not in degrees:
                    raise ValueError(
                        f"step {position}, group {g} has cp_size {cp_size}, not in "
                        f"cp_sizes {degrees}"
                    )
        groups = _widened(step, world, position, degrees) if widen_idle else step
        ranks: list[list[int]] = [[] for _ in range(world)]
        for _, members, indexes in groups:
            for rank in members:
                ranks[rank] = list(indexes)
        layout.append(ranks)
    return layout


def cp_rank_plans(plan: CpPlan, world_size: int) -> list[list[tuple[int, int, list[int]] | None]]:
    """A plan split per rank: for each rank, for each step, ``(local_cp_size, cp_rank, indexes)``
    (its group's size, its position in the group, the samples it holds a share of), or ``None``
    when the rank is idle in that step. This is what a driver sends each worker when it, not the
    workers, schedules (NeMo-RL's Ray driver): every worker resolves its CP group from the size
    and its block of ranks (consecutive ranks; aligned to the size when it is a power of two).

    Args:
        plan: steps of ``(cp_size, ranks, indexes)`` groups (the answer of
            `plan_context_parallel`).
        world_size: DP×CP ranks (an int in ``1..2**24``).

    Returns:
        ``per_rank[rank][step]``: ``(local_cp_size, cp_rank, indexes)`` or ``None``.

    Raises:
        TypeError, ValueError: ``world_size`` not an int in ``1..2**24``, or a malformed plan,
            as `cp_sample_id_groups` names it.

    Example:
        >>> cp_rank_plans([[(2, [0, 1], [0]), (1, [2], [1, 2])]], 3)
        [[(2, 0, [0])], [(2, 1, [0])], [(1, 0, [1, 2])]]
    """
    world = check_count(world_size, "world_size")
    per_rank: list[list[tuple[int, int, list[int]] | None]] = [[] for _ in range(world)]
    for step in _checked(plan, world):
        held: list[tuple[int, int, list[int]] | None] = [None] * world
        for cp_size, members, indexes in step:
            for cp_rank, rank in enumerate(members):
                held[rank] = (cp_size, cp_rank, list(indexes))
        for rank in range(world):
            per_rank[rank].append(held[rank])
    return per_rank
