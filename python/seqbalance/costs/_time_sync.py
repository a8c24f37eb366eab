"""Synchronised measurements for `seqbalance.TimeCost`: one micro-batch per rank, run in
lockstep and timed together, so the time is the slowest member's.

Under FSDP, FSDP2 and ZeRO-3 the collectives inside every forward and backward wait for the
slowest rank: every rank reads the same time for micro-batch ``k``. A *unit* is such a slot, a
sequence over ranks of the document lengths each ran (an empty one: the rank was idle). Its
time is attributed to one member, the one the cost predicts slowest (`Members.choose`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

import numpy as np

from .._inputs import _describe, as_int64_array
from ._time_fit import Features, check_tokens, decay_of
from ._time_online import FitState, constant, relative_error

#: The most rounds of attribute-and-fit `TimeCost.fit_synchronized` runs.
MAX_ROUNDS = 20
#: After the starts, how many units' runner-up members `attribute_and_fit` tries per pass, and
#: how many passes at most.
AMBIGUOUS, MAX_PASSES = 32, 8


def check_member(values: Any, name: str) -> np.ndarray:
    """One rank's micro-batch of a unit: document lengths, positive; empty when idle."""
    if isinstance(values, (str, bytes, int, float, np.number, np.bool_)) or values is None:
        raise TypeError(
            f"{name} must be a sequence of document lengths (empty for an idle rank), "
            f"got {_describe(values)}"
        )
    lengths = as_int64_array(values, name)
    if lengths.size and not lengths.all():
        position = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"{name}[{position}] = 0: a document length must be positive")
    check_tokens(lengths, name)
    return lengths


