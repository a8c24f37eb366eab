"""Planning for the step the trainer runs: the predicted step against today's plan, and the
planning time against today's call.

    python benches/bench_step.py [--seeds 4] [--rounds 3] [--cpu-time] [--only report|timing]

The model is the step spec's (``simulate_step``): a micro-batch takes 5 ms, 0.2 ms per
document, 6.4e-5 s per token and 5.8e-9 s per causal pair (the H100 layer fit of the time-cost
spec scaled to a whole 8B model), the planner given a `TimeCost` fitted to it. Batches (per
rank, so a batch grows with the ranks): long-context SFT, ``min(int(lognormal(9, 1)) + 1,
65536)`` documents, 32 a rank in lockstep (cap 131,072: the spec's 256 documents at 8 ranks)
and 64 a rank in pipelines (cap 65,536: the spec's 256 at 4 ranks); RL, ``min(int(lognormal(8.5,
1.2)) + 1, 32768)`` responses, 64 a rank in lockstep and 128 in pipelines (cap 65,536).

The report: for 8 and 64 ranks, the lockstep step (``sync="micro_batch"``) and the 1F1B step
(4 and 8 stages) of ``plan_dp_micro_batches`` in that mode against today's plan (the default
mode) in the same model: mean, least and most gain over ``--seeds`` batches, and the
micro-batches per rank (today's, then the mode's, means). Figures of a model, not of a GPU.

The timing: the modes' planning time over today's call on the same input (the ratio of the best
of ``--rounds`` calls each), at 2^12 and 2^16 SFT lengths (cap 65,536), 8 and 64 ranks.
Every plan is checked (each index once, the cap, one count for every rank, a step never above
today's) before anything is timed. Under pytest each case runs once on the small batches.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import sys
import time
from pathlib import Path

import numpy as np

from seqbalance import _native, plan_dp_ids, plan_dp_micro_batches, simulate_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.planning.step_oracle import spec_time_cost  # noqa: E402

from workloads import at_least_one, best_of  # noqa: E402

COST = spec_time_cost()
MODES = {
    "lockstep": {"sync": "micro_batch"},
    "1F1B P=4": {"pipeline_stages": 4},
    "1F1B P=8": {"pipeline_stages": 8},
}
#: kind -> (draw of one batch, per rank in lockstep, cap in lockstep, per rank in pipelines, cap)
KINDS = {
    "SFT": ((9.0, 1.0, 65_536), 32, 131_072, 64, 65_536),
    "RL": ((8.5, 1.2, 32_768), 64, 65_536, 128, 65_536),
}


def lengths_of(kind: str, n: int, seed: int) -> np.ndarray:
    mean, sigma, longest = KINDS[kind][0]
    raw = np.random.default_rng(seed).lognormal(mean, sigma, n)
    return np.minimum(raw.astype(np.int64) + 1, longest)


def model_of(mode: dict) -> dict:
    return {"sync": mode.get("sync", "step"), "pipeline_stages": mode.get("pipeline_stages", 1)}


def checked(lengths: np.ndarray, ranks: int, cap: int, mode: dict) -> tuple[float, float, int, int]:
    """Plan today's way and in ``mode``, check both, and return both steps and counts."""
    today = plan_dp_micro_batches(lengths, ranks, cap, cost=COST)
    plan = plan_dp_micro_batches(lengths, ranks, cap, cost=COST, **mode)
    for made in (today, plan):
        assert len(made) == ranks and len({len(rank) for rank in made}) == 1
        flat = np.concatenate([np.asarray(mb, np.int64) for rank in made for mb in rank])
        assert np.array_equal(np.sort(flat), np.arange(lengths.size))
        assert max(int(lengths[mb].sum()) for rank in made for mb in rank if mb) <= cap
    old = simulate_step(today, lengths, cost=COST, **model_of(mode)).makespan
    new = simulate_step(plan, lengths, cost=COST, **model_of(mode)).makespan
    assert new <= old
    return old, new, len(today[0]), len(plan[0])


