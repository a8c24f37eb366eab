"""Balance metrics: how uneven a split is, before and after balancing."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._deprecation import renamed_attribute, renamed_params, retired_value
from .._inputs import (
    MAX_VALUE,
    _describe,
    check_k_partitions,
    check_partition_index,
    check_per_item,
    lengths_as_list,
    normalize_lengths,
)
from ..errors import PartitionError
from .groups import uid_runs

__all__ = [
    "BalanceReport",
    "LoadStats",
    "balance_report",
    "balance_report_from_ids",
    "log_seqlen_unbalance",
]

logger = logging.getLogger(__name__)


def _index_lists(partitions: Any, n_items: int) -> list[list[int]]:
    """Check that ``partitions`` is a non-empty list of lists holding every index exactly once."""
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise TypeError(
            f"partitions must be a list of lists of indexes, got {type(partitions).__name__}"
        )
    if len(partitions) == 0:
        raise ValueError("partitions must hold at least one partition, got []")
    result = []
    for p, partition in enumerate(partitions):
        if isinstance(partition, (str, bytes)) or not isinstance(partition, (Sequence, np.ndarray)):
            raise TypeError(
                f"partitions[{p}] must be a list of indexes, got {type(partition).__name__}"
            )
        indexes = []
        for j, index in enumerate(partition):
            if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
                raise TypeError(f"partitions[{p}] holds a non-integer index {index!r}")
            indexes.append(check_partition_index(int(index), p, j, n_items))
        result.append(indexes)
    _check_exactly_once(result, n_items)
    return result


def _check_exactly_once(parts: list[list[int]], n_items: int) -> None:
    """``ValueError`` naming the first index that appears twice, or that no partition holds."""
    seen = bytearray(n_items)
    for p, part in enumerate(parts):
        for index in part:
            if seen[index]:
                raise ValueError(
                    "partitions must hold every index exactly once; "
                    f"index {index} appears twice (again in partitions[{p}])"
                )
            seen[index] = 1
    missing = seen.find(0)
    if missing >= 0:
        raise ValueError(
            f"partitions must hold every index exactly once; index {missing} is in no partition"
        )


def log_seqlen_unbalance(seqlen_list: Any, partitions: Any, prefix: str) -> dict[str, int | float]:
    """verl's balance metrics, with the same keys, meaning and arithmetic.

    ``{prefix}/min``, ``/max`` and ``/minmax_diff`` describe the split *before* balancing:
    consecutive chunks of ``len(seqlen_list) // k`` items in input order (a short remainder chunk
    counts as a chunk too, as in verl). ``/balanced_min`` and ``/balanced_max`` are the smallest
    and largest sums over ``partitions``; ``/mean`` is the total length divided by ``k``, where
    ``k = len(partitions)``.

    Args:
        seqlen_list: sequence lengths (ints or a 1-D integer array).
        partitions: k lists of indexes into ``seqlen_list``.
        prefix: key prefix, e.g. ``"global_seqlen"``.

    Returns:
        A dict of six metrics (ints, and a float for ``/mean``).

    Raises:
        PartitionError: fewer items than partitions (verl divides by zero there).
        ValueError: an index appears twice, or is in no partition (the metrics of such a split
            would describe samples trained twice or never).
        ValueError: an index outside ``0..len(seqlen_list) - 1`` (the message of
            `seqbalance.refine_partitions`).
        TypeError, ValueError: bad lengths, partitions or indexes.

    Example:
        >>> log_seqlen_unbalance([1, 2, 3, 4], [[0, 3], [1, 2]], "s")["s/minmax_diff"]
        4
    """
    values = lengths_as_list(seqlen_list)
    parts = _index_lists(partitions, len(values))
    k = len(parts)
    if len(values) < k:
        raise PartitionError(
            f"number of items ({len(values)}) is smaller than the number of partitions ({k})"
        )
    chunk = len(values) // k
    chunk_sums = [sum(values[start : start + chunk]) for start in range(0, len(values), chunk)]
    balanced_sums = [sum(values[i] for i in part) for part in parts]
    total = sum(chunk_sums)
    return {
        f"{prefix}/min": min(chunk_sums),
        f"{prefix}/max": max(chunk_sums),
        f"{prefix}/minmax_diff": max(chunk_sums) - min(chunk_sums),
        f"{prefix}/balanced_min": min(balanced_sums),
        f"{prefix}/balanced_max": max(balanced_sums),
        f"{prefix}/mean": total / k,
    }


@dataclass(frozen=True)
class LoadStats:
    """Loads of one split: per-partition sums and counts, and summary figures.

    ``imbalance`` is ``max / mean`` (1.0 is perfect; an all-zero split counts as perfect),
    ``spread`` is ``max - min`` and ``cv`` the coefficient of variation (population standard
    deviation over mean, 0.0 when the mean is 0).
    """

    sums: tuple[int, ...]
    counts: tuple[int, ...]
    max: int
    min: int
    mean: float
    imbalance: float
    spread: int
    cv: float

    @classmethod
    def of(cls, sums: Sequence[int], counts: Sequence[int]) -> LoadStats:
        k = len(sums)
        total = sum(sums)
        mean = total / k
        largest, smallest = max(sums), min(sums)
        # Exact integer arithmetic for the variance: sums can exceed float precision.
        variance = sum((s * k - total) ** 2 for s in sums) / (k**3)
        return cls(
            sums=tuple(sums),
            counts=tuple(counts),
            max=largest,
            min=smallest,
            mean=mean,
            imbalance=largest / mean if total else 1.0,
            spread=largest - smallest,
            cv=math.sqrt(variance) / mean if total else 0.0,
        )


_BAR_CELLS = " ▏▎▍▌▋▊▉█"


def _bar(value: int, scale: int, width: int) -> str:
    """A bar of ``width`` cells for ``value / scale``, in eighths of a cell."""
    eighths = round(8 * width * value / scale) if scale else 0
    full, rest = divmod(eighths, 8)
    bar = "█" * full + (_BAR_CELLS[rest] if rest else "")
    return bar.ljust(width)


@dataclass(frozen=True)
class BalanceReport:
    """How balanced a split is, next to the naive contiguous split of the same values.

    ``balanced`` describes the given partitions and ``naive`` the k consecutive chunks in input
    order whose sizes differ by at most one (chunks of whole groups when groups were given). ``str(report)`` draws one line per partition with a
    bar for each load.
    """

    n_items: int
    total: int
    balanced: LoadStats
    naive: LoadStats

    @property
    def k_partitions(self) -> int:
        """Number of partitions."""
        return len(self.balanced.sums)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data (lists instead of tuples)."""
        data = asdict(self)
        for split in ("balanced", "naive"):
            for key in ("sums", "counts"):
                data[split][key] = list(data[split][key])
        return data

    def __str__(self) -> str:
        width = 24
        scale = max(self.balanced.max, self.naive.max)
        sum_width = max(len(f"{scale:,}"), len("balanced"))
        count_width = max(len(str(max(self.balanced.counts + self.naive.counts))), len("count"))
        lines = [
            f"balance report: {self.n_items:,} items, total {self.total:,}, {self.k_partitions} partitions",
            f"{'part':>4}  {'balanced':>{sum_width}} {'count':>{count_width}} {'':{width}}  "
            f"{'naive':>{sum_width}} {'count':>{count_width}}",
        ]
        for p in range(self.k_partitions):
            lines.append(
                f"{p:>4}  {self.balanced.sums[p]:>{sum_width},} "
                f"{self.balanced.counts[p]:>{count_width}} "
                f"{_bar(self.balanced.sums[p], scale, width)}  "
                f"{self.naive.sums[p]:>{sum_width},} {self.naive.counts[p]:>{count_width}} "
                f"{_bar(self.naive.sums[p], scale, width)}".rstrip()
            )
        for label, stats in (("naive   ", self.naive), ("balanced", self.balanced)):
            lines.append(
                f"{label}  max/mean {stats.imbalance:.4f}  spread {stats.spread:,}  "
                f"cv {stats.cv:.4f}"
            )
        return "\n".join(lines)


