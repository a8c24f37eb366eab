"""The command line renders a library `ArgumentError` from its location (``cli/_render``): the
flag that set the parameter, the line of the file that holds a sample."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqbalance.__main__ import main
from seqbalance.cli._render import FLAGS, render
from seqbalance.cli.main import build_parser
from seqbalance.errors import KINDS, argument_error


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _option_strings(sub)
    return found


def test_every_flag_of_the_table_is_a_flag_of_the_command_line() -> None:
    assert set(FLAGS.values()) <= _option_strings(build_parser())


@given(st.sampled_from(sorted(FLAGS)), st.integers(-(2**40), 0))
def test_a_scalar_is_named_by_its_flag(parameter: str, value: int) -> None:
    error = argument_error("too_small", parameter, value, minimum=1, shown=str(value))
    assert str(error) == f"{parameter} must be >= 1, got {value}"
    assert render(error, None) == f"{FLAGS[parameter]} must be >= 1, got {value}"


def test_a_sample_is_named_with_its_line_and_a_run_with_its_lines(tmp_path: Path) -> None:
    file = tmp_path / "lengths.txt"
    file.write_text("10\n\n20\n30\n\n40\n")  # blank lines hold no sample
    one = argument_error(
        "longer_than_cap",
        ("lengths", 2),
        30,
        shown=30,
        padding="",
        cap_argument="max_token_len",
        cap=25,
    )
    assert render(one, str(file)) == (
        f"lengths[2] = 30 is longer than --max-token-len (25) (line 4 of {file})"
    )
    assert render(one, None) == "lengths[2] = 30 is longer than --max-token-len (25)"
    run = argument_error(
        "group_over_cap",
        ("lengths", slice(2, 4)),
        [30, 40],
        group=1,
        shown=70,
        padding="",
        cap_argument="max_token_len",
        cap=50,
    )
    assert render(run, str(file)).endswith(f"(lines 4-6 of {file})")
    assert render(run, str(tmp_path / "x.npy")) == (
        "group 1 (lengths[2:4]) holds 70 tokens, more than --max-token-len (50)"
    )


def test_a_key_is_the_key_field_of_its_sample_and_an_unknown_place_is_left_alone() -> None:
    key = argument_error("not_self_equal", ("keys", 3), float("nan"), shown="nan (float)")
    assert render(key, None) == (
        "the --key-field of sample 3 is nan (float), which does not equal itself (a NaN): it "
        "cannot be matched with any other key or id"
    )
    assert (
        render(argument_error("too_small", "no_such_flag", 0, minimum=1, shown="0"), None) is None
    )


def test_every_kind_renders_from_its_own_fields() -> None:
    # The shell's templates use only the fields of the library's: a kind raised with the
    # library's fields always renders.
    for kind, entry in KINDS.items():
        fields = {
            name.split("}")[0].split("!")[0]
            for name in entry.template.split("{")[1:]
            if name.split("}")[0] not in ("where", "argument")
        }
        error = argument_error(kind, "dp_size", 0, **{name: "x" for name in fields})
        shown = render(error, None)
        assert shown is not None and "--dp" in shown, kind


@pytest.mark.parametrize(
    ("text", "cap", "fragment"),
    [
        ("100\n\n# not a length\n", "50", None),
        ("100\n\n300\n", "200", "lengths[1] = 300 is longer than --max-token-len (200) (line 3 of"),
    ],
)
def test_the_plan_verb_names_the_line(capsys, tmp_path: Path, text: str, cap: str, fragment):
    file = tmp_path / "lengths.txt"
    file.write_text(text)
    status = main(["plan", str(file), "--max-token-len", cap])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    if fragment is not None:
        assert fragment in err and str(file) in err
