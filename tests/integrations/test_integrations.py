"""install()/uninstall() of seqbalance.integrations.verl and .openrlhf against stand-in packages.

Each test writes a small package tree (``verl/`` or ``openrlhf/``) into a temporary directory and
imports it for real: the partitioner module with the upstream function names and signatures
(bodies written out in plain Python with upstream's behaviour and arithmetic), a helper that calls the partitioner through the module (like ``rearrange_micro_batches``)
and trainer modules that import it by name (like ``verl/trainer/ppo/ray_trainer.py``). No torch
needed. ``tests/test_integrations_real_verl.py`` runs the same against the real verl when it is
installed.
"""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqbalance
from seqbalance.integrations._patching import IntegrationError
from tests.integrations._trainer_standins import INTEGRATIONS, PARTITIONERS, StandIn, purge


def _factory(package, tmp_path, monkeypatch):
    purge(package)
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(replace=None):
        purge(package)
        return StandIn(tmp_path, package, replace)

    yield make
    INTEGRATIONS[package][0].uninstall()
    purge(package)


@pytest.fixture(params=sorted(INTEGRATIONS))
def standin_factory(request, tmp_path, monkeypatch):
    yield from _factory(request.param, tmp_path, monkeypatch)


@pytest.fixture
def standin(standin_factory):
    return standin_factory()


@pytest.fixture
def verl_factory(tmp_path, monkeypatch):
    """verl only: get_group_balanced_partitions has no OpenRLHF counterpart."""
    yield from _factory("verl", tmp_path, monkeypatch)


@pytest.fixture
def verl_standin(verl_factory):
    return verl_factory()


# --- install / uninstall ---------------------------------------------------------------------


def test_refine_by_position_still_installs_and_warns_once_at_the_callers_line(standin):
    # install(refine) becomes keyword-only in 1.0 (api-spec): positional use warns, the same
    # install follows; the keyword spelling says nothing.
    with pytest.warns(DeprecationWarning) as caught:
        names = standin.integration.install(True)
    assert [str(w.message) for w in caught] == [
        "passing refine= by position is deprecated since 0.3; it is keyword-only from 1.0: "
        "pass refine="
    ]
    assert caught[0].filename == __file__
    lengths = [int(x) for x in np.random.default_rng(2).integers(16, 4096, 64)]
    refined = standin.module.get_seqlen_balanced_partitions(lengths, 4, False)
    assert refined == seqbalance.get_seqlen_balanced_partitions(lengths, 4, False, refine=True)
    standin.integration.uninstall()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert standin.integration.install(refine=True) == names


def test_install_replaces_in_module_and_by_name_imports(standin):
    names = standin.integration.install()
    expected = list(PARTITIONERS) + (
        ["get_group_balanced_partitions"] if standin.package == "verl" else []
    )
    assert names == expected
    assert standin.integration.is_installed()
    for name in expected:
        replacement = getattr(standin.module, name)
        assert replacement is not standin.originals[name]
        assert replacement.__module__ == standin.integration.__name__
    # The trainer imported the partitioner by name before install(): rebound, alias included.
    assert (
        standin.trainer.get_seqlen_balanced_partitions
        is standin.module.get_seqlen_balanced_partitions
    )
    assert standin.trainer.kk_alias is standin.module.karmarkar_karp
    # seqbalance's public function, imported on purpose, and modules outside the package: untouched.
    assert standin.trainer.chosen_on_purpose is seqbalance.get_seqlen_balanced_partitions
    assert (
        standin.outside.get_seqlen_balanced_partitions
        is standin.originals["get_seqlen_balanced_partitions"]
    )


def test_install_is_idempotent(standin):
    first = standin.integration.install()
    installed = {name: getattr(standin.module, name) for name in first}
    second = standin.integration.install()
    assert second == first
    for name, function in installed.items():
        assert getattr(standin.module, name) is function  # not wrapped twice
    assert standin.integration.uninstall() == first
    for name in first:
        assert getattr(standin.module, name) is standin.originals[name]


