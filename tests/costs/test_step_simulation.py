"""The spec's simulation of what the clock sees under FSDP (step-spec.md, "Learning from
synchronised steps"): 8 ranks, SFT batches of 256 lognormal documents, the true model 5 ms a
micro-batch, 0.2 ms a document, 6.4e-5 s a token, 5.8e-9 s a causal pair, every rank reading
the slowest rank's time for each slot. After a 24-micro-batch fit and 40 planned steps, each
rank's own lengths against that time (the recipe the docs gave before) learn another model;
synchronised updates learn the true one. ``benches/step_fit_report.py`` prints the table."""

from __future__ import annotations

import numpy as np
import pytest

import seqbalance

RANKS, CAP, DOCUMENTS, STEPS = 8, 131_072, 256, 40
TRUTH = {"micro_batch": 5e-3, "document": 2e-4, "per_token": 6.4e-5, "per_pair": 5.8e-9}


def true_seconds(lengths):
    if not len(lengths):
        return 0.0
    n = np.asarray(lengths, dtype=np.float64)
    c = TRUTH
    return (
        c["micro_batch"]
        + c["document"] * len(n)
        + c["per_token"] * n.sum()
        + c["per_pair"] * float((n * (n + 1) / 2).sum())
    )


def sft_batch(rng):
    return np.minimum(rng.lognormal(9, 1, DOCUMENTS).astype(np.int64) + 1, 65_536)


def simulate(synchronised, noise, seed=0):
    rng = np.random.default_rng(seed)
    lengths = sft_batch(rng)
    plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost="tokens")
    first = [lengths[b] for rank in plan for b in rank if len(b)][:24]
    cost = seqbalance.TimeCost.fit(
        [b.tolist() for b in first],
        [true_seconds(b) * (1 + rng.uniform(-noise, noise)) for b in first],
    )
    for _ in range(STEPS):
        lengths = sft_batch(rng)
        plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost=cost)
        for slot in range(len(plan[0])):
            members = [lengths[plan[rank][slot]].tolist() for rank in range(RANKS)]
            read = max(true_seconds(m) for m in members) * (1 + rng.uniform(-noise, noise))
            if synchronised:
                cost.update_synchronized(members, read)
            else:
                for member in members:
                    if member:
                        cost.update(member, read)
    return cost


def prediction_error(cost, seed=99):
    lengths = sft_batch(np.random.default_rng(seed))
    plan = seqbalance.plan_dp_micro_batches(lengths, RANKS, CAP, cost=cost)
    batches = [lengths[b].tolist() for rank in plan for b in rank if len(b)]
    truth = np.array([true_seconds(b) for b in batches])
    return float(np.median(np.abs(cost.predict(batches) / truth - 1)))


def off(cost, name):
    return cost.coefficients[name] / TRUTH[name] - 1


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_synchronised_updates_learn_the_model_per_rank_updates_do_not(noise):
    per_rank = simulate(synchronised=False, noise=noise)
    synchronised = simulate(synchronised=True, noise=noise)
    # Every rank's lengths against the slowest rank's time: the constant terms swallow the
    # waiting (about a second a micro-batch where the truth is 5 ms) and the slopes sink.
    assert off(per_rank, "per_token") < -0.05
    assert per_rank.coefficients["micro_batch"] > 100 * TRUTH["micro_batch"]
    assert prediction_error(per_rank) > 0.02
    # Attributed to the member predicted slowest: the model, within a few percent of noise.
    tolerance = 1e-6 if noise == 0 else 0.03
    assert abs(off(synchronised, "per_token")) < tolerance
    assert abs(off(synchronised, "per_pair")) < tolerance
    assert prediction_error(synchronised) < max(1e-6, noise)
