"""The CI script, the Makefile and the pinned integration environment say what they promise."""

from __future__ import annotations

import os
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


def _make_test_with(tmp_path, python_status: int, cargo_status: int, *flags: str):
    """`make test` past its install step (`-o install`) with a stand-in Python and cargo that
    exit with the given statuses and note that they ran: what the two suites' steps do."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    ran = tmp_path / "ran"
    for name, status in (("python", python_status), ("cargo", cargo_status)):
        tool = tmp_path / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "{ran}"\nexit {status}\n')
        tool.chmod(0o755)
    # A make above this pytest (make test itself) must not hand its flags or jobserver down.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    env["PATH"] = f"{tmp_path}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            *flags,
            "-o",
            "install",
            "test",
            f"PYTHON={tmp_path / 'python'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = ran.read_text().splitlines() if ran.exists() else []
    return result, [line.split()[0] + " " + " ".join(line.split()[1:3]) for line in lines]


@pytest.mark.parametrize("flags", [(), ("-k",)], ids=["make", "make -k"])
@pytest.mark.parametrize(("python_status", "cargo_status"), [(1, 0), (0, 101), (1, 101), (0, 0)])
def test_make_test_runs_both_suites_and_fails_if_either_fails(
    tmp_path, python_status, cargo_status, flags
):
    # A failed pytest used to stop make test there: the Rust tests never ran.
    result, ran = _make_test_with(tmp_path, python_status, cargo_status, *flags)
    assert ran == ["python -m pytest", "cargo test --workspace"], result.stdout + result.stderr
    assert (result.returncode == 0) is (python_status == cargo_status == 0), result.stdout
    verdict = {0: "passed"}
    last = result.stdout.strip().splitlines()[-1]
    assert last == (
        f"== make test: pytest {verdict.get(python_status, 'failed')}, "
        f"cargo test {verdict.get(cargo_status, 'failed')} =="
    )


def test_make_test_installs_first_and_its_banners_give_idle_and_loaded_times(tmp_path):
    assert re.search(r"^test: install\b", MAKEFILE, flags=re.M)
    result, _ = _make_test_with(tmp_path, 0, 0)
    banners = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert [line.split(":")[0] for line in banners[:2]] == [
        "== pytest",
        "== cargo test --workspace",
    ]
    for banner in banners[:2]:
        assert re.search(r"about \S+ minutes idle, \S+ loaded\)", banner), banner