def test_uninstall_restores_every_original(standin):
    standin.integration.install()
    late = importlib.import_module(f"{standin.package}.trainer.late")
    # Imported after install(): picked up the replacement by itself...
    assert late.get_seqlen_balanced_partitions is standin.module.get_seqlen_balanced_partitions
    restored = standin.integration.uninstall()
    assert set(restored) == set(standin.originals)
    assert not standin.integration.is_installed()
    for name, original in standin.originals.items():
        assert getattr(standin.module, name) is original
    original_gsbp = standin.originals["get_seqlen_balanced_partitions"]
    assert standin.trainer.get_seqlen_balanced_partitions is original_gsbp
    assert standin.trainer.kk_alias is standin.originals["karmarkar_karp"]
    # ...and uninstall() takes it back too.
    assert late.get_seqlen_balanced_partitions is original_gsbp
    assert standin.trainer.chosen_on_purpose is seqbalance.get_seqlen_balanced_partitions
    assert standin.integration.uninstall() == []  # idempotent


def test_uninstall_without_install_changes_nothing(standin):
    assert standin.integration.uninstall() == []
    for name, original in standin.originals.items():
        assert getattr(standin.module, name) is original


def test_install_after_uninstall_patches_again(standin):
    first = standin.integration.install()
    standin.integration.uninstall()
    assert standin.integration.install() == first
    assert (
        standin.trainer.get_seqlen_balanced_partitions
        is standin.module.get_seqlen_balanced_partitions
    )
    assert standin.module.karmarkar_karp is not standin.originals["karmarkar_karp"]


def test_install_logs_one_info_line(standin, caplog):
    with caplog.at_level(logging.INFO, logger=standin.integration.__name__):
        standin.integration.install()
        standin.integration.install()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 1, lines
    assert "replaced karmarkar_karp, greedy_partition, get_seqlen_balanced_partitions" in lines[0]
    assert f"{standin.package}.utils.seqlen_balancing" in lines[0]
    assert f"{standin.trainer_name}.get_seqlen_balanced_partitions" in lines[0]


def test_import_pulls_in_neither_trainer_nor_torch():
    code = (
        "import sys, seqbalance.integrations.verl, seqbalance.integrations.openrlhf\n"
        "loaded = [m for m in ('verl', 'openrlhf', 'torch', 'ray') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_child_env())


def _child_env():
    import os

    env = dict(os.environ)
    package_dir = str(Path(seqbalance.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_dir, env.get("PYTHONPATH")]))
    return env


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("package", sorted(INTEGRATIONS))
def test_missing_trainer_raises_import_error_saying_what_to_install(package, monkeypatch):
    integration = INTEGRATIONS[package][0]
    purge(package)
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    with pytest.raises(ImportError, match=f"pip install {package}"):
        integration.install()
    assert not integration.is_installed()


def test_missing_dependency_is_named(standin_factory, tmp_path):
    standin = standin_factory()
    purge(standin.package)
    path = tmp_path / standin.package / "utils" / "seqlen_balancing.py"
    path.write_text("import seqbalance_test_missing_dependency\n" + path.read_text())
    importlib.invalidate_caches()
    with pytest.raises(ImportError, match="seqbalance_test_missing_dependency") as info:
        standin.integration.install()
    assert f"could not import {standin.package}.utils.seqlen_balancing" in str(info.value)


CHANGED_SIGNATURES = {
    "renamed parameter": (
        "karmarkar_karp",
        "def karmarkar_karp(values, k_partitions, equal_size):\n    return []\n",
    ),
    "new parameter with a default": (
        "get_seqlen_balanced_partitions",
        "def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size, refine=False):\n"
        "    return []\n",
    ),
    "new default": (
        "greedy_partition",
        "def greedy_partition(seqlen_list, k_partitions, equal_size=False):\n    return []\n",
    ),
    "keyword-only parameter": (
        "karmarkar_karp",
        "def karmarkar_karp(seqlen_list, k_partitions, *, equal_size):\n    return []\n",
    ),
    "parameters reordered": (
        "get_seqlen_balanced_partitions",
        "def get_seqlen_balanced_partitions(seqlen_list, equal_size, k_partitions):\n    return []\n",
    ),
    "not a function": ("greedy_partition", "greedy_partition = 42\n"),
    "missing": ("karmarkar_karp", None),
}


