"""Per-call cost of SeqlenBalancedSampler over a long run (issue 23).

2,000 steps of a 4-rank loop are timed after 8,000 (the eviction record is full by then) and again
after 58,000; the ratio 60k/10k is about 1 when the bookkeeping does not grow with the number of
steps. The sizes of the cache, the handed-out reservations and their history are printed at the
end.

Run: PYTHONPATH=python python benches/sampler_steps_report.py
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import time

from seqbalance import SeqlenBalancedSampler


class Lengths:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": 10 + i % 97} for i in indexes}


def main() -> None:
    sampler = SeqlenBalancedSampler(2, 4, max_cached_batches=64)
    partition = Lengths()
    consumed: set[int] = set()

    def step(batch: int) -> None:
        base = 16 * batch
        ready = [i for i in range(max(0, base - 256), base + 256) if i not in consumed]
        for rank in range(4):
            share, _ = sampler(
                ready, 4, task_name="t", partition_id="p", dp_rank=rank,
                batch_index=batch, partition=partition,
            )  # fmt: skip
            consumed.update(share)
        if batch % 100 == 0:
            consumed.intersection_update(range(base - 512, base + 512))

    timings = {}
    batch = 0
    for mark in (10_000, 60_000):
        while batch < mark - 2_000:
            step(batch)
            batch += 1
        start = time.perf_counter()
        for _ in range(2_000):
            step(batch)
            batch += 1
        timings[mark] = time.perf_counter() - start
    state = sampler.save_checkpoint()
    print(
        f"2,000 steps: at 10k {timings[10_000]:.3f} s, at 60k {timings[60_000]:.3f} s, "
        f"60k/10k {timings[60_000] / timings[10_000]:.3f}; cached splits "
        f"{len(state['_balanced_cache'])}, handed out {len(state['_handed_out'][('p', 't')])}, "
        f"history intervals {len(state['_handed_history'][('p', 't')])}"
    )


if __name__ == "__main__":
    main()
