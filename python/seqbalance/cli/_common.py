"""What the command line's sub-commands share: exit statuses, the parser class, argument types,
reading the input, the wall clock and progress lines."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from .._inputs import MAX_COUNT, MAX_VALUE, EqualSize
from ..costs.model import ModelCost
from ..planning.groups import uid_runs
from ._messages import config_words
from .readers import (
    SYNTHETIC_DESCRIPTION,
    InputError,
    read_grouped_lengths,
    read_lengths,
    read_model_config,
    synthetic_rl_batch,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped at spaces only: a flag named in a help text (``--model-config``)
    is never cut at its hyphen onto two lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first), and
    help is wrapped at spaces only (`_HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

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


def _share(text: str) -> float:
    """A share of a whole: a finite number strictly between 0 and 1 (``--forward-share``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}")
    return value


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


def format_wall(seconds: float) -> str:
    """The wait of a ``time:`` line, always in seconds (``0.32 s``): the process's start is known
    to the clock tick (10 ms), so finer digits (``320.0 ms``) would only be noise.

    Example:
        >>> format_wall(0.3204)
        '0.32 s'
    """
    return f"{seconds:.2f} s"


def shown(value: object) -> str:
    """An option's value as a header line shows it: ``yes``/``no`` for a switch, never Python's
    ``True``/``False`` or a quoted ``'nearly'``.

    Example:
        >>> shown(False), shown("nearly"), shown(8)
        ('no', 'nearly', '8')
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _equal_size(args: argparse.Namespace) -> EqualSize:
    """``equal_size`` from ``--equal-size`` / ``--nearly-equal`` (argparse keeps them apart)."""
    return "nearly" if args.nearly_equal else args.equal_size


class ModelFlops:
    """``--model-config``: a sample weighs its training FLOPs under the model, as exact int64.

    `ModelCost` as a ``cost=`` gives float64; the command line balances and
    reports the exact integers (`flops`), refusing a sequence whose
    FLOPs pass ``2**63 - 1`` rather than rounding it.
    """

    #: The flag that sets this cost, for messages.
    flag = "--model-config"

    def __init__(self, model: ModelCost, file: str) -> None:
        self.model = model
        self.name = f"FLOPs ({Path(file).name})"
        self.unit = "FLOPs"

    def __call__(self, lengths: np.ndarray) -> np.ndarray:
        flops = self.model.flops(lengths)
        too_big = next((i for i, value in enumerate(flops) if value > MAX_VALUE), None)
        if too_big is not None:
            raise InputError(
                f"lengths[{too_big}] = {int(lengths[too_big])} costs {flops[too_big]:,} FLOPs "
                "under --model-config, above 2**63 - 1; balance by --cost instead"
            )
        return np.asarray(flops, dtype=np.int64)

    def __str__(self) -> str:
        return self.name


def default_cost(command: str) -> str:
    """What a verb balances when given no cost flag: ``"tokens"``, the library's one default
    (api-spec), so ``partition`` and ``plan`` and the calls they run give the same answer."""
    return "tokens"


#: The names ``--cost`` takes; anything else is a file.
COST_NAMES = ("tokens", "workload")


def route_cost_file(args: argparse.Namespace) -> None:
    """``--cost FILE`` as the flag its file is for: a saved time cost (its ``"kind"`` says so,
    or a calibrate log, which ``--time-cost`` explains) is ``--time-cost FILE``, anything else
    ``--model-config FILE``. ``--time-cost`` and ``--model-config`` stay as aliases."""
    if args.cost is None or args.cost in COST_NAMES:
        return
    file = args.cost
    if args.model_config is not None or getattr(args, "time_cost", None) is not None:
        raise InputError("pass only one of --cost, --model-config and --time-cost")
    path = Path(file)
    if not path.is_file():
        raise InputError(
            f"--cost {file}: not tokens, workload or a file (a saved time cost or a model's "
            "config.json)" + ("" if path.exists() else ": no such file")
        )
    args.cost = None
    if _names_a_time_cost(path):
        args.time_cost = file
    else:
        args.model_config = file


def _names_a_time_cost(path: Path) -> bool:
    """Whether ``path`` is for ``--time-cost``: a saved ``seqbalance.TimeCost`` or a JSON Lines
    log of measured micro-batches (``"lengths"`` and ``"seconds"`` on its first line)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(1 << 16)
    except OSError:
        return False
    first = head.split(b"\n", 1)[0]
    for text in (head, first):
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict):
            kind = record.get("kind")
            return kind == "seqbalance.TimeCost" or {"lengths", "seconds"} <= set(record)
    return b'"seqbalance.TimeCost"' in head


def resolve_cost(args: argparse.Namespace) -> None:
    """``args.cost``: ``--cost`` (`default_cost` when not given), or `ModelFlops` for
    ``--model-config``, which excludes ``--cost``."""
    if args.model_config is None:
        args.cost = default_cost(args.command) if args.cost is None else args.cost
        return
    if args.cost is not None:
        raise InputError("pass either --cost or --model-config, not both")
    config = read_model_config(args.model_config)
    try:
        model = ModelCost.from_config(config)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"{args.model_config}: {config_words(str(exc), args.model_config)}"
        ) from None
    args.cost = ModelFlops(model, args.model_config)


