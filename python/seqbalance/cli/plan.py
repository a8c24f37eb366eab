"""``seqbalance partition --max-token-len``: the micro-batch plan summary (one rank or the DP-wide plan)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from ..partition import get_seqlen_balanced_partitions
from ..planning.costs import sample_costs
from ..planning.dp_plan import plan_dp_micro_batches
from ..planning.micro_batches import min_num_micro_batches_for, plan_micro_batches
from ._common import (
    _equal_size,
    _format_seconds,
)
from .calibrate import time_by_plan, time_lines
from .readers import (
    InputError,
)


def _run_plan(
    args: argparse.Namespace,
    lengths: np.ndarray,
    uids: list[Any] | None,
    keys: list[Any] | None,
    source: str,
) -> int:
    """``--max-token-len`` (with ``-k`` or ``--dp``): micro-batches under the cap, summarised."""
    cap = args.max_token_len
    if cap is None:
        raise InputError("--dp needs --max-token-len (the DP-wide micro-batch plan)")
    if args.dp is not None and args.k_given:
        raise InputError("pass either -k (two-step plan per rank) or --dp (DP-wide plan), not both")
    if uids is not None and args.dp is None:
        raise InputError(
            "--uid-field with --max-token-len needs --dp (the DP-wide plan keeps uid groups whole)"
        )
    equal_size = _equal_size(args)
    limits: dict[str, Any] = dict(
        max_sequences=args.max_sequences, footprint=args.footprint or "sum", keys=keys
    )
    keywords: dict[str, Any] = dict(cost=args.cost, force_group_size=args.group_size, **limits)
    start = time.perf_counter()
    if args.dp is not None:
        function = "plan_dp_micro_batches"
        if uids is not None:
            keywords = dict(cost=args.cost, uid_list=uids, **limits)
        plan = plan_dp_micro_batches(
            lengths,
            args.dp,
            cap,
            equal_size=equal_size,
            refine=args.refine,
            order=args.order or "bubble",
            **keywords,
        )
    else:
        # The two-step pattern a trainer runs on every rank: the agreed count is the largest.
        function = "get_seqlen_balanced_partitions + plan_micro_batches per rank"
        group_size = args.group_size
        # Checked on the whole batch first, so an error names the user's index, not a rank's.
        min_num_micro_batches_for(lengths, cap, **keywords)
        costs = sample_costs(args.cost, lengths)
        group_costs = costs.reshape(-1, group_size).sum(axis=1) if group_size > 1 else costs
        ranks = [
            [g * group_size + offset for g in part for offset in range(group_size)]
            for part in get_seqlen_balanced_partitions(
                group_costs, args.k, equal_size, refine=args.refine
            )
        ]

        def on_rank(rank: list[int]) -> dict[str, Any]:
            return {**keywords, "keys": None if keys is None else [keys[i] for i in rank]}

        agreed = max(
            min_num_micro_batches_for(lengths[rank], cap, **on_rank(rank)) for rank in ranks
        )
        plan = [
            [
                [rank[i] for i in batch]
                for batch in plan_micro_batches(
                    lengths[rank],
                    cap,
                    min_num_micro_batches=agreed,
                    order=args.order or "bubble",
                    **on_rank(rank),
                )
            ]
            for rank in ranks
        ]
    seconds = time.perf_counter() - start
    costs = sample_costs(args.cost, lengths).tolist()
    tokens = lengths.tolist()
    rows = [
        {
            "samples": sum(len(batch) for batch in rank),
            "micro_batches": sum(1 for batch in rank if batch),
            "tokens": sum(tokens[i] for batch in rank for i in batch),
            "cost": sum(costs[i] for batch in rank for i in batch),
            "fullest_micro_batch": max(sum(tokens[i] for i in batch) for batch in rank),
            "most_samples": max(len(batch) for batch in rank),
        }
        for rank in plan
    ]
    count = len(plan[0]) if plan else 0
    predicted = time_by_plan(args.cost, lengths, plan)
    if args.json:
        payload = {
            "source": source,
            "n": int(lengths.size),
            "ranks": len(plan),
            "max_token_len": cap,
            "cost": str(args.cost),
            "group_size": args.group_size,
            "max_sequences": args.max_sequences,
            "footprint": args.footprint or "sum",
            "key_field": args.key_field,
            "micro_batches_per_rank": count,
            "seconds": seconds,
            "ranks_summary": rows,
            "plan": plan,
        }
        if predicted is not None:
            payload["predicted_time"] = predicted
        print(json.dumps(payload))
        return 0
    heaviest = max(row["cost"] for row in rows)
    mean = sum(row["cost"] for row in rows) / len(rows)
    print(
        f"{source}\n{function}: ranks={len(plan)}, max_token_len={cap:,}, cost={args.cost}, "
        f"group_size={args.group_size}{_limits_text(args)}\n"
    )
    print(
        f"{'rank':>4} {'samples':>8} {'micro-batches':>14} {'tokens':>12} {'cost':>16} "
        f"{'fullest micro-batch':>20}"
    )
    for r, row in enumerate(rows):
        print(
            f"{r:>4} {row['samples']:>8,} {row['micro_batches']:>14} {row['tokens']:>12,} "
            f"{row['cost']:>16,} {row['fullest_micro_batch']:>20,}"
        )
    fullest = max(row["fullest_micro_batch"] for row in rows)
    print(
        f"\nevery rank runs {count} micro-batches of at most {cap:,} tokens "
        f"(fullest {fullest:,}; empty ones, if any, come last for padding)"
    )
    if args.max_sequences is not None or args.footprint == "padded" or keys is not None:
        most = max(row["most_samples"] for row in rows)
        print(f"shape limits kept: at most {most} samples in a micro-batch{_limits_text(args)}")
    print(f"heaviest rank by {args.cost}: max/mean {heaviest / max(mean, 1e-9):.4f}")
    if predicted is not None:
        print(time_lines(predicted))
    print(f"time: {_format_seconds(seconds)}")
    return 0


def _limits_text(args: argparse.Namespace) -> str:
    """The shape limits asked for, as ``, name=value`` pairs (empty when none)."""
    pairs = [
        ("max_sequences", args.max_sequences),
        ("footprint", args.footprint),
        ("key_field", args.key_field),
    ]
    return "".join(f", {name}={value}" for name, value in pairs if value is not None)
