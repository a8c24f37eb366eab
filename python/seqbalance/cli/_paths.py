"""What a path on the command line is, before anything reads it: one accurate line when it is not
a regular file.

A directory, a device (``/dev/zero`` never ends, ``/dev/null`` holds nothing), a named pipe (it
blocks until something writes to it), a socket, a loop of symbolic links and a link to nothing are
each refused with their own message and exit status 2, before the file is opened. Streams are
read through ``-`` (standard input), where the readers bound every line.
"""

from __future__ import annotations

import errno
import stat
from pathlib import Path

__all__ = ["InputError", "check_is_file"]


class InputError(Exception):
    """A problem with the user's input, reported as one line and exit status 2."""


_STREAM_HINT = " (to read a stream, pass - and redirect it to standard input)"

# (test on st_mode, what the path is, whether reading it as a stream through - makes sense)
_NOT_FILES = (
    (stat.S_ISDIR, "a directory", False),
    (stat.S_ISFIFO, "a named pipe (FIFO)", True),
    (stat.S_ISCHR, "a character device", True),
    (stat.S_ISBLK, "a block device", True),
    (stat.S_ISSOCK, "a socket", True),
)


def check_is_file(path: Path, what: str = "a file of lengths") -> None:
    """Return when ``path`` is a regular file (through symbolic links), else raise InputError.

    ``what`` says what the file should have been, in the message (``"a file of lengths"``;
    the stream hint is given with that one only: other files are not read from a stream).

    Example:
        >>> check_is_file(Path("/dev/null"))
        Traceback (most recent call last):
        ...
        seqbalance.cli._paths.InputError: /dev/null: is a character device, not a file of lengths (to read a stream, pass - and redirect it to standard input)
    """
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{path}: a loop of symbolic links, no file at the end") from None
        if exc.errno == errno.ENOENT and path.is_symlink():
            raise InputError(f"{path}: a symbolic link to a missing file") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise InputError(f"{path}: no such file") from None
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return
    lengths = what == "a file of lengths"
    for test, kind, stream in _NOT_FILES:
        if test(mode):
            hint = _STREAM_HINT if stream and lengths else ""
            raise InputError(f"{path}: is {kind}, not {what}{hint}")
    raise InputError(f"{path}: is not a regular file, not {what}")
