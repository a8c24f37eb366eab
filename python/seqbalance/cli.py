"""The ``seqbalance`` command line: ``partition`` (the main job) and ``bench``.

Run with no arguments, it partitions the built-in synthetic RL batch and times the same call on
the pure-Python reference, so a new user sees the main job, and what it buys, in one command.

Failures: every error (a bad file, a hostile header, an absurd size, running out of memory) ends
with one line on stderr and exit status 2, never a traceback; Ctrl-C ends with one line and
status 130; a reader that closes the pipe early (``seqbalance ... | head -1``) ends the command
quietly with status 141, as a program killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from . import __version__, reference
from ._cli_io import (
    SYNTHETIC_DESCRIPTION,
    InputError,
    read_grouped_lengths,
    read_lengths,
    synthetic_rl_batch,
)
from ._inputs import MAX_COUNT, MAX_VALUE, EqualSize
from .costs import group_sums, sample_costs
from .groups import uid_runs
from .metrics import balance_report_from_ids
from .micro_batches import min_num_micro_batches_for, plan_dp_micro_batches, plan_micro_batches
from .partition import get_seqlen_balanced_partitions, partition_ids

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

#: Inputs up to this many items are timed as the best of three calls (the first call of a process
#: also pays one-off costs); larger ones once, since each call takes seconds there.
BEST_OF_THREE_UP_TO = 1 << 20


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:,}, got {value:,}")
        return value

    return parse


def _int_list(text: str) -> list[int]:
    # Sizes decide how much the grid allocates before anything is timed: bounded up front.
    parse = _int_at_least(1, MAX_COUNT)
    return [parse(part) for part in text.split(",") if part.strip()] or [parse(text)]


def _format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


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


def _equal_size(args: argparse.Namespace) -> EqualSize:
    """``equal_size`` from ``--equal-size`` / ``--nearly-equal`` (argparse keeps them apart)."""
    return "nearly" if args.nearly_equal else args.equal_size


def _read_input(args: argparse.Namespace) -> tuple[np.ndarray, list[Any] | None, str]:
    """Lengths, the group id of each (``--uid-field``, else ``None``) and where they came from."""
    if args.uid_field is not None:
        if args.file is None or args.field is None:
            raise InputError(
                "--uid-field reads JSON Lines: give a FILE ('-' for stdin) and --field NAME"
            )
        if args.group_size != 1:
            raise InputError("pass either --group-size or --uid-field, not both")
        lengths, uids = read_grouped_lengths(args.file, args.field, args.uid_field)
        source = f"{args.file}: {lengths.size:,} lengths in {len(uid_runs(uids)):,} uid groups"
        return lengths, uids, source
    if args.file is None:
        return synthetic_rl_batch(), None, SYNTHETIC_DESCRIPTION
    lengths = read_lengths(args.file, args.field)
    return lengths, None, f"{args.file}: {lengths.size:,} lengths"


def _run_partition(args: argparse.Namespace) -> int:
    lengths, uids, source = _read_input(args)
    group_size = args.group_size
    if lengths.size % group_size:
        raise InputError(
            f"number of lengths ({lengths.size}) is not divisible by --group-size ({group_size})"
        )
    equal_size = _equal_size(args)
    if args.dp is not None or args.max_token_len is not None:
        return _run_plan(args, lengths, uids, source)
    # What a sample weighs (--cost); the report shows the same quantity.
    lengths = sample_costs(args.cost, lengths)
    # Groups of consecutive samples (--group-size, or runs of equal --uid-field) are balanced as
    # single items weighing their summed cost.
    if uids is None:
        weights = _group_weights(lengths, group_size)
        sizes: int | np.ndarray = group_size
    else:
        starts = np.asarray([start for start, _ in uid_runs(uids)], dtype=np.int64)
        if starts.size < args.k:
            raise InputError(
                f"number of groups ({starts.size}) is smaller than k_partitions ({args.k})"
            )
        if equal_size is True and starts.size % args.k:
            raise InputError(
                f"number of groups ({starts.size}) is not divisible by k_partitions ({args.k}) "
                "with --equal-size (--nearly-equal allows group counts that differ by one)"
            )
        weights = group_sums(lengths, starts)
        sizes = np.diff(np.append(starts, lengths.size))
    group_ids, seconds, repeat = _partition(weights, args.k, equal_size, args.refine)
    ids = group_ids if weights is lengths else np.repeat(group_ids, sizes)
    report = balance_report_from_ids(lengths, ids, args.k)

    reference_seconds = None
    same_result = None
    if args.compare_reference:
        start = time.perf_counter()
        reference_parts = reference.get_seqlen_balanced_partitions(weights, args.k, equal_size)
        reference_seconds = time.perf_counter() - start
        same_result = None if args.refine else reference_parts == _parts_from_ids(group_ids, args.k)

    if args.json:
        payload = {
            "source": source,
            "n": int(lengths.size),
            "k": args.k,
            "equal_size": equal_size,
            "group_size": group_size,
            "uid_field": args.uid_field,
            "groups": int(weights.size),
            "cost": args.cost,
            "refine": args.refine,
            "seconds": seconds,
            "reference_seconds": reference_seconds,
            "same_as_reference": same_result,
            "report": report.to_dict(),
            "partitions": _parts_from_ids(ids, args.k),
        }
        print(json.dumps(payload))
        return 0

    grouping = f"uid_field={args.uid_field}" if uids is not None else f"group_size={group_size}"
    options = f"k={args.k}, equal_size={equal_size!r}, {grouping}"
    if args.cost != "tokens":
        options += f", cost={args.cost}"
    if args.refine:
        options += ", refine=True"
    print(f"{source}\n{options}\n")
    unit = "tokens" if args.cost == "tokens" else args.cost
    print(report)
    print()
    print(
        f"imbalance (max/mean): naive split {report.naive.imbalance:.4f} -> "
        f"balanced {report.balanced.imbalance:.4f}   "
        f"(spread {report.naive.spread:,} -> {report.balanced.spread:,} {unit})"
    )
    calls = "best of 3" if repeat == 3 else "one call"
    print(f"time: {_format_seconds(seconds)} for partition_ids ({calls})")
    if reference_seconds is not None:
        same = "" if same_result is None else f", same result: {'yes' if same_result else 'NO'}"
        print(
            f"pure-Python reference: {_format_seconds(reference_seconds)} "
            f"({reference_seconds / max(seconds, 1e-9):.1f}x as long{same})"
        )
    return 0


def _run_plan(
    args: argparse.Namespace, lengths: np.ndarray, uids: list[Any] | None, source: str
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
    keywords: dict[str, Any] = dict(cost=args.cost, force_group_size=args.group_size)
    start = time.perf_counter()
    if args.dp is not None:
        function = "plan_dp_micro_batches"
        if uids is not None:
            keywords = dict(cost=args.cost, uid_list=uids)
        plan = plan_dp_micro_batches(
            lengths, args.dp, cap, equal_size=equal_size, refine=args.refine, **keywords
        )
    else:
        # The two-step pattern a trainer runs on every rank: the agreed count is the largest.
        function = "get_seqlen_balanced_partitions + plan_micro_batches per rank"
        group_size = args.group_size
        costs = sample_costs(args.cost, lengths)
        group_costs = costs.reshape(-1, group_size).sum(axis=1) if group_size > 1 else costs
        ranks = [
            [g * group_size + offset for g in part for offset in range(group_size)]
            for part in get_seqlen_balanced_partitions(
                group_costs, args.k, equal_size, refine=args.refine
            )
        ]
        agreed = max(min_num_micro_batches_for(lengths[rank], cap, **keywords) for rank in ranks)
        plan = [
            [
                [rank[i] for i in batch]
                for batch in plan_micro_batches(
                    lengths[rank], cap, min_num_micro_batches=agreed, **keywords
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
        }
        for rank in plan
    ]
    count = len(plan[0]) if plan else 0
    if args.json:
        payload = {
            "source": source,
            "n": int(lengths.size),
            "ranks": len(plan),
            "max_token_len": cap,
            "cost": args.cost,
            "group_size": args.group_size,
            "micro_batches_per_rank": count,
            "seconds": seconds,
            "ranks_summary": rows,
            "plan": plan,
        }
        print(json.dumps(payload))
        return 0
    heaviest = max(row["cost"] for row in rows)
    mean = sum(row["cost"] for row in rows) / len(rows)
    print(
        f"{source}\n{function}: ranks={len(plan)}, max_token_len={cap:,}, cost={args.cost}, "
        f"group_size={args.group_size}\n"
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
    print(f"heaviest rank by {args.cost}: max/mean {heaviest / max(mean, 1e-9):.4f}")
    print(f"time: {_format_seconds(seconds)}")
    return 0


class _Progress:
    """A one-line progress bar on stderr, redrawn in place with ``\r``.

    ``close`` ends the bar's line, so whatever is printed next (the table, a message, an error)
    starts on a line of its own; it does nothing if no bar was drawn, and is safe to call twice.
    """

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.drawn = False

    def update(self, done: int, label: str) -> None:
        width = 30
        filled = width * done // self.total
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {label:<32}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def _time_best(function: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return result, best


def _check_plot_available() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "--plot needs matplotlib; install it with: pip install matplotlib"
        ) from None


def _write_plot(path: str, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for k in sorted({row["k"] for row in rows}):
        points = [(row["n"], row["speedup"]) for row in rows if row["k"] == k]
        axes.plot(*zip(*points, strict=True), marker="o", label=f"k = {k}")
    axes.set_xscale("log")
    axes.set_xlabel("number of sequences n")
    axes.set_ylabel("speed-up over the pure-Python reference")
    axes.set_title("get_seqlen_balanced_partitions")
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot write the plot ({exc})") from None
    finally:
        plt.close(figure)


def _run_bench(args: argparse.Namespace) -> int:
    if args.plot:
        _check_plot_available()
    cells = [(n, k) for n in args.sizes for k in args.k if n >= k]
    if not cells:
        raise InputError("no grid cell has n >= k; choose larger --sizes or smaller -k")
    uneven = [(n, k) for n, k in cells if n % k]
    equal_size = _equal_size(args)
    if equal_size is True and uneven:
        # Found before any timing starts, not after the cells before it have run.
        n, k = uneven[0]
        raise InputError(f"--equal-size needs n divisible by k; n={n} is not divisible by k={k}")
    rows = []
    progress = _Progress(len(cells))
    try:
        for done, (n, k) in enumerate(cells):
            lengths = synthetic_rl_batch(n_prompts=-(-n // 16))[:n]
            progress.update(done, f"n={n} k={k}: seqbalance")
            native, native_seconds = _time_best(
                functools.partial(get_seqlen_balanced_partitions, lengths, k, equal_size),
                args.repeat,
            )
            progress.update(done, f"n={n} k={k}: reference")
            slow, reference_seconds = _time_best(
                functools.partial(reference.get_seqlen_balanced_partitions, lengths, k, equal_size),
                args.repeat,
            )
            rows.append(
                {
                    "n": n,
                    "k": k,
                    "seconds": native_seconds,
                    "reference_seconds": reference_seconds,
                    "speedup": reference_seconds / max(native_seconds, 1e-9),
                    "same": native == slow,
                }
            )
        progress.update(len(cells), "done")
    finally:
        # End the bar's line before anything else is printed, an error included.
        progress.close()

    if args.json:
        print(json.dumps(rows))
    else:
        print(f"get_seqlen_balanced_partitions, equal_size={equal_size!r}, best of {args.repeat}")
        print(f"{'n':>8} {'k':>5} {'seqbalance':>12} {'reference':>12} {'speed-up':>9}  same")
        for row in rows:
            print(
                f"{row['n']:>8} {row['k']:>5} {_format_seconds(row['seconds']):>12} "
                f"{_format_seconds(row['reference_seconds']):>12} {row['speedup']:>8.1f}x  "
                f"{'yes' if row['same'] else 'NO'}"
            )
    if args.plot:
        _write_plot(args.plot, rows)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0 if all(row["same"] for row in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``partition`` and ``bench`` sub-commands)."""
    parser = _Parser(
        prog="seqbalance",
        description="Balance sequence lengths across data-parallel ranks. With no arguments: "
        "partition the built-in synthetic RL batch and compare with the pure-Python reference.",
    )
    parser.add_argument(
        "--version", action="version", version=f"seqbalance {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)

    partition = commands.add_parser(
        "partition",
        help="balance lengths over k ranks and print the balance report",
        description="Balance lengths over k ranks (get_seqlen_balanced_partitions) and print "
        "the balance report against the naive contiguous split, and the time taken.",
    )
    partition.add_argument(
        "file",
        nargs="?",
        help="lengths: one integer per line, a .npy file, or JSON Lines with --field "
        "('-' reads stdin); default: the " + SYNTHETIC_DESCRIPTION,
    )
    partition.add_argument(
        "-k", type=_int_at_least(1), default=None, help="partitions (ranks; default 8)"
    )
    counts = partition.add_mutually_exclusive_group()
    counts.add_argument("--equal-size", action="store_true", help="equal item counts")
    counts.add_argument(
        "--nearly-equal",
        action="store_true",
        help="item (or group) counts within one of each other, for any n (equal_size='nearly')",
    )
    partition.add_argument(
        "--group-size",
        type=_int_at_least(1),
        default=1,
        metavar="N",
        help="keep N consecutive samples together (e.g. the responses to one prompt)",
    )
    partition.add_argument("--refine", action="store_true", help="improve the split (refine=True)")
    partition.add_argument(
        "--cost",
        choices=("tokens", "workload"),
        default="tokens",
        help="what a sample weighs: its tokens (default) or verl's workload 24576*s + s**2",
    )
    partition.add_argument(
        "--max-token-len",
        type=_int_at_least(1),
        metavar="N",
        help="also plan micro-batches of at most N tokens on every rank and print their summary",
    )
    partition.add_argument(
        "--dp",
        type=_int_at_least(1),
        metavar="N",
        help="with --max-token-len: one plan for N data-parallel ranks (plan_dp_micro_batches)",
    )
    partition.add_argument(
        "--field", metavar="NAME", help="JSON Lines field holding the length (or a token list)"
    )
    partition.add_argument(
        "--uid-field",
        metavar="NAME",
        help="JSON Lines field holding a group id: consecutive records with equal ids form a "
        "group kept on one rank (prompt groups of any sizes)",
    )
    partition.add_argument("--json", action="store_true", help="machine-readable output")
    partition.add_argument(
        "--compare-reference",
        action="store_true",
        help="also time the pure-Python reference on the same call",
    )
    partition.set_defaults(run=_run_partition)

    bench = commands.add_parser(
        "bench",
        help="time seqbalance against the pure-Python reference over a grid",
        description="Time get_seqlen_balanced_partitions against seqbalance.reference on "
        "synthetic RL lengths over a grid of sizes, and print a table of times and speed-ups.",
    )
    bench.add_argument(
        "--sizes", type=_int_list, default=[1024, 4096, 16384], help="comma-separated n values"
    )
    bench.add_argument("-k", type=_int_list, default=[8, 32], help="comma-separated k values")
    bench_counts = bench.add_mutually_exclusive_group()
    bench_counts.add_argument("--equal-size", action="store_true", help="equal item counts")
    bench_counts.add_argument(
        "--nearly-equal", action="store_true", help="counts within one (equal_size='nearly')"
    )
    bench.add_argument(
        "--repeat",
        type=_int_at_least(1, 1000),
        default=3,
        help="best of this many runs of each (at most 1000)",
    )
    bench.add_argument("--json", action="store_true", help="machine-readable output")
    bench.add_argument(
        "--plot", metavar="FILE.png", help="draw speed-up against n (needs matplotlib)"
    )
    bench.set_defaults(run=_run_bench)
    return parser


def _say(line: str) -> None:
    """Write one line to stderr; a closed stderr is not a second error."""
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone.

    Python flushes stdout again at exit; with the pipe closed that flush would fail and print
    "Exception ignored ... BrokenPipeError" after all.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``seqbalance`` and ``python -m seqbalance``; returns the exit status.

    0 on success (1 when ``bench`` found a result differing from the reference), 2 for every
    error (one line on stderr), 130 on Ctrl-C, 141 when stdout's reader went away.
    """
    try:
        return _main(argv)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _say("seqbalance: interrupted")
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        arguments = ["partition", "--compare-reference"]
    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.error("choose a command: partition or bench")
    if args.command == "partition":
        args.k_given = args.k is not None
        args.k = 8 if args.k is None else args.k
    prefix = f"seqbalance {args.command}: error:"
    try:
        return int(args.run(args))
    except (InputError, ValueError, TypeError, OverflowError) as exc:
        # The library's own messages name the argument and the value; one line is enough.
        _say(f"{prefix} {_one_line(exc)}")
    except MemoryError as exc:
        detail = f" ({_one_line(exc)})" if str(exc) else ""
        _say(f"{prefix} out of memory{detail}; try a smaller input")
    except RecursionError:
        _say(f"{prefix} input nested too deeply")
    except BrokenPipeError:
        raise
    except OSError as exc:
        _say(f"{prefix} {exc.strerror or _one_line(exc)}")
    return EXIT_USAGE


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
