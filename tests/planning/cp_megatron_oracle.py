"""Test oracle: the scheduler Megatron-LM ships now, in plain Python, as the second floor of
`seqbalance.plan_context_parallel` (the time-cost spec, "The scheduler Megatron-LM ships now").

Written for these tests from what Megatron-LM's dev branch does at commit d48bd6be0a (2026-08-21):
``DefaultDynamicCPScheduler.get_groups_and_subsamples`` (``megatron/core/datasets/data_schedule.py``)
sorts the ``(id, length)`` pairs longest first and calls ``next_hdp_group_packing_aware``
(``megatron/core/datasets/data_schedule_utils.py``) until nothing is left; each call forms one
step (a micro-batch over every DP×CP rank) and hands back the sequences it left out. No code of
Megatron-LM is copied here; what one call does, step by step:

1. The tallest sequence left opens a group of its smallest degree on the first ranks, whatever
   the cap; the step's cap is ``1.05 ·`` the work of the tallest at the fractional degree
   ``tallest / max_token_len``.
2. Every other sequence, in order, looks at each allowed degree from its smallest up; at each, at
   the groups of that degree in the order they were opened (those whose ranks keep at most
   ``max_token_len`` tokens with it), then at a new group on free ranks. A placement's
   projection is the step's slowest rank once the sequence is placed (every rank's time, the
   group's ranks with the sequence's work added). The least projection within the cap wins, the
   first on a tie; with none, the sequence waits for the next step.
3. While ranks are free, the first group of the smallest degree moves up to the next degree; if no
   group can, the step is formed again as one group of every rank holding the sequences, in
   order, whose shares fit (the others wait).

The two readings differ in the work: ``"shipped"`` is Megatron-LM's ``L² / c`` with the cap
``1.05 · tallest · max_token_len``; ``"judged"`` is the plan's own ``cost(L) / c + comm(L, c)``
with the cap ``1.05 · (cost(tallest) / d + comm(tallest, d))``, ``d = max(1, tallest /
max_token_len)`` fractional, ``comm`` at ``d`` interpolated linearly in ``1 / c`` between the
allowed degrees around it and ``(1, 0)`` (exact for ``comm = κ``).

Where this departs from the shipped code, on purpose (the spec holds every plan to the same rules):
a sequence's share is ``ceil(L / c)`` tokens (Megatron-LM adds ``L / c`` as a float); the degrees
are the allowed ones, from a sequence's smallest up (Megatron-LM doubles up to the world size; the
same where the allowed degrees are the powers of two up to a power-of-two world); a group moves up
to the next allowed degree only into free ranks, and the group of every rank exists only where that
size is allowed (else the step keeps its idle ranks); a length of 0 takes the smallest degree.
Floats are computed as Megatron-LM computes them (``float(L) * float(L) / c``; the cap's product
left to right), so the native transcription gives the same plans to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from .cp_oracle import Comm, Plan, ceil_div

READINGS = ("shipped", "judged")

#: 1 + Megatron-LM's ``_DYNAMIC_CP_WORKLOAD_CAP_DELTA``.
CAP_FACTOR = 1.0 + 0.05


def comm_at(i: int, d: float, comm: Comm, degrees: Sequence[int]) -> float:
    """``comm`` of sequence ``i`` at a fractional degree ``d >= 1``: linear in ``1 / c`` between
    the allowed degrees around ``d`` and ``(1, 0)``."""
    below, below_comm = 1.0, 0.0
    for c in degrees:
        value = comm(i, c)
        if c == d:
            return value
        if c < d:
            below, below_comm = float(c), value
            continue
        t = (1.0 / below - 1.0 / d) / (1.0 / below - 1.0 / c)
        return below_comm + (value - below_comm) * t
    return below_comm


class _Step:
    """A step being formed: every rank's time and group, the groups in opening order."""

    def __init__(self, world_size: int) -> None:
        self.times = [0.0] * world_size
        self.owner: list[int | None] = [None] * world_size
        # [cp_size, ranks, tokens per rank, indexes]
        self.groups: list[list] = []

    def place(self, group: list | None, c: int, share: int, i: int, work: float) -> None:
        """Sequence ``i`` joins ``group``, or opens one on the first ``c`` free ranks."""
        if group is None:
            ranks = [r for r, owner in enumerate(self.owner) if owner is None][:c]
            group = [c, ranks, 0, []]
            for r in ranks:
                self.owner[r] = len(self.groups)
            self.groups.append(group)
        group[2] += share
        group[3].append(i)
        for r in group[1]:
            self.times[r] += work


