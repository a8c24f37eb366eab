"""The built documentation site, checked in the HTML that mkdocs writes: what a reader sees.

- Every docstring example on the API page renders as code, one line per line (griffe reads an
  ``Example:`` header or bare ``>>>`` lines as Markdown, whose ``>`` quotes: three nested
  blockquotes with the code run together; docs/extensions/doctest_examples.py fixes that).
- No page loads Google Fonts (they fail offline, with console errors on every page).
- Tables fit the page (docs/stylesheets/extra.css) and the code on the time-cost and
  context-parallel pages fits the content column at 1,280 px.

The site is built once per session (``mkdocs build --strict`` into a temporary folder), or read
from ``SEQBALANCE_SITE`` (``make docs`` builds ``site/`` and runs this module on it, so CI checks
it). Where mkdocs is not installed (``make test`` installs the test extra, not docs) the tests
that need the site skip, saying so; the others run everywhere.
"""

from __future__ import annotations

import doctest
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = ROOT / "docs" / "extensions" / "doctest_examples.py"
#: Characters of a code line that fit a code block of the content column at 1,280 px (the
#: screenshots: 82 in the monospace fallback font, less the copy button's corner).
CODE_COLUMNS = 80


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``SEQBALANCE_SITE``, or a fresh ``mkdocs build --strict``."""
    given = os.environ.get("SEQBALANCE_SITE")
    if given:
        path = Path(given)
        assert (path / "api" / "index.html").is_file(), f"SEQBALANCE_SITE={given} holds no site"
        return path
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(
                f"{module.split('.')[0]} is not installed (pip install '.[docs]'); "
                "make docs builds the site and runs these tests"
            )
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def _text(fragment: str) -> str:
    """The text of an HTML fragment, tags removed and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _code_lines(fragment: str) -> list[str]:
    """The lines of every ``<pre>`` block of a fragment, as text."""
    return [
        line
        for block in re.findall(r"<pre[^>]*>(.*?)</pre>", fragment, flags=re.S)
        for line in _text(block).split("\n")
    ]


# -- the API page: examples render as code ------------------------------------------------------

#: A highlighted ``>>>`` prompt (Pygments' "generic prompt" token).
PROMPT = '<span class="gp">&gt;&gt;&gt; </span>'
HEADING = re.compile(r'<h\d id="(?P<path>seqbalance[\w.]*)" class="doc doc-heading"')


def _docstring_reader():
    """The docstring of an object of the package by its path, as griffe (what renders the API
    page) reads the sources: importing would need each integration's trainer."""
    griffe = pytest.importorskip("griffe")
    package = griffe.load("seqbalance", search_paths=[ROOT / "python"], allow_inspection=False)

    def docstring(path: str) -> str:
        obj = package[path.removeprefix("seqbalance.")] if path != "seqbalance" else package
        return obj.docstring.value if obj.docstring is not None else ""

    return docstring


def _sections(page: str) -> list[tuple[str, str]]:
    """Each documented object's own part of the page: its heading up to the next heading."""
    starts = list(HEADING.finditer(page))
    return [
        (match.group("path"), page[match.start() : ends.start() if ends else len(page)])
        for match, ends in zip(starts, [*starts[1:], None], strict=True)
    ]


def test_every_docstring_example_on_the_api_page_is_code_line_by_line(site: Path):
    page = _page(site, "api")
    docstring = _docstring_reader()
    checked = 0
    for path, section in _sections(page):
        # Doctest directives are trimmed on the page (griffe's trim_doctest_flags).
        expected = [
            re.sub(r"\s*# doctest:.*$", "", line.strip())
            for line in docstring(path).splitlines()
            if line.lstrip().startswith(">>>")
        ]
        rendered = [line.strip() for line in _code_lines(section) if line.startswith(">>>")]
        assert "<blockquote>" not in section, f"{path}: an example rendered as quotes"
        assert rendered == expected, f"{path}: examples {expected} rendered as {rendered}"
        # Highlighted as a Python session: each prompt a token of its own.
        assert section.count(PROMPT) == len(expected), f"{path}: examples not highlighted"
        checked += len(expected)
    # The page documents dozens of examples; a reading that found none would pass vacuously.
    assert checked >= 60, checked


def test_an_examples_section_holds_highlighted_code(site: Path):
    page = _page(site, "api")
    titles = re.split(r'<span class="doc-section-title">Examples?:</span>', page)[1:]
    assert len(titles) >= 40, len(titles)
    for after in titles:
        # The section's own content, up to the next section title or object heading.
        own = re.split(r'doc-section-title|class="doc doc-heading"', after)[0]
        assert PROMPT in own, _text(own)[:300]


def test_no_page_nests_blockquotes(site: Path):
    # Three nested quotes are how ">>> code" read as Markdown looks: on no page, not only the API.
    for page in sorted(site.glob("**/*.html")):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"<blockquote>\s*<blockquote>", text), page.relative_to(site)


# -- fonts, tables, code within the page --------------------------------------------------------


