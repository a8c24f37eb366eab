"""StreamPacker against hostile input: saved states near 2**64, lengths and keys that other
readers refuse (the third adversarial pass, issue 28)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance import StreamPacker, _native
from seqbalance._inputs import as_int64_array

_LAST = 2**63  # the most items a packer numbers: its indexes fit an int64


def _state_with_next_index(next_index: int) -> dict[str, Any]:
    packer = StreamPacker(100)
    packer.add(5)
    state = packer.__getstate__()
    core = list(state["core"])
    core[4] = next_index
    state["core"] = tuple(core)
    return state


@pytest.mark.parametrize("next_index", [_LAST + 1, 2**64 - 2, 2**64 - 1, 2**64, -1])
def test_a_state_numbering_past_2_pow_63_is_refused_on_load_and_changes_nothing(
    next_index: int,
) -> None:
    live = StreamPacker(100)
    live.add(3)
    live.add(4)
    state = _state_with_next_index(next_index)
    with pytest.raises(ValueError) as error:
        live.__setstate__(state)
    message = str(error.value)
    assert message.startswith("not a StreamPacker state: ")
    assert message.count("not a StreamPacker state") == 1
    # The refused load left the live packer as it was, and it goes on working.
    assert live.items_added == 2
    assert live.open_packs == [[0, 1]]
    assert live.add(93) == [[0, 1, 2]]
    assert live.flush() == []


def test_the_last_indexes_before_2_pow_63_are_handed_out_then_adding_is_refused() -> None:
    packer = StreamPacker(100)
    packer.__setstate__(_state_with_next_index(_LAST - 1))
    assert packer.add(90) == []
    with pytest.raises(ValueError, match=r"numbered 2\*\*63 items"):
        packer.add(2)
    with pytest.raises(ValueError, match=r"numbered 2\*\*63 items"):
        packer.add_many([2])
    assert packer.items_added == _LAST
    assert packer.flush() == [[0, _LAST - 1]]


def test_a_load_on_a_live_packer_replaces_it_and_a_fresh_one_unpickles() -> None:
    source = StreamPacker(10, by_key=True)
    source.add(3, "a")
    live = StreamPacker(10)
    live.add(9)
    live.__setstate__(source.__getstate__())
    assert live.by_key
    assert live.add(7, "a") == [[0, 1]]
    assert live.add(4, "b") == []


_LENGTH_VALUES = st.one_of(
    st.booleans(),
    st.sampled_from([np.True_, np.False_, np.uint64(2**63), np.uint64(2**64 - 1)]),
    st.integers(min_value=-3, max_value=12),
    st.integers(min_value=2**63 - 2, max_value=2**64 + 1),
    st.integers(min_value=0, max_value=2**63 - 1).map(np.int64),
    st.integers(min_value=0, max_value=2**64 - 1).map(np.uint64),
)


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        return ("returned", call())
    except (TypeError, ValueError, OverflowError) as error:
        # The same condition, worded for one value ("length") or a batch ("lengths[0]").
        return ("raised", type(error), str(error).replace("lengths[0]", "length"))


@given(value=_LENGTH_VALUES, cap=st.sampled_from([10, 2**63 - 1, 2**64 - 1]))
def test_add_and_add_many_take_the_same_lengths_as_every_length_reader(
    value: Any, cap: int
) -> None:
    # One rule: bools count as 0/1 and ints above 2**63 - 1 are an OverflowError, as
    # `pack_sequences` and the partitioners read lengths; then 0 and lengths over the cap are
    # refused alike.
    one, many = StreamPacker(cap), StreamPacker(cap)
    added = _outcome(lambda: one.add(value))
    assert added == _outcome(lambda: many.add_many([value]))
    assert one.__getstate__() == many.__getstate__()
    if isinstance(value, np.integer):
        assert added == _outcome(lambda: StreamPacker(cap).add_many(np.array([value])))
    read = _outcome(lambda: as_int64_array([value], "lengths").tolist())
    if read[0] == "raised":
        assert added == read
    else:
        assert read[1][0] == int(value)


def test_bools_count_as_0_and_1_in_add_as_in_add_many() -> None:
    one, many = StreamPacker(2), StreamPacker(2)
    assert one.add(True) == [] and one.add(True) == [[0, 1]]
    assert many.add_many([True, True]) == [[0, 1]]
    with pytest.raises(ValueError, match="length must be >= 1, got 0"):
        one.add(False)


def test_uint64_lengths_past_2_pow_63_are_refused_by_add_as_by_add_many() -> None:
    packer = StreamPacker(2**64 - 1)
    big = np.array([2**63], dtype=np.uint64)
    with pytest.raises(OverflowError, match=r"lengths\[0\] must be <= 2\*\*63 - 1"):
        packer.add_many(big)
    with pytest.raises(OverflowError, match=r"^length must be <= 2\*\*63 - 1"):
        packer.add(big[0])
    with pytest.raises(OverflowError, match=r"^length must be <= 2\*\*63 - 1"):
        packer.add(2**63)
    assert packer.items_added == 0


def test_keys_that_are_no_sequence_are_refused_and_change_nothing() -> None:
    packer = StreamPacker(10, by_key=True)
    packer.add(3, "a")
    for keys in (itertools.cycle("ab"), {"a", "b"}, (k for k in "ab")):
        with pytest.raises(TypeError, match="^keys must be a sequence or 1-D array of hashables"):
            packer.add_many([1, 2], keys)
    assert packer.items_added == 1
    assert packer.add_many([1, 2], ["a", "b"]) == []


_BIG = st.one_of(
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=2**63 - 3, max_value=2**63 + 3),
    st.integers(min_value=2**64 - 3, max_value=2**64 - 1),
)


@given(
    cap=st.one_of(st.integers(min_value=1, max_value=20), st.just(2**64 - 1)),
    max_sequences=st.one_of(st.none(), _BIG),
    padded=st.booleans(),
    next_index=_BIG,
    packs=st.lists(st.tuples(_BIG, _BIG, _BIG, st.lists(_BIG, max_size=3)), max_size=3),
    length=_BIG,
)
def test_any_saved_core_state_is_refused_or_works_without_an_internal_error(
    cap: int,
    max_sequences: int | None,
    padded: bool,
    next_index: int,
    packs: list[tuple[int, int, int, list[int]]],
    length: int,
) -> None:
    # A pickled state may come from anywhere: the native core either refuses it with a plain
    # error or goes on with it, never with a Rust panic ("internal error").
    try:
        core = _native._StreamCore.from_state(cap, 4, max_sequences, padded, next_index, packs)
    except (TypeError, ValueError, OverflowError) as error:
        assert "internal error" not in str(error)
        return
    for call in (
        lambda: core.add(length, 0),
        lambda: core.add_many(np.array([min(length, 2**63 - 1)], dtype=np.int64)),
        core.open_packs,
        core.state,
        core.flush,
    ):
        try:
            call()
        except (ValueError, OverflowError) as error:
            assert "internal error" not in str(error)
