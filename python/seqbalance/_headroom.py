"""Refuse to import under an address-space limit too tight for the native module to load.

The native module allocates through mimalloc, which takes address space from the system in
large aligned arenas (mapping more than it keeps to find an aligned one). When the first segment cannot be mapped, Rust's allocation failure handler aborts the
process; no Python exception can be raised from there. Under a finite ``RLIMIT_AS``
(``ulimit -v``, some containers) this module therefore maps, and at once unmaps, as much
address space as the native module's import can need, before it is imported: if that fails,
the import is a ``MemoryError`` that says so.

Under such a limit mimalloc's default arena reservation (1 GiB of address space at a time)
cannot be mapped, and the sizes it falls back to depend on how much is left, sometimes leaving
too little for the rest of the import: this module then sets ``MIMALLOC_ARENA_RESERVE`` (read
when the native module loads; a value the user set wins) to a size the probe covers. The limit
and the variable both pass to child processes. Without a limit it does nothing.
"""

from __future__ import annotations

import mmap
import os

try:
    import resource
except ImportError:  # not a POSIX system: no RLIMIT_AS
    resource = None  # type: ignore[assignment]

__all__ = ["ARENA_RESERVE_UNDER_A_LIMIT", "IMPORT_HEADROOM", "check_import_headroom"]

#: mimalloc's arena reservation under a finite ``RLIMIT_AS``, unless ``MIMALLOC_ARENA_RESERVE`` is set.
ARENA_RESERVE_UNDER_A_LIMIT = "32MiB"

#: Address space the native module's import and first calls may need: two of mimalloc's 32 MiB
#: arenas, the extension's own mapping and objects (a few MiB), and a margin for other builds and
#: Pythons. Measured on Linux x86_64, CPython 3.11: with the arena bounded, limits leaving
#: 70-74 MiB free still ran out of memory right after the import (one of them in Rust, an abort).
IMPORT_HEADROOM = 80 * 2**20


def check_import_headroom() -> None:
    """Raise ``MemoryError`` if the address-space limit leaves less than `IMPORT_HEADROOM`
    (and, under a limit, bound mimalloc's arena reservation first).

    Raises:
        MemoryError: the address space left under ``RLIMIT_AS`` is too small to import the
            native module (it would otherwise abort the process).

    Example:
        >>> check_import_headroom()  # no limit, or room enough: nothing happens
    """
    if resource is None:
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return
    os.environ.setdefault("MIMALLOC_ARENA_RESERVE", ARENA_RESERVE_UNDER_A_LIMIT)
    try:
        # Anonymous and private: address space only, no page is touched.
        probe = mmap.mmap(-1, IMPORT_HEADROOM, flags=mmap.MAP_PRIVATE)
    except OSError:
        raise MemoryError(
            f"seqbalance needs about {IMPORT_HEADROOM >> 20} MiB of free address space to load "
            f"its native module; the address-space limit (RLIMIT_AS = {soft} bytes, "
            "ulimit -v) leaves less"
        ) from None
    probe.close()


check_import_headroom()
