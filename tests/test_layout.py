"""The house rules of the layout (issues 19 and 34), checked on the source tree, and 0.1's module
paths."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import seqbalance

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "seqbalance"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


#: 0.1's module paths (moved in 0.2) -> the new place, whose public names each re-exports.
MOVED_MODULES = {
    "seqbalance.groups": "seqbalance.planning.groups",
    "seqbalance.metrics": "seqbalance.planning.metrics",
    "seqbalance.micro_batches": "seqbalance.planning.micro_batches",
    "seqbalance.packing": "seqbalance.planning.packing",
}


def test_the_package_top_level_holds_at_most_twelve_modules():
    # 0.1's moved module paths are one-line aliases kept for a release, not modules of their own.
    stubs = {old.split(".")[1] + ".py" for old in MOVED_MODULES}
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in stubs)
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


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
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
    new = importlib.import_module(MOVED_MODULES[old])
    assert f"import from {MOVED_MODULES[old]}" in str(caught[0].message)
    assert "goes in 0.3" in str(caught[0].message) and module.REMOVED_IN == "0.3"
    assert module.MOVED_TO[0] == MOVED_MODULES[old]
    for name in new.__all__:
        assert getattr(module, name) is getattr(new, name)


def test_the_old_module_paths_are_plain_files_and_import_seqbalance_adds_no_hook():
    # No import hook: the old paths are modules on disk, found by Python's own finders, and
    # importing seqbalance leaves sys.meta_path as it was.
    for old in MOVED_MODULES:
        assert (PACKAGE / (old.split(".")[1] + ".py")).is_file(), old
    assert not (PACKAGE / "_compat.py").exists()
    code = (
        "import sys\n"
        "before = [type(f).__qualname__ for f in sys.meta_path]\n"
        "import seqbalance\n"
        "after = [type(f).__qualname__ for f in sys.meta_path]\n"
        "assert after == before, (before, after)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr


def test_from_an_old_path_import_star_gives_its_0_1_names():
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec("from seqbalance.metrics import *", namespace)
        exec("from seqbalance.micro_batches import *", namespace)
    for name in ("BalanceReport", "LoadStats", "balance_report", "calculate_workload"):
        assert namespace[name] is getattr(seqbalance, name)
    assert namespace["log_seqlen_unbalance"] is seqbalance.log_seqlen_unbalance
    assert namespace["plan_micro_batches"] is seqbalance.plan_micro_batches
    assert namespace["plan_dp_micro_batches"] is seqbalance.plan_dp_micro_batches


def test_old_paths_keep_their_public_names():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from seqbalance.metrics import balance_report, calculate_workload
        from seqbalance.micro_batches import plan_dp_micro_batches, plan_micro_batches

    assert calculate_workload is seqbalance.calculate_workload
    assert balance_report is seqbalance.balance_report
    assert plan_micro_batches is seqbalance.plan_micro_batches
    assert plan_dp_micro_batches is seqbalance.plan_dp_micro_batches


#: What 0.1's module ``seqbalance.costs`` exported (its ``__all__`` at the 0.1.0 tag).
COSTS_0_1 = (
    "COST_NAMES",
    "Cost",
    "TransformerCost",
    "check_pad_to_multiple_of",
    "check_total",
    "group_sums",
    "pad_lengths",
    "resolve_cost",
    "sample_costs",
)


def test_seqbalance_costs_is_a_package_that_serves_0_1s_names_without_a_warning():
    # In a fresh interpreter, with every warning an error: 0.1's `import seqbalance.costs` and
    # `from seqbalance.costs import *` give the real package, and every name 0.1 exported.
    code = (
        "import seqbalance.costs as costs\n"
        "from seqbalance.costs import *\n"
        f"missing = [n for n in {COSTS_0_1!r} if n not in costs.__all__ or n not in globals()]\n"
        "assert not missing, missing\n"
        "assert hasattr(costs, '__path__'), 'not a package'\n"
    )
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert "seqbalance.costs" not in MOVED_MODULES
    costs = importlib.import_module("seqbalance.costs")
    assert costs.TransformerCost is seqbalance.TransformerCost
    assert costs.ModelCost is seqbalance.ModelCost and costs.TimeCost is seqbalance.TimeCost
    assert costs.profile is seqbalance.profile
    assert costs.calculate_workload is seqbalance.calculate_workload


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _known_modules() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("*.py")} | {"seqbalance._native"}


def _module_imports(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that the module ``name`` (its text ``source``) imports at module
    level: ``from x import y`` counts as the module ``x.y`` when there is one, else as ``x``."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                words = package.split(".")
                target = ".".join(words[: len(words) - node.level + 1] + [node.module or ""])
                target = target.rstrip(".")
            else:
                target = node.module or ""
            if target.split(".")[0] == "seqbalance":
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "seqbalance")
    return found


def _imports_of(path: Path, known: set[str]) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return _module_imports(text, _module_name(path), path.name == "__init__.py", known)


def _python_graph() -> dict[str, set[str]]:
    known = _known_modules()
    return {
        _module_name(path): {i for i in _imports_of(path, known) if i != _module_name(path)}
        for path in PACKAGE.rglob("*.py")
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_python_package_has_no_import_cycle():
    assert _cycles(_python_graph()) == []


#: What no module of ``seqbalance/costs/`` may import.
ABOVE_COSTS = (
    "seqbalance.planning",
    "seqbalance.samplers",
    "seqbalance.cli",
    "seqbalance.integrations",
)


def _imports_above_costs(imports: set[str]) -> set[str]:
    return {
        target
        for target in imports
        if target.startswith(ABOVE_COSTS) or target in ("seqbalance", "seqbalance.partition")
    }


def test_costs_imports_neither_planning_nor_samplers():
    # The arrow runs one way: planning/ and samplers/ take a cost from costs/, and costs/ knows
    # nothing of how a step is split (nor of the command line, the integrations or the package
    # top, which imports planning).
    known = _known_modules()
    wrong = {
        f"{path.relative_to(PACKAGE)} imports {target}"
        for path in (PACKAGE / "costs").rglob("*.py")
        for target in _imports_above_costs(_imports_of(path, known))
    }
    assert not wrong
    # ... and planning/ does import costs/: the rule is about a real arrow.
    planning = {t for p in (PACKAGE / "planning").rglob("*.py") for t in _imports_of(p, known)}
    assert any(t.startswith("seqbalance.costs") for t in planning)


@pytest.mark.parametrize(
    "line",
    [
        "from ..planning import metrics",
        "from ..planning.dp_plan import plan_dp_micro_batches",
        "from seqbalance.samplers import SeqlenBalancedSampler",
        "import seqbalance.planning.packing",
        "from .. import planning",
        "from .. import plan_micro_batches",
    ],
)
def test_the_one_way_rule_catches_an_import_from_above(line):
    # A later `costs/` module written with any of these imports fails the rule above.
    imports = _module_imports(f"{line}\n", "seqbalance.costs.probe", False, _known_modules())
    assert _imports_above_costs(imports), imports


def _rust_graph(source: Path) -> dict[str, set[str]]:
    """Module -> the sibling-or-cousin modules it ``use``s (crate::, super::, self:: paths), test
    modules left out. A module using its own ancestors (``super::Result``) is no edge: a parent
    declares its children."""
    modules = {}
    for path in source.rglob("*.rs"):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        modules["::".join(["crate", *parts])] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", path.read_text(encoding="utf-8"))[0]
        here = name.split("::") if path.name in ("mod.rs", "lib.rs") else name.split("::")
        edges = set()
        for used in re.findall(r"\buse\s+((?:crate|super|self)(?:::\w+)+)", text):
            words = used.split("::")
            if words[0] == "crate":
                target = ["crate", *words[1:]]
            else:
                target = list(here)
                while words and words[0] in ("super", "self"):
                    if words.pop(0) == "super":
                        target.pop()
                target += words
            for end in range(len(target), 0, -1):
                module = "::".join(target[:end])
                if module in modules:
                    if module != name and not name.startswith(module + "::"):
                        edges.add(module)
                    break
        graph[name] = edges
    return graph


@pytest.mark.parametrize("crate", ["rust/core/src", "rust/bind"])
def test_the_rust_crates_have_no_module_cycle(crate):
    graph = _rust_graph(ROOT / crate)
    assert len(graph) > 3
    assert _cycles(graph) == []


def test_the_planner_count_search_does_not_use_the_shape_limits():
    # The one circle there was (issue 34): count.rs took `Shape`, `own_count` and `shaped_own`
    # from shape.rs while shape.rs took count's `Key`, `Ordered`, `Problem` and `round_up`. The
    # shared pieces live in problem.rs; count.rs names nothing of the shape limits, not even a
    # method (inherent methods need no `use`, so the module graph alone would not see a call).
    planner = ROOT / "rust/core/src/planner"
    graph = _rust_graph(ROOT / "rust/core/src")
    assert "crate::planner::shape" not in graph["crate::planner::count"]
    assert "crate::planner::problem" in graph["crate::planner::shape"]
    code = "\n".join(
        line.split("//")[0]
        for line in (planner / "count.rs").read_text(encoding="utf-8").splitlines()
    )
    assert not re.findall(r"\bShape\w*|\bshaped_\w+|\.(?:own_count|satisfies|plan_shaped)\(", code)


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("seqbalance.no_such_module")


def _first_import(path: Path) -> str | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.Import):
            return node.names[0].name
        if isinstance(node, ast.ImportFrom):
            return node.module
    return None


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "benches").glob("*.py") if p.name not in ("one_thread.py",)),
    ids=lambda p: p.name,
)
def test_every_benchmark_pins_blas_to_one_thread_before_numpy(path):
    # A floor measured in process CPU must not count BLAS threads spinning (issue 34): the pin
    # only works before NumPy's first import, so it is each file's first import (workloads.py is
    # only ever imported after it).
    if path.name == "workloads.py":
        users = [p for p in (ROOT / "benches").glob("*.py") if "from workloads" in p.read_text()]
        assert users and all(_first_import(p) == "one_thread" for p in users)
        return
    assert _first_import(path) == "one_thread"


def test_one_thread_sets_the_blas_variables_for_numpy_and_children():
    code = (
        "import one_thread, os, numpy\n"
        "print(','.join(os.environ[n] for n in one_thread.THREAD_VARIABLES))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT / "benches",
        env={k: v for k, v in os.environ.items() if not k.endswith("_THREADS")},
    )
    assert child.returncode == 0, child.stderr
    assert set(child.stdout.strip().split(",")) == {"1"}
