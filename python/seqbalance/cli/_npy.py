"""Reading a ``.npy`` file of lengths for the command line: its header checked against the file's
size first, then the data read a chunk at a time into an array of its own (not memory-mapped: a
file truncated under a memory map kills the process with SIGBUS)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from .._inputs import as_int64_array
from ._paths import InputError

#: Bytes read at a time (the text readers' chunk size).
CHUNK_BYTES = 4 << 20


def read_npy(path: Path) -> np.ndarray:
    """Read a ``.npy`` file of lengths once its header agrees with the file's size.

    The data is read with plain buffered reads into one array of the file's dtype, never
    memory-mapped: a mapped file that is truncated while it is read kills the process with
    SIGBUS, where a short read is an `InputError` like any other bad file.
    """
    fmt = np.lib.format
    try:
        size = path.stat().st_size
        with open(path, "rb") as stream:
            version = fmt.read_magic(stream)
            if version == (1, 0):
                shape, fortran_order, dtype = fmt.read_array_header_1_0(stream)
            elif version in ((2, 0), (3, 0)):
                shape, fortran_order, dtype = fmt.read_array_header_2_0(stream)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            offset = stream.tell()
            if dtype.hasobject:
                raise InputError(
                    f"{path}: holds Python objects (dtype {dtype}); save an integer array"
                )
            count = 1
            for extent in shape:
                count *= extent
            expected = count * dtype.itemsize
            if expected != size - offset:
                raise InputError(
                    f"{path}: the header claims {count:,} items of {dtype} ({expected:,} bytes) "
                    f"but the file holds {size - offset:,} bytes after it"
                )
            if count == 0 or len(shape) != 1 or dtype.kind not in "biu":
                # Nothing lengths could be made of: the checks below say why, reading nothing
                # (a view of one zero in the file's shape and dtype, no memory per item).
                array = np.broadcast_to(np.zeros((), dtype=dtype), shape)
            else:
                array = _read_npy_data(stream, path, count, dtype)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({exc})") from None
    try:
        return as_int64_array(array, name=str(path))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(str(exc)) from None


def _read_npy_data(
    stream: io.BufferedReader, path: Path, count: int, dtype: np.dtype[Any]
) -> np.ndarray:
    """The ``count`` items of ``dtype`` after the header, read a chunk at a time into one array.

    Raises `InputError` when the file ends early or holds more than that: it changed
    after its header was checked against its size.
    """
    array = np.empty(count, dtype=dtype)
    memory = array.data.cast("B")
    done = 0
    while done < len(memory):
        read = stream.readinto(memory[done : done + CHUNK_BYTES])
        if not read:
            raise InputError(
                f"{path}: the file changed while it was read: it ended after "
                f"{done:,} of {len(memory):,} data bytes"
            )
        done += read
    if stream.read(1):
        raise InputError(f"{path}: the file changed while it was read: it grew past its header")
    return array