def report(seeds: int) -> None:
    print(
        f"Predicted step, this plan against today's (mean of {seeds} batches; gain = 1 - new/today)\n"
    )
    print(
        "| batch | ranks | mode | documents | today's step (s) | this plan (s) | gain: mean (least, most) | micro-batches per rank (today -> this) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind, (_, lock_each, lock_cap, pipe_each, pipe_cap) in KINDS.items():
        for ranks in (8, 64):
            for name, mode in MODES.items():
                each, cap = (lock_each, lock_cap) if name == "lockstep" else (pipe_each, pipe_cap)
                runs = [
                    checked(lengths_of(kind, each * ranks, s), ranks, cap, mode)
                    for s in range(seeds)
                ]
                old, new, was, now = (np.mean([run[i] for run in runs]) for i in range(4))
                gains = [1 - run[1] / run[0] for run in runs]
                print(
                    f"| {kind} | {ranks} | {name} | {each * ranks:,} | {old:.2f} | {new:.2f} | "
                    f"{np.mean(gains):.2%} ({min(gains):.2%}, {max(gains):.2%}) | {was:.1f} -> {now:.1f} |"
                )


def timing(rounds: int, clock) -> None:
    print(
        f"\nPlanning time, this mode over today's call on the same input (best of {rounds} each)\n"
    )
    print("| samples | ranks | today (ms) | lockstep | 1F1B P=4 | 1F1B P=8 |")
    print("|---|---|---|---|---|---|")
    for exponent in (12, 16):
        lengths = lengths_of("SFT", 2**exponent, 0)
        for ranks in (8, 64):
            for mode in MODES.values():
                checked(lengths, ranks, 65_536, mode)
            spent = [timed(lengths, ranks, mode, rounds, clock) for mode in [{}, *MODES.values()]]
            ratios = " | ".join(f"{t / spent[0]:.1f}x" for t in spent[1:])
            print(f"| 2^{exponent} | {ranks} | {spent[0] * 1e3:.1f} | {ratios} |")


def timed(lengths: np.ndarray, ranks: int, mode: dict, rounds: int, clock) -> float:
    """The best of ``rounds`` calls in ``mode`` (``{}``: today's), as ids."""
    return best_of(
        lambda: plan_dp_ids(lengths, ranks, 65_536, cost=COST, **mode),
        rounds,
        clock,
    )


def test_every_mode_plans_validly_and_never_above_today():
    for kind, (_, lock_each, lock_cap, pipe_each, pipe_cap) in KINDS.items():
        for name, mode in MODES.items():
            each, cap = (lock_each, lock_cap) if name == "lockstep" else (pipe_each, pipe_cap)
            checked(lengths_of(kind, each * 8, 0), 8, cap, mode)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=at_least_one, default=4, help="batches per row of the report"
    )
    parser.add_argument(
        "--rounds", type=at_least_one, default=3, help="timed calls per cell (the best counts)"
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="time process CPU, steadier on a shared machine"
    )
    parser.add_argument("--only", choices=("report", "timing"), help="one of the two tables")
    return parser.parse_args(argv)


def test_bad_arguments_are_refused_by_name(capsys):
    for option, value in (("--seeds", "0"), ("--rounds", "x"), ("--only", "both")):
        try:
            parse_args([option, value])
        except SystemExit as error:
            assert error.code == 2
        else:
            raise AssertionError(f"{option} {value} was accepted")
        assert f"argument {option}:" in capsys.readouterr().err


def main() -> None:
    args = parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(
        f"build: {_native.build_profile()}; clock: {'process CPU' if args.cpu_time else 'wall'}\n"
    )
    if args.only != "timing":
        report(args.seeds)
    if args.only != "report":
        timing(args.rounds, clock)


if __name__ == "__main__":
    main()
