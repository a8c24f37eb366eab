"""What the clock teaches a TimeCost under FSDP: per-rank updates against synchronised ones.

The model of step-spec.md, "What the clock sees under FSDP": 8 ranks; SFT batches of 256
documents of ``min(int(lognormal(9, 1)) + 1, 65536)`` tokens; the true time of a micro-batch
5 ms + 0.2 ms a document + 6.4e-5 s a token + 5.8e-9 s a causal pair; each step planned with
``plan_dp_micro_batches(lengths, 8, 131072, cost=the cost being learnt)``. Under FSDP every
rank reads, for micro-batch ``k``, the slowest rank's time. A first fit on 24 micro-batches
timed alone (a profile), then 40 steps of updates:

- per rank: every rank's ``update(its own lengths, the time it read)``, the recipe the docs
  gave before (one cost takes every rank's updates);
- synchronised: ``update_synchronized(the slot's micro-batches, the time read)`` per slot.

Prints the coefficients each reaches against the truth, for a few seeds, with exact times and
with 1 % noise on every micro-batch's time, and the imbalance each one's plan leaves (the
slowest rank's true busy time over the mean, and the lockstep step over the mean busy time, on
a fresh batch).

Run: PYTHONPATH=python python benches/step_fit_report.py [--steps 40] [--seeds 3]
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse

import numpy as np

import seqbalance

RANKS, CAP, DOCUMENTS = 8, 131_072, 256
TRUTH = {"micro_batch": 5e-3, "document": 2e-4, "per_token": 6.4e-5, "per_pair": 5.8e-9}


def true_seconds(lengths: np.ndarray) -> float:
    if not len(lengths):
        return 0.0
    n = lengths.astype(np.float64)
    c = TRUTH
    pairs = float((n * (n + 1) / 2).sum())
    return (
        c["micro_batch"] + c["document"] * len(n) + c["per_token"] * n.sum() + c["per_pair"] * pairs
    )


def sft_batch(rng: np.random.Generator) -> np.ndarray:
    return np.minimum(rng.lognormal(9, 1, DOCUMENTS).astype(np.int64) + 1, 65_536)


def first_fit(rng: np.random.Generator, noise: float) -> seqbalance.TimeCost:
    """24 micro-batches of a first batch's plan, each timed alone."""
    lengths = sft_batch(rng)
    plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost="tokens")
    batches = [lengths[b] for rank in plan for b in rank if len(b)][:24]
    times = [true_seconds(b) * (1 + rng.uniform(-noise, noise)) for b in batches]
    return seqbalance.TimeCost.fit([b.tolist() for b in batches], times)


def learn(seed: int, steps: int, noise: float) -> tuple[seqbalance.TimeCost, seqbalance.TimeCost]:
    """The per-rank and the synchronised cost after ``steps`` FSDP steps."""
    rng = np.random.default_rng(seed)
    start = first_fit(rng, noise)
    per_rank = seqbalance.TimeCost.from_dict(start.to_dict())
    synchronised = seqbalance.TimeCost.from_dict(start.to_dict())
    for cost, stream in ((per_rank, seed + 1), (synchronised, seed + 1)):
        rng = np.random.default_rng(stream)  # the same batches and noise for both
        for _ in range(steps):
            lengths = sft_batch(rng)
            plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost=cost)
            for slot in range(len(plan[0])):
                members = [lengths[plan[rank][slot]] for rank in range(RANKS)]
                read = max(true_seconds(m) for m in members) * (1 + rng.uniform(-noise, noise))
                if cost is per_rank:
                    for member in members:
                        if len(member):
                            cost.update(member.tolist(), read)
                else:
                    cost.update_synchronized([m.tolist() for m in members], read)
    return per_rank, synchronised


def judged(cost: seqbalance.TimeCost, rng: np.random.Generator) -> tuple[float, float, float]:
    """On a fresh batch planned with ``cost``: the median relative error of its predictions of
    the plan's micro-batches, the slowest rank's true busy time over the mean, and the lockstep
    step (sum over slots of the slowest) over the mean busy time."""
    lengths = sft_batch(rng)
    plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost=cost)
    batches = [lengths[b] for rank in plan for b in rank if len(b)]
    truth = np.array([true_seconds(b) for b in batches])
    error = float(np.median(np.abs(cost.predict([b.tolist() for b in batches]) / truth - 1)))
    times = np.array([[true_seconds(lengths[b]) for b in rank] for rank in plan])
    busy = times.sum(axis=1)
    return error, busy.max() / busy.mean() - 1, times.max(axis=0).sum() / busy.mean() - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(f"{RANKS} ranks, SFT batches of {DOCUMENTS} documents, cap {CAP:,}; first fit on 24 "
          f"micro-batches, then {args.steps} steps (FSDP: every rank reads the slowest's time)")  # fmt: skip
    print(f"{'noise':>5} {'seed':>4} {'updates':>12} {'per_token':>10} {'per_pair':>10} "
          f"{'mb (ms)':>9} {'doc (ms)':>9} {'predicted':>9} {'max/mean':>9} {'lockstep':>9}")  # fmt: skip
    truth = TRUTH
    print(f"{'':>5} {'':>4} {'truth':>12} {truth['per_token']:>10.4g} {truth['per_pair']:>10.4g} "
          f"{truth['micro_batch'] * 1e3:>9.3f} {truth['document'] * 1e3:>9.3f}")  # fmt: skip
    for noise in (0.0, 0.01):
        for seed in range(args.seeds):
            learnt = learn(seed, args.steps, noise)
            for label, cost in zip(("per rank", "synchronised"), learnt, strict=True):
                c = cost.coefficients
                error, slowest, lockstep = judged(cost, np.random.default_rng(10_000 + seed))
                print(
                    f"{noise:>5.0%} {seed:>4} {label:>12} "
                    f"{c['per_token'] / truth['per_token'] - 1:>+10.2%} "
                    f"{c['per_pair'] / truth['per_pair'] - 1:>+10.2%} "
                    f"{c['micro_batch'] * 1e3:>9.3f} {c['document'] * 1e3:>9.3f} "
                    f"{error:>9.2%} {slowest:>+9.2%} {lockstep:>+9.2%}"
                )
    print(
        "per_token, per_pair: error against the truth; mb, doc: the per-micro-batch and "
        "per-document seconds learnt\n(a micro-batch of 131,072 tokens takes about 9 s, so "
        "they are hardly measurable); predicted: median error of the\ncost's predictions of a "
        "fresh batch's micro-batches; max/mean: the slowest rank's true busy time over the "
        "mean,\nunder the cost's plan; lockstep: the FSDP step (sum of each slot's slowest) "
        "over the mean busy time"
    )


if __name__ == "__main__":
    main()
