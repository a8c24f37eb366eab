"""seqbalance.integrations: optional, and a clear ImportError without TransferQueue."""

from __future__ import annotations

import contextlib
import importlib
import pickle
import subprocess
import sys
import types
from abc import ABC, abstractmethod

import pytest

import seqbalance
import seqbalance.integrations

MODULE = "seqbalance.integrations.transfer_queue"
CLASSES = ["SequentialSampler", "GRPOGroupNSampler", "RankAwareSampler", "SeqlenBalancedSampler"]


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


@pytest.mark.integration
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
    assert sampler.save_checkpoint()["_states"] == {} and sampler.max_cached_batches == 3
    with pytest.raises(ValueError, match="dp_size must be positive, got 0"):
        module.SeqlenBalancedSampler(2, 0)


# ---------------------------------------------------------------- against a stand-in TransferQueue
# CI does not install transferqueue (it pulls in torch and Ray), so these tests install a small
# `transfer_queue.sampler` module shaped like upstream's: an ABC `BaseSampler` with an abstract
# `sample` whose __init__ sets `_states` (to None in transferqueue 0.1.x; {} is checked as well).


def _fake_base_sampler(initial_states):
    class BaseSampler(ABC):
        def __init__(self):
            self._states = initial_states() if callable(initial_states) else initial_states
            self.upstream_init_ran = True

        @abstractmethod
        def sample(self, ready_indexes, batch_size, **kwargs):
            raise NotImplementedError

        def __call__(self, *args, **kwargs):
            return self.sample(*args, **kwargs)

    return BaseSampler


@contextlib.contextmanager
def installed_fake_tq(initial_states):
    """Yield (integration module, fake base class); every trace is removed on exit."""
    base = _fake_base_sampler(initial_states)
    package = types.ModuleType("transfer_queue")
    package.__path__ = []  # a package, so `transfer_queue.sampler` resolves
    sampler_module = types.ModuleType("transfer_queue.sampler")
    sampler_module.BaseSampler = base
    package.sampler = sampler_module
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "transfer_queue", package)
        patch.setitem(sys.modules, "transfer_queue.sampler", sampler_module)
        # An earlier import (of the real TransferQueue) is put back when the context ends.
        patch.delitem(sys.modules, MODULE, raising=False)
        patch.delattr(seqbalance.integrations, "transfer_queue", raising=False)
        module = importlib.import_module(MODULE)
        try:
            yield module, base
        finally:
            sys.modules.pop(MODULE, None)
            if getattr(seqbalance.integrations, "transfer_queue", None) is module:
                delattr(seqbalance.integrations, "transfer_queue")


@pytest.fixture(params=["states_none", "states_dict"])
def fake_tq(request):
    with installed_fake_tq(None if request.param == "states_none" else dict) as installed:
        yield installed


def _traces():
    names = ["transfer_queue", "transfer_queue.sampler", MODULE]
    return [sys.modules.get(name) for name in names] + [
        getattr(seqbalance.integrations, "transfer_queue", None)
    ]


def test_fake_tq_leaves_no_trace():
    before = _traces()
    with installed_fake_tq(None) as (module, base):
        assert sys.modules[MODULE] is module and module.TransferQueueBaseSampler is base
        assert seqbalance.integrations.transfer_queue is module
    after = _traces()
    assert all(a is b for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize("name", CLASSES)
def test_fake_tq_classes_are_instances_of_its_base(fake_tq, name):
    module, base = fake_tq
    cls = getattr(module, name)
    assert module.TransferQueueBaseSampler is base
    assert issubclass(cls, base) and issubclass(cls, getattr(seqbalance, name))
    for method in ["sample", "has_cached_result", "clear_cache", "save_checkpoint"]:
        assert getattr(cls, method) is getattr(getattr(seqbalance, name), method)
    sampler = cls()
    assert isinstance(sampler, base)
    # upstream's __init__ ran (cooperative super()), and seqbalance's cache replaced its _states
    assert sampler.upstream_init_ran is True
    # The attribute itself, on purpose: TransferQueue's controller and users read _states.
    assert sampler._states == {}


def test_fake_tq_constructor_arguments_and_checks_pass_through(fake_tq):
    module, _ = fake_tq
    sampler = module.SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=3, max_cached_batches=5)
    assert (sampler.n_samples_per_prompt, sampler.dp_size, sampler.max_cached_batches) == (2, 3, 5)
    with pytest.raises(ValueError, match="dp_size must be positive, got 0"):
        module.SeqlenBalancedSampler(2, 0)
    with pytest.raises(ValueError, match="n_samples_per_prompt must be positive, got -1"):
        module.GRPOGroupNSampler(-1)


