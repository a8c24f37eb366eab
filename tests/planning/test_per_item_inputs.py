"""Per-item arguments that are not lengths (``keys=``, ``uid_list=``): one check, one wording,
and one rule for which keys are equal (issue 28).

Every taker refuses what has no length or no order (iterators, generators, sets, mappings,
strings) with the same ``TypeError``, and a key or id that does not equal itself (a NaN) with
the same ``ValueError``; keys are otherwise compared as dict keys are (``1``, ``1.0`` and
``True`` are one key)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance as sb
from tests import helpers

LENGTHS = [3, 3, 3, 3]

KEY_TAKERS: dict[str, Callable[[Any], Any]] = {
    "pack_sequences": lambda keys: sb.pack_sequences(LENGTHS, 10, keys=keys),
    "plan_micro_batches": lambda keys: sb.plan_micro_batches(LENGTHS, 10, keys=keys),
    "min_num_micro_batches_for": lambda keys: sb.min_num_micro_batches_for(LENGTHS, 10, keys=keys),
    "plan_dp_micro_batches": lambda keys: sb.plan_dp_micro_batches(LENGTHS, 2, 10, keys=keys),
    "StreamPacker.add_many": lambda keys: sb.StreamPacker(10, by_key=True).add_many(LENGTHS, keys),
}

UID_TAKERS: dict[str, Callable[[Any], Any]] = {
    "group_balanced_partitions": lambda uids: sb.group_balanced_partitions(LENGTHS, uids, 2),
    "balance_report": lambda uids: sb.balance_report(LENGTHS, [[0, 1], [2, 3]], uid_list=uids),
    "plan_dp_micro_batches": lambda uids: sb.plan_dp_micro_batches(LENGTHS, 2, 10, uid_list=uids),
}

TAKERS = [("keys", name, call) for name, call in KEY_TAKERS.items()] + [
    ("uid_list", name, call) for name, call in UID_TAKERS.items()
]
TAKER_IDS = [f"{argument}-{name}" for argument, name, _ in TAKERS]

ENDLESS = """
import itertools, resource, sys
import seqbalance as sb

with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (used + 400 * 2**20, resource.RLIM_INFINITY))
LENGTHS = [3, 3, 3, 3]
calls = {
    "pack_sequences": lambda k: sb.pack_sequences(LENGTHS, 10, keys=k),
    "plan_micro_batches": lambda k: sb.plan_micro_batches(LENGTHS, 10, keys=k),
    "min_num_micro_batches_for": lambda k: sb.min_num_micro_batches_for(LENGTHS, 10, keys=k),
    "plan_dp_micro_batches": lambda k: sb.plan_dp_micro_batches(LENGTHS, 2, 10, keys=k),
    "add_many": lambda k: sb.StreamPacker(10, by_key=True).add_many(LENGTHS, k),
    "group_balanced_partitions": lambda u: sb.group_balanced_partitions(LENGTHS, u, 2),
    "balance_report": lambda u: sb.balance_report(LENGTHS, [[0, 1], [2, 3]], uid_list=u),
    "dp_uid_list": lambda u: sb.plan_dp_micro_batches(LENGTHS, 2, 10, uid_list=u),
}
for name, call in calls.items():
    try:
        call(itertools.cycle("ab"))
        print(name, "returned")
    except Exception as error:
        print(name, type(error).__name__, error)
