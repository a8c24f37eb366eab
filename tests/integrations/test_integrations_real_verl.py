"""seqbalance.integrations.verl against the real verl: its own code paths, before and after install().

Runs only where verl and what importing ``verl.utils.seqlen_balancing`` needs are installed:

    pip install --no-deps verl
    pip install torch transformers tensordict ray omegaconf
    python -m pytest tests/test_integrations_real_verl.py

The by-name test also imports ``verl.trainer.ppo.ray_trainer``, which needs more of verl's
dependencies (torchdata, hydra-core, codetiming, datasets, peft, ...); it is skipped, naming the
missing module, without them. CI runs the same logic against a stand-in (tests/test_integrations.py).
"""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.integration

for _dependency in ("torch", "transformers", "tensordict", "ray", "omegaconf"):
    pytest.importorskip(_dependency, reason=f"{_dependency} is not installed (verl needs it)")
seqlen_balancing = pytest.importorskip(
    "verl.utils.seqlen_balancing",
    reason="verl is not installed: pip install --no-deps verl (plus torch, transformers, "
    "tensordict, ray, omegaconf)",
)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from seqbalance.integrations import verl as sb_verl  # noqa: E402

REPLACED = (
    "karmarkar_karp",
    "greedy_partition",
    "get_seqlen_balanced_partitions",
    "get_group_balanced_partitions",
)
ORIGINALS = {name: getattr(seqlen_balancing, name) for name in REPLACED}


@pytest.fixture
def installed():
    """install() for the test's duration; verl's originals back afterwards, checked."""
    assert sb_verl.install() == list(REPLACED)
    try:
        yield
    finally:
        sb_verl.uninstall()
        for name, original in ORIGINALS.items():
            assert getattr(seqlen_balancing, name) is original


def _batch(lengths, width):
    """A padded batch like verl's: right-padded attention masks, token ids under them."""
    mask = torch.zeros(len(lengths), width, dtype=torch.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = torch.arange(len(lengths) * width, dtype=torch.int64).reshape(len(lengths), width)
    return TensorDict({"input_ids": ids * mask, "attention_mask": mask}, batch_size=[len(lengths)])


def _micro_batches(batch, max_token_len, balance):
    micro, indexes = seqlen_balancing.rearrange_micro_batches(
        batch, max_token_len=max_token_len, use_dynamic_bsz_balance=balance
    )
    return [mb["input_ids"].tolist() for mb in micro], indexes


SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)


@st.composite
def batches(draw):
    width = draw(st.integers(4, 64))
    lengths = draw(st.lists(st.integers(1, width), min_size=1, max_size=48))
    max_token_len = draw(st.integers(width, width * 8))
    return lengths, width, max_token_len, draw(st.booleans())


@SETTINGS
@given(request=batches())
def test_rearrange_micro_batches_same_as_before(request):
    lengths, width, max_token_len, balance = request
    batch = _batch(lengths, width)
    before = _micro_batches(batch, max_token_len, balance)
    sb_verl.install()
    try:
        # rearrange_micro_batches calls get_seqlen_balanced_partitions through the module.
        assert (
            seqlen_balancing.get_seqlen_balanced_partitions
            is not ORIGINALS["get_seqlen_balanced_partitions"]
        )
        after = _micro_batches(batch, max_token_len, balance)
    finally:
        sb_verl.uninstall()
    assert after == before


@st.composite
def workloads(draw):
    """What verl's trainers pass: an int64 workload tensor, a slice of one, or its .tolist()."""
    seqlens = torch.tensor(draw(st.lists(st.integers(0, 8192), min_size=1, max_size=64)))
    workload = seqlen_balancing.calculate_workload(seqlens.long())
    k = draw(st.integers(1, len(workload)))
    form = draw(st.sampled_from(["tensor", "slice", "list", "numpy"]))
    if form == "slice" and len(workload) > 1:
        start = draw(st.integers(0, len(workload) - 1))
        workload = workload[start:]
        k = min(k, len(workload))
    elif form == "list":
        workload = workload.tolist()
    elif form == "numpy":
        workload = workload.numpy()
    return workload, k, draw(st.booleans())


@SETTINGS
@given(request=workloads())
def test_partitioners_same_as_before(request):
    values, k, equal_size = request
    equal_size = equal_size and len(values) % k == 0
    before = {name: ORIGINALS[name](values, k, equal_size) for name in REPLACED[:3]}
    sb_verl.install()
    try:
        for name in REPLACED[:3]:
            replaced = getattr(seqlen_balancing, name)
            assert replaced(values, k, equal_size) == before[name], name
            assert (
                replaced(seqlen_list=values, k_partitions=k, equal_size=equal_size) == before[name]
            ), name
    finally:
        sb_verl.uninstall()


@st.composite
def groups(draw):
    n_groups = draw(st.integers(1, 16))
    per_group = draw(st.integers(1, 4))
    seqlens = draw(
        st.lists(st.integers(1, 4096), min_size=n_groups * per_group, max_size=n_groups * per_group)
    )
    uids = [f"uid-{g}" for g in range(n_groups) for _ in range(per_group)]
    k = draw(st.sampled_from([k for k in range(1, n_groups + 1) if n_groups % k == 0]))
    return seqlens, uids, k


@SETTINGS
@given(request=groups())
def test_group_balancing_same_as_before(request):
    seqlens, uids, k = request
    before = ORIGINALS["get_group_balanced_partitions"](seqlens, uids, k)
    sb_verl.install()
    try:
        after = seqlen_balancing.get_group_balanced_partitions(
            seqlen_list=seqlens, uid_list=uids, k_partitions=k
        )
        # The trainer passes a numpy object array's list(); an ndarray of ints works the same.
        after_numpy = seqlen_balancing.get_group_balanced_partitions(
            np.asarray(seqlens), np.asarray(uids, dtype=object), k
        )
    finally:
        sb_verl.uninstall()
    assert after == before
    assert after_numpy == before


def test_float32_workload_tensor_same_as_before(installed):
    """verl's SFT trainer balances calculate_workload(torch.Tensor(lengths)): float32."""
    lengths = torch.Tensor([300, 17, 4096, 1024, 512, 77, 2048, 9])
    workload = seqlen_balancing.calculate_workload(lengths)
    assert workload.dtype == torch.float32
    expected = ORIGINALS["get_seqlen_balanced_partitions"](workload, 4, True)
    assert seqlen_balancing.get_seqlen_balanced_partitions(workload, 4, True) == expected


def test_trainer_imported_by_name_is_rebound():
    try:
        trainer = importlib.import_module("verl.trainer.ppo.ray_trainer")
    except ImportError as exc:
        pytest.skip(f"verl.trainer.ppo.ray_trainer needs more of verl's dependencies: {exc}")
    original = ORIGINALS["get_seqlen_balanced_partitions"]
    assert trainer.get_seqlen_balanced_partitions is original
    sb_verl.install()
    try:
        assert trainer.get_seqlen_balanced_partitions is sb_verl.get_seqlen_balanced_partitions
    finally:
        sb_verl.uninstall()
    assert trainer.get_seqlen_balanced_partitions is original


def test_install_is_idempotent_and_uninstall_restores(installed):
    assert sb_verl.install() == list(REPLACED)
    assert seqlen_balancing.karmarkar_karp is sb_verl.karmarkar_karp
