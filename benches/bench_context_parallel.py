"""Context parallelism planned per sequence: seqbalance against the published greedy and one fixed
degree, in the time model of the time-cost spec, each against the spec's lower bound.

    python benches/bench_context_parallel.py [--seeds 3] [--rounds 3]

Batches: ``n`` lognormal lengths, median ``cap / 6``, sigma 1.2 (a long tail past the cap),
clipped to ``[16, world_size * cap]``, per family ``(world_size, cap, n)``. The cost is a time
model of a Llama-3-8B-shaped model on one H100: ``a·L + b·L²`` seconds per document with
``a = 6 · 7.5e9 FLOPs / 560 TFLOP/s`` and ``b = a / 22,000`` (attention as long as the rest at
22,000 tokens, the spec's measurement). Communication is ring attention fully exposed: each rank
receives the other ``c - 1`` shards' keys and values, ``2 · 8 KV heads · 128 · 2 bytes · 32 layers
= 131,072`` bytes per token, three times over (forward, and backward's keys, values and their
gradients), so ``comm = κ · L · (c - 1) / c`` with ``κ = 3 · 131,072 B / bandwidth`` seconds per
token: NVLink at 450 GB/s or InfiniBand at 50 GB/s.

For each family it prints plan time over the lower bound for seqbalance, the greedy (the fastest of
its four readings, run natively; the tests prove it equals the oracle) and one fixed degree (the
smallest that fits the longest sequence, for all, placed by the greedy), the step counts, and the
planning time (milliseconds, best of ``--rounds``). A second table moves κ from 0 to 16 times
InfiniBand's on one family: how the plan's degrees move as communication grows. Every plan is
checked against every constraint first. Under pytest each family runs once on a small batch.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import math
import sys
from pathlib import Path

import numpy as np

import seqbalance
from seqbalance import _native
from seqbalance.planning.context_parallel import comm_costs, cp_degrees

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.planning import cp_oracle as oracle  # noqa: E402

from workloads import best_of  # noqa: E402

#: Seconds per token of the linear part, and per squared token of attention.
LINEAR = 6 * 7.5e9 / 560e12
ATTENTION = LINEAR / 22_000
#: Key/value bytes per token over all layers (Llama-3-8B: 8 KV heads of 128, 32 layers, bf16).
KV_BYTES = 2 * 8 * 128 * 2 * 32
LINKS = {"NVLink 450 GB/s": 450e9, "InfiniBand 50 GB/s": 50e9}

#: (world_size, max_tokens_per_rank, n)
FAMILIES = [
    (8, 16_384, 512),
    (8, 32_768, 1024),
    (32, 65_536, 1024),
    (64, 131_072, 2048),
    (128, 524_288, 2048),
]


def time_cost(lengths: np.ndarray) -> np.ndarray:
    """Seconds of forward and backward per document: ``a·L + b·L²``."""
    values = lengths.astype(np.float64)
    return LINEAR * values + ATTENTION * values * values


def kappa(bandwidth: float) -> float:
    """Exposed ring-attention seconds per token and per unit of ``(c - 1) / c``."""
    return 3 * KV_BYTES / bandwidth


def batch(world_size: int, cap: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(math.log(cap / 6), 1.2, n).astype(np.int64)
    return np.clip(raw, 16, world_size * cap)


def native_greedy(lengths, weights, table, degrees, world_size, cap):
    """The fastest greedy reading: ``(steps, time)``."""
    best = None
    for reading in oracle.READINGS:
        steps, time, _ = _native._plan_context_parallel(
            lengths,
            weights,
            table.reshape(-1),
            np.asarray(degrees, np.int64),
            world_size,
            cap,
            reading,
        )
        if best is None or time < best[1]:
            best = (steps, time)
    return best


def compare(lengths: np.ndarray, world_size: int, cap: int, comm: float, rounds: int) -> dict:
    """Plan times over the bound, step counts, planning milliseconds and mean degrees."""
    degrees = cp_degrees(world_size)
    weights = time_cost(lengths)
    table = comm_costs(lengths, degrees, comm)
    listed, weight_list = lengths.tolist(), weights.tolist()

    def comm_of(i: int, c: int) -> float:
        return float(table[i, degrees.index(c)])

    bound = oracle.lower_bound(listed, weight_list, comm_of, world_size, cap, degrees)
    plan = seqbalance.plan_context_parallel(lengths, world_size, cap, cost=time_cost, comm=comm)
    greedy, _ = native_greedy(lengths, weights, table, degrees, world_size, cap)
    widest = max(lengths.max(), 1)
    fixed_degree = next(c for c in degrees if -(-int(widest) // c) <= cap)
    fixed_table = table[:, [degrees.index(fixed_degree)]]
    fixed, _ = native_greedy(lengths, weights, fixed_table, [fixed_degree], world_size, cap)
    results = {}
    for name, steps, allowed in (
        ("seqbalance", plan, degrees),
        ("greedy", greedy, degrees),
        ("fixed", fixed, [fixed_degree]),
    ):
        oracle.check_plan(steps, listed, world_size, cap, allowed)
        tokens = sum(listed[i] * c for step in steps for c, _, group in step for i in group)
        results[name] = {
            "ratio": oracle.plan_time(steps, weight_list, comm_of) / bound,
            "steps": len(steps),
            "degree": tokens / max(sum(listed), 1),
        }
    assert results["seqbalance"]["ratio"] <= results["greedy"]["ratio"]
    if rounds:
        results["seqbalance"]["ms"] = 1e3 * best_of(
            lambda: seqbalance.plan_context_parallel(
                lengths, world_size, cap, cost=time_cost, comm=comm
            ),
            rounds,
        )
        results["greedy"]["ms"] = 1e3 * best_of(
            lambda: native_greedy(lengths, weights, table, degrees, world_size, cap), rounds
        )
        results["fixed"]["ms"] = 1e3 * best_of(
            lambda: native_greedy(lengths, weights, fixed_table, [fixed_degree], world_size, cap),
            rounds,
        )
    results["fixed"]["cp"] = fixed_degree
    return results


def test_every_family_plans_validly():
    for world_size, cap, _ in FAMILIES:
        lengths = batch(world_size, cap, 96, 0)
        compare(lengths, world_size, cap, kappa(50e9), rounds=0)


def at_least_one(text: str) -> int:
    """An argparse type: an int >= 1 (no batch, or no timed round, leaves nothing to report)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=at_least_one, default=3, help="batches per family")
    parser.add_argument(
        "--rounds", type=at_least_one, default=3, help="timed calls per plan (the best counts)"
    )
    return parser.parse_args(argv)


