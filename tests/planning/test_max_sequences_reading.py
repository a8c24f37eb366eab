"""``max_sequences``: one reading in every taker (issue 28). Any int >= 1 is a limit; one at or
above the number of items never binds and plans exactly as no limit, however large (``2**64``
was an unnamed ``TypeError``/``OverflowError``); below 1 or not an int is an error naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance as sb

TAKERS: dict[str, Callable[[list[int], Any], Any]] = {
    "pack_sequences": lambda lengths, m: sb.pack_sequences(lengths, 64, max_sequences=m),
    "pack_sequences(ffd, padded)": lambda lengths, m: sb.pack_sequences(
        lengths, 64, algorithm="ffd", footprint="padded", max_sequences=m
    ),
    "plan_micro_batches": lambda lengths, m: sb.plan_micro_batches(lengths, 64, max_sequences=m),
    "min_num_micro_batches_for": lambda lengths, m: sb.min_num_micro_batches_for(
        lengths, 64, max_sequences=m
    ),
    "plan_dp_micro_batches": lambda lengths, m: sb.plan_dp_micro_batches(
        lengths, 2, 64, max_sequences=m
    ),
    "plan_packed_steps": lambda lengths, m: sb.plan_packed_steps(
        lengths, 1, 1, 64, max_sequences=m
    ),
    "StreamPacker": lambda lengths, m: (lambda packer: packer.add_many(lengths) + packer.flush())(
        sb.StreamPacker(64, max_open=4, max_sequences=m)
    ),
}

HUGE = [2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**20, 2**200]


@pytest.mark.parametrize("taker", TAKERS.values(), ids=TAKERS.keys())
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=64), min_size=2, max_size=24),
    pick=st.integers(min_value=0, max_value=len(HUGE)),
)
def test_a_limit_at_or_above_the_item_count_plans_as_no_limit(
    taker: Callable[[list[int], Any], Any], lengths: list[int], pick: int
) -> None:
    limit = len(lengths) if pick == len(HUGE) else HUGE[pick]
    assert taker(lengths, limit) == taker(lengths, None)


@pytest.mark.parametrize("taker", TAKERS.values(), ids=TAKERS.keys())
@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, r"^max_sequences must be >= 1, got 0$"),
        (-(2**64), ValueError, r"^max_sequences must be >= 1, got -18446744073709551616$"),
        (True, TypeError, r"^max_sequences must be an int, got True \(bool\)$"),
        (2.0, TypeError, r"^max_sequences must be an int, got 2.0 \(float\)$"),
        ("2", TypeError, r"^max_sequences must be an int, got '2' \(str\)$"),
    ],
)
def test_a_bad_limit_is_an_error_naming_max_sequences(
    taker: Callable[[list[int], Any], Any], value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        taker([3, 4, 5], value)
