"""install(cost=path) without the planned step: the workers' own formation of micro-batches
(verl's ``rearrange_micro_batches``, OpenRLHF's ``setup_dynamic_batch``) runs on one version of
the cost file every rank agrees, global rank 0's (ranks as threads over a stand-in
torch.distributed, each with its own view of the file as separate processes have), and is
the trainer's own answer on that version; without torch.distributed nothing changes."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from seqbalance.integrations import _costs
from seqbalance.integrations import openrlhf as sb_openrlhf
from seqbalance.integrations import verl as sb_verl
from seqbalance.integrations._costs import CostSource
from tests.integrations._gloo_step import two_versions
from tests.integrations._trainer_standins import StandIn, fresh_root, purge
from tests.integrations.test_step_verl import on_ranks

LENGTHS = np.random.default_rng(11).integers(1, 4096, size=24).tolist()


class Views(CostSource):
    """One installed source whose every rank (thread) sees its own view of the cost file: rank
    1's was read after the file was replaced."""

    def __init__(self, views: list[CostSource]) -> None:
        self.views = views
        self.path = views[0].path

    def view(self) -> CostSource:
        dist = sys.modules["torch"].distributed
        return self.views[dist.local.rank]

    def current(self):
        return self.view().current()

    def pinned(self, cost):
        return self.view().pinned(cost)


@pytest.fixture
def verl(tmp_path, monkeypatch):
    fresh_root(tmp_path, monkeypatch, "verl")
    standin = StandIn(tmp_path, "verl")
    # verl's engine utils import it by name.
    engine = tmp_path / "verl/workers/engine/utils.py"
    engine.parent.mkdir(parents=True)
    (tmp_path / "verl/workers/__init__.py").write_text("")
    (tmp_path / "verl/workers/engine/__init__.py").write_text("")
    engine.write_text("from verl.utils.seqlen_balancing import rearrange_micro_batches\n")
    importlib.invalidate_caches()
    standin.engine = importlib.import_module("verl.workers.engine.utils")
    yield standin
    sb_verl.uninstall()
    purge("verl")


BUFFER = """
from openrlhf.utils.seqlen_balancing import (
    get_minimum_num_micro_batch_size,
    get_seqlen_balanced_partitions,
)


class NaiveReplayBuffer:
    def __init__(self, lengths):
        self.lengths = lengths

    def setup_dynamic_batch(self, strategy):
        count = get_minimum_num_micro_batch_size(self.lengths, strategy, 1, 1)
        self.dynamic_indices = get_seqlen_balanced_partitions(self.lengths, count, equal_size=False)
        return self.dynamic_indices
"""


@pytest.fixture
def openrlhf(tmp_path, monkeypatch):
    fresh_root(tmp_path, monkeypatch, "openrlhf")
    StandIn(tmp_path, "openrlhf")
    for path, text in {
        "openrlhf/trainer/ppo_utils/__init__.py": "",
        "openrlhf/trainer/ppo_utils/replay_buffer.py": BUFFER,
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    importlib.invalidate_caches()
    yield importlib.import_module("openrlhf.trainer.ppo_utils.replay_buffer")
    sb_openrlhf.uninstall()
    purge("openrlhf")


def views_of(tmp_path):
    return [CostSource(path=str(path)) for path in two_versions(tmp_path)]


def test_verl_ranks_of_one_replica_form_the_same_micro_batches(verl, monkeypatch, tmp_path):
    views = views_of(tmp_path)
    older = str(tmp_path / "cost-old.json")
    names = sb_verl.install(cost=older)
    assert "rearrange_micro_batches" in names
    assert verl.engine.rearrange_micro_batches is sb_verl.rearrange_micro_batches  # by name
    original = sb_verl._PIN.originals["rearrange_micro_batches"]
    # Each view alone: verl's own answer differs (the test can fail).
    alone = []
    for view in views:
        sb_verl._SOURCE[0] = view
        alone.append(original(LENGTHS, 4))
    assert alone[0] != alone[1]
    # Without torch.distributed: verl's own on this process's view, as before.
    sb_verl._SOURCE[0] = views[1]
    assert verl.engine.rearrange_micro_batches(LENGTHS, 4) == alone[1]
    sb_verl._SOURCE[0] = Views(views)
    answers = on_ranks(2, lambda rank: verl.engine.rearrange_micro_batches(LENGTHS, 4), monkeypatch)
    assert answers == [("ok", alone[0]), ("ok", alone[0])]  # global rank 0's version, verl's own


def test_verl_with_a_fixed_cost_puts_no_pass_through_and_uninstall_restores(verl, tmp_path):
    own = verl.module.rearrange_micro_batches
    fixed = views_of(tmp_path)[0].current()
    sb_verl.install(cost=str(tmp_path / "cost-old.json"))
    assert verl.module.rearrange_micro_batches is sb_verl.rearrange_micro_batches
    sb_verl.install(cost=fixed)  # a fixed cost is the same on every rank: nothing to agree
    assert verl.module.rearrange_micro_batches is own
    assert verl.engine.rearrange_micro_batches is own
    sb_verl.install(cost=str(tmp_path / "cost-old.json"))
    sb_verl.uninstall()
    assert verl.module.rearrange_micro_batches is own
    assert verl.engine.rearrange_micro_batches is own


def test_openrlhf_ranks_of_one_replica_form_the_same_micro_batches(openrlhf, monkeypatch, tmp_path):
    views = views_of(tmp_path)
    own = vars(openrlhf.NaiveReplayBuffer)["setup_dynamic_batch"]
    names = sb_openrlhf.install(cost=str(tmp_path / "cost-old.json"))
    assert names[-1] == "NaiveReplayBuffer.setup_dynamic_batch"
    cap = 3 * max(LENGTHS)
    alone = []
    for view in views:
        sb_openrlhf._CAPPED.weigh = view.weights
        alone.append(own(openrlhf.NaiveReplayBuffer(LENGTHS), cap))
    assert alone[0] != alone[1]  # the test can fail
    shared = Views(views)
    sb_openrlhf._CAPPED.weigh = shared.weights
    sb_openrlhf._PINNED["source"] = shared
    answers = on_ranks(
        2, lambda rank: openrlhf.NaiveReplayBuffer(LENGTHS).setup_dynamic_batch(cap), monkeypatch
    )
    assert answers == [("ok", alone[0]), ("ok", alone[0])]
    sb_openrlhf.uninstall()
    assert vars(openrlhf.NaiveReplayBuffer)["setup_dynamic_batch"] is own


def test_a_rank_that_installed_no_cost_file_is_named(monkeypatch, tmp_path):
    views = views_of(tmp_path)

    class Other(Views):
        def current(self):
            rank = sys.modules["torch"].distributed.local.rank
            return None if rank == 0 else self.views[rank].current()

    answers = on_ranks(2, lambda rank: _costs.agreed_cost(Other(views)), monkeypatch)
    assert [a[0] for a in answers] == ["raised", "raised"]
    assert all("global rank 0 sent" in str(a[1]) for a in answers)
