"""seqbalance.integrations: optional, and a clear ImportError without TransferQueue."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MODULE = "seqbalance.integrations.transfer_queue"


def test_import_seqbalance_does_not_import_transfer_queue():
    code = (
        "import sys, seqbalance, seqbalance.samplers, seqbalance.integrations; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'transfer_queue', 'torch', 'ray'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_transfer_queue_raises_clear_import_error(monkeypatch):
    # A None entry in sys.modules makes `import transfer_queue...` fail, installed or not.
    monkeypatch.setitem(sys.modules, "transfer_queue", None)
    monkeypatch.setitem(sys.modules, "transfer_queue.sampler", None)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    with pytest.raises(ImportError, match=r"pip install transferqueue") as info:
        importlib.import_module(MODULE)
    assert "'transfer_queue'" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)


def test_integration_classes_are_transfer_queue_samplers():
    tq_sampler = pytest.importorskip(
        "transfer_queue.sampler",
        reason="transferqueue is not installed (pip install transferqueue)",
    )
    module = importlib.import_module(MODULE)
    import seqbalance

    for name in [
        "SequentialSampler",
        "GRPOGroupNSampler",
        "RankAwareSampler",
        "SeqlenBalancedSampler",
    ]:
        cls = getattr(module, name)
        assert issubclass(cls, tq_sampler.BaseSampler)
        assert issubclass(cls, getattr(seqbalance, name))
        # seqbalance's methods win over TransferQueue's
        for method in [
            "sample",
            "has_cached_result",
            "clear_cache",
            "save_checkpoint",
            "load_checkpoint",
        ]:
            assert getattr(cls, method) is getattr(getattr(seqbalance, name), method)
    sampler = module.SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=2, max_cached_batches=3)
    assert isinstance(sampler, tq_sampler.BaseSampler)
    assert sampler._states == {} and sampler.max_cached_batches == 3
    with pytest.raises(ValueError, match="dp_size must be positive, got 0"):
        module.SeqlenBalancedSampler(2, 0)
