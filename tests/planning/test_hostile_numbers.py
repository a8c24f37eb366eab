"""Every number-valued option of the planners and the step simulator refuses a hostile number by
name: an int beyond float64 (``float(10**400)`` is a bare ``OverflowError``; ``str`` refuses ints
past 4,300 digits), a NaN, an infinity, a value out of range, whatever its type (Python, NumPy).

Each refusal is a ``ValueError`` or ``TypeError`` (or an ``OverflowError`` that says what
overflowed) whose message names the option and shows the value, and stays short."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import (
    plan_context_parallel,
    plan_dp_micro_batches,
    plan_micro_batches,
    simulate_step,
)

#: Ints beyond float64 (its largest finite value is just below 2**1024), of either sign, and
#: one past the interpreter's int-to-str limit (4,300 digits).
HUGE_INTS = st.one_of(
    st.integers(min_value=2**1024, max_value=10**600),
    st.integers(min_value=-(10**600), max_value=-(2**1024)),
    st.just(10**5000),
)

#: Floats that are no finite number, in every precision a caller may hold them.
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf]).flatmap(
    lambda x: st.sampled_from([x, np.float64(x), np.float32(x), np.longdouble(x)])
)

#: Numbers no option takes: negative ones.
NEGATIVE = st.one_of(st.floats(max_value=-1e-300, allow_infinity=False), st.integers(-(2**70), -1))

HOSTILE = st.one_of(HUGE_INTS, NOT_FINITE, NEGATIVE)


def _shown(value):
    """What the message must show of ``value``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= 2**1024:
            return "digits (beyond float64)"
        return str(value)
    number = float(value)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf"
    return None  # a negative float: its repr, whatever NumPy calls it


#: Each option as a call that passes the value where the option reads it, and the name the
#: message must give.
OPTIONS = {
    "simulate_step forward_share": (
        lambda v: simulate_step([[[0], [1]]], [3, 4], pipeline_stages=2, forward_share=v),
        "forward_share",
    ),
    "plan_dp_micro_batches forward_share": (
        lambda v: plan_dp_micro_batches([3, 4, 5], 1, 10, pipeline_stages=2, forward_share=v),
        "forward_share",
    ),
    "plan_context_parallel comm": (
        lambda v: plan_context_parallel([3, 4, 9], 2, 10, comm=v),
        "comm",
    ),
    "plan_context_parallel comm(L, c)": (
        lambda v: plan_context_parallel([3, 4, 9], 2, 10, comm=lambda length, degree: v),
        "comm(",
    ),
    "plan_context_parallel cost": (
        lambda v: plan_context_parallel([3, 4, 9], 2, 10, cost=[1.0, v, 2.0]),
        "cost[1]",
    ),
    "plan_dp_micro_batches cost": (
        lambda v: plan_dp_micro_batches([3, 4, 5], 2, 10, cost=[1, v, 2]),
        "cost[1]",
    ),
    "plan_dp_micro_batches cost(lengths)": (
        lambda v: plan_dp_micro_batches([3, 4, 5], 2, 10, cost=lambda lengths: [1, v, 2]),
        "cost(lengths)[1]",
    ),
    "plan_micro_batches cost": (
        lambda v: plan_micro_batches([3, 4, 5], 10, cost=[1, v, 2]),
        "cost[1]",
    ),
    "simulate_step cost": (
        lambda v: simulate_step([[[0], [1, 2]]], [3, 4, 5], cost=[1, v, 2]),
        "cost[1]",
    ),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(OPTIONS)), HOSTILE)
def test_a_hostile_number_is_refused_by_name_with_its_value(option, value):
    call, name = OPTIONS[option]
    with pytest.raises((ValueError, TypeError, OverflowError)) as caught:
        call(value)
    message = str(caught.value)
    assert name in message, (option, message)
    shown = _shown(value)
    # A TypeError refuses the value's type (a float128 scalar in a list), which it names.
    if shown is not None and not isinstance(caught.value, TypeError):
        assert shown in message, (option, message)
    assert len(message) < 500, (option, len(message))


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        HUGE_INTS,
        NOT_FINITE,
        st.sampled_from([0, 1, 0.0, 1.0, -0.5, 1.5, 2, True, False, np.float32(1.0)]),
        st.sampled_from([1j, "0.5", None, Fraction(1, 3), [0.5]]),
    ),
    st.sampled_from(["simulate_step", "plan_dp_micro_batches"]),
)
def test_forward_share_outside_zero_to_one_is_a_value_error_naming_it(value, where):
    """The step spec: ``forward_share`` not a finite number in (0, 1) is a ``ValueError``
    naming it, whatever the value's type."""
    call = OPTIONS[f"{where} forward_share"][0]
    with pytest.raises(ValueError, match=r"^forward_share must be a (finite )?number in \(0, 1\)"):
        call(value)


def test_ints_past_the_str_limit_are_shown_by_size_in_every_count():
    """An int past 4,300 digits used to reach ``str`` in the message and raise its own
    ``ValueError`` ("Exceeds the limit ... for integer string conversion"), naming nothing."""
    huge = 10**5000
    calls = {
        "min_num_micro_batches": lambda: plan_dp_micro_batches(
            [3, 4], 1, 10, min_num_micro_batches=huge
        ),
        "max_num_micro_batches": lambda: plan_dp_micro_batches(
            [3, 4], 1, 10, max_num_micro_batches=huge
        ),
        "pipeline_stages": lambda: simulate_step([[[0]]], [3], pipeline_stages=huge),
        "world_size": lambda: plan_context_parallel([3, 4], huge, 10),
        "cp_sizes[0]": lambda: plan_context_parallel([3, 4], 2, 10, cp_sizes=[huge]),
        "dp_size": lambda: plan_dp_micro_batches([3, 4], -huge, 10),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError) as caught:
            call()
        message = str(caught.value)
        assert name in message and "digits (beyond float64)" in message, message
