"""install(cost=...) against the real verl 0.9.1 and OpenRLHF 0.11.2 (the integration job):
verl's calculate_workload replaced in its module and in every trainer module that imported it
by name, taking the int64 and float32 tensors verl passes; dynamic micro-batching balancing by
the cost; OpenRLHF's replay buffer partitioning the cost of the lengths; uninstall() restoring
all of it. The stand-ins in test_install_cost.py cover the same logic in the plain suite."""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch", reason="torch is not installed (verl and OpenRLHF need it)")

import seqbalance  # noqa: E402
from seqbalance import ModelCost, TimeCost  # noqa: E402
from seqbalance.integrations import openrlhf as sb_openrlhf  # noqa: E402
from seqbalance.integrations import verl as sb_verl  # noqa: E402

#: verl 0.9.1's modules that import calculate_workload by name.
BY_NAME = (
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.trainer.sft_trainer_ray",
)
LENGTHS = [300, 17, 4096, 1024, 512, 77, 2048, 9, 30_000, 640, 5, 12_000]


def time_cost(per_token=1e-8):
    batches = [[100], [200, 300], [4000], [1000, 1000, 50], [8000], [30, 60, 90], [2500, 700]]
    seconds = [
        2e-3 + sum(3e-5 + per_token * n + 5e-13 * n * (n + 1) / 2 for n in b) for b in batches
    ]
    return TimeCost.fit(batches, seconds)


def nanoseconds(cost, lengths):
    return np.rint(cost(lengths) * 1e9).astype(np.int64).tolist()


@pytest.fixture
def verl_modules():
    for dependency in ("transformers", "tensordict", "ray", "omegaconf"):
        pytest.importorskip(dependency, reason=f"{dependency} is not installed (verl needs it)")
    seqlen_balancing = pytest.importorskip("verl.utils.seqlen_balancing")
    trainers = {}
    for name in BY_NAME:
        try:
            trainers[name] = importlib.import_module(name)
        except ImportError as exc:
            pytest.skip(f"{name} needs more of verl's dependencies: {exc}")
    original = seqlen_balancing.calculate_workload
    yield seqlen_balancing, trainers, original
    sb_verl.uninstall()
    assert seqlen_balancing.calculate_workload is original
    for module in trainers.values():
        assert module.calculate_workload is original


def test_verls_workload_is_the_cost_in_every_module_that_holds_it(verl_modules):
    seqlen_balancing, trainers, original = verl_modules
    cost = time_cost()
    assert sb_verl.install(cost=cost)[-1] == "calculate_workload"
    for module in (seqlen_balancing, *trainers.values()):
        assert module.calculate_workload is sb_verl.calculate_workload, module.__name__
    expected = nanoseconds(cost, LENGTHS)
    # What ray_trainer passes (an int64 sum of the attention mask) and what the SFT trainer
    # passes (torch.Tensor of sizes: float32), answered as tensors of int64 on their device.
    for lengths in (torch.tensor(LENGTHS), torch.Tensor(LENGTHS), torch.tensor(LENGTHS).long()):
        workload = seqlen_balancing.calculate_workload(lengths)
        assert isinstance(workload, torch.Tensor) and workload.dtype == torch.int64
        assert workload.device == lengths.device and workload.tolist() == expected
    # The group balancing's one-sample tensors; a 0-d one keeps its shape, as verl's does.
    assert (
        int(seqlen_balancing.calculate_workload(torch.tensor([LENGTHS[2]])).item()) == (expected[2])
    )
    scalar = seqlen_balancing.calculate_workload(torch.tensor(LENGTHS[2]))
    assert scalar.shape == () and int(scalar) == expected[2]
    sb_verl.install(cost=ModelCost(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=128, vocab_size=100))  # fmt: skip
    assert seqlen_balancing.calculate_workload(torch.tensor(LENGTHS)).tolist() == (
        sb_verl._SOURCE[0].current().flops(LENGTHS)
    )


def test_verls_dynamic_micro_batching_balances_by_the_cost(verl_modules):
    seqlen_balancing, _, _ = verl_modules
    from tensordict import TensorDict

    width = max(LENGTHS)
    mask = torch.zeros(len(LENGTHS), width, dtype=torch.int64)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    batch = TensorDict({"input_ids": mask * 7, "attention_mask": mask}, batch_size=[len(LENGTHS)])
    cost = time_cost(1e-9)  # attention dominates from ~2,000 tokens: another split than verl's
    sb_verl.install(cost=cost)
    _, indexes = seqlen_balancing.rearrange_micro_batches(batch, max_token_len=width)
    # verl sorts the partitions by their workload; the sets are seqbalance's on nanoseconds.
    expected = seqbalance.get_seqlen_balanced_partitions(
        nanoseconds(cost, LENGTHS), len(indexes), equal_size=False
    )
    assert sorted(map(sorted, indexes)) == sorted(map(sorted, expected))
    sb_verl.uninstall()
    _, before = seqlen_balancing.rearrange_micro_batches(batch, max_token_len=width)
    assert sorted(map(sorted, before)) != sorted(map(sorted, expected))  # the cost mattered


