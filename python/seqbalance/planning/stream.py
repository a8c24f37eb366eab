"""Packing a stream: lengths arrive one at a time and leave in packs, with few packs open at once.

The rule runs natively (``seqbalance._native._StreamCore``); this module checks the arguments,
maps keys to integer ids, keeps the calls of several threads apart, and pickles the packer.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Hashable
from typing import Any, Literal

import numpy as np

from .. import _native
from .._deprecation import renamed_attribute, renamed_params
from .._inputs import (
    MAX_VALUE,
    _describe,
    as_int64_array,
    check_choice,
    check_count_bound,
    check_flag,
    check_k_partitions,
    check_key,
    check_per_item,
    read_length,
)

__all__ = ["FOOTPRINTS", "StreamPacker"]

#: What `StreamPacker` can charge a pack against the cap.
FOOTPRINTS = ("sum", "padded")

Footprint = Literal["sum", "padded"]

# The native packer holds lengths and sums as unsigned 64-bit integers.
_CAP_MAX = 2**64 - 1
_STATE_VERSION = 1


def _check_footprint(footprint: Any) -> Footprint:
    return "padded" if check_choice(footprint, "footprint", FOOTPRINTS) == "padded" else "sum"


class StreamPacker:
    """Pack a stream of sequence lengths into packs of at most ``max_token_len``, as it arrives.

    Each accepted `add` gets the next index, counting from 0. The item goes to the open
    pack (of its key, when ``by_key=True``) with the least room left after placing it, room
    measured in the footprint, ties to the earliest opened pack. When no open pack can take it
    and ``max_open`` packs (of all keys) are open, the fullest open pack (least room, ties to the
    earliest opened) closes first; then a new pack opens with the item. A pack that reaches the
    cap or ``max_sequences`` closes at once. Closed packs are handed back by the call that
    closed them; `flush` closes the rest.

    Guarantees: every accepted index is in exactly one pack, no pack's footprint is above the
    cap nor its count above ``max_sequences``, packs never mix keys, and memory is bounded by
    the open packs whatever the stream's length. A refused call changes nothing. Each item costs
    a scan of the open packs (O(``max_open``)).

    Safe to share between threads: every method takes the packer's lock, so calls run one at a
    time. The packer pickles (and copies) mid-stream and goes on identically after loading.

    Args:
        max_token_len: the cap on a pack's footprint, an int from 1 to 2**64 - 1.
        max_open: the most packs open at once, an int from 1 to 2**24.
        max_sequences: the most items in one pack (an int >= 1), or None for no limit.
        footprint: ``"sum"`` (default: a pack is charged the sum of its lengths) or
            ``"padded"`` (its count times its longest length, as padded attention is).
        by_key: when True, every `add` names a key (any hashable except None and NaN,
            compared as dict keys are: ``1``, ``1.0`` and ``True`` are one key) and items of
            different keys never share a pack.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range (naming it and its value), an unknown footprint.

    Example:
        >>> packer = StreamPacker(10, max_open=2)
        >>> packer.add(6), packer.add(4)  # 6 + 4 fills the pack: it closes at once
        ([], [[0, 1]])
        >>> packer.add(7), packer.add(5), packer.add(9)  # no room for 9: the fullest pack closes
        ([], [], [[2]])
        >>> packer.flush()
        [[3], [4]]
    """

    @renamed_params(where="seqbalance.StreamPacker", pack_max_length="max_token_len")
    def __init__(
        self,
        max_token_len: int,
        *,
        max_open: int = 64,
        max_sequences: int | None = None,
        footprint: Footprint = "sum",
        by_key: bool = False,
    ) -> None:
        cap = check_k_partitions(max_token_len, "max_token_len")
        if cap > _CAP_MAX:
            raise ValueError(f"max_token_len must be <= 2**64 - 1, got {cap}")
        opened = check_count_bound(check_k_partitions(max_open, "max_open"), "max_open")
        most = None if max_sequences is None else check_k_partitions(max_sequences, "max_sequences")
        chosen = _check_footprint(footprint)
        keyed = check_flag(by_key, "by_key")
        self._cap = cap
        # The longest length an item may have: the cap, or the most any length reader takes.
        self._longest = min(cap, MAX_VALUE)
        self._max_open = opened
        self._max_sequences = most
        self._footprint: Footprint = chosen
        self._by_key = keyed
        # Every length is >= 1, so a pack never holds more than `cap` items: a larger limit is
        # no limit, and the native packer takes it as an unsigned 64-bit integer.
        native_most = None if most is None else min(most, cap)
        self._core = _native._StreamCore(cap, opened, native_most, chosen == "padded")
        # Key -> id, for the keys of open packs (and a few recent ones; see _prune).
        self._key_ids: dict[Hashable, int] = {}
        self._next_key_id = 0
        self._lock = threading.Lock()

    # -- settings ------------------------------------------------------------------------------

    @property
    def max_token_len(self) -> int:
        """The cap on a pack's footprint."""
        return self._cap

    @property
    def max_open(self) -> int:
        """The most packs open at once."""
        return self._max_open

    @property
    def max_sequences(self) -> int | None:
        """The most items in one pack, or None."""
        return self._max_sequences

    @property
    def footprint(self) -> Footprint:
        """``"sum"`` or ``"padded"``: what a pack is charged against the cap."""
        return self._footprint

    @property
    def by_key(self) -> bool:
        """Whether items carry keys that never share a pack."""
        return self._by_key

    # -- the stream ----------------------------------------------------------------------------

    def _check_length(self, length: Any) -> int:
        # Read as every length reader reads one (bools as 0/1, at most 2**63 - 1), so that
        # `add` and `add_many` take the same values.
        value = read_length(length, "length")
        if value == 0:
            raise ValueError("length must be >= 1, got 0")
        if value > self._cap:
            raise ValueError(f"length = {value} is longer than max_token_len ({self._cap})")
        return value

    def _key_id(self, key: Any, name: str, fresh: dict[Hashable, int]) -> int:
        """The id of ``key``; a key not seen yet gets the next free id, recorded in ``fresh``."""
        if not self._by_key:
            if key is not None:
                raise ValueError(f"{name} must be None when by_key=False, got {_describe(key)}")
            return 0
        if key is None:
            raise ValueError(f"{name} is required when by_key=True, got None")
        try:
            known = self._key_ids.get(key)
            if known is None:
                known = fresh.get(key)
        except TypeError:
            raise TypeError(f"{name} must be hashable, got {_describe(key)}") from None
        if known is None:
            check_key(key, name)
            known = self._next_key_id + len(fresh)
            fresh[key] = known
        return known

    def _commit_keys(self, fresh: dict[Hashable, int]) -> None:
        self._key_ids.update(fresh)
        self._next_key_id += len(fresh)
        # Only the keys of open packs matter; dropping the rest when the map has grown to twice
        # the most packs open keeps it bounded at an amortised O(1) per new key.
        if len(self._key_ids) > 2 * self._max_open + 8:
            live = set(self._core.open_keys())
            self._key_ids = {key: id_ for key, id_ in self._key_ids.items() if id_ in live}

    def add(self, length: int, key: Hashable = None) -> list[list[int]]:
        """Add one sequence; it gets the next index (the number of items accepted before it).

        Args:
            length: its length, an int from 1 to ``max_token_len`` and at most
                ``2**63 - 1``, read as every length reader reads lengths (a ``bool`` counts as
                0/1, NumPy integers by value), so `add` and `add_many` take the same values.
            key: with ``by_key=True``, its key (required, any hashable except None); otherwise
                leave it None.

        Returns:
            The packs this item closed, each a list of indexes in the order they were placed:
            none, the fullest pack it pushed out, its own pack when that filled at once, or both
            in that order.

        Raises:
            TypeError: a length that is not an integer, an unhashable key.
            ValueError: a length of 0 or above the cap (naming it), a missing or unexpected key,
                a key that does not equal itself (a NaN). Nothing changes.
            OverflowError: a length above ``2**63 - 1``.

        Example:
            >>> packer = StreamPacker(8, max_sequences=2)
            >>> packer.add(3), packer.add(3)
            ([], [[0, 1]])
        """
        # The common case (a plain int in range, no keys) skips the general checks: a stream
        # calls this once per sample.
        if type(length) is int and 0 < length <= self._longest and key is None and not self._by_key:
            with self._lock:
                return self._core.add(length, 0)
        value = self._check_length(length)
        with self._lock:
            fresh: dict[Hashable, int] = {}
            key_id = self._key_id(key, "key", fresh)
            closed = self._core.add(value, key_id)
            if fresh:
                self._commit_keys(fresh)
            return closed

    def add_many(self, lengths: Any, keys: Collection[Hashable] | None = None) -> list[list[int]]:
        """Add a batch of sequences natively: what the equivalent `add` calls would return,
        concatenated.

        Args:
            lengths: their lengths (ints or a 1-D integer array), each from 1 to the cap.
            keys: with ``by_key=True``, one key per length (required): a list, tuple or 1-D
                array (not an iterator, a generator or a set); otherwise None.

        Returns:
            The packs the batch closed, in the order they closed.

        Raises:
            TypeError, ValueError, OverflowError: bad lengths (naming the first one's position),
                keys missing, unexpected, unhashable, not a sequence, a NaN or of another count
                than the lengths. The whole batch is refused and nothing changes, also on
                ``KeyboardInterrupt`` or ``MemoryError``.

        Example:
            >>> StreamPacker(10).add_many([6, 5, 4, 5])
            [[0, 2], [1, 3]]
        """
        values = as_int64_array(lengths, "lengths")
        with self._lock:
            fresh: dict[Hashable, int] = {}
            if keys is None:
                if self._by_key:
                    raise ValueError("keys is required when by_key=True, got None")
                return self._core.add_many(values)
            if not self._by_key:
                raise ValueError(f"keys must be None when by_key=False, got {_describe(keys)}")
            check_per_item(keys, "keys", "hashables")
            # The count first: a sized collection is not copied when it is the wrong size.
            if len(keys) != values.size:
                raise ValueError(
                    f"keys has {len(keys)} items but lengths has {values.size}; "
                    "give one key per length"
                )
            key_list = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
            ids = np.fromiter(
                (self._key_id(key, f"keys[{i}]", fresh) for i, key in enumerate(key_list)),
                dtype=np.int64,
                count=len(key_list),
            )
            closed = self._core.add_many(values, ids)
            if fresh:
                self._commit_keys(fresh)
            return closed

    def flush(self) -> list[list[int]]:
        """Close every open pack and return them, in opening order; the stream can go on.

        Example:
            >>> packer = StreamPacker(10)
            >>> packer.add(4), packer.add(7), packer.flush(), packer.add(5)
            ([], [], [[0], [1]], [])
        """
        with self._lock:
            return self._core.flush()

    @property
    def open_packs(self) -> list[list[int]]:
        """The open packs' indexes, in opening order, without closing them (a copy)."""
        with self._lock:
            return self._core.open_packs()

    @property
    def items_added(self) -> int:
        """How many items were accepted so far (the index the next one gets)."""
        with self._lock:
            return self._core.next_index

    def __repr__(self) -> str:
        most = "" if self._max_sequences is None else f", max_sequences={self._max_sequences}"
        return (
            f"StreamPacker({self._cap}, max_open={self._max_open}{most}, "
            f"footprint={self._footprint!r}, by_key={self._by_key}; "
            f"{self._core.open_count} open, {self._core.next_index} added)"
        )

    # -- pickling ------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": _STATE_VERSION,
                "settings": (
                    self._cap,
                    self._max_open,
                    self._max_sequences,
                    self._footprint,
                    self._by_key,
                ),
                "core": self._core.state(),
                "keys": list(self._key_ids.items()),
                "next_key_id": self._next_key_id,
            }

    def __setstate__(self, state: Any) -> None:
        loaded = _loaded(state)
        # A refused state raised above and changed nothing; a live packer (``__setstate__``
        # called on it directly) keeps its own lock, which other threads may be waiting on.
        lock = self.__dict__.get("_lock")
        if lock is None:
            self.__dict__.update(loaded.__dict__)
            return
        with lock:
            self.__dict__.update({k: v for k, v in loaded.__dict__.items() if k != "_lock"})


