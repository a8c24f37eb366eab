"""seqbalance.profile on CPU: a fake clock whose time the test controls stands for the GPU."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance as sb
from seqbalance import ModelCost, TimeCost, profile
from seqbalance.costs._time_fit import Features, factor_rows, unseparated
from seqbalance.costs.profiling import MIN_MAX_LENGTH, default_grid
from tests.costs.test_time_cost_online import ATTENTION_FREE

TRUE = (2e-3, 4e-5, 1e-8, 3e-13)


def seconds_of(lengths, coefficients=TRUE):
    c_mb, c_doc, a, b = coefficients
    return c_mb + sum(c_doc + a * L + b * L * (L + 1) / 2 for L in lengths)


class FakeGPU:
    """A clock that advances only while ``run`` runs, by the modelled time of its lengths."""

    def __init__(self, slow_first=0.0):
        self.now = 0.0
        self.calls: list[list[int]] = []
        self.slow_first = slow_first  # extra seconds on each micro-batch's first call

    def run(self, lengths):
        first = not self.calls or self.calls[-1] != lengths
        self.calls.append(list(lengths))
        # An irregular extra on the first call, that no coefficient can absorb.
        extra = self.slow_first * (1 + (sum(lengths) // 64 + len(lengths)) % 5)
        self.now += seconds_of(lengths) + (extra if first else 0.0)

    def timer(self):
        return self.now


def test_profile_recovers_the_modelled_time():
    gpu = FakeGPU()
    cost = profile(gpu.run, max_length=65_536, timer=gpu.timer)
    assert isinstance(cost, TimeCost)
    for value, expected in zip(cost.coefficients.values(), TRUE, strict=True):
        assert value == pytest.approx(expected, rel=1e-6)
    grid = default_grid(65_536)
    # warmup 1 + repeats 3, for every micro-batch of the grid, in order
    assert gpu.calls == [batch for batch in grid for _ in range(4)]


def test_the_least_of_the_repeats_is_kept():
    # Every micro-batch's first call is 1 s slower (a compile, a cache warm-up); with no warmup
    # the least of 3 repeats still skips it.
    gpu = FakeGPU(slow_first=1.0)
    cost = profile(gpu.run, max_length=8192, warmup=0, repeats=3, timer=gpu.timer)
    assert cost.fit_error["max"] < 1e-9
    gpu = FakeGPU(slow_first=1.0)
    once = profile(gpu.run, max_length=8192, warmup=0, repeats=1, timer=gpu.timer)
    assert once.fit_error["max"] > 0.01  # the slow first calls were all it saw


def test_the_default_grid_stays_under_max_length_and_separates_the_terms():
    for max_length in (16, 100, 4096, 100_000, 1 << 20):
        grid = default_grid(max_length)
        assert all(0 < sum(batch) <= max_length and min(batch) >= 1 for batch in grid)
        assert max(sum(batch) for batch in grid) == max_length
        assert any(len(batch) == 1 for batch in grid) and any(len(batch) >= 8 for batch in grid)
        assert len(grid) >= 6
    assert [b for b in default_grid(1 << 20) if len(b) == 1][0] == [512]


FULL = ModelCost(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=256,
    vocab_size=500,
)


@given(max_length=st.integers(MIN_MAX_LENGTH, 1 << 40), with_model=st.booleans())
def test_every_default_grid_fits_under_max_length_and_separates_the_coefficients(
    max_length, with_model
):
    """What profile times can always be fitted: no grid is refused after the GPU ran it."""
    grid = default_grid(max_length)
    assert len(grid) >= 6 and all(0 < sum(b) <= max_length and min(b) >= 1 for b in grid)
    features = Features(FULL if with_model else None)
    rows = features.rows([np.array(b, dtype=np.int64) for b in grid])
    ones = np.ones(len(grid))
    assert unseparated(factor_rows(rows, ones, ones), features.names) == []


def test_a_grid_the_fit_would_refuse_is_refused_before_anything_runs():
    # Every layer slides with a window of 8: from it on attention FLOPs are affine in the
    # length, and the default grid for 2**20 tokens has no document shorter (its least is 8).
    sliding = ModelCost(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=500,
        layer_types=["sliding_attention"] * 2,
        sliding_window=8,
    )
    calls = []
    with pytest.raises(ValueError, match=r"the default grid \(pass lengths=\) cannot tell apart"):
        profile(calls.append, max_length=1 << 20, model=sliding, timer=iter(range(10**6)).__next__)
    assert calls == []


@pytest.mark.parametrize("family", sorted(ATTENTION_FREE))
def test_an_attention_free_model_is_profiled_on_its_one_length_term(family):
    # Adversarial finding: the check before anything runs looked at both FLOPs columns of an
    # attention-free model (proportional by nature) and refused every grid, the fault that
    # TimeCost.fit had been cured of.
    model = ModelCost.from_config(ATTENTION_FREE[family])
    clock = [0.0]

    def run(lengths):
        clock[0] += 1e-3 + sum(2e-5 + 1e-12 * f for f in model.flops(lengths))

    cost = profile(run, max_length=4096, timer=lambda: clock[0], model=model)
    c = cost.coefficients
    assert c["linear"] == c["attention"] == pytest.approx(1e-12, rel=1e-6)
    assert c["micro_batch"] == pytest.approx(1e-3, rel=1e-6)
    # What it cannot separate, it still refuses before anything runs: single documents only.
    calls = []
    with pytest.raises(ValueError, match=r"lengths cannot tell apart the coefficients micro_b"):
        profile(calls.append, max_length=4096, lengths=[[100 * (i + 1)] for i in range(8)],
                model=model, timer=iter(range(10**6)).__next__)  # fmt: skip
    assert calls == []


def test_explicit_lengths_and_a_model():
    model = ModelCost(
        hidden_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=500,
    )
    batches = [[1000], [2000], [4000], [500, 500], [1000, 1000, 2000], [250] * 16, [3000, 100]]
    clock = [0.0]

    def run(lengths):
        flops = model.flops(lengths)
        linear = [model.per_token(L)["linear"] * L for L in lengths]
        clock[0] += 1e-3 + sum(
            1e-15 * lin + 3e-15 * (f - lin) for f, lin in zip(flops, linear, strict=True)
        )

    cost = profile(run, max_length=4096, lengths=batches, timer=lambda: clock[0], model=model)
    assert cost.model is model
    assert cost.coefficients["attention"] == pytest.approx(3e-15, rel=1e-6)


def test_progress_reaches_logging_and_the_callback_and_nothing_is_printed(capsys, caplog):
    gpu = FakeGPU()
    seen = []
    with caplog.at_level(logging.INFO, logger="seqbalance.profile"):
        profile(
            gpu.run,
            max_length=2048,
            timer=gpu.timer,
            repeats=1,
            warmup=0,
            progress=lambda *args: seen.append(args),
        )
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    grid = default_grid(2048)
    total = len(grid)
    records = [r for r in caplog.records if r.name == "seqbalance.profile"]
    assert len(records) == total and all(r.levelno == logging.INFO for r in records)
    assert records[-1].getMessage().startswith(f"{total}/{total} micro-batches timed (")
    assert [(done, of, lengths) for done, of, lengths, _ in seen] == [
        (i + 1, total, batch) for i, batch in enumerate(grid)
    ]
    assert all(isinstance(seconds, float) and seconds > 0 for *_, seconds in seen)


def test_without_a_listener_profile_prints_nothing(capfd):
    # No handler configured and no callback: no line on the process's stderr (nor stdout).
    gpu = FakeGPU()
    profile(gpu.run, max_length=2048, timer=gpu.timer, repeats=1, warmup=0)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_a_progress_that_is_not_callable_is_refused_before_anything_runs():
    gpu = FakeGPU()
    with pytest.raises(TypeError, match="progress must be None or a callable, got 3 \\(int\\)"):
        profile(gpu.run, max_length=2048, timer=gpu.timer, progress=3)
    assert gpu.calls == []


def test_a_run_that_raises_stops_with_the_lengths_it_was_given():
    def run(lengths):
        if sum(lengths) > 1000:
            raise MemoryError("CUDA out of memory")

    with pytest.raises(
        RuntimeError, match=r"run\(document_lengths=\[1024\]\) raised MemoryError"
    ) as info:
        profile(run, max_length=4096, timer=iter(range(10**6)).__next__)
    assert isinstance(info.value.__cause__, MemoryError)


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(3)])
def test_ctrl_c_and_exit_in_run_pass_through_untouched(stop):
    """Only errors are wrapped: Ctrl-C (or an exit) during a long profile stops it as itself."""
    calls = []

    def run(lengths):
        calls.append(lengths)
        if len(calls) == 3:
            raise stop

    with pytest.raises(type(stop)) as info:
        profile(run, max_length=4096, timer=iter(range(10**6)).__next__)
    assert info.value is stop and info.value.__cause__ is None
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"max_length": 8}, ValueError, r"max_length must be >= 16, got 8"),
        ({"max_length": 4096.0}, TypeError, r"max_length must be an int"),
        ({"max_length": 4096, "repeats": 0}, ValueError, r"repeats must be >= 1"),
        ({"max_length": 4096, "warmup": -1}, ValueError, r"warmup must be >= 0"),
        ({"max_length": 4096, "timer": 3}, TypeError, r"timer must be a zero-argument callable"),
        ({"max_length": 4096, "lengths": [[1]] * 5}, ValueError, r"at least 6"),
        (
            {"max_length": 100, "lengths": [[1]] * 5 + [[60, 50]]},
            ValueError,
            r"lengths\[5\] holds 110",
        ),
        ({"max_length": 100, "lengths": [[1]] * 5 + [[0]]}, ValueError, r"lengths\[5\]\[0\] = 0"),
        ({"max_length": 4096, "timer": lambda: 1.0}, ValueError, r"the timer measured 0.0 s"),
        # A clock that fails is named, not passed on as a time NumPy would take or a bare error.
        ({"max_length": 4096, "timer": lambda: float("nan")}, ValueError, r"timer returned nan"),
        ({"max_length": 4096, "timer": lambda: float("inf")}, ValueError, r"timer returned inf"),
        ({"max_length": 4096, "timer": lambda: None}, TypeError, r"timer must return seconds"),
        ({"max_length": 4096, "timer": lambda: "1.0"}, TypeError, r"timer must return seconds"),
        ({"max_length": 4096, "timer": lambda: True}, TypeError, r"timer must return seconds"),
        ({"max_length": np.int64(8)}, ValueError, r"max_length must be >= 16, got 8"),
        ({"max_length": np.bool_(True)}, TypeError, r"max_length must be an int"),
        ({"max_length": 2**64}, ValueError, r"max_length must be <= 2\*\*63 - 1, got 1844"),
        (
            {"max_length": 4096, "lengths": [[100]] * 8},
            ValueError,
            r"lengths cannot tell apart the coefficients micro_batch, document, per_token",
        ),
        (
            {"max_length": 4096, "lengths": [[2**i] for i in range(4, 12)]},
            ValueError,
            r"lengths cannot tell apart the coefficients micro_batch, document:",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(keywords, error, message):
    calls = []
    with pytest.raises(error, match=message):
        profile(calls.append, **keywords)
    if "timer" not in keywords:
        assert calls == []  # refused before anything ran
    with pytest.raises(TypeError, match=r"run must be callable"):
        profile(None, max_length=4096)  # type: ignore[arg-type]


def test_a_timer_that_goes_back_or_fails_in_one_repeat_is_refused():
    """Every timed reading counts: one that goes back or is nan is not hidden by the least of
    the repeats."""
    for bad in (-0.5, float("nan")):
        readings = iter([0.0, 1.0, 1.0, 1.0 + bad, 2.0, 3.0] + [float(i) for i in range(10, 10**4)])
        message = r"timer returned nan" if bad != bad else r"the timer measured -0.5 s"
        with pytest.raises(ValueError, match=message):
            profile(lambda lengths: None, max_length=4096, warmup=0, timer=readings.__next__)


def test_numpy_integers_are_counts():
    gpu = FakeGPU()
    cost = profile(
        gpu.run, max_length=np.int64(2048), repeats=np.int32(1), warmup=np.uint8(0), timer=gpu.timer
    )
    assert cost.coefficients["per_token"] == pytest.approx(TRUE[2], rel=1e-6)
    assert len(gpu.calls) == len(default_grid(2048))


def test_a_bad_model_is_refused_before_anything_runs():
    calls = []
    with pytest.raises(TypeError, match=r"model must be None or a ModelCost, got 'llama'"):
        profile(calls.append, max_length=4096, model="llama", timer=iter(range(10**6)).__next__)
    assert calls == []


def test_cuda_is_synchronised_when_torch_has_initialised_it(monkeypatch):
    events: list[str] = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True, synchronize=lambda: events.append("sync")
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = [0.0]

    def run(lengths):
        events.append("run")
        clock[0] += seconds_of(lengths)

    def timer():
        events.append("read")
        return clock[0]

    profile(run, max_length=1024, timer=timer, repeats=1, warmup=0)
    # Every reading of the clock comes right after a synchronisation.
    assert events[:6] == ["sync", "read", "run", "sync", "read", "sync"]
    assert all(events[i - 1] == "sync" for i, event in enumerate(events) if event == "read")


def test_cuda_is_left_alone_when_torch_has_not_initialised_it(monkeypatch):
    cuda = types.SimpleNamespace(
        is_initialized=lambda: False, synchronize=lambda: pytest.fail("synchronised")
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    gpu = FakeGPU()
    profile(gpu.run, max_length=1024, timer=gpu.timer)


def test_profile_never_imports_torch():
    code = textwrap.dedent(
        """
        import sys
        import seqbalance
        clock = [0.0]
        def run(lengths):
            clock[0] += 1e-3 + 1e-6 * sum(lengths)
        seqbalance.profile(run, max_length=1024, timer=lambda: clock[0], repeats=1, warmup=0)
        print("torch" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "False"


def test_profile_is_exported():
    assert sb.profile is profile and "profile" in sb.__all__ and "TimeCost" in sb.__all__
    assert np.isfinite(profile.__doc__ is not None)


@pytest.mark.integration
def test_profile_times_a_tiny_torch_module():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, batch_first=True
    )

    def run(lengths):
        # One document at a time stands for per-document attention in a packed batch.
        layer.zero_grad()
        for length in lengths:
            layer(torch.randn(1, length, 32)).sum().backward()

    cost = profile(run, max_length=512, repeats=2, warmup=1)
    assert all(value >= 0 for value in cost.coefficients.values())
    assert cost.fit_error["median"] < 1.0
    assert cost.predict([[512]])[0] > 0
