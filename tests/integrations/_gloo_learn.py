"""Child processes of the ``install(learn=...)`` tests against the real verl and OpenRLHF: a
gloo process group on the CPU, each rank running the real ``FSDPEngine.forward_backward_batch``
and OpenRLHF's real ``ActorPPOTrainer.ppo_train``/``training_step`` on a stand-in model. Not a
test module; ``benches/learn_truth.py`` runs it too.

The stand-in model's forward all-reduces (MAX, on the data-parallel group) the truth model's time
of this rank's micro-batch -- every rank then waits for the slowest, as FSDP's collectives make
it -- and advances the rank's fake clock by a third of it; its backward (a real autograd node)
by the rest. Engines and trainers are made with ``object.__new__``, only the attributes their
methods read set. OpenRLHF's Ray actor module imports deepspeed and vLLM, which a CPU machine
lacks: empty stand-in modules take their names (nothing of them runs here). Where the trainers
pick their device (``get_device_id``, ``torch.cuda.current_device``) the child points it at the
CPU.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
import traceback
import types
from typing import Any

import numpy as np

from tests.integrations import _gloo_step
from tests.integrations._learn_standin import CAP, TRUTH, sft_lengths, truth_seconds

__all__ = ["CAP", "TRUTH", "relative", "run"]


def run(world: int, scenario: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """Every rank's answer (spawned processes, one a rank), or an error after ``timeout``."""
    answers = _gloo_step.run(world, scenario, timeout, target=_rank)
    errors = {r: a["error"] for r, a in enumerate(answers) if "error" in a}
    if errors:
        raise AssertionError(f"ranks raised: {errors}")
    return answers


def _rank(rank: int, world: int, port: int, scenario: dict[str, Any], results: Any) -> None:
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
        answer: dict[str, Any] = {}
        if "verl" in scenario["trainers"]:
            answer["verl"] = _verl(rank, world, scenario)
        if "openrlhf" in scenario["trainers"]:
            answer["openrlhf"] = _openrlhf(rank, world, scenario)
        if "overhead" in scenario["trainers"]:
            answer["overhead"] = _overhead(rank, world, scenario)
        dist.barrier()
        dist.destroy_process_group()
        results.put((rank, answer))
    except BaseException:
        results.put((rank, {"error": traceback.format_exc()}))


class Clock:
    """Seconds that pass only when the stand-in model says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def read(self) -> float:
        return self.now


def _charge():  # type: ignore[no-untyped-def]
    """An autograd function whose backward advances the clock: the stand-in's backward."""
    import torch

    class Charge(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value, clock, seconds):  # type: ignore[no-untyped-def]
            ctx.clock, ctx.seconds = clock, seconds
            return value * 1.0

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            ctx.clock.now += ctx.seconds
            return grad, None, None

    return Charge


