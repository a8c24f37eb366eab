"""What a new user meets first: every verb's --help, the text report's time and header lines,
``--json`` keys as docs/cli.md's table lists them, and the one-line errors of the files that go
with ``--time-cost`` and ``calibrate`` (the command line run in child processes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import seqbalance
from seqbalance.cli.main import build_parser
from tests.cli._cli_runs import assert_one_line_error, run
from tests.cli.test_cli_shell_words import PYTHON_SPEAK

ROOT = Path(__file__).resolve().parents[2]
VERBS = ("partition", "plan", "bench", "calibrate")

#: Python a shell user cannot type or read in a help text: powers, reprs, subscripts, keywords.
HELP_PYTHON = re.compile(r"\*\*|\bTrue\b|\bFalse\b|\bNone\b|\w\[\w*\]|=\.\.\.|\bseqbalance\.[A-Z]")


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_help_says_what_it_is_for_in_shell_words(verb: str):
    result = run(verb, "--help")
    assert result.returncode == 0 and not result.stderr, result.stderr
    text = result.stdout
    description = text.split("\n\n")[1]  # after the usage lines
    assert len(description.split()) >= 12, description
    assert not HELP_PYTHON.search(text), HELP_PYTHON.search(text)
    # Wrapped at spaces: a flag named in a help text is never cut at a hyphen.
    assert not re.search(r"--[a-z]+-\n", text), text


def test_the_top_level_help_lists_every_verb():
    result = run("--help")
    assert result.returncode == 0
    for verb in VERBS:
        assert re.search(rf"^\s+{verb}\s+\w", result.stdout, flags=re.M), verb


#: Flags whose help differs between verbs on purpose: (flag, verb) -> why.
DIFFERENT_ON_PURPOSE = {
    ("-k", "bench"): "a comma-separated grid, not one count",
    ("--dp", "partition"): "the old route to planning",
    ("--max-token-len", "partition"): "the old route to planning",
    ("--model-config", "calibrate"): "fits per FLOP rather than balancing by FLOPs",
}


def test_a_flag_two_verbs_share_is_described_the_same_way():
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    helps: dict[str, dict[str, str]] = {}
    for verb, parser in commands.choices.items():
        for action in parser._actions:
            for flag in action.option_strings:
                if (flag, verb) not in DIFFERENT_ON_PURPOSE and action.help != "==SUPPRESS==":
                    text = (action.help or "").removeprefix("with --max-token-len: ")
                    helps.setdefault(flag, {})[verb] = text
    shared = {flag: by_verb for flag, by_verb in helps.items() if len(by_verb) > 1}
    assert {"--refine", "--equal-size", "--nearly-equal", "--cost", "--order"} <= set(shared)
    for flag, by_verb in shared.items():
        assert len(set(by_verb.values())) == 1, (flag, by_verb)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "six.txt").write_text("5\n3\n8\n1\n9\n2\n")
    records = [(5, "p0"), (3, "p0"), (8, "p1"), (1, "p1"), (9, "p2"), (2, "p2")]
    (tmp_path / "groups.jsonl").write_text(
        "".join(json.dumps({"len": n, "uid": u}) + "\n" for n, u in records)
    )
    batches = [[100 * (i + 1) + 37 * j for j in range(i % 4 + 1)] for i in range(16)]
    log = [
        {"lengths": b, "seconds": 1e-3 + sum(3e-5 + 2e-6 * n + 1e-10 * n * n for n in b)}
        for b in batches
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in log))
    # Two documents in every micro-batch: the fit cannot tell a micro-batch's cost from theirs.
    alike = [{"lengths": [100 * (i + 1), 50], "seconds": 1e-3 + 3e-4 * i} for i in range(12)]
    (tmp_path / "alike.jsonl").write_text("".join(json.dumps(line) + "\n" for line in alike))
    (tmp_path / "one.jsonl").write_text('{"lengths": [100], "seconds": 0.01}\n')
    (tmp_path / "not-a-cost.json").write_text('{"a": 1}\n')
    (tmp_path / "no-factor.json").write_text('{"kind": "seqbalance.TimeCost", "version": 1}\n')
    (tmp_path / "binary.json").write_bytes(bytes(range(128, 256)))
    (tmp_path / "no-layers.json").write_text('{"hidden_size": 64}\n')
    return tmp_path


def _in(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(seqbalance.__file__).resolve().parents[1]))
    monkeypatch.chdir(files)


def test_the_time_line_gives_the_wait_in_seconds_then_the_library_share(files, monkeypatch):
    _in(files, monkeypatch)
    for args in (
        ["partition", "six.txt", "-k", "2"],
        ["plan", "six.txt", "--max-token-len", "100"],
    ):
        result = run(*args)
        assert result.returncode == 0, result.stderr
        (line,) = [line for line in result.stdout.splitlines() if line.startswith("time:")]
        # Seconds to the clock tick (not "320.0 ms"), then the call's own share in its unit.
        assert re.fullmatch(r"time: \d+\.\d\d s \([\d.]+ (s|ms|µs) (for|in) \w+.*\)", line), line


def test_headers_and_counts_read_as_words_not_python(files, monkeypatch):
    _in(files, monkeypatch)
    partition = run("partition", "six.txt", "-k", "2", "--nearly-equal", "--refine")
    assert "k=2, equal_size=nearly, group_size=1, refine=yes" in partition.stdout
    plan = run("plan", "six.txt", "--max-token-len", "100", "--refine")
    assert "every rank runs 1 micro-batch of at most 100 tokens" in plan.stdout
    assert ", refine=yes" in plan.stdout
    # plan's header names the count rule and the uid groups as partition's does.
    grouped = run(
        "plan", "groups.jsonl", "--field", "len", "--uid-field", "uid", "--nearly-equal",
        "--dp", "2", "--max-token-len", "100",
    )  # fmt: skip
    assert "cost=tokens, equal_size=nearly, uid_field=uid, order=bubble" in grouped.stdout
    for result in (partition, plan):
        assert not re.search(r"\bTrue\b|\bFalse\b|'nearly'", result.stdout), result.stdout


def test_the_predicted_time_reads_in_units_not_exponents(files, monkeypatch):
    _in(files, monkeypatch)
    fit = run("calibrate", "log.jsonl", "--out", "time-cost.json")
    assert fit.returncode == 0, fit.stderr
    result = run("partition", "six.txt", "-k", "2", "--time-cost", "time-cost.json")
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("predicted time")]
    assert re.search(r"max [\d.]+ (µs|ms|s), mean [\d.]+ (µs|ms|s), max/mean", line), line
    assert not re.search(r"\de[-+]\d", line), line
    # The spread counts nanoseconds, named once (the header names the file).
    assert re.search(r"\(spread [\d,]+ -> [\d,]+ ns\)$", result.stdout, flags=re.M), result.stdout


def _documented_keys() -> dict[str, set[str]]:
    """docs/cli.md's table of --json keys: verb -> the keys ticked for it."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## Machine-readable output") :]
    assert "| key | verbs | what it holds |" in section
    keys: dict[str, set[str]] = {verb: set() for verb in VERBS}
    for key, verbs in re.findall(r"^\| `(\w+)` \| ([\w, ]+) \|", section, flags=re.M):
        for verb in verbs.split(", "):
            keys[verb].add(key)
    return keys


