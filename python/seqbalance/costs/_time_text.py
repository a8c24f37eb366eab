"""`seqbalance.TimeCost.describe`: the few lines a person reads about a fitted cost."""

from __future__ import annotations

from typing import Any

from ._time_trust import poor_fit
from .model import ModelCost


def _coefficient_lines(c: dict[str, float], model: ModelCost | None, single: bool) -> list[str]:
    head = f"seconds = {c['micro_batch']:.4g} per micro-batch + {c['document']:.4g} per document"
    if model is None:
        return [f"{head} + {c['per_token']:.4g} per token + {c['per_pair']:.4g} per causal pair"]
    if single:
        lines = [
            f"{head} + {c['linear']:.4g} per training FLOP of the ModelCost (attention-free: its "
            "scans and convolutions grow with the length as its projections do, so one "
            "efficiency covers every FLOP)"
        ]
        if c["linear"] > 0:
            lines.append(f"effective: {1e-12 / c['linear']:.4g} TFLOP/s")
        return lines
    lines = [
        f"{head} + {c['linear']:.4g} per linear FLOP + {c['attention']:.4g} per attention FLOP "
        "(training FLOPs of the ModelCost)"
    ]
    if c["linear"] > 0 and c["attention"] > 0:
        lines.append(
            f"effective: {1e-12 / c['linear']:.4g} TFLOP/s linear, "
            f"{1e-12 / c['attention']:.4g} TFLOP/s attention "
            f"(attention {c['attention'] / c['linear']:.3g}x the time per FLOP)"
        )
    return lines


def describe(cost: Any) -> str:
    """The lines of `TimeCost.describe` for ``cost``."""
    c = cost.coefficients
    error = cost.fit_error
    model = cost.model
    half = "" if cost.half_life is None else f", half-life {cost.half_life:g} observations"
    lines = [f"TimeCost: fitted to {cost.observations:,} measured micro-batches{half}"]
    lines += _coefficient_lines(c, model, cost._state.features.single)
    lines.append(
        f"relative error: median {error['median']:.2%}, p90 {error['p90']:.2%}, max "
        f"{error['max']:.2%} over the last fit; rms {error['rms']:.2%} over every observation"
    )
    if "recent" in error:
        count = len(cost._state.recent)
        lines.append(
            f"recent: median error {error['recent']:.2%} of the last {count} "
            f"prediction{'s' if count > 1 else ''} made before their measurement was added"
        )
    reach = cost.measured_range
    lines.append(
        "measured range: not recorded (saved before it was)"
        if reach is None
        else f"measured on documents of up to {reach['longest_document']:,} tokens and "
        f"micro-batches of up to {reach['longest_micro_batch']:,}; beyond them it extrapolates"
    )
    poor = poor_fit(error)
    if poor:
        lines.append(f"warning: {poor}")
    held = cost.undetermined
    if held:
        lines.append(
            f"undetermined: the recent observations (as the half-life weighs them) no longer "
            f"tell apart {', '.join(held)}; their split is kept from when they last did"
        )
    crossover = cost.crossover_length()
    if cost._state.features.single:
        lines.append("no attention: an attention-free model's time grows like its length")
        return "\n".join(lines)
    measured = (
        "attention never takes as long as the linear part"
        if crossover is None
        else f"attention takes as long as the linear part from {crossover:,} tokens"
    )
    if model is not None:
        flops = model.crossover_length()
        measured += "; by FLOPs (ModelCost): " + (
            "never" if flops is None else f"from {flops:,} tokens"
        )
    lines.append(measured)
    return "\n".join(lines)
