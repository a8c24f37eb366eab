"""Where the command line gets its lengths: files in three formats, or a built-in batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ._lengths import as_int64_array

__all__ = ["InputError", "read_lengths", "synthetic_rl_batch", "SYNTHETIC_DESCRIPTION"]

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


class InputError(Exception):
    """A problem with the user's input, reported as one line and exit status 2."""


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


def _read_text(path: Path, text: str) -> list[int]:
    values = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if not token:
            continue
        try:
            value = int(token)
        except ValueError:
            raise InputError(
                f"{path}:{line_number}: expected one integer per line, got {token[:40]!r}"
            ) from None
        if value < 0:
            raise InputError(f"{path}:{line_number}: lengths must be >= 0, got {value}")
        values.append(value)
    return values


def _read_jsonl(path: Path, text: str, field: str) -> list[int]:
    values = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{line_number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(
                f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}"
            )
        if field not in record:
            raise InputError(f"{path}:{line_number}: no field {field!r}")
        value = record[field]
        # A list (e.g. token ids) counts by its length; a number must be a whole one.
        if isinstance(value, list):
            value = len(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"{path}:{line_number}: field {field!r} must be an integer or a list, "
                f"got {json.dumps(value)[:40]}"
            )
        if value < 0:
            raise InputError(f"{path}:{line_number}: field {field!r} must be >= 0, got {value}")
        values.append(value)
    return values


def _read_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({exc})") from None
    try:
        return as_int64_array(array, name=str(path))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(str(exc)) from None


def _check_is_file(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file of lengths")
    if not path.is_file():
        raise InputError(f"{path}: no such file")


def read_lengths(file: str, field: str | None = None) -> np.ndarray:
    """Read lengths from ``file``: ``.npy``, JSON Lines (with ``field``), or one integer per line.

    ``-`` reads text (or JSON Lines with ``field``) from standard input. Raises
    :class:`InputError` with a one-line message naming the file and line.
    """
    path = Path(file)
    if file != "-" and path.suffix == ".npy":
        if field is not None:
            raise InputError(f"{path}: --field applies to JSON Lines files, not .npy")
        _check_is_file(path)
        values = _read_npy(path)
    else:
        try:
            if file == "-":
                text = sys.stdin.read()
            else:
                _check_is_file(path)
                text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a UTF-8 text file (use .npy for binary input)") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        if field is not None:
            numbers = _read_jsonl(path, text, field)
        elif path.suffix in (".jsonl", ".ndjson"):
            raise InputError(f"{path}: JSON Lines input needs --field NAME")
        else:
            numbers = _read_text(path, text)
        try:
            values = as_int64_array(numbers, name=str(path))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(str(exc)) from None
    if values.size == 0:
        raise InputError(f"{path}: no lengths found")
    return values
