"""TransferQueue's own sampler tests (``tests/test_samplers.py``, shipped in the transferqueue
wheel) run against seqbalance's samplers: the drop-in promise, checked by upstream's words.

The test file is read from the installed ``transferqueue`` distribution, its imports of
``transfer_queue.sampler`` pointed at seqbalance (the plain samplers, then the classes of
``seqbalance.integrations.transfer_queue`` that TransferQueue's controller accepts), and run by
pytest in a child process. Needs the optional ``transferqueue`` package (the integration job
installs it; ``make test-integrations``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import seqbalance

pytestmark = pytest.mark.integration

#: The file of the distribution that holds upstream's sampler tests.
UPSTREAM_TESTS = "tests/test_samplers.py"

#: Every `from transfer_queue.sampler... import ...` statement, parenthesised ones included.
_UPSTREAM_IMPORT = re.compile(
    r"^from transfer_queue\.sampler[\w.]* import (?:\([^)]*\)|[^\n]*)\n", re.MULTILINE
)

#: What upstream's tests import, and from where in seqbalance.
_SOURCES = {
    "plain": "from seqbalance.samplers import {names}\n",
    "integration": "from seqbalance.integrations.transfer_queue import {names}\n",
}
_NAMES = "GRPOGroupNSampler, RankAwareSampler, SeqlenBalancedSampler, SequentialSampler"
_SHARED = (
    "from seqbalance.samplers import BaseSampler\n"
    "from seqbalance import get_seqlen_balanced_partitions\n"
)


def _upstream_tests() -> str:
    try:
        distribution = importlib.metadata.distribution("transferqueue")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("transferqueue is not installed (optional): pip install transferqueue")
    files = [f for f in distribution.files or () if str(f) == UPSTREAM_TESTS]
    if not files:
        pytest.fail(f"transferqueue {distribution.version} no longer ships {UPSTREAM_TESTS}")
    return Path(str(distribution.locate_file(files[0]))).read_text(encoding="utf-8")


@pytest.mark.parametrize("source", _SOURCES)
def test_transfer_queues_own_sampler_tests_pass_against_seqbalance(tmp_path, source):
    if source == "integration":
        pytest.importorskip("transfer_queue", reason="the adapter needs transfer_queue itself")
    text = _upstream_tests()
    imports = _SOURCES[source].format(names=_NAMES) + _SHARED
    rewritten, count = _UPSTREAM_IMPORT.subn("", text)
    assert count >= 2, "upstream's imports changed shape: update _UPSTREAM_IMPORT"
    assert "transfer_queue" not in rewritten
    # Upstream's own imports sit after the module docstring and `from typing import Any`;
    # putting seqbalance's first changes nothing else.
    (tmp_path / "test_upstream_samplers.py").write_text(imports + rewritten, encoding="utf-8")
    # The child imports the seqbalance this process imports (a source tree or an installed wheel).
    package_root = str(Path(seqbalance.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_upstream_samplers.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
        check=False,
    )
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", child.stdout)
    assert "failed" not in child.stdout.splitlines()[-1]
