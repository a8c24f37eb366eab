"""`python -m seqbalance`: partition a built-in synthetic RL batch and compare with the reference."""

from __future__ import annotations

import sys
import time

import numpy as np

from . import get_seqlen_balanced_partitions, reference


def main(argv: list[str] | None = None) -> int:
    n_items, k_partitions = 8192, 64
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(7.0, 1.1, n_items), 1, 32_768).astype(np.int64)
    started = time.perf_counter()
    parts = get_seqlen_balanced_partitions(lengths, k_partitions, equal_size=False)
    native_s = time.perf_counter() - started
    started = time.perf_counter()
    expected = reference.get_seqlen_balanced_partitions(lengths.tolist(), k_partitions, False)
    reference_s = time.perf_counter() - started
    loads = [int(lengths[p].sum()) for p in parts]
    naive = [int(chunk.sum()) for chunk in np.array_split(lengths, k_partitions)]
    print(f"{n_items} heavy-tailed lengths over {k_partitions} ranks")
    for rank, load in enumerate(loads):
        print(f"rank {rank:3d}: {load:10d} tokens in {len(parts[rank]):4d} sequences")
    mean = sum(loads) / k_partitions
    print(f"max/mean: balanced {max(loads) / mean:.4f}, naive contiguous split {max(naive) / mean:.4f}")
    print(f"native {native_s * 1e3:.2f} ms, reference {reference_s * 1e3:.1f} ms "
          f"({reference_s / native_s:.0f}x), identical: {parts == expected}")
    return 0 if parts == expected else 1


if __name__ == "__main__":
    sys.exit(main())
