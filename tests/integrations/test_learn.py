"""``install(learn=path)`` on stand-ins of verl's FSDP engine loop and OpenRLHF's actor loop
(tests/integrations/_learn_standin.py): one process per rank, a fake data-parallel collective,
a truth model of micro-batch times with the slowest rank setting each slot. The same logic runs
against the real trainers in test_learn_real.py (the integration job)."""

from __future__ import annotations

import importlib
import json
import logging
import threading

import numpy as np
import pytest

from seqbalance import TimeCost
from seqbalance.integrations import _learn, _learn_patches, _learn_source
from seqbalance.integrations import openrlhf as sb_openrlhf
from seqbalance.integrations import verl as sb_verl
from tests.integrations import _learn_standin as standin
from tests.integrations._trainer_standins import purge

WORLD = 4


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """The stand-in trainers on sys.path (this process and the ranks'); purged afterwards."""
    root = tmp_path / "trainers"
    root.mkdir()
    standin.write_packages(root)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv(_learn.ENVIRONMENT, raising=False)
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sb_verl.uninstall()
        sb_openrlhf.uninstall()
        purge("verl")
        purge("openrlhf")


def _scenario(root, path, trainer, **extra):
    scenario = {
        "root": str(root),
        "path": str(path),
        "trainer": trainer,
        "every": 10,
        "mini_batches": 60,
        "documents": 64,
        "seed": 0,
    }
    scenario.update(extra)
    return scenario


def _within(coefficients, share):
    return {
        name: abs(coefficients[name] / value - 1) <= share for name, value in standin.TRUTH.items()
    }


@pytest.mark.parametrize("trainer", ["verl", "openrlhf"])
def test_every_rank_learns_the_truth_and_the_driver_plans_from_the_saved_file(
    packages, tmp_path, trainer
):
    path = tmp_path / "learnt.json"
    # The driver: its own process, installed before the run, reading what rank 0 saves.
    integration = sb_verl if trainer == "verl" else sb_openrlhf
    if trainer == "verl":
        driver = importlib.import_module("verl.trainer.ppo.ray_trainer")
    integration.install(learn=str(path), step=False)  # the stand-ins have no driver to plan
    lengths = [512, 4096, 30000, 65536]
    values = np.array(lengths)
    if trainer == "verl":  # nothing learnt yet: verl's own workload
        assert driver.calculate_workload(values).tolist() == (24576 * values + values**2).tolist()
    else:
        assert sb_openrlhf._CAPPED.weigh(lengths).tolist() == lengths

    answers = standin.run(WORLD, _scenario(packages, path, trainer))

    first = answers[0]["coefficients"]
    assert first is not None
    for answer in answers:
        assert answer["coefficients"] == first  # identical on every rank, to the bit
        assert answer["mini_batches"] == 60
        # every training micro-batch is an observation; forward-only passes and the
        # critic's are not
        assert answer["observations"] == sum(answer["slots"])
    assert all(_within(first, 0.03).values()), (first, standin.TRUTH)
    saved = TimeCost.from_dict(json.loads(path.read_text()))
    assert saved.coefficients == first  # the 60th mini-batch's save
    # the driver's next plan is made from the saved file
    if trainer == "verl":
        assert driver.calculate_workload(values).tolist() == np.rint(saved(values) * 1e9).tolist()
    else:
        assert sb_openrlhf._CAPPED.weigh(lengths).tolist() == saved(lengths).tolist()


def test_the_fit_starts_from_nothing_once_the_slots_determine_it(packages, tmp_path):
    path = tmp_path / "learnt.json"
    answers = standin.run(WORLD, _scenario(packages, path, "verl", mini_batches=12, every=4))
    fitted = {answer["first_fitted"] for answer in answers}
    assert len(fitted) == 1
    first = fitted.pop()
    # the first mini-batch's 4 or 5 slots are fewer than a fit takes; the second's are enough
    assert first is not None and sum(answers[0]["slots"][:first]) < _learn.FIRST_FIT
    # the first saves came after the fit; the file is the last one's
    assert (
        TimeCost.from_dict(json.loads(path.read_text())).coefficients == answers[0]["coefficients"]
    )


