"""What a new user reads in the report: the user's own index and line in errors, the naive split
of whole groups, when ``--refine`` would help, and counts in the singular."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqbalance import balance_report, partition_ids
from seqbalance.__main__ import main
from seqbalance.cli.readers import line_of_item, synthetic_rl_batch


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("plan", [["-k", "2"], ["--dp", "4"], ["-k", "8"]])
def test_a_length_over_the_cap_is_named_by_the_users_index_and_line(capsys, tmp_path, plan):
    # The first length fits; the offending one is the user's item 7, on line 10 (blank lines hold
    # no length). A rank-local plan used to name its own index.
    values = [50, 60, 70, 80, 20, 30, 40, 900, 10, 11, 12, 13, 14, 15, 16, 17]
    text = "\n".join(str(v) for v in values[:7]) + "\n\n  \n" + "\n".join(map(str, values[7:]))
    path = tmp_path / "lengths.txt"
    path.write_text(text + "\n")
    assert main(["partition", str(path), "--max-token-len", "100", *plan]) == 2
    err = _err(capsys)
    assert "lengths[7] = 900 is longer than --max-token-len (100)" in err
    assert err.endswith(f"(line 10 of {path})")


def test_jsonl_errors_name_the_line_too(capsys, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps({"n": n}) for n in [5, 500, 6]) + "\n")
    assert main(["partition", str(path), "--field", "n", "-k", "1", "--max-token-len", "50"]) == 2
    assert _err(capsys).endswith(
        f"lengths[1] = 500 is longer than --max-token-len (50) (line 2 of {path})"
    )


def test_npy_errors_name_the_index_alone(capsys, tmp_path):
    path = tmp_path / "l.npy"
    np.save(path, np.array([5, 500, 6], dtype=np.int64))
    assert main(["partition", str(path), "-k", "1", "--max-token-len", "50"]) == 2
    assert _err(capsys).endswith("lengths[1] = 500 is longer than --max-token-len (50)")


def test_line_of_item_skips_blank_lines_and_knows_its_limits(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("1\n\n \t\n2\n3\n")
    assert [line_of_item(str(path), i) for i in range(4)] == [1, 4, 5, None]
    assert line_of_item("-", 0) is None
    assert line_of_item(str(tmp_path / "missing.txt"), 0) is None


def test_the_naive_split_keeps_prompt_groups_whole(capsys):
    # 512 groups of 16 over 6 ranks: 86 or 85 whole groups (1376 / 1360 samples), never the
    # 1366 / 1365 items that cut a group.
    assert main(["partition", "-k", "6", "--group-size", "16", "--json"]) == 0
    naive = json.loads(capsys.readouterr().out)["report"]["naive"]
    assert naive["counts"] == [1376, 1376, 1360, 1360, 1360, 1360]
    lengths = synthetic_rl_batch()
    bounds = np.cumsum([0, *naive["counts"]])
    assert naive["sums"] == [
        int(lengths[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def test_the_report_says_when_refine_would_help_and_by_how_much(capsys):
    assert main(["partition", "-k", "8", "--group-size", "16", "--equal-size"]) == 0
    out = capsys.readouterr().out
    lengths = synthetic_rl_batch()
    groups = lengths.reshape(-1, 16).sum(axis=1)
    plain = balance_report(
        lengths, _parts(np.repeat(partition_ids(groups, 8, equal_size=True), 16), 8)
    )
    ids = np.repeat(partition_ids(groups, 8, equal_size=True, refine=True), 16)
    refined = balance_report(lengths, _parts(ids, 8)).balanced.imbalance
    assert refined < plain.balanced.imbalance  # the case the issue measured: 1.0952 -> 1.0000
    assert f"--refine would give max/mean {refined:.4f}" in out
    lighter = (1 - refined / plain.balanced.imbalance) * 100
    assert f"({lighter:.1f}% lighter heaviest rank" in out


def test_no_refine_hint_when_refine_is_on_or_changes_nothing(capsys):
    assert main(["partition", "-k", "8", "--group-size", "16", "--equal-size", "--refine"]) == 0
    assert "--refine would" not in capsys.readouterr().out
    # Free counts on the built-in batch: the unrefined split already reaches spread <= 1.
    assert main(["partition", "-k", "4"]) == 0
    out = capsys.readouterr().out
    assert "--refine would" not in out


def test_json_reports_the_refined_imbalance(capsys):
    assert main(["partition", "-k", "8", "--group-size", "16", "--equal-size", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["refined_imbalance"] < payload["report"]["balanced"]["imbalance"]


def test_a_spread_of_one_reads_one_token(capsys):
    assert main(["partition", "-k", "8"]) == 0
    out = capsys.readouterr().out
    assert "-> 1 tokens" not in out
    spread = [line for line in out.splitlines() if line.startswith("imbalance")][0]
    assert spread.endswith("1 token)") or spread.endswith("tokens)")


def _parts(ids: np.ndarray, k: int) -> list[list[int]]:
    return [np.flatnonzero(ids == p).tolist() for p in range(k)]


@pytest.fixture(autouse=True)
def _no_cwd_files(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("plan", [["-k", "4"], ["--dp", "4"]])
def test_order_largest_first_orders_each_ranks_micro_batches_by_cost(capsys, plan):
    from tests.cli._cli_runs import run_json

    payload = run_json(capsys, *plan, "--max-token-len", "32768", "--order", "largest_first")
    lengths = synthetic_rl_batch().tolist()
    for rank in payload["plan"]:
        filled = [batch for batch in rank if batch]
        costs = [sum(lengths[i] for i in batch) for batch in filled]
        assert costs == sorted(costs, reverse=True)
        assert rank[len(filled) :] == [[]] * (len(rank) - len(filled))  # empty ones last
    bubble = run_json(capsys, *plan, "--max-token-len", "32768")
    # Same micro-batches, another order.
    assert sorted(map(sorted, payload["plan"])) == sorted(map(sorted, bubble["plan"]))


def test_order_needs_max_token_len(capsys):
    assert main(["partition", "--order", "none"]) == 2
    assert "--order orders micro-batches: it needs --max-token-len" in _err(capsys)
