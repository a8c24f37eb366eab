"""Stand-ins of verl's FSDP engine loop and OpenRLHF's actor loop for ``install(learn=...)``,
run as one process per rank with a fake data-parallel all-gather. Not a test module.

`write_packages` writes the stand-in ``verl`` and ``openrlhf`` trees (the partitioner modules of
`_trainer_standins` plus an engine and an actor loop with upstream's method names and
signatures, and the loops' structure: verl's ``forward_backward_batch`` enters
``_gradient_sync_context`` around each training micro-batch's ``forward_step`` and backward;
OpenRLHF's ``ppo_train`` calls ``training_step`` per micro-batch, which steps the optimizer
through its strategy).

`run` starts one spawned process per rank; the parent is the fake collective: every rank sends
the same kind of message in the same order, and the parent answers each round (``max``: the
largest value, as FSDP's collectives make every rank wait for the slowest; ``gather``: every
rank's record, in rank order). Each rank's clock is fake: the stand-in model advances it by the
truth model's time of the slot, the slowest rank's, so the test is deterministic and fast.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np

#: The truth model (time-cost spec's H100-scaled 8B model): per micro-batch, per document, per
#: token, per causal pair.
TRUTH = {"micro_batch": 5e-3, "document": 2e-4, "per_token": 6.4e-5, "per_pair": 5.8e-9}
CAP = 65_536


def truth_seconds(lengths: list[int]) -> float:
    """The truth model's time of one rank's micro-batch (0 for an idle rank)."""
    if not lengths:
        return 0.0
    values = np.asarray(lengths, dtype=np.float64)
    return float(
        TRUTH["micro_batch"]
        + np.sum(
            TRUTH["document"]
            + TRUTH["per_token"] * values
            + TRUTH["per_pair"] * values * (values + 1) / 2
        )
    )


def sft_lengths(seed: int, mini_batch: int, count: int) -> list[int]:
    """SFT-like documents (``min(int(lognormal(9, 1)) + 1, CAP)``), the same on every rank."""
    rng = np.random.default_rng([seed, mini_batch])
    return [min(int(value) + 1, CAP) for value in rng.lognormal(9.0, 1.0, count)]


TENSORDICT_UTILS = """
def get_non_tensor_data(data, key, default):
    return data.get(key, default)


def assign_non_tensor(data, **values):
    data.update(values)
"""

ENGINE_UTILS = '''
"""Stand-in of verl.workers.engine.utils: micro-batches of one rank's rows."""
import math

import numpy

from verl.utils import seqlen_balancing


def prepare_micro_batches(
    data,
    dp_group=None,
    num_batches_divided_by=None,
    same_micro_num_in_dp=True,
    min_num_micro_batch=None,
    use_dynamic_bsz_balance=True,
):
    lengths = data["lengths"]
    count = max(1, math.ceil(sum(lengths) / data["max_token_len_per_gpu"]))
    if same_micro_num_in_dp and dp_group is not None:
        count = int(dp_group.max(count))
    count = min(count, len(lengths))
    workloads = seqlen_balancing.calculate_workload(lengths).tolist()
    parts = seqlen_balancing.get_seqlen_balanced_partitions(workloads, count, equal_size=False)
    micro = []
    for part in parts:
        rows = [lengths[i] for i in part]
        # as verl's micro-batches: an attention mask (right-padded) and token ids under it
        mask = numpy.zeros((len(rows), max(rows)), dtype=numpy.uint8)
        for row, length in enumerate(rows):
            mask[row, :length] = 1
        micro.append({"input_ids": mask * 7, "attention_mask": mask, "lengths": rows})
    return micro, parts
'''

FSDP_ENGINE = '''
"""Stand-in of verl.workers.engine.fsdp.transformer_impl: FSDPEngine's loop, as verl 0.9.1's."""
from contextlib import contextmanager, nullcontext

from verl.utils import tensordict_utils as tu

from ..utils import prepare_micro_batches


