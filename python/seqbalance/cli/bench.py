"""``seqbalance bench``: the native partitioner against the pure-Python reference over a grid."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import reference
from ..partition import get_seqlen_balanced_partitions
from ._common import (
    _equal_size,
    _format_seconds,
    shown,
)
from .readers import (
    InputError,
    synthetic_rl_batch,
)


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
        reason = getattr(exc, "strerror", None) or " ".join(str(exc).split())
        raise InputError(f"{path}: cannot write the plot ({reason})") from None
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
                    # partition --json's name for the same fact; "same" kept for 0.1 scripts.
                    "same_as_reference": native == slow,
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
        print(
            f"get_seqlen_balanced_partitions, equal_size={shown(equal_size)}, best of {args.repeat}"
        )
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
