"""When `seqbalance.TimeCost`'s numbers should not be believed, and what it says then.

Three rules, each held by a test:

- **A poor fit.** A fit whose median relative error is above `POOR_MEDIAN` (10 %) or whose 90th
  percentile is above `POOR_P90` (25 %), or whose recent predictions (``fit_error["recent"]``)
  miss by more than 10 % at the median, is flagged: `TimeCost.fit`, `TimeCost.from_dict` and
  `seqbalance.profile` warn (`TimeCostWarning`), `TimeCost.describe` says so, and the command
  line prints a ``warning:`` line. Why those numbers: a time model of a real GPU fitted to a
  few dozen micro-batches misses by about 1.4 % at the median and 4 % at the 90th percentile
  (the time-cost spec's H100 measurements); balancing by time gains a few percent of the step
  over balancing tokens. A model that misses by 10 % at the median (7x the usual), or by 25 % on
  one micro-batch in ten, predicts worse than that gain is worth: something else was timed (a
  warm-up, another process on the GPU, a different kernel) or the model does not fit the run.
- **Past the measured range.** A cost knows the longest document and the most tokens in one
  micro-batch it was measured on (`Reach`, saved with it). Predicting a longer document, or
  planning micro-batches under a larger cap, extrapolates the fit: the library warns, the
  command line prints a ``warning:`` line.
- **Attention across packed documents.** `check_attention_apart`: a packed micro-batch whose
  documents attend to each other costs what one document of its total length costs, not the
  sum of its documents'. A fit to such times would model what the trainer does not run.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .._deprecation import outside_stacklevel
from ._time_fit import Features, factor_rows
from ._time_solve import analyse, solve_nonnegative

#: A fit is poor above these relative errors (median, 90th percentile); see the module docstring.
POOR_MEDIAN, POOR_P90 = 0.10, 0.25
#: Attention spans the documents when the fit as one document per micro-batch has a median
#: error under this share of the per-document fit's ...
MARKEDLY_BETTER = 0.5
#: ... and its attention term is at least this share of the longest single document's time.
MATERIAL_ATTENTION = 0.10


class TimeCostWarning(UserWarning):
    """A `seqbalance.TimeCost` whose numbers should not be believed as they stand: a poor fit,
    or lengths past those it was measured on. Filter it like any warning
    (``warnings.simplefilter("error", seqbalance.TimeCostWarning)`` makes it an error)."""


def poor_fit(error: Mapping[str, float]) -> str | None:
    """Why a cost with these ``fit_error`` figures is a poor fit, or ``None`` when it is not."""
    reasons = []
    if error.get("median", 0.0) > POOR_MEDIAN:
        reasons.append(f"median relative error {error['median']:.1%} (above {POOR_MEDIAN:.0%})")
    if error.get("p90", 0.0) > POOR_P90:
        reasons.append(f"90th percentile {error['p90']:.1%} (above {POOR_P90:.0%})")
    if error.get("recent", 0.0) > POOR_MEDIAN:
        reasons.append(
            f"recent predictions off by {error['recent']:.1%} at the median (above "
            f"{POOR_MEDIAN:.0%})"
        )
    if not reasons:
        return None
    return (
        f"a poor fit: {', '.join(reasons)}; its predictions should not be trusted. Check what "
        "was timed (warm-up, other work on the GPU, what the trainer runs) and measure more "
        "micro-batches, of varied lengths and document counts"
    )


@dataclass(frozen=True)
class Reach:
    """The longest document and the most tokens in one micro-batch a cost was measured on."""

    document: int
    micro_batch: int

    @classmethod
    def of(cls, batches: Iterable[np.ndarray]) -> Reach | None:
        """What ``batches`` (checked micro-batches or synchronised members) reach; ``None`` for
        none."""
        document = micro_batch = 0
        for batch in batches:
            if batch.size:
                document = max(document, int(batch.max()))
                micro_batch = max(micro_batch, int(batch.sum(dtype=np.int64)))
        return cls(document, micro_batch) if document else None

    def widened(self, other: Reach | None) -> Reach:
        """This reach and ``other``'s together."""
        if other is None:
            return self
        return Reach(max(self.document, other.document), max(self.micro_batch, other.micro_batch))


