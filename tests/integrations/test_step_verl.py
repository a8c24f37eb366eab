"""install(step=True) for verl against stand-ins (no torch, no verl): what it replaces and puts
back, the driver's layout and slots, each worker forming exactly the driver's micro-batches, the
joint plan of ranks without slots (ranks as threads over a stand-in torch.distributed), one cost
version per plan, an unmet constraint raised on every rank, the fallback said once, and
``step=False`` as today. The real verl runs the same in tests/integrations/test_step_real_verl.py.
"""

from __future__ import annotations

import logging
import sys
import threading
import types

import numpy as np
import pytest

from seqbalance import simulate_step
from seqbalance.integrations import _slots, _step, _verl_common, _verl_step
from seqbalance.integrations import verl as sb_verl
from seqbalance.integrations._costs import CostSource
from seqbalance.integrations.verl import IntegrationError
from tests.integrations._gloo_step import two_versions
from tests.integrations._trainer_standins import StandIn, fresh_root, purge

ENGINE_UTILS = '''
"""Stand-in for verl.workers.engine.utils (verl 0.9.1's names and parameters)."""
from verl.utils.seqlen_balancing import rearrange_micro_batches


def prepare_micro_batches(data, dp_group=None, num_batches_divided_by=None,
                          same_micro_num_in_dp=True, min_num_micro_batch=None,
                          use_dynamic_bsz_balance=True):
    return rearrange_micro_batches(data, max_token_len=data["max_token_len_per_gpu"],
                                   dp_group=dp_group, num_batches_divided_by=num_batches_divided_by,
                                   same_micro_num_in_dp=same_micro_num_in_dp,
                                   min_num_micro_batch=min_num_micro_batch,
                                   use_dynamic_bsz_balance=use_dynamic_bsz_balance,
                                   force_group_size=1)
'''

# verl's rearrange_micro_batches with its parameters: one micro-batch per sample (the stand-in
# only has to be the trainer's own, recognisably).
REARRANGE = """

def rearrange_micro_batches(batch, max_token_len, dp_group=None, num_batches_divided_by=None,
                            same_micro_num_in_dp=True, min_num_micro_batch=None,
                            use_dynamic_bsz_balance=True, force_group_size=1):
    n = len(batch["attention_mask"])
    parts = [[i] for i in range(n)]
    return [{k: v[p] for k, v in batch.items() if k != "max_token_len_per_gpu"} for p in parts], parts


def log_seqlen_unbalance(seqlen_list, partitions, prefix):
    sums = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {f"{prefix}/max": max(sums), f"{prefix}/min": min(sums)}
"""

TENSORDICT_UTILS = """
def index_select_tensor_dict(batch, indices):
    return {k: v[indices] for k, v in batch.items() if k != "max_token_len_per_gpu"}
"""

# verl's V0 and V1 drivers, their _balance_batch as verl lays the batch out (the partition with
# equal counts, each rank's samples small at both ends).
DRIVER = """
from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions


class {name}:
    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        lengths = batch.batch["attention_mask"].sum(-1)
        workloads = calculate_workload(lengths)
        dp = {dp}
        parts = get_seqlen_balanced_partitions(workloads.tolist(), k_partitions=dp, equal_size=True)
        order = []
        for part in parts:
            part = sorted(part, key=lambda x: (int(workloads[x]), x))
            order += part[::2] + part[1::2][::-1]
        batch.reorder(order)
        metrics["{name}"] = True
        return {ret}
"""


class Batch:
    """A stand-in DataProto: a dict of NumPy columns, reordered in place."""

    def __init__(self, lengths, width=None):
        width = width or max(lengths)
        mask = (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)
        self.batch = {"attention_mask": mask, "input_ids": np.arange(len(lengths))[:, None] * mask}
        self.tags = [{"seq_len": int(n)} for n in lengths]
        self.keys = [f"k{i}" for i in range(len(lengths))]
        self.partition_id = "train"
        self.fields = ["attention_mask"]

    def reorder(self, order):
        order = np.asarray(order)
        self.batch = {k: v[order] for k, v in self.batch.items()}
        self.tags = [self.tags[i] for i in order]
        self.keys = [self.keys[i] for i in order]


def config(strategy="fsdp", stages=1, cap=4096, dynamic=True):
    actor = {
        "use_dynamic_bsz": dynamic,
        "ppo_max_token_len_per_gpu": cap,
        "strategy": strategy,
        "ppo_mini_batch_size": 8,
        "megatron": {"pipeline_model_parallel_size": stages},
    }
    return {"actor_rollout_ref": {"actor": actor, "rollout": {"n": 2}}}