def test_no_page_loads_google_fonts(site: Path):
    files = [*site.glob("**/*.html"), *site.glob("**/*.css")]
    assert len(files) > 15
    for path in files:
        text = path.read_text(encoding="utf-8")
        for host in ("fonts.googleapis.com", "fonts.gstatic.com"):
            assert host not in text, f"{path.relative_to(site)} loads {host}"


def test_every_page_has_the_table_rules(site: Path):
    css = (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    rules = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    # Material's 5rem minimum per header cell is what pushed nine columns past the page.
    assert re.search(r"table:not\(\[class\]\) th\s*\{\s*min-width:\s*0;", rules), rules
    assert re.search(r"table:not\(\[class\]\)\s*\{[^}]*overflow-x:\s*auto", rules), rules
    pages = sorted(site.glob("*/index.html"))
    assert len(pages) >= 14
    for page in pages:
        assert 'href="../stylesheets/extra.css"' in page.read_text(encoding="utf-8"), page


@pytest.mark.parametrize("name", ["time-cost", "context-parallel"])
def test_the_code_of_the_issue_pages_fits_the_content_column(site: Path, name: str):
    lines = _code_lines(_page(site, name))
    assert lines
    wide = [line for line in lines if len(line) > CODE_COLUMNS]
    assert not wide, wide


# -- what runs without mkdocs -------------------------------------------------------------------


def test_make_docs_silences_the_banner_and_runs_this_module():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # What make would run (a dry run expands the recipe as make does: a comma in $(call ...)
    # once split the extras into two broken arguments).
    commands = subprocess.run(
        ["make", "-n", "--no-print-directory", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    # The local wheel's name, where one is built (a fresh clone has none yet).
    assert re.search(r'-m pip install "(\S*\.whl)?\[docs,test\]"', commands), commands
    assert re.search(r"^NO_MKDOCS_2_WARNING=1 \S+ -m mkdocs build --strict$", commands, flags=re.M)
    assert re.search(
        r"^SEQBALANCE_SITE=site \S+ -m pytest .*tests/test_site\.py$", commands, flags=re.M
    )
    development = " ".join((ROOT / "docs" / "development.md").read_text(encoding="utf-8").split())
    assert "NO_MKDOCS_2_WARNING" in development and "end of life" in development


def test_mkdocs_serves_the_system_fonts_and_the_extra_css():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^theme:\n(?:  .*\n)*?  font: false$", config, flags=re.M), config
    assert "stylesheets/extra.css" in config and "docs/extensions/doctest_examples.py" in config
    assert (ROOT / "docs" / "stylesheets" / "extra.css").is_file()


@pytest.fixture(scope="module")
def extension():
    pytest.importorskip("griffe", reason="griffe (mkdocstrings' reader) is not installed")
    spec = importlib.util.spec_from_file_location("doctest_examples", EXTENSION)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # A singular header, at any indentation.
        ("Sum.\n\nExample:\n    >>> 1\n    1", "Sum.\n\nExamples:\n    >>> 1\n    1"),
        ("Args:\n    x: y.\n\n    Example:\n        >>> 1", "Args:\n    x: y.\n\n    Examples:\n        >>> 1"),
        # Bare prompts after a section: a section of their own, their output with them.
        ("Raises:\n    E: e.\n\n>>> f()\n[1]\n\nAfter.", "Raises:\n    E: e.\n\nExamples:\n    >>> f()\n    [1]\n\nAfter."),
        ("Sum.\n>>> 1\n1", "Sum.\n\nExamples:\n    >>> 1\n    1"),
        # An indented block of prompts in prose: highlighted in place.
        ("In Rust, a call:\n\n    >>> f()\n    1\n\nMore.", "In Rust, a call:\n\n```pycon\n>>> f()\n1\n```\n\nMore."),
        # Already right, or not an example: unchanged.
        ("Examples:\n    >>> 1\n    1", "Examples:\n    >>> 1\n    1"),
        ("Args:\n    x: y.\n\n    >>> under a section", None),
        ("Prose.\n\nExample: inline, not a header", None),
    ],
)  # fmt: skip
def test_the_extension_puts_examples_in_an_examples_section(extension, before, after):
    assert extension.examples_as_sections(before) == (before if after is None else after)


def test_the_extension_examples_run(extension):
    result = doctest.testmod(extension)
    assert result.attempted >= 2 and result.failed == 0


def test_modules_shown_without_a_heading_have_no_entry_in_the_table_of_contents(site: Path):
    # A module rendered under the page's own heading ("Costs", "Time costs") would otherwise
    # appear a second time in the table of contents, by its bare name ("costs", "time_cost").
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    hidden = re.findall(
        r"^::: (\S+)\n    options:\n(?:      .*\n)*?      show_root_heading: false", api, flags=re.M
    )
    assert len(hidden) >= 4, hidden
    page = _page(site, "api")
    for module in hidden:
        assert f'href="#{module}"' not in page, module
