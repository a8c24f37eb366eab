"""``is_installed()`` of the verl and OpenRLHF integrations reads what the trainer's module holds
now (issue 23).

``importlib.reload(verl.utils.seqlen_balancing)`` puts verl's originals back; is_installed() used
to stay True because it only remembered that install() had run.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.integrations._trainer_standins import INTEGRATIONS, StandIn, purge


@pytest.fixture(params=sorted(INTEGRATIONS))
def standin(request, tmp_path, monkeypatch):
    purge(request.param)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield StandIn(tmp_path, request.param)
    INTEGRATIONS[request.param][0].uninstall()
    purge(request.param)


@pytest.fixture
def integration(standin):
    """The integration under test (verl's or OpenRLHF's), whichever the stand-in is."""
    return standin.integration


def test_a_reload_that_restores_the_trainers_functions_is_seen(standin, integration):
    assert not integration.is_installed()
    integration.install()
    assert integration.is_installed()
    module = importlib.reload(standin.module)
    assert module.get_seqlen_balanced_partitions is not integration.get_seqlen_balanced_partitions
    assert not integration.is_installed()
    # install() patches again, and then it is in effect again
    assert "get_seqlen_balanced_partitions" in integration.install()
    assert module.get_seqlen_balanced_partitions is integration.get_seqlen_balanced_partitions
    assert integration.is_installed()
    integration.uninstall()
    assert not integration.is_installed()


def test_a_fresh_import_after_the_module_was_dropped_is_seen(standin, integration):
    integration.install()
    target = standin.module.__name__
    del sys.modules[target]
    assert not integration.is_installed()
    fresh = importlib.import_module(target)
    assert fresh.karmarkar_karp is not integration.karmarkar_karp
    assert not integration.is_installed()


def test_one_function_put_back_by_hand_is_seen(standin, integration):
    integration.install()
    standin.module.greedy_partition = standin.originals["greedy_partition"]
    assert not integration.is_installed()
