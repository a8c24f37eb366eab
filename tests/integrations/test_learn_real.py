"""``install(learn=path)`` against the real verl 0.9.1 and OpenRLHF 0.11.2: four gloo processes
run the real ``FSDPEngine.forward_backward_batch`` (with verl's planned step, the default under
``learn=``) and OpenRLHF's real ``ActorPPOTrainer.ppo_train`` on a stand-in model whose
micro-batches take the truth model's time, the slowest rank setting each slot
(tests/integrations/_gloo_learn.py). The same logic runs against stand-ins in test_learn.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("tensordict", reason="tensordict is not installed (verl needs it)")
pytest.importorskip(
    "verl.workers.engine.fsdp.transformer_impl",
    reason="verl's FSDP engine cannot be imported: pip install verl (and its dependencies)",
)
pytest.importorskip(
    "openrlhf.trainer.ppo_utils.experience",
    reason="OpenRLHF is not installed: pip install --no-deps openrlhf",
)

from seqbalance import TimeCost  # noqa: E402
from seqbalance.integrations import _verl_step  # noqa: E402
from seqbalance.integrations import verl as sb_verl  # noqa: E402
from seqbalance.integrations._step import StepMode  # noqa: E402
from tests.integrations import _gloo_learn  # noqa: E402

WORLD = 4
MINI_BATCHES = 60


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    """One 4-rank run of both trainers (60 mini-batches each), with a driver installed in this
    process before it, as verl's driver is: the files and every rank's answer."""
    folder = tmp_path_factory.mktemp("learn")
    scenario = {
        "trainers": ["verl", "openrlhf"],
        "path": str(folder / "verl.json"),
        "path_openrlhf": str(folder / "openrlhf.json"),
        "every": 10,
        "mini_batches": MINI_BATCHES,
        "documents": 64,
        "seed": 0,
    }
    sb_verl.install(learn=scenario["path"])
    try:
        before = _verl_step._current_cost()
        answers = _gloo_learn.run(WORLD, scenario, timeout=900)
        yield scenario, answers, before
    finally:
        sb_verl.uninstall()


@pytest.mark.parametrize("trainer", ["verl", "openrlhf"])
def test_every_rank_learns_the_truth_identically(learnt, trainer):
    scenario, answers, _ = learnt
    first = answers[0][trainer]["coefficients"]
    assert first is not None
    for rank in answers:
        answer = rank[trainer]
        assert answer["coefficients"] == first
        assert answer["mini_batches"] == MINI_BATCHES
        # every training micro-batch once; verl's forward-only passes never
        assert answer["observations"] == sum(answer["slots"])
        assert answer["restored_methods"]
        assert set(answer["restored"]) == set(answer["names"])
    # learn= turned the planned step on (no step= given): the driver reads one version a plan
    planned = "rearrange_micro_batches" if trainer == "verl" else "setup_dynamic_batch"
    assert any(name.endswith(planned) for name in answers[0][trainer]["names"])
    errors = _gloo_learn.relative(first)
    assert all(abs(error) <= 0.03 for error in errors.values()), errors
    path = scenario["path"] if trainer == "verl" else scenario["path_openrlhf"]
    with open(path, encoding="utf-8") as file:
        saved = TimeCost.from_dict(json.load(file))
    assert saved.coefficients == first  # the 60th mini-batch's save


def test_the_drivers_next_plan_is_made_from_the_saved_file(learnt):
    scenario, _, before = learnt
    assert before is None  # nothing learnt when the run began: verl's workload
    with open(scenario["path"], encoding="utf-8") as file:
        saved = TimeCost.from_dict(json.load(file))
    lengths = np.array(
        [min(int(v) + 1, 65536) for v in np.random.default_rng(7).lognormal(9, 1, 64)]
    )
    settings = {
        "cap": _gloo_learn.CAP,
        "mode": StepMode("micro_batch"),
        "multiple": None,
        "mini_batch": None,
    }
    planned, cost = _verl_step._plan_batch(lengths, WORLD, settings)
    assert isinstance(cost, TimeCost) and cost.to_dict() == saved.to_dict()
    # the workload verl's own balancing reads is the file's cost too
    workload = sb_verl.calculate_workload(lengths)
    assert np.asarray(workload).tolist() == np.rint(saved(lengths) * 1e9).tolist()
