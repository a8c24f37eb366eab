"""``seqbalance calibrate LOG``: fit a `seqbalance.TimeCost` to measured micro-batches, and
``--time-cost FILE`` on the planning verbs: balance by it and report each plan's predicted time.

The pieces the planning reports call are small and stand alone: `load_time_cost`,
`resolve_time_cost`, `time_by_rank` (one partition number per sample) and `time_by_plan` (a plan
of micro-batches per rank), each returning what the text and ``--json`` reports print.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from .._inputs import MAX_VALUE, as_float, show_number
from ..costs.model import ModelCost
from ..costs.time_cost import TimeCost, TimeCostWarning
from ..costs.workload import nanoseconds
from ..errors import ArgumentError
from ._common import _format_seconds, _Parser, say
from ._messages import config_words
from ._paths import InputError, check_is_file
from ._render import render_document
from .readers import (
    MAX_LINE_BYTES,
    _decode,
    _json_record,
    _read_text_input,
    line_of_item,
    read_model_config,
)

__all__ = [
    "TimeCostNanoseconds",
    "add_calibrate_parser",
    "add_time_cost_flag",
    "load_time_cost",
    "resolve_time_cost",
    "say_extrapolation",
    "time_by_plan",
    "time_by_rank",
    "time_lines",
]


def add_calibrate_parser(commands: Any) -> None:
    """The ``calibrate`` sub-command on ``commands`` (argparse's sub-parsers)."""
    calibrate: _Parser = commands.add_parser(
        "calibrate",
        help="fit a time cost to measured micro-batch times (JSON Lines) and save it",
        description="Fit a time cost (TimeCost in Python) to measured micro-batches: LOG holds one JSON "
        'object a line, {"lengths": [document lengths packed together], "seconds": measured '
        "time}. Prints the fit, its error and the length from which attention takes as long as "
        "the linear part; --out saves it for --time-cost.",
    )
    calibrate.add_argument(
        "log", metavar="LOG", help="JSON Lines of measured micro-batches ('-' reads stdin)"
    )
    calibrate.add_argument(
        "--out",
        metavar="FILE.json",
        help="save the fit here, for --time-cost on partition and plan",
    )
    calibrate.add_argument(
        "--model-config",
        metavar="FILE.json",
        help="fit seconds per linear and per attention FLOP of this model (a Hugging Face "
        "config.json) instead of per token and per causal pair",
    )
    calibrate.add_argument(
        "--half-life",
        type=_half_life,
        metavar="N",
        help="an observation's weight halves every N later lines (a run that drifts)",
    )
    calibrate.add_argument("--json", action="store_true", help="machine-readable output")
    calibrate.set_defaults(run=_run_calibrate)


def _half_life(text: str) -> float:
    """``--half-life N``: a positive finite number of observations (checked before the log is
    read, and named as the flag)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be positive and finite, got {text!r}")
    return value


def add_time_cost_flag(parser: argparse.ArgumentParser) -> None:
    """``--time-cost FILE`` on a planning verb."""
    parser.add_argument(
        "--time-cost",
        metavar="FILE.json",
        help="balance by predicted seconds (a file from 'seqbalance calibrate --out'; exclusive "
        "with --cost and --model-config) and report each rank's predicted time",
    )


#: What a binary file given as the log should have been.
_LOG_HINT = " (the log is JSON Lines text)"
#: One line of the log, as the messages show it.
_LOG_LINE = '{"lengths": [document lengths], "seconds": measured time}'


def _read_log(stream: IO[bytes], where: str) -> tuple[list[list[int]], list[float]]:
    batches: list[list[int]] = []
    seconds: list[float] = []
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            break
        number += 1
        at = f"{where}:{number}"
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"{at}: line longer than {MAX_LINE_BYTES:,} bytes")
        line = _decode(raw, Path(where), _LOG_HINT)
        if not line.strip():
            continue
        record = _json_record(line, at)
        for field in ("lengths", "seconds"):
            if field not in record:
                raise InputError(f'{at}: no "{field}" field (a line is {_LOG_LINE})')
        lengths, time = record["lengths"], record["seconds"]
        if not isinstance(lengths, list) or not lengths:
            raise InputError(f'{at}: "lengths" must be a non-empty list of document lengths')
        for position, value in enumerate(lengths):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_VALUE:
                raise InputError(
                    f'{at}: "lengths"[{position}] must be a positive integer, got {json.dumps(value)[:40]}'
                )
        measured = as_float(time) if isinstance(time, (int, float)) else math.nan
        if isinstance(time, bool) or not (math.isfinite(measured) and measured > 0):
            whole = isinstance(time, int) and not isinstance(time, bool)
            shown = show_number(time) if whole else json.dumps(time)[:40]
            raise InputError(f'{at}: "seconds" must be a positive finite number, got {shown}')
        batches.append(lengths)
        seconds.append(measured)
    return batches, seconds


def _model(file: str | None) -> ModelCost | None:
    if file is None:
        return None
    try:
        return ModelCost.from_config(read_model_config(file))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{file}: {config_words(str(exc), file)}") from None


def _run_calibrate(args: argparse.Namespace) -> int:
    model = _model(args.model_config)
    batches, seconds = _read_log_file(args.log)
    if len(batches) < 6:
        raise InputError(
            f"{args.log}: {len(batches)} measured "
            f"micro-batch{'' if len(batches) == 1 else 'es'}; the fit needs at least 6 "
            "(4 coefficients + 2)"
        )
    try:
        with _warnings_said(args.log):
            cost = TimeCost.fit(batches, seconds, model=model, half_life=args.half_life)
    except ValueError as exc:
        raise InputError(f"{args.log}: {_log_words(str(exc), args.log)}") from None
    if args.out is not None:
        try:
            Path(args.out).write_text(json.dumps(cost.to_dict(), indent=1) + "\n")
        except OSError as exc:
            raise InputError(f"{args.out}: cannot write ({exc.strerror or exc})") from None
    documents = sum(len(batch) for batch in batches)
    tokens = sum(sum(batch) for batch in batches)
    source = f"{args.log}: {len(batches):,} measured micro-batches ({documents:,} documents, {tokens:,} tokens)"
    if args.json:
        payload = {
            "source": source,
            "observations": len(batches),
            "coefficients": cost.coefficients,
            "fit_error": cost.fit_error,
            "crossover_length": cost.crossover_length(),
            "flops_crossover_length": None if model is None else model.crossover_length(),
            "out": args.out,
        }
        print(json.dumps(payload))
        return 0
    print(source)
    print(cost.describe())
    print(f"saved to {args.out}" if args.out else "not saved (pass --out FILE.json)")
    return 0


def _log_words(message: str, log: str) -> str:
    """A `TimeCost.fit` message in the log's words: its keywords (``micro_batches``,
    ``seconds[7]``, ``half_life``) as the log's lines and the flag that set them.

    Example:
        >>> _log_words("micro_batches weighed by half_life 3.0 leave too few; pass a longer half_life", "-")
        'the measured micro-batches weighed by --half-life 3.0 leave too few; pass a longer --half-life'
    """

    def measurement(match: re.Match[str]) -> str:
        line = line_of_item(log, int(match.group(1)))
        return f'"seconds" on line {line}' if line else f'"seconds" of micro-batch {match.group(1)}'

    message = re.sub(r"\bseconds\[(\d+)\]", measurement, message)
    message = re.sub(r"\bhalf_life\b", "--half-life", message)
    message = re.sub(r"\bmicro_batches and seconds\b", '"lengths" and "seconds"', message)
    return re.sub(r"\bmicro_batches\b", "the measured micro-batches", message)


def _read_log_file(file: str) -> tuple[list[list[int]], list[float]]:
    return _read_text_input(
        file, lambda stream: _read_log(stream, file), what="a log of measured micro-batches"
    )


def load_time_cost(file: str) -> TimeCost:
    """The `TimeCost` saved in ``file`` (by ``calibrate --out`` or ``TimeCost.to_dict``), or a
    one-line `InputError` naming the file."""
    path = Path(file)
    check_is_file(path, "a saved time cost")
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_LINE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if _looks_like_log(raw):
        raise InputError(
            f"{path}: looks like a log for seqbalance calibrate (measured micro-batches, JSON "
            f"Lines), not a saved time cost: fit it with seqbalance calibrate {file} --out "
            "time-cost.json and pass --time-cost time-cost.json"
        )
    if len(raw) > MAX_LINE_BYTES:
        raise InputError(f"{path}: too large for a saved time cost")
    data = _json_record(_decode(raw, path, _SAVED_HINT), str(path))
    if data.get("kind") != "seqbalance.TimeCost":
        found = (
            'it has no "kind"'
            if "kind" not in data
            else f'its "kind" is {json.dumps(data["kind"])[:40]}'
        )
        raise InputError(
            f'{path}: not a saved time cost ({found}, not "seqbalance.TimeCost"); '
            "write one with seqbalance calibrate LOG --out FILE.json"
        )
    try:
        with _warnings_said(str(path)):
            return TimeCost.from_dict(data)
    except (ValueError, TypeError) as exc:
        located = render_document(exc) if isinstance(exc, ArgumentError) else None
        raise InputError(f"{path}: {located or _saved_words(str(exc))}") from None


@contextmanager
def _warnings_said(where: str) -> Iterator[None]:
    """What a `TimeCost` warns of inside the block (a poor fit), as one ``warning:`` line each
    on stderr once the block is done."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TimeCostWarning)
        yield
    for text in dict.fromkeys(str(w.message) for w in caught if w.category is TimeCostWarning):
        say(f"warning: {where}: {text}")


