"""What the command line's sub-commands share: exit statuses, the parser class, argument types."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import numpy as np

from .._inputs import MAX_COUNT, MAX_VALUE, EqualSize
from ..planning.model_cost import ModelCost
from .readers import InputError, read_model_config

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


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


def _equal_size(args: argparse.Namespace) -> EqualSize:
    """``equal_size`` from ``--equal-size`` / ``--nearly-equal`` (argparse keeps them apart)."""
    return "nearly" if args.nearly_equal else args.equal_size


class ModelFlops:
    """``--model-config``: a sample weighs its training FLOPs under the model, as exact int64.

    `ModelCost` as a ``cost=`` gives float64; the command line balances and
    reports the exact integers (`flops`), refusing a sequence whose
    FLOPs pass ``2**63 - 1`` rather than rounding it.
    """

    def __init__(self, model: ModelCost, file: str) -> None:
        self.model = model
        self.name = f"FLOPs ({Path(file).name})"

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


def resolve_cost(args: argparse.Namespace) -> None:
    """``args.cost``: ``--cost`` (``"tokens"`` when not given), or `ModelFlops` for
    ``--model-config``, which excludes ``--cost``."""
    if args.model_config is None:
        args.cost = "tokens" if args.cost is None else args.cost
        return
    if args.cost is not None:
        raise InputError("pass either --cost or --model-config, not both")
    config = read_model_config(args.model_config)
    try:
        model = ModelCost.from_config(config)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{args.model_config}: {exc}") from None
    args.cost = ModelFlops(model, args.model_config)
