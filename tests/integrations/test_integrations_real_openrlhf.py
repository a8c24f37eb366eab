"""seqbalance.integrations.openrlhf against the real OpenRLHF: its own module, before and after
install(), and its replay buffer's by-name import.

Runs where OpenRLHF's seqlen module imports (the integration job installs ``openrlhf`` with
``--no-deps`` and what importing it needs, see .ci/requirements-integration*.txt); skipped
otherwise. The same logic runs against a stand-in in tests/integrations/test_integrations.py.
"""

from __future__ import annotations

import importlib
import logging

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch", reason="torch is not installed (OpenRLHF needs it)")
seqlen_balancing = pytest.importorskip(
    "openrlhf.utils.seqlen_balancing",
    reason="OpenRLHF is not installed: pip install --no-deps openrlhf (plus torch, pylatexenc)",
)
replay_buffer = pytest.importorskip("openrlhf.trainer.ppo_utils.replay_buffer")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from seqbalance.integrations import openrlhf as sb_openrlhf  # noqa: E402

REPLACED = ["karmarkar_karp", "greedy_partition", "get_seqlen_balanced_partitions"]
ORIGINALS = {name: getattr(seqlen_balancing, name) for name in REPLACED}


@pytest.fixture
def installed():
    assert sb_openrlhf.install() == REPLACED
    try:
        yield
    finally:
        assert sb_openrlhf.uninstall() == REPLACED
        for name, original in ORIGINALS.items():
            assert getattr(seqlen_balancing, name) is original


def test_install_replaces_the_module_and_the_replay_buffers_by_name_import(installed, caplog):
    for name in REPLACED:
        assert getattr(seqlen_balancing, name) is not ORIGINALS[name]
    # replay_buffer did `from openrlhf.utils.seqlen_balancing import get_seqlen_balanced_partitions`
    # before install(): its own binding is the replacement too.
    assert (
        replay_buffer.get_seqlen_balanced_partitions
        is seqlen_balancing.get_seqlen_balanced_partitions
    )
    assert sb_openrlhf.is_installed()
    with caplog.at_level(logging.INFO):
        assert sb_openrlhf.install() == REPLACED  # idempotent


def test_uninstall_restores_the_by_name_import_too():
    sb_openrlhf.install()
    sb_openrlhf.uninstall()
    assert (
        replay_buffer.get_seqlen_balanced_partitions is ORIGINALS["get_seqlen_balanced_partitions"]
    )
    assert not sb_openrlhf.is_installed()


lengths_and_k = st.integers(1, 8).flatmap(
    lambda k: st.tuples(
        st.lists(st.integers(0, 10_000), min_size=k, max_size=48).filter(lambda v: len(v) % k == 0),
        st.just(k),
    )
)


@settings(max_examples=80, deadline=None)
@given(lengths_and_k, st.booleans())
def test_answers_are_openrlhfs_own(case, equal_size):
    values, k = case
    expected = {name: ORIGINALS[name](list(values), k, equal_size) for name in REPLACED}
    sb_openrlhf.install()
    try:
        for name in REPLACED:
            assert getattr(seqlen_balancing, name)(list(values), k, equal_size) == expected[name]
    finally:
        sb_openrlhf.uninstall()


def test_refine_lightens_the_heaviest_rank_on_a_grpo_batch():
    lengths = [((i * 7919) % 4000) + 16 for i in range(256)]
    plain = ORIGINALS["get_seqlen_balanced_partitions"](lengths, 8, True)
    sb_openrlhf.install(refine=True)
    try:
        refined = seqlen_balancing.get_seqlen_balanced_partitions(lengths, 8, True)
    finally:
        sb_openrlhf.uninstall()
    heaviest = max(sum(lengths[i] for i in part) for part in plain)
    assert max(sum(lengths[i] for i in part) for part in refined) <= heaviest
    assert sorted(map(len, refined)) == [32] * 8


def test_a_reload_puts_openrlhfs_originals_back_and_is_installed_says_so():
    sb_openrlhf.install()
    try:
        importlib.reload(seqlen_balancing)
        assert not sb_openrlhf.is_installed()
        # The reload defined OpenRLHF's functions afresh: the module holds no replacement.
        for name in REPLACED:
            assert getattr(seqlen_balancing, name).__module__ == seqlen_balancing.__name__
    finally:
        sb_openrlhf.uninstall()
        # Leave the module as the other tests found it.
        for name, original in ORIGINALS.items():
            setattr(seqlen_balancing, name, original)