def megatron(
    lengths: Sequence[int],
    weights: Sequence[float],
    comm: Comm,
    world_size: int,
    cap: int,
    degrees: Sequence[int],
    reading: str,
) -> Plan:
    """The plan of the scheduler in one reading (``"shipped"`` or ``"judged"``): steps of
    ``(cp_size, ranks, indexes)``, each step's groups in the order they were opened."""
    assert reading in READINGS
    degrees = sorted(degrees)

    def work(i: int, c: int) -> float:
        if reading == "shipped":
            return float(lengths[i]) * float(lengths[i]) / c
        return weights[i] / c + comm(i, c)

    def smallest(i: int) -> int:
        return next(c for c in degrees if ceil_div(lengths[i], c) <= cap)

    pending = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    plan: Plan = []
    while pending:
        tall = pending[0]
        if reading == "shipped":
            formingcap = float(lengths[tall]) * float(cap) * CAP_FACTOR
        else:
            d = max(1.0, float(lengths[tall]) / float(cap))
            formingcap = (weights[tall] / d + comm_at(tall, d, comm, degrees)) * CAP_FACTOR
        forming = _Step(world_size)
        times, owner, groups = forming.times, forming.owner, forming.groups

        def place(group: list | None, c: int, i: int, forming: _Step = forming) -> None:
            forming.place(group, c, ceil_div(lengths[i], c), i, work(i, c))

        c = smallest(tall)
        place(None, c, tall)
        waiting = []
        for i in pending[1:]:
            best = None  # (projection, group or None, degree)
            for c in degrees:
                if c < smallest(i):
                    continue
                w = work(i, c)
                for group in groups:
                    if group[0] != c or group[2] + ceil_div(lengths[i], c) > cap:
                        continue
                    projected = max(
                        times[r] + w if r in group[1] else times[r] for r in range(world_size)
                    )
                    if projected <= formingcap and (best is None or projected < best[0]):
                        best = (projected, group, c)
                free = [r for r in range(world_size) if owner[r] is None]
                if len(free) >= c:
                    projected = max(
                        times[r] + w if r in free[:c] else times[r] for r in range(world_size)
                    )
                    if projected <= formingcap and (best is None or projected < best[0]):
                        best = (projected, None, c)
            if best is None:
                waiting.append(i)
            else:
                place(best[1], best[2], i)
        free = world_size - sum(group[0] for group in groups)
        while free > 0:
            narrowest = min(group[0] for group in groups)
            wider = [c for c in degrees if c > narrowest]
            if wider and wider[0] - narrowest <= free:
                next(group for group in groups if group[0] == narrowest)[0] = wider[0]
                free -= wider[0] - narrowest
                continue
            if degrees[-1] == world_size:
                # Formed again: one group of every rank, the sequences whose shares fit, in order.
                members, waiting, tokens = [], [], 0
                for i in pending:
                    share = ceil_div(lengths[i], world_size)
                    if tokens + share <= cap:
                        tokens += share
                        members.append(i)
                    else:
                        waiting.append(i)
                groups = [[world_size, [], tokens, members]]
            break
        step = []
        rank = 0
        for c, _, _, indexes in groups:
            step.append((c, list(range(rank, rank + c)), indexes))
            rank += c
        plan.append(step)
        pending = waiting
    return plan
