"""Solving `seqbalance.TimeCost`'s accumulated fit: which coefficients the observations tell
apart, and the non-negative coefficients that fit them best.

The state is the upper-triangular factor ``R`` of the weighted relative-error rows augmented
with their target (see ``_time_fit``). Everything here looks at its leading block, the
*active* columns only (an attention-free `ModelCost` has one length term, so one column of its
rows is always zero and takes no part), each column scaled to unit norm first: lengths to
10**6 make raw columns differ by 10**12, and a scaled column's size says nothing about its
coefficient.

A combination of coefficients is *undetermined* when the scaled block has a singular value
below `SEPARATED` times its largest: the observations (as weighed) then say nothing about it
that float64 can hold. A fit refuses such data by name; an online update that leaves the
recent observations unable to tell two coefficients apart (recency weighting that forgot the
micro-batches which did) keeps the combination the last solution had, instead of splitting
the time by whatever least squares makes of rounding: `solve_nonnegative` takes that last
solution as its ``anchor``.
"""

from __future__ import annotations

from itertools import combinations
from typing import NamedTuple

import numpy as np

#: Number of coefficients: per micro-batch, per document, and the two length terms.
N_COEF = 4
#: Every coefficient takes part in the fit.
ALL_ACTIVE = (0, 1, 2, 3)
#: Smallest singular value, relative to the largest, of the column-scaled features that counts
#: as separating the coefficients. Exactly dependent columns give ~1e-16; real designs (lengths
#: 1 to 10**6 mixed) stay above 1e-5. An online factor accumulates one rounding per update, so
#: what it holds along a direction weighed below ~1e-9 of the largest is already off by a
#: percent after 10**4 updates (measured: 30,000 updates of single documents, half-life 500):
#: 1e-8 keeps every direction it calls determined within a fraction of a percent.
SEPARATED = 1e-8


