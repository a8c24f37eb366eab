"""The command line run for real in a child process, for the CLI tests (not a test module).

``test_cli.py``, ``test_cli_failures.py`` and ``test_cli_progress.py`` import it.
"""

from __future__ import annotations

import subprocess
import sys

#: Seconds a child command line may take before the test fails instead of hanging.
CLI_TIMEOUT = 120


def run(
    *args: str, stdin: str | None = None, python_code: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m seqbalance ARGS`` (or ``python -c PYTHON_CODE ARGS``), text in and out."""
    command = (
        [sys.executable, "-c", python_code] if python_code else [sys.executable, "-m", "seqbalance"]
    )
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit status 2, no traceback, one line on stderr holding every fragment."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