def beyond(reach: Reach | None, document: int = 0, micro_batch: int = 0) -> str | None:
    """The words of a warning when predicting a ``document``-token document, or micro-batches of
    up to ``micro_batch`` tokens, goes past ``reach``; ``None`` when nothing does (or the reach
    is not known: a cost saved before it was recorded).

    The words name what was measured, not what was asked for, so a training loop that keeps
    predicting past the range is warned once per range (Python shows a warning once per place
    and text), not once per step.
    """
    if reach is None:
        return None
    past = []
    if document > reach.document:
        past.append(
            f"documents longer than the longest it was measured on ({reach.document:,} tokens)"
        )
    if micro_batch > reach.micro_batch:
        past.append(
            f"micro-batches fuller than the fullest it was measured on ({reach.micro_batch:,} "
            "tokens)"
        )
    if not past:
        return None
    return (
        f"the TimeCost extrapolates: it predicts {' and '.join(past)}; measure micro-batches "
        "that long (seqbalance.profile's max_length) to trust it there"
    )


def _relative_errors(rows: np.ndarray, coefficients: np.ndarray, times: np.ndarray) -> np.ndarray:
    return np.abs(rows @ coefficients / times - 1.0)


def check_attention_apart(
    features: Features,
    batches: list[np.ndarray],
    times: np.ndarray,
    per_document: np.ndarray,
    name: str,
) -> None:
    """Refuse measurements in which attention spans the packed documents.

    Where ``batches`` hold both single documents and packed micro-batches, the times are fitted
    a second time as if each micro-batch were one document of its total length (its attention
    and linear terms those of the total; each document still paying the per-document term, so
    that overhead is not mistaken for attention). When that fits
    markedly better (median error under `MARKEDLY_BETTER` of the per-document fit's, whose
    coefficients are ``per_document``) while attention is material (its term at least
    `MATERIAL_ATTENTION` of the longest single document's time in that fit), the documents
    attended to each other: a ``ValueError`` says so and what to do. An attention-free model
    has no attention term to span anything and is exempt.
    """
    singles = [batch for batch in batches if batch.size == 1]
    if features.single or not singles or all(batch.size == 1 for batch in batches):
        return
    rows = features.rows(batches)
    document_median = float(np.median(_relative_errors(rows, per_document, times)))
    # The length terms of one document of the micro-batch's total length; the per-document
    # term keeps counting its documents (what each document costs beside attention).
    merged = features.rows([np.array([batch.sum(dtype=np.int64)]) for batch in batches])
    merged[:, 1] = rows[:, 1]
    ones = np.ones(len(times))
    factor = factor_rows(merged, times, ones)
    if not np.isfinite(factor).all() or len(analyse(factor).null):
        return  # the totals cannot tell the terms apart: nothing to compare
    whole = solve_nonnegative(factor)
    whole_median = float(np.median(_relative_errors(merged, whole, times)))
    longest = max(singles, key=lambda batch: int(batch[0]))
    row = features.rows([longest])[0]
    predicted = float(row @ whole)
    attention = float(row[3] * whole[3])
    if predicted <= 0 or whole_median >= MARKEDLY_BETTER * document_median:
        return
    if attention < MATERIAL_ATTENTION * predicted:
        return
    raise ValueError(
        f"{name}: the times fit as if each micro-batch were one document of its total length "
        f"(median error {whole_median:.1%}) far better than document by document "
        f"({document_median:.1%}), and attention is {attention / predicted:.0%} of the "
        f"{int(longest[0]):,}-token document's time: attention spans the packed documents, "
        "which the trainer's varlen attention does not do. Time it with an attention "
        "implementation that keeps documents apart (flash-attention's varlen path, e.g. "
        "transformers' attn_implementation='flash_attention_2' with position_ids restarting at "
        "0 for each document; sdpa and eager attend across them), or one document per "
        "micro-batch"
    )


def warn(message: str | None) -> None:
    """Warn ``message`` as a `TimeCostWarning` (nothing for ``None``), pointing at the first
    line outside seqbalance that led to it (`outside_stacklevel`)."""
    if message is not None:
        warnings.warn(message, TimeCostWarning, stacklevel=outside_stacklevel())
