"""StepTimer.end_step: what closing a step costs one rank, against numpy.sort of as many
lengths, timed in the same run.

    python benches/bench_step_timer.py              # 1,024 x 16, 2,048 x 16 and 4,096 x 32
    python benches/bench_step_timer.py --ranks 512 --micro-batches 8 --rounds 3

Every rank closes every step with one ``end_step``: the gathered micro-batches of the whole
group (ranks x micro-batches, each 1-8 documents of lognormal lengths) are checked, priced and
applied to the cost. The collective itself is left out: a stand-in ``torch.distributed`` hands
back records the ranks' own timers made (through a pickle round trip, as ``all_gather_object``
does) before the clock starts. Target: 2,048 ranks x 16 micro-batches within a second on one
core. With benchmarks disabled (the test suite) it runs once on 8 x 4 and checks the step.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import pickle
import sys
import time
import types
import warnings

import numpy as np

from seqbalance import StepTimer, TimeCost, TimeCostWarning
from workloads import at_least_one, best_of

TRUTH = (5e-3, 2e-4, 6.4e-8, 5.8e-12)


class _Captured(Exception):
    """Raised by the capturing stand-in: the record is taken, nothing applied."""


class StandIn(types.ModuleType):
    """``torch.distributed`` of ``world`` ranks: in capture mode ``all_gather_object`` keeps
    the record it is given and stops the step; otherwise it hands back prepared records."""

    def __init__(self, world: int) -> None:
        super().__init__("torch.distributed")
        self.world = world
        self.captured: object = None
        self.records: list[object] | None = None

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self, group=None) -> int:
        return self.world

    def all_gather_object(self, out, obj, group=None) -> None:
        if self.records is None:
            self.captured = obj
            raise _Captured
        out[:] = self.records


def took(batch: list[int]) -> float:
    c_mb, c_doc, a, b = TRUTH
    return c_mb + sum(c_doc + a * n + b * n * (n + 1) / 2 for n in batch)


def start_cost(seed: int = 0) -> TimeCost:
    rng = np.random.default_rng(seed)
    batches = [rng.integers(100, 30_000, int(rng.integers(1, 7))).tolist() for _ in range(24)]
    return TimeCost.fit(batches, [took(b) * rng.uniform(0.95, 1.05) for b in batches])


def step_records(ranks: int, micro_batches: int, sync: str, seed: int = 1) -> list[object]:
    """Every rank's record of one step, made by its own StepTimer (1-8 documents a
    micro-batch, lognormal lengths; now and then an idle slot), after a pickle round trip."""
    rng = np.random.default_rng(seed)
    fake = StandIn(1)
    saved = sys.modules.get("torch.distributed")
    sys.modules["torch.distributed"] = fake
    try:
        records = []
        cost = start_cost()  # never refitted: the capture stops each step before it applies
        for _ in range(ranks):
            now = [0.0]
            timer = StepTimer(cost, sync=sync, timer=lambda now=now: now[0])
            for _ in range(micro_batches):
                size = 0 if rng.uniform() < 0.03 else int(rng.integers(1, 9))
                lengths = np.minimum(rng.lognormal(8.0, 1.0, size).astype(np.int64) + 1, 65_536)
                with timer.micro_batch(lengths.tolist()):
                    now[0] += took(lengths.tolist()) * rng.uniform(1.0, 1.1) + 1e-4
            try:
                timer.end_step()
            except _Captured:
                records.append(pickle.loads(pickle.dumps(fake.captured)))
        return records
    finally:
        if saved is None:
            del sys.modules["torch.distributed"]
        else:
            sys.modules["torch.distributed"] = saved


def documents_of(records: list[object]) -> int:
    """How many documents the records hold (whatever a record's layout)."""
    total = 0
    for record in records:
        lengths = record["lengths"]  # type: ignore[index]
        total += (
            int(np.asarray(lengths).size)
            if isinstance(lengths, np.ndarray)
            else sum(len(batch) for batch in lengths)
        )
    return total


def time_end_step(records: list[object], sync: str, rounds: int) -> tuple[float, object]:
    """The shortest of ``rounds`` end_steps of one rank over ``records`` (a fresh copy of the
    start cost each round), and the last step's answer."""
    fake = StandIn(len(records))
    fake.records = records
    saved = sys.modules.get("torch.distributed")
    sys.modules["torch.distributed"] = fake
    answer: list[object] = [None]
    try:
        best = float("inf")
        for _ in range(rounds):
            timer = StepTimer(start_cost(), sync=sync)
            start = time.perf_counter()
            answer[0] = timer.end_step()
            best = min(best, time.perf_counter() - start)
        return best, answer[0]
    finally:
        if saved is None:
            del sys.modules["torch.distributed"]
        else:
            sys.modules["torch.distributed"] = saved


def report(shapes: list[tuple[int, int]], rounds: int) -> None:
    # The generated lengths reach past the start cost's measured range: warned once, not timed.
    warnings.simplefilter("ignore", TimeCostWarning)
    print(f"StepTimer.end_step on one rank, best of {rounds} (numpy.sort floor, same run)")
    print(f"{'ranks x mbs':>13} {'sync':>11} {'documents':>10} {'end_step':>10} "
          f"{'per item':>9} {'sort':>9} {'x sort':>8}")  # fmt: skip
    for ranks, micro_batches in shapes:
        for sync in ("micro_batch", "step"):
            records = step_records(ranks, micro_batches, sync)
            documents = documents_of(records)
            seconds, _ = time_end_step(records, sync, rounds)
            lengths = np.random.default_rng(2).integers(1, 65_536, documents)
            floor = best_of(lambda lengths=lengths: np.sort(lengths), max(rounds, 5))
            per_item = seconds / (ranks * micro_batches)
            print(
                f"{ranks:>6} x {micro_batches:<4} {sync:>11} {documents:>10,} {seconds:>9.3f}s "
                f"{per_item * 1e6:>7.1f}us {floor * 1e3:>7.2f}ms {seconds / floor:>8.0f}"
            )


def test_end_step_over_gathered_records():
    # The suite's run: a small group, and the step it reports is the records' own.
    records = step_records(8, 4, "micro_batch")
    _, step = time_end_step(records, "micro_batch", 1)
    assert step is not None and step.observations == 4 and step.measured > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=at_least_one)
    parser.add_argument("--micro-batches", type=at_least_one, default=16)
    parser.add_argument("--rounds", type=at_least_one, default=3)
    args = parser.parse_args()
    shapes = (
        [(args.ranks, args.micro_batches)] if args.ranks else [(1024, 16), (2048, 16), (4096, 32)]
    )
    report(shapes, args.rounds)


if __name__ == "__main__":
    main()