def test_json_keys_are_the_ones_docs_cli_lists_and_shared_facts_share_names(files, monkeypatch):
    _in(files, monkeypatch)
    assert run("calibrate", "log.jsonl", "--out", "time-cost.json").returncode == 0
    outputs = {
        "partition": run("partition", "six.txt", "-k", "2", "--time-cost", "time-cost.json", "--json"),
        "plan": run("plan", "six.txt", "--max-token-len", "100", "--time-cost", "time-cost.json", "--json"),
        "calibrate": run("calibrate", "log.jsonl", "--json"),
        "bench": run("bench", "--sizes", "16", "-k", "2", "--repeat", "1", "--json"),
    }  # fmt: skip
    documented = _documented_keys()
    for verb, result in outputs.items():
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        found = set(payload[0]) if verb == "bench" else set(payload)
        assert found == documented[verb], (verb, found ^ documented[verb])
    plan, partition = (json.loads(outputs[verb].stdout) for verb in ("plan", "partition"))
    assert partition["dp_size"] == 2 and plan["dp_size"] == 1
    assert not {"k", "ranks", "seconds", "max_micro_batches"} & (set(partition) | set(plan))
    assert partition["equal_size"] is False and plan["equal_size"] is False
    bench = json.loads(outputs["bench"].stdout)[0]
    assert bench["same_as_reference"] is bench["same"] is True


#: (arguments, fragments of the one-line error) for the files that come with the new verbs.
ERRORS = [
    (["plan", "six.txt", "--max-token-len", "9", "--time-cost", "not-a-cost.json"],
     ['not-a-cost.json: not a saved time cost (it has no "kind"', "seqbalance calibrate LOG --out"]),
    (["plan", "six.txt", "--max-token-len", "9", "--time-cost", "no-factor.json"],
     ['no-factor.json: no "factor" field']),
    (["partition", "six.txt", "--time-cost", "binary.json"],
     ["binary.json: not a UTF-8 text file (a saved time cost is JSON text"]),
    (["partition", "six.txt", "--time-cost", "."], [".: is a directory, not a saved time cost"]),
    (["calibrate", "binary.json"], ["binary.json: not a UTF-8 text file (the log is JSON Lines text)"]),
    (["calibrate", "."], ["is a directory, not a log of measured micro-batches"]),
    (["calibrate", "one.jsonl"], ["one.jsonl: 1 measured micro-batch; the fit needs at least 6"]),
    (["calibrate", "alike.jsonl"], ["alike.jsonl: the measured micro-batches cannot tell apart"]),
    (["calibrate", "log.jsonl", "--half-life", "0.01"], ["log.jsonl: the measured micro-batches weighed by --half-life"]),
    (["calibrate", "log.jsonl", "--model-config", "no-layers.json"],
     ['add "num_hidden_layers" to no-layers.json']),
    (["plan", "groups.jsonl", "--field", "len", "--uid-field", "uid", "--dp", "2", "--max-token-len", "10"],
     ["more than --max-token-len (10)", "(lines 5-6 of groups.jsonl)"]),
    (["bench", "--sizes", "16", "-k", "2", "--repeat", "1", "--plot", "no-such-dir/x.png"],
     ["no-such-dir/x.png: cannot write the plot (No such file or directory)"]),
]  # fmt: skip


@pytest.mark.parametrize(("args", "fragments"), ERRORS, ids=lambda v: " ".join(v)[:50])
def test_new_files_fail_in_one_line_naming_the_file(files: Path, args, fragments, monkeypatch):
    if "--plot" in args:
        pytest.importorskip("matplotlib")
    _in(files, monkeypatch)
    result = run(*args)
    assert result.stderr.strip().splitlines()[-1].startswith(f"seqbalance {args[0]}: error: ")
    # bench draws a progress bar before it fails: the error is still one line of its own.
    if args[0] == "bench":
        result.stderr = result.stderr.strip().splitlines()[-1]
    assert_one_line_error(result, *fragments)
    assert not PYTHON_SPEAK.search(result.stderr), result.stderr
    assert "Errno" not in result.stderr and "data[" not in result.stderr
