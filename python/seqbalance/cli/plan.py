"""``seqbalance plan``: micro-batches under a token cap, for one rank or a DP-wide plan.

Also the old route, ``seqbalance partition --max-token-len`` (with ``-k``: the two-step pattern a
trainer runs on every rank), which prints a one-line notice that ``plan`` is the verb.

The summary is computed from the plan as arrays (``as_ids=True``: the rank and micro-batch of
every sample) with NumPy, never a Python object per sample: at 10^7 lengths it takes a fraction
of the planner's own time. Only ``--json``, which prints the plan itself, builds lists.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._inputs import MAX_VALUE
from ..costs.workload import sample_costs
from ..partition import partition_ids
from ..planning.dp_plan import plan_dp_with_today
from ..planning.micro_batches import min_num_micro_batches_for, plan_micro_batches
from ..planning.step import StepTime, simulate_step
from ._common import (
    _equal_size,
    _format_seconds,
    format_wall,
    print_json_waited,
    progress,
    read_input,
    shown,
    waited_seconds,
)
from .calibrate import TimeCostNanoseconds, say_extrapolation, time_by_plan, time_lines
from .readers import InputError

#: What ``partition --max-token-len`` says on stderr once its plan is printed.
PLAN_NOTICE = (
    "seqbalance partition: note: planning has its own verb: "
    "seqbalance plan [FILE] --max-token-len N [--dp N] (the same flags and the same plan)"
)


def _run_plan_command(args: argparse.Namespace) -> int:
    """``seqbalance plan``: read the input (whole token counts), plan, summarise."""
    lengths, uids, keys, source = read_input(args, whole_lengths=True)
    return _run_plan(args, lengths, uids, keys, source)


def _run_plan(
    args: argparse.Namespace,
    lengths: np.ndarray,
    uids: list[Any] | None,
    keys: list[Any] | None,
    source: str,
) -> int:
    """Micro-batches under ``--max-token-len`` over ``--dp`` ranks, summarised per rank: the
    plan of `plan_dp_micro_batches` for both verbs (``partition --per-rank``: the two-step
    route)."""
    cap = args.max_token_len
    two_step = getattr(args, "per_rank", False)
    if uids is not None and two_step:
        raise InputError(
            "--uid-field with --per-rank: the two-step route does not keep uid groups whole; "
            "drop --per-rank (the DP-wide plan does)"
        )
    n_ranks = args.dp_size
    order = args.order or "bubble"
    model = _step_model(args)
    stepped = model != ("step", 1, model[2])
    limits: dict[str, Any] = dict(
        max_sequences=args.max_sequences, footprint=args.footprint or "sum", keys=keys
    )
    progress(args, lengths.size, f"planning {lengths.size:,} lengths over {n_ranks} ranks")
    start = time.perf_counter()
    today: tuple[np.ndarray, np.ndarray, int] | None = None
    if two_step:
        function = "get_seqlen_balanced_partitions + plan_micro_batches per rank"
        rank_ids, micro_batch_ids, count = _two_step(args, lengths, keys, limits, order)
    else:
        function = "plan_dp_micro_batches"
        grouping: dict[str, Any] = (
            {"uid_list": uids} if uids is not None else {"group_size": args.group_size}
        )
        planned = plan_dp_with_today(
            lengths,
            n_ranks,
            cap,
            # The step modes price a micro-batch in seconds: the TimeCost itself, not its
            # nanoseconds (the default mode keeps the integer nanoseconds it always balanced).
            cost=args.cost.time_cost
            if stepped and isinstance(args.cost, TimeCostNanoseconds)
            else args.cost,
            equal_size=_equal_size(args),
            min_num_micro_batches=None,
            num_micro_batches_multiple=None,
            pad_to_multiple_of=1,
            refine=args.refine,
            order=args.order if stepped else order,
            as_ids=True,
            sync=model[0],
            pipeline_stages=model[1],
            forward_share=model[2],
            max_num_micro_batches=getattr(args, "max_num_micro_batches", None),
            **grouping,
            **limits,
        )
        (rank_ids, micro_batch_ids), count = planned.plan, planned.count
        if planned.today is not None:
            today = (*planned.today, planned.today_count)
    seconds = time.perf_counter() - start
    progress(args, lengths.size, f"planned in {_format_seconds(seconds)}; summarising")
    step = predicted_step(args, lengths, (rank_ids, micro_batch_ids, count), model)
    # With --time-cost a rank's cost is its predicted seconds, micro-batch terms included: the
    # one number the table, ranks_summary, predicted_time and the step all show.
    timed = isinstance(args.cost, TimeCostNanoseconds)
    costs = step.busy if timed else sample_costs(args.cost, lengths)
    summary = _summarise(lengths, costs, rank_ids, micro_batch_ids, n_ranks, count, timed)
    columns = {name: values.tolist() for name, values in summary.items()}
    rows = [{name: columns[name][rank] for name in columns} for rank in range(n_ranks)]
    predicted = time_by_plan(args.cost, step.busy, summary["tokens"])
    say_extrapolation(args.cost, lengths, int(np.max(summary["fullest_micro_batch"], initial=0)))
    today_step = step if today is None else predicted_step(args, lengths, today, model)
    step_json = {
        "makespan": step.makespan,
        "today_makespan": today_step.makespan,
        "bubble": step.bubble,
        "lower_bound": step.lower_bound,
        "unit": step.unit,
    }
    if args.json:
        progress(args, lengths.size, "writing the plan as JSON")
        payload = {
            "source": source,
            "n": int(lengths.size),
            "dp_size": n_ranks,
            "max_token_len": cap,
            "cost": str(args.cost),
            "equal_size": _equal_size(args),
            "group_size": args.group_size,
            "uid_field": args.uid_field,
            "order": _order_text(args),
            "refine": args.refine,
            "max_sequences": args.max_sequences,
            "footprint": args.footprint or "sum",
            "key_field": args.key_field,
            "sync": model[0],
            "pipeline_stages": model[1],
            "forward_share": model[2],
            "max_num_micro_batches": getattr(args, "max_num_micro_batches", None),
            "micro_batches_per_rank": count,
            "planner_seconds": seconds,
            "ranks_summary": rows,
            "predicted_step": step_json,
            "plan": _plan_lists(rank_ids, micro_batch_ids, n_ranks, count),
        }
        if predicted is not None:
            payload["predicted_time"] = predicted
        print_json_waited(payload)
        return 0
    _print_summary(args, source, function, rows, count, keys is not None)
    print(_step_line(args, step, today_step if stepped else None, today))
    if predicted is not None:
        print(time_lines(predicted))
    print(f"time: {format_wall(waited_seconds())} ({_format_seconds(seconds)} in {function})")
    return 0


def _two_step(
    args: argparse.Namespace,
    lengths: np.ndarray,
    keys: list[Any] | None,
    limits: dict[str, Any],
    order: str,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The two-step pattern a trainer runs on every rank (``partition --per-rank``):
    balance the ranks, then plan each rank's micro-batches with the count they agree on (the
    largest), as ``(rank_ids, micro_batch_ids, count)``."""
    cap, group_size = args.max_token_len, args.group_size
    keywords: dict[str, Any] = dict(cost=args.cost, group_size=group_size, **limits)
    # Checked on the whole batch first, so an error names the user's index, not a rank's.
    min_num_micro_batches_for(lengths, cap, **keywords)
    costs = sample_costs(args.cost, lengths)
    group_costs = costs.reshape(-1, group_size).sum(axis=1) if group_size > 1 else costs
    group_ranks = partition_ids(
        group_costs, args.dp_size, equal_size=_equal_size(args), refine=args.refine
    )
    rank_ids = np.repeat(group_ranks, group_size)
    ranks = [np.flatnonzero(rank_ids == rank) for rank in range(args.dp_size)]

    def on_rank(rank: np.ndarray) -> dict[str, Any]:
        return {**keywords, "keys": None if keys is None else [keys[i] for i in rank.tolist()]}

    agreed = max(min_num_micro_batches_for(lengths[rank], cap, **on_rank(rank)) for rank in ranks)
    micro_batch_ids = np.zeros(lengths.size, dtype=np.int64)
    for rank in ranks:
        batches = plan_micro_batches(
            lengths[rank], cap, min_num_micro_batches=agreed, order=order, **on_rank(rank)
        )
        for number, batch in enumerate(batches):
            micro_batch_ids[rank[batch]] = number
    return rank_ids, micro_batch_ids, agreed


