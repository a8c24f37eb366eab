"""The command line's shape options: --max-sequences, --footprint, --key-field (each with
--max-token-len), and their failures."""

from __future__ import annotations

import json

import pytest

from seqbalance import plan_dp_micro_batches
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_main_one_line_error, run_json


def test_max_sequences_caps_the_samples_of_every_micro_batch(capsys):
    payload = run_json(capsys, "--max-token-len", "65536", "--max-sequences", "3", "-k", "4")
    lengths = synthetic_rl_batch().tolist()
    plan = payload["plan"]
    assert payload["max_sequences"] == 3
    assert all(len(mb) <= 3 for rank in plan for mb in rank)
    assert sorted(i for rank in plan for mb in rank for i in mb) == list(range(len(lengths)))
    assert {len(rank) for rank in plan} == {payload["micro_batches_per_rank"]}


def test_a_padded_footprint_is_the_dp_plan_with_footprint_padded(capsys):
    payload = run_json(capsys, "--max-token-len", "32768", "--footprint", "padded", "--dp", "4")
    lengths = synthetic_rl_batch()
    assert payload["plan"] == plan_dp_micro_batches(
        lengths, 4, 32768, footprint="padded", cost="tokens"
    )
    values = lengths.tolist()
    assert all(
        len(mb) * max(values[i] for i in mb) <= 32768
        for rank in payload["plan"]
        for mb in rank
        if mb
    )


def test_key_field_keeps_keys_apart(tmp_path, capsys):
    records = [{"n": 100 + 37 * i % 900, "m": "img" if i % 3 == 0 else "txt"} for i in range(60)]
    file = tmp_path / "batch.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    payload = run_json(
        capsys, str(file), "--field", "n", "--key-field", "m", "-k", "2", "--max-token-len", "2000"
    )
    assert payload["key_field"] == "m"
    for rank in payload["plan"]:
        for mb in rank:
            assert len({records[i]["m"] for i in mb}) <= 1
            assert sum(records[i]["n"] for i in mb) <= 2000


def test_the_summary_says_which_limits_it_kept(capsys):
    from seqbalance.__main__ import main

    assert main(["partition", "--max-token-len", "65536", "--max-sequences", "5"]) == 0
    out = capsys.readouterr().out
    assert "max_sequences=5" in out
    assert "shape limits kept: at most" in out


@pytest.mark.parametrize("flag", [["--max-sequences", "2"], ["--footprint", "padded"]])
def test_shape_options_need_max_token_len(capsys, flag):
    assert_main_one_line_error(capsys, flag, flag[0], "needs --max-token-len")


def test_key_field_needs_a_json_lines_file(capsys):
    assert_main_one_line_error(
        capsys, ["--key-field", "m", "--max-token-len", "10"], "--key-field reads JSON Lines"
    )


def test_a_record_without_the_key_is_named_by_its_line(tmp_path, capsys):
    file = tmp_path / "batch.jsonl"
    file.write_text('{"n": 5, "m": 1}\n{"n": 6}\n')
    assert_main_one_line_error(
        capsys,
        [str(file), "--field", "n", "--key-field", "m", "-k", "1", "--max-token-len", "10"],
        f"{file}:2",
        "no field 'm' (--key-field)",
    )