def test_no_seeds_or_rounds_is_refused_by_name(capsys):
    for option in ("--seeds", "--rounds"):
        for value in ("0", "-2", "x"):
            try:
                parse_args([option, value])
            except SystemExit as error:
                assert error.code == 2
            else:
                raise AssertionError(f"{option} {value} was accepted")
            assert f"argument {option}: must be an int >= 1" in capsys.readouterr().err
    assert parse_args(["--rounds", "1"]).rounds == 1


def main() -> None:
    args = parse_args()
    print(
        f"build: {_native.build_profile()}; plan time / lower bound, mean of {args.seeds} batches"
    )
    for link, bandwidth in LINKS.items():
        print(f"\n{link}: kappa = {kappa(bandwidth):.3g} s/token\n")
        print(
            "| ranks | cap | n | seqbalance | greedy (best reading) | fixed CP | "
            "seqbalance / greedy | steps (sb / greedy / fixed) | planning ms (sb / greedy x4 / fixed x4) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        gains = []
        for world_size, cap, n in FAMILIES:
            runs = [
                compare(
                    batch(world_size, cap, n, seed), world_size, cap, kappa(bandwidth), args.rounds
                )
                for seed in range(args.seeds)
            ]

            def mean(name: str, key: str, runs=runs) -> float:
                return float(np.mean([run[name][key] for run in runs]))

            gain = float(np.mean([r["seqbalance"]["ratio"] / r["greedy"]["ratio"] for r in runs]))
            gains.append(gain)
            print(
                f"| {world_size} | {cap // 1024}k | {n} | {mean('seqbalance', 'ratio'):.3f} | "
                f"{mean('greedy', 'ratio'):.3f} | {mean('fixed', 'ratio'):.3f} "
                f"(CP={runs[0]['fixed']['cp']}) | {gain:.3f} | "
                f"{mean('seqbalance', 'steps'):.1f} / {mean('greedy', 'steps'):.1f} / "
                f"{mean('fixed', 'steps'):.1f} | {mean('seqbalance', 'ms'):.1f} / "
                f"{mean('greedy', 'ms'):.1f} / {mean('fixed', 'ms'):.1f} |"
            )
        print(f"\nmean seqbalance / greedy over the families: {np.mean(gains):.3f}")
    world_size, cap, n = FAMILIES[2]
    print(f"\nAs communication grows ({world_size} ranks, cap {cap // 1024}k, n {n}, seed 0):\n")
    print(
        "| kappa (x InfiniBand) | seqbalance / bound | greedy / bound | mean degree (sb / greedy) | steps (sb / greedy) |"
    )
    print("|---|---|---|---|---|")
    lengths = batch(world_size, cap, n, 0)
    for factor in (0, 0.25, 1, 4, 16):
        run = compare(lengths, world_size, cap, factor * kappa(50e9), rounds=0)
        sb, gr = run["seqbalance"], run["greedy"]
        print(
            f"| {factor:g} | {sb['ratio']:.3f} | {gr['ratio']:.3f} | {sb['degree']:.2f} / "
            f"{gr['degree']:.2f} | {sb['steps']} / {gr['steps']} |"
        )


if __name__ == "__main__":
    main()