class FSDPEngine:
    def get_data_parallel_group(self):
        return self.dp_group

    @contextmanager
    def _gradient_sync_context(self, *, is_last_micro_batch: bool):
        self.sync_entries += 1
        yield

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        tu.assign_non_tensor(data, sp_size=1)
        micro_batches, indices = prepare_micro_batches(
            data=data, dp_group=self.get_data_parallel_group(), same_micro_num_in_dp=True
        )
        outputs = []
        for index, micro_batch in enumerate(micro_batches):
            sync_ctx = (
                nullcontext()
                if forward_only
                else self._gradient_sync_context(
                    is_last_micro_batch=index == len(micro_batches) - 1
                )
            )
            with sync_ctx:
                loss, meta_info = self.forward_step(
                    micro_batch, loss_function=loss_function, forward_only=forward_only
                )
                if not forward_only:
                    loss.backward()
            outputs.append(meta_info)
        return outputs

    def forward_step(self, micro_batch, loss_function, forward_only):
        raise NotImplementedError


class FSDPEngineWithLMHead(FSDPEngine):
    pass


class FSDPEngineWithValueHead(FSDPEngineWithLMHead):
    pass
'''

MEGATRON_ENGINE = '''
"""Stand-in of verl.workers.engine.megatron.transformer_impl."""


class MegatronEngine:
    def forward_backward_batch(self, data, loss_function, forward_only=False):
        return self.run(data, forward_only)
'''

PPO_ACTOR = '''
"""Stand-in of openrlhf.trainer.ray.ppo_actor: the actor's loop, as OpenRLHF 0.11.2's."""


class DeepspeedStrategy:
    def backward(self, loss, model, _optimizer, **kwargs):
        loss.backward()

    def optimizer_step(self, _optimizer, model, _scheduler, name="model", **kwargs):
        model.step()


class ActorPPOTrainer:
    def ppo_train(self, kl_ctl: float):
        for step, experience in enumerate(self.replay_buffer.items):
            self.training_step(experience, kl_ctl, step, None)
        return {}

    def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
        loss = self.actor(experience)
        self.strategy.backward(loss, self.actor, None)
        if self.replay_buffer.dynamic_optimizer_step[step]:
            self.strategy.optimizer_step(None, self.actor, None, name="actor")
        return {"metrics": {}}
