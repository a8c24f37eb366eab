"""`seqbalance.ArgumentError`: its classes, its location, the table of kinds (issue 42, part 5)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqbalance as sb
from seqbalance import _native, errors, reference
from seqbalance.errors import KINDS, ArgumentError


def _raised(call: Callable[..., Any], *args: Any) -> BaseException:
    with pytest.raises(Exception) as caught:
        call(*args)
    return caught.value


def test_the_classes_are_the_extensions_and_subclass_todays_builtins() -> None:
    assert sb.ArgumentError is errors.ArgumentError is _native.ArgumentError
    assert sb.PartitionError is errors.PartitionError is _native.PartitionError
    assert issubclass(errors.ArgumentValueError, ArgumentError)
    assert issubclass(errors.ArgumentValueError, ValueError)
    assert issubclass(errors.ArgumentTypeError, TypeError)
    assert issubclass(errors.ArgumentOverflowError, OverflowError)
    assert issubclass(sb.PartitionError, ValueError) and issubclass(
        sb.PartitionError, AssertionError
    )
    assert not issubclass(errors.ArgumentTypeError, ValueError)
    for kind in KINDS.values():
        assert issubclass(kind.error, ArgumentError)


def test_a_native_raise_is_of_the_packages_classes() -> None:
    # Before 0.3 seqbalance.partition handed the extension PartitionError at import, and a raise
    # before that was a plain ValueError; now the extension defines the classes it raises.
    shape = _raised(lambda: _native.karmarkar_karp(np.array([1]), 2, False))
    assert type(shape) is sb.PartitionError
    assert type(shape).__module__ == "seqbalance.errors"


# (call, argument, loc, kind, built-in class of before 0.3): raised in Python and natively.
CASES: list[tuple[Callable[[], Any], str, tuple[Any, ...], str, type]] = [
    (
        lambda: sb.karmarkar_karp([3, -1], 2, False),
        "seqlen_list",
        ("seqlen_list", 1),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.karmarkar_karp(np.array([3, -1]), 2, False),
        "seqlen_list",
        ("seqlen_list", 1),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.karmarkar_karp(np.array([1.0, np.nan, 2.0]), 2, False),
        "seqlen_list",
        ("seqlen_list", 1),
        "not_finite_or_negative",
        ValueError,
    ),
    (
        lambda: sb.karmarkar_karp([1, 2], 0, False),
        "k_partitions",
        ("k_partitions",),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.karmarkar_karp([1, 2], "2", False),
        "k_partitions",
        ("k_partitions",),
        "wrong_type",
        TypeError,
    ),
    (
        lambda: sb.karmarkar_karp([1, 2], 2, None),
        "equal_size",
        ("equal_size",),
        "wrong_type",
        TypeError,
    ),
    (
        lambda: sb.karmarkar_karp([1, "a"], 2, False),
        "seqlen_list",
        ("seqlen_list", 1),
        "wrong_type",
        TypeError,
    ),
    (
        lambda: sb.karmarkar_karp([1, 2**63], 2, False),
        "seqlen_list",
        ("seqlen_list", 1),
        "overflow",
        OverflowError,
    ),
    (
        lambda: sb.greedy_partition([1, 2], 2, "nearly"),
        "equal_size",
        ("equal_size",),
        "unsupported",
        ValueError,
    ),
    (
        lambda: sb.get_seqlen_balanced_partitions([1, 2], 2, False, refine="yes"),
        "refine",
        ("refine",),
        "not_allowed",
        ValueError,
    ),
    (lambda: sb.partition_ids([3, -1], 2), "lengths", ("lengths", 1), "too_small", ValueError),
    (
        lambda: sb.plan_dp_micro_batches([3, 1, 2, 4], dp_size=0, max_token_len=10),
        "dp_size",
        ("dp_size",),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.plan_dp_micro_batches([3, 1, 2, 4], dp_size=2, max_token_len="x"),
        "max_token_len",
        ("max_token_len",),
        "wrong_type",
        TypeError,
    ),
    (
        lambda: sb.plan_micro_batches([3, -1, 2], max_token_len=10),
        "lengths",
        ("lengths", 1),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.balance_report([3, -1], [[0], [1]]),
        "weights",
        ("weights", 1),
        "too_small",
        ValueError,
    ),
    (
        lambda: sb.refine_partitions([3, 1, 2], [[0, 1], [5]]),
        "partitions",
        ("partitions", 1, 0),
        "not_an_index",
        ValueError,
    ),
    (
        lambda: sb.refine_partitions([3, 1, 2], [[0, 1], ["x"]]),
        "partitions",
        ("partitions", 1, 0),
        "wrong_type",
        TypeError,
    ),
    (
        lambda: sb.refine_partitions([3, 1, 2], [[0, 1, 2]], search="best"),
        "search",
        ("search",),
        "not_allowed",
        ValueError,
    ),
    (
        lambda: sb.simulate_step([[[0]], [[1]]], [3, 1], sync="micro_batch", pipeline_stages=2),
        "pipeline_stages",
        ("pipeline_stages",),
        "conflict",
        ValueError,
    ),
]


@pytest.mark.parametrize(("call", "argument", "loc", "kind", "builtin"), CASES)
def test_an_error_carries_its_location_and_its_kinds_template(
    call: Callable[[], Any], argument: str, loc: tuple[Any, ...], kind: str, builtin: type
) -> None:
    error = _raised(call)
    assert isinstance(error, ArgumentError) and isinstance(error, builtin)
    assert (error.argument, error.loc, error.kind) == (argument, loc, kind)
    assert isinstance(error, KINDS[kind].error)
    assert error.ctx is not None
    # The message is the kind's template, so a program can say it in its own words.
    rendered = KINDS[kind].template.format(
        where=errors.where(error.loc), argument=error.argument, **error.ctx
    )
    assert str(error) == rendered
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.loc, again.kind, again.ctx) == (
        type(error),
        str(error),
        error.loc,
        error.kind,
        error.ctx,
    )


@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    st.data(),
    st.sampled_from([-1, -(2**40), 2**63, "7", None, 1.5j]),
    st.sampled_from(["list", "tuple", "array"]),
)
def test_for_a_bad_item_i_the_loc_is_the_name_and_i(
    lengths: list[int], data: st.DataObject, bad: Any, container: str
) -> None:
    i = data.draw(st.integers(0, len(lengths) - 1))
    items: list[Any] = list(lengths)
    items[i] = bad
    if container == "array":
        if not isinstance(bad, int) or bad >= 2**63:
            return  # an int64 array holds only ints below 2**63
        value: Any = np.array(items, dtype=np.int64)
    else:
        value = items if container == "list" else tuple(items)
    for call, name in (
        (lambda: sb.karmarkar_karp(value, 1, False), "seqlen_list"),
        (lambda: sb.partition_ids(value, 1), "lengths"),
        (lambda: sb.plan_micro_batches(value, max_token_len=2**62), "lengths"),
    ):
        error = _raised(call)
        assert isinstance(error, ArgumentError), (error, name)
        assert error.argument == name and error.loc == (name, i), (error, name)
        assert error.input is bad or error.input == bad


def test_the_reference_raises_plain_builtins_with_the_same_messages() -> None:
    for args in (([3, -1], 2, False), ([1, 2], "2", False), ([1, 2**63], 2, False)):
        native = _raised(sb.karmarkar_karp, *args)
        plain = _raised(reference.karmarkar_karp, *args)
        assert type(plain) in (ValueError, TypeError, OverflowError)
        assert isinstance(native, type(plain)) and str(native) == str(plain)
    greedy = _raised(lambda: reference.greedy_partition([1, 2], 2, "nearly"))
    assert type(greedy) is ValueError


def test_every_kind_documents_itself_and_names_where() -> None:
    for name, kind in KINDS.items():
        # Where the refusal is: the located value, or the argument holding a missing field.
        assert kind.doc and ("{where}" in kind.template or "{argument}" in kind.template), name
    error = errors.argument_error("too_small", ("lengths", 3), -1, minimum=0, shown="-1")
    assert str(error) == "lengths[3] must be >= 0, got -1"
    assert (
        errors.where(("data", "coefficients", "per_token")) == "data['coefficients']['per_token']"
    )


def test_the_docs_list_every_kind_as_the_table_holds_it() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    for name, kind in KINDS.items():
        row = f"| `{name}` | `{kind.error.__name__}` | {kind.doc} | `{kind.template}` |"
        assert row in page, row


def _saved_cost() -> dict[str, Any]:
    batches = [[512] * k for k in range(1, 9)] + [[4096, 1024], [2048] * 3, [8192]]
    seconds = [1e-3 + sum(2e-7 * n + 1e-11 * n * n / 2 for n in b) for b in batches]
    saved: dict[str, Any] = sb.TimeCost.fit(batches, seconds).to_dict()
    return saved


def test_a_saved_costs_field_is_located_in_the_document() -> None:
    data = _saved_cost()
    data["coefficients"] = {**data["coefficients"], "per_token": "x"}
    error = _raised(sb.TimeCost.from_dict, data)
    assert isinstance(error, ArgumentError) and isinstance(error, ValueError)
    assert error.loc == ("data", "coefficients", "per_token") and error.kind == "not_allowed"
    assert str(error) == "data['coefficients']['per_token'] must be a number, got 'x' (str)"
    missing = _saved_cost()
    del missing["factor"]
    error = _raised(sb.TimeCost.from_dict, missing)
    assert (error.loc, error.kind) == (("data", "factor"), "missing_field")
    assert str(error) == "data has no 'factor' (a saved TimeCost has one)"


def test_the_command_line_names_a_saved_costs_field_as_the_file_holds_it(tmp_path, capsys) -> None:
    import json

    from seqbalance.__main__ import main

    data = _saved_cost()
    data["coefficients"] = {**data["coefficients"], "per_token": -1.0}
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(data))
    assert main(["plan", "--max-token-len", "65536", "--time-cost", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f'{path}: "coefficients"."per_token" must be finite and >= 0, got -1.0')
