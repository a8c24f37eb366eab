"""License, version and changelog: what a maintainer checks before depending on seqbalance."""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

import seqbalance

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11
    tomllib = None


def _pyproject() -> dict:
    if tomllib is None:
        pytest.skip("tomllib is Python 3.11+")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_file_is_the_apache_license():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_pyproject_declares_an_spdx_license_and_ships_the_file():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"  # a PEP 639 expression, not a {text = ...} table
    assert project["license-files"] == ["LICENSE"]
    # PEP 639: license classifiers are deprecated beside an expression (and rejected by some tools).
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


def test_classifiers_name_the_python_ci_runs():
    project = _pyproject()["project"]
    ci_python = f"Programming Language :: Python :: {sys.version_info[0]}.{sys.version_info[1]}"
    if os.environ.get("CI"):
        assert ci_python in project["classifiers"]
    assert any(c.startswith("Development Status ::") for c in project["classifiers"])
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]


def test_changelog_names_the_current_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, flags=re.M)
    assert headings, "CHANGELOG.md has no version sections"
    assert headings[0] == seqbalance.__version__, (headings[0], seqbalance.__version__)
    # Newest first.
    as_tuples = [tuple(int(x) for x in h.split(".")) for h in headings]
    assert as_tuples == sorted(as_tuples, reverse=True)
    assert "## Version policy" in changelog


def test_crate_versions_agree():
    (root_version,) = re.findall(
        r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), flags=re.M
    )[:1]
    (core_version,) = re.findall(
        r'^version = "([^"]+)"', (ROOT / "rust/core/Cargo.toml").read_text(), flags=re.M
    )[:1]
    assert root_version == core_version == seqbalance.__version__


def _installed_distribution() -> metadata.Distribution:
    """The installed wheel's metadata; skipped when seqbalance runs from the source tree."""
    package = Path(seqbalance.__file__).resolve().parent
    if package.parent.name == "python" and (package.parents[1] / "Cargo.toml").is_file():
        pytest.skip("seqbalance runs from the source tree here, not from an installed wheel")
    return metadata.distribution("seqbalance")


def test_installed_wheel_carries_the_license():
    dist = _installed_distribution()
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in dist.metadata.get_all("License-File")
    shipped = [f for f in dist.files or [] if f.name == "LICENSE"]
    assert shipped, "the LICENSE file is not in the installed wheel"
    assert "Apache License" in shipped[0].read_text()
    assert dist.version == seqbalance.__version__
