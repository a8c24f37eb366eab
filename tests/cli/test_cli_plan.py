"""The command line's constraint options: --cost, --max-token-len, --dp."""

from __future__ import annotations

import pytest

from seqbalance import calculate_workload, get_seqlen_balanced_partitions, plan_dp_micro_batches
from seqbalance.__main__ import main
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import run_json


def test_cost_workload_balances_the_workload(capsys):
    payload = run_json(capsys, "--cost", "workload", "-k", "4")
    lengths = synthetic_rl_batch()
    work = calculate_workload(lengths)
    assert payload["cost"] == "workload"
    assert payload["partitions"] == get_seqlen_balanced_partitions(work, 4, False)
    assert payload["report"]["balanced"]["sums"] == [
        int(work[part].sum()) for part in payload["partitions"]
    ]


def test_max_token_len_plans_every_rank_under_the_cap_with_one_count(capsys):
    payload = run_json(capsys, "--max-token-len", "262144", "-k", "4", "--group-size", "16")
    lengths = synthetic_rl_batch().tolist()
    plan = payload["plan"]
    assert payload["dp_size"] == 4 and len(plan) == 4
    assert {len(rank) for rank in plan} == {payload["micro_batches_per_rank"]}
    assert all(sum(lengths[i] for i in mb) <= 262144 for rank in plan for mb in rank)
    assert sorted(i for rank in plan for mb in rank for i in mb) == list(range(len(lengths)))
    owner = {i: mb[0] for rank in plan for mb in rank for i in mb}
    assert all(owner[i] == owner[i - i % 16] for i in range(len(lengths)))


def test_dp_is_plan_dp_micro_batches(capsys):
    payload = run_json(capsys, "--dp", "8", "--max-token-len", "65536", "--cost", "workload")
    lengths = synthetic_rl_batch()
    assert payload["plan"] == plan_dp_micro_batches(lengths, 8, 65536, cost="workload")


def test_text_output_prints_the_plan_summary(capsys):
    assert main(["partition", "--dp", "4", "--max-token-len", "65536"]) == 0
    out = capsys.readouterr().out
    assert "plan_dp_micro_batches: ranks=4, max_token_len=65,536, cost=tokens" in out
    assert "every rank runs" in out and "micro-batches of at most 65,536 tokens" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--per-rank"], "--per-rank plans micro-batches: it needs --max-token-len"),
        (["--cost", "flops"], "--cost flops: not tokens, workload or a file"),
        (["--max-token-len", "100"], "is longer than --max-token-len (100)"),
        (["--dp", "0", "--max-token-len", "100"], "must be >= 1, got 0"),
    ],
)
def test_errors_are_one_line(capsys, args, message):
    try:
        status = main(["partition", *args])
    except SystemExit as exit_:  # argparse's own usage errors
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
