"""verl's own code paths before and after ``seqbalance.integrations.verl.install()``, timed.

Needs verl and what importing ``verl.utils.seqlen_balancing`` needs (torch, transformers,
tensordict, ray, omegaconf)::

    python benches/verl_install_report.py [--cpu-time]

For each case it first checks that the answer after ``install()`` equals verl's, then times verl's
function (best of several calls) with verl's partitioner and with seqbalance's, in the same
process on the same inputs, and prints the ratio: verl's own function is the floor. Inputs are
what verl's trainers pass: an int64 workload tensor for the RL trainer's DP balancing
(``_balance_batch``), a float32 one for the SFT trainer's, a padded batch for dynamic
micro-batching (``rearrange_micro_batches``). ``--cpu-time`` reads the process's CPU time instead
of wall time (steadier on a shared machine, as in ``benches/report.py``).
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import argparse
import random
import time
import timeit

import torch
from tensordict import TensorDict
from verl.utils import seqlen_balancing

from seqbalance.integrations import verl as sb_verl


def _best(function, clock, repeat=9):
    timer = timeit.Timer(function, timer=clock)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number


def _format(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def _batch(lengths, width):
    mask = torch.zeros(len(lengths), width, dtype=torch.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return TensorDict(
        {"input_ids": mask.clone(), "attention_mask": mask}, batch_size=[len(lengths)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-time", action="store_true", help="time process CPU, not wall")
    clock = time.process_time if parser.parse_args().cpu_time else time.perf_counter
    # One torch thread: idle intra-op threads spin and would count as this process's CPU time.
    torch.set_num_threads(1)
    rng = random.Random(0)
    cases = []
    for n, k in ((256, 8), (1024, 8), (4096, 32)):
        lengths = torch.tensor([rng.randint(64, 8192) for _ in range(n)])
        workload = seqlen_balancing.calculate_workload(lengths)
        cases.append(
            (
                f"get_seqlen_balanced_partitions, int64 tensor n={n}, k={k}, equal_size=True",
                lambda w=workload, k=k: seqlen_balancing.get_seqlen_balanced_partitions(
                    w, k_partitions=k, equal_size=True
                ),
            )
        )
    for n, k in ((1024, 8),):
        lengths = torch.Tensor([rng.randint(64, 8192) for _ in range(n)])  # float32, as SFT does
        workload = seqlen_balancing.calculate_workload(lengths)
        cases.append(
            (
                f"get_seqlen_balanced_partitions, float32 tensor n={n}, k={k}, equal_size=True",
                lambda w=workload, k=k: seqlen_balancing.get_seqlen_balanced_partitions(
                    w, k_partitions=k, equal_size=True
                ),
            )
        )
    for n, width in ((256, 4096), (1024, 4096)):
        batch = _batch([rng.randint(64, width) for _ in range(n)], width)
        cap = 8 * width
        cases.append(
            (
                f"rearrange_micro_batches, batch of {n} (width {width}), max_token_len={cap}",
                lambda b=batch, cap=cap: seqlen_balancing.rearrange_micro_batches(
                    b, max_token_len=cap
                )[1],
            )
        )

    print(f"{'case':<78} {'verl':>10} {'installed':>10} {'ratio':>8}")
    for name, call in cases:
        before = call()
        verl_time = _best(call, clock)
        sb_verl.install()
        try:
            after = call()
            assert after == before, f"{name}: answers differ"
            native_time = _best(call, clock)
        finally:
            sb_verl.uninstall()
        print(
            f"{name:<78} {_format(verl_time):>10} {_format(native_time):>10} "
            f"{verl_time / native_time:>7.1f}×"
        )


if __name__ == "__main__":
    main()
