"""Errors in the shell's words, float costs from files, and the report's small promises
(the refine hint, ``refined_imbalance``): the command line run in child processes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import seqbalance
from seqbalance import get_seqlen_balanced_partitions, partition_ids
from seqbalance.cli._messages import config_words, flag_words
from seqbalance.cli.partition import _refine_gain
from tests.cli._cli_runs import assert_one_line_error, run

#: What a shell user cannot type: a keyword argument (``name=...``, ``equal_size='nearly'``) or
#: the library's parameter names.
PYTHON_SPEAK = re.compile(
    r"\b[a-z]+_[a-z_]+=|=\.\.\.|\b(?:k_partitions|dp_size|equal_size|max_token_len|"
    r"force_group_size|uid_list|max_sequences)\b|ModelCost|\bpass \w+="
)

DENSE = {
    "hidden_size": 4096,
    "num_hidden_layers": 2,
    "num_attention_heads": 32,
    "intermediate_size": 1024,
    "vocab_size": 1000,
}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "ten.txt").write_text("".join(f"{n}\n" for n in range(100, 1001, 100)))
    (tmp_path / "huge.txt").write_text(f"{2**31}\n{2**31}\n")
    (tmp_path / "groups.jsonl").write_text(
        "".join(json.dumps({"n": n, "u": u}) + "\n" for n, u in [(5, 1), (6, 1), (7, 2), (8, 3)])
    )
    configs = {
        "no_layers": {k: v for k, v in DENSE.items() if k != "num_hidden_layers"},
        "chunked": {**DENSE, "attention_chunk_size": 8192},
        "interval": {**DENSE, "full_attention_interval": 4},
        "moe_freq": {**DENSE, "moe_layer_freq": 2},
    }
    for name, config in configs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
    return tmp_path


#: (arguments, fragments of the one-line error): every way a library message reaches the shell.
ERRORS = [
    (["partition", "ten.txt", "-k", "3", "--equal-size"], ["-k (3) with --equal-size", "--nearly-equal allows"]),
    (["partition", "ten.txt", "-k", "11"], ["smaller than -k (11)"]),
    (["partition", "ten.txt", "--model-config", "no_layers.json"], ['add "num_hidden_layers" to no_layers.json']),
    (["partition", "ten.txt", "--model-config", "chunked.json"], ['set "attention_chunk_size" to null']),
    (["partition", "ten.txt", "--model-config", "interval.json"], ['add "layer_types" (one entry per layer)']),
    (["partition", "ten.txt", "--model-config", "moe_freq.json"], ['"mlp_only_layers"', 'set "moe_layer_freq" to null']),
    (["plan", "ten.txt", "--dp", "4", "--equal-size", "--max-token-len", "5000"], ["--dp (4) with --equal-size; pass --nearly-equal"]),
    (["plan", "groups.jsonl", "--field", "n", "--uid-field", "u", "--dp", "2", "--equal-size", "--max-token-len", "100"], ["drop --equal-size and --nearly-equal"]),
    (["plan", "ten.txt", "--dp", "11", "--max-token-len", "5000"], ["smaller than --dp (11)"]),
    (["plan", "ten.txt", "--max-token-len", "500"], ["lengths[5] = 600 is longer than --max-token-len (500)", "line 6 of ten.txt"]),
    (["plan", "huge.txt", "--cost", "workload", "--max-token-len", str(2**32)], ["pass --cost tokens"]),
    (["plan", "ten.txt", "--max-token-len", "5000", "--group-size", "3"], ["not divisible by --group-size (3)"]),
]  # fmt: skip


@pytest.mark.parametrize(("args", "fragments"), ERRORS, ids=lambda v: " ".join(v)[:50])
def test_errors_name_flags_and_config_fields(files: Path, args, fragments, monkeypatch):
    # The files by their names, as a user types them: run from their folder, seqbalance found
    # wherever this interpreter imports it from.
    monkeypatch.setenv("PYTHONPATH", str(Path(seqbalance.__file__).resolve().parents[1]))
    monkeypatch.chdir(files)
    result = run(*args)
    assert_one_line_error(result, *fragments)
    assert not PYTHON_SPEAK.search(result.stderr), result.stderr


def test_the_python_speak_check_catches_the_old_messages():
    assert PYTHON_SPEAK.search("with equal_size=True (equal_size='nearly' allows ...)")
    assert PYTHON_SPEAK.search("num_hidden_layers is missing; pass num_hidden_layers=...")
    assert PYTHON_SPEAK.search("smaller than k_partitions (5)")
    assert not PYTHON_SPEAK.search("lengths[7] = 900 is longer than --max-token-len (100)")


def test_translations_leave_other_text_alone():
    assert flag_words("lengths[3] = 7 costs 12 FLOPs") == "lengths[3] = 7 costs 12 FLOPs"
    assert flag_words("pass equal_size=False") == "drop --equal-size and --nearly-equal"
    assert (
        config_words("head_dim is 0; pass head_dim=...", "c.json")
        == 'head_dim is 0; add "head_dim" to c.json'
    )
    assert config_words("pass x=...", r"C:\models\c.json") == r'add "x" to C:\models\c.json'


# ---------------------------------------------------------------------------- float costs


def test_partition_takes_float_costs_from_json_lines_and_text(tmp_path: Path):
    costs = [1.5, 0.25, 3.75, 2.0, 0.5, 1.0]
    jsonl = tmp_path / "costs.jsonl"
    jsonl.write_text("".join(json.dumps({"cost": c}) + "\n" for c in costs))
    text = tmp_path / "costs.txt"
    text.write_text("".join(f"{c}\n" for c in costs))
    expected = get_seqlen_balanced_partitions(costs, 2, False)
    for args in ([str(jsonl), "--field", "cost"], [str(text)]):
        result = run("partition", *args, "-k", "2", "--json")
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        assert payload["partitions"] == expected
        assert payload["source"].endswith("6 costs")
        assert sorted(payload["report"]["balanced"]["sums"]) == sorted(
            sum(costs[i] for i in part) for part in expected
        )


def test_plan_refuses_float_lengths_by_name(tmp_path: Path):
    jsonl = tmp_path / "costs.jsonl"
    jsonl.write_text('{"len": 10}\n{"len": 2.5}\n')
    assert_one_line_error(
        run("plan", str(jsonl), "--field", "len", "--max-token-len", "100"),
        "costs.jsonl:2: field 'len' must be a whole number of tokens",
        "float costs: seqbalance partition",
    )
    for bad, fragment in [("NaN", "must be finite"), ("-1.5", "must be >= 0")]:
        jsonl.write_text(f'{{"len": {bad}}}\n')
        assert_one_line_error(run("partition", str(jsonl), "--field", "len", "-k", "1"), fragment)


# ---------------------------------------------------------------------------- refine hint, JSON


def test_refine_gain_says_nothing_below_what_it_would_print():
    assert _refine_gain(None, 1.2) is None
    assert _refine_gain((1.1999, 0.0), 1.2) is None  # 0.008%: would print as 0.0%
    assert _refine_gain((1.2, 0.0), 1.2) is None
    assert _refine_gain((1.0, 0.0), 1.1) == "9.1%"


def test_no_refine_hint_when_refine_gains_nothing(tmp_path: Path):
    path = tmp_path / "even.txt"
    path.write_text("100\n" * 16)
    result = run("partition", str(path), "-k", "4")
    assert result.returncode == 0, result.stderr
    assert "--refine would give" not in result.stdout
    assert "0.0% lighter" not in result.stdout


def test_refined_imbalance_is_the_refined_splits_with_or_without_refine(tmp_path: Path):
    path = tmp_path / "l.txt"
    lengths = [812, 4096, 77, 1500, 2048, 300, 9000, 640]
    path.write_text("".join(f"{n}\n" for n in lengths))
    plain = json.loads(run("partition", str(path), "-k", "2", "--equal-size", "--json").stdout)
    refined = json.loads(
        run("partition", str(path), "-k", "2", "--equal-size", "--refine", "--json").stdout
    )
    ids = partition_ids(lengths, 2, equal_size=True, refine=True)
    heaviest = max(sum(n for n, i in zip(lengths, ids, strict=True) if i == p) for p in (0, 1))
    expected = heaviest / (sum(lengths) / 2)
    assert plain["refined_imbalance"] == pytest.approx(expected)
    assert refined["refined_imbalance"] == pytest.approx(expected)
    assert refined["refined_imbalance"] == refined["report"]["balanced"]["imbalance"]
    assert plain["refined_imbalance"] < plain["report"]["balanced"]["imbalance"]
    big = tmp_path / "big.npy"
    np.save(big, np.ones((1 << 20) + 2, dtype=np.int64))
    large = json.loads(run("partition", str(big), "-k", "2", "--json").stdout)
    assert large["refined_imbalance"] is None  # not computed above 2**20 groups