"""


def test_an_endless_iterator_is_refused_at_once_by_every_taker() -> None:
    # In a child, under an address-space limit and a timeout: reading the iterator to the end
    # (what these takers did) would grow memory until the process is killed.
    child = helpers.run_child(ENDLESS, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 8
    for line in lines:
        assert " ArgumentTypeError " in line, line
        assert "must be a sequence or 1-D array of" in line, line
        assert "(cycle)" in line, line


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(lambda: (x for x in "abab"), id="generator"),
        pytest.param(lambda: iter(["a", "b", "a", "b"]), id="iterator"),
        pytest.param(lambda: {"a", "b", "c", "d"}, id="set"),
        pytest.param(lambda: frozenset("abcd"), id="frozenset"),
        pytest.param(lambda: {"a": 1, "b": 2, "c": 3, "d": 4}, id="dict"),
        pytest.param(lambda: {"a": 1, "b": 2, "c": 3, "d": 4}.keys(), id="dict-keys"),
        pytest.param(lambda: "abab", id="str"),
        pytest.param(lambda: b"abab", id="bytes"),
    ],
)
@pytest.mark.parametrize(("argument", "name", "call"), TAKERS, ids=TAKER_IDS)
def test_what_has_no_length_or_no_order_is_refused_with_one_message(
    values: Callable[[], Any], argument: str, name: str, call: Callable[[Any], Any]
) -> None:
    noun = "hashables" if argument == "keys" else "ids"
    with pytest.raises(
        TypeError, match=rf"^{argument} must be a sequence or 1-D array of {noun}, got "
    ):
        call(values())


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(["a", "b", "a", "b"], id="list"),
        pytest.param(("a", "b", "a", "b"), id="tuple"),
        pytest.param(np.array([1, 2, 1, 2]), id="array"),
        pytest.param(range(4), id="range"),
        pytest.param({1: "a", 2: "b", 3: "a", 4: "b"}.values(), id="dict-values"),
    ],
)
@pytest.mark.parametrize(("argument", "name", "call"), TAKERS, ids=TAKER_IDS)
def test_sized_ordered_collections_are_taken(
    values: Any, argument: str, name: str, call: Callable[[Any], Any]
) -> None:
    call(values)


NANS = {
    "distinct NaN objects": lambda: [float("nan") for _ in range(4)],
    "one NaN object": lambda: [float("nan")] * 4,
    "a NaN among others": lambda: [1.0, 2.0, float("nan"), 1.0],
    "an array of NaNs": lambda: np.full(4, np.nan),
    "NumPy NaN scalars": lambda: [np.float64("nan")] * 4,
    "NaT": lambda: np.array(["NaT"] * 4, dtype="datetime64[s]"),
}


@pytest.mark.parametrize("nans", NANS.values(), ids=NANS.keys())
@pytest.mark.parametrize(("argument", "name", "call"), TAKERS, ids=TAKER_IDS)
def test_a_nan_key_or_id_is_refused_whatever_its_container(
    nans: Callable[[], Any], argument: str, name: str, call: Callable[[Any], Any]
) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}\[\d\] is .*which does not equal itself"):
        call(nans())


def test_a_nan_key_of_one_add_is_refused_and_changes_nothing() -> None:
    packer = sb.StreamPacker(10, by_key=True)
    packer.add(3, "a")
    with pytest.raises(ValueError, match=r"^key is nan \(float\), which does not equal itself"):
        packer.add(3, float("nan"))
    assert packer.items_added == 1
    assert packer.add(7, "a") == [[0, 1]]


def _groups(packs: list[list[int]], keys: list[Any]) -> set[frozenset[Any]]:
    """Which keys share a pack."""
    return {frozenset(keys[i] for i in pack) for pack in packs}


@given(
    st.lists(
        st.one_of(
            st.sampled_from([0, 1, 2, 0.0, 1.0, 2.0, True, False, -0.0]),
            st.sampled_from(["1", "1.0", "true"]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_keys_equal_as_dict_keys_are_one_key_in_every_taker(keys: list[Any]) -> None:
    # The rule: two keys are one key when a dict takes them as one (1 == 1.0 == True,
    # 0 == 0.0 == -0.0 == False; "1" and "true" are strings, other keys).
    lengths = [1] * len(keys)
    expected = len({key: None for key in keys})
    packs = sb.pack_sequences(lengths, 100, keys=keys)
    assert len(packs) == expected
    for pack in packs:
        assert len({keys[i] for i in pack}) == 1
    packer = sb.StreamPacker(100, by_key=True)
    streamed = packer.add_many(lengths, keys) + packer.flush()
    assert sorted(map(sorted, streamed)) == sorted(map(sorted, packs))
    as_array = sb.pack_sequences(lengths, 100, keys=np.array(keys, dtype=object))
    assert sorted(map(sorted, as_array)) == sorted(map(sorted, packs))


@pytest.mark.parametrize(("argument", "name", "call"), TAKERS, ids=TAKER_IDS)
def test_a_sized_collection_of_another_count_is_refused_before_it_is_read(
    argument: str, name: str, call: Callable[[Any], Any]
) -> None:
    # range(10**12) claims a trillion entries: refused by its length, never copied.
    with pytest.raises(ValueError, match=rf"^{argument}.*\b1000000000000\b"):
        call(range(10**12))