def naive_split(n_items: int, k: int) -> list[list[int]]:
    """k consecutive chunks of ``range(n_items)``, the first ``n_items % k`` one item longer."""
    bounds = naive_bounds(n_items, k)
    return [list(range(bounds[p], bounds[p + 1])) for p in range(k)]


def naive_bounds(n_items: int, k: int, group_starts: np.ndarray | None = None) -> list[int]:
    """The k + 1 item boundaries of the naive split: consecutive chunks of whole groups.

    Without ``group_starts`` every item is a group. The chunks hold group counts that differ by
    at most one, the first ``n_groups % k`` one group longer: the split a trainer makes when it
    cuts the batch in input order without cutting a prompt's group.
    """
    starts = np.arange(n_items) if group_starts is None else np.asarray(group_starts)
    base, extra = divmod(int(starts.size), k)
    group_bounds = np.cumsum([0] + [base + (1 if p < extra else 0) for p in range(k)])
    edges = np.append(starts, n_items)
    return [int(edges[g]) for g in group_bounds]


renamed_attribute(BalanceReport, "k", "k_partitions")


def _group_starts(n_items: int, group_size: Any, uid_list: Any) -> np.ndarray | None:
    """The first item of every group (``group_size`` runs or runs of equal uids), or None."""
    size = check_k_partitions(group_size, "group_size")
    if size != 1 and uid_list is not None:
        raise TypeError("pass either group_size or uid_list, not both")
    if uid_list is not None:
        check_per_item(uid_list, "uid_list", "ids")
        if len(uid_list) != n_items:
            raise ValueError(f"uid_list has {len(uid_list)} entries but weights has {n_items}")
        return np.asarray([start for start, _ in uid_runs(uid_list)], dtype=np.int64)
    if size == 1:
        return None
    if n_items % size:
        raise ValueError(f"number of weights ({n_items}) is not divisible by group_size ({size})")
    return np.arange(0, n_items, size, dtype=np.int64)


