"""Context parallelism planned per sequence: seqbalance against the published greedy, the
scheduler Megatron-LM ships now (both readings) and one fixed degree, in the time model of the
time-cost spec, each against the spec's lower bound.

    python benches/bench_context_parallel.py [--seeds 3] [--rounds 3]
    python benches/bench_context_parallel.py --scaling [--sizes 25000 50000 100000 200000]
    python benches/bench_context_parallel.py --memory

Long-tail batches: ``n`` lognormal lengths, median ``cap / 6``, sigma 1.2 (a long tail past the
cap), clipped to ``[16, world_size * cap]``, per family ``(world_size, cap, n)``. Moderate
batches: lognormal(9, 1) (median 8,103 tokens), clipped the same way. The cost is a time model of
a Llama-3-8B-shaped model on one H100: ``a·L + b·L²`` seconds per document with
``a = 6 · 7.5e9 FLOPs / 560 TFLOP/s`` and ``b = a / 22,000`` (attention as long as the rest at
22,000 tokens, the spec's measurement). Communication is ring attention fully exposed: each rank
receives the other ``c - 1`` shards' keys and values, ``2 · 8 KV heads · 128 · 2 bytes · 32 layers
= 131,072`` bytes per token, three times over (forward, and backward's keys, values and their
gradients), so ``comm = κ · L · (c - 1) / c`` with ``κ = 3 · 131,072 B / bandwidth`` seconds per
token: NVLink at 450 GB/s or InfiniBand at 50 GB/s.

For each family it prints plan time over the lower bound for seqbalance, seqbalance with one CP
size per step, and the floors: the published greedy (the fastest of its four readings, run
natively; the tests prove it equals the oracle), Megatron-LM's scheduler as shipped (its work
``L² / c``) and judged on the plan's cost (its work ``cost / c + comm``), both run natively (the
tests prove they equal the oracle of ``tests/planning/cp_megatron_oracle.py``), and one fixed
degree (the smallest that fits the longest sequence, for all, placed by the greedy); then
seqbalance over each floor, one size per step over the free plan, and planning times
(milliseconds of process CPU time, best of ``--rounds``). A last table moves κ from 0 to 16 times
InfiniBand's on one family. Every plan is checked against every constraint first.

``--scaling``: planning time (process CPU seconds, one call) with ``cost="tokens"`` and with two
costs that do not grow with the length (random per-sequence weights; ``1e6 / L``, which falls
with it), 8 ranks, cap 16,384, lognormal(9, 1) lengths, at each ``--sizes``. ``--memory``: the
peak memory of one plan (each in a fresh child process, as ``bench_memory.py`` measures) against
the size of the answer's own objects. Under pytest each family runs once on a small batch.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

import seqbalance
from seqbalance import _native
from seqbalance.planning.context_parallel import comm_costs, cp_degrees

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.planning import cp_oracle as oracle  # noqa: E402

from workloads import at_least_one, best_of  # noqa: E402

#: Seconds per token of the linear part, and per squared token of attention.
LINEAR = 6 * 7.5e9 / 560e12
ATTENTION = LINEAR / 22_000
#: Key/value bytes per token over all layers (Llama-3-8B: 8 KV heads of 128, 32 layers, bf16).
KV_BYTES = 2 * 8 * 128 * 2 * 32
LINKS = {"NVLink 450 GB/s": 450e9, "InfiniBand 50 GB/s": 50e9}

#: Long-tail families: (world_size, max_token_len, n).
FAMILIES = [
    (8, 16_384, 512),
    (8, 32_768, 1024),
    (32, 65_536, 1024),
    (64, 131_072, 2048),
    (128, 524_288, 2048),
]
#: Moderate families (lognormal(9, 1)): where a plan has little tail to win on.
MODERATE = [
    (8, 16_384, 512),
    (16, 16_384, 512),
    (32, 32_768, 1024),
]
#: The floors, by the native method that runs each.
MEGATRON = {"shipped": "megatron", "judged": "megatron-judged"}


def time_cost(lengths: np.ndarray) -> np.ndarray:
    """Seconds of forward and backward per document: ``a·L + b·L²``."""
    values = lengths.astype(np.float64)
    return LINEAR * values + ATTENTION * values * values


def kappa(bandwidth: float) -> float:
    """Exposed ring-attention seconds per token and per unit of ``(c - 1) / c``."""
    return 3 * KV_BYTES / bandwidth


def batch(world_size: int, cap: int, n: int, seed: int, moderate: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if moderate:
        raw = rng.lognormal(9.0, 1.0, n).astype(np.int64)
    else:
        raw = rng.lognormal(math.log(cap / 6), 1.2, n).astype(np.int64)
    return np.clip(raw, 16, world_size * cap)


def native(lengths, weights, table, degrees, world_size, cap, method):
    """``(steps, time)`` of one native method."""
    steps, time_, _ = _native._plan_context_parallel(
        lengths,
        weights,
        table.reshape(-1),
        np.asarray(degrees, np.int64),
        world_size,
        cap,
        method,
    )
    return steps, time_


def native_greedy(lengths, weights, table, degrees, world_size, cap):
    """The fastest greedy reading: ``(steps, time)``."""
    plans = [
        native(lengths, weights, table, degrees, world_size, cap, reading)
        for reading in oracle.READINGS
    ]
    return min(plans, key=lambda plan: plan[1])


def compare(lengths: np.ndarray, world_size: int, cap: int, comm: float, rounds: int) -> dict:
    """Plan times over the bound, step counts, planning milliseconds and mean degrees."""
    degrees = cp_degrees(world_size)
    weights = time_cost(lengths)
    table = comm_costs(lengths, degrees, comm)
    listed, weight_list = lengths.tolist(), weights.tolist()

    def comm_of(i: int, c: int) -> float:
        return float(table[i, degrees.index(c)])

    def plan(one_size: bool = False):
        return seqbalance.plan_context_parallel(
            lengths, world_size, cap, cost=time_cost, comm=comm, one_cp_size_per_step=one_size
        )

    bound = oracle.lower_bound(listed, weight_list, comm_of, world_size, cap, degrees)
    widest = max(lengths.max(), 1)
    fixed_degree = next(c for c in degrees if -(-int(widest) // c) <= cap)
    fixed_table = table[:, [degrees.index(fixed_degree)]]
    runs = {
        "seqbalance": (lambda: plan(), degrees),
        "one size": (lambda: plan(True), degrees),
        "greedy": (
            lambda: native_greedy(lengths, weights, table, degrees, world_size, cap)[0],
            degrees,
        ),
        **{
            name: (
                lambda method=method: native(
                    lengths, weights, table, degrees, world_size, cap, method
                )[0],
                degrees,
            )
            for name, method in MEGATRON.items()
        },
        "fixed": (
            lambda: native_greedy(lengths, weights, fixed_table, [fixed_degree], world_size, cap)[
                0
            ],
            [fixed_degree],
        ),
    }
    results = {}
    for name, (run, allowed) in runs.items():
        steps = run()
        oracle.check_plan(steps, listed, world_size, cap, allowed)
        tokens = sum(listed[i] * c for step in steps for c, _, group in step for i in group)
        results[name] = {
            "ratio": oracle.plan_time(steps, weight_list, comm_of) / bound,
            "steps": len(steps),
            "degree": tokens / max(sum(listed), 1),
        }
        if name == "one size":
            assert all(len({c for c, _, _ in step}) == 1 for step in steps)
        if rounds:
            results[name]["ms"] = 1e3 * best_of(run, rounds, clock=time.process_time)
    for floor in ("greedy", *MEGATRON):
        assert results["seqbalance"]["ratio"] <= results[floor]["ratio"], floor
    assert results["one size"]["ratio"] <= results["fixed"]["ratio"]
    assert results["seqbalance"]["ratio"] <= results["one size"]["ratio"]
    results["fixed"]["cp"] = fixed_degree
    return results


def test_every_family_plans_validly():
    for world_size, cap, _ in FAMILIES:
        lengths = batch(world_size, cap, 96, 0)
        compare(lengths, world_size, cap, kappa(50e9), rounds=0)
    for world_size, cap, _ in MODERATE:
        compare(batch(world_size, cap, 96, 0, moderate=True), world_size, cap, kappa(50e9), 0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=at_least_one, default=3, help="batches per family")
    parser.add_argument(
        "--rounds", type=at_least_one, default=3, help="timed calls per plan (the best counts)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--scaling",
        action="store_true",
        help="planning time against the number of sequences, for costs that do not follow it",
    )
    mode.add_argument(
        "--memory", action="store_true", help="peak memory of a plan against its answer's size"
    )
    parser.add_argument(
        "--sizes",
        type=at_least_one,
        nargs="+",
        default=[25_000, 50_000, 100_000, 200_000],
        help="numbers of sequences for --scaling",
    )
    return parser.parse_args(argv)


def test_no_seeds_or_rounds_is_refused_by_name(capsys):
    for option in ("--seeds", "--rounds", "--sizes"):
        for value in ("0", "-2", "x"):
            try:
                parse_args([option, value])
            except SystemExit as error:
                assert error.code == 2
            else:
                raise AssertionError(f"{option} {value} was accepted")
            assert f"argument {option}: must be an int >= 1" in capsys.readouterr().err
    assert parse_args(["--rounds", "1"]).rounds == 1
    assert parse_args(["--scaling", "--sizes", "10", "20"]).sizes == [10, 20]


def family_tables(families, moderate: bool, bandwidth: float, seeds: int, rounds: int) -> None:
    """Plan time over the bound per family, then seqbalance over each floor and the timings."""
    header = (
        "| ranks | cap | n | seqbalance | one size per step | greedy (best reading) | "
        "Megatron-LM (shipped) | Megatron-LM (judged) | fixed CP |"
    )
    print(header)
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for world_size, cap, n in families:
        runs = [
            compare(
                batch(world_size, cap, n, seed, moderate),
                world_size,
                cap,
                kappa(bandwidth),
                rounds,
            )
            for seed in range(seeds)
        ]
        rows.append((world_size, cap, n, runs))

        def mean(name: str, key: str, runs=runs) -> float:
            return float(np.mean([run[name][key] for run in runs]))

        print(
            f"| {world_size} | {cap // 1024}k | {n} | {mean('seqbalance', 'ratio'):.3f} | "
            f"{mean('one size', 'ratio'):.3f} | {mean('greedy', 'ratio'):.3f} | "
            f"{mean('shipped', 'ratio'):.3f} | {mean('judged', 'ratio'):.3f} | "
            f"{mean('fixed', 'ratio'):.3f} (CP={runs[0]['fixed']['cp']}) |"
        )
    print()
    print(
        "| ranks | cap | n | sb / greedy | sb / shipped | sb / judged | one size / sb | "
        "steps (sb / shipped) | planning ms (sb / one size / greedy x4 / shipped / judged) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    gains: dict[str, list[float]] = {"greedy": [], "shipped": [], "judged": [], "one size": []}
    for world_size, cap, n, runs in rows:

        def ratio(name: str, over: str = "seqbalance", runs=runs) -> float:
            if name == "one size":
                return float(np.mean([r[name]["ratio"] / r[over]["ratio"] for r in runs]))
            return float(np.mean([r[over]["ratio"] / r[name]["ratio"] for r in runs]))

        def mean(name: str, key: str, runs=runs) -> float:
            return float(np.mean([run[name][key] for run in runs]))

        for name in gains:
            gains[name].append(ratio(name))
        timing = " / ".join(
            f"{mean(name, 'ms'):.1f}"
            for name in ("seqbalance", "one size", "greedy", "shipped", "judged")
        )
        print(
            f"| {world_size} | {cap // 1024}k | {n} | {ratio('greedy'):.3f} | "
            f"{ratio('shipped'):.3f} | {ratio('judged'):.3f} | {ratio('one size'):.3f} | "
            f"{mean('seqbalance', 'steps'):.1f} / {mean('shipped', 'steps'):.1f} | {timing} |"
        )
    print(
        f"\nmean over the families: seqbalance / greedy {np.mean(gains['greedy']):.3f}, "
        f"/ Megatron-LM shipped {np.mean(gains['shipped']):.3f}, / judged "
        f"{np.mean(gains['judged']):.3f}; one size per step / seqbalance "
        f"{np.mean(gains['one size']):.3f}"
    )


def main_tables(seeds: int, rounds: int) -> None:
    print(
        f"build: {_native.build_profile()}; plan time / lower bound, mean of {seeds} batches; "
        f"planning in ms of process CPU time, best of {rounds}"
    )
    for link, bandwidth in LINKS.items():
        print(f"\n## {link}: kappa = {kappa(bandwidth):.3g} s/token\n")
        print("Long-tail batches (lognormal, median cap / 6, sigma 1.2):\n")
        family_tables(FAMILIES, False, bandwidth, seeds, rounds)
        print("\nModerate batches (lognormal(9, 1)):\n")
        family_tables(MODERATE, True, bandwidth, seeds, rounds)
    world_size, cap, n = FAMILIES[2]
    print(f"\nAs communication grows ({world_size} ranks, cap {cap // 1024}k, n {n}, seed 0):\n")
    print(
        "| kappa (x InfiniBand) | seqbalance / bound | greedy / bound | shipped / bound | "
        "mean degree (sb / greedy / shipped) | steps (sb / greedy / shipped) |"
    )
    print("|---|---|---|---|---|---|")
    lengths = batch(world_size, cap, n, 0)
    for factor in (0, 0.25, 1, 4, 16):
        run = compare(lengths, world_size, cap, factor * kappa(50e9), rounds=0)
        sb, gr, sh = run["seqbalance"], run["greedy"], run["shipped"]
        print(
            f"| {factor:g} | {sb['ratio']:.3f} | {gr['ratio']:.3f} | {sh['ratio']:.3f} | "
            f"{sb['degree']:.2f} / {gr['degree']:.2f} / {sh['degree']:.2f} | "
            f"{sb['steps']} / {gr['steps']} / {sh['steps']} |"
        )


def scaling_lengths(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.clip(rng.lognormal(9.0, 1.0, n).astype(np.int64), 1, 8 * 16_384)


#: Costs for --scaling: the default, and two that do not grow with the length.
SCALING_COSTS = {
    "tokens": lambda lengths: "tokens",
    "random weights": lambda lengths: np.random.default_rng(1).random(lengths.size),
    "1e6 / L (falls with L)": lambda lengths: 1e6 / lengths.astype(np.float64),
}


def scaling(sizes: list[int]) -> None:
    print(
        f"build: {_native.build_profile()}; planning time (process CPU seconds, one call), "
        "8 ranks, cap 16,384, lognormal(9, 1), comm=None\n"
    )
    names = list(SCALING_COSTS)
    print("| sequences | " + " | ".join(names) + " | random / tokens |")
    print("|---|" + "---|" * (len(names) + 1))
    for n in sizes:
        lengths = scaling_lengths(n)
        seconds = []
        for make in SCALING_COSTS.values():
            cost = make(lengths)
            start = time.process_time()
            seqbalance.plan_context_parallel(lengths, 8, 16_384, cost=cost)
            seconds.append(time.process_time() - start)
        print(
            f"| {n:,} | " + " | ".join(f"{s:.2f}" for s in seconds) + f" | "
            f"{seconds[1] / seconds[0]:.2f} |"
        )


def test_scaling_costs_plan_validly():
    lengths = scaling_lengths(300)
    for make in SCALING_COSTS.values():
        plan = seqbalance.plan_context_parallel(lengths, 8, 16_384, cost=make(lengths))
        oracle.check_plan(plan, lengths.tolist(), 8, 16_384, [1, 2, 4, 8])


#: The child of --memory: one plan in a fresh process, its peak against its answer's objects.
MEMORY_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import seqbalance

    n, world_size, cap, kind = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    comm = None if sys.argv[5] == "None" else float(sys.argv[5])

    def hwm():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024

    if kind == "ones":
        lengths = np.ones(n, dtype=np.int64)
    else:
        rng = np.random.default_rng(0)
        lengths = np.clip(rng.lognormal(np.log(cap / 6), 1.2, n).astype(np.int64), 16, world_size * cap)
    seqbalance.plan_context_parallel([5, 9], 2, 8)
    before = hwm()
    plan = seqbalance.plan_context_parallel(lengths, world_size, cap, comm=comm)
    peak = hwm() - before
    seen = set()
    own = sys.getsizeof(plan)
    for step in plan:
        own += sys.getsizeof(step)
        for group in step:
            own += sum(sys.getsizeof(part) for part in group)
            for number in (*group[1], *group[2], group[0]):
                if id(number) not in seen:
                    seen.add(id(number))
                    own += sys.getsizeof(number)
    print(json.dumps({"steps": len(plan), "peak": peak, "answer": own}))
    """
)

