"""The command line's failure paths and its streaming reader.

Every failure ends with one line on stderr and exit status 2 (130 for Ctrl-C); a closed pipe ends
quietly; the chunked parser reads exactly what a line-by-line ``int()`` would, chunk boundaries
anywhere; a ``.npy`` header is checked against the file before its data is read.
"""

from __future__ import annotations

import io
import json
import mmap
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbalance import cli
from seqbalance.cli import _common as cli_common
from seqbalance.cli import readers as _cli_io
from seqbalance.cli.readers import InputError, read_lengths
from tests.cli._cli_runs import CLI_TIMEOUT, assert_one_line_error, run

# ---------------------------------------------------------------- hostile files


def npy_with_header(path: Path, header: dict, payload: bytes) -> Path:
    with open(path, "wb") as stream:
        np.lib.format.write_array_header_1_0(stream, header)
        stream.write(payload)
    return path


def test_npy_header_claiming_10_to_the_12_items_is_one_line(tmp_path: Path):
    path = npy_with_header(
        tmp_path / "liar.npy",
        {"descr": "<i8", "fortran_order": False, "shape": (10**12,)},
        np.arange(4, dtype=np.int64).tobytes(),
    )
    assert_one_line_error(
        run("partition", str(path), "-k", "2"),
        "liar.npy: the header claims 1,000,000,000,000 items of int64",
        "the file holds 32 bytes after it",
    )


def test_npy_header_claiming_too_few_items_is_refused_too(tmp_path: Path):
    path = npy_with_header(
        tmp_path / "short.npy",
        {"descr": "<i8", "fortran_order": False, "shape": (2,)},
        np.arange(4, dtype=np.int64).tobytes(),
    )
    assert_one_line_error(run("partition", str(path), "-k", "2"), "claims 2 items")


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ({"descr": "|O", "fortran_order": False, "shape": (2,)}, "holds Python objects"),
        ({"descr": "<f8", "fortran_order": False, "shape": (2,)}, "must hold integers"),
        ({"descr": "<i8", "fortran_order": True, "shape": (1, 2)}, "must be 1-D"),
    ],
)
def test_npy_of_the_wrong_kind_is_one_line(tmp_path: Path, header, fragment):
    path = npy_with_header(tmp_path / "odd.npy", header, b"\0" * 16)
    assert_one_line_error(run("partition", str(path), "-k", "1"), fragment)


def mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory-mapped file (no copy of its data was made)."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = getattr(base, "base", None)
    return False


def test_npy_is_read_exactly_into_memory_of_its_own(tmp_path: Path):
    values = np.arange(1000, dtype=np.int64) * 7919 % 1000
    np.save(tmp_path / "ok.npy", values)
    loaded = read_lengths(str(tmp_path / "ok.npy"))
    # Not a view of a mapped file: one truncated under the reader would be SIGBUS.
    assert not mapped(loaded)
    assert np.array_equal(loaded, values)
    np.save(tmp_path / "big_endian.npy", values.astype(">u4"))
    assert np.array_equal(read_lengths(str(tmp_path / "big_endian.npy")), values)
    np.save(tmp_path / "negative.npy", np.array([3, -1]))
    with pytest.raises(InputError, match=r"negative.npy\[1\] must be >= 0, got -1"):
        read_lengths(str(tmp_path / "negative.npy"))


def test_deeply_nested_json_line_is_one_line(tmp_path: Path):
    path = tmp_path / "bomb.jsonl"
    depth = 200_000
    path.write_text('{"len": 3}\n{"len": ' + "[" * depth + "]" * depth + "}\n")
    assert_one_line_error(
        run("partition", str(path), "--field", "len", "-k", "1"),
        "bomb.jsonl:2: JSON nested too deeply",
    )
    path.write_text("[" * depth + "\n")
    assert_one_line_error(run("partition", str(path), "--field", "len", "-k", "1"), "bomb.jsonl:1:")


