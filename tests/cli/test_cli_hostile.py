"""The command line against the third adversarial pass (issue 28): what a file or flag names
that is not what it should be, huge limits, and the one rule for keys and group ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqbalance.__main__ import main
from tests.cli._cli_runs import assert_main_one_line_error, run_json

CONFIG = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "intermediate_size": 1024,
    "vocab_size": 32000,
}


def test_a_model_config_that_is_a_directory_is_named_as_a_config(capsys, tmp_path):
    assert main(["partition", "--model-config", str(tmp_path), "-k", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{tmp_path}: is a directory, not a model config file (config.json)" in err
    assert "lengths" not in err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_model_config_is_named_utf16_without_the_npy_hint(capsys, tmp_path, encoding):
    path = tmp_path / "config.json"
    path.write_bytes(json.dumps(CONFIG).encode(encoding))
    assert_main_one_line_error(
        capsys,
        ["--model-config", str(path)],
        f"{path}: UTF-16 text; a model config is UTF-8 JSON (save it as UTF-8)",
    )


def test_a_model_config_in_another_encoding_gets_no_npy_hint(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes('{"model_type": "caf\xe9"}'.encode("latin-1"))
    assert main(["partition", "--model-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a UTF-8 text file (a model config is UTF-8 JSON)" in err
    assert ".npy" not in err


def test_a_lengths_directory_keeps_its_message(capsys, tmp_path):
    assert_main_one_line_error(capsys, [str(tmp_path)], "is a directory, not a file of lengths")


@pytest.mark.parametrize("limit", ["99999999999999999999", str(2**64), str(2**63)])
def test_a_huge_max_sequences_plans_as_no_limit(capsys, tmp_path, limit):
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(str(n) for n in [5, 9, 3, 7, 7, 2, 8, 1]) + "\n")
    common = [str(path), "-k", "2", "--max-token-len", "16"]
    unlimited = run_json(capsys, *common)
    limited = run_json(capsys, *common, "--max-sequences", limit)
    assert limited["plan"] == unlimited["plan"]
    assert limited["max_sequences"] == int(limit)


def _keyed_file(tmp_path: Path, keys: list[str]) -> str:
    path = tmp_path / "keyed.jsonl"
    path.write_text("".join(f'{{"n": 3, "m": {key}}}\n' for key in keys))
    return str(path)


def test_key_fields_equal_as_python_values_are_one_key(capsys, tmp_path):
    # The library's rule (keys compare as dict keys do): 1, 1.0 and true are one key; the
    # string "1" is another.
    file = _keyed_file(tmp_path, ["1", "1.0", "true", '"1"', "2", "2.0"])
    payload = run_json(
        capsys, file, "-k", "1", "--field", "n", "--key-field", "m", "--max-token-len", "100"
    )
    together = sorted(sorted(batch) for batch in payload["plan"][0])
    assert together == [[0, 1, 2], [3], [4, 5]]


@pytest.mark.parametrize("flag", ["--uid-field", "--key-field"])
def test_a_nan_key_or_uid_is_refused_naming_the_line(capsys, tmp_path, flag):
    file = _keyed_file(tmp_path, ["1", "NaN", "1"])
    extra = ["--max-token-len", "100"] if flag == "--key-field" else []
    assert main(["partition", file, "-k", "1", "--field", "n", flag, "m", *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{file}:2: field 'm' is NaN ({flag}), which matches nothing" in err.splitlines()[-1]