def test_verls_group_balancing_of_the_trainers_int_lists_weighs_the_cost(verl_modules):
    # ray_trainer's PrefixGrouper path hands it attention_mask.sum(-1).tolist(): Python ints.
    seqlen_balancing, _, _ = verl_modules
    verls = seqlen_balancing.get_group_balanced_partitions
    batches = [[100], [200, 300], [4000], [1000, 1000, 50], [8000], [30, 60, 90], [30_000]]
    cost = TimeCost.fit(batches, [1e-3 + sum(1e-7 * n + 5e-10 * n * n for n in b) for b in batches])
    lengths = [11825, 25722, 16629, 1008, 22946, 21889, 25397, 5270, 2679, 25895, 664, 16244]
    uids = [i // 2 for i in range(12)]
    sb_verl.install(cost=cost)
    replaced = seqlen_balancing.get_group_balanced_partitions
    assert replaced is not verls
    # verl's own function, weighing through the installed calculate_workload, is the reference.
    expected = verls(lengths, uids, 2)
    assert replaced(torch.tensor(lengths).tolist(), uids, 2) == expected
    weights = np.array(nanoseconds(cost, lengths)).reshape(6, 2).sum(axis=1)
    chosen = seqbalance.get_seqlen_balanced_partitions(weights, 2, True)
    assert expected == [sorted(i for g in part for i in (2 * g, 2 * g + 1)) for part in chosen]


def test_verls_workload_follows_a_saved_cost(verl_modules, tmp_path, monkeypatch):
    seqlen_balancing, trainers, _ = verl_modules
    path = tmp_path / "time-cost.json"
    first, second = time_cost(1e-8), time_cost(4e-8)
    path.write_text(json.dumps(first.to_dict()))
    monkeypatch.setenv("SEQBALANCE_COST", str(path))
    sb_verl.install()  # what Ray's worker_process_setup_hook calls
    trainer = trainers["verl.trainer.ppo.ray_trainer"]
    assert trainer.calculate_workload(torch.tensor(LENGTHS)).tolist() == nanoseconds(first, LENGTHS)
    temporary = tmp_path / "next.json"
    temporary.write_text(json.dumps(second.to_dict()))
    os.replace(temporary, path)
    assert trainer.calculate_workload(torch.tensor(LENGTHS)).tolist() == nanoseconds(
        second, LENGTHS
    )


def test_openrlhfs_replay_buffer_partitions_the_cost():
    pytest.importorskip("openrlhf.utils.seqlen_balancing")
    # (experience_maker imports flash_attn, which the CPU integration job does not have.)
    replay_buffer = pytest.importorskip("openrlhf.trainer.ppo_utils.replay_buffer")
    original = replay_buffer.get_seqlen_balanced_partitions
    cost = time_cost()
    try:
        sb_openrlhf.install(cost=cost)
        expected = seqbalance.get_seqlen_balanced_partitions(cost(LENGTHS), 4, False)
        assert replay_buffer.get_seqlen_balanced_partitions(LENGTHS, 4, False) == expected
        assert expected != original(LENGTHS, 4, False)
    finally:
        sb_openrlhf.uninstall()
    assert replay_buffer.get_seqlen_balanced_partitions is original


def test_openrlhfs_dynamic_batching_under_a_cost_keeps_its_token_cap():
    # Adversarial finding: balanced by seconds, 35-55 % of OpenRLHF's batches had a micro-batch
    # over max_tokens_per_gpu. Its replay buffer's own names, as its dynamic batching runs them.
    seqlen_balancing = pytest.importorskip("openrlhf.utils.seqlen_balancing")
    replay_buffer = pytest.importorskip("openrlhf.trainer.ppo_utils.replay_buffer")
    if replay_buffer.get_minimum_num_micro_batch_size is not (
        seqlen_balancing.get_minimum_num_micro_batch_size
    ):  # a test before this one reloaded seqlen_balancing: the names as a fresh process has them
        replay_buffer = importlib.reload(replay_buffer)
    own_count = replay_buffer.get_minimum_num_micro_batch_size
    own_split = replay_buffer.get_seqlen_balanced_partitions
    rng = np.random.default_rng(0)
    heavy = [
        np.minimum(rng.lognormal(8.5, 1.2, int(rng.integers(1, 9))).astype(int) + 1, 32_768)
        for _ in range(64)
    ]
    cost = TimeCost.fit(
        [b.tolist() for b in heavy],
        [5e-3 + float(np.sum(2e-4 + 6.4e-5 * b + 5.8e-9 * b * (b + 1) / 2)) for b in heavy],
    )
    cap, broken_before = 16_192, 0
    try:
        sb_openrlhf.install(cost=cost)
        for _ in range(30):
            lengths = np.clip(rng.lognormal(7.8, 0.8, 128).astype(np.int64), 64, cap).tolist()
            count = replay_buffer.get_minimum_num_micro_batch_size(lengths, cap, 1, 1)
            assert count == own_count(lengths, cap, 1, 1)
            parts = replay_buffer.get_seqlen_balanced_partitions(lengths, count, equal_size=False)
            by_tokens = own_split(lengths, count, False)
            largest = max(sum(lengths[i] for i in part) for part in by_tokens)
            assert max(sum(lengths[i] for i in part) for part in parts) <= max(cap, largest)
            plain = seqbalance.get_seqlen_balanced_partitions(cost(lengths), count, False)
            broken_before += max(sum(lengths[i] for i in p) for p in plain) > max(cap, largest)
        assert replay_buffer.get_minimum_num_micro_batch_size is not own_count
    finally:
        sb_openrlhf.uninstall()
    assert replay_buffer.get_minimum_num_micro_batch_size is own_count
    assert broken_before >= 10
