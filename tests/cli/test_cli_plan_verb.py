"""``seqbalance plan``: the planning verb, its summary from arrays, its time line and progress,
and ``partition --max-token-len`` kept working with a notice (child processes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import plan_dp_micro_batches
from seqbalance.cli import plan as cli_plan
from seqbalance.cli._common import PROGRESS_FROM
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_one_line_error, run


def _json(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    payload: dict = json.loads(result.stdout)
    return payload


def test_plan_is_plan_dp_micro_batches_with_its_summary():
    payload = _json("plan", "--dp", "8", "--max-token-len", "65536", "--cost", "workload")
    lengths = synthetic_rl_batch()
    plan = plan_dp_micro_batches(lengths, 8, 65536, cost="workload")
    assert payload["plan"] == plan
    assert payload["dp_size"] == 8 and payload["order"] == "bubble"
    work = 24576 * lengths + lengths * lengths
    for rank, row in zip(plan, payload["ranks_summary"], strict=True):
        assert row["samples"] == sum(len(batch) for batch in rank)
        assert row["micro_batches"] == sum(1 for batch in rank if batch)
        assert row["tokens"] == int(sum(lengths[i] for batch in rank for i in batch))
        assert row["cost"] == int(sum(work[i] for batch in rank for i in batch))
        assert row["fullest_micro_batch"] == max(int(lengths[batch].sum()) for batch in rank)
        assert row["most_samples"] == max(len(batch) for batch in rank)


def test_plan_without_dp_is_one_rank_and_order_is_reported():
    payload = _json("plan", "--max-token-len", "32768", "--order", "largest_first")
    lengths = synthetic_rl_batch()
    assert payload["dp_size"] == 1 and payload["order"] == "largest_first"
    # No --cost: the command's default, the library's one default (tokens).
    assert payload["plan"] == plan_dp_micro_batches(lengths, 1, 32768, order="largest_first")
    text = run("plan", "--max-token-len", "32768", "--order", "largest_first")
    assert "plan_dp_micro_batches: ranks=1, max_token_len=32,768" in text.stdout
    assert "order=largest_first" in text.stdout


def test_partition_max_token_len_keeps_working_with_a_one_line_notice():
    old = run("partition", "--dp", "4", "--max-token-len", "65536", "--json")
    assert old.returncode == 0
    (notice,) = old.stderr.strip().splitlines()
    assert "seqbalance plan [FILE] --max-token-len N [--dp N]" in notice
    # One plan for one input whichever verb and whichever spelling of the rank count: -k and
    # --dp are one flag, and both verbs plan as plan_dp_micro_batches does.
    new = _json("plan", "--dp", "4", "--max-token-len", "65536")
    assert json.loads(old.stdout)["plan"] == new["plan"]
    assert _json("plan", "-k", "4", "--max-token-len", "65536")["plan"] == new["plan"]
    spelled_k = run("partition", "-k", "4", "--max-token-len", "65536", "--json")
    assert json.loads(spelled_k.stdout)["plan"] == new["plan"]
    # The per-rank two-step route has a flag of its own.
    two_step = run("partition", "-k", "4", "--max-token-len", "65536", "--per-rank")
    assert two_step.returncode == 0 and "every rank runs" in two_step.stdout
    assert two_step.stderr.strip().splitlines() == [notice]


def test_the_first_time_line_is_the_wait_then_the_librarys_share():
    result = run("plan", "--dp", "4", "--max-token-len", "65536")
    assert result.returncode == 0, result.stderr
    times = [line for line in result.stdout.splitlines() if line.startswith("time:")]
    assert len(times) == 1
    match = re.fullmatch(
        r"time: ([\d.]+) (s|ms) \(([\d.]+) (s|ms|µs) in plan_dp_micro_batches\)", times[0]
    )
    assert match is not None, times[0]
    scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}
    waited = float(match.group(1)) * scale[match.group(2)]
    library = float(match.group(3)) * scale[match.group(4)]
    # The wait holds the interpreter's start-up and the import of NumPy: far above the call.
    assert waited > library and waited > 0.05


def test_progress_on_stderr_for_large_inputs(tmp_path: Path):
    path = tmp_path / "big.npy"
    np.save(path, np.random.default_rng(0).integers(1, 4096, PROGRESS_FROM, dtype=np.int64))
    result = run("plan", str(path), "--dp", "4", "--max-token-len", "65536")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"seqbalance plan: planning {PROGRESS_FROM:,} lengths over 4 ranks"
    assert lines[1].startswith("seqbalance plan: planned in ") and "summarising" in lines[1]
    small = run("plan", "--dp", "4", "--max-token-len", "65536")
    assert small.stderr == ""
    partition = run("partition", str(path), "-k", "2")
    assert partition.returncode == 0, partition.stderr
    assert partition.stderr == (
        f"seqbalance partition: partitioning {PROGRESS_FROM:,} items over 2 ranks\n"
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["plan"], "the following arguments are required: --max-token-len"),
        (["plan", "--max-token-len", "100"], "is longer than --max-token-len (100)"),
        (
            ["plan", "--max-token-len", "65536", "--dp", "0"],
            "argument --dp/-k: must be >= 1, got 0",
        ),
    ],
)
def test_plan_errors_are_one_line(args, fragment):
    assert_one_line_error(run(*args), fragment)


def test_plan_help_names_its_flags():
    result = run("plan", "--help")
    assert result.returncode == 0
    for flag in (
        "--max-token-len",
        "--dp",
        "--order",
        "--max-sequences",
        "--cost",
        "--model-config",
    ):
        assert flag in result.stdout


def _naive_summary(lengths, costs, rank_ids, micro_batch_ids, n_ranks, count):
    rows = {name: [] for name in ("samples", "micro_batches", "tokens", "cost", "fullest", "most")}
    for rank in range(n_ranks):
        cells = [
            [i for i in range(len(lengths)) if rank_ids[i] == rank and micro_batch_ids[i] == m]
            for m in range(count)
        ]
        rows["samples"].append(sum(len(cell) for cell in cells))
        rows["micro_batches"].append(sum(1 for cell in cells if cell))
        rows["tokens"].append(sum(int(lengths[i]) for cell in cells for i in cell))
        rows["cost"].append(sum(costs[i] for cell in cells for i in cell))
        rows["fullest"].append(max(sum(int(lengths[i]) for i in cell) for cell in cells))
        rows["most"].append(max(len(cell) for cell in cells))
    return rows


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n_ranks: st.integers(1, 4).flatmap(
            lambda count: st.tuples(
                st.just(n_ranks),
                st.just(count),
                st.lists(
                    st.tuples(
                        st.integers(0, 2**62),
                        st.integers(0, n_ranks - 1),
                        st.integers(0, count - 1),
                    ),
                    min_size=1,
                    max_size=30,
                ),
            )
        )
    ),
    st.booleans(),
)
def test_the_array_summary_equals_a_loop_over_samples(case, float_costs):
    n_ranks, count, samples = case
    lengths = np.array([value for value, _, _ in samples], dtype=np.int64)
    rank_ids = np.array([rank for _, rank, _ in samples], dtype=np.int64)
    micro_batch_ids = np.array([batch for _, _, batch in samples], dtype=np.int64)
    costs = lengths.astype(np.float64) / 3 if float_costs else lengths
    summary = cli_plan._summarise(lengths, costs, rank_ids, micro_batch_ids, n_ranks, count)
    naive = _naive_summary(lengths, costs.tolist(), rank_ids, micro_batch_ids, n_ranks, count)
    assert summary["samples"].tolist() == naive["samples"]
    assert summary["micro_batches"].tolist() == naive["micro_batches"]
    # Exact integers even where the sums pass 2**63 - 1 (lengths up to 2**62, 30 of them).
    assert summary["tokens"].tolist() == naive["tokens"]
    assert summary["fullest_micro_batch"].tolist() == naive["fullest"]
    assert summary["most_samples"].tolist() == naive["most"]
    if float_costs:
        assert summary["cost"].tolist() == pytest.approx(naive["cost"])
    else:
        assert summary["cost"].tolist() == naive["cost"]
