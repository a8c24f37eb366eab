"""``seqbalance partition``: balance lengths over k ranks and print the balance report."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from .. import reference
from .._inputs import MAX_VALUE, EqualSize
from ..costs.workload import group_sums, sample_costs
from ..partition import partition_ids
from ..planning.groups import uid_runs
from ..planning.metrics import BalanceReport, LoadStats, balance_report_from_ids, naive_bounds
from ._common import (
    _equal_size,
    _format_seconds,
    format_wall,
    print_json_waited,
    progress,
    read_input,
    say,
    shown,
    waited_seconds,
)
from .calibrate import say_extrapolation, time_by_rank, time_lines
from .plan import PLAN_NOTICE, _run_plan
from .readers import InputError

#: Inputs up to this many items are timed as the best of three calls (the first call of a process
#: also pays one-off costs); larger ones once, since each call takes seconds there.
BEST_OF_THREE_UP_TO = 1 << 20


def _partition(
    weights: np.ndarray, k: int, equal_size: EqualSize, refine: bool
) -> tuple[np.ndarray, float, int]:
    """Partition numbers per item (``partition_ids``), the best time, and how many calls it took.

    ``partition_ids`` makes the same partition as ``get_seqlen_balanced_partitions`` without a
    Python object per item, which is what lets the command take files of tens of millions.
    """
    repeat = 3 if len(weights) <= BEST_OF_THREE_UP_TO else 1
    best = float("inf")
    ids = np.empty(0, dtype=np.int64)
    for _ in range(repeat):
        start = time.perf_counter()
        ids = partition_ids(weights, k, equal_size=equal_size, refine=refine)
        best = min(best, time.perf_counter() - start)
    return ids, best, repeat


def _group_weights(values: np.ndarray, group_size: int) -> np.ndarray:
    """Sums of consecutive groups of ``group_size`` values, refusing one above 2**63 - 1."""
    if group_size == 1:
        return values
    groups = values.reshape(-1, group_size)
    if values.dtype.kind == "f":
        return groups.sum(axis=1)
    if int(values.max()) <= MAX_VALUE // group_size:
        return groups.sum(axis=1, dtype=np.int64)  # cannot wrap around
    # Values near 2**63: exact Python sums, to name the group that does not fit.
    weights = []
    for group, row in enumerate(groups.tolist()):
        weight = sum(row)
        if weight > MAX_VALUE:
            raise InputError(
                f"group {group} (lengths {group * group_size}..{(group + 1) * group_size - 1}) "
                f"sums to {weight}, above 2**63 - 1"
            )
        weights.append(weight)
    return np.array(weights, dtype=np.int64)


def _parts_from_ids(ids: np.ndarray, k: int) -> list[list[int]]:
    """The partitions as ascending index lists, in partition order (``ids`` from partition_ids)."""
    order = np.argsort(ids, kind="stable")
    cuts = np.cumsum(np.bincount(ids, minlength=k))[:-1]
    return [part.tolist() for part in np.split(order, cuts)]


#: Inputs up to this many groups also try ``refine=True`` to say whether ``--refine`` would help
#: (about the time of one more partition); larger ones are not delayed by it.
REFINE_HINT_UP_TO = 1 << 20


def _refine_hint(
    lengths: np.ndarray,
    weights: np.ndarray,
    sizes: int | np.ndarray,
    k: int,
    equal_size: EqualSize,
) -> tuple[float, float] | None:
    """max/mean of the ``refine=True`` split and the time it took, or None for large inputs."""
    if weights.size > REFINE_HINT_UP_TO:
        return None
    start = time.perf_counter()
    group_ids = partition_ids(weights, k, equal_size=equal_size, refine=True)
    seconds = time.perf_counter() - start
    ids = group_ids if weights is lengths else np.repeat(group_ids, sizes)
    return _report(lengths, ids, k).balanced.imbalance, seconds


def _report(values: np.ndarray, ids: np.ndarray, k: int, **grouped: Any) -> BalanceReport:
    """`balance_report_from_ids`, which takes integers, or the same report of float costs
    (``grouped``: ``group_size`` or ``uid_list``, the groups the naive split keeps whole)."""
    if values.dtype.kind != "f":
        return balance_report_from_ids(values, ids, k, **grouped)
    n = values.size
    if grouped.get("uid_list") is not None:
        starts = np.asarray([start for start, _ in uid_runs(grouped["uid_list"])], dtype=np.int64)
    else:
        starts = np.arange(0, n, grouped.get("group_size") or 1, dtype=np.int64)
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    bounds = np.asarray(naive_bounds(n, k, starts), dtype=np.int64)
    return BalanceReport(
        n_items=n,
        total=float(prefix[-1]),  # type: ignore[arg-type]
        balanced=LoadStats.of(
            np.bincount(ids, weights=values, minlength=k).tolist(),
            np.bincount(ids, minlength=k).tolist(),
        ),
        naive=LoadStats.of(
            (prefix[bounds[1:]] - prefix[bounds[:-1]]).tolist(), np.diff(bounds).tolist()
        ),
    )


def _refine_gain(refined: tuple[float, float] | None, imbalance: float) -> str | None:
    """How much lighter ``--refine`` makes the heaviest rank (``"8.7%"``), or None when it
    gains nothing that shows (under 0.05%, which would print as 0.0%)."""
    if refined is None or imbalance <= 0:
        return None
    gain = (1 - refined[0] / imbalance) * 100
    return f"{gain:.1f}%" if gain >= 0.05 else None


def _unit(unit: str, count: int) -> str:
    """``tokens`` after a count, ``token`` after 1 (``FLOPs`` and ``ns`` stay as they are)."""
    return unit[:-1] if count == 1 and unit == "tokens" else unit


def _run_partition(args: argparse.Namespace) -> int:
    planning = args.max_token_len is not None
    lengths, uids, keys, source = read_input(args, whole_lengths=planning)
    group_size = args.group_size
    equal_size = _equal_size(args)
    if planning:
        # The old route to planning: it keeps working, and says once that `plan` is the verb.
        status = _run_plan(args, lengths, uids, keys, source)
        say(PLAN_NOTICE)
        return status
    for flag, value, what in (
        ("--order", args.order, "orders"),
        ("--max-sequences", args.max_sequences, "shapes"),
        ("--footprint", args.footprint, "shapes"),
        ("--key-field", args.key_field, "shapes"),
        ("--per-rank", args.per_rank or None, "plans"),
    ):
        if value is not None:
            raise InputError(f"{flag} {what} micro-batches: it needs --max-token-len")
    if lengths.dtype.kind == "f" and args.cost != "tokens":
        # The flag that chose the cost: --cost (a name), --model-config or --time-cost.
        flag = getattr(args.cost, "flag", "--cost")
        raise InputError(
            f"these are float costs, not token lengths: {flag} weighs whole token lengths "
            f"(drop {flag} to balance the costs as they are)"
        )
    # What a sample weighs (--cost); the report shows the same quantity.
    tokens, lengths = lengths, sample_costs(args.cost, lengths)
    # Groups of consecutive samples (--group-size, or runs of equal --uid-field) are balanced as
    # single items weighing their summed cost.
    if uids is None:
        weights = _group_weights(lengths, group_size)
        sizes: int | np.ndarray = group_size
    else:
        starts = np.asarray([start for start, _ in uid_runs(uids)], dtype=np.int64)
        if starts.size < args.dp_size:
            raise InputError(
                f"number of groups ({starts.size}) is smaller than k_partitions ({args.dp_size})"
            )
        if equal_size is True and starts.size % args.dp_size:
            raise InputError(
                f"number of groups ({starts.size}) is not divisible by k_partitions ({args.dp_size}) "
                "with --equal-size (--nearly-equal allows group counts that differ by one)"
            )
        weights = group_sums(lengths, starts)
        sizes = np.diff(np.append(starts, lengths.size))
    progress(args, weights.size, f"partitioning {weights.size:,} items over {args.dp_size} ranks")
    group_ids, seconds, repeat = _partition(weights, args.dp_size, equal_size, args.refine)
    ids = group_ids if weights is lengths else np.repeat(group_ids, sizes)
    # The naive baseline keeps groups whole, as a grouped trainer's contiguous split does.
    grouped = {"uid_list": uids} if uids is not None else {"group_size": group_size}
    report = _report(lengths, ids, args.dp_size, **grouped)
    # With --refine the answer is the refined split; without, the hint's (None: not computed).
    refined = (
        (report.balanced.imbalance, seconds)
        if args.refine
        else _refine_hint(lengths, weights, sizes, args.dp_size, equal_size)
    )
    predicted = time_by_rank(args.cost, tokens, ids, args.dp_size)
    say_extrapolation(args.cost, tokens)

    reference_seconds = None
    same_result = None
    if args.compare_reference:
        start = time.perf_counter()
        reference_parts = reference.get_seqlen_balanced_partitions(
            weights, args.dp_size, equal_size
        )
        reference_seconds = time.perf_counter() - start
        same_result = (
            None if args.refine else reference_parts == _parts_from_ids(group_ids, args.dp_size)
        )

    if args.json:
        progress(args, lengths.size, "writing the partitions as JSON")
        payload = {
            "source": source,
            "n": int(lengths.size),
            "dp_size": args.dp_size,
            "equal_size": equal_size,
            "group_size": group_size,
            "uid_field": args.uid_field,
            "groups": int(weights.size),
            "cost": str(args.cost),
            "refine": args.refine,
            "planner_seconds": seconds,
            "reference_seconds": reference_seconds,
            "same_as_reference": same_result,
            "report": report.to_dict(),
            "refined_imbalance": None if refined is None else refined[0],
            "partitions": _parts_from_ids(ids, args.dp_size),
        }
        if predicted is not None:
            payload["predicted_time"] = predicted
        print_json_waited(payload)
        return 0

    grouping = f"uid_field={args.uid_field}" if uids is not None else f"group_size={group_size}"
    options = f"k={args.dp_size}, equal_size={shown(equal_size)}, {grouping}"
    if args.cost != "tokens":
        options += f", cost={args.cost}"
    if args.refine:
        options += ", refine=yes"
    print(f"{source}\n{options}\n")
    unit = (
        "cost"
        if lengths.dtype.kind == "f"
        else "tokens"
        if args.cost == "tokens"
        # A model's FLOPs, a time cost's ns: the unit alone (the header names the file).
        else getattr(args.cost, "unit", str(args.cost))
    )
    print(report)
    print()
    print(
        f"imbalance (max/mean): naive split {report.naive.imbalance:.4f} -> "
        f"balanced {report.balanced.imbalance:.4f}   "
        f"(spread {report.naive.spread:,} -> {report.balanced.spread:,} "
        f"{_unit(unit, report.balanced.spread)})"
    )
    if predicted is not None:
        print(time_lines(predicted))
    gain = _refine_gain(refined, report.balanced.imbalance) if not args.refine else None
    if gain is not None and refined is not None:
        print(
            f"--refine would give max/mean {refined[0]:.4f} "
            f"({gain} lighter heaviest rank, {_format_seconds(refined[1])})"
        )
    calls = "best of 3" if repeat == 3 else "one call"
    print(
        f"time: {format_wall(waited_seconds())} "
        f"({_format_seconds(seconds)} for partition_ids, {calls})"
    )
    if reference_seconds is not None:
        same = "" if same_result is None else f", same result: {'yes' if same_result else 'NO'}"
        print(
            f"pure-Python reference: {_format_seconds(reference_seconds)} "
            f"({reference_seconds / max(seconds, 1e-9):.1f}x as long{same})"
        )
    return 0
