"""Where the command line gets its lengths: files in three formats, or a built-in batch.

Input is streamed: a text or JSON Lines file is read a chunk at a time and each chunk becomes an
int64 array before the next is read (no Python object per line survives its chunk); a ``.npy``
file is read (with plain reads, not memory-mapped: a mapped file truncated under the reader would
kill it with SIGBUS) after its header has been checked against the file's size. Peak memory stays
a small multiple of 8 bytes per length. Every problem is an `InputError` with a one-line
message naming the file and, for text, the line.
"""

from __future__ import annotations

import codecs
import ctypes
import io
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from .._inputs import MAX_VALUE
from ._npy import read_npy
from ._numbers import float_token, not_an_integer, values_array
from ._paths import InputError, check_is_file

__all__ = [
    "CHUNK_BYTES",
    "InputError",
    "MAX_LINE_BYTES",
    "SYNTHETIC_DESCRIPTION",
    "read_grouped_lengths",
    "read_lengths",
    "synthetic_rl_batch",
]

#: Shape of the built-in batch: GRPO-style, 512 prompts with 16 sampled responses each.
SYNTHETIC_PROMPTS = 512
SYNTHETIC_SAMPLES_PER_PROMPT = 16
SYNTHETIC_SEED = 20240601
SYNTHETIC_MAX_LENGTH = 16384
SYNTHETIC_DESCRIPTION = (
    f"built-in synthetic RL batch: {SYNTHETIC_PROMPTS * SYNTHETIC_SAMPLES_PER_PROMPT:,} "
    f"response lengths, {SYNTHETIC_PROMPTS} prompts x {SYNTHETIC_SAMPLES_PER_PROMPT} samples, "
    f"heavy-tailed, capped at {SYNTHETIC_MAX_LENGTH:,}"
)

#: Bytes read at a time from a text or JSON Lines file. Parsing a chunk of digits makes a few
#: int64 arrays of its size, so this bounds the reader's own memory at a few tens of MB.
CHUNK_BYTES = 4 << 20

#: The longest line accepted (a JSON record with a long token list is still far below this); a
#: longer one is refused rather than accumulated without end.
MAX_LINE_BYTES = 64 << 20

# Digits at most in a token the vectorised parser accepts: 10**18 - 1 < 2**63 - 1, so no check
# for overflow is needed; longer tokens (rare) take the line-by-line path, which checks.
_FAST_DIGITS = 18

# Byte classes for the vectorised parser: 1 a digit, 2 whitespace, 0 anything else.
_BYTE_CLASS = np.zeros(256, dtype=np.uint8)
_BYTE_CLASS[ord("0") : ord("9") + 1] = 1
_BYTE_CLASS[[ord(c) for c in " \t\r\n\v\f"]] = 2


def synthetic_rl_batch(
    n_prompts: int = SYNTHETIC_PROMPTS,
    samples_per_prompt: int = SYNTHETIC_SAMPLES_PER_PROMPT,
    seed: int = SYNTHETIC_SEED,
) -> np.ndarray:
    """Response lengths like an RL rollout: heavy-tailed, correlated within a prompt, truncated.

    Each prompt draws a typical length (log-normal, so a few prompts need far longer answers);
    its responses scatter around it, and the longest ones hit the generation limit. Samples of
    one prompt are consecutive, as trainers lay them out.
    """
    rng = np.random.default_rng(seed)
    typical = rng.lognormal(mean=6.3, sigma=0.9, size=n_prompts)
    scatter = rng.lognormal(mean=0.0, sigma=0.6, size=(n_prompts, samples_per_prompt))
    lengths = np.rint(typical[:, None] * scatter).astype(np.int64)
    return np.clip(lengths, 8, SYNTHETIC_MAX_LENGTH).reshape(-1)


# ---------------------------------------------------------------------------- chunks of lines


def _chunks(stream: IO[bytes], path: Path) -> Iterator[tuple[int, bytes]]:
    """``(number of the chunk's first line, chunk)``; every chunk ends at a line end (or EOF)."""
    line = 1
    carry = b""
    while True:
        block = stream.read(CHUNK_BYTES)
        if not block:
            break
        data = carry + block if carry else block
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) > MAX_LINE_BYTES:
                raise InputError(f"{path}:{line}: line longer than {MAX_LINE_BYTES >> 20} MiB")
            carry = data
            continue
        chunk, carry = data[:cut], data[cut:]
        yield line, chunk
        line += chunk.count(b"\n")
    if carry:
        yield line, carry


