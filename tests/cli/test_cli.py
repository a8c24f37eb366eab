"""The command line, run for real in a subprocess: file formats, built-in batch, JSON, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import seqbalance
from seqbalance import reference
from seqbalance.__main__ import main
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_one_line_error, run, run_json


@pytest.fixture
def lengths_file(tmp_path: Path) -> Path:
    path = tmp_path / "lengths.txt"
    path.write_text("10\n20\n\n30\n40\n")
    return path


def test_no_arguments_runs_the_main_job_on_the_built_in_batch():
    result = run()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "built-in synthetic RL batch: 8,192 response lengths" in out
    assert "balance report: 8,192 items" in out
    assert "imbalance (max/mean): naive split" in out and "-> balanced" in out
    # The first time line is what the user waited, which includes the reference's run.
    (time_line,) = [line for line in out.splitlines() if line.startswith("time:")]
    assert time_line.endswith("for partition_ids, best of 3)")
    assert "pure-Python reference:" in out and "same result: yes" in out
    waited = _seconds(time_line.split("(")[0].removeprefix("time:"))
    called = _seconds(time_line.split("(")[1].split(" for ")[0])
    reference_time = _seconds(out.split("pure-Python reference:")[1].split("(")[0])
    assert waited >= reference_time + called


def _seconds(text: str) -> float:
    """``"1.20 s"``, ``"596.1 ms"`` or ``"507 µs"`` in seconds."""
    number, unit = text.split()
    return float(number) * {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[unit]


def test_built_in_batch_is_fixed_heavy_tailed_and_grouped():
    batch = synthetic_rl_batch()
    assert batch.shape == (8192,) and batch.dtype == np.int64
    assert np.array_equal(batch, synthetic_rl_batch())
    assert batch.min() >= 1 and np.percentile(batch, 99) > 5 * np.median(batch)


def test_partition_text_file_json(lengths_file: Path):
    result = run("partition", str(lengths_file), "-k", "2", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["n"] == 4 and payload["dp_size"] == 2
    assert payload["partitions"] == seqbalance.get_seqlen_balanced_partitions(
        [10, 20, 30, 40], 2, False
    )
    assert payload["report"]["balanced"]["sums"] == [50, 50]
    assert payload["report"]["naive"]["sums"] == [30, 70]
    assert payload["report"]["naive"]["imbalance"] == pytest.approx(1.4)
    assert payload["planner_seconds"] >= 0


def test_partition_text_output(lengths_file: Path):
    result = run("partition", str(lengths_file), "-k", "2", "--equal-size")
    assert result.returncode == 0, result.stderr
    assert "naive split 1.4000 -> balanced 1.0000" in result.stdout
    assert "equal_size=yes" in result.stdout


def test_partition_reads_npy_and_jsonl_and_stdin(tmp_path: Path):
    values = [5, 1, 4, 2, 3, 3]
    expected = seqbalance.get_seqlen_balanced_partitions(values, 3, False)
    npy = tmp_path / "lengths.npy"
    np.save(npy, np.asarray(values, dtype=np.uint16))
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("".join(json.dumps({"len": v, "ids": [0] * v}) + "\n" for v in values))
    for args, stdin in (
        ([str(npy)], None),
        ([str(jsonl), "--field", "len"], None),
        ([str(jsonl), "--field", "ids"], None),
        (["-"], "\n".join(map(str, values))),
    ):
        result = run("partition", *args, "-k", "3", "--json", stdin=stdin)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["partitions"] == expected


def test_partition_group_size_keeps_groups_whole():
    result = run("partition", "-k", "4", "--group-size", "16", "--json")
    assert result.returncode == 0, result.stderr
    partitions = json.loads(result.stdout)["partitions"]
    assert sorted(i for p in partitions for i in p) == list(range(8192))
    owner = {i: p for p, part in enumerate(partitions) for i in part}
    for start in range(0, 8192, 16):
        assert len({owner[i] for i in range(start, start + 16)}) == 1, "a prompt group was split"


def test_refine_is_passed_through(lengths_file: Path):
    result = run("partition", str(lengths_file), "-k", "2", "--refine", "--json")
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["refine"] is True
    lengths = [int(line) for line in lengths_file.read_text().split()]
    expected = seqbalance.get_seqlen_balanced_partitions(lengths, 2, False, refine=True)
    assert output["partitions"] == expected


def test_compare_reference_runs_the_reference_on_the_same_call_and_compares(
    lengths_file: Path, capsys, monkeypatch
):
    calls = []
    real = reference.get_seqlen_balanced_partitions

    def recording(weights, k, equal_size):
        calls.append((list(weights), k, equal_size))
        return real(weights, k, equal_size)

    monkeypatch.setattr(reference, "get_seqlen_balanced_partitions", recording)
    payload = run_json(capsys, str(lengths_file), "-k", "2", "--equal-size", "--compare-reference")
    assert calls == [([10, 20, 30, 40], 2, True)]
    assert payload["reference_seconds"] > 0 and payload["same_as_reference"] is True
    assert main(["partition", str(lengths_file), "-k", "2", "--compare-reference"]) == 0
    assert "same result: yes" in capsys.readouterr().out.splitlines()[-1]
    # Without the flag the reference is not run, and the two fields say so.
    calls.clear()
    plain = run_json(capsys, str(lengths_file), "-k", "2")
    assert calls == [] and plain["reference_seconds"] is None
    assert plain["same_as_reference"] is None


def test_compare_reference_says_no_when_the_reference_differs(
    lengths_file: Path, capsys, monkeypatch
):
    monkeypatch.setattr(reference, "get_seqlen_balanced_partitions", lambda *args: [[0], [1, 2, 3]])
    assert (
        run_json(capsys, str(lengths_file), "-k", "2", "--compare-reference")["same_as_reference"]
        is False
    )
    assert main(["partition", str(lengths_file), "-k", "2", "--compare-reference"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("pure-Python reference:") and "same result: NO" in last


def test_compare_reference_with_refine_times_it_without_comparing(lengths_file: Path, capsys):
    payload = run_json(capsys, str(lengths_file), "-k", "2", "--refine", "--compare-reference")
    assert payload["reference_seconds"] > 0 and payload["same_as_reference"] is None
    assert main(["partition", str(lengths_file), "-k", "2", "--refine", "--compare-reference"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("pure-Python reference:") and "same result" not in last


def test_compare_reference_is_ignored_by_a_micro_batch_plan(capsys, monkeypatch):
    monkeypatch.setattr(reference, "get_seqlen_balanced_partitions", None)  # never called
    assert main(["partition", "-k", "4", "--max-token-len", "32768", "--compare-reference"]) == 0
    assert "pure-Python reference" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("10\nabc\n", ["lengths.txt:2: expected one number per line, got 'abc'"]),
        ("10\n-3\n", ["lengths.txt:2: lengths must be >= 0, got -3"]),
        ("1.5\nnan\n", ["lengths.txt:2: costs must be finite, got 'nan'"]),
        ("\n\n", ["lengths.txt: no lengths found"]),
        (f"{2**63}\n", ["must be <= 2**63 - 1"]),
    ],
)
def test_bad_text_files(tmp_path: Path, content: str, fragments: list[str]):
    path = tmp_path / "lengths.txt"
    path.write_text(content)
    assert_one_line_error(run("partition", str(path), "-k", "1"), *fragments)


def test_bad_jsonl_files(tmp_path: Path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"len": 3}\n{"other": 4}\n')
    assert_one_line_error(
        run("partition", str(path), "--field", "len", "-k", "1"), "data.jsonl:2: no field 'len'"
    )
    path.write_text('{"len": 3}\n{not json\n')
    assert_one_line_error(
        run("partition", str(path), "--field", "len", "-k", "1"), "data.jsonl:2: not valid JSON"
    )
    path.write_text('{"len": "3"}\n')
    assert_one_line_error(
        run("partition", str(path), "--field", "len", "-k", "1"),
        "field 'len' must be a number or a list",
    )
    path.write_text("[3]\n")
    assert_one_line_error(
        run("partition", str(path), "--field", "len", "-k", "1"), "expected a JSON object, got list"
    )
    assert_one_line_error(run("partition", str(path), "-k", "1"), "needs --field NAME")


def test_bad_npy_and_binary_files(tmp_path: Path):
    floats = tmp_path / "floats.npy"
    np.save(floats, np.array([1.5, 2.0]))
    assert_one_line_error(run("partition", str(floats), "-k", "1"), "must hold integers")
    broken = tmp_path / "broken.npy"
    broken.write_bytes(b"not an npy file")
    assert_one_line_error(run("partition", str(broken), "-k", "1"), "not a readable .npy file")
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert_one_line_error(run("partition", str(binary), "-k", "1"), "not a UTF-8 text file")


def test_a_directory_is_named_as_one(tmp_path: Path):
    for name in ("lengths", "lengths.npy"):
        folder = tmp_path / name
        folder.mkdir()
        result = run("partition", str(folder), "-k", "1")
        assert_one_line_error(result, f"{folder}: is a directory")
        assert "no such file" not in result.stderr


def test_bad_arguments_and_shapes(lengths_file: Path, tmp_path: Path):
    assert_one_line_error(
        run("partition", str(tmp_path / "missing.txt")), "missing.txt: no such file"
    )
    assert_one_line_error(
        run("partition", str(lengths_file), "-k", "0"), "argument -k/--dp: must be >= 1, got 0"
    )
    assert_one_line_error(
        run("partition", str(lengths_file), "-k", "x"),
        "argument -k/--dp: expected an integer, got 'x'",
    )
    assert_one_line_error(
        run("partition", str(lengths_file), "-k", "5"),
        "number of items (4) is smaller than -k (5)",
    )
    assert_one_line_error(
        run("partition", str(lengths_file), "-k", "3", "--equal-size"),
        "not divisible by -k (3) with --equal-size (--nearly-equal allows",
    )
    assert_one_line_error(
        run("partition", str(lengths_file), "--group-size", "3"),
        "number of lengths (4) is not divisible by --group-size (3)",
    )
    huge = tmp_path / "huge.txt"
    huge.write_text(f"{2**63 - 1}\n{2**63 - 1}\n")
    assert_one_line_error(
        run("partition", str(huge), "-k", "1", "--group-size", "2"),
        "group 0 (lengths 0..1) sums to",
        "above 2**63 - 1",
    )
    assert_one_line_error(run("frobnicate"), "invalid choice")
    assert_one_line_error(run("bench", "--sizes", "10,x"), "expected an integer, got 'x'")


def test_bench_table_and_progress_bar():
    result = run("bench", "--sizes", "64,256", "-k", "2,4", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert [(row[0], row[1]) for row in rows] == [
        ("64", "2"),
        ("64", "4"),
        ("256", "2"),
        ("256", "4"),
    ]
    assert all(row[-1] == "yes" and row[-2].endswith("x") for row in rows)
    assert "[##############################] 4/4" in result.stderr


def test_bench_json():
    result = run("bench", "--sizes", "32", "-k", "2", "--repeat", "1", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["n"] == 32 and row["k"] == 2 and row["same"] is True
    assert row["speedup"] == pytest.approx(row["reference_seconds"] / row["seconds"])


def test_bench_plot_without_matplotlib_says_how_to_install(tmp_path: Path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from seqbalance.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    result = run("bench", "--plot", str(tmp_path / "x.png"), python_code=code)
    assert_one_line_error(result, "--plot needs matplotlib", "pip install matplotlib")
    assert not (tmp_path / "x.png").exists()


def test_bench_plot_writes_a_png(tmp_path: Path):
    pytest.importorskip("matplotlib")  # an optional extra: seqbalance[plot]
    path = tmp_path / "speedup.png"
    result = run("bench", "--sizes", "32,64", "-k", "2", "--repeat", "1", "--plot", str(path))
    assert result.returncode == 0, result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_in_process_returns_the_exit_status(lengths_file: Path, capsys):
    assert main(["partition", str(lengths_file), "-k", "2"]) == 0
    assert "balance report: 4 items" in capsys.readouterr().out
    assert main(["partition", str(lengths_file), "-k", "9"]) == 2
    assert "smaller than -k" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--repeat", "0"])
    assert exit_info.value.code == 2


def test_console_script(lengths_file: Path):
    script = Path(sys.executable).with_name("seqbalance")
    if not script.exists():
        pytest.skip("console script not installed here (maturin develop / pip install install it)")
    result = subprocess.run(
        [str(script), "partition", str(lengths_file), "-k", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "naive split 1.4000 -> balanced 1.0000" in result.stdout