'''


def write_packages(root: Path) -> None:
    """The stand-in verl and openrlhf packages under ``root`` (put on sys.path)."""
    from tests.integrations._trainer_standins import GROUP_FUNCTION, SEQLEN_MODULE

    files = {
        "verl/__init__.py": "",
        "verl/utils/__init__.py": "",
        "verl/utils/seqlen_balancing.py": (SEQLEN_MODULE + GROUP_FUNCTION).format(package="verl"),
        "verl/utils/tensordict_utils.py": TENSORDICT_UTILS,
        "verl/workers/__init__.py": "",
        "verl/workers/engine/__init__.py": "",
        "verl/workers/engine/utils.py": ENGINE_UTILS,
        "verl/workers/engine/fsdp/__init__.py": "",
        "verl/workers/engine/fsdp/transformer_impl.py": FSDP_ENGINE,
        "verl/workers/engine/megatron/__init__.py": "",
        "verl/workers/engine/megatron/transformer_impl.py": MEGATRON_ENGINE,
        "verl/trainer/__init__.py": "",
        "verl/trainer/ppo/__init__.py": "",
        "verl/trainer/ppo/ray_trainer.py": (
            "from verl.utils.seqlen_balancing import calculate_workload\n"
        ),
        "openrlhf/__init__.py": "",
        "openrlhf/utils/__init__.py": "",
        "openrlhf/utils/seqlen_balancing.py": SEQLEN_MODULE.format(package="openrlhf"),
        "openrlhf/trainer/__init__.py": "",
        "openrlhf/trainer/ray/__init__.py": "",
        "openrlhf/trainer/ray/ppo_actor.py": PPO_ACTOR,
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


# -- the fake collective ---------------------------------------------------------------------


class Group:
    """A rank's end of the fake data-parallel group (a pipe to the parent)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def _round(self, kind: str, value: Any) -> Any:
        self.connection.send((kind, value))
        return self.connection.recv()

    def max(self, value: float) -> float:
        return float(self._round("max", value))

    def gather(self, record: dict[str, Any], group: Any = None) -> list[dict[str, Any]]:
        return list(self._round("gather", record))


def run(world: int, scenario: dict[str, Any], timeout: float = 120.0) -> list[dict[str, Any]]:
    """Every rank's answer of `_rank` on ``scenario`` (one spawned process a rank)."""
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe() for _ in range(world)]
    processes = [
        context.Process(target=_rank, args=(rank, world, scenario, pipes[rank][1]))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    answers: dict[int, Any] = {}
    failure: list[str] = []

    def serve() -> None:
        live = set(range(world))
        while live:
            messages = {}
            for rank in sorted(live):
                if not pipes[rank][0].poll(timeout):
                    failure.append(f"rank {rank} sent nothing in {timeout} s")
                    return
                messages[rank] = pipes[rank][0].recv()
            kinds = {kind for kind, _ in messages.values()}
            if kinds & {"done", "error"}:
                for rank, (kind, value) in messages.items():
                    if kind in ("done", "error"):
                        answers[rank] = (kind, value)
                        live.discard(rank)
                if live:
                    failure.append(f"ranks {sorted(live)} still ran when others ended")
                    return
                continue
            if len(kinds) != 1:
                failure.append(f"ranks sent different collectives: {messages}")
                return
            kind = kinds.pop()
            values = [messages[rank][1] for rank in sorted(messages)]
            reply = max(values) if kind == "max" else values
            for rank in messages:
                pipes[rank][0].send(reply)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    server.join(timeout * 4)
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
    if failure or server.is_alive():
        raise AssertionError(failure or ["the fake collective did not finish"])
    errors = {rank: value for rank, (kind, value) in answers.items() if kind == "error"}
    if errors:
        raise AssertionError(f"ranks raised: {errors}")
    return [answers[rank][1] for rank in range(world)]


# -- one rank --------------------------------------------------------------------------------


class FakeClock:
    """Seconds that pass only when the stand-in model says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.fail_next = False

    def read(self) -> float:
        if self.fail_next:
            self.fail_next = False
            raise OSError("stand-in clock failed")
        return self.now


class _Loss:
    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def backward(self) -> None:
        self.clock.now += self.seconds


class _Experience:
    """What OpenRLHF's actor reads of an experience here: its right-padded attention mask."""

    def __init__(self, lengths: list[int], key: tuple[int, int]) -> None:
        self.lengths, self.key = lengths, key
        self.attention_mask = np.zeros((len(lengths), max(lengths)), dtype=np.uint8)
        for row, length in enumerate(lengths):
            self.attention_mask[row, :length] = 1


def _rank(rank: int, world: int, scenario: dict[str, Any], connection: Any) -> None:
    import traceback

    sys.path.insert(0, scenario["root"])
    if scenario.get("log") and rank == 0:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        connection.send(("done", _main(rank, world, scenario, Group(connection))))
    except BaseException:
        connection.send(("error", traceback.format_exc()))


def _slot_time(group: Group, lengths: list[int], noise: float, key: tuple[int, ...]) -> float:
    """The slot's time on every rank: the slowest rank's truth, as FSDP's collectives wait."""
    seconds = group.max(truth_seconds(lengths))
    if noise:
        seconds *= 1.0 + float(np.random.default_rng(list(key)).uniform(-noise, noise))
    return seconds


def _main(rank: int, world: int, scenario: dict[str, Any], group: Group) -> dict[str, Any]:
    from seqbalance.integrations import _learn_openrlhf, _learn_patches

    clock = FakeClock()
    trainer = scenario["trainer"]
    if trainer == "verl":
        from seqbalance.integrations import verl as integration
    else:
        from seqbalance.integrations import openrlhf as integration
    # the planned step off: the stand-ins have no driver
    names = integration.install(learn=scenario["path"], learn_every=scenario["every"], step=False)
    patches = _learn_patches.VERL if trainer == "verl" else _learn_openrlhf.OPENRLHF
    learner = patches.learner
    learner.clock = clock.read
    learner.gather = group.gather
    learner.writer = lambda: rank == 0
    noise = scenario.get("noise", 0.0)
    fail_at = scenario.get("fail", {}).get(str(rank))
    per_rank = scenario["documents"] // world
    costs_seen = []
    slots: list[int] = []  # training micro-batches of each mini-batch
    if trainer == "verl":
        module = sys.modules["verl.workers.engine.fsdp.transformer_impl"]

        class Engine(module.FSDPEngineWithLMHead):
            def forward_step(self, micro_batch, loss_function, forward_only):
                seconds = _slot_time(group, micro_batch["lengths"], noise, self.key())
                clock.now += seconds / 3  # the forward; the backward takes the rest
                if (
                    not forward_only
                    and isinstance(self, Engine)
                    and (self.mini, self.slot) == fail_at
                ):
                    clock.fail_next = True  # the reading that closes this micro-batch fails
                self.slot += 1
                if not forward_only:
                    slots[-1] = self.slot
                return _Loss(clock, 2 * seconds / 3), {}

            def key(self):
                return (self.mini, self.slot)

        engine = Engine()
        engine.dp_group = group
        engine.sync_entries = 0
        critic_class = type(
            "Critic",
            (module.FSDPEngineWithValueHead,),
            {"forward_step": Engine.forward_step, "key": Engine.key},
        )
        critic = critic_class()
        critic.dp_group, critic.sync_entries = group, 0
        for mini in range(scenario["mini_batches"]):
            lengths = sft_lengths(scenario["seed"], mini, scenario["documents"])
            mine = lengths[rank * per_rank : (rank + 1) * per_rank]
            engine.mini, engine.slot = mini, 0
            data = {"lengths": mine, "max_token_len_per_gpu": CAP, "use_dynamic_bsz": True}
            slots.append(0)
            engine.forward_backward_batch(data, None, forward_only=False)
            # forward-only passes (log-probs) and the critic's training are never observed
            engine.mini, engine.slot = mini, 0
            engine.forward_backward_batch(dict(data), None, forward_only=True)
            critic.mini, critic.slot = mini, 0
            slots_now = slots[-1]
            critic.forward_backward_batch(dict(data), None, forward_only=False)
            slots[-1] = slots_now
            costs_seen.append(None if learner.cost is None else learner.cost.coefficients)
    else:
        module = sys.modules["openrlhf.trainer.ray.ppo_actor"]

        class Model:
            def __init__(self):
                self.steps = 0

            def __call__(self, experience):
                seconds = _slot_time(group, experience.lengths, noise, experience.key)
                clock.now += seconds / 3
                return _Loss(clock, 2 * seconds / 3)

            def step(self):
                self.steps += 1
                clock.now += 0.5  # the optimizer's step: not a micro-batch's time

        actor = object.__new__(module.ActorPPOTrainer)
        actor.actor = Model()
        actor.strategy = module.DeepspeedStrategy()
        # dynamic batching: the replay buffer says which micro-batch steps the optimizer
        actor.args = types.SimpleNamespace(train=types.SimpleNamespace(dynamic_batch_enable=True))
        for mini in range(scenario["mini_batches"]):
            lengths = sft_lengths(scenario["seed"], mini, scenario["documents"])
            mine = lengths[rank * per_rank : (rank + 1) * per_rank]
            count = max(1, -(-sum(mine) // CAP))
            count = int(group.max(count))
            workloads = np.asarray(mine, dtype=np.int64)
            from seqbalance import get_seqlen_balanced_partitions

            parts = get_seqlen_balanced_partitions(workloads.tolist(), count, False)
            slots.append(len(parts))
            items = [
                _Experience([mine[i] for i in part], (mini, slot))
                for slot, part in enumerate(parts)
            ]
            actor.replay_buffer = type(
                "Buffer",
                (),
                {"items": items, "dynamic_optimizer_step": [False] * (len(items) - 1) + [True]},
            )()
            actor.ppo_train(0.0)
            costs_seen.append(None if learner.cost is None else learner.cost.coefficients)
    answer = {
        "names": names,
        "coefficients": None if learner.cost is None else learner.cost.coefficients,
        "observations": None if learner.cost is None else learner.cost.observations,
        "mini_batches": learner.mini_batches,
        "slots": slots,
        "first_fitted": next((i for i, c in enumerate(costs_seen) if c is not None), None),
        "restored": integration.uninstall(),
    }
    return answer