@renamed_params(values="weights")
@retired_value("group_size", None, 1)
def balance_report_from_ids(
    weights: Any,
    ids: Any,
    k_partitions: int,
    *,
    group_size: int = 1,
    uid_list: Any = None,
) -> BalanceReport:
    """`balance_report` for a split given as one partition number per item.

    What `seqbalance.partition_ids` returns: no Python object per item is made, so this is
    the report for inputs of tens of millions of items (the command line uses it).

    Args:
        weights: per-item loads, ints or a 1-D integer array.
        ids: for every item its partition, a 1-D integer array in ``range(k_partitions)``.
        k_partitions: the number of partitions, an int >= 1.
        group_size, uid_list: as for `balance_report` (the naive split keeps groups whole).

    Returns:
        The `BalanceReport` that ``balance_report`` gives for the same split.

    Raises:
        ValueError: ``ids`` of another length, or a number outside ``range(k_partitions)``;
            the errors of the length normalisation for bad weights.

    Example:
        >>> balance_report_from_ids([1, 2, 3, 4], [0, 1, 1, 0], 2).balanced.sums
        (5, 5)
    """
    k = check_k_partitions(k_partitions)
    loads = normalize_lengths(weights, "weights")
    numbers = np.asarray(ids)
    if numbers.ndim != 1 or numbers.dtype.kind not in "iu":
        raise TypeError(f"ids must be a 1-D integer array, got {_describe(ids)}")
    if numbers.size != len(loads):
        raise ValueError(f"ids has {numbers.size} entries but weights has {len(loads)}")
    if numbers.size and (int(numbers.min()) < 0 or int(numbers.max()) >= k):
        bad = int(np.flatnonzero((numbers < 0) | (numbers >= k))[0])
        raise ValueError(f"ids[{bad}] is {int(numbers[bad])}, not a partition in 0..{k - 1}")
    array = np.asarray(loads, dtype=np.int64)
    n = array.size
    group_starts = _group_starts(n, group_size, uid_list)
    if n and int(array.max()) > MAX_VALUE // n:
        # A sum could pass 2**63 - 1: the exact Python-int path (never taken by real lengths).
        order = np.argsort(numbers, kind="stable")
        cuts = np.cumsum(np.bincount(numbers, minlength=k))[:-1]
        parts = [part.tolist() for part in np.split(order, cuts)]
        return balance_report(loads, parts, group_size=group_size, uid_list=uid_list)
    # No sum can overflow now: every one is at most n * max <= 2**63 - 1.
    counts = np.bincount(numbers, minlength=k)
    sums = np.zeros(k, dtype=np.int64)
    np.add.at(sums, numbers.astype(np.intp, copy=False), array)
    prefix = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(array, out=prefix[1:])
    bounds = np.asarray(naive_bounds(n, k, group_starts), dtype=np.int64)
    sizes = np.diff(bounds)
    naive_sums = prefix[bounds[1:]] - prefix[bounds[:-1]]
    return BalanceReport(
        n_items=n,
        total=int(prefix[-1]),
        balanced=LoadStats.of(sums.tolist(), counts.tolist()),
        naive=LoadStats.of(naive_sums.tolist(), sizes.tolist()),
    )


