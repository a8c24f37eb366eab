"""Child processes of the planned-step tests against the real verl: a gloo process group on the
CPU, real verl functions, results back to the test. Not a test module.

`run` starts ``world`` spawned processes running `_rank` and returns each rank's results, or
raises after ``timeout`` seconds (killing them): a hang is a failure, never a stuck test.
Every rank runs the same list of scenarios in order, as SPMD workers do.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import sys
import traceback
import types
from typing import Any


def time_cost(per_token: float, per_pair: float) -> Any:
    """A `TimeCost` fitted to exact times of 5 ms a micro-batch plus these per-token and
    per-causal-pair coefficients."""
    import numpy as np

    from seqbalance import TimeCost

    rng = np.random.default_rng(7)
    batches = [rng.integers(1, 4096, size=rng.integers(1, 5)).tolist() for _ in range(40)]
    seconds = [0.005 + sum(per_token * n + per_pair * n * (n + 1) / 2 for n in b) for b in batches]
    return TimeCost.fit(batches, seconds)


def two_versions(folder: Any) -> tuple[Any, Any]:
    """Two saved costs that plan differently: token-bound, then attention-bound."""
    import json

    older, newer = folder / "cost-old.json", folder / "cost-new.json"
    older.write_text(json.dumps(time_cost(6.4e-5, 1e-12).to_dict()))
    newer.write_text(json.dumps(time_cost(1e-7, 5.8e-8).to_dict()))
    return older, newer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(world: int, scenarios: Any, timeout: float, target: Any = None) -> list[dict[str, Any]]:
    """Each rank's answer from ``target`` (`_rank` unless given), called with the rank, the
    world, the rendezvous port, ``scenarios`` and the results queue."""
    context = multiprocessing.get_context("spawn")
    results: Any = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=target or _rank, args=(rank, world, port, scenarios, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    answers: dict[int, dict[str, Any]] = {}
    try:
        while len(answers) < world:
            rank, answer = results.get(timeout=timeout)
            answers[rank] = answer
    except queue.Empty:
        raise TimeoutError(
            f"ranks {sorted(set(range(world)) - set(answers))} gave no answer in {timeout} s"
        ) from None
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return [answers[rank] for rank in range(world)]


def _stand_in_megatron(stages: int) -> type:
    """An engine class defined in ``verl.workers.engine.megatron.transformer_impl`` (Megatron
    itself is not installed here), whose module's ``mpu`` gives the pipeline size."""
    name = "verl.workers.engine.megatron.transformer_impl"
    module = types.ModuleType(name)
    module.mpu = types.SimpleNamespace(get_pipeline_model_parallel_world_size=lambda: stages)
    sys.modules[name] = module
    return _engine_class(name, "MegatronEngine")


def _engine_class(module_name: str, class_name: str) -> type:
    from verl.workers.engine import utils as engine_utils

    def forward_backward_batch(self, data, dp_group, num_batches_divided_by=None):
        return engine_utils.prepare_micro_batches(
            data=data,
            dp_group=dp_group,
            num_batches_divided_by=num_batches_divided_by,
            same_micro_num_in_dp=True,
        )

    return type(
        class_name,
        (),
        {"__module__": module_name, "forward_backward_batch": forward_backward_batch},
    )


