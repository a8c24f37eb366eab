"""seqbalance.integrations.slime against a stand-in of slime's ``build_dp_schedule`` (slime is
not on the package registry): the rebinding and its undoing, refusal by name, slime's answer
form and guarantees for any batch, and a step never above slime's own in the model."""

from __future__ import annotations

import importlib
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqbalance import simulate_step
from seqbalance.integrations import slime as sb_slime
from tests.integrations._trainer_standins import fresh_root, purge

# slime's signature and answer form; its algorithm in plain Python: each step's samples dealt
# to the ranks in turn, each rank first-fit under the cap, every rank then split (its largest
# multi-sample micro-batch in halves) up to the largest count.
SCHEDULE = """
def build_dp_schedule(args, train_parallel_config, total_lengths, *, global_batch_size):
    dp = train_parallel_config["dp_size"]
    cap = args.max_tokens_per_gpu * train_parallel_config["cp_size"]
    partitions = [[] for _ in range(dp)]
    micro_batch_indices = [[] for _ in range(dp)]
    counts = []
    for start in range(0, len(total_lengths) // global_batch_size * global_batch_size,
                       global_batch_size):
        step = total_lengths[start:start + global_batch_size]
        ranks = [list(range(r, global_batch_size, dp)) for r in range(dp)]
        bins_of = []
        for rank in ranks:
            bins, loads = [], []
            for position, index in enumerate(rank):
                for b, load in enumerate(loads):
                    if load + step[index] <= cap:
                        bins[b].append(position)
                        loads[b] += step[index]
                        break
                else:
                    bins.append([position])
                    loads.append(step[index])
            bins_of.append(bins)
        count = max(len(b) for b in bins_of)
        for bins in bins_of:
            while len(bins) < count:
                widest = max(range(len(bins)), key=lambda b: len(bins[b]))
                half = len(bins[widest]) // 2
                bins.append(bins[widest][half:])
                bins[widest] = bins[widest][:half]
        counts.append(count)
        for r, bins in enumerate(bins_of):
            for b in bins:
                first = len(partitions[r])
                partitions[r].extend(start + ranks[r][p] for p in b)
                micro_batch_indices[r].append(list(range(first, first + len(b))))
    return partitions, micro_batch_indices, counts
"""

ROLLOUT = "from slime.utils.dp_schedule import build_dp_schedule\n"


@pytest.fixture
def slime(tmp_path, monkeypatch):
    fresh_root(tmp_path, monkeypatch, "slime")
    for path, text in {
        "slime/__init__.py": "",
        "slime/utils/__init__.py": "",
        "slime/utils/dp_schedule.py": SCHEDULE,
        "slime/ray/__init__.py": "",
        "slime/ray/rollout.py": ROLLOUT,
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    importlib.invalidate_caches()
    schedule = importlib.import_module("slime.utils.dp_schedule")
    rollout = importlib.import_module("slime.ray.rollout")
    yield schedule, rollout
    sb_slime.uninstall()
    purge("slime")


def arguments(cap, stages):
    return types.SimpleNamespace(
        use_dynamic_batch_size=True, max_tokens_per_gpu=cap, pipeline_model_parallel_size=stages
    )


CONFIG = {"dp_size": 2, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}


def test_install_rebinds_by_name_and_uninstall_restores(slime):
    schedule, rollout = slime
    original = schedule.build_dp_schedule
    assert sb_slime.install(step=True) == [
        "slime.utils.dp_schedule.build_dp_schedule",
        "slime.ray.rollout.build_dp_schedule",
    ]
    assert rollout.build_dp_schedule is sb_slime.build_dp_schedule and sb_slime.is_installed()
    sb_slime.uninstall()
    assert rollout.build_dp_schedule is original and not sb_slime.is_installed()
    assert sb_slime.install(step=False) == []
    assert rollout.build_dp_schedule is original


def test_other_parameters_are_refused_by_name(slime):
    schedule, _ = slime
    schedule.build_dp_schedule = lambda args, total_lengths: None
    with pytest.raises(sb_slime.IntegrationError, match="build_dp_schedule"):
        sb_slime.install(step=True)


def step_seconds(answer, lengths, counts, stages):
    partitions, micro_batch_indices, _ = answer
    total, position = 0.0, [0, 0]
    for count in counts:
        plan = []
        for r in range(2):
            rank = micro_batch_indices[r][position[r] : position[r] + count]
            position[r] += count
            plan.append([[partitions[r][i] for i in mb] for mb in rank])
        total += simulate_step(plan, lengths, cost="tokens", pipeline_stages=stages).makespan
    return total


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 3).flatmap(
        lambda steps: st.lists(st.integers(1, 500), min_size=8 * steps, max_size=8 * steps)
    ),
    st.sampled_from([1, 4]),
)
def test_slimes_form_and_guarantees_never_above_slimes_own(slime, lengths, stages):
    _, rollout = slime
    args = arguments(1000, stages)
    own = rollout.build_dp_schedule(args, CONFIG, lengths, global_batch_size=8)
    sb_slime.install(step=True)
    try:
        answer = rollout.build_dp_schedule(args, CONFIG, lengths, global_batch_size=8)
    finally:
        sb_slime.uninstall()
    partitions, micro_batch_indices, counts = answer
    assert sorted(i for p in partitions for i in p) == list(range(len(lengths)))
    assert len(counts) == len(lengths) // 8 and counts == [c for c in counts if c >= 1]
    for r in range(2):
        assert len(partitions[r]) == len(lengths) // 2  # equal counts per rank
        assert [i for mb in micro_batch_indices[r] for i in mb] == list(range(len(partitions[r])))
        assert len(micro_batch_indices[r]) == sum(counts)
        for mb in micro_batch_indices[r]:
            assert mb and sum(lengths[partitions[r][i]] for i in mb) <= 1000
    values = np.asarray(lengths)
    assert step_seconds(answer, values, counts, stages) <= step_seconds(
        own, values, own[2], stages
    ) * (1 + 1e-9)
