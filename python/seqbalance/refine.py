"""Refinement of a partition: exchange items between partitions to lower the heaviest load.

The largest differencing method (what `seqbalance.get_seqlen_balanced_partitions` computes)
is fast and close to balanced, but with ``equal_size=True`` and few items per partition its
heaviest partition often ends up several percent above the best possible. The native engine
(``rust/core/src/refine/``) starts from such an answer and improves it:

* ``refine=True``: local search. Pairs of partitions exchange up to two items each way (plain
  moves too when counts are free) whenever that brings the pair closer together; the maximum load
  never grows. Work is bounded by a budget proportional to the number of items, so the answer is
  deterministic and the cost stays a small multiple of the partitioning itself.
* ``refine="exact"``: the local answer, then for at most 32 items a complete branch and bound
  under a node budget; when that budget runs out, the best answer found so far is kept.

Guarantees, for every input: the maximum load is never above the given partition's; with
``equal_size`` every partition keeps its item count (as a multiset: partitions are reordered); no
partition is emptied; every index appears exactly once; partitions come heaviest first (equal
loads: the one with the smaller smallest index first) with indexes ascending inside; the output
depends only on the input.
"""

from __future__ import annotations

import logging
from itertools import islice
from typing import Any

import numpy as np

from ._deprecation import renamed_params
from ._inputs import Weights, check_choice, check_equal_size, check_refine, normalize_weights
from ._native import _refine, _refine_ids

__all__ = ["SEARCHES", "apply_refine_ids", "check_refine", "refine_partitions"]

logger = logging.getLogger(__name__)


def apply_refine_ids(
    weights: Weights,
    ids: np.ndarray,
    k_partitions: int,
    equal_size: bool,
    refine: bool | str,
    *,
    as_ids: bool = False,
) -> list[list[int]] | np.ndarray:
    """Refine the partition given as a partition number per item (internal: the partitioners).

    ``weights`` come from `seqbalance._inputs.normalize_weights`, ``ids`` what `seqbalance.partition_ids`
    returns for them (numbers in ``range(k_partitions)``) and ``refine`` a true value from
    `check_refine`. Returns the refined partitions as `refine_partitions` does, or with
    ``as_ids`` their numbers per item (an ``int64`` array, partitions numbered heaviest first).
    Passing arrays both ways skips a Python list per partition on the way in and, for
    ``as_ids``, on the way out.
    """
    return _refine_ids(
        np.ascontiguousarray(weights.values),
        np.ascontiguousarray(ids, dtype=np.int64),
        int(k_partitions),
        bool(equal_size),
        refine == "exact",
        as_ids,
    )


# Every index appears exactly once and no partition is empty, so neither the number of partitions
# nor the length of one can exceed the number of items.
_BOUND_REASON = " (there are only len(lengths) items, each in exactly one partition)"


def _finite(items: Any, limit: int, name: str) -> Any:
    """``items`` itself when it is certainly finite, else its first items, at most ``limit``.

    Lists, tuples and arrays pass unchanged. Any other iterable (a generator, perhaps an endless
    one) is read into a list, and a ``ValueError`` is raised as soon as it yields more than
    ``limit`` items, instead of reading on until memory runs out.
    """
    if type(items) in (list, tuple) or isinstance(items, np.ndarray):
        return items
    try:
        iterator = iter(items)
    except TypeError:
        return items  # not iterable: the engine names it in its TypeError
    head = list(islice(iterator, limit + 1))
    if len(head) > limit:
        raise ValueError(f"{name} yields more than {limit} items{_BOUND_REASON}")
    return head


def _finite_partitions(partitions: Any, n_items: int) -> Any:
    outer = _finite(partitions, n_items, "partitions")
    if type(outer) in (list, tuple) and not all(
        type(part) in (list, tuple) or isinstance(part, np.ndarray) for part in outer
    ):
        outer = [_finite(part, n_items, f"partitions[{p}]") for p, part in enumerate(outer)]
    return outer


#: `refine_partitions`' ``search``: the local search, the exact one, or none (validate only).
SEARCHES = ("local", "exact", "none")


def _search_of_refine(refine: Any) -> str:
    """The ``search`` a retired ``refine_partitions(refine=)`` meant."""
    mode = check_refine(refine)
    return "exact" if mode == "exact" else "local" if mode else "none"


@renamed_params(
    seqlen_list="lengths",
    refine="search",
    convert={"refine": _search_of_refine},
    notes={
        "refine": '`refine=True` is `search="local"`, `"exact"` is `"exact"`, `False` is `"none"`'
    },
)
def refine_partitions(
    lengths: Any,
    partitions: Any,
    *,
    equal_size: bool | str = False,
    search: str = "local",
) -> list[list[int]]:
    """Improve a partition of ``lengths`` so its heaviest partition is lighter.

    Args:
        lengths: the item lengths, as accepted by
            `seqbalance.get_seqlen_balanced_partitions` (list, tuple or 1-D integer array).
        partitions: a list of lists of indexes into ``lengths``, every index exactly once, no
            partition empty (for example the output of ``get_seqlen_balanced_partitions``).
        equal_size: ``True`` or ``"nearly"``: keep every partition's item count (only swaps);
            ``False``: items may also move. Strict as in the partitioners (a ``TypeError`` for
            anything but a bool, 0/1 or ``"nearly"``).
        search: ``"local"`` for the local search, ``"exact"`` for the exact search on small
            inputs (at most 32 items), ``"none"`` to only validate and put the partitions in the
            output order below. (``refine=True``/``"exact"``/``False``, its spelling before 0.3,
            is a deprecated alias: ``refine`` means the partitioners' switch everywhere else.)

    Returns:
        ``len(partitions)`` lists of indexes, ascending inside, heaviest partition first (equal
        loads: smaller smallest index first). Its maximum load is never above the input's.

    Raises:
        TypeError / ValueError / OverflowError: bad ``lengths`` (as the partitioners),
            a ``search`` other than ``"local"``, ``"exact"``, ``"none"``, or ``partitions`` that are
            not lists of ints covering every index exactly once with no partition empty.
            Partitions may be any iterables; one that yields more items than ``lengths`` has
            (an endless generator, say) is a ``ValueError`` as soon as it does.

    Example:
        >>> refine_partitions([10, 9, 1, 2], [[0, 1], [2, 3]], equal_size=True)
        [[0, 2], [1, 3]]
    """
    mode = check_choice(search, "search", SEARCHES)
    keep_counts = check_equal_size(equal_size) is not False
    values = normalize_weights(lengths, "lengths").values
    # Zero effort still validates, sorts and orders the partitions, but exchanges nothing.
    effort = 0 if mode == "none" else None
    partitions = _finite_partitions(partitions, len(values))
    refined = _refine(
        np.ascontiguousarray(values), partitions, keep_counts, mode == "exact", effort
    )
    logger.debug("refined %d partitions of %d items (mode %r)", len(refined), len(values), mode)
    return refined
