"""OpenRLHF's token cap under ``install(cost=TimeCost)``: how often a micro-batch goes over it.

    python benches/bench_openrlhf_cap.py                 # 300 batches per row (a few seconds)
    python benches/bench_openrlhf_cap.py --batches 1000

OpenRLHF's dynamic batching (0.11.2, ``replay_buffer.py``) takes each step's micro-batch count
from first fit under ``max_tokens_per_gpu`` (``get_minimum_num_micro_batch_size``) and then
splits the step's samples with ``get_seqlen_balanced_partitions(lengths, count, False)``.
Balanced by tokens the split stays under the cap (almost always); balanced by a time cost it
need not. Each row draws batches of RL samples (prompt + response lengths, lognormal, clipped
to the cap) and reports, for OpenRLHF's own token split, the cost split seqbalance 0.1 made
(``before``) and the capped cost split (``after``, with the cap ``install`` learns from
OpenRLHF's count of the same lengths; ``no count``: bounded by the token split's heaviest
micro-batch alone, where no count told the cap): the share of batches with a micro-batch over
the cap, the worst micro-batch's tokens over the cap, and the costliest micro-batch's
predicted seconds over that of OpenRLHF's split (mean over batches: below 1 is better balance). With the real
OpenRLHF importable its own first fit gives the counts; otherwise the same rule written here.
The time model is the H100 8B fit of docs/step.md (5 ms a micro-batch, 0.2 ms a document,
6.4e-5 s a token, 5.8e-9 s a causal pair).
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse

import numpy as np

import seqbalance
from seqbalance.integrations._capped import capped_partitions
from workloads import at_least_one

TRUTH = (5e-3, 2e-4, 6.4e-5, 5.8e-9)
#: (cap, samples per step, log-mean, log-sd of a sample's total length): OpenRLHF's default
#: cap (--train.max_tokens_per_gpu 16192) and two longer ones.
ROWS = [(16_192, 64, 7.4, 0.9), (16_192, 128, 7.8, 0.8), (32_768, 128, 8.3, 0.9),
        (65_536, 256, 8.6, 1.0)]  # fmt: skip


def time_cost() -> seqbalance.TimeCost:
    rng = np.random.default_rng(0)
    batches = [
        np.minimum(rng.lognormal(8.5, 1.2, int(rng.integers(1, 9))).astype(int) + 1, 32_768)
        for _ in range(64)
    ]
    c_mb, c_doc, a, b = TRUTH
    seconds = [c_mb + float(np.sum(c_doc + a * x + b * x * (x + 1) / 2)) for x in batches]
    return seqbalance.TimeCost.fit([x.tolist() for x in batches], seconds)


def first_fit_count(lengths: list[int], cap: int) -> int:
    """OpenRLHF's ``get_minimum_num_micro_batch_size`` (ring and tensor parallel sizes 1)."""
    try:
        from openrlhf.utils.seqlen_balancing import get_minimum_num_micro_batch_size
    except ImportError:
        bins: list[int] = []
        for length in lengths:
            for i, held in enumerate(bins):
                if held + length <= cap:
                    bins[i] += length
                    break
            else:
                bins.append(length)
        return len(bins)
    return get_minimum_num_micro_batch_size(lengths, cap, 1, 1)


def measure(cap: int, samples: int, mu: float, sigma: float, batches: int, cost) -> dict:
    rng = np.random.default_rng(samples * 7 + int(mu * 10))
    found: dict[str, list] = {"openrlhf": [], "before": [], "after": [], "no count": []}
    for _ in range(batches):
        lengths = np.clip(rng.lognormal(mu, sigma, samples).astype(np.int64), 64, cap).tolist()
        count = first_fit_count(lengths, cap)
        weights = cost(lengths)
        splits = {
            "openrlhf": seqbalance.get_seqlen_balanced_partitions(lengths, count, False),
            "before": seqbalance.get_seqlen_balanced_partitions(weights, count, False),
            "after": capped_partitions(lengths, weights, count, cap=cap),
            "no count": capped_partitions(lengths, weights, count),
        }
        tokens = np.asarray(lengths)
        costliest = {}
        for name, parts in splits.items():
            assert sorted(i for part in parts for i in part) == list(range(samples))
            worst = max(int(tokens[part].sum()) for part in parts) / cap
            seconds = cost.predict([[lengths[i] for i in part] for part in parts if part])
            costliest[name] = float(seconds.max())
            found[name].append((worst, costliest[name] / costliest["openrlhf"]))
    return {
        name: {
            "over": float(np.mean([w > 1 for w, _ in rows])),
            "worst": max(w for w, _ in rows),
            "balance": float(np.mean([b for _, b in rows])),
        }
        for name, rows in found.items()
    }


def report(batches: int) -> None:
    cost = time_cost()
    print(f"OpenRLHF's token cap under a TimeCost, {batches} batches a row")
    print(f"{'cap':>7} {'samples':>7} {'split':>9} {'over cap':>9} {'worst':>7} {'costliest':>10}")
    for cap, samples, mu, sigma in ROWS:
        for name, row in measure(cap, samples, mu, sigma, batches, cost).items():
            print(
                f"{cap:>7} {samples:>7} {name:>9} {row['over']:>8.1%} {row['worst']:>6.3f}x "
                f"{row['balance']:>10.4f}"
            )


def test_the_capped_split_keeps_the_cap_where_openrlhfs_split_keeps_it():
    # The suite's run: a few batches of the first row.
    found = measure(*ROWS[0], 20, time_cost())
    assert found["after"]["over"] <= found["openrlhf"]["over"]
    assert found["after"]["balance"] <= found["openrlhf"]["balance"]
    assert found["no count"]["over"] <= found["openrlhf"]["over"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=at_least_one, default=300)
    report(parser.parse_args().batches)


if __name__ == "__main__":
    main()