#: (label, n, world_size, cap, kind, comm) for --memory: the two plans over many ranks that once
#: took 1.6 and 2 GB (every sequence alone over every rank, as no communication makes best),
#: and long tails over few ranks, where the planner's own arrays (per sequence and per allowed
#: degree) outweigh the answer.
MEMORY_CASES = [
    ("10 one-token sequences, 2**22 ranks, comm=None", 10, 2**22, 1, "ones", None),
    ("5,000 one-token sequences, 16,384 ranks, comm=None", 5_000, 16_384, 1, "ones", None),
    ("100,000 long-tail sequences, 8 ranks (4 degrees)", 100_000, 8, 16_384, "long tail", 0.05),
    ("100,000 long-tail sequences, 64 ranks (7 degrees)", 100_000, 64, 131_072, "long tail", 0.05),
    (
        "100,000 long-tail sequences, 1,024 ranks (11 degrees)",
        100_000,
        1024,
        131_072,
        "long tail",
        0.05,
    ),
]


def memory_case(n: int, world_size: int, cap: int, kind: str, comm: float | None) -> dict:
    arguments = [str(n), str(world_size), str(cap), kind, str(comm)]
    child = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, *arguments], capture_output=True, text=True, check=True
    )
    return json.loads(child.stdout)


def memory() -> None:
    print(
        f"build: {_native.build_profile()}; peak resident memory of one plan (VmHWM, fresh "
        "child process) against the answer's own objects (lists, tuples, distinct ints)\n"
    )
    print("| plan | steps | answer MB | peak MB | peak / answer | (peak - answer) / sequence |")
    print("|---|---|---|---|---|---|")
    for label, n, world_size, cap, kind, comm in MEMORY_CASES:
        run = memory_case(n, world_size, cap, kind, comm)
        print(
            f"| {label} | {run['steps']:,} | {run['answer'] / 1e6:.0f} | {run['peak'] / 1e6:.0f} "
            f"| {run['peak'] / run['answer']:.2f} | "
            f"{(run['peak'] - run['answer']) / n:,.0f} B |"
        )


def test_memory_child_measures_a_small_plan():
    run = memory_case(64, 256, 1, "ones", None)
    assert run["steps"] >= 1 and run["answer"] > 256 * 8 and run["peak"] >= 0


def main() -> None:
    args = parse_args()
    if args.scaling:
        scaling(args.sizes)
    elif args.memory:
        memory()
    else:
        main_tables(args.seeds, args.rounds)


if __name__ == "__main__":
    main()