_BINARY_HINT = " (use .npy for binary input)"


def _decode(chunk: bytes, path: Path, hint: str = _BINARY_HINT) -> str:
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file{hint}") from None


# ---------------------------------------------------------------------------- one integer a line


def _parse_digits(chunk: bytes) -> np.ndarray | None:
    """The integers of a chunk of plain decimal lines, or None when anything else is in it.

    Vectorised, since a Python int per line is what made large files slow: only digits and
    whitespace, at most one token per line, at most ``_FAST_DIGITS`` digits per token. Anything
    else (signs, underscores, long tokens, two numbers on a line) returns None, and the caller
    parses the chunk line by line with Python's rules and messages.
    """
    raw = np.frombuffer(chunk, dtype=np.uint8)
    kind = _BYTE_CLASS[raw]
    if not kind.all():
        return None
    digit = (kind == 1).view(np.int8)
    edges = np.diff(digit, prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    if starts.size == 0:
        return np.empty(0, dtype=np.int64)
    # One token a line: the number of newlines before each token must grow from token to token.
    line_of = np.searchsorted(np.flatnonzero(raw == 10), starts)
    if np.any(line_of[1:] == line_of[:-1]):
        return None
    widths = ends - starts
    longest = int(widths.max())
    if longest > _FAST_DIGITS:
        return None
    last = raw.size - 1
    values = np.zeros(starts.size, dtype=np.int64)
    for place in range(longest):
        # Tokens that still have a digit at this place shift left one decimal and add it; the
        # others keep their value (the byte read for them is masked out).
        digits = raw[np.minimum(starts + place, last)].astype(np.int64) - ord("0")
        values = np.where(widths > place, values * 10 + digits, values)
    return values


def _parse_text_lines(
    chunk: bytes, first_line: int, path: Path, floats: bool = False
) -> np.ndarray:
    """Line by line, with Python's ``int`` rules (``floats``: also ``float``'s, for costs);
    the first bad line is the error."""
    values: list[int | float] = []
    for offset, line in enumerate(_decode(chunk, path).split("\n")):
        token = line.strip()
        if not token:
            continue
        where = f"{path}:{first_line + offset}"
        try:
            value: int | float = int(token)
        except ValueError:
            value = float_token(token, where) if floats else not_an_integer(token, where)
        if value < 0:
            raise InputError(f"{where}: lengths must be >= 0, got {value}")
        if value > MAX_VALUE:
            raise InputError(f"{where}: lengths must be <= 2**63 - 1, got {value}")
        values.append(value)
    return values_array(values)


def _read_text(stream: IO[bytes], path: Path, floats: bool = False) -> np.ndarray:
    parts = []
    for first_line, chunk in _chunks(stream, path):
        values = _parse_digits(chunk)
        if values is None:
            values = _parse_text_lines(chunk, first_line, path, floats)
        parts.append(values)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


# ---------------------------------------------------------------------------- JSON Lines


def _json_record(line: str, where: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError:  # an integer past Python's digit limit for str -> int conversion
        raise InputError(
            f"{where}: a JSON number has more than {sys.get_int_max_str_digits()} digits"
        ) from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def _json_value(line: str, where: str, field: str, floats: bool = False) -> int | float:
    return _json_length(_json_record(line, where), where, field, floats)


def _json_uid(record: dict[str, Any], where: str, uid_field: str, flag: str = "--uid-field") -> Any:
    """The scalar id in ``uid_field`` of a record (a group id, or with ``--key-field`` a key)."""
    if uid_field not in record:
        raise InputError(f"{where}: no field {uid_field!r} ({flag})")
    uid = record[uid_field]
    if isinstance(uid, (list, dict)):
        raise InputError(
            f"{where}: field {uid_field!r} must be a string or a number ({flag}), "
            f"got a JSON {'array' if isinstance(uid, list) else 'object'}"
        )
    if isinstance(uid, float) and uid != uid:
        # Python's JSON reader takes NaN; a NaN equals nothing, so it could not be matched.
        raise InputError(f"{where}: field {uid_field!r} is NaN ({flag}), which matches nothing")
    return uid


def _json_length(
    record: dict[str, Any], where: str, field: str, floats: bool = False
) -> int | float:
    """The field's length: an integer, a list counted by its length, or (``floats``) a float
    cost; planning (``floats`` false) needs whole token counts."""
    if field not in record:
        raise InputError(f"{where}: no field {field!r}")
    value = record[field]
    # A list (e.g. token ids) counts by its length; a number must be a whole one.
    if isinstance(value, list):
        value = len(value)
    if isinstance(value, float):
        if not floats:
            raise InputError(
                f"{where}: field {field!r} must be a whole number of tokens to plan "
                f"micro-batches, got {value!r} (float costs: seqbalance partition)"
            )
        if not math.isfinite(value):
            raise InputError(f"{where}: field {field!r} must be finite, got {value!r}")
        if value < 0:
            raise InputError(f"{where}: field {field!r} must be >= 0, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            shown = json.dumps(value)[:40]
        except (ValueError, RecursionError):
            shown = type(value).__name__
        kinds = "a number or a list" if floats else "an integer or a list"
        raise InputError(f"{where}: field {field!r} must be {kinds}, got {shown}")
    if value < 0:
        raise InputError(f"{where}: field {field!r} must be >= 0, got {value}")
    if value > MAX_VALUE:
        raise InputError(f"{where}: field {field!r} must be <= 2**63 - 1, got {value}")
    return value


def _read_jsonl_groups(
    stream: IO[bytes],
    path: Path,
    field: str,
    uid_field: str | None,
    key_field: str | None,
    floats: bool = False,
) -> tuple[np.ndarray, list[Any] | None, list[Any] | None]:
    """Lengths (as `_read_jsonl`) and every record's group id and key, in file order."""
    parts = []
    uids: list[Any] | None = [] if uid_field is not None else None
    keys: list[Any] | None = [] if key_field is not None else None
    for first_line, chunk in _chunks(stream, path):
        values: list[int | float] = []
        for offset, line in enumerate(_decode(chunk, path).split("\n")):
            if line.strip():
                where = f"{path}:{first_line + offset}"
                record = _json_record(line, where)
                values.append(_json_length(record, where, field, floats))
                if uids is not None and uid_field is not None:
                    uids.append(_json_uid(record, where, uid_field))
                if keys is not None and key_field is not None:
                    keys.append(_json_uid(record, where, key_field, "--key-field"))
        parts.append(values_array(values))
    return (np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)), uids, keys


def _read_jsonl(stream: IO[bytes], path: Path, field: str, floats: bool = False) -> np.ndarray:
    parts = []
    for first_line, chunk in _chunks(stream, path):
        values = [
            _json_value(line, f"{path}:{first_line + offset}", field, floats)
            for offset, line in enumerate(_decode(chunk, path).split("\n"))
            if line.strip()
        ]
        parts.append(values_array(values))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def read_model_config(file: str) -> dict[str, Any]:
    """A Hugging Face ``config.json`` (``--model-config``) as a dict, or a one-line InputError."""
    path = Path(file)
    check_is_file(path, "a model config file (config.json)")
    try:
        with open(path, "rb") as stream:
            # A config is a few kilobytes; one far larger is not a config.
            raw = stream.read(MAX_LINE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_LINE_BYTES:
        raise InputError(f"{path}: too large for a model config")
    # JSON text is UTF-8 (RFC 8259), as Hugging Face writes and reads config.json.
    # UTF-16 text (with a byte-order mark, or ASCII with a NUL byte after each character) is
    # named as such: a NUL byte is valid UTF-8, and the JSON error alone would not say why.
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in raw[:4]:
        raise InputError(f"{path}: UTF-16 text; a model config is UTF-8 JSON (save it as UTF-8)")
    config = _json_record(_decode(raw, path, " (a model config is UTF-8 JSON)"), str(path))
    return config


def line_of_item(file: str, index: int) -> int | None:
    """The line (from 1) that holds the ``index``-th length of a text or JSON Lines ``file``.

    Blank lines hold no length, as the readers skip them. None for standard input, ``.npy``
    files (whose items have no line) and a file that can no longer be read: an error message
    then names the index alone.
    """
    if file == "-" or Path(file).suffix == ".npy" or index < 0:
        return None
    seen = 0
    try:
        with open(file, "rb") as stream:
            for number, line in enumerate(stream, start=1):
                if line.strip():
                    if seen == index:
                        return number
                    seen += 1
    except OSError:
        return None
    return None


def read_lengths(file: str, field: str | None = None, floats: bool = False) -> np.ndarray:
    """Read lengths from ``file``: ``.npy``, JSON Lines (with ``field``), or one integer per line.

    ``-`` reads text (or JSON Lines with ``field``) from standard input. Returns a 1-D int64
    array; with ``floats``, a text or JSON Lines file may hold float costs (``12.5``), and then
    the array is float64. Raises `InputError` with a one-line message naming the file and line.
    """
    path = Path(file)
    if file != "-" and path.suffix == ".npy":
        if field is not None:
            raise InputError(f"{path}: --field applies to JSON Lines files, not .npy")
        check_is_file(path)
        values = read_npy(path)
    else:
        if field is None and path.suffix in (".jsonl", ".ndjson"):
            raise InputError(f"{path}: JSON Lines input needs --field NAME")
        values = _read_text_input(file, lambda stream: _read_stream(stream, path, field, floats))
    if values.size == 0:
        raise InputError(f"{path}: no lengths found")
    return values


def read_grouped_lengths(
    file: str,
    field: str,
    uid_field: str | None,
    key_field: str | None = None,
    floats: bool = False,
) -> tuple[np.ndarray, list[Any] | None, list[Any] | None]:
    """Lengths, group ids and keys from a JSON Lines ``file`` (``-``: stdin): ``field`` holds
    each record's length (or a list counted by its length), ``uid_field`` its group id and
    ``key_field`` its key (each ``None`` when not asked for); ``floats`` as in `read_lengths`.

    Consecutive records with equal ids form one group. Raises `InputError` (one line,
    naming the file and line) for a ``.npy`` file, a missing field or a non-scalar id or key.
    """
    path = Path(file)
    if file != "-" and path.suffix == ".npy":
        flag = "--uid-field" if uid_field is not None else "--key-field"
        raise InputError(f"{path}: {flag} reads JSON Lines, not .npy")
    values, uids, keys = _read_text_input(
        file, lambda stream: _read_jsonl_groups(stream, path, field, uid_field, key_field, floats)
    )
    if values.size == 0:
        raise InputError(f"{path}: no lengths found")
    return values, uids, keys


_Read = TypeVar("_Read")


def _read_text_input(
    file: str, read: Callable[[IO[bytes]], _Read], what: str = "a file of lengths"
) -> _Read:
    """``read`` applied to ``file`` opened for binary reading, or to stdin for ``-`` (``what``:
    what the file should be, as a message about something else there names it)."""
    path = Path(file)
    try:
        if file == "-":
            result = read(_stdin_bytes())
        else:
            check_is_file(path, what)
            with open(path, "rb") as stream:
                result = read(stream)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    _return_freed_memory()
    return result


def _return_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; else nothing).

    A streamed read frees hundreds of chunk-sized arrays, and glibc keeps the ones that fell
    below its adaptive mmap threshold in its heap: after a 100 MB text file, 130 MB stayed
    resident, on top of which the partitioner then added its own peak. Trimming once after the
    read returns them; it costs milliseconds.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # not glibc (macOS, musl, Windows)
        return
    trim(0)


def _stdin_bytes() -> IO[bytes]:
    """Standard input as bytes (a replaced ``sys.stdin`` may be text only, as in tests)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer
    return io.BytesIO(sys.stdin.read().encode("utf-8"))


def _read_stream(
    stream: IO[bytes], path: Path, field: str | None, floats: bool = False
) -> np.ndarray:
    if field is not None:
        return _read_jsonl(stream, path, field, floats)
    return _read_text(stream, path, floats)
