"""The README's examples run and print what the README says they print."""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import seqbalance

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The README is the front page; the rest of the documentation moved to docs/. Its commands run too.
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _readme_and_docs() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in [README, *DOCS])


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def test_readme_is_a_short_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    first_screen = "\n".join(lines[:60])
    # The verl one-liner and the two commands are on the first screen.
    assert "seqbalance.integrations.verl.install()" in first_screen
    assert "make run" in first_screen and "make test" in first_screen


def test_doctest_examples_of_readme_and_docs():
    # Every ``>>>`` block, in order, as one session per file (later blocks use earlier names).
    attempted = 0
    for path in [README, *DOCS]:
        sessions = [body for _, body in _blocks(path.read_text()) if ">>>" in body]
        if not sessions:
            continue
        test = doctest.DocTestParser().get_doctest(
            "\n\n".join(sessions), {}, path.name, str(path), 0
        )
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
        runner.run(test)
        result = runner.summarize(verbose=False)
        attempted += result.attempted
        assert result.failed == 0, path.name
    assert attempted > 10, "the README and docs lost their >>> examples"


def test_training_loop_example_prints_what_the_docs_show():
    text = (ROOT / "docs" / "samplers.md").read_text()
    section = text[text.index("## From your own training loop") :]
    blocks = _blocks(section)
    code = next(body for lang, body in blocks if lang == "python")
    shown = next(body for lang, body in blocks if lang == "")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs training loop", "exec"), {})
    assert out.getvalue().strip() == shown.strip()


def test_usage_example_comment_matches_the_output():
    text = README.read_text()
    section = text[text.index("## Usage") :]
    code = next(body for lang, body in _blocks(section) if lang == "python")
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "README usage", "exec"), namespace)
    claimed = re.findall(r"print\(\w+\)\s+# (\[\[.*?\]\])", code)
    assert len(claimed) >= 3  # parts, and the halves before and after refine
    assert out.getvalue().strip().splitlines() == claimed
    # The refine example shows what refine does: a different answer, a lighter heaviest part.
    lengths, halves, refined = namespace["lengths"], namespace["halves"], namespace["refined"]
    assert refined != halves
    heaviest = [max(sum(lengths[i] for i in part) for part in parts) for parts in (halves, refined)]
    assert heaviest[1] < heaviest[0]
    assert f"{heaviest[0]:,} tokens" in text and f"{heaviest[1]:,} with" in text


def test_readme_never_installs_seqbalance_from_an_index():
    # The name is not published on a package index: `pip install seqbalance` would fetch nothing,
    # or someone else's package. A clone or a wheel file it is.
    from_index = re.compile(r"pip3? install [\"']?seqbalance(?![-\w.])")
    assert not from_index.findall(_readme_and_docs())
    assert from_index.search("pip install 'seqbalance[plot]'")
    assert not from_index.search(
        "pip install dist/local/seqbalance-0.2.0-cp310-abi3-linux_x86_64.whl"
    )


@pytest.mark.parametrize("command", ["make run", "make test"])
def test_the_two_commands_are_documented(command):
    assert command in README.read_text()


# --- The shell commands of the README and docs/ ---------------------------------------------------------
#
# Every ```bash block (README.md and docs/*.md) that runs `seqbalance` (or `python -m seqbalance`) is run as written, as one
# script in a fresh directory, so a command may use a file made by an earlier line of its block
# but nothing the reader would have to bring. New commands are picked up without touching this
# file. The one change made before running: see `_shrink`.

SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
COMMENT = re.compile(r"(^|\s)#.*$")
INVOKES_SEQBALANCE = re.compile(r"(?:^|[|;&(]\s*)(?:seqbalance|python3? -m seqbalance)(?=\s|$)")
# Set-up commands belong to the install story, not to blocks that show the command line: running
# them here would install packages or rebuild the project.
SET_UP = re.compile(r"^\s*(?:make|pip|pip3|cargo|maturin|rustup|curl|git|sudo|apt|apt-get)\b")
# `seqbalance bench` without --sizes runs the default grid (n up to 16384; about 25 s per
# command, nearly all of it in the pure-Python reference): the test gives it a small grid.
SMALL_BENCH_GRID = "--sizes 256,1024 --repeat 1"


def _code(line: str) -> str:
    return COMMENT.sub("", line).strip()


def _lines(block: str) -> list[str]:
    """The block's commands, a line continued with a trailing backslash joined to the next."""
    return re.sub(r"\s*\\\n\s*", " ", block).splitlines()


def _shell_blocks() -> list[str]:
    """The shell blocks that run seqbalance, in README order."""
    return [
        body
        for lang, body in _blocks(_readme_and_docs())
        if lang in SHELL_LANGUAGES
        and any(INVOKES_SEQBALANCE.search(_code(line)) for line in _lines(body))
    ]


def _commands(block: str) -> list[str]:
    return [_code(line) for line in _lines(block) if INVOKES_SEQBALANCE.search(_code(line))]