def say_extrapolation(cost: Any, lengths: np.ndarray, micro_batch_tokens: int = 0) -> None:
    """A ``warning:`` line on stderr when a ``--time-cost`` split or plan predicts documents
    longer, or micro-batches fuller, than the cost was measured on (the library's own warnings
    are silenced in the command line, which says it here once, of the plan it made)."""
    if not isinstance(cost, TimeCostNanoseconds) or lengths.size == 0:
        return
    longest = int(lengths.max())
    message = cost.time_cost.extrapolation(
        longest_document=longest, micro_batch_tokens=micro_batch_tokens
    )
    if message is not None:
        fullest = f", micro-batches of up to {micro_batch_tokens:,}" if micro_batch_tokens else ""
        say(
            f"warning: {cost.file}: {message} (here: documents of up to {longest:,} tokens{fullest})"
        )


def _looks_like_log(raw: bytes) -> bool:
    """Whether a file's first line is one of `_read_log`'s records, a JSON object with
    ``"lengths"`` or ``"seconds"`` and no ``"kind"``: then the file is a log for ``calibrate``
    rather than the saved cost it makes (which is one indented JSON object, its first line
    ``{``)."""
    first = raw.split(b"\n", 1)[0]
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep or too many digits
        return False
    return (
        isinstance(record, dict)
        and "kind" not in record
        and bool({"lengths", "seconds"} & set(record))
    )