@renamed_params(values="weights")
@retired_value("group_size", None, 1)
def balance_report(
    weights: Any, partitions: Any, *, group_size: int = 1, uid_list: Any = None
) -> BalanceReport:
    """Summarise how evenly ``partitions`` split ``weights``, against the naive contiguous split.

    The naive split is k consecutive chunks in input order whose sizes differ by at most one.
    With groups (``group_size`` consecutive items, or runs of equal ``uid_list`` entries: a
    prompt's responses), its chunks are made of whole groups, group counts differing by at most
    one, as a grouped trainer splits a batch.

    Args:
        weights: per-item loads (lengths, or workloads), ints or a 1-D integer array.
        partitions: k lists of indexes that together hold every index exactly once.
        group_size: keyword-only; the naive split keeps runs of this many items whole (1, the
            default: no groups; ``None``, its spelling before 0.3, is a deprecated alias of 1).
        uid_list: keyword-only; the naive split keeps runs of equal ids whole (any sizes).

    Returns:
        A frozen `BalanceReport` (``.balanced`` and ``.naive`` `LoadStats`).

    Raises:
        ValueError: an index appears twice or is missing, or is outside ``0..len(weights) - 1``
            (the message of `seqbalance.refine_partitions`); TypeError: malformed
            partitions; the errors of the length normalisation for bad weights.

    Example:
        >>> balance_report([1, 2, 3, 4], [[0, 3], [1, 2]]).naive.imbalance
        1.4
        >>> balance_report([1, 2, 3, 4, 5, 6], [[0, 1, 4, 5], [2, 3]], group_size=2).naive.counts
        (4, 2)
    """
    loads = lengths_as_list(weights, "weights")
    parts = _index_lists(partitions, len(loads))
    k = len(parts)
    bounds = naive_bounds(len(loads), k, _group_starts(len(loads), group_size, uid_list))
    naive = [list(range(bounds[p], bounds[p + 1])) for p in range(k)]

    def stats(split: list[list[int]]) -> LoadStats:
        return LoadStats.of(
            [sum(loads[i] for i in part) for part in split], [len(p) for p in split]
        )

    return BalanceReport(
        n_items=len(loads),
        total=sum(loads),
        balanced=stats(parts),
        naive=stats(naive),
    )
