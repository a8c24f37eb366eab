"""Paths that are not regular files each get their own one-line message and exit status 2
(issue 23: /dev/zero, /dev/null, a FIFO and a symlink loop were all "no such file")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cli._cli_runs import assert_main_one_line_error, assert_one_line_error, run

STREAM = "(to read a stream, pass - and redirect it to standard input)"


@pytest.mark.parametrize(
    ("device", "fragment"),
    [("/dev/zero", "is a character device"), ("/dev/null", "is a character device")],
)
def test_devices_are_refused_before_anything_is_read(device, fragment):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    # a child process: /dev/zero read blindly would never end
    result = run("partition", device, "-k", "2")
    assert_one_line_error(result, f"{device}: {fragment}, not a file of lengths", STREAM)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "lengths.fifo"
    os.mkfifo(fifo)
    result = run("partition", str(fifo), "-k", "2")  # opening it would wait for a writer
    assert_one_line_error(result, f"{fifo}: is a named pipe (FIFO), not a file of lengths", STREAM)


def test_a_loop_of_symbolic_links_is_named(capsys, tmp_path: Path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.symlink_to(b)
    b.symlink_to(a)
    assert_main_one_line_error(capsys, [str(a), "-k", "2"], f"{a}: a loop of symbolic links")


def test_a_link_to_nothing_and_a_missing_file_are_told_apart(capsys, tmp_path: Path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "gone.txt")
    assert_main_one_line_error(capsys, [str(link), "-k", "2"], "a symbolic link to a missing file")
    missing = tmp_path / "missing.txt"
    assert_main_one_line_error(capsys, [str(missing), "-k", "2"], f"{missing}: no such file")


def test_a_directory_says_so_without_the_stream_hint(capsys, tmp_path: Path):
    assert_main_one_line_error(capsys, [str(tmp_path), "-k", "2"], "is a directory, not a file")
    assert STREAM not in capsys.readouterr().err


def test_a_link_to_a_regular_file_is_read(capsys, tmp_path: Path):
    target = tmp_path / "lengths.txt"
    target.write_text("5\n3\n2\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    from seqbalance.__main__ import main

    assert main(["partition", str(link), "-k", "2", "--json"]) == 0


def test_a_json_number_of_5001_digits_names_file_and_line(capsys, tmp_path: Path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"n": 3}\n{"n": ' + "1" * 5001 + "}\n")
    digits = sys.get_int_max_str_digits()
    assert_main_one_line_error(
        capsys,
        [str(path), "--field", "n", "-k", "2"],
        f"{path}:2: a JSON number has more than {digits} digits",
    )


def test_field_without_a_file_is_refused(capsys):
    assert_main_one_line_error(
        capsys, ["--field", "x", "-k", "2"], "--field reads JSON Lines: give a FILE"
    )
