"""Refinement report: how far each answer is from the best possible, and what refining costs.

    python benches/refine_report.py            # full tables (about a minute)
    python benches/refine_report.py --quick    # fewer cases per shape

Inputs are RL-like batches: lognormal response lengths (median 8000 tokens) of which about a
tenth hit the 32768-token generation cap. For small shapes (at most 16 items) every answer is
compared with the exact optimum, found here by a plain-Python branch and bound that shares no code
with the Rust engine; the table gives each method's mean excess of the maximum load over it. For
larger shapes it gives the mean reduction of the maximum load against the reference answer
(``refine=False``), the time of each step (``refine_partitions`` on a given partition), and of
one ``get_seqlen_balanced_partitions(..., refine=True)`` call, which is what callers pay. Times are sums of per-call ``time.perf_counter``
measurements (best of three per call), in one process.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

import seqbalance
from seqbalance import _native, get_seqlen_balanced_partitions, refine_partitions

CAP = 32_768

#: (items per rank, ranks) solved exactly: at most 16 items.
SMALL_SHAPES = [(2, 4), (2, 8), (3, 4), (4, 2), (4, 3), (4, 4), (6, 2), (8, 2)]
#: (items per rank, ranks) compared against the reference only.
LARGE_SHAPES = [
    (4, 8),
    (8, 8),
    (12, 8),
    (4, 16),
    (8, 16),
    (12, 16),
    (32, 64),
    (256, 64),
    (16384, 64),
]


def rl_batch(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` RL-like lengths: lognormal (median 8000), about 10 % clipped at the 32768 cap."""
    lengths = rng.lognormal(mean=np.log(8000), sigma=1.1, size=n)
    return np.clip(np.rint(lengths), 1, CAP).astype(np.int64)


def max_load(values: np.ndarray, partitions: Sequence[Sequence[int]]) -> int:
    return max(int(values[np.asarray(part, dtype=np.intp)].sum()) for part in partitions)