def _mini_batch(lengths, cap, codes=None, nested=False):
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    width = max(int(max(lengths)), 1)
    mask = torch.zeros(len(lengths), width, dtype=torch.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    fields = {"input_ids": mask * 7, "attention_mask": mask}
    if codes is not None:
        fields["seqbalance_slot"] = torch.as_tensor(codes, dtype=torch.int64)
    if nested:  # as verl's trainer hands a batch to its workers: no padding, nested tensors
        from verl.workers.utils.padding import left_right_2_no_padding

        fields["response_mask"] = mask
        fields["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
    data = TensorDict(fields, batch_size=[len(lengths)])
    if nested:
        data = left_right_2_no_padding(data)
    tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=cap)
    return data


def _driver(scenario):
    """verl's V0 driver (RayPPOTrainer._balance_batch, installed) on a batch, then dispatch's
    contiguous chunks: each rank's rows, lengths and slot codes."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    lengths = scenario["lengths"]
    trainer = object.__new__(RayPPOTrainer)
    trainer.config = OmegaConf.create(scenario["config"])
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda worker_group, role: scenario["dp"]
    width = max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = torch.arange(len(lengths)).unsqueeze(1).expand(-1, width).contiguous()
    batch = DataProto.from_dict(tensors={"attention_mask": mask, "input_ids": ids})
    metrics: dict[str, Any] = {}
    trainer._balance_batch(batch, metrics)
    chunks = batch.chunk(scenario["dp"])  # dispatch's equal contiguous chunks
    return {
        "metrics": sorted(metrics),
        "chunks": [
            {
                "rows": chunk.batch["input_ids"][:, 0].tolist(),
                "lengths": chunk.batch["attention_mask"].sum(-1).tolist(),
                "codes": chunk.batch["seqbalance_slot"].tolist(),
            }
            for chunk in chunks
        ],
        "order": np.asarray(batch.batch["input_ids"][:, 0]).tolist(),
    }


def _driver_v1(scenario):
    """verl's V1 driver (PPOTrainer._balance_batch, installed) on a TransferQueue batch (the real
    KVBatchMeta; TransferQueue's store a stand-in recording what is put), then its equal
    contiguous chunks."""
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base

    lengths = scenario["lengths"]
    stored: dict[str, Any] = {}

    def kv_batch_put(keys, partition_id, fields=None, tags=None):
        stored.update(zip(keys, fields["seqbalance_slot"].tolist(), strict=True))

    trainer_base.tq = types.SimpleNamespace(kv_batch_put=kv_batch_put)
    # PPOTrainer is abstract (a concrete trainer adds its hooks); _balance_batch is its own.
    concrete = type(
        "Trainer",
        (trainer_base.PPOTrainer,),
        {"on_sample_end": lambda *a, **k: None, "on_step_end": lambda *a, **k: None},
    )
    trainer = object.__new__(concrete)
    trainer.config = OmegaConf.create(scenario["config"])
    trainer.actor_rollout_wg = types.SimpleNamespace(
        _dispatch_info={"actor": list(range(scenario["dp"]))}
    )
    trainer.tokenizer = types.SimpleNamespace(eos_token_id=0)
    trainer._get_required_batch_multiple = lambda dp_size: dp_size
    batch = KVBatchMeta(
        keys=[f"sample-{i}" for i in range(len(lengths))],
        tags=[{"seq_len": n} for n in lengths],
        partition_id="train",
        fields=["input_ids", "attention_mask"],
    )
    batch = trainer._balance_batch(batch, {})
    rows = [int(key.split("-")[1]) for key in batch.keys]
    chunk = len(rows) // scenario["dp"]
    return {
        "fields": list(batch.fields),
        "chunks": [
            {
                "rows": rows[r * chunk : (r + 1) * chunk],
                "lengths": [lengths[i] for i in rows[r * chunk : (r + 1) * chunk]],
                "codes": [stored[f"sample-{i}"] for i in rows[r * chunk : (r + 1) * chunk]],
            }
            for r in range(scenario["dp"])
        ],
    }


def _scenario(rank: int, world: int, scenario: dict[str, Any], state: dict[str, Any]) -> Any:
    import torch.distributed as dist
    from verl.workers.engine import utils as engine_utils

    from seqbalance.integrations import verl as sb_verl

    kind = scenario["kind"]
    if kind == "install":
        return sb_verl.install(
            step=scenario.get("step"), cost=(scenario.get("cost") or [None] * world)[rank]
        )
    if kind in ("driver", "driver_v1"):
        answer = None
        if rank == 0:  # what the driver raised reaches every rank: none is left waiting
            try:
                answer = _driver(scenario) if kind == "driver" else _driver_v1(scenario)
            except Exception:  # noqa: BLE001
                answer = {"raised": traceback.format_exc()}
        box = [answer]
        dist.broadcast_object_list(box, src=0)
        if "raised" in box[0]:
            raise RuntimeError(box[0]["raised"])
        state["driver"] = box[0]
        return box[0] if rank == 0 else None
    if kind == "original_is_back":
        return engine_utils.rearrange_micro_batches is state["original"]
    engine = (
        _stand_in_megatron(scenario["stages"])
        if scenario.get("engine") == "megatron"
        else _engine_class("verl.workers.engine.fsdp.transformer_impl", "FSDPEngine")
    )()
    if scenario.get("groups") == "singletons":  # every rank its own replica's dp group
        groups = [dist.new_group([r]) for r in range(world)]
        dp_group = groups[rank]
    else:
        dp_group = dist.group.WORLD
    formed = []
    if kind == "from_driver":
        chunk = state["driver"]["chunks"][rank]
        rows = scenario["rows"]
        for start in range(0, len(chunk["lengths"]), rows):
            data = _mini_batch(
                chunk["lengths"][start : start + rows],
                scenario["cap"],
                chunk["codes"][start : start + rows],
                nested=True,
            )
            _, indexes = engine.forward_backward_batch(
                data, dp_group, scenario.get("num_batches_divided_by")
            )
            formed.append(indexes)
        return formed
    if kind == "worker_only":
        lengths = scenario["lengths"][rank]
        data = _mini_batch(lengths, scenario["cap"])
        _, indexes = engine.forward_backward_batch(
            data, dp_group, scenario.get("num_batches_divided_by")
        )
        own = None
        if scenario.get("also_verl"):
            _, own = state["original"](
                _mini_batch(lengths, scenario["cap"]),
                max_token_len=scenario["cap"],
                dp_group=dp_group,
                num_batches_divided_by=scenario.get("num_batches_divided_by"),
            )
        return {"ours": indexes, "verl": own}
    raise ValueError(f"unknown scenario {kind!r}")


def serve(
    rank: int, world: int, port: int, scenarios: list[dict[str, Any]], results: Any, prepare: Any
) -> None:
    """One rank's whole life: the rendezvous environment, ``prepare()`` (the trainer's imports and
    patches, before its gloo group; returns the scenario function and its state), the group, every
    scenario in order (what one raised is its answer), then every answer back on ``results``."""
    answers: dict[str, Any] = {}
    try:
        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
        )
        scenario_of, state = prepare()
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
        for scenario in scenarios:
            if os.environ.get("SEQBALANCE_GLOO_TRACE"):
                print(f"rank {rank}: {scenario['name']}", file=sys.stderr, flush=True)
            try:
                answers[scenario["name"]] = ("ok", scenario_of(rank, world, scenario, state))
            except Exception as exc:  # noqa: BLE001  (what a rank raised is the test's answer)
                answers[scenario["name"]] = ("raised", type(exc).__name__, str(exc))
                if os.environ.get("SEQBALANCE_GLOO_TRACE"):
                    traceback.print_exc()
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        answers["__crash__"] = ("raised", "crash", traceback.format_exc())
    results.put((rank, answers))


def _prepare_verl() -> tuple[Any, dict[str, Any]]:
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import warnings

    if os.environ.get("SEQBALANCE_GLOO_TRACE"):
        import faulthandler

        faulthandler.dump_traceback_later(150, exit=True)

    warnings.simplefilter("ignore")
    from verl.utils import seqlen_balancing
    from verl.workers.engine import utils as engine_utils

    # verl picks its collectives' device itself (CUDA here, which this machine lacks):
    # pointed at the CPU, where gloo runs.
    seqlen_balancing.get_device_name = lambda: "cpu"
    return _scenario, {"original": engine_utils.rearrange_micro_batches}


def _rank(rank: int, world: int, port: int, scenarios: list[dict[str, Any]], results: Any) -> None:
    serve(rank, world, port, scenarios, results, _prepare_verl)
