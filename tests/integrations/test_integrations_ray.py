"""The Ray worker path: ``worker_process_setup_hook`` runs ``install()`` in every worker process,
and ``SEQBALANCE_COST`` in the runtime env's ``env_vars`` gives that argument-less call a cost.

Needs Ray (``pip install ray``); skipped without it. The workers import the on-disk stand-in verl
tree of ``tests/_trainer_standins.py`` (no torch needed) and seqbalance through ``PYTHONPATH``
in the job's runtime env, exactly as a cluster's workers import the real verl and the installed
wheel. Starting Ray takes 10-30 s.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

ray = pytest.importorskip("ray", reason="Ray is not installed (optional): pip install ray")

import seqbalance  # noqa: E402
from seqbalance.integrations import verl as sb_verl  # noqa: E402
from tests.integrations._trainer_standins import StandIn, purge  # noqa: E402

# Runs in a Ray worker; a module on the job's PYTHONPATH, so the task is pickled by reference.
PROBE_MODULE = """
import os
import sys


def probe(seqlens, world_size):
    import verl.trainer.ppo.ray_trainer as trainer
    from seqbalance.integrations import verl as sb_verl

    module = sys.modules["verl.utils.seqlen_balancing"]
    return {
        "pid": os.getpid(),
        "installed": sb_verl.is_installed(),
        "module": module.get_seqlen_balanced_partitions is sb_verl.get_seqlen_balanced_partitions,
        "by_name": trainer.get_seqlen_balanced_partitions is sb_verl.get_seqlen_balanced_partitions,
        "answer": trainer.balance_batch(seqlens, world_size),
        # SEQBALANCE_COST in the runtime env: the argument-less hook balances by that cost.
        "workload": trainer.calculate_workload is sb_verl.calculate_workload,
        "weights": [int(value) for value in trainer.calculate_workload(seqlens)],
    }
"""


@pytest.fixture
def ray_job_with_hook(tmp_path, monkeypatch):
    # Where the real verl is installed (the integration job), other tests hold its modules:
    # put them back afterwards instead of leaving a re-import to give them new module objects.
    real_verl = {
        name: module
        for name, module in sys.modules.items()
        if name == "verl" or name.startswith("verl.")
    }
    purge("verl")
    monkeypatch.syspath_prepend(str(tmp_path))
    standin = StandIn(tmp_path, "verl")
    (tmp_path / "seqbalance_ray_probe.py").write_text(PROBE_MODULE)
    batches = [[100], [200, 300], [4000], [1000, 1000, 50], [8000], [30, 60, 90], [2500, 700]]
    cost = seqbalance.TimeCost.fit(
        batches, [1e-3 + sum(2e-5 + 1e-8 * n for n in b) for b in batches]
    )
    (tmp_path / "time-cost.json").write_text(json.dumps(cost.to_dict()))
    importlib.invalidate_caches()
    package_dir = str(Path(seqbalance.__file__).resolve().parent.parent)
    pythonpath = os.pathsep.join(
        filter(None, [str(tmp_path), package_dir, os.environ.get("PYTHONPATH")])
    )
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 1024 * 1024,
        runtime_env={
            "env_vars": {
                "PYTHONPATH": pythonpath,
                "SEQBALANCE_COST": str(tmp_path / "time-cost.json"),
            },
            "worker_process_setup_hook": "seqbalance.integrations.verl.install",
        },
    )
    try:
        yield standin, cost
    finally:
        ray.shutdown()
        sb_verl.uninstall()
        purge("verl")
        sys.modules.update(real_verl)
        sys.modules.pop("seqbalance_ray_probe", None)


def test_setup_hook_installs_in_every_worker(ray_job_with_hook):
    standin, cost = ray_job_with_hook
    probe_module = importlib.import_module("seqbalance_ray_probe")
    probe = ray.remote(probe_module.probe)
    seqlens = [5, 90, 3, 41, 77, 12, 8, 60]
    expected = standin.trainer.balance_batch(seqlens, 4)  # verl's own answer, in the driver
    assert not sb_verl.is_installed()  # the hook runs in the workers, not in the driver
    results = ray.get([probe.remote(seqlens, 4) for _ in range(4)])
    for result in results:
        assert result["installed"], result
        assert result["module"], result
        assert result["by_name"], result  # imported after the hook ran: picked up by itself
        assert result["answer"] == expected
        assert result["workload"], result
        assert result["weights"] == np.rint(cost(seqlens) * 1e9).astype(np.int64).tolist()
    assert not sb_verl.is_installed()
