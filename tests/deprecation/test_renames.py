"""Every retired spelling (api-spec, "One vocabulary"): the same answer as the new one, exactly
one warning in the spec's wording pointing at the caller's line, both spellings a TypeError."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import seqbalance as sb
from seqbalance import _deprecation as dep
from seqbalance.costs import workload

LENGTHS = [300, 200, 100, 400, 50, 250, 120, 80]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return bool(a == b)


START = [[0, 1, 2, 3], [4, 5, 6, 7]]
UIDS = ["a", "a", "b", "b", "c", "c", "d", "d"]


def _refine(lengths: Any = None, **kw: Any) -> list[list[int]]:
    if lengths is not None:
        kw["lengths"] = lengths
    return sb.refine_partitions(partitions=START, **kw)


def _packer(**kw: Any) -> list[list[int]]:
    packer = sb.StreamPacker(**kw)
    return packer.add_many(LENGTHS) + packer.flush()


#: (name, call, positional args, old keyword, old value, new keyword, new value)
RENAMES: list[tuple[str, Callable[..., Any], tuple[Any, ...], str, Any, str, Any]] = [
    (
        "partition_ids",
        lambda **kw: sb.partition_ids(k_partitions=2, **kw),
        (),
        "seqlen_list",
        LENGTHS,
        "lengths",
        LENGTHS,
    ),
    (
        "group_balanced_partitions",
        lambda **kw: sb.group_balanced_partitions(uid_list=UIDS, k_partitions=2, **kw),
        (),
        "seqlen_list",
        LENGTHS,
        "lengths",
        LENGTHS,
    ),
    ("refine_partitions", _refine, (), "seqlen_list", LENGTHS, "lengths", LENGTHS),
    ("refine_partitions", _refine, (LENGTHS,), "refine", True, "search", "local"),
    ("refine_partitions", _refine, (LENGTHS,), "refine", "exact", "search", "exact"),
    ("refine_partitions", _refine, (LENGTHS,), "refine", False, "search", "none"),
    (
        "balance_report",
        lambda **kw: sb.balance_report(partitions=START, **kw),
        (),
        "values",
        LENGTHS,
        "weights",
        LENGTHS,
    ),
    ("pack_sequences", sb.pack_sequences, (LENGTHS,), "pack_max_length", 500, "max_token_len", 500),
    (
        "plan_packed_steps",
        sb.plan_packed_steps,
        (LENGTHS, 2, 1),
        "pack_max_length",
        500,
        "max_token_len",
        500,
    ),
    ("StreamPacker", _packer, (), "pack_max_length", 500, "max_token_len", 500),
    (
        "plan_context_parallel",
        sb.plan_context_parallel,
        (LENGTHS, 4),
        "max_tokens_per_rank",
        500,
        "max_token_len",
        500,
    ),
    (
        "plan_micro_batches",
        sb.plan_micro_batches,
        (LENGTHS, 700),
        "force_group_size",
        2,
        "group_size",
        2,
    ),
    (
        "min_num_micro_batches_for",
        sb.min_num_micro_batches_for,
        (LENGTHS, 700),
        "force_group_size",
        2,
        "group_size",
        2,
    ),
    (
        "plan_dp_micro_batches",
        sb.plan_dp_micro_batches,
        (LENGTHS, 2, 700),
        "force_group_size",
        2,
        "group_size",
        2,
    ),
    (
        "plan_micro_batches",
        sb.plan_micro_batches,
        (LENGTHS, 700),
        "balance_workload",
        True,
        "cost",
        "workload",
    ),
    (
        "plan_micro_batches",
        sb.plan_micro_batches,
        (LENGTHS, 700),
        "balance_workload",
        False,
        "cost",
        "tokens",
    ),
    (
        "min_num_micro_batches_for",
        sb.min_num_micro_batches_for,
        (LENGTHS, 500),
        "balance_workload",
        True,
        "cost",
        "workload",
    ),
]


@pytest.mark.parametrize(
    ("name", "call", "args", "old", "old_value", "new", "new_value"),
    RENAMES,
    ids=[f"{r[0]}-{r[3]}={r[4]}" for r in RENAMES],
)
def test_a_renamed_parameter(
    name: str,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    old: str,
    old_value: Any,
    new: str,
    new_value: Any,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = call(*args, **{new: new_value})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        answer = call(*args, **{old: old_value})
    assert _same(answer, expected)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert str(caught[0].message) == (
        f"{old}= is deprecated since 0.3 and is removed in 1.0; pass {new}="
    )
    if call.__module__ != __name__:  # a public function: the warning names this very line
        assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    else:
        assert caught[0].filename == __file__
    with pytest.raises(TypeError, match=rf"both {new}= and its deprecated spelling {old}="):
        call(*args, **{old: old_value, new: new_value})


@pytest.mark.parametrize(
    ("old_call", "new_call", "args"),
    [
        (sb.pack_sequences, sb.pack_ids, (LENGTHS, 500)),
        (sb.plan_dp_micro_batches, sb.plan_dp_ids, (LENGTHS, 2, 700)),
    ],
)
def test_as_ids_is_a_deprecated_switch_to_the_ids_function(
    old_call: Callable[..., Any], new_call: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = new_call(*args, cost="tokens") if new_call is sb.plan_dp_ids else new_call(*args)
        lists = old_call(*args, cost="tokens") if new_call is sb.plan_dp_ids else old_call(*args)
    extra = {"cost": "tokens"} if new_call is sb.plan_dp_ids else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        answer = old_call(*args, as_ids=True, **extra)
    assert _same(
        tuple(answer) if isinstance(answer, tuple) else answer,
        tuple(expected) if isinstance(expected, tuple) else expected,
    )
    assert [w.category for w in caught] == [DeprecationWarning]
    assert str(caught[0].message) == (
        f"as_ids= is deprecated since 0.3 and is removed in 1.0; call "
        f"seqbalance.{new_call.__name__}(...)"
    )
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    with pytest.warns(DeprecationWarning):
        assert old_call(*args, as_ids=False, **extra) == lists


def test_plan_dp_ids_is_a_named_tuple_of_the_plan() -> None:
    ids = sb.plan_dp_ids(LENGTHS, 2, 700, cost="tokens")
    assert isinstance(ids, sb.DpIds)
    plan = sb.plan_dp_micro_batches(LENGTHS, 2, 700, cost="tokens")
    assert ids.num_micro_batches == len(plan[0])
    for r, rank in enumerate(plan):
        for m, batch in enumerate(rank):
            for i in batch:
                assert (ids.rank_ids[i], ids.micro_batch_ids[i]) == (r, m)


def test_stream_packer_pack_max_length_attribute_warns() -> None:
    packer = sb.StreamPacker(max_token_len=64)
    with pytest.warns(DeprecationWarning, match=r"^StreamPacker\.pack_max_length is deprecated"):
        assert packer.pack_max_length == packer.max_token_len == 64


def _next_line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def test_balance_report_group_size_none_is_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = sb.balance_report(LENGTHS, START)
        assert sb.balance_report(LENGTHS, START, group_size=1) == expected
        assert sb.balance_report(LENGTHS, START, uid_list=UIDS).naive.counts == (4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        answer = sb.balance_report(LENGTHS, START, group_size=None)
    assert answer == expected
    assert [w.category for w in caught] == [DeprecationWarning]
    assert str(caught[0].message) == (
        "group_size=None is deprecated since 0.3 and is removed in 1.0; pass group_size=1"
    )
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_balance_report_k_is_k_partitions() -> None:
    report = sb.balance_report(LENGTHS, START)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        k = report.k
    assert k == report.k_partitions == 2
    assert [str(w.message) for w in caught] == [
        "BalanceReport.k is deprecated since 0.3 and is removed in 1.0; "
        "use BalanceReport.k_partitions"
    ]
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_step_time_seconds_is_makespan_and_warns_unless_the_unit_is_seconds() -> None:
    plan = [[[0, 1], [2]], [[3, 4], [5, 6, 7]]]
    step = sb.simulate_step(plan, LENGTHS, cost="tokens")
    assert step.unit == "tokens"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        seconds = step.seconds
    assert seconds == step.makespan
    assert [str(w.message) for w in caught] == [
        "StepTime.seconds is deprecated since 0.3 and is removed in 1.0; use StepTime.makespan"
    ]
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    cost = sb.TimeCost.fit(
        [[n] for n in (10, 50, 100, 200, 300, 400)] + [[100, 100], [50, 20, 30]],
        [0.5 + 1e-3 * n for n in (10, 50, 100, 200, 300, 400)] + [0.702, 0.603],
    )
    timed = sb.simulate_step(plan, LENGTHS, cost=cost)
    assert timed.unit == "seconds"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert timed.seconds == timed.makespan > 0


#: The cost helpers whose ``name=`` (``default=``) becomes keyword-only in 1.0: (function,
#: positional arguments before it, the value passed by position).
_KEYWORD_ONLY_FROM_1_0 = [
    (workload.sample_costs, ("tokens", np.array([3, 4])), "lengths"),
    (workload.check_total, (np.array([3, 4]),), "lengths"),
    (workload.group_sums, (np.array([3, 4, 5]), np.array([0, 2])), "lengths"),
    (workload.resolve_cost, (None,), "workload"),
]


@pytest.mark.parametrize(("function", "args", "value"), _KEYWORD_ONLY_FROM_1_0)
def test_a_parameter_becoming_keyword_only_warns_by_position_only(function, args, value) -> None:
    entry = next(
        e for e in dep.REGISTRY if e.kind == "positional" and e.where.endswith(function.__name__)
    )
    keyword = {entry.parameter: value}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_keyword = function(*args, **keyword)
    with pytest.warns(
        DeprecationWarning, match=f"passing {entry.parameter}= by position"
    ) as caught:
        by_position = function(*args, value)
    assert len(caught) == 1 and caught[0].filename == __file__
    assert str(by_position) == str(by_keyword)
