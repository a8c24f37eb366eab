"""The house rules of the layout (issue 19), checked on the source tree, and 0.1's module paths."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import seqbalance
from seqbalance import _compat

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "seqbalance"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_package_top_level_holds_at_most_twelve_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 12, modules


def test_no_python_module_is_over_450_lines():
    long = {
        str(p.relative_to(PACKAGE)): _lines(p) for p in PACKAGE.rglob("*.py") if _lines(p) > 450
    }
    assert not long


def _imports_inside_functions(path: Path) -> list[str]:
    """``file:line module`` of every import of the package made inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and (
                inner.level > 0 or (inner.module or "").split(".")[0] == "seqbalance"
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{inner.lineno} {inner.module}")
            elif isinstance(inner, ast.Import) and any(
                alias.name.split(".")[0] == "seqbalance" for alias in inner.names
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{inner.lineno}")
    return found


def test_no_module_imports_the_package_inside_a_function():
    # House style: imports at the top; an import moved into a function to dodge a cycle means
    # the layering is wrong (optional third-party imports, such as matplotlib, may be lazy).
    inside = [where for path in PACKAGE.rglob("*.py") for where in _imports_inside_functions(path)]
    assert not inside


def test_no_rust_source_is_over_900_lines():
    long = {
        str(p.relative_to(ROOT)): _lines(p)
        for p in (ROOT / "rust").rglob("*.rs")
        if _lines(p) > 900
    }
    assert not long


def test_no_test_oracle_ships_in_the_package():
    assert (
        not list(PACKAGE.rglob("*reference*plan*"))
        and not (PACKAGE / "_plan_reference.py").exists()
    )


@pytest.mark.parametrize("old", sorted(_compat.MOVED_MODULES))
def test_an_old_module_path_imports_with_a_deprecation_warning(old):
    sys.modules.pop(old, None)
    namespace: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The warning points at the user's import statement, not at importlib.
        exec(compile(f"import {old} as module", "user_code.py", "exec"), namespace)
    module = namespace["module"]
    assert [w.category for w in caught] == [DeprecationWarning]
    assert old in str(caught[0].message) and caught[0].filename == "user_code.py"
    new = importlib.import_module(_compat.MOVED_MODULES[old][0])
    for name in new.__all__:
        assert getattr(module, name) is getattr(new, name)


def test_old_paths_keep_their_public_names():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from seqbalance.metrics import balance_report, calculate_workload
        from seqbalance.micro_batches import plan_dp_micro_batches, plan_micro_batches

    assert calculate_workload is seqbalance.calculate_workload
    assert balance_report is seqbalance.balance_report
    assert plan_micro_batches is seqbalance.plan_micro_batches
    assert plan_dp_micro_batches is seqbalance.plan_dp_micro_batches


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("seqbalance.no_such_module")
