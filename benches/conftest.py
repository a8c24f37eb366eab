"""Benchmarks time the release build only; a debug build would measure nothing useful."""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
import pytest

from seqbalance import _native


def pytest_configure(config):
    enabled = not config.getoption("benchmark_disable", default=True)
    if enabled and _native.build_profile() != "release":
        raise pytest.UsageError(
            "seqbalance was built in debug mode; rebuild with `pip install .` or "
            "`maturin develop --release` before timing it"
        )
