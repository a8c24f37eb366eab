"""install(step=True) against the real OpenRLHF 0.11.2, in two gloo processes on the CPU.

OpenRLHF's real ``balance_experiences`` (called by the name ``openrlhf.trainer.ppo_utils``
imported it under: ``openrlhf.trainer.ppo_trainer`` imports flash_attn, absent here) lays out
each rank's experience; each rank's real ``NaiveReplayBuffer.append`` and
``setup_dynamic_batch`` then form exactly those micro-batches, with OpenRLHF's own five
``dynamic_*`` lists around them; without slots the ranks plan jointly, never above OpenRLHF's
own step; ``step=False`` is OpenRLHF's own method. OpenRLHF's DeepSpeed strategy is a stand-in
(its arguments, the data-parallel group, ``all_reduce``) and its collectives' device the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch", reason="torch is not installed (OpenRLHF needs it)")
pytest.importorskip(
    "openrlhf.trainer.ppo_utils.replay_buffer",
    reason="OpenRLHF is not installed: pip install openrlhf",
)

from seqbalance import simulate_step  # noqa: E402
from seqbalance.integrations import _slots  # noqa: E402
from tests.integrations import _gloo_openrlhf, _gloo_step  # noqa: E402

CAP = 4096
RNG = np.random.default_rng(2)
BATCH = RNG.integers(1, 2048, size=32).tolist()
ALONE = [RNG.integers(1, 2048, size=16).tolist() for _ in range(2)]
COMMON = {"cap": CAP, "train_batch": 16, "rollout_batch": 32}
LOCAL = 8  # a rank's samples of one optimizer step: 16 over 2 ranks


@pytest.fixture(scope="module")
def job():
    scenarios = [
        {"name": "install", "kind": "install", "step": True},
        {"name": "driver", "kind": "driver", "lengths": BATCH, "per_batch": 8, **COMMON},
        {"name": "from_driver", "kind": "worker", "from_driver": True, **COMMON},
        {"name": "alone", "kind": "worker", "lengths": ALONE, **COMMON},
        {"name": "own", "kind": "worker", "lengths": ALONE, "original": True, **COMMON},
        {"name": "step_off", "kind": "install", "step": False},
        {"name": "original_is_back", "kind": "original_is_back"},
        {"name": "off", "kind": "worker", "lengths": ALONE, **COMMON},
    ]
    answers = _gloo_step.run(2, scenarios, timeout=300, target=_gloo_openrlhf.rank_main)
    for answer in answers:
        assert "__crash__" not in answer, answer.get("__crash__")
    return answers


def ok(answers, name):
    values = []
    for answer in answers:
        assert answer[name][0] == "ok", answer[name]
        values.append(answer[name][1])
    return values


def steps(lists):
    """The micro-batches of each optimizer step, as indexes within the step."""
    out, current = [], []
    for indexes, last in zip(lists["indices"], lists["optimizer_step"], strict=True):
        current.append(indexes)
        if last:
            out.append(current)
            current = []
    assert not current
    return out


def test_install_replaces_the_driver_and_the_buffer(job):
    for names in ok(job, "install"):
        assert names[-2:] == ["balance_experiences", "NaiveReplayBuffer.setup_dynamic_batch"]


def test_each_rank_forms_exactly_the_drivers_micro_batches(job):
    ranks = ok(job, "from_driver")
    assert sorted(s for rank in ranks for s in rank["samples"]) == list(range(len(BATCH)))
    for rank in ranks:
        formed = steps(rank)
        lengths = np.asarray(rank["lengths"])
        for i, micro in enumerate(formed):
            window = slice(i * LOCAL, (i + 1) * LOCAL)
            expected = _slots.decode_slots(np.asarray(rank["codes"][window]), lengths[window], CAP)
            assert [[j - i * LOCAL for j in mb] for mb in micro] == expected
            assert all(int(lengths[mb].sum()) <= CAP for mb in micro)
        # OpenRLHF's own bookkeeping around them: loss scales sum to 1 per step.
        assert len(rank["loss_scale"]) == len(rank["indices"]) == len(rank["num_tokens"])
    assert [len(m) for m in steps(ranks[0])] == [len(m) for m in steps(ranks[1])]


def test_ranks_without_slots_plan_jointly_never_above_openrlhfs_own(job):
    ours, own = ok(job, "alone"), ok(job, "own")
    offsets = [0, len(ALONE[0])]
    lengths = np.concatenate([np.asarray(a) for a in ALONE])
    for step in range(2):
        plans = []
        for lists in (ours, own):
            plan = [
                [[j + offsets[r] for j in mb] for mb in steps(lists[r])[step]] for r in range(2)
            ]
            plans.append(plan)
        assert len({len(rank) for rank in plans[0]}) == 1
        for rank in plans[0]:
            assert all(mb and int(lengths[mb].sum()) <= CAP for mb in rank)
        valid_own = all(int(lengths[mb].sum()) <= CAP for rank in plans[1] for mb in rank)
        mine, theirs = (
            simulate_step(p, lengths, cost="tokens", sync="micro_batch").makespan for p in plans
        )
        if valid_own:
            assert mine <= theirs * (1 + 1e-9)
    # The lists OpenRLHF computes around the micro-batches agree with its own method's.
    for r in range(2):
        assert ours[r]["num_tokens"][0] == own[r]["num_tokens"][0]
        assert ours[r]["global_batch"] == own[r]["global_batch"]


def test_step_false_is_openrlhf_exactly(job):
    assert ok(job, "original_is_back") == [True, True]
    off, own = ok(job, "off"), ok(job, "own")
    assert off == own