@pytest.mark.parametrize("case", sorted(CHANGED_SIGNATURES))
def test_changed_signature_is_refused_and_nothing_is_patched(standin_factory, case):
    name, body = CHANGED_SIGNATURES[case]
    standin = standin_factory({name: body})
    before = {
        n: getattr(standin.module, n, None)
        for n in (*PARTITIONERS, "get_group_balanced_partitions")
    }
    with pytest.raises(
        IntegrationError, match=f"{standin.package}.utils.seqlen_balancing.{name}"
    ) as info:
        standin.integration.install()
    assert "nothing was patched" in str(info.value)
    assert isinstance(info.value, RuntimeError)
    for n, function in before.items():
        assert getattr(standin.module, n, None) is function
    assert (
        standin.trainer.get_seqlen_balanced_partitions is before["get_seqlen_balanced_partitions"]
    )
    assert not standin.integration.is_installed()


def test_changed_group_signature_is_refused(verl_factory):
    standin = verl_factory(
        {
            "get_group_balanced_partitions": (
                "def get_group_balanced_partitions(seqlen_list, uid_list, k_partitions, equal_size=True):\n"
                "    return []\n"
            )
        }
    )
    with pytest.raises(IntegrationError, match="get_group_balanced_partitions"):
        standin.integration.install()
    assert standin.module.karmarkar_karp is standin.originals["karmarkar_karp"]


def test_verl_without_group_function_patches_the_other_three(verl_factory):
    standin = verl_factory({"get_group_balanced_partitions": None})
    assert standin.integration.install() == list(PARTITIONERS)
    assert not hasattr(standin.module, "get_group_balanced_partitions")


# --- same answers ------------------------------------------------------------------------------

SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def partition_requests(draw):
    values = draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=40))
    if draw(st.booleans()):  # many ties
        values = [v % 4 for v in values]
    k = draw(st.integers(1, len(values)))
    equal_size = draw(st.booleans()) and len(values) % k == 0
    # (Narrow dtypes only with sums that fit: upstream sums in the array's dtype and wraps.)
    kind = draw(st.sampled_from(["list", "tuple", "int64", "int32", "uint32"]))
    if kind == "tuple":
        values = tuple(values)
    elif kind != "list":
        values = np.asarray([v % 2**15 for v in values], dtype=kind)
    return values, k, equal_size


@SETTINGS
@given(request=partition_requests())
def test_same_answers_as_the_replaced_functions(standin, request):
    values, k, equal_size = request
    before = {name: standin.originals[name](values, k, equal_size) for name in PARTITIONERS}
    before_by_name = standin.trainer.balance_batch(values, k) if len(values) % k == 0 else None
    seqlens = [int(v) % 2**20 for v in values]
    before_micro = standin.module.rearrange_micro_batches(seqlens, k)
    standin.integration.install()
    try:
        for name in PARTITIONERS:
            assert getattr(standin.module, name)(values, k, equal_size) == before[name], name
            # verl calls karmarkar_karp by keyword
            keywords = {"seqlen_list": values, "k_partitions": k, "equal_size": equal_size}
            assert getattr(standin.module, name)(**keywords) == before[name], name
        if before_by_name is not None:
            assert standin.trainer.balance_batch(values, k) == before_by_name
        assert standin.module.rearrange_micro_batches(seqlens, k) == before_micro
    finally:
        standin.integration.uninstall()


@SETTINGS
@given(values=st.lists(st.integers(0, 100), min_size=1, max_size=8), extra=st.integers(1, 4))
def test_same_errors_family_when_parts_cannot_be_equal_or_too_many(standin, values, extra):
    """More parts than items, or unequal counts: the original and the replacement both assert."""
    k = len(values) + extra
    standin.integration.install()
    try:
        with pytest.raises(AssertionError):
            standin.module.get_seqlen_balanced_partitions(values, k, False)
        if len(values) > 1:
            with pytest.raises(AssertionError):
                standin.module.karmarkar_karp(values + [1], len(values), True)
    finally:
        standin.integration.uninstall()


