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


def analyse(factor: np.ndarray, active: tuple[int, ...] = ALL_ACTIVE) -> Analysis:
    """The column norms of ``factor``'s active block and the directions it leaves
    undetermined. A factor that is not finite, or all zero, determines nothing."""
    matrix = factor[:N_COEF, :N_COEF][:, list(active)]
    if not np.isfinite(matrix).all():
        return Analysis(np.ones(len(active)), np.eye(len(active)), 0.0)
    norms = column_norms(matrix)
    _, singular, rotation = np.linalg.svd(matrix / norms)
    largest = float(singular[0])
    if largest == 0.0:
        return Analysis(norms, np.eye(len(active)), 0.0)
    return Analysis(norms, np.asarray(rotation[singular <= SEPARATED * largest]), largest)


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

    ``anchor`` (the previous solution): along each undetermined direction the answer takes the
    anchor's value, through rows ``s * v`` with target ``s * v . anchor`` added to the problem
    (``v`` the direction, ``s`` the largest singular value). The observations do not see those
    directions, so the rows change nothing they determine; they only stop least squares from
    inventing the rest.
    """
    columns = list(active)
    found = analysis or analyse(factor, active)
    scaled = factor[:N_COEF, :N_COEF][:, columns] / found.norms
    target = factor[:N_COEF, N_COEF]
    if anchor is not None and found.null.size:
        weight = found.largest or 1.0
        scaled = np.vstack([scaled, weight * found.null])
        held = weight * (found.null @ (anchor[columns] * found.norms))
        target = np.concatenate([target, held])
    size = len(columns)
    best, best_error = np.zeros(size), float(target @ target)
    full = _subset_solution(scaled, target, tuple(range(size)))
    if full is not None and (full >= 0).all():
        best = full
    else:
        for count in range(1, size):
            for subset in combinations(range(size), count):
                candidate = _subset_solution(scaled, target, subset)
                if candidate is None or (candidate < 0).any():
                    continue
                residual = scaled @ candidate - target
                error = float(residual @ residual)
                if error < best_error:
                    best, best_error = candidate, error
    solution = np.zeros(N_COEF)
    solution[columns] = best / found.norms
    return solution


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