def _sums(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """``values`` summed by ``index`` into ``size`` bins: exact int64 for integers (exact Python
    ints where the sums could pass 2**63 - 1), float64 for float costs."""
    if values.dtype.kind == "f":
        return np.bincount(index, weights=values, minlength=size)
    if values.size == 0 or int(values.max()) <= MAX_VALUE // values.size:
        sums = np.zeros(size, dtype=np.int64)
        np.add.at(sums, index, values.astype(np.int64, copy=False))
        return sums
    # Costs near 2**63: sums of 21-bit limbs, each exact in float64 for up to 2**32 values.
    mask = (1 << 21) - 1
    limbs = [np.bincount(index, weights=(values >> s) & mask, minlength=size) for s in (0, 21, 42)]
    return np.array(
        [int(a) + (int(b) << 21) + (int(c) << 42) for a, b, c in zip(*limbs, strict=True)],
        dtype=object,
    )


def _summarise(
    lengths: np.ndarray,
    costs: np.ndarray,
    rank_ids: np.ndarray,
    micro_batch_ids: np.ndarray,
    n_ranks: int,
    count: int,
    per_rank: bool = False,
) -> dict[str, np.ndarray]:
    """Per rank: samples, micro-batches holding any, tokens, cost (``costs`` per sample, or
    with ``per_rank`` already per rank), the fullest micro-batch's tokens and the most samples
    in one micro-batch, from the plan as ids (no Python loop over samples)."""
    cells = n_ranks * max(count, 1)
    cell_of = rank_ids * max(count, 1) + micro_batch_ids
    cell_samples = np.bincount(cell_of, minlength=cells).reshape(n_ranks, -1)
    cell_tokens = _sums(cell_of, lengths, cells).reshape(n_ranks, -1)
    return {
        "samples": cell_samples.sum(axis=1),
        "micro_batches": (cell_samples > 0).sum(axis=1),
        "tokens": cell_tokens.sum(axis=1),
        "cost": costs if per_rank else _sums(rank_ids, costs, n_ranks),
        "fullest_micro_batch": cell_tokens.max(axis=1),
        "most_samples": cell_samples.max(axis=1),
    }


def _plan_lists(
    rank_ids: np.ndarray, micro_batch_ids: np.ndarray, n_ranks: int, count: int
) -> list[list[list[int]]]:
    """``plan[rank][micro_batch] -> ascending sample indexes``, from the ids (for ``--json``)."""
    cell_of = rank_ids * count + micro_batch_ids
    order = np.argsort(cell_of, kind="stable")
    cuts = np.cumsum(np.bincount(cell_of, minlength=n_ranks * count))[:-1]
    cells = [cell.tolist() for cell in np.split(order, cuts)]
    return [cells[rank * count : (rank + 1) * count] for rank in range(n_ranks)]


def _print_summary(
    args: argparse.Namespace,
    source: str,
    function: str,
    rows: list[dict[str, Any]],
    count: int,
    keyed: bool,
) -> None:
    cap = args.max_token_len
    # As partition's header: the count rule when one is set, and the groups the plan keeps whole.
    equal_size = _equal_size(args)
    counts = f", equal_size={shown(equal_size)}" if equal_size is not False else ""
    grouping = f"uid_field={args.uid_field}" if args.uid_field else f"group_size={args.group_size}"
    print(
        f"{source}\n{function}: ranks={len(rows)}, max_token_len={cap:,}, cost={args.cost}"
        f"{counts}, {grouping}, order={_order_text(args)}"
        f"{', refine=yes' if args.refine else ''}{_limits_text(args)}{_step_text(args)}\n"
    )
    print(
        f"{'rank':>4} {'samples':>8} {'micro-batches':>14} {'tokens':>12} {'cost':>16} "
        f"{'fullest micro-batch':>20}"
    )
    timed = isinstance(args.cost, TimeCostNanoseconds)
    for r, row in enumerate(rows):
        cost = _format_seconds(row["cost"]) if timed else _number(row["cost"])
        print(
            f"{r:>4} {row['samples']:>8,} {row['micro_batches']:>14,} {row['tokens']:>12,} "
            f"{cost:>16} {row['fullest_micro_batch']:>20,}"
        )
    fullest = max(row["fullest_micro_batch"] for row in rows)
    print(
        f"\nevery rank runs {count:,} micro-batch{'' if count == 1 else 'es'} of at most "
        f"{cap:,} tokens "
        f"(fullest {fullest:,}; empty ones, if any, come last for padding)"
    )
    if args.max_sequences is not None or args.footprint == "padded" or keyed:
        most = max(row["most_samples"] for row in rows)
        print(f"shape limits kept: at most {most} samples in a micro-batch{_limits_text(args)}")
    heaviest = max(row["cost"] for row in rows)
    mean = sum(row["cost"] for row in rows) / len(rows)
    by = f"predicted seconds ({Path(args.cost.file).name})" if timed else str(args.cost)
    print(f"heaviest rank by {by}: max/mean {heaviest / max(mean, 1e-9):.4f}")


def _number(value: float) -> str:
    """A cost with thousands separators: whole, or with two decimals for float costs."""
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def _limits_text(args: argparse.Namespace) -> str:
    """The shape limits asked for, as ``, name=value`` pairs (empty when none)."""
    pairs = [
        ("max_sequences", args.max_sequences),
        ("footprint", args.footprint),
        ("key_field", args.key_field),
    ]
    return "".join(f", {name}={value}" for name, value in pairs if value is not None)


# ---------------------------------------------------------------------------- the predicted step


def _step_model(args: argparse.Namespace) -> tuple[str, int, float]:
    """``(sync, pipeline_stages, forward_share)`` from the flags (``partition`` has none: the
    default model, ranks meeting once a step)."""
    return (
        getattr(args, "sync", "step"),
        getattr(args, "pipeline_stages", 1),
        getattr(args, "forward_share", 1 / 3),
    )


def predicted_step(
    args: argparse.Namespace,
    lengths: np.ndarray,
    plan: tuple[np.ndarray, np.ndarray, int],
    model: tuple[str, int, float],
) -> StepTime:
    """The plan's step in the step model (`simulate_step`): in predicted seconds with
    ``--time-cost``, in the cost's units otherwise. The one place the report computes what each
    rank's micro-batches take (``.busy`` per rank, ``.times`` per micro-batch)."""
    cost = args.cost.time_cost if isinstance(args.cost, TimeCostNanoseconds) else args.cost
    sync, stages, share = model
    return simulate_step(
        plan, lengths, cost=cost, sync=sync, pipeline_stages=stages, forward_share=share
    )


def _step_line(
    args: argparse.Namespace,
    step: StepTime,
    today: StepTime | None,
    today_plan: tuple[np.ndarray, np.ndarray, int] | None,
) -> str:
    """The report's line for the predicted step, with today's plan's beside it when the mode is
    not the default."""
    amount = _step_amount(args)
    line = (
        f"predicted step ({_where(step)}): {amount(step.makespan)}, bubble {step.bubble:.2%}, "
        f"lower bound {amount(step.lower_bound)}"
    )
    if today is None:
        return line
    if today_plan is None:
        return f"{line}; today's plan (the default mode) is this plan"
    change = 1 - step.makespan / today.makespan if today.makespan > 0 else 0.0
    versus = f"this plan {change:.2%} below" if change > 0 else "the same"
    return (
        f"{line}; today's plan ({today_plan[2]:,} micro-batches per rank): "
        f"{amount(today.makespan)}, {versus}"
    )


def _where(step: StepTime) -> str:
    if step.pipeline_stages > 1:
        return f"1F1B, {step.pipeline_stages} stages"
    return "ranks in lockstep" if step.sync == "micro_batch" else "ranks meeting once a step"


def _step_amount(args: argparse.Namespace) -> Any:
    """How the report writes an amount of the step's unit: seconds with ``--time-cost``, else
    the cost's units."""
    if isinstance(args.cost, TimeCostNanoseconds):
        return _format_seconds
    unit = getattr(args.cost, "unit", str(args.cost))

    def amount(value: float) -> str:
        return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:.4g} {unit}"

    return amount


def _order_text(args: argparse.Namespace) -> str:
    if _step_model(args) != ("step", 1, _step_model(args)[2]):
        return "searched"
    return args.order or "bubble"


def _step_text(args: argparse.Namespace) -> str:
    """The step model asked for, as ``, name=value`` pairs (empty for the default)."""
    sync, stages, share = _step_model(args)
    text = f", sync={sync}" if sync != "step" else ""
    if stages > 1:
        text += f", pipeline_stages={stages}, forward_share={share:.4g}"
    largest = getattr(args, "max_num_micro_batches", None)
    return text + (f", max_num_micro_batches={largest}" if largest is not None else "")