#: What a binary file given to --time-cost should have been.
_SAVED_HINT = " (a saved time cost is JSON text, from seqbalance calibrate --out)"


def _saved_words(message: str) -> str:
    """A `TimeCost.from_dict` message in the file's words: ``data['coefficients']['per_token']``
    is the file's ``"coefficients"."per_token"``, and ``data`` the file itself.

    Example:
        >>> print(_saved_words("data['coefficients']['per_token'] must be a number, got 'x'"))
        "coefficients"."per_token" must be a number, got 'x'
        >>> _saved_words("data has no 'factor' (a saved TimeCost has one)")
        'no "factor" field (a saved TimeCost has one)'
    """
    message = re.sub(r"\bdata has no '(\w+)'", r'no "\1" field', message)
    return re.sub(
        r"\bdata((?:\['\w+'\])+)",
        lambda match: ".".join(f'"{key}"' for key in re.findall(r"'(\w+)'", match.group(1))),
        message,
    )


class TimeCostNanoseconds:
    """``--time-cost``: a sample weighs its predicted seconds, as int64 nanoseconds.

    Integers keep every report and group sum of the command line exact; a nanosecond is far
    below what a GPU's timer resolves.
    """

    #: The flag that sets this cost, for messages.
    flag = "--time-cost"

    def __init__(self, cost: TimeCost, file: str) -> None:
        self.time_cost = cost
        self.file = file
        self.name = f"predicted ns ({Path(file).name})"
        self.unit = "ns"

    def __call__(self, lengths: np.ndarray) -> np.ndarray:
        # The library's weights of a TimeCost, so the command line plans as the library does.
        try:
            return nanoseconds(self.time_cost, lengths)
        except OverflowError as exc:
            raise InputError(str(exc)) from None

    def __str__(self) -> str:
        return self.name


