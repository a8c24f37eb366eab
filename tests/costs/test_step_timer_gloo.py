"""StepTimer for real: four CPU processes under torch.distributed (gloo), each micro-batch's
work a known time (a sleep from a known model), and a barrier that makes every rank wait for
the slowest -- inside every micro-batch (FSDP's lockstep, ``sync="micro_batch"``) or after each
rank's last one (DDP's reduction, ``sync="step"``). Every rank must end with the same
coefficients, near the model the sleeps follow; a rank that fits its own lengths to its own
clock (the old recipe) learns another model.

Run with ``-s`` to see the coefficients reached (the figures of the issue's closing note):

    PYTHONPATH=python python -m pytest -s -m integration tests/costs/test_step_timer_gloo.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gloo test needs it)")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

import seqbalance as sb  # noqa: E402

pytestmark = pytest.mark.integration

WORLD = 4
STEPS = 45
#: The model the sleeps follow: per micro-batch, per document, per token, per causal pair
#: (about 0.1 s a micro-batch, so that a sleep's overshoot on a busy machine stays small).
TRUTH = {"micro_batch": 4e-2, "document": 2e-3, "per_token": 2e-5, "per_pair": 4e-9}


def true_seconds(lengths: list[int]) -> float:
    if not lengths:
        return 0.0
    c = TRUTH
    return c["micro_batch"] + sum(
        c["document"] + c["per_token"] * n + c["per_pair"] * n * (n + 1) / 2 for n in lengths
    )


def start_cost() -> sb.TimeCost:
    """What every rank starts from: a profile taken against a slower kernel (per token 1.5x,
    per pair 0.5x), forgotten with a half-life of 16 observations. From such a start the
    attributions of the first steps are partly wrong too: with exact times, 30 lockstep steps
    of 3 slots leave per_token 2 % low and document 20 % high, 45 steps 0.3 % and 2 %."""
    rng = np.random.default_rng(5)
    batches = [
        np.minimum(rng.lognormal(6.5, 0.9, int(rng.integers(1, 9))).astype(int) + 1, 4096).tolist()
        for _ in range(24)
    ]
    wrong = {**TRUTH, "per_token": 1.5 * TRUTH["per_token"], "per_pair": 0.5 * TRUTH["per_pair"]}
    seconds = [
        wrong["micro_batch"]
        + sum(
            wrong["document"] + wrong["per_token"] * n + wrong["per_pair"] * n * (n + 1) / 2
            for n in b
        )
        for b in batches
    ]
    return sb.TimeCost.fit(batches, seconds, half_life=16)


def step_plan(step: int, sync: str) -> list[list[list[int]]]:
    """Every rank's micro-batches of one step, the same on every rank: 1 to 6 documents of
    lognormal lengths each (now and then an idle slot); 3 a rank under lockstep, 2 to 4 under
    sync="step" (whose ranks need not run the same number)."""
    rng = np.random.default_rng(1000 + step)
    counts = [3] * WORLD if sync == "micro_batch" else rng.integers(2, 5, WORLD).tolist()

    def member() -> list[int]:
        if rng.uniform() < 0.1:
            return []
        sizes = rng.lognormal(6.8, 0.8, int(rng.integers(1, 7))).astype(int) + 1
        return np.minimum(sizes, 4096).tolist()

    return [[member() for _ in range(count)] for count in counts]


def _rank(rank: int, store: str, sync: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        cost = start_cost()
        own = start_cost()  # the old recipe: this rank's lengths against this rank's clock
        timer = sb.StepTimer(cost, sync=sync)
        history = []
        for step in range(STEPS):
            mine = step_plan(step, sync)[rank]
            for position, documents in enumerate(mine):
                started = time.perf_counter()
                with timer.micro_batch(documents):
                    time.sleep(true_seconds(documents))
                    if sync == "micro_batch" or position == len(mine) - 1:
                        dist.barrier()
                if documents:
                    own.update(documents, time.perf_counter() - started)
            result = timer.end_step()
            history.append([result.measured, result.predicted, result.observations])
        Path(out, f"rank{rank}.json").write_text(
            json.dumps({"saved": cost.to_dict(), "own": own.coefficients, "history": history})
        )
    finally:
        dist.destroy_process_group()


def _run(tmp_path: Path, sync: str) -> list[dict]:
    mp.spawn(_rank, args=(str(tmp_path / "store"), sync, str(tmp_path)), nprocs=WORLD)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _report(sync: str, ranks: list[dict]) -> None:
    learnt = ranks[0]["saved"]["coefficients"]
    print(f"\nStepTimer(sync={sync!r}) across {WORLD} gloo processes, {STEPS} steps:")
    print(f"{'coefficient':>12} {'truth':>10} {'start':>10} {'StepTimer':>10} {'own clock':>10}")
    begin = start_cost().coefficients
    for name, value in TRUTH.items():
        print(
            f"{name:>12} {value:>10.4g} {begin[name]:>10.4g} {learnt[name]:>10.4g} "
            f"{ranks[0]['own'][name]:>10.4g}"
        )
    measured, predicted, _ = np.array(ranks[0]["history"][-8:]).T
    print(f"last 8 steps: predicted / measured step, median {np.median(predicted / measured):.4f}")


@pytest.mark.parametrize("sync", ["micro_batch", "step"])
def test_step_timer_learns_the_same_model_on_every_gloo_rank(tmp_path, sync):
    ranks = _run(tmp_path, sync)
    _report(sync, ranks)
    # One order of the same gathered measurements: the same cost, bit for bit, on every rank.
    assert all(rank["saved"] == ranks[0]["saved"] for rank in ranks)
    assert all(rank["history"] == ranks[0]["history"] for rank in ranks)
    learnt = sb.TimeCost.from_dict(ranks[0]["saved"])
    # Sleeps overshoot, and wake-ups and barriers are late on a busy machine: time that every
    # micro-batch adds (up to +30 % on micro_batch, and a noisy per-document share, measured
    # under a load of 8 on 2 cores); the per-token term is the model's within a few percent.
    assert learnt.coefficients["per_token"] == pytest.approx(TRUTH["per_token"], rel=0.15)
    rng = np.random.default_rng(7)
    probe = [
        np.minimum(rng.lognormal(6.8, 0.8, int(rng.integers(1, 7))).astype(int) + 1, 4096).tolist()
        for _ in range(200)
    ]
    truth = np.array([true_seconds(b) for b in probe])
    error = np.median(np.abs(learnt.predict(probe) / truth - 1))
    assert error < 0.2
    if sync == "micro_batch":
        # Each rank's own lengths against a clock that waited for the slowest: another model,
        # further from the truth.
        own = ranks[0]["own"]
        values = [own[name] for name in ("micro_batch", "document", "per_token", "per_pair")]
        rows = np.array([[1, len(b), sum(b), sum(n * (n + 1) / 2 for n in b)] for b in probe])
        assert np.median(np.abs(rows @ np.array(values) / truth - 1)) > 2 * error
    measured, predicted, _ = np.array(ranks[0]["history"][-8:]).T
    assert np.median(np.abs(predicted / measured - 1)) < 0.15


def _frozen_rank(rank: int, store: str, out: str) -> None:
    """Rank 1's clock stops over its second micro-batch of the first step; every block meets
    the other ranks in a barrier (FSDP's collectives)."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=3)
    try:
        cost = start_cost()
        frozen = [False]
        timer = sb.StepTimer(
            cost, sync="micro_batch", timer=lambda: 5.0 if frozen[0] else time.perf_counter()
        )
        answers = []
        for step in range(2):
            for slot, documents in enumerate(step_plan(step, "micro_batch")[rank]):
                frozen[0] = step == 0 and slot == 1 and rank == 1
                with timer.micro_batch(documents):
                    time.sleep(0.01)
                    dist.barrier()
            frozen[0] = False
            result = timer.end_step()
            answers.append(None if result is None else result.observations)
        Path(out, f"frozen{rank}.json").write_text(
            json.dumps({"answers": answers, "saved": cost.to_dict()})
        )
    finally:
        dist.destroy_process_group()


def test_a_stopped_clock_on_one_gloo_rank_drops_the_step_on_every_rank(tmp_path):
    # Adversarial finding: the stopped clock raised out of rank 1's block, and the others
    # waited in the next barrier for ever. Now every rank drops that step, and applies the next.
    mp.spawn(_frozen_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=3)
    ranks = [json.loads((tmp_path / f"frozen{r}.json").read_text()) for r in range(3)]
    assert [rank["answers"][0] for rank in ranks] == [None] * 3
    assert all(rank["answers"][1] is not None for rank in ranks)
    assert all(rank["saved"] == ranks[0]["saved"] for rank in ranks)