def column_norms(matrix: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each column, without overflow: entries near 1e300 (a time near
    1e-300 s divides its row) square beyond float64, so each column is scaled by its largest
    entry first. A zero column has norm 1 (nothing to scale)."""
    with np.errstate(over="ignore"):
        norms = np.sqrt((matrix * matrix).sum(axis=0))
    if not np.isfinite(norms).all():
        largest = np.abs(matrix).max(axis=0)
        largest[largest == 0.0] = 1.0
        norms = largest * np.sqrt(np.square(matrix / largest).sum(axis=0))
    norms[norms == 0.0] = 1.0
    return norms


class Analysis(NamedTuple):
    """What the singular values of a factor's scaled active block say (see `analyse`)."""

    #: The norm of each active column (1 for a zero column).
    norms: np.ndarray
    #: The undetermined directions, one per row, in the scaled coordinates of the active
    #: columns (``0 x len(active)`` when every coefficient is determined).
    null: np.ndarray
    #: The largest singular value of the scaled block.
    largest: float
    #: The singular values of the scaled block, largest first.
    singular: np.ndarray
    #: Its left singular vectors (``N_COEF x len(active)``, one per column).
    left: np.ndarray
    #: Its right singular vectors, one per row (``len(active) x len(active)``).
    rotation: np.ndarray


def _block_norms(blocks: np.ndarray) -> np.ndarray:
    """`column_norms` of each ``N_COEF``-row block of a stack, computed element by element so
    that a block's norms are the same whatever the stack it is in."""
    with np.errstate(over="ignore"):
        squares = blocks * blocks
        norms = np.sqrt(squares[:, 0] + squares[:, 1] + squares[:, 2] + squares[:, 3])
    beyond = ~np.isfinite(norms)
    if beyond.any():
        largest = np.abs(blocks).max(axis=1)
        largest[largest == 0.0] = 1.0
        ratios = np.square(blocks / largest[:, None, :])
        exact = largest * np.sqrt(ratios[:, 0] + ratios[:, 1] + ratios[:, 2] + ratios[:, 3])
        norms[beyond] = exact[beyond]
    norms[norms == 0.0] = 1.0
    return norms


def analyse_many(factors: np.ndarray, active: tuple[int, ...] = ALL_ACTIVE) -> list[Analysis]:
    """`analyse` of every factor of a finite ``n x (N_COEF + 1) x (N_COEF + 1)`` stack, in one
    pass: each answer is the one `analyse` gives for that factor alone."""
    blocks = factors[:, :N_COEF, :N_COEF][:, :, list(active)]
    norms = _block_norms(blocks)
    left, singular, rotation = np.linalg.svd(blocks / norms[:, None, :], full_matrices=False)
    found = []
    for i in range(len(factors)):
        largest = float(singular[i, 0])
        if largest == 0.0:
            null = np.eye(len(active))
        else:
            null = np.asarray(rotation[i][singular[i] <= SEPARATED * largest])
        found.append(Analysis(norms[i], null, largest, singular[i], left[i], rotation[i]))
    return found


def analyse(factor: np.ndarray, active: tuple[int, ...] = ALL_ACTIVE) -> Analysis:
    """The column norms of ``factor``'s active block and the directions it leaves
    undetermined. A factor that is not finite, or all zero, determines nothing."""
    if not np.isfinite(factor[:N_COEF, :N_COEF]).all():
        size = len(active)
        zeros = np.zeros(size)
        return Analysis(
            np.ones(size), np.eye(size), 0.0, zeros, np.zeros((N_COEF, size)), np.eye(size)
        )
    return analyse_many(factor[None], active)[0]


def surely_determined(factors: np.ndarray, active: tuple[int, ...] = ALL_ACTIVE) -> np.ndarray:
    """Per factor of a stack, whether its scaled active block is so far from undetermined that
    `analyse` would find every coefficient determined, without a singular value decomposition
    (``False``: not known, ask `analyse`).

    The active columns are the first ones, so the block is upper triangular; its smallest
    singular value is at least ``1 / |T^-1|_F`` and its largest at most ``|T|_F``, so a ratio of
    these bounds above 4 x `SEPARATED` leaves the decomposition's ratio above `SEPARATED`."""
    size = len(active)
    blocks = factors[:, :N_COEF, :N_COEF][:, :, list(active)]
    with np.errstate(all="ignore"):
        scaled = blocks / _block_norms(blocks)[:, None, :]
        inverse = np.zeros((len(factors), size, size))
        for j in range(size):
            inverse[:, j, j] = 1.0 / scaled[:, j, j]
            for i in range(j - 1, -1, -1):
                total = np.zeros(len(factors))
                for k in range(i + 1, j + 1):
                    total = total + scaled[:, i, k] * inverse[:, k, j]
                inverse[:, i, j] = -total / scaled[:, i, i]
        squares = np.square(scaled)
        size_of = np.sqrt(squares.reshape(len(factors), -1).sum(axis=1))
        size_of_inverse = np.sqrt(np.square(inverse).reshape(len(factors), -1).sum(axis=1))
        bound = 1.0 / (size_of * size_of_inverse)
    return np.isfinite(bound) & (bound > 4 * SEPARATED)


def unseparated(
    factor: np.ndarray,
    names: tuple[str, ...],
    active: tuple[int, ...] = ALL_ACTIVE,
    analysis: Analysis | None = None,
) -> list[str]:
    """The coefficients the accumulated observations cannot tell apart (``[]`` when they
    determine every one): those in a combination of feature columns that is (nearly) zero.

    Every micro-batch a single document makes ``micro_batch`` and ``document`` the same column;
    every document of one length makes the length terms proportional to the document count. A
    fit there would split the time between them arbitrarily and predict other micro-batches by
    that guess. Exact dependencies survive the per-row scaling by the measured time, so noise
    in the times does not hide them.
    """
    found = analysis or analyse(factor, active)
    weight = np.abs(found.null).max(axis=0, initial=0.0)
    return [names[i] for i, held in zip(active, weight, strict=True) if held > 1e-3]


def solve_nonnegative(
    factor: np.ndarray,
    active: tuple[int, ...] = ALL_ACTIVE,
    anchor: np.ndarray | None = None,
    analysis: Analysis | None = None,
) -> np.ndarray:
    """The non-negative coefficients minimising the accumulated weighted squared error (an
    ``N_COEF`` array, 0 for an inactive column).

    With ``R`` the leading block and ``q`` the last column, the error of ``x`` is
    ``|R x - q|**2`` plus a constant. The optimum of a convex problem over ``x >= 0`` is the
    unconstrained optimum on its own support, so the best non-negative candidate among the
    unconstrained solutions on every subset of coefficients (at most 16) is the answer.

    ``anchor`` (the previous solution), when the factor leaves directions undetermined: the
    answer is `hold`'s, the best fit along what the observations determine and, among the
    non-negative coefficients that fit that well, the nearest to the anchor.
    """
    columns = list(active)
    found = analysis or analyse(factor, active)
    if anchor is not None and found.null.size:
        return hold(factor, active, anchor, found)
    scaled = factor[:N_COEF, :N_COEF][:, columns] / found.norms
    solution = np.zeros(N_COEF)
    solution[columns] = _nonnegative_fit(scaled, factor[:N_COEF, N_COEF]) / found.norms
    return solution


def _nonnegative_fit(matrix: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The ``x >= 0`` minimising ``|matrix x - target|``, by the subsets of its columns."""
    size = matrix.shape[1]
    best, best_error = np.zeros(size), float(target @ target)
    full = _subset_solution(matrix, target, tuple(range(size)))
    if full is not None and (full >= 0).all():
        return full
    for count in range(1, size):
        for subset in combinations(range(size), count):
            candidate = _subset_solution(matrix, target, subset)
            if candidate is None or (candidate < 0).any():
                continue
            residual = matrix @ candidate - target
            error = float(residual @ residual)
            if error < best_error:
                best, best_error = candidate, error
    return best


def hold(
    factor: np.ndarray, active: tuple[int, ...], anchor: np.ndarray, found: Analysis
) -> np.ndarray:
    """The coefficients of a factor that leaves directions undetermined, holding them at the
    ``anchor``'s (the previous solution) in two stages, in the scaled coordinates ``z``:

    1. the best non-negative fit along the directions the factor determines (its singular
       vectors above `SEPARATED`): every such fit has the same determined part ``y``;
    2. among the non-negative ``z`` with that determined part, the nearest to the anchor.

    So what the observations determine is never traded for the anchor (a coefficient held at
    0 included), and a solution is its own anchor: ``hold(f, a, hold(f, a', ...)) ==
    hold(f, a', ...)``, which is how a saved cost's coefficients are checked against its
    factor. Without a coefficient at 0 the answer is the anchor's projection on the fits,
    in closed form."""
    columns = list(active)
    determined = found.singular > SEPARATED * found.largest
    rotation = found.rotation
    kept, free = rotation[determined], rotation[~determined]
    target = found.left[:, determined].T @ factor[:N_COEF, N_COEF]
    point = anchor[columns] * found.norms
    along = target / found.singular[determined]
    scaled = kept.T @ along + free.T @ (free @ point)
    if not (scaled >= 0).all():
        # 1: the determined part of the best non-negative fit; 2: the nearest to the anchor.
        fitted = _nonnegative_fit(found.singular[determined, None] * kept, target)
        along = kept @ fitted
        scaled = _nearest(kept.T @ along, free, free @ point, fitted)
    solution = np.zeros(N_COEF)
    solution[columns] = scaled / found.norms
    return solution


def _nearest(base: np.ndarray, free: np.ndarray, goal: np.ndarray, known: np.ndarray) -> np.ndarray:
    """``base + free.T @ w >= 0`` for the ``w`` nearest to ``goal`` (``known``, a point of
    that set, is the fallback): the nearest point of a small polytope, by its faces."""
    scale = max(float(np.abs(base).max(initial=0.0)), float(np.abs(known).max(initial=0.0)))
    slack = 1e-12 * scale
    spread = free.T  # one row per coefficient: how w moves it
    best, best_distance = free @ known, float(np.sum(np.square(free @ known - goal)))
    for count in range(0, len(goal) + 1):
        for subset in combinations(range(len(base)), count):
            rows = list(subset)
            if rows:
                face = spread[rows]
                step, *_ = np.linalg.lstsq(face, -base[rows] - face @ goal, rcond=1e-13)
                candidate = goal + step
                if np.abs(face @ candidate + base[rows]).max() > slack:
                    continue
            else:
                candidate = goal
            if (base + spread @ candidate < -slack).any():
                continue
            distance = float(np.sum(np.square(candidate - goal)))
            if distance < best_distance:
                best, best_distance = candidate, distance
    return np.maximum(base + spread @ best, 0.0)


def _subset_solution(
    matrix: np.ndarray, target: np.ndarray, subset: tuple[int, ...]
) -> np.ndarray | None:
    """The least-squares solution using only the ``subset`` columns (others 0), or ``None``."""
    columns = list(subset)
    solution, *_ = np.linalg.lstsq(matrix[:, columns], target, rcond=1e-13)
    if not np.isfinite(solution).all():
        return None
    full = np.zeros(matrix.shape[1])
    full[columns] = solution
    return full
