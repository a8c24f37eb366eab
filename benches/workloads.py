"""Inputs shared by the benchmarks and the report (deterministic, RL-like sequence lengths), and
the benchmark scripts' timer and argument types."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

#: Cost of one reference call in the free mode grows like n * k; above this it takes > ~10 s.
REFERENCE_FREE_MODE_LIMIT = 4_500_000


def lengths(n: int, seed: int = 0, high: int = 32_768) -> np.ndarray:
    """Uniform lengths in ``[1, high)`` as int64."""
    return np.random.default_rng(seed).integers(1, high, size=n, dtype=np.int64)


def rl_lengths(n: int, seed: int = 0, cap: int = 32_768) -> np.ndarray:
    """Heavy-tailed response lengths: lognormal, with a share truncated at the generation cap."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=7.0, sigma=1.1, size=n)
    return np.clip(raw, 1, cap).astype(np.int64)


def reference_is_affordable(n: int, k: int, equal_size: bool) -> bool:
    return equal_size or n * k <= REFERENCE_FREE_MODE_LIMIT


def best_of(function: Callable[[], object], rounds: int, clock=time.perf_counter) -> float:
    """The shortest of ``rounds`` calls of ``function``, in seconds of ``clock``."""
    times = []
    for _ in range(rounds):
        start = clock()
        function()
        times.append(clock() - start)
    return min(times)


def at_least_one(text: str) -> int:
    """An argparse type for the scripts' counts (seeds, rounds): an int >= 1 (none would leave
    nothing to report)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {value}")
    return value
