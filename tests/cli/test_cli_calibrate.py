"""``seqbalance calibrate LOG --out FILE`` and ``--time-cost FILE`` on the planning verbs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqbalance import ModelCost, TimeCost, get_seqlen_balanced_partitions, plan_dp_micro_batches
from seqbalance.cli.main import main
from seqbalance.cli.readers import synthetic_rl_batch
from tests.cli._cli_runs import assert_one_line_error, run

TRUE = (2e-3, 3e-5, 1e-8, 4e-13)
#: What a predicted step may differ from TimeCost.predict by, per document: the step model
#: weighs each document's seconds in whole nanoseconds, as the planners do.
NS_ROUNDING = 0.5e-9
SMALL_CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 256,
    "vocab_size": 1000,
}


def measured(count=60, seed=0, noise=0.02):
    rng = np.random.default_rng(seed)
    batches, seconds = [], []
    for _ in range(count):
        lengths = rng.integers(100, 60_000, size=int(rng.integers(1, 6))).tolist()
        exact = TRUE[0] + sum(TRUE[1] + TRUE[2] * L + TRUE[3] * L * (L + 1) / 2 for L in lengths)
        batches.append(lengths)
        seconds.append(exact * (1 + rng.uniform(-noise, noise)))
    return batches, seconds


def write_log(path, batches, seconds):
    path.write_text(
        "".join(
            json.dumps({"lengths": b, "seconds": s}) + "\n"
            for b, s in zip(batches, seconds, strict=True)
        )
    )
    return str(path)


@pytest.fixture
def log(tmp_path):
    return write_log(tmp_path / "log.jsonl", *measured())


@pytest.fixture
def saved(tmp_path, log):
    out = tmp_path / "time-cost.json"
    result = run("calibrate", log, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return str(out)


def test_calibrate_fits_prints_and_saves(tmp_path, log):
    out = tmp_path / "tc.json"
    result = run("calibrate", log, "--out", str(out))
    assert result.returncode == 0 and result.stderr == ""
    expected = TimeCost.fit(*measured())
    loaded = TimeCost.from_dict(json.loads(out.read_text()))
    assert loaded.coefficients == pytest.approx(expected.coefficients, rel=1e-9, abs=0)
    text = result.stdout
    assert "60 measured micro-batches" in text and f"saved to {out}" in text
    assert f"from {expected.crossover_length():,} tokens" in text
    assert f"median {expected.fit_error['median']:.2%}" in text


def test_calibrate_json_and_a_model(tmp_path, log):
    config = {
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("calibrate", log, "--model-config", str(path), "--half-life", "30", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    model = ModelCost.from_config(config)
    expected = TimeCost.fit(*measured(), model=model, half_life=30)
    assert payload["coefficients"] == pytest.approx(expected.coefficients, rel=1e-9, abs=0)
    assert set(payload["fit_error"]) == {"median", "p90", "max", "rms"}
    assert payload["flops_crossover_length"] == model.crossover_length()
    assert payload["crossover_length"] == expected.crossover_length()
    assert payload["out"] is None


def test_partition_balances_by_the_predicted_time(tmp_path, saved):
    result = run("partition", "--time-cost", saved, "-k", "8", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    cost = TimeCost.from_dict(json.loads(open(saved).read()))
    lengths = synthetic_rl_batch()
    nanoseconds = np.rint(cost(lengths) * 1e9).astype(np.int64)
    assert payload["partitions"] == get_seqlen_balanced_partitions(nanoseconds, 8, False)
    predicted = payload["predicted_time"]
    per_rank = [float(cost(lengths[part]).sum()) for part in payload["partitions"]]
    assert predicted["per_rank_seconds"] == pytest.approx(per_rank, rel=1e-12)
    assert predicted["imbalance"] == pytest.approx(max(per_rank) / np.mean(per_rank))
    tokens = [int(lengths[part].sum()) for part in payload["partitions"]]
    assert predicted["tokens_imbalance"] == pytest.approx(max(tokens) / np.mean(tokens))
    text = run("partition", "--time-cost", saved, "-k", "8").stdout
    assert "predicted time per rank (time-cost.json): max" in text
    assert "tokens max/mean" in text


@pytest.mark.parametrize("verb", ["plan", "partition"])
def test_the_dp_plan_balances_by_it_and_reports_each_ranks_time(saved, verb):
    """``plan --dp`` and the older ``partition --max-token-len --dp`` route alike."""
    flags = ("--time-cost", saved, "--dp", "4", "--max-token-len", "32768")
    result = run(verb, *flags, "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    cost = TimeCost.from_dict(json.loads(open(saved).read()))
    lengths = synthetic_rl_batch()
    expected = plan_dp_micro_batches(
        lengths, 4, 32768, cost=lambda v: np.rint(cost(v) * 1e9).astype(np.int64)
    )
    assert payload["plan"] == expected
    # The library weighs the TimeCost itself so: the same plan.
    assert payload["plan"] == plan_dp_micro_batches(lengths, 4, 32768, cost=cost)
    # Every micro-batch that holds documents pays the fitted micro-batch term once.
    per_rank = [
        float(cost.predict([lengths[b] for b in rank if b]).sum()) for rank in payload["plan"]
    ]
    assert payload["predicted_time"]["per_rank_seconds"] == pytest.approx(
        per_rank, rel=1e-12, abs=NS_ROUNDING * len(lengths)
    )
    assert payload["predicted_time"]["max_seconds"] == pytest.approx(
        max(per_rank), rel=1e-12, abs=NS_ROUNDING * len(lengths)
    )
    text = run(verb, *flags).stdout
    assert "predicted time per rank (time-cost.json): max" in text


def test_the_per_rank_plan_reports_each_ranks_time(saved):
    result = run("partition", "--time-cost", saved, "-k", "4", "--max-token-len", "32768", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    cost = TimeCost.from_dict(json.loads(open(saved).read()))
    lengths = synthetic_rl_batch()
    per_rank = [
        float(cost.predict([lengths[b] for b in rank if b]).sum()) for rank in payload["plan"]
    ]
    assert len(per_rank) == 4
    assert payload["predicted_time"]["per_rank_seconds"] == pytest.approx(
        per_rank, rel=1e-12, abs=NS_ROUNDING * len(lengths)
    )
    assert payload["cost"] == "predicted ns (time-cost.json)"


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        (["not json"], ["log.jsonl:1", "not valid JSON"]),
        (['{"lengths": [5], "seconds": 1}', "[1]"], ["log.jsonl:2", "expected a JSON object"]),
        (['{"lengths": [], "seconds": 1}'], ["log.jsonl:1", '"lengths" must be a non-empty']),
        (['{"lengths": [3, 0], "seconds": 1}'], ["log.jsonl:1", '"lengths"[1] must be a positive']),
        (['{"lengths": [3, 1.5], "seconds": 1}'], ['"lengths"[1] must be a positive integer']),
        (['{"lengths": [3], "seconds": -1}'], ["log.jsonl:1", '"seconds" must be a positive']),
        (['{"lengths": [3], "seconds": NaN}'], ['"seconds" must be a positive finite']),
        # A missing field is named as missing; a null one is shown as null.
        (['{"lengths": [3]}'], ["log.jsonl:1", 'no "seconds" field']),
        (['{"seconds": 1}'], ["log.jsonl:1", 'no "lengths" field']),
        (
            ['{"lengths": [3], "seconds": null}'],
            ['"seconds" must be a positive finite number, got null'],
        ),
        # A number beyond float64 is named with its line, not a bare OverflowError.
        (
            ['{"lengths": [3], "seconds": 1}', '{"lengths": [3], "seconds": ' + "7" * 400 + "}"],
            ["log.jsonl:2:", '"seconds" must be a positive finite number', "400 digits"],
        ),
        (['{"lengths": [3], "seconds": 1}'] * 5, ["5 measured micro-batches", "at least 6"]),
        (['{"lengths": [3], "seconds": 1}'] * 6, ["cannot tell apart the coefficients"]),
    ],
)
def test_a_bad_log_is_one_line(tmp_path, lines, fragments):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert_one_line_error(run("calibrate", str(path)), "seqbalance calibrate: error:", *fragments)


def test_other_calibrate_failures_are_one_line(tmp_path, log):
    assert_one_line_error(run("calibrate", str(tmp_path / "none.jsonl")), "no such file")
    assert_one_line_error(
        run("calibrate", log, "--out", str(tmp_path / "missing" / "tc.json")), "cannot write"
    )
    for bad in ("-1", "0", "nan", "inf"):
        assert_one_line_error(
            run("calibrate", log, "--half-life", bad), "argument --half-life: must be positive"
        )
    # Refused before the log is read: a missing log is not what is reported.
    assert_one_line_error(
        run("calibrate", str(tmp_path / "none.jsonl"), "--half-life", "-1"), "--half-life"
    )
    assert_one_line_error(run("calibrate", log, "--half-life", "x"), "--half-life")
    assert_one_line_error(run("calibrate"), "LOG")


def test_time_cost_failures_are_one_line(tmp_path, saved, log):
    assert_one_line_error(
        run("partition", "--time-cost", saved, "--cost", "tokens"),
        "only one of --cost, --model-config and --time-cost",
    )
    assert_one_line_error(run("partition", "--time-cost", str(tmp_path / "x.json")), "no such file")
    # A log passed where its fit belongs: said so, with the command that fits it.
    assert_one_line_error(
        run("partition", "--time-cost", log),
        "log.jsonl: looks like a log for seqbalance calibrate",
        f"seqbalance calibrate {log} --out time-cost.json",
    )
    one_line = tmp_path / "one.jsonl"
    one_line.write_text(open(log).readline())
    assert_one_line_error(
        run("plan", "--time-cost", str(one_line), "--max-token-len", "99999"),
        "looks like a log for seqbalance calibrate",
    )
    damaged = tmp_path / "damaged.json"
    data = json.loads(open(saved).read())
    data["coefficients"]["per_token"] = -1
    damaged.write_text(json.dumps(data))
    assert_one_line_error(
        run("partition", "--time-cost", str(damaged)), "damaged.json", "per_token"
    )
    # A coefficient beyond float64 is named like a negative one, never a bare OverflowError.
    data["coefficients"]["per_token"] = 10**400
    damaged.write_text(json.dumps(data))
    assert_one_line_error(
        run("partition", "--time-cost", str(damaged)),
        "damaged.json",
        '"coefficients"."per_token" must be finite and >= 0, got an integer of 401 digits',
    )


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--cost", "workload"], "--cost"),
        (["--time-cost", "SAVED"], "--time-cost"),
        (["--model-config", "CONFIG"], "--model-config"),
    ],
)
def test_float_costs_name_the_flag_that_weighs_lengths(tmp_path, saved, flags, flag):
    costs = tmp_path / "costs.txt"
    costs.write_text("1.5\n2.5\n3.0\n4.5\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL_CONFIG))
    files = {"SAVED": saved, "CONFIG": str(config)}
    args = [files.get(value, value) for value in flags]
    assert_one_line_error(
        run("partition", str(costs), "-k", "2", *args),
        f"these are float costs, not token lengths: {flag} weighs whole token lengths",
        f"(drop {flag}",
    )


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"", ["0 measured micro-batches", "at least 6"]),
        (b"\n  \n", ["0 measured micro-batches"]),
        (b'{"lengths": [5], "seconds": 1}\n\xff\xfe\n', ["not a UTF-8 text file"]),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", ["nested too deeply"]),
        (b'{"lengths": ' + b"[" * 5000 + b"]" * 5000 + b', "seconds": 1}\n', ["nested too deeply"]),
        (b'{"lengths": [' + b"9" * 5000 + b'], "seconds": 1}\n', ["log.jsonl:1"]),
        (b'{"lengths": [1e400], "seconds": 1}\n', ['"lengths"[0] must be a positive integer']),
        (b'{"lengths": [true], "seconds": 1}\n', ['"lengths"[0] must be a positive integer']),
        (b'{"lengths": [5], "seconds": true}\n', ['"seconds" must be a positive finite']),
        (b'{"lengths": [5], "seconds": "1"}\n', ['"seconds" must be a positive finite']),
        (b'{"lengths": "5", "seconds": 1}\n', ['"lengths" must be a non-empty list']),
    ],
)
def test_a_hostile_log_is_one_line_in_process(tmp_path, capsys, content, fragments):
    path = tmp_path / "log.jsonl"
    path.write_bytes(content)
    assert main(["calibrate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in ["seqbalance calibrate: error:", *fragments]:
        assert fragment in err, err


def test_a_directory_or_a_foreign_file_is_one_line(tmp_path, capsys, saved):
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"kind": "something.else", "version": 1}\n')
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]\n")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    cases = [
        (["calibrate", str(tmp_path)], "is a directory"),
        (["partition", "--time-cost", str(tmp_path)], "is a directory"),
        (["partition", "--time-cost", str(foreign)], 'not a saved time cost (its "kind" is'),
        (["partition", "--time-cost", str(listed)], "expected a JSON object"),
        (["partition", "--time-cost", str(binary)], "not a UTF-8"),
        (["partition", "--time-cost", saved, "--model-config", saved], "only one of"),
    ]
    for args, fragment in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err and "Traceback" not in err, (args, err)


@pytest.mark.parametrize("plan", [["-k", "2"], ["--dp", "2"]])
def test_samples_of_length_zero_are_no_documents_in_the_plan_report(tmp_path, capsys, saved, plan):
    """A plan may put empty samples in a micro-batch: they add no document to its predicted
    time (a micro-batch of them alone costs 0), and never fail the report."""
    lengths = [100, 0, 3000, 40, 500, 0, 0]
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{value}\n" for value in lengths))
    args = ["partition", str(path), "--time-cost", saved, "--max-token-len", "4000", *plan]
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    payload = json.loads(capsys.readouterr().out)
    cost = TimeCost.from_dict(json.loads(open(saved).read()))
    array = np.array(lengths)
    per_rank = []
    for rank in payload["plan"]:
        documents = [array[b][array[b] > 0] for b in rank if b and array[b].any()]
        per_rank.append(float(cost.predict(documents).sum()) if documents else 0.0)
    assert payload["predicted_time"]["per_rank_seconds"] == pytest.approx(
        per_rank, rel=1e-12, abs=NS_ROUNDING * len(lengths)
    )
