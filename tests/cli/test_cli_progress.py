"""``seqbalance --version``, and the bench progress bar ending its line before any message."""

from __future__ import annotations

import io
import re
from importlib.metadata import version
from pathlib import Path

import pytest

import seqbalance
from seqbalance.__main__ import main
from seqbalance.cli import bench as cli_bench
from tests.cli._cli_runs import run


def test_version_prints_the_package_version():
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"seqbalance {seqbalance.__version__}\n"
    assert result.stderr == ""


def _from_source_tree() -> bool:
    package = Path(seqbalance.__file__).resolve().parent
    return package.parent.name == "python" and (package.parents[1] / "Cargo.toml").is_file()


def test_version_is_the_installed_metadata_when_installed():
    if _from_source_tree():
        pytest.skip("seqbalance runs from the source tree here")
    # One source: maturin writes Cargo.toml's version into the metadata; __version__ reads it.
    assert seqbalance.__version__ == version("seqbalance")


def test_version_is_the_cargo_toml_of_the_tests_tree():
    # The tests run from a clone, whether seqbalance is installed from it (make test) or run
    # from its source tree: either way the version is that clone's Cargo.toml's.
    cargo = Path(__file__).resolve().parents[2] / "Cargo.toml"
    package = cargo.read_text(encoding="utf-8").split("[package]", 1)[1].split("\n[", 1)[0]
    match = re.search(r'^version\s*=\s*"([^"]+)"', package, flags=re.M)
    assert match is not None, "Cargo.toml has no [package] version"
    assert seqbalance.__version__ == match.group(1)


def test_version_is_the_extensions():
    # One source: the extension carries Cargo.toml's version (env!("CARGO_PKG_VERSION")).
    from seqbalance import _native

    assert seqbalance.__version__ == _native.__version__
    assert seqbalance.__version__.count(".") >= 2


def test_progress_close_ends_the_line_once_and_only_after_drawing():
    stream = io.StringIO()
    progress = cli_bench._Progress(2, stream)
    progress.close()
    assert stream.getvalue() == ""
    progress.update(1, "half")
    assert "\n" not in stream.getvalue()
    assert stream.getvalue().startswith("\r[###############---------------] 1/2 half")
    progress.close()
    progress.close()
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1


def test_an_error_during_bench_starts_on_its_own_line(monkeypatch, capsys):
    def fail(*_args, **_kwargs):
        raise ValueError("the reference failed on purpose")

    monkeypatch.setattr(cli_bench.reference, "get_seqlen_balanced_partitions", fail)
    assert main(["bench", "--sizes", "64", "-k", "2", "--repeat", "1"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n")
    *bar, message = err[:-1].split("\n")
    assert bar and bar[-1].startswith("\r[") and "n=64 k=2: reference" in bar[-1]
    assert message == "seqbalance bench: error: the reference failed on purpose"


def test_equal_size_bench_refuses_an_uneven_cell_before_timing_anything():
    result = run("bench", "--sizes", "64,1000", "-k", "64", "--equal-size", "--repeat", "1")
    assert result.returncode == 2
    assert result.stderr == (
        "seqbalance bench: error: --equal-size needs n divisible by k; "
        "n=1000 is not divisible by k=64\n"
    )
    assert result.stdout == ""
