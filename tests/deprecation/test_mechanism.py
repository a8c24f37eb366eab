"""The deprecation mechanism (`seqbalance._deprecation`): warnings, TypeErrors, the registry,
the generated docs page and the removal versions."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import seqbalance
from seqbalance import _deprecation as dep
from seqbalance._deprecation import docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scratch_registry() -> Iterator[None]:
    """Functions decorated in a test register into a copy that is thrown away."""
    saved = list(dep.REGISTRY)
    try:
        yield
    finally:
        dep.REGISTRY[:] = saved


@pytest.mark.usefixtures("scratch_registry")
def test_renamed_param_warns_at_the_callers_line_and_passes_on() -> None:
    @dep.renamed_params(old_cap="cap")
    def f(items: list[int], cap: int = 3) -> tuple[list[int], int]:
        return items, cap

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line() + 1
        answer = f([1], old_cap=7)
    assert answer == ([1], 7) == f([1], cap=7)
    assert len(caught) == 1
    warning = caught[0]
    assert warning.category is DeprecationWarning
    assert str(warning.message) == (
        "old_cap= is deprecated since 0.3 and is removed in 1.0; pass cap="
    )
    assert warning.filename == __file__ and warning.lineno == line


@pytest.mark.usefixtures("scratch_registry")
def test_renamed_param_both_spellings_is_a_type_error_naming_both() -> None:
    @dep.renamed_params(old_cap="cap")
    def f(items: list[int], cap: int = 3) -> int:
        return cap

    for call in (lambda: f([1], cap=2, old_cap=2), lambda: f([1], 2, old_cap=2)):
        with pytest.raises(TypeError, match=r"both cap= and .*old_cap="):
            call()


@pytest.mark.usefixtures("scratch_registry")
def test_renamed_param_warns_once_per_call_site_under_the_default_filter() -> None:
    @dep.renamed_params(old_cap="cap")
    def f(cap: int = 3) -> int:
        return cap

    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for _ in range(3):
            f(old_cap=1)  # one call site, three calls
        f(old_cap=1)  # a second call site
    assert len(caught) == 2


@pytest.mark.usefixtures("scratch_registry")
def test_renamed_param_converts_the_value() -> None:
    @dep.renamed_params(flag="mode", convert={"flag": lambda v: "on" if v else "off"})
    def f(*, mode: str = "off") -> str:
        return mode

    with pytest.warns(DeprecationWarning, match=r"^flag= is deprecated since 0\.3"):
        assert f(flag=True) == "on"


def test_renamed_param_refuses_an_unknown_target(scratch_registry: None) -> None:
    with pytest.raises(TypeError, match="no parameter cap="):

        @dep.renamed_params(old="cap")
        def f(x: int) -> int:
            return x


@pytest.mark.usefixtures("scratch_registry")
def test_renamed_function_and_attribute_warn() -> None:
    def new_name(x: int) -> int:
        return x + 1

    old_name = dep.renamed_function(new_name, "old_name")
    with pytest.warns(DeprecationWarning) as caught:
        assert old_name(1) == 2
    assert str(caught[0].message) == (
        "seqbalance.old_name() is deprecated since 0.3 and is removed in 1.0; "
        "call seqbalance.new_name()"
    )

    class Result:
        def __init__(self, unit: str) -> None:
            self.new = 5
            self.unit = unit

    dep.renamed_attribute(Result, "old", "new", warns_unless=lambda r: r.unit == "s")
    with pytest.warns(DeprecationWarning, match=r"^Result\.old is deprecated .*use Result\.new$"):
        assert Result("tokens").old == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Result("s").old == 5


@pytest.mark.usefixtures("scratch_registry")
def test_changed_default_warns_only_when_omitted() -> None:
    @dep.changed_default("cost", "workload", "tokens", flips_in="1.0")
    def f(lengths: list[int], cost: str = "workload") -> str:
        return cost

    with pytest.warns(FutureWarning) as caught:
        assert f([1]) == "workload"
    message = str(caught[0].message)
    assert "'workload'" in message and "'tokens'" in message and "1.0" in message
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f([1], cost="tokens") == "tokens"
        assert f([1], "tokens") == "tokens"


def test_moved_modules_are_registered() -> None:
    moved = {e.old: e for e in dep.REGISTRY if e.kind == "module"}
    for name in ("groups", "metrics", "micro_batches", "packing"):
        entry = moved[f"seqbalance.{name}"]
        assert entry.new == f"seqbalance.planning.{name}" and entry.removed_in == "0.3"


def test_docs_page_is_the_rendered_registry() -> None:
    page = (ROOT / "docs" / "deprecations.md").read_text()
    assert page == docs.render_markdown(), (
        "docs/deprecations.md is generated: run "
        "`PYTHONPATH=python python -c 'import seqbalance, seqbalance._deprecation.docs as d; "
        'print(d.render_markdown(), end="")\' > docs/deprecations.md`'
    )


def test_docs_page_is_in_the_site_nav() -> None:
    assert re.search(r"^\s+- \w[^:]*: deprecations\.md$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_no_registered_removal_version_is_reached() -> None:
    cargo = re.search(r'^version = "([^"]+)"$', (ROOT / "Cargo.toml").read_text(), re.M)
    assert cargo is not None
    versions = {seqbalance.__version__, cargo.group(1)}
    for version in versions:
        due = [
            e for e in dep.REGISTRY if e.kind != "default" and docs.reached(version, e.removed_in)
        ]
        assert not due, f"version {version} removes these deprecated spellings: {due}"


def test_reached_compares_versions_numerically() -> None:
    assert docs.reached("0.3.0", "0.3") and docs.reached("1.0.0", "0.3")
    assert not docs.reached("0.2.0", "0.3") and not docs.reached("0.10.0", "1.0")
    assert docs.reached("0.10.0", "0.3")


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno
