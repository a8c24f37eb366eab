"""TimeCost: what fitting, updating and calling it cost, against numpy.sort of the same lengths.

    python benches/bench_time_cost.py            # the report (a few seconds; no release build needed)
    pytest benches/bench_time_cost.py --benchmark-enable

TimeCost is NumPy arithmetic over the lengths (no native call), so the floor is `numpy.sort` of
the same lengths timed in the same run: ``cost(lengths)`` on 2^20 lengths should take a few
sorts at most, ``update`` microseconds. The report also prints the fit's error on generated
data: micro-batches timed by a known model with 1 % multiplicative noise, half fitted, the other
half predicted. With benchmarks disabled (the default in the test suite) each case runs once on
a smaller size and checks its answer.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import time

import numpy as np
import pytest

from seqbalance import ModelCost, TimeCost
from workloads import best_of

N = 2**20
TRUE = (2e-3, 3e-5, 1.2e-8, 5.5e-13)
MODEL = ModelCost(
    hidden_size=4096,
    num_hidden_layers=1,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    include_head=False,
)


def lengths_of(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(8.0, 1.2, size=n).astype(np.int64) + 1, 131_072)


def measured(count: int, seed: int, noise: float) -> tuple[list[list[int]], list[float]]:
    """Micro-batches of 1-16 documents timed by the known model, times multiplicative noise."""
    rng = np.random.default_rng(seed)
    batches, seconds = [], []
    for _ in range(count):
        lengths = lengths_of(int(rng.integers(1, 17)), int(rng.integers(2**31)))
        c_mb, c_doc, a, b = TRUE
        exact = c_mb + float(np.sum(c_doc + a * lengths + b * lengths * (lengths + 1) / 2))
        batches.append(lengths.tolist())
        seconds.append(exact * (1 + rng.uniform(-noise, noise)))
    return batches, seconds


def fitted(model: ModelCost | None = None) -> TimeCost:
    return TimeCost.fit(*measured(200, 1, 0.01), model=model)


@pytest.mark.parametrize("model", [None, MODEL], ids=["plain", "model"])
def test_call(benchmark, model):
    n = N if not benchmark.disabled else 2**12
    lengths = lengths_of(n)
    cost = fitted(model)
    seconds = cost(lengths)
    c = cost.coefficients
    if model is None:
        expected = (
            c["document"] + c["per_token"] * lengths + c["per_pair"] * lengths * (lengths + 1) / 2
        )
        assert np.allclose(seconds, expected, rtol=1e-12)
    assert seconds.shape == (n,) and (seconds > 0).all()
    benchmark.group = f"TimeCost: 2^{n.bit_length() - 1} lengths"
    benchmark(cost, lengths)


def test_sort_floor(benchmark):
    n = N if not benchmark.disabled else 2**12
    lengths = lengths_of(n)
    assert (np.diff(np.sort(lengths)) >= 0).all()
    benchmark.group = f"TimeCost: 2^{n.bit_length() - 1} lengths"
    benchmark(np.sort, lengths)


def test_fit(benchmark):
    batches, seconds = measured(200, 1, 0.01)
    cost = TimeCost.fit(batches, seconds)
    assert cost.fit_error["median"] < 0.01
    benchmark.group = "TimeCost: fit and update"
    benchmark(TimeCost.fit, batches, seconds)


def test_update(benchmark):
    cost = fitted()
    batch, seconds = measured(1, 7, 0.0)
    before = cost.observations
    cost.update(batch[0], seconds[0])
    assert cost.observations == before + 1
    benchmark.group = "TimeCost: fit and update"
    benchmark(cost.update, batch[0], seconds[0])


def report(n: int, rounds: int) -> None:
    lengths = lengths_of(n)
    sort = best_of(lambda: np.sort(lengths), rounds)
    print(f"TimeCost on {n:,} lengths (lognormal, <= 131,072); best of {rounds}, wall time")
    print(f"  numpy.sort (the floor)          {sort * 1e3:9.2f} ms")
    for name, model in (("cost(lengths)", None), ("cost(lengths), ModelCost", MODEL)):
        cost = fitted(model)
        call = best_of(lambda cost=cost: cost(lengths), rounds)
        print(f"  {name:<31} {call * 1e3:9.2f} ms   {call / sort:5.2f}x sort")
    batches, seconds = measured(1000, 1, 0.01)
    flat = np.concatenate([np.asarray(b) for b in batches])
    fit = best_of(lambda: TimeCost.fit(batches, seconds), rounds)
    fit_sort = best_of(lambda: np.sort(flat), rounds)
    print(
        f"  fit, 1,000 micro-batches ({flat.size:,} documents)  {fit * 1e3:7.2f} ms   "
        f"({fit / fit_sort:.0f}x numpy.sort of their {flat.size:,} lengths)"
    )
    cost = TimeCost.fit(batches[:100], seconds[:100])
    start = time.perf_counter()
    for batch, time_taken in zip(batches[100:], seconds[100:], strict=True):
        cost.update(batch, time_taken)
    update = (time.perf_counter() - start) / 900
    solve = best_of(lambda: (setattr(cost, "_solution", None), cost.coefficients), rounds)
    print(f"  update, per micro-batch         {update * 1e6:9.1f} µs   (refit solved lazily)")
    print(f"  solve after updates             {solve * 1e6:9.1f} µs   (on the next use)")
    print()
    print("fit error on generated data: c_mb + Σ(c_doc + a·L + b·pairs(L)), 1 % noise")
    train, held = measured(100, 2, 0.01), measured(100, 3, 0.01)
    cost = TimeCost.fit(*train)
    errors = np.abs(cost.predict(held[0]) / np.array(held[1]) - 1)
    fit_error = cost.fit_error
    print(
        f"  on its 100 micro-batches: median {fit_error['median']:.2%}, p90 "
        f"{fit_error['p90']:.2%}, max {fit_error['max']:.2%}"
    )
    print(
        f"  on 100 others:            median {np.median(errors):.2%}, p90 "
        f"{np.percentile(errors, 90):.2%}, max {errors.max():.2%}"
    )
    recovered = ", ".join(
        f"{name} {value / true - 1:+.2%}"
        for (name, value), true in zip(cost.coefficients.items(), TRUE, strict=True)
    )
    print(f"  coefficients against the true ones: {recovered}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    report(args.n, args.rounds)


if __name__ == "__main__":
    main()
