"""The command line's reader on 2^20 lengths: the streaming parser against NumPy's own text parser.

Run: pytest benches/bench_cli_read.py --benchmark-enable. Compare in one run: ``read_lengths`` on
a text file (chunked, vectorised), on a ``.npy`` (memory-mapped), NumPy's ``loadtxt`` (its C
parser, the floor for text), and a Python int per line (what the reader replaced). With benchmarks
disabled (the default in the test suite) each case still runs once and checks its answer.
"""

from __future__ import annotations

import one_thread  # noqa: F401  (BLAS on one thread, before NumPy loads)

# isort: split
from pathlib import Path

import numpy as np
import pytest

from seqbalance.cli.readers import read_lengths

N_LINES = 2**20
GROUP = f"read {N_LINES:,} lengths"


@pytest.fixture(scope="module")
def lengths() -> np.ndarray:
    return np.random.default_rng(3).integers(1, 32_768, size=N_LINES, dtype=np.int64)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, lengths) -> Path:
    path = tmp_path_factory.mktemp("cli_read") / "lengths.txt"
    np.savetxt(path, lengths, fmt="%d")
    return path


@pytest.fixture(scope="module")
def npy_file(tmp_path_factory, lengths) -> Path:
    path = tmp_path_factory.mktemp("cli_read") / "lengths.npy"
    np.save(path, lengths)
    return path


def python_ints(path: Path) -> np.ndarray:
    return np.array([int(line) for line in path.read_text().splitlines() if line.strip()])


def test_read_text(benchmark, text_file, lengths):
    benchmark.group = GROUP
    assert np.array_equal(read_lengths(str(text_file)), lengths)
    benchmark.pedantic(read_lengths, args=(str(text_file),), rounds=3)


def test_read_npy(benchmark, npy_file, lengths):
    benchmark.group = GROUP
    assert np.array_equal(read_lengths(str(npy_file)), lengths)
    benchmark.pedantic(read_lengths, args=(str(npy_file),), rounds=3)


def test_numpy_loadtxt_floor(benchmark, text_file, lengths):
    benchmark.group = GROUP
    assert np.array_equal(np.loadtxt(text_file, dtype=np.int64), lengths)
    benchmark.pedantic(np.loadtxt, args=(text_file,), kwargs={"dtype": np.int64}, rounds=3)


def test_python_int_per_line(benchmark, text_file, lengths):
    benchmark.group = GROUP
    assert np.array_equal(python_ints(text_file), lengths)
    benchmark.pedantic(python_ints, args=(text_file,), rounds=3)
