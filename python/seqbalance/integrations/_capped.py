"""Balancing by a cost inside a trainer that counts its micro-batches by a token cap.

OpenRLHF's dynamic batching takes the micro-batch count from its token cap
(``get_minimum_num_micro_batch_size``: first fit under ``max_tokens_per_gpu``) and then calls
``get_seqlen_balanced_partitions(lengths, count, False)``, trusting that a split balanced by
tokens keeps every micro-batch under the cap. A split balanced by seconds does not: a few long,
attention-heavy samples weigh as much as many short ones, so the micro-batch of short ones holds
more tokens than the cap. The partitioner is not told the cap: `CappedByTokens` learns it from
OpenRLHF's count of the same lengths (``install(cost=...)`` wraps that count), and bounds every
micro-batch's tokens by the cap where OpenRLHF's own token split keeps it, by that split's
heaviest micro-batch where it does not (and where no count told the cap). Wherever OpenRLHF's
own split keeps its cap, this one does.

Under that bound it takes, of three splits into the same count, the one whose costliest
micro-batch costs least (ties: the first): the split balanced by the cost when it keeps the
bound, the cap-aware plan (`seqbalance.plan_micro_batches` with the bound as its cap, the count
as its minimum) when it gives that count, and OpenRLHF's token split, which always keeps it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import partition as _partition
from .._inputs import as_int64_array
from ..planning.micro_batches import plan_micro_batches

__all__ = ["CappedByTokens", "capped_partitions"]


def _largest(values: np.ndarray, parts: list[list[int]]) -> Any:
    """The largest sum of ``values`` over ``parts``."""
    return max(values[part].sum() for part in parts)


def capped_partitions(
    lengths: Any,
    weights: np.ndarray,
    k_partitions: Any,
    *,
    cap: int | None = None,
    refine: bool | str = False,
) -> list[list[int]]:
    """``k_partitions`` parts of the samples (OpenRLHF's answer shape: index lists), balancing
    ``weights`` with no part holding more of ``lengths`` than ``cap`` where the split balanced
    by ``lengths`` keeps it, nor more than that split's heaviest part where it does not (or
    where ``cap`` is not known: ``None``). See the module's docstring."""
    # OpenRLHF's own split (seqbalance's answers are OpenRLHF's): its errors, too, come first.
    by_tokens = _partition.get_seqlen_balanced_partitions(lengths, k_partitions, False)
    tokens = as_int64_array(lengths, "seqlen_list")
    bound = int(_largest(tokens, by_tokens))
    if cap is not None:
        bound = max(bound, cap)
    by_cost = _partition.get_seqlen_balanced_partitions(weights, k_partitions, False, refine=refine)
    candidates = []
    if _largest(tokens, by_cost) <= bound:
        candidates.append(by_cost)
    else:
        planned = plan_micro_batches(
            tokens,
            bound,
            cost=weights,
            min_num_micro_batches=len(by_tokens),
            order="none",
            refine=refine,
        )
        if len(planned) == len(by_tokens) and all(planned):
            candidates.append(planned)
    candidates.append(by_tokens)
    return min(candidates, key=lambda parts: _largest(weights, parts))


def _key(lengths: Any) -> bytes | None:
    """The lengths as bytes of int64 (what a count and the split after it share), or None."""
    try:
        return as_int64_array(lengths, "lengths").tobytes()
    except (TypeError, ValueError, OverflowError):
        return None


class CappedByTokens:
    """``get_seqlen_balanced_partitions`` for OpenRLHF: seqbalance's own while no cost is set
    (`weigh`); with one, `capped_partitions` of the cost of the lengths (``equal_size=True``:
    the cost's split, as no cap is at stake there), under the token cap `remember` was told for
    the same lengths (OpenRLHF counts a step's micro-batches under its cap, then splits that
    step's lengths), or else under the heaviest micro-batch of the token split."""

    #: How many (lengths, cap) pairs are kept: OpenRLHF counts every step of a replay buffer
    #: before it splits the first.
    KEEP = 256

    def __init__(self) -> None:
        #: Lengths -> per-sample costs (``install(cost=...)``), or None: the lengths.
        self.weigh: Callable[[Any], np.ndarray] | None = None
        self._caps: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, lengths: Any, cap: Any) -> None:
        """The token cap a micro-batch count of ``lengths`` was taken under (never raises: a
        count is OpenRLHF's own whatever it is given)."""
        key = _key(lengths)
        if key is None or isinstance(cap, bool) or not isinstance(cap, (int, np.integer)):
            return
        with self._lock:
            self._caps[key] = int(cap)
            self._caps.move_to_end(key)
            while len(self._caps) > self.KEEP:
                self._caps.popitem(last=False)

    def cap_of(self, lengths: Any) -> int | None:
        """The cap remembered for these lengths, or None."""
        key = _key(lengths)
        with self._lock:
            return None if key is None else self._caps.get(key)

    def __call__(
        self, seqlen_list: Any, k_partitions: Any, equal_size: Any, refine: bool | str = False
    ) -> list[list[int]]:
        weigh = self.weigh
        if weigh is None:
            return _partition.get_seqlen_balanced_partitions(
                seqlen_list, k_partitions, equal_size, refine=refine
            )
        weights = weigh(seqlen_list)
        if equal_size:
            return _partition.get_seqlen_balanced_partitions(
                weights, k_partitions, equal_size, refine=refine
            )
        cap = self.cap_of(seqlen_list)
        return capped_partitions(seqlen_list, weights, k_partitions, cap=cap, refine=refine)