@st.composite
def group_requests(draw):
    n_groups = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.integers(1, 4), min_size=n_groups, max_size=n_groups))
    uid_kind = draw(st.sampled_from(["str", "int", "ndarray"]))
    seqlens, uids = [], []
    for group, size in enumerate(sizes):
        seqlens += draw(st.lists(st.integers(0, 5000), min_size=size, max_size=size))
        uids += [f"prompt-{group}" if uid_kind == "str" else group] * size
    divisors = [k for k in range(1, n_groups + 1) if n_groups % k == 0]
    k = draw(st.sampled_from(divisors))
    uid_list = np.asarray(uids, dtype=object) if uid_kind == "ndarray" else uids
    return seqlens, uid_list, k


@SETTINGS
@given(request=group_requests())
def test_group_balancing_same_answers(verl_standin, request):
    standin = verl_standin
    seqlens, uids, k = request
    before = standin.originals["get_group_balanced_partitions"](seqlens, uids, k)
    standin.integration.install()
    try:
        assert standin.module.get_group_balanced_partitions(seqlens, uids, k) == before
        assert (
            standin.module.get_group_balanced_partitions(
                seqlen_list=seqlens, uid_list=uids, k_partitions=k
            )
            == before
        )
    finally:
        standin.integration.uninstall()


# --- inputs seqbalance does not take: the trainer's own function answers ------------------------


def _outcome(function, *args):
    """The answer, or the error family: an AssertionError (upstream's checks) or another error."""
    try:
        return ("answer", function(*args))
    except AssertionError:
        return ("assertion", None)


