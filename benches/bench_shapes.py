"""The micro-batch planners under shape limits and float costs, against numpy.sort in one run.

    python benches/bench_shapes.py [--cpu-time] [--rounds 3]

Workload: int64 lengths ``min(int(lognormal(7, 1)) + 1, 32768)`` (the planning spec's), n = 2^17,
cap 32,768; ``plan_dp_micro_batches`` at n = 2^17 over dp = 8 ranks. For each option (no limit,
``max_sequences`` 16 and 8, ``footprint="padded"``, 4 keys drawn at random, a float64 cost) it
prints the time as a ratio of ``numpy.sort`` of the same lengths, the micro-batch count beside
first-fit decreasing's under the same limits (the most the planner may use once the plain plan
breaks a limit), and the balance: the heaviest micro-batch's cost over the mean (by verl's
workload; by the float cost itself in its row). A second table packs the same batch with
``pack_sequences`` ("ffd", "bfd") under each limit: pack counts and time against numpy.sort. Every plan is
checked against its limits before it is timed. Under pytest (benchmarks disabled) each case runs
once on a small batch and is checked.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import time
from typing import Any

import numpy as np
import pytest

import seqbalance
from workloads import best_of

N, CAP, DP = 2**17, 32_768, 8


def workload(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(mean=7.0, sigma=1.0, size=n)
    return np.minimum(raw.astype(np.int64) + 1, 32_768)


def cases(lengths: np.ndarray) -> dict[str, dict[str, Any]]:
    keys = np.random.default_rng(1).integers(0, 4, lengths.size)
    flops = seqbalance.TransformerCost(hidden_size=4096)(lengths) * 1.000001
    return {
        "no limit": {},
        "max_sequences=16": {"max_sequences": 16},
        "max_sequences=8": {"max_sequences": 8},
        "footprint=padded": {"footprint": "padded"},
        "keys (4)": {"keys": keys},
        "float64 cost": {"cost": flops},
    }


def check(plan: list[list[int]], lengths: np.ndarray, options: dict[str, Any]) -> None:
    """Every micro-batch keeps the cap and the limits of ``options``."""
    limit = options.get("max_sequences")
    keys = options.get("keys")
    for mb in plan:
        if not mb:
            continue
        footprint = (
            len(mb) * int(lengths[mb].max())
            if options.get("footprint") == "padded"
            else int(lengths[mb].sum())
        )
        assert footprint <= CAP
        assert limit is None or len(mb) <= limit
        assert keys is None or np.unique(keys[mb]).size == 1


def check_dp(plan: list[list[list[int]]], lengths: np.ndarray, options: dict[str, Any]) -> None:
    """One count on every rank, each index once, every micro-batch within its limits."""
    assert len({len(rank) for rank in plan}) == 1
    seen = np.sort(np.concatenate([np.asarray(mb, dtype=np.int64) for rank in plan for mb in rank]))
    assert np.array_equal(seen, np.arange(lengths.size))
    for rank in plan:
        check(rank, lengths, options)


def first_fit_count(lengths: np.ndarray, options: dict[str, Any]) -> int:
    pack_options = {k: v for k, v in options.items() if k != "cost"}
    return len(seqbalance.pack_sequences(lengths, CAP, algorithm="ffd", **pack_options))


def balance(plan: list[list[int]], costs: np.ndarray) -> float:
    loads = [float(costs[mb].sum()) for mb in plan if mb]
    return max(loads) / (sum(loads) / len(loads))


@pytest.mark.parametrize("name", list(cases(workload(64))))
def test_each_case_keeps_its_limits(name):
    lengths = workload(3000)
    options = cases(lengths)[name]
    plan = seqbalance.plan_micro_batches(lengths, CAP, **options)
    check_dp([plan], lengths, options)
    check_dp(seqbalance.plan_dp_micro_batches(lengths, 4, CAP, **options), lengths, options)


def report(repeat: int, cpu_time: bool) -> None:
    clock = time.process_time if cpu_time else time.perf_counter
    lengths = workload(N)
    sort = best_of(lambda: np.sort(lengths), max(repeat, 5), clock)
    workloads = np.asarray(seqbalance.calculate_workload(lengths), dtype=np.float64)
    kind = "process CPU time" if cpu_time else "wall time"
    print(f"n = {N:,}, cap {CAP:,}; best of {repeat} ({kind}); numpy.sort {sort * 1e3:.2f} ms")
    print(
        f"{'case':<20} {'plan_micro_batches':>19} {'micro-batches':>14} {'ffd':>7} "
        f"{'heaviest/mean':>14} {f'dp={DP} plan':>12} {'dp count':>9}"
    )
    for name, options in cases(lengths).items():
        plan = seqbalance.plan_micro_batches(lengths, CAP, **options)
        check_dp([plan], lengths, options)
        seconds = best_of(
            lambda o=options: seqbalance.plan_micro_batches(lengths, CAP, **o), repeat, clock
        )
        dp_plan = seqbalance.plan_dp_micro_batches(lengths, DP, CAP, **options)
        check_dp(dp_plan, lengths, options)
        dp_seconds = best_of(
            lambda o=options: seqbalance.plan_dp_micro_batches(lengths, DP, CAP, **o), repeat, clock
        )
        costs = options.get("cost", workloads)
        print(
            f"{name:<20} {seconds / sort:>18.1f}x {len(plan):>14,} "
            f"{first_fit_count(lengths, options):>7,} {balance(plan, np.asarray(costs)):>14.4f} "
            f"{dp_seconds / sort:>11.1f}x {len(dp_plan[0]):>9,}"
        )


def report_packers(repeat: int, cpu_time: bool) -> None:
    """pack_sequences ("ffd", "bfd") under each limit on the same batch: packs and time."""
    clock = time.process_time if cpu_time else time.perf_counter
    lengths = workload(N)
    sort = best_of(lambda: np.sort(lengths), max(repeat, 5), clock)
    print(
        f"\n{'pack_sequences':<20} {'ffd packs':>10} {'x sort':>8} {'bfd packs':>10} {'x sort':>8}"
    )
    for name, options in cases(lengths).items():
        if "cost" in options:
            continue
        row = []
        for algorithm in ("ffd", "bfd"):
            packs = seqbalance.pack_sequences(lengths, CAP, algorithm=algorithm, **options)
            check(packs, lengths, options)
            seconds = best_of(
                lambda a=algorithm, o=options: seqbalance.pack_sequences(
                    lengths, CAP, algorithm=a, **o
                ),
                repeat,
                clock,
            )
            row.append(f"{len(packs):>10,} {seconds / sort:>7.1f}x")
        print(f"{name:<20} {' '.join(row)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-time", action="store_true", help="time process CPU, not wall")
    args = parser.parse_args()
    report(args.rounds, args.cpu_time)
    report_packers(args.rounds, args.cpu_time)
