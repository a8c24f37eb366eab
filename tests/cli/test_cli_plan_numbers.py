"""What ``seqbalance plan`` shows is one number per rank, the plan the library call gives, and a
wait that covers writing the answer (issue 37, items 4 to 6)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqbalance import TimeCost, plan_dp_micro_batches
from seqbalance.__main__ import main
from seqbalance.cli import _common
from tests.cli._cli_runs import run


@pytest.fixture(scope="module")
def time_cost_file(tmp_path_factory) -> tuple[Path, TimeCost]:
    # A cost whose micro-batch term is large beside a document's: the table's documents-only
    # sum and the predicted time were 10x apart there (16.9 ms against 161 ms).
    rng = np.random.default_rng(3)
    batches = [[int(x) for x in rng.integers(50, 3000, size=rng.integers(1, 6))] for _ in range(40)]
    seconds = [0.02 + sum(1e-5 + 2e-7 * n + 4e-12 * n * (n + 1) / 2 for n in b) for b in batches]
    cost = TimeCost.fit(batches, seconds)
    path = tmp_path_factory.mktemp("numbers") / "time-cost.json"
    path.write_text(json.dumps(cost.to_dict()))
    return path, cost


def _lengths_file(tmp_path: Path, lengths: list[int]) -> Path:
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{n}\n" for n in lengths))
    return path


def test_with_a_time_cost_each_rank_shows_one_number(tmp_path, capsys, time_cost_file):
    saved, cost = time_cost_file
    lengths = [0, 5, 700, 2500, 0, 64, 1800, 3000, 90, 1200, 40, 2600, 333, 0, 1500]
    source = _lengths_file(tmp_path, lengths)
    args = ["plan", str(source), "--dp", "3", "--max-token-len", "4096", "--time-cost", str(saved)]
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    per_rank = payload["predicted_time"]["per_rank_seconds"]
    shown = [row["cost"] for row in payload["ranks_summary"]]
    assert shown == per_rank
    # ... and that number is what TimeCost.predict gives the rank's micro-batches (a sample of
    # length 0 is no document; a micro-batch of none costs nothing).
    for rank, micro_batches in enumerate(payload["plan"]):
        documents = [[lengths[i] for i in mb if lengths[i] > 0] for mb in micro_batches]
        expected = float(cost.predict([d for d in documents if d]).sum())
        # Each document's seconds rounded to the whole nanoseconds every planner weighs.
        assert per_rank[rank] == pytest.approx(expected, rel=1e-12, abs=0.5e-9 * len(lengths))
        assert per_rank[rank] > float(cost(np.array(lengths)[sum(micro_batches, [])]).sum())
    assert payload["predicted_step"]["makespan"] == pytest.approx(max(per_rank), rel=1e-12)
    # The text report's table shows the same seconds as its summary line.
    assert main(args) == 0
    text = capsys.readouterr().out
    table = [line.split() for line in text.splitlines() if line[:4].strip().isdigit()]
    assert len(table) == 3
    for row, seconds in zip(table, per_rank, strict=True):
        assert " ".join(row[4:6]) == _common._format_seconds(seconds)
    top = _common._format_seconds(max(per_rank))
    assert f"predicted time per rank (time-cost.json): max {top}" in text
    assert "heaviest rank by predicted seconds (time-cost.json)" in text


def test_partition_with_a_time_cost_reports_the_documents_seconds(tmp_path, capsys, time_cost_file):
    # partition has no micro-batches: a rank's predicted time is its documents' seconds.
    saved, cost = time_cost_file
    lengths = [5, 700, 2500, 64, 1800, 3000, 90, 1200]
    source = _lengths_file(tmp_path, lengths)
    assert main(["partition", str(source), "-k", "2", "--time-cost", str(saved), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    for part, seconds in zip(
        payload["partitions"], payload["predicted_time"]["per_rank_seconds"], strict=True
    ):
        assert seconds == pytest.approx(float(cost(np.array(lengths)[part]).sum()), rel=1e-12)


# capsys is read out (and so emptied) by every example.
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=60),
    dp=st.integers(1, 5),
    cap=st.integers(5000, 20000),
    equal_size=st.booleans(),
)
def test_plan_gives_the_plan_of_the_library_call(
    tmp_path_factory, capsys, lengths, dp, cap, equal_size
):
    # The command's default cost is the library's one default ("tokens"): the same plan as the
    # library call with no cost given.
    if equal_size and len(lengths) % dp:
        lengths = lengths + [1] * (dp - len(lengths) % dp)
    if len(lengths) < dp:
        lengths = lengths + [1] * (dp - len(lengths))
    source = _lengths_file(tmp_path_factory.mktemp("same"), lengths)
    flags = ["--equal-size"] if equal_size else []
    assert (
        main(["plan", str(source), "--dp", str(dp), "--max-token-len", str(cap), *flags, "--json"])
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["cost"] == "tokens"
    assert payload["plan"] == plan_dp_micro_batches(lengths, dp, cap, equal_size=equal_size)


def test_plan_and_partition_name_the_one_default_cost_tokens():
    planned = run("plan", "--dp", "2", "--max-token-len", "65536")
    assert planned.returncode == 0, planned.stderr
    assert "cost=tokens" in planned.stdout.splitlines()[1]
    assert "heaviest rank by tokens" in planned.stdout
    split = run("partition", "-k", "2", "--json")
    assert json.loads(split.stdout)["cost"] == "tokens"


@pytest.mark.parametrize("verb", [["plan", "--dp", "2", "--max-token-len", "65536"], ["partition"]])
def test_wall_seconds_covers_writing_the_json(monkeypatch, capsys, verb):
    # The wait the docs define is the whole command's: serialising and writing a plan of 10^7
    # samples took 4 s that wall_seconds left out (4.9 s reported for a 9.0 s wait).
    started = time.perf_counter()
    monkeypatch.setattr(_common, "waited_seconds", lambda: time.perf_counter() - started)
    real_dumps = json.dumps

    def slow_dumps(value, *args, **kwargs):
        time.sleep(0.3)
        return real_dumps(value, *args, **kwargs)

    monkeypatch.setattr(_common.json, "dumps", slow_dumps)
    monkeypatch.setattr(_common, "PROGRESS_FROM", 1)
    assert main([*verb, "--json"]) == 0
    captured = capsys.readouterr()
    monkeypatch.undo()
    payload = json.loads(captured.out)
    assert list(payload)[-1] == "wall_seconds"
    assert payload["wall_seconds"] >= 0.3 + payload["planner_seconds"]
    assert "as JSON" in captured.err  # the writing shows progress where it takes seconds
