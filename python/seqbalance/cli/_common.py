"""What the command line's sub-commands share: exit statuses, the parser class, argument types."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from .._inputs import MAX_COUNT, EqualSize

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
