"""StreamPacker against hostile input: saved states near 2**64, lengths and keys that other
readers refuse (the third adversarial pass, issue 28)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from seqbalance import StreamPacker

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
