"""The planned step a trainer runs with ``install(step=True)``, against the step verl's own code
forms from the same batch, and the planning time against verl's own calls.

    python benches/bench_trainer_step.py [--seeds 4] [--rounds 3]

The model is the step spec's (``simulate_step``, the `TimeCost` fitted to the spec's 8B-model
times, installed as ``install(cost=...)`` would: verl balances its nanoseconds). Batches of the
step spec: SFT, 256 documents of ``min(int(lognormal(9, 1)) + 1, 65536)``; RL, 512 responses
of ``min(int(lognormal(8.5, 1.2)) + 1, 32768)``; one mini-batch each.

- Lockstep (verl's FSDP engines), 8 ranks, cap 131,072 (SFT) and 65,536 (RL): verl's own step
  (its driver's equal-count split, each rank's samples small at both ends, then each rank's
  ``rearrange_micro_batches`` with the count agreed) against the installed path's two routes:
  the driver's plan (``_balance_batch`` patched, each sample's slot sent to the workers) and the
  workers alone (verl's driver layout, micro-batches planned jointly on the workers).
- 1F1B (verl's Megatron engine) at pipeline sizes 4 and 8, 4 ranks, cap 65,536: the same.
- Planning time per mini-batch: the driver's plan and the workers' joint plan over verl's own
  calls (its driver split plus every rank's micro-batching, as installed: seqbalance's native
  partitioner under verl's names), the ratio of the best of ``--rounds`` each.

Every plan is checked (each index once, the cap, one count on every rank, no empty micro-batch,
a step never above verl's own) before anything is timed. Figures of a model, not of a GPU.
Under pytest each case runs once, on seed 0.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import sys
from pathlib import Path

import numpy as np

from seqbalance import get_seqlen_balanced_partitions, simulate_step
from seqbalance.integrations import _own_plans, _slots, _step

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.planning.step_oracle import rl_batch, sft_batch, spec_time_cost  # noqa: E402

from workloads import at_least_one, best_of  # noqa: E402

COST = spec_time_cost()
#: name -> (batch, ranks, cap, mode)
CASES = {
    "SFT lockstep": (sft_batch, 8, 131_072, _step.StepMode("micro_batch")),
    "RL lockstep": (rl_batch, 8, 65_536, _step.StepMode("micro_batch")),
    "SFT 1F1B P=4": (sft_batch, 4, 65_536, _step.StepMode("step", 4)),
    "SFT 1F1B P=8": (sft_batch, 4, 65_536, _step.StepMode("step", 8)),
    "RL 1F1B P=4": (rl_batch, 4, 65_536, _step.StepMode("step", 4)),
    "RL 1F1B P=8": (rl_batch, 4, 65_536, _step.StepMode("step", 8)),
}


def weights(lengths: np.ndarray) -> np.ndarray:
    return _step.trainer_weights(COST, lengths, "workload")


def verl_layout(lengths: np.ndarray, ranks: int) -> list[list[int]]:
    """verl's ``_balance_batch``: the equal-count split of the workloads, each rank's samples
    sorted and laid out small at both ends."""
    workloads = weights(lengths)
    parts = get_seqlen_balanced_partitions(workloads.tolist(), ranks, True)
    layout = []
    for part in parts:
        part = sorted(part, key=lambda x: (int(workloads[x]), x))
        layout.append(part[::2] + part[1::2][::-1])
    return layout


def verl_own(lengths: np.ndarray, ranks: int, cap: int) -> tuple[list, list]:
    layout = verl_layout(lengths, ranks)
    local = _own_plans.verl_micro_batches([lengths[p] for p in layout], cap, weights=weights)
    plan = [[[layout[r][i] for i in mb] for mb in rank] for r, rank in enumerate(local)]
    return layout, plan


def driver_plan(lengths: np.ndarray, ranks: int, cap: int, mode: _step.StepMode) -> list:
    layout = verl_layout(lengths, ranks)
    order = np.concatenate([np.asarray(p, dtype=np.int64) for p in layout])
    laid = lengths[order]
    planned = _slots.plan_driver(
        laid,
        ranks,
        cap,
        mini_batch_rows=None,
        cost=COST,
        mode=mode,
        trainer=lambda rank_lengths: _own_plans.verl_micro_batches(
            rank_lengths, cap, weights=weights
        ),
    )
    chunk = lengths.size // ranks
    plan = []
    for r in range(ranks):
        rows = slice(r * chunk, (r + 1) * chunk)
        parts = _slots.decode_slots(planned.codes[rows], laid[planned.order][rows], cap)
        assert parts is not None
        plan.append([[int(order[planned.order[r * chunk + i]]) for i in mb] for mb in parts])
    return plan


def worker_plan(lengths: np.ndarray, ranks: int, cap: int, mode: _step.StepMode) -> list:
    layout = verl_layout(lengths, ranks)
    rank_lengths = [lengths[p] for p in layout]
    own = _own_plans.verl_micro_batches(rank_lengths, cap, weights=weights)
    planned = _step.plan_fixed(rank_lengths, cap, cost=COST, mode=mode, trainer=own)
    return [[[layout[r][i] for i in mb] for mb in rank] for r, rank in enumerate(planned.plan)]


def step_of(plan: list, lengths: np.ndarray, mode: _step.StepMode) -> float:
    return simulate_step(
        plan, lengths, cost=COST, sync=mode.sync, pipeline_stages=mode.pipeline_stages
    ).makespan


def checked(plan: list, lengths: np.ndarray, cap: int) -> list:
    assert len({len(rank) for rank in plan}) == 1
    flat = sorted(i for rank in plan for mb in rank for i in mb)
    assert flat == list(range(lengths.size))
    assert all(mb and int(lengths[mb].sum()) <= cap for rank in plan for mb in rank)
    return plan


def case(name: str, seed: int) -> tuple[float, float, float, int, int]:
    draw, ranks, cap, mode = CASES[name]
    lengths = draw(seed)
    _, own = verl_own(lengths, ranks, cap)
    ours = checked(driver_plan(lengths, ranks, cap, mode), lengths, cap)
    alone = checked(worker_plan(lengths, ranks, cap, mode), lengths, cap)
    verl_step = step_of(checked(own, lengths, cap), lengths, mode)
    driver, workers = step_of(ours, lengths, mode), step_of(alone, lengths, mode)
    assert driver <= verl_step * (1 + 1e-9) and workers <= verl_step * (1 + 1e-9)
    return verl_step, driver, workers, len(own[0]), len(ours[0])


def report(seeds: int) -> None:
    print(f"Predicted step, the installed path against verl's own (seeds 0-{seeds - 1})\n")
    print(
        "| case | ranks | verl's own (s) | driver plan (s) | gain: mean (least, most) | "
        "workers alone: gain mean (least, most) | micro-batches (verl -> driver) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (_, ranks, _, _) in CASES.items():
        runs = [case(name, seed) for seed in range(seeds)]
        own, driver = np.mean([r[0] for r in runs]), np.mean([r[1] for r in runs])
        gains = [1 - r[1] / r[0] for r in runs]
        alone = [1 - r[2] / r[0] for r in runs]
        was, now = np.mean([r[3] for r in runs]), np.mean([r[4] for r in runs])
        print(
            f"| {name} | {ranks} | {own:.3f} | {driver:.3f} | {np.mean(gains):.2%} "
            f"({min(gains):.2%}, {max(gains):.2%}) | {np.mean(alone):.2%} ({min(alone):.2%}, "
            f"{max(alone):.2%}) | {was:.1f} -> {now:.1f} |"
        )


def timing(rounds: int) -> None:
    print(f"\nPlanning time per mini-batch over verl's own calls (best of {rounds} each)\n")
    print("| case | verl's own (ms) | driver plan | workers' joint plan |")
    print("|---|---|---|---|")
    for name, (draw, ranks, cap, mode) in CASES.items():
        lengths = draw(0)
        arguments = (lengths, ranks, cap)
        spent = [
            best_of(lambda a=arguments: verl_own(*a), rounds),
            best_of(lambda a=arguments, m=mode: driver_plan(*a, m), rounds),
            best_of(lambda a=arguments, m=mode: worker_plan(*a, m), rounds),
        ]
        print(
            f"| {name} | {spent[0] * 1e3:.1f} | {spent[1] / spent[0]:.1f}x | "
            f"{spent[2] / spent[0]:.1f}x |"
        )


def test_every_case_plans_validly_and_never_above_verl():
    for name in CASES:
        case(name, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=at_least_one, default=4)
    parser.add_argument("--rounds", type=at_least_one, default=3)
    arguments = parser.parse_args()
    report(arguments.seeds)
    timing(arguments.rounds)


if __name__ == "__main__":
    main()
