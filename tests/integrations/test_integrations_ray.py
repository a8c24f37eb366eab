"""The Ray worker path: ``worker_process_setup_hook`` runs ``install()`` in every worker process.

Needs Ray (``pip install ray``); skipped without it. The workers import the on-disk stand-in verl
tree of ``tests/_trainer_standins.py`` (no torch needed) and seqbalance through ``PYTHONPATH``
in the job's runtime env, exactly as a cluster's workers import the real verl and the installed
wheel. Starting Ray takes 10-30 s.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

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
            "env_vars": {"PYTHONPATH": pythonpath},
            "worker_process_setup_hook": "seqbalance.integrations.verl.install",
        },
    )
    try:
        yield standin
    finally:
        ray.shutdown()
        sb_verl.uninstall()
        purge("verl")
        sys.modules.update(real_verl)
        sys.modules.pop("seqbalance_ray_probe", None)


def test_setup_hook_installs_in_every_worker(ray_job_with_hook):
    standin = ray_job_with_hook
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
    assert not sb_verl.is_installed()