floats = st.floats(0, 1e12, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(
    values=st.lists(st.one_of(floats, st.integers(0, 1000)), min_size=1, max_size=20).filter(
        lambda vs: any(isinstance(v, float) for v in vs)
    ),
    data=st.data(),
)
def test_float_input_never_changes_the_answer(standin, values, data):
    """Floats get the trainer's own answer: natively once seqbalance takes them, else by fallback."""
    k = data.draw(st.integers(1, len(values)))
    equal_size = data.draw(st.booleans()) and len(values) % k == 0
    before = {
        name: _outcome(standin.originals[name], values, k, equal_size) for name in PARTITIONERS
    }
    standin.integration.install()
    try:
        for name in PARTITIONERS:
            after = _outcome(getattr(standin.module, name), values, k, equal_size)
            assert after == before[name], name
    finally:
        standin.integration.uninstall()


@SETTINGS
@given(request=group_requests(), scale=st.floats(0.01, 100))
def test_group_float_lengths_go_to_the_original(verl_standin, request, scale):
    standin = verl_standin
    seqlens, uids, k = request
    lengths = [s * scale for s in seqlens]
    before = standin.originals["get_group_balanced_partitions"](lengths, uids, k)
    standin.integration.install()
    try:
        assert standin.module.get_group_balanced_partitions(lengths, uids, k) == before
    finally:
        standin.integration.uninstall()


def test_fallback_answers_and_is_logged_once(standin, caplog):
    # float32 items beside a Python float: no well-defined precision, so seqbalance refuses the
    # type (partition-spec.md, "Float weights"); the trainer's own function answers instead.
    values = [np.float32(1.5), 2.5, np.float32(0.25), 7.0]
    before = standin.originals["get_seqlen_balanced_partitions"](values, 2, True)
    with pytest.raises(TypeError):
        seqbalance.get_seqlen_balanced_partitions(values, 2, True)
    standin.integration.install()
    with caplog.at_level(logging.WARNING, logger=standin.integration.__name__):
        for _ in range(3):
            assert standin.module.get_seqlen_balanced_partitions(values, 2, True) == before
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # Once per function: the original itself calls karmarkar_karp through the (patched) module,
    # which falls back in turn and says so once too.
    ours = [w for w in warnings if "get_seqlen_balanced_partitions fell back" in w]
    assert len(ours) == 1, warnings
    assert "trainer's own function" in ours[0]
    assert len(warnings) == len(set(warnings)), warnings


def test_a_type_error_without_an_original_is_raised(standin):
    """The fallback needs the original install() found; an error never turns into a wrong answer."""
    replacement_module = standin.integration
    with pytest.raises(TypeError):
        # Never installed in this process for this name's original? Then the error stands.
        type(replacement_module._PATCH)(
            target="nowhere",
            package="nowhere",
            replacements={},
            owner="test",
            install_hint="",
            logger=logging.getLogger("test"),
        ).call("karmarkar_karp", seqbalance.karmarkar_karp, ["1.5"], 1, False)


def test_documented_deviations_raise(standin):
    standin.integration.install()
    # More parts than items: upstream returns empty parts here, seqbalance refuses.
    with pytest.raises(seqbalance.PartitionError):
        standin.module.karmarkar_karp([3, 1], 3, False)
    with pytest.raises(ValueError, match=r"seqlen_list\[1\]"):
        standin.module.get_seqlen_balanced_partitions([3, -1], 1, False)


# --- install(refine=...) ---------------------------------------------------------------------


@SETTINGS
@given(request=partition_requests())
def test_install_refine_balances_no_worse_and_keeps_the_exact_ones_exact(standin, request):
    values, k, equal_size = request
    before = {name: standin.originals[name](values, k, equal_size) for name in PARTITIONERS}
    standin.integration.install(refine=True)
    try:
        for name in ("karmarkar_karp", "greedy_partition"):
            assert getattr(standin.module, name)(values, k, equal_size) == before[name], name
        refined = standin.module.get_seqlen_balanced_partitions(values, k, equal_size)
        assert refined == seqbalance.get_seqlen_balanced_partitions(
            values, k, equal_size, refine=True
        )
        heaviest = max(sum(values[i] for i in part) for part in refined)
        original = before["get_seqlen_balanced_partitions"]
        assert heaviest <= max(sum(values[i] for i in part) for part in original)
        if equal_size:  # refine keeps the counts equal_size asked for
            assert sorted(len(p) for p in refined) == sorted(len(p) for p in original)
    finally:
        standin.integration.uninstall()


def test_install_refine_lightens_a_grpo_batch_and_a_later_install_resets_it(standin):
    from seqbalance.cli.readers import synthetic_rl_batch

    groups = synthetic_rl_batch().reshape(-1, 16).sum(axis=1).tolist()

    def heaviest(parts):
        return max(sum(groups[g] for g in part) for part in parts)

    exact = standin.originals["get_seqlen_balanced_partitions"](groups, 8, True)
    standin.integration.install(refine=True)
    refined = standin.module.get_seqlen_balanced_partitions(groups, 8, True)
    assert heaviest(refined) < heaviest(exact)  # the batch the issue measured (1.0952 -> 1.0000)
    standin.integration.install()  # refine=False again: verl's exact answer
    assert standin.module.get_seqlen_balanced_partitions(groups, 8, True) == exact


@pytest.mark.parametrize(
    ("refine", "error"), [("yes", ValueError), (2, TypeError), (None, TypeError)]
)
def test_install_refuses_a_bad_refine_before_patching(standin, refine, error):
    with pytest.raises(error, match="refine must be False, True or 'exact'"):
        standin.integration.install(refine=refine)
    assert not standin.integration.is_installed()
    assert (
        standin.module.get_seqlen_balanced_partitions
        is standin.originals["get_seqlen_balanced_partitions"]
    )


def test_install_refine_reaches_verls_group_balancing(verl_standin):
    lengths = [int(x) for x in np.random.default_rng(1).integers(16, 4096, 16 * 24)]
    uids = [i // 16 for i in range(len(lengths))]
    verl_standin.integration.install(refine=True)
    got = verl_standin.module.get_group_balanced_partitions(lengths, uids, 8)
    assert got == seqbalance.group_balanced_partitions(
        lengths, uids, 8, refine=True, cost="workload"
    )