def resolve_time_cost(args: argparse.Namespace) -> None:
    """``args.cost`` from ``--time-cost`` (exclusive with ``--cost`` and ``--model-config``)."""
    if getattr(args, "time_cost", None) is None:
        return
    if args.cost is not None or args.model_config is not None:
        raise InputError("pass only one of --cost, --model-config and --time-cost")
    args.cost = TimeCostNanoseconds(load_time_cost(args.time_cost), args.time_cost)


def _summary(seconds: np.ndarray, tokens: np.ndarray, file: str) -> dict[str, Any]:
    top, mean = float(seconds.max()), float(seconds.mean())
    token_mean = float(tokens.mean())
    return {
        "time_cost": file,
        "per_rank_seconds": seconds.tolist(),
        "max_seconds": top,
        "mean_seconds": mean,
        "imbalance": top / mean if mean > 0 else 1.0,
        "tokens_imbalance": float(tokens.max()) / token_mean if token_mean > 0 else 1.0,
    }


def time_by_rank(cost: Any, tokens: np.ndarray, ids: np.ndarray, k: int) -> dict[str, Any] | None:
    """Predicted seconds per rank of a split (``ids``: each sample's rank), the documents'
    seconds summed; ``None`` when ``cost`` is not a ``--time-cost``."""
    if not isinstance(cost, TimeCostNanoseconds):
        return None
    seconds = np.bincount(ids, weights=cost.time_cost(tokens), minlength=k)
    return _summary(seconds, np.bincount(ids, weights=tokens, minlength=k), cost.file)


def time_by_plan(cost: Any, seconds: np.ndarray, tokens: np.ndarray) -> dict[str, Any] | None:
    """The ``predicted_time`` summary of a plan from each rank's predicted ``seconds`` (what
    `TimeCost.predict` gives its micro-batches, summed: the step model's busy time) and
    ``tokens``; ``None`` when ``cost`` is not a ``--time-cost``."""
    if not isinstance(cost, TimeCostNanoseconds) or seconds.size == 0:
        return None
    return _summary(seconds, tokens.astype(np.float64), cost.file)


def time_lines(summary: dict[str, Any] | None) -> str:
    """The text report's line for a `time_by_rank` / `time_by_plan` summary ('' for None)."""
    if summary is None:
        return ""
    return (
        f"predicted time per rank ({Path(summary['time_cost']).name}): max "
        f"{_format_seconds(summary['max_seconds'])}, mean "
        f"{_format_seconds(summary['mean_seconds'])}, max/mean "
        f"{summary['imbalance']:.4f}; tokens max/mean {summary['tokens_imbalance']:.4f}"
    )
