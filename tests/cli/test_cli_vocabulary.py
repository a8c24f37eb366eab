"""The command line in the library's vocabulary (issue 42): ``--dp`` and ``-k`` one flag on both
verbs, ``--cost tokens|workload|FILE``, ``--max-num-micro-batches`` (its old spelling an alias),
and one plan for one input whichever verb plans it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from seqbalance import plan_dp_micro_batches
from seqbalance.__main__ import main
from tests.cli._cli_runs import assert_main_one_line_error
from tests.cli.test_cli_model_config import CONFIG
from tests.planning import step_oracle


def _json(capsys: Any, *args: str) -> dict[str, Any]:
    assert main([*args, "--json"]) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    return payload


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("vocabulary")
    saved = folder / "time-cost.json"
    saved.write_text(json.dumps(step_oracle.spec_time_cost().to_dict()))
    config = folder / "config.json"
    config.write_text(json.dumps(CONFIG))
    batch = folder / "sft.npy"
    np.save(batch, step_oracle.sft_batch(0))
    return {"time_cost": str(saved), "config": str(config), "batch": str(batch)}


@pytest.mark.parametrize("verb", ["partition", "plan"])
def test_dp_and_k_are_one_flag_and_both_verbs_give_the_librarys_plan(capsys, files, verb):
    batch = files["batch"]
    plans = [
        _json(capsys, verb, batch, flag, "3", "--max-token-len", "65536")["plan"]
        for flag in ("--dp", "-k")
    ]
    capsys.readouterr()  # partition's note that plan is the verb
    lengths = np.load(batch)
    library = plan_dp_micro_batches(lengths, dp_size=3, max_token_len=65536)
    assert plans[0] == plans[1] == library


def test_cost_file_is_the_time_cost_or_the_model_config_it_holds(capsys, files):
    batch = files["batch"]
    common = ("plan", batch, "--dp", "2", "--max-token-len", "65536")
    for alias, file in (("--time-cost", files["time_cost"]), ("--model-config", files["config"])):
        by_cost = _json(capsys, *common, "--cost", file)
        by_alias = _json(capsys, *common, alias, file)
        assert by_cost["plan"] == by_alias["plan"] and by_cost["cost"] == by_alias["cost"]
    assert "predicted ns" in _json(capsys, *common, "--cost", files["time_cost"])["cost"]
    assert "FLOPs" in _json(capsys, *common, "--cost", files["config"])["cost"]


def test_cost_file_errors_are_one_line(capsys, files, tmp_path: Path):
    batch = files["batch"]
    assert_main_one_line_error(
        capsys,
        [batch, "--max-token-len", "65536", "--cost", "tokenz"],
        "--cost tokenz: not tokens, workload or a file",
        "no such file",
    )
    assert_main_one_line_error(
        capsys,
        [batch, "--max-token-len", "65536", "--cost", files["config"], "--time-cost", files["time_cost"]],
        "pass only one of --cost, --model-config and --time-cost",
    )  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_text('{"lengths": [100, 200], "seconds": 0.5}\n')
    # A calibrate log given as a cost is routed to --time-cost, which says what to do with it.
    assert_main_one_line_error(
        capsys,
        [batch, "--max-token-len", "65536", "--cost", str(log)],
        "looks like a log for seqbalance calibrate",
    )


def test_the_old_max_micro_batches_spelling_is_an_alias(capsys, files):
    common = (
        "plan",
        files["batch"],
        "--dp",
        "2",
        "--max-token-len",
        "65536",
        "--sync",
        "micro_batch",
    )
    new = _json(capsys, *common, "--max-num-micro-batches", "40")
    old = _json(capsys, *common, "--max-micro-batches", "40")
    assert new == {
        **old,
        "wall_seconds": new["wall_seconds"],
        "planner_seconds": new["planner_seconds"],
    }
    assert new["max_num_micro_batches"] == 40
