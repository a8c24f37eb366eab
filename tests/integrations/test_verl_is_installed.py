"""``seqbalance.integrations.verl.is_installed()`` reads what verl's module holds now (issue 23).

``importlib.reload(verl.utils.seqlen_balancing)`` puts verl's originals back; is_installed() used
to stay True because it only remembered that install() had run.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from seqbalance.integrations import verl as sb_verl
from tests.integrations._trainer_standins import StandIn, purge


@pytest.fixture
def standin(tmp_path, monkeypatch):
    purge("verl")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield StandIn(tmp_path, "verl")
    sb_verl.uninstall()
    purge("verl")


def test_a_reload_that_restores_verls_functions_is_seen(standin):
    assert not sb_verl.is_installed()
    sb_verl.install()
    assert sb_verl.is_installed()
    module = importlib.reload(standin.module)
    assert module.get_seqlen_balanced_partitions is not sb_verl.get_seqlen_balanced_partitions
    assert not sb_verl.is_installed()
    # install() patches again, and then it is in effect again
    assert "get_seqlen_balanced_partitions" in sb_verl.install()
    assert module.get_seqlen_balanced_partitions is sb_verl.get_seqlen_balanced_partitions
    assert sb_verl.is_installed()
    sb_verl.uninstall()
    assert not sb_verl.is_installed()


def test_a_fresh_import_after_the_module_was_dropped_is_seen(standin):
    sb_verl.install()
    del sys.modules["verl.utils.seqlen_balancing"]
    assert not sb_verl.is_installed()
    fresh = importlib.import_module("verl.utils.seqlen_balancing")
    assert fresh.karmarkar_karp is not sb_verl.karmarkar_karp
    assert not sb_verl.is_installed()


def test_one_function_put_back_by_hand_is_seen(standin):
    sb_verl.install()
    standin.module.greedy_partition = standin.originals["greedy_partition"]
    assert not sb_verl.is_installed()
