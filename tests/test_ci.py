"""The CI script, the Makefile and the pinned integration environment say what they promise."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from seqbalance import _native

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


#: The tests' entry points into the extension, built only with the cargo feature `test-hooks`.
TEST_HOOKS = ("_purge_delay", "_input_reads", "_internal_error_check")


def test_the_test_hooks_are_behind_a_cargo_feature_only_the_test_build_enables():
    # The release wheel (make install-run, make wheel, pyproject's [tool.maturin]) builds
    # without the feature; the test build (make install, and so test/lint/docs, make inplace,
    # make dev) builds with it. Checked on the wiring, not by building both (minutes).
    cargo = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    features = re.search(r"^\[features\]\n((?:[^\[].*\n|\n)*)", cargo, flags=re.M)
    assert features and re.search(r"^test-hooks = \[\]$", features.group(1), flags=re.M)
    assert not re.search(r"^default\s*=", features.group(1), flags=re.M)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r"^\[tool\.maturin\]\n(?:.+\n)*?features = \[\]$", pyproject, flags=re.M)
    assert re.search(r"^TEST_FEATURES := test-hooks$", MAKEFILE, flags=re.M)
    with_hooks = 'MATURIN_PEP517_ARGS="--features $(TEST_FEATURES)"'
    assert with_hooks in _recipe("$(TEST_WHEEL_STAMP)")
    assert "$(TEST_FEATURES)" not in _recipe("$(LOCAL_WHEEL_STAMP)")
    assert "env -u MATURIN_PEP517_ARGS" in _recipe("$(LOCAL_WHEEL_STAMP)")
    assert "--features $(TEST_FEATURES)" in _recipe("inplace")
    assert with_hooks in _recipe("dev")
    for target in ("install", "lint", "docs", "test-integrations"):
        rule = re.search(rf"^{re.escape(target)}:(.*)$", MAKEFILE, flags=re.M)
        assert rule and "$(TEST_WHEEL_STAMP)" in rule.group(1), target
        assert "$(LOCAL_WHEEL" not in _recipe(target), target
    assert re.search(r"^test: install\b", MAKEFILE, flags=re.M)
    assert re.search(r"^install-run: \$\(LOCAL_WHEEL_STAMP\)", MAKEFILE, flags=re.M)
    assert "$(LOCAL_WHEEL)" in _recipe("install-run") and "TEST" not in _recipe("install-run")
    assert "--features" not in _recipe("wheel") and "MATURIN_PEP517_ARGS" not in _recipe("wheel")


def test_every_test_hook_is_compiled_only_with_the_feature():
    # Each hook's #[pyfunction] and its registration sit under #[cfg(feature = "test-hooks")].
    sources = "".join(
        (ROOT / "rust" / "bind" / name).read_text(encoding="utf-8")
        for name in ("lib.rs", "convert.rs")
    )
    gate = '#[cfg(feature = "test-hooks")]'
    for hook in TEST_HOOKS:
        definition = re.search(rf"((?:^#\[.*\]\n)+)(?:pub )?fn {hook}\(", sources, flags=re.M)
        assert definition and gate in definition.group(1), hook
    registering = re.search(
        r'#\[cfg\(feature = "test-hooks"\)\]\nfn register_test_hooks\([^{]*\{\n((?:    .*\n)*)\}',
        sources,
    )
    assert registering, "no gated register_test_hooks in rust/bind/lib.rs"
    outside = sources.replace(registering.group(0), "")
    for hook in TEST_HOOKS:
        assert hook in registering.group(1), hook
        assert f"wrap_pyfunction!({hook}" not in outside and (
            f"wrap_pyfunction!(convert::{hook}" not in outside
        ), hook
    assert re.search(r'#\[cfg\(feature = "test-hooks"\)\]\nstatic INPUT_READS', sources)
    allowlist = (ROOT / ".ci" / "stubtest-allowlist.txt").read_text(encoding="utf-8")
    listed = {line for line in allowlist.splitlines() if line and not line.startswith("#")}
    assert listed == {f"seqbalance._native.{hook}" for hook in TEST_HOOKS}
    assert "--allowlist .ci/stubtest-allowlist.txt" in _recipe("lint")


def test_the_build_the_tests_run_on_has_the_hooks():
    # make test runs on the test build: the tests that use the hooks run, never skip.
    missing = [hook for hook in TEST_HOOKS if not callable(getattr(_native, hook, None))]
    assert not missing, f"not the test build (cargo feature test-hooks): {missing}"
    # Not in __all__, so that __all__ (and the stub's) is the same in both builds.
    assert not set(TEST_HOOKS) & set(_native.__all__)
