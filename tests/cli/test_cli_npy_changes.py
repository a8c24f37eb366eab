"""A ``.npy`` file that changes while the command line reads it (reliability.md, "Files that change").

The reader used to memory-map the data: a file truncated under the map killed the process with
SIGBUS ("Bus error", exit 135) as soon as a partitioner touched a page past the new end. These
tests make the race deterministic by truncating the file from inside the child, at a fixed
point of the read:

* right after the header was parsed (and the size checked): the data is then shorter than the
  header says, which must end with one line and exit 2;
* right after the data was read, before it is validated and partitioned: the answer must be the
  one for the whole file (what was read is the program's own copy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli._cli_runs import assert_one_line_error, run

pytestmark = pytest.mark.skipif(os.name != "posix", reason="truncation under a reader: POSIX")

N = 1_000_000

# Runs the command line (sys.argv[1:]) after wrapping `target` in `module` so that the file at
# `path` is truncated to half its size the first time `target` returns.
TRUNCATING_MAIN = """
import importlib, os, sys
module_name, target, path = {module!r}, {target!r}, {path!r}
module = importlib.import_module(module_name)
original = getattr(module, target)
done = []
def truncating(*args, **kwargs):
    result = original(*args, **kwargs)
    if not done:
        done.append(True)
        os.truncate(path, os.path.getsize(path) // 2)
    return result
setattr(module, target, truncating)
from seqbalance.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _lengths_file(tmp_path: Path) -> tuple[Path, np.ndarray]:
    lengths = np.random.default_rng(7).integers(1, 65536, N, dtype=np.int64)
    path = tmp_path / "lengths.npy"
    np.save(path, lengths)
    return path, lengths


def _reader_module() -> str:
    """The module whose ``as_int64_array`` validates what the ``.npy`` reader read."""
    return "seqbalance.cli._npy"


def test_npy_truncated_after_its_header_is_one_line_and_exit_2(tmp_path):
    path, _ = _lengths_file(tmp_path)
    code = TRUNCATING_MAIN.format(
        module="numpy.lib.format", target="read_array_header_1_0", path=str(path)
    )
    result = run("partition", str(path), "-k", "8", python_code=code)
    assert result.returncode != -7 and result.returncode != 135, "SIGBUS"
    assert_one_line_error(result, str(path), "changed while it was read")


def test_npy_truncated_after_it_was_read_still_gives_the_whole_files_answer(tmp_path):
    path, lengths = _lengths_file(tmp_path)
    expected = run("partition", str(path), "-k", "8", "--json")
    assert expected.returncode == 0, expected.stderr
    code = TRUNCATING_MAIN.format(module=_reader_module(), target="as_int64_array", path=str(path))
    result = run("partition", str(path), "-k", "8", "--json", python_code=code)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-500:]}"
    assert os.path.getsize(path) < lengths.nbytes  # the file did shrink under the reader
    answer, whole = json.loads(result.stdout), json.loads(expected.stdout)
    assert answer["n"] == N and answer["partitions"] == whole["partitions"]


_PEAK_OF_READ = """
import sys
import numpy as np
from {module} import read_lengths
def peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
before = peak()
lengths = read_lengths(sys.argv[1])
print((peak() - before) / (8 * lengths.size))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
@pytest.mark.parametrize(("dtype", "bound"), [("<i8", 1.3), (">i8", 2.4), ("<i4", 1.8)])
def test_reading_a_npy_peaks_at_a_small_multiple_of_8_bytes_a_length(tmp_path, dtype, bound):
    """The plain reads cost what the mapped file did: the int64 result, plus the file's own
    dtype where it is not native int64 (measured 1.14, 2.15 and 1.52 times 8 bytes a length)."""
    path = tmp_path / "lengths.npy"
    np.save(path, (np.arange(4_000_000) % 30_000).astype(dtype))
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_READ.format(module="seqbalance.cli.readers"), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) <= bound
