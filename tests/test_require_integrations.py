"""tests/conftest.py's `--require-integrations`: a skipped integration test fails instead.

Each case runs pytest in a child process on a small test file next to a copy of this suite's
conftest, so the option is exercised exactly as `make test-integrations` passes it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

SKIPPING = """
    import pytest

    @pytest.mark.integration
    def test_needs_a_missing_package():
        pytest.importorskip("seqbalance_no_such_package_xyz")

    def test_plain_skip():
        pytest.skip("not an integration test")

    @pytest.mark.integration
    def test_integration_that_runs():
        assert True
"""

MODULE_SKIP = """
    import pytest

    pytestmark = pytest.mark.integration
    pytest.importorskip("seqbalance_no_such_package_xyz")

    def test_never_collected():
        assert True
"""


def _run(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_case.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_the_option_a_missing_dependency_skips(tmp_path):
    result = _run(tmp_path, SKIPPING)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 2 skipped" in result.stdout


def test_the_option_fails_a_skipped_integration_test_only(tmp_path):
    result = _run(tmp_path, SKIPPING, "--require-integrations")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed, 1 skipped" in result.stdout
    assert "test_needs_a_missing_package was skipped" in result.stdout
    assert "seqbalance_no_such_package_xyz" in result.stdout


def test_the_option_fails_a_module_skipped_at_collection(tmp_path):
    plain = _run(tmp_path, MODULE_SKIP)
    # Without the option: a skip, and pytest's status 5 (no test ran), which is not a failure.
    assert plain.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, plain.stdout + plain.stderr
    assert "1 skipped" in plain.stdout
    result = _run(tmp_path, MODULE_SKIP, "--require-integrations", "-m", "integration")
    assert result.returncode != 0, result.stdout + result.stderr
    assert "was skipped at collection" in result.stdout


@pytest.mark.parametrize("marker", ["integration"])
def test_the_marker_is_declared(marker, tmp_path):
    # --strict-markers (pyproject.toml) makes an undeclared marker an error; the conftest declares
    # it too, so the copy above works without the project's ini file.
    result = _run(tmp_path, SKIPPING, "--strict-markers", "--markers")
    assert f"@pytest.mark.{marker}:" in result.stdout
