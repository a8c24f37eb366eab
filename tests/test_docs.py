"""The Python on the documentation pages runs as written and prints what the pages say.

Per page: every ``>>>`` block, in page order, is one doctest session, and the other ```python
blocks run in page order in one namespace (as a reader runs them: later blocks use earlier
names). A block's output is checked where the page
shows it: a "prints" paragraph followed by a fenced block (the whole output), or "prints `...`"
naming output lines. A marker comment directly above a block changes how it is run:

- ``<!-- docs-test: skip (why) -->``: not run (it uses a trainer's names, or starts a cluster);
- ``<!-- docs-test: integration -->``: needs torch, Ray or TransferQueue; marked `integration`, so
  the integration job runs it (elsewhere it skips, naming the missing package).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(
    r"(?:^<!-- docs-test: (?P<marker>skip|integration)[^>]*-->\n)?^```(?P<lang>\w*)\n(?P<body>.*?)^```\n",
    flags=re.S | re.M,
)
# What integration blocks may need; a block missing one of these skips (fails under
# --require-integrations).
INTEGRATION_MODULES = {"torch", "ray", "transfer_queue", "tensordict", "omegaconf", "transformers"}


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    marker: str | None
    after: str  # the page text after the block, up to the next block's fence (for "prints")

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    matches = list(FENCE.finditer(text))
    blocks = []
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        blocks.append(
            Block(
                page=page.name,
                line=text.count("\n", 0, match.start("lang")) + 1,
                lang=match.group("lang"),
                body=match.group("body"),
                marker=match.group("marker"),
                after=text[match.end() : end]
                + (text[end : end + 2000] if i + 1 < len(matches) else ""),
            )
        )
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in _blocks(page)]
PYTHON = [b for b in ALL_BLOCKS if b.lang == "python"]
PLAIN = [b for b in PYTHON if ">>>" not in b.body and b.marker != "skip"]


def _missing_module(exc: BaseException | None) -> str | None:
    """The top-level module whose absence caused an ImportError (through its causes)."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name.split(".")[0]
        exc = exc.__cause__
    return None


def _expected_output(block: Block) -> list[str] | None:
    """The output lines the page claims for the block, or None where it claims none."""
    after = block.after.lstrip("\n")
    if not after.startswith("prints"):
        return None
    shown = re.match(r"prints\s*\n\s*\n```\w*\n(.*?)```", after, flags=re.S)
    if shown:
        return shown.group(1).strip().splitlines()
    # The sentence that starts with "prints" (up to its first full stop outside backticks).
    sentence = re.match(r"(?:[^`.]|`[^`]*`)*", after.split("\n\n")[0]).group(0)
    return re.findall(r"`([^`]+)`", sentence)


def test_the_pages_have_runnable_examples():
    # A guard against the extraction silently finding nothing (a changed fence or marker).
    assert len(PLAIN) >= 5, [b.id for b in PLAIN]
    assert sum(">>>" in b.body for b in PYTHON) >= 5
    assert any(b.marker == "integration" for b in PYTHON)
    assert all(b.marker != "skip" or b.lang == "python" for b in ALL_BLOCKS)


def _run_blocks(blocks: list[Block], namespace: dict) -> None:
    """Run blocks in order in one namespace, checking each one's output where the page shows it."""
    for block in blocks:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block.body, block.id, "exec"), namespace)
        except ImportError as exc:
            missing = _missing_module(exc)
            if block.marker == "integration" and missing in INTEGRATION_MODULES:
                pytest.skip(f"{block.id} needs {missing}")
            raise
        expected = _expected_output(block)
        if expected is None:
            continue
        printed = out.getvalue().strip().splitlines()
        if re.search(r"prints\s*\n\s*\n```", block.after):
            assert printed == expected, block.id
        else:
            for line in expected:
                assert line in printed, (block.id, line, printed)


def _page_params(marker: str | None) -> list:
    params = []
    for page in PAGES:
        blocks = [b for b in PLAIN if b.page == page.name and b.marker == marker]
        if blocks:
            marks = [pytest.mark.integration] if marker == "integration" else []
            params.append(pytest.param(blocks, id=page.name, marks=marks))
    return params


@pytest.mark.parametrize("blocks", _page_params(None))
def test_python_blocks_of_a_page_run_in_order(blocks: list[Block]):
    # As a reader runs them: one namespace per page, so a block may use an earlier one's names.
    _run_blocks(blocks, {"__name__": "__docs__"})


@pytest.mark.parametrize("blocks", _page_params("integration"))
def test_integration_blocks_of_a_page_run_in_order(blocks: list[Block]):
    _run_blocks(blocks, {"__name__": "__docs__"})


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(">>>" in b.body for b in _blocks(p))], ids=lambda p: p.name
)
def test_doctest_sessions_of_a_page(page: Path):
    sessions = [
        b.body
        for b in _blocks(page)
        if b.lang == "python" and ">>>" in b.body and b.marker != "skip"
    ]
    test = doctest.DocTestParser().get_doctest("\n\n".join(sessions), {}, page.name, str(page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    with contextlib.redirect_stdout(io.StringIO()) as report:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, report.getvalue()


def test_expected_output_reading():
    shown = Block("p", 1, "python", "", None, "\nprints\n\n```\na\nb\n```\n")
    assert _expected_output(shown) == ["a", "b"]
    inline = Block("p", 1, "python", "", None, "\nprints `0 [1]` and `1 [2.5]`.\nThe `rest`")
    assert _expected_output(inline) == ["0 [1]", "1 [2.5]"]
    assert _expected_output(Block("p", 1, "python", "", None, "\nSome prose.\n")) is None