def _sequence(values: Any, name: str, what: str) -> Sequence[Any]:
    # A set has no order to pair ranks (or units and times) with.
    if isinstance(values, (str, bytes, Mapping, Set)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {what}, got {_describe(values)}")
    if not isinstance(values, (Sequence, np.ndarray)):
        values = list(values)
    return values


def check_unit(unit: Any, name: str) -> list[np.ndarray]:
    """One synchronised unit: a micro-batch per rank, at least one of them holding documents."""
    members = [
        check_member(member, f"{name}[{rank}]")
        for rank, member in enumerate(
            _sequence(unit, name, "micro-batches, one per rank (each a sequence of lengths)")
        )
    ]
    if not any(member.size for member in members):
        raise ValueError(
            f"{name} holds no document on any rank: a synchronised measurement needs at least "
            "one rank that ran a micro-batch"
        )
    return members


def check_units(units: Any, name: str = "units") -> list[list[np.ndarray]]:
    """Every unit checked by `check_unit`, named by its position."""
    values = _sequence(units, name, "units (each a micro-batch per rank)")
    return [check_unit(unit, f"{name}[{i}]") for i, unit in enumerate(values)]


class Members:
    """The non-empty members of some units, in unit order then rank order, with their rows."""

    def __init__(self, units: list[list[np.ndarray]], features: Features) -> None:
        self.batches = [member for unit in units for member in unit if member.size]
        self.rank = np.array(
            [rank for unit in units for rank, member in enumerate(unit) if member.size],
            dtype=np.int64,
        )
        counts = np.array([sum(1 for m in unit if m.size) for unit in units], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self.counts = counts
        self.rows = features.rows(self.batches)
        #: Tokens of each member, as float64 (exact below 2**53 tokens).
        self.tokens = np.array([float(batch.sum(dtype=np.float64)) for batch in self.batches])

    @classmethod
    def of_rows(cls, rows: np.ndarray, rank: np.ndarray, counts: np.ndarray) -> Members:
        """Members already priced: ``rows`` (`Features.rows`) of the non-empty members in unit
        order then rank order, ``rank`` of each, ``counts`` of each unit (for `add_synchronized`;
        no `batches` or `tokens`)."""
        members = cls.__new__(cls)
        members.batches = []
        members.rank = rank.astype(np.int64)
        members.counts = counts.astype(np.int64)
        members.starts = np.concatenate(([0], np.cumsum(members.counts)[:-1])).astype(np.int64)
        members.rows = rows
        members.tokens = np.zeros(0)
        return members

    def choose(self, scores: np.ndarray) -> np.ndarray:
        """Per unit, the member (an index into `batches`) with the highest score; ties go to
        the lowest rank."""
        if not len(self.counts):
            return np.zeros(0, dtype=np.int64)
        highest = np.maximum.reduceat(scores, self.starts)
        top = np.flatnonzero(scores == np.repeat(highest, self.counts))
        owner = np.repeat(np.arange(len(self.counts)), self.counts)[top]
        # The first top member of each unit: members run in rank order within a unit.
        _, first = np.unique(owner, return_index=True)
        return top[first]


def add_synchronized(
    state: FitState,
    units: list[list[np.ndarray]] | Members,
    times: np.ndarray,
    name: str,
    label: str = "seconds",
) -> FitState:
    """``state`` with synchronised units (or their `Members`) added in order, each attributed
    to the member the state predicts slowest just before (ties: the lowest rank) and predicted
    as that member; ``name.format(i)`` names unit ``i`` and ``label.format(i)`` its time."""
    members = units if isinstance(units, Members) else Members(units, state.features)
    for i, time in enumerate(times.tolist()):
        start, count = int(members.starts[i]), int(members.counts[i])
        predicted = members.rows[start : start + count] @ state.coefficients()
        # argmax takes the first of equal values: members run in rank order.
        pick = start + int(np.argmax(predicted))
        error = relative_error(float(predicted.max()), time)
        state = state.add(
            members.rows[pick : pick + 1],
            times[i : i + 1],
            f"{name.format(i)}[{int(members.rank[pick])}]",
            constant(label.format(i)),
            (error,),
        )
    return state


#: The starting attributions of `TimeCost.fit_synchronized`, in order: each unit's member with
#: the most tokens, the most causal pairs (the attention term), the most documents.
STARTS = ("tokens", "pairs", "documents")


def synchronized_error(
    members: Members, coefficients: np.ndarray, times: np.ndarray, weights: np.ndarray
) -> float:
    """The weighted root mean square relative error of ``coefficients`` on synchronised units:
    each unit predicted as its slowest member (what the lockstep time is), whatever member an
    attribution gave it, weighted as the fit weighs the units."""
    predicted = np.maximum.reduceat(members.rows @ coefficients, members.starts)
    with np.errstate(over="ignore", invalid="ignore"):
        squared = float(weights @ np.square(predicted / times - 1.0))
    return math.sqrt(squared / float(weights.sum())) if math.isfinite(squared) else math.inf


def start_scores(members: Members, start: str) -> np.ndarray:
    """The score each member is first attributed by (the highest in its unit is chosen)."""
    if start == "tokens":
        return members.tokens
    if start == "pairs":
        return members.rows[:, 3]
    # The most documents; among as many, the most tokens (a fraction below 1).
    return members.rows[:, 1] + members.tokens / (float(members.tokens.max()) + 1.0)


def runner_ups(members: Members, coefficients: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """``(unit, member)``: for the (at most ``limit``) units whose runner-up member comes
    nearest their slowest by ``coefficients`` (ties: the earlier unit), that runner-up (the
    highest of the others; ties: the lowest rank)."""
    predicted = members.rows @ coefficients
    found = []
    spans = zip(members.starts.tolist(), members.counts.tolist(), strict=True)
    for unit, (start, count) in enumerate(spans):
        if count < 2:
            continue
        order = np.argsort(-predicted[start : start + count], kind="stable")
        top, second = predicted[start + order[0]], predicted[start + order[1]]
        closeness = float(second / top) if top > 0 else 1.0
        found.append((-closeness, unit, start + int(order[1])))
    found.sort()
    return [(unit, member) for _, unit, member in found[:limit]]


def attribute_and_fit(
    members: Members,
    fit: Callable[[np.ndarray], tuple[Any, np.ndarray]],
    times: np.ndarray,
    half_life: float | None,
) -> Any:
    """`TimeCost.fit_synchronized`'s rule.

    *Rounds* from an attribution (one member per unit): fit it (``fit(rows)`` returns the cost
    and its coefficients), attribute each unit to the member the fit predicts slowest (ties:
    the lowest rank), and again until an attribution repeats an earlier one of these rounds or
    `MAX_ROUNDS` fits have run; their answer is the last fit, judged by `synchronized_error`.
    Rounds run from each of the `STARTS` (each unit's member with the highest start score;
    ties: the lowest rank); the best answer (ties: the earlier start) is then improved: the
    rounds run from its attribution with one unit moved to its runner-up member, for the
    `AMBIGUOUS` units whose runner-up comes nearest, and the best of those that beats it is
    taken, until none does (at most `MAX_PASSES` times). So a fit consistent with its own wrong
    attribution loses to the one a start or a move finds. Rounds that meet an attribution the
    fit refuses give no answer; when no start gives one, the first start's refusal is raised.
    ``times`` are the units' times, weighed by ``half_life``.
    """
    weights = decay_of(half_life) ** np.arange(len(times) - 1, -1, -1, dtype=np.float64)

    def rounds(chosen: np.ndarray) -> tuple[float, Any, np.ndarray]:
        seen = {chosen.tobytes()}
        for _ in range(MAX_ROUNDS):
            cost, coefficients = fit(members.rows[chosen])
            chosen = members.choose(members.rows @ coefficients)
            if chosen.tobytes() in seen:
                break
            seen.add(chosen.tobytes())
        return synchronized_error(members, coefficients, times, weights), cost, coefficients

    best: tuple[float, Any, np.ndarray] | None = None
    refusal: ValueError | None = None
    for start in STARTS:
        try:
            answer = rounds(members.choose(start_scores(members, start)))
        except ValueError as exc:
            refusal = refusal or exc
            continue
        if best is None or answer[0] < best[0]:
            best = answer
    if best is None:
        assert refusal is not None
        raise refusal
    for _ in range(MAX_PASSES):
        chosen = members.choose(members.rows @ best[2])
        improved = None
        for unit, member in runner_ups(members, best[2], AMBIGUOUS):
            moved = chosen.copy()
            moved[unit] = member
            try:
                answer = rounds(moved)
            except ValueError:
                continue
            if answer[0] < (best if improved is None else improved)[0]:
                improved = answer
        if improved is None:
            break
        best = improved
    return best[1]