@pytest.fixture
def verl(tmp_path, monkeypatch):
    """The stand-in verl with engine utils and both drivers (2 data-parallel ranks)."""
    fresh_root(tmp_path, monkeypatch, "verl")
    files = {
        "verl/workers/__init__.py": "",
        "verl/workers/engine/__init__.py": "",
        "verl/workers/engine/utils.py": ENGINE_UTILS,
        "verl/utils/tensordict_utils.py": TENSORDICT_UTILS,
        "verl/trainer/ppo/v1/__init__.py": "",
        "verl/trainer/ppo/v1/trainer_base.py": DRIVER.format(name="PPOTrainer", dp=2, ret="batch"),
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    standin = StandIn(tmp_path, "verl")
    with open(tmp_path / "verl/utils/seqlen_balancing.py", "a") as module:
        module.write(REARRANGE)
    with open(tmp_path / "verl/trainer/ppo/ray_trainer.py", "a") as module:
        module.write(DRIVER.format(name="RayPPOTrainer", dp=2, ret="None"))
    purge("verl")
    import importlib

    importlib.invalidate_caches()
    standin.module = importlib.import_module("verl.utils.seqlen_balancing")
    yield standin
    sb_verl.uninstall()
    purge("verl")


def modules():
    import importlib

    return (
        importlib.import_module("verl.workers.engine.utils"),
        importlib.import_module("verl.trainer.ppo.ray_trainer"),
        importlib.import_module("verl.trainer.ppo.v1.trainer_base"),
    )


def trainer(module, cfg, dp=2):
    made = object.__new__(getattr(module, "RayPPOTrainer", None) or module.PPOTrainer)
    made.config = cfg
    made.actor_rollout_wg = types.SimpleNamespace(_dispatch_info={"actor": list(range(dp))})
    made._get_dp_size = lambda worker_group, role: dp
    return made


def mini_batch(lengths, codes=None, cap=4096):
    batch = Batch(lengths).batch
    if codes is not None:
        batch[_slots.SLOT_FIELD] = np.asarray(codes)
    batch["max_token_len_per_gpu"] = cap
    return batch


LENGTHS = np.random.default_rng(5).integers(1, 2048, size=32).tolist()


def test_install_step_replaces_and_uninstall_restores(verl):
    engine_utils, v0, v1 = modules()
    originals = (
        engine_utils.rearrange_micro_batches,
        v0.RayPPOTrainer.__dict__["_balance_batch"],
        v1.PPOTrainer.__dict__["_balance_batch"],
    )
    names = sb_verl.install(step=True)
    assert names[-3:] == [
        "verl.workers.engine.utils.rearrange_micro_batches",
        "RayPPOTrainer._balance_batch",
        "PPOTrainer._balance_batch",
    ]
    assert engine_utils.rearrange_micro_batches is _verl_step.rearrange_micro_batches
    assert sb_verl.install(step=True) == names  # idempotent
    sb_verl.uninstall()
    assert (
        engine_utils.rearrange_micro_batches,
        v0.RayPPOTrainer.__dict__["_balance_batch"],
        v1.PPOTrainer.__dict__["_balance_batch"],
    ) == originals


def test_step_false_is_today(verl):
    engine_utils, v0, _ = modules()
    original = engine_utils.rearrange_micro_batches
    sb_verl.install(step=True)
    names = sb_verl.install(step=False)  # puts back what step=True replaced
    assert engine_utils.rearrange_micro_batches is original
    assert not any("rearrange" in name for name in names)
    batch = Batch(LENGTHS)
    trainer(v0, config())._balance_batch(batch, {})
    assert _slots.SLOT_FIELD not in batch.batch


def test_the_environment_turns_it_on_and_a_bad_value_is_refused(verl, monkeypatch):
    engine_utils, _, _ = modules()
    monkeypatch.setenv("SEQBALANCE_STEP", "1")
    sb_verl.install()
    assert engine_utils.rearrange_micro_batches is _verl_step.rearrange_micro_batches
    sb_verl.uninstall()
    monkeypatch.setenv("SEQBALANCE_STEP", "maybe")
    with pytest.raises(ValueError, match="SEQBALANCE_STEP = 'maybe'"):
        sb_verl.install()
    with pytest.raises(TypeError, match="step must be True, False or None"):
        sb_verl.install(step="yes")


def test_other_parameters_are_refused_by_name_and_nothing_patched(verl):
    engine_utils, _, _ = modules()
    original = engine_utils.rearrange_micro_batches

    def other(batch, max_token_len, dp_group=None):
        return original(batch, max_token_len)

    engine_utils.rearrange_micro_batches = other
    with pytest.raises(IntegrationError, match="verl.workers.engine.utils.rearrange_micro_batches"):
        sb_verl.install(step=True)
    assert engine_utils.rearrange_micro_batches is other
    assert not sb_verl.is_installed()


def check_layout(batch, dp, rows, cap):
    """Each dispatch chunk's windows: the slots decode to a valid plan, the same count on every
    rank; return the plan of every window in batch rows."""
    n = len(batch.batch["attention_mask"])
    chunk = n // dp
    lengths = batch.batch["attention_mask"].sum(-1)
    codes = batch.batch[_slots.SLOT_FIELD]
    windows = []
    for start in range(0, chunk, rows):
        plan = []
        for rank in range(dp):
            part = slice(rank * chunk + start, rank * chunk + start + rows)
            parts = _slots.decode_slots(codes[part], lengths[part], cap)
            assert parts is not None
            plan.append([[rank * chunk + start + i for i in mb] for mb in parts])
        assert len({len(rank) for rank in plan}) == 1
        windows.append(plan)
    return windows, lengths


@pytest.mark.parametrize(("strategy", "stages"), [("fsdp", 1), ("megatron", 4)])
def test_the_driver_lays_out_each_mini_batch_and_workers_form_it_exactly(verl, strategy, stages):
    engine_utils, v0, _ = modules()
    sb_verl.install(step=True)
    batch = Batch(LENGTHS)
    metrics = {}
    trainer(v0, config(strategy, stages))._balance_batch(batch, metrics)
    assert metrics["RayPPOTrainer"] and "global_seqlen/max" in metrics
    rows = 8  # 8 prompts x 2 responses over 2 ranks
    windows, lengths = check_layout(batch, 2, rows, 4096)
    mode = _step.StepMode("step", stages) if strategy == "megatron" else _step.StepMode()
    seconds = 0.0
    for window, plan in enumerate(windows):
        for rank in range(2):
            start = rank * 16 + window * rows
            data = {k: v[start : start + rows] for k, v in batch.batch.items()}
            data["max_token_len_per_gpu"] = 4096
            micro, indexes = engine_utils.prepare_micro_batches(data)  # one process: the slots
            assert [[start + i for i in mb] for mb in indexes] == plan[rank]
            assert [mb["attention_mask"].sum(-1).tolist() for mb in micro] == [
                lengths[mb].tolist() for mb in plan[rank]
            ]
        seconds += simulate_step(
            plan, lengths, cost="workload", sync=mode.sync, pipeline_stages=mode.pipeline_stages
        ).makespan
    assert seconds > 0


def test_the_v1_driver_sends_the_slots_as_a_transfer_queue_field(verl, monkeypatch):
    _, _, v1 = modules()
    put = {}

    def kv_batch_put(keys, partition_id, fields):
        put.update(keys=list(keys), fields=fields)

    monkeypatch.setattr(v1, "tq", types.SimpleNamespace(kv_batch_put=kv_batch_put), raising=False)
    monkeypatch.setitem(
        sys.modules,
        "tensordict",
        types.SimpleNamespace(TensorDict=lambda values, batch_size: dict(values)),
    )
    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(as_tensor=lambda v, dtype: v, int64=None)
    )
    sb_verl.install(step=True)
    batch = Batch(LENGTHS)
    answer = trainer(v1, config())._balance_batch(batch, {})
    assert answer is batch and put["keys"] == batch.keys
    assert _slots.SLOT_FIELD in batch.fields
    batch.batch[_slots.SLOT_FIELD] = np.asarray(put["fields"][_slots.SLOT_FIELD])
    check_layout(batch, 2, 8, 4096)


