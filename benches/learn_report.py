"""What ``install(learn=path)`` learns, and what its clock costs, on 4 gloo ranks on this CPU.

    PYTHONPATH=python .venv-integration/bin/python benches/learn_report.py [--mini-batches 60]

needs torch, tensordict, verl and OpenRLHF (the integration job's environment). Two parts, the
child processes of tests/integrations/_gloo_learn.py:

- **Learnt against the truth.** The real ``FSDPEngine.forward_backward_batch`` (verl's planned
  step on, the default under ``learn=``) and OpenRLHF's real ``ActorPPOTrainer.ppo_train``, from
  nothing, on SFT-like mini-batches (64 documents of ``min(int(lognormal(9, 1)) + 1, 65536)``
  tokens over 4 ranks, cap 65,536) whose micro-batches take the truth model's time (5 ms a
  micro-batch, 0.2 ms a document, 6.4e-5 s a token, 5.8e-9 s a causal pair), the slowest rank
  setting each slot: every rank's learnt coefficients, relative to the truth.
- **What the clock costs.** The same real loop on a model that does nothing (16 rows of 512
  tokens in 8 micro-batches a mini-batch): the median mini-batch without ``learn=`` (the floor:
  verl's own loop, its all-reduce and micro-batching) and with it (two clock readings per
  micro-batch, the lengths read, one all_gather_object of the 4 ranks' records per mini-batch
  and the update), alternating rounds; the difference per micro-batch, and as a share of the
  floor.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.integrations import _gloo_learn  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mini-batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--part", choices=("all", "learnt", "overhead", "clock"), default="all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.part in ("all", "learnt"):
            learnt(folder, args.mini_batches)
        if args.part in ("all", "overhead"):
            overhead(folder, args.rounds)
        if args.part in ("all", "clock"):
            clock(folder)


def learnt(folder: str, mini_batches: int) -> None:
    if True:
        scenario = {
            "trainers": ["verl", "openrlhf"],
            "path": os.path.join(folder, "verl.json"),
            "path_openrlhf": os.path.join(folder, "openrlhf.json"),
            "every": 10,
            "mini_batches": mini_batches,
            "documents": 64,
            "seed": 0,
        }
        answers = _gloo_learn.run(4, scenario, timeout=1800)
        print(
            f"learnt from nothing after {mini_batches} mini-batches, 4 ranks "
            "(coefficient / truth - 1):"
        )
        for trainer in ("verl", "openrlhf"):
            for rank, answer in enumerate(answers):
                mine = answer[trainer]
                shown = ", ".join(
                    f"{name} {error:+.2e}"
                    for name, error in _gloo_learn.relative(mine["coefficients"]).items()
                )
                print(f"  {trainer:8s} rank {rank}: {shown} ({mine['observations']} slots)")
            same = all(
                a[trainer]["coefficients"] == answers[0][trainer]["coefficients"] for a in answers
            )
            print(f"  {trainer:8s} identical on every rank: {same}")


def overhead(folder: str, rounds: int) -> None:
    if True:
        scenario = {
            "trainers": ["overhead"],
            "path": os.path.join(folder, "overhead.json"),
            "mini_batches": 20,
            "rounds": rounds,
        }
        answers = _gloo_learn.run(4, scenario, timeout=1800)
        print("the clock's cost, real loop on a model that does nothing (mean micro-batch):")
        for rank, answer in enumerate(answers):
            mine = answer["overhead"]
            added = mine["learn"] - mine["plain"]
            print(
                f"  rank {rank}: without learn= {mine['plain'] * 1e6:.0f} us, with "
                f"{mine['learn'] * 1e6:.0f} us: {added * 1e6:+.0f} us a micro-batch "
                f"({mine['learn'] / mine['plain']:.2f}x the floor)"
            )


def clock(folder: str) -> None:
    """The learner alone in this process (no collective, no torch): a block per micro-batch
    and the close of a mini-batch of 8 (its apply, a 1-rank gather), after the fit, in this
    process's CPU time (a shared machine's wall clock measures its neighbours); the floor is
    the same loop with an empty context manager."""
    import contextlib
    import time

    import numpy as np
    from tests.integrations._learn_standin import truth_seconds

    from seqbalance.integrations import _learn

    rng = np.random.default_rng(0)
    batches = [[int(v) for v in rng.integers(100, 8000, int(rng.integers(1, 6)))] for _ in range(8)]
    settings = _learn.LearnSettings(os.path.join(folder, "clock.json"), 10**9, None, None)
    now = [0.0]

    def read() -> float:  # the real clock's cost, the truth model's seconds
        time.perf_counter()
        return now[0]

    learner = _learn.Learner(settings, "verl", clock=read)

    def mini_batch() -> tuple[float, float]:
        started = time.process_time()
        for lengths in batches:
            with learner.block(lengths):
                now[0] += truth_seconds(lengths)
        middle = time.process_time()
        learner.end_mini_batch()
        return middle - started, time.process_time() - middle

    for _ in range(10):  # the fit, from nothing
        mini_batch()
    assert learner.cost is not None
    repeats = 200
    started = time.process_time()
    for _ in range(repeats):
        for lengths in batches:
            with contextlib.nullcontext():
                now[0] += truth_seconds(lengths)
    floor = (time.process_time() - started) / (repeats * len(batches))
    blocks = closes = 0.0
    for _ in range(repeats):
        block_time, close_time = mini_batch()
        blocks += block_time
        closes += close_time
    block = blocks / (repeats * len(batches))
    close = closes / repeats
    print("the learner alone (this process, no collective; CPU time):")
    print(
        f"  a micro-batch's block {block * 1e6:.1f} us ({block / floor:.0f}x an empty "
        f"with-block, {floor * 1e6:.2f} us); a mini-batch's close (8 slots applied) "
        f"{close * 1e6:.0f} us: {(block + close / len(batches)) * 1e6:.0f} us a micro-batch"
    )


if __name__ == "__main__":
    main()
