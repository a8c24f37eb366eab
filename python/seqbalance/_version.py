"""The package version, kept in one place: the ``version`` of the root ``Cargo.toml``.

maturin writes it into the installed package's metadata, which is where an installed seqbalance
reads it. Run from a source tree (``PYTHONPATH=python``) there is no metadata of this tree (at
most that of some other installed copy), so the tree's own ``Cargo.toml`` is read instead.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["package_version"]

_CARGO_VERSION = re.compile(r'^version\s*=\s*"([^"]+)"', flags=re.M)


def package_version() -> str:
    """The version of this copy of seqbalance ("0.0.0" if it cannot be found)."""
    package = Path(__file__).resolve().parent
    cargo_toml = package.parents[1] / "Cargo.toml"
    if package.parent.name == "python" and cargo_toml.is_file():
        # The first `version =` is [package]'s: the file starts with that table.
        match = _CARGO_VERSION.search(cargo_toml.read_text(encoding="utf-8"))
        if match:
            return match.group(1)
    try:
        return version("seqbalance")
    except PackageNotFoundError:  # pragma: no cover - neither installed nor in a source tree
        return "0.0.0"