class _Lengths:
    def get_custom_meta(self, indexes):
        return {i: {"total_lengths": (i * 37) % 11 + 1} for i in indexes}


def _copies(sampler, make):
    """The sampler, a pickled clone (Ray ships it this way) and one restored from a checkpoint."""
    clone = pickle.loads(pickle.dumps(sampler))
    assert type(clone) is type(sampler)
    restored = make()
    restored.load_checkpoint(pickle.loads(pickle.dumps(sampler.save_checkpoint())))
    return [sampler, clone, restored]


def test_fake_tq_sequential_round_trip(fake_tq):
    module, base = fake_tq
    sampler = module.SequentialSampler()
    assert sampler([5, 2, 9], 2) == seqbalance.SequentialSampler()([5, 2, 9], 2) == ([5, 2], [5, 2])
    for copy in _copies(sampler, module.SequentialSampler):
        assert isinstance(copy, base)
        assert copy.sample([7, 1], 5) == ([7, 1], [7, 1])


def test_fake_tq_grpo_round_trip(fake_tq):
    module, base = fake_tq
    ready = [0, 1, 3, 4, 5, 6, 7]

    def make():
        return module.GRPOGroupNSampler(2, max_cached_batches=4)

    sampler = make()
    first = sampler(ready, 4, "t", "p", dp_rank=0, batch_index=0)
    assert first == seqbalance.GRPOGroupNSampler(2)(ready, 4, "t", "p", dp_rank=0, batch_index=0)
    assert first == ([0, 1, 3, 4], [0, 1, 3, 4])
    for copy in _copies(sampler, make):
        assert isinstance(copy, base)
        assert copy.has_cached_result("p", "t", {"dp_rank": 0, "batch_index": 0})
        assert copy([], 4, "t", "p", dp_rank=0, batch_index=0) == first


def test_fake_tq_rank_aware_round_trip(fake_tq):
    module, base = fake_tq
    sampler = module.RankAwareSampler()
    first = sampler([3, 4, 5], 2, dp_rank=1, batch_index=0, task_name="t", partition_id="p")
    assert first == seqbalance.RankAwareSampler()([3, 4, 5], 2, 1, 0, "t", "p") == ([3, 4], [3, 4])
    for copy in _copies(sampler, module.RankAwareSampler):
        assert isinstance(copy, base)
        assert copy([], 2, 1, 0, "t", "p") == first
        assert copy.save_checkpoint()["_states"] == {"p": {"t": {1: {0: [3, 4]}}}}


def test_fake_tq_seqlen_balanced_round_trip(fake_tq):
    module, base = fake_tq
    config = {"task_name": "t", "partition_id": "p", "batch_index": 0, "partition": _Lengths()}

    def make():
        return module.SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=3)

    sampler = make()
    plain = seqbalance.SeqlenBalancedSampler(n_samples_per_prompt=2, dp_size=3)
    first = sampler(list(range(12)), 4, dp_rank=0, **config)
    assert first == plain(list(range(12)), 4, dp_rank=0, **config)
    expected = [plain([], 4, dp_rank=rank, **config) for rank in range(3)]
    assert sorted(i for share, _ in expected for i in share) == list(range(12))
    for copy in _copies(sampler, make):
        assert isinstance(copy, base)
        assert copy.has_cached_result("p", "t", {"dp_rank": 2, "batch_index": 0})
        assert [copy([], 4, dp_rank=rank, **config) for rank in range(3)] == expected


def test_fake_tq_seqlen_balanced_passes_cost_and_uneven_groups_through(fake_tq):
    # 5 groups of 2 over 2 ranks (per-rank 5 samples): uneven, so uneven_groups decides.
    module, _ = fake_tq
    config = {"task_name": "t", "partition_id": "p", "batch_index": 0, "partition": _Lengths()}
    for options in (
        {"uneven_groups": "nearly"},
        {"uneven_groups": "nearly", "cost": "workload"},
        {"uneven_groups": "free", "cost": lambda lengths: lengths * lengths},
    ):
        sampler = module.SeqlenBalancedSampler(2, 2, **options)
        plain = seqbalance.SeqlenBalancedSampler(2, 2, **options)
        assert sampler.uneven_groups == options["uneven_groups"]
        shares = [sampler(list(range(10)), 5, dp_rank=rank, **config) for rank in range(2)]
        assert shares == [plain(list(range(10)), 5, dp_rank=rank, **config) for rank in range(2)]
    with pytest.raises(ValueError, match=r"uneven_groups must be 'free' or 'nearly', got 'even'"):
        module.SeqlenBalancedSampler(2, 2, uneven_groups="even")