def read_input(
    args: argparse.Namespace, whole_lengths: bool = False
) -> tuple[np.ndarray, list[Any] | None, list[Any] | None, str]:
    """Lengths, the group id of each (``--uid-field``, else ``None``), the key of each
    (``--key-field``, else ``None``) and where they came from.

    ``whole_lengths``: the values must be whole token counts (planning); otherwise a JSON Lines
    field or a text line may hold float costs, read as a float64 array.
    """
    floats = not whole_lengths
    labelled = args.uid_field is not None or args.key_field is not None
    if args.file not in (None, "-"):
        _say_reading(args)
    if labelled:
        flag = "--uid-field" if args.uid_field is not None else "--key-field"
        if args.file is None or args.field is None:
            raise InputError(
                f"{flag} reads JSON Lines: give a FILE ('-' for stdin) and --field NAME"
            )
        if args.uid_field is not None and args.group_size != 1:
            raise InputError("pass either --group-size or --uid-field, not both")
        lengths, uids, keys = read_grouped_lengths(
            args.file, args.field, args.uid_field, args.key_field, floats=floats
        )
        source = f"{args.file}: {lengths.size:,} lengths"
        if uids is not None:
            source += f" in {len(uid_runs(uids)):,} uid groups"
    elif args.file is None:
        if args.field is not None:
            raise InputError(
                "--field reads JSON Lines: give a FILE ('-' for stdin) to read it from"
            )
        lengths, uids, keys, source = synthetic_rl_batch(), None, None, SYNTHETIC_DESCRIPTION
    else:
        lengths, uids, keys = read_lengths(args.file, args.field, floats=floats), None, None
        kind = "costs" if lengths.dtype.kind == "f" else "lengths"
        source = f"{args.file}: {lengths.size:,} {kind}"
    if lengths.size % args.group_size:
        raise InputError(
            f"number of lengths ({lengths.size}) is not divisible by --group-size "
            f"({args.group_size})"
        )
    return lengths, uids, keys, source


# ---------------------------------------------------------------------------- wall clock, progress

#: When the command line was imported: the wall clock's start where the process's is unknown.
_IMPORTED = time.perf_counter()

#: Inputs of at least this many lengths get progress lines on stderr (their work takes seconds).
PROGRESS_FROM = 1 << 20

#: Files of at least this many bytes say that they are being read (reading them takes seconds).
PROGRESS_FILE_BYTES = 64 << 20


def waited_seconds() -> float:
    """Seconds the user has waited for this command: since the process started (interpreter
    start-up and imports included) where Linux's /proc says when, else since this import."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            # Field 22, counted after the command name (which may hold spaces and parentheses).
            started_ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as uptime:
            up = float(uptime.read().split()[0])
        waited = up - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        waited = -1.0
    since_import = time.perf_counter() - _IMPORTED
    return waited if waited >= since_import else since_import


def print_json_waited(payload: dict[str, Any]) -> None:
    """``payload`` as one JSON document on stdout, with ``wall_seconds`` (the wait, as the
    ``time:`` line gives it) as its last key, read once everything before it is written and
    flushed: serialising and writing a plan of 10^7 samples takes seconds, which the user waits
    for too. Only the last few bytes (the number itself) come after the reading."""
    text = json.dumps(payload)
    sys.stdout.write(f"{text[:-1]}, " if payload else "{")
    sys.stdout.flush()
    sys.stdout.write(f'"wall_seconds": {json.dumps(waited_seconds())}}}\n')


def progress(args: argparse.Namespace, n_items: int, text: str) -> None:
    """One progress line on stderr for an input of ``n_items`` when that takes seconds."""
    if n_items >= PROGRESS_FROM:
        say(f"seqbalance {args.command}: {text}")


#: The library's loggers whose ``INFO`` records are progress (the library never prints it: the
#: command line attaches the handler that does).
PROGRESS_LOGGERS = ("seqbalance.plan", "seqbalance.profile")


class _SayHandler(logging.Handler):
    """Each record as one line on stderr, through `say`."""

    def emit(self, record: logging.LogRecord) -> None:
        say(record.getMessage())


@contextlib.contextmanager
def library_progress() -> Iterator[None]:
    """Print the library's progress records on stderr while a verb runs."""
    handler = _SayHandler(logging.INFO)
    saved = []
    for name in PROGRESS_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)


def say(line: str) -> None:
    """Write one line to stderr; a closed stderr is not a second error."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _say_reading(args: argparse.Namespace) -> None:
    try:
        size = os.stat(args.file).st_size
    except (OSError, ValueError):
        return  # the reader names the problem
    if size >= PROGRESS_FILE_BYTES:
        say(f"seqbalance {args.command}: reading {args.file} ({size / 1e6:,.0f} MB)")
