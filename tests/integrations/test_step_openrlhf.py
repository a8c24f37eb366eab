"""install(step=True) for OpenRLHF against stand-ins (no torch, no OpenRLHF): what it replaces
and restores (the by-name import included), refusal by name, the driver's layout and slots for
every optimizer step, the worker's fallback said once, and ``step=False`` as today. The real
OpenRLHF, with the workers' formation and joint plan, runs in test_step_real_openrlhf.py.
"""

from __future__ import annotations

import importlib
import logging
import types

import numpy as np
import pytest

from seqbalance.integrations import _openrlhf_step, _slots
from seqbalance.integrations import openrlhf as sb_openrlhf
from seqbalance.integrations.openrlhf import IntegrationError
from tests.integrations._trainer_standins import StandIn, fresh_root, purge

# OpenRLHF's experience helpers and driver balancing, in plain Python: an experience is a list
# of samples; balance_experiences sorts by length and deals the ranks as OpenRLHF interleaves.
EXPERIENCE = '''
"""Stand-in for openrlhf.trainer.ppo_utils.experience (0.11.2's names and parameters)."""
import itertools


class Experience:
    def __init__(self, total_length, info=None):
        self.total_length = total_length
        self.info = dict(info or {})


def split_experience_batch(experience):
    return list(experience)


def make_experience_batch(items, packing_samples=False):
    return list(items)


def balance_experiences(experiences, args):
    items = [item for batch in experiences for item in split_experience_batch(batch)]
    items.sort(key=lambda x: x.total_length, reverse=True)
    ranks = args.actor.num_nodes * args.actor.num_gpus_per_node
    chunks = [items[i : i + ranks] for i in range(0, len(items), ranks)]
    return [make_experience_batch([c for c in column if c is not None])
            for column in itertools.zip_longest(*chunks)]
'''

BUFFER = '''
"""Stand-in for openrlhf.trainer.ppo_utils.replay_buffer."""


class NaiveReplayBuffer:
    def __init__(self):
        self.items = []

    def setup_dynamic_batch(self, strategy):
        self.dynamic_indices = [[i] for i in range(len(self.items))]
'''

PACKAGE_INIT = "from .experience import balance_experiences\n"


def arguments(ranks=2, cap=4096, train=16):
    space = types.SimpleNamespace
    return space(
        actor=space(num_nodes=1, num_gpus_per_node=ranks),
        ds=space(ring_attn_size=1, tensor_parallel_size=1),
        train=space(batch_size=train, max_tokens_per_gpu=cap),
    )


@pytest.fixture
def openrlhf(tmp_path, monkeypatch):
    fresh_root(tmp_path, monkeypatch, "openrlhf")
    StandIn(tmp_path, "openrlhf")
    files = {
        "openrlhf/trainer/ppo_utils/__init__.py": PACKAGE_INIT,
        "openrlhf/trainer/ppo_utils/experience.py": EXPERIENCE,
        "openrlhf/trainer/ppo_utils/replay_buffer.py": BUFFER,
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    importlib.invalidate_caches()
    purge("openrlhf")
    importlib.import_module("openrlhf.utils.seqlen_balancing")
    package = importlib.import_module("openrlhf.trainer.ppo_utils")
    yield package
    sb_openrlhf.uninstall()
    purge("openrlhf")


LENGTHS = np.random.default_rng(4).integers(1, 2048, size=32).tolist()


def batches(module):
    items = [module.Experience(n, {"sample": i}) for i, n in enumerate(LENGTHS)]
    return [items[i : i + 8] for i in range(0, len(items), 8)]


def test_install_step_replaces_by_name_and_uninstall_restores(openrlhf):
    experience = importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    buffer = importlib.import_module("openrlhf.trainer.ppo_utils.replay_buffer")
    original = experience.balance_experiences
    setup = buffer.NaiveReplayBuffer.__dict__["setup_dynamic_batch"]
    names = sb_openrlhf.install(step=True)
    assert names[-2:] == ["balance_experiences", "NaiveReplayBuffer.setup_dynamic_batch"]
    assert openrlhf.balance_experiences is _openrlhf_step.balance_experiences  # by name
    assert experience.balance_experiences is _openrlhf_step.balance_experiences
    sb_openrlhf.uninstall()
    assert openrlhf.balance_experiences is original
    assert buffer.NaiveReplayBuffer.__dict__["setup_dynamic_batch"] is setup


def test_other_parameters_are_refused_by_name(openrlhf):
    experience = importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    experience.balance_experiences = lambda experiences: experiences
    with pytest.raises(IntegrationError, match="balance_experiences"):
        sb_openrlhf.install(step=True)


def test_the_driver_plans_every_optimizer_step_in_lockstep(openrlhf):
    experience = importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    sb_openrlhf.install(step=True)
    own = _openrlhf_step._STATE.balance_original(batches(experience), arguments())
    ranks = openrlhf.balance_experiences(batches(experience), arguments())
    assert len(ranks) == 2 and [len(r) for r in ranks] == [16, 16]
    assert sorted(item.info["sample"] for rank in ranks for item in rank) == list(range(32))
    for step in range(2):  # 16 samples a step, 8 a rank
        window = slice(step * 8, (step + 1) * 8)
        # The same samples in each step as OpenRLHF's own layout: only ranks and slots change.
        mine = {item.info["sample"] for rank in ranks for item in rank[window]}
        theirs = {item.info["sample"] for rank in own for item in rank[window]}
        assert mine == theirs
        plans = []
        for rank in ranks:
            lengths = np.array([item.total_length for item in rank[window]])
            codes = np.array([item.info[_openrlhf_step.SLOT_KEY] for item in rank[window]])
            parts = _slots.decode_slots(codes, lengths, 4096)
            assert parts is not None
            plans.append(parts)
        assert len({len(p) for p in plans}) == 1


def test_step_false_is_today_and_the_worker_falls_back_once(openrlhf, caplog):
    experience = importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    buffer_module = importlib.import_module("openrlhf.trainer.ppo_utils.replay_buffer")
    sb_openrlhf.install(step=True)
    buffer = buffer_module.NaiveReplayBuffer()
    buffer.items = [experience.Experience(n) for n in LENGTHS[:4]]
    with caplog.at_level(logging.INFO, logger="seqbalance.integrations.openrlhf"):
        for _ in range(2):
            buffer.setup_dynamic_batch(types.SimpleNamespace(args=arguments()))
            assert buffer.dynamic_indices == [[0], [1], [2], [3]]  # OpenRLHF's own
    said = [r for r in caplog.records if "OpenRLHF's own setup_dynamic_batch" in r.getMessage()]
    assert len(said) == 1
    sb_openrlhf.install(step=False)
    own = openrlhf.balance_experiences(batches(experience), arguments())
    assert all(_openrlhf_step.SLOT_KEY not in item.info for rank in own for item in rank)
