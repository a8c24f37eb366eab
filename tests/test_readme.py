"""The README's examples run and print what the README says they print."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def test_readme_doctest_examples():
    # Every ``>>>`` block, in order, as one session (later blocks use earlier names).
    sessions = [body for _, body in _blocks(README.read_text()) if ">>>" in body]
    test = doctest.DocTestParser().get_doctest(
        "\n\n".join(sessions), {}, "README.md", str(README), 0
    )
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 10, "the README lost its >>> examples"
    assert result.failed == 0


def test_training_loop_example_prints_what_the_readme_shows():
    text = README.read_text()
    section = text[text.index("### From your own training loop") :]
    blocks = _blocks(section)
    code = next(body for lang, body in blocks if lang == "python")
    shown = next(body for lang, body in blocks if lang == "")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README training loop", "exec"), {})
    assert out.getvalue().strip() == shown.strip()


def test_usage_example_comment_matches_the_output():
    text = README.read_text()
    section = text[text.index("## Usage") :]
    code = next(body for lang, body in _blocks(section) if lang == "python")
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "README usage", "exec"), namespace)
    claimed = re.search(r"print\(parts\)\s+# (\[\[.*?\]\])", code)
    assert claimed is not None
    assert out.getvalue().strip() == claimed.group(1)


@pytest.mark.parametrize("command", ["make run", "make test"])
def test_the_two_commands_are_documented(command):
    assert command in README.read_text()
