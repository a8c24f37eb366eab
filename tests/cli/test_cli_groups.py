"""The command line's count and group options: --nearly-equal and --uid-field."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqbalance import (
    get_seqlen_balanced_partitions,
    group_balanced_partitions,
    plan_dp_micro_batches,
)
from seqbalance.__main__ import main
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_main_one_line_error, run_json


def write_jsonl(path, lengths, uids) -> str:
    path.write_text(
        "".join(json.dumps({"len": n, "uid": u}) + "\n" for n, u in zip(lengths, uids, strict=True))
    )
    return str(path)


def test_nearly_equal_on_the_built_in_batch_gives_group_counts_within_one(capsys):
    # 512 prompt groups over 6 ranks: --equal-size refuses, --nearly-equal gives 85 or 86 groups.
    payload = run_json(capsys, "--nearly-equal", "-k", "6", "--group-size", "16")
    assert payload["equal_size"] == "nearly"
    lengths = synthetic_rl_batch()
    groups = get_seqlen_balanced_partitions(lengths.reshape(-1, 16).sum(axis=1), 6, "nearly")
    assert payload["partitions"] == [
        [16 * g + i for g in part for i in range(16)] for part in groups
    ]
    assert sorted(len(part) // 16 for part in payload["partitions"]) == [85, 85, 85, 85, 86, 86]
    assert main(["partition", "--equal-size", "-k", "6", "--group-size", "16"]) == 2


def test_nearly_equal_text_output_and_the_flags_exclude_each_other(capsys):
    assert main(["partition", "--nearly-equal", "-k", "3"]) == 0
    assert "equal_size=nearly" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage_error:
        main(["partition", "--equal-size", "--nearly-equal"])
    assert usage_error.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not allowed with argument" in err[0]


def test_nearly_equal_reaches_the_dp_plan(capsys):
    payload = run_json(capsys, "--nearly-equal", "--dp", "3", "--max-token-len", "65536")
    lengths = synthetic_rl_batch()
    assert payload["plan"] == plan_dp_micro_batches(
        lengths, 3, 65536, cost="tokens", equal_size="nearly"
    )


def test_bench_takes_nearly_equal_on_uneven_cells(capsys):
    assert main(["bench", "--sizes", "100,101", "-k", "8", "--nearly-equal", "--repeat", "1"]) == 0
    assert "equal_size=nearly" in capsys.readouterr().out


@st.composite
def uid_batches(draw):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=30))
    lengths = draw(st.lists(st.integers(0, 9000), min_size=sum(sizes), max_size=sum(sizes)))
    # Ids of any JSON scalar kind; neighbours always differ, so every run is one group.
    uids = [f"p{g}" if g % 3 else g for g, size in enumerate(sizes) for _ in range(size)]
    k = draw(st.integers(1, len(sizes)))
    return lengths, uids, k


# capsys is read (and so emptied) after every call, so sharing it across examples is safe.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(uid_batches(), st.sampled_from([[], ["--nearly-equal"], ["--equal-size"]]))
def test_uid_field_keeps_groups_whole_as_group_balanced_partitions_does(
    tmp_path_factory, capsys, batch, counts
):
    lengths, uids, k = batch
    path = write_jsonl(tmp_path_factory.mktemp("uids") / "batch.jsonl", lengths, uids)
    args = ["partition", path, "--field", "len", "--uid-field", "uid", "-k", str(k), *counts]
    n_groups = len({(u, type(u)) for u in uids})
    if counts == ["--equal-size"] and n_groups % k:
        assert main(args) == 2
        capsys.readouterr()
        return
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    equal_size = {(): False, ("--nearly-equal",): "nearly", ("--equal-size",): True}[tuple(counts)]
    assert payload["groups"] == n_groups and payload["uid_field"] == "uid"
    assert payload["partitions"] == group_balanced_partitions(
        lengths, uids, k, equal_size=equal_size, cost="tokens"
    )


def test_uid_field_reads_stdin_and_reaches_the_dp_plan(tmp_path, capsys, monkeypatch):
    lengths = [500, 20, 30, 800, 5, 5, 5, 400, 60]
    uids = ["a", "a", "b", "c", "c", "c", "c", "d", "e"]
    text = "".join(
        json.dumps({"len": n, "uid": u}) + "\n" for n, u in zip(lengths, uids, strict=True)
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    args = ["-", "--field", "len", "--uid-field", "uid", "--dp", "2", "--max-token-len", "1000"]
    payload = run_json(capsys, *args)
    expected = plan_dp_micro_batches(np.array(lengths), 2, 1000, cost="tokens", uid_list=uids)
    assert payload["plan"] == expected


def test_uid_field_errors_are_one_line(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", [1, 2, 3, 4], ["a", "a", "b", "c"])
    assert_main_one_line_error(capsys, ["--uid-field", "uid"], "--uid-field reads JSON Lines")
    assert_main_one_line_error(capsys, [good, "--uid-field", "uid"], "--field NAME")
    assert_main_one_line_error(
        capsys,
        [good, "--field", "len", "--uid-field", "uid", "--group-size", "2"],
        "either --group-size or --uid-field",
    )
    assert_main_one_line_error(
        capsys,
        [
            good,
            "--field",
            "len",
            "--uid-field",
            "uid",
            "-k",
            "2",
            "--max-token-len",
            "10",
            "--per-rank",
        ],
        "--uid-field with --per-rank",
    )
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"len": 1, "uid": "a"}\n{"len": 2}\n')
    assert_main_one_line_error(
        capsys, [str(missing), "--field", "len", "--uid-field", "uid", "-k", "1"], ":2: no field"
    )
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"len": 1, "uid": ["a"]}\n')
    assert_main_one_line_error(
        capsys,
        [str(nested), "--field", "len", "--uid-field", "uid", "-k", "1"],
        ":1: field 'uid' must be a string or a number",
    )
    array = tmp_path / "lengths.npy"
    np.save(array, np.arange(4))
    assert_main_one_line_error(
        capsys, [str(array), "--field", "len", "--uid-field", "uid"], "not .npy"
    )
    assert_main_one_line_error(
        capsys,
        [good, "--field", "len", "--uid-field", "uid", "-k", "4"],
        "number of groups (3) is smaller than -k (4)",
    )


@pytest.mark.parametrize("flag", ["--nearly-equal", "--uid-field"])
def test_help_mentions_the_option(capsys, flag):
    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    assert flag in capsys.readouterr().out