def test_without_a_process_group_the_worker_falls_back_once(verl, caplog):
    engine_utils, _, _ = modules()
    sb_verl.install(step=True)
    with caplog.at_level(logging.INFO, logger="seqbalance.integrations.verl"):
        for _ in range(2):
            _, indexes = engine_utils.prepare_micro_batches(mini_batch(LENGTHS[:6]))
            assert indexes == [[i] for i in range(6)]  # the stand-in's own
    said = [r for r in caplog.records if "verl's own rearrange_micro_batches" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO


# -- ranks as threads over a stand-in torch.distributed ------------------------------------------


class Tensor:
    def __init__(self, values):
        self.values = list(values)

    def item(self):
        return self.values[0]


class Distributed:
    """torch.distributed for ``world`` threads: each a rank, collectives met at a barrier."""

    class ReduceOp:
        MIN = "min"
        MAX = "max"

    class group:  # noqa: N801  (torch's spelling)
        WORLD = "world"

    def __init__(self, world):
        self.world = world
        self.local = threading.local()
        self.barrier = threading.Barrier(world, timeout=20)
        self.box = [None] * world

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_backend(self):
        return "gloo"

    def get_rank(self, group=None):
        return 0 if group == "own" else self.local.rank

    def get_world_size(self, group=None):
        return 1 if group == "own" else self.world

    def _exchange(self, value):
        self.box[self.local.rank] = value
        self.barrier.wait()
        values = list(self.box)
        self.barrier.wait()
        return values

    def all_reduce(self, tensor, op, group=None):
        values = self._exchange(tensor.values[0])
        tensor.values[0] = min(values) if op == "min" else max(values)

    def all_gather_object(self, out, obj, group=None):
        out[:] = self._exchange(obj)


def on_ranks(world, run, monkeypatch):
    """``run(rank)`` on ``world`` threads sharing a stand-in torch.distributed; each rank's
    answer or what it raised."""
    dist = Distributed(world)
    torch = types.SimpleNamespace(
        distributed=dist,
        int64="int64",
        tensor=lambda values, dtype=None, device=None: Tensor(values),
        from_numpy=lambda array: array,  # the answers of an installed calculate_workload
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    answers = [None] * world

    def thread(rank):
        dist.local.rank = rank
        try:
            answers[rank] = ("ok", run(rank))
        except Exception as exc:  # noqa: BLE001
            answers[rank] = ("raised", exc)

    threads = [threading.Thread(target=thread, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return answers


def test_ranks_without_slots_plan_jointly_never_above_the_trainer(verl, monkeypatch):
    engine_utils, _, _ = modules()
    sb_verl.install(step=True)
    ranks = [LENGTHS[:12], LENGTHS[12:24]]
    answers = on_ranks(
        2,
        lambda rank: engine_utils.prepare_micro_batches(mini_batch(ranks[rank]), dp_group="world")[
            1
        ],
        monkeypatch,
    )
    plans = [answer[1] for answer in answers]
    assert all(answer[0] == "ok" for answer in answers)
    arrays = [np.asarray(r) for r in ranks]
    expected = _step.plan_fixed(
        arrays,
        4096,
        cost="workload",
        mode=_step.StepMode(),
        trainer=_verl_common._verl_trainer_plan(4096, None)(arrays),
    )
    assert plans == expected.plan  # every rank its part of one joint plan
    assert expected.trainer_seconds is not None and expected.seconds <= expected.trainer_seconds


def test_one_cost_version_for_ranks_of_one_replica(verl, monkeypatch, tmp_path):
    # Two ranks of one replica (the same data, each its own dp group) whose views of the cost
    # file differ (rank 1's was replaced before its call): they form the same micro-batches.
    engine_utils, _, _ = modules()
    views = [CostSource(path=str(path)) for path in two_versions(tmp_path)]
    shared = LENGTHS[:24]
    arrays = [np.asarray(shared)]
    alone = [
        _step.plan_fixed(arrays, 4096, cost=v.current(), mode=_step.StepMode(), trainer=None).plan
        for v in views
    ]
    assert alone[0] != alone[1]  # the test can fail: each view alone plans differently
    view = threading.local()
    monkeypatch.setattr(_verl_step, "_current_cost", lambda: view.source.current())

    def run(rank):
        view.source = views[rank]
        return engine_utils.prepare_micro_batches(mini_batch(shared), dp_group="own")[1]

    sb_verl.install(step=True)
    answers = on_ranks(2, run, monkeypatch)
    assert answers[0] == answers[1] and answers[0][0] == "ok"


def test_an_unmet_constraint_raises_on_every_rank(verl, monkeypatch):
    engine_utils, _, _ = modules()
    sb_verl.install(step=True)
    ranks = [LENGTHS[:6], LENGTHS[6:11] + [5000]]
    answers = on_ranks(
        2,
        lambda rank: engine_utils.prepare_micro_batches(mini_batch(ranks[rank]), dp_group="world"),
        monkeypatch,
    )
    assert [a[0] for a in answers] == ["raised", "raised"]
    assert all(isinstance(a[1], ValueError) for a in answers)


def test_one_info_line_a_step_with_both_predictions_and_no_warning(verl, caplog):
    engine_utils, v0, _ = modules()
    sb_verl.install(step=True)
    batch = Batch(LENGTHS)
    with caplog.at_level(logging.DEBUG, logger="seqbalance"):
        trainer(v0, config())._balance_batch(batch, {})
        chunk = {k: v[:8] for k, v in batch.batch.items()}
        chunk["max_token_len_per_gpu"] = 4096
        engine_utils.prepare_micro_batches(chunk)
    lines = [r for r in caplog.records if "predicted step" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "the trainer's own plan" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