def test_a_clock_that_fails_on_one_rank_drops_that_mini_batch_on_every_rank(packages, tmp_path):
    path = tmp_path / "learnt.json"
    scenario = _scenario(packages, path, "verl", mini_batches=20, fail={"1": (12, 1)})
    answers = standin.run(WORLD, scenario)
    for answer in answers:
        assert answer["observations"] == sum(answer["slots"]) - answer["slots"][12]
        assert answer["coefficients"] == answers[0]["coefficients"]


def test_uninstall_restores_every_method(packages, tmp_path):
    fsdp = importlib.import_module("verl.workers.engine.fsdp.transformer_impl")
    megatron = importlib.import_module("verl.workers.engine.megatron.transformer_impl")
    actor = importlib.import_module("openrlhf.trainer.ray.ppo_actor")
    owners = {
        (fsdp.FSDPEngine, "forward_backward_batch"),
        (fsdp.FSDPEngine, "_gradient_sync_context"),
        (fsdp, "prepare_micro_batches"),
        (megatron.MegatronEngine, "forward_backward_batch"),
        (actor.ActorPPOTrainer, "training_step"),
        (actor.ActorPPOTrainer, "ppo_train"),
        (actor.DeepspeedStrategy, "optimizer_step"),
    }
    originals = {key: _learn_patches._current(*key) for key in owners}
    names = sb_verl.install(learn=str(tmp_path / "a.json"), step=False)
    names += sb_openrlhf.install(learn=str(tmp_path / "b.json"), step=False)
    for key in owners:
        assert _learn_patches._current(*key) is not originals[key]
        assert f"{_learn_patches._name(key[0])}.{key[1]}" in names
    assert sb_verl.install(learn=str(tmp_path / "a.json"), step=False) == names[: len(names) - 6]
    sb_verl.uninstall()
    sb_openrlhf.uninstall()
    for key in owners:
        assert _learn_patches._current(*key) is originals[key]
    # install without learn= after one with it puts the methods back too
    sb_verl.install(learn=str(tmp_path / "a.json"), step=False)
    sb_verl.install(step=False)
    assert (
        fsdp.FSDPEngine.__dict__["forward_backward_batch"]
        is originals[(fsdp.FSDPEngine, "forward_backward_batch")]
    )