def _slot_seconds(lengths: list[int], group: Any) -> float:
    import torch
    import torch.distributed as dist

    seconds = torch.tensor([truth_seconds(lengths)], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
    return float(seconds.item())


def _rank_lengths(scenario: dict[str, Any], rank: int, world: int, mini: int) -> list[int]:
    per_rank = scenario["documents"] // world
    lengths = sft_lengths(scenario["seed"], mini, scenario["documents"])
    return lengths[rank * per_rank : (rank + 1) * per_rank]


def _result(learner: Any, slots: list[int], names: list[str], restored: list[str]) -> dict:
    cost = learner.cost
    return {
        "coefficients": None if cost is None else cost.coefficients,
        "observations": None if cost is None else cost.observations,
        "mini_batches": learner.mini_batches,
        "slots": slots,
        "names": names,
        "restored": restored,
    }


# -- verl ------------------------------------------------------------------------------------


def _verl(rank: int, world: int, scenario: dict[str, Any]) -> dict[str, Any]:
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp import transformer_impl as impl

    from seqbalance.integrations import _learn_patches
    from seqbalance.integrations import verl as sb_verl

    originals = {
        name: impl.FSDPEngine.__dict__[name]
        for name in ("forward_backward_batch", "_gradient_sync_context")
    }
    names = sb_verl.install(
        learn=scenario["path"], learn_every=scenario["every"], step=scenario.get("step")
    )
    impl.get_device_id = lambda: "cpu"  # the loss-token all-reduce's device, on this CPU
    learner = _learn_patches.VERL.learner
    clock = Clock()
    learner.clock = clock.read
    charge = _charge()
    slots: list[int] = []

    class Engine(impl.FSDPEngineWithLMHead):
        def forward_step(self, micro_batch, loss_function, forward_only):  # type: ignore[no-untyped-def]
            lengths = micro_batch["attention_mask"].sum(-1).tolist()
            seconds = _slot_seconds(lengths, self.get_data_parallel_group())
            clock.now += seconds / 3
            if not forward_only:
                slots[-1] += 1
            loss = charge.apply(self.weight.sum(), clock, 2 * seconds / 3)
            return loss, {"metrics": {}}

    engine = object.__new__(Engine)
    engine.ulysses_sequence_parallel_size = 1
    engine.ulysses_device_mesh = None
    engine.engine_config = types.SimpleNamespace(use_no_sync_for_gradient_accumulation=True)
    engine.module = torch.nn.Linear(1, 1)
    engine.weight = torch.nn.Parameter(torch.ones(1))
    if rank == 0 and scenario.get("profile"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.perf_counter()
    for mini in range(scenario["mini_batches"]):
        lengths = _rank_lengths(scenario, rank, world, mini)
        mask = torch.zeros(len(lengths), max(lengths), dtype=torch.int64)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        fields = {"input_ids": mask * 7, "attention_mask": mask, "loss_mask": mask}
        data = TensorDict(fields, batch_size=[len(lengths)])
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=CAP)
        slots.append(0)
        engine.forward_backward_batch(data, None, forward_only=False)
        # a forward-only pass (the log-probs): never observed
        again = TensorDict(dict(fields), batch_size=[len(lengths)])
        tu.assign_non_tensor(again, use_dynamic_bsz=True, max_token_len_per_gpu=CAP)
        engine.forward_backward_batch(again, None, forward_only=True)
    wall = time.perf_counter() - started
    if rank == 0 and scenario.get("profile"):
        profiler.disable()
        profiler.dump_stats(scenario["profile"])
    answer = _result(learner, slots, names, sb_verl.uninstall())
    answer["wall"] = wall
    answer["restored_methods"] = all(
        impl.FSDPEngine.__dict__[name] is original for name, original in originals.items()
    )
    return answer


def _overhead(rank: int, world: int, scenario: dict[str, Any]) -> dict[str, Any]:
    """Seconds a micro-batch of the real ``forward_backward_batch`` on a model that does
    nothing (the loop's own cost, the floor) without and with ``learn=`` (the real clock,
    ``time.perf_counter``; the cost learnt in a first round, not timed), the same mini-batches
    (16 rows of 64..1,023 tokens, cap 2,048) in rounds alternating; planned step off in both."""
    import torch
    import torch.distributed as dist
    from tensordict import TensorDict
    from verl.utils import seqlen_balancing
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp import transformer_impl as impl

    from seqbalance.integrations import verl as sb_verl

    impl.get_device_id = lambda: "cpu"
    seqlen_balancing.get_device_name = lambda: "cpu"  # verl's own micro-batch count's device

    class Engine(impl.FSDPEngineWithLMHead):
        def forward_step(self, micro_batch, loss_function, forward_only):  # type: ignore[no-untyped-def]
            self.micro_batches += 1
            return self.weight.sum() * 1.0, {"metrics": {}}

    engine = object.__new__(Engine)
    engine.ulysses_sequence_parallel_size = 1
    engine.ulysses_device_mesh = None
    engine.engine_config = types.SimpleNamespace(use_no_sync_for_gradient_accumulation=True)
    engine.module = torch.nn.Linear(1, 1)
    engine.weight = torch.nn.Parameter(torch.ones(1))

    def mini_batch(index: int) -> Any:
        lengths = np.random.default_rng([rank, index]).integers(64, 1024, 16)
        mask = torch.zeros(16, int(lengths.max()), dtype=torch.int64)
        for row, length in enumerate(lengths.tolist()):
            mask[row, :length] = 1
        data = TensorDict(
            {"input_ids": mask * 7, "attention_mask": mask, "loss_mask": mask}, batch_size=[16]
        )
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=2048)
        return data

    seconds = {"plain": 0.0, "learn": 0.0}
    counts = {"plain": 0, "learn": 0}
    if rank == 0 and scenario.get("profile"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    for round_ in range(scenario["rounds"] + 1):
        for kind in ("plain", "learn"):
            if kind == "learn":
                sb_verl.install(learn=scenario["path"], learn_every=10, step=False)
            else:
                sb_verl.uninstall()
            for index in range(scenario["mini_batches"]):
                data = mini_batch(index)
                engine.micro_batches = 0
                dist.barrier()
                started = time.perf_counter()
                engine.forward_backward_batch(data, None, forward_only=False)
                taken = time.perf_counter() - started
                if round_:  # the first round learns the cost (from nothing): not timed
                    seconds[kind] += taken
                    counts[kind] += engine.micro_batches
    sb_verl.uninstall()
    if rank == 0 and scenario.get("profile"):
        profiler.disable()
        profiler.dump_stats(scenario["profile"])
    return {kind: seconds[kind] / counts[kind] for kind in seconds}


# -- OpenRLHF --------------------------------------------------------------------------------


class _Absent(types.ModuleType):
    """A module standing in for one this CPU machine lacks: any name is an empty class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *args, **kwargs: None})


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    roots = ("deepspeed", "vllm", "flash_attn", "ring_flash_attn")

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = _Absent(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        return None


def _openrlhf(rank: int, world: int, scenario: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    sys.meta_path.insert(0, _AbsentFinder())
    torch.cuda.current_device = lambda: "cpu"  # OpenRLHF moves its metrics there
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ray import ppo_actor

    from seqbalance import get_seqlen_balanced_partitions
    from seqbalance.integrations import _learn_openrlhf
    from seqbalance.integrations import openrlhf as sb_openrlhf

    originals = {
        name: ppo_actor.ActorPPOTrainer.__dict__[name] for name in ("training_step", "ppo_train")
    }
    names = sb_openrlhf.install(learn=scenario["path_openrlhf"], learn_every=scenario["every"])
    learner = _learn_openrlhf.OPENRLHF.learner
    clock = Clock()
    learner.clock = clock.read
    charge = _charge()
    group = dist.group.WORLD
    slots: list[int] = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(1))

        def forward(self, sequences, action_mask, attention_mask=None, **kwargs):  # type: ignore[no-untyped-def]
            lengths = attention_mask.sum(-1).tolist()
            seconds = _slot_seconds(lengths, group)
            clock.now += seconds / 3
            value = charge.apply(self.weight.sum(), clock, 2 * seconds / 3)
            return value * torch.ones_like(action_mask, dtype=torch.float32), None

        def backward(self, loss):  # type: ignore[no-untyped-def]
            loss.backward()

        def step(self) -> None:
            clock.now += 0.25  # the optimizer's step: no micro-batch's time

    def loss_fn(log_probs, old, advantages, action_mask=None, **kwargs):  # type: ignore[no-untyped-def]
        loss = log_probs.mean()
        zero = torch.zeros(())
        return loss, zero, zero, None, None

    items, steps = [], []
    for mini in range(scenario["mini_batches"]):
        mine = _rank_lengths(scenario, rank, world, mini)
        count = torch.tensor([max(1, -(-sum(mine) // CAP))])
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
        parts = get_seqlen_balanced_partitions(mine, int(count.item()), False)
        slots.append(len(parts))
        for part in parts:
            rows = [mine[i] for i in part]
            mask = torch.zeros(len(rows), max(rows), dtype=torch.bool)
            for row, length in enumerate(rows):
                mask[row, :length] = True
            actions = torch.ones(len(rows), 4, dtype=torch.bool)
            items.append(
                Experience(
                    sequences=mask.long(),
                    attention_mask=mask,
                    action_mask=actions,
                    action_log_probs=torch.zeros(len(rows), 4),
                    advantages=torch.zeros(len(rows), 4),
                )
            )
        steps += [False] * (len(parts) - 1) + [True]

    class Buffer(torch.utils.data.Dataset):
        sample_batch_size = 1
        dynamic_optimizer_step = steps
        dynamic_batch_num_tokens = [1.0] * len(steps)
        dynamic_global_batch_size = [1.0] * len(steps)
        dynamic_sample_loss_scale = [1.0] * len(steps)

        def __len__(self) -> int:
            return len(items)

        def __getitem__(self, index):  # type: ignore[no-untyped-def]
            return items[index]

        def collate_fn(self, batch):  # type: ignore[no-untyped-def]
            return batch[0]

        def setup_dynamic_batch(self, strategy) -> None:  # type: ignore[no-untyped-def]
            return None

    strategy = object.__new__(ppo_actor.DeepspeedStrategy)
    strategy.world_size = world
    strategy.ds_device_mesh = {"dp": types.SimpleNamespace(get_group=lambda: group)}
    trainer = object.__new__(ppo_actor.ActorPPOTrainer)
    namespace = types.SimpleNamespace
    trainer.args = namespace(
        train=namespace(dynamic_batch_enable=True),
        ds=namespace(tensor_parallel_size=1),
        actor=namespace(entropy_coef=None),
        algo=namespace(kl=namespace(use_loss=False)),
    )
    trainer.strategy = strategy
    trainer.actor = Model()
    trainer.actor_loss_fn = loss_fn
    trainer.actor_optim = None
    trainer.actor_scheduler = namespace(get_last_lr=lambda: [0.0])
    trainer.replay_buffer = Buffer()
    trainer.dataloader_pin_memory = False
    trainer.max_epochs = 1
    trainer.aux_loss = False
    trainer.ema_model = None
    started = time.perf_counter()
    trainer.ppo_train(0.0)
    wall = time.perf_counter() - started
    answer = _result(learner, slots, names, sb_openrlhf.uninstall())
    answer["wall"] = wall
    answer["restored_methods"] = all(
        ppo_actor.ActorPPOTrainer.__dict__[name] is original for name, original in originals.items()
    )
    return answer


def relative(coefficients: dict[str, float]) -> dict[str, float]:
    """Each coefficient's relative error against `TRUTH`."""
    return {name: coefficients[name] / value - 1 for name, value in TRUTH.items()}