def optimum(values: Sequence[int], k: int, equal_size: bool, upper: int) -> int:
    """Smallest possible maximum load, given a partition with maximum load ``upper``.

    Depth-first over items by size descending, each tried on partitions by load ascending; a branch
    is cut when an item would reach the best maximum so far, when the room left under it cannot hold
    the remaining items, or (counts free) when too few items are left to fill the empty partitions.
    Partitions with equal load and count are interchangeable, so only one of them is tried.
    """
    items = sorted((int(v) for v in values), reverse=True)
    n = len(items)
    capacity = n // k if equal_size else n
    remaining = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        remaining[i] = remaining[i + 1] + items[i]
    lower = max(-(-remaining[0] // k), items[0])
    if equal_size:
        # The largest item shares its partition with at least capacity - 1 others.
        lower = max(lower, items[0] + sum(items[n - capacity + 1 :]))
    loads = [0] * k
    counts = [0] * k
    best = upper

    def search(i: int) -> None:
        nonlocal best
        if best <= lower:
            return
        if i == n:
            best = max(loads)
            return
        limit = best - 1
        room = sum(limit - loads[p] for p in range(k) if counts[p] < capacity)
        if room < remaining[i]:
            return
        if not equal_size and counts.count(0) > n - i:
            return
        value = items[i]
        seen = set()
        for p in sorted(range(k), key=loads.__getitem__):
            if counts[p] >= capacity or loads[p] + value > limit:
                continue
            shape = (loads[p], counts[p] if equal_size else counts[p] > 0)
            if shape in seen:
                continue
            seen.add(shape)
            loads[p] += value
            counts[p] += 1
            search(i + 1)
            loads[p] -= value
            counts[p] -= 1

    search(0)
    return best


def best_of_three(function: Callable, *args, **kwargs):
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        result = function(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return result, best


def small_table(cases: int, equal_size: bool) -> list[dict]:
    rows = []
    for per_rank, ranks in SMALL_SHAPES:
        rng = np.random.default_rng(1000 * per_rank + ranks)
        excess = {"reference": [], "refine": [], "exact": []}
        for _ in range(cases):
            values = rl_batch(rng, per_rank * ranks)
            start = get_seqlen_balanced_partitions(values, ranks, equal_size)
            answers = {
                "reference": start,
                "refine": refine_partitions(values, start, equal_size=equal_size),
                "exact": refine_partitions(values, start, equal_size=equal_size, search="exact"),
            }
            maxima = {name: max_load(values, parts) for name, parts in answers.items()}
            best = optimum(values.tolist(), ranks, equal_size, min(maxima.values()) + 1)
            for name, value in maxima.items():
                assert value >= best, f"{name} beat the optimum: {value} < {best}"
                excess[name].append(value / best - 1)
        means = {name: float(np.mean(v)) for name, v in excess.items()}
        rows.append({"shape": (per_rank, ranks), **means})
    return rows


def large_table(cases: int, equal_size: bool) -> list[dict]:
    rows = []
    for per_rank, ranks in LARGE_SHAPES:
        rng = np.random.default_rng(7 * per_rank + ranks)
        n_cases = max(1, min(cases, 2_000_000 // (per_rank * ranks)))
        reduction = {"refine": [], "exact": []}
        improved = {"refine": 0, "exact": 0}
        seconds = {"partition": 0.0, "refine": 0.0, "exact": 0.0, "together": 0.0}
        for _ in range(n_cases):
            values = rl_batch(rng, per_rank * ranks)
            start, t = best_of_three(get_seqlen_balanced_partitions, values, ranks, equal_size)
            seconds["partition"] += t
            # What callers pay: partition and refine in one call.
            _, t = best_of_three(
                get_seqlen_balanced_partitions, values, ranks, equal_size, refine=True
            )
            seconds["together"] += t
            before = max_load(values, start)
            for name, mode in (("refine", True), ("exact", "exact")):
                refined, t = best_of_three(
                    refine_partitions, values, start, equal_size=equal_size, refine=mode
                )
                seconds[name] += t
                after = max_load(values, refined)
                assert after <= before
                reduction[name].append(1 - after / before)
                improved[name] += after < before
        rows.append(
            {
                "shape": (per_rank, ranks),
                "cases": n_cases,
                **{f"{k}_reduction": float(np.mean(v)) for k, v in reduction.items()},
                **{f"{k}_improved": v for k, v in improved.items()},
                **{f"{k}_ms": 1000 * v / n_cases for k, v in seconds.items()},
            }
        )
    return rows


def print_small(rows: list[dict], equal_size: bool) -> None:
    print(f"\nMean excess of the maximum load over the exact optimum (equal_size={equal_size})\n")
    print('| items/rank x ranks | reference | refine=True | refine="exact" |')
    print("|---|---|---|---|")
    for row in rows:
        per_rank, ranks = row["shape"]
        print(
            f"| {per_rank} x {ranks} | {100 * row['reference']:.3f} % | "
            f"{100 * row['refine']:.3f} % | {100 * row['exact']:.3f} % |"
        )
    means = {k: np.mean([row[k] for row in rows]) for k in ("reference", "refine", "exact")}
    print(
        f"| **all** | {100 * means['reference']:.3f} % | {100 * means['refine']:.3f} % | "
        f"{100 * means['exact']:.3f} % |"
    )


def print_large(rows: list[dict], equal_size: bool) -> None:
    print(
        "\nMaximum load reduction against the reference, and time per call "
        f"(equal_size={equal_size})\n"
    )
    print(
        "| items/rank x ranks | cases | refine=True: reduction (lower in) | "
        'refine="exact": reduction (lower in) | partition ms | +refine ms | +exact ms | '
        "partition(refine=True) ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        per_rank, ranks = row["shape"]
        print(
            f"| {per_rank} x {ranks} | {row['cases']} | "
            f"{100 * row['refine_reduction']:.3f} % ({row['refine_improved']}) | "
            f"{100 * row['exact_reduction']:.3f} % ({row['exact_improved']}) | "
            f"{row['partition_ms']:.3f} | {row['refine_ms']:.3f} | {row['exact_ms']:.3f} | "
            f"{row['together_ms']:.3f} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases per shape")
    args = parser.parse_args(argv)
    if _native.build_profile() != "release":
        print("seqbalance is a debug build; run `maturin develop --release` first", file=sys.stderr)
        return 2
    small_cases, large_cases = (40, 10) if args.quick else (200, 50)
    print(f"seqbalance {seqbalance.__version__}, {small_cases} cases per small shape")
    for equal_size in (True, False):
        print_small(small_table(small_cases, equal_size), equal_size)
    for equal_size in (True, False):
        print_large(large_table(large_cases, equal_size), equal_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
