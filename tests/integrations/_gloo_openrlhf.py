"""Child processes of the planned-step tests against the real OpenRLHF 0.11.2 (see
`_gloo_step.run`): a gloo group on the CPU, OpenRLHF's real ``balance_experiences``,
``NaiveReplayBuffer.append`` and ``setup_dynamic_batch``. Not a test module.

OpenRLHF picks its collectives' device itself (``torch.cuda.current_device()``): pointed at
the CPU here. Its DeepSpeed strategy is a stand-in giving the arguments, the data-parallel group
and ``all_reduce`` (DeepSpeed is not needed for these functions).
"""

from __future__ import annotations

import types
from typing import Any

from tests.integrations._gloo_step import serve


def arguments(scenario: dict[str, Any], world: int) -> Any:
    space = types.SimpleNamespace
    return space(
        actor=space(num_nodes=1, num_gpus_per_node=world),
        ds=space(ring_attn_size=1, tensor_parallel_size=1),
        train=space(batch_size=scenario["train_batch"], max_tokens_per_gpu=scenario["cap"]),
        rollout=space(batch_size=scenario["rollout_batch"], n_samples_per_prompt=1),
    )


def experiences(lengths: list[int], per_batch: int) -> list[Any]:
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    made = []
    for start in range(0, len(lengths), per_batch):
        part = lengths[start : start + per_batch]
        width = max(part)
        mask = torch.zeros(len(part), width, dtype=torch.long)
        for row, n in enumerate(part):
            mask[row, :n] = 1
        ids = torch.arange(start, start + len(part)).unsqueeze(1) * mask
        made.append(
            Experience(
                sequences=ids,
                attention_mask=mask,
                action_mask=mask.bool(),
                total_length=torch.tensor(part),
                info={"sample": torch.arange(start, start + len(part))},
            )
        )
    return made


def buffer_of(experience: Any) -> Any:
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    buffer = object.__new__(NaiveReplayBuffer)  # its __init__ names a CUDA device
    buffer.sample_batch_size, buffer.limit, buffer.cpu_offload = 1, 0, False
    buffer.packing_samples, buffer.dynamic_batch, buffer.items = True, True, []
    buffer.dynamic_indices, buffer.dynamic_sample_loss_scale = [], []
    buffer.dynamic_batch_num_tokens, buffer.dynamic_global_batch_size = [], []
    buffer.dynamic_optimizer_step = []
    buffer.append(experience)
    return buffer


def strategy_of(args: Any) -> Any:
    import torch.distributed as dist

    def all_reduce(tensor, op="mean"):
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor

    mesh = {"dp": types.SimpleNamespace(get_group=lambda: dist.group.WORLD)}
    return types.SimpleNamespace(args=args, ds_device_mesh=mesh, all_reduce=all_reduce)


def lists_of(buffer: Any) -> dict[str, Any]:
    return {
        "indices": buffer.dynamic_indices,
        "samples": [int(item.info["sample"]) for item in buffer.items],
        "lengths": [int(item.total_length) for item in buffer.items],
        "codes": [
            None if "seqbalance_slot" not in item.info else int(item.info["seqbalance_slot"])
            for item in buffer.items
        ],
        "loss_scale": buffer.dynamic_sample_loss_scale,
        "num_tokens": buffer.dynamic_batch_num_tokens,
        "global_batch": buffer.dynamic_global_batch_size,
        "optimizer_step": buffer.dynamic_optimizer_step,
    }


def _scenario(rank: int, world: int, scenario: dict[str, Any], state: dict[str, Any]) -> Any:
    import torch.distributed as dist

    # openrlhf.trainer.ppo_trainer imports flash_attn (absent here); the ppo_utils package
    # imports balance_experiences by name just as it does.
    from openrlhf.trainer import ppo_utils
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    from seqbalance.integrations import openrlhf as sb_openrlhf

    kind = scenario["kind"]
    args = arguments(scenario, world) if "cap" in scenario else None
    if kind == "install":
        return sb_openrlhf.install(step=scenario["step"])
    if kind == "driver":
        # The driver by a name a module imported it under, rank 0 only.
        box = [None]
        if rank == 0:
            made = experiences(scenario["lengths"], scenario["per_batch"])
            box = [ppo_utils.balance_experiences(made, args)]
        dist.broadcast_object_list(box, src=0)
        state["balanced"] = box[0]
        return None
    if kind == "worker":
        if scenario.get("from_driver"):
            experience = state["balanced"][rank]
        else:
            experience = experiences(scenario["lengths"][rank], len(scenario["lengths"][rank]))[0]
        buffer = buffer_of(experience)
        if scenario.get("original"):
            state["setup_original"](buffer, strategy_of(args))
        else:
            buffer.setup_dynamic_batch(strategy_of(args))
        return lists_of(buffer)
    if kind == "original_is_back":
        return NaiveReplayBuffer.__dict__["setup_dynamic_batch"] is state["setup_original"]
    raise ValueError(f"unknown scenario {kind!r}")


def _prepare() -> tuple[Any, dict[str, Any]]:
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.cuda.current_device = lambda: "cpu"  # OpenRLHF's collectives' device: the CPU
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    return _scenario, {"setup_original": NaiveReplayBuffer.__dict__["setup_dynamic_batch"]}


def rank_main(
    rank: int, world: int, port: int, scenarios: list[dict[str, Any]], results: Any
) -> None:
    serve(rank, world, port, scenarios, results, _prepare)