def _shrink(line: str) -> str:
    code = _code(line)
    if re.search(r"\bseqbalance bench\b", code) and "--sizes" not in code.split():
        return f"{code} {SMALL_BENCH_GRID}"
    return line


@pytest.fixture(scope="module")
def shims(tmp_path_factory) -> dict[str, str]:
    """PATH and PYTHONPATH under which `seqbalance` and `python` are this interpreter's.

    The console script is not installed where the suite runs from the source tree
    (PYTHONPATH=python), so a two-line `seqbalance` script stands in for it; it runs the same
    `main` that the installed one does.
    """
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "seqbalance"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m seqbalance "$@"\n')
    script.chmod(0o755)
    for name in ("python", "python3"):
        # A script, not a symlink: a symlink to a virtual environment's python, placed elsewhere,
        # starts the base interpreter without the environment's packages.
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)
    package_root = str(Path(seqbalance.__file__).resolve().parents[1])
    python_path = os.pathsep.join(
        [package_root, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": python_path,
        "MPLBACKEND": "Agg",
    }


def test_readme_shows_seqbalance_commands():
    commands = [command for block in _shell_blocks() for command in _commands(block)]
    # A guard against the extraction silently finding nothing (a renamed fence, a changed prompt).
    assert any(command.startswith("seqbalance partition") for command in commands), commands
    assert any(command.startswith("seqbalance bench") for command in commands), commands
    assert len(commands) >= 8, commands


@pytest.mark.parametrize(
    "block", _shell_blocks(), ids=lambda block: _commands(block)[0].replace(" ", "_")[:60]
)
def test_readme_shell_block_runs_as_written(block: str, shims: dict[str, str], tmp_path: Path):
    lines = _lines(block)
    set_up = [line for line in lines if SET_UP.match(_code(line))]
    assert not set_up, f"set-up commands in a block of seqbalance commands: {set_up}"
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'echo \"README command failed (status $?): $BASH_COMMAND\" >&2' ERR",
            *(_shrink(line) for line in lines),
        ]
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={**os.environ, **shims},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{result.stderr}\n--- block:\n{block}"
    assert "Traceback" not in result.stderr, result.stderr


def test_shrink_changes_only_a_bench_without_sizes():
    assert _shrink("seqbalance bench   # comment") == f"seqbalance bench {SMALL_BENCH_GRID}"
    assert _shrink("seqbalance bench --sizes 64 -k 8") == "seqbalance bench --sizes 64 -k 8"
    assert _shrink("seqbalance partition -k 4") == "seqbalance partition -k 4"
    (joined,) = _lines("seqbalance bench \\\n    -k 8   # continued")
    assert _shrink(joined) == f"seqbalance bench -k 8 {SMALL_BENCH_GRID}"


def test_readme_links_to_docs_pages_that_exist_and_are_in_the_site():
    links = re.findall(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)", README.read_text())
    assert len(links) >= 10, links
    nav = (ROOT / "mkdocs.yml").read_text()
    for link in links:
        assert (ROOT / link).is_file(), link
        assert link.removeprefix("docs/") in nav, link
    for page in DOCS:
        assert f": {page.name}" in nav, f"{page.name} is not in mkdocs.yml's nav"


def test_every_page_of_the_site_is_linked_from_the_readme_and_the_home_page():
    # A page added to mkdocs.yml's nav (Balance by measured time, Context parallelism) is also
    # where a reader of the README or of the site's first page looks for it.
    nav = re.findall(r"^\s+- [^:]+: (\w[\w-]*\.md)$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    assert "time-cost.md" in nav and "context-parallel.md" in nav, nav
    readme = set(re.findall(r"\]\(docs/([\w-]+\.md)(?:#[^)]*)?\)", README.read_text()))
    home = set(re.findall(r"\]\(([\w-]+\.md)(?:#[^)]*)?\)", (ROOT / "docs/index.md").read_text()))
    assert set(nav) - {"index.md"} <= readme, set(nav) - readme
    for page in ("time-cost.md", "context-parallel.md", "model-costs.md", "cli.md"):
        assert page in home, page


def test_the_time_make_test_takes_is_a_measurement_and_the_home_page_agrees():
    # "a few more minutes" was 9 to 18 on 2 shared cores: the README states what was measured,
    # where, and under what load, and the site's home page says the same.
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for text in (README.read_text(encoding="utf-8"), home):
        flat = " ".join(text.split())
        assert "a few more minutes" not in flat
        sentence = re.search(
            r"`make test` then runs pytest and the Rust tests[^.]*\. (.*?) It prints", flat
        )
        assert sentence, "the README lost its measured make test time"
        # And that a failed pytest does not stop it before the Rust tests (tests/test_ci.py).
        assert "the second even when the first failed" in sentence.group(0)
        measured = sentence.group(1)
        assert "Measured" in measured and "2 cores" in measured and "load average" in measured
        assert re.search(r"pytest took [\d.]+ minutes", measured)
        assert re.search(r"`cargo test --workspace` \d+", measured)
    readme_flat = " ".join(README.read_text(encoding="utf-8").split())
    assert sentence.group(0) in readme_flat