def test_megatron_is_refused_by_name_once_and_nothing_is_learnt(packages, tmp_path, caplog):
    sb_verl.install(learn=str(tmp_path / "a.json"), step=False)
    megatron = importlib.import_module("verl.workers.engine.megatron.transformer_impl")
    engine = megatron.MegatronEngine()
    engine.run = lambda data, forward_only: "ran"
    with caplog.at_level(logging.WARNING, logger="seqbalance.integrations"):
        assert engine.forward_backward_batch({}, None) == "ran"
        assert engine.forward_backward_batch({}, None, forward_only=False) == "ran"
    said = [r for r in caplog.records if "Megatron engine (MegatronEngine)" in r.getMessage()]
    assert len(said) == 1
    assert _learn_patches.VERL.learner.mini_batches == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"learn_every": 0}, ValueError, "learn_every = 0"),
        ({"learn_every": True}, TypeError, "learn_every must be an int"),
        ({"learn_every": "10"}, TypeError, "learn_every must be an int"),
        ({"learn": 5}, TypeError, "learn must be a path"),
        ({"learn": ""}, ValueError, "learn = ''"),
        ({"learn": "/no/such/folder/cost.json"}, ValueError, "does not exist"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_anything_is_patched(
    packages, kwargs, error, words
):
    kwargs = {"learn": "cost.json", **kwargs}
    fsdp = importlib.import_module("verl.workers.engine.fsdp.transformer_impl")
    original = fsdp.FSDPEngine.__dict__["forward_backward_batch"]
    with pytest.raises(error, match=words):
        sb_verl.install(step=False, **kwargs)
    with pytest.raises(error, match=words):
        sb_openrlhf.install(step=False, **kwargs)
    assert fsdp.FSDPEngine.__dict__["forward_backward_batch"] is original
    assert not sb_verl.is_installed()


def test_the_environment_variable_names_the_path(packages, tmp_path, monkeypatch):
    monkeypatch.setenv(_learn.ENVIRONMENT, str(tmp_path / "env.json"))
    names = sb_verl.install(step=False)
    assert any(name.endswith("FSDPEngine.forward_backward_batch") for name in names)
    assert _learn_patches.VERL.learner.path == str(tmp_path / "env.json")
    monkeypatch.setenv(_learn.ENVIRONMENT, str(tmp_path / "missing" / "env.json"))
    with pytest.raises(ValueError, match=_learn.ENVIRONMENT):
        sb_openrlhf.install(step=False)


# -- the learner itself, in one process ------------------------------------------------------


def _settings(path, every=1, start=None, model=None):
    return _learn.LearnSettings(str(path), every, start, model)


def _feed(learner, clock, batches, truth=standin.truth_seconds):
    for lengths in batches:
        with learner.block(lengths):
            clock.now += truth(lengths)


def _varied(rng, count):
    return [
        [int(v) for v in rng.integers(100, 20000, size=int(rng.integers(1, 5)))]
        for _ in range(count)
    ]


def test_a_failed_write_is_logged_and_retried_at_the_next_interval(tmp_path, caplog):
    folder = tmp_path / "out"
    folder.mkdir()
    clock = standin.FakeClock()
    learner = _learn.Learner(_settings(folder / "cost.json", every=2), "verl", clock=clock.read)
    rng = np.random.default_rng(0)
    with caplog.at_level(logging.INFO, logger="seqbalance.integrations"):
        for _ in range(2):
            _feed(learner, clock, _varied(rng, 5))
            learner.end_mini_batch()
        before = (folder / "cost.json").read_text()
        (folder / "cost.json").unlink()
        folder.rmdir()  # the folder is gone (an unmounted file system): the next save fails
        for _ in range(2):
            _feed(learner, clock, _varied(rng, 5))
            learner.end_mini_batch()
        failed = [r for r in caplog.records if "saving the learnt cost" in r.getMessage()]
        assert len(failed) == 1 and failed[0].levelno == logging.WARNING
        assert "retried in 2 mini-batches" in failed[0].getMessage()
        folder.mkdir()
        _feed(learner, clock, _varied(rng, 5))
        learner.end_mini_batch()
        assert not (folder / "cost.json").exists()  # not an interval: no retry before it
        _feed(learner, clock, _varied(rng, 5))
        learner.end_mini_batch()
        assert (folder / "cost.json").read_text() != before
    saved = TimeCost.from_dict(json.loads((folder / "cost.json").read_text()))
    assert saved.observations == learner.cost.observations == 30


def test_one_info_line_per_save_and_a_warning_when_the_fit_turns_poor(tmp_path, caplog):
    clock = standin.FakeClock()
    learner = _learn.Learner(_settings(tmp_path / "cost.json", every=3), "verl", clock=clock.read)
    rng = np.random.default_rng(1)
    with caplog.at_level(logging.INFO, logger="seqbalance.integrations"):
        for _ in range(12):
            _feed(learner, clock, _varied(rng, 4))
            learner.end_mini_batch(own_plan=lambda ranks: [[list(range(len(r)))] for r in ranks])
        saves = [r for r in caplog.records if "saved verl's cost" in r.getMessage()]
        assert len(saves) == 4 and all(r.levelno == logging.INFO for r in saves)
        text = saves[-1].getMessage()
        assert "slots learnt from" in text and "recent median error" in text
        assert "predicted step" in text and "the trainer's own plan of it" in text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        # the run's times stop matching: three times the truth, at random
        noisy = np.random.default_rng(2)
        for _ in range(9):
            _feed(
                learner,
                clock,
                _varied(rng, 4),
                lambda lengths: standin.truth_seconds(lengths) * float(noisy.uniform(0.3, 3)),
            )
            learner.end_mini_batch()
    poor = [r for r in caplog.records if "poor fit" in r.getMessage()]
    assert len(poor) == 1 and poor[0].levelno == logging.WARNING  # said when it turns poor


def test_a_starting_cost_is_updated_not_fitted(tmp_path):
    rng = np.random.default_rng(3)
    batches = _varied(rng, 8)
    start = TimeCost.fit(batches, [standin.truth_seconds(b) for b in batches])
    clock = standin.FakeClock()
    learner = _learn.Learner(_settings(tmp_path / "c.json", start=start), "verl", clock=clock.read)
    _feed(learner, clock, _varied(rng, 3))
    learner.end_mini_batch()
    assert learner.cost.observations == 8 + 3


def _threads(count, body):
    """``body(rank, gather)`` on ``count`` threads sharing a barrier all-gather."""
    barrier = threading.Barrier(count)
    box: dict[int, object] = {}
    answers: dict[int, object] = {}

    def gather(record, group=None):
        rank = threading.current_thread().rank
        box[rank] = record
        barrier.wait()
        records = [box[r] for r in range(count)]
        barrier.wait()
        return records

    def main(rank):
        threading.current_thread().rank = rank
        answers[rank] = body(rank, gather)

    threads = [threading.Thread(target=main, args=(r,)) for r in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return [answers[r] for r in range(count)]


def test_a_block_that_raises_on_one_rank_drops_the_step_on_every_rank(tmp_path):
    rng = np.random.default_rng(4)
    steps = [[_varied(np.random.default_rng([4, s, r]), 3) for r in range(2)] for s in range(4)]
    batches = _varied(rng, 8)
    start = TimeCost.fit(batches, [standin.truth_seconds(b) for b in batches])

    def body(rank, gather):
        clock = standin.FakeClock()
        learner = _learn.Learner(
            _settings(tmp_path / "c.json", start=start), "verl", clock=clock.read, gather=gather
        )
        for step, ranks in enumerate(steps):
            for lengths in ranks[rank]:
                try:
                    with learner.block(lengths):
                        clock.now += standin.truth_seconds(lengths)
                        if step == 2 and rank == 1:
                            raise RuntimeError("the micro-batch failed")
                except RuntimeError:
                    pass
            learner.end_mini_batch()
        return learner.cost.observations, learner.cost.coefficients

    answers = _threads(2, body)
    assert answers[0] == answers[1]
    assert answers[0][0] == 8 + 3 * 3  # step 2's three slots dropped on both ranks


def test_the_learnt_source_ignores_a_file_from_before_the_run(tmp_path):
    path = tmp_path / "old.json"
    batches = [[100], [200], [300], [400], [100, 100], [500, 50]]
    old = TimeCost.fit(batches, [1e-3 + 1e-5 * sum(b) for b in batches])
    path.write_text(json.dumps(old.to_dict()))
    source = _learn.LearntSource(str(path), None)
    assert source.current() is None
    path.write_text(json.dumps(old.to_dict()) + " ")  # replaced by this run's first save
    assert source.current().coefficients == old.coefficients


def test_alike_micro_batches_that_never_determine_a_fit_are_retried_ever_more_rarely(
    tmp_path, monkeypatch
):
    attempts = []
    original = TimeCost.fit_synchronized.__func__

    def counting(cls, units, seconds, **kwargs):
        attempts.append(len(units))
        return original(cls, units, seconds, **kwargs)

    monkeypatch.setattr(TimeCost, "fit_synchronized", classmethod(counting))
    clock = standin.FakeClock()
    learner = _learn.Learner(_settings(tmp_path / "c.json", every=10**6), "verl", clock=clock.read)
    for _ in range(400):  # four alike micro-batches a mini-batch: nothing tells c_mb from c_doc
        _feed(learner, clock, [[1000], [1000], [1000], [1000]])
        learner.end_mini_batch()
    assert learner.cost is None
    # every mini-batch while warming up (6..32 slots), then as the slots kept double
    assert attempts[:7] == [8, 12, 16, 20, 24, 28, 32]
    assert attempts[7:] == [64, 128, 256, 512, 1024]


def test_a_model_cost_given_with_learn_is_the_model_the_fit_from_nothing_uses(tmp_path):
    from seqbalance import ModelCost
    from seqbalance.integrations._costs import CostSource

    model = ModelCost(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=1024,
        vocab_size=1000,
    )
    settings = _learn_source.learn_settings(str(tmp_path / "c.json"), 1, CostSource(model))
    assert settings.start is None and settings.model is model
    clock = standin.FakeClock()
    learner = _learn.Learner(settings, "verl", clock=clock.read)
    rng = np.random.default_rng(5)
    for _ in range(10):
        _feed(learner, clock, _varied(rng, 4))
        learner.end_mini_batch()
    assert learner.cost.model is not None
    assert set(learner.cost.coefficients) == {"micro_batch", "document", "linear", "attention"}
