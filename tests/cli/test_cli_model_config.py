"""``seqbalance partition --model-config FILE.json``: balance by the model's training FLOPs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from seqbalance import ModelCost, get_seqlen_balanced_partitions, plan_dp_micro_batches
from seqbalance.__main__ import main
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_main_one_line_error, run_json

#: A small GQA model; the CLI reads it as a Hugging Face config.json (nulls count as absent).
CONFIG = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 1024,
    "vocab_size": 32000,
    "head_dim": None,
}


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def test_it_balances_the_exact_flops_of_every_sample(capsys, config_file):
    payload = run_json(capsys, "--model-config", config_file, "-k", "8")
    flops = ModelCost.from_config(CONFIG).flops(synthetic_rl_batch())
    assert payload["partitions"] == get_seqlen_balanced_partitions(flops, 8, False)
    assert payload["report"]["balanced"]["sums"] == [
        sum(flops[i] for i in part) for part in payload["partitions"]
    ]
    assert payload["cost"] == "FLOPs (config.json)"


def test_the_dp_plan_balances_flops_under_the_token_cap(capsys, config_file):
    payload = run_json(
        capsys, "--model-config", config_file, "--dp", "4", "--max-token-len", "32768"
    )
    lengths = synthetic_rl_batch()
    model = ModelCost.from_config(CONFIG)
    expected = plan_dp_micro_batches(
        lengths, 4, 32768, cost=lambda values: np.asarray(model.flops(values), dtype=np.int64)
    )
    assert payload["plan"] == expected


def test_it_excludes_cost(capsys, config_file):
    assert_main_one_line_error(
        capsys,
        ["--model-config", config_file, "--cost", "workload"],
        "either --cost or --model-config",
    )


def test_a_config_it_cannot_read_names_the_file_and_the_field(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in CONFIG.items() if k != "num_hidden_layers"}))
    assert_main_one_line_error(
        capsys, ["--model-config", str(path)], str(path), "num_hidden_layers is missing"
    )
    path.write_text(json.dumps({**CONFIG, "layer_types": ["chunked_attention"] * 4}))
    assert_main_one_line_error(capsys, ["--model-config", str(path)], "chunked_attention")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [("not json", "not valid JSON"), ("[1, 2]", "expected a JSON object")],
)
def test_a_bad_config_file_is_one_line(capsys, tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_text(content)
    assert_main_one_line_error(capsys, ["--model-config", str(path)], str(path), fragment)


def test_a_missing_config_file_is_one_line(capsys, tmp_path):
    assert_main_one_line_error(
        capsys, ["--model-config", str(tmp_path / "none.json")], "no such file"
    )


def test_flops_above_int64_are_refused_not_rounded(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "hidden_size": 2**40, "num_attention_heads": 1}))
    assert_main_one_line_error(capsys, ["--model-config", str(path)], "above 2**63 - 1")


def test_the_text_report_names_the_cost(capsys, config_file):
    assert main(["partition", "--model-config", config_file, "-k", "4"]) == 0
    out = capsys.readouterr().out
    assert "cost=FLOPs (config.json)" in out
    # The spread's unit is the unit alone: the header names the file.
    assert re.search(r"\(spread [\d,]+ -> [\d,]+ FLOPs\)$", out, flags=re.M), out