def test_a_line_longer_than_the_limit_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(_cli_io, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(_cli_io, "CHUNK_BYTES", 100)
    path = tmp_path / "long.txt"
    path.write_text("1\n2\n" + "3" * 5000 + "\n")
    with pytest.raises(InputError, match=r"long.txt:3: line longer than"):
        read_lengths(str(path))


def test_bench_absurd_size_is_refused_up_front():
    start = time.perf_counter()
    result = run("bench", "--sizes", "10000000000")
    assert_one_line_error(result, "argument --sizes: must be <= 16,777,216, got 10,000,000,000")
    assert time.perf_counter() - start < CLI_TIMEOUT
    assert_one_line_error(run("bench", "-k", "99999999999"), "argument -k: must be <=")
    assert_one_line_error(run("bench", "--repeat", "10**9"), "argument --repeat")


# ---------------------------------------------------------------- pipes, signals, memory


def test_a_closed_stdout_ends_quietly(tmp_path: Path):
    # Big enough that the JSON line cannot fit in the pipe's buffer: the write meets the
    # closed pipe.
    path = tmp_path / "many.txt"
    path.write_text("\n".join(str(1 + i % 977) for i in range(200_000)) + "\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "seqbalance", "partition", str(path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(10)  # like `| head -c 10`
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=CLI_TIMEOUT) == cli.EXIT_BROKEN_PIPE
    assert stderr == ""


def test_a_closed_stdout_through_a_shell_pipe_prints_nothing(tmp_path: Path):
    path = tmp_path / "many.txt"
    path.write_text("\n".join(str(1 + i % 977) for i in range(200_000)) + "\n")
    result = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m seqbalance partition "{path}" --json | head -c 5'],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert result.stdout == '{"sou'
    assert result.stderr == ""


#: The number of the read system call, where /proc/PID/syscall shows it.
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())


def _wait_until_reading_stdin(pid: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` is blocked reading its stdin (a read of file descriptor 0 in
    /proc/PID/syscall), past its imports however loaded the machine is (a fixed 0.5 s pause
    could land the signal before the command started). Where /proc does not say, 0.5 s."""
    reading = [_READ_SYSCALL, "0x0"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/syscall", encoding="ascii") as syscall:
                words = syscall.read().split()
        except OSError:
            words = None
        if _READ_SYSCALL is None or words is None:
            time.sleep(0.5)
            return
        if words[:2] == reading:
            return
        time.sleep(0.01)
    raise AssertionError(f"the command did not wait for stdin within {timeout} s")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_while_reading_ends_with_one_line_and_130():
    # The child says when its imports are done, so the signal lands inside the command.
    # SIGINT as a terminal delivers it, also when this suite runs in the background (`cmd &`,
    # nohup), where children inherit it ignored.
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from seqbalance import cli; sys.stderr.write('ready\\n'); "
        "sys.stderr.flush(); sys.exit(cli.main(['partition', '-']))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stderr is not None
    assert process.stderr.readline() == b"ready\n"
    process.stdin.write(b"1\n2\n3\n")
    process.stdin.flush()
    _wait_until_reading_stdin(process.pid)  # the command is waiting for the rest of stdin
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    assert process.returncode == cli.EXIT_INTERRUPTED
    assert stderr.decode().strip().splitlines() == ["seqbalance: interrupted"]


def test_running_out_of_memory_is_one_line(monkeypatch, capsys, tmp_path: Path):
    def exhausted(*args, **kwargs):
        raise MemoryError("cannot allocate 8000000000 bytes")

    monkeypatch.setattr(cli_common, "read_lengths", exhausted)
    assert cli.main(["partition", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "seqbalance partition: error: out of memory (cannot allocate 8000000000 bytes); "
        "try a smaller input"
    ]


def test_stdin_without_a_binary_buffer_still_works(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("5\n7\n"))
    assert cli.main(["partition", "-", "-k", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == [[1], [0]]


# ---------------------------------------------------------------- the chunked parser


def line_by_line(text: str) -> list[int] | str:
    """The rules of one integer a line, applied without chunks: the values, or the bad line."""
    values = []
    for number, line in enumerate(text.split("\n"), start=1):
        token = line.strip()
        if not token:
            continue
        try:
            value = int(token)
        except ValueError:
            return f":{number}: expected one integer per line"
        if value < 0:
            return f":{number}: lengths must be >= 0"
        if value > 2**63 - 1:
            return f":{number}: lengths must be <= 2**63 - 1"
        values.append(value)
    return values


TOKENS = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(0, 2**64).map(str),
    st.integers(0, 99).map(lambda v: f"000{v}"),
    st.integers(0, 99).map(lambda v: f"+{v}"),
    st.integers(1, 99).map(lambda v: f"-{v}"),
    st.sampled_from(["", " ", "\t", "1 2", "1_000", "x", "1.5", "٣"]),
)
LINE_ENDS = st.sampled_from(["\n", "\r\n", " \n", "\n\n"])


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.tuples(TOKENS, LINE_ENDS), max_size=60),
    chunk=st.integers(1, 64),
    last_newline=st.booleans(),
)
def test_property_chunked_parse_is_line_by_line_parse(tmp_path_factory, lines, chunk, last_newline):
    text = "".join(token + end for token, end in lines)
    if not last_newline:
        text = text.rstrip("\n")
    path = tmp_path_factory.mktemp("chunks") / "lengths.txt"
    path.write_bytes(text.encode())
    expected = line_by_line(text)
    original = _cli_io.CHUNK_BYTES
    _cli_io.CHUNK_BYTES = chunk
    try:
        if isinstance(expected, str) or not expected:
            with pytest.raises(InputError) as error:
                read_lengths(str(path))
            if isinstance(expected, str):
                assert f"lengths.txt{expected}" in str(error.value)
            else:
                assert "no lengths found" in str(error.value)
        else:
            values = read_lengths(str(path))
            assert values.dtype == np.int64 and values.tolist() == expected
    finally:
        _cli_io.CHUNK_BYTES = original


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50),
    chunk=st.integers(1, 64),
)
def test_property_chunked_jsonl_reads_every_record(tmp_path_factory, values, chunk):
    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    path.write_text("".join(json.dumps({"n": v, "pad": "é" * (v % 5)}) + "\n" for v in values))
    original = _cli_io.CHUNK_BYTES
    _cli_io.CHUNK_BYTES = chunk
    try:
        assert read_lengths(str(path), "n").tolist() == values
    finally:
        _cli_io.CHUNK_BYTES = original