renamed_attribute(StreamPacker, "pack_max_length", "max_token_len")

_STATE_ERROR = "not a StreamPacker state: "


def _loaded(state: Any) -> StreamPacker:
    """A new packer that goes on from ``state`` (what `StreamPacker.__getstate__` returns)."""
    try:
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"an unknown version {_describe(state)}")
        cap, max_open, max_sequences, footprint, by_key = state["settings"]
        packer = StreamPacker(
            cap, max_open=max_open, max_sequences=max_sequences, footprint=footprint, by_key=by_key
        )
        core_state = tuple(state["core"])
        if core_state[:4] != packer._core.state()[:4]:
            raise ValueError("its core's settings differ from the packer's")
        core = _native._StreamCore.from_state(*core_state)
        next_key_id = state["next_key_id"]
        key_ids = dict(state["keys"])
        if not isinstance(next_key_id, int) or next_key_id < 0:
            raise ValueError("a bad next key id")
        ids = list(key_ids.values())
        if any(not isinstance(i, int) or not 0 <= i < next_key_id for i in ids):
            raise ValueError("a key id out of range")
        if len(set(ids)) != len(ids):
            raise ValueError("two keys with one id")
        if by_key and not set(core.open_keys()) <= set(ids):
            raise ValueError("an open pack with a key id that no key has")
        if not by_key and (ids or any(core.open_keys())):
            raise ValueError("keys in a packer without by_key")
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as error:
        # The native checks already say what they refuse with the same words in front.
        reason = str(error).removeprefix(_STATE_ERROR)
        raise ValueError(f"{_STATE_ERROR}{reason}") from None
    packer._core = core
    packer._key_ids = key_ids
    packer._next_key_id = next_key_id
    return packer
