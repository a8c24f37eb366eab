"""The ``seqbalance`` command line: ``partition`` (the main job), ``plan``, ``calibrate`` and
``bench``.

Run with no arguments, it partitions the built-in synthetic RL batch and times the same call on
the pure-Python reference, so a new user sees the main job, and what it buys, in one command.

Failures: every error (a bad file, a hostile header, an absurd size, running out of memory) ends
with one line on stderr and exit status 2, never a traceback; Ctrl-C ends with one line and
status 130; a reader that closes the pipe early (``seqbalance ... | head -1``) ends the command
quietly with status 141, as a program killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from .. import __version__
from .._inputs import MAX_COUNT
from ..costs.time_cost import TimeCostWarning
from ..errors import ArgumentError
from ._common import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    _int_at_least,
    _int_list,
    _Parser,
    _share,
    library_progress,
    resolve_cost,
    route_cost_file,
    say,
)
from ._messages import flag_words
from ._render import render
from .bench import _run_bench
from .calibrate import add_calibrate_parser, add_time_cost_flag, resolve_time_cost
from .partition import _run_partition
from .plan import _run_plan_command
from .readers import SYNTHETIC_DESCRIPTION, InputError, line_of_item

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one ``_add_<verb>`` per sub-command, flags shared through
    ``_add_input_flags``, ``_add_count_flags``, `add_cost_flags` and ``_add_shape_flags``."""
    parser = _Parser(
        prog="seqbalance",
        description="Balance sequence lengths across data-parallel ranks. With no arguments: "
        "partition the built-in synthetic RL batch and compare with the pure-Python reference.",
    )
    parser.add_argument(
        "--version", action="version", version=f"seqbalance {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    _add_partition(commands)
    _add_plan(commands)
    _add_bench(commands)
    add_calibrate_parser(commands)
    return parser


#: ``--refine`` on every verb that balances ranks.
REFINE_HELP = "refine the split over the ranks: a lighter heaviest rank than the default answer"

#: ``--equal-size`` and ``--nearly-equal`` on every verb that has them.
EQUAL_SIZE_HELP = "equal item (or group) counts on every rank (the rank count must divide theirs)"
NEARLY_EQUAL_HELP = "item (or group) counts within one of each other, for any count"

#: The verbs, as the message for a missing one lists them.
VERBS = ("partition", "plan", "bench", "calibrate")


#: ``--dp`` (``-k``) on both verbs.
DP_HELP = "the data-parallel ranks to balance over (default %(default)s); -k and --dp are one flag"


def _add_partition(commands: Any) -> None:
    partition = commands.add_parser(
        "partition",
        help="balance lengths over k ranks and print the balance report",
        description="Balance lengths over k ranks (get_seqlen_balanced_partitions) and print "
        "the balance report against the naive contiguous split, and the time taken. "
        "(Micro-batches under a token cap: seqbalance plan.)",
    )
    _add_input_flags(partition)
    partition.add_argument(
        "-k",
        "--dp",
        dest="dp_size",
        type=_int_at_least(1),
        default=8,
        metavar="N",
        help=DP_HELP,
    )
    _add_count_flags(partition)
    partition.add_argument("--refine", action="store_true", help=REFINE_HELP)
    add_cost_flags(partition)
    # The old route to planning, kept working (with a notice that `plan` is the verb).
    partition.add_argument(
        "--max-token-len",
        type=_int_at_least(1),
        metavar="N",
        help="also plan micro-batches of at most N tokens: the plan seqbalance plan gives (the "
        "verb for it)",
    )
    partition.add_argument(
        "--per-rank",
        action="store_true",
        help="with --max-token-len: the two-step route instead, balance the ranks first and then "
        "plan each rank's micro-batches alone (get_seqlen_balanced_partitions, then "
        "plan_micro_batches per rank, with the count they agree on)",
    )
    _add_shape_flags(partition, "with --max-token-len: ")
    partition.add_argument(
        "--compare-reference",
        action="store_true",
        help="also time the pure-Python reference on the same call",
    )
    partition.set_defaults(run=_run_partition)


def _add_plan(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="plan micro-batches under a token cap, for one rank or --dp ranks",
        description="Plan micro-batches of at most --max-token-len tokens (plan_dp_micro_batches): "
        "for one rank, or with --dp N one plan for N data-parallel ranks, every rank running "
        "the same number of micro-batches. Prints the summary per rank and the time taken.",
    )
    _add_input_flags(plan)
    plan.add_argument(
        "--max-token-len",
        type=_int_at_least(1),
        metavar="N",
        required=True,
        help="the cap: at most N tokens in a micro-batch",
    )
    plan.add_argument(
        "--dp",
        "-k",
        dest="dp_size",
        type=_int_at_least(1),
        metavar="N",
        default=1,
        help=DP_HELP,
    )
    _add_count_flags(plan)
    plan.add_argument("--refine", action="store_true", help=REFINE_HELP)
    add_cost_flags(plan)
    _add_shape_flags(plan, "")
    _add_step_flags(plan)
    plan.set_defaults(run=_run_plan_command)


def _add_step_flags(parser: argparse.ArgumentParser) -> None:
    """--sync, --pipeline-stages, --forward-share and --max-micro-batches: the step the trainer
    runs, which the plan is made for and whose predicted time the report shows."""
    parser.add_argument(
        "--sync",
        choices=("step", "micro_batch"),
        default="step",
        help="where ranks wait for each other: once a step (the default: DDP with no_sync, "
        "Megatron's DDP, pipelines) or at every micro-batch (micro_batch: FSDP, FSDP2, ZeRO-3); "
        "micro_batch plans micro-batches that line up across ranks",
    )
    parser.add_argument(
        "--pipeline-stages",
        type=_int_at_least(1, MAX_COUNT),
        default=1,
        metavar="P",
        help="each rank is a 1F1B pipeline of P stages (Megatron-LM, slime, verl's Megatron "
        "engine): the plan chooses the micro-batches' sizes, order and count for it",
    )
    parser.add_argument(
        "--forward-share",
        type=_share,
        default=1 / 3,
        metavar="F",
        help="the forward's share of a micro-batch's time in a pipeline, in (0, 1) (default 1/3)",
    )
    parser.add_argument(
        "--max-num-micro-batches",
        "--max-micro-batches",
        dest="max_num_micro_batches",
        type=_int_at_least(1, MAX_COUNT),
        metavar="N",
        help="with --sync micro_batch or --pipeline-stages: the most micro-batches per rank the "
        "plan may choose (default: 4x the count the default plan needs, with a time cost; "
        "otherwise that count); --max-micro-batches is its old spelling, kept until 1.0",
    )


def _add_input_flags(parser: argparse.ArgumentParser) -> None:
    """FILE, --field, --uid-field and --json: what a verb reads and how it answers."""
    parser.add_argument(
        "file",
        nargs="?",
        help="lengths: one integer per line, a .npy file, or JSON Lines with --field "
        "('-' reads stdin); default: the " + SYNTHETIC_DESCRIPTION,
    )
    parser.add_argument(
        "--field", metavar="NAME", help="JSON Lines field holding the length (or a token list)"
    )
    parser.add_argument(
        "--uid-field",
        metavar="NAME",
        help="JSON Lines field holding a group id: consecutive records with equal ids form a "
        "group kept on one rank (prompt groups of any sizes)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _add_count_flags(parser: argparse.ArgumentParser) -> None:
    """--equal-size, --nearly-equal and --group-size: how many samples each rank gets."""
    counts = parser.add_mutually_exclusive_group()
    counts.add_argument("--equal-size", action="store_true", help=EQUAL_SIZE_HELP)
    counts.add_argument("--nearly-equal", action="store_true", help=NEARLY_EQUAL_HELP)
    parser.add_argument(
        "--group-size",
        type=_int_at_least(1),
        default=1,
        metavar="N",
        help="keep N consecutive samples together (e.g. the responses to one prompt)",
    )


def add_cost_flags(parser: argparse.ArgumentParser) -> None:
    """What a sample weighs, on every verb that balances (``partition``, ``plan``).

    A new cost flag goes here, and its reading into ``args.cost`` into `resolve_cost`, which
    `main` runs for every verb these flags were added to.
    """
    parser.add_argument(
        "--cost",
        default=None,
        metavar="tokens|workload|FILE",
        help="what a sample weighs: its tokens (the default, the library's one default), verl's "
        "workload (24576 × s + s² for s tokens), or a FILE: a saved time cost (seqbalance "
        "calibrate --out) or a model's Hugging Face config.json",
    )
    parser.add_argument(
        "--model-config",
        metavar="FILE.json",
        help="the same as --cost FILE.json for a model's config.json (balance by its training "
        "FLOPs); exclusive with --cost and --time-cost",
    )
    add_time_cost_flag(parser)
    parser.set_defaults(resolve_cost=True)


def _add_shape_flags(parser: argparse.ArgumentParser, needs: str) -> None:
    """--order and the shape limits of micro-batches (``needs``: the flag they go with)."""
    parser.add_argument(
        "--order",
        choices=("bubble", "largest_first", "none"),
        help=f"{needs}the order of each rank's micro-batches (default bubble: the "
        "small ones at both ends, for pipeline bubbles; largest_first: by cost, descending)",
    )
    parser.add_argument(
        "--max-sequences",
        type=_int_at_least(1),
        metavar="N",
        help=f"{needs}at most N samples per micro-batch (static shapes, CUDA graphs)",
    )
    parser.add_argument(
        "--footprint",
        choices=("sum", "padded"),
        help=f"{needs}what a micro-batch is charged against the cap: its tokens "
        "(sum, the default) or its samples times its longest (padded, non-varlen attention)",
    )
    parser.add_argument(
        "--key-field",
        metavar="NAME",
        help=f"{needs}JSON Lines field holding each sample's key (a modality, a "
        "policy version); samples of different keys never share a micro-batch",
    )


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="time seqbalance against the pure-Python reference over a grid",
        description="Time get_seqlen_balanced_partitions against seqbalance.reference on "
        "synthetic RL lengths over a grid of sizes, and print a table of times and speed-ups.",
    )
    bench.add_argument(
        "--sizes",
        type=_int_list,
        default=[1024, 4096, 16384],
        metavar="N,N,...",
        help="item counts n to time, comma-separated (default 1024,4096,16384)",
    )
    bench.add_argument(
        "-k",
        type=_int_list,
        default=[8, 32],
        metavar="K,K,...",
        help="partition counts k to time, comma-separated (default 8,32)",
    )
    bench_counts = bench.add_mutually_exclusive_group()
    bench_counts.add_argument("--equal-size", action="store_true", help=EQUAL_SIZE_HELP)
    bench_counts.add_argument("--nearly-equal", action="store_true", help=NEARLY_EQUAL_HELP)
    bench.add_argument(
        "--repeat",
        type=_int_at_least(1, 1000),
        default=3,
        metavar="N",
        help="time each cell as the best of N runs (default 3, at most 1000)",
    )
    bench.add_argument("--json", action="store_true", help="machine-readable output")
    bench.add_argument(
        "--plot", metavar="FILE.png", help="draw speed-up against n (needs matplotlib)"
    )
    bench.set_defaults(run=_run_bench)


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
        say("seqbalance: interrupted")
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        arguments = ["partition", "--compare-reference"]
    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.error(f"choose a command: {', '.join(VERBS)}")
    prefix = f"seqbalance {args.command}: error:"
    try:
        if getattr(args, "resolve_cost", False):
            route_cost_file(args)
            resolve_time_cost(args)
            resolve_cost(args)
        with warnings.catch_warnings():
            # A verb says what a time cost warns of itself, once, as a "warning:" line on
            # stderr (stdout stays one JSON document under --json).
            warnings.simplefilter("ignore", TimeCostWarning)
            with library_progress():
                return int(args.run(args))
    except ArgumentError as exc:
        # Located: said from where it arose, with the flag or the file's line (cli/_render).
        rendered = render(exc, getattr(args, "file", None))
        shown = _with_line(flag_words(_one_line(exc)), args) if rendered is None else rendered
        say(f"{prefix} {' '.join(shown.split())}")
    except (InputError, ValueError, TypeError, OverflowError) as exc:
        # The library's own messages name the argument and the value, in its keywords: the
        # shell user set them with flags, so the message names those.
        say(f"{prefix} {_with_line(flag_words(_one_line(exc)), args)}")
    except MemoryError as exc:
        detail = f" ({_one_line(exc)})" if str(exc) else ""
        say(f"{prefix} out of memory{detail}; try a smaller input")
    except RecursionError:
        say(f"{prefix} input nested too deeply")
    except BrokenPipeError:
        raise
    except OSError as exc:
        say(f"{prefix} {exc.strerror or _one_line(exc)}")
    return EXIT_USAGE


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: An index into the lengths, or a run of them, as the library's messages name one:
#: ``lengths[7] = ...``, ``group 2 (lengths[4:6])``.
_LENGTH_INDEX = re.compile(r"\blengths\[(\d+)(?::(\d+))?\]")


def _with_line(message: str, args: argparse.Namespace) -> str:
    """``message``, plus the file and line (or lines) of the lengths it names when it names any."""
    match = _LENGTH_INDEX.search(message)
    file = getattr(args, "file", None)
    if match is None or file is None:
        return message
    first = line_of_item(file, int(match.group(1)))
    if first is None:
        return message
    if match.group(2) is None or int(match.group(2)) - int(match.group(1)) <= 1:
        return f"{message} (line {first} of {file})"
    last = line_of_item(file, int(match.group(2)) - 1)
    return f"{message} (lines {first}-{last} of {file})" if last else message
