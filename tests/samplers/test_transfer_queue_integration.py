"""seqbalance's SeqlenBalancedSampler inside TransferQueue's real controller (local Ray instance).

Needs the optional ``transferqueue`` package (it pulls in torch and Ray, so CI does not install it):

    pip install transferqueue
    python -m pytest tests/test_transfer_queue_integration.py

Without it the whole module is skipped with that reason. Starting Ray and the controller takes
10-20 s; the test itself a few seconds.
"""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip(
    "transfer_queue",
    reason="transferqueue is not installed (optional; it pulls in torch and Ray): pip install transferqueue",
)

import ray  # noqa: E402  (installed with transferqueue)
import torch  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from transfer_queue import TransferQueueClient  # noqa: E402

from seqbalance.integrations.transfer_queue import SeqlenBalancedSampler  # noqa: E402
from seqbalance.samplers.seqlen_balanced import split_groups  # noqa: E402

N_PER_PROMPT = 2
DP_SIZE = 4
PER_RANK = 4  # 16 samples = 8 groups per batch
BATCHES = 3
PARTITION = "train_0"
TASK = "actor_update"
FIELD = "input_ids"


@pytest.fixture(scope="module")
def transfer_queue_system():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sampler = SeqlenBalancedSampler(n_samples_per_prompt=N_PER_PROMPT, dp_size=DP_SIZE)
        conf = OmegaConf.create(
            {
                "controller": {"sampler": sampler, "polling_mode": True},
                "backend": {"SimpleStorage": {"num_data_storage_units": 1}},
            },
            flags={"allow_objects": True},
        )
        final_conf = tq.init(conf)
        yield final_conf, tq.get_client()
        tq.close()
    finally:
        ray.shutdown()


def _rank_client(conf, rank):
    client = TransferQueueClient(
        client_id=f"seqbalance_rank_{rank}", controller_info=conf.controller.zmq_info
    )
    backend = conf.backend.storage_backend
    client.initialize_storage_manager(manager_type=backend, config=conf.backend[backend])
    return client


def _fetch(client, rank, batch, deadline_s=60.0):
    """Poll like a training rank in polling mode: an empty BatchMeta means "not yet"."""
    config = {"dp_rank": rank, "batch_index": batch, "task_name": TASK, "partition_id": PARTITION}
    deadline = time.monotonic() + deadline_s
    while True:
        meta = client.get_meta(
            data_fields=[FIELD],
            batch_size=PER_RANK,
            partition_id=PARTITION,
            task_name=TASK,
            sampling_config=config,
        )
        if meta.size:
            data = client.get_data(meta)
            values = [int(row.reshape(-1)[0]) for row in data[FIELD].unbind(0)]
            return list(meta.global_indexes), values, [m["total_lengths"] for m in meta.custom_meta]
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank} got nothing for batch {batch}")
        time.sleep(0.05)


def test_ranks_fetch_balanced_whole_groups_exactly_once(transfer_queue_system):
    conf, producer = transfer_queue_system
    total = PER_RANK * DP_SIZE * BATCHES
    lengths = [(index * 7919) % 997 + 1 for index in range(total)]

    # Producer: insert the samples and their token counts, as a rollout worker would.
    meta = producer.get_meta(
        data_fields=[FIELD], batch_size=total, partition_id=PARTITION, mode="insert"
    )
    index_of_row = list(meta.global_indexes)
    meta.update_custom_meta([{"total_lengths": lengths[row]} for row in range(total)])
    producer.put(
        data=TensorDict({FIELD: torch.arange(total).unsqueeze(1)}, batch_size=total), metadata=meta
    )
    row_of_index = {index: row for row, index in enumerate(index_of_row)}

    clients = [_rank_client(conf, rank) for rank in range(DP_SIZE)]
    results: dict[tuple[int, int], tuple[list[int], list[int], list[int]]] = {}
    errors: list[BaseException] = []

    # Rank 0 runs ahead through every batch before any other rank collects anything.
    for batch in range(BATCHES):
        results[(0, batch)] = _fetch(clients[0], 0, batch)

    def late_rank(rank):
        try:
            for batch in range(BATCHES):
                results[(rank, batch)] = _fetch(clients[rank], rank, batch)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=late_rank, args=(rank,)) for rank in range(1, DP_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    assert errors == []

    seen: set[int] = set()
    for batch in range(BATCHES):
        shares = [results[(rank, batch)] for rank in range(DP_SIZE)]
        for indexes, values, meta_lengths in shares:
            # the data behind each index is the row we wrote there, with its token count
            assert values == [row_of_index[i] for i in indexes]
            assert meta_lengths == [lengths[row_of_index[i]] for i in indexes]
            assert not seen & set(indexes), "an index was handed out twice"
            seen.update(indexes)
        # groups whole, and the split is the balanced split of the batch's groups
        selected = sorted(i for indexes, _, _ in shares for i in indexes)
        groups = [selected[g : g + N_PER_PROMPT] for g in range(0, len(selected), N_PER_PROMPT)]
        assert all(group[-1] - group[0] == N_PER_PROMPT - 1 for group in groups)
        weights = [sum(lengths[row_of_index[i]] for i in group) for group in groups]
        expected = [
            sorted(i for g in part for i in groups[g]) for part in split_groups(weights, DP_SIZE)
        ]
        assert [sorted(indexes) for indexes, _, _ in shares] == expected
    assert seen == set(index_of_row)


def test_controller_checkpoint_round_trip_keeps_the_split(transfer_queue_system, tmp_path):
    _, producer = transfer_queue_system
    partition = "train_ckpt"
    total = PER_RANK * DP_SIZE
    lengths = [(index * 104729) % 499 + 1 for index in range(total)]
    meta = producer.get_meta(
        data_fields=[FIELD], batch_size=total, partition_id=partition, mode="insert"
    )
    meta.update_custom_meta([{"total_lengths": length} for length in lengths])
    producer.put(
        data=TensorDict({FIELD: torch.arange(total).unsqueeze(1)}, batch_size=total), metadata=meta
    )

    def fetch(rank):
        config = {"dp_rank": rank, "batch_index": 0, "task_name": TASK, "partition_id": partition}
        got = producer.get_meta(
            data_fields=[FIELD],
            batch_size=PER_RANK,
            partition_id=partition,
            task_name=TASK,
            sampling_config=config,
        )
        return sorted(got.global_indexes)

    first = fetch(0)
    assert first
    # The controller pickles the sampler's checkpoint to disk and loads it back.
    path = str(tmp_path / "controller.pkl")
    producer.save_controller_checkpoint(path)
    producer.load_controller_checkpoint(path)
    shares = [first] + [fetch(rank) for rank in range(1, DP_SIZE)]
    assert sorted(i for share in shares for i in share) == sorted(meta.global_indexes)
    assert fetch(0) == first  # the cached share survived the round trip
