"""Exception types shared by the native core, the reference and the planners."""

from __future__ import annotations

__all__ = ["PartitionError"]


class PartitionError(ValueError, AssertionError):
    """The request cannot be partitioned as asked (too few items, or counts that cannot be equal).

    It subclasses both `ValueError` (what new code should catch) and `AssertionError`
    (what code written against the pure-Python partitioners in RL trainers catches, since those
    signal the same conditions with ``assert``). Unlike an ``assert`` it survives ``python -O``.
    """
