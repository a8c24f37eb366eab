"""``seqbalance plan --sync / --pipeline-stages / --forward-share / --max-num-micro-batches`` and the
predicted step every ``plan`` report shows (text and ``--json``), with today's plan's beside it
when the mode is not the default; bad flag values end with one line and exit status 2."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from seqbalance import TimeCost, plan_dp_micro_batches, simulate_step
from seqbalance.__main__ import main
from seqbalance.cli.readers import synthetic_rl_batch
from seqbalance.planning import step as step_module
from tests.cli._cli_runs import assert_one_line_error, run
from tests.planning import step_oracle

KEYS = {"makespan", "today_makespan", "bubble", "lower_bound", "unit"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path, np.ndarray, TimeCost]:
    folder = tmp_path_factory.mktemp("step")
    cost = step_oracle.spec_time_cost()
    saved = folder / "time-cost.json"
    saved.write_text(json.dumps(cost.to_dict()))
    lengths = np.concatenate([step_oracle.sft_batch(seed) for seed in range(2)])
    batch = folder / "sft.npy"
    np.save(batch, lengths)
    return saved, batch, lengths, cost


def payload_of(capsys, *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    out = capsys.readouterr().out
    payload: dict = json.loads(out)
    return payload


def test_the_default_report_shows_its_step_as_todays(capsys):
    payload = payload_of(capsys, "--dp", "4", "--max-token-len", "65536")
    lengths = synthetic_rl_batch()
    step = payload["predicted_step"]
    assert set(step) == KEYS
    model = simulate_step(payload["plan"], lengths, cost="tokens")
    assert step["makespan"] == model.makespan and step["today_makespan"] == model.makespan
    assert step["bubble"] == model.bubble and step["lower_bound"] == model.lower_bound
    assert (payload["sync"], payload["pipeline_stages"]) == ("step", 1)
    # wall_seconds comes last: read once everything before it was written (issue 37, item 6).
    assert list(payload)[-3:] == ["predicted_step", "plan", "wall_seconds"]
    assert main(["plan", "--dp", "4", "--max-token-len", "65536"]) == 0
    text = capsys.readouterr().out
    (line,) = [line for line in text.splitlines() if line.startswith("predicted step")]
    assert line.startswith("predicted step (ranks meeting once a step): ")
    assert "today's plan" not in line


def test_lockstep_reports_both_steps_in_cost_units(capsys):
    args = ("--dp", "8", "--max-token-len", "65536", "--cost", "workload")
    payload = payload_of(capsys, *args, "--sync", "micro_batch")
    lengths = synthetic_rl_batch()
    assert payload["plan"] == plan_dp_micro_batches(
        lengths, 8, 65536, cost="workload", sync="micro_batch"
    )
    today = plan_dp_micro_batches(lengths, 8, 65536, cost="workload")
    step = payload["predicted_step"]
    lockstep = {"cost": "workload", "sync": "micro_batch"}
    assert step["makespan"] == simulate_step(payload["plan"], lengths, **lockstep).makespan
    assert step["today_makespan"] == simulate_step(today, lengths, **lockstep).makespan
    assert step["makespan"] <= step["today_makespan"]
    assert payload["sync"] == "micro_batch" and payload["order"] == "searched"
    assert main(["plan", *args, "--sync", "micro_batch"]) == 0
    text = capsys.readouterr().out
    assert "sync=micro_batch" in text and "order=searched" in text
    (line,) = [line for line in text.splitlines() if line.startswith("predicted step")]
    assert line.startswith("predicted step (ranks in lockstep): ") and " workload" in line
    assert "; today's plan (" in line


def test_pipelines_with_a_time_cost_report_seconds(capsys, files):
    saved, batch, lengths, cost = files
    args = ("plan", str(batch), "--dp", "4", "--max-token-len", "65536", "--time-cost", str(saved))
    mode = ("--pipeline-stages", "4", "--forward-share", "0.25", "--max-num-micro-batches", "60")
    assert main([*args, *mode, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    plan = plan_dp_micro_batches(
        lengths,
        4,
        65536,
        cost=cost,
        pipeline_stages=4,
        forward_share=0.25,
        max_num_micro_batches=60,
    )
    assert payload["plan"] == plan
    pipeline = {"cost": cost, "pipeline_stages": 4, "forward_share": 0.25}
    step = payload["predicted_step"]
    assert step["makespan"] == simulate_step(plan, lengths, **pipeline).makespan
    today = plan_dp_micro_batches(lengths, 4, 65536, cost=cost)
    assert step["today_makespan"] == simulate_step(today, lengths, **pipeline).makespan
    assert step["makespan"] < step["today_makespan"] * 0.99
    assert (payload["pipeline_stages"], payload["forward_share"]) == (4, 0.25)
    assert payload["max_num_micro_batches"] == 60
    assert main([*args, *mode]) == 0
    text = capsys.readouterr().out
    assert "pipeline_stages=4, forward_share=0.25, max_num_micro_batches=60" in text
    (line,) = [line for line in text.splitlines() if line.startswith("predicted step")]
    assert line.startswith("predicted step (1F1B, 4 stages): ") and " s, bubble " in line
    assert "this plan" in line and "below" in line


def test_json_is_one_document_and_notes_go_to_stderr(files):
    saved, batch, _, _ = files
    result = run(
        "plan",
        str(batch),
        "--dp",
        "4",
        "--max-token-len",
        "65536",
        "--time-cost",
        str(saved),
        "--sync",
        "micro_batch",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)  # one document: anything else would not parse
    assert result.stdout.count("\n") == 1
    assert set(payload["predicted_step"]) == KEYS


def test_the_old_partition_route_reports_the_step_too(capsys):
    assert main(["partition", "-k", "4", "--max-token-len", "65536", "--per-rank", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    step = payload["predicted_step"]
    assert step["makespan"] == step["today_makespan"]
    lengths = synthetic_rl_batch()
    assert step["makespan"] == simulate_step(payload["plan"], lengths).makespan


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--pipeline-stages", "0"], ["argument --pipeline-stages: must be >= 1, got 0"]),
        (["--pipeline-stages", "two"], ["argument --pipeline-stages: expected an integer"]),
        (["--pipeline-stages", str(2**24 + 1)], ["argument --pipeline-stages: must be <="]),
        (["--forward-share", "1"], ["argument --forward-share: must be a number in (0, 1)"]),
        (["--forward-share", "nan"], ["argument --forward-share: must be a number in (0, 1)"]),
        (["--forward-share", "half"], ["argument --forward-share: expected a number"]),
        (["--sync", "fsdp"], ["argument --sync: invalid choice: 'fsdp'"]),
        (
            ["--max-num-micro-batches", "0"],
            ["argument --max-num-micro-batches/--max-micro-batches: must be >= 1, got 0"],
        ),
        # The old spelling stays an alias until 1.0.
        (["--max-micro-batches", "1"], ["--max-num-micro-batches 1 is below the"]),
        (
            ["--sync", "micro_batch", "--pipeline-stages", "2"],
            ["--pipeline-stages 2 with --sync micro_batch"],
        ),
        (
            ["--sync", "micro_batch", "--order", "bubble"],
            ["--order bubble with --sync", "leave --order out"],
        ),
        (
            ["--pipeline-stages", "4", "--max-num-micro-batches", "1"],
            ["--max-num-micro-batches 1 is below the", "pass at least"],
        ),
        # The default mode too: it plans today's count, so a maximum below it is refused.
        (
            ["--max-num-micro-batches", "1"],
            ["--max-num-micro-batches 1 is below the", "pass at least"],
        ),
    ],
)
def test_bad_step_flags_end_with_one_line_naming_the_flag(args, fragments):
    assert_one_line_error(run("plan", "--dp", "4", "--max-token-len", "65536", *args), *fragments)


def test_plan_help_names_the_step_flags():
    result = run("plan", "--help")
    assert result.returncode == 0
    for flag in ("--sync", "--pipeline-stages", "--forward-share", "--max-num-micro-batches"):
        assert flag in result.stdout


def test_the_command_line_prints_the_librarys_progress_on_stderr(capsys, files, monkeypatch):
    # The library only logs its progress (issue 42); the verb attaches the handler that prints
    # it, for the run only.
    saved, batch, _, _ = files
    monkeypatch.setattr(step_module, "PROGRESS_AFTER", 0.0)
    args = ("plan", str(batch), "--dp", "4", "--max-token-len", "65536", "--time-cost", str(saved))
    assert main([*args, "--pipeline-stages", "4", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    lines = captured.err.splitlines()
    assert lines and all(
        line.startswith("seqbalance.plan_dp_micro_batches: step search: ") for line in lines
    )
    assert not logging.getLogger("seqbalance.plan").handlers
