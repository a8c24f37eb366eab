"""The command line run for real in a child process, for the CLI tests (not a test module).

The CLI test modules import it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from seqbalance.__main__ import main

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
    _assert_one_line(result.stderr, fragments)


def assert_main_one_line_error(capsys: Any, args: list[str], *fragments: str) -> None:
    """``seqbalance partition ARGS`` in this process: exit status 2, one line holding the fragments."""
    assert main(["partition", *args]) == 2
    _assert_one_line(capsys.readouterr().err, fragments)


def run_json(capsys: Any, *args: str) -> dict[str, Any]:
    """``seqbalance partition ARGS --json`` in this process, its output parsed."""
    assert main(["partition", *args, "--json"]) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    return payload


def _assert_one_line(stderr: str, fragments: tuple[str, ...]) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for fragment in fragments:
        assert fragment in lines[0]
