"""The CI script, the Makefile and the pinned integration environment say what they promise."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def _recipe(target: str) -> str:
    """The recipe lines of a Makefile rule (the lines after `target:` that start with a tab)."""
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n|\n(?=\t))*)", MAKEFILE, flags=re.M)
    assert match, f"no rule for {target} in the Makefile"
    return match.group(1)


def _dry_run(target: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_test_lists_why_tests_were_skipped():
    # -rs alone would replace pytest's default -rfE and hide the failures' summary lines.
    assert re.search(r"-m pytest .*-r(\w*)\b", _recipe("test-python"))
    flags = re.search(r"-m pytest .*-r(\w*)\b", _recipe("test-python")).group(1)
    assert {"s", "f", "E"} <= set(flags), flags


def test_the_release_build_says_what_it_does_and_how_long_it_takes():
    build = _recipe("$(LOCAL_WHEEL_STAMP)")
    message = build.split("\n")[0]
    assert "echo" in message and "release wheel" in message and re.search(r"\bminutes?\b", build)


def test_make_wheel_and_the_local_wheel_write_into_folders_of_their_own():
    out_dirs = re.findall(r"--out(?:=|\s+)(\S+)", _dry_run("wheel"))
    assert out_dirs == ["dist/manylinux"], out_dirs
    assert "target/local-wheel" in MAKEFILE
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # The README's own maturin build and its install line name one folder, not make wheel's.
    built = re.findall(r"maturin build --release --out (\S+)", readme)
    installed = re.findall(r"pip install (?:--force-reinstall )?(\S+)/seqbalance-\*\.whl", readme)
    assert built and installed, "the README lost its wheel build and install lines"
    assert set(built) == set(installed)
    assert not set(built) & {"dist", "dist/manylinux", "target/local-wheel"}


def test_integration_job_requires_its_tests_and_bounds_them():
    recipe = _recipe("test-integrations")
    assert "-m integration" in recipe and "--require-integrations" in recipe
    assert "--timeout" in recipe
    assert "rc -eq 5" in recipe  # no test collected is reported, not passed


def test_integration_requirements_are_pinned():
    pins = {}
    for name in ("requirements-integration.txt", "requirements-integration-nodeps.txt"):
        for line in (ROOT / ".ci" / name).read_text(encoding="utf-8").splitlines():
            line = line.split("#")[0].strip()
            if line:
                package, _, version = line.partition("==")
                assert version, f"{name}: {line!r} is not pinned with =="
                pins[package.lower()] = version
    for package in ("torch", "ray", "transformers", "tensordict", "omegaconf", "pytest-timeout"):
        assert package in pins, package
    assert pins["verl"] == "0.9.1"
    assert pins["transferqueue"] == "0.1.11"


def test_ci_script_runs_every_part():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    parts = re.search(r"CI_PARTS:-([^}]*)\}", script)
    assert parts and parts.group(1).split() == ["test", "lint", "docs", "test-integrations"]
    for target in parts.group(1).split():
        _recipe(target)
